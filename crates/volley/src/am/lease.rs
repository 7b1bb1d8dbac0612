//! Who uses the engine in thread mode: the rank thread or its progress thread, decided without
//! an atomic read-modify-write on the rank thread's side.
//!
//! The rank thread enters the runtime on every call, so its side must be nearly free: it
//! stores where it is (`main`), and reads whether the progress thread holds the engine
//! (`held`). The progress thread takes the engine rarely (when the rank thread is out
//! computing, after a nap or a sleep), so its side may pay a system call. It stores `held`,
//! then runs `membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED)`, a full barrier on every CPU that
//! runs a thread of this process, then reads `main`:
//!
//! ```text
//! rank thread (enter)                 progress thread (try_take)
//! main = INSIDE                       held = true
//! compiler barrier                    membarrier()
//! if held { wait until !held }        if main == INSIDE { held = false; give up }
//! ... uses the engine ...             ... uses the engine; gives it back when main == INSIDE
//! main = OUTSIDE (release)            held = false (release)
//! ```
//!
//! This is Dekker's handshake with the rank thread's fence executed on its behalf: the barrier
//! ran on the rank thread's CPU either before its store of `main` (then its following load of
//! `held` sees true) or after it (then the store is visible to the progress thread's load). So
//! the two never both proceed. Where `membarrier` is not offered both sides use full fences.
//!
//! The progress thread never sleeps or naps holding the engine, and checks `main` between
//! polls, so a rank thread that finds it held waits for at most one poll.

use crate::sync::{fence, spin_then_yield_until, AtomicBool, AtomicU32, Ordering};

/// The rank thread is outside the runtime (computing, or between calls).
pub(crate) const OUTSIDE: u32 = 0;
/// The rank thread is inside the runtime and owns the engine.
pub(crate) const INSIDE: u32 = 1;
/// The rank thread sleeps in a blocked wait and needs the progress thread to serve.
pub(crate) const SLEEPING: u32 = 2;

/// How the two sides order their store before their load.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Fences {
    /// Rank thread: compiler barrier; progress thread: `membarrier` (registered).
    Membarrier,
    /// Both: a full fence.
    Full,
}

/// The engine's ownership between a rank thread and its progress thread: see the module docs.
#[derive(Debug)]
pub(crate) struct Lease {
    /// Where the rank thread is: [`OUTSIDE`], [`INSIDE`] or [`SLEEPING`]; written by it only.
    main: AtomicU32,
    /// Whether the progress thread holds (or is taking) the engine; written by it only.
    held: AtomicBool,
    /// How many times the rank thread has entered (wrapping); written by it only, so it
    /// counts with a load and a store. The progress thread reads it to tell a program that
    /// polls (and is outside only between calls) from one that computes.
    calls: AtomicU32,
    fences: Fences,
}

impl Lease {
    /// A lease with the engine free, using `membarrier` where the kernel offers it.
    #[cfg(not(loom))]
    pub(crate) fn new() -> Self {
        let fences = if crate::membarrier::register_private() {
            Fences::Membarrier
        } else {
            Fences::Full
        };
        Self::with_fences(fences)
    }

    /// A lease with the engine free and the given fences.
    pub(crate) fn with_fences(fences: Fences) -> Self {
        Self {
            main: AtomicU32::new(OUTSIDE),
            held: AtomicBool::new(false),
            calls: AtomicU32::new(0),
            fences,
        }
    }

    /// Rank thread: enters the runtime; returns once the engine is its own.
    #[inline]
    pub(crate) fn enter(&self) {
        let calls = self.calls.load(Ordering::Relaxed);
        self.calls.store(calls.wrapping_add(1), Ordering::Relaxed);
        self.main.store(INSIDE, Ordering::Relaxed);
        match self.fences {
            // The progress thread's membarrier fences this thread when it matters.
            #[cfg(not(loom))]
            Fences::Membarrier => std::sync::atomic::compiler_fence(Ordering::SeqCst),
            #[cfg(loom)]
            Fences::Membarrier => unreachable!("the model uses full fences"),
            Fences::Full => fence(Ordering::SeqCst),
        }
        // Acquire: the progress thread's engine writes happen-before ours.
        if self.held.load(Ordering::Acquire) {
            self.wait_released();
        }
    }

