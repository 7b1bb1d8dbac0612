//! A rank that computes without polling still serves: `busy_target [K] [LIMIT_S]`.
//!
//! Two ranks. Rank 1 has a progress thread (the builder's `progress_thread`, whatever
//! `VOLLEY_PROGRESS` says); rank 0 uses the default. After a barrier rank 1 computes, making no
//! runtime call at all, until a flag in its own segment is set or LIMIT_S seconds (default 30)
//! pass. Meanwhile rank 0 completes K (default 2000) request/replies with rank 1, each checked,
//! and K one-sided gets of a pattern rank 1 wrote into its segment, through handlers at rank 1
//! (the AM path), checked byte for byte; then it sets the flag with a put. Rank 1 fails if the
//! flag never came (nobody served it while it computed). `BUSY_TARGET_INLINE=1` turns the progress thread off (the control,
//! which must fail).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::rma::{Perms, Rma, RmaPath};
use volley::Runtime;
use volley_tests::{arg_u64, fail, fill_pattern, join};

/// Bytes of the pattern rank 0 reads back.
const PATTERN: usize = 1000;
/// Where the flag lives in the segment (after the pattern).
const FLAG: usize = 1024;

fn main() {
    let k = arg_u64(0, 2000);
    let limit = Duration::from_secs(arg_u64(1, 30));
    let job = volley_tests::job();
    if job.size != 2 {
        fail(job.rank, 2, "busy_target needs 2 ranks");
    }
    let replies = Arc::new(AtomicU64::new(0));

    let mut b = Runtime::builder();
    // BUSY_TARGET_INLINE=1: the control experiment, without the progress thread.
    let inline = std::env::var("BUSY_TARGET_INLINE").is_ok_and(|v| v == "1");
    b.progress_thread(job.rank == 1 && !inline);
    let setup = Rma::register_with(&mut b, Ok(RmaPath::ActiveMessages));
    let answer = {
        let replies = replies.clone();
        b.reply_handler("busy-answer", move |m| {
            if m.arg(0) != m.arg(1).wrapping_mul(7) + 1 {
                fail(0, 1, &format!("busy_target: reply {} is wrong", m.arg(1)));
            }
            replies.fetch_add(1, Ordering::Relaxed);
        })
    };
    let ask = {
        b.request_handler("busy-ask", move |m, tok| {
            let i = m.arg(0);
            tok.reply_short(answer, &[i.wrapping_mul(7) + 1, i])
                .expect("busy_target: reply");
        })
    };
    let rt = join(b);
    let rma = setup.attach(&rt);
    let rank = rt.rank();
    let mut pattern = vec![0u8; PATTERN];
    fill_pattern(0xb05e, &mut pattern);
    let seg = rma
        .alloc_symmetric(FLAG + 8, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    if rank == 1 {
        rma.write_local(seg.on(1), 0, &pattern).unwrap();
    }
    rt.barrier();
    if rank == 1 {
        let t = Instant::now();
        let mut flag = [0u8; 8];
        // No runtime call in this loop: only the progress thread can serve rank 0.
        while t.elapsed() < limit {
            rma.read_local(seg.on(1), FLAG, &mut flag).unwrap();
            if u64::from_le_bytes(flag) == k {
                break;
            }
            std::hint::spin_loop();
        }
        let computed = t.elapsed();
        if u64::from_le_bytes(flag) != k {
            fail(
                1,
                1,
                &format!(
                    "busy_target: rank 0 did not finish while rank 1 computed for {computed:?} \
                     without polling"
                ),
            );
        }
        // Its own counters say who served: the progress thread, having taken the engine.
        let p = rt.stats().progress;
        if p.takes == 0 || p.handled_polls == 0 {
            fail(
                1,
                1,
                &format!("busy_target: the progress thread's counters show no serving: {p:?}"),
            );
        }
        println!(
            "busy_target: served {k} requests and {k} gets while computing for {computed:?} \
             without polling (progress thread: {} takes, {} polls that ran handlers)",
            p.takes, p.handled_polls
        );
    } else {
        let mut buf = vec![0u8; PATTERN];
        let start = Instant::now();
        let mut slow = 0;
        let mut worst = Duration::ZERO;
        for i in 0..k {
            let t = Instant::now();
            let want = replies.load(Ordering::Relaxed) + 1;
            rt.request_short(1, ask, &[i]).expect("request");
            rt.wait_until(|| replies.load(Ordering::Relaxed) >= want);
            buf.fill(0);
            let at = (i as usize * 13) % (PATTERN / 2);
            rma.get(seg.on(1), at, &mut buf[at..])
                .unwrap_or_else(|e| fail(0, 1, &format!("busy_target: get {i}: {e}")));
            if buf[at..] != pattern[at..] {
                fail(
                    0,
                    1,
                    &format!("busy_target: get {i} at offset {at} differs"),
                );
            }
            let d = t.elapsed();
            worst = worst.max(d);
            slow += (d > Duration::from_millis(1)) as u32;
        }
        let looped = start.elapsed();
        rma.put(seg.on(1), FLAG, &k.to_le_bytes())
            .expect("busy_target: put of the flag");
        println!(
            "busy_target: rank 0: {k} iterations in {looped:?} (slowest {worst:?}, {slow} over \
             1 ms), then the flag in {:?}",
            start.elapsed() - looped
        );
    }
    rt.barrier();
}
