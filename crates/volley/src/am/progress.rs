//! The progress thread (`VOLLEY_PROGRESS=thread`): seed 003's communication processor, as a
//! thread of the rank's own process that polls every transport and runs handlers, so that a
//! rank busy computing still serves requests and one-sided operations.
//!
//! **One engine, one owner.** The engine's state is used by one thread at a time: the rank
//! thread for its sends, polls and waits (its sends stay direct, no hand-off), the progress
//! thread while it polls. Handlers run only on the owner, so they stay atomic with respect to
//! each other, as in inline mode. Ownership is the [`Lease`]: the rank thread enters the
//! runtime with a plain store and a load, no atomic read-modify-write; the progress thread,
//! which takes the engine rarely, pays a `membarrier` for it.
//!
//! **Staying out of the way.** When the rank thread is inside the runtime (it polls by itself)
//! the progress thread naps, with growing naps while that lasts, so that the two do not fight
//! over the rings' cache lines and a program that polls keeps inline speed. A program that
//! polls is also outside between its calls, briefly; the progress thread tells it from one that
//! computes by the rank thread's call count ([`Lease::calls`]): only when it has made no call
//! for a short confirmation nap does the progress thread take the engine. (Taking it in such a
//! gap would stall the program: the two threads share its CPU when the rank is pinned, and the
//! progress thread would poll until it is preempted or spins out.) Operations that serve
//! nobody (segment copies, direct accesses) own the engine without counting as calls
//! ([`LOCAL`]), so a rank that computes with them in its loop is still served between them.
//! Holding the engine, it polls
//! and gives it back as soon as the rank thread enters; once it has found nothing for a while
//! it sleeps on the rank's doorbell, which senders ring only while it sleeps.
//!
//! **After a long wait.** While the rank thread waits inside the runtime its progress thread's
//! naps grow like a polling program's, but the wait's end may start a computation, which a
//! request would then find served only at the end of a nap of up to [`NAP_MAX`]. So the rank
//! thread, ending a long wait (one that gave up its core several times, or spun out on a
//! rank that is not polite), cuts a long nap short and the naps start again from the shortest
//! ([`ThreadSync::wait_ended`]); round trips and a program that polls pay nothing for it.
//!
//! **Blocking waits.** In `VOLLEY_WAIT=block` a rank thread whose wait has spun out gives the
//! engine up and sleeps on [`ThreadSync`]'s handled counter; the progress thread serves and
//! bumps the counter (and wakes it) after running handlers, since only a handler can make the
//! wait's condition true. Both sides decide while owning the engine, so no wake-up is lost.
//!
//! **Critical sections** hold the progress thread's handlers back through the word in
//! `critical.rs`.
//!
//! **Polling phases** ([`crate::Delivery::Polling`], seed 000's switch between polling and
//! interrupts per phase): the rank thread sets `paused` while it owns the engine; the progress
//! thread then naps without taking the engine, and waits that spin out sleep by themselves, as
//! without a thread.

use super::engine::{Engine, Served, SharedEngine};
use super::lease::{Lease, INSIDE, LOCAL, OUTSIDE, SLEEPING, WANTS};
use super::nap_cut::NapCut;
use super::stats::ProgressStats;
use crate::futex::{self, Scope};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Shortest and longest nap of the progress thread while the rank thread polls by itself. Each
/// wake-up preempts the rank thread on its CPU (the two share it when the rank is pinned) and
/// costs it microseconds: naps of at most 800 us slowed a polling round trip by about 10%,
/// 4 ms by about 3%. The longest nap is also how late, at worst, the progress thread takes over
/// when a program that polled for long stops polling.
const NAP_MIN: Duration = Duration::from_micros(50);
const NAP_MAX: Duration = Duration::from_millis(4);
/// How long the rank thread must stay outside the runtime, without a call, before the progress
/// thread takes the engine: longer than the gaps between the calls of a program that polls.
const CONFIRM: Duration = Duration::from_micros(20);
/// Empty polls before the progress thread sleeps on the doorbell.
const SPIN_POLLS: u32 = 256;

