//! Parts of `seed003-bounce` on the communication thread as a sender (seed 003 §6, §6.1):
//!
//! - E7, direct or handed over: rank 0 sends `COUNT` data packets of one size to rank 1,
//!   either from its program thread (`send` into rank 1's buffer) or handed to its
//!   communication thread (a procedure packet on the internal buffer whose handler sends the
//!   bytes on). The figure is the program thread's time per message (what the computation
//!   processor spends); the floor is an 8-byte local copy loop in the same job. The crossover
//!   is the first size at which handing over costs the program thread no more than sending.
//! - E8, overlap per progress mode: rank 1 computes a fixed loop while rank 0 sends it
//!   requests (a procedure packet each, answered by the handler with a data packet) one at a
//!   time. Without a communication thread, rank 1 serves between chunks of its loop (volley
//!   has no asynchronous interrupt into a running loop: `interrupt` mode differs only in
//!   that the requester sleeps on a futex); with one, the communication thread serves. The
//!   figures: rank 1's loop time with requests over the same loop alone (the floor, same
//!   job), and requests served per millisecond of loop.

use super::RankArgs;
use crate::bench::median_present;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;
use volley_prim::{Dest, Info, Invocation, Prim, PrimConfig, Progress, Recv, Source};

/// Handler id: the communication thread sends its arguments on to rank 1 (E7).
pub(super) const HAND_OVER_ID: u32 = 40;
/// Handler id: answer a request with its 8-byte argument plus one (E8).
pub(super) const ANSWER_ID: u32 = 41;

/// E7's sizes (bytes).
pub(super) const E7_SIZES: [usize; 7] = [8, 32, 128, 256, 512, 1024, 2048];

/// `cfg` with the two handlers.
pub(super) fn with_handlers(cfg: PrimConfig) -> Result<PrimConfig, String> {
    cfg.handler(HAND_OVER_ID, hand_over)
        .and_then(|c| c.handler(ANSWER_ID, answer))
        .map_err(|e| e.to_string())
}

fn hand_over(inv: &mut Invocation<'_>) {
    inv.quiet();
    let mut len = [0u8; 8];
    if inv.receive(&mut len).is_err() {
        return;
    }
    let mut buf = vec![0u8; u64::from_le_bytes(len) as usize];
    if inv.receive(&mut buf).is_ok() {
        if let Err(e) = inv.send(1, Info::Data(&buf), &[]) {
            eprintln!("seed003-bounce E7: hand-over send: {e}");
        }
    }
}

fn answer(inv: &mut Invocation<'_>) {
    inv.quiet();
    let (Ok(v), Some(from)) = (inv.receive_u64(), inv.from()) else {
        return;
    };
    if let Err(e) = inv.send(from, Info::Data(&(v + 1).to_le_bytes()), &[]) {
        eprintln!("seed003-bounce E8: answer: {e}");
    }
}

/// One E7 repetition on rank 0 (per size: direct ns, handed-over ns, floor ns).
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct E7Rep {
    pub(super) direct_ns: Vec<f64>,
    pub(super) handed_ns: Vec<f64>,
    pub(super) floor_ns: f64,
    pub(super) failures: Vec<String>,
}

/// E7 on one rank: `count` messages per size and way.
pub(super) fn e7_rank(p: &Prim, count: u64, reps: usize) -> Result<Vec<E7Rep>, String> {
    let e = |e: volley_prim::PrimError| e.to_string();
    let me = p.rank();
    let mut out = Vec::new();
    for _ in 0..reps {
        let mut rep = E7Rep::default();
        for &size in &E7_SIZES {
            for handed in [false, true] {
                p.runtime().barrier();
                if me == 0 {
                    let mut msg = vec![0u8; size];
                    let start = Instant::now();
                    for i in 0..count {
                        msg[..8].copy_from_slice(&i.to_le_bytes());
                        if handed {
                            let mut args = (size as u64).to_le_bytes().to_vec();
                            args.extend_from_slice(&msg);
                            p.send(Dest::Internal, Info::Procedure(HAND_OVER_ID), true)
                                .map_err(e)?;
                            p.send(Dest::PreviousChain, Info::Data(&args), false)
                                .map_err(e)?;
                        } else {
                            p.send(Dest::Rank(1), Info::Data(&msg), false).map_err(e)?;
                        }
                    }
                    let ns = start.elapsed().as_nanos() as f64 / count as f64;
                    if handed {
                        rep.handed_ns.push(ns);
                    } else {
                        rep.direct_ns.push(ns);
                    }
                } else if me == 1 {
                    let mut buf = vec![0u8; size];
                    for i in 0..count {
                        p.receive(Source::Network, Recv::Data(&mut buf))
                            .map_err(e)?;
                        let got = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                        if got != i && rep.failures.len() < 4 {
                            rep.failures.push(format!(
                                "E7 {size} bytes handed={handed}: message {i} came as {got}"
                            ));
                        }
                    }
                }
            }
        }
        // The floor: the same bytes copied into a local buffer, 8 bytes per message.
        let mut sink = [0u64; 64];
        let start = Instant::now();
        for i in 0..count {
            sink[(i % 64) as usize] = std::hint::black_box(i);
        }
        std::hint::black_box(&sink);
        rep.floor_ns = start.elapsed().as_nanos() as f64 / count as f64;
        out.push(rep);
    }
    Ok(out)
}

