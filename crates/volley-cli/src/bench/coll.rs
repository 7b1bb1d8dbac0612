//! `volley bench coll`: the global layer's collectives on 2, 4 and 8 ranks of this machine,
//! beside Open MPI's on the same ranks in the same run ([`super::mpi_peer`]).
//!
//! Each figure is measured as the MPI program measures its own: after a barrier every rank
//! times `iters` back-to-back calls, the repetition's figure is the slowest rank's mean per
//! call, and the reported figure is the median over repetitions. Each repetition is a volley
//! job followed by an Open MPI job on the same ranks: the VM this was built on changes speed
//! within a minute, and a change between two jobs of all of one then all of the other would
//! reach only one side of every ratio.
//!
//! Sweeps, as OSU's `osu_allreduce`, `osu_alltoall` and `osu_bcast` report them: the latency
//! of each collective for message sizes from 8 B to 1 MiB (the OSU collectives' default
//! largest), an all-reduce of that many bytes of f64, an all-to-all of that many bytes per
//! pair, a broadcast of that many bytes from rank 0.

use super::loggp::{LatencyPoint, Machine};
use super::sweep::{sweep_iters, Curves};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::time::Instant;
use volley::Runtime;
use volley_global::{Global, Op};

/// Rank counts measured by default.
pub const RANKS: [usize; 3] = [2, 4, 8];
/// The sweeps' sizes: 8 B to 1 MiB, by powers of two.
const SWEEP_SIZES: std::ops::RangeInclusive<u32> = 3..=20;

/// One rank count's figures: volley's, then Open MPI's (absent without Open MPI).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollRun {
    /// Ranks in the job.
    pub ranks: usize,
    /// Barrier, ns per call.
    pub barrier_ns: f64,
    /// Broadcast of 8 bytes from rank 0.
    #[serde(rename = "bcast_8B_ns")]
    pub bcast_8b_ns: f64,
    /// All-reduce of one u64 (sum).
    #[serde(rename = "allreduce_8B_ns")]
    pub allreduce_8b_ns: f64,
    /// All-reduce of 131072 f64 (1 MiB, sum).
    #[serde(rename = "allreduce_1MiB_ns")]
    pub allreduce_1mib_ns: f64,
    /// All-to-all of 8 bytes per pair.
    #[serde(rename = "alltoall_8B_ns")]
    pub alltoall_8b_ns: f64,
    /// All-to-all of 64 KiB per pair.
    #[serde(rename = "alltoall_64KiB_ns")]
    pub alltoall_64kib_ns: f64,
    /// Yields of the core per rank and call (the mean rank) in the barrier, the 8-byte
    /// all-reduce and the 8-byte all-to-all: with more ranks than cores, how often the cores
    /// changed hands (a count, steady where the times are not).
    #[serde(default)]
    pub yields_per_call: [f64; 3],
    /// One hand-off of a core between two processes pinned to one CPU, measured right before
    /// each repetition of this rank count's run, median ([`super::floor::handoff_ns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub handoff_ns: Option<f64>,
    /// The cache-line round trip between two CPUs, measured right before each repetition of
    /// this rank count's run, median.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cacheline_rtt_ns: Option<f64>,
    /// The least a call of a small collective that synchronizes every rank (barrier, 8-byte
    /// all-reduce and all-to-all) can cost on these ranks here ([`call_floor_ns`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub floor_ns: Option<f64>,
    /// Latency by size of the all-reduce, the all-to-all and the broadcast (µs per call,
    /// slowest rank, median of repetitions), named `allreduce`, `alltoall`, `bcast`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub sweeps: Vec<Curves>,
    /// Open MPI's figures on the same ranks, each repetition right after volley's.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub mpi: Option<super::mpi_peer::MpiColl>,
}

/// The whole benchmark's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CollReport {
    /// The strategy volley ran (collectives run on Active Messages under every strategy, but
    /// for all-reduces and all-to-alls of 16 KiB or more under `hw`, on mapped memory).
    pub strategy: String,
    /// One entry per rank count.
    pub runs: Vec<CollRun>,
    /// Why there are no MPI figures, if there are none.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub mpi_note: Option<String>,
    /// Every rank count's sweeps as named curves (`allreduce 4 ranks`, ...), as `volley
    /// report` and `--plot` read them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<Curves>,
    /// Where and when (absent in reports from before it was recorded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<Machine>,
}

