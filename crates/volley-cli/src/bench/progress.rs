//! `volley bench progress`, the rank side: round trips, the wake-up of a sleeping rank, and
//! seed 004's polling-granularity experiment (§10 G 28) between two ranks.
//!
//! Granularity: each iteration one rank is "busy": it computes `WORK` in chunks of
//! `compute_ns`, polling after each chunk (or never, until the iteration's barrier). The other
//! rank needs one item from the busy rank (a request and its reply) before it can compute its
//! own `WORK`. If the busy rank answers promptly the two compute side by side (about `WORK`
//! per iteration); if it answers only at the end, they compute one after the other (about
//! 2 × `WORK`). The ranks swap roles every iteration.
//!
//! The driver ([`bench`]) runs one job per part and mode and merges them into a
//! [`ProgressReport`].

use super::{floor, median, median_curve, median_opt, CurvePoint, Medians, Reps, Transport};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::{ReplyHandler, RequestHandler, Runtime};

/// Compute per rank and iteration.
const WORK: Duration = Duration::from_micros(2000);
/// Granularities swept; `None` = never polls while computing.
const GRANULARITY_NS: [Option<u64>; 6] = [
    Some(1_000),
    Some(10_000),
    Some(100_000),
    Some(500_000),
    Some(1_000_000),
    None,
];

/// One repetition of one job (each job measures one [`Part`], and writes only its figures).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ProgressRep {
    /// Round trip, ns (round-trip and wake-up jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_ns: Option<f64>,
    /// Round trip to a rank asleep in the kernel, ns (wake-up jobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wakeup_ns: Option<f64>,
    /// The granularity sweep (granularity jobs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub granularity: Vec<GrainSample>,
}

impl Medians for ProgressRep {
    fn medians(reps: &[Self]) -> Self {
        Self {
            rtt_ns: median_opt(reps.iter().map(|r| r.rtt_ns)),
            wakeup_ns: median_opt(reps.iter().map(|r| r.wakeup_ns)),
            granularity: median_curve(reps, |r| &r.granularity),
        }
    }
}

/// One granularity of the sweep, as a rank measures it.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrainSample {
    /// Compute between polls, ns; None: never polls while computing.
    pub compute_ns: Option<u64>,
    /// Time per iteration, ns.
    pub ns_per_iteration: f64,
}

impl CurvePoint for GrainSample {
    fn figure(&self) -> f64 {
        self.ns_per_iteration
    }
    fn set_figure(&mut self, v: f64) {
        self.ns_per_iteration = v;
    }
}

/// One point of a mode's granularity curve.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GrainPoint {
    /// The progress mode: `inline` (the program polls) or `thread` (a progress thread).
    pub mode: String,
    /// Compute between polls, ns; None (null): never polls while computing.
    pub compute_ns: Option<u64>,
    /// Time per iteration, ns.
    pub ns_per_iteration: f64,
}

/// The wake-up across nodes: four ranks on two nodes over UDP, the asked rank asleep beside a
/// node-mate.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MixedNode {
    /// The same ranks' round trip in block mode, ns.
    pub rtt_block_ns: Option<f64>,
    /// Round trip to the sleeping rank, ns.
    pub wakeup_ns: Option<f64>,
}

/// The cache-line floors the round trips are compared with.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Floors {
    /// Median of the floors measured before each round.
    pub median_of_rounds: f64,
    /// The floor measured right before the block-mode job.
    pub before_block: f64,
}

/// One round: a floor, then one job per mode.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Round {
    /// The floor measured right before the round, ns.
    pub cacheline_rtt_ns: f64,
    /// The inline mode's round trip, ns.
    pub rtt_inline_ns: f64,
    /// The thread mode's round trip, ns.
    pub rtt_thread_ns: f64,
}

/// Round trips over their floors and over each other.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressRatios {
    /// Median over the rounds of inline over the round's floor.
    pub rtt_inline_over_floor: f64,
    /// Block mode over the floor measured before it.
    pub rtt_block_over_floor: Option<f64>,
    /// Median over the rounds of thread over the round's floor.
    pub rtt_thread_over_floor: f64,
    /// Median over the rounds of thread over inline.
    pub rtt_thread_over_inline: f64,
    /// Thread mode: slowest over fastest iteration across the granularities.
    pub thread_granularity_max_over_min: f64,
}

