//! Statistics counters after a known exchange: `stats [NS NM NL]`.
//!
//! Checks that a fresh runtime's counters are zero and that refused sends count nothing. Then
//! every rank sends every rank (itself included) NS short, NM medium (inline and pooled sizes)
//! and NL long requests (defaults 100, 50, 20); each handler replies with a message of the same
//! class. After all replies and one barrier, each rank checks its counters exactly:
//! sent and handled, per channel and class, are P·NS, P·NM, P·NL; nothing dropped; barrier
//! messages ⌈log2 P⌉; handler nesting 1 or 2. With `VOLLEY_STATS=1` the runtime prints the
//! counters at exit, which the integration test checks as well.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use volley::transport::Channel;
use volley::{MessageClass, RequestHandler, Runtime, Stats};
use volley_tests::{arg_u64, fail, join};

/// Bytes of each long payload.
const LONG_BYTES: usize = 100;

fn medium_len(i: u64) -> usize {
    // Alternate between inline (small) and pooled (large) payloads.
    if i & 1 == 0 {
        (i as usize * 3) % 150
    } else {
        1000 + i as usize
    }
}

fn main() {
    let ns = arg_u64(0, 100);
    let nm = arg_u64(1, 50);
    let nl = arg_u64(2, 20);
    let replies = Arc::new(AtomicU64::new(0));
    // This rank (for the long reply offsets), set before build: with a progress thread,
    // handlers may run as soon as build returns.
    let me = Arc::new(OnceLock::<usize>::new());
    me.set(volley_tests::job().rank).unwrap();

    let mut b = Runtime::builder();
    let rep = {
        let replies = replies.clone();
        b.reply_handler("stats-reply", move |_| {
            replies.fetch_add(1, Ordering::Relaxed);
        })
    };
    let req = {
        let me = me.clone();
        b.request_handler("stats-request", move |m, token| {
            let me = *me.get().unwrap();
            let i = m.arg(0);
            match m.class() {
                MessageClass::Short => token.reply_short(rep, &[i]),
                MessageClass::Medium => token.reply_medium(rep, &[i], m.payload()),
                MessageClass::Long => {
                    // Reply-longs land in the requester's segment, in a slot per (replier, i).
                    let at = (me * nl as usize + i as usize) * LONG_BYTES;
                    token.reply_long(rep, &[i], m.payload(), at)
                }
            }
            .expect("stats: reply failed");
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());
    let p = size as u64;
    // The transport's name and the polling interval are settings, not counters.
    let counters = |mut s: Stats| {
        s.network.transport = "";
        s.network.interval = 0;
        s
    };

    if counters(rt.stats()) != Stats::default() {
        fail(
            rank,
            1,
            &format!("fresh runtime has non-zero stats: {}", rt.stats()),
        );
    }
    // Refused sends count nothing.
    assert!(rt
        .request_short(0, RequestHandler::from_index(99), &[])
        .is_err());
    assert!(rt.request_short(size, req, &[]).is_err());
    assert!(rt.request_short(0, req, &[0; 17]).is_err());
    if counters(rt.stats()) != Stats::default() {
        fail(
            rank,
            1,
            &format!("refused sends changed the stats: {}", rt.stats()),
        );
    }

    // Requests land at the target in a slot per (requester, i), after the reply slots.
    let req_base = size * nl as usize * LONG_BYTES;
    if req_base * 2 > rt.segment_len() {
        fail(rank, 2, "segment too small for this many long messages");
    }
    let payload: Vec<u8> = (0..2000u32).map(|x| x as u8).collect();
    for dst in 0..size {
        for i in 0..ns {
            rt.request_short(dst, req, &[i]).unwrap();
        }
        for i in 0..nm {
            rt.request_medium(dst, req, &[i], &payload[..medium_len(i)])
                .unwrap();
        }
        for i in 0..nl {
            let at = req_base + (rank * nl as usize + i as usize) * LONG_BYTES;
            rt.request_long(dst, req, &[i], &payload[..LONG_BYTES], at)
                .unwrap();
        }
    }
    let expect_replies = p * (ns + nm + nl);
    rt.wait_until(|| replies.load(Ordering::Relaxed) >= expect_replies);
    rt.barrier();

    let s = rt.stats();
    let grid = [[p * ns, p * nm, p * nl]; 2];
    let rounds = (usize::BITS - (size - 1).leading_zeros()) as u64; // ceil(log2 size)
    let mut problems = Vec::new();
    if replies.load(Ordering::Relaxed) != expect_replies {
        problems.push(format!(
            "{} replies, expected {expect_replies}",
            replies.load(Ordering::Relaxed)
        ));
    }
    if s.sent != grid {
        problems.push(format!("sent {:?}, expected {grid:?}", s.sent));
    }
    if s.handled != grid {
        problems.push(format!("handled {:?}, expected {grid:?}", s.handled));
    }
    if s.sent_on(Channel::Request) != p * (ns + nm + nl)
        || s.handled_on(Channel::Reply) != expect_replies
    {
        problems.push("per-channel totals disagree".into());
    }
    if s.dropped != 0 {
        problems.push(format!("{} dropped", s.dropped));
    }
    if s.system_sent != rounds {
        problems.push(format!(
            "{} system messages, expected {rounds} (one barrier of {size} ranks)",
            s.system_sent
        ));
    }
    if !(1..=2).contains(&s.max_nesting) {
        problems.push(format!("max nesting {}, expected 1 or 2", s.max_nesting));
    }
    if s.polls == 0 || s.empty_polls > s.polls {
        problems.push(format!("polls {} empty {}", s.polls, s.empty_polls));
    }
    if !problems.is_empty() {
        fail(rank, 1, &format!("{}; stats: {s}", problems.join("; ")));
    }
    println!("stats: rank {rank} ok: {s}");
}
