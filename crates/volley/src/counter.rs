//! A counter one thread bumps and any thread may read: the statistics and traffic counts
//! that the hang reporter (`am::report`) reads while the rank's thread runs.
//!
//! Bumping is a relaxed load and store of the thread's own counter, not a read-modify-write:
//! only the engine's owner writes it (one thread at a time, handed over with acquire and
//! release by the engine lease), so no increment is lost, and the compiler emits the same
//! single `inc` to memory as for a `Cell`. A reader on another thread sees some recent value.

use std::sync::atomic::{AtomicU64, Ordering};

/// A `u64` written by the engine's owner and readable from any thread.
#[derive(Debug, Default)]
pub(crate) struct Counter(AtomicU64);

impl Counter {
    /// The value now (relaxed: a statistic, ordered with nothing).
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Sets the value; only the engine's owner writes.
    #[inline(always)]
    pub(crate) fn set(&self, v: u64) {
        self.0.store(v, Ordering::Relaxed);
    }

    /// Adds one; only the engine's owner writes.
    #[inline(always)]
    pub(crate) fn bump(&self) {
        self.set(self.get() + 1);
    }
}

/// A `u64` only the engine's owner reads and writes (a statistic read through the runtime).
#[derive(Debug, Default)]
pub(crate) struct Tally(std::cell::Cell<u64>);

impl Tally {
    /// The value now.
    #[inline(always)]
    pub(crate) fn get(&self) -> u64 {
        self.0.get()
    }

    /// Sets the value.
    #[inline(always)]
    pub(crate) fn set(&self, v: u64) {
        self.0.set(v);
    }

    /// Adds one.
    #[inline(always)]
    pub(crate) fn bump(&self) {
        self.set(self.get() + 1);
    }
}
