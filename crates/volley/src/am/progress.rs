//! The progress thread (`VOLLEY_PROGRESS=thread`): seed 003's communication processor, as a
//! thread of the rank's own process that polls every transport and runs handlers, so that a
//! rank busy computing still serves requests and one-sided operations.
//!
//! **One engine, one lock.** The engine's state is guarded by one lock, held by whichever
//! thread uses the engine: the rank thread for its sends, polls and waits (its sends stay
//! direct, no hand-off), the progress thread while it polls. Handlers run under the lock, so
//! they stay atomic with respect to each other, as in inline mode.
//!
//! **Staying out of the way.** When the rank thread is inside the runtime (it polls by itself)
//! the progress thread naps, with growing naps while that lasts, so that the two do not fight
//! over the lock and the rings' cache lines and a program that polls keeps inline speed. When
//! the rank thread is outside (computing), the progress thread polls; once it has found nothing
//! for a while it sleeps on the rank's doorbell, which senders ring only while it sleeps.
//!
//! **Blocking waits.** In `VOLLEY_WAIT=block` a rank thread whose wait has spun out releases
//! the lock and sleeps on [`ThreadSync`]'s handled counter; the progress thread serves and
//! bumps the counter (and wakes it) after running handlers, since only a handler can make the
//! wait's condition true. Both sides decide under the lock, so no wake-up is lost.
//!
//! **Critical sections** hold the progress thread's handlers back through the word in
//! `critical.rs`.

use super::engine::{Engine, Served, SharedEngine};
use crate::futex::{self, Scope};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The rank thread is outside the runtime (computing, or between calls).
const OUTSIDE: u32 = 0;
/// The rank thread is inside the runtime and polls by itself.
const INSIDE: u32 = 1;
/// The rank thread sleeps in a wait and needs the progress thread to serve.
const SLEEPING: u32 = 2;

/// Shortest and longest nap of the progress thread while the rank thread is inside.
const NAP_MIN: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_micros(800);
/// Empty polls before the progress thread sleeps on the doorbell.
const SPIN_POLLS: u32 = 256;

/// The engine lock: one flag. The progress thread only ever tries it; the rank thread waits
/// (spinning, then yielding) for at most one round of the progress thread. Nobody sleeps on it,
/// so unlocking is a plain release store and a runtime call of the rank thread costs one atomic
/// operation (a general mutex, which must look for sleepers, needs two).
#[derive(Debug, Default)]
struct EngineLock(AtomicBool);

impl EngineLock {
    #[inline]
    fn try_lock(&self) -> bool {
        !self.0.load(Ordering::Relaxed)
            && self
                .0
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
    }

    #[inline]
    fn lock(&self) {
        if !self.try_lock() {
            self.lock_contended();
        }
    }

    #[cold]
    fn lock_contended(&self) {
        crate::sync::spin_then_yield_until(|| self.try_lock());
    }

    /// # Safety
    /// The caller holds the lock.
    #[inline]
    unsafe fn unlock(&self) {
        self.0.store(false, Ordering::Release);
    }
}

/// What the rank thread and its progress thread share besides the engine.
#[derive(Debug)]
pub(crate) struct ThreadSync {
    lock: EngineLock,
    /// Where the rank thread is: [`OUTSIDE`], [`INSIDE`] or [`SLEEPING`]. A hint for the
    /// progress thread, except `SLEEPING`, which is set under the lock.
    main: AtomicU32,
    /// The rank thread sleeps on this in a blocked wait; bumped when handlers ran.
    handled: AtomicU32,
    /// Whether the rank thread sleeps on `handled` (read and written under the lock).
    main_sleeping: AtomicBool,
    /// The progress thread naps on this; bumped to cut a nap short.
    nap: AtomicU32,
    stop: AtomicBool,
}

impl Default for ThreadSync {
    fn default() -> Self {
        Self {
            lock: EngineLock::default(),
            main: AtomicU32::new(OUTSIDE),
            handled: AtomicU32::new(0),
            main_sleeping: AtomicBool::new(false),
            nap: AtomicU32::new(0),
            stop: AtomicBool::new(false),
        }
    }
}

impl ThreadSync {
    /// The rank thread enters the runtime: takes the engine lock.
    #[inline]
    pub(crate) fn enter(&self) {
        // Before the lock, so that a progress thread about to poll backs off.
        self.main.store(INSIDE, Ordering::Relaxed);
        self.lock.lock();
    }

    /// The rank thread leaves the runtime.
    ///
    /// # Safety
    /// The rank thread holds the lock (from [`ThreadSync::enter`]).
    #[inline]
    pub(crate) unsafe fn leave(&self) {
        // SAFETY: the caller holds the lock.
        unsafe { self.lock.unlock() };
        self.main.store(OUTSIDE, Ordering::Relaxed);
    }

