//! `seed003-trisolve`: seed 003's experiment E2 (§4, test B), the pipelined banded
//! lower-triangular solve, on 2 ranks of one node (one grid column each, `N` rows, one float
//! per message, four flops between messages), with `volley-prim-layers`:
//!
//! - B0: typed send/receive (the typed layer on the primitives, NX/2's stand-in);
//! - B1: one raw data packet per value, the receiver polls its buffer (inline);
//! - B2: a channel opened once, `pipe_put` / `pipe_get` (inline);
//! - B3: a fetch request per value, a procedure packet whose handler runs in the owner's
//!   blocked receive, in `interrupt` mode (the receives sleep on a futex until notified);
//! - B3': the same fetch request, answered by the owner's communication thread as soon as
//!   the value is computed while the owner's program thread computes on (`comm-thread` mode).
//!
//! As the seed, the figures are the last rank's: its computation time is the same loop on
//! the values it would receive (no communication, measured in the same job), and its
//! communication time is its solve's time minus that. The timing harness
//! (`volley_prim_layers::timing`, the `timing` rows) adds per version the rank that
//! completed last and the per-message latencies (median, p99) of one more solve with a
//! clock read around each receive (or fetch round trip).
//!
//! Beside them, the floor of any interrupt-driven B3 on this machine (`b3_signal_floor`): the
//! round trip of a request raised as a POSIX signal (`SIGUSR1`, E12's handler) at the other
//! rank's running, computing program thread, the requester spinning for the answer; a B3
//! whose every fetch is such an interrupt costs at least `N` of them.
//!
//! Verified: every version's solution equals the serial solve on both ranks (`correct`) AND
//! the seed's ordering of communication times B2 < B1 < B3 < B0 holds (`ordering_holds`);
//! both are in the JSON. B3' is reported beside them (`b3p_over_b3`, `b3p_over_b0`, and
//! whether B3' < B3, the seed's claim, as `b3p_below_b3`) but not part of `verified`.

use super::{rank_job, timing_rows, verdict, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median_present;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;
use volley_prim::{Prim, PrimConfig, Progress};
use volley_prim_layers::timing::{Latencies, RankTiming};
use volley_prim_layers::trisolve::{self, Version};
use volley_prim_layers::Typed;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed003-trisolve",
    about: "seed 003 E2: pipelined banded triangular solve, B0 typed / B1 raw / B2 open channel / B3 fetch in interrupt mode / B3' fetch served by the communication thread, last rank's computation and communication",
    run,
    rank: Some(rank),
};

/// One job's figures: per version and repetition, the last rank's solve time (ns).
#[derive(Debug, Default, Serialize, Deserialize)]
struct JobOut {
    /// (version name, solve ns per repetition).
    solve_ns: Vec<(String, Vec<f64>)>,
    /// The computation alone, per repetition.
    local_ns: Vec<f64>,
    failures: Vec<String>,
    /// Per version, every rank's timing (the harness).
    timing: Vec<(String, Vec<RankTiming>)>,
    /// The signal round trip (ns per request), per repetition (the `signal-floor` job).
    signal_rtt_ns: Vec<f64>,
}

/// What a rank other than the last sends the last one.
#[derive(Debug, Default, Serialize, Deserialize)]
struct Others {
    failures: Vec<String>,
    timing: Vec<(String, RankTiming)>,
    signal_rtt_ns: Vec<f64>,
}

/// The floor of an interrupt-driven B3: a signal's round trip to a running rank, times `N`.
#[derive(Debug, Serialize)]
struct SignalFloor {
    /// ns per request: `SIGUSR1` raised at the other rank's computing program thread, its
    /// handler answers, the requester spins (median over the repetitions of each one's median
    /// request).
    round_trip_ns: f64,
    /// `N` such round trips, µs: what B3 would cost with every fetch an interrupt.
    b3_floor_us: f64,
    /// B0's communication, µs, from the same run.
    b0_communication_us: f64,
    /// Whether that floor is below B0 (could any interrupt put B3 below B0 here).
    below_b0: bool,
}

#[derive(Debug, Serialize)]
struct Row {
    version: &'static str,
    how: &'static str,
    computation_us: f64,
    communication_us: f64,
    communication_ns_per_message: f64,
    seed_communication: &'static str,
    seed_computation: &'static str,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    correct: bool,
    ordering_holds: bool,
    b2_communication_at_or_below_computation: bool,
    b3p_below_b3: bool,
    b3p_over_b3: f64,
    b3p_over_b0: f64,
    b3_signal_floor: SignalFloor,
    failures: Vec<String>,
    n: usize,
    ranks: usize,
    rows: Vec<Row>,
    timing: Vec<timing_rows::TimingRow>,
    seed_unit_note: &'static str,
}

