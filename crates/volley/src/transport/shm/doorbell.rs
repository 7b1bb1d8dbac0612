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
//!
//! **A rank with network peers sleeps in `poll(2)`** on its socket and its eventfd
//! ([`WakeFd`]), since a futex cannot wait for a datagram. It announces that with `asleep = 2`
//! ([`SleepOn::Poll`]) instead of 1, and a sender that sees 2 writes the eventfd instead of
//! waking the futex. The protocol is otherwise the same: an eventfd written before the
//! sleeper's `poll` makes that `poll` return at once, as a moved `bell` does for `futex_wait`.

use super::wake_fd::WakeFd;
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

/// `asleep`: the owner is awake (senders do not ring).
const AWAKE: u32 = 0;
/// `asleep`: the owner sleeps on the `bell` futex.
const ON_FUTEX: u32 = 1;
/// `asleep`: the owner sleeps in `poll` on its socket and eventfd.
const IN_POLL: u32 = 2;

/// Where the owner of a doorbell sleeps, which tells its senders how to wake it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SleepOn {
    /// On the doorbell's futex ([`Doorbell::sleep`]).
    Futex,
    /// In `poll(2)` on descriptors that include its [`WakeFd`].
    Poll,
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
    /// announced sleep (through `wake`, the owner's eventfd, if it sleeps in `poll`). `order`
    /// must be [`Ordering::Barrier`] only if both this process and the owner's registered for
    /// `membarrier`.
    #[inline]
    pub fn ring_if_asleep(&self, order: Ordering, wake: &WakeFd) {
        match order {
            Ordering::Fenced => fence(Mem::SeqCst),
            Ordering::Barrier => compiler_fence(Mem::SeqCst),
        }
        let how = self.asleep.load(Mem::Relaxed);
        if how != AWAKE {
            self.ring(how, wake);
        }
    }

    /// Rings an owner that announced sleep `how`. A stale `how` (the owner woke since) costs
    /// at most one spurious wake-up later.
    #[cold]
    fn ring(&self, how: u32, wake: &WakeFd) {
        self.bell.fetch_add(1, Mem::Release);
        if how == IN_POLL {
            wake.signal();
        } else {
            futex::wake_all(&self.bell, Scope::Shared);
        }
    }

    /// Owner side, before its last check for traffic: announces sleep `on` and returns the
    /// bell value to sleep on. `registered`: this process registered for `membarrier` (so
    /// senders may be relying on it to fence for them).
    #[inline]
    pub fn prepare(&self, registered: bool, on: SleepOn) -> u32 {
        let seen = self.bell.load(Mem::Acquire);
        let how = match on {
            SleepOn::Futex => ON_FUTEX,
            SleepOn::Poll => IN_POLL,
        };
        self.asleep.store(how, Mem::Relaxed);
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

    /// Wakes the owner's sleeping threads, wherever they sleep and whether or not they
    /// announced sleep (to stop a progress thread). `wake` is the owner's eventfd.
    pub fn wake_owner(&self, wake: &WakeFd) {
        self.bell.fetch_add(1, Mem::Release);
        futex::wake_all(&self.bell, Scope::Shared);
        wake.signal();
    }

    /// Owner side: awake again (senders stop ringing).
    #[inline]
    pub fn awake(&self) {
        self.asleep.store(AWAKE, Mem::Relaxed);
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

    /// Sleeps as the owner announced `on`: on the futex, or as a rank with network peers does,
    /// beside a socket (here a quiet eventfd, which nothing writes).
    fn sleep_on(d: &Doorbell, on: SleepOn, wake: &WakeFd, seen: u32, timeout: Duration) {
        match on {
            SleepOn::Futex => d.sleep(seen, timeout),
            SleepOn::Poll => {
                let quiet = WakeFd::new().unwrap();
                wake.sleep_beside(quiet.raw(), timeout);
            }
        }
    }

    fn a_rung_sleeper_wakes_and_an_unrung_one_times_out(on: SleepOn) {
        let d = bell();
        let wake = Arc::new(WakeFd::new().unwrap());
        // Nobody rings: the sleep lasts about the timeout.
        let seen = d.prepare(false, on);
        let t = Instant::now();
        sleep_on(&d, on, &wake, seen, Duration::from_millis(50));
        assert!(
            t.elapsed() >= Duration::from_millis(40),
            "{:?}",
            t.elapsed()
        );
        d.awake();
        // Awake: a sender does not ring (the bell does not move, the eventfd stays clear).
        d.ring_if_asleep(Ordering::Fenced, &wake);
        d.ring_if_asleep(Ordering::Barrier, &wake);
        assert_eq!(d.bell.load(Mem::Relaxed), 0);
        assert!(!wake.clear());
        // Rung while asleep: wakes long before the timeout.
        for _ in 0..200 {
            let seen = d.prepare(false, on);
            let ringer = {
                let (d, wake) = (d.clone(), wake.clone());
                std::thread::spawn(move || d.ring_if_asleep(Ordering::Fenced, &wake))
            };
            let t = Instant::now();
            sleep_on(&d, on, &wake, seen, Duration::from_secs(10));
            d.awake();
            ringer.join().unwrap();
            assert!(t.elapsed() < Duration::from_secs(5), "lost wake-up");
        }
        // Asleep in poll, a ring reaches the eventfd and not the futex; on the futex, the
        // reverse.
        d.prepare(false, on);
        d.ring_if_asleep(Ordering::Fenced, &wake);
        d.awake();
        assert_eq!(wake.clear(), on == SleepOn::Poll);
    }

    #[test]
    fn a_rung_sleeper_wakes_and_an_unrung_one_times_out_on_the_futex() {
        a_rung_sleeper_wakes_and_an_unrung_one_times_out(SleepOn::Futex);
    }

    #[test]
    fn a_rung_sleeper_wakes_and_an_unrung_one_times_out_in_poll() {
        a_rung_sleeper_wakes_and_an_unrung_one_times_out(SleepOn::Poll);
    }

    #[test]
    fn waking_the_owner_reaches_both_places_it_may_sleep() {
        let d = bell();
        let wake = WakeFd::new().unwrap();
        d.wake_owner(&wake);
        assert_eq!(d.bell.load(Mem::Relaxed), 1);
        assert!(wake.clear());
    }

    /// The whole handshake under races: a sender publishes numbers (the "frames") and rings; the
    /// sleeper takes each one, announcing sleep and sleeping whenever it finds nothing new. A
    /// lost wake-up shows as a sleep that lasts its whole (long) timeout.
    fn no_wake_up_is_lost(order: Ordering, on: SleepOn, rounds: u64) {
        let d = bell();
        let wake = Arc::new(WakeFd::new().unwrap());
        let frame = Arc::new(AtomicU64::new(0));
        let taken = Arc::new(AtomicU64::new(0));
        let registered = order == Ordering::Barrier;
        let sender = {
            let (d, wake, frame, taken) = (d.clone(), wake.clone(), frame.clone(), taken.clone());
            std::thread::spawn(move || {
                for i in 1..=rounds {
                    frame.store(i, Mem::Release);
                    d.ring_if_asleep(order, &wake);
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
                let seen = d.prepare(registered, on);
                if frame.load(Mem::Acquire) == i {
                    d.awake();
                    break;
                }
                let t = Instant::now();
                sleep_on(&d, on, &wake, seen, Duration::from_secs(10));
                d.awake();
                assert!(t.elapsed() < Duration::from_secs(5), "lost wake-up at {i}");
            }
            taken.store(i, Mem::Release);
        }
        sender.join().unwrap();
    }

    #[test]
    fn no_wake_up_is_lost_with_fences() {
        no_wake_up_is_lost(Ordering::Fenced, SleepOn::Futex, 20_000);
    }

    #[test]
    fn no_wake_up_is_lost_with_fences_in_poll() {
        no_wake_up_is_lost(Ordering::Fenced, SleepOn::Poll, 20_000);
    }

    #[test]
    fn no_wake_up_is_lost_with_membarrier() {
        if !register_membarrier() {
            eprintln!("SKIPPED: membarrier(GLOBAL_EXPEDITED) is not offered here");
            return;
        }
        no_wake_up_is_lost(Ordering::Barrier, SleepOn::Futex, 20_000);
        no_wake_up_is_lost(Ordering::Barrier, SleepOn::Poll, 20_000);
    }
}
