//! Layer-owned medium buffers (seed 000 requirement 27): `request_medium_with` and
//! `reply_medium_with` write the payload in the runtime's own buffer. On 2 ranks, each sends
//! the other a medium request of every size from 0 to 300 bytes (across the inline limit),
//! then sizes up to the largest in steps with the edges (4095, 4096, 65535, 65536); the
//! target's handler checks every byte and replies, through `reply_medium_with`, with a
//! payload of the same size derived from it, which the requester's reply handler checks.
//! Bad input first: a bad rank, an unknown handler and one byte too many are refused as
//! `request_medium` refuses them, and `fill` never runs for them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use volley::am::Error;
use volley::{RequestHandler, Runtime};
use volley_tests::{fail, join};

/// Byte `k` of the request of size `len` from `src` (`reply` for its reply).
fn byte(src: usize, len: usize, k: usize, reply: bool) -> u8 {
    let x = (src as u64) << 40 ^ (len as u64) << 20 ^ k as u64 ^ u64::from(reply) << 60;
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

fn sizes(max: usize) -> Vec<usize> {
    let mut v: Vec<usize> = (0..=300).collect();
    v.extend((301..max).step_by(997));
    v.extend([4095, 4096, 4097, max - 1, max]);
    v.sort_unstable();
    v.dedup();
    v
}

fn main() {
    let bad = Arc::new(AtomicU64::new(0));
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let (bd, r) = (bad.clone(), replies.clone());
    let back = b.reply_handler("back", move |m| {
        let (me, len) = (m.arg(0) as usize, m.arg(1) as usize);
        let p = m.payload();
        if p.len() != len
            || p.iter()
                .enumerate()
                .any(|(k, &v)| v != byte(me, len, k, true))
        {
            bd.fetch_add(1, Ordering::Relaxed);
        }
        r.fetch_add(1, Ordering::Relaxed);
    });
    let bd = bad.clone();
    let check = b.request_handler("check", move |m, tok| {
        let (src, len) = (m.src(), m.arg(0) as usize);
        let p = m.payload();
        if p.len() != len
            || p.iter()
                .enumerate()
                .any(|(k, &v)| v != byte(src, len, k, false))
        {
            bd.fetch_add(1, Ordering::Relaxed);
        }
        tok.reply_medium_with(back, &[src as u64, len as u64], len, |buf| {
            for (k, v) in buf.iter_mut().enumerate() {
                *v = byte(src, len, k, true);
            }
        })
        .unwrap();
    });
    let rt = join(b);
    let (me, n) = (rt.rank(), rt.size());
    if n != 2 {
        fail(me, 2, "medium_with runs on 2 ranks");
    }
    let peer = 1 - me;
    let max = rt.max_medium();
    let never = |_: &mut [u8]| panic!("fill ran for a refused message");
    match rt.request_medium_with(2, check, &[], 1, never) {
        Err(Error::InvalidRank { rank: 2, size: 2 }) => {}
        r => fail(me, 1, &format!("bad rank: {r:?}")),
    }
    match rt.request_medium_with(peer, RequestHandler::from_index(7), &[], 1, never) {
        Err(Error::UnknownHandler { index: 7, .. }) => {}
        r => fail(me, 1, &format!("unknown handler: {r:?}")),
    }
    match rt.request_medium_with(peer, check, &[], max + 1, never) {
        Err(Error::PayloadTooLarge { len, max: m }) if len == max + 1 && m == max => {}
        r => fail(me, 1, &format!("too large: {r:?}")),
    }
    let sizes = sizes(max);
    for &len in &sizes {
        rt.request_medium_with(peer, check, &[len as u64], len, |buf| {
            assert_eq!(buf.len(), len);
            for (k, v) in buf.iter_mut().enumerate() {
                *v = byte(me, len, k, false);
            }
        })
        .unwrap_or_else(|e| fail(me, 1, &format!("size {len}: {e}")));
    }
    let want = sizes.len() as u64;
    rt.wait_until(|| replies.load(Ordering::Relaxed) >= want);
    rt.barrier();
    let bad = bad.load(Ordering::Relaxed);
    if bad != 0 {
        fail(me, 1, &format!("{bad} payloads differ"));
    }
    println!(
        "medium_with rank {me}: {want} sizes 0..={max} checked both ways ({})",
        if rt.is_local(peer) {
            "shared memory"
        } else {
            "network"
        }
    );
}