/// The rank job's name for the signal round trip (not a version of the solve).
const SIGNAL_FLOOR: &str = "signal-floor";

fn version_of(name: &str) -> Option<Version> {
    Some(match name {
        "typed" => Version::Typed,
        "raw" => Version::Raw,
        "pipe" => Version::Pipe,
        "fetch" => Version::Fetch,
        "fetch-comm" => Version::FetchComm,
        _ => return None,
    })
}

/// One rank: `N REPS CORRUPT VERSION...`; the progress mode comes from `VOLLEY_PRIM_PROGRESS`.
fn rank(a: &RankArgs) -> Result<(), String> {
    let usage = || "expected N REPS CORRUPT VERSION...".to_string();
    let n: usize = a
        .args
        .first()
        .and_then(|s| s.parse().ok())
        .ok_or_else(usage)?;
    let reps: usize = a
        .args
        .get(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(usage)?;
    let corrupt = a.args.get(2).map(String::as_str) == Some("1");
    let names = &a.args[3.min(a.args.len())..];
    let signal_floor = names.iter().any(|n| n == SIGNAL_FLOOR);
    let cfg = PrimConfig::from_env().map_err(|e| e.to_string())?;
    let cfg = trisolve::with_handlers(cfg).map_err(|e| e.to_string())?;
    let mut b = volley::Runtime::builder();
    let setup = Prim::register(&mut b, cfg);
    let rt = b.build().map_err(|e| e.to_string())?;
    let p = setup.attach(&rt).map_err(|e| e.to_string())?;
    let t = Typed::new(&p);
    let (me, size) = (p.rank(), p.size());
    let want = trisolve::serial(n, size);
    let incoming = trisolve::incoming(&want, n, size, me);
    let mut out = JobOut::default();
    // Per version: this rank's solve times and one instrumented solve's latencies.
    let mut mine: Vec<(String, Vec<f64>, Latencies)> = Vec::new();
    let check = |name: &str, y: &[f64], failures: &mut Vec<String>| {
        for (r, v) in y.iter().enumerate() {
            let mut w = want[r * size + me];
            if corrupt && r == n / 2 && me + 1 == size {
                w += 1.0;
            }
            if *v != w && failures.len() < 4 {
                failures.push(format!("{name}: rank {me} row {r}: {v} != {w}"));
            }
        }
    };
    if signal_floor {
        if size != 2 {
            return Err(format!("{SIGNAL_FLOOR} runs on 2 ranks, not {size}"));
        }
        let iters = (n as u64 / 2).max(64);
        for _ in 0..reps {
            let ns = super::seed003_progress::signal_round_trip(&p, iters, &mut out.failures)?;
            if me == 0 {
                out.signal_rtt_ns.push(ns);
            }
        }
    }
    for name in names.iter().filter(|n| *n != SIGNAL_FLOOR) {
        let v = version_of(name).ok_or_else(|| format!("unknown version {name:?}"))?;
        // One warm-up solve, then the timed ones.
        let mut times = Vec::new();
        for rep in 0..=reps {
            rt.barrier();
            let start = Instant::now();
            let y = trisolve::solve(&p, &t, n, v, &[]).map_err(|e| format!("{name}: {e}"))?;
            let ns = start.elapsed().as_nanos() as f64;
            check(name, &y.y, &mut out.failures);
            if rep > 0 {
                times.push(ns);
            }
        }
        // One more solve with each incoming value's latency recorded (clock reads per
        // message: not among the timed ones).
        rt.barrier();
        let mut lat = Latencies::new();
        let y = trisolve::solve_timed(&p, &t, n, v, &[], Some(&mut lat))
            .map_err(|e| format!("{name}: {e}"))?;
        check(name, &y.y, &mut out.failures);
        mine.push((name.clone(), times.clone(), lat));
        out.solve_ns.push((name.clone(), times));
    }
    for rep in 0..=reps {
        let start = Instant::now();
        let y = trisolve::solve(&p, &t, n, Version::Local, &incoming)
            .map_err(|e| format!("local: {e}"))?;
        let ns = start.elapsed().as_nanos() as f64;
        check("local", &y.y, &mut out.failures);
        if rep > 0 {
            out.local_ns.push(ns);
        }
    }
    let compute_ns = median_present(out.local_ns.iter().copied());
    let timing: Vec<(String, RankTiming)> = mine
        .into_iter()
        .map(|(name, times, lat)| {
            let rt = RankTiming {
                run_ns: median_present(times.iter().copied()),
                compute_ns,
                latency: lat.to_pairs(),
            };
            (name, rt)
        })
        .collect();
    // The other ranks' failures and timing go to the last rank, which writes the result.
    rt.barrier();
    let last = size - 1;
    if me != last {
        let o = Others {
            failures: out.failures,
            timing,
            signal_rtt_ns: out.signal_rtt_ns,
        };
        let text = serde_json::to_vec(&o).map_err(|e| e.to_string())?;
        t.send(last, 1, &text).map_err(|e| e.to_string())?;
    } else {
        out.timing = timing.into_iter().map(|(n, t)| (n, vec![t])).collect();
        for _ in 0..last {
            let text = t.recv(1).map_err(|e| e.to_string())?;
            let o: Others = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
            out.failures.extend(o.failures);
            out.signal_rtt_ns.extend(o.signal_rtt_ns);
            for ((name, all), (theirs_name, theirs)) in out.timing.iter_mut().zip(o.timing) {
                if *name == theirs_name {
                    all.push(theirs);
                }
            }
        }
        write_result(&a.out, &out)?;
    }
    rt.barrier();
    drop(t);
    drop(p);
    rt.finalize();
    Ok(())
}

fn run(o: &Options) -> Result<Outcome, String> {
    let n: usize = if o.quick { 256 } else { 2048 };
    let ranks = 2;
    let base = [
        n.to_string(),
        o.reps.to_string(),
        if o.corrupt { "1" } else { "0" }.to_string(),
    ];
    let job = |mode: Progress, versions: &[&str]| -> Result<JobOut, String> {
        let mut args = base.to_vec();
        args.extend(versions.iter().map(|s| s.to_string()));
        rank_job(
            EXPERIMENT.name,
            ranks,
            ranks,
            &[("VOLLEY_PRIM_PROGRESS", mode.name())],
            &args,
        )
    };
    let inline = job(Progress::InlinePoll, &["typed", "raw", "pipe"])?;
    let interrupt = job(Progress::Interrupt, &["fetch"])?;
    let comm_thread = job(Progress::CommThread, &["fetch-comm"])?;
    let signal = job(Progress::InlinePoll, &[SIGNAL_FLOOR])?;
    let mut failures: Vec<String> = inline.failures.clone();
    for j in [&interrupt, &comm_thread, &signal] {
        failures.extend(j.failures.iter().cloned());
    }
    let correct = failures.is_empty();
    // Computation: the inline job's local loop (the interrupt job's is the same loop).
    let comp = median_present(inline.local_ns.iter().copied());
    let solve = |j: &JobOut, name: &str| {
        j.solve_ns
            .iter()
            .find(|(v, _)| v == name)
            .map(|(_, t)| median_present(t.iter().copied()))
            .unwrap_or(f64::NAN)
    };
    let comm = |total: f64| (total - comp).max(0.0);
    let specs = [
        (
            "B0",
            "typed send/recv (typed layer)",
            solve(&inline, "typed"),
            "\"474us\"",
        ),
        (
            "B1",
            "raw packet per value, polling",
            solve(&inline, "raw"),
            "\"89us\"",
        ),
        (
            "B2",
            "open channel, pipe_put/pipe_get",
            solve(&inline, "pipe"),
            "\"4us\"",
        ),
        (
            "B3",
            "fetch request, interrupt mode",
            solve(&interrupt, "fetch"),
            "\"385us\"",
        ),
        (
            "B3'",
            "fetch served by the comm thread",
            solve(&comm_thread, "fetch-comm"),
            "\"much better than B3\"",
        ),
    ];
    let rows: Vec<Row> = specs
        .iter()
        .map(|&(version, how, total, seed)| Row {
            version,
            how,
            computation_us: comp / 1e3,
            communication_us: comm(total) / 1e3,
            communication_ns_per_message: comm(total) / n as f64,
            seed_communication: seed,
            seed_computation: if version.starts_with("B3") {
                "not stated"
            } else {
                "\"5us\""
            },
        })
        .collect();
    let find = |j: &JobOut, name: &str| timing_rows::of(&j.timing, name);
    const WAIT: &str = "the receive's wait for each incoming value";
    const TRIP: &str = "each fetch request's round trip";
    let timing: Vec<timing_rows::TimingRow> = [
        ("B0 typed", find(&inline, "typed"), WAIT),
        ("B1 raw", find(&inline, "raw"), WAIT),
        ("B2 pipe", find(&inline, "pipe"), WAIT),
        ("B3 fetch, interrupt", find(&interrupt, "fetch"), TRIP),
        (
            "B3' fetch, comm thread",
            find(&comm_thread, "fetch-comm"),
            TRIP,
        ),
    ]
    .into_iter()
    .filter_map(|(name, ranks, what)| timing_rows::row(name, what, &ranks, &mut failures))
    .collect();
    let c = |i: usize| rows[i].communication_us;
    for r in &rows {
        if !r.communication_us.is_finite() {
            failures.push(format!("{}: no figure", r.version));
        }
    }
    let ordering_holds = c(2) < c(1) && c(1) < c(3) && c(3) < c(0);
    let b2_ok = c(2) <= rows[2].computation_us;
    let (b3p_over_b3, b3p_over_b0) = (c(4) / c(3), c(4) / c(0));
    let round_trip_ns = median_present(signal.signal_rtt_ns.iter().copied());
    if !round_trip_ns.is_finite() {
        failures.push("the signal round trip: no figure".into());
    }
    let b3_signal_floor = SignalFloor {
        round_trip_ns,
        b3_floor_us: round_trip_ns * n as f64 / 1e3,
        b0_communication_us: c(0),
        below_b0: round_trip_ns * n as f64 / 1e3 < c(0),
    };
    let mut all = failures.clone();
    if !ordering_holds {
        all.push(format!(
            "ordering B2 < B1 < B3 < B0 does not hold: {:.0} / {:.0} / {:.0} / {:.0} us",
            c(2),
            c(1),
            c(3),
            c(0)
        ));
    }
    let report = Report {
        verified: all.is_empty(),
        correct,
        ordering_holds,
        b2_communication_at_or_below_computation: b2_ok,
        b3p_below_b3: c(4) < c(3),
        b3p_over_b3,
        b3p_over_b0,
        b3_signal_floor,
        failures: all,
        n,
        ranks,
        rows,
        timing,
        seed_unit_note: "the seed prints \"us\"; for 2048 dependent messages the figures are only plausible as ms (notes §1.7): compare ratios and ordering",
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed003-trisolve: N = {} rows, {} ranks on one node (one column each), last rank's times, medians",
        r.n, r.ranks
    );
    let _ = writeln!(
        t,
        "  {:<3} {:<34} {:>10} {:>10} {:>9}  seed comm / comp",
        "", "version", "comp us", "comm us", "ns/msg"
    );
    for row in &r.rows {
        let _ = writeln!(
            t,
            "  {:<3} {:<34} {:>10.1} {:>10.1} {:>9.0}  {} / {}",
            row.version,
            row.how,
            row.computation_us,
            row.communication_us,
            row.communication_ns_per_message,
            row.seed_communication,
            row.seed_computation
        );
    }
    let _ = writeln!(
        t,
        "  floor: the computation row (the same loop without communication, same job); {}",
        r.seed_unit_note
    );
    let _ = writeln!(
        t,
        "  B3'/B3 = {:.2}, B3'/B0 = {:.2} (B3' < B3, the seed's claim: {}; not part of the verdict)",
        r.b3p_over_b3, r.b3p_over_b0, r.b3p_below_b3
    );
    let f = &r.b3_signal_floor;
    let _ = writeln!(
        t,
        "  B3 floor with interrupts: a signal to the other rank's running thread and back {:.0} ns, x N = {:.0} us against B0's {:.0} us (below B0: {})",
        f.round_trip_ns, f.b3_floor_us, f.b0_communication_us, f.below_b0
    );
    let _ = writeln!(
        t,
        "  correct: {}; ordering B2 < B1 < B3 < B0: {}; B2 comm <= comp: {}",
        r.correct, r.ordering_holds, r.b2_communication_at_or_below_computation
    );
    timing_rows::table(&mut t, &r.timing);
    t.push_str(&verdict(
        r.verified,
        "solutions equal the serial solve; B2 < B1 < B3 < B0",
        &r.failures,
    ));
    t
}
