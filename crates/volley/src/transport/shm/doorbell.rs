//! The doorbell of a rank that sleeps instead of spinning (`VOLLEY_WAIT=block`).
//!
//! One per region, on its own cache line in the header page. The receiver announces that it
//! sleeps, checks its rings once more, and sleeps on a futex; a sender, after publishing a
//! frame, rings only if the receiver announced sleep. The two sides form a Dekker pair:
//!
//! ```text
//! sender                          receiver
//! publish frame (release)         seen = bell; asleep = 1
//! fence(SeqCst)                   fence(SeqCst)
//! if asleep { bell += 1; wake }   if a frame is ready { asleep = 0 } else { futex_wait(bell, seen) }
//! ```
//!
//! With both fences, at least one side sees the other's store: either the sender sees
//! `asleep` and rings (the receiver's futex_wait then returns at once, because `bell` moved
//! since `seen`, or is woken), or the receiver sees the frame and does not sleep. No wake-up is
//! lost, and a sender whose receiver is awake pays one fence and one load of a line that
//! rarely changes: no system call.
//!
//! **The fence moves to the sleeper** when both processes registered for
//! `membarrier(MEMBARRIER_CMD_GLOBAL_EXPEDITED)` ([`register_membarrier`]). A full fence right
//! after publishing stalls the sender until the frame's line has left for the receiver's core,
//! a cache-line round trip on every send. Instead the sleeper, after storing `asleep`, calls
//! `membarrier`, which runs a full barrier on every CPU that runs a thread of a registered
//! process; the sender needs only a compiler barrier ([`Ordering::Fenced`] vs
//! [`Ordering::Barrier`] in [`Doorbell::ring_if_asleep`]). The argument is the same Dekker
//! one, with the sender's fence executed on its behalf: if the sender's frame store was still
//! in its store buffer when the barrier ran, the barrier made it visible before the sleeper's
//! check; otherwise the sender's load of `asleep` comes after the barrier and sees 1. Sleeping
//! gets a few microseconds dearer, sending gets a fence cheaper.
//!
//! The futex is a shared one (no `FUTEX_PRIVATE_FLAG`): the word lives in a `memfd` mapping
//! that several processes share.

use crate::futex::{self, Scope};
use std::sync::atomic::{compiler_fence, fence, AtomicU32, Ordering as Mem};
use std::time::Duration;

/// How a sender orders its published frame before it reads `asleep`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ordering {
    /// A full fence (the receiver or this process could not register for `membarrier`).
    Fenced,
    /// A compiler barrier: the receiver's `membarrier` fences for us (both registered).
    Barrier,
}

/// Registers this process so that sleepers' `membarrier` calls fence its threads, once per
/// process; false where the kernel (or a seccomp filter) does not offer it. A process that
/// registered may send with [`Ordering::Barrier`] to receivers that registered too, and must
/// then sleep with `membarrier` itself ([`Doorbell::prepare`]).
pub fn register_membarrier() -> bool {
    crate::membarrier::register_global()
}

/// The doorbell words; lives in shared memory, zero-initialized.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Doorbell {
    asleep: AtomicU32,
    bell: AtomicU32,
}

impl Doorbell {
    /// Sender side, after publishing a frame into the owner's ring: wakes the owner if it
    /// announced sleep. `order` must be [`Ordering::Barrier`] only if both this process and the
    /// owner's registered for `membarrier`.
    #[inline]
    pub fn ring_if_asleep(&self, order: Ordering) {
        match order {
            Ordering::Fenced => fence(Mem::SeqCst),
            Ordering::Barrier => compiler_fence(Mem::SeqCst),
        }
        if self.asleep.load(Mem::Relaxed) != 0 {
            self.ring();
        }
    }

    #[cold]
    fn ring(&self) {
        self.bell.fetch_add(1, Mem::Release);
        futex::wake_all(&self.bell, Scope::Shared);
    }

