//! Loom models: two producers (one for the ring) and one consumer on a queue of two slots,
//! every message delivered once, each producer's in order, no torn message.

use crate::queues::{CasQueue, LockQueue, PrewriteQueue, Ring};
use crate::sync::relax;
use crate::Enqueue;
use loom::sync::Arc;

fn model<Q: Enqueue + Send + 'static>(make: fn() -> Q, producers: u64, each: u64) {
    let mut builder = loom::model::Builder::new();
    // Every spin yields, so unbounded preemption explodes; three preemptions cover a
    // producer stopped between claiming a number and publishing it, twice over.
    builder.preemption_bound = Some(3);
    // A spin that yields still counts a branch per load while the thread it waits for runs.
    builder.max_branches = 100_000;
    builder.check(move || {
        let q = Arc::new(make());
        let handles: Vec<_> = (0..producers)
            .map(|p| {
                let q = q.clone();
                loom::thread::spawn(move || {
                    for i in 0..each {
                        let mut spins = 0;
                        while !q.try_push(&[p, i, p + i + 1, 0, 0, 0xabc, 0]) {
                            relax(&mut spins);
                        }
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; producers as usize];
        let mut take = |m: [u64; 7]| {
            let p = m[0] as usize;
            assert_eq!(m[1], next[p], "producer {p} out of order");
            assert_eq!(
                (m[2], m[5], m[6]),
                (m[0] + m[1] + 1, 0xabc, 0),
                "torn message"
            );
            next[p] += 1;
            next.iter().sum::<u64>()
        };
        let mut got = 0;
        let mut spins = 0;
        while got < producers * each {
            match q.slots().try_pop() {
                Some(m) => got = take(m),
                None => relax(&mut spins),
            }
        }
        for h in handles {
            h.join().unwrap();
        }
        assert!(q.slots().try_pop().is_none(), "a message from nowhere");
    });
}

#[test]
fn loom_cas_queue() {
    model(|| CasQueue::new(2), 2, 1);
}

#[test]
fn loom_cas_queue_wraps() {
    // Three messages through two slots: a producer finds the queue full and the slot reused.
    model(|| CasQueue::new(2), 1, 3);
}

#[test]
fn loom_prewrite_queue() {
    model(|| PrewriteQueue::new(2), 2, 1);
}

#[test]
fn loom_prewrite_queue_wraps() {
    // The prewrite lands on a slot whose message the consumer has not taken yet.
    model(|| PrewriteQueue::new(2), 1, 3);
}

#[test]
fn loom_lock_queue() {
    model(|| LockQueue::new(2), 2, 1);
}

#[test]
fn loom_ring() {
    model(|| Ring::new(2), 1, 3);
}
