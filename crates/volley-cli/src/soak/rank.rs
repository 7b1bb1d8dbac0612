//! One rank of a soak job (`volley __soak-rank`): random mixed traffic with end-to-end checks.
//!
//! In rounds: each rank sends a random mix of short, medium and long requests to random ranks
//! (at most [`WINDOW`] unanswered per destination), each carrying a sequence number per
//! destination and a checksum of its payload; the handler checks both and replies with the
//! checksum, which the sender checks in turn. Between them come one-sided puts into the
//! rank's own slice of a random rank's segment, read back and compared, and fetch-and-adds on
//! a counter at rank 0. A barrier ends each round, followed by the global layer's collectives
//! (an all-reduce, a broadcast from a rotating root and an all-gather of values every rank can
//! compute, so each checks the result); rank 0 decides whether another round begins.
//! At the end every rank reports its counts to rank 0, which checks that every request
//! arrived once and was answered, and that the counter holds every add, and writes the result.

use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use volley::rma::Perms;
use volley::Runtime;
use volley_global::{Global, Op, Strategy};

/// Unanswered requests per destination at most (and long-message slots per source).
const WINDOW: usize = 4;
/// Operations per rank per round.
const ROUND_OPS: usize = 400;
/// Largest medium and long payloads sent.
const MAX_MEDIUM: usize = 4096;
const MAX_LONG: usize = 32 << 10;
/// Bytes of the one-sided segment each rank owns a slice of at every rank.
const RMA_SLICE: usize = 4096;

/// What one rank counted.
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct RankCounts {
    /// Requests sent, by class.
    pub shorts: u64,
    pub mediums: u64,
    pub longs: u64,
    /// Replies received.
    pub replies: u64,
    /// Requests received.
    pub received: u64,
    /// Payload bytes sent in requests.
    pub bytes: u64,
    /// One-sided puts checked by a get, and fetch-and-adds.
    pub puts: u64,
    pub adds: u64,
    /// Collectives checked (all-reduce, broadcast, all-gather).
    #[serde(default)]
    pub collectives: u64,
    /// Sum of the values added at rank 0.
    pub added: u64,
    /// Rounds run.
    pub rounds: u64,
    /// Checks that failed: each is a message lost, doubled, reordered or corrupted.
    pub mismatches: u64,
}

/// What rank 0 writes for the driver.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct JobResult {
    /// Every rank's counts, by rank.
    pub ranks: Vec<RankCounts>,
    /// The counter at rank 0 at the end, and what the adds sum to.
    pub counter: u64,
    pub expected_counter: u64,
    /// Requests sent and received over the whole job.
    pub sent: u64,
    pub received: u64,
    /// Whether everything checked out.
    pub verified: bool,
}

/// A small deterministic generator (xorshift), seeded per rank.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

/// FNV-1a of `bytes`, mixed with `salt`.
/// A value every rank can compute for (seed, round, rank, index), below 2^32 so that sums of
/// many stay exact.
fn known(seed: u64, round: u64, rank: usize, i: usize) -> u64 {
    let mut x = seed ^ round.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ ((rank as u64) << 40) ^ i as u64;
    x ^= x >> 31;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    (x ^ (x >> 29)) & 0xffff_ffff
}

/// This round's collectives, each checked against what every rank can compute; returns the
/// number of wrong results. `skew` is added to this rank's all-reduce contribution (the
/// self-test).
fn collectives(g: &Global<'_>, seed: u64, round: u64, skew: u64) -> volley_global::Result<u64> {
    let (me, p) = (g.my_proc(), g.procs());
    let n = 1 + (known(seed, round, usize::MAX, 0) % 200) as usize;
    let mut wrong = 0;
    let mut sum: Vec<u64> = (0..n).map(|i| known(seed, round, me, i)).collect();
    sum[0] += skew;
    g.all_reduce(&mut sum, Op::Sum)?;
    let expected = |i| (0..p).map(|r| known(seed, round, r, i)).sum::<u64>();
    wrong += u64::from((0..n).any(|i| sum[i] != expected(i)));
    let root = round as usize % p;
    let mut data: Vec<u64> = (0..n)
        .map(|i| {
            if me == root {
                known(seed, round, root, i)
            } else {
                0
            }
        })
        .collect();
    g.broadcast(root, &mut data)?;
    wrong += u64::from((0..n).any(|i| data[i] != known(seed, round, root, i)));
    let mut all = vec![0u64; p];
    g.all_gather(&[known(seed, round, me, n)], &mut all)?;
    wrong += u64::from((0..p).any(|r| all[r] != known(seed, round, r, n)));
    Ok(wrong)
}

fn checksum(salt: u64, bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325 ^ salt, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The payload of request `seq` from `src` to `dst`, `len` bytes.
fn payload(src: usize, dst: usize, seq: u64, len: usize) -> Vec<u8> {
    let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ (src as u64) << 40 ^ (dst as u64) << 20 ^ seq | 1);
    (0..len).map(|_| r.next() as u8).collect()
}

