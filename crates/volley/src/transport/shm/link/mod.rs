//! The rings between this rank and each rank of its node (itself included: the loopback path),
//! and the protocol that keeps them safe, in one place: one producer and one consumer per
//! ring, credit, skips at the end of the ring, padded frames and credit hints, retirement
//! (also when a handler unwinds), the budget of a drain, and the doorbell of a receiver that
//! may sleep.
//!
//! The layer above sees the [`Transport`](crate::transport::contract::Transport) contract.
//! Sending frames a message (a short's words in one slot, a medium's payload inline or in one
//! of this rank's medium buffers, a long's payload copied into the target's segment first),
//! reserves room for it (waiting through a callback while the ring is full) and publishes it.
//! Polling takes in the frames at the heads of one channel's rings and hands each to a
//! [`Sink`](crate::transport::contract::Sink), which runs its handler while the frame is
//! still in the ring; the frame is retired after that, whatever the handler did.
//!
//! `send.rs` reserves, writes and publishes frames; `receive.rs` polls, serves, drains and
//! retires them; `messages.rs` frames each class of message.
//!
//! Ring state is indexed by *local* index (position among the node's ranks). Everything here
//! is used by one thread at a time (the engine's owner), hence `Cell`s.

mod messages;
mod receive;
mod send;

use receive::{RxRing, NO_DEFERRED};
use send::{TxPeer, TxRing};

use super::doorbell::Ordering as BellOrder;
use super::frame::{FrameKey, KIND_LONG, KIND_MEDIUM_INLINE, KIND_MEDIUM_POOLED};
use super::ring::{Consumer, Producer, RingRef};
use super::wake_fd::WakeFd;
use super::Region;
use crate::counter::Counter;
use crate::transport::contract::LongGuard;
use crate::transport::Channel;
use std::cell::Cell;
use std::sync::Arc;

/// The rings between this rank and the ranks of its node, with this rank's producer and
/// consumer state for each.
pub(crate) struct Links {
    /// The job key as frame headers are checked with it.
    key: FrameKey,
    /// This rank's local index.
    me: usize,
    /// What this rank sends through to each rank on this node, by local index.
    tx: Vec<TxPeer>,
    /// This rank's incoming rings with their consumer state, `[channel][src local]`: the poll
    /// loop walks one channel's rings in order.
    rx: [Vec<RxRing>; 2],
    /// Regions by local index. Declared after the ring views that point into them.
    regions: Vec<Region>,
    /// Eventfds by local index, written by a ring that finds that rank asleep in `poll`. Not
    /// in `tx`, whose entries every send indexes, so that those stay small.
    wakes: Vec<WakeFd>,
    /// The last frame this rank handled came alone ([`Links::serve_short`], not a drain), and
    /// no one-slot frame has been sent since: the next one may be padded (see `ring`,
    /// "Padded frames"). A round trip's request and reply are such sends; a stream's are not.
    lone: Cell<bool>,
    /// The reply ring (by local index of its sender) whose head frame ran its handler and
    /// ended a wait, but whose consumer has not yet moved past it: the wait left first, so
    /// that the requester's next request goes out sooner, and the next look at the reply
    /// rings finishes the retirement (see [`Links::retire_deferred`]). [`NO_DEFERRED`]: none.
    deferred: Cell<u32>,
    /// Medium buffers per channel in each region.
    pool_bufs: usize,
    /// The global rank of each local index.
    ranks: Vec<usize>,
    /// What refuses a long message on a segment, if the layer above installed one.
    guard: Option<Arc<dyn LongGuard>>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("me", &self.me)
            .field("ranks", &self.regions.len())
            .finish_non_exhaustive()
    }
}

/// One ring pair's traffic as [`Links::ring_traffic`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RingTraffic {
    /// Messages sent into the ring towards the peer (the runtime's own not counted).
    pub(crate) sent: u64,
    /// Messages taken from the ring from the peer (short ones once their handler ran).
    pub(crate) received: u64,
    /// Slots per ring.
    pub(crate) slots: u64,
    /// Slots of the ring towards the peer that it has not credited back (sent and not yet
    /// consumed, or consumed within the last quarter ring): `slots` means full.
    pub(crate) out_in_use: u64,
    /// The same for the ring from the peer, as this rank has credited it.
    pub(crate) in_in_use: u64,
}

