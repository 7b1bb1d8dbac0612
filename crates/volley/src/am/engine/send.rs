//! The send side: checks a message, routes it (this node's rings or the network) and injects
//! its frame into the destination's ring, polling while the ring is full.

use super::super::backoff::Backoff;
use super::super::frame_kind::FrameKind;
use super::super::handler::MessageClass;
use super::super::path_marks;
use super::super::stats::bump;
use super::{Engine, SystemOp};
use crate::error::{Error, Result};
use crate::transport::shm::doorbell::Ordering as BellOrder;
use crate::transport::shm::frame::{FrameHeader, FrameKey, PADDED};
use crate::transport::shm::ring::{
    Producer, RingRef, CREDIT_HINT_WORD, MAX_FRAME_SLOTS, MAX_HINTED_ARGS, SLOT_BYTES,
};
use crate::transport::shm::MEDIUM_MAX;
use crate::transport::Channel;
use crate::MAX_ARGS;
use std::cell::Cell;

/// A rank on this node as a destination: the rings this rank sends into, by channel, and
/// whether its doorbell must be rung after a send (it may sleep: block mode or a progress
/// thread) with how to order the ring after the frame. One entry per local index, so a send
/// finds all of it with one bounds check.
pub(super) struct TxPeer {
    pub(super) rings: [TxRing; 2],
    pub(super) bell: Option<BellOrder>,
}

/// One outgoing ring and this rank's producer state for it.
pub(super) struct TxRing {
    pub(super) ring: RingRef<'static>,
    pub(super) producer: Cell<Producer>,
}

impl TxRing {
    /// The common case of [`TxRing::reserve`], inline: `None` when the cached credit runs
    /// out or a skip is needed (the caller then calls [`TxRing::reserve`]).
    #[inline(always)]
    pub(super) fn reserve_within(&self, nslots: u64) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_within(nslots)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// A one-slot reservation padded to its quarter (see [`Producer::reserve_padded`]).
    #[inline(always)]
    pub(super) fn reserve_padded(&self) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_padded(self.ring)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// Reserves `nslots` slots (see [`Producer::reserve`]); `None` while the ring is full.
    #[inline(always)]
    pub(super) fn reserve(&self, nslots: u64, key: FrameKey) -> Option<u64> {
        let mut producer = self.producer.get();
        let reserved = producer.reserve(self.ring, nslots, key);
        self.producer.set(producer);
        reserved
    }
}

/// How the payload of a frame travels.
pub(super) enum Payload<'p> {
    None,
    Inline(&'p [u8]),
    Pooled { len: usize, idx: usize },
    Long { len: usize, offset: usize },
}

/// Writes `args` to `at`. A short's few arguments (the common case: at most a slot's worth)
/// are copied by an unrolled loop that stops after the last, a few instructions each; the
/// general loop's set-up alone cost more than that.
///
/// # Safety
/// `at` must be valid for writing `args.len()` words.
#[inline(always)]
pub(super) unsafe fn copy_args(args: &[u64], at: *mut u64) {
    const FEW: usize = 7;
    if args.len() <= FEW {
        for i in 0..FEW {
            if i == args.len() {
                break;
            }
            // SAFETY: i < args.len(), for which the caller vouches.
            unsafe { at.add(i).write(args[i]) };
        }
    } else {
        for (i, w) in args.iter().enumerate() {
            // SAFETY: as above.
            unsafe { at.add(i).write(*w) };
        }
    }
}

impl Engine {
    pub(super) fn check_dest(&self, dest: usize) -> Result<()> {
        if dest >= self.size {
            return Err(self.invalid_rank(dest));
        }
        Ok(())
    }

    #[cold]
    pub(super) fn invalid_rank(&self, dest: usize) -> Error {
        Error::InvalidRank {
            rank: dest,
            size: self.size,
        }
    }

    pub(super) fn check_handler(&self, ch: Channel, index: u16) -> Result<()> {
        let (registered, kind) = match ch {
            Channel::Request => (self.requests.len(), "request"),
            Channel::Reply => (self.replies.len(), "reply"),
        };
        if index as usize >= registered {
            return Err(Error::UnknownHandler {
                index,
                registered,
                kind,
            });
        }
        Ok(())
    }

