//! The ways producers reserve a slot.

use crate::slots::{Message, Slots, SPARE};
#[cfg(not(loom))]
use crate::sync::relax;
use crate::sync::{fence, AtomicU64, Ordering};
use crate::Enqueue;

/// A single-producer ring: the producer's tail is its own, so a push is a check of the slot
/// and a publish. Only one thread may push.
pub struct Ring {
    slots: Slots,
    /// Next message number; only the one producer touches it.
    tail: Padded,
}

#[repr(align(64))]
struct Padded(AtomicU64);

impl Ring {
    /// A ring of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Slots::new(capacity),
            tail: Padded(AtomicU64::new(0)),
        }
    }
}

impl Enqueue for Ring {
    fn try_push(&self, msg: &Message) -> bool {
        let t = self.tail.0.load(Ordering::Relaxed);
        if !self.slots.is_free(t) {
            return false;
        }
        self.slots.publish(t, msg);
        self.tail.0.store(t + 1, Ordering::Relaxed);
        true
    }

    fn slots(&self) -> &Slots {
        &self.slots
    }
}

/// A queue of any number of producers that claim message numbers with compare-and-swap on the
/// shared tail (seed 001's enqueue).
pub struct CasQueue {
    slots: Slots,
    tail: Padded,
}

impl CasQueue {
    /// A queue of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Slots::new(capacity),
            tail: Padded(AtomicU64::new(0)),
        }
    }
}

impl Enqueue for CasQueue {
    fn try_push(&self, msg: &Message) -> bool {
        cas_push(&self.tail.0, &self.slots, msg, false)
    }

    fn slots(&self) -> &Slots {
        &self.slots
    }
}

/// Seed 001's enqueue: claim the next message number by compare-and-swap on the shared tail
/// once its slot is free, then fill and publish the slot. With `prewrite`, each look at a
/// slot is preceded by a store to its spare word and a full fence (footnote 2's variant).
#[inline(always)]
fn cas_push(tail: &AtomicU64, slots: &Slots, msg: &Message, prewrite: bool) -> bool {
    let mut t = tail.load(Ordering::Relaxed);
    loop {
        if prewrite {
            slots.prewrite(t);
            // The store must reach the line before the load below reads it: without the
            // fence the store waits in the store buffer and the load fetches the line shared.
            fence(Ordering::SeqCst);
        }
        if slots.is_free(t) {
            match tail.compare_exchange_weak(t, t + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    // Number t is ours: its slot was free when we looked, and no other
                    // producer can claim t again.
                    slots.publish(t, msg);
                    return true;
                }
                Err(now) => t = now,
            }
        } else if slots.is_full_for(t) {
            return false;
        } else {
            // Another producer claimed t since we read the tail.
            t = tail.load(Ordering::Relaxed);
        }
    }
}

/// [`CasQueue`] with seed 001's footnote-2 optimization: before the check that the slot is
/// free, the producer writes an unused word of the slot and fences, so that the line arrives
/// once, ready for writing, instead of once to be read and again to be written. The seed saw
/// it save 40 cycles of an isolated send and lose in the full LogP figures and the
/// applications, "presumably due to cache line thrashing when a receiver polls during the
/// send operation".
///
/// The unused word is the message's last ([`SPARE`]): messages through this queue must leave
/// it 0, because the prewrite may land on a slot still holding an earlier message.
pub struct PrewriteQueue {
    slots: Slots,
    tail: Padded,
}

impl PrewriteQueue {
    /// A queue of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Slots::new(capacity),
            tail: Padded(AtomicU64::new(0)),
        }
    }
}

impl Enqueue for PrewriteQueue {
    /// # Panics
    ///
    /// When the message's spare word is not 0.
    fn try_push(&self, msg: &Message) -> bool {
        assert_eq!(
            msg[SPARE], 0,
            "the spare word of a prewrite queue's message"
        );
        cas_push(&self.tail.0, &self.slots, msg, true)
    }

    fn slots(&self) -> &Slots {
        &self.slots
    }
}

/// A queue of any number of producers that reserve, fill and publish under a ticket lock (the
/// seed's lock-based alternative).
pub struct LockQueue {
    slots: Slots,
    /// Next ticket to hand out.
    #[cfg_attr(loom, allow(dead_code))]
    next: Padded,
    /// Ticket being served.
    #[cfg_attr(loom, allow(dead_code))]
    serving: Padded,
    /// Next message number; written only under the lock.
    tail: Padded,
    #[cfg(loom)]
    model_lock: loom::sync::Mutex<()>,
}

