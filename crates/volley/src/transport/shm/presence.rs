//! Whether a rank is on a CPU: one cache line in its region, written only by the rank itself
//! around the system calls that give up its core (a yield in a polite wait, a sleep), never on
//! the send or receive path. A polite waiter reads the line of the rank it awaits: spinning
//! while that rank runs costs nobody a core, where spinning while it waits for a core
//! delays it (see `am::backoff`). The line also tells the one CPU the rank is pinned to, if it
//! is, so that a rank can tell whether another shares its CPU.

use std::sync::atomic::{AtomicU32, Ordering};

/// The presence line; lives in shared memory, zero-initialized (zero: running).
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub struct Presence {
    /// Threads of the rank that are giving up their core right now (a rank with a progress
    /// thread has two).
    away: AtomicU32,
    /// The CPU the rank's thread was pinned to when the rank started, plus one; 0: not pinned
    /// to a single CPU, or not known. Written once, before the rank first communicates.
    pinned: AtomicU32,
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

    /// Records the CPU the calling thread (the rank's own) is pinned to, if its affinity
    /// allows a single CPU; otherwise records that it is not pinned.
    pub fn note_pinning(&self) {
        let cpu = pinned_cpu().map_or(0, |c| c + 1);
        // Relaxed: a hint, published with the rank's setup.
        self.pinned.store(cpu, Ordering::Relaxed);
    }

    /// The one CPU the rank is pinned to, if it is (see [`Presence::note_pinning`]).
    #[inline]
    pub fn pinned(&self) -> Option<u32> {
        self.pinned.load(Ordering::Relaxed).checked_sub(1)
    }

    /// Whether every thread of the rank is on a CPU (none is yielding or sleeping). A thread
    /// that the scheduler preempted without a yield still counts as running.
    #[inline]
    pub fn running(&self) -> bool {
        self.away.load(Ordering::Relaxed) == 0
    }
}

/// The one CPU the calling thread may run on, if its affinity allows only one.
pub fn pinned_cpu() -> Option<u32> {
    use nix::sched::{sched_getaffinity, CpuSet};
    let set = sched_getaffinity(nix::unistd::Pid::from_raw(0)).ok()?;
    let mut allowed = (0..CpuSet::count()).filter(|&c| set.is_set(c).unwrap_or(false));
    match (allowed.next(), allowed.next()) {
        (Some(c), None) => u32::try_from(c).ok(),
        _ => None,
    }
}

/// The CPU the calling thread runs on now, if the system tells.
#[inline]
pub fn current_cpu() -> Option<u32> {
    nix::sched::sched_getcpu().ok().map(|c| c as u32)
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
    fn the_pinned_cpu_is_known_only_for_a_thread_pinned_to_one() {
        // In a thread of its own: pinning it leaves the test runner's threads alone.
        std::thread::spawn(|| {
            use nix::sched::{sched_getaffinity, sched_setaffinity, CpuSet};
            let me = nix::unistd::Pid::from_raw(0);
            let p = Presence::default();
            assert_eq!(p.pinned(), None);
            let all = sched_getaffinity(me).unwrap();
            let first = (0..CpuSet::count())
                .find(|&c| all.is_set(c).unwrap())
                .unwrap();
            let several = (0..CpuSet::count())
                .filter(|&c| all.is_set(c).unwrap())
                .count()
                > 1;
            p.note_pinning();
            if several {
                assert_eq!(p.pinned(), None, "a thread that may use several CPUs");
            }
            let mut one = CpuSet::new();
            one.set(first).unwrap();
            sched_setaffinity(me, &one).unwrap();
            p.note_pinning();
            assert_eq!(p.pinned(), Some(first as u32));
            assert_eq!(current_cpu(), Some(first as u32));
        })
        .join()
        .unwrap();
    }
}
