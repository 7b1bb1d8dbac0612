//! The atomics of the queues, switched to loom's model types under `--cfg loom`.

#[cfg(loom)]
pub(crate) use loom::sync::atomic::{fence, AtomicU64, Ordering};
#[cfg(not(loom))]
pub(crate) use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Lets the thread that holds what a spinning thread waits for run: under loom, a yield is how
/// the model checker learns that a loop spins.
#[inline]
pub(crate) fn relax(spins: &mut u32) {
    #[cfg(loom)]
    {
        let _ = spins;
        loom::thread::yield_now();
    }
    #[cfg(not(loom))]
    {
        *spins += 1;
        // On an oversubscribed machine the thread waited for may not be running at all:
        // after a short spin, give it the CPU. Every wait of every queue does the same.
        if *spins % 128 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}
