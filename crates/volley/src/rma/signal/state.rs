//! The signal structure's state word: seed 002's "running" flag and the atomic "next entry or
//! clear the flag" call, lock-free between any number of producers (senders' processes on the
//! direct path, handlers on the AM path) and the one consumer that holds the flag.
//!
//! The word holds the flag ([`RUNNING`]), whether the program took the consumer's role over
//! from the invoked handler ([`HELD`]) and, below them, the number of signals *announced*
//! (stored, then counted). The consumer keeps the number it has *taken* in a word of its own.
//! A producer stores its entry first and announces it second, so an entry may be visible
//! before it is counted, and (in a queue that many producers fill) counted before the entry at
//! the queue's head, reserved by a slower producer, is visible. The consumer therefore clears
//! the flag only when the counts are equal: then no announced entry is left and no producer
//! that stored one has yet to announce it, so a producer that announces after the clear finds
//! the flag down and invokes the handler itself. When the counts differ and the queue shows
//! nothing, a producer is inside the few instructions between its two steps, and the consumer
//! waits for it (spinning, then yielding): that is the protocol's only wait.
//!
//! `loom` checks it (`loom_tests` below): no two consumers at once, and every announced entry
//! taken exactly once, whatever the interleaving.

#![cfg_attr(loom, allow(dead_code))]

use crate::sync::{spin_hint, yield_now, AtomicU64, Ordering};

/// An invoked program is running (or, for the blocking conditions, the flag is up).
pub(crate) const RUNNING: u64 = 1 << 63;
/// The program, not an invoked handler, is the consumer now (it called `hold`).
pub(crate) const HELD: u64 = 1 << 62;
/// The announced-signal count.
pub(crate) const COUNT: u64 = HELD - 1;

/// What the consumer's [`next_or_clear`] found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Next {
    /// One more entry is the consumer's (taken from the queue, or, without a queue, the
    /// latest stored data).
    Entry,
    /// Nothing left: the flag is down (and a later signal invokes again).
    Cleared,
}

/// FIRST_ONLY_NONBLK: a producer announces a stored signal and raises the flag. Returns
/// whether the flag was down, in which case this producer must have the handler invoked.
pub(crate) fn announce_first_only(state: &AtomicU64) -> bool {
    let mut s = state.load(Ordering::Relaxed);
    loop {
        let new = (s & (RUNNING | HELD)) | RUNNING | ((s & COUNT) + 1) & COUNT;
        // AcqRel: release publishes the stored entry to whoever consumes it; acquire orders
        // this producer after the consumer's clear it observed.
        match state.compare_exchange_weak(s, new, Ordering::AcqRel, Ordering::Relaxed) {
            Ok(_) => return s & RUNNING == 0,
            Err(now) => s = now,
        }
    }
}

/// EVERY_TIME_NONBLK and POLLING: a producer counts a stored signal (the flag is not used).
pub(crate) fn announce(state: &AtomicU64) {
    // Release: publishes the stored entry to the consumer that sees the count.
    state.fetch_add(1, Ordering::Release);
}

/// The blocking conditions: raises the flag if it is down. `false`: an invoked program still
/// runs (or, FIRST_ONLY_BLK, the program has not reset the flag) and the signal is cancelled.
pub(crate) fn try_raise(state: &AtomicU64) -> bool {
    // Acquire: orders this producer's store after the previous run's end.
    state.fetch_or(RUNNING, Ordering::Acquire) & RUNNING == 0
}

/// The blocking conditions: lowers the flag (the run ended, or the program reset it).
pub(crate) fn lower(state: &AtomicU64) {
    // Release: the handler's work happens before a later producer's store.
    state.fetch_and(!(RUNNING | HELD), Ordering::Release);
}

/// The invoked handler hands the consumer's role to the program, which later calls
/// [`next_or_clear`] itself once [`is_held`] says so.
pub(crate) fn hold(state: &AtomicU64) {
    // Release: the handler's takes (the taken count) happen before the program's.
    state.fetch_or(HELD, Ordering::Release);
}

