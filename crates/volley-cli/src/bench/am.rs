//! The two ranks of `volley bench am`. Rank 0 drives every phase and records results; rank 1
//! serves requests (and takes part in the two-way flood and overhead measurements).
//!
//! Methods (seed 001 §5.1, after "Assessing Fast Network Interfaces"):
//! - round trips: ping-pong of a request whose handler replies, averaged over many iterations;
//! - flood: rank 0 streams short requests whose handler only counts, then one ping; the ping's
//!   reply comes after every flood message was handled (rings are FIFO), so time / count is the
//!   gap g per message;
//! - o_send: a burst shorter than the ring, timed at the sender while the receiver is not
//!   polling;
//! - o_recv: the receiver stops polling until a burst has arrived, then times the polls that
//!   handle it.
//!
//! The driver ([`bench`]) merges the repetitions into an [`AmReport`] beside the floor.

use super::floor::{self, SharedLines};
use super::{median, median_curve, median_opt, median_present, CurvePoint, Medians, Reps};
use super::{Transport, NETWORK_SCALE};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::{ReplyHandler, RequestHandler, Runtime};

const MEDIUM_SIZES: [usize; 6] = [0, 8, 64, 512, 4096, 65536];
const LONG_SIZES: [usize; 4] = [8, 4096, 65536, 1 << 20];
const BURST: usize = 32;
/// Blocks of the short round trip and the one-way flood, each right after a floor ping-pong.
const BLOCKS: usize = 5;

/// A round trip at one payload size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeRtt {
    /// Payload bytes.
    pub size: usize,
    /// Round trip, ns.
    pub rtt_ns: f64,
}

impl CurvePoint for SizeRtt {
    fn figure(&self) -> f64 {
        self.rtt_ns
    }
    fn set_figure(&mut self, v: f64) {
        self.rtt_ns = v;
    }
}

/// One repetition's figures, rank 0's (ns unless named otherwise).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AmRep {
    /// Short request round trip: median over the blocks.
    pub am_short_rtt_ns: f64,
    /// One-way flood, per message: median over the blocks.
    pub am_flood_ns_per_msg: f64,
    /// The floor and the bare ring reference measured in the blocks (shared memory only).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockFigures>,
    /// Medium request round trips by payload size.
    pub am_medium_rtt_ns: Vec<SizeRtt>,
    /// Long request round trips by payload size (the payload travels both ways).
    pub am_long_rtt_ns: Vec<SizeRtt>,
    /// Flood in both directions at once, per message.
    pub am_flood_2way_ns_per_msg: f64,
    /// LogP receive overhead; None (null) when rank 1 kept no sample (it keeps only polls
    /// that found a whole burst waiting).
    pub o_recv_ns: Option<f64>,
    /// LogP send overhead.
    pub o_send_ns: f64,
    /// Rank 0 copying 1 MiB between two buffers of its own, GB/s, right before the long
    /// round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// The long round trip's data movement with no runtime (shared memory only): 2 MiB per
    /// round trip of a memcpy ping-pong between the two ranks, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_pingpong_gbps: Option<f64>,
    /// Rank 0 copying 64 KiB between two buffers of its own, ns per copy (the medium
    /// round trip's yardstick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_64k_ns: Option<f64>,
    /// A one-way stream of 1 MiB long requests, GB/s.
    #[serde(
        rename = "long_stream_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_gbps_1mib: Option<f64>,
}

/// What the shared-memory blocks measure beside the short round trip and the flood: medians
/// over the blocks, the ratios taken block by block (each beside its own floor).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockFigures {
    /// The floor: a cache-line ping-pong between the two ranks.
    pub cacheline_rtt_ns: f64,
    /// Short round trip over the block's floor.
    pub am_short_rtt_over_floor: f64,
    /// Flood per message over the block's floor.
    pub am_flood_over_floor: f64,
    /// Round trip on two bare rings with boxed handlers and no runtime (the reference).
    pub bare_am_rtt_ns: f64,
    /// The reference over the block's floor.
    pub bare_am_rtt_over_floor: f64,
    /// Short round trip over the block's reference.
    pub am_short_rtt_over_bare: f64,
}

impl Medians for BlockFigures {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        Self {
            cacheline_rtt_ns: med(|r| r.cacheline_rtt_ns),
            am_short_rtt_over_floor: med(|r| r.am_short_rtt_over_floor),
            am_flood_over_floor: med(|r| r.am_flood_over_floor),
            bare_am_rtt_ns: med(|r| r.bare_am_rtt_ns),
            bare_am_rtt_over_floor: med(|r| r.bare_am_rtt_over_floor),
            am_short_rtt_over_bare: med(|r| r.am_short_rtt_over_bare),
        }
    }
}

