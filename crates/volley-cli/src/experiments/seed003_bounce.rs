//! `seed003-bounce`: seed 003's experiment E1 (§4, test A), the bounce between two ranks of
//! one node, with seed 003's primitives (`volley-prim`) in each progress mode and a typed
//! baseline: volley-msg's tag-matching send/receive stands in for NX/2's typed messages.
//!
//! Variants (each a 16-byte payload, the seed's "2-word" message, one way = round trip / 2):
//! raw (`inline`: the program thread polls its network input buffer; each rank keeps a
//! channel open to the other, so a message is two word stores and a tail store, as a send on
//! MX's mapped FIFO is two writes), raw with a packet per message (the link taken, a header
//! written and the link freed each time: reported, not ordered), typed (volley-msg),
//! probe (`probe`: the receive loops on `is_information`), interrupt (`interrupt`: the
//! receive sleeps on a futex until the sender's notification), comm thread (`comm-thread`:
//! the communication thread forwards each packet to the program thread). The floor is a
//! cache-line bounce (one 8-byte word in mapped memory) in the same job as raw and typed.
//!
//! Verified: every bounced value came back as sent (checked by both ranks), every figure was
//! measured, and the seed's ordering holds: raw (open channel) < typed < interrupt (`ordering_holds`; at
//! the `--quick` sizes the ordering is reported, not required). Raw and typed run in paired,
//! interleaved blocks (`PAIRS` per repetition, the order alternating); raw < typed means
//! typed was slower in at least three pairs of four (the lower quartile of the per-pair
//! differences above zero; `typed_minus_raw_ns`, with the median). Probe is reported beside it: here a probe is a
//! function call, not the seed's interrupt plus probe, and it is not required to be slower.
//!
//! The timing harness (`volley_prim_layers::timing`, the `timing` rows): per progress mode,
//! the primitives' bounce with no computation (`compute_ns` 0), the loop's time of the rank
//! that completed last, and the one-way latencies (half of each round trip, median and p99)
//! of one more bounce with a clock read per round trip.
//!
//! Two more parts (see `seed003_overlap`), in the same JSON under new keys: E7 (`e7`: direct
//! send against a send handed to the communication thread, per size, with the crossover) and
//! E8 (`e8`: a computing rank's slowdown while it serves requests, per progress mode). Their
//! shapes, required for `verified` at full size like the ordering (reported at `--quick`):
//! E7, a direct send wins at the smallest size (`e7_direct_wins_small`); E8, the
//! communication thread slows the computation least (`e8_comm_thread_least_slowdown`).
//! Their correctness checks (every message and answer as sent) always count.

use super::{rank_job, timing_rows, verdict, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median_present;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;
use volley_prim::{Dest, Info, Prim, PrimConfig, Progress, Recv, Source};
use volley_prim_layers::timing::{Latencies, RankTiming};

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed003-bounce",
    about: "seed 003 E1: bounce with the three primitives (raw, probe, interrupt, comm thread) against typed send/receive and a cache-line floor; E7 direct vs comm-thread send per size; E8 overlap per progress mode",
    run,
    rank: Some(rank),
};

/// One job's figures for one repetition (one-way ns).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Rep {
    prim_ns: f64,
    channel_ns: Option<f64>,
    typed_ns: Option<f64>,
    floor_ns: Option<f64>,
    /// Paired blocks, interleaved: (raw open channel, typed) one-way ns of each pair.
    #[serde(default)]
    pairs: Vec<(f64, f64)>,
    failures: Vec<String>,
}

/// Paired blocks per repetition of the raw-channel and typed bounces.
const PAIRS: u64 = 8;

