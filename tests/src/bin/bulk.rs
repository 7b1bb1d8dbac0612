//! A long message larger than one network message, with short traffic to a third rank while
//! it is in flight: `bulk [MIB]` on 3 ranks, each on a node of its own.
//!
//! Rank 0 sends rank 1 a long request of MIB MiB (default 16) at an odd offset, then at once
//! 50 short requests and 5 mediums to rank 2, then one short request to rank 1. Rank 1's long
//! handler checks its offset, length and every byte and answers with a checksum; its short
//! handler checks that the long one ran before it (messages of a pair stay in order, however
//! large). Rank 2 echoes the arguments and payloads, which rank 0 checks. Exits 0 when every
//! answer came back intact; prints the order in which rank 0 saw the last answers.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use volley::Runtime;
use volley_tests::{arg_u64, check_pattern, checksum, fail, fill_pattern, join, mix};

/// Where the long payload lands: odd, so parts are not aligned either.
const OFFSET: usize = 4097;
const SEED: u64 = 0xb01c;
const SHORTS: u64 = 50;
const MEDIUMS: u64 = 5;
const MEDIUM_LEN: usize = 3000;

fn main() {
    let size = arg_u64(0, 16) as usize * (1 << 20);
    let long_ok = Arc::new(AtomicU64::new(0));
    let long_ran = Arc::new(AtomicBool::new(false));
    let echoes = Arc::new(AtomicU64::new(0));
    let after_ok = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    b.segment_bytes(size + (1 << 20));

    let lo = long_ok.clone();
    let long_done = b.reply_handler("long_done", move |m| {
        let mut expect = vec![0u8; size];
        fill_pattern(SEED, &mut expect);
        if m.arg(0) != checksum(&expect) {
            fail(0, 1, "the long message's checksum came back wrong");
        }
        lo.fetch_add(1, Ordering::Relaxed);
    });
    let lr = long_ran.clone();
    let long = b.request_handler("long", move |m, tok| {
        let p = m.payload();
        if m.segment_offset() != Some(OFFSET) || p.len() != size {
            fail(
                1,
                1,
                &format!("long at {:?}, {} bytes", m.segment_offset(), p.len()),
            );
        }
        if let Some(at) = check_pattern(SEED, p) {
            fail(1, 1, &format!("long payload wrong at byte {at} of {size}"));
        }
        lr.store(true, Ordering::Relaxed);
        tok.reply_short(long_done, &[checksum(p)]).expect("reply");
    });
    let ao = after_ok.clone();
    let after_done = b.reply_handler("after_done", move |_| {
        ao.fetch_add(1, Ordering::Relaxed);
    });
    let lr = long_ran.clone();
    let after = b.request_handler("after", move |_, tok| {
        if !lr.load(Ordering::Relaxed) {
            fail(1, 1, "a short request overtook the long one before it");
        }
        tok.reply_short(after_done, &[]).expect("reply");
    });
    let ec = echoes.clone();
    let echo_done = b.reply_handler("echo_done", move |m| {
        let i = m.arg(0);
        if m.arg(1) != mix(i) {
            fail(0, 1, &format!("echo {i}: argument came back wrong"));
        }
        let p = m.payload();
        if !p.is_empty() && check_pattern(mix(i), p).is_some() {
            fail(0, 1, &format!("echo {i}: payload came back wrong"));
        }
        ec.fetch_add(1, Ordering::Relaxed);
    });
    let echo = b.request_handler("echo", move |m, tok| {
        if m.payload().is_empty() {
            tok.reply_short(echo_done, m.args()).expect("reply");
        } else {
            tok.reply_medium(echo_done, m.args(), m.payload())
                .expect("reply");
        }
    });
    let rt = join(b);
    if rt.size() != 3 {
        fail(rt.rank(), 2, "bulk needs 3 ranks");
    }
    if rt.rank() == 0 {
        let mut payload = vec![0u8; size];
        fill_pattern(SEED, &mut payload);
        rt.request_long(1, long, &[], &payload, OFFSET)
            .expect("long");
        for i in 0..SHORTS {
            rt.request_short(2, echo, &[i, mix(i)]).expect("short");
        }
        for i in SHORTS..SHORTS + MEDIUMS {
            let mut p = vec![0u8; MEDIUM_LEN];
            fill_pattern(mix(i), &mut p);
            rt.request_medium(2, echo, &[i, mix(i)], &p)
                .expect("medium");
        }
        rt.request_short(1, after, &[]).expect("after");
        // Which finished first is up to the machine's timing: printed, not checked.
        let mut order = Vec::new();
        rt.wait_until(|| {
            if echoes.load(Ordering::Relaxed) == SHORTS + MEDIUMS && !order.contains(&"echoes") {
                order.push("echoes");
            }
            if long_ok.load(Ordering::Relaxed) == 1 && !order.contains(&"long") {
                order.push("long");
            }
            order.len() == 2 && after_ok.load(Ordering::Relaxed) == 1
        });
        println!(
            "bulk: {} MiB long intact, {} echoes from rank 2 intact, finished: {}",
            size >> 20,
            SHORTS + MEDIUMS,
            order.join(" then ")
        );
    }
    rt.barrier();
}
