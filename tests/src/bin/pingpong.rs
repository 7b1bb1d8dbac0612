//! Ping-pong between ranks 0 and 1: `pingpong [ROUNDS] [WINDOW]`.
//!
//! Rank 0 sends ROUNDS (default 1,000,000) short requests `[i, v(i)]` to rank 1, at most WINDOW
//! (default 1: strict ping-pong) outstanding. Rank 1's handler checks that request `i` is the
//! next one expected and replies `[i, f(i, v(i))]`; rank 0's reply handler checks that the reply
//! is the next one expected and carries the right value. So every request gets exactly one
//! reply, in order, none lost or duplicated. Other ranks idle in the final barrier. Started bare
//! (one rank) rank 0 plays both sides through the loopback rings.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::Runtime;
use volley_tests::{arg_u64, fail, join, mix};

fn value(i: u64) -> u64 {
    mix(i ^ 0x5151_5151)
}

fn answer(i: u64, v: u64) -> u64 {
    mix(v.rotate_left(17) ^ i.wrapping_mul(3))
}

fn main() {
    let rounds = arg_u64(0, 1_000_000);
    let window = arg_u64(1, 1).max(1);

    let replies = Arc::new(AtomicU64::new(0));
    let handled = Arc::new(AtomicU64::new(0));

    let mut b = Runtime::builder();
    let pong = {
        let replies = replies.clone();
        b.reply_handler("pong", move |m| {
            let expect = replies.load(Ordering::Relaxed);
            let (i, got) = (m.arg(0), m.arg(1));
            assert_eq!(
                m.args().len(),
                2,
                "pingpong: reply {expect} carries {} arguments, expected 2",
                m.args().len()
            );
            assert_eq!(
                i, expect,
                "pingpong: reply for request {i} arrived when reply {expect} was expected \
                 (lost, duplicated or reordered)"
            );
            assert_eq!(
                got,
                answer(i, value(i)),
                "pingpong: reply {i} carries a wrong value"
            );
            replies.store(expect + 1, Ordering::Relaxed);
        })
    };
    let ping = {
        let handled = handled.clone();
        b.request_handler("ping", move |m, token| {
            let expect = handled.load(Ordering::Relaxed);
            let (i, v) = (m.arg(0), m.arg(1));
            assert_eq!(
                i, expect,
                "pingpong: request {i} arrived when request {expect} was expected \
                 (lost, duplicated or reordered)"
            );
            assert_eq!(v, value(i), "pingpong: request {i} carries a wrong value");
            handled.store(expect + 1, Ordering::Relaxed);
            token
                .reply_short(pong, &[i, answer(i, v)])
                .expect("pingpong: reply_short failed");
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());
    let partner = if size > 1 { 1 } else { 0 };

    if rank == 0 {
        let start = Instant::now();
        for i in 0..rounds {
            if i >= window {
                let need = i - window + 1;
                rt.wait_until(|| replies.load(Ordering::Relaxed) >= need);
            }
            rt.request_short(partner, ping, &[i, value(i)])
                .expect("pingpong: request_short failed");
        }
        rt.wait_until(|| replies.load(Ordering::Relaxed) >= rounds);
        let secs = start.elapsed().as_secs_f64();
        println!(
            "pingpong: {rounds} round trips (window {window}) between ranks 0 and {partner} in \
             {secs:.3} s: {:.3} us per round trip",
            secs * 1e6 / rounds.max(1) as f64
        );
    }
    rt.barrier();
    if rank == 0 && replies.load(Ordering::Relaxed) != rounds {
        fail(
            rank,
            1,
            &format!(
                "received {} replies, expected {rounds}",
                replies.load(Ordering::Relaxed)
            ),
        );
    }
    if rank == partner && handled.load(Ordering::Relaxed) != rounds {
        fail(
            rank,
            1,
            &format!(
                "handled {} requests, expected {rounds}",
                handled.load(Ordering::Relaxed)
            ),
        );
    }
    if rank != 0 && rank != partner && handled.load(Ordering::Relaxed) != 0 {
        fail(rank, 1, "an idle rank handled a ping");
    }
    let s = rt.stats();
    if s.dropped != 0 {
        fail(rank, 1, &format!("{} frames dropped", s.dropped));
    }
    drop(rt);
}