/// One E8 repetition on rank 1: loop ns alone and with requests, requests served.
#[derive(Debug, Default, Serialize, Deserialize)]
pub(super) struct E8Rep {
    pub(super) alone_ns: f64,
    pub(super) busy_ns: f64,
    /// Requests rank 1 served during its loop.
    pub(super) served: u64,
    pub(super) failures: Vec<String>,
}

/// The computation: `chunks` chunks of a dependent floating-point loop.
fn work(chunk: u64, x: f64) -> f64 {
    let mut y = x;
    for _ in 0..chunk {
        y = std::hint::black_box(y * 1.000_000_1 + 1e-9);
    }
    y
}

/// E8 on one rank: rank 1 computes `chunks` chunks, once alone and once while rank 0 sends
/// requests one at a time until rank 1 says it is done.
pub(super) fn e8_rank(p: &Prim, chunks: u64, reps: usize) -> Result<Vec<E8Rep>, String> {
    let e = |e: volley_prim::PrimError| e.to_string();
    const CHUNK: u64 = 2_000;
    const STOP: u64 = u64::MAX;
    let me = p.rank();
    let comm = p.progress() == Progress::CommThread;
    let mut out = Vec::new();
    for _ in 0..reps {
        let mut rep = E8Rep::default();
        p.runtime().barrier();
        if me == 1 {
            let start = Instant::now();
            let mut x = 1.0;
            for _ in 0..chunks {
                x = work(CHUNK, x);
            }
            std::hint::black_box(x);
            rep.alone_ns = start.elapsed().as_nanos() as f64;
        }
        p.runtime().barrier();
        if me == 0 {
            let mut b = [0u8; 8];
            let mut i = 0u64;
            loop {
                p.send(Dest::Rank(1), Info::Procedure(ANSWER_ID), true)
                    .map_err(e)?;
                p.send(Dest::PreviousChain, Info::Data(&i.to_le_bytes()), false)
                    .map_err(e)?;
                p.receive(Source::Network, Recv::Data(&mut b)).map_err(e)?;
                let v = u64::from_le_bytes(b);
                if v == STOP {
                    // Request `i` is still out: its answer comes after (or raced) the stop.
                    p.receive(Source::Network, Recv::Data(&mut b)).map_err(e)?;
                    let v = u64::from_le_bytes(b);
                    if v != i + 1 && rep.failures.len() < 4 {
                        rep.failures
                            .push(format!("E8 last request {i} answered {v}"));
                    }
                    break;
                }
                if v != i + 1 && rep.failures.len() < 4 {
                    rep.failures.push(format!("E8 request {i} answered {v}"));
                }
                i += 1;
            }
        } else if me == 1 {
            let before = p.stats().handler_invocations;
            let start = Instant::now();
            let mut x = 1.0;
            for _ in 0..chunks {
                x = work(CHUNK, x);
                if !comm {
                    p.serve_procedures().map_err(e)?;
                }
            }
            std::hint::black_box(x);
            rep.busy_ns = start.elapsed().as_nanos() as f64;
            rep.served = p.stats().handler_invocations - before;
            p.send(Dest::Rank(0), Info::Data(&STOP.to_le_bytes()), false)
                .map_err(e)?;
            // Rank 0 has exactly one request out when it reads the stop: without a
            // communication thread, serve it here.
            if !comm {
                p.receive(Source::Network, Recv::Procedure).map_err(e)?;
            }
        }
        p.runtime().barrier();
        out.push(rep);
    }
    Ok(out)
}

