//! E12: seed 003 §6.2's machine without a communication processor, which emulates it "using
//! interrupts". A request (a word; the answer is `3 * request + 1`) from rank 0 is served on
//! rank 1, whose program thread is busy computing and never polls, three ways:
//!
//! - **signal**: rank 0 writes the request into rank 1's memory and raises `SIGUSR1` at rank
//!   1's program thread (`tgkill`); the handler runs on that interrupted thread and writes the
//!   answer into rank 0's memory. The handler is async-signal-safe: atomic loads and stores
//!   through pointers set before it was installed, nothing else (it cannot use `Prim`, whose
//!   buffers the interrupted thread may be in the middle of).
//! - **comm thread**: a second thread of rank 1 polls the request word (the seed's
//!   communication processor).
//! - **futex**: a second thread of rank 1 sleeps on a futex word that rank 0 bumps and wakes
//!   (the `interrupt` progress mode's kernel wake-up).
//!
//! The server threads may run on any core (the ranks are pinned one per core; a thread
//! pinned beside the busy program thread would only run when the scheduler slices it). The
//! requester waits for each answer before the next request, spinning then yielding. Every
//! answer is checked, and each request must be served exactly once (the servers count).

use super::{Words, SIG};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley_prim::Prim;

/// Offsets from `SIG` in rank 1's words.
const REQ: usize = SIG;
const PID: usize = SIG + 8;
const TID: usize = SIG + 16;
const FUTEX: usize = SIG + 24;
const STOP: usize = SIG + 32;
/// In rank 0's words.
const REPLY: usize = SIG;
const SERVED: usize = SIG + 8;
const WORK: usize = SIG + 16;

/// E12's figures: ns per request (round trip), and rank 1's program thread's computation
/// rate meanwhile (loop iterations per µs).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct Figures {
    pub comm_thread_ns: f64,
    pub futex_ns: f64,
    pub signal_ns: f64,
    pub comm_thread_work_per_us: f64,
    pub futex_work_per_us: f64,
    pub signal_work_per_us: f64,
    pub signal_over_thread: f64,
    pub futex_over_thread: f64,
}

impl Figures {
    pub(super) fn named(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("E12 comm thread", self.comm_thread_ns),
            ("E12 futex", self.futex_ns),
            ("E12 signal", self.signal_ns),
        ]
    }
}

pub(super) fn medians(reps: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| crate::bench::median_present(reps.iter().map(f));
    let mut out = Figures {
        comm_thread_ns: m(|f| f.comm_thread_ns),
        futex_ns: m(|f| f.futex_ns),
        signal_ns: m(|f| f.signal_ns),
        comm_thread_work_per_us: m(|f| f.comm_thread_work_per_us),
        futex_work_per_us: m(|f| f.futex_work_per_us),
        signal_work_per_us: m(|f| f.signal_work_per_us),
        ..Figures::default()
    };
    out.signal_over_thread = out.signal_ns / out.comm_thread_ns;
    out.futex_over_thread = out.futex_ns / out.comm_thread_ns;
    out
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Server {
    CommThread,
    Futex,
    Signal,
}

fn answer(req: u64) -> u64 {
    req.wrapping_mul(3).wrapping_add(1)
}

/// The 32-bit futex word at the start of a shared 8-byte word.
fn futex_word(w: &AtomicU64) -> &AtomicU32 {
    // SAFETY: the first 4 bytes of an aligned, live 8-byte atomic, reached only atomically
    // (as a 32-bit word by every user of this offset).
    unsafe { &*(w as *const AtomicU64 as *const AtomicU32) }
}

fn futex(word: &AtomicU32, op: libc::c_int, val: u32, timeout: Option<Duration>) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs() as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let tsp = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live aligned 32-bit atomic in memory shared between processes
    // (hence no FUTEX_PRIVATE_FLAG); `tsp` is null or points at `ts` on this frame. Every
    // error means "recheck", which the callers do.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            op,
            val,
            tsp,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Lets the calling thread run on every core.
fn unpin() {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET and sched_setaffinity only
    // touch it; a failure leaves the thread where it was, which only slows it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in 0..libc::CPU_SETSIZE as usize {
            libc::CPU_SET(c, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set);
    }
}

// What the signal handler reaches: set before it is installed, cleared after it is restored.
static SIG_REQ: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
static SIG_REPLY: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
static SIG_SERVED: AtomicU64 = AtomicU64::new(0);

/// The handler: async-signal-safe (atomics only).
extern "C" fn on_request(_sig: libc::c_int) {
    let (req, reply) = (
        SIG_REQ.load(Ordering::Acquire),
        SIG_REPLY.load(Ordering::Acquire),
    );
    if req.is_null() || reply.is_null() {
        return;
    }
    // SAFETY: both point at mapped words that outlive the installation of this handler
    // (set before `sigaction`, cleared after the old action is back).
    let (req, reply) = unsafe { (&*req, &*reply) };
    reply.store(answer(req.load(Ordering::Acquire)), Ordering::Release);
    SIG_SERVED.fetch_add(1, Ordering::Relaxed);
}

