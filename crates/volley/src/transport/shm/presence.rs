//! Whether a rank is on a CPU: one cache line in its region, written only by the rank itself
//! around the system calls that give up its core (a yield in a polite wait, a sleep), never on
//! the send or receive path. A polite waiter reads the line of the rank it awaits: spinning
//! while that rank runs costs nobody a core, where spinning while it waits for a core
//! delays it (see `am::backoff`). The line also says which CPU the rank gave up last: a
//! rank that yields on another CPU gets that CPU back from whoever runs there, so a waiter
//! that yields its own only hands it to another rank and back.

use std::sync::atomic::{AtomicU32, Ordering};

/// The presence line; lives in shared memory, zero-initialized (zero: running).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Presence {
    /// Threads of the rank that are giving up their core right now (a rank with a progress
    /// thread has two).
    away: AtomicU32,
    /// One more than the CPU the rank's thread was on when it last gave up its core (0: not
    /// known).
    cpu: AtomicU32,
}

/// One more than the CPU the calling thread runs on now (0 if the kernel does not say).
#[inline]
pub fn current_cpu() -> u32 {
    // SAFETY: sched_getcpu takes no arguments and touches no memory of ours (glibc reads it
    // from the thread's rseq area).
    let cpu = unsafe { libc::sched_getcpu() };
    u32::try_from(cpu).map_or(0, |c| c.wrapping_add(1))
}

impl Presence {
    /// Runs `f`, which gives up the core (yields or sleeps), with the rank marked away.
    #[inline]
    pub fn away_during<R>(&self, f: impl FnOnce() -> R) -> R {
        // Relaxed: a reader takes the mark as a hint for how long to spin, never to order
        // memory; a stale value costs one early yield or a bounded spin.
        self.cpu.store(current_cpu(), Ordering::Relaxed);
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

    /// Whether a waiter on CPU `cpu` (as [`current_cpu`] gives it) should spin for the rank
    /// rather than yield: the rank is on a CPU, or gave its core up on another CPU than the
    /// waiter's, known to both (where yielding `cpu` cannot help it).
    #[inline]
    pub fn spin_for(&self, cpu: u32) -> bool {
        self.running() || {
            let theirs = self.cpu.load(Ordering::Relaxed);
            theirs != 0 && cpu != 0 && theirs != cpu
        }
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

    #[test]
    fn a_waiter_spins_for_a_rank_away_on_another_cpu_only() {
        let p = Presence::default();
        let here = current_cpu();
        assert_ne!(here, 0, "the kernel says which CPU this thread is on");
        // Running: spin, wherever the waiter is.
        assert!(p.spin_for(here));
        // Away on this CPU (pinned here while it gives up its core): yield to it.
        p.away_during(|| {
            assert!(!p.spin_for(here), "away on the waiter's own CPU");
            assert!(
                p.spin_for(here + 1),
                "away on another CPU than the waiter's"
            );
            assert!(!p.spin_for(0), "the waiter's CPU not known");
        });
        assert!(p.spin_for(here));
    }
}
