//! Pipelining between nodes (`volley bench am --transport udp|tcp`, three ranks, each on a
//! node of its own): the short round trip from rank 0 to rank 2, idle and while rank 0 streams
//! 16 MiB long messages to rank 1.
//!
//! - idle: rank 0 pings rank 2 (a short request answered by a short reply) and waits for the
//!   answer (`wait_on(2, ..)`, the wait for one rank's answer), one at a time; the median over
//!   the pings.
//! - during the bulk: rank 0 sends a 16 MiB long request to rank 1 (it returns once the whole
//!   payload is queued; how long that takes is `bulk_send_return_ns`), pings rank 2 at once,
//!   and waits for the ping's answer and then for rank 1's answer to the long one. The round
//!   trip of a ping is counted only if its answer came before rank 1's (the transfer was still
//!   in flight); the median over those, and the share of pings that were
//!   (`short_rtt_overlap_share`: a send that held the caller until the transfer was over
//!   leaves no ping to count).

use super::{median, write_reps, Medians};
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::{ReplyHandler, Runtime};

/// Bytes of one long message of the bulk transfer.
pub const BULK: usize = 16 << 20;

/// One repetition's figures (rank 0's).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PipeRep {
    /// Median short round trip to rank 2 with nothing else in flight, ns.
    pub short_rtt_idle_ns: f64,
    /// Median short round trip to rank 2 while a 16 MiB long message to rank 1 is in flight,
    /// ns (none if no ping's answer came before the transfer's).
    pub short_rtt_during_bulk_ns: Option<f64>,
    /// Median time the 16 MiB long request took to return, ns.
    pub bulk_send_return_ns: f64,
    /// Share of the pings whose answer came while the transfer was in flight.
    pub short_rtt_overlap_share: f64,
}

impl Medians for PipeRep {
    fn medians(reps: &[Self]) -> Self {
        Self {
            short_rtt_idle_ns: super::median_present(reps.iter().map(|r| r.short_rtt_idle_ns)),
            short_rtt_during_bulk_ns: super::median_opt(
                reps.iter().map(|r| r.short_rtt_during_bulk_ns),
            ),
            bulk_send_return_ns: super::median_present(reps.iter().map(|r| r.bulk_send_return_ns)),
            short_rtt_overlap_share: super::median_present(
                reps.iter().map(|r| r.short_rtt_overlap_share),
            ),
        }
    }
}

/// Runs one rank of the three; rank 0 writes its repetitions to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let pongs = Arc::new(AtomicU64::new(0));
    let bulks = Arc::new(AtomicU64::new(0));
    let ends = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let p = pongs.clone();
    let pong: ReplyHandler = b.reply_handler("pong", move |_| {
        p.fetch_add(1, Ordering::Relaxed);
    });
    let ping = b.request_handler("ping", move |m, tok| {
        tok.reply_short(pong, m.args()).expect("reply");
    });
    let bl = bulks.clone();
    let bulk_done: ReplyHandler = b.reply_handler("bulk_done", move |_| {
        bl.fetch_add(1, Ordering::Relaxed);
    });
    let bulk = b.request_handler("bulk", move |m, tok| {
        // The payload is in place when the handler runs; answer with its length.
        tok.reply_short(bulk_done, &[m.payload().len() as u64])
            .expect("reply");
    });
    let e = ends.clone();
    let end = b.request_handler("end", move |_, _| {
        e.fetch_add(1, Ordering::Relaxed);
    });
    b.segment_bytes(BULK + (1 << 20));
    let rt = b
        .build()
        .map_err(|e| format!("joining the benchmark job: {e}"))?;
    if rt.size() != 3 {
        return Err(format!(
            "the pipelining benchmark needs 3 ranks, got {}",
            rt.size()
        ));
    }
    let pings = ((200.0 * scale) as u64).max(20);
    let transfers = ((20.0 * scale) as u64).max(5);
    let payload = vec![0x3cu8; BULK];
    let mut out_reps = Vec::new();
    for rep in 0..reps as u64 {
        rt.barrier();
        if rt.rank() == 0 {
            let round_trip = |rt: &Runtime| {
                let target = pongs.load(Ordering::Relaxed) + 1;
                let t0 = Instant::now();
                rt.request_short(2, ping, &[1]).expect("ping");
                rt.wait_on(2, || pongs.load(Ordering::Relaxed) >= target);
                t0.elapsed().as_nanos() as f64
            };
            let mut idle: Vec<f64> = (0..pings).map(|_| round_trip(&rt)).collect();
            let (mut during, mut returns) = (Vec::new(), Vec::new());
            for _ in 0..transfers {
                let target = bulks.load(Ordering::Relaxed) + 1;
                let t0 = Instant::now();
                rt.request_long(1, bulk, &[], &payload, 0).expect("bulk");
                returns.push(t0.elapsed().as_nanos() as f64);
                let ns = round_trip(&rt);
                if bulks.load(Ordering::Relaxed) < target {
                    during.push(ns);
                }
                rt.wait_until(|| bulks.load(Ordering::Relaxed) >= target);
            }
            out_reps.push(PipeRep {
                short_rtt_idle_ns: median(&mut idle),
                short_rtt_overlap_share: during.len() as f64 / transfers as f64,
                short_rtt_during_bulk_ns: Some(median(&mut during)).filter(|x| !x.is_nan()),
                bulk_send_return_ns: median(&mut returns),
            });
            for dest in [1, 2] {
                rt.request_short(dest, end, &[]).expect("end");
            }
        } else {
            rt.wait_until(|| ends.load(Ordering::Relaxed) > rep);
        }
    }
    rt.barrier();
    if rt.rank() == 0 {
        write_reps(out, out_reps)?;
    }
    Ok(())
}