/// One job's result: its repetitions and each rank's timing of the primitives' bounce.
#[derive(Debug, Default, Serialize, Deserialize)]
struct JobOut {
    reps: Vec<Rep>,
    timing: Vec<RankTiming>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    /// raw (open channel) < typed < interrupt (required for `verified` except at the quick
    /// sizes).
    ordering_holds: bool,
    iters: u64,
    raw_channel_ns: f64,
    raw_ns: f64,
    typed_ns: f64,
    probe_ns: f64,
    interrupt_ns: f64,
    comm_thread_ns: f64,
    floor_ns: f64,
    typed_over_raw: f64,
    interrupt_over_typed: f64,
    /// Typed minus raw (open channel), one-way ns, over the paired interleaved blocks:
    /// median and the quartiles of the per-pair differences, and how many pairs had typed
    /// slower. Raw < typed when the lower quartile is above zero.
    typed_minus_raw_ns: PairedDiff,
    seed: SeedFigures,
    e7: super::seed003_overlap::E7Report,
    e7_direct_wins_small: bool,
    e8: Vec<super::seed003_overlap::E8Row>,
    e8_comm_thread_least_slowdown: bool,
    /// The timing harness: the primitives' bounce per progress mode.
    timing: Vec<timing_rows::TimingRow>,
}

/// A paired difference's median, quartiles and sign count.
#[derive(Debug, Serialize)]
struct PairedDiff {
    median: f64,
    p25: f64,
    p75: f64,
    pairs: usize,
    typed_slower: usize,
}

impl PairedDiff {
    fn of(pairs: &[(f64, f64)]) -> Self {
        let mut d: Vec<f64> = pairs.iter().map(|(raw, typed)| typed - raw).collect();
        d.sort_by(f64::total_cmp);
        let at = |q: f64| {
            if d.is_empty() {
                f64::NAN
            } else {
                d[((d.len() - 1) as f64 * q).round() as usize]
            }
        };
        Self {
            median: at(0.5),
            p25: at(0.25),
            p75: at(0.75),
            pairs: d.len(),
            typed_slower: d.iter().filter(|&&x| x > 0.0).count(),
        }
    }
}

#[derive(Debug, Serialize)]
struct SeedFigures {
    typed: &'static str,
    interrupt_probe: &'static str,
    raw: &'static str,
    typed_over_raw: f64,
    interrupt_over_typed: f64,
}

/// A bounce through the primitives: `iters` round trips of a 16-byte data packet; one-way ns.
/// With `lat`, rank 0 records each round trip's half (a clock read per round trip).
fn prim_bounce(
    p: &Prim,
    iters: u64,
    failures: &mut Vec<String>,
    mut lat: Option<&mut Latencies>,
) -> Result<f64, String> {
    let me = p.rank();
    let other = 1 - me;
    let mut buf = [0u8; 16];
    let start = Instant::now();
    for i in 0..iters {
        if me == 0 {
            let sent = lat.is_some().then(Instant::now);
            let out = [i.to_le_bytes(), (!i).to_le_bytes()].concat();
            p.send(Dest::Rank(other), Info::Data(&out), false)
                .map_err(|e| e.to_string())?;
            p.receive(Source::Network, Recv::Data(&mut buf))
                .map_err(|e| e.to_string())?;
            if let (Some(l), Some(t)) = (lat.as_deref_mut(), sent) {
                l.record(t.elapsed().as_nanos() as u64 / 2);
            }
        } else {
            p.receive(Source::Network, Recv::Data(&mut buf))
                .map_err(|e| e.to_string())?;
            p.send(Dest::Rank(other), Info::Data(&buf), false)
                .map_err(|e| e.to_string())?;
        }
        let (a, b) = (
            u64::from_le_bytes(buf[..8].try_into().unwrap()),
            u64::from_le_bytes(buf[8..].try_into().unwrap()),
        );
        if (a, b) != (i, !i) && failures.len() < 4 {
            failures.push(format!("bounce {i}: came back {a}, {b}"));
        }
    }
    Ok(start.elapsed().as_nanos() as f64 / iters as f64 / 2.0)
}