/// Words between a frame's header and its arguments, by frame kind.
#[inline(always)]
fn extra_words(kind: u8) -> usize {
    match kind {
        KIND_MEDIUM_INLINE | KIND_MEDIUM_POOLED => 1,
        KIND_LONG => 2,
        _ => 0,
    }
}

/// The word after a pooled medium frame's header: the payload's length (low 32 bits), where
/// it starts in its buffer (the next 16) and the buffer's index (the top 16).
#[inline(always)]
fn pooled_word(len: usize, at: usize, idx: usize) -> u64 {
    len as u64 | (at as u64) << 32 | (idx as u64) << 48
}

/// The length, start and buffer index that [`pooled_word`] packed (unchecked).
#[inline(always)]
fn pooled_fields(word: u64) -> (usize, usize, usize) {
    (
        (word & 0xffff_ffff) as usize,
        ((word >> 32) & 0xffff) as usize,
        (word >> 48) as usize,
    )
}

impl Links {
    /// The links of the rank at local index `me` to the ranks whose `regions` (by local
    /// index, this rank's own included) are mapped here. `ranks[l]` is the global rank of
    /// local index `l`, `bells[l]` whether and how that rank's doorbell is rung after a send,
    /// `wakes[l]` its eventfd; `key` the job key.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        key: u64,
        regions: Vec<Region>,
        ranks: &[usize],
        bells: Vec<Option<BellOrder>>,
        wakes: Vec<WakeFd>,
        guard: Option<Arc<dyn LongGuard>>,
    ) -> Self {
        let n = regions.len();
        assert!(me < n && ranks.len() == n && bells.len() == n && wakes.len() == n);
        let slots = regions[me].layout().ring_slots;
        let pool_bufs = regions[me].layout().pool_bufs;
        let view = |r: RingRef<'_>| -> RingRef<'static> {
            // SAFETY: a RingRef points into a region's mapping, whose address never changes
            // while the Region is alive (moving the Region value does not move the mapping).
            // The regions live in this value next to the views and are unmapped only when it
            // is dropped, after which no view is used.
            unsafe { std::mem::transmute::<RingRef<'_>, RingRef<'static>>(r) }
        };
        let tx = regions
            .iter()
            .zip(bells)
            .map(|(region, bell)| TxPeer {
                rings: [Channel::Request, Channel::Reply].map(|ch| TxRing {
                    ring: view(region.ring(me, ch)),
                    producer: Cell::new(Producer::new(slots)),
                    sent: Default::default(),
                }),
                bell,
            })
            .collect();
        let rx = [Channel::Request, Channel::Reply].map(|ch| {
            (0..n)
                .map(|s| {
                    let ring = view(regions[me].ring(s, ch));
                    RxRing::new(ring, Consumer::new(slots), s, ranks[s])
                })
                .collect()
        });
        Self {
            key: FrameKey::new(key),
            me,
            tx,
            rx,
            regions,
            wakes,
            lone: Cell::new(false),
            deferred: Cell::new(NO_DEFERRED),
            pool_bufs,
            ranks: ranks.to_vec(),
            guard,
        }
    }

    /// Messages sent to and received from local index `l` on `ch` (counters only: see
    /// [`Links::ring_traffic`]).
    pub(crate) fn ring_counts(&self, l: usize, ch: Channel) -> Option<(u64, u64)> {
        let tx = &self.tx.get(l)?.rings[ch as usize];
        let rx = self.rx[ch as usize].get(l)?;
        let sent = tx.sent[..3].iter().map(Counter::get).sum();
        Some((sent, rx.shorts.get() + rx.others.get()))
    }

    /// What this rank exchanged with local index `l` on `ch`, read from any thread (only
    /// counters and shared memory are touched): frames sent and received, and the slots in
    /// use in the ring towards `l` and in the one from it.
    pub(crate) fn ring_traffic(&self, l: usize, ch: Channel) -> Option<RingTraffic> {
        let tx = &self.tx.get(l)?.rings[ch as usize];
        let rx = self.rx[ch as usize].get(l)?;
        Some(RingTraffic {
            sent: tx.sent[..3].iter().map(Counter::get).sum(),
            received: rx.shorts.get() + rx.others.get(),
            slots: tx.ring.slot_count(),
            out_in_use: tx.ring.slots_in_use(),
            in_in_use: rx.ring.slots_in_use(),
        })
    }

    /// Short messages sent and short messages handled through the rings, by channel (the
    /// rings count them, not the engine, so a message pays for one count).
    pub(crate) fn short_counts(&self) -> ([u64; 2], [u64; 2]) {
        let sent = [Channel::Request, Channel::Reply].map(|ch| {
            self.tx
                .iter()
                .map(|p| p.rings[ch as usize].sent[0].get())
                .sum()
        });
        let handled = [Channel::Request, Channel::Reply]
            .map(|ch| self.rx[ch as usize].iter().map(|r| r.shorts.get()).sum());
        (sent, handled)
    }

    /// The global rank of local index `l`, if there is one.
    pub(crate) fn rank_of(&self, l: usize) -> Option<usize> {
        self.ranks.get(l).copied()
    }

    /// How many ranks the links reach (this one included).
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }

    /// The region of the rank at local index `l`.
    #[inline(always)]
    pub(crate) fn region(&self, l: usize) -> &Region {
        &self.regions[l]
    }

    /// The region of the rank at local index `l`, if there is one.
    #[inline(always)]
    pub(crate) fn get_region(&self, l: usize) -> Option<&Region> {
        self.regions.get(l)
    }

    /// This rank's eventfd, which its senders write when it sleeps in `poll`.
    pub(crate) fn own_wake(&self) -> &WakeFd {
        &self.wakes[self.me]
    }

    /// The job key frames are sealed with.
    #[cfg(test)]
    pub(crate) fn key(&self) -> FrameKey {
        self.key
    }

    /// Fuzzing hook (see [`crate::fuzzing::ring_slots`]): writes `bytes` over the slots of this
    /// rank's loopback ring of channel `ch` from its consumer's head on, as a broken peer of
    /// the job could: 64 bytes a slot, a slot's first word its header. A header word with its
    /// low bit set is sealed first (its position's sequence and the job's check byte, its other
    /// fields as given), so that frames the receiver accepts are reached too. Returns whether
    /// anything was written.
    pub(crate) fn fuzz_fill(&self, ch: Channel, bytes: &[u8]) -> bool {
        use super::frame::{FrameHeader, PADDED};
        let rx = &self.rx[ch as usize][self.me];
        let ring = rx.ring;
        let head = rx.consumer.get().head();
        let slots = bytes.len().div_ceil(64).min(ring.slot_count() as usize);
        for j in 0..slots {
            let pos = head + j as u64;
            let word = |i: usize| {
                let mut w = [0u8; 8];
                if let Some(b) = bytes.get(j * 64 + i * 8..) {
                    let n = b.len().min(8);
                    w[..n].copy_from_slice(&b[..n]);
                }
                u64::from_le_bytes(w)
            };
            let frame = ring.frame_ptr(pos).cast::<u64>();
            for i in 1..8 {
                // SAFETY: the slot at `pos` is this rank's own (its loopback ring, whose
                // producer is not in use while fuzzing); its 8 words lie within the ring.
                unsafe { frame.add(i).write(word(i)) };
            }
            let raw = word(0);
            let header = match raw & 1 {
                0 => raw,
                _ => FrameHeader {
                    handler: (raw >> 16) as u16,
                    nargs: ((raw >> 32) & 0x1f) as u8,
                    kind: ((raw >> 37) & 7) as u8,
                    nslots: (raw >> 40) as u8,
                }
                .encode_with(pos, self.key, raw & PADDED),
            };
            ring.publish(pos, header);
        }
        slots > 0
    }

    /// Test hook: publishes a raw frame header (and words) into our own loopback ring.
    #[cfg(test)]
    pub(crate) fn inject_raw(&self, ch: Channel, header: impl FnOnce(u64) -> u64, words: &[u64]) {
        let tx = &self.tx[self.me].rings[ch as usize];
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
        self.tx[self.me].rings[ch as usize].producer.get().tail()
    }
}
