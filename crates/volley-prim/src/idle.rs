//! Sleeping on a buffer's doorbell without losing a wake-up: the protocol the communication
//! thread uses when it has nothing to do, written once over a small trait so that the loom
//! model below checks the same code.
//!
//! The sleeper announces itself in the buffer's sleeping word, reads the doorbell, and only
//! then looks for work; a waker publishes its work, then looks at the sleeping word and rings
//! (bumps the doorbell, then wakes) only if someone sleeps. A sequentially consistent fence
//! on each side, between its store and its load, makes the two looks exclusive: either the
//! sleeper sees the work, or the waker sees the sleeper; and a doorbell bumped after the
//! sleeper read it makes the kernel wait return at once, so a ring between the look and the
//! wait is not lost. A waker that finds nobody asleep pays the fence and one load.

#[cfg(loom)]
use loom::sync::atomic::{fence, AtomicU32};
use std::sync::atomic::Ordering;
#[cfg(not(loom))]
use std::sync::atomic::{fence, AtomicU32};

/// The 32-bit words of the protocol (the sleeping word and the doorbell).
pub(crate) trait Word {
    fn load(&self, o: Ordering) -> u32;
    fn store(&self, v: u32, o: Ordering);
    fn bump(&self);
    /// The fence between each side's store and its load.
    fn fence();
}

impl Word for AtomicU32 {
    fn load(&self, o: Ordering) -> u32 {
        AtomicU32::load(self, o)
    }
    fn store(&self, v: u32, o: Ordering) {
        AtomicU32::store(self, v, o)
    }
    fn bump(&self) {
        self.fetch_add(1, Ordering::Release);
    }
    fn fence() {
        fence(Ordering::SeqCst);
    }
}

/// The sleeper's side: announces `how` in `sleeping`, then calls `wait` with the doorbell
/// value read before the look unless `has_work` says there is something to do. Returns
/// whether it waited. `wait` must return once the doorbell differs from its argument.
pub(crate) fn sleep_unless<W: Word>(
    sleeping: &W,
    doorbell: &W,
    how: u32,
    has_work: impl FnOnce() -> bool,
    wait: impl FnOnce(u32),
) -> bool {
    sleeping.store(how, Ordering::Relaxed);
    let bell = doorbell.load(Ordering::Acquire);
    W::fence();
    let sleep = !has_work();
    if sleep {
        wait(bell);
    }
    sleeping.store(0, Ordering::Relaxed);
    sleep
}

/// The waker's side, after publishing its work: rings (bumps the doorbell, then calls
/// `wake`) if the sleeping word says `how`. Returns whether it rang.
pub(crate) fn wake_if_asleep<W: Word>(
    sleeping: &W,
    doorbell: &W,
    how: u32,
    wake: impl FnOnce(),
) -> bool {
    W::fence();
    if sleeping.load(Ordering::Relaxed) != how {
        return false;
    }
    doorbell.bump();
    wake();
    true
}

#[cfg(all(test, loom))]
mod loom_models {
    use super::*;
    use loom::sync::atomic::AtomicU64;
    use loom::sync::Arc;

    /// One sleeper and one waker that publishes a word: if the sleeper decided to sleep, the
    /// doorbell it would wait on has moved by the end (the kernel wait returns), and if it
    /// did not, it saw the word.
    #[test]
    fn loom_idle_sleep_never_misses_a_wake() {
        loom::model(|| {
            let words = Arc::new((AtomicU32::new(0), AtomicU32::new(0), AtomicU64::new(0)));
            let w = words.clone();
            let waker = loom::thread::spawn(move || {
                w.2.store(1, Ordering::Release);
                wake_if_asleep(&w.0, &w.1, 3, || {})
            });
            let mut waited_on = None;
            let slept = sleep_unless(
                &words.0,
                &words.1,
                3,
                || words.2.load(Ordering::Acquire) != 0,
                |bell| waited_on = Some(bell),
            );
            let rang = waker.join().unwrap();
            if slept {
                let bell = waited_on.unwrap();
                assert_ne!(words.1.load(Ordering::Acquire), bell, "a lost wake-up");
                assert!(rang);
            }
        });
    }

    /// Two rounds: a wake-up rung for an earlier sleep cannot be mistaken for the second
    /// one's (the second sleep reads the doorbell afresh).
    #[test]
    fn loom_idle_second_sleep_sees_the_second_word() {
        loom::model(|| {
            let words = Arc::new((AtomicU32::new(0), AtomicU32::new(0), AtomicU64::new(0)));
            let w = words.clone();
            let waker = loom::thread::spawn(move || {
                for i in 1..=2 {
                    w.2.store(i, Ordering::Release);
                    wake_if_asleep(&w.0, &w.1, 3, || {});
                }
            });
            for round in 1..=2u64 {
                let mut waited_on = None;
                let slept = sleep_unless(
                    &words.0,
                    &words.1,
                    3,
                    || words.2.load(Ordering::Acquire) >= round,
                    |bell| waited_on = Some(bell),
                );
                if slept {
                    // The kernel wait: returns once the doorbell moves (loom spins on it).
                    let bell = waited_on.unwrap();
                    while words.1.load(Ordering::Acquire) == bell {
                        loom::thread::yield_now();
                    }
                }
                while words.2.load(Ordering::Acquire) < round {
                    // A wake-up that came early (spurious, as futexes allow): look again.
                    let mut again = None;
                    if sleep_unless(
                        &words.0,
                        &words.1,
                        3,
                        || words.2.load(Ordering::Acquire) >= round,
                        |bell| again = Some(bell),
                    ) {
                        let bell = again.unwrap();
                        while words.1.load(Ordering::Acquire) == bell {
                            loom::thread::yield_now();
                        }
                    }
                }
            }
            waker.join().unwrap();
        });
    }
}
