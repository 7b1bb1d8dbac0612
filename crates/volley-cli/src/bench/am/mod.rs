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
use super::sweep::per_size;
use super::{median, median_curve, median_opt, median_present, CurvePoint, Medians, Reps};
use super::{Transport, NETWORK_SCALE};
use serde::{Deserialize, Serialize};
use std::cell::Cell;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::{ReplyHandler, RequestHandler, Runtime};

mod report;
mod table;

pub use report::*;
pub use table::print_table;

/// The medium round trip's sizes: 0, then 8 B to 64 KiB by powers of two.
fn medium_sizes() -> impl Iterator<Item = usize> {
    std::iter::once(0).chain((3..=16).map(|p| 1 << p))
}
const BURST: usize = 32;
/// Blocks of the short round trip and the one-way flood, each right after a floor ping-pong.
const BLOCKS: usize = 5;

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
        // Room for the largest long echo of the sweep.
        b.segment_bytes(1 << *super::loggp::SIZES.end());
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
            for size in medium_sizes() {
                let buf = vec![7u8; size];
                let n = self.iters(per_size(size, 50_000, 256 << 20) as u64);
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
            for size in super::loggp::SIZES.map(|p| 1usize << p) {
                let buf = vec![9u8; size];
                let n = self.iters(per_size(size, 20_000, 512 << 20) as u64);
                let ns = self.rtt(n, || {
                    self.rt
                        .request_long(1, self.ping_long, &[], &buf, 0)
                        .expect("ping_long")
                });
                long.push(SizeRtt { size, rtt_ns: ns });
            }
            r.am_long_rtt_ns = long;
            let payload = vec![9u8; 1 << 20];
            // As many as the raw stream floor sends (at least 64, see `run`).
            let n = self.iters(300).max(64);
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
            // 1 MiB messages, as many as the long stream sends: at least 64, since a shorter
            // stream measures its start more than the sockets.
            let count = ((300.0 * scale * NETWORK_SCALE) as u64).max(64);
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
        tcp_congestion: match transport {
            Transport::Tcp => volley::transport::net::stream_floor::tcp_congestion().ok(),
            _ => None,
        },
        short_rtt_idle_ns: pipe.as_ref().map(|p| p.short_rtt_idle_ns),
        short_rtt_during_bulk_ns: pipe.as_ref().and_then(|p| p.short_rtt_during_bulk_ns),
        short_rtt_during_bulk_over_idle: pipe
            .as_ref()
            .and_then(|p| over(p.short_rtt_during_bulk_ns, Some(p.short_rtt_idle_ns))),
        short_rtt_overlap_share: pipe.as_ref().map(|p| p.short_rtt_overlap_share),
        bulk_send_return_ns: pipe.as_ref().map(|p| p.bulk_send_return_ns),
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
        configs: vec![
            curves("medium", &m.am_medium_rtt_ns),
            curves("long", &m.am_long_rtt_ns),
        ],
        machine: Some(super::loggp::Machine::here()),
        am_medium_rtt_ns: m.am_medium_rtt_ns,
        am_long_rtt_ns: m.am_long_rtt_ns,
        transport: transport.name().into(),
        reps,
        scale,
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        runs: runs.reps,
    })
}

/// A round trip curve as one-way latency (half the echo's round trip, OSU's figure) in µs,
/// named `name`; size 0 left out (a log axis has no place for it).
fn curves(name: &str, rtt: &[SizeRtt]) -> super::sweep::Curves {
    super::sweep::Curves {
        name: name.into(),
        latency: rtt
            .iter()
            .filter(|p| p.size > 0)
            .map(|p| super::loggp::LatencyPoint {
                size: p.size,
                latency_us: p.rtt_ns / 2e3,
            })
            .collect(),
        ..Default::default()
    }
}

/// The sweeps in the OSU micro-benchmarks' layout.
pub fn print_osu(r: &AmReport, w: &mut dyn Write) {
    let lat = "Active Message echo of the payload, half the round trip";
    super::sweep::print_osu("am", lat, "", &r.configs, w);
}

/// The sweeps as CSV.
pub fn csv(r: &AmReport) -> String {
    super::sweep::csv(&r.configs)
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