/// The rank side: measures every collective `reps` times; rank 0 writes the medians to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize) -> Result<(), String> {
    let mut b = Runtime::builder();
    let setup = Global::register(&mut b).map_err(|e| e.to_string())?;
    let rt = b.build().map_err(|e| format!("joining the job: {e}"))?;
    let g = setup.attach(&rt).map_err(|e| e.to_string())?;
    let iters = |n: f64| ((n * scale) as usize).max(3);
    let p = g.procs();
    // The median ns per call, and the yields per call of the mean rank (a count, steady where
    // times are not: how often the cores changed hands).
    let mut time = |n: usize, f: &mut dyn FnMut()| -> Result<(f64, f64), String> {
        let mut samples = Vec::new();
        for _ in 0..(n / 10).max(1) {
            f();
        }
        let mut yields = 0;
        for _ in 0..reps {
            g.barrier().map_err(|e| e.to_string())?;
            let y0 = rt.stats().yields;
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            let mine = t0.elapsed().as_nanos() as f64 / n as f64;
            yields += rt.stats().yields - y0;
            samples.push(g.all_reduce_one(mine, Op::Max).map_err(|e| e.to_string())?);
        }
        let all = g
            .all_reduce_one(yields, Op::Sum)
            .map_err(|e| e.to_string())?;
        Ok((
            super::median(&mut samples),
            all as f64 / (p * n * reps) as f64,
        ))
    };
    let fail = |what: &str, e: volley_global::GlobalError| -> ! {
        eprintln!("volley bench coll: rank {}: {what}: {e}", rt.rank());
        std::process::exit(1)
    };
    let (barrier_ns, barrier_yields) = time(iters(20000.0), &mut || {
        g.barrier().unwrap_or_else(|e| fail("barrier", e))
    })?;
    let mut word = [7u64];
    let (bcast_8b_ns, _) = time(iters(20000.0), &mut || {
        g.broadcast(0, &mut word)
            .unwrap_or_else(|e| fail("broadcast", e))
    })?;
    let (allreduce_8b_ns, allreduce_8b_yields) = time(iters(20000.0), &mut || {
        let mut w = [g.my_proc() as u64 + 1];
        g.all_reduce(&mut w, Op::Sum)
            .unwrap_or_else(|e| fail("all_reduce", e));
    })?;
    let mut big = vec![1.0f64; 131072];
    let (allreduce_1mib_ns, _) = time(iters(200.0), &mut || {
        g.all_reduce(&mut big, Op::Sum)
            .unwrap_or_else(|e| fail("all_reduce", e));
    })?;
    let send8 = vec![3u64; p];
    let mut recv8 = vec![0u64; p];
    let (alltoall_8b_ns, alltoall_8b_yields) = time(iters(20000.0), &mut || {
        g.all_to_all(&send8, &mut recv8)
            .unwrap_or_else(|e| fail("all_to_all", e));
    })?;
    let send64 = vec![5u8; p << 16];
    let mut recv64 = vec![0u8; p << 16];
    let (alltoall_64kib_ns, _) = time(iters(200.0), &mut || {
        g.all_to_all(&send64, &mut recv64)
            .unwrap_or_else(|e| fail("all_to_all", e));
    })?;
    let sweeps = sweeps(&g, scale, &mut time)?;
    // Check the results once, so that a fast wrong collective cannot pass.
    let mut w = [g.my_proc() as u64 + 1];
    g.all_reduce(&mut w, Op::Sum).map_err(|e| e.to_string())?;
    if w[0] != (p * (p + 1) / 2) as u64 || recv8 != vec![3u64; p] || recv64.iter().any(|&b| b != 5)
    {
        return Err("a collective returned a wrong result".into());
    }
    if g.my_proc() == 0 {
        let r = CollRun {
            ranks: p,
            barrier_ns,
            bcast_8b_ns,
            allreduce_8b_ns,
            allreduce_1mib_ns,
            alltoall_8b_ns,
            alltoall_64kib_ns,
            yields_per_call: [barrier_yields, allreduce_8b_yields, alltoall_8b_yields],
            sweeps,
            handoff_ns: None,
            cacheline_rtt_ns: None,
            floor_ns: None,
            mpi: None,
        };
        let text = serde_json::to_vec(&r).map_err(|e| e.to_string())?;
        std::fs::write(out, text).map_err(|e| format!("writing {}: {e}", out.display()))?;
    }
    Ok(())
}