/// The raw bounce as on MX's mapped FIFOs: each rank keeps a channel open to the other, so
/// a message is two word stores and a tail store, no link to take and no header; one-way ns.
fn channel_bounce(p: &Prim, iters: u64, failures: &mut Vec<String>) -> Result<f64, String> {
    let e = |e: volley_prim::PrimError| e.to_string();
    let me = p.rank();
    let mut pipe = p.pipe_create(1 - me).map_err(e)?;
    p.runtime().barrier();
    let start = Instant::now();
    for i in 0..iters {
        let (a, b) = if me == 0 {
            pipe.put_2_u64(i, !i);
            (p.pipe_get_u64().map_err(e)?, p.pipe_get_u64().map_err(e)?)
        } else {
            let (a, b) = (p.pipe_get_u64().map_err(e)?, p.pipe_get_u64().map_err(e)?);
            pipe.put_2_u64(a, b);
            (a, b)
        };
        if (a, b) != (i, !i) && failures.len() < 4 {
            failures.push(format!("channel bounce {i}: came back {a}, {b}"));
        }
    }
    let ns = start.elapsed().as_nanos() as f64 / iters as f64 / 2.0;
    pipe.close().map_err(e)?;
    Ok(ns)
}

/// The typed baseline: volley-msg's blocking send and receive of the same 16 bytes.
fn typed_bounce(m: &volley_msg::Msg, me: usize, iters: u64, failures: &mut Vec<String>) -> f64 {
    let other = 1 - me;
    let mut buf = [0u8; 16];
    let start = Instant::now();
    for i in 0..iters {
        if me == 0 {
            let out = [i.to_le_bytes(), (!i).to_le_bytes()].concat();
            m.send(other, 7, &out).expect("typed send");
            m.recv_into(other, 7u64, &mut buf).expect("typed recv");
        } else {
            m.recv_into(other, 7u64, &mut buf).expect("typed recv");
            m.send(other, 7, &buf).expect("typed send");
        }
        if u64::from_le_bytes(buf[..8].try_into().unwrap()) != i && failures.len() < 4 {
            failures.push(format!("typed bounce {i} came back wrong"));
        }
    }
    start.elapsed().as_nanos() as f64 / iters as f64 / 2.0
}

/// The floor: one 8-byte word in rank 0's mapped segment bounced by plain stores and loads.
pub(super) fn floor_bounce(word: &AtomicU64, me: usize, iters: u64) -> f64 {
    let start = Instant::now();
    for i in 0..iters {
        if me == 0 {
            word.store(2 * i + 1, Ordering::Release);
            while word.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        } else {
            while word.load(Ordering::Acquire) != 2 * i + 1 {
                std::hint::spin_loop();
            }
            word.store(2 * i + 2, Ordering::Release);
        }
    }
    start.elapsed().as_nanos() as f64 / iters as f64 / 2.0
}

