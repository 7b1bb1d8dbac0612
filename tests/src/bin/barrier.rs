//! Barrier correctness: `barrier [ROUNDS]`.
//!
//! In each of ROUNDS (default 300) rounds every rank registers its arrival at rank 0 (request
//! and reply, so the arrival is counted before the rank enters the barrier), calls `barrier()`,
//! then asks rank 0 how many ranks arrived in this round: it must be all of them, or some rank
//! left the barrier before every rank had entered it. One rank per round (rotating) is late,
//! sometimes by a sleep, so that ranks wait in the barrier for different partners and epochs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use volley::Runtime;
use volley_tests::{arg_u64, fail, join};

fn main() {
    let rounds = arg_u64(0, 300);
    // Rank 0: arrivals per round.
    let arrivals = Arc::new(Mutex::new(vec![0u64; rounds as usize]));
    let acks = Arc::new(AtomicU64::new(0));
    let answer = Arc::new(AtomicU64::new(u64::MAX));

    let mut b = Runtime::builder();
    let ack = {
        let acks = acks.clone();
        b.reply_handler("barrier-ack", move |_| {
            acks.fetch_add(1, Ordering::Relaxed);
        })
    };
    let count_reply = {
        let answer = answer.clone();
        b.reply_handler("barrier-count", move |m| {
            answer.store(m.arg(0), Ordering::Relaxed);
        })
    };
    let arrive = {
        let arrivals = arrivals.clone();
        b.request_handler("barrier-arrive", move |m, token| {
            arrivals.lock().unwrap()[m.arg(0) as usize] += 1;
            token.reply_short(ack, &[]).expect("barrier: reply failed");
        })
    };
    let query = {
        let arrivals = arrivals.clone();
        b.request_handler("barrier-query", move |m, token| {
            let n = arrivals.lock().unwrap()[m.arg(0) as usize];
            token
                .reply_short(count_reply, &[n])
                .expect("barrier: reply failed");
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());

    for i in 0..rounds {
        if i as usize % size == rank {
            if i % 10 == 0 {
                std::thread::sleep(Duration::from_millis(2));
            } else {
                std::thread::yield_now();
            }
        }
        rt.request_short(0, arrive, &[i]).unwrap();
        rt.wait_until(|| acks.load(Ordering::Relaxed) > i);
        rt.barrier();
        answer.store(u64::MAX, Ordering::Relaxed);
        rt.request_short(0, query, &[i]).unwrap();
        rt.wait_until(|| answer.load(Ordering::Relaxed) != u64::MAX);
        let n = answer.load(Ordering::Relaxed);
        if n != size as u64 {
            fail(
                rank,
                1,
                &format!("left barrier {i} when only {n} of {size} ranks had arrived"),
            );
        }
    }
    rt.barrier();
    let s = rt.stats();
    let per_barrier = (usize::BITS - (size - 1).leading_zeros()) as u64; // ceil(log2 size)
    if s.system_sent != per_barrier * (rounds + 1) || s.dropped != 0 {
        fail(
            rank,
            1,
            &format!(
                "{} system messages for {} barriers of {size} ranks (expected {}), {} dropped",
                s.system_sent,
                rounds + 1,
                per_barrier * (rounds + 1),
                s.dropped
            ),
        );
    }
    if rank == 0 {
        let a = arrivals.lock().unwrap();
        if let Some(i) = a.iter().position(|&n| n != size as u64) {
            fail(rank, 1, &format!("round {i} counted {} arrivals", a[i]));
        }
        println!("barrier: {rounds} barriers of {size} ranks ok");
    }
}