/// The whole benchmark's results (ns unless named otherwise).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ProgressReport {
    /// Spinning round trip, the program polling (median over the rounds).
    pub rtt_inline_ns: f64,
    /// Round trip with the ranks blocking in the kernel when idle.
    pub rtt_block_ns: Option<f64>,
    /// Spinning round trip served by a progress thread (median over the rounds).
    pub rtt_thread_ns: f64,
    /// Round trip to a rank asleep in the kernel.
    pub wakeup_ns: Option<f64>,
    /// The wake-up across nodes.
    pub udp_mixed_node: MixedNode,
    /// The granularity curves, inline mode's then thread mode's.
    pub granularity: Vec<GrainPoint>,
    /// The floors.
    pub cacheline_rtt_ns: Floors,
    /// Every round of the round-trip comparison.
    pub rounds: Vec<Round>,
    /// The ratios.
    pub ratios: ProgressRatios,
    /// Compute per rank and iteration of the granularity experiment.
    pub work_ns_per_rank_and_iteration: u64,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
}

fn compute(d: Duration) {
    let t = Instant::now();
    while t.elapsed() < d {
        std::hint::spin_loop();
    }
}

struct Bench {
    rt: Runtime,
    fetch: RequestHandler,
    replies: Arc<AtomicU64>,
}

impl Bench {
    fn new() -> Self {
        let replies = Arc::new(AtomicU64::new(0));
        let mut b = Runtime::builder();
        let r = replies.clone();
        let item: ReplyHandler = b.reply_handler("progress-item", move |_| {
            r.fetch_add(1, Ordering::Relaxed);
        });
        let fetch = b.request_handler("progress-fetch", move |m, tok| {
            tok.reply_short(item, &[m.arg(0).wrapping_mul(3)])
                .expect("reply");
        });
        let rt = b.build().unwrap_or_else(|e| {
            // A bad VOLLEY_* setting, say: one line, not a panic.
            eprintln!("volley bench rank: joining the benchmark job: {e}");
            std::process::exit(1)
        });
        Self { rt, fetch, replies }
    }

    /// One request/reply to `dest`, waited for; returns its duration in ns.
    fn fetch_from(&self, dest: usize) -> f64 {
        let want = self.replies.load(Ordering::Relaxed) + 1;
        let t = Instant::now();
        self.rt
            .request_short(dest, self.fetch, &[7])
            .expect("fetch");
        self.rt
            .wait_until(|| self.replies.load(Ordering::Relaxed) >= want);
        t.elapsed().as_nanos() as f64
    }

    /// The rank rank 0 asks: the last one. Rank 1 of two; in a job of four on two nodes rank 3,
    /// which has a node-mate (so it waits on shared memory and the network at once) and, with
    /// ranks bound to CPUs in turn, a CPU other than rank 0's (as rank 1 of two has), so the
    /// figure is a wake-up, not two ranks taking turns on one CPU.
    fn peer(&self) -> usize {
        self.rt.size() - 1
    }

    fn rtt(&self, iters: u64) -> f64 {
        let me = self.rt.rank();
        self.rt.barrier();
        let mut ns = 0.0;
        if me == 0 {
            for _ in 0..iters / 10 {
                self.fetch_from(self.peer());
            }
            let t = Instant::now();
            for _ in 0..iters {
                self.fetch_from(self.peer());
            }
            ns = t.elapsed().as_nanos() as f64 / iters as f64;
        }
        self.rt.barrier();
        ns
    }

    /// Rank 0 asks its peer after the peer has been idle long enough to sleep (block mode);
    /// median of the round trips.
    fn wakeup(&self, samples: usize) -> f64 {
        let me = self.rt.rank();
        let mut v = Vec::new();
        self.rt.barrier();
        if me == 0 {
            for _ in 0..samples {
                // Outside the runtime: the peer's wait finds nothing and goes to sleep.
                std::thread::sleep(Duration::from_millis(20));
                v.push(self.fetch_from(self.peer()));
            }
        }
        self.rt.barrier();
        super::median(&mut v)
    }

    fn granularity(&self, compute_ns: Option<u64>, iters: u64) -> f64 {
        let me = self.rt.rank();
        self.rt.barrier();
        let t = Instant::now();
        for i in 0..iters {
            let busy = (i % 2) as usize;
            if me == busy {
                match compute_ns {
                    Some(g) => {
                        let chunk = Duration::from_nanos(g);
                        let mut done = Duration::ZERO;
                        while done < WORK {
                            let c = chunk.min(WORK - done);
                            compute(c);
                            done += c;
                            self.rt.poll();
                        }
                    }
                    None => compute(WORK),
                }
            } else {
                self.fetch_from(busy);
                compute(WORK);
            }
            self.rt.barrier();
        }
        t.elapsed().as_nanos() as f64 / iters as f64
    }
}

/// What one benchmark job measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Part {
    /// The spinning round trip only (one job per mode and round, interleaved by the driver).
    RoundTrip,
    /// Round trip and wake-up latency of a sleeping rank (run with `VOLLEY_WAIT=block`).
    Wakeup,
    /// The polling-granularity sweep.
    Granularity,
}

