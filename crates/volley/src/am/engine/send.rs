//! The send side: checks a message, routes it (this node's rings or the network) and injects
//! its frame into the destination's ring, polling while the ring is full.

use super::super::backoff::Backoff;
use super::super::frame_kind::FrameKind;
use super::super::handler::MessageClass;
use super::super::stats::bump;
use super::{Engine, SystemOp};
use crate::error::{Error, Result};
use crate::transport::shm::link::{FrameBody, Outgoing, TxPeer};
use crate::transport::shm::ring::{MAX_FRAME_SLOTS, SLOT_BYTES};
use crate::transport::shm::MEDIUM_MAX;
use crate::transport::Channel;
use crate::MAX_ARGS;

/// How the payload of a frame travels.
pub(super) enum Payload<'p> {
    None,
    Inline(&'p [u8]),
    Pooled { len: usize, idx: usize },
    Long { len: usize, offset: usize },
}

/// A frame's words after its header: the payload's length (and offset), the arguments, an
/// inline payload.
struct Body<'a> {
    extra: [u64; 2],
    nextra: usize,
    args: &'a [u64],
    inline: &'a [u8],
}

impl FrameBody for Body<'_> {
    #[inline(always)]
    fn write(self, frame: *mut u64) {
        let Body {
            extra,
            nextra,
            args,
            inline,
        } = self;
        // SAFETY: the frame's nslots slots are reserved for us and contiguous (frames never
        // wrap); the header, words and payload take at most nslots * 64 bytes (the header
        // was sized from this body), so every write stays inside the reservation.
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
    }
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
    /// [`REMOTE`](super::REMOTE)): the requester, whose rank needs no check.
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
    /// the network ([`REMOTE`](super::REMOTE)).
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
        // A local index has its rings; [`REMOTE`](super::REMOTE) (u32::MAX) has none: one compare tells the
        // route and bounds the index.
        match self.shm.peer(route as usize) {
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
        let target = self.shm.region(dest);
        // The sender writes the payload, so the sender checks it does not land on a segment.
        if let Err(reason) = self.admit_long(target, offset, payload.len()) {
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
        self.inject_to(dest, self.shm.tx(dest), ch, kind, handler, args, payload);
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
        let out = Outgoing {
            kind: kind as u8,
            handler,
            nargs: args.len(),
            nslots,
        };
        let body = Body {
            extra,
            nextra,
            args,
            inline,
        };
        let blocked = move || self.reserve_blocked(dest, ch, nslots);
        self.shm.send(dest, peer, ch, out, body, blocked);
    }

    /// The ring to `dest` has no room at the cached credit: a skip or fresh credit, or else
    /// polls (requests too only for a blocked request, so that replies always drain) until
    /// the receiver returns enough for `nslots`. Out of line, so a send's common case is two
    /// compares.
    #[cold]
    #[inline(never)]
    fn reserve_blocked(&self, dest: usize, ch: Channel, nslots: u64) -> u64 {
        if let Some(pos) = self.shm.reserve_more(dest, ch, nslots) {
            return pos;
        }
        bump(&self.stats.blocked_sends);
        let mut backoff = Backoff::new(self.polite);
        loop {
            if dest == self.me_local && self.handlers_held() {
                self.self_deadlock();
            }
            self.wait_step(ch, &mut backoff);
            // Handlers that ran meanwhile never send on this ring (a request handler can only
            // reply, on the other channel; a reply handler cannot send), but the state is
            // re-read each time, so that nothing depends on it.
            if let Some(pos) = self.shm.reserve_more(dest, ch, nslots) {
                return pos;
            }
        }
    }
}
