//! A progress thread asleep is woken by its own rank's sends: `self_wake [ROUNDS]`.
//!
//! Every rank has a progress thread. ROUNDS (default 200) times, each rank stays out of the
//! runtime for 5 ms (its progress thread finds nothing and goes to sleep), sends a short
//! request to itself, and computes, making no runtime call, until the handler has run: only
//! the progress thread can run it, and only once the send has woken it. The send's ring must
//! wake the sleeper wherever it sleeps: on its doorbell's futex, or, on a rank with network
//! peers, in `ppoll` on its socket and eventfd. A ring that did not would leave the handler to
//! the end of the sleep (up to 100 ms): each rank fails if the median round took over 20 ms.
//! Prints `self_wake: rank R median round N us`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_tests::{arg_u64, fail, join};

fn main() {
    let rounds = arg_u64(0, 200);
    let handled = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    b.progress_thread(true);
    let h = handled.clone();
    let poke = b.request_handler("self-wake-poke", move |_, _| {
        h.fetch_add(1, Ordering::Release);
    });
    let rt = join(b);
    let me = rt.rank();
    rt.barrier();
    let mut took = Vec::with_capacity(rounds as usize);
    for i in 1..=rounds {
        std::thread::sleep(Duration::from_millis(5));
        let t = Instant::now();
        rt.request_short(me, poke, &[]).expect("poke myself");
        while handled.load(Ordering::Acquire) < i {
            if t.elapsed() > Duration::from_secs(10) {
                fail(me, 1, &format!("self_wake: round {i} was never handled"));
            }
            std::hint::spin_loop();
        }
        took.push(t.elapsed());
    }
    took.sort();
    let median = took[took.len() / 2];
    println!(
        "self_wake: rank {me} median round {} us",
        median.as_micros()
    );
    if median > Duration::from_millis(20) {
        fail(
            me,
            1,
            &format!(
                "self_wake: the median round took {} ms: the progress thread slept through its \
                 own rank's sends",
                median.as_millis()
            ),
        );
    }
    rt.barrier();
}
