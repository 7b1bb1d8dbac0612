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

    /// (sleeping word, doorbell, the published work: a count of words).
    type Words = Arc<(AtomicU32, AtomicU32, AtomicU64)>;

    /// The sleeper until it has seen `want` words: each sleep waits as the kernel does,
    /// until the doorbell differs from the value read before the look. A lost wake-up
    /// leaves it waiting for ever, which loom reports (the model never ends).
    fn sleeper(words: &Words, want: u64) {
        while words.2.load(Ordering::Acquire) < want {
            sleep_unless(
                &words.0,
                &words.1,
                3,
                || words.2.load(Ordering::Acquire) >= want,
                |bell| {
                    while words.1.load(Ordering::Acquire) == bell {
                        loom::thread::yield_now();
                    }
                },
            );
        }
    }

    fn model(rounds: u64) {
        let mut builder = loom::model::Builder::new();
        // As the queue models: the sleeper's wait yields, so bound the preemptions.
        builder.preemption_bound = Some(3);
        builder.check(move || {
            let words: Words = Arc::new((AtomicU32::new(0), AtomicU32::new(0), AtomicU64::new(0)));
            let w = words.clone();
            let waker = loom::thread::spawn(move || {
                for i in 1..=rounds {
                    w.2.store(i, Ordering::Release);
                    wake_if_asleep(&w.0, &w.1, 3, || {});
                }
            });
            for round in 1..=rounds {
                sleeper(&words, round);
            }
            waker.join().unwrap();
        });
    }

    /// One word published while the thread goes to sleep: it is never slept through.
    #[test]
    fn loom_idle_sleep_never_misses_a_wake() {
        model(1);
    }

    /// Two words, two sleeps: a ring for the first cannot end the second sleep too early
    /// and leave it asleep past the second word.
    #[test]
    fn loom_idle_second_sleep_sees_the_second_word() {
        model(2);
    }
}
