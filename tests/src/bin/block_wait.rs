//! Blocking waits (`VOLLEY_WAIT=block`): `block_wait [ROUNDS] [IDLE_MS] [TARGET]`.
//!
//! 1. Rank TARGET (default 1) waits for a request that rank 0 sends only after sleeping
//!    IDLE_MS (default 2000) milliseconds outside the runtime. The target reads its own CPU
//!    time around the wait and fails if it used more than 5% of a core: it slept in
//!    the kernel instead of spinning. The request must still wake it.
//! 2. ROUNDS (default 20000) request/reply rounds in which rank 0 waits a varying few
//!    microseconds before each request, so that the target is often just falling asleep when
//!    the request arrives: a lost wake-up would hang the job (the test's deadline catches it).
//!
//! Other ranks only join the barriers. Prints the measured CPU share and how long the rounds
//! took.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_tests::{arg_u64, fail};

/// User plus system CPU time of this process (all its threads), in seconds.
///
/// From `CLOCK_PROCESS_CPUTIME_ID`, which counts nanoseconds: /proc/self/stat counts clock
/// ticks (10 ms), so one tick alone is 5% of a 200 ms wait.
fn cpu_seconds() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec for the duration of the call.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_PROCESS_CPUTIME_ID) failed");
    ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9
}

fn main() {
    let rounds = arg_u64(0, 20_000);
    let idle_ms = arg_u64(1, 2000);
    let target = arg_u64(2, 1) as usize;
    let pokes = Arc::new(AtomicU64::new(0));
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let r = replies.clone();
    let back = b.reply_handler("bw-back", move |_| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let p = pokes.clone();
    let poke = b.request_handler("bw-poke", move |m, tok| {
        p.fetch_add(1, Ordering::Relaxed);
        if m.arg(0) == 1 {
            tok.reply_short(back, &[]).expect("reply");
        }
    });
    let rt = b.build().expect("build");
    let me = rt.rank();
    if target == 0 || target >= rt.size() {
        fail(
            me,
            2,
            &format!("block_wait: TARGET must be a rank other than 0, got {target}"),
        );
    }
    rt.barrier();
    if me == 0 {
        std::thread::sleep(Duration::from_millis(idle_ms));
        rt.request_short(target, poke, &[0]).expect("poke");
    } else if me == target {
        let (cpu0, t0) = (cpu_seconds(), Instant::now());
        rt.wait_until(|| pokes.load(Ordering::Relaxed) == 1);
        let (cpu, wall) = (cpu_seconds() - cpu0, t0.elapsed().as_secs_f64());
        let share = cpu / wall;
        println!(
            "block_wait: rank {me} waited {wall:.2} s using {:.2}% of a core",
            share * 100.0
        );
        if wall < idle_ms as f64 / 1000.0 * 0.8 {
            fail(
                me,
                1,
                "block_wait: the wait ended before the request was sent",
            );
        }
        if share > 0.05 {
            fail(
                me,
                1,
                &format!("block_wait: waiting used {:.2}% of a core", share * 100.0),
            );
        }
    }
    rt.barrier();
    if me == 0 {
        let started = Instant::now();
        let mut x = 0x9e37_79b9u64;
        for i in 0..rounds {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            // 0 to ~60 us: around the time rank 1 takes to give up spinning and sleep.
            let pause = Duration::from_nanos(x % 60_000);
            let t = Instant::now();
            while t.elapsed() < pause {
                std::hint::spin_loop();
            }
            rt.request_short(target, poke, &[1]).expect("poke");
            rt.wait_until(|| replies.load(Ordering::Relaxed) == i + 1);
        }
        println!(
            "block_wait: {rounds} sleep/wake rounds completed in {:.2} s",
            started.elapsed().as_secs_f64()
        );
    }
    rt.barrier();
}