    pub(super) fn check_args(args: &[u64]) -> Result<()> {
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        Ok(())
    }

    /// Sends a short message.
    #[inline]
    pub(crate) fn send_short(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        // One bounds check for the rank and its route.
        let Some(&route) = self.local_of.get(dest) else {
            return Err(self.invalid_rank(dest));
        };
        self.send_short_by(dest, route, ch, handler, args)
    }

    /// Sends a short reply to `dest`, reached through local index `route` (or the network:
    /// [`REMOTE`]): the requester, whose rank needs no check.
    #[inline]
    pub(crate) fn reply_short(
        &self,
        dest: usize,
        route: u32,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.send_short_by(dest, route, Channel::Reply, handler, args)
    }

    /// Sends a short message to the valid rank `dest`, reached through local index `route` or
    /// the network ([`REMOTE`]).
    #[inline(always)]
    pub(super) fn send_short_by(
        &self,
        dest: usize,
        route: u32,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // A local index has its rings; [`REMOTE`] (u32::MAX) has none: one compare tells the
        // route and bounds the index.
        match self.tx.get(route as usize) {
            Some(peer) => self.inject_to(
                route as usize,
                peer,
                ch,
                FrameKind::Short,
                handler,
                args,
                Payload::None,
            ),
            None => self.net_send(dest, ch, FrameKind::Short, handler, args, &[], 0),
        }
        self.stats.sent(ch, MessageClass::Short);
        Ok(())
    }

