//! `volley bench rma`: one-sided put, get and atomics on the direct and AM paths, one job per
//! path. Rank 0 drives and records; rank 1 owns the target segment and polls (which the AM
//! path needs and the direct path ignores).
//!
//! Latency and bandwidth are swept from 8 B to 16 MiB by powers of two, as OSU's one-sided
//! benchmarks do: latency is the time of one blocking put or get (OSU's `osu_put_latency`
//! times a put and its flush); bandwidth is a window of up to 64 operations in flight (and
//! at most 4 MiB) completed together (`put_nbi` then `sync`; gets in one implicit scope), as
//! `osu_put_bw` and `osu_get_bw` do.

use super::loggp::{BandwidthPoint, LatencyPoint, Machine, SIZES};
use super::sweep::{sweep_iters, Curves};
use super::{median_curve, median_present, CurvePoint, Medians, Reps, Transport};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::rma::{Perms, Rma, RmaPath};
use volley::Runtime;

/// Operations in flight in a bandwidth window (OSU's default), fewer for large sizes so
/// that a window's get buffers stay within this many bytes. OSU reuses one buffer for the
/// whole window; volley's gets in flight each need their own, and a window far larger than
/// the caches would measure the memory's write bandwidth instead of the transfer.
const WINDOW: usize = 64;
const WINDOW_BYTES: usize = 4 << 20;
/// Where the atomic word lives, clear of the data area.
const WORD: usize = 16 << 20;

/// A latency at one transfer size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeNs {
    /// Bytes per operation.
    pub size: usize,
    /// ns per operation.
    pub ns: f64,
}

impl CurvePoint for SizeNs {
    fn figure(&self) -> f64 {
        self.ns
    }
    fn set_figure(&mut self, v: f64) {
        self.ns = v;
    }
}

/// A bandwidth at one transfer size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeGbps {
    /// Bytes per operation.
    pub size: usize,
    /// GB/s.
    pub gbps: f64,
}

impl CurvePoint for SizeGbps {
    fn figure(&self) -> f64 {
        self.gbps
    }
    fn set_figure(&mut self, v: f64) {
        self.gbps = v;
    }
}

/// One path's figures: one repetition's, or their medians.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RmaFigures {
    /// Blocking put latency by size.
    pub put_latency_ns: Vec<SizeNs>,
    /// Blocking get latency by size.
    pub get_latency_ns: Vec<SizeNs>,
    /// Put bandwidth by size.
    pub put_gbps: Vec<SizeGbps>,
    /// Get bandwidth by size.
    pub get_gbps: Vec<SizeGbps>,
    /// Put bandwidth at 1 MiB (the point compared with memcpy).
    #[serde(rename = "put_gbps_1MiB")]
    pub put_gbps_1mib: f64,
    /// Get bandwidth at 1 MiB.
    #[serde(rename = "get_gbps_1MiB")]
    pub get_gbps_1mib: f64,
    /// Remote fetch-and-add, ns per operation.
    pub fadd_ns: f64,
    /// Remote compare-and-swap, ns per operation (the load that feeds it subtracted).
    pub cas_ns: f64,
}

impl Medians for RmaFigures {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        Self {
            put_latency_ns: median_curve(reps, |r| &r.put_latency_ns),
            get_latency_ns: median_curve(reps, |r| &r.get_latency_ns),
            put_gbps: median_curve(reps, |r| &r.put_gbps),
            get_gbps: median_curve(reps, |r| &r.get_gbps),
            put_gbps_1mib: med(|r| r.put_gbps_1mib),
            get_gbps_1mib: med(|r| r.get_gbps_1mib),
            fadd_ns: med(|r| r.fadd_ns),
            cas_ns: med(|r| r.cas_ns),
        }
    }
}

/// The 1 MiB bandwidths over the floor.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RmaRatios {
    /// Direct put at 1 MiB over memcpy.
    #[serde(rename = "put_gbps_1MiB_over_memcpy")]
    pub put_gbps_1mib_over_memcpy: f64,
    /// Direct get at 1 MiB over memcpy.
    #[serde(rename = "get_gbps_1MiB_over_memcpy")]
    pub get_gbps_1mib_over_memcpy: f64,
    /// AM-path put at 1 MiB over memcpy.
    #[serde(
        rename = "am_put_gbps_1MiB_over_memcpy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub am_put_gbps_1mib_over_memcpy: Option<f64>,
    /// AM-path get at 1 MiB over memcpy.
    #[serde(
        rename = "am_get_gbps_1MiB_over_memcpy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub am_get_gbps_1mib_over_memcpy: Option<f64>,
}