/// One rank: `ITERS REPS`; the mode comes from `VOLLEY_PRIM_PROGRESS`. The inline job also
/// measures the typed baseline and the floor.
fn rank(a: &RankArgs) -> Result<(), String> {
    let arg = |i: usize| -> Result<u64, String> {
        a.args
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "expected ITERS REPS".to_string())
    };
    let (iters, reps) = (arg(0)?, arg(1)?);
    let cfg = PrimConfig::from_env().map_err(|e| e.to_string())?;
    let cfg = super::seed003_overlap::with_handlers(cfg)?;
    let inline = cfg.progress_mode() == Progress::InlinePoll;
    let mut b = volley::Runtime::builder();
    let setup = Prim::register(&mut b, cfg);
    let msg_setup = volley_msg::Msg::register_with(&mut b, volley_msg::MsgConfig::default());
    let rt = b.build().map_err(|e| e.to_string())?;
    let p = setup.attach(&rt).map_err(|e| e.to_string())?;
    let msg = msg_setup.attach(&rt).map_err(|e| e.to_string())?;
    if super::seed003_overlap::rank_part(a, &p, iters, reps)? {
        rt.barrier();
        drop(msg);
        drop(p);
        rt.finalize();
        return Ok(());
    }
    let me = rt.rank();
    let floor_seg = p
        .rma()
        .alloc_symmetric(64, volley::rma::Perms::ALL)
        .map_err(|e| e.to_string())?;
    let word = p
        .rma()
        .mapped(floor_seg.on(0), 0, 8, volley::rma::Perms::ALL)
        .map_err(|e| e.to_string())?
        .ok_or("rank 0's memory is not mapped: run both ranks on one node")?;
    // SAFETY: 8 bytes of rank 0's segment, checked by `mapped`, 8-aligned (segments are
    // word aligned), alive until the job finalizes; shared, so only reached atomically.
    let word = unsafe { &*(word.as_ptr() as *const AtomicU64) };
    let mut reps_out = Vec::new();
    // Warm up the path once.
    let mut scratch = Vec::new();
    prim_bounce(&p, iters / 10 + 1, &mut scratch, None)?;
    for rep in 0..reps {
        rt.barrier();
        let mut r = Rep::default();
        r.prim_ns = prim_bounce(&p, iters, &mut r.failures, None)?;
        if inline {
            // Raw and typed in interleaved blocks, the order alternating, so that drift in
            // the machine's load falls on both alike; each pair is one difference.
            let block = (iters / PAIRS).max(1);
            for k in 0..PAIRS {
                let mut one = |raw_first: bool| -> Result<f64, String> {
                    rt.barrier();
                    Ok(if raw_first {
                        channel_bounce(&p, block, &mut r.failures)?
                    } else {
                        typed_bounce(&msg, me, block, &mut r.failures)
                    })
                };
                let first = one(k % 2 == 0)?;
                let second = one(k % 2 == 1)?;
                r.pairs.push(if k % 2 == 0 {
                    (first, second)
                } else {
                    (second, first)
                });
            }
            r.channel_ns = Some(median_present(r.pairs.iter().map(|x| x.0)));
            r.typed_ns = Some(median_present(r.pairs.iter().map(|x| x.1)));
            rt.barrier();
            word.store(0, Ordering::Release);
            rt.barrier();
            r.floor_ns = Some(floor_bounce(word, me, iters));
            rt.barrier();
        }
        let _ = rep;
        reps_out.push(r);
    }
    // The timing harness: each rank's loop (median), one more bounce with each round trip
    // timed for the latencies; rank 1's figures go to rank 0 as a tagged message.
    rt.barrier();
    let mut lat = Latencies::new();
    prim_bounce(&p, iters, &mut scratch, Some(&mut lat))?;
    let mine = RankTiming {
        run_ns: median_present(reps_out.iter().map(|r| r.prim_ns)) * 2.0 * iters as f64,
        compute_ns: 0.0,
        latency: lat.to_pairs(),
    };
    if me == 1 {
        let text = serde_json::to_vec(&mine).map_err(|e| e.to_string())?;
        msg.send(0, 9, &text).map_err(|e| e.to_string())?;
    }
    let mut timing = vec![mine];
    if me == 0 {
        let got = msg.recv(1usize, 9u64).map_err(|e| e.to_string())?;
        timing.push(serde_json::from_slice(&got.data).map_err(|e| e.to_string())?);
        if let Some(r) = reps_out.last_mut() {
            r.failures.append(&mut scratch);
        }
    }
    rt.barrier();
    drop(msg);
    drop(p);
    if me == 0 {
        let out = JobOut {
            reps: reps_out,
            timing,
        };
        write_result(&a.out, &out)?;
    }
    rt.finalize();
    Ok(())
}