impl Medians for AmRep {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        let blocks: Vec<BlockFigures> = reps.iter().filter_map(|r| r.blocks.clone()).collect();
        Self {
            am_short_rtt_ns: med(|r| r.am_short_rtt_ns),
            am_flood_ns_per_msg: med(|r| r.am_flood_ns_per_msg),
            blocks: (!blocks.is_empty()).then(|| BlockFigures::medians(&blocks)),
            am_medium_rtt_ns: median_curve(reps, |r| &r.am_medium_rtt_ns),
            am_long_rtt_ns: median_curve(reps, |r| &r.am_long_rtt_ns),
            am_flood_2way_ns_per_msg: med(|r| r.am_flood_2way_ns_per_msg),
            o_recv_ns: median_opt(reps.iter().map(|r| r.o_recv_ns)),
            o_send_ns: med(|r| r.o_send_ns),
            memcpy_gbps: median_opt(reps.iter().map(|r| r.memcpy_gbps)),
            memcpy_pingpong_gbps: median_opt(reps.iter().map(|r| r.memcpy_pingpong_gbps)),
            memcpy_64k_ns: median_opt(reps.iter().map(|r| r.memcpy_64k_ns)),
            long_stream_gbps_1mib: median_opt(reps.iter().map(|r| r.long_stream_gbps_1mib)),
        }
    }
}

/// The ratios to the floor and to the bare ring reference.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmRatios {
    /// Short round trip over the floor.
    pub am_short_rtt_over_floor: f64,
    /// Flood per message over the floor.
    pub am_flood_over_floor: f64,
    /// The bare ring reference over the floor (shared memory only; null otherwise).
    pub bare_am_rtt_over_floor: Option<f64>,
    /// Short round trip over the bare ring reference (shared memory only; null otherwise).
    pub am_short_rtt_over_bare: Option<f64>,
    /// `long_gbps_1MiB` over `memcpy_gbps`.
    #[serde(
        rename = "long_gbps_1MiB_over_memcpy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_over_memcpy: Option<f64>,
    /// `long_gbps_1MiB` over `memcpy_pingpong_gbps` (shared memory only).
    #[serde(
        rename = "long_gbps_1MiB_over_memcpy_pingpong",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_over_memcpy_pingpong: Option<f64>,
    /// The medium round trip at 64 KiB over two 64 KiB memcpys of the same run (issue
    /// target: at most 2).
    #[serde(
        rename = "medium_64KiB_rtt_over_two_memcpys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub medium_64k_over_two_memcpys: Option<f64>,
    /// `long_stream_gbps_1MiB` over `raw_stream_gbps` (network only).
    #[serde(
        rename = "long_stream_gbps_1MiB_over_raw_stream",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_over_raw_stream: Option<f64>,
}

/// The whole benchmark's results: the medians over the repetitions (ns unless named
/// otherwise), the floor, and every repetition's own figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmReport {
    /// Short request round trip.
    pub am_short_rtt_ns: f64,
    /// One-way flood, per message (the gap g).
    pub am_flood_ns_per_msg: f64,
    /// Flood in both directions at once, per message.
    pub am_flood_2way_ns_per_msg: f64,
    /// Medium request round trips by payload size.
    pub am_medium_rtt_ns: Vec<SizeRtt>,
    /// Long request round trips by payload size.
    pub am_long_rtt_ns: Vec<SizeRtt>,
    /// Long round trip bandwidth at 1 MiB, GB/s (the payload travels both ways).
    #[serde(rename = "long_gbps_1MiB")]
    pub long_gbps_1mib: f64,
    /// The bulk floor: rank 0 copying 1 MiB between two buffers of its own, in the same run
    /// (median of the repetitions), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// The long round trip's data movement without a runtime: a memcpy ping-pong of 1 MiB
    /// each way between the two ranks (shared memory only), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_pingpong_gbps: Option<f64>,
    /// A 64 KiB memcpy by rank 0 in the same run, ns (median of the repetitions).
    #[serde(
        rename = "memcpy_64KiB_ns",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub memcpy_64k_ns: Option<f64>,
    /// A one-way stream of 1 MiB long requests, GB/s.
    #[serde(
        rename = "long_stream_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_gbps_1mib: Option<f64>,
    /// The network's stream floor: 1 MiB messages streamed over raw sockets between two
    /// processes pinned like the ranks, measured before the job, GB/s (UDP and TCP only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_stream_gbps: Option<f64>,
    /// Short round trip from rank 0 to rank 2 of a three-rank job (one rank per node), idle,
    /// ns (UDP and TCP only; see `pipe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_idle_ns: Option<f64>,
    /// The same round trip while rank 0 streams 16 MiB long messages to rank 1, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_during_bulk_ns: Option<f64>,
    /// `short_rtt_during_bulk_ns` over `short_rtt_idle_ns` (target: small, about 3 at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_during_bulk_over_idle: Option<f64>,
    /// LogP receive overhead (absent when no repetition kept a sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o_recv_ns: Option<f64>,
    /// LogP send overhead.
    pub o_send_ns: f64,
    /// LogP latency: RTT/2 - o_send - o_recv (may be negative; null without o_recv).
    #[serde(rename = "L_ns")]
    pub l_ns: Option<f64>,
    /// The shared-memory floor: a cache-line ping-pong between the two ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cacheline_rtt_ns: Option<f64>,
    /// The UDP floor: raw sockets, measured before the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_raw_rtt_ns: Option<f64>,
    /// The TCP floor: raw sockets, measured before the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_raw_rtt_ns: Option<f64>,
    /// Which of the three floors this run has.
    pub floor_key: String,
    /// The bare ring reference (shared memory only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_am_rtt_ns: Option<f64>,
    /// The ratios.
    pub ratios: AmRatios,
    /// shm, udp or tcp.
    pub transport: String,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
    /// CPUs this machine offers.
    pub cpus: usize,
    /// Every repetition's figures.
    pub runs: Vec<AmRep>,
}