/// Runs one rank; rank 0 writes every repetition's figures to `out`.
pub fn run(out: &std::path::Path, scale: f64, reps: usize, part: Part) -> Result<(), String> {
    let b = Bench::new();
    let size = b.rt.size();
    if size != 2 && !(size == 4 && part == Part::Wakeup) {
        return Err(format!(
            "the progress benchmark needs 2 ranks (4 for the wake-up across nodes), got {size}"
        ));
    }
    let n = |x: f64| ((x * scale) as u64).max(10);
    let mut reps_out = Vec::new();
    for _ in 0..reps {
        reps_out.push(match part {
            Part::RoundTrip => ProgressRep {
                rtt_ns: Some(b.rtt(n(50_000.0))),
                ..ProgressRep::default()
            },
            Part::Wakeup => ProgressRep {
                rtt_ns: Some(b.rtt(n(50_000.0))),
                wakeup_ns: Some(b.wakeup(n(30.0) as usize)),
                ..ProgressRep::default()
            },
            Part::Granularity => ProgressRep {
                granularity: GRANULARITY_NS
                    .iter()
                    .map(|&g| GrainSample {
                        compute_ns: g,
                        ns_per_iteration: b.granularity(g, n(100.0)),
                    })
                    .collect(),
                ..ProgressRep::default()
            },
        });
    }
    if b.rt.rank() == 0 {
        super::write_reps(out, reps_out)?;
    }
    Ok(())
}

/// Runs every part: the round trips per mode in rounds beside the floor, the wake-up on one
/// node and across two, and the granularity sweep per mode.
pub fn bench(reps: usize, scale: f64) -> Result<ProgressReport, String> {
    // This VM's two vCPUs land on different host cores from one minute to the next (the
    // cache-line floor moves between about 50 and 400 ns), so the two modes' round trips are
    // compared in rounds: one short job per mode, back to back (their order alternating), each
    // round beside a floor measured right before it; the figures are medians over the rounds.
    let floor = || floor::cacheline_rtt_ns(((200_000.0 * scale) as u64).max(1000), 3);
    let inline_env: &[(&str, &str)] = &[("VOLLEY_WAIT", "spin"), ("VOLLEY_PROGRESS", "inline")];
    let thread_env: &[(&str, &str)] = &[("VOLLEY_WAIT", "spin"), ("VOLLEY_PROGRESS", "thread")];
    let block_env: &[(&str, &str)] = &[("VOLLEY_WAIT", "block"), ("VOLLEY_PROGRESS", "inline")];
    let job = |which: &str, reps: usize, env: &[(&str, &str)]| {
        super::run_ranks::<Reps<ProgressRep>>(which, 2, scale, reps, Transport::Shm, env)?.medians()
    };
    let rtt_job = |env: &[(&str, &str)]| -> Result<f64, String> {
        job("progress-rtt", 1, env)?
            .rtt_ns
            .ok_or_else(|| "a round-trip job reported no rtt_ns".to_string())
    };
    let rounds = 2 * reps.max(1) + 1;
    let (mut floors, mut inline_rtts, mut thread_rtts) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        floors.push(floor()?);
        let (i, t) = if round % 2 == 0 {
            let i = rtt_job(inline_env)?;
            (i, rtt_job(thread_env)?)
        } else {
            let t = rtt_job(thread_env)?;
            (rtt_job(inline_env)?, t)
        };
        inline_rtts.push(i);
        thread_rtts.push(t);
    }
    // Round by round: a / b.
    let per_round =
        |a: &[f64], b: &[f64]| -> Vec<f64> { a.iter().zip(b).map(|(x, y)| x / y).collect() };
    let mut ratios = per_round(&thread_rtts, &inline_rtts);
    let mut inline_over_floor = per_round(&inline_rtts, &floors);
    let mut thread_over_floor = per_round(&thread_rtts, &floors);
    let rounds_doc: Vec<Round> = (0..rounds)
        .map(|k| Round {
            cacheline_rtt_ns: floors[k],
            rtt_inline_ns: inline_rtts[k],
            rtt_thread_ns: thread_rtts[k],
        })
        .collect();
    let floor_block = floor()?;
    let block = job("progress-wakeup", reps, block_env)?;
    // A sleeping rank woken through the network while it also waits on shared memory: four
    // ranks on two nodes over UDP, rank 0 asking rank 3 (whose node-mate is rank 2).
    let across = super::run_ranks_per_node::<Reps<ProgressRep>>(
        "progress-wakeup",
        4,
        2,
        scale * super::NETWORK_SCALE,
        reps,
        Transport::Udp,
        block_env,
    )?
    .medians()?;
    let spin = job("progress-granularity", reps, inline_env)?;
    let thread = job("progress-granularity", reps, thread_env)?;
    let curve = |mode: &str, rep: &ProgressRep| -> Vec<GrainPoint> {
        rep.granularity
            .iter()
            .map(|g| GrainPoint {
                mode: mode.into(),
                compute_ns: g.compute_ns,
                ns_per_iteration: g.ns_per_iteration,
            })
            .collect()
    };
    let thread_curve = curve("thread", &thread);
    let times = thread_curve.iter().map(|p| p.ns_per_iteration);
    // f64::max and min skip NaN (a point no repetition measured).
    let spread = times.clone().fold(f64::NAN, f64::max) / times.fold(f64::NAN, f64::min);
    let mut granularity = curve("inline", &spin);
    granularity.extend(thread_curve);
    Ok(ProgressReport {
        rtt_inline_ns: median(&mut inline_rtts),
        rtt_block_ns: block.rtt_ns,
        rtt_thread_ns: median(&mut thread_rtts),
        wakeup_ns: block.wakeup_ns,
        udp_mixed_node: MixedNode {
            rtt_block_ns: across.rtt_ns,
            wakeup_ns: across.wakeup_ns,
        },
        granularity,
        cacheline_rtt_ns: Floors {
            median_of_rounds: median(&mut floors),
            before_block: floor_block,
        },
        rounds: rounds_doc,
        ratios: ProgressRatios {
            rtt_inline_over_floor: median(&mut inline_over_floor),
            rtt_block_over_floor: block.rtt_ns.map(|r| r / floor_block),
            rtt_thread_over_floor: median(&mut thread_over_floor),
            rtt_thread_over_inline: median(&mut ratios),
            thread_granularity_max_over_min: spread,
        },
        work_ns_per_rank_and_iteration: WORK.as_nanos() as u64,
        reps,
        scale,
    })
}

