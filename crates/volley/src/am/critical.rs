//! The critical-section word: which code may run handlers, and when.
//!
//! One 32-bit word holds the rank thread's section nesting depth, a `BUSY` bit that the
//! progress thread holds while it runs handlers, and a `DEFERRED` bit that says "handlers were
//! held back by a section". Because all three live in one word, every change is one atomic
//! read-modify-write and the races between the two threads are decided by the word's own
//! modification order, with no fences between separate flags:
//!
//! ```text
//! rank thread                               progress thread
//! enter: depth += 1; wait while BUSY        begin: if depth > 0 { set DEFERRED; skip }
//!   ... the section ...                            else { set BUSY; run handlers }
//! leave: depth -= 1;                        end:   clear BUSY
//!   if it reached 0 and DEFERRED was set:
//!     clear DEFERRED, deliver what waits
//! ```
//!
//! Either the progress thread's `begin` comes first in the word's order (then `enter` sees
//! `BUSY` and waits for the handlers to finish) or the rank's `enter` does (then `begin` sees
//! the depth and skips). Likewise, either `begin` marks `DEFERRED` before the outermost
//! `leave` (which then sees it and delivers), or after it (when the depth is 0 again, so
//! `begin` runs the handlers itself). No handler runs inside a section and nothing deferred is
//! forgotten.
//!
//! In inline progress mode only the rank thread touches the word, and entering and leaving are
//! a plain load and store.

#![cfg_attr(loom, allow(dead_code))]

use crate::sync::{AtomicU32, Ordering};

/// Held by the progress thread while it runs handlers.
const BUSY: u32 = 1 << 30;
/// A poll found handlers to run but a section held them back.
const DEFERRED: u32 = 1 << 31;
/// The nesting depth of the rank thread's sections.
const DEPTH: u32 = BUSY - 1;

/// One rank's critical-section state (see the module documentation).
#[derive(Debug, Default)]
pub(crate) struct CriticalState {
    word: AtomicU32,
}

impl CriticalState {
    /// Nesting depth of the rank thread's sections (0 = outside).
    #[inline(always)]
    pub(crate) fn depth(&self) -> u32 {
        self.word.load(Ordering::Relaxed) & DEPTH
    }

    /// The rank thread enters a section. `shared`: a progress thread may be running handlers,
    /// so wait until it has finished the ones it started.
    #[inline]
    pub(crate) fn enter(&self, shared: bool) {
        if !shared {
            let w = self.word.load(Ordering::Relaxed);
            assert!(
                w & DEPTH != DEPTH,
                "volley: critical sections nested too deep"
            );
            self.word.store(w + 1, Ordering::Relaxed);
            return;
        }
        // Acquire: what the handlers did is visible inside the section.
        let old = self.word.fetch_add(1, Ordering::AcqRel);
        assert!(
            old & DEPTH != DEPTH,
            "volley: critical sections nested too deep"
        );
        if old & BUSY != 0 {
            self.wait_not_busy();
        }
    }

    #[cold]
    fn wait_not_busy(&self) {
        crate::sync::spin_then_yield_until(|| self.word.load(Ordering::Acquire) & BUSY == 0);
    }