/// State the handlers share with the rank's loop.
struct Shared {
    /// Next sequence number expected from each source.
    expected: Vec<AtomicU64>,
    /// Unanswered requests to each destination.
    unanswered: Vec<AtomicU64>,
    replies: AtomicU64,
    received: AtomicU64,
    mismatches: AtomicU64,
    /// Rank 0's decision after a round: continue (1) or stop (2); 0 while undecided.
    decision: AtomicU64,
    /// Rank 0: the reports gathered. Then the self-test's switch: damage one payload.
    reports: Mutex<Vec<Option<RankCounts>>>,
    corrupt_once: AtomicBool,
}

/// Runs one rank for about `seconds`; rank 0 writes the result to `out`. `corrupt` makes one
/// payload arrive damaged (a self-test of the checks: the job must then fail).
/// Runs one rank; `corrupt` is a self-test that damages one payload (`corrupt`) or one
/// contribution to a collective (`corrupt-collective`) at the last rank.
pub fn main(
    seconds: f64,
    seed: u64,
    out: &std::path::Path,
    corrupt: Option<&str>,
) -> Result<(), String> {
    let mut b = Runtime::builder();
    let shared_slot: Arc<Mutex<Option<Arc<Shared>>>> = Arc::default();
    let get = {
        let s = shared_slot.clone();
        move || s.lock().unwrap().clone().expect("state set before traffic")
    };
    let g = get.clone();
    let ack = b.reply_handler("soak.ack", move |m| {
        let s = g();
        let (dst, seq, sum) = (m.src(), m.arg(0), m.arg(1));
        if m.arg(2) != sum ^ seq {
            s.mismatches.fetch_add(1, Ordering::Relaxed);
        }
        s.unanswered[dst].fetch_sub(1, Ordering::AcqRel);
        s.replies.fetch_add(1, Ordering::Release);
    });
    let g = get.clone();
    let request = b.request_handler("soak.request", move |m, reply| {
        let s = g();
        let (src, seq, sum, len) = (m.src(), m.arg(0), m.arg(1), m.arg(2) as usize);
        let body = m.payload();
        let mut ok = body.len() == len && checksum(seq, body) == sum;
        if s.corrupt_once.swap(false, Ordering::Relaxed) {
            ok = false;
        }
        // Requests from one source arrive in the order they were sent.
        ok &= s.expected[src].fetch_add(1, Ordering::Relaxed) == seq;
        if !ok {
            s.mismatches.fetch_add(1, Ordering::Relaxed);
        }
        s.received.fetch_add(1, Ordering::Relaxed);
        reply
            .reply_short(ack, &[seq, sum, sum ^ seq])
            .expect("reply");
    });
    let g = get.clone();
    let decide = b.request_handler("soak.decide", move |m, _| {
        g().decision.store(m.arg(0), Ordering::Release);
    });
    let g = get.clone();
    let report = b.request_handler("soak.report", move |m, _| {
        let s = g();
        let counts: RankCounts =
            serde_json::from_slice(m.payload()).unwrap_or_else(|_| RankCounts {
                mismatches: 1,
                ..Default::default()
            });
        s.reports.lock().unwrap()[m.src()] = Some(counts);
    });
    // The global layer brings the one-sided layer (direct or AM path by its strategy) and the
    // collectives; the configuration's progress mode stays as the driver chose it, except
    // under `np`, which needs its thread.
    let strategy = Strategy::from_env().map_err(|e| e.to_string())?;
    let setup = Global::register_with(&mut b, strategy);
    if strategy != Strategy::Np {
        b.progress_thread(std::env::var("VOLLEY_PROGRESS").is_ok_and(|v| v == "thread"));
    }
    let rt = b.build().map_err(|e| e.to_string())?;
    let (me, size) = (rt.rank(), rt.size());
    let global = setup.attach(&rt).map_err(|e| e.to_string())?;
    let rma = global.rma();
    let shared = Arc::new(Shared {
        expected: (0..size).map(|_| AtomicU64::new(0)).collect(),
        unanswered: (0..size).map(|_| AtomicU64::new(0)).collect(),
        replies: AtomicU64::new(0),
        received: AtomicU64::new(0),
        mismatches: AtomicU64::new(0),
        decision: AtomicU64::new(0),
        reports: Mutex::new(vec![None; size]),
        corrupt_once: AtomicBool::new(corrupt == Some("corrupt") && me == size - 1),
    });
    *shared_slot.lock().unwrap() = Some(shared.clone());
    // Everyone's state is in place before anyone sends.
    rt.barrier();
    let s = &*shared;
    // The one-sided segment (first in the segment area) and the long messages' area (its
    // upper half: a slot per source and window position).
    let seg = rma
        .alloc_symmetric(RMA_SLICE * size + 64, Perms::ALL)
        .map_err(|e| e.to_string())?;
    let counter = seg.on(0);
    let long_area = rt.segment_len() / 2;
    let long_slot = (rt.segment_len() - long_area) / (size * WINDOW);
    if long_slot < MAX_LONG {
        return Err(format!(
            "segment too small for {size} ranks: raise VOLLEY_SEGMENT_BYTES"
        ));
    }
    let mut rng = Rng(seed ^ (me as u64 + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
    let mut sent_seq = vec![0u64; size];
    let mut c = RankCounts::default();
    let mut wrong_contribution = corrupt == Some("corrupt-collective") && me == size - 1;
    let start = Instant::now();
    let deadline = Duration::from_secs_f64(seconds.max(0.0));
    loop {
        for _ in 0..ROUND_OPS {
            let dst = rng.below(size);
            match rng.below(10) {
                0 => {
                    // A put into my slice at `dst`, read back.
                    let data: Vec<u8> = (0..1 + rng.below(RMA_SLICE))
                        .map(|_| rng.next() as u8)
                        .collect();
                    let at = 64 + me * RMA_SLICE;
                    let target = seg.on(dst);
                    rma.put(target, at, &data).map_err(|e| e.to_string())?;
                    let mut back = vec![0u8; data.len()];
                    rma.get(target, at, &mut back).map_err(|e| e.to_string())?;
                    if back != data {
                        s.mismatches.fetch_add(1, Ordering::Relaxed);
                    }
                    c.puts += 1;
                }
                1 => {
                    let v = 1 + rng.below(1000) as u64;
                    rma.fetch_add(counter, 0, v).map_err(|e| e.to_string())?;
                    c.adds += 1;
                    c.added += v;
                }
                k => {
                    rt.wait_until(|| s.unanswered[dst].load(Ordering::Acquire) < WINDOW as u64);
                    let seq = sent_seq[dst];
                    sent_seq[dst] += 1;
                    let (len, class) = match k {
                        2..=5 => (0, 0),
                        6..=8 => (rng.below(MAX_MEDIUM + 1), 1),
                        _ => (1 + rng.below(MAX_LONG), 2),
                    };
                    let body = payload(me, dst, seq, len);
                    let sum = checksum(seq, &body);
                    s.unanswered[dst].fetch_add(1, Ordering::AcqRel);
                    let args = [seq, sum, len as u64];
                    let sent = match class {
                        0 => rt.request_short(dst, request, &args),
                        1 => rt.request_medium(dst, request, &args, &body),
                        _ => {
                            let slot =
                                long_area + (me * WINDOW + seq as usize % WINDOW) * long_slot;
                            rt.request_long(dst, request, &args, &body, slot)
                        }
                    };
                    sent.map_err(|e| e.to_string())?;
                    match class {
                        0 => c.shorts += 1,
                        1 => c.mediums += 1,
                        _ => c.longs += 1,
                    }
                    c.bytes += len as u64;
                }
            }
        }
        // The round ends when every request is answered and every rank is here.
        rt.wait_until(|| s.unanswered.iter().all(|u| u.load(Ordering::Acquire) == 0));
        rt.barrier();
        let skew = u64::from(std::mem::take(&mut wrong_contribution));
        let wrong = collectives(&global, seed, c.rounds, skew).map_err(|e| e.to_string())?;
        s.mismatches.fetch_add(wrong, Ordering::Relaxed);
        c.collectives += 3;
        c.rounds += 1;
        if me == 0 {
            let go = if start.elapsed() < deadline { 1 } else { 2 };
            for r in 0..size {
                rt.request_short(r, decide, &[go])
                    .map_err(|e| e.to_string())?;
            }
        }
        rt.wait_until(|| s.decision.load(Ordering::Acquire) != 0);
        let decision = s.decision.swap(0, Ordering::AcqRel);
        rt.barrier();
        if decision == 2 {
            break;
        }
    }
    c.replies = s.replies.load(Ordering::Acquire);
    c.received = s.received.load(Ordering::Acquire);
    c.mismatches = s.mismatches.load(Ordering::Acquire);
    let mine = serde_json::to_vec(&c).map_err(|e| e.to_string())?;
    rt.request_medium(0, report, &[], &mine)
        .map_err(|e| e.to_string())?;
    if me == 0 {
        rt.wait_until(|| s.reports.lock().unwrap().iter().all(Option::is_some));
        let ranks: Vec<RankCounts> = s
            .reports
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.unwrap())
            .collect();
        let mut word = [0u8; 8];
        rma.get(counter, 0, &mut word).map_err(|e| e.to_string())?;
        let counter = u64::from_le_bytes(word);
        let sent: u64 = ranks.iter().map(|r| r.shorts + r.mediums + r.longs).sum();
        let received: u64 = ranks.iter().map(|r| r.received).sum();
        let replies: u64 = ranks.iter().map(|r| r.replies).sum();
        let expected_counter: u64 = ranks.iter().map(|r| r.added).sum();
        let verified = ranks.iter().all(|r| r.mismatches == 0)
            && sent == received
            && replies == sent
            && counter == expected_counter;
        let result = JobResult {
            ranks,
            counter,
            expected_counter,
            sent,
            received,
            verified,
        };
        std::fs::write(out, serde_json::to_vec(&result).map_err(|e| e.to_string())?)
            .map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    rt.barrier();
    Ok(())
}
