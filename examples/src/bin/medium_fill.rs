//! A medium message written in the runtime's own buffer against one written in the program's
//! buffer and copied (seed 000 requirement 27): `medium_fill [BATCHES]` streams BATCHES
//! (default 21) batches of 500 one-way medium requests from rank 0 to rank 1 (to itself when
//! started bare) at 4 KiB and 64 KiB, each payload produced afresh (a fill of the whole
//! payload with one byte), alternating per batch between
//! - `copy`: the program fills its own buffer, `request_medium` copies it;
//! - `in place`: `request_medium_with` hands the program the runtime's buffer to fill;
//!
//! and, as the floor measured in the same run, the fill of the program's buffer alone. Each
//! batch ends when rank 1 has run every handler (a reply to the last request). Prints the
//! median batch per message for each.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;

/// Messages per timed batch.
const BATCH: u64 = 500;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let batches: usize = match std::env::args().nth(1) {
        None => 21,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("medium_fill: BATCHES must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };
    let mut b = Runtime::builder();
    let acks = Arc::new(AtomicU64::new(0));
    let seen = acks.clone();
    let ack = b.reply_handler("ack", move |_| {
        seen.fetch_add(1, Ordering::Relaxed);
    });
    // The handler reads one byte per cache line, as a consumer of the data would at least.
    let take = b.request_handler("take", move |m, token| {
        let sum: u64 = m.payload().iter().step_by(64).map(|&b| u64::from(b)).sum();
        std::hint::black_box(sum);
        if m.arg(0) == 1 {
            token.reply_short(ack, &[]).expect("ack");
        }
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("medium_fill: {e}");
        std::process::exit(1)
    });
    let target = if rt.size() > 1 { 1 } else { 0 };
    if rt.rank() == 0 {
        let mut own = vec![0u8; 64 << 10];
        let mut acked = 0;
        for bytes in [4usize << 10, 64 << 10] {
            let (mut copy, mut in_place, mut floor) = (Vec::new(), Vec::new(), Vec::new());
            for batch in 0..batches.max(1) * 2 {
                let with = batch % 2 == 1;
                let t0 = Instant::now();
                for i in 0..BATCH {
                    let last = u64::from(i == BATCH - 1);
                    let v = i as u8;
                    if with {
                        rt.request_medium_with(target, take, &[last], bytes, |buf| buf.fill(v))
                            .expect("request_medium_with");
                    } else {
                        own[..bytes].fill(v);
                        rt.request_medium(target, take, &[last], &own[..bytes])
                            .expect("request_medium");
                    }
                }
                acked += 1;
                rt.wait_until(|| acks.load(Ordering::Relaxed) >= acked);
                let ns = t0.elapsed().as_nanos() as f64 / BATCH as f64;
                if with { &mut in_place } else { &mut copy }.push(ns);
                // The floor: producing the payload once, in the program's buffer.
                let t0 = Instant::now();
                for i in 0..BATCH {
                    own[..bytes].fill(i as u8);
                    std::hint::black_box(&own);
                }
                floor.push(t0.elapsed().as_nanos() as f64 / BATCH as f64);
            }
            let (c, w, f) = (median(copy), median(in_place), median(floor));
            println!(
                "medium_fill: {:>2} KiB: copy {c:.0} ns/msg, in place {w:.0} ns/msg \
                 (in place / copy {:.2}); fill alone {f:.0} ns (floor); {batches} batches of \
                 {BATCH} each",
                bytes >> 10,
                w / c
            );
        }
    }
    rt.barrier();
}
