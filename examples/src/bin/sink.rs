//! A one-way flood: `sink [COUNT]` streams COUNT (default 1,000,000) argument-less requests from
//! rank 0 to rank 1, whose handler only counts them, and prints the time per message. Started
//! bare (one rank), rank 0 floods itself through its loopback ring, so each message costs one
//! send and one handler on the same thread: `scripts/count-instructions` counts that.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;

fn main() {
    let count: u64 = match std::env::args().nth(1) {
        None => 1_000_000,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("sink: COUNT must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };
    let mut b = Runtime::builder();
    // Handlers run one at a time, so a plain load and store counts exactly.
    let sunk = Arc::new(AtomicU64::new(0));
    let seen = sunk.clone();
    let sink = b.request_handler("sink", move |_, _| {
        seen.store(seen.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("sink: {e}");
        std::process::exit(1)
    });
    let target = if rt.size() > 1 { 1 } else { 0 };
    if rt.rank() == 0 {
        let t0 = Instant::now();
        for _ in 0..count {
            rt.request_short(target, sink, &[]).expect("sink");
        }
        if target == 0 {
            rt.wait_until(|| sunk.load(Ordering::Relaxed) >= count);
        }
        let ns = t0.elapsed().as_nanos() as f64 / count.max(1) as f64;
        println!("sink: {count} requests from rank 0 to rank {target}: {ns:.1} ns each to send");
    }
    // Rank 1 serves until every request was handled: the barrier comes after them (rings are
    // FIFO), and it checks the count.
    rt.barrier();
    if rt.rank() == target && sunk.load(Ordering::Relaxed) != count {
        eprintln!(
            "sink: {} of {count} requests handled",
            sunk.load(Ordering::Relaxed)
        );
        std::process::exit(1);
    }
}
