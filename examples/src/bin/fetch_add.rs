//! Seed 000's fetch&add (§3, Figure 4-18), the "hello world" of Active Messages.
//!
//! Every rank increments one counter on rank 0 K times with a request whose handler does the
//! read-modify-write and replies with the old value. Then every rank sends the values it got back
//! to rank 0, which checks that the counter equals P·K and that the returned values are exactly
//! 0..P·K, each once: no increment lost, none applied twice, every reply delivered to its
//! requester.
//!
//! Run it: `volley run -n 4 target/release/fetch_add [K]`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use volley::Runtime;

fn main() {
    let k: u64 = match std::env::args().nth(1) {
        None => 10_000,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("fetch_add: K must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };

    // State touched by handlers. Handlers run only inside runtime calls on this thread, but
    // they must be Send + Sync, so plain atomics and a mutex hold it.
    let counter = Arc::new(AtomicU64::new(0)); // lives on rank 0
    let reply_value = Arc::new(AtomicU64::new(0));
    let replies = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(Vec::<u64>::new())); // rank 0 gathers everyone's values
    let reports = Arc::new(AtomicU64::new(0));

    let mut b = Runtime::builder();
    let (rv, rc) = (reply_value.clone(), replies.clone());
    let fetched = b.reply_handler("fetched", move |m| {
        rv.store(m.arg(0), Ordering::Relaxed);
        rc.fetch_add(1, Ordering::Release);
    });
    let c = counter.clone();
    let fetch_add = b.request_handler("fetch_add", move |m, reply| {
        // Handlers run one at a time, so this read-modify-write needs no atomic RMW.
        let old = c.load(Ordering::Relaxed);
        c.store(old + m.arg(0), Ordering::Relaxed);
        reply.reply_short(fetched, &[old]).expect("reply");
    });
    let (s, r) = (seen.clone(), reports.clone());
    let report = b.request_handler("report", move |m, _| {
        let mut seen = s.lock().unwrap();
        seen.extend(
            m.payload()
                .chunks_exact(8)
                .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
        );
        if m.arg(0) == 1 {
            r.fetch_add(1, Ordering::Relaxed);
        }
    });
    let latency = Arc::new(AtomicU64::new(0));
    let l = latency.clone();
    let timed = b.request_handler("timed", move |m, _| l.store(m.arg(0), Ordering::Release));
    let rt = b.build().unwrap_or_else(|e| {
        // One write, so that the lines of several ranks never interleave.
        let line = format!("fetch_add: rank {}: {e}\n", rank_from_env());
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        std::process::exit(1)
    });
    let (me, p) = (rt.rank(), rt.size() as u64);

    rt.barrier();
    let mut mine = Vec::with_capacity(k as usize);
    for _ in 0..k {
        mine.push(fetch_and_add(&rt, fetch_add, 1, &replies, &reply_value));
    }

    // Send my values to rank 0 in medium messages; the last one says "done".
    let per_msg = rt.max_medium() / 8;
    let chunks: Vec<&[u64]> = mine.chunks(per_msg).collect();
    for (i, chunk) in chunks.iter().enumerate() {
        let bytes: Vec<u8> = chunk.iter().flat_map(|v| v.to_le_bytes()).collect();
        let last = (i + 1 == chunks.len()) as u64;
        rt.request_medium(0, report, &[last], &bytes)
            .expect("report");
    }
    if chunks.is_empty() {
        rt.request_medium(0, report, &[1], &[]).expect("report");
    }

    // The latency: the last rank alone, fetch&adding on rank 0 while the others wait (a
    // round trip between two ranks; with one rank, rank 0 to itself), in ns per operation.
    rt.barrier();
    let timer = p as usize - 1;
    if me == timer {
        let n = k.clamp(1, 10_000);
        let t0 = Instant::now();
        for _ in 0..n {
            // Adds 0: the counter the check below reads stays P·K.
            fetch_and_add(&rt, fetch_add, 0, &replies, &reply_value);
        }
        let ns = t0.elapsed().as_nanos() as u64 / n;
        rt.request_short(0, timed, &[ns.max(1)]).expect("timed");
    }

    if me == 0 {
        rt.wait_until(|| reports.load(Ordering::Relaxed) == p);
        rt.wait_until(|| latency.load(Ordering::Acquire) != 0);
        let mut all = seen.lock().unwrap().clone();
        all.sort_unstable();
        let total = counter.load(Ordering::Relaxed);
        let distinct = all.iter().enumerate().all(|(i, &v)| v == i as u64);
        println!(
            "fetch_add: {p} ranks x {k} increments: counter = {total} (expected {}), {} values \
             returned, all distinct and covering 0..{}: {}",
            p * k,
            all.len(),
            p * k,
            if distinct && all.len() as u64 == p * k {
                "yes"
            } else {
                "NO"
            }
        );
        println!(
            "fetch_add: round trip rank {timer} to rank 0: {} ns per fetch&add",
            latency.load(Ordering::Relaxed)
        );
        if total != p * k || !distinct || all.len() as u64 != p * k {
            eprintln!("fetch_add: FAILED");
            std::process::exit(1);
        }
    }
    rt.barrier();
}

/// One fetch&add of `add` on rank 0's counter; returns the old value.
fn fetch_and_add(
    rt: &Runtime,
    fetch_add: volley::RequestHandler,
    add: u64,
    replies: &AtomicU64,
    reply_value: &AtomicU64,
) -> u64 {
    let before = replies.load(Ordering::Acquire);
    rt.request_short(0, fetch_add, &[add]).expect("request");
    rt.wait_until(|| replies.load(Ordering::Acquire) > before);
    reply_value.load(Ordering::Relaxed)
}

/// This process's rank as its launcher tells it, for a message before the runtime exists.
fn rank_from_env() -> String {
    volley::bootstrap::JobInfo::from_env().map_or_else(|_| "?".into(), |j| j.rank.to_string())
}
