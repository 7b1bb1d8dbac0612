//! Seed 000 requirement 28: the program's own Active Message handlers and the tag-matching
//! send and receive of `volley-msg` share one runtime and one transport, interleaved message
//! by message. `coexist [ROUNDS]`.
//!
//! Each rank, every round, sends its right-hand neighbour `PER_ROUND` medium Active Messages
//! to its own handler `app.check` and as many tagged messages through `volley-msg` (eager and
//! rendezvous sizes), alternating one of each; then it receives the tagged messages of its
//! left-hand neighbour and waits for its Active Messages' replies. Every message is checked
//! on both sides: `app.check` compares each payload byte with what the sender must have sent
//! and replies with what it found, which the sender's `app.checked` compares with what it
//! sent; a tagged message's receiver checks its source, tag, length and every byte, and its
//! sender's request completes. What tells the two apart is the handler index in each
//! message: the program's handlers and the layer's (`volley.msg.*`) are entries of the same
//! table, registered in the same order on every rank.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use volley::Runtime;
use volley_msg::Msg;
use volley_tests::{arg_u64, fail, join};

/// In a debug build, a handler that allocates panics (the layer's handlers allocate inside
/// `volley::debug::allow_alloc`, the program's do not allocate).
#[global_allocator]
static ALLOC: volley::debug::HandlerAllocCheck<std::alloc::System> =
    volley::debug::HandlerAllocCheck(std::alloc::System);

const PER_ROUND: usize = 8;
const AM_SIZES: [usize; 8] = [0, 1, 100, 1000, 4096, 20_000, 65_535, 65_536];
const MSG_SIZES: [usize; 8] = [0, 16, 5000, 16_384, 16_385, 70_000, 200_000, 8];

/// Byte `k` of message `i` of `round` from `src` (`salt` tells the two layers' apart).
fn byte(salt: u64, src: usize, round: u64, i: usize, k: usize) -> u8 {
    let x = salt ^ (src as u64) << 48 ^ round << 24 ^ (i as u64) << 16 ^ k as u64;
    (x.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as u8
}

fn content(salt: u64, src: usize, round: u64, i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|k| byte(salt, src, round, i, k)).collect()
}

const AM_SALT: u64 = 0xA3;
const MSG_SALT: u64 = 0x5E;

fn main() {
    let rounds = arg_u64(0, 20);
    // The program's handlers first, then the layer's: indices 0.. are the program's.
    let bad = Arc::new(AtomicU64::new(0));
    let checked_here = Arc::new(AtomicU64::new(0));
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let (bd, r) = (bad.clone(), replies.clone());
    let answer = b.reply_handler("app.checked", move |m| {
        // arg 0: whether every byte matched at the target; 1 and 2: the length sent and found.
        if m.arg(0) != 1 || m.arg(1) != m.arg(2) {
            bd.fetch_add(1, Ordering::Relaxed);
        }
        r.fetch_add(1, Ordering::Relaxed);
    });
    let (bd, ch) = (bad.clone(), checked_here.clone());
    let check = b.request_handler("app.check", move |m, tok| {
        let (round, i, len) = (m.arg(0), m.arg(1) as usize, m.arg(2));
        let p = m.payload();
        let same = p.len() as u64 == len
            && p.iter()
                .enumerate()
                .all(|(k, &v)| v == byte(AM_SALT, m.src(), round, i, k));
        if !same {
            bd.fetch_add(1, Ordering::Relaxed);
        }
        ch.fetch_add(1, Ordering::Relaxed);
        tok.reply_short(answer, &[u64::from(same), len, p.len() as u64])
            .unwrap();
    });
    let setup = Msg::register(&mut b).unwrap_or_else(|e| fail(0, 2, &format!("register: {e}")));
    let rt = join(b);
    let msg = setup
        .attach(&rt)
        .unwrap_or_else(|e| fail(rt.rank(), 2, &format!("attach: {e}")));
    let (me, n) = (rt.rank(), rt.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    for round in 0..rounds {
        let mut sends = Vec::new();
        for i in 0..PER_ROUND {
            let am_len = AM_SIZES[(i + round as usize) % AM_SIZES.len()];
            let am = content(AM_SALT, me, round, i, am_len);
            rt.request_medium(right, check, &[round, i as u64, am_len as u64], &am)
                .unwrap_or_else(|e| fail(me, 1, &format!("request_medium: {e}")));
            let len = MSG_SIZES[(i + 3 * round as usize) % MSG_SIZES.len()];
            let data = content(MSG_SALT, me, round, i, len);
            let tag = (i % 3) as u64;
            sends.push(
                msg.isend(right, tag, data)
                    .unwrap_or_else(|e| fail(me, 1, &format!("isend: {e}"))),
            );
        }
        for i in 0..PER_ROUND {
            let len = MSG_SIZES[(i + 3 * round as usize) % MSG_SIZES.len()];
            let tag = (i % 3) as u64;
            let got = msg
                .recv(left, tag)
                .unwrap_or_else(|e| fail(me, 1, &format!("recv: {e}")));
            if got.src != left
                || got.tag != tag
                || got.data != content(MSG_SALT, left, round, i, len)
            {
                fail(
                    me,
                    1,
                    &format!(
                        "round {round} message {i}: got {} bytes from {} with tag {}, \
                         not {len} from {left} with tag {tag}",
                        got.data.len(),
                        got.src,
                        got.tag
                    ),
                );
            }
        }
        for s in sends {
            s.wait()
                .unwrap_or_else(|e| fail(me, 1, &format!("send wait: {e}")));
        }
        let want = (round + 1) * PER_ROUND as u64;
        rt.wait_until(|| replies.load(Ordering::Relaxed) >= want);
    }
    rt.barrier();
    let total = rounds * PER_ROUND as u64;
    let (bad, here, back) = (
        bad.load(Ordering::Relaxed),
        checked_here.load(Ordering::Relaxed),
        replies.load(Ordering::Relaxed),
    );
    if bad != 0 || here != total || back != total {
        fail(
            me,
            1,
            &format!("{bad} bad; {here} checked here and {back} replies of {total}"),
        );
    }
    println!(
        "coexist rank {me}: {total} active messages and {total} tagged messages checked on \
         both sides"
    );
    drop(msg);
    rt.finalize();
}
