//! Debug-build checks of what a handler may do (seed 000 requirement 7).
//!
//! A handler must be short (the watchdog, [`crate::RuntimeBuilder::watchdog`], reports one
//! that runs too long), must not block (a runtime call that waits, made from a handler,
//! panics in every build) and should not allocate: the seed's rule is to pre-allocate storage
//! and pass an index or offset to it in the message. This module checks the last rule.
//!
//! A program opts in by wrapping its allocator:
//!
//! ```
//! #[global_allocator]
//! static ALLOC: volley::debug::HandlerAllocCheck<std::alloc::System> =
//!     volley::debug::HandlerAllocCheck(std::alloc::System);
//! ```
//!
//! In a debug build (`debug_assertions`), every handler then counts the allocations made on
//! its thread while it runs, and a handler that allocated panics when it returns, naming
//! itself and the count ("volley: request handler \"name\" allocated 2 times ..."). The panic
//! comes after the handler, outside the allocator (an allocator must not unwind), and
//! reaches the caller of the poll or wait that ran the handler, as any handler's panic does.
//! Frees are not counted, nor allocations that the runtime itself makes while a handler
//! replies, nor those a handler makes inside [`allow_alloc`]. Handlers named `volley.…` (a
//! prefix reserved for volley's own layers: one-sided operations, xfer, the global layer,
//! endpoints, tag matching) are not checked: what they allocate is the layer's, bounded by its
//! design, and so is the user code some of them run (signal programs, atomic procedures).
//!
//! In a release build the wrapper only forwards to the allocator it wraps and handlers are not
//! wrapped: the check costs nothing.

use std::alloc::{GlobalAlloc, Layout};

/// A global allocator that forwards to `A` and, in debug builds, counts the allocations made
/// while a handler runs on the allocating thread (see the module's documentation).
#[derive(Debug, Default, Clone, Copy)]
pub struct HandlerAllocCheck<A>(pub A);

// SAFETY: every method forwards to `A` with the caller's arguments unchanged, so `A`'s
// guarantees are this allocator's; the count (a thread-local `Cell` that needs no destructor
// and allocates nothing) does not unwind.
unsafe impl<A: GlobalAlloc> GlobalAlloc for HandlerAllocCheck<A> {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract for `alloc`, passed on.
        unsafe { self.0.alloc(layout) }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract for `alloc_zeroed`, passed on.
        unsafe { self.0.alloc_zeroed(layout) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        note_alloc();
        // SAFETY: the caller's contract for `realloc`, passed on.
        unsafe { self.0.realloc(ptr, layout, new_size) }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract for `dealloc`, passed on.
        unsafe { self.0.dealloc(ptr, layout) }
    }
}

/// Runs `f` with the allocation check off on this thread: for a layer whose handlers allocate
/// on purpose (a bounded queue of unexpected messages, say). A handler that runs inside `f`
/// (one nested in a reply that waits for room) is checked again. In release builds, `f()`.
#[inline(always)]
pub fn allow_alloc<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(debug_assertions)]
    {
        let _off = checked::Suspended::begin();
        f()
    }
    #[cfg(not(debug_assertions))]
    f()
}

/// Runs `f`, a handler's own code that the runtime calls back while it works for the handler
/// (the `fill` of `ReplyToken::reply_medium_with`), with the check on again. In release
/// builds, `f()`.
#[inline(always)]
pub(crate) fn checked_again<R>(f: impl FnOnce() -> R) -> R {
    #[cfg(debug_assertions)]
    {
        let _on = checked::Suspended::set(true);
        f()
    }
    #[cfg(not(debug_assertions))]
    f()
}

#[inline(always)]
fn note_alloc() {
    #[cfg(debug_assertions)]
    checked::note();
}

#[cfg(debug_assertions)]
pub(crate) use checked::{check_replies, check_requests};

/// The per-thread state of the check and the handler wrappers (debug builds only).
#[cfg(debug_assertions)]
mod checked {
    use crate::am::{ReplyFn, RequestFn};
    use std::cell::Cell;

    thread_local! {
        /// A checked handler runs on this thread (and no `allow_alloc` is open inside it).
        static WATCHING: Cell<bool> = const { Cell::new(false) };
        /// Allocations counted for the innermost checked handler of this thread.
        static COUNT: Cell<u64> = const { Cell::new(0) };
    }

    /// Counts an allocation if a checked handler runs on this thread. `try_with`: a thread
    /// that exits may allocate after its thread-locals are gone.
    #[inline]
    pub(super) fn note() {
        let _ = WATCHING.try_with(|w| {
            if w.get() {
                let _ = COUNT.try_with(|c| c.set(c.get() + 1));
            }
        });
    }

    /// The check switched off (see `allow_alloc`) or on for a while; restored on drop.
    pub(super) struct Suspended(bool);

    impl Suspended {
        pub(super) fn begin() -> Self {
            Self::set(false)
        }

        /// The check on or off until this is dropped.
        pub(super) fn set(on: bool) -> Self {
            Self(WATCHING.with(|w| w.replace(on)))
        }
    }

    impl Drop for Suspended {
        fn drop(&mut self) {
            WATCHING.with(|w| w.set(self.0));
        }
    }

    /// One checked handler running: the state of the handler it nests in, restored when it
    /// returns or unwinds.
    struct Running {
        watching: bool,
        count: u64,
    }

    impl Running {
        fn begin() -> Self {
            Self {
                watching: WATCHING.with(|w| w.replace(true)),
                count: COUNT.with(|c| c.replace(0)),
            }
        }

        /// The handler returned: how many allocations it made.
        fn end(self) -> u64 {
            COUNT.with(|c| c.get())
        }
    }

    impl Drop for Running {
        fn drop(&mut self) {
            WATCHING.with(|w| w.set(self.watching));
            COUNT.with(|c| c.set(self.count));
        }
    }

    #[cold]
    #[inline(never)]
    fn allocated(kind: &str, name: &str, n: u64) -> ! {
        panic!(
            "volley: {kind} handler \"{name}\" allocated {n} times on the heap while it ran; \
             handlers must not allocate (pre-allocate, and pass an index or offset in the \
             message; see the guide's \"What a handler may do\")"
        )
    }

    /// Whether the handler named `name` belongs to one of volley's layers (not checked).
    fn a_layers(name: &str) -> bool {
        name.starts_with("volley.")
    }

    /// The request handlers `fs` (by index, named `names`), each wrapped to be checked but
    /// for the layers' own.
    pub(crate) fn check_requests(fs: Vec<Box<RequestFn>>, names: &[String]) -> Vec<Box<RequestFn>> {
        fs.into_iter()
            .zip(names.iter().cloned())
            .map(|(f, name)| -> Box<RequestFn> {
                if a_layers(&name) {
                    return f;
                }
                Box::new(move |m, token| {
                    let running = Running::begin();
                    f(m, token);
                    let n = running.end();
                    if n > 0 {
                        allocated("request", &name, n);
                    }
                })
            })
            .collect()
    }

    /// The reply handlers `fs` (by index, named `names`), each wrapped to be checked but for
    /// the layers' own.
    pub(crate) fn check_replies(fs: Vec<Box<ReplyFn>>, names: &[String]) -> Vec<Box<ReplyFn>> {
        fs.into_iter()
            .zip(names.iter().cloned())
            .map(|(f, name)| -> Box<ReplyFn> {
                if a_layers(&name) {
                    return f;
                }
                Box::new(move |m| {
                    let running = Running::begin();
                    f(m);
                    let n = running.end();
                    if n > 0 {
                        allocated("reply", &name, n);
                    }
                })
            })
            .collect()
    }
}