fn run(o: &Options) -> Result<Outcome, String> {
    let iters: u64 = if o.quick { 2_000 } else { 50_000 };
    let args = [iters.to_string(), o.reps.to_string()];
    let mut figures = Vec::new();
    let mut failures = Vec::new();
    let mut typed = Vec::new();
    let mut floor = Vec::new();
    let mut channel = Vec::new();
    let mut pairs = Vec::new();
    let mut timing = Vec::new();
    for mode in Progress::ALL {
        // The kernel wake-up path is slow: fewer round trips keep its run short.
        let n = if mode == Progress::Interrupt || mode == Progress::CommThread {
            (iters / 5).max(200)
        } else {
            iters
        };
        let args = [n.to_string(), args[1].clone()];
        let job: JobOut = rank_job(
            EXPERIMENT.name,
            2,
            2,
            &[("VOLLEY_PRIM_PROGRESS", mode.name())],
            &args,
        )?;
        timing.extend(timing_rows::row(
            &format!("raw, a packet each, {}", mode.name()),
            "half of each round trip (rank 0's clock)",
            &job.timing,
            &mut failures,
        ));
        let reps = job.reps;
        let mut m = median_present(reps.iter().map(|r| r.prim_ns));
        if o.corrupt && mode == Progress::InlinePoll {
            m = f64::NAN;
        }
        figures.push(m);
        for r in &reps {
            failures.extend(r.failures.iter().cloned());
            typed.extend(r.typed_ns);
            channel.extend(r.channel_ns);
            floor.extend(r.floor_ns);
            pairs.extend(r.pairs.iter().copied());
        }
    }
    let [raw, comm, interrupt, probe] = [figures[0], figures[1], figures[2], figures[3]];
    let (typed, floor) = (median_present(typed), median_present(floor));
    let raw_channel = median_present(channel);
    super::require_figures(
        &mut failures,
        &[
            ("raw, open channel", raw_channel),
            ("raw", raw),
            ("typed", typed),
            ("probe", probe),
            ("interrupt", interrupt),
            ("comm thread", comm),
            ("floor", floor),
        ],
    );
    // Raw against typed differ by a few ns on a ~200 ns bounce: judged on the paired
    // blocks' differences (typed slower in three pairs of four), not on two medians taken
    // minutes apart.
    let diff = PairedDiff::of(&pairs);
    let report_diff_p25 = diff.p25;
    let ordering_holds = diff.p25 > 0.0 && typed < interrupt;
    // E7: one job in comm-thread mode, all sizes.
    let e7_count: u64 = if o.quick { 200 } else { 5_000 };
    let e7_reps: Vec<super::seed003_overlap::E7Rep> = rank_job(
        EXPERIMENT.name,
        2,
        2,
        &[("VOLLEY_PRIM_PROGRESS", Progress::CommThread.name())],
        &[e7_count.to_string(), o.reps.to_string(), "e7".into()],
    )?;
    for r in &e7_reps {
        failures.extend(r.failures.iter().cloned());
    }
    let e7 = super::seed003_overlap::e7_report(&e7_reps);
    // E8: one job per progress mode.
    let e8_chunks: u64 = if o.quick { 200 } else { 2_000 };
    let mut e8 = Vec::new();
    for mode in Progress::ALL {
        let reps: Vec<super::seed003_overlap::E8Rep> = rank_job(
            EXPERIMENT.name,
            2,
            2,
            &[("VOLLEY_PRIM_PROGRESS", mode.name())],
            &[e8_chunks.to_string(), o.reps.to_string(), "e8".into()],
        )?;
        for r in &reps {
            failures.extend(r.failures.iter().cloned());
        }
        e8.push(super::seed003_overlap::e8_row(mode, &reps));
    }
    let comm_slowdown = e8
        .iter()
        .find(|r| r.mode == Progress::CommThread.name())
        .map_or(f64::NAN, |r| r.slowdown);
    let e8_least = e8
        .iter()
        .all(|r| r.mode == Progress::CommThread.name() || comm_slowdown < r.slowdown);
    let e7_small = e7.direct_wins_small;
    if !o.quick && !e7_small {
        failures.push("E7: a direct send does not win at the smallest size".into());
    }
    if !o.quick && !e8_least {
        failures.push("E8: the comm thread does not slow the computation least".into());
    }
    // At the quick sizes (CI, a shared machine) the timings are too short to order: there
    // `verified` is the correctness checks alone, and the ordering is reported beside.
    if !ordering_holds && !o.quick {
        failures.push(format!(
            "ordering raw < typed < interrupt does not hold: {raw_channel:.0} / {typed:.0} / {interrupt:.0} ns (typed - raw over the pairs: lower quartile {:.1} ns)",
            report_diff_p25
        ));
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        ordering_holds,
        iters,
        raw_channel_ns: raw_channel,
        raw_ns: raw,
        typed_ns: typed,
        probe_ns: probe,
        interrupt_ns: interrupt,
        comm_thread_ns: comm,
        floor_ns: floor,
        typed_over_raw: typed / raw_channel,
        interrupt_over_typed: interrupt / typed,
        typed_minus_raw_ns: diff,
        seed: SeedFigures {
            typed: "70us",
            interrupt_probe: "130us",
            raw: "25us",
            typed_over_raw: 70.0 / 25.0,
            interrupt_over_typed: 130.0 / 70.0,
        },
        e7,
        e7_direct_wins_small: e7_small,
        e8,
        e8_comm_thread_least_slowdown: e8_least,
        timing,
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
        "seed003-bounce: 2 ranks on one node, pinned, 16-byte packets; one-way ns, medians"
    );
    let _ = writeln!(t, "  {:<34} {:>10}  seed 003 (iPSC/860)", "variant", "ns");
    for (name, v, seed) in [
        ("floor (cache-line bounce)", r.floor_ns, "-"),
        (
            "raw: open channel, 2 words",
            r.raw_channel_ns,
            "\"approximately 25us\" (MX)",
        ),
        ("raw: a packet each (link, header)", r.raw_ns, "-"),
        (
            "typed (volley-msg send/recv)",
            r.typed_ns,
            "\"70us\" (NX/2)",
        ),
        ("probe loop", r.probe_ns, "-"),
        (
            "interrupt (futex wake-up)",
            r.interrupt_ns,
            "\"130us\" (interrupt + probe)",
        ),
        (
            "comm thread",
            r.comm_thread_ns,
            "- (proposed, not measured)",
        ),
    ] {
        let _ = writeln!(t, "  {name:<34} {v:>10.0}  {seed}");
    }
    let _ = writeln!(
        t,
        "  typed/raw {:.2} (seed 2.8), interrupt/typed {:.2} (seed 1.86); the seed prints \"us\"",
        r.typed_over_raw, r.interrupt_over_typed
    );
    let d = &r.typed_minus_raw_ns;
    let _ = writeln!(
        t,
        "  typed - raw (open channel), {} paired interleaved blocks: median {:.1} ns (quartiles {:.1} / {:.1}), typed slower in {} of {}",
        d.pairs, d.median, d.p25, d.p75, d.typed_slower, d.pairs
    );
    let _ = writeln!(
        t,
        "  raw < typed (lower quartile of the pairs > 0) < interrupt: {}",
        if r.ordering_holds {
            "holds"
        } else {
            "does NOT hold"
        }
    );
    super::seed003_overlap::e7_table(&mut t, &r.e7);
    super::seed003_overlap::e8_table(&mut t, &r.e8);
    let _ = writeln!(
        t,
        "  E8: the comm thread slows the loop least: {}",
        r.e8_comm_thread_least_slowdown
    );
    timing_rows::table(&mut t, &r.timing);
    t.push_str(&verdict(
        r.verified,
        "values intact, every figure measured (full size: orderings, E7 direct wins small, E8 comm thread least slowdown)",
        &r.failures,
    ));
    t
}