/// Times `iters` calls of a collective on every rank: (median ns per call of the slowest
/// rank, yields per rank and call).
type Timer<'a> = dyn FnMut(usize, &mut dyn FnMut()) -> Result<(f64, f64), String> + 'a;

/// The sweeps of one job: each collective's latency for every size of [`SWEEP_SIZES`], timed
/// by `time` (iterations, call) as the fixed sizes are, and checked once at each size.
fn sweeps(g: &Global<'_>, scale: f64, time: &mut Timer<'_>) -> Result<Vec<Curves>, String> {
    let (me, p) = (g.my_proc(), g.procs());
    let fail = |what: &str, e: volley_global::GlobalError| format!("{what}: {e}");
    let mut curves: Vec<Curves> = ["allreduce", "alltoall", "bcast"]
        .map(|name| Curves {
            name: name.into(),
            ..Curves::default()
        })
        .into();
    for size in SWEEP_SIZES.map(|e| 1usize << e) {
        let words = size / 8;
        let n = sweep_iters(scale, size, 1000, 16 << 20) as usize;
        let mut point = |c: usize, ns: f64| {
            curves[c].latency.push(LatencyPoint {
                size,
                latency_us: ns / 1e3,
            })
        };
        // The timed calls do nothing else (the all-reduce's sums grow from call to call);
        // one call on fresh data afterwards checks each collective.
        let mut data = vec![me as f64 + 1.0; words];
        let mut err = None;
        let (ns, _) = time(n, &mut || {
            if let Err(e) = g.all_reduce(&mut data, Op::Sum) {
                err.get_or_insert(fail("all_reduce", e));
            }
        })?;
        point(0, ns);
        let send: Vec<u64> = (0..p * words)
            .map(|i| (me * p * words + i) as u64)
            .collect();
        let mut recv = vec![0u64; p * words];
        let (ns, _) = time(n, &mut || {
            if let Err(e) = g.all_to_all(&send, &mut recv) {
                err.get_or_insert(fail("all_to_all", e));
            }
        })?;
        point(1, ns);
        let root_bytes: Vec<u64> = (0..words as u64).collect();
        let mut bytes = if me == 0 {
            root_bytes.clone()
        } else {
            vec![0; words]
        };
        let (ns, _) = time(n, &mut || {
            if let Err(e) = g.broadcast(0, &mut bytes) {
                err.get_or_insert(fail("broadcast", e));
            }
        })?;
        point(2, ns);
        if let Some(e) = err {
            return Err(format!("{size} B: {e}"));
        }
        data.fill(me as f64 + 1.0);
        recv.fill(0);
        if me != 0 {
            bytes.fill(0);
        }
        let checked = g
            .all_reduce(&mut data, Op::Sum)
            .and_then(|()| g.all_to_all(&send, &mut recv))
            .and_then(|()| g.broadcast(0, &mut bytes));
        if let Err(e) = checked {
            return Err(format!("{size} B: checking: {e}"));
        }
        let sum = (p * (p + 1) / 2) as f64;
        let block = |src: usize| src * p * words + me * words..src * p * words + (me + 1) * words;
        let a2a_ok = (0..p).all(|src| {
            recv[src * words..(src + 1) * words]
                .iter()
                .zip(block(src))
                .all(|(&got, want)| got == want as u64)
        });
        if data.iter().any(|&x| x != sum) || !a2a_ok || bytes != root_bytes {
            return Err(format!("a collective of {size} B returned a wrong result"));
        }
    }
    Ok(curves)
}

