//! `volley bench splitc`: seed 004's Table 1 for volley's global layer, one job per strategy,
//! with the bulk bandwidth curve (Fig 6) and the polling-granularity curve (Figs 7–8).
//!
//! Three ranks: rank 0 issues, ranks 1 and 2 serve (rank 2 only for the gap to two servers);
//! in the exchange ranks 0 and 1 issue to each other at once. Definitions (seed 004 §5.2,
//! §10 G):
//! - **round trip** (latency includes overhead): a null Active Message, a blocking `read`, a
//!   blocking `write` of one word; the mean over all of each kind, the three timed in turns
//!   of [`RTT_BLOCK`] so that they see the same moments of the machine;
//! - **overhead**: the issuer's time per operation in bursts of [`BURST`]: issuing, then (after
//!   computing long enough for every reply to arrive) completing in `sync`. A store has no
//!   completion at the issuer;
//! - **gap**: the steady-state interval between operations of a long stream to one server
//!   (gets and puts completed by a final `sync`, stores by a final `all_store_sync`); to two
//!   servers alternately (aggregate interval); and in the exchange;
//! - **bulk**: `bulk_get` and `bulk_store` bandwidth from 8 B to 16 MiB, with the peak and the
//!   half-power size;
//! - **granularity**: ranks 0 and 1 take turns computing [`WORK`] in chunks, polling between
//!   chunks (or never); the other, told by a store that the busy rank has started, needs one
//!   `read` from it before it computes its own share. Time per iteration against the chunk.

use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_global::{Global, Layout, Strategy};

/// Operations per burst of the overhead measurement.
const BURST: usize = 16;
/// Round trips of each kind (null AM, `read`, `write`) per turn of the round-trip loops.
const RTT_BLOCK: usize = 1000;
/// Compute per rank and iteration of the granularity curve.
const WORK: Duration = Duration::from_micros(2000);
/// Granularities: compute between polls (None: never polls while computing).
const GRAINS_NS: [Option<u64>; 6] = [
    Some(1_000),
    Some(10_000),
    Some(100_000),
    Some(500_000),
    Some(1_000_000),
    None,
];
/// Largest bulk transfer.
const BULK_MAX: usize = 16 << 20;

/// One point of the granularity curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrainPoint {
    /// Compute between polls, ns (the whole [`WORK`] when the busy rank never polls).
    pub compute_ns: u64,
    /// Whether the busy rank never polls while computing.
    pub never_polls: bool,
    /// Time per iteration, ns.
    pub ns_per_iteration: f64,
}

/// One point of a bandwidth curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BulkPoint {
    /// Bytes per transfer.
    pub bytes: usize,
    /// GB/s.
    pub gbps: f64,
}

/// One strategy's figures (ns unless named otherwise).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct StrategyFigures {
    /// Null Active Message round trip.
    pub am_rtt_ns: f64,
    /// Blocking read of one word.
    pub read_rtt_ns: f64,
    /// Blocking write of one word.
    pub write_rtt_ns: f64,
    /// Get: issue plus completion per operation.
    pub get_overhead_ns: f64,
    /// Get: issue per operation.
    pub get_issue_ns: f64,
    /// Get: completion (`sync`) per operation.
    pub get_completion_ns: f64,
    /// Put: issue plus completion.
    pub put_overhead_ns: f64,
    /// Put: issue.
    pub put_issue_ns: f64,
    /// Put: completion.
    pub put_completion_ns: f64,
    /// Store: issue (a store has no completion at the issuer).
    pub store_overhead_ns: f64,
    /// Gap of gets to one server.
    pub get_gap_ns: f64,
    /// Gap of puts.
    pub put_gap_ns: f64,
    /// Gap of stores.
    pub store_gap_ns: f64,
    /// Gaps to two servers alternately (aggregate interval; per destination it is twice).
    pub get_gap2_ns: f64,
    /// Puts to two servers.
    pub put_gap2_ns: f64,
    /// Stores to two servers.
    pub store_gap2_ns: f64,
    /// Exchange gaps: two ranks issuing to each other at once.
    pub get_gapx_ns: f64,
    /// Puts in the exchange.
    pub put_gapx_ns: f64,
    /// Stores in the exchange.
    pub store_gapx_ns: f64,
    /// Bulk get bandwidth by size.
    pub bulk_get: Vec<BulkPoint>,
    /// Bulk store bandwidth by size.
    pub bulk_store: Vec<BulkPoint>,
    /// Peak bulk get, GB/s.
    pub bulk_get_peak_gbps: f64,
    /// Peak bulk store, GB/s.
    pub bulk_store_peak_gbps: f64,
    /// Smallest size reaching half the bulk get peak.
    pub bulk_get_half_power_bytes: usize,
    /// Smallest size reaching half the bulk store peak.
    pub bulk_store_half_power_bytes: usize,
    /// The polling-granularity curve.
    pub granularity: Vec<GrainPoint>,
}

