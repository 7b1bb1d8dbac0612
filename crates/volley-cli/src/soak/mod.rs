//! `volley soak`: random mixed traffic for a while, over every configuration, with end-to-end
//! checks (see [`rank`]); a progress bar, a summary table, and a non-zero exit on any
//! mismatch or failed job. For long runs before a release, not for CI.

pub mod rank;

use clap::{Args, ValueEnum};
use indicatif::ProgressBar;
use rank::JobResult;
use serde::Serialize;
use std::process::ExitCode;
use std::time::{Duration, Instant};

/// Which transports a soak covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SoakTransport {
    /// Shared memory: every rank on one node.
    Shm,
    /// UDP between emulated nodes (two ranks each).
    Udp,
    /// TCP between emulated nodes (two ranks each).
    Tcp,
    /// All three.
    All,
}

/// `volley soak` arguments.
#[derive(Debug, Args)]
pub struct SoakArgs {
    /// Minutes in all, shared among the configurations (fractions allowed).
    #[arg(long, value_name = "M")]
    minutes: f64,
    /// Transports to cover.
    #[arg(long, value_enum, default_value = "all")]
    transport: SoakTransport,
    /// Faults injected into UDP datagrams (as VOLLEY_FAULTS), for the UDP configurations.
    #[arg(long, value_name = "SPEC")]
    faults: Option<String>,
    /// Ranks per job.
    #[arg(long, value_name = "N", default_value_t = 4)]
    ranks: usize,
    /// Seed of the traffic's random choices (default: from the clock).
    #[arg(long)]
    seed: Option<u64>,
    /// Also write the results as JSON to FILE (`-` for standard output).
    #[arg(long, value_name = "FILE")]
    json: Option<std::path::PathBuf>,
    /// Self-test of the checks: one payload arrives damaged, so the soak must fail.
    #[arg(long, hide = true)]
    corrupt_one: bool,
    /// Self-test of the collectives' checks: one rank contributes a wrong value once.
    #[arg(long, hide = true)]
    corrupt_collective: bool,
}

/// One configuration's outcome.
#[derive(Debug, Serialize)]
struct ConfigResult {
    /// The transport.
    transport: &'static str,
    /// The progress mode: `inline` or `thread`.
    progress: &'static str,
    /// Seconds it ran.
    seconds: f64,
    /// Rank 0's result, when the job ended normally.
    job: Option<JobResult>,
    /// Why it failed, if it did.
    error: Option<String>,
}

/// What `--json` writes.
#[derive(Debug, Serialize)]
struct SoakReport {
    minutes: f64,
    ranks: usize,
    seed: u64,
    faults: Option<String>,
    configurations: Vec<ConfigResult>,
    /// Every configuration ran to its end with every check passed.
    verified: bool,
}

/// Runs `volley soak`.
pub fn main(args: SoakArgs) -> ExitCode {
    if !(args.minutes > 0.0 && args.minutes <= 24.0 * 60.0) {
        eprintln!("volley soak: --minutes must be more than 0 and at most a day");
        return ExitCode::from(2);
    }
    if !(2..=64).contains(&args.ranks) {
        eprintln!("volley soak: --ranks must be from 2 to 64");
        return ExitCode::from(2);
    }
    if let Some(spec) = &args.faults {
        if let Err(e) = volley::transport::net::faults::FaultConfig::parse(spec) {
            eprintln!("volley soak: --faults {spec}: {e}");
            return ExitCode::from(2);
        }
    }
    let transports: &[&'static str] = match args.transport {
        SoakTransport::Shm => &["shm"],
        SoakTransport::Udp => &["udp"],
        SoakTransport::Tcp => &["tcp"],
        SoakTransport::All => &["shm", "udp", "tcp"],
    };
    let configs: Vec<(&'static str, &'static str)> = transports
        .iter()
        .flat_map(|&t| [(t, "inline"), (t, "thread")])
        .collect();
    let seed = args
        .seed
        .unwrap_or_else(|| volley::bootstrap::random_u64() | 1);
    let total = Duration::from_secs_f64(args.minutes * 60.0);
    let slice = total / configs.len() as u32;
    let bar = crate::bar::seconds(total.as_secs());
    let start = Instant::now();
    let mut results = Vec::new();
    for &(transport, progress) in &configs {
        bar.set_message(format!("{transport}, progress {progress}"));
        let ticker = ticker(&bar, start);
        let t0 = Instant::now();
        let outcome = run_job(&args, transport, progress, slice, seed);
        ticker.stop();
        bar.set_position(start.elapsed().as_secs().min(total.as_secs()));
        let (job, error) = match outcome {
            Ok(job) if job.verified => (Some(job), None),
            Ok(job) => (Some(job), Some("checks failed".to_string())),
            Err(e) => (None, Some(e)),
        };
        results.push(ConfigResult {
            transport,
            progress,
            seconds: t0.elapsed().as_secs_f64(),
            job,
            error,
        });
    }
    bar.finish_and_clear();
    let verified = results.iter().all(|r| r.error.is_none());
    print_table(&results, seed);
    let report = SoakReport {
        minutes: args.minutes,
        ranks: args.ranks,
        seed,
        faults: args.faults.clone(),
        configurations: results,
        verified,
    };
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).expect("the report serializes") + "\n";
        let written = if path.as_os_str() == "-" {
            std::io::Write::write_all(&mut std::io::stdout().lock(), text.as_bytes())
        } else {
            std::fs::write(path, text)
        };
        if let Err(e) = written {
            eprintln!("volley soak: writing {}: {e}", path.display());
            return ExitCode::from(2);
        }
    }
    if verified {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    }
}

