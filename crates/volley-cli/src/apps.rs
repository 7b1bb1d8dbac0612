//! `volley apps`: runs seed 004's Split-C application suite (the `volley-apps` programs) under
//! each strategy and prints Table 2 for volley: every program's time under each strategy, the
//! NP/Proc ratio, and the seed's Meiko and Paragon ratios beside it.
//!
//! Each run is `volley run -n P PROGRAM --size S` in a child process (with `VOLLEY_STRATEGY`
//! and, for the network transports, one rank per emulated node); the program prints one
//! `volley-app {json}` line that says how long its timed phase took and whether its result
//! verified. A run that fails, or does not verify, is reported and makes the command exit 1.

use crate::apps_mpi::has_version as has_mpi_version;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// The suite, in Table 2's order, with the seed's NP/Proc ratios (Meiko, Paragon; seed 004
/// §6.2).
pub const PROGRAMS: [(&str, f64, f64); 12] = [
    ("radix", 1.574, 0.931),
    ("sample", 1.211, 0.870),
    ("p-ray", 1.013, 0.954),
    ("sampleb", 1.004, 0.977),
    ("radixb", 0.941, 1.000),
    ("bitonic", 0.941, 1.000),
    ("fftb", 0.919, 0.963),
    ("cannon", 0.892, 1.000),
    ("mm", 0.800, 0.977),
    ("fft", 0.766, 0.867),
    ("shell", 0.485, 0.993),
    ("wator", 0.245, 0.898),
];

/// How long one run may take before it is stopped.
const DEADLINE: Duration = Duration::from_secs(900);

/// Options of `volley apps`.
#[derive(Debug, clap::Args)]
pub struct AppsArgs {
    /// Programs to run (default: all twelve).
    #[arg(value_name = "PROGRAM")]
    programs: Vec<String>,
    /// Strategies: proc, np, hw, or all (proc and np are Table 2's pair).
    #[arg(long, default_value = "proc,np", value_delimiter = ',')]
    strategy: Vec<String>,
    /// Ranks per run.
    #[arg(long, default_value_t = 4)]
    ranks: usize,
    /// Shared memory (one node), or one rank per emulated node over UDP or TCP.
    #[arg(long, value_enum, default_value_t = crate::bench::Transport::Shm)]
    transport: crate::bench::Transport,
    /// Problem size: test (under a second), default (seconds), or a number in the program's
    /// unit.
    #[arg(long, default_value = "default")]
    size: String,
    /// Repetitions of each run; the table shows the median.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=100))]
    reps: u64,
    /// Write every repetition as JSON to FILE (`-`: standard output; the table then goes to
    /// standard error).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Where the program binaries are (default: beside this `volley`).
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// Skip the Open MPI versions of radix, radixb, sample, sampleb and cannon (run by
    /// default over shared memory when `mpicc` and `mpirun` are installed).
    #[arg(long)]
    no_mpi: bool,
}

/// One run of one program.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppRun {
    /// Program name.
    pub program: String,
    /// proc, np or hw.
    pub strategy: String,
    /// Ranks.
    pub ranks: usize,
    /// shm, udp or tcp.
    pub transport: String,
    /// Repetition (0-based).
    pub rep: usize,
    /// The problem, as the program describes it.
    pub problem: String,
    /// Seconds of the timed phase (the slowest rank's).
    pub seconds: f64,
    /// Whether the program's check of its result passed.
    pub verified: bool,
    /// Why the run failed, if it did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// One row of Table 2.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TableRow {
    /// Program name.
    pub program: String,
    /// Problem description.
    pub problem: String,
    /// Median seconds by strategy (and `mpi` for the Open MPI version, where there is one).
    pub seconds: std::collections::BTreeMap<String, f64>,
    /// np / proc, when both ran.
    pub np_over_proc: Option<f64>,
    /// The seed's Meiko NP/Proc.
    pub seed_meiko: f64,
    /// The seed's Paragon NP/Proc.
    pub seed_paragon: f64,
}

/// The whole run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AppsReport {
    /// Every repetition of every run.
    pub runs: Vec<AppRun>,
    /// Table 2 for volley.
    pub table: Vec<TableRow>,
}

/// `volley apps`.
pub fn main(args: AppsArgs) -> ExitCode {
    match run(&args) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("volley apps: {e}");
            ExitCode::from(2)
        }
    }
}