impl CollRun {
    /// One run from several runs of one repetition each: every figure their median, the
    /// sweeps' point by point (the first run's ranks, floors and curves otherwise).
    fn median_of(runs: Vec<CollRun>) -> Option<CollRun> {
        let mut m = runs.first()?.clone();
        let med = |f: &dyn Fn(&CollRun) -> f64| -> f64 {
            super::median(&mut runs.iter().map(f).collect::<Vec<_>>())
        };
        m.barrier_ns = med(&|r| r.barrier_ns);
        m.bcast_8b_ns = med(&|r| r.bcast_8b_ns);
        m.allreduce_8b_ns = med(&|r| r.allreduce_8b_ns);
        m.allreduce_1mib_ns = med(&|r| r.allreduce_1mib_ns);
        m.alltoall_8b_ns = med(&|r| r.alltoall_8b_ns);
        m.alltoall_64kib_ns = med(&|r| r.alltoall_64kib_ns);
        for i in 0..m.yields_per_call.len() {
            m.yields_per_call[i] = med(&|r| r.yields_per_call[i]);
        }
        for (c, curve) in m.sweeps.iter_mut().enumerate() {
            for (j, point) in curve.latency.iter_mut().enumerate() {
                let mut at: Vec<f64> = runs
                    .iter()
                    .filter_map(|r| r.sweeps.get(c)?.latency.get(j))
                    .filter(|p| p.size == point.size)
                    .map(|p| p.latency_us)
                    .collect();
                point.latency_us = super::median(&mut at);
            }
        }
        Some(m)
    }
}

/// Runs the benchmark on each of `rank_counts` ranks: `reps` repetitions, each the floors,
/// then a volley job of one repetition, then an Open MPI job of one; every figure is the
/// median of its repetitions.
pub fn bench(reps: usize, scale: f64, rank_counts: &[usize]) -> Result<CollReport, String> {
    let machine = Machine::here();
    let mut runs = Vec::new();
    let mut mpi_note = None;
    let cpus = crate::affinity::allowed_cpus().len();
    for &ranks in rank_counts {
        let iters = ((20_000.0 * scale) as u64).max(100);
        let (mut ours, mut theirs) = (Vec::new(), Vec::new());
        let (mut handoffs, mut lines) = (Vec::new(), Vec::new());
        let mut mpi_works = true;
        for _ in 0..reps.max(1) {
            // The floors too, in every repetition; absent where they cannot be measured (one
            // CPU has no line to bounce).
            handoffs.extend(super::floor::handoff_ns(iters, 1).ok());
            lines.extend(super::floor::cacheline_rtt_ns(iters, 1).ok());
            ours.push(super::run_ranks(
                "coll",
                ranks,
                scale,
                1,
                super::Transport::Shm,
                &[],
            )?);
            if !mpi_works {
                continue;
            }
            match super::mpi_peer::measure(ranks, scale, 1) {
                Ok(Some(m)) => theirs.push(m),
                Ok(None) => {
                    mpi_works = false;
                    mpi_note =
                        Some("Open MPI is not installed (mpicc, mpirun): no MPI figures".into());
                }
                Err(e) => {
                    mpi_works = false;
                    mpi_note = Some(format!("Open MPI failed: {e}"));
                }
            }
        }
        let handoff = (!handoffs.is_empty()).then(|| super::median(&mut handoffs));
        let line = (!lines.is_empty()).then(|| super::median(&mut lines));
        let mut run = CollRun::median_of(ours).ok_or("no repetition ran")?;
        run.mpi = super::mpi_peer::MpiColl::median_of(theirs);
        run.handoff_ns = handoff;
        run.cacheline_rtt_ns = line;
        run.floor_ns = handoff
            .zip(line)
            .map(|(h, l)| call_floor_ns(ranks, cpus, h, l));
        runs.push(run);
    }
    let configs = runs
        .iter()
        .flat_map(|r| {
            r.sweeps.iter().map(move |c| Curves {
                name: format!("{} {} ranks", c.name, r.ranks),
                ..c.clone()
            })
        })
        .collect();
    Ok(CollReport {
        strategy: volley_global::Strategy::from_env()
            .map(|s| s.name().to_string())
            .unwrap_or_else(|_| "hw".into()),
        runs,
        mpi_note,
        configs,
        machine: Some(machine),
    })
}

