//! `volley bench progress`, the rank side: round trips, the wake-up of a sleeping rank, and
//! seed 004's polling-granularity experiment (§10 G 28) between two ranks.
//!
//! Granularity: each iteration one rank is "busy": it computes `WORK` in chunks of
//! `compute_ns`, polling after each chunk (or never, until the iteration's barrier). The other
//! rank needs one item from the busy rank (a request and its reply) before it can compute its
//! own `WORK`. If the busy rank answers promptly the two compute side by side (about `WORK`
//! per iteration); if it answers only at the end, they compute one after the other (about
//! 2 × `WORK`). The ranks swap roles every iteration.

use serde_json::json;
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
        let mut r = serde_json::Map::new();
        match part {
            Part::RoundTrip => {
                r.insert("rtt_ns".into(), json!(b.rtt(n(50_000.0))));
            }
            Part::Wakeup => {
                r.insert("rtt_ns".into(), json!(b.rtt(n(50_000.0))));
                r.insert("wakeup_ns".into(), json!(b.wakeup(n(30.0) as usize)));
            }
            Part::Granularity => {
                let g: Vec<_> = GRANULARITY_NS
                    .iter()
                    .map(|&g| json!({"size": g.unwrap_or(0), "compute_ns": g, "ns_per_iteration": b.granularity(g, n(100.0))}))
                    .collect();
                r.insert("granularity".into(), json!(g));
            }
        }
        reps_out.push(serde_json::Value::Object(r));
    }
    if b.rt.rank() == 0 {
        super::write_reps(out, reps_out)?;
    }
    Ok(())
}