fn run(args: &AppsArgs) -> Result<ExitCode, String> {
    let programs: Vec<&str> = if args.programs.is_empty() {
        PROGRAMS.iter().map(|p| p.0).collect()
    } else {
        for p in &args.programs {
            if !PROGRAMS.iter().any(|q| q.0 == p) {
                let names: Vec<&str> = PROGRAMS.iter().map(|p| p.0).collect();
                return Err(format!(
                    "unknown program {p:?}; the suite: {}",
                    names.join(" ")
                ));
            }
        }
        args.programs.iter().map(String::as_str).collect()
    };
    let mut strategies: Vec<&str> = Vec::new();
    for s in &args.strategy {
        match s.as_str() {
            "all" => strategies.extend(["proc", "np", "hw"]),
            "proc" | "np" | "hw" => strategies.push(s),
            other => return Err(format!("unknown strategy {other:?}: proc, np, hw or all")),
        }
    }
    strategies.dedup();
    if args.ranks == 0 {
        return Err("--ranks must be at least 1".into());
    }
    if args.size != "test"
        && args.size != "default"
        && args.size.replace('_', "").parse::<u64>().is_err()
    {
        return Err(format!(
            "--size takes test, default or a number, not {:?}",
            args.size
        ));
    }
    let volley = std::env::current_exe().map_err(|e| format!("locating volley: {e}"))?;
    let dir = match &args.dir {
        Some(d) => d.clone(),
        None => volley.parent().map(Path::to_path_buf).unwrap_or_default(),
    };
    for p in &programs {
        if !dir.join(p).is_file() {
            return Err(format!(
                "program {p} not found in {} (build the suite: cargo build --release -p volley-apps, or give --dir)",
                dir.display()
            ));
        }
    }
    let json = crate::bench::JsonTarget::open(args.json.as_deref())?;
    let total = (programs.len() * strategies.len()) as u64 * args.reps;
    let mpi_total = if args.transport == crate::bench::Transport::Shm
        && !args.no_mpi
        && crate::apps_mpi::available()
    {
        programs.iter().filter(|p| has_mpi_version(p)).count() as u64 * args.reps
    } else {
        0
    };
    let total = total + mpi_total;
    let bar = crate::bar::steps(total);
    let mut runs = Vec::new();
    let mpi = args.transport == crate::bench::Transport::Shm
        && !args.no_mpi
        && crate::apps_mpi::available();
    for p in &programs {
        for s in &strategies {
            for rep in 0..args.reps as usize {
                bar.set_message(format!("{p} [{s}] #{rep}"));
                runs.push(run_one(&volley, &dir, p, s, rep, args));
                bar.inc(1);
            }
        }
        // The message-passing version of the same algorithm, where there is one.
        if mpi && has_mpi_version(p) {
            for rep in 0..args.reps as usize {
                bar.set_message(format!("{p} [mpi] #{rep}"));
                runs.push(run_mpi(p, rep, args));
            }
        }
    }
    bar.finish_and_clear();
    let table = table(&programs, &strategies, &runs);
    let report = AppsReport { runs, table };
    let mut text = Vec::new();
    print_table(&report, args, &mut text);
    let failed = report.runs.iter().filter(|r| !r.verified).count();
    let doc = serde_json::to_value(&report).map_err(|e| e.to_string())?;
    let code = crate::bench::emit_report(&text, &doc, json);
    if failed > 0 {
        eprintln!("volley apps: {failed} run(s) failed or did not verify");
        return Ok(ExitCode::FAILURE);
    }
    Ok(code)
}

/// Runs the Open MPI version of `program` once.
fn run_mpi(program: &str, rep: usize, args: &AppsArgs) -> AppRun {
    let mut r = AppRun {
        program: program.to_string(),
        strategy: "mpi".into(),
        ranks: args.ranks,
        transport: "shm".into(),
        rep,
        problem: String::new(),
        seconds: f64::NAN,
        verified: false,
        error: None,
    };
    match crate::apps_mpi::run(program, args.ranks, &args.size) {
        Ok(Some((problem, seconds, verified))) => {
            (r.problem, r.seconds, r.verified) = (problem, seconds, verified);
            if !verified {
                r.error = Some("the MPI version's check failed".into());
            }
        }
        Ok(None) => r.error = Some("no MPI version".into()),
        Err(e) => r.error = Some(e),
    }
    r
}

/// Runs one program once and reads its result line.
fn run_one(
    volley: &Path,
    dir: &Path,
    program: &str,
    strategy: &str,
    rep: usize,
    args: &AppsArgs,
) -> AppRun {
    let mut cmd = Command::new(volley);
    cmd.arg("run").arg("-n").arg(args.ranks.to_string());
    if args.transport != crate::bench::Transport::Shm {
        cmd.arg("--ranks-per-node").arg("1");
        cmd.env("VOLLEY_NET", args.transport.name());
    }
    cmd.arg(dir.join(program)).arg("--size").arg(&args.size);
    cmd.env("VOLLEY_STRATEGY", strategy);
    cmd.stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut result = AppRun {
        program: program.to_string(),
        strategy: strategy.to_string(),
        ranks: args.ranks,
        transport: args.transport.name().to_string(),
        rep,
        problem: String::new(),
        seconds: f64::NAN,
        verified: false,
        error: None,
    };
    let out = match output_with_deadline(cmd, DEADLINE) {
        Ok(o) => o,
        Err(e) => {
            result.error = Some(e);
            return result;
        }
    };
    let stdout = String::from_utf8_lossy(&out.1);
    let line = stdout.lines().find_map(|l| l.strip_prefix("volley-app "));
    if let Some(Ok(v)) = line.map(serde_json::from_str::<serde_json::Value>) {
        result.problem = v["problem"].as_str().unwrap_or_default().to_string();
        result.seconds = v["seconds"].as_f64().unwrap_or(f64::NAN);
        result.verified = v["verified"].as_bool().unwrap_or(false) && out.0;
    }
    if !result.verified {
        let stderr = String::from_utf8_lossy(&out.2);
        let tail: Vec<&str> = stderr.lines().rev().take(4).collect();
        result.error = Some(if tail.is_empty() {
            "no result line".into()
        } else {
            tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
        });
    }
    result
}