    #[cold]
    #[inline(never)]
    fn wait_released(&self) {
        // The progress thread sees `INSIDE` after its current poll and gives the engine back.
        spin_then_yield_until(|| !self.held.load(Ordering::Acquire));
    }

    /// Rank thread: leaves the runtime, to `OUTSIDE` or `SLEEPING`; its engine writes
    /// happen-before the progress thread's next take.
    #[inline]
    pub(crate) fn leave(&self, to: u32) {
        debug_assert!(to != INSIDE);
        self.main.store(to, Ordering::Release);
    }

    /// Where the rank thread is (a hint: it may change at once).
    #[inline]
    pub(crate) fn main(&self) -> u32 {
        self.main.load(Ordering::Relaxed)
    }

    /// How many times the rank thread has entered the runtime (wrapping; a hint).
    #[inline]
    pub(crate) fn calls(&self) -> u32 {
        self.calls.load(Ordering::Relaxed)
    }

    /// Progress thread: takes the engine unless the rank thread is inside.
    pub(crate) fn try_take(&self) -> bool {
        if self.main() == INSIDE {
            return false;
        }
        self.held.store(true, Ordering::Relaxed);
        match self.fences {
            #[cfg(not(loom))]
            Fences::Membarrier => crate::membarrier::private(),
            #[cfg(loom)]
            Fences::Membarrier => unreachable!("the model uses full fences"),
            Fences::Full => fence(Ordering::SeqCst),
        }
        // Acquire: the rank thread's engine writes (before its release store of `main`)
        // happen-before ours.
        if self.main.load(Ordering::Acquire) == INSIDE {
            self.held.store(false, Ordering::Release);
            return false;
        }
        true
    }

    /// Progress thread, holding the engine: whether the rank thread wants it back.
    #[inline]
    pub(crate) fn wanted(&self) -> bool {
        self.main() == INSIDE
    }

    /// Progress thread: gives the engine back.
    #[inline]
    pub(crate) fn release(&self) {
        self.held.store(false, Ordering::Release);
    }
}

#[cfg(all(test, loom))]
mod model {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::Arc;

    /// The engine stand-in: a plain cell, which loom checks for unsynchronized access.
    struct Guarded {
        lease: Lease,
        engine: UnsafeCell<u32>,
    }

    // SAFETY: `engine` is accessed only by the lease holder (what the model checks).
    unsafe impl Sync for Guarded {}

    fn touch(g: &Guarded) {
        // SAFETY: called only by the lease holder; loom reports it if two ever overlap.
        g.engine.with_mut(|p| unsafe { *p += 1 });
    }

    /// Mutual exclusion, and the engine's writes pass from one owner to the next: loom
    /// explores every interleaving of two rank-thread calls and two take attempts.
    #[test]
    fn loom_lease_excludes_and_hands_over() {
        loom::model(|| {
            let g = Arc::new(Guarded {
                lease: Lease::with_fences(Fences::Full),
                engine: UnsafeCell::new(0),
            });
            let t = {
                let g = g.clone();
                loom::thread::spawn(move || {
                    let mut took = 0;
                    for _ in 0..2 {
                        if g.lease.try_take() {
                            touch(&g);
                            took += 1;
                            g.lease.release();
                        }
                    }
                    took
                })
            };
            for _ in 0..2 {
                g.lease.enter();
                touch(&g);
                g.lease.leave(OUTSIDE);
            }
            let took = t.join().unwrap();
            g.lease.enter();
            // SAFETY: the rank thread holds the engine and the other thread has ended.
            let n = g.engine.with(|p| unsafe { *p });
            assert_eq!(n, 2 + took);
        });
    }
}
