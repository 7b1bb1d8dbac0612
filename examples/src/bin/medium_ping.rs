//! Medium round trips of 64 KiB whose payload is read from several offsets within a page:
//! `medium_ping [BATCHES]` runs BATCHES (default 15) batches of 200 round trips from rank 0 to
//! rank 1 (to itself when started bare, through its loopback rings) per offset, each request's
//! payload echoed back in a medium reply, and prints the fastest and the median batch's round
//! trip. Offsets just below a page boundary are where a copy into a page-aligned buffer would
//! put its destination 1 to 31 bytes above its source modulo 4 KiB, which this machine's
//! memcpy runs about 20 times slower (docs/journal.md).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;

/// Round trips per timed batch.
const BATCH: u64 = 200;
/// Payload bytes: the largest medium over shared memory.
const BYTES: usize = 64 << 10;

fn main() {
    let batches: usize = match std::env::args().nth(1) {
        None => 15,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("medium_ping: BATCHES must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };
    let mut b = Runtime::builder();
    let pongs = Arc::new(AtomicU64::new(0));
    let seen = pongs.clone();
    let pong = b.reply_handler("pong", move |_| {
        seen.store(seen.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    });
    let ping = b.request_handler("ping", move |m, token| {
        token.reply_medium(pong, &[], m.payload()).expect("reply");
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("medium_ping: {e}");
        std::process::exit(1)
    });
    let target = if rt.size() > 1 { 1 } else { 0 };
    if rt.rank() == 0 {
        let buf = vec![7u8; BYTES + 8192];
        let base = buf.as_ptr().align_offset(4096);
        let mut sent = 0u64;
        for at in [0usize, 16, 2048, 4064, 4080, 4088] {
            let src = &buf[base + at..base + at + BYTES];
            let mut times = Vec::new();
            for _ in 0..batches.max(1) {
                let t0 = Instant::now();
                for _ in 0..BATCH {
                    rt.request_medium(target, ping, &[], src).expect("ping");
                    sent += 1;
                    rt.wait_until(|| pongs.load(Ordering::Relaxed) >= sent);
                }
                times.push(t0.elapsed().as_nanos() as f64 / BATCH as f64);
            }
            times.sort_by(f64::total_cmp);
            println!(
                "medium_ping: 64 KiB from page offset {at:>4}: fastest batch {:.0} ns, median {:.0} ns",
                times[0],
                times[times.len() / 2]
            );
        }
    }
    rt.barrier();
}