impl LockQueue {
    /// A queue of `capacity` slots.
    pub fn new(capacity: usize) -> Self {
        Self {
            slots: Slots::new(capacity),
            next: Padded(AtomicU64::new(0)),
            serving: Padded(AtomicU64::new(0)),
            tail: Padded(AtomicU64::new(0)),
            #[cfg(loom)]
            model_lock: loom::sync::Mutex::new(()),
        }
    }
}

impl LockQueue {
    /// Runs `f` under the ticket lock.
    #[cfg(not(loom))]
    #[inline]
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let ticket = self.next.0.fetch_add(1, Ordering::Relaxed);
        let mut spins = 0;
        while self.serving.0.load(Ordering::Acquire) != ticket {
            relax(&mut spins);
        }
        let r = f();
        self.serving.0.store(ticket + 1, Ordering::Release);
        r
    }

    // Under loom the lock is loom's mutex: loom has no fair scheduler, so it would explore a
    // waiter spinning forever while the holder never runs. The models check what the lock
    // protects (the tail and the slots' publication); the ticket lock is the textbook one.
    #[cfg(loom)]
    fn locked<R>(&self, f: impl FnOnce() -> R) -> R {
        let _guard = self.model_lock.lock().unwrap();
        f()
    }
}

impl Enqueue for LockQueue {
    fn try_push(&self, msg: &Message) -> bool {
        self.locked(|| {
            let t = self.tail.0.load(Ordering::Relaxed);
            let pushed = self.slots.is_free(t);
            if pushed {
                self.slots.publish(t, msg);
                self.tail.0.store(t + 1, Ordering::Relaxed);
            }
            pushed
        })
    }

    fn slots(&self) -> &Slots {
        &self.slots
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    fn fill_and_drain(q: &dyn Enqueue) {
        let cap = q.slots().capacity() as u64;
        for lap in 0..3u64 {
            for i in 0..cap {
                assert!(
                    q.try_push(&[lap, i, 0, 0, 0, 7, 0]),
                    "push {i} of lap {lap}"
                );
            }
            assert!(
                !q.try_push(&[9, 9, 9, 9, 9, 9, 0]),
                "a push into a full queue succeeded"
            );
            for i in 0..cap {
                assert_eq!(q.slots().try_pop(), Some([lap, i, 0, 0, 0, 7, 0]));
            }
            assert_eq!(q.slots().try_pop(), None, "a message from nowhere");
        }
    }

    #[test]
    fn every_queue_holds_exactly_its_capacity_in_order() {
        fill_and_drain(&Ring::new(4));
        fill_and_drain(&CasQueue::new(4));
        fill_and_drain(&LockQueue::new(4));
        fill_and_drain(&PrewriteQueue::new(4));
        fill_and_drain(&CasQueue::new(1));
        fill_and_drain(&PrewriteQueue::new(1));
    }

    /// Several producers, one consumer, real threads: every message once, each producer's in
    /// its order.
    fn threads(q: &(dyn Enqueue + Sync), producers: u64, each: u64) {
        std::thread::scope(|s| {
            for p in 0..producers {
                s.spawn(move || {
                    for i in 0..each {
                        let mut spins = 0;
                        while !q.try_push(&[p, i, p ^ i, 0, 0, !i, 0]) {
                            relax(&mut spins);
                        }
                    }
                });
            }
            let mut next = vec![0u64; producers as usize];
            let mut got = 0;
            let mut spins = 0;
            while got < producers * each {
                match q.slots().try_pop() {
                    Some(m) => {
                        let p = m[0] as usize;
                        assert_eq!(m[1], next[p], "producer {p} out of order");
                        let i = m[1];
                        assert_eq!(m, [p as u64, i, p as u64 ^ i, 0, 0, !i, 0], "torn message");
                        next[p] += 1;
                        got += 1;
                    }
                    None => relax(&mut spins),
                }
            }
            assert_eq!(q.slots().try_pop(), None);
        });
    }

    #[test]
    fn shared_queues_deliver_every_message_once_in_producer_order() {
        threads(&CasQueue::new(8), 4, 20_000);
        threads(&LockQueue::new(8), 4, 20_000);
        threads(&PrewriteQueue::new(8), 4, 20_000);
        threads(&Ring::new(8), 1, 50_000);
    }

    #[test]
    #[should_panic(expected = "spare word")]
    fn a_prewrite_queue_refuses_a_message_that_uses_the_spare_word() {
        PrewriteQueue::new(4).try_push(&[0, 0, 0, 0, 0, 0, 1]);
    }
}
