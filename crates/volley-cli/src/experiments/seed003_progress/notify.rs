//! E3's two patterns through the primitives, under whatever progress mode and notification
//! threshold the job runs with: a stream (one-way, ns per message) and a ping-pong (one-way
//! ns). Every value is checked by its receiver.

use super::{Words, DONE};
use std::sync::atomic::Ordering;
use std::time::Instant;
use volley_prim::{Dest, Info, Prim, Recv, Result, Source};

/// The 16-byte message `i` (the seed's two words).
fn message(i: u64) -> [u8; 16] {
    let mut m = [0u8; 16];
    m[..8].copy_from_slice(&i.to_le_bytes());
    m[8..].copy_from_slice(&(!i).to_le_bytes());
    m
}

fn check(buf: &[u8; 16], i: u64, what: &str, failures: &mut Vec<String>) {
    if *buf != message(i) && failures.len() < 4 {
        failures.push(format!("{what} {i}: came back {buf:?}"));
    }
}

/// Rank 0 sends `iters` packets to rank 1, which receives and checks each and then raises a
/// flag in rank 0's memory; ns per message, from the first send to the flag.
pub(super) fn stream(p: &Prim, w: &Words, iters: u64, failures: &mut Vec<String>) -> Result<f64> {
    let done = w.at(0, DONE);
    if p.rank() == 0 {
        done.store(0, Ordering::Release);
    }
    p.runtime().barrier();
    let start = Instant::now();
    if p.rank() == 0 {
        for i in 0..iters {
            p.send(Dest::Rank(1), Info::Data(&message(i)), false)?;
        }
        let mut spins = 0u32;
        while done.load(Ordering::Acquire) == 0 {
            spins += 1;
            if spins > 1 << 12 {
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    } else {
        let mut buf = [0u8; 16];
        for i in 0..iters {
            p.receive(Source::Network, Recv::Data(&mut buf))?;
            check(&buf, i, "stream", failures);
        }
        done.store(1, Ordering::Release);
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64;
    p.runtime().barrier();
    Ok(ns)
}

/// `iters` round trips of a 16-byte packet; one-way ns.
pub(super) fn pingpong(p: &Prim, iters: u64, failures: &mut Vec<String>) -> Result<f64> {
    let me = p.rank();
    let other = 1 - me;
    let mut buf = [0u8; 16];
    p.runtime().barrier();
    let start = Instant::now();
    for i in 0..iters {
        if me == 0 {
            p.send(Dest::Rank(other), Info::Data(&message(i)), false)?;
            p.receive(Source::Network, Recv::Data(&mut buf))?;
        } else {
            p.receive(Source::Network, Recv::Data(&mut buf))?;
            p.send(Dest::Rank(other), Info::Data(&buf), false)?;
        }
        check(&buf, i, "ping-pong", failures);
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64 / 2.0;
    p.runtime().barrier();
    Ok(ns)
}