/// The table: each round trip beside its floor, the wake-ups, and the granularity curves.
pub fn print_table(r: &ProgressReport, w: &mut dyn Write) {
    let nan = |v: Option<f64>| v.unwrap_or(f64::NAN);
    let _ = writeln!(
        w,
        "volley bench progress: 2 ranks on one host, pinned; round trips: medians over {} \
         rounds of one inline and one thread job (floor measured before each round); the rest: \
         median of {} repetitions",
        r.rounds.len(),
        r.reps
    );
    let inline = r.rtt_inline_ns;
    let ratios = &r.ratios;
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  (median of the rounds' floors)",
        "cacheline_rtt_ns", r.cacheline_rtt_ns.median_of_rounds
    );
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  {:.2} x its round's floor",
        "rtt_inline_ns (spin)", inline, ratios.rtt_inline_over_floor,
    );
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  {:.2} x its round's floor; {:.3} x inline (median of the rounds' ratios)",
        "rtt_thread_ns",
        r.rtt_thread_ns,
        ratios.rtt_thread_over_floor,
        ratios.rtt_thread_over_inline
    );
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  {:.2} x its floor ({:.1} ns)",
        "rtt_block_ns",
        nan(r.rtt_block_ns),
        nan(ratios.rtt_block_over_floor),
        r.cacheline_rtt_ns.before_block
    );
    let wakeup = nan(r.wakeup_ns);
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  {:.1} x inline (responder asleep in the kernel)",
        "wakeup_ns",
        wakeup,
        wakeup / inline
    );
    let (across_wakeup, across_rtt) = (
        nan(r.udp_mixed_node.wakeup_ns),
        nan(r.udp_mixed_node.rtt_block_ns),
    );
    let _ = writeln!(
        w,
        "  {:<34} {:>12.1} ns  {:.1} x the same ranks' round trip in block mode ({:.1} ns): \
         UDP between two nodes of 2 ranks, the responder asleep with a node-mate",
        "wakeup_ns across nodes",
        across_wakeup,
        across_wakeup / across_rtt,
        across_rtt,
    );
    let _ = writeln!(
        w,
        "  polling granularity (2 ms of compute per rank and iteration; 2.0 ms = parallel, 4.0 ms = serialized):"
    );
    for p in &r.granularity {
        let g = match p.compute_ns {
            Some(g) => format!("{} us between polls", g / 1000),
            None => "never polls".into(),
        };
        let _ = writeln!(
            w,
            "    {:<7} {g:<26} {:>8.3} ms per iteration",
            p.mode,
            p.ns_per_iteration / 1e6
        );
    }
    let _ = writeln!(
        w,
        "  thread mode, slowest over fastest granularity: {:.2}",
        ratios.thread_granularity_max_over_min
    );
}