/// Advances the bar once a second while a job runs.
struct Ticker {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Ticker {
    fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn ticker(bar: &ProgressBar, start: Instant) -> Ticker {
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (b, s) = (bar.clone(), stop.clone());
    let thread = std::thread::spawn(move || {
        while !s.load(std::sync::atomic::Ordering::Relaxed) {
            b.set_position(start.elapsed().as_secs().min(b.length().unwrap_or(0)));
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    Ticker {
        stop,
        thread: Some(thread),
    }
}

/// Runs one job of the soak ranks for `slice` and returns rank 0's result.
fn run_job(
    args: &SoakArgs,
    transport: &str,
    progress: &str,
    slice: Duration,
    seed: u64,
) -> Result<JobResult, String> {
    let mut env: Vec<(String, String)> = vec![("VOLLEY_PROGRESS".into(), progress.into())];
    if transport != "shm" {
        env.push(("VOLLEY_NET".into(), transport.into()));
    }
    if transport == "udp" {
        if let Some(f) = &args.faults {
            env.push(("VOLLEY_FAULTS".into(), f.clone()));
        }
    }
    let job = crate::self_job::SelfJob {
        ranks: args.ranks,
        per_node: if transport == "shm" { args.ranks } else { 2 },
        bind: false,
        label: true,
        env: env.into_iter().map(|(k, v)| (k.into(), v.into())).collect(),
        what: "soak",
    };
    job.run(|out| {
        let mut rank_args = vec![
            "__soak-rank".into(),
            slice.as_secs_f64().to_string().into(),
            seed.to_string().into(),
            out.as_os_str().to_owned(),
        ];
        if args.corrupt_one {
            rank_args.push("corrupt".into());
        } else if args.corrupt_collective {
            rank_args.push("corrupt-collective".into());
        }
        rank_args
    })
}

fn print_table(results: &[ConfigResult], seed: u64) {
    let mut text = format!(
        "{:<5} {:<8} {:>7} {:>12} {:>10} {:>10} {:>11} {:>8}  result (seed {seed})\n",
        "net", "progress", "seconds", "messages", "MB", "one-sided", "collectives", "rounds"
    );
    for r in results {
        let (messages, mb, one_sided, collectives, rounds) = match &r.job {
            Some(j) => (
                j.sent,
                j.ranks.iter().map(|c| c.bytes).sum::<u64>() as f64 / 1e6,
                j.ranks.iter().map(|c| c.puts + c.adds).sum::<u64>(),
                j.ranks.first().map_or(0, |c| c.collectives),
                j.ranks.first().map_or(0, |c| c.rounds),
            ),
            None => (0, 0.0, 0, 0, 0),
        };
        let result = match &r.error {
            None => "ok".to_string(),
            Some(e) => format!("FAILED: {e}"),
        };
        text += &format!(
            "{:<5} {:<8} {:>7.1} {:>12} {:>10.1} {:>10} {:>11} {:>8}  {result}\n",
            r.transport, r.progress, r.seconds, messages, mb, one_sided, collectives, rounds
        );
    }
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}