/// What the rank thread and its progress thread share besides the engine.
#[derive(Debug)]
pub(crate) struct ThreadSync {
    lease: Lease,
    /// The rank thread sleeps on this in a blocked wait; bumped when handlers ran.
    handled: AtomicU32,
    /// Whether the rank thread sleeps on `handled` (read and written by the engine's owner).
    main_sleeping: AtomicBool,
    /// The progress thread naps on this; bumped to cut a nap short.
    nap: AtomicU32,
    /// The rank thread's request to cut a long nap short after a long wait.
    cut: NapCut,
    stop: AtomicBool,
    /// The program runs a polling phase ([`crate::Delivery::Polling`]): the progress thread
    /// takes the engine no more. Written by the rank thread while it owns the engine.
    paused: AtomicBool,
    counters: Counters,
}

/// The progress thread's counters: written by it alone (a load and a store each), read for
/// [`ProgressStats`] by the rank thread.
#[derive(Debug, Default)]
struct Counters {
    naps: AtomicU64,
    confirmations: AtomicU64,
    takes: AtomicU64,
    polls: AtomicU64,
    handled_polls: AtomicU64,
    sleeps: AtomicU64,
}

fn bump(c: &AtomicU64) {
    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
}

impl Default for ThreadSync {
    fn default() -> Self {
        Self {
            lease: Lease::new(),
            handled: AtomicU32::new(0),
            main_sleeping: AtomicBool::new(false),
            nap: AtomicU32::new(0),
            cut: NapCut::default(),
            stop: AtomicBool::new(false),
            paused: AtomicBool::new(false),
            counters: Counters::default(),
        }
    }
}

impl ThreadSync {
    /// What the progress thread has done so far.
    pub(crate) fn stats(&self) -> ProgressStats {
        let c = &self.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        ProgressStats {
            naps: get(&c.naps),
            confirmations: get(&c.confirmations),
            takes: get(&c.takes),
            polls: get(&c.polls),
            handled_polls: get(&c.handled_polls),
            sleeps: get(&c.sleeps),
        }
    }

    /// For the hang report: how many runtime calls the rank thread has made (wrapping), and
    /// whether it is outside the runtime now.
    pub(crate) fn rank_thread(&self) -> (u32, bool) {
        (self.lease.calls(), self.lease.main() == OUTSIDE)
    }

    /// Whether a polling phase holds the progress thread back.
    pub(crate) fn paused(&self) -> bool {
        self.paused.load(Ordering::Relaxed)
    }

    /// The rank thread, owning the engine, starts a polling phase (`true`: from its next
    /// leave on, no handler runs on the progress thread) or an asynchronous one.
    pub(crate) fn set_paused(&self, paused: bool) {
        // Ordered before the rank thread's release of the engine, which the progress
        // thread's take acquires: a take after this call sees it.
        self.paused.store(paused, Ordering::Relaxed);
        self.kick();
    }

    /// The rank thread enters the runtime: owns the engine on return.
    #[inline]
    pub(crate) fn enter(&self) {
        self.lease.enter();
    }

    /// The rank thread enters for an operation that serves nobody (see [`LOCAL`]): owns the
    /// engine on return.
    #[inline]
    pub(crate) fn enter_local(&self) {
        self.lease.enter_local();
    }

    /// The rank thread leaves the runtime.
    ///
    /// # Safety
    /// The rank thread owns the engine (from [`ThreadSync::enter`]) and touches it no more.
    #[inline]
    pub(crate) unsafe fn leave(&self) {
        self.lease.leave(OUTSIDE);
    }

    /// The rank thread, owning the engine, has nothing to do until a handler runs: gives the
    /// engine up, sleeps until the progress thread has run handlers (or `timeout`), and owns
    /// the engine again on return.
    pub(crate) fn sleep_until_handled(&self, timeout: Duration) {
        self.main_sleeping.store(true, Ordering::Relaxed);
        let seen = self.handled.load(Ordering::Relaxed);
        self.lease.leave(SLEEPING);
        self.kick();
        futex::wait(&self.handled, seen, Some(timeout), Scope::Private);
        self.lease.enter();
        self.main_sleeping.store(false, Ordering::Relaxed);
    }

