//! `volley bench launchers`: a job under each launcher that can start one here — `volley run`,
//! Open MPI's `mpirun` and Slurm's `srun --mpi=pmix` (both through PMIx) — in one sitting:
//!
//! - start-up: the wall time of a job of N ranks (default 8) that joins (builds its runtime:
//!   bootstrap, wire-up, init barrier), passes a barrier and finalizes, beside the same
//!   launcher starting N × `/bin/true` (its own cost, with no volley in it);
//! - the short round trip between two ranks of one node, to show that how a job was started
//!   does not change how fast it runs.
//!
//! The launchers take turns within every repetition, so that each figure is a median over
//! the same stretch of machine time. Ranks pin themselves (rank r to the r-th allowed CPU), so
//! that no launcher's own binding policy decides the round trip.

use super::median;
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;
use volley::Runtime;

/// One launcher's figures (medians over the repetitions).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LauncherFigures {
    /// `volley run`, `mpirun` or `srun`.
    pub launcher: String,
    /// Wall time of a job of `ranks` ranks that joins, passes a barrier and finalizes, ms.
    pub startup_ms: f64,
    /// Wall time of the same launcher starting `ranks` × `/bin/true`, ms.
    pub startup_true_ms: f64,
    /// Short request round trip between two ranks of one node, ns.
    pub short_rtt_ns: f64,
}

/// The report.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LaunchersReport {
    /// Ranks of the start-up job.
    pub ranks: usize,
    /// Repetitions (each figure is the median).
    pub reps: usize,
    /// Round trips per measurement.
    pub round_trips: u64,
    /// The launchers measured.
    pub launchers: Vec<LauncherFigures>,
    /// Launchers that cannot start jobs here, and why.
    pub skipped: Vec<String>,
}

/// The launchers, in the order they are measured.
const LAUNCHERS: [&str; 3] = ["volley run", "mpirun", "srun"];

/// Whether `launcher` can start a job here (`Err`: why not).
fn available(launcher: &str) -> Result<(), String> {
    let probe = match launcher {
        "volley run" => return Ok(()),
        "mpirun" => Command::new("mpirun").arg("--version").output(),
        _ => Command::new("srun")
            .args(["-n1", "--quiet", "true"])
            .output(),
    };
    match probe {
        Ok(o) if o.status.success() => Ok(()),
        Ok(o) => Err(format!(
            "{launcher}: {}",
            String::from_utf8_lossy(&o.stderr)
                .lines()
                .next()
                .unwrap_or("fails")
        )),
        Err(e) => Err(format!("{launcher}: {e}")),
    }
}

/// The command that starts `ranks` × `program args` under `launcher`.
fn command(launcher: &str, ranks: usize, program: &Path, args: &[String]) -> Command {
    let n = ranks.to_string();
    let mut cmd = match launcher {
        "volley run" => {
            let mut c = Command::new(self_exe());
            c.args(["run", "-n", &n]);
            c
        }
        "mpirun" => {
            let mut c = Command::new("mpirun");
            c.args(["--oversubscribe", "--bind-to", "none", "-n", &n]);
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                c.arg("--allow-run-as-root");
            }
            c
        }
        _ => {
            let mut c = Command::new("srun");
            c.args(["--mpi=pmix", "--quiet", "-n", &n]);
            c
        }
    };
    cmd.arg(program).args(args).stdin(Stdio::null());
    cmd
}

fn self_exe() -> std::path::PathBuf {
    std::env::current_exe().unwrap_or_else(|_| "/proc/self/exe".into())
}