/// The whole benchmark's results: the direct path's medians at the top level, the AM path's
/// under `am`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RmaReport {
    /// The direct path (mapped memory).
    #[serde(flatten)]
    pub direct: RmaFigures,
    /// The floor: one process copying 1 MiB, GB/s.
    pub memcpy_gbps: f64,
    /// The AM path's put at 1 MiB (`am.put_gbps_1MiB`, at the top level beside the floor).
    #[serde(
        rename = "am_put_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub am_put_gbps_1mib: Option<f64>,
    /// The AM path's get at 1 MiB (`am.get_gbps_1MiB`).
    #[serde(
        rename = "am_get_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub am_get_gbps_1mib: Option<f64>,
    /// The direct path over the floor.
    pub ratios: RmaRatios,
    /// The Active Message path.
    pub am: RmaFigures,
    /// The sweeps as named curves (put and get on each path), the first with the memcpy floor.
    #[serde(default)]
    pub configs: Vec<Curves>,
    /// Where and when.
    #[serde(default)]
    pub machine: Machine,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
}

/// Runs one rank; rank 0 writes medians over `reps` repetitions to `out`.
pub fn run(out: &std::path::Path, path: RmaPath, scale: f64, reps: usize) -> Result<(), String> {
    let ends = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let e = ends.clone();
    let end = b.request_handler("bench.end", move |_, _| {
        e.fetch_add(1, Ordering::Relaxed);
    });
    let setup = Rma::register_with(&mut b, Ok(path));
    b.segment_bytes(WORD + 4096);
    let rt = b
        .build()
        .map_err(|e| format!("joining the benchmark job: {e}"))?;
    if rt.size() != 2 {
        return Err(format!(
            "the rma benchmark needs 2 ranks, got {}",
            rt.size()
        ));
    }
    let rma = setup.attach(&rt);
    let seg = rma
        .alloc_symmetric(WORD + 64, Perms::ALL)
        .map_err(|e| e.to_string())?;
    let target = seg.on(1);
    let iters = |n: u64| ((n as f64 * scale) as u64).max(5);
    let mut runs = Vec::new();
    for rep in 0..reps {
        rt.barrier();
        if rt.rank() == 1 {
            rt.wait_until(|| ends.load(Ordering::Relaxed) > rep as u64);
            continue;
        }
        let time = |n: u64, f: &mut dyn FnMut()| {
            for _ in 0..(n / 10).max(1) {
                f();
            }
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            t0.elapsed().as_nanos() as f64 / n as f64
        };
        let mut put_lat = Vec::new();
        let mut get_lat = Vec::new();
        let mut put_bw = Vec::new();
        let mut get_bw = Vec::new();
        for size in SIZES.map(|p| 1usize << p) {
            let src = vec![1u8; size];
            let mut dst = vec![0u8; size];
            let n = sweep_iters(scale, size, 20_000, 256 << 20);
            let p = time(n, &mut || rma.put(target, 0, &src).expect("put"));
            let g = time(n, &mut || rma.get(target, 0, &mut dst).expect("get"));
            put_lat.push(SizeNs { size, ns: p });
            get_lat.push(SizeNs { size, ns: g });
            let window = (WINDOW_BYTES / size).clamp(1, WINDOW);
            let mut dst = vec![0u8; size * window];
            let n = sweep_iters(scale, size * window, 2_000, 512 << 20);
            let p = time(n, &mut || {
                for _ in 0..window {
                    rma.put_nbi(target, 0, &src).expect("put_nbi");
                }
                rma.sync().expect("sync");
            });
            let g = time(n, &mut || {
                rma.implicit(|s| {
                    for chunk in dst.chunks_mut(size) {
                        s.get(target, 0, chunk)?;
                    }
                    Ok(())
                })
                .expect("gets");
            });
            let bytes = (size * window) as f64;
            put_bw.push(SizeGbps {
                size,
                gbps: bytes / p,
            });
            get_bw.push(SizeGbps {
                size,
                gbps: bytes / g,
            });
        }
        let n = iters(200_000);
        let f = time(n, &mut || {
            rma.fetch_add(target, WORD, 1).expect("fetch_add");
        });
        let c = time(n, &mut || {
            let old = rma
                .atomic(target, WORD, volley::rma::AtomicOp::Load, 0, 0)
                .expect("load");
            rma.compare_swap(target, WORD, old, old + 1).expect("cas");
        });
        // One CAS (the load before it is timed separately below and subtracted).
        let l = time(n, &mut || {
            rma.atomic(target, WORD, volley::rma::AtomicOp::Load, 0, 0)
                .expect("load");
        });
        let at_1mib = |curve: &[SizeGbps]| {
            curve
                .iter()
                .find(|p| p.size == 1 << 20)
                .map_or(f64::NAN, |p| p.gbps)
        };
        runs.push(RmaFigures {
            put_gbps_1mib: at_1mib(&put_bw),
            get_gbps_1mib: at_1mib(&get_bw),
            put_latency_ns: put_lat,
            get_latency_ns: get_lat,
            put_gbps: put_bw,
            get_gbps: get_bw,
            fadd_ns: f,
            cas_ns: (c - l).max(0.0),
        });
        rt.request_short(1, end, &[]).map_err(|e| e.to_string())?;
    }
    rt.barrier();
    if rt.rank() == 0 {
        super::write_reps(out, runs)?;
    }
    Ok(())
}

