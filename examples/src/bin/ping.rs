//! The smallest round trip: `ping [ROUNDS]` sends ROUNDS (default 1,000,000) short requests from
//! rank 0 to rank 1, each answered by a short reply, and prints the mean round trip. Started
//! bare (one rank), rank 0 pings itself through its loopback rings, which measures the
//! runtime's own path with no cache line moving between cores: `scripts/count-instructions`
//! counts that path's instructions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;

fn main() {
    let rounds: u64 = match std::env::args().nth(1) {
        None => 1_000_000,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("ping: ROUNDS must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };
    let mut b = Runtime::builder();
    // Handlers must be Send + Sync, so the count of replies is an atomic; handlers run one at
    // a time, so a plain load and store counts exactly (no locked instruction).
    let pongs = Arc::new(AtomicU64::new(0));
    let seen = pongs.clone();
    let pong = b.reply_handler("pong", move |_| {
        seen.store(seen.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    });
    let ping = b.request_handler("ping", move |m, token| {
        token.reply_short(pong, m.args()).expect("reply");
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("ping: {e}");
        std::process::exit(1)
    });
    let target = if rt.size() > 1 { 1 } else { 0 };
    if rt.rank() == 0 {
        let t0 = Instant::now();
        for i in 0..rounds {
            rt.request_short(target, ping, &[i]).expect("ping");
            rt.wait_until(|| pongs.load(Ordering::Relaxed) > i);
        }
        let ns = t0.elapsed().as_nanos() as f64 / rounds.max(1) as f64;
        println!("ping: {rounds} round trips between ranks 0 and {target}: {ns:.1} ns each");
    }
    rt.barrier();
}