    /// The rank thread leaves a section. Returns true when this ended the outermost section
    /// and handlers were held back meanwhile (the caller then delivers what waits).
    #[inline]
    pub(crate) fn leave(&self, shared: bool) -> bool {
        if !shared {
            let w = self.word.load(Ordering::Relaxed);
            debug_assert!(w & DEPTH > 0);
            let outermost = w & DEPTH == 1;
            let deferred = outermost && w & DEFERRED != 0;
            let w = if deferred { (w - 1) & !DEFERRED } else { w - 1 };
            self.word.store(w, Ordering::Relaxed);
            return deferred;
        }
        // Release: what the section did is visible to the handlers that run after it.
        let old = self.word.fetch_sub(1, Ordering::AcqRel);
        debug_assert!(old & DEPTH > 0);
        if old & DEPTH == 1 && old & DEFERRED != 0 {
            self.word.fetch_and(!DEFERRED, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// A poll on the rank thread held handlers back (the depth is above 0).
    #[inline]
    pub(crate) fn defer(&self, shared: bool) {
        if shared {
            self.word.fetch_or(DEFERRED, Ordering::Relaxed);
        } else {
            let w = self.word.load(Ordering::Relaxed);
            self.word.store(w | DEFERRED, Ordering::Relaxed);
        }
    }

    /// The progress thread asks to run handlers: true (and `BUSY` held until
    /// [`CriticalState::end_handlers`]) outside sections; false, with `DEFERRED` recorded for
    /// the section's end, inside one.
    #[inline]
    pub(crate) fn begin_handlers(&self) -> bool {
        let mut w = self.word.load(Ordering::Relaxed);
        loop {
            let (new, run) = if w & DEPTH != 0 {
                (w | DEFERRED, false)
            } else {
                (w | BUSY, true)
            };
            // Acquire: what the last section did is visible to the handlers.
            match self
                .word
                .compare_exchange_weak(w, new, Ordering::AcqRel, Ordering::Relaxed)
            {
                Ok(_) => return run,
                Err(now) => w = now,
            }
        }
    }

    /// The progress thread has finished running handlers.
    #[inline]
    pub(crate) fn end_handlers(&self) {
        // Release: what the handlers did is visible to a section that waited for them.
        self.word.fetch_and(!BUSY, Ordering::Release);
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn inline_sections_nest_and_report_deferral_once() {
        let c = CriticalState::default();
        c.enter(false);
        c.enter(false);
        assert_eq!(c.depth(), 2);
        c.defer(false);
        assert!(!c.leave(false), "an inner leave delivers nothing");
        assert!(
            c.leave(false),
            "the outermost leave delivers what was deferred"
        );
        assert_eq!(c.depth(), 0);
        c.enter(false);
        assert!(!c.leave(false), "nothing deferred this time");
    }

    #[test]
    fn the_progress_thread_defers_inside_and_runs_outside() {
        let c = CriticalState::default();
        assert!(c.begin_handlers());
        c.end_handlers();
        c.enter(true);
        assert!(!c.begin_handlers());
        assert!(c.leave(true));
        assert!(c.begin_handlers());
        c.end_handlers();
        c.enter(true);
        assert!(!c.leave(true));
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::cell::UnsafeCell;
    use loom::sync::atomic::AtomicU32;
    use loom::sync::Arc;

    /// No handler runs inside a section (loom reports the unsynchronized access to `data` if
    /// one does), and a message that waits is delivered exactly once: by the progress thread
    /// outside the section, or by the rank thread when the section ends.
    #[test]
    fn sections_exclude_handlers_and_lose_no_deferral() {
        loom::model(|| {
            let c = Arc::new(CriticalState::default());
            // State the section and the handler both write without atomics.
            let data = Arc::new(UnsafeCell::new(0u32));
            let delivered = Arc::new(AtomicU32::new(0));
            let progress = {
                let (c, data, delivered) = (c.clone(), data.clone(), delivered.clone());
                loom::thread::spawn(move || {
                    if c.begin_handlers() {
                        // SAFETY: the model checks exactly this: loom fails the test if the
                        // section's access below can overlap this one.
                        data.with_mut(|d| unsafe { *d += 1 });
                        delivered.fetch_add(1, Ordering::Relaxed);
                        c.end_handlers();
                    }
                })
            };
            c.enter(true);
            // SAFETY: as above; inside the section no handler may touch `data`.
            data.with_mut(|d| unsafe { *d += 10 });
            if c.leave(true) {
                // SAFETY: the rank thread delivers; the progress thread skipped.
                data.with_mut(|d| unsafe { *d += 1 });
                delivered.fetch_add(1, Ordering::Relaxed);
            }
            progress.join().unwrap();
            // Handled once: by the progress thread, or deferred to the section's end. Either
            // way the section's own write and exactly one delivery happened.
            assert_eq!(delivered.load(Ordering::Relaxed), 1);
            // SAFETY: both threads are done (joined).
            assert_eq!(data.with(|d| unsafe { *d }), 11);
        });
    }
}