    /// The progress thread, owning the engine, has run handlers: wakes a rank thread that
    /// sleeps in a wait.
    fn handlers_ran(&self) {
        if self.main_sleeping.swap(false, Ordering::Relaxed) {
            self.handled.fetch_add(1, Ordering::Release);
            futex::wake_all(&self.handled, Scope::Private);
        }
    }

    /// The rank thread ends a long wait (and owns the engine): what follows
    /// may be computation, which only the progress thread can serve, so a nap longer than the
    /// shortest ends now and the next starts from the shortest. Cold: called once per such
    /// wait; the system call only when a long nap is under way.
    #[cold]
    pub(crate) fn wait_ended(&self) {
        if self.cut.request(micros(NAP_MIN)) {
            self.kick();
        }
    }

    /// The progress thread naps `d` while the rank thread is inside, cut short by
    /// [`ThreadSync::wait_ended`] (or any kick). Returns the next nap: the shortest if a wait
    /// ended meanwhile, else twice `d` up to [`NAP_MAX`].
    fn nap_inside(&self, d: Duration) -> Duration {
        let seen = self.nap.load(Ordering::Acquire);
        let (us, sleep) = self.cut.begin(micros(d), micros(NAP_MIN));
        let d = Duration::from_micros(us.into());
        if sleep && !self.stop.load(Ordering::Acquire) {
            futex::wait(&self.nap, seen, Some(d), Scope::Private);
        }
        if self.cut.end() {
            NAP_MIN
        } else {
            (d * 2).min(NAP_MAX)
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
        e.wake_owner();
        let _ = thread.join();
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// What the progress thread last saw of the rank thread.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Look {
    /// Nothing that counts: the next look that finds it outside starts a confirmation.
    Fresh,
    /// Found outside after this many calls; if it has made none when looked at again, it
    /// computes (or no longer polls) and the progress thread serves.
    Outside(u32),
}

impl Look {
    /// Whether it was found outside at a call count other than `calls` (it has called since).
    fn is_outside_before(self, calls: u32) -> bool {
        matches!(self, Look::Outside(seen) if seen != calls)
    }
}

/// The progress thread's loop.
fn serve(e: &Engine) {
    let sync = e.thread_sync().expect("a progress thread has its sync");
    // Naps of tens of microseconds need a timer slack below the default 50 us.
    // SAFETY: PR_SET_TIMERSLACK takes one integer argument and changes only this thread.
    unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong) };
    let lease = &sync.lease;
    let mut nap = NAP_MIN;
    let mut look = Look::Fresh;
    // Empty polls since something last came, across takes: a rank whose loop enters often
    // wants the engine back after every poll, and the count must still reach the sleep.
    let mut empty = 0u32;
    while !sync.stop.load(Ordering::Acquire) {
        if sync.paused.load(Ordering::Relaxed) {
            // A polling phase: handlers run only in the rank thread's calls. Its end kicks.
            sync.nap(NAP_MAX);
            look = Look::Fresh;
            continue;
        }
        let calls = lease.calls();
        let main = lease.main();
        if main == WANTS {
            // It stepped back for our last take and owns the engine in a moment.
            std::thread::yield_now();
            continue;
        }
        // Inside a call, or out of calls (outside, or in an operation that serves nobody) but
        // it has called since the last look: it polls by itself.
        let out_of_calls = main == OUTSIDE || main == LOCAL;
        let polls = main == INSIDE || (out_of_calls && look.is_outside_before(calls));
        if polls {
            look = Look::Fresh;
            bump(&sync.counters.naps);
            nap = sync.nap_inside(nap);
            continue;
        }
        if out_of_calls && look == Look::Fresh {
            // Outside, which a program that polls is too, between two calls: taking the
            // engine now would stall it (the two threads share its CPU when it is pinned).
            // Look again shortly.
            look = Look::Outside(calls);
            bump(&sync.counters.confirmations);
            sync.nap(CONFIRM);
            continue;
        }
        // No call for a whole confirmation (it computes), or it sleeps in a blocked wait and
        // needs the handlers run.
        look = Look::Fresh;
        if !lease.try_take() {
            // The rank thread entered meanwhile.
            continue;
        }
        if sync.paused.load(Ordering::Relaxed) {
            // A polling phase began before this take (the take's acquire of the engine sees
            // the flag the rank thread set while it owned it).
            lease.release();
            continue;
        }
        bump(&sync.counters.takes);
        if serve_while_owner(e, sync, &mut empty) {
            // The program needed serving: look at it often again. (A take that found nothing
            // keeps the naps long: a program that polls, like one whose outside spells only
            // look like compute, serves itself.)
            nap = NAP_MIN;
        }
        // Given back to sleep (or for a critical section): if the rank thread has not called
        // since, it still computes, and the next look serves again without confirming.
        look = Look::Outside(calls);
    }
}