    /// The rank thread, holding the lock, has nothing to do until a handler runs: releases
    /// the lock, sleeps until the progress thread has run handlers (or `timeout`), and takes
    /// the lock again.
    pub(crate) fn sleep_until_handled(&self, timeout: Duration) {
        self.main_sleeping.store(true, Ordering::Relaxed);
        let seen = self.handled.load(Ordering::Relaxed);
        self.main.store(SLEEPING, Ordering::Relaxed);
        self.kick();
        // SAFETY: the rank thread holds the lock while in a wait.
        unsafe { self.lock.unlock() };
        futex::wait(&self.handled, seen, Some(timeout), Scope::Private);
        self.main.store(INSIDE, Ordering::Relaxed);
        self.lock.lock();
        self.main_sleeping.store(false, Ordering::Relaxed);
    }

    /// The progress thread, holding the lock, has run handlers: wakes a rank thread that
    /// sleeps in a wait.
    fn handlers_ran(&self) {
        if self.main_sleeping.swap(false, Ordering::Relaxed) {
            self.handled.fetch_add(1, Ordering::Release);
            futex::wake_all(&self.handled, Scope::Private);
        }
    }

    /// Cuts the progress thread's nap short.
    fn kick(&self) {
        self.nap.fetch_add(1, Ordering::Release);
        futex::wake_all(&self.nap, Scope::Private);
    }

    fn nap(&self, d: Duration) {
        let seen = self.nap.load(Ordering::Acquire);
        if !self.stop.load(Ordering::Acquire) {
            futex::wait(&self.nap, seen, Some(d), Scope::Private);
        }
    }
}

/// A running progress thread; stopped and joined on drop.
#[derive(Debug)]
pub(crate) struct ProgressThread {
    engine: Arc<SharedEngine>,
    thread: Option<JoinHandle<()>>,
}

impl ProgressThread {
    /// Starts serving `engine`, which must have been built with a [`ThreadSync`].
    pub(crate) fn start(engine: Arc<SharedEngine>) -> Self {
        let e = engine.clone();
        let rank = engine.get().me;
        let thread = std::thread::Builder::new()
            .name(format!("volley-progress-{rank}"))
            .spawn(move || {
                let run = std::panic::AssertUnwindSafe(|| serve(e.get()));
                if std::panic::catch_unwind(run).is_err() {
                    // A handler panicked on this thread; as in inline mode, where the panic
                    // ends the rank, end it (the panic message is already printed).
                    std::process::exit(101);
                }
            })
            .expect("spawning the progress thread");
        Self {
            engine,
            thread: Some(thread),
        }
    }

    /// Stops the thread and waits for it.
    pub(crate) fn stop(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        let e = self.engine.get();
        let sync = e.thread_sync().expect("a progress thread has its sync");
        sync.stop.store(true, Ordering::Release);
        sync.kick();
        e.own().doorbell().wake_owner();
        let _ = thread.join();
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The progress thread's loop.
fn serve(e: &Engine) {
    let sync = e.thread_sync().expect("a progress thread has its sync");
    // Naps of tens of microseconds need a timer slack below the default 50 us.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    let mut nap = NAP_MIN;
    let mut empty = 0u32;
    while !sync.stop.load(Ordering::Acquire) {
        if sync.main.load(Ordering::Relaxed) == INSIDE {
            // The rank thread polls by itself.
            empty = 0;
            sync.nap(nap);
            nap = (nap * 2).min(NAP_MAX);
            continue;
        }
        nap = NAP_MIN;
        if !sync.lock.try_lock() {
            std::hint::spin_loop();
            continue;
        }
        let served = e.serve();
        if served == Served::Handled {
            sync.handlers_ran();
        }
        match served {
            Served::Handled => empty = 0,
            Served::Deferred => {
                // A critical section holds handlers back; its end delivers them.
                // SAFETY: taken by try_lock above.
                unsafe { sync.lock.unlock() };
                sync.nap(NAP_MIN);
                continue;
            }
            Served::Nothing if empty < SPIN_POLLS => empty += 1,
            Served::Nothing => {
                empty = 0;
                let plan = e.prepare_sleep(true);
                // SAFETY: taken by try_lock above; the sleep itself needs no engine state.
                unsafe { sync.lock.unlock() };
                if let Some(plan) = plan {
                    // After announcing sleep: a stop that rang the bell before our announcement
                    // is seen here, one after it moves the bell and ends the sleep at once.
                    if sync.stop.load(Ordering::Acquire) {
                        e.own().doorbell().awake();
                        break;
                    }
                    // A long quiet: see whether the job is still whole (unless the rank
                    // thread is in the runtime, where it checks by itself).
                    if e.sleep(plan) && sync.lock.try_lock() {
                        e.check_health();
                        // SAFETY: taken just above.
                        unsafe { sync.lock.unlock() };
                    }
                }
                continue;
            }
        }
        // SAFETY: taken by try_lock above.
        unsafe { sync.lock.unlock() };
        std::hint::spin_loop();
    }
}
