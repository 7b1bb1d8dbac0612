//! All-to-all request flood: `flood [K] [short|medium]`.
//!
//! Every rank sends K (default 20,000) short requests to every rank, itself included,
//! round-robin over the destinations, without waiting; each request handler replies. Request
//! and reply `k` from one rank to another carry `k` and 1..16 check words derived from
//! (source, destination, k), so the frames vary between one and three ring slots and wrap the
//! ring at every possible position (run with `VOLLEY_RING_SLOTS=8`, the smallest ring, to make
//! nearly every send block).
//!
//! Checks: each (source, destination) ring is FIFO, so every handler sees `k` in order from each
//! source, and every reply handler sees `k` in order from each destination; every check word
//! matches; at the end every rank has received exactly K replies from every destination and
//! handled exactly K requests from every source.
//!
//! With `medium`, requests and replies are medium messages whose payloads (0 to ~7 KB, inline
//! in the ring or through the medium buffers) are checked byte by byte as well.

use std::sync::Arc;
use std::time::Instant;
use volley::{MessageClass, Runtime};
use volley_tests::{arg_str, arg_u64, check_pattern, fail, fill_pattern, join, mix, PerRank};

/// Check word `j` of message `k` from `src` to `dst` on channel `ch`.
fn word(ch: u64, src: usize, dst: usize, k: u64, j: usize) -> u64 {
    mix((ch << 62) ^ ((src as u64) << 48) ^ ((dst as u64) << 32) ^ k ^ ((j as u64) << 24))
}

fn request_args(src: usize, dst: usize, k: u64) -> Vec<u64> {
    let extra = 1 + (k as usize + src) % 15;
    std::iter::once(k)
        .chain((1..=extra).map(|j| word(0, src, dst, k, j)))
        .collect()
}

fn reply_args(src: usize, dst: usize, k: u64) -> Vec<u64> {
    let extra = (k as usize * 7 + dst) % 16;
    std::iter::once(k)
        .chain((1..=extra).map(|j| word(1, src, dst, k, j)))
        .collect()
}

/// Payload length of medium message `k` from `src` to `dst` on channel `ch`.
fn payload_len(ch: u64, src: usize, dst: usize, k: u64) -> usize {
    let x = word(ch, src, dst, k, 99);
    if x & 15 == 0 {
        4000 + (x >> 8) as usize % 3000 // through a medium buffer
    } else {
        (x >> 8) as usize % 400 // mostly inline in the ring
    }
}

fn payload(ch: u64, src: usize, dst: usize, k: u64) -> Vec<u8> {
    let mut v = vec![0u8; payload_len(ch, src, dst, k)];
    fill_pattern(word(ch, src, dst, k, 100), &mut v);
    v
}

fn check_payload(m: &volley::Message<'_>, ch: u64, src: usize, dst: usize, k: u64) {
    let what = if ch == 0 { "request" } else { "reply" };
    match m.class() {
        MessageClass::Short => return,
        MessageClass::Medium => {}
        MessageClass::Long => panic!("flood: unexpected long {what}"),
    }
    let len = payload_len(ch, src, dst, k);
    assert_eq!(
        m.payload().len(),
        len,
        "flood: {what} {k} from {src} to {dst}: payload of {} bytes, expected {len}",
        m.payload().len()
    );
    if let Some(pos) = check_pattern(word(ch, src, dst, k, 100), m.payload()) {
        panic!("flood: {what} {k} from {src} to {dst}: payload byte {pos} of {len} is corrupt");
    }
}

fn main() {
    let k_per_pair = arg_u64(0, 20_000);
    let medium = match arg_str(1).as_deref() {
        None | Some("short") => false,
        Some("medium") => true,
        Some(other) => fail(
            0,
            2,
            &format!("unknown mode {other:?}; expected short or medium"),
        ),
    };
    // Set before build: with a progress thread, handlers may run as soon as build returns.
    let me = Arc::new(std::sync::OnceLock::<usize>::new());
    me.set(volley_tests::job().rank).unwrap();
    let handled = Arc::new(PerRank::default());
    let replies = Arc::new(PerRank::default());

    let mut b = Runtime::builder();
    let ack = {
        let (replies, me) = (replies.clone(), me.clone());
        b.reply_handler("flood-ack", move |m| {
            let me = *me.get().unwrap();
            let dst = m.src();
            let expect = replies.get(dst);
            let k = m.arg(0);
            assert_eq!(
                k, expect,
                "flood: rank {me}: reply {k} from rank {dst} arrived when {expect} was expected \
                 (lost, duplicated or reordered)"
            );
            assert_eq!(
                m.args(),
                &reply_args(me, dst, k)[..],
                "flood: rank {me}: reply {k} from rank {dst} has wrong arguments"
            );
            check_payload(m, 1, me, dst, k);
            replies.bump(dst);
        })
    };
    let req = {
        let (handled, me) = (handled.clone(), me.clone());
        b.request_handler("flood-req", move |m, token| {
            let me = *me.get().unwrap();
            let src = m.src();
            let expect = handled.get(src);
            let k = m.arg(0);
            assert_eq!(
                k, expect,
                "flood: rank {me}: request {k} from rank {src} arrived when {expect} was \
                 expected (lost, duplicated or reordered)"
            );
            assert_eq!(
                m.args(),
                &request_args(src, me, k)[..],
                "flood: rank {me}: request {k} from rank {src} has wrong arguments"
            );
            check_payload(m, 0, src, me, k);
            assert_eq!(token.requester(), src);
            handled.bump(src);
            if m.class() == MessageClass::Medium {
                token
                    .reply_medium(ack, &reply_args(src, me, k), &payload(1, src, me, k))
                    .expect("flood: reply_medium failed");
            } else {
                token
                    .reply_short(ack, &reply_args(src, me, k))
                    .expect("flood: reply_short failed");
            }
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());
    handled.init(size);
    replies.init(size);

    rt.barrier();
    let start = Instant::now();
    for k in 0..k_per_pair {
        for d in 1..=size {
            let dst = (rank + d) % size;
            let args = request_args(rank, dst, k);
            if medium {
                rt.request_medium(dst, req, &args, &payload(0, rank, dst, k))
                    .expect("flood: request_medium failed");
            } else {
                rt.request_short(dst, req, &args)
                    .expect("flood: request_short failed");
            }
        }
    }
    let total = k_per_pair * size as u64;
    rt.wait_until(|| (0..size).map(|d| replies.get(d)).sum::<u64>() >= total);
    rt.barrier();
    let secs = start.elapsed().as_secs_f64();

    let got = replies.values();
    let seen = handled.values();
    if got.iter().any(|&n| n != k_per_pair) {
        fail(
            rank,
            1,
            &format!("replies per destination {got:?}, expected {k_per_pair} each"),
        );
    }
    if seen.iter().any(|&n| n != k_per_pair) {
        fail(
            rank,
            1,
            &format!("requests handled per source {seen:?}, expected {k_per_pair} each"),
        );
    }
    let s = rt.stats();
    if s.dropped != 0 {
        fail(rank, 1, &format!("{} frames dropped", s.dropped));
    }
    let class = medium as usize;
    if s.sent[0][class] != total || s.handled[0][class] != total || s.handled[1][class] != total {
        fail(rank, 1, &format!("stats disagree with the counts: {s}"));
    }
    if rank == 0 {
        println!(
            "flood: {size} ranks x {size} destinations x {k_per_pair} {} requests in {secs:.3} s \
             ({:.0} round trips/s per rank); blocked sends on rank 0: {}",
            if medium { "medium" } else { "short" },
            total as f64 / secs,
            s.blocked_sends
        );
    }
}