/// The whole benchmark's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SplitcReport {
    /// memcpy of 1 MiB on this machine, measured in the same run (the bulk floor).
    pub memcpy_gbps: f64,
    /// shm, udp or tcp.
    pub transport: String,
    /// Ranks per job.
    pub ranks: usize,
    /// Figures by strategy name.
    pub strategies: std::collections::BTreeMap<String, StrategyFigures>,
    /// The bulk curves as named curves (`bulk_get proc`, `bulk_store hw`, ...; latency is the
    /// time per transfer), the memcpy floor on the first, as `volley report` and `--plot`
    /// read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<super::sweep::Curves>,
    /// Where and when (absent in reports from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<super::loggp::Machine>,
}

fn spin(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

fn gbps(bytes: usize, ns: f64) -> f64 {
    bytes as f64 / ns
}

/// The rank side of one strategy's job (the strategy comes from `VOLLEY_STRATEGY`).
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let pongs = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let pc = pongs.clone();
    let pong = b.reply_handler("bench.splitc.pong", move |_| {
        pc.fetch_add(1, Ordering::Release);
    });
    let ping = b.request_handler("bench.splitc.ping", move |_, tok| {
        let _ = tok.reply_short(pong, &[]);
    });
    b.segment_bytes(3 * BULK_MAX + (8 << 20));
    let setup = Global::register(&mut b).map_err(|e| e.to_string())?;
    let rt = b.build().map_err(|e| format!("joining the job: {e}"))?;
    let g = setup.attach(&rt).map_err(|e| e.to_string())?;
    if g.procs() != 3 {
        return Err(format!(
            "the splitc benchmark needs 3 ranks, got {}",
            g.procs()
        ));
    }
    let me = g.my_proc();
    let e = |e: volley_global::GlobalError| e.to_string();
    let words = 1 << 16;
    let w = g
        .all_spread_alloc::<u64>(words * 3, Layout::Blocked)
        .map_err(e)?;
    let bulk = g
        .all_spread_alloc::<u8>(BULK_MAX * 3, Layout::Blocked)
        .map_err(e)?;
    let n = |base: f64| ((base * scale) as usize).max(20);
    let mut results = Vec::new();
    for _ in 0..reps {
        let mut f = StrategyFigures::default();
        g.barrier().map_err(e)?;
        // --- round trips: the three loops take turns in blocks, so that a change of the
        // machine's load while they run reaches each alike ---
        if me == 0 {
            let k = n(20000.0);
            let (mut am, mut read, mut write) = (Duration::ZERO, Duration::ZERO, Duration::ZERO);
            let mut pinged = 0;
            for lo in (0..k).step_by(RTT_BLOCK) {
                let block = lo..(lo + RTT_BLOCK).min(k);
                let t = Instant::now();
                for _ in block.clone() {
                    rt.request_short(1, ping, &[]).map_err(|e| e.to_string())?;
                    rt.wait_on(1, || pongs.load(Ordering::Acquire) > pinged);
                    pinged += 1;
                }
                am += t.elapsed();
                let t = Instant::now();
                for i in block.clone() {
                    std::hint::black_box(g.read(w.ptr_on(1, i % words)).map_err(e)?);
                }
                read += t.elapsed();
                let t = Instant::now();
                for i in block {
                    g.write(w.ptr_on(1, i % words), i as u64).map_err(e)?;
                }
                write += t.elapsed();
            }
            pongs.store(0, Ordering::Relaxed);
            let per = |d: Duration| d.as_nanos() as f64 / k as f64;
            f.am_rtt_ns = per(am);
            f.read_rtt_ns = per(read);
            f.write_rtt_ns = per(write);
        }
        g.barrier().map_err(e)?;
        // --- overhead: bursts, compute while they complete, then sync ---
        if me == 0 {
            let rounds = n(2000.0);
            let settle = Duration::from_micros(30);
            let (mut issue, mut complete) = (0u128, 0u128);
            let mut dst = [0u64; BURST];
            for _ in 0..rounds {
                let mut t_end = Instant::now();
                let t0 = Instant::now();
                g.phase(|s| {
                    for (i, d) in dst.iter_mut().enumerate() {
                        s.get(d, w.ptr_on(1, i))?;
                    }
                    issue += t0.elapsed().as_nanos();
                    spin(settle);
                    t_end = Instant::now();
                    Ok(())
                })
                .map_err(e)?;
                complete += t_end.elapsed().as_nanos();
            }
            f.get_issue_ns = issue as f64 / (rounds * BURST) as f64;
            f.get_completion_ns = complete as f64 / (rounds * BURST) as f64;
            f.get_overhead_ns = f.get_issue_ns + f.get_completion_ns;
            let (mut issue, mut complete) = (0u128, 0u128);
            for _ in 0..rounds {
                let t0 = Instant::now();
                for i in 0..BURST {
                    g.put(w.ptr_on(1, i), &(i as u64)).map_err(e)?;
                }
                issue += t0.elapsed().as_nanos();
                spin(settle);
                let t1 = Instant::now();
                g.sync().map_err(e)?;
                complete += t1.elapsed().as_nanos();
            }
            f.put_issue_ns = issue as f64 / (rounds * BURST) as f64;
            f.put_completion_ns = complete as f64 / (rounds * BURST) as f64;
            f.put_overhead_ns = f.put_issue_ns + f.put_completion_ns;
            let mut issue = 0u128;
            for _ in 0..rounds {
                let t0 = Instant::now();
                for i in 0..BURST {
                    g.store(w.ptr_on(1, i), &(i as u64)).map_err(e)?;
                }
                issue += t0.elapsed().as_nanos();
                spin(settle);
            }
            f.store_overhead_ns = issue as f64 / (rounds * BURST) as f64;
        }
        g.all_store_sync().map_err(e)?;
        // --- gaps: to one server, to two alternately, and the exchange ---
        let k = n(50000.0);
        let mut got = vec![0u64; k];
        type Dests = fn(usize, usize) -> Option<usize>;
        let patterns: [(Dests, &str); 3] = [
            (|me, _| (me == 0).then_some(1), "one"),
            (|me, i| (me == 0).then_some(1 + i % 2), "two"),
            (|me, _| (me < 2).then_some(1 - me), "exchange"),
        ];
        for (dest, which) in patterns {
            g.barrier().map_err(e)?;
            let t = Instant::now();
            let issued = dest(me, 0).is_some();
            g.phase(|s| {
                for (i, d) in got.iter_mut().enumerate() {
                    if let Some(r) = dest(me, i) {
                        s.get(d, w.ptr_on(r, i % words))?;
                    }
                }
                Ok(())
            })
            .map_err(e)?;
            let get = t.elapsed().as_nanos() as f64 / k as f64;
            g.barrier().map_err(e)?;
            let t = Instant::now();
            for i in 0..k {
                if let Some(r) = dest(me, i) {
                    g.put(w.ptr_on(r, i % words), &(i as u64)).map_err(e)?;
                }
            }
            g.sync().map_err(e)?;
            let put = t.elapsed().as_nanos() as f64 / k as f64;
            g.barrier().map_err(e)?;
            let t = Instant::now();
            for i in 0..k {
                if let Some(r) = dest(me, i) {
                    g.store(w.ptr_on(r, i % words), &(i as u64)).map_err(e)?;
                }
            }
            g.all_store_sync().map_err(e)?;
            let store = t.elapsed().as_nanos() as f64 / k as f64;
            if me == 0 && issued {
                match which {
                    "one" => (f.get_gap_ns, f.put_gap_ns, f.store_gap_ns) = (get, put, store),
                    "two" => (f.get_gap2_ns, f.put_gap2_ns, f.store_gap2_ns) = (get, put, store),
                    _ => (f.get_gapx_ns, f.put_gapx_ns, f.store_gapx_ns) = (get, put, store),
                }
            }
        }
        // --- bulk bandwidth ---
        let mut buf = vec![0u8; BULK_MAX];
        let mut size = 8;
        while size <= BULK_MAX {
            let m = ((256.0 * 1024.0 * 1024.0 * scale / size as f64) as usize).clamp(3, 20000);
            g.barrier().map_err(e)?;
            if me == 0 {
                let t = Instant::now();
                for _ in 0..m {
                    g.phase(|s| s.bulk_get(&mut buf[..size], bulk.ptr_on(1, 0)))
                        .map_err(e)?;
                }
                let ns = t.elapsed().as_nanos() as f64 / m as f64;
                f.bulk_get.push(BulkPoint {
                    bytes: size,
                    gbps: gbps(size, ns),
                });
            }
            g.barrier().map_err(e)?;
            let t = Instant::now();
            if me == 0 {
                for _ in 0..m {
                    g.bulk_store(bulk.ptr_on(1, 0), &buf[..size]).map_err(e)?;
                }
            }
            g.all_store_sync().map_err(e)?;
            if me == 0 {
                let ns = t.elapsed().as_nanos() as f64 / m as f64;
                f.bulk_store.push(BulkPoint {
                    bytes: size,
                    gbps: gbps(size, ns),
                });
            }
            size = if size == BULK_MAX {
                size + 1
            } else {
                (size * 4).min(BULK_MAX)
            };
        }
        for (curve, peak, half) in [
            (
                &f.bulk_get,
                &mut f.bulk_get_peak_gbps,
                &mut f.bulk_get_half_power_bytes,
            ),
            (
                &f.bulk_store,
                &mut f.bulk_store_peak_gbps,
                &mut f.bulk_store_half_power_bytes,
            ),
        ] {
            *peak = curve.iter().map(|p| p.gbps).fold(0.0, f64::max);
            *half = curve
                .iter()
                .find(|p| p.gbps >= *peak / 2.0)
                .map_or(0, |p| p.bytes);
        }
        // --- polling granularity (ranks 0 and 1 take turns) ---
        // The turns are signalled by stores: consume what earlier parts stored here.
        g.all_store_sync().map_err(e)?;
        g.store_sync(g.store_pending()).map_err(e)?;
        for grain in GRAINS_NS {
            let iters = n(200.0).min(400);
            g.barrier().map_err(e)?;
            let t = Instant::now();
            for it in 0..iters {
                let busy = it % 2;
                if me == busy {
                    // Tell the other rank that this one computes now, so that its request
                    // arrives during the computation, not while this rank is still in the
                    // barrier (where it would be served at once whatever the strategy).
                    g.store(w.ptr_on(1 - busy, 1), &(it as u64)).map_err(e)?;
                    let chunk = grain.map_or(WORK, Duration::from_nanos);
                    let mut left = WORK;
                    while !left.is_zero() {
                        let c = chunk.min(left);
                        spin(c);
                        left -= c;
                        if grain.is_some() {
                            rt.poll();
                        }
                    }
                } else if me < 2 {
                    g.store_sync(8).map_err(e)?;
                    std::hint::black_box(g.read(w.ptr_on(busy, 0)).map_err(e)?);
                    spin(WORK);
                }
                g.barrier().map_err(e)?;
            }
            if me == 0 {
                f.granularity.push(GrainPoint {
                    compute_ns: grain.unwrap_or(WORK.as_nanos() as u64),
                    never_polls: grain.is_none(),
                    ns_per_iteration: t.elapsed().as_nanos() as f64 / iters as f64,
                });
            }
        }
        results.push(f);
    }
    if me == 0 {
        let text = serde_json::to_vec(&results).map_err(|e| e.to_string())?;
        std::fs::write(out, text).map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    Ok(())
}

/// The median of each figure over repetitions (curves point by point).
fn medians(reps: Vec<StrategyFigures>) -> StrategyFigures {
    let med = |get: &dyn Fn(&StrategyFigures) -> f64| {
        let mut v: Vec<f64> = reps.iter().map(get).collect();
        super::median(&mut v)
    };
    let mut f = reps[0].clone();
    macro_rules! scalar {
        ($($field:ident),*) => {$( f.$field = med(&|r| r.$field); )*};
    }
    scalar!(
        am_rtt_ns,
        read_rtt_ns,
        write_rtt_ns,
        get_overhead_ns,
        get_issue_ns,
        get_completion_ns,
        put_overhead_ns,
        put_issue_ns,
        put_completion_ns,
        store_overhead_ns,
        get_gap_ns,
        put_gap_ns,
        store_gap_ns,
        get_gap2_ns,
        put_gap2_ns,
        store_gap2_ns,
        get_gapx_ns,
        put_gapx_ns,
        store_gapx_ns,
        bulk_get_peak_gbps,
        bulk_store_peak_gbps
    );
    for (i, p) in f.bulk_get.iter_mut().enumerate() {
        p.gbps = med(&|r| r.bulk_get[i].gbps);
    }
    for (i, p) in f.bulk_store.iter_mut().enumerate() {
        p.gbps = med(&|r| r.bulk_store[i].gbps);
    }
    for (i, p) in f.granularity.iter_mut().enumerate() {
        p.ns_per_iteration = med(&|r| r.granularity[i].ns_per_iteration);
    }
    let half = |curve: &[BulkPoint], peak: f64| {
        curve
            .iter()
            .find(|p| p.gbps >= peak / 2.0)
            .map_or(0, |p| p.bytes)
    };
    f.bulk_get_half_power_bytes = half(&f.bulk_get, f.bulk_get_peak_gbps);
    f.bulk_store_half_power_bytes = half(&f.bulk_store, f.bulk_store_peak_gbps);
    f
}

/// Runs one job per strategy in `strategies`.
pub fn bench(
    reps: usize,
    scale: f64,
    transport: super::Transport,
    strategies: &[Strategy],
) -> Result<SplitcReport, String> {
    let memcpy_gbps = super::rma::memcpy_gbps(reps, scale);
    let mut out = std::collections::BTreeMap::new();
    for s in strategies {
        let reps: Vec<StrategyFigures> = super::run_ranks(
            "splitc",
            3,
            scale,
            reps,
            transport,
            &[("VOLLEY_STRATEGY", s.name())],
        )?;
        if reps.is_empty() {
            return Err("no repetitions".into());
        }
        out.insert(s.name().to_string(), medians(reps));
    }
    let mut configs = bulk_curves(&out);
    if let Some(first) = configs.first_mut() {
        first.memcpy = super::sweep::memcpy_curve(reps, scale);
    }
    Ok(SplitcReport {
        memcpy_gbps,
        transport: transport.name().to_string(),
        ranks: 3,
        strategies: out,
        configs,
        machine: Some(super::loggp::Machine::here()),
    })
}

/// Every strategy's bulk get and store as named curves: MB/s, and µs per transfer.
fn bulk_curves(
    strategies: &std::collections::BTreeMap<String, StrategyFigures>,
) -> Vec<super::sweep::Curves> {
    use super::loggp::{BandwidthPoint, LatencyPoint};
    let curve = |name: String, points: &[BulkPoint]| super::sweep::Curves {
        name,
        latency: points
            .iter()
            .map(|p| LatencyPoint {
                size: p.bytes,
                latency_us: p.bytes as f64 / p.gbps / 1e3,
            })
            .collect(),
        bandwidth: points
            .iter()
            .map(|p| BandwidthPoint {
                size: p.bytes,
                mb_per_s: p.gbps * 1e3,
            })
            .collect(),
        memcpy: Vec::new(),
    };
    strategies
        .iter()
        .flat_map(|(s, f)| {
            [
                curve(format!("bulk_get {s}"), &f.bulk_get),
                curve(format!("bulk_store {s}"), &f.bulk_store),
            ]
        })
        .collect()
}

/// The bulk curves in the OSU micro-benchmarks' layout.
pub fn print_osu(r: &SplitcReport, w: &mut dyn Write) {
    let (lat, bw) = ("µs per transfer", "back-to-back transfers");
    super::sweep::print_osu("splitc", lat, bw, &r.configs, w);
}

/// The bulk curves as CSV.
pub fn csv(r: &SplitcReport) -> String {
    super::sweep::csv(&r.configs)
}

/// Table 1 for volley: one column per strategy.
pub fn print_table(r: &SplitcReport, w: &mut dyn Write) {
    let names: Vec<&String> = r.strategies.keys().collect();
    let _ = writeln!(
        w,
        "volley bench splitc ({}, {} ranks; ns, medians; memcpy floor {:.1} GB/s)",
        r.transport, r.ranks, r.memcpy_gbps
    );
    let mut head = format!("{:<26}", "");
    for n in &names {
        head += &format!("{n:>12}");
    }
    let _ = writeln!(w, "{head}");
    type Get = fn(&StrategyFigures) -> f64;
    let rows: [(&str, Get); 21] = [
        ("RT latency  AM", |f| f.am_rtt_ns),
        ("RT latency  read", |f| f.read_rtt_ns),
        ("RT latency  write", |f| f.write_rtt_ns),
        ("overhead    get", |f| f.get_overhead_ns),
        ("  issue / completion", |f| f.get_issue_ns),
        ("", |f| f.get_completion_ns),
        ("overhead    put", |f| f.put_overhead_ns),
        ("  issue / completion", |f| f.put_issue_ns),
        ("", |f| f.put_completion_ns),
        ("overhead    store", |f| f.store_overhead_ns),
        ("gap         get", |f| f.get_gap_ns),
        ("gap         put", |f| f.put_gap_ns),
        ("gap         store", |f| f.store_gap_ns),
        ("gap (to 2)  get", |f| f.get_gap2_ns),
        ("gap (to 2)  put", |f| f.put_gap2_ns),
        ("gap (to 2)  store", |f| f.store_gap2_ns),
        ("gap (exch.) get", |f| f.get_gapx_ns),
        ("gap (exch.) put", |f| f.put_gapx_ns),
        ("gap (exch.) store", |f| f.store_gapx_ns),
        ("bulk get peak GB/s", |f| f.bulk_get_peak_gbps),
        ("bulk store peak GB/s", |f| f.bulk_store_peak_gbps),
    ];
    for (label, get) in rows {
        let mut line = format!("{label:<26}");
        for n in &names {
            let v = get(&r.strategies[*n]);
            line += &if label.contains("GB/s") {
                format!("{v:>12.2}")
            } else {
                format!("{v:>12.0}")
            };
        }
        let _ = writeln!(w, "{line}");
    }
    let mut line = format!("{:<26}", "bulk half-power bytes");
    for n in &names {
        let f = &r.strategies[*n];
        line += &format!(
            "{:>12}",
            format!(
                "{}/{}",
                super::human(f.bulk_get_half_power_bytes as u64),
                super::human(f.bulk_store_half_power_bytes as u64)
            )
        );
    }
    let _ = writeln!(w, "{line}");
    let _ = writeln!(w, "\nbulk bandwidth, GB/s (get / store)");
    if let Some(first) = names.first() {
        for (i, p) in r.strategies[*first].bulk_get.iter().enumerate() {
            let mut line = format!("{:<26}", super::human(p.bytes as u64));
            for n in &names {
                let f = &r.strategies[*n];
                line += &format!(
                    "{:>12}",
                    format!("{:.2}/{:.2}", f.bulk_get[i].gbps, f.bulk_store[i].gbps)
                );
            }
            let _ = writeln!(w, "{line}");
        }
        let _ = writeln!(
            w,
            "\npolling granularity, µs per iteration ({} µs of work per rank)",
            WORK.as_micros()
        );
        for (i, p) in r.strategies[*first].granularity.iter().enumerate() {
            let label = if p.never_polls {
                "never polls".to_string()
            } else {
                format!("poll every {} µs", p.compute_ns / 1000)
            };
            let mut line = format!("{label:<26}");
            for n in &names {
                line += &format!(
                    "{:>12.0}",
                    r.strategies[*n].granularity[i].ns_per_iteration / 1e3
                );
            }
            let _ = writeln!(w, "{line}");
        }
    }
}
