//! Whether a rank is on a CPU, as other ranks see it (`Runtime::is_running`). Two polite
//! ranks: rank 1 waits for a request from rank 0; rank 0 watches `is_running(1)` until it sees
//! rank 1 give up its core in that wait, then sends the request. Rank 0 prints
//! `presence: rank 1 seen away`, or fails if rank 1 never looked away within 30 s.
//!
//! `presence yields`: rank 1 waits the same way while rank 0 sleeps 200 ms, then prints
//! `presence: rank 1 yielded N times` (a rank pinned to a core that no other rank is pinned
//! to spins where it would yield, and yields only now and then).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_tests::{fail, join};

fn main() {
    let woken = Arc::new(AtomicBool::new(false));
    let mut b = Runtime::builder();
    b.polite(true);
    let w = woken.clone();
    let wake = b.request_handler("presence-wake", move |_, _| {
        w.store(true, Ordering::Release);
    });
    let rt = join(b);
    let me = rt.rank();
    if rt.size() != 2 {
        fail(me, 2, "presence: needs 2 ranks");
    }
    if !rt.is_running(me) || rt.is_running(rt.size()) {
        fail(
            me,
            1,
            "presence: wrong for this rank or for a rank outside the job",
        );
    }
    rt.barrier();
    if std::env::args().nth(1).as_deref() == Some("yields") {
        if me == 1 {
            let before = rt.stats().yields;
            rt.wait_until(|| woken.load(Ordering::Acquire));
            let n = rt.stats().yields - before;
            println!("presence: rank 1 yielded {n} times");
        } else {
            std::thread::sleep(Duration::from_millis(200));
            rt.request_short(1, wake, &[]).expect("wake rank 1");
        }
        rt.barrier();
        return;
    }
    if me == 1 {
        rt.wait_until(|| woken.load(Ordering::Acquire));
    } else {
        let t = Instant::now();
        while rt.is_running(1) {
            if t.elapsed() > Duration::from_secs(30) {
                fail(me, 1, "presence: rank 1 never looked away in a polite wait");
            }
            std::hint::spin_loop();
        }
        println!("presence: rank 1 seen away");
        rt.request_short(1, wake, &[]).expect("wake rank 1");
    }
    rt.barrier();
}
