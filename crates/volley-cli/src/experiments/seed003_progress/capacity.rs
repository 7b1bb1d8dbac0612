//! E11: a stream of 64-byte messages into a receiver slower than its sender (it computes a
//! little per message), through input buffers of several capacities, three ways:
//!
//! - **back-pressure**: volley-prim's own rule: a send waits while the buffer is full
//!   ([`volley_prim::Stats::full_stalls`]); nothing is dropped or overwritten.
//! - **credits**: flow-control messages: the sender keeps at most half the buffer in
//!   flight and the receiver returns a credit (its consumed byte count, an 8-byte packet)
//!   every quarter buffer, so a send never finds the buffer full.
//! - **spill** (no flow control): the sender sends regardless; when the buffer crosses half
//!   full the sender's half-full notification tells the receiver, which moves everything
//!   buffered into an overflow queue in memory (the seed's "spill data from the FIFO into
//!   memory") and reads from there first. volley-prim itself never spills (a full buffer
//!   holds the sender back), so this mode is built here, over `receive`; the notification
//!   is looked at between messages (a polled interrupt line), and a send can still wait if
//!   the buffer fills before the receiver looks (counted).
//!
//! Every message carries its sequence number and a pattern, checked by the receiver: in
//! every mode all arrive, intact and in order.

use super::{Words, DONE};
use serde::{Deserialize, Serialize};
use std::collections::VecDeque;
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Instant;
use volley_prim::{Dest, Info, InfoType, Prim, Probe, Recv, Source};

/// The capacities measured (KiB).
pub(super) const KIB: [usize; 4] = [1, 4, 16, 64];

/// Payload bytes per message (8 words).
const MSG: usize = 64;
/// Ring bytes per message (header and payload).
const RING_BYTES: u64 = 8 + MSG as u64;

/// Where rank 1 leaves its counts in rank 0's scratch words.
const SPILLS: usize = 256;
const SPILLED: usize = 264;
const CREDITS: usize = 272;

/// The modes, in table order.
const MODES: [&str; 3] = ["back-pressure", "credits", "spill"];

/// One capacity under one mode.
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct Figures {
    pub kib: usize,
    pub mode: String,
    /// Sender: ns per message until its last send returned.
    pub sender_ns: f64,
    /// ns per message until the receiver processed the last.
    pub total_ns: f64,
    /// Payload throughput, MB/s (to the receiver's last message).
    pub mbytes_per_s: f64,
    /// Sends that found the buffer full and waited (sender's `Stats::full_stalls`).
    pub full_stalls: f64,
    /// Spill events (the receiver moved its buffer into memory).
    pub spills: f64,
    /// Bytes moved into memory by spills.
    pub spilled_bytes: f64,
    /// Flow-control messages (credits) the receiver sent.
    pub credit_messages: f64,
}

pub(super) fn medians(reps: &[Vec<Figures>]) -> Vec<Figures> {
    let Some(first) = reps.first() else {
        return Vec::new();
    };
    (0..first.len())
        .map(|i| {
            let m = |f: fn(&Figures) -> f64| {
                crate::bench::median_present(reps.iter().filter_map(|r| r.get(i)).map(f))
            };
            Figures {
                kib: first[i].kib,
                mode: first[i].mode.clone(),
                sender_ns: m(|f| f.sender_ns),
                total_ns: m(|f| f.total_ns),
                mbytes_per_s: m(|f| f.mbytes_per_s),
                full_stalls: m(|f| f.full_stalls),
                spills: m(|f| f.spills),
                spilled_bytes: m(|f| f.spilled_bytes),
                credit_messages: m(|f| f.credit_messages),
            }
        })
        .collect()
}

fn message(i: u64) -> [u8; MSG] {
    let mut m = [0u8; MSG];
    for (j, c) in m.chunks_exact_mut(8).enumerate() {
        c.copy_from_slice(&(i.wrapping_mul(31) + j as u64).to_le_bytes());
    }
    m
}

/// The receiver's computation per message: a few hundred ns of dependent arithmetic.
fn work(seed: u64) -> u64 {
    let mut x = seed | 1;
    for _ in 0..200 {
        x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
    }
    x
}

