//! Sending: reserving room in a peer's ring (padded when a round trip's turn allows, with the
//! credit hint), writing a frame's words, publishing it and ringing the receiver's doorbell;
//! the medium buffers a large medium payload travels in.

use super::super::doorbell::Ordering as BellOrder;
use super::super::frame::{
    FrameHeader, FrameKey, KIND_LONG, KIND_MEDIUM_INLINE, KIND_MEDIUM_POOLED, KIND_WORDS, PADDED,
};
use super::super::path_marks;
use super::super::ring::{Producer, RingRef, CREDIT_HINT_WORD, MAX_FRAME_SLOTS, MAX_HINTED_ARGS};
use super::messages::ShmPeer;
use super::Links;
use crate::counter::Counter;
use crate::transport::contract::{OnBlocked, SendRefused, BLOCKED_DONE};
use crate::transport::Channel;
use std::cell::Cell;
use std::ops::ControlFlow;

/// A frame to send, as its header will describe it (less its position in the ring). Kept in
/// full-width fields until the header is encoded, so that what the sender knows about them
/// (a short's slot count, say) carries through to the checks below.
#[derive(Debug, Clone, Copy)]
pub(super) struct Outgoing {
    /// One of the `KIND_` constants.
    pub(super) kind: u8,
    /// The handler index (or system operation).
    pub(super) handler: u16,
    /// Argument words after the header (and its extra words).
    pub(super) nargs: usize,
    /// Slots the frame occupies, 1 to [`MAX_FRAME_SLOTS`].
    pub(super) nslots: u64,
}

impl Outgoing {
    #[inline(always)]
    pub(super) fn header(self) -> FrameHeader {
        FrameHeader {
            handler: self.handler,
            nargs: self.nargs as u8,
            kind: self.kind,
            nslots: self.nslots as u8,
        }
    }
}

/// Which of [`TxRing::sent`] counts a frame of `kind` (known where a send is inlined).
#[inline(always)]
fn sent_class(kind: u8) -> usize {
    match kind {
        KIND_WORDS => 0,
        KIND_MEDIUM_INLINE | KIND_MEDIUM_POOLED => 1,
        KIND_LONG => 2,
        _ => 3,
    }
}

/// The words of a frame after its header, which the layer above writes into the slots
/// [`Links::send_frame`] reserved for it.
pub(super) trait FrameBody {
    /// Writes every word of the frame but the header (word 0) at `frame`, within the frame's
    /// `nslots` slots as its header says. The receiver reads nothing before the header is
    /// published.
    fn write(self, frame: *mut u64);
}

/// A rank on this node as a destination: the rings this rank sends into, by channel, and
/// whether its doorbell must be rung after a send (it may sleep: block mode or a progress
/// thread) with how to order the ring after the frame. One entry per local index, so a send
/// finds all of it with one bounds check.
pub(crate) struct TxPeer {
    pub(super) rings: [TxRing; 2],
    pub(super) bell: Option<BellOrder>,
}

/// One outgoing ring and this rank's producer state for it.
pub(super) struct TxRing {
    pub(super) ring: RingRef<'static>,
    pub(super) producer: Cell<Producer>,
    /// Frames published into this ring by class: short, medium, long, the runtime's own
    /// (the statistics' count of shorts sent through shared memory, and the hang report's).
    pub(super) sent: [Counter; 4],
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

    /// Whether [`TxRing::reserve`] of `nslots` would succeed now (see [`Producer::has_room`]).
    pub(super) fn has_room(&self, nslots: u64) -> bool {
        let mut producer = self.producer.get();
        let room = producer.has_room(self.ring, nslots);
        self.producer.set(producer);
        room
    }
}

/// A frame's words after its header: the payload's length (and offset), the arguments, an
/// inline payload.
pub(super) struct Words<'a> {
    pub(super) extra: [u64; 2],
    pub(super) nextra: usize,
    pub(super) args: &'a [u64],
    pub(super) inline: &'a [u8],
}