/// Whether the program holds the consumer's role.
pub(crate) fn is_held(state: &AtomicU64) -> bool {
    state.load(Ordering::Acquire) & (RUNNING | HELD) == RUNNING | HELD
}

/// Whether the flag is up.
#[cfg(any(test, loom))]
pub(crate) fn is_running(state: &AtomicU64) -> bool {
    state.load(Ordering::Acquire) & RUNNING != 0
}

/// The consumer (the holder of the flag) takes the next announced entry or, if there is none,
/// lowers the flag: seed 002's light-weight "next entry or clear" call. `pop` takes the queue's
/// oldest entry if one is visible (always `false` without a queue: then an entry is the
/// storage's latest data, and every signal announced since the last take is folded into it).
pub(crate) fn next_or_clear(
    state: &AtomicU64,
    taken: &AtomicU64,
    queued: bool,
    mut pop: impl FnMut() -> bool,
) -> Next {
    let mut waits = 0u32;
    loop {
        let t = taken.load(Ordering::Relaxed);
        if queued && pop() {
            taken.store(t + 1, Ordering::Relaxed);
            return Next::Entry;
        }
        // Acquire: pairs with the producers' release, so their entries are visible.
        let s = state.load(Ordering::Acquire);
        let a = s & COUNT;
        if !queued && a != t {
            taken.store(a, Ordering::Relaxed);
            return Next::Entry;
        }
        if a == t {
            // AcqRel: a producer that announces after this sees the flag down and invokes.
            match state.compare_exchange(s, a, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return Next::Cleared,
                Err(_) => continue,
            }
        }
        // A producer is between storing and announcing (or, queued, its entry ahead of an
        // announced one is not yet visible): it finishes within a few instructions.
        waits = waits.saturating_add(1);
        if waits < 64 {
            spin_hint();
        } else {
            yield_now();
        }
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn first_only_invokes_once_until_cleared() {
        let (s, t) = (AtomicU64::new(0), AtomicU64::new(0));
        assert!(announce_first_only(&s), "the first signal invokes");
        assert!(!announce_first_only(&s), "the second only stores");
        let mut q = 2;
        let mut pop = || {
            let got = q > 0;
            q -= got as u32;
            got
        };
        assert_eq!(next_or_clear(&s, &t, true, &mut pop), Next::Entry);
        assert_eq!(next_or_clear(&s, &t, true, &mut pop), Next::Entry);
        assert_eq!(next_or_clear(&s, &t, true, &mut pop), Next::Cleared);
        assert!(!is_running(&s));
        assert!(
            announce_first_only(&s),
            "after the clear a signal invokes again"
        );
    }

    #[test]
    fn without_a_queue_entries_fold_into_the_latest() {
        let (s, t) = (AtomicU64::new(0), AtomicU64::new(0));
        assert!(announce_first_only(&s));
        assert!(!announce_first_only(&s));
        assert!(!announce_first_only(&s));
        assert_eq!(next_or_clear(&s, &t, false, || false), Next::Entry);
        assert_eq!(t.load(Ordering::Relaxed), 3);
        assert_eq!(next_or_clear(&s, &t, false, || false), Next::Cleared);
    }

    #[test]
    fn blocking_conditions_cancel_while_raised() {
        let s = AtomicU64::new(0);
        assert!(try_raise(&s));
        assert!(!try_raise(&s));
        lower(&s);
        assert!(try_raise(&s));
    }

    #[test]
    fn hold_hands_the_role_to_the_program() {
        let (s, t) = (AtomicU64::new(0), AtomicU64::new(0));
        assert!(!is_held(&s));
        assert!(announce_first_only(&s));
        hold(&s);
        assert!(is_held(&s));
        assert!(!announce_first_only(&s), "held: still running");
        assert_eq!(next_or_clear(&s, &t, false, || false), Next::Entry);
        assert_eq!(next_or_clear(&s, &t, false, || false), Next::Cleared);
        assert!(!is_held(&s) && !is_running(&s));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// A queue with the memory-based FIFO's property that matters here: a producer reserves
    /// a position first and publishes the entry second, so the consumer can find the head
    /// unpublished while a later entry is published and announced.
    #[derive(Default)]
    struct Queue {
        tail: AtomicU64,
        head: AtomicU64,
        seq: [AtomicU64; 2],
        val: [AtomicU64; 2],
    }

    impl Queue {
        fn push(&self, v: u64) {
            let pos = self.tail.fetch_add(1, Ordering::Relaxed);
            let i = pos as usize % 2;
            self.val[i].store(v, Ordering::Relaxed);
            self.seq[i].store(pos + 1, Ordering::Release);
        }

        fn pop(&self) -> Option<u64> {
            let h = self.head.load(Ordering::Relaxed);
            let i = h as usize % 2;
            if self.seq[i].load(Ordering::Acquire) != h + 1 {
                return None;
            }
            self.head.store(h + 1, Ordering::Relaxed);
            Some(self.val[i].load(Ordering::Relaxed))
        }
    }

    /// The structure's words and queue, and the consumer's private state: a cell that loom
    /// reports if two consumers ever touch it without the protocol ordering them.
    #[derive(Default)]
    struct Model {
        state: AtomicU64,
        taken: AtomicU64,
        queue: Queue,
        private: UnsafeCell<Vec<u64>>,
    }

    impl Model {
        /// The invoked handler: takes entries until the flag is cleared, or, if
        /// `hold_after_one`, takes one and hands the role to the program.
        fn consume(&self, hold_after_one: bool) {
            loop {
                let mut e = None;
                let next = next_or_clear(&self.state, &self.taken, true, || {
                    e = self.queue.pop();
                    e.is_some()
                });
                if next == Next::Cleared {
                    // The role ended with the clear: nothing of the consumer's is touched
                    // after it.
                    return;
                }
                // SAFETY (model): only the consumer touches it; loom checks that claim.
                self.private.with_mut(|p| unsafe { (*p).push(e.unwrap()) });
                if hold_after_one {
                    hold(&self.state);
                    return;
                }
            }
        }

        fn produce(&self, v: u64, hold_after_one: bool) {
            self.queue.push(v);
            if announce_first_only(&self.state) {
                self.consume(hold_after_one);
            }
        }

        fn got(&self) -> Vec<u64> {
            // SAFETY (model): every thread has been joined.
            let mut v = self.private.with(|p| unsafe { (*p).clone() });
            v.sort_unstable();
            v
        }
    }

    /// FIRST_ONLY_NONBLK: two producers race with the consumer's final clear; every entry is
    /// taken exactly once, no two consumers overlap (loom's check of the private cell), and
    /// the flag ends down.
    #[test]
    fn first_only_nonblk_loses_nothing_and_never_overlaps() {
        loom::model(|| {
            let m = Arc::new(Model::default());
            let m2 = m.clone();
            let p = loom::thread::spawn(move || m2.produce(2, false));
            m.produce(1, false);
            p.join().unwrap();
            assert_eq!(m.got(), vec![1, 2]);
            assert_eq!(
                m.state.load(Ordering::Relaxed),
                2,
                "flag down, two announced"
            );
        });
    }

    /// The handler holds after one entry and the program drains: the role passes without two
    /// consumers, and the entry a producer adds meanwhile is taken once.
    #[test]
    fn held_role_passes_to_the_program() {
        loom::model(|| {
            let m = Arc::new(Model::default());
            m.produce(1, true);
            let m2 = m.clone();
            let p = loom::thread::spawn(move || m2.produce(2, true));
            // The program drains while held.
            if is_held(&m.state) {
                m.consume(false);
            }
            p.join().unwrap();
            if is_held(&m.state) {
                m.consume(false);
            }
            assert_eq!(m.got(), vec![1, 2]);
            assert!(!is_running(&m.state));
        });
    }
}
