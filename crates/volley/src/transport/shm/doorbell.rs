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
//! The futex is a shared one (no `FUTEX_PRIVATE_FLAG`): the word lives in a `memfd` mapping
//! that several processes share.

use crate::futex::{self, Scope};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use std::time::Duration;

/// The doorbell words; lives in shared memory, zero-initialized.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Doorbell {
    asleep: AtomicU32,
    bell: AtomicU32,
}

impl Doorbell {
    /// Sender side, after publishing a frame into the owner's ring: wakes the owner if it
    /// announced sleep.
    #[inline]
    pub fn ring_if_asleep(&self) {
        fence(Ordering::SeqCst);
        if self.asleep.load(Ordering::Relaxed) != 0 {
            self.ring();
        }
    }

    #[cold]
    fn ring(&self) {
        self.bell.fetch_add(1, Ordering::Release);
        futex::wake_all(&self.bell, Scope::Shared);
    }

    /// Owner side, before its last check for traffic: announces sleep and returns the bell
    /// value to sleep on.
    #[inline]
    pub fn prepare(&self) -> u32 {
        let seen = self.bell.load(Ordering::Acquire);
        self.asleep.store(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
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
        self.asleep.store(0, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn a_rung_sleeper_wakes_and_an_unrung_one_times_out() {
        let d = Arc::new(Doorbell {
            asleep: AtomicU32::new(0),
            bell: AtomicU32::new(0),
        });
        // Nobody rings: the sleep lasts about the timeout.
        let seen = d.prepare();
        let t = Instant::now();
        d.sleep(seen, Duration::from_millis(50));
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        d.awake();
        // Awake: a sender does not ring (the bell does not move).
        d.ring_if_asleep();
        assert_eq!(d.bell.load(Ordering::Relaxed), 0);
        // Rung while asleep: wakes long before the timeout.
        for _ in 0..200 {
            let seen = d.prepare();
            let ringer = {
                let d = d.clone();
                std::thread::spawn(move || d.ring_if_asleep())
            };
            let t = Instant::now();
            d.sleep(seen, Duration::from_secs(10));
            d.awake();
            ringer.join().unwrap();
            assert!(t.elapsed() < Duration::from_secs(5), "lost wake-up");
        }
    }
}