impl FrameBody for Words<'_> {
    #[inline(always)]
    fn write(self, frame: *mut u64) {
        let Words {
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

impl Links {
    /// Sends the frame `out` with `body` on channel `ch` to `peer`: reserves its slots, has
    /// `body` write the words after the header, publishes the header and rings the receiver's
    /// doorbell if it may sleep. While the ring has no room, calls `blocked` (see
    /// [`Transport::send`](crate::transport::contract::Transport::send)); when that gives up,
    /// nothing was reserved or written.
    #[inline(always)]
    pub(super) fn send_frame<B: OnBlocked>(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        out: Outgoing,
        body: impl FrameBody,
        blocked: B,
    ) -> Result<(), SendRefused> {
        let dest = peer.index;
        let peer = peer.tx;
        let nslots = out.nslots;
        debug_assert!((1..=MAX_FRAME_SLOTS).contains(&nslots));
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
        // Two ways to publish, so that a stream's sends carry no padding flag to merge.
        match padded_at {
            Some(pos) => {
                let frame = ring.frame_ptr(pos).cast::<u64>();
                body.write(frame);
                // A padded words frame hands back the credit of the ring its answer will come
                // through (see `ring`, "Credit hints"), so that the answer can be padded too.
                if out.kind == KIND_WORDS && out.nargs <= MAX_HINTED_ARGS {
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
                ring.publish(pos, out.header().encode_with(pos, self.key, PADDED));
            }
            None => {
                let pos = match tx.reserve_within(nslots) {
                    Some(pos) => pos,
                    None => match self.reserve_blocked(dest, ch, nslots, blocked) {
                        Some(pos) => pos,
                        None => return Err(SendRefused::WouldBlock),
                    },
                };
                body.write(ring.frame_ptr(pos).cast::<u64>());
                ring.publish(pos, out.header().encode(pos, self.key));
            }
        }
        tx.sent[sent_class(out.kind)].bump();
        if out.kind == KIND_WORDS {
            path_marks::mark(ch, path_marks::Point::Published);
        }
        if let Some(order) = peer.bell {
            self.regions[dest]
                .doorbell()
                .ring_if_asleep(order, &self.wakes[dest]);
        }
        Ok(())
    }

    /// The rest of a reservation whose common case (in [`Links::send_frame`]) failed: a skip
    /// at the end of the ring, or fresh credit read from the receiver; while there is none,
    /// `blocked` lets the receiver catch up. Out of line, so a send's common case is two
    /// compares. `None`: `blocked` gave up (a refused reservation changes nothing).
    #[cold]
    #[inline(never)]
    pub(super) fn reserve_blocked(
        &self,
        dest: usize,
        ch: Channel,
        nslots: u64,
        mut blocked: impl OnBlocked,
    ) -> Option<u64> {
        let tx = &self.tx[dest].rings[ch as usize];
        let mut attempt = 0;
        loop {
            // The state is re-read each time: nothing depends on what ran meanwhile.
            if let Some(pos) = tx.reserve(nslots, self.key) {
                if attempt > 0 {
                    let _ = blocked.blocked(BLOCKED_DONE);
                }
                return Some(pos);
            }
            if let ControlFlow::Break(()) = blocked.blocked(attempt) {
                return None;
            }
            attempt += 1;
        }
    }

    /// Claims one of this rank's medium buffers of channel `ch`, the free one of lowest index;
    /// while all are in use (their receivers still run the handlers), `blocked` lets them
    /// catch up. `None`: `blocked` gave up, and nothing was claimed. Lowest first, so that
    /// round trips use one or two buffers, which stay in this core's cache, instead of all of
    /// them in turn.
    pub(super) fn claim_medium_buffer(
        &self,
        ch: Channel,
        blocked: &mut impl OnBlocked,
    ) -> Option<usize> {
        let flags = self.regions[self.me].pool_flags();
        let mut attempt = 0;
        loop {
            if let Some(idx) = flags.claim(ch, 0, self.pool_bufs) {
                if attempt > 0 {
                    let _ = blocked.blocked(BLOCKED_DONE);
                }
                return Some(idx);
            }
            if let ControlFlow::Break(()) = blocked.blocked(attempt) {
                return None;
            }
            attempt += 1;
        }
    }

    /// Gives back medium buffer `idx` of `ch`, claimed for a send that then gave up.
    pub(super) fn unclaim_medium_buffer(&self, ch: Channel, idx: usize) {
        let flags = self.regions[self.me].pool_flags();
        flags.release(ch, idx, self.pool_bufs);
    }

    /// Whether one of this rank's medium buffers of `ch` is free (a claim would succeed:
    /// only this rank claims them).
    pub(super) fn medium_buffer_free(&self, ch: Channel) -> bool {
        self.regions[self.me]
            .pool_flags()
            .any_free(ch, self.pool_bufs)
    }
}