impl AmReport {
    /// The floor named by `floor_key` (NaN if it is missing).
    pub fn floor_ns(&self) -> f64 {
        match self.floor_key.as_str() {
            "udp_raw_rtt_ns" => self.udp_raw_rtt_ns,
            "tcp_raw_rtt_ns" => self.tcp_raw_rtt_ns,
            _ => self.cacheline_rtt_ns,
        }
        .unwrap_or(f64::NAN)
    }
}

struct Bench {
    rt: Runtime,
    pongs: Arc<AtomicU64>,
    sinks: Arc<AtomicU64>,
    ends: Arc<AtomicU64>,
    ping: RequestHandler,
    ping_medium: RequestHandler,
    ping_long: RequestHandler,
    sink: RequestHandler,
    end: RequestHandler,
    report: RequestHandler,
    reported: Arc<AtomicU64>,
    scale: f64,
    /// Lines for the floor ping-pong between the two ranks (shared memory only), and the
    /// round trips done on them so far.
    floor: Option<SharedLines>,
    floor_done: Cell<u64>,
    /// Round trips done so far on the bare ring reference's rings (in the same memory file).
    bare_done: Cell<u64>,
    /// Round trips done so far by the memcpy ping-pong (in the same memory file).
    copy_done: Cell<u64>,
}

