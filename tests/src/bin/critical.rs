//! Critical sections between ranks: `critical [N]`.
//!
//! Every rank other than 0 waits for a go from rank 0 (so that nothing is handled inside rank
//! 0's barrier wait), then sends N (default 20000) numbered short requests to rank 0 as fast
//! as it can. Rank 0 alternates: a critical section in which it polls and spins for a while
//! (the flag `INSIDE` set), then a plain wait. The handler fails the job if it ever runs with
//! the flag set, and checks that each sender's numbers arrive in order without gaps; at the
//! end rank 0 checks it handled every request and that some arrived while it was inside
//! (so deferral was really exercised).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_tests::{arg_u64, fail, PerRank};

static INSIDE: AtomicBool = AtomicBool::new(false);

fn main() {
    let n = arg_u64(0, 20_000);
    let next = Arc::new(PerRank::default());
    let deferred = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let nx = next.clone();
    let note = b.request_handler("critical-note", move |m, _| {
        if INSIDE.load(Ordering::Relaxed) {
            fail(0, 1, "critical: a handler ran inside a critical section");
        }
        let want = nx.get(m.src());
        if m.arg(0) != want {
            fail(
                0,
                1,
                &format!(
                    "critical: from rank {} got number {}, expected {want}",
                    m.src(),
                    m.arg(0)
                ),
            );
        }
        nx.bump(m.src());
    });
    let go = Arc::new(AtomicBool::new(false));
    let g = go.clone();
    let start = b.request_handler("critical-go", move |_, _| g.store(true, Ordering::Relaxed));
    let rt = b.build().expect("build");
    next.init(rt.size());
    let (me, size) = (rt.rank(), rt.size());
    rt.barrier();
    if me != 0 {
        rt.wait_until(|| go.load(Ordering::Relaxed));
        for i in 0..n {
            rt.request_short(0, note, &[i]).expect("request");
        }
    } else {
        let total = n * (size as u64 - 1);
        let done = || (1..size).map(|r| next.get(r)).sum::<u64>() == total;
        for r in 1..size {
            rt.request_short(r, start, &[]).expect("go");
        }
        while !done() {
            let before = (1..size).map(|r| next.get(r)).sum::<u64>();
            rt.critical(|| {
                INSIDE.store(true, Ordering::Relaxed);
                // 200 us of polls, and at least 16 whatever the clock says: a rank preempted
                // right after reading the clock would otherwise end the section without a
                // poll, and under load every section could pass untested. Until one message
                // has been held back, sections last 5 ms, so that a sender descheduled for
                // a while still gets one in.
                let span = if deferred.load(Ordering::Relaxed) == 0 {
                    Duration::from_millis(5)
                } else {
                    Duration::from_micros(200)
                };
                let t = Instant::now();
                let mut polls = 0;
                while polls < 16 || t.elapsed() < span {
                    rt.poll();
                    polls += 1;
                }
                INSIDE.store(false, Ordering::Relaxed);
            });
            // Whatever arrived inside ran as the section ended.
            let after = (1..size).map(|r| next.get(r)).sum::<u64>();
            deferred.fetch_add(after - before, Ordering::Relaxed);
            rt.poll();
        }
        let d = deferred.load(Ordering::Relaxed);
        if d == 0 {
            fail(0, 1, "critical: no message ever arrived during a section");
        }
        println!("critical: {total} requests handled in order, {d} of them deferred to the end of a section");
    }
    rt.barrier();
}