/// The sweeps in the OSU micro-benchmarks' layout.
pub fn print_osu(r: &CollReport, w: &mut dyn Write) {
    super::sweep::print_osu("coll", "µs per call, slowest rank", "", &r.configs, w);
}

/// The sweeps as CSV.
pub fn csv(r: &CollReport) -> String {
    super::sweep::csv(&r.configs)
}

/// The least one call of a collective that needs every rank to have called it (a barrier, a
/// small all-reduce or all-to-all) can cost for `ranks` ranks pinned round-robin on `cpus`
/// CPUs, given a core's hand-off and the cache-line round trip measured in the same run. With
/// more ranks than CPUs the busiest CPU holds k = ⌈ranks / cpus⌉ ranks, each of which must run
/// in every call, so that CPU changes hands at least k − 1 times per call; otherwise the last
/// arrival's line must reach the others, half a round trip.
pub fn call_floor_ns(ranks: usize, cpus: usize, handoff_ns: f64, line_rtt_ns: f64) -> f64 {
    if cpus > 0 && ranks > cpus {
        (ranks.div_ceil(cpus) - 1) as f64 * handoff_ns
    } else {
        line_rtt_ns / 2.0
    }
}

/// The table: each collective's volley and MPI figures and their ratio, per rank count.
pub fn print_table(r: &CollReport, w: &mut dyn Write) {
    let _ = writeln!(
        w,
        "volley bench coll (strategy {}; µs per call, slowest rank, median of repetitions)",
        r.strategy
    );
    let _ = writeln!(
        w,
        "{:<18} {:>5} {:>10} {:>10} {:>8} {:>8} {:>8}",
        "collective", "ranks", "volley", "Open MPI", "ratio", "v/floor", "MPI/flr"
    );
    for run in &r.runs {
        // (name, volley, Open MPI, whether the call floor bounds it)
        let rows: [(&str, f64, Option<f64>, bool); 6] = [
            (
                "barrier",
                run.barrier_ns,
                run.mpi.as_ref().map(|m| m.mpi_barrier_ns),
                true,
            ),
            (
                "bcast 8 B",
                run.bcast_8b_ns,
                run.mpi.as_ref().map(|m| m.mpi_bcast_8b_ns),
                false,
            ),
            (
                "allreduce 8 B",
                run.allreduce_8b_ns,
                run.mpi.as_ref().map(|m| m.mpi_allreduce_8b_ns),
                true,
            ),
            (
                "allreduce 1 MiB",
                run.allreduce_1mib_ns,
                run.mpi.as_ref().map(|m| m.mpi_allreduce_1mib_ns),
                false,
            ),
            (
                "alltoall 8 B",
                run.alltoall_8b_ns,
                run.mpi.as_ref().map(|m| m.mpi_alltoall_8b_ns),
                true,
            ),
            (
                "alltoall 64 KiB",
                run.alltoall_64kib_ns,
                run.mpi.as_ref().map(|m| m.mpi_alltoall_64kib_ns),
                false,
            ),
        ];
        let over = |x: f64, bounded: bool| match run.floor_ns {
            Some(f) if bounded && f > 0.0 => format!("{:.2}", x / f),
            _ => "-".into(),
        };
        for (name, v, m, bounded) in rows {
            let (ms, ratio, mf) = match m {
                Some(m) => (
                    format!("{:.2}", m / 1e3),
                    format!("{:.2}", v / m),
                    over(m, bounded),
                ),
                None => ("-".into(), "-".into(), "-".into()),
            };
            let _ = writeln!(
                w,
                "{name:<18} {:>5} {:>10.2} {ms:>10} {ratio:>8} {:>8} {mf:>8}",
                run.ranks,
                v / 1e3,
                over(v, bounded)
            );
        }
    }
    for run in &r.runs {
        if let (Some(f), Some(h), Some(l)) = (run.floor_ns, run.handoff_ns, run.cacheline_rtt_ns) {
            let _ = writeln!(
                w,
                "floor on {} ranks: {:.2} µs per call (same run: a core's hand-off {:.2} µs, cache-line round trip {:.3} µs)",
                run.ranks,
                f / 1e3,
                h / 1e3,
                l / 1e3
            );
        }
    }
    for run in &r.runs {
        let [b, a, t] = run.yields_per_call;
        let _ = writeln!(
            w,
            "yields per rank and call on {} ranks: barrier {b:.2}, allreduce 8 B {a:.2}, alltoall 8 B {t:.2}",
            run.ranks
        );
    }
    if let Some(n) = &r.mpi_note {
        let _ = writeln!(w, "note: {n}");
    }
    let _ = writeln!(w, "ratio = volley / Open MPI (below 1: volley faster). With more ranks than cores the figures include the scheduler's sharing.");
    super::sweep::print_curves("sweeps, µs per call", &r.configs, w);
    let _ = writeln!(w, "v/floor, MPI/flr = each beside the least a call that synchronizes every rank can cost here: with more ranks than CPUs, one hand-off of a core for each extra rank the busiest CPU holds (every rank must run in every call); otherwise half a cache-line round trip.");
}