fn spin_for(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

impl Bench {
    fn new(scale: f64, floor: Option<SharedLines>) -> Self {
        let pongs = Arc::new(AtomicU64::new(0));
        let sinks = Arc::new(AtomicU64::new(0));
        let ends = Arc::new(AtomicU64::new(0));
        let mut b = Runtime::builder();
        let p = pongs.clone();
        let pong: ReplyHandler = b.reply_handler("pong", move |_| {
            p.store(p.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let ping = b.request_handler("ping", move |m, tok| {
            tok.reply_short(pong, m.args()).expect("reply");
        });
        let ping_medium = b.request_handler("ping_medium", move |m, tok| {
            tok.reply_medium(pong, &[], m.payload()).expect("reply");
        });
        let ping_long = b.request_handler("ping_long", move |m, tok| {
            tok.reply_long(pong, &[], m.payload(), 0).expect("reply");
        });
        let s = sinks.clone();
        // Handlers run one at a time, so a plain load and store counts exactly (and avoids a
        // locked instruction per message, as the seed's handlers did).
        let sink = b.request_handler("sink", move |_, _| {
            s.store(s.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        });
        let e = ends.clone();
        let end = b.request_handler("end", move |_, _| {
            e.fetch_add(1, Ordering::Relaxed);
        });
        let reported = Arc::new(AtomicU64::new(u64::MAX));
        let rep = reported.clone();
        let report = b.request_handler("report", move |m, _| {
            rep.store(m.arg(0), Ordering::Relaxed);
        });
        let mut b = b;
        b.segment_bytes(2 << 20);
        let rt = b.build().unwrap_or_else(|e| {
            // A bad VOLLEY_* setting, say: one line, not a panic.
            eprintln!("volley bench rank: joining the benchmark job: {e}");
            std::process::exit(1)
        });
        Self {
            rt,
            pongs,
            sinks,
            ends,
            ping,
            ping_medium,
            ping_long,
            sink,
            end,
            report,
            reported,
            scale,
            floor,
            floor_done: Cell::new(0),
            bare_done: Cell::new(0),
            copy_done: Cell::new(0),
        }
    }

    fn iters(&self, n: u64) -> u64 {
        ((n as f64 * self.scale) as u64).max(10)
    }

    /// Mean round trip in ns of `send` followed by waiting for its reply.
    fn rtt(&self, iters: u64, send: impl Fn()) -> f64 {
        let warm = (iters / 10).max(5);
        let mut t0 = Instant::now();
        for i in 0..warm + iters {
            if i == warm {
                t0 = Instant::now();
            }
            let target = self.pongs.load(Ordering::Relaxed) + 1;
            send();
            self.rt
                .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
        }
        t0.elapsed().as_nanos() as f64 / iters as f64
    }

    /// Rank 0: tell rank 1 to leave its serving loop.
    fn end_phase(&self) {
        self.rt.request_short(1, self.end, &[]).expect("end");
    }

    /// Rank 1: serve until rank 0 ends the phase.
    fn serve(&self, phase: u64) {
        self.rt
            .wait_until(|| self.ends.load(Ordering::Relaxed) >= phase);
    }

    /// Floods `dest` with `n` sink requests and a ping; returns ns until the ping's reply.
    fn flood(&self, dest: usize, n: u64) -> f64 {
        let target = self.pongs.load(Ordering::Relaxed) + 1;
        let t0 = Instant::now();
        for _ in 0..n {
            self.rt.request_short(dest, self.sink, &[]).expect("sink");
        }
        self.rt.request_short(dest, self.ping, &[]).expect("ping");
        self.rt
            .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
        t0.elapsed().as_nanos() as f64
    }

    /// Streams `n` long requests of `payload` to rank 1 (whose handler only counts), then a
    /// ping; returns GB/s until the ping's reply.
    fn long_stream(&self, payload: &[u8], n: u64) -> f64 {
        let target = self.pongs.load(Ordering::Relaxed) + 1;
        let t0 = Instant::now();
        for _ in 0..n {
            self.rt
                .request_long(1, self.sink, &[], payload, 0)
                .expect("long stream");
        }
        self.rt.request_short(1, self.ping, &[]).expect("ping");
        self.rt
            .wait_until(|| self.pongs.load(Ordering::Relaxed) >= target);
        (n as usize * payload.len()) as f64 / t0.elapsed().as_nanos() as f64
    }

    /// One repetition; the figures are rank 0's (rank 1's are left at their defaults).
    fn one_rep(&self, phase: &mut u64) -> AmRep {
        let me = self.rt.rank();
        let mut r = AmRep::default();
        // Phase 0: the short round trip and the one-way flood in blocks, each right after a
        // cache-line ping-pong between these two processes on their own CPUs (shared memory
        // only): this machine's floor moves from one minute to the next, so each figure is
        // compared with the floor of its own block.
        let mut floors = Vec::new();
        let (mut shorts, mut short_ratios) = (Vec::new(), Vec::new());
        let (mut floods, mut flood_ratios) = (Vec::new(), Vec::new());
        let (mut bares, mut bare_ratios, mut short_over_bare) =
            (Vec::new(), Vec::new(), Vec::new());
        for _ in 0..BLOCKS {
            // The floor, then the bare ring reference, both in this block.
            let references = self.floor.as_ref().map(|f| {
                let (base, n) = (self.floor_done.get(), self.iters(40_000));
                self.floor_done.set(base + n);
                let (bare_base, bare_n) = (self.bare_done.get(), self.iters(20_000));
                self.bare_done.set(bare_base + bare_n);
                if me == 0 {
                    let floor_ns = floor::ping(f.lines(), base, n);
                    (floor_ns, floor::bare_ping(f.bare(), bare_base, bare_n))
                } else {
                    floor::echo(f.lines(), base, n);
                    floor::bare_echo(f.bare(), bare_base, bare_n);
                    (f64::NAN, f64::NAN)
                }
            });
            *phase += 1;
            if me == 0 {
                let short = self.rtt(self.iters(20_000), || {
                    self.rt.request_short(1, self.ping, &[1]).expect("ping")
                });
                let n = self.iters(100_000);
                let flood = self.flood(1, n) / n as f64;
                shorts.push(short);
                floods.push(flood);
                if let Some((f, b)) = references {
                    floors.push(f);
                    short_ratios.push(short / f);
                    flood_ratios.push(flood / f);
                    bares.push(b);
                    bare_ratios.push(b / f);
                    short_over_bare.push(short / b);
                }
                self.end_phase();
            } else {
                self.serve(*phase);
            }
        }
        if me == 0 {
            r.am_short_rtt_ns = median(&mut shorts);
            r.am_flood_ns_per_msg = median(&mut floods);
            if !floors.is_empty() {
                r.blocks = Some(BlockFigures {
                    cacheline_rtt_ns: median(&mut floors),
                    am_short_rtt_over_floor: median(&mut short_ratios),
                    am_flood_over_floor: median(&mut flood_ratios),
                    bare_am_rtt_ns: median(&mut bares),
                    bare_am_rtt_over_floor: median(&mut bare_ratios),
                    am_short_rtt_over_bare: median(&mut short_over_bare),
                });
            }
        }
        // The long round trip's data movement without a runtime, between the same two
        // processes (shared memory only).
        if let Some(f) = self.floor.as_ref() {
            let (base, n) = (self.copy_done.get(), self.iters(300));
            self.copy_done.set(base + n);
            if me == 0 {
                let src = vec![9u8; floor::COPY_BYTES];
                let ns = f.copy_ping(&src, base, n);
                r.memcpy_pingpong_gbps = Some(2.0 * floor::COPY_BYTES as f64 / ns);
            } else {
                f.copy_echo(base, n);
            }
        }
        // Phase 1: the other round trips, driven by rank 0.
        *phase += 1;
        if me == 0 {
            let mut medium = Vec::new();
            for &size in &MEDIUM_SIZES {
                let buf = vec![7u8; size];
                let n = self.iters(if size >= 65536 {
                    5_000
                } else if size >= 4096 {
                    20_000
                } else {
                    50_000
                });
                let ns = self.rtt(n, || {
                    self.rt
                        .request_medium(1, self.ping_medium, &[], &buf)
                        .expect("ping_medium")
                });
                medium.push(SizeRtt { size, rtt_ns: ns });
            }
            r.am_medium_rtt_ns = medium;
            r.memcpy_gbps = Some(floor::memcpy_gbps(self.iters(300)));
            r.memcpy_64k_ns = Some(floor::memcpy_ns(64 << 10, self.iters(3000)));
            let mut long = Vec::new();
            for &size in &LONG_SIZES {
                let buf = vec![9u8; size];
                let n = self.iters(match size {
                    s if s >= 1 << 20 => 300,
                    s if s >= 65536 => 3_000,
                    _ => 20_000,
                });
                let ns = self.rtt(n, || {
                    self.rt
                        .request_long(1, self.ping_long, &[], &buf, 0)
                        .expect("ping_long")
                });
                long.push(SizeRtt { size, rtt_ns: ns });
            }
            r.am_long_rtt_ns = long;
            let payload = vec![9u8; 1 << 20];
            let n = self.iters(300);
            r.long_stream_gbps_1mib = Some(self.long_stream(&payload, n));
            self.end_phase();
        } else {
            self.serve(*phase);
        }
        // Phase 2: two-way flood, both ranks at once.
        self.rt.barrier();
        let n = self.iters(300_000);
        let ns = self.flood(1 - me, n);
        self.rt.barrier();
        if me == 0 {
            r.am_flood_2way_ns_per_msg = ns / (2 * n) as f64;
        }
        // Phase 3: send overhead, receiver not polling during the burst.
        let bursts = self.iters(300);
        let mut o_send = Vec::new();
        for _ in 0..bursts {
            self.rt.barrier();
            if me == 0 {
                let t0 = Instant::now();
                for _ in 0..BURST {
                    self.rt.request_short(1, self.sink, &[]).expect("sink");
                }
                o_send.push(t0.elapsed().as_nanos() as f64 / BURST as f64);
            } else {
                // Stay off the rings while the burst is injected.
                spin_for(Duration::from_micros(30));
            }
            self.rt.barrier();
        }
        // Phase 4: receive overhead, burst already waiting when the receiver polls. The base
        // count is read while no sink can be in flight (every earlier sink was handled before
        // the last barrier completed here, and rank 0 sends no more until the next one); a
        // count read after a barrier could already include part of the new burst.
        let base = self.sinks.load(Ordering::Relaxed);
        let mut o_recv = Vec::new();
        for i in 0..bursts {
            self.rt.barrier();
            if me == 0 {
                // Let rank 1 leave the barrier first, so it does not drain the burst there.
                spin_for(Duration::from_micros(10));
                for _ in 0..BURST {
                    self.rt.request_short(1, self.sink, &[]).expect("sink");
                }
            } else {
                let expected = base + (i + 1) * BURST as u64;
                spin_for(Duration::from_micros(60));
                let untouched = self.sinks.load(Ordering::Relaxed) == expected - BURST as u64;
                // One poll drains up to 32 frames of a ring: time exactly one, and keep the
                // sample only if the whole burst was waiting and none had been handled early.
                let t0 = Instant::now();
                self.rt.poll();
                let ns = t0.elapsed().as_nanos() as f64;
                // Counted by the sink handler: over a network the same poll may also run
                // runtime messages (a barrier notice packed into the same datagram).
                let whole = self.sinks.load(Ordering::Relaxed) == expected;
                if untouched && whole {
                    o_recv.push(ns / BURST as f64);
                }
                while self.sinks.load(Ordering::Relaxed) < expected {
                    self.rt.poll();
                }
            }
            self.rt.barrier();
        }
        // Rank 1 hands its o_recv median to rank 0.
        if me == 1 {
            let med = median(&mut o_recv);
            self.rt
                .request_short(0, self.report, &[med.to_bits()])
                .expect("report");
        } else {
            self.rt
                .wait_until(|| self.reported.load(Ordering::Relaxed) != u64::MAX);
            let bits = self.reported.swap(u64::MAX, Ordering::Relaxed);
            r.o_recv_ns = Some(f64::from_bits(bits)).filter(|x| !x.is_nan());
            r.o_send_ns = median(&mut o_send);
        }
        self.rt.barrier();
        r
    }
}

/// Runs one rank; rank 0 writes the medians of every figure to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let bench = Bench::new(scale, SharedLines::inherited()?);
    if bench.rt.size() != 2 {
        return Err(format!(
            "the am benchmark needs 2 ranks, got {}",
            bench.rt.size()
        ));
    }
    let mut phase = 0;
    let mut reps_out = Vec::new();
    for _ in 0..reps {
        reps_out.push(bench.one_rep(&mut phase));
    }
    if bench.rt.rank() == 0 {
        super::write_reps(out, reps_out)?;
    }
    Ok(())
}

/// Runs the job over `transport` beside its floor and merges the repetitions.
pub fn bench(reps: usize, scale: f64, transport: Transport) -> Result<AmReport, String> {
    // Shared memory: the two ranks measure the cache-line floor between themselves, in blocks
    // interleaved with the short round trip and the flood, on lines in a memory file they
    // inherit. Network: the socket floor first (it forks, which must happen before any thread
    // exists).
    let (runs, socket_floor) = match transport {
        Transport::Shm => {
            let lines = floor::SharedLines::create()?;
            let fd = lines.fd().to_string();
            let env = [(floor::SharedLines::ENV, fd.as_str())];
            let runs = super::run_ranks::<Reps<AmRep>>("am", 2, scale, reps, transport, &env)?;
            (runs, None)
        }
        net => {
            let kind = if net == Transport::Udp {
                floor::SocketFloor::Udp
            } else {
                floor::SocketFloor::Tcp
            };
            let iters = ((50_000.0 * scale) as u64).max(100);
            // 8 bytes: the payload of a one-argument short message.
            let ns = floor::socket_rtt_ns(kind, 8, iters, reps.max(3))?;
            // 1 MiB messages, as many as the long stream sends.
            let count = ((300.0 * scale * NETWORK_SCALE) as u64).max(10);
            let stream = floor::socket_stream_gbps(kind, count, reps.max(3))?;
            let runs = super::run_ranks::<Reps<AmRep>>(
                "am",
                2,
                scale * NETWORK_SCALE,
                reps,
                transport,
                &[],
            )?;
            (runs, Some((ns, stream)))
        }
    };
    // Pipelining: three ranks, one per node (network only).
    let pipe = match transport {
        Transport::Shm => None,
        net => Some(
            super::run_ranks::<Reps<super::pipe::PipeRep>>(
                "am-pipe",
                3,
                scale * NETWORK_SCALE,
                reps,
                net,
                &[],
            )?
            .medians()?,
        ),
    };
    let raw_stream_gbps = socket_floor.map(|f| f.1);
    let socket_floor = socket_floor.map(|f| f.0);
    let m = runs.medians()?;
    let blocks = m.blocks.as_ref();
    let (floor_key, floor) = match transport {
        Transport::Shm => (
            "cacheline_rtt_ns",
            blocks.map_or(f64::NAN, |b| b.cacheline_rtt_ns),
        ),
        Transport::Udp => ("udp_raw_rtt_ns", socket_floor.unwrap_or(f64::NAN)),
        Transport::Tcp => ("tcp_raw_rtt_ns", socket_floor.unwrap_or(f64::NAN)),
    };
    let known = |x: f64| Some(x).filter(|x| !x.is_nan());
    let rtt = m.am_short_rtt_ns;
    // Shared memory: the medians of the block-by-block ratios (each block beside its floor).
    // Over a network: the medians over the floor measured before the job.
    let over_floor = |block_ratio: fn(&BlockFigures) -> f64, ns: f64| {
        blocks
            .and_then(|b| known(block_ratio(b)))
            .unwrap_or(ns / floor)
    };
    // The long ping carries its payload both ways.
    let long_1mib = m
        .am_long_rtt_ns
        .iter()
        .find(|e| e.size == 1 << 20)
        .map_or(f64::NAN, |e| e.rtt_ns);
    let long_gbps_1mib = 2.0 * (1u64 << 20) as f64 / long_1mib;
    let medium_64k = m
        .am_medium_rtt_ns
        .iter()
        .find(|e| e.size == 64 << 10)
        .map(|e| e.rtt_ns);
    let over = |a: Option<f64>, b: Option<f64>| Some(a? / b?).filter(|x| x.is_finite());
    Ok(AmReport {
        am_short_rtt_ns: rtt,
        am_flood_ns_per_msg: m.am_flood_ns_per_msg,
        am_flood_2way_ns_per_msg: m.am_flood_2way_ns_per_msg,
        long_gbps_1mib,
        memcpy_gbps: m.memcpy_gbps,
        memcpy_pingpong_gbps: m.memcpy_pingpong_gbps,
        memcpy_64k_ns: m.memcpy_64k_ns,
        long_stream_gbps_1mib: m.long_stream_gbps_1mib,
        raw_stream_gbps,
        short_rtt_idle_ns: pipe.as_ref().map(|p| p.short_rtt_idle_ns),
        short_rtt_during_bulk_ns: pipe.as_ref().and_then(|p| p.short_rtt_during_bulk_ns),
        short_rtt_during_bulk_over_idle: pipe
            .as_ref()
            .and_then(|p| over(p.short_rtt_during_bulk_ns, Some(p.short_rtt_idle_ns))),
        o_recv_ns: m.o_recv_ns,
        o_send_ns: m.o_send_ns,
        l_ns: m.o_recv_ns.map(|or| rtt / 2.0 - m.o_send_ns - or),
        cacheline_rtt_ns: blocks.map(|b| b.cacheline_rtt_ns),
        udp_raw_rtt_ns: socket_floor.filter(|_| transport == Transport::Udp),
        tcp_raw_rtt_ns: socket_floor.filter(|_| transport == Transport::Tcp),
        floor_key: floor_key.into(),
        bare_am_rtt_ns: blocks.map(|b| b.bare_am_rtt_ns),
        ratios: AmRatios {
            am_short_rtt_over_floor: over_floor(|b| b.am_short_rtt_over_floor, rtt),
            am_flood_over_floor: over_floor(|b| b.am_flood_over_floor, m.am_flood_ns_per_msg),
            bare_am_rtt_over_floor: blocks.and_then(|b| known(b.bare_am_rtt_over_floor)),
            am_short_rtt_over_bare: blocks.and_then(|b| known(b.am_short_rtt_over_bare)),
            long_over_memcpy: over(Some(long_gbps_1mib), m.memcpy_gbps),
            long_over_memcpy_pingpong: over(Some(long_gbps_1mib), m.memcpy_pingpong_gbps),
            medium_64k_over_two_memcpys: over(medium_64k, m.memcpy_64k_ns.map(|ns| 2.0 * ns)),
            long_stream_over_raw_stream: over(m.long_stream_gbps_1mib, raw_stream_gbps),
        },
        am_medium_rtt_ns: m.am_medium_rtt_ns,
        am_long_rtt_ns: m.am_long_rtt_ns,
        transport: transport.name().into(),
        reps,
        scale,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        runs: runs.reps,
    })
}

/// The table: every figure beside the floor, with its target where it has one.
pub fn print_table(r: &AmReport, w: &mut dyn Write) {
    let floor = r.floor_ns();
    let row = |w: &mut dyn Write, name: &str, v: f64, note: &str| {
        let _ = if v.is_nan() {
            writeln!(
                w,
                "  {name:<28} {:>10} ns  {:>6} x floor  {note}",
                "n/a", "n/a"
            )
        } else {
            writeln!(
                w,
                "  {name:<28} {v:>10.1} ns  {:>6.2} x floor  {note}",
                v / floor
            )
        };
    };
    let (how, rtt_target, flood_target) = match r.transport.as_str() {
        "shm" => (
            "one node, shared memory",
            "target <= 1.30 x floor",
            "target <= 0.15 x floor",
        ),
        "udp" => (
            "two emulated nodes, UDP on loopback",
            "target <= 1.20 x floor",
            "",
        ),
        _ => (
            "two emulated nodes, TCP on loopback",
            "target <= 1.20 x floor",
            "",
        ),
    };
    let _ = writeln!(
        w,
        "volley bench am: 2 ranks on one host, {how}, pinned; median of {} repetitions",
        r.reps
    );
    let floor_note = if r.transport == "shm" {
        "between the two ranks, in blocks before the short round trip and flood"
    } else {
        "raw sockets, measured before the job"
    };
    row(w, &format!("{} (floor)", r.floor_key), floor, floor_note);
    if let Some(bare) = r.bare_am_rtt_ns.filter(|x| !x.is_nan()) {
        row(
            w,
            "bare_am_rtt_ns (reference)",
            bare,
            "two bare rings, boxed handlers, no runtime: in the same blocks",
        );
    }
    for (key, v, note) in [
        ("am_short_rtt_ns", r.am_short_rtt_ns, rtt_target),
        ("am_flood_ns_per_msg", r.am_flood_ns_per_msg, flood_target),
        (
            "am_flood_2way_ns_per_msg",
            r.am_flood_2way_ns_per_msg,
            "both directions at once, per message",
        ),
        ("o_send_ns", r.o_send_ns, "LogP send overhead"),
        (
            "o_recv_ns",
            r.o_recv_ns.unwrap_or(f64::NAN),
            "LogP receive overhead",
        ),
        (
            "L_ns",
            r.l_ns.unwrap_or(f64::NAN),
            "RTT/2 - o_send - o_recv (may be negative)",
        ),
    ] {
        row(w, key, v, note);
    }
    for (curve, label) in [(&r.am_medium_rtt_ns, "medium"), (&r.am_long_rtt_ns, "long")] {
        for e in curve {
            let name = format!("{label} rtt {}", super::human(e.size as u64));
            row(w, &name, e.rtt_ns, "");
        }
    }
    let ratios = &r.ratios;
    let _ = writeln!(
        w,
        "  over the floor: am_short_rtt {:.2}, am_flood {:.3} (shared memory: medians of the \
         blocks' ratios, each block beside the floor measured just before it)",
        ratios.am_short_rtt_over_floor, ratios.am_flood_over_floor,
    );
    if let Some(bare_over_floor) = ratios.bare_am_rtt_over_floor {
        let _ = writeln!(
            w,
            "  bare ring reference: {:.2} x floor; am_short_rtt {:.2} x the bare ring (medians \
             of the same blocks' ratios)",
            bare_over_floor,
            ratios.am_short_rtt_over_bare.unwrap_or(f64::NAN),
        );
    }
    let _ = writeln!(
        w,
        "  {:<28} {:>10.2} GB/s (1 MiB long, both ways)",
        "long_gbps_1MiB", r.long_gbps_1mib
    );
    let gbps = |w: &mut dyn Write, name: &str, v: Option<f64>, note: String| {
        if let Some(v) = v {
            let _ = writeln!(w, "  {name:<28} {v:>10.2} GB/s {note}");
        }
    };
    let times = |x: Option<f64>, what: &str, target: &str| {
        x.map_or(String::new(), |x| format!("(long {x:.2} x {what}{target})"))
    };
    let ratios = &r.ratios;
    gbps(
        w,
        "memcpy_gbps (floor)",
        r.memcpy_gbps,
        format!(
            "rank 0 copying 1 MiB between two buffers of its own {}",
            times(ratios.long_over_memcpy, "this", ", target >= 0.80")
        ),
    );
    gbps(
        w,
        "memcpy_pingpong_gbps",
        r.memcpy_pingpong_gbps,
        format!(
            "1 MiB memcpy each way between the two ranks, no runtime {}",
            times(ratios.long_over_memcpy_pingpong, "this", "")
        ),
    );
    if let (Some(ns), Some(x)) = (r.memcpy_64k_ns, ratios.medium_64k_over_two_memcpys) {
        let _ = writeln!(
            w,
            "  {:<28} {ns:>9.1} ns    rank 0 copying 64 KiB (medium 64 KiB round trip {x:.2} x two of these, target <= 2)",
            "memcpy_64KiB_ns (floor)"
        );
    }
    gbps(
        w,
        "raw_stream_gbps (floor)",
        r.raw_stream_gbps,
        "1 MiB messages streamed over raw sockets, measured before the job".into(),
    );
    let over_raw = ratios
        .long_stream_over_raw_stream
        .map_or(String::new(), |x| format!(" ({x:.2} x raw_stream_gbps)"));
    gbps(
        w,
        "long_stream_gbps_1MiB",
        r.long_stream_gbps_1mib,
        format!("1 MiB long requests, one way{over_raw}"),
    );
    if let (Some(idle), Some(bulk)) = (r.short_rtt_idle_ns, r.short_rtt_during_bulk_ns) {
        let x = r.short_rtt_during_bulk_over_idle.unwrap_or(f64::NAN);
        let _ = writeln!(
            w,
            "  {:<28} {idle:>9.1} ns    rank 0 to rank 2 of three, one per node\n  {:<28} {bulk:>9.1} ns    the same while rank 0 sends 16 MiB longs to rank 1 ({x:.2} x idle, target <= 3)",
            "short_rtt_idle_ns", "short_rtt_during_bulk_ns"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rep(short: f64, o_recv: Option<f64>) -> AmRep {
        AmRep {
            am_short_rtt_ns: short,
            am_medium_rtt_ns: vec![SizeRtt {
                size: 8,
                rtt_ns: short * 2.0,
            }],
            o_recv_ns: o_recv,
            ..AmRep::default()
        }
    }

    #[test]
    fn medians_take_o_recv_from_the_repetitions_that_kept_a_sample() {
        let m = AmRep::medians(&[rep(1.0, None), rep(3.0, Some(9.0)), rep(2.0, None)]);
        assert_eq!(m.am_short_rtt_ns, 2.0);
        assert_eq!(m.am_medium_rtt_ns[0].rtt_ns, 4.0);
        assert_eq!(m.o_recv_ns, Some(9.0));
        assert!(m.blocks.is_none());
        let none = AmRep::medians(&[rep(1.0, None), rep(3.0, None)]);
        assert_eq!(none.o_recv_ns, None);
    }

    #[test]
    fn a_repetition_without_o_recv_writes_null_and_reads_back() {
        let text = serde_json::to_string(&rep(1.0, None)).unwrap();
        assert!(text.contains(r#""o_recv_ns":null"#), "{text}");
        assert!(!text.contains("cacheline_rtt_ns"), "{text}");
        let back: AmRep = serde_json::from_str(&text).unwrap();
        assert_eq!(back.o_recv_ns, None);
        assert!(back.blocks.is_none());
    }
}
