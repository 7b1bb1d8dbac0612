//! The classic hangs, for the hang report's tests (`tests/tests/hang.rs`): `hang MODE` on 3 or
//! more ranks. After a barrier every rank prints `hang: rank R pid P ready` and then:
//! - `no-poll`: rank 0 sends a request to rank 1 and waits for the reply; rank 1 computes
//!   forever without polling; the other ranks wait for a flag nobody sets.
//! - `no-reply`: rank 0 sends rank 1 a request whose handler never replies and waits for the
//!   reply; the other ranks wait for a flag nobody sets (serving what comes).
//! - `barrier`: every rank but the last enters a barrier; the last computes forever.
//! - `full-ring`: rank 0 sends requests to rank 1 without waiting, until its ring is full;
//!   rank 1 computes forever; the other ranks wait for a flag nobody sets.
//! - `slow-handler`: once rank 1 has left the start's barrier (it says so), rank 0 sends it a
//!   request whose handler computes forever and waits for the reply; rank 1 and the other
//!   ranks wait for a flag nobody sets.
//!
//! None of them ends: the launcher stops them (the tests send it SIGTERM after the report).

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use volley::Runtime;
use volley_tests::{arg_str, eprint_line};

/// Work that never ends and never calls the runtime.
fn compute_forever() -> ! {
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
}

fn main() {
    let mode = arg_str(0).unwrap_or_default();
    if !matches!(
        mode.as_str(),
        "no-poll" | "no-reply" | "barrier" | "full-ring" | "slow-handler"
    ) {
        eprint_line(&format!(
            "hang: unknown mode {mode:?}; expected no-poll, no-reply, barrier, full-ring or slow-handler"
        ));
        std::process::exit(2);
    }
    let answered = Arc::new(AtomicBool::new(false));
    let mut b = Runtime::builder();
    let a = answered.clone();
    let done = b.reply_handler("done", move |_| a.store(true, Ordering::Release));
    let ask = b.request_handler("ask", move |_, token| {
        let _ = token.reply_short(done, &[]);
    });
    let ignore = b.request_handler("ignore", |_, _token| {});
    let spin = b.request_handler("spin", |_, _token| compute_forever());
    // Rank 1 says it computes from now on (one-way), so that rank 0's requests find it
    // computing and not still in the barrier, serving them.
    let away = Arc::new(AtomicBool::new(false));
    let w = away.clone();
    let computing = b.request_handler("computing", move |_, _token| {
        w.store(true, Ordering::Release)
    });
    // Rank 1 of `slow-handler` says it left the barrier with a request rank 0 answers, so that
    // it waits for no reply when the report is taken.
    let noted = b.reply_handler("noted", |_| {});
    let w = away.clone();
    let left = b.request_handler("left", move |_, token| {
        w.store(true, Ordering::Release);
        let _ = token.reply_short(noted, &[]);
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprint_line(&format!("hang: build: {e}"));
        std::process::exit(2)
    });
    assert!(rt.size() >= 3, "hang: needs at least 3 ranks");
    rt.barrier();
    let (me, last) = (rt.rank(), rt.size() - 1);
    println!("hang: rank {me} pid {} ready", std::process::id());
    std::io::stdout().flush().unwrap();
    let never = || false;
    match (mode.as_str(), me) {
        ("no-poll", 0) => {
            rt.wait_until(|| away.load(Ordering::Acquire));
            rt.request_short(1, ask, &[]).unwrap();
            rt.wait_until(|| answered.load(Ordering::Acquire));
        }
        ("no-poll" | "full-ring", 1) => {
            rt.request_short(0, computing, &[]).unwrap();
            compute_forever()
        }
        ("slow-handler", 0) => {
            // Only once rank 1 has left the barrier: a request it took inside the barrier
            // would spin there, before it says it is ready.
            rt.wait_until(|| away.load(Ordering::Acquire));
            rt.request_short(1, spin, &[]).unwrap();
            rt.wait_until(|| answered.load(Ordering::Acquire));
        }
        ("slow-handler", 1) => {
            rt.request_short(0, left, &[]).unwrap();
            rt.wait_until(never)
        }
        ("no-reply", 0) => {
            rt.request_short(1, ignore, &[]).unwrap();
            rt.wait_until(|| answered.load(Ordering::Acquire));
        }
        ("barrier", r) if r == last => compute_forever(),
        ("barrier", _) => rt.barrier(),
        ("full-ring", 0) => {
            rt.wait_until(|| away.load(Ordering::Acquire));
            loop {
                rt.request_short(1, ignore, &[]).unwrap();
            }
        }
        _ => rt.wait_until(never),
    }
    unreachable!("hang: a hang ended");
}