fn sigaction(handler: libc::sighandler_t, old: Option<&libc::sigaction>) -> libc::sigaction {
    // SAFETY: plain sigaction calls with structs on this frame; the handler installed is
    // async-signal-safe (`on_request`) or the one that was there before.
    unsafe {
        let mut prev: libc::sigaction = std::mem::zeroed();
        match old {
            Some(o) => {
                libc::sigaction(libc::SIGUSR1, o, &mut prev);
            }
            None => {
                let mut sa: libc::sigaction = std::mem::zeroed();
                sa.sa_sigaction = handler;
                sa.sa_flags = libc::SA_RESTART;
                libc::sigemptyset(&mut sa.sa_mask);
                libc::sigaction(libc::SIGUSR1, &sa, &mut prev);
            }
        }
        prev
    }
}

/// The program thread's computation: loop iterations until rank 0 says stop.
fn compute(stop: &AtomicU64) -> u64 {
    let mut x = 1u64;
    let mut n = 0u64;
    while stop.load(Ordering::Relaxed) == 0 {
        for _ in 0..64 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
        n += 1;
    }
    n
}

/// How rank 0 waits for each answer.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Wait {
    /// Spins, then yields (E12: the requester shares its core fairly).
    SpinThenYield,
    /// Spins only (the floor of a round trip: no system call but the request's).
    Spin,
}

/// Rank 0's figures of one server variant (NaN on rank 1).
struct Run {
    /// ns per request, the mean.
    mean_ns: f64,
    /// ns per request, the median (a request that finds rank 1 preempted by an unrelated
    /// process costs a time slice, which the mean takes in and the median does not).
    median_ns: f64,
    /// Rank 1's computation meanwhile, loop iterations per µs.
    work_per_us: f64,
}