/// One mode at the job's capacity on both ranks (rank 0's figures count).
fn one(
    p: &Prim,
    w: &Words,
    mode: &str,
    iters: u64,
    failures: &mut Vec<String>,
) -> Result<Figures, String> {
    let e = |e: volley_prim::PrimError| e.to_string();
    let cap = p.capacity() as u64;
    let window = cap / 2;
    let done = w.at(0, DONE);
    if p.rank() == 0 {
        done.store(0, Ordering::Release);
        w.at(0, SPILLS).store(0, Ordering::Release);
        w.at(0, SPILLED).store(0, Ordering::Release);
    }
    let stalls0 = p.stats().full_stalls;
    let mut credit_messages = 0u64;
    p.runtime().barrier();
    let start = Instant::now();
    let mut sender_ns = 0.0;
    if p.rank() == 0 {
        let (mut sent, mut credited) = (0u64, 0u64);
        let mut credit = [0u8; 8];
        for i in 0..iters {
            if mode == "credits" {
                while sent + RING_BYTES - credited > window {
                    p.receive(Source::Network, Recv::Data(&mut credit))
                        .map_err(e)?;
                    credited = credited.max(u64::from_le_bytes(credit));
                }
            }
            p.send(Dest::Rank(1), Info::Data(&message(i)), false)
                .map_err(e)?;
            sent += RING_BYTES;
        }
        sender_ns = start.elapsed().as_nanos() as f64 / iters as f64;
        while done.load(Ordering::Acquire) == 0 {
            std::hint::spin_loop();
        }
        // Credits the sender no longer needed.
        while p
            .is_information(Source::Network, InfoType::Data)
            .map_err(e)?
            == Probe::Match
        {
            p.receive(Source::Network, Recv::Data(&mut credit))
                .map_err(e)?;
        }
    } else {
        let mut overflow: VecDeque<[u8; MSG]> = VecDeque::new();
        let (mut spills, mut spilled) = (0u64, 0u64);
        let mut seen = p.notifications();
        let (mut consumed, mut credited) = (0u64, 0u64);
        let mut buf = [0u8; MSG];
        let mut sink = 0u64;
        for i in 0..iters {
            if mode == "spill" && p.notifications() != seen {
                seen = p.notifications();
                let n = p.buffered() as u64 / RING_BYTES;
                for _ in 0..n {
                    p.receive(Source::Network, Recv::Data(&mut buf))
                        .map_err(e)?;
                    overflow.push_back(buf);
                }
                spills += 1;
                spilled += n * MSG as u64;
            }
            match overflow.pop_front() {
                Some(m) => buf = m,
                None => {
                    p.receive(Source::Network, Recv::Data(&mut buf))
                        .map_err(e)?;
                }
            }
            if buf != message(i) && failures.len() < 4 {
                failures.push(format!(
                    "E11 {mode}: message {i} arrived wrong or out of order"
                ));
            }
            consumed += RING_BYTES;
            if mode == "credits" && consumed - credited >= window / 2 {
                p.send(Dest::Rank(0), Info::Data(&consumed.to_le_bytes()), false)
                    .map_err(e)?;
                credited = consumed;
                credit_messages += 1;
            }
            sink ^= work(buf[0] as u64);
        }
        std::hint::black_box(sink);
        if !overflow.is_empty() {
            failures.push(format!("E11 {mode}: {} messages left over", overflow.len()));
        }
        w.at(0, SPILLS).store(spills, Ordering::Release);
        w.at(0, SPILLED).store(spilled, Ordering::Release);
        w.at(0, CREDITS).store(credit_messages, Ordering::Release);
        done.store(1, Ordering::Release);
    }
    let total = start.elapsed().as_nanos() as f64;
    p.runtime().barrier();
    Ok(Figures {
        kib: (cap / 1024) as usize,
        mode: mode.into(),
        sender_ns,
        total_ns: total / iters as f64,
        mbytes_per_s: (iters * MSG as u64) as f64 / total * 1000.0,
        full_stalls: (p.stats().full_stalls - stalls0) as f64,
        spills: w.at(0, SPILLS).load(Ordering::Acquire) as f64,
        spilled_bytes: w.at(0, SPILLED).load(Ordering::Acquire) as f64,
        credit_messages: w.at(0, CREDITS).load(Ordering::Acquire) as f64,
    })
}

/// Every mode at the job's capacity.
pub(super) fn measure(
    p: &Prim,
    w: &Words,
    iters: u64,
    failures: &mut Vec<String>,
) -> Result<Vec<Figures>, String> {
    MODES
        .iter()
        .map(|m| one(p, w, m, iters, failures))
        .collect()
}

pub(super) fn table(t: &mut String, rows: &[Figures]) {
    let _ = writeln!(
        t,
        "E11 input-buffer capacity and flow control (64-byte messages into a slower receiver)"
    );
    let _ = writeln!(
        t,
        "  {:>5} {:<14} {:>10} {:>10} {:>8} {:>8} {:>8} {:>12} {:>8}",
        "KiB", "mode", "send ns", "total ns", "MB/s", "stalls", "spills", "spilled B", "credits"
    );
    for f in rows {
        let _ = writeln!(
            t,
            "  {:>5} {:<14} {:>10.0} {:>10.0} {:>8.0} {:>8.0} {:>8.0} {:>12.0} {:>8.0}",
            f.kib,
            f.mode,
            f.sender_ns,
            f.total_ns,
            f.mbytes_per_s,
            f.full_stalls,
            f.spills,
            f.spilled_bytes,
            f.credit_messages
        );
    }
}