    /// Sends a medium message: inline in the ring when it fits in a few slots, otherwise through
    /// one of this rank's medium buffers.
    pub(crate) fn send_medium(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        if payload.len() > MEDIUM_MAX {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: MEDIUM_MAX,
            });
        }
        let Some(dest) = self.local(dest) else {
            self.net_send(dest, ch, FrameKind::MediumInline, handler, args, payload, 0);
            self.stats.sent(ch, MessageClass::Medium);
            return Ok(());
        };
        let inline_bytes = (2 + args.len()) * 8 + payload.len();
        if inline_bytes <= MAX_FRAME_SLOTS as usize * SLOT_BYTES {
            self.inject(
                dest,
                ch,
                FrameKind::MediumInline,
                handler,
                args,
                Payload::Inline(payload),
            );
        } else {
            let idx = self.claim_medium_buffer(ch);
            // SAFETY: `idx` is a buffer we just claimed, so no receiver reads it until the frame
            // naming it is published; it holds MEDIUM_MAX >= payload.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    payload.as_ptr(),
                    self.own().pool_buf(ch, idx),
                    payload.len(),
                );
            }
            let p = Payload::Pooled {
                len: payload.len(),
                idx,
            };
            self.inject(dest, ch, FrameKind::MediumPooled, handler, args, p);
        }
        self.stats.sent(ch, MessageClass::Medium);
        Ok(())
    }

    /// Sends a long message: copies `payload` into `dest`'s segment at `offset`, then a frame.
    pub(crate) fn send_long(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // Every rank's segment has the same length (checked at init).
        let segment_len = self.own().segment_len();
        if offset
            .checked_add(payload.len())
            .is_none_or(|end| end > segment_len)
        {
            return Err(Error::OutOfBounds {
                offset,
                len: payload.len(),
                segment_len,
            });
        }
        let Some(dest) = self.local(dest) else {
            if payload.len() + 256 > crate::transport::net::MAX_MESSAGE {
                return Err(Error::LongTooLarge {
                    len: payload.len(),
                    max: crate::transport::net::MAX_MESSAGE - 256,
                });
            }
            let off = offset as u64;
            self.net_send(dest, ch, FrameKind::Long, handler, args, payload, off);
            self.stats.sent(ch, MessageClass::Long);
            return Ok(());
        };
        let target = &self.regions[dest];
        // The sender writes the payload, so the sender checks it does not land on a segment.
        if let Err(reason) = target.segment_table().admit_long(offset, payload.len()) {
            let rank = self.local_ranks[dest];
            return Err(Error::Refused { rank, reason });
        }
        // SAFETY: bounds checked above; the target's segment is mapped for the life of the
        // engine. Concurrent writes to overlapping ranges are the program's race to avoid, as
        // with any remote write; they cannot touch memory outside the segment.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                target.segment_ptr().add(offset),
                payload.len(),
            );
        }
        let p = Payload::Long {
            len: payload.len(),
            offset,
        };
        self.inject(dest, ch, FrameKind::Long, handler, args, p);
        self.stats.sent(ch, MessageClass::Long);
        Ok(())
    }

    /// Sends a runtime-internal one-way message on the request channel.
    pub(crate) fn send_system(&self, dest: usize, op: SystemOp, args: &[u64]) {
        let (ch, kind, h) = (Channel::Request, FrameKind::System, op as u16);
        match self.local(dest) {
            Some(l) => self.inject(l, ch, kind, h, args, Payload::None),
            None => self.net_send(dest, ch, kind, h, args, &[], 0),
        }
        bump(&self.stats.system_sent);
    }

    pub(super) fn claim_medium_buffer(&self, ch: Channel) -> usize {
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            let start = self.pool_next[ch as usize].get();
            if let Some(idx) = self.own().pool_flags().claim(ch, start, self.pool_bufs) {
                self.pool_next[ch as usize].set(idx + 1);
                return idx;
            }
            if !blocked {
                blocked = true;
                bump(&self.stats.blocked_sends);
            }
            self.wait_step(ch, &mut backoff);
        }
    }

    /// One step of a blocked send: a blocked request polls everything, a blocked reply polls
    /// replies only.
    pub(super) fn wait_step(&self, ch: Channel, backoff: &mut Backoff) {
        if self.poll(ch == Channel::Request) == 0 {
            self.idle(backoff);
        } else {
            backoff.reset();
        }
    }

    /// Reserves ring space (polling while there is none), writes the frame and publishes it.
    #[inline(always)]
    pub(super) fn inject(
        &self,
        dest: usize,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: Payload<'_>,
    ) {
        self.inject_to(dest, &self.tx[dest], ch, kind, handler, args, payload);
    }

    /// [`Engine::inject`] with `dest`'s entry already found.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(super) fn inject_to(
        &self,
        dest: usize,
        peer: &TxPeer,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: Payload<'_>,
    ) {
        let (extra, inline): ([u64; 2], &[u8]) = match payload {
            Payload::None => ([0, 0], &[]),
            Payload::Inline(p) => ([p.len() as u64, 0], p),
            Payload::Pooled { len, idx } => ([len as u64 | (idx as u64) << 32, 0], &[]),
            Payload::Long { len, offset } => ([len as u64, offset as u64], &[]),
        };
        let nextra = kind.extra_words();
        let words = 1 + nextra + args.len();
        // Without a payload inline (known when this is inlined), whole words: a shift.
        let nslots = match inline.is_empty() {
            true => words.div_ceil(SLOT_BYTES / 8),
            false => (words * 8 + inline.len()).div_ceil(SLOT_BYTES),
        } as u64;
        debug_assert!(nslots <= MAX_FRAME_SLOTS);
        let tx = &peer.rings[ch as usize];
        let ring = tx.ring;
        // The first one-slot frame after a frame that came alone (a round trip's turn) is
        // padded if its receiver has caught up: see `ring`, "Padded frames".
        let padded = nslots == 1 && self.lone.get();
        let padded_at = match padded {
            true => {
                self.lone.set(false);
                tx.reserve_padded()
            }
            false => None,
        };
        let header = FrameHeader {
            handler,
            nargs: args.len() as u8,
            kind: kind as u8,
            nslots: nslots as u8,
        };
        // Writes the frame's words at `pos` (all but the header); returns its first word.
        let write = |pos: u64| {
            let frame = ring.frame_ptr(pos).cast::<u64>();
            // SAFETY: slots pos..pos+nslots are reserved for us and contiguous (frames never
            // wrap); the header, words and payload take at most nslots * 64 bytes, so every
            // write stays inside the reservation. The receiver does not read them until the
            // header is published.
            unsafe {
                if nextra > 0 {
                    frame.add(1).write(extra[0]);
                    if nextra > 1 {
                        frame.add(2).write(extra[1]);
                    }
                }
                let at = frame.add(1 + nextra);
                copy_args(args, at);
                if !inline.is_empty() {
                    std::ptr::copy_nonoverlapping(
                        inline.as_ptr(),
                        frame.cast::<u8>().add((1 + nextra + args.len()) * 8),
                        inline.len(),
                    );
                }
            }
            frame
        };
        // Two ways to publish, so that a stream's sends carry no padding flag to merge.
        match padded_at {
            Some(pos) => {
                let frame = write(pos);
                // A padded short hands back the credit of the ring its answer will come
                // through (see `ring`, "Credit hints"), so that the answer can be padded too.
                if kind == FrameKind::Short && args.len() <= MAX_HINTED_ARGS {
                    let rings = &self.rx[ch.other() as usize];
                    debug_assert!(dest < rings.len());
                    // SAFETY: `dest` is a local index (it found `peer` in `tx`), and there is
                    // a ring from every local index on each channel.
                    let consumed = unsafe { rings.get_unchecked(dest) }.consumer.get().head();
                    // SAFETY: the frame's one reserved slot holds the header and at most
                    // MAX_HINTED_ARGS arguments, so its last word is ours and unused; the
                    // receiver reads it only after acquiring the header published below.
                    unsafe { frame.add(CREDIT_HINT_WORD).write(consumed) };
                }
                ring.publish(pos, header.encode_with(pos, self.key, PADDED));
            }
            None => {
                let pos = match tx.reserve_within(nslots) {
                    Some(pos) => pos,
                    None => self.reserve_out_of_line(dest, ch, nslots),
                };
                write(pos);
                ring.publish(pos, header.encode(pos, self.key));
            }
        }
        if kind == FrameKind::Short {
            path_marks::mark(ch, path_marks::Point::Published);
        }
        if let Some(order) = peer.bell {
            self.regions[dest]
                .doorbell()
                .ring_if_asleep(order, &self.wakes[dest]);
        }
    }

    /// The rest of a reservation whose common case failed: a skip, fresh credit, or a wait for
    /// it. Out of line, so a send's common case is two compares.
    #[cold]
    #[inline(never)]
    pub(super) fn reserve_out_of_line(&self, dest: usize, ch: Channel, nslots: u64) -> u64 {
        match self.tx[dest].rings[ch as usize].reserve(nslots, self.key) {
            Some(pos) => pos,
            None => self.reserve_blocked(dest, ch, nslots),
        }
    }

    /// The ring to `dest` is full: polls (requests too only for a blocked request, so that
    /// replies always drain) until the receiver returns enough credit for `nslots`.
    #[cold]
    #[inline(never)]
    pub(super) fn reserve_blocked(&self, dest: usize, ch: Channel, nslots: u64) -> u64 {
        let tx = &self.tx[dest].rings[ch as usize];
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            if dest == self.me_local && self.handlers_held() {
                self.self_deadlock();
            }
            if !blocked {
                blocked = true;
                bump(&self.stats.blocked_sends);
            }
            self.wait_step(ch, &mut backoff);
            // Handlers that ran meanwhile never send on this ring (a request handler can only
            // reply, on the other channel; a reply handler cannot send), but the state is
            // re-read each time, so that nothing depends on it.
            if let Some(pos) = tx.reserve(nslots, self.key) {
                return pos;
            }
        }
    }

    /// Test hook: publishes a raw frame header (and words) into our own loopback ring.
    #[cfg(test)]
    pub(crate) fn inject_raw(&self, ch: Channel, header: impl FnOnce(u64) -> u64, words: &[u64]) {
        let tx = &self.tx[self.me_local].rings[ch as usize];
        let ring = tx.ring;
        let pos = tx.reserve(1, self.key).expect("room in the loopback ring");
        for (i, w) in words.iter().enumerate() {
            ring.write_word(pos, i + 1, *w);
        }
        ring.publish(pos, header(pos));
    }

    /// Test hook: where this rank's next frame into its own loopback ring of channel `ch`
    /// would start.
    #[cfg(test)]
    pub(crate) fn loopback_tail(&self, ch: Channel) -> u64 {
        self.tx[self.me_local].rings[ch as usize]
            .producer
            .get()
            .tail()
    }
}
