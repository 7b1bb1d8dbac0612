//! `volley bench loggp`: seed 001's LogGP table (Table 2) for volley, one column per transport,
//! and the size sweeps behind G and the half-power size.
//!
//! Two ranks; rank 0 sends, rank 1 receives. The method is that of "Assessing Fast Network
//! Interfaces" as seed 001 §5 and GASNet's `testlogGP` use it, with a calibrated delay loop (a
//! spin of a known number of iterations, timed once per rank) standing in for computation:
//! - **RTT**: ping-pong of a one-argument short request whose handler replies.
//! - **g**: a flood of short requests whose handler only counts, then one ping; the ping's reply
//!   comes after every flood message was handled (a channel is FIFO), so time / count is g.
//! - **o_s**: bursts of sends, each followed by a delay longer than g so no send waits for
//!   room; the same bursts of delays without the sends are timed right after, and o_s is the
//!   difference per send.
//! - **o_r**: the receiver delays longer than a round trip, so the message is waiting, then times
//!   the poll that handles it (a sample counts only if that one poll handled it).
//! - **L** = RTT/2 − o_s − o_r (negative when the overheads overlap, as in the seed).
//! - **Sweeps** from 8 B to 16 MiB by powers of two: latency is half the round trip of an
//!   OSU-style ping-pong of long messages (each side sends the whole size back once it has it);
//!   bandwidth is a one-way stream of long messages closed by a ping (OSU's `osu_bw` with the
//!   ping for its window's acknowledgement). Sizes above [`CHUNK`] travel as pipelined long
//!   messages of [`CHUNK`] bytes (a network message carries at most 8 MiB), as the seed's G
//!   benchmark pipelines 8 kB chunks.
//! - **G** = 1 / the peak of the bandwidth sweep (the seed's "Bandwidth (1/G)"); the
//!   **half-power size** is where the bandwidth curve first reaches half that peak (interpolated
//!   on log2 of the size).
//!
//! The floors beside them, for the report: the memcpy of each size by rank 0 between two buffers
//! of its own (every transport), and over a network the raw socket round trip and stream.

use super::floor;
use super::sweep::{memcpy_mb_per_s, sweep_iters};
use super::{median, median_curve, median_opt, median_present, CurvePoint, Medians, Reps};
use super::{Transport, NETWORK_SCALE};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::{RequestHandler, Runtime};

mod output;
mod report;

pub use output::{csv, print_osu, print_table};
pub use report::*;

/// The sweep's sizes: 8 B to 16 MiB by powers of two.
pub const SIZES: std::ops::RangeInclusive<u32> = 3..=24;
/// Largest long message the sweeps send; larger sizes are pipelined in pieces of this size.
pub const CHUNK: usize = 4 << 20;
/// Sends per o_s burst (well inside a ring, so none waits for credit).
const BURST: usize = 16;

/// A busy loop of a known cost: the stand-in for computation between sends and before polls.
#[derive(Debug, Clone, Copy)]
pub struct DelayLoop {
    ns_per_iter: f64,
}

impl DelayLoop {
    /// Times the loop; the fastest of several trials (the one least disturbed by the machine).
    pub fn calibrate() -> Self {
        let n = 200_000;
        let mut best = f64::INFINITY;
        for _ in 0..7 {
            let t0 = Instant::now();
            Self::spin(n);
            best = best.min(t0.elapsed().as_nanos() as f64 / n as f64);
        }
        Self {
            ns_per_iter: best.max(0.01),
        }
    }

    /// `iters` iterations of the loop; `black_box` keeps the compiler from removing it.
    #[inline(never)]
    pub fn spin(iters: u64) {
        let mut x = 0u64;
        for i in 0..iters {
            x = std::hint::black_box(x.wrapping_add(i));
        }
        std::hint::black_box(x);
    }

    /// Iterations that take about `ns`.
    pub fn iters_for(&self, ns: f64) -> u64 {
        (ns / self.ns_per_iter).ceil().max(1.0) as u64
    }
}

struct Rank {
    rt: Runtime,
    pongs: Arc<AtomicU64>,
    sinks: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    ends: Arc<AtomicU64>,
    acks: Arc<AtomicU64>,
    reported: Arc<AtomicU64>,
    ping: RequestHandler,
    sink: RequestHandler,
    take: RequestHandler,
    end: RequestHandler,
    ack: RequestHandler,
    report: RequestHandler,
    scale: f64,
    phase: u64,
    /// Bytes this rank has received in ping-pongs so far, as counted by `take` when all came.
    pingpong_bytes: std::cell::Cell<u64>,
}