/// Polls while owning the engine; gives it back (always) when the rank thread enters, when a
/// critical section holds handlers back, or to sleep once `empty` (empty polls in a row,
/// carried over from earlier takes) reaches [`SPIN_POLLS`]. Returns whether it ran handlers.
fn serve_while_owner(e: &Engine, sync: &ThreadSync, empty: &mut u32) -> bool {
    let lease = &sync.lease;
    let mut handled = false;
    loop {
        let served = e.serve();
        bump(&sync.counters.polls);
        match served {
            Served::Handled => {
                bump(&sync.counters.handled_polls);
                sync.handlers_ran();
                handled = true;
                *empty = 0;
            }
            Served::Deferred => {
                // A critical section holds handlers back; its end delivers them.
                lease.release();
                sync.nap(NAP_MIN);
                return true;
            }
            Served::Nothing if *empty < SPIN_POLLS => *empty += 1,
            Served::Nothing => {
                *empty = 0;
                let plan = e.prepare_sleep();
                // The sleep itself needs no engine state.
                lease.release();
                if let Some(plan) = plan {
                    bump(&sync.counters.sleeps);
                    // After announcing sleep: a stop that rang the bell before our announcement
                    // is seen here, one after it moves the bell and ends the sleep at once.
                    if sync.stop.load(Ordering::Acquire) {
                        e.own().doorbell().awake();
                        return handled;
                    }
                    // A long quiet: see whether the job is still whole (unless the rank
                    // thread is in the runtime, where it checks by itself).
                    if e.sleep(plan) && lease.try_take() {
                        e.check_health();
                        lease.release();
                    }
                }
                return handled;
            }
        }
        if lease.wanted() || sync.stop.load(Ordering::Relaxed) {
            lease.release();
            return handled;
        }
        std::hint::spin_loop();
    }
}

/// A duration in whole microseconds, saturated to `u32` (naps are at most [`NAP_MAX`]).
fn micros(d: Duration) -> u32 {
    u32::try_from(d.as_micros()).unwrap_or(u32::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wait_that_ends_cuts_a_long_nap_short_and_the_next_is_the_shortest() {
        let sync = Arc::new(ThreadSync::default());
        let s = sync.clone();
        // Without the cut this nap lasts a minute and the next would be the longest.
        let napper = std::thread::spawn(move || s.nap_inside(Duration::from_secs(60)));
        while !sync.cut.is_napping() {
            std::thread::yield_now();
        }
        sync.wait_ended();
        assert_eq!(napper.join().unwrap(), NAP_MIN);
    }

    #[test]
    fn a_wait_that_ends_outside_a_nap_costs_no_kick_but_shortens_the_next_nap() {
        let sync = ThreadSync::default();
        sync.wait_ended();
        assert_eq!(
            sync.nap.load(Ordering::Relaxed),
            0,
            "kicked a thread that did not nap"
        );
        // The nap taken is the shortest (the next is twice that), not the longest asked for.
        assert_eq!(sync.nap_inside(NAP_MAX), NAP_MIN * 2);
        assert_eq!(
            sync.nap_inside(NAP_MIN * 2),
            NAP_MIN * 4,
            "the naps grow again"
        );
    }
}
