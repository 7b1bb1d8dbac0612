//! The round-trip loops of `volley bench splitc` under `proc`, one at a time:
//! `splitc_loop am|read|write [ROUNDS [WORDS]]` runs ROUNDS (default 1,000,000) null AM round
//! trips, `read`s or `write`s of a `u64`, as the benchmark's loops do, from rank 0 to rank 1,
//! cycling through WORDS words (default 65,536, as the benchmark). Started
//! bare (one rank), rank 0 makes them to itself through its loopback rings (the global layer
//! told to use Active Messages for its own memory), so that one thread runs both sides' path:
//! `scripts/count-global-instructions` counts them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;
use volley_global::{Global, Layout, Strategy};

fn main() {
    let usage = || -> ! {
        eprintln!("usage: splitc_loop am|read|write [ROUNDS [WORDS]]");
        std::process::exit(2)
    };
    let mode = std::env::args().nth(1).unwrap_or_else(|| usage());
    let rounds: usize = match std::env::args().nth(2) {
        None => 1_000_000,
        Some(a) => a.parse().unwrap_or_else(|_| usage()),
    };
    // The benchmark's null AM: a request without arguments, answered by a reply that counts.
    let pongs = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let pc = pongs.clone();
    let pong = b.reply_handler("bench.splitc.pong", move |_| {
        pc.fetch_add(1, Ordering::Release);
    });
    let ping = b.request_handler("bench.splitc.ping", move |_, tok| {
        let _ = tok.reply_short(pong, &[]);
    });
    let setup = Global::register_with(&mut b, Strategy::Proc);
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("splitc_loop: {e}");
        std::process::exit(1)
    });
    let g = setup.attach(&rt).expect("attach");
    g.set_loopback_am(true);
    let target = if g.procs() > 1 { 1 } else { 0 };
    let words: usize = match std::env::args().nth(3) {
        None => 1 << 16,
        Some(a) => a.parse().ok().filter(|&w| w > 0).unwrap_or_else(|| usage()),
    };
    let w = g
        .all_spread_alloc::<u64>(words * g.procs(), Layout::Blocked)
        .expect("alloc");
    if g.my_proc() == 0 {
        let t = Instant::now();
        match mode.as_str() {
            "am" => {
                for i in 0..rounds as u64 {
                    rt.request_short(target, ping, &[]).expect("ping");
                    rt.wait_on(target, || pongs.load(Ordering::Acquire) > i);
                }
            }
            "read" => {
                for i in 0..rounds {
                    std::hint::black_box(g.read(w.ptr_on(target, i % words)).expect("read"));
                }
            }
            "write" => {
                for i in 0..rounds {
                    g.write(w.ptr_on(target, i % words), i as u64)
                        .expect("write");
                }
            }
            _ => usage(),
        }
        let ns = t.elapsed().as_nanos() as f64 / rounds.max(1) as f64;
        println!("splitc_loop {mode}: {rounds} round trips to rank {target}: {ns:.1} ns each");
    }
    g.barrier().expect("barrier");
}