/// The floor for bandwidth: one process copying 1 MiB, in GB/s (median of `reps`).
pub fn memcpy_gbps(reps: usize, scale: f64) -> f64 {
    let src = vec![5u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    let n = ((2000.0 * scale) as usize).max(20);
    let mut samples = Vec::new();
    for _ in 0..reps.max(3) {
        dst.copy_from_slice(&src);
        let t0 = Instant::now();
        for _ in 0..n {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        samples.push((n << 20) as f64 / t0.elapsed().as_nanos() as f64);
    }
    super::median(&mut samples)
}

/// A path's operation as named curves in µs and MB/s.
fn curves(name: &str, latency: &[SizeNs], bandwidth: &[SizeGbps]) -> Curves {
    Curves {
        name: name.into(),
        latency: latency
            .iter()
            .map(|p| LatencyPoint {
                size: p.size,
                latency_us: p.ns / 1e3,
            })
            .collect(),
        bandwidth: bandwidth
            .iter()
            .map(|p| BandwidthPoint {
                size: p.size,
                mb_per_s: p.gbps * 1e3,
            })
            .collect(),
        memcpy: Vec::new(),
    }
}

/// The sweeps in the OSU micro-benchmarks' layout, one block per operation, path and figure.
pub fn print_osu(r: &RmaReport, w: &mut dyn Write) {
    let (lat, bw) = ("one blocking operation", "a window of operations in flight");
    super::sweep::print_osu("rma", lat, bw, &r.configs, w);
}

/// The sweeps as CSV.
pub fn csv(r: &RmaReport) -> String {
    super::sweep::csv(&r.configs)
}

/// Runs both paths' jobs beside the memcpy floor.
pub fn bench(reps: usize, scale: f64) -> Result<RmaReport, String> {
    let machine = Machine::here();
    let memcpy = memcpy_gbps(reps, scale);
    let memcpy_curve = super::sweep::memcpy_curve(reps, scale);
    let job = |which: &str| {
        super::run_ranks::<Reps<RmaFigures>>(which, 2, scale, reps, Transport::Shm, &[])?.medians()
    };
    let direct = job("rma-direct")?;
    let am = job("rma-am")?;
    let mut configs = Vec::new();
    for (path, f) in [("direct", &direct), ("am", &am)] {
        configs.push(curves(
            &format!("put {path}"),
            &f.put_latency_ns,
            &f.put_gbps,
        ));
        configs.push(curves(
            &format!("get {path}"),
            &f.get_latency_ns,
            &f.get_gbps,
        ));
    }
    configs[0].memcpy = memcpy_curve;
    Ok(RmaReport {
        configs,
        machine,
        ratios: RmaRatios {
            put_gbps_1mib_over_memcpy: direct.put_gbps_1mib / memcpy,
            get_gbps_1mib_over_memcpy: direct.get_gbps_1mib / memcpy,
            am_put_gbps_1mib_over_memcpy: Some(am.put_gbps_1mib / memcpy),
            am_get_gbps_1mib_over_memcpy: Some(am.get_gbps_1mib / memcpy),
        },
        direct,
        memcpy_gbps: memcpy,
        am_put_gbps_1mib: Some(am.put_gbps_1mib),
        am_get_gbps_1mib: Some(am.get_gbps_1mib),
        am,
        reps,
        scale,
    })
}

/// The table: each figure on the direct path beside the AM path's.
pub fn print_table(r: &RmaReport, w: &mut dyn Write) {
    let (d, am, memcpy) = (&r.direct, &r.am, r.memcpy_gbps);
    let _ = writeln!(
        w,
        "volley bench rma: 2 ranks on one host, pinned; median of {} repetitions",
        r.reps
    );
    let _ = writeln!(
        w,
        "  memcpy_gbps (floor, 1 MiB in one process)  {memcpy:>8.2} GB/s"
    );
    for (key, d, a) in [
        ("put_gbps_1MiB", d.put_gbps_1mib, am.put_gbps_1mib),
        ("get_gbps_1MiB", d.get_gbps_1mib, am.get_gbps_1mib),
    ] {
        let _ = writeln!(
            w,
            "  {key:<14} direct {d:>8.2} GB/s ({:.2} x memcpy, target >= 0.90)   am {a:>8.2} GB/s \
             ({:.2} x memcpy, target >= 0.70)",
            d / memcpy,
            a / memcpy
        );
    }
    for (key, d, a) in [
        ("fadd_ns", d.fadd_ns, am.fadd_ns),
        ("cas_ns", d.cas_ns, am.cas_ns),
    ] {
        let _ = writeln!(w, "  {key:<14} direct {d:>8.1} ns   am {a:>8.1} ns");
    }
    super::sweep::print_curves("sweeps", &r.configs, w);
}
