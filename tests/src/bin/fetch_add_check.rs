//! Fetch-and-add on one counter through request/reply: `fetch_add_check [K] [WINDOW]`.
//!
//! (Named `fetch_add_check` because the examples package has a `fetch_add` binary and the two
//! would collide in `target/<profile>/`.)
//!
//! Every rank sends K (default 1000) increment requests to rank 0, at most WINDOW outstanding
//! (default 0: unlimited, the sends block on ring credit). Rank 0's request handler does the
//! read-modify-write and replies with the old value. Each rank records the values it got (they
//! must increase, since one rank's requests are handled in order), then sends them to rank 0 in
//! medium messages of at most `max_medium()` bytes. Rank 0 checks that the counter ends at P·K
//! and that the values returned to all ranks are exactly {0, …, P·K−1}, each once.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use volley::Runtime;
use volley_tests::{arg_u64, fail, join};

#[derive(Default)]
struct Collected {
    /// seen[v]: value v was reported by some rank.
    seen: Vec<bool>,
    received: u64,
    /// Values reported twice or out of range: (value, reporting rank).
    bad: Vec<(u64, usize)>,
}

fn main() {
    let k = arg_u64(0, 1000);
    let window = arg_u64(1, 0);

    let counter = Arc::new(AtomicU64::new(0));
    let mine = Arc::new(Mutex::new(Vec::<u64>::new()));
    let collected = Arc::new(Mutex::new(Collected::default()));

    let mut b = Runtime::builder();
    let got = {
        let mine = mine.clone();
        b.reply_handler("fadd-old", move |m| {
            let mut mine = mine.lock().unwrap();
            let (old, tag) = (m.arg(0), m.arg(1));
            assert_eq!(
                tag,
                mine.len() as u64,
                "fetch_add: reply to request {tag} arrived when {} was expected",
                mine.len()
            );
            if let Some(&last) = mine.last() {
                assert!(
                    old > last,
                    "fetch_add: old value {old} after {last}: rank 0 handled this rank's \
                     requests out of order or returned a stale value"
                );
            }
            mine.push(old);
        })
    };
    let fadd = {
        let counter = counter.clone();
        b.request_handler("fadd", move |m, token| {
            let old = counter.load(Ordering::Relaxed);
            counter.store(old + m.arg(0), Ordering::Relaxed);
            token
                .reply_short(got, &[old, m.arg(1)])
                .expect("fetch_add: reply_short failed");
        })
    };
    let report = {
        let collected = collected.clone();
        b.request_handler("fadd-report", move |m, _token| {
            let mut c = collected.lock().unwrap();
            let payload = m.payload();
            assert_eq!(payload.len() % 8, 0, "fetch_add: report of odd length");
            assert_eq!(
                payload.len() as u64,
                m.arg(0) * 8,
                "fetch_add: report length disagrees with its count"
            );
            for chunk in payload.chunks_exact(8) {
                let v = u64::from_le_bytes(chunk.try_into().unwrap());
                match c.seen.get(v as usize) {
                    Some(false) => c.seen[v as usize] = true,
                    _ => c.bad.push((v, m.src())),
                }
                c.received += 1;
            }
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());
    let total = k * size as u64;
    if rank == 0 {
        collected.lock().unwrap().seen = vec![false; total as usize];
    }

    for i in 0..k {
        if window > 0 && i >= window {
            let need = (i - window + 1) as usize;
            rt.wait_until(|| mine.lock().unwrap().len() >= need);
        }
        rt.request_short(0, fadd, &[1, i])
            .expect("fetch_add: request_short failed");
    }
    rt.wait_until(|| mine.lock().unwrap().len() as u64 >= k);

    // Report the values to rank 0 in chunks that fit a medium message.
    let values = std::mem::take(&mut *mine.lock().unwrap());
    let per_chunk = rt.max_medium() / 8;
    let mut bytes = Vec::with_capacity(rt.max_medium());
    for chunk in values.chunks(per_chunk) {
        bytes.clear();
        for v in chunk {
            bytes.extend_from_slice(&v.to_le_bytes());
        }
        rt.request_medium(0, report, &[chunk.len() as u64], &bytes)
            .expect("fetch_add: request_medium failed");
    }

    if rank == 0 {
        rt.wait_until(|| collected.lock().unwrap().received >= total);
        let c = collected.lock().unwrap();
        let final_value = counter.load(Ordering::Relaxed);
        if final_value != total {
            fail(
                rank,
                1,
                &format!("counter ended at {final_value}, expected {size} x {k} = {total}"),
            );
        }
        if !c.bad.is_empty() {
            fail(
                rank,
                1,
                &format!(
                    "{} returned values were duplicates or out of range, e.g. (value, rank) {:?}",
                    c.bad.len(),
                    &c.bad[..c.bad.len().min(10)]
                ),
            );
        }
        if c.received != total {
            fail(
                rank,
                1,
                &format!("{} values reported, expected {total}", c.received),
            );
        }
        if let Some(v) = c.seen.iter().position(|s| !s) {
            fail(rank, 1, &format!("value {v} was never returned"));
        }
        println!(
            "fetch_add: {size} ranks x {k} increments: counter = {final_value}, returned values \
             are exactly 0..{total}"
        );
    }
    rt.barrier();
    let s = rt.stats();
    if s.dropped != 0 {
        fail(rank, 1, &format!("{} frames dropped", s.dropped));
    }
}
