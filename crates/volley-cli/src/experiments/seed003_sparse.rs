//! `seed003-sparse`: seed 003's experiment E9 (§5), a sparse lower-triangular solve whose
//! pattern is known only at run time (a random system drawn from a seed, rows dealt
//! cyclically; each rank generates only its own rows), on 2 ranks of one node, solved by
//!
//! - (a) typed send/receive, level-scheduled (`sparse::solve_levels`): rounds of the rows
//!   whose operands are known, each round's values sent to every rank as a typed message
//!   (`inline` mode);
//! - (b) inspector/executor: the inspector (timed on its own) learns who needs what and
//!   plans batches with flow-control credits; the executor pushes values, reused per solve
//!   (`inline` mode: no notifications);
//! - (c) conditional remote fetch (`sparse::Fetcher`): each remote operand asked of its
//!   owner, parked there until computed; no preprocessing; the requests' handlers run on the
//!   communication thread (`comm-thread` mode; the owner's program thread answers);
//! - (d) the same fetch in `interrupt` mode: the requests' handlers run in the owner's
//!   receive, which sleeps on a futex until the requester's notification wakes it.
//!
//! The same fetch with the program threads polling (`inline`) is reported beside (c).
//!
//! Figures: the time of the last rank to finish, per solve (medians over repetitions), the
//! inspector's cost, and the break-even number of solves after which inspector plus
//! executor beat fetching through the communication thread (`ceil(inspector / (fetch -
//! executor))`). The floor, in the same run: the serial solve of the whole system on one
//! rank (the computation alone). The timing harness (`volley_prim_layers::timing`) adds per
//! variant the last rank's computation (its rows evaluated on the serial solution, no
//! communication) and communication, and the per-message latencies: a fetch request's round
//! trip (parked time included), a row's wait for each remote operand in the executor (0 when
//! its batch was in), a rank's wait for each level message.
//!
//! Verified: every version gives the serial solution bit for bit on every rank in every
//! solve (`correct`), AND the seed's claim holds: a reused schedule beats fetching per solve,
//! so the break-even is finite (`schedule_pays_off`), AND the executor never found a buffer
//! full (`no_stalls`).

use super::{
    rank_job, require_figures, timing_rows, verdict, write_result, Experiment, Options, Outcome,
    RankArgs,
};
use crate::bench::median_present;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::time::Instant;
use volley_prim::{Prim, PrimConfig, Progress};
use volley_prim_layers::sparse::{
    self, Executor, Fetcher, InspectOptions, Layout, LevelStats, Pattern,
};
use volley_prim_layers::timing::{Latencies, RankTiming};
use volley_prim_layers::Typed;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed003-sparse",
    about: "seed 003 E9: sparse triangular solve with a run-time pattern, (a) typed level-scheduled, (b) inspector/executor, (c) conditional fetch via the comm thread, (d) via interrupts (per-solve cost, break-even, timing)",
    run,
    rank: Some(rank),
};

/// The random system's seed.
const SEED: u64 = 0x5eed_03e9;

/// One rank's figures (ns per repetition) and checks; at rank 0, every rank's.
#[derive(Debug, Default, Serialize, Deserialize)]
struct RankOut {
    fetch_ns: Vec<f64>,
    inspect_ns: Vec<f64>,
    exec_ns: Vec<f64>,
    levels_ns: Vec<f64>,
    /// The serial solve of the whole system (rank 0 only).
    serial_ns: Vec<f64>,
    failures: Vec<String>,
    requests: u64,
    parked: u64,
    batches: u64,
    credits: u64,
    values_in: u64,
    stalls: u64,
    rounds: u64,
    level_messages: u64,
    /// Per variant, each rank's timing.
    timing: Vec<(String, Vec<RankTiming>)>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    correct: bool,
    schedule_pays_off: bool,
    no_stalls: bool,
    failures: Vec<String>,
    n: usize,
    per_row: usize,
    window: usize,
    seed: u64,
    ranks: usize,
    capacity: usize,
    serial_us: f64,
    /// (a) typed send/receive, level-scheduled.
    levels_us_per_solve: f64,
    /// (c) conditional fetch, requests handled on the communication thread.
    fetch_us_per_solve: f64,
    /// (d) conditional fetch in interrupt mode.
    fetch_interrupt_us_per_solve: f64,
    /// The same fetch with polling program threads (inline).
    fetch_inline_us_per_solve: f64,
    executor_us_per_solve: f64,
    inspector_us: f64,
    break_even_solves: Option<u64>,
    fetch_requests_per_solve: u64,
    fetch_parked_per_solve: u64,
    executor_batches_per_solve: u64,
    executor_credits_per_solve: u64,
    remote_values_per_solve: u64,
    executor_full_stalls: u64,
    level_rounds_per_solve: u64,
    level_messages_per_solve: u64,
    timing: Vec<timing_rows::TimingRow>,
    seed_claims: &'static str,
}