#[cfg(test)]
mod tests {
    use super::{call_floor_ns, CollRun, Curves, LatencyPoint};

    fn run(barrier: f64, sweep: &[f64]) -> CollRun {
        CollRun {
            ranks: 4,
            barrier_ns: barrier,
            bcast_8b_ns: barrier + 1.0,
            allreduce_8b_ns: barrier + 2.0,
            allreduce_1mib_ns: barrier + 3.0,
            alltoall_8b_ns: barrier + 4.0,
            alltoall_64kib_ns: barrier + 5.0,
            yields_per_call: [barrier, 0.5, 0.75],
            handoff_ns: None,
            cacheline_rtt_ns: None,
            floor_ns: None,
            sweeps: vec![Curves {
                name: "allreduce".into(),
                latency: sweep
                    .iter()
                    .enumerate()
                    .map(|(i, &us)| LatencyPoint {
                        size: 8 << i,
                        latency_us: us,
                    })
                    .collect(),
                bandwidth: Vec::new(),
                memcpy: Vec::new(),
            }],
            mpi: None,
        }
    }

    #[test]
    fn paired_repetitions_combine_into_each_figures_median() {
        let m = CollRun::median_of(vec![
            run(300.0, &[9.0, 1.0]),
            run(100.0, &[3.0, 7.0]),
            run(200.0, &[5.0, 4.0]),
        ])
        .unwrap();
        assert_eq!(m.barrier_ns, 200.0);
        assert_eq!(m.alltoall_64kib_ns, 205.0);
        assert_eq!(m.yields_per_call, [200.0, 0.5, 0.75]);
        let us: Vec<f64> = m.sweeps[0].latency.iter().map(|p| p.latency_us).collect();
        assert_eq!(us, [5.0, 4.0], "not the median of each point");
        assert!(CollRun::median_of(Vec::new()).is_none());
    }

    #[test]
    fn the_call_floor_counts_one_hand_off_per_extra_rank_on_the_busiest_cpu() {
        // Not more ranks than CPUs: half the line's round trip.
        assert_eq!(call_floor_ns(2, 2, 1000.0, 100.0), 50.0);
        assert_eq!(call_floor_ns(1, 2, 1000.0, 100.0), 50.0);
        // 4 ranks on 2 CPUs: each CPU holds 2 and changes hands once per call.
        assert_eq!(call_floor_ns(4, 2, 1000.0, 100.0), 1000.0);
        // 5 on 2: the busiest holds 3.
        assert_eq!(call_floor_ns(5, 2, 1000.0, 100.0), 2000.0);
        assert_eq!(call_floor_ns(8, 2, 1000.0, 100.0), 3000.0);
        assert_eq!(call_floor_ns(8, 4, 1000.0, 100.0), 1000.0);
    }
}
