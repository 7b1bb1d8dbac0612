//! Whether a rank is on a CPU: one cache line in its region, written only by the rank itself
//! around the system calls that give up its core (a yield in a polite wait, a sleep), never on
//! the send or receive path. A polite waiter reads the line of the rank it awaits: spinning
//! while that rank runs costs nobody a core, where spinning while it waits for a core
//! delays it (see `am::backoff`).

use std::sync::atomic::{AtomicU32, Ordering};

/// The presence line; lives in shared memory, zero-initialized (zero: running).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Presence {
    /// Threads of the rank that are giving up their core right now (a rank with a progress
    /// thread has two).
    away: AtomicU32,
}

impl Presence {
    /// Runs `f`, which gives up the core (yields or sleeps), with the rank marked away.
    #[inline]
    pub fn away_during<R>(&self, f: impl FnOnce() -> R) -> R {
        // Relaxed: a reader takes the mark as a hint for how long to spin, never to order
        // memory; a stale value costs one early yield or a bounded spin.
        self.away.fetch_add(1, Ordering::Relaxed);
        let r = f();
        self.away.fetch_sub(1, Ordering::Relaxed);
        r
    }

    /// Whether every thread of the rank is on a CPU (none is yielding or sleeping). A thread
    /// that the scheduler preempted without a yield still counts as running.
    #[inline]
    pub fn running(&self) -> bool {
        self.away.load(Ordering::Relaxed) == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn away_only_while_giving_up_the_core() {
        let p = Presence::default();
        assert!(p.running());
        let inside = p.away_during(|| p.away_during(|| p.running()));
        assert!(!inside);
        assert!(p.running());
    }
}