fn num<T: std::str::FromStr>(a: &RankArgs, i: usize) -> Result<T, String> {
    a.args
        .get(i)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| "expected N PER_ROW WINDOW REPS CORRUPT VARIANTS".to_string())
}

/// Median of `v` (NaN when empty).
fn med(v: &[f64]) -> f64 {
    median_present(v.iter().copied())
}

/// Each element the larger of the two.
fn keep_max(a: &mut [f64], b: &[f64]) {
    for (x, y) in a.iter_mut().zip(b) {
        *x = x.max(*y);
    }
}

/// One rank: `N PER_ROW WINDOW REPS CORRUPT VARIANTS`, the variants a comma list of
/// `levels`, `fetch`, `executor`, `serial`; the progress mode from `VOLLEY_PRIM_PROGRESS`.
fn rank(a: &RankArgs) -> Result<(), String> {
    let (n, per_row, window, reps): (usize, usize, usize, usize) =
        (num(a, 0)?, num(a, 1)?, num(a, 2)?, num(a, 3)?);
    let corrupt = a.args.get(4).map(String::as_str) == Some("1");
    let variants: Vec<&str> = a
        .args
        .get(5)
        .map_or("", String::as_str)
        .split(',')
        .collect();
    let cfg = PrimConfig::from_env().map_err(|e| e.to_string())?;
    let mode = cfg.progress_mode().name();
    let (cfg, setup) = sparse::with_handlers(cfg).map_err(|e| e.to_string())?;
    let mut b = volley::Runtime::builder();
    let ps = Prim::register(&mut b, cfg);
    let rt = b.build().map_err(|e| e.to_string())?;
    let p = ps.attach(&rt).map_err(|e| e.to_string())?;
    let (me, size) = (p.rank(), p.size());
    let pat = Pattern {
        n,
        per_row,
        window,
        seed: SEED,
    };
    let layout = Layout { n, size };
    let rows = pat.local_rows(layout, me);
    let want = pat.serial();
    let mut out = RankOut::default();
    // At most one failure per solve, so that every variant's shows.
    let check = |what: &str, y: &[f64], failures: &mut Vec<String>| {
        for (k, v) in y.iter().enumerate() {
            let i = rows[k].index;
            let mut w = want[i];
            if corrupt && k == rows.len() / 2 && me + 1 == size {
                w += 1.0;
            }
            if *v != w {
                if failures.len() < 16 {
                    failures.push(format!("{what}: unknown {i} on rank {me}: {v} != {w}"));
                }
                return;
            }
        }
    };
    fn err(what: &'static str) -> impl Fn(sparse::SparseError) -> String {
        move |e| format!("{what}: {e}")
    }
    // The computation alone: this rank's rows on the serial solution (item 25).
    let mut compute = Vec::new();
    for _ in 0..=reps {
        let start = Instant::now();
        for r in &rows {
            std::hint::black_box(sparse::eval(r, |c| want[c]));
        }
        compute.push(start.elapsed().as_nanos() as f64);
    }
    let compute_ns = med(&compute[1..]);
    let timing = |name: String, times: &[f64], lat: &Latencies| {
        (
            name,
            vec![RankTiming {
                run_ns: med(times),
                compute_ns,
                latency: lat.to_pairs(),
            }],
        )
    };
    let t = Typed::new(&p);
    for &variant in &variants {
        match variant {
            "levels" => {
                // (a): one warm-up solve, then the timed ones.
                let mut stats = LevelStats::default();
                let mut lat = Latencies::new();
                for rep in 0..=reps {
                    rt.barrier();
                    let mut l = Latencies::new();
                    let start = Instant::now();
                    let y = sparse::solve_levels(&t, layout, &rows, &mut l, &mut stats)
                        .map_err(err("levels solve"))?;
                    let ns = start.elapsed().as_nanos() as f64;
                    check("(a) typed, level-scheduled", &y, &mut out.failures);
                    if rep > 0 {
                        out.levels_ns.push(ns);
                        lat.merge(&l);
                    }
                }
                out.rounds = stats.rounds / (reps as u64 + 1);
                out.level_messages = stats.messages / (reps as u64 + 1);
                out.timing
                    .push(timing("levels".into(), &out.levels_ns, &lat));
            }
            "fetch" => {
                let mut f = Fetcher::new(&p, &setup, layout).map_err(err("fetcher"))?;
                let what = format!("fetch ({mode})");
                let mut lat = Latencies::new();
                for rep in 0..=reps {
                    rt.barrier();
                    let start = Instant::now();
                    let y = sparse::solve_fetch(&mut f, &rows).map_err(err("fetch solve"))?;
                    let ns = start.elapsed().as_nanos() as f64;
                    let l = f.take_latencies();
                    check(&what, &y, &mut out.failures);
                    if rep > 0 {
                        out.fetch_ns.push(ns);
                        lat.merge(&l);
                    }
                }
                let fs = f.stats();
                out.requests = fs.requests / (reps as u64 + 1);
                out.parked = fs.parked / (reps as u64 + 1);
                out.timing.push(timing(what, &out.fetch_ns, &lat));
            }
            "executor" => {
                // (b) the inspector, timed on its own (each repetition inspects again).
                let mut sched = None;
                for rep in 0..=reps {
                    rt.barrier();
                    let start = Instant::now();
                    let s = sparse::inspect(&p, layout, &rows, InspectOptions::default())
                        .map_err(err("inspect"))?;
                    let ns = start.elapsed().as_nanos() as f64;
                    if rep > 0 {
                        out.inspect_ns.push(ns);
                    }
                    sched = Some(s);
                }
                let sched = sched.expect("inspected at least once");
                out.values_in = sched.values_in() as u64;
                let mut x = Executor::new(&p, &setup, sched).map_err(err("executor"))?;
                let stalls = p.stats().full_stalls;
                let mut lat = Latencies::new();
                for rep in 0..=reps {
                    rt.barrier();
                    let start = Instant::now();
                    let y = x.solve(&rows).map_err(err("executor solve"))?;
                    let ns = start.elapsed().as_nanos() as f64;
                    let l = x.take_waits();
                    check("(b) executor", &y, &mut out.failures);
                    if rep > 0 {
                        out.exec_ns.push(ns);
                        lat.merge(&l);
                    }
                }
                out.stalls = p.stats().full_stalls - stalls;
                let xs = x.stats();
                out.batches = xs.batches / (reps as u64 + 1);
                out.credits = xs.credits / (reps as u64 + 1);
                out.timing
                    .push(timing("executor".into(), &out.exec_ns, &lat));
            }
            "serial" => {
                // The floor: the serial solve of the whole system on rank 0, rows generated.
                rt.barrier();
                if me == 0 {
                    let all: Vec<sparse::Row> = (0..n).map(|i| pat.row(i)).collect();
                    for rep in 0..=reps {
                        let start = Instant::now();
                        let y =
                            std::hint::black_box(sparse::serial_solve(std::hint::black_box(&all)));
                        let ns = start.elapsed().as_nanos() as f64;
                        if y != want {
                            out.failures
                                .push("the serial solve is not reproducible".into());
                        }
                        if rep > 0 {
                            out.serial_ns.push(ns);
                        }
                    }
                }
            }
            other => return Err(format!("unknown variant {other:?}")),
        }
    }
    // Every rank's figures go to rank 0, which keeps per repetition the last rank's time.
    rt.barrier();
    if me != 0 {
        let text = serde_json::to_vec(&out).map_err(|e| e.to_string())?;
        t.send(0, 1, &text).map_err(|e| e.to_string())?;
    } else {
        for _ in 1..size {
            let text = t.recv(1).map_err(|e| e.to_string())?;
            let o: RankOut = serde_json::from_slice(&text).map_err(|e| e.to_string())?;
            keep_max(&mut out.fetch_ns, &o.fetch_ns);
            keep_max(&mut out.inspect_ns, &o.inspect_ns);
            keep_max(&mut out.exec_ns, &o.exec_ns);
            keep_max(&mut out.levels_ns, &o.levels_ns);
            out.failures.extend(o.failures);
            out.requests += o.requests;
            out.parked += o.parked;
            out.batches += o.batches;
            out.credits += o.credits;
            out.values_in += o.values_in;
            out.stalls += o.stalls;
            out.level_messages += o.level_messages;
            for ((name, mine), (theirs_name, theirs)) in out.timing.iter_mut().zip(o.timing) {
                if *name == theirs_name {
                    mine.extend(theirs);
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
    let (n, per_row, window) = if o.quick {
        (4000, 4, 64)
    } else {
        (40_000, 4, 64)
    };
    let ranks = 2;
    let job = |mode: Progress, variants: &str| -> Result<RankOut, String> {
        let args = [
            n.to_string(),
            per_row.to_string(),
            window.to_string(),
            o.reps.to_string(),
            if o.corrupt { "1" } else { "0" }.to_string(),
            variants.to_string(),
        ];
        rank_job(
            EXPERIMENT.name,
            ranks,
            ranks,
            &[("VOLLEY_PRIM_PROGRESS", mode.name())],
            &args,
        )
    };
    let j = job(Progress::InlinePoll, "serial,levels,executor,fetch")?;
    let comm = job(Progress::CommThread, "fetch")?;
    let intr = job(Progress::Interrupt, "fetch")?;
    let (serial, levels, fetch_inline, exec, insp) = (
        med(&j.serial_ns) / 1e3,
        med(&j.levels_ns) / 1e3,
        med(&j.fetch_ns) / 1e3,
        med(&j.exec_ns) / 1e3,
        med(&j.inspect_ns) / 1e3,
    );
    let (fetch, fetch_intr) = (med(&comm.fetch_ns) / 1e3, med(&intr.fetch_ns) / 1e3);
    let mut failures = j.failures.clone();
    failures.extend(comm.failures.iter().cloned());
    failures.extend(intr.failures.iter().cloned());
    let correct = failures.is_empty();
    require_figures(
        &mut failures,
        &[
            ("serial", serial),
            ("(a) levels", levels),
            ("(b) executor", exec),
            ("(b) inspector", insp),
            ("(c) fetch, comm thread", fetch),
            ("(d) fetch, interrupt", fetch_intr),
            ("fetch, inline", fetch_inline),
        ],
    );
    let schedule_pays_off = exec < fetch;
    let break_even = schedule_pays_off.then(|| (insp / (fetch - exec)).ceil().max(1.0) as u64);
    if !schedule_pays_off {
        failures.push(format!(
            "the executor ({exec:.0} us) is not cheaper per solve than fetching ({fetch:.0} us)"
        ));
    }
    let no_stalls = j.stalls == 0;
    if !no_stalls {
        failures.push(format!(
            "the executor found a buffer full {} times",
            j.stalls
        ));
    }
    let find = |job: &RankOut, name: &str| timing_rows::of(&job.timing, name);
    const FETCH: &str = "each request, from its send to its answer (parked time included)";
    let timing: Vec<timing_rows::TimingRow> = [
        (
            "(a) typed, level-scheduled",
            find(&j, "levels"),
            "a rank's wait for each other rank's level message",
        ),
        (
            "(b) executor",
            find(&j, "executor"),
            "a row's wait for each remote operand (0: its batch was in)",
        ),
        (
            "(c) fetch, comm thread",
            find(&comm, "fetch (comm-thread)"),
            FETCH,
        ),
        (
            "(d) fetch, interrupt",
            find(&intr, "fetch (interrupt)"),
            FETCH,
        ),
        ("fetch, inline", find(&j, "fetch (inline)"), FETCH),
    ]
    .into_iter()
    .filter_map(|(name, ranks, what)| timing_rows::row(name, what, &ranks, &mut failures))
    .collect();
    let report = Report {
        verified: failures.is_empty(),
        correct,
        schedule_pays_off,
        no_stalls,
        failures,
        n,
        per_row,
        window,
        seed: SEED,
        ranks,
        capacity: volley_prim::DEFAULT_CAPACITY,
        serial_us: serial,
        levels_us_per_solve: levels,
        fetch_us_per_solve: fetch,
        fetch_interrupt_us_per_solve: fetch_intr,
        fetch_inline_us_per_solve: fetch_inline,
        executor_us_per_solve: exec,
        inspector_us: insp,
        break_even_solves: break_even,
        fetch_requests_per_solve: comm.requests,
        fetch_parked_per_solve: comm.parked,
        executor_batches_per_solve: j.batches,
        executor_credits_per_solve: j.credits,
        remote_values_per_solve: j.values_in,
        executor_full_stalls: j.stalls,
        level_rounds_per_solve: j.rounds,
        level_messages_per_solve: j.level_messages,
        timing,
        seed_claims: "no numbers in the seed: schedules pay when reused; fetch is needed when preprocessing cannot be amortised; an interrupt-based fetch is costly",
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
        "seed003-sparse: n = {} unknowns, up to {} entries per row within {} columns (seed {:#x}), {} ranks cyclic, {}-byte buffers; last rank's times, medians",
        r.n, r.per_row, r.window, r.seed, r.ranks, r.capacity
    );
    let _ = writeln!(t, "  {:<44} {:>12} {:>14}", "", "us", "x serial");
    let rows = [
        ("floor: serial solve on one rank", r.serial_us),
        (
            "(a) typed, level-scheduled, per solve",
            r.levels_us_per_solve,
        ),
        ("(b) executor, per solve", r.executor_us_per_solve),
        ("(b) inspector, once", r.inspector_us),
        (
            "(c) fetch via the comm thread, per solve",
            r.fetch_us_per_solve,
        ),
        (
            "(d) fetch via interrupts, per solve",
            r.fetch_interrupt_us_per_solve,
        ),
        (
            "    fetch, inline polling, per solve",
            r.fetch_inline_us_per_solve,
        ),
    ];
    for (what, us) in rows {
        let _ = writeln!(t, "  {:<44} {:>12.1} {:>14.1}", what, us, us / r.serial_us);
    }
    let be = r
        .break_even_solves
        .map(|k| k.to_string())
        .unwrap_or_else(|| "never".into());
    let _ = writeln!(
        t,
        "  (a) per solve: {} rounds (levels), {} typed messages",
        r.level_rounds_per_solve, r.level_messages_per_solve
    );
    let _ = writeln!(
        t,
        "  break-even of (b) against (c): the inspector pays off after {be} solve(s); per solve: {} remote values, {} fetch requests ({} parked), {} batches, {} credits; executor buffer-full stalls: {}",
        r.remote_values_per_solve,
        r.fetch_requests_per_solve,
        r.fetch_parked_per_solve,
        r.executor_batches_per_solve,
        r.executor_credits_per_solve,
        r.executor_full_stalls
    );
    timing_rows::table(&mut t, &r.timing);
    t.push_str(&verdict(
        r.verified,
        "(a)-(d) equal the serial solve; executor < fetch per solve; no stall",
        &r.failures,
    ));
    t
}
