//! The slot of a small collective's message (fast lanes, the broadcast ring), and the
//! broadcast ring's protocol on its slots: atomics only, all zero when empty, so that they may
//! live in mapped shared memory; under `--cfg loom` on loom's atomics, for the models below.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Data words a fast-lane collective message carries (16 arguments less 4 header words).
pub(crate) const FAST_WORDS: usize = 12;

/// One step's message of a latency-bound collective (barrier, small all-reduce, small
/// all-to-all): written by the handler, or by the sender straight into the receiver's mapped
/// memory, then published by its sequence number.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct FastSlot {
    /// The lane's call number + 1 of the message in the slot (0: none yet).
    pub(crate) seq: AtomicU64,
    pub(crate) epoch: AtomicU64,
    pub(crate) what: AtomicU64,
    pub(crate) len: AtomicU64,
    /// The sender.
    pub(crate) src: AtomicU64,
    pub(crate) words: [AtomicU64; FAST_WORDS],
}

impl FastSlot {
    /// Writes one message: `h` = (call number, epoch, what, length, sender), then `words`;
    /// the number last, with release, so that a reader that sees it sees the rest.
    pub(crate) fn fill(&self, h: [u64; 5], words: &[u64]) {
        let [seq, epoch, what, len, src] = h;
        for (w, v) in self.words.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
        self.epoch.store(epoch, Ordering::Relaxed);
        self.what.store(what, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.src.store(src, Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Release);
    }

    /// Whether the slot holds message `seq` (written by [`FastSlot::fill`]; a reader that
    /// sees it sees the rest).
    pub(crate) fn holds(&self, seq: u64) -> bool {
        self.seq.load(Ordering::Acquire) == seq + 1
    }
}

/// One rank's count of ring broadcasts it has finished (a cache line of its own, written only
/// by that rank).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct Consumed(AtomicU64);

/// The broadcast ring: broadcast b (every rank counts its ring broadcasts alike) travels in
/// slot b mod the ring's length, written by b's root once every rank has finished the
/// broadcast that used the slot before (its consumed count is past it), read by every other
/// rank, each of which then counts b consumed. A root waits only when the ring is full.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ring<'a> {
    pub(crate) slots: &'a [FastSlot],
    pub(crate) consumed: &'a [Consumed],
}

impl<'a> Ring<'a> {
    /// The slot of broadcast `call`.
    pub(crate) fn slot(&self, call: u64) -> &'a FastSlot {
        &self.slots[call as usize % self.slots.len()]
    }

    /// Broadcasts every rank has finished (the least consumed count).
    pub(crate) fn all_consumed(&self) -> u64 {
        self.consumed
            .iter()
            .map(|c| c.0.load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// Broadcasts rank `r` has finished.
    #[cfg_attr(loom, allow(dead_code))] // Only a hint for how long to spin.
    pub(crate) fn consumed_by(&self, r: usize) -> u64 {
        self.consumed[r].0.load(Ordering::Relaxed)
    }

    /// The least consumed count at which broadcast `call` may be written (0: at once).
    pub(crate) fn room_at(&self, call: u64) -> u64 {
        (call + 1).saturating_sub(self.slots.len() as u64)
    }

    /// Rank `r` has finished broadcast `call` (read its slot, or written it as the root).
    pub(crate) fn consume(&self, r: usize, call: u64) {
        // Release: a root that sees the count may refill the slot (the read is done).
        self.consumed[r].0.store(call + 1, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    struct Memory {
        slots: Vec<FastSlot>,
        consumed: Vec<Consumed>,
    }

    impl Memory {
        fn ring(&self) -> Ring<'_> {
            Ring {
                slots: &self.slots,
                consumed: &self.consumed,
            }
        }
    }

    /// `ranks` threads make `calls` broadcasts through a ring of `depth` slots, rooted by
    /// `root(call)`; every receiver sees every value whole, none overwritten before it read.
    fn model(ranks: usize, depth: usize, calls: u64, root: fn(u64) -> usize) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.max_branches = 100_000;
        builder.check(move || {
            let mem = Arc::new(Memory {
                slots: (0..depth).map(|_| FastSlot::default()).collect(),
                consumed: (0..ranks).map(|_| Consumed::default()).collect(),
            });
            let rank = move |me: usize, mem: Arc<Memory>| {
                let ring = mem.ring();
                for call in 0..calls {
                    if root(call) == me {
                        while ring.all_consumed() < ring.room_at(call) {
                            loom::thread::yield_now();
                        }
                        let v = 100 + call;
                        ring.slot(call)
                            .fill([call, call, 0, 16, me as u64], &[v, !v]);
                    } else {
                        while !ring.slot(call).holds(call) {
                            loom::thread::yield_now();
                        }
                        let s = ring.slot(call);
                        let (a, b) = (
                            s.words[0].load(Ordering::Relaxed),
                            s.words[1].load(Ordering::Relaxed),
                        );
                        assert_eq!((a, b), (100 + call, !(100 + call)), "broadcast {call}");
                        assert_eq!(s.epoch.load(Ordering::Relaxed), call);
                    }
                    ring.consume(me, call);
                }
            };
            crate::loom_ranks::run_ranks(ranks, mem, rank);
        });
    }

    /// One root running ahead of its receiver through a ring of one slot, then two.
    #[test]
    fn loom_bcast_ring_root_ahead() {
        model(2, 1, 3, |_| 0);
        model(2, 2, 3, |_| 0);
    }

    /// Roots that alternate, so that a slot's next writer is another rank.
    #[test]
    fn loom_bcast_ring_rotating_roots() {
        model(2, 1, 3, |c| (c % 2) as usize);
        model(2, 2, 3, |c| (c / 2 % 2) as usize);
    }
}