/// E7's summary.
#[derive(Debug, Serialize)]
pub(super) struct E7Report {
    pub(super) sizes: Vec<usize>,
    pub(super) direct_ns: Vec<f64>,
    pub(super) handed_ns: Vec<f64>,
    pub(super) floor_ns: f64,
    /// The first size at which handing over costs the program thread no more than a
    /// direct send; `None`: direct wins at every size measured.
    pub(super) crossover_bytes: Option<usize>,
    /// The seed's shape: a direct send wins below the crossover (at the smallest size).
    pub(super) direct_wins_small: bool,
}

pub(super) fn e7_report(reps: &[E7Rep]) -> E7Report {
    let med = |f: &dyn Fn(&E7Rep) -> f64| median_present(reps.iter().map(f));
    let direct: Vec<f64> = (0..E7_SIZES.len())
        .map(|i| med(&|r: &E7Rep| r.direct_ns.get(i).copied().unwrap_or(f64::NAN)))
        .collect();
    let handed: Vec<f64> = (0..E7_SIZES.len())
        .map(|i| med(&|r: &E7Rep| r.handed_ns.get(i).copied().unwrap_or(f64::NAN)))
        .collect();
    let crossover = (0..E7_SIZES.len())
        .find(|&i| handed[i] <= direct[i])
        .map(|i| E7_SIZES[i]);
    E7Report {
        sizes: E7_SIZES.to_vec(),
        direct_wins_small: direct[0] < handed[0],
        direct_ns: direct,
        handed_ns: handed,
        floor_ns: med(&|r: &E7Rep| r.floor_ns),
        crossover_bytes: crossover,
    }
}

/// One mode's E8 figures.
#[derive(Debug, Serialize)]
pub(super) struct E8Row {
    pub(super) mode: &'static str,
    pub(super) alone_ms: f64,
    pub(super) busy_ms: f64,
    pub(super) slowdown: f64,
    pub(super) served_per_ms: f64,
}

pub(super) fn e8_row(mode: Progress, reps: &[E8Rep]) -> E8Row {
    let alone = median_present(reps.iter().map(|r| r.alone_ns));
    let busy = median_present(reps.iter().map(|r| r.busy_ns));
    let served = median_present(reps.iter().map(|r| r.served as f64));
    E8Row {
        mode: mode.name(),
        alone_ms: alone / 1e6,
        busy_ms: busy / 1e6,
        slowdown: busy / alone,
        served_per_ms: served / (busy / 1e6),
    }
}

pub(super) fn e7_table(t: &mut String, r: &E7Report) {
    let _ = writeln!(
        t,
        "  E7: program thread's ns per message, direct send vs handed to the comm thread (comm-thread mode)"
    );
    let _ = writeln!(t, "  {:>8} {:>10} {:>10}", "bytes", "direct", "handed");
    for i in 0..r.sizes.len() {
        let _ = writeln!(
            t,
            "  {:>8} {:>10.0} {:>10.0}",
            r.sizes[i], r.direct_ns[i], r.handed_ns[i]
        );
    }
    let _ = writeln!(
        t,
        "  floor: {:.1} ns per 8-byte local store (same job); crossover: {}; direct wins at {} bytes: {}",
        r.floor_ns,
        r.crossover_bytes
            .map_or("none in range".to_string(), |b| format!("{b} bytes")),
        r.sizes[0],
        r.direct_wins_small
    );
}

pub(super) fn e8_table(t: &mut String, rows: &[E8Row]) {
    let _ = writeln!(
        t,
        "  E8: rank 1's loop alone (floor, same job) and while serving rank 0's requests, medians"
    );
    let _ = writeln!(
        t,
        "  {:<12} {:>9} {:>9} {:>9} {:>12}",
        "mode", "alone ms", "busy ms", "slowdown", "served/ms"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "  {:<12} {:>9.2} {:>9.2} {:>9.2} {:>12.1}",
            r.mode, r.alone_ms, r.busy_ms, r.slowdown, r.served_per_ms
        );
    }
}

/// Whether a rank job is one of these parts (its third argument), and runs it.
pub(super) fn rank_part(a: &RankArgs, p: &Prim, iters: u64, reps: u64) -> Result<bool, String> {
    let out = match a.args.get(2).map(String::as_str) {
        Some("e7") => serde_json::to_value(e7_rank(p, iters, reps as usize)?),
        Some("e8") => serde_json::to_value(e8_rank(p, iters, reps as usize)?),
        _ => return Ok(false),
    }
    .map_err(|e| e.to_string())?;
    let want = if a.args[2] == "e7" { 0 } else { 1 };
    if p.rank() == want {
        super::write_result(&a.out, &out)?;
    }
    Ok(true)
}