/// Runs `cmd` to completion and returns its wall time in ms.
fn timed(what: &str, mut cmd: Command) -> Result<f64, String> {
    let start = Instant::now();
    let out = cmd
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("{what}: {e}"))?;
    let ms = start.elapsed().as_secs_f64() * 1e3;
    if !out.status.success() {
        return Err(format!(
            "{what} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(ms)
}

/// Measures every available launcher.
pub fn bench(reps: usize, scale: f64, ranks: usize) -> Result<LaunchersReport, String> {
    let mut launchers = Vec::new();
    let mut skipped = Vec::new();
    for l in LAUNCHERS {
        match available(l) {
            Ok(()) => launchers.push(l),
            Err(why) => skipped.push(why),
        }
    }
    let round_trips = ((100_000.0 * scale) as u64).max(200);
    let exe = self_exe();
    let mut samples = vec![[Vec::new(), Vec::new(), Vec::new()]; launchers.len()];
    for _ in 0..reps {
        for (i, &l) in launchers.iter().enumerate() {
            let tru = command(l, ranks, Path::new("/bin/true"), &[]);
            samples[i][0].push(timed(&format!("{l} /bin/true"), tru)?);
            let probe = command(
                l,
                ranks,
                &exe,
                &rank_args("launch-probe", Path::new("-"), 1),
            );
            samples[i][1].push(timed(&format!("{l} start-up job"), probe)?);
            let out = std::env::temp_dir().join(format!(
                "volley-launchers-{}-{:x}.json",
                std::process::id(),
                volley::bootstrap::random_u64()
            ));
            let rtt = command(l, 2, &exe, &rank_args("launch-rtt", &out, round_trips));
            let result = timed(&format!("{l} round-trip job"), rtt).and_then(|_| {
                let text = std::fs::read(&out).map_err(|e| format!("{l}: rank 0's result: {e}"));
                let _ = std::fs::remove_file(&out);
                serde_json::from_slice::<f64>(&text?).map_err(|e| format!("{l}: {e}"))
            });
            samples[i][2].push(result?);
        }
    }
    let launchers = launchers
        .iter()
        .zip(samples.iter_mut())
        .map(|(l, [tru, probe, rtt])| LauncherFigures {
            launcher: l.to_string(),
            startup_true_ms: median(tru),
            startup_ms: median(probe),
            short_rtt_ns: median(rtt),
        })
        .collect();
    Ok(LaunchersReport {
        ranks,
        reps,
        round_trips,
        launchers,
        skipped,
    })
}

/// The hidden rank command line (`volley __bench-rank WHICH OUT SCALE REPS`); the round
/// trips travel as the scale.
fn rank_args(which: &str, out: &Path, round_trips: u64) -> Vec<String> {
    vec![
        "__bench-rank".into(),
        which.into(),
        out.display().to_string(),
        round_trips.to_string(),
        "1".into(),
    ]
}

/// Prints the table.
pub fn print_table(r: &LaunchersReport, out: &mut dyn Write) {
    let base = r
        .launchers
        .iter()
        .find(|l| l.launcher == "volley run")
        .map(|l| l.short_rtt_ns);
    let _ = writeln!(
        out,
        "volley bench launchers: medians of {} runs, launchers taking turns in each",
        r.reps
    );
    let _ = writeln!(
        out,
        "{:<12} {:>16} {:>20} {:>16} {:>14}",
        "launcher",
        format!("{}-rank job ms", r.ranks),
        format!("{} x /bin/true ms", r.ranks),
        "short rtt ns",
        "rtt / volley"
    );
    for l in &r.launchers {
        let ratio = base.map_or(f64::NAN, |b| l.short_rtt_ns / b);
        let _ = writeln!(
            out,
            "{:<12} {:>16.1} {:>20.1} {:>16.0} {:>14.2}",
            l.launcher, l.startup_ms, l.startup_true_ms, l.short_rtt_ns, ratio
        );
    }
    for s in &r.skipped {
        let _ = writeln!(out, "skipped: {s}");
    }
}

/// One rank of the start-up job: join, a barrier, leave.
pub fn probe_rank() -> Result<(), String> {
    let rt = Runtime::builder().build().map_err(|e| e.to_string())?;
    rt.barrier();
    rt.finalize();
    Ok(())
}

/// One rank of the round-trip job: rank 0 sends `round_trips` short requests to rank 1, one
/// at a time, after a warm-up, and writes the mean round trip (ns) to `out`.
pub fn rtt_rank(out: &Path, round_trips: u64) -> Result<(), String> {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::Arc;
    let cpus = crate::affinity::allowed_cpus();
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let r = replies.clone();
    let pong = b.reply_handler("launchers-pong", move |_| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let ping = b.request_handler("launchers-ping", move |_, token| {
        token.reply_short(pong, &[]).expect("reply");
    });
    let rt = b.build().map_err(|e| e.to_string())?;
    if rt.size() != 2 {
        return Err(format!(
            "the round-trip job needs 2 ranks, got {}",
            rt.size()
        ));
    }
    if let Some(&cpu) = cpus.get(rt.rank() % cpus.len().max(1)) {
        crate::affinity::pin(cpu);
    }
    rt.barrier();
    if rt.rank() == 0 {
        let trip = |n: u64| {
            for _ in 0..n {
                let before = replies.load(Ordering::Relaxed);
                rt.request_short(1, ping, &[]).expect("request");
                rt.wait_until(|| replies.load(Ordering::Relaxed) > before);
            }
        };
        trip(round_trips / 10);
        let start = Instant::now();
        trip(round_trips);
        let ns = start.elapsed().as_secs_f64() * 1e9 / round_trips as f64;
        std::fs::write(out, ns.to_string()).map_err(|e| format!("writing {out:?}: {e}"))?;
    }
    rt.finalize();
    Ok(())
}