/// One server variant.
fn one(
    p: &Prim,
    w: &Words,
    (how, wait): (Server, Wait),
    tag: u64,
    iters: u64,
    failures: &mut Vec<String>,
) -> Run {
    let rt = p.runtime();
    let (req, stop, reply) = (w.at(1, REQ), w.at(1, STOP), w.at(0, REPLY));
    let fut = futex_word(w.at(1, FUTEX));
    let mut result = Run {
        mean_ns: f64::NAN,
        median_ns: f64::NAN,
        work_per_us: f64::NAN,
    };
    if p.rank() == 1 {
        stop.store(0, Ordering::Release);
        w.at(1, PID)
            .store(std::process::id() as u64, Ordering::Release);
        // SAFETY: plain system call.
        let tid = unsafe { libc::gettid() };
        w.at(1, TID).store(tid as u64, Ordering::Release);
        let quit = Arc::new(AtomicBool::new(false));
        let served = Arc::new(AtomicU64::new(0));
        SIG_SERVED.store(0, Ordering::Release);
        let mut old = None;
        let thread = match how {
            Server::Signal => {
                SIG_REQ.store(req as *const AtomicU64 as *mut AtomicU64, Ordering::Release);
                SIG_REPLY.store(
                    reply as *const AtomicU64 as *mut AtomicU64,
                    Ordering::Release,
                );
                old = Some(sigaction(on_request as *const () as usize, None));
                None
            }
            _ => {
                let (q, s) = (quit.clone(), served.clone());
                let (req, reply, fut): (&'static AtomicU64, &'static AtomicU64, &'static AtomicU32) =
                    // SAFETY: the mapped words outlive the thread, which is joined below,
                    // before this function returns.
                    unsafe { (&*(req as *const _), &*(reply as *const _), &*(fut as *const _)) };
                // Read here, before the barrier that lets requests come: the thread may
                // start after the first one.
                let mut last = req.load(Ordering::Acquire);
                Some(std::thread::spawn(move || {
                    unpin();
                    let mut idle = 0u32;
                    loop {
                        let r = req.load(Ordering::Acquire);
                        if r != last {
                            reply.store(answer(r), Ordering::Release);
                            s.fetch_add(1, Ordering::Relaxed);
                            last = r;
                            idle = 0;
                            continue;
                        }
                        if q.load(Ordering::Acquire) {
                            break;
                        }
                        if how == Server::Futex {
                            let f = fut.load(Ordering::Acquire);
                            if req.load(Ordering::Acquire) == last && !q.load(Ordering::Acquire) {
                                futex(fut, libc::FUTEX_WAIT, f, Some(Duration::from_millis(10)));
                            }
                        } else {
                            idle += 1;
                            if idle > 64 {
                                std::thread::yield_now();
                            } else {
                                std::hint::spin_loop();
                            }
                        }
                    }
                }))
            }
        };
        rt.barrier();
        let start = Instant::now();
        let work = compute(stop);
        let rate = work as f64 / start.elapsed().as_nanos() as f64 * 1000.0;
        quit.store(true, Ordering::Release);
        fut.fetch_add(1, Ordering::Release);
        futex(fut, libc::FUTEX_WAKE, i32::MAX as u32, None);
        if let Some(t) = thread {
            let _ = t.join();
        }
        if let Some(o) = old {
            sigaction(0, Some(&o));
            SIG_REQ.store(std::ptr::null_mut(), Ordering::Release);
            SIG_REPLY.store(std::ptr::null_mut(), Ordering::Release);
        }
        let n = match how {
            Server::Signal => SIG_SERVED.load(Ordering::Acquire),
            _ => served.load(Ordering::Acquire),
        };
        w.at(0, SERVED).store(n, Ordering::Release);
        w.at(0, WORK).store(rate.to_bits(), Ordering::Release);
        rt.barrier();
    } else {
        reply.store(0, Ordering::Release);
        rt.barrier();
        let (pid, tid) = (
            w.at(1, PID).load(Ordering::Acquire) as libc::pid_t,
            w.at(1, TID).load(Ordering::Acquire) as libc::pid_t,
        );
        let mut each = Vec::with_capacity(iters as usize);
        let start = Instant::now();
        for i in 0..iters {
            let sent = Instant::now();
            let r = (tag << 40) + i + 1;
            req.store(r, Ordering::Release);
            match how {
                Server::CommThread => {}
                Server::Futex => {
                    fut.fetch_add(1, Ordering::Release);
                    futex(fut, libc::FUTEX_WAKE, 1, None);
                }
                Server::Signal => {
                    // SAFETY: plain system call at rank 1's program thread, which has the
                    // handler installed until rank 1 has seen STOP.
                    unsafe { libc::syscall(libc::SYS_tgkill, pid, tid, libc::SIGUSR1) };
                }
            }
            let mut spins = 0u32;
            while reply.load(Ordering::Acquire) != answer(r) {
                spins += 1;
                if spins % 4096 == 0 && sent.elapsed() > Duration::from_secs(10) {
                    failures.push(format!("E12 {how:?}: request {i} never answered"));
                    break;
                }
                if spins > 256 && wait == Wait::SpinThenYield {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            each.push(sent.elapsed().as_nanos() as f64);
        }
        let ns = start.elapsed().as_nanos() as f64 / iters as f64;
        each.sort_by(f64::total_cmp);
        stop.store(1, Ordering::Release);
        rt.barrier();
        let served = w.at(0, SERVED).load(Ordering::Acquire);
        if served != iters {
            failures.push(format!("E12 {how:?}: {iters} requests, {served} served"));
        }
        result = Run {
            mean_ns: ns,
            median_ns: each.get(each.len() / 2).copied().unwrap_or(f64::NAN),
            work_per_us: f64::from_bits(w.at(0, WORK).load(Ordering::Acquire)),
        };
    }
    rt.barrier();
    result
}

/// E12 on both ranks (rank 0's figures count).
pub(super) fn measure(
    p: &Prim,
    w: &Words,
    iters: u64,
    failures: &mut Vec<String>,
) -> Result<Figures, String> {
    let yielding = Wait::SpinThenYield;
    let thread = one(p, w, (Server::CommThread, yielding), 1, iters, failures);
    let futex = one(p, w, (Server::Futex, yielding), 2, iters, failures);
    let signal = one(p, w, (Server::Signal, yielding), 3, iters, failures);
    Ok(Figures {
        comm_thread_ns: thread.mean_ns,
        futex_ns: futex.mean_ns,
        signal_ns: signal.mean_ns,
        comm_thread_work_per_us: thread.work_per_us,
        futex_work_per_us: futex.work_per_us,
        signal_work_per_us: signal.work_per_us,
        signal_over_thread: signal.mean_ns / thread.mean_ns,
        futex_over_thread: futex.mean_ns / thread.mean_ns,
    })
}

/// The floor of any interrupt-driven request here: ns per round trip (rank 0's figure, NaN
/// on rank 1) of a signal raised at rank 1's running (computing) program thread, whose
/// handler answers, with rank 0 spinning for each answer.
pub(super) fn signal_round_trip(
    p: &Prim,
    w: &Words,
    iters: u64,
    failures: &mut Vec<String>,
) -> f64 {
    one(p, w, (Server::Signal, Wait::Spin), 4, iters, failures).median_ns
}

pub(super) fn table(t: &mut String, f: &Figures, floor_ns: f64) {
    let _ = writeln!(
        t,
        "E12 a request served on a busy rank: ns per request (round trip; floor {:.0} = 2 x cache-line bounce)",
        2.0 * floor_ns
    );
    for (name, v, work) in [
        (
            "communication thread (polls)",
            f.comm_thread_ns,
            f.comm_thread_work_per_us,
        ),
        (
            "futex-woken thread (interrupt mode)",
            f.futex_ns,
            f.futex_work_per_us,
        ),
        (
            "signal handler on the program thread",
            f.signal_ns,
            f.signal_work_per_us,
        ),
    ] {
        let _ = writeln!(
            t,
            "  {name:<38} {v:>8.0}   program thread {work:.1} loops/us"
        );
    }
    let _ = writeln!(
        t,
        "  signal / thread {:.2}, futex / thread {:.2}",
        f.signal_over_thread, f.futex_over_thread
    );
}