    /// Owner side, before its last check for traffic: announces sleep and returns the bell
    /// value to sleep on. `registered`: this process registered for `membarrier` (so senders
    /// may be relying on it to fence for them).
    #[inline]
    pub fn prepare(&self, registered: bool) -> u32 {
        let seen = self.bell.load(Mem::Acquire);
        self.asleep.store(1, Mem::Relaxed);
        if registered {
            // Fences every registered sender's CPU, and this thread too.
            crate::membarrier::global();
        } else {
            fence(Mem::SeqCst);
        }
        seen
    }

    /// Owner side: sleeps until rung (after `prepare` returned `seen`) or `timeout` passes.
    /// Spurious returns are possible; the caller rechecks.
    pub fn sleep(&self, seen: u32, timeout: Duration) {
        futex::wait(&self.bell, seen, Some(timeout), Scope::Shared);
    }

    /// Wakes the owner's sleeping threads whether or not they announced sleep (to stop a
    /// progress thread).
    pub fn wake_owner(&self) {
        self.ring();
    }

    /// Owner side: awake again (senders stop ringing).
    #[inline]
    pub fn awake(&self) {
        self.asleep.store(0, Mem::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;
    use std::sync::Arc;
    use std::time::Instant;

    fn bell() -> Arc<Doorbell> {
        Arc::new(Doorbell {
            asleep: AtomicU32::new(0),
            bell: AtomicU32::new(0),
        })
    }

    #[test]
    fn a_rung_sleeper_wakes_and_an_unrung_one_times_out() {
        let d = bell();
        // Nobody rings: the sleep lasts about the timeout.
        let seen = d.prepare(false);
        let t = Instant::now();
        d.sleep(seen, Duration::from_millis(50));
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        d.awake();
        // Awake: a sender does not ring (the bell does not move).
        d.ring_if_asleep(Ordering::Fenced);
        d.ring_if_asleep(Ordering::Barrier);
        assert_eq!(d.bell.load(Mem::Relaxed), 0);
        // Rung while asleep: wakes long before the timeout.
        for _ in 0..200 {
            let seen = d.prepare(false);
            let ringer = {
                let d = d.clone();
                std::thread::spawn(move || d.ring_if_asleep(Ordering::Fenced))
            };
            let t = Instant::now();
            d.sleep(seen, Duration::from_secs(10));
            d.awake();
            ringer.join().unwrap();
            assert!(t.elapsed() < Duration::from_secs(5), "lost wake-up");
        }
    }

    /// The whole handshake under races: a sender publishes numbers (the "frames") and rings; the
    /// sleeper takes each one, announcing sleep and sleeping whenever it finds nothing new. A
    /// lost wake-up shows as a sleep that lasts its whole (long) timeout.
    fn no_wake_up_is_lost(order: Ordering, rounds: u64) {
        let d = bell();
        let frame = Arc::new(AtomicU64::new(0));
        let taken = Arc::new(AtomicU64::new(0));
        let registered = order == Ordering::Barrier;
        let sender = {
            let (d, frame, taken) = (d.clone(), frame.clone(), taken.clone());
            std::thread::spawn(move || {
                for i in 1..=rounds {
                    frame.store(i, Mem::Release);
                    d.ring_if_asleep(order);
                    // The next frame only once this one was taken (a ring of one slot).
                    while taken.load(Mem::Acquire) != i {
                        std::hint::spin_loop();
                    }
                }
            })
        };
        for i in 1..=rounds {
            loop {
                if frame.load(Mem::Acquire) == i {
                    break;
                }
                let seen = d.prepare(registered);
                if frame.load(Mem::Acquire) == i {
                    d.awake();
                    break;
                }
                let t = Instant::now();
                d.sleep(seen, Duration::from_secs(10));
                d.awake();
                assert!(t.elapsed() < Duration::from_secs(5), "lost wake-up at {i}");
            }
            taken.store(i, Mem::Release);
        }
        sender.join().unwrap();
    }

    #[test]
    fn no_wake_up_is_lost_with_fences() {
        no_wake_up_is_lost(Ordering::Fenced, 20_000);
    }

    #[test]
    fn no_wake_up_is_lost_with_membarrier() {
        if !register_membarrier() {
            eprintln!("SKIPPED: membarrier(GLOBAL_EXPEDITED) is not offered here");
            return;
        }
        no_wake_up_is_lost(Ordering::Barrier, 20_000);
    }
}