impl Rank {
    fn new(scale: f64) -> Self {
        let counter = || Arc::new(AtomicU64::new(0));
        let (pongs, sinks, bytes, ends, acks) =
            (counter(), counter(), counter(), counter(), counter());
        let reported = Arc::new(AtomicU64::new(u64::MAX));
        let mut b = Runtime::builder();
        let p = pongs.clone();
        // Handlers run one at a time: a plain load and store counts exactly.
        let pong = b.reply_handler("pong", move |_| {
            p.store(p.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let ping = b.request_handler("ping", move |m, tok| {
            tok.reply_short(pong, m.args()).expect("reply");
        });
        let s = sinks.clone();
        let sink = b.request_handler("sink", move |_, _| {
            s.store(s.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let by = bytes.clone();
        let take = b.request_handler("take", move |m, _| {
            by.store(
                by.load(Ordering::Relaxed) + m.payload().len() as u64,
                Ordering::Relaxed,
            );
        });
        let e = ends.clone();
        let end = b.request_handler("end", move |_, _| {
            e.fetch_add(1, Ordering::Relaxed);
        });
        let a = acks.clone();
        let ack = b.request_handler("ack", move |_, _| {
            a.fetch_add(1, Ordering::Relaxed);
        });
        let rep = reported.clone();
        let report = b.request_handler("report", move |m, _| {
            rep.store(m.arg(0), Ordering::Relaxed);
        });
        // The largest message lands whole: 16 MiB of segment area, and some room.
        b.segment_bytes((1 << *SIZES.end()) + (1 << 20));
        let rt = b.build().unwrap_or_else(|e| {
            eprintln!("volley bench rank: joining the benchmark job: {e}");
            std::process::exit(1)
        });
        Self {
            rt,
            pongs,
            sinks,
            bytes,
            ends,
            acks,
            reported,
            ping,
            sink,
            take,
            end,
            ack,
            report,
            scale,
            phase: 0,
            pingpong_bytes: std::cell::Cell::new(0),
        }
    }

    fn iters(&self, n: u64) -> u64 {
        ((n as f64 * self.scale) as u64).max(10)
    }

    /// A phase driven by rank 0 while rank 1 serves (runs handlers) until rank 0 ends it.
    fn served(&mut self, drive: impl FnOnce(&Self)) {
        self.phase += 1;
        if self.rt.rank() == 0 {
            drive(self);
            self.rt.request_short(1, self.end, &[]).expect("end");
        } else {
            let phase = self.phase;
            self.rt
                .wait_until(|| self.ends.load(Ordering::Relaxed) >= phase);
        }
        self.rt.barrier();
    }

    /// Rank 0: sends a ping and waits for its reply (after everything sent before it).
    fn ping_and_wait(&self) {
        let target = self.pongs.load(Ordering::Relaxed) + 1;
        self.rt.request_short(1, self.ping, &[1]).expect("ping");
        self.rt
            .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
    }

    /// Mean short round trip, ns.
    fn rtt(&self, iters: u64) -> f64 {
        let warm = (iters / 10).max(5);
        let mut t0 = Instant::now();
        for i in 0..warm + iters {
            if i == warm {
                t0 = Instant::now();
            }
            self.ping_and_wait();
        }
        t0.elapsed().as_nanos() as f64 / iters as f64
    }

    /// Sends `buf` to `dest` as long requests of at most [`CHUNK`] bytes, for `handler`.
    fn send_bytes(&self, dest: usize, handler: RequestHandler, buf: &[u8]) {
        for (i, piece) in buf.chunks(CHUNK).enumerate() {
            self.rt
                .request_long(dest, handler, &[], piece, i * CHUNK)
                .expect("long request");
        }
    }

    /// Both ranks: an OSU-style ping-pong of `size` bytes; rank 0 returns µs one way.
    fn pingpong(&self, size: usize, iters: u64) -> f64 {
        let buf = vec![3u8; size];
        let me = self.rt.rank();
        let warm = (iters / 10).max(2);
        // The running total, not a fresh read: a send that waits for room polls, so the other
        // side's next message may already be counted when this call starts.
        let base = self.pingpong_bytes.get();
        self.pingpong_bytes.set(base + (warm + iters) * size as u64);
        let mut t0 = Instant::now();
        for i in 0..warm + iters {
            if i == warm {
                t0 = Instant::now();
            }
            let want = base + (i + 1) * size as u64;
            if me == 0 {
                self.send_bytes(1, self.take, &buf);
                self.rt
                    .wait_until(|| self.bytes.load(Ordering::Relaxed) >= want);
            } else {
                self.rt
                    .wait_until(|| self.bytes.load(Ordering::Relaxed) >= want);
                self.send_bytes(0, self.take, &buf);
            }
        }
        t0.elapsed().as_nanos() as f64 / iters as f64 / 2e3
    }

    /// Rank 0: streams `n` messages of `size` bytes to rank 1, closed by a ping; MB/s.
    fn stream(&self, size: usize, n: u64) -> f64 {
        let buf = vec![5u8; size];
        // Warm-up: the first touch of the target's segment pages.
        self.send_bytes(1, self.sink, &buf);
        self.ping_and_wait();
        let t0 = Instant::now();
        for _ in 0..n {
            self.send_bytes(1, self.sink, &buf);
        }
        self.ping_and_wait();
        (n as usize * size) as f64 / t0.elapsed().as_nanos() as f64 * 1e3
    }

    fn one_rep(&mut self, delay: DelayLoop) -> LoggpRep {
        let me = self.rt.rank();
        let mut r = LoggpRep {
            delay_ns_per_iter: delay.ns_per_iter,
            ..LoggpRep::default()
        };
        // RTT, then g: every later delay is chosen from them, so rank 1 learns them too.
        let (mut rtt, mut g) = (0.0, 0.0);
        self.served(|s| {
            rtt = s.rtt(s.iters(20_000));
            let n = s.iters(100_000);
            let t0 = Instant::now();
            for _ in 0..n {
                s.rt.request_short(1, s.sink, &[]).expect("sink");
            }
            s.ping_and_wait();
            g = t0.elapsed().as_nanos() as f64 / n as f64;
        });
        if me == 0 {
            self.rt
                .request_short(1, self.report, &[rtt.to_bits()])
                .expect("report");
        } else {
            rtt = self.take_report();
        }
        self.rt.barrier();
        r.rtt_ns = rtt;
        r.g_ns = g;
        // o_s: each send followed by a delay longer than g, so none waits for room.
        let mut o_s = Vec::new();
        self.served(|s| {
            let k = delay.iters_for((2.0 * g).max(1_000.0));
            for _ in 0..s.iters(2_000) {
                let t0 = Instant::now();
                for _ in 0..BURST {
                    s.rt.request_short(1, s.sink, &[]).expect("sink");
                    DelayLoop::spin(k);
                }
                let with_sends = t0.elapsed().as_nanos() as f64;
                let t1 = Instant::now();
                for _ in 0..BURST {
                    DelayLoop::spin(k);
                }
                let delays = t1.elapsed().as_nanos() as f64;
                o_s.push((with_sends - delays) / BURST as f64);
            }
            s.ping_and_wait();
        });
        r.o_s_ns = median(&mut o_s);
        // o_r: rank 1 delays longer than a round trip after its ack, so the next message is
        // waiting when it polls; rank 0 sends one message per ack.
        let trials = self.iters(2_000);
        // The counts before the phase, read while nothing of it can have arrived: after the
        // barrier rank 1 might already have handled rank 0's first message.
        let acks = self.acks.load(Ordering::Relaxed);
        let base = self.sinks.load(Ordering::Relaxed);
        self.rt.barrier();
        if me == 0 {
            for i in 0..trials {
                self.rt.request_short(1, self.sink, &[]).expect("sink");
                self.rt
                    .wait_until(|| self.acks.load(Ordering::Relaxed) > acks + i);
            }
            r.o_r_ns = Some(self.take_report()).filter(|x| !x.is_nan());
        } else {
            let k = delay.iters_for(2.0 * rtt + 2_000.0);
            let mut o_r = Vec::new();
            for i in 0..trials {
                DelayLoop::spin(k);
                let want = base + i + 1;
                let t0 = Instant::now();
                self.rt.poll();
                let ns = t0.elapsed().as_nanos() as f64;
                if self.sinks.load(Ordering::Relaxed) == want {
                    o_r.push(ns);
                }
                while self.sinks.load(Ordering::Relaxed) < want {
                    self.rt.poll();
                }
                self.rt.request_short(0, self.ack, &[]).expect("ack");
            }
            let med = median(&mut o_r);
            self.rt
                .request_short(0, self.report, &[med.to_bits()])
                .expect("report");
        }
        self.rt.barrier();
        // The latency sweep: both ranks take part.
        for size in SIZES.map(|p| 1usize << p) {
            let n = sweep_iters(self.scale, size, 10_000, 256 << 20);
            let us = self.pingpong(size, n);
            if me == 0 {
                r.latency.push(LatencyPoint {
                    size,
                    latency_us: us,
                });
            }
        }
        self.rt.barrier();
        // The bandwidth sweep, then the memcpy floor of each size.
        let mut bw = Vec::new();
        self.served(|s| {
            for size in SIZES.map(|p| 1usize << p) {
                let n = sweep_iters(s.scale, size, 20_000, 1 << 30);
                bw.push(BandwidthPoint {
                    size,
                    mb_per_s: s.stream(size, n),
                });
            }
        });
        r.bandwidth = bw;
        if me == 0 {
            r.memcpy = SIZES
                .map(|p| {
                    let size = 1usize << p;
                    let n = sweep_iters(self.scale.max(0.1), size, 100_000, 1 << 30);
                    BandwidthPoint {
                        size,
                        mb_per_s: memcpy_mb_per_s(size, n),
                    }
                })
                .collect();
        }
        self.rt.barrier();
        r
    }

    /// Waits for the figure the other rank reports, and takes it.
    fn take_report(&self) -> f64 {
        self.rt
            .wait_until(|| self.reported.load(Ordering::Relaxed) != u64::MAX);
        f64::from_bits(self.reported.swap(u64::MAX, Ordering::Relaxed))
    }
}

/// Runs one rank; rank 0 writes every repetition's figures to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let mut rank = Rank::new(scale);
    if rank.rt.size() != 2 {
        return Err(format!(
            "the loggp benchmark needs 2 ranks, got {}",
            rank.rt.size()
        ));
    }
    let delay = DelayLoop::calibrate();
    let mut reps_out = Vec::new();
    for _ in 0..reps {
        reps_out.push(rank.one_rep(delay));
    }
    if rank.rt.rank() == 0 {
        super::write_reps(out, reps_out)?;
    }
    Ok(())
}

/// G and the half-power size from a bandwidth curve: (G in ns per byte, half-power bytes,
/// peak MB/s). NaN where the curve has nothing to say.
pub fn g_and_half_power(curve: &[BandwidthPoint]) -> (f64, f64, f64) {
    let peak = curve
        .iter()
        .map(|p| p.mb_per_s)
        .filter(|x| x.is_finite())
        .fold(f64::NAN, f64::max);
    if peak.is_nan() || peak <= 0.0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    // MB/s is bytes per µs: ns per byte is 1000 / MB/s.
    let big_g = 1e3 / peak;
    let half = peak / 2.0;
    let mut prev: Option<&BandwidthPoint> = None;
    for p in curve {
        if p.mb_per_s >= half {
            let size = match prev {
                None => p.size as f64,
                Some(q) => {
                    // Linear in log2(size) between the last point below half and this one.
                    let (x0, x1) = ((q.size as f64).log2(), (p.size as f64).log2());
                    let t = (half - q.mb_per_s) / (p.mb_per_s - q.mb_per_s);
                    (x0 + t * (x1 - x0)).exp2()
                }
            };
            return (big_g, size, peak);
        }
        prev = Some(p);
    }
    (big_g, f64::NAN, peak)
}

/// Measures each transport in `transports` (one job each) and builds the table.
/// With `peers`, UCX and Open MPI are measured after volley, in the same run.
pub fn bench(
    reps: usize,
    scale: f64,
    transports: &[Transport],
    peers: bool,
) -> Result<LoggpReport, String> {
    // One step per floor, per job and per peer; no tick thread runs (the floors fork).
    let steps = 2 * transports.len() + if peers { 2 * reps } else { 0 };
    let bar = crate::bar::steps(steps as u64);
    // The floors fork, so they all come before any job (whose launcher starts threads).
    let mut floors = Vec::new();
    for &t in transports {
        bar.set_message(format!("{} floor", t.name()));
        floors.push(match t {
            Transport::Shm => {
                let rtt = floor::cacheline_rtt_ns(((100_000.0 * scale) as u64).max(100), 3)?;
                (Some(rtt), None)
            }
            net => {
                let kind = if net == Transport::Udp {
                    floor::SocketFloor::Udp
                } else {
                    floor::SocketFloor::Tcp
                };
                let iters = ((50_000.0 * scale) as u64).max(100);
                let rtt = floor::socket_rtt_ns(kind, 8, iters, 3)?;
                let count = ((300.0 * scale * NETWORK_SCALE) as u64).max(10);
                let gbps = floor::socket_stream_gbps(kind, count, 3)?;
                (Some(rtt), Some(gbps * 1e3))
            }
        });
        bar.inc(1);
    }
    let mut configs = Vec::new();
    for (&t, (floor_rtt_ns, raw_stream_mb_per_s)) in transports.iter().zip(floors) {
        let job_scale = if t == Transport::Shm {
            scale
        } else {
            scale * NETWORK_SCALE
        };
        bar.set_message(format!("{} job", t.name()));
        let runs = super::run_ranks::<Reps<LoggpRep>>("loggp", 2, job_scale, reps, t, &[])?;
        bar.inc(1);
        let m = runs.medians()?;
        let (big_g, half, peak) = g_and_half_power(&m.bandwidth);
        configs.push(LoggpConfig {
            name: t.name().into(),
            l_ns: m.o_r_ns.map(|o_r| m.rtt_ns / 2.0 - m.o_s_ns - o_r),
            o_s_ns: m.o_s_ns,
            o_r_ns: m.o_r_ns,
            g_ns: m.g_ns,
            big_g_ns_per_byte: big_g,
            half_power_bytes: half,
            rtt_ns: m.rtt_ns,
            peak_mb_per_s: peak,
            latency: m.latency,
            bandwidth: m.bandwidth,
            memcpy: m.memcpy,
            floor_rtt_ns,
            raw_stream_mb_per_s,
            runs: runs.reps,
        });
    }
    let peers = if peers {
        let p = super::peers::measure(scale, reps, |name| {
            bar.set_message(format!("peer: {name}"));
            bar.inc(1);
        });
        for n in &p.notes {
            bar.suspend(|| eprintln!("volley bench loggp: {n}"));
        }
        p.series
    } else {
        Vec::new()
    };
    bar.finish_and_clear();
    Ok(LoggpReport {
        configs,
        machine: Machine::here(),
        reps,
        scale,
        peers,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bw(points: &[(usize, f64)]) -> Vec<BandwidthPoint> {
        points
            .iter()
            .map(|&(size, mb_per_s)| BandwidthPoint { size, mb_per_s })
            .collect()
    }

    #[test]
    fn g_is_the_peak_and_half_power_interpolates_on_log_size() {
        let (g, half, peak) = g_and_half_power(&bw(&[(8, 100.0), (16, 400.0), (32, 1000.0)]));
        assert_eq!(peak, 1000.0);
        assert_eq!(g, 1.0);
        // Half the peak (500) lies 1/6 of the way from 16 (400) to 32 (1000) in log2.
        assert!((half - 2f64.powf(4.0 + 1.0 / 6.0)).abs() < 1e-9, "{half}");
        let (g, half, _) = g_and_half_power(&bw(&[(8, 600.0), (16, 1000.0)]));
        assert_eq!((g, half), (1.0, 8.0));
        assert!(g_and_half_power(&[]).0.is_nan());
    }

    #[test]
    fn dates_are_civil_utc() {
        let d = utc_now();
        assert_eq!(d.len(), "2026-11-24 11:05:00 UTC".len(), "{d}");
        assert!(d.starts_with("20") && d.ends_with(" UTC"), "{d}");
    }

    #[test]
    fn the_delay_loop_takes_about_what_it_was_calibrated_for() {
        let d = DelayLoop::calibrate();
        assert!(d.ns_per_iter > 0.0 && d.ns_per_iter.is_finite());
        // Never fewer than one iteration, and more for longer delays.
        assert_eq!(d.iters_for(0.0), 1);
        assert!(d.iters_for(1e6) > d.iters_for(1e3));
    }
}