/// Runs `cmd` to completion, or kills it after `deadline`: (success, stdout, stderr).
fn output_with_deadline(
    mut cmd: Command,
    deadline: Duration,
) -> Result<(bool, Vec<u8>, Vec<u8>), String> {
    use std::io::Read;
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("starting volley run: {e}"))?;
    let mut so = child.stdout.take().expect("piped");
    let mut se = child.stderr.take().expect("piped");
    let t_out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = so.read_to_end(&mut v);
        v
    });
    let t_err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = se.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().map_err(|e| e.to_string())? {
            break Some(s);
        }
        if start.elapsed() > deadline {
            // SIGTERM lets the launcher stop its ranks.
            // SAFETY: signalling our own child by pid.
            unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let (stdout, stderr) = (
        t_out.join().unwrap_or_default(),
        t_err.join().unwrap_or_default(),
    );
    match status {
        None => Err(format!("stopped after {} s", deadline.as_secs())),
        Some(s) => Ok((s.success(), stdout, stderr)),
    }
}

fn table(programs: &[&str], strategies: &[&str], runs: &[AppRun]) -> Vec<TableRow> {
    programs
        .iter()
        .map(|p| {
            let (_, meiko, paragon) = *PROGRAMS.iter().find(|q| q.0 == *p).expect("known");
            let mut seconds = std::collections::BTreeMap::new();
            let mut problem = String::new();
            for s in strategies {
                let mut v: Vec<f64> = runs
                    .iter()
                    .filter(|r| r.program == *p && r.strategy == *s && r.verified)
                    .map(|r| r.seconds)
                    .collect();
                if let Some(r) = runs
                    .iter()
                    .find(|r| r.program == *p && !r.problem.is_empty())
                {
                    problem = r.problem.clone();
                }
                if !v.is_empty() {
                    seconds.insert(s.to_string(), crate::bench::median(&mut v));
                }
            }
            let mut v: Vec<f64> = runs
                .iter()
                .filter(|r| r.program == *p && r.strategy == "mpi" && r.verified)
                .map(|r| r.seconds)
                .collect();
            if !v.is_empty() {
                seconds.insert("mpi".to_string(), crate::bench::median(&mut v));
            }
            let np_over_proc = match (seconds.get("np"), seconds.get("proc")) {
                (Some(n), Some(p)) if *p > 0.0 => Some(n / p),
                _ => None,
            };
            TableRow {
                program: p.to_string(),
                problem,
                seconds,
                np_over_proc,
                seed_meiko: meiko,
                seed_paragon: paragon,
            }
        })
        .collect()
}

fn print_table(r: &AppsReport, args: &AppsArgs, w: &mut dyn Write) {
    // Table 2's order: proc, then np, then hw.
    let strategies: Vec<&str> = ["proc", "np", "hw", "mpi"]
        .into_iter()
        .filter(|s| r.runs.iter().any(|run| run.strategy == *s))
        .collect();
    let _ = writeln!(
        w,
        "volley apps: {} ranks, {}, size {}, median of {} (seconds of the timed phase)",
        args.ranks,
        args.transport.name(),
        args.size,
        args.reps
    );
    let mut head = format!("{:<9} {:<28}", "program", "problem");
    for s in &strategies {
        head += &format!("{s:>10}");
    }
    head += &format!("{:>9}{:>9}{:>9}", "np/proc", "Meiko", "Paragon");
    let _ = writeln!(w, "{head}");
    for row in &r.table {
        let mut line = format!("{:<9} {:<28}", row.program, row.problem);
        for s in &strategies {
            let missing = if *s == "mpi" && !has_mpi_version(&row.program) {
                "-"
            } else {
                "failed"
            };
            line += &row
                .seconds
                .get(*s)
                .map_or(format!("{missing:>10}"), |v| format!("{v:>10.3}"));
        }
        line += &row
            .np_over_proc
            .map_or(format!("{:>9}", "-"), |v| format!("{v:>9.3}"));
        line += &format!("{:>9.3}{:>9.3}", row.seed_meiko, row.seed_paragon);
        let _ = writeln!(w, "{line}");
    }
    for run in r.runs.iter().filter(|r| !r.verified) {
        let _ = writeln!(
            w,
            "FAILED: {} [{}] #{}: {}",
            run.program,
            run.strategy,
            run.rep,
            run.error.as_deref().unwrap_or("did not verify")
        );
    }
}
