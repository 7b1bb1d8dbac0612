//! A peer measurement: Open MPI's collectives on this machine's shared memory, to report beside
//! volley's own. The MPI program (`mpi_coll.c`, embedded) is compiled with `mpicc` into a
//! temporary directory and run with `mpirun`; rank 0 prints one line of JSON.

use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The MPI program: `mpi_coll ITERS_SCALE REPS`.
const SOURCE: &str = include_str!("mpi_coll.c");

/// How long compiling or running may take before the command is killed.
const DEADLINE: Duration = Duration::from_secs(300);

/// Open MPI's collectives: for each, the median over repetitions of the slowest rank's mean
/// time per call, in nanoseconds.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct MpiColl {
    /// Ranks in the job.
    pub ranks: usize,
    /// `MPI_Barrier`.
    pub mpi_barrier_ns: f64,
    /// `MPI_Bcast` of 8 bytes from rank 0.
    #[serde(rename = "mpi_bcast_8B_ns")]
    pub mpi_bcast_8b_ns: f64,
    /// `MPI_Allreduce` of one `uint64_t` (sum).
    #[serde(rename = "mpi_allreduce_8B_ns")]
    pub mpi_allreduce_8b_ns: f64,
    /// `MPI_Allreduce` of 131072 doubles, 1 MiB (sum).
    #[serde(rename = "mpi_allreduce_1MiB_ns")]
    pub mpi_allreduce_1mib_ns: f64,
    /// `MPI_Alltoall` of 8 bytes per pair of ranks.
    #[serde(rename = "mpi_alltoall_8B_ns")]
    pub mpi_alltoall_8b_ns: f64,
    /// `MPI_Alltoall` of 64 KiB per pair of ranks.
    #[serde(rename = "mpi_alltoall_64KiB_ns")]
    pub mpi_alltoall_64kib_ns: f64,
}

/// Whether Open MPI is installed: both `mpicc` and `mpirun` are on `PATH`.
pub fn available() -> bool {
    on_path("mpicc") && on_path("mpirun")
}

/// Whether an executable file `name` is in a directory of `PATH`.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    let Some(path) = std::env::var_os("PATH") else {
        return false;
    };
    std::env::split_paths(&path).any(|dir| {
        std::fs::metadata(dir.join(name))
            .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    })
}

/// Measures Open MPI's collectives on `ranks` local ranks, iteration counts scaled by `scale`,
/// `reps` repetitions. `Ok(None)` when Open MPI is not installed.
pub fn measure(ranks: usize, scale: f64, reps: usize) -> Result<Option<MpiColl>, String> {
    if !available() {
        return Ok(None);
    }
    if ranks == 0 || reps == 0 || !(scale.is_finite() && scale > 0.0) {
        return Err(format!(
            "MPI collectives: bad parameters (ranks {ranks}, scale {scale}, reps {reps})"
        ));
    }
    let dir = TempDir::new()?;
    let src = dir.0.join("mpi_coll.c");
    let exe = dir.0.join("mpi_coll");
    std::fs::write(&src, SOURCE).map_err(|e| format!("writing {}: {e}", src.display()))?;

    let mut cc = Command::new("mpicc");
    cc.args(["-std=c11", "-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src);
    run(&mut cc, &dir.0, "mpicc")?;

    let mut mpirun = Command::new("mpirun");
    mpirun.args([
        "-n",
        &ranks.to_string(),
        "--oversubscribe",
        "--bind-to",
        "none",
    ]);
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        mpirun.arg("--allow-run-as-root");
    }
    // Only this machine's shared memory (and a rank's sends to itself).
    let btl = format!("self,{}", shm_btl(&dir.0));
    mpirun.args(["--mca", "pml", "ob1", "--mca", "btl", &btl]);
    mpirun
        .arg(&exe)
        .arg(scale.to_string())
        .arg(reps.to_string());
    let shown = show(&mpirun);
    let stdout = run(&mut mpirun, &dir.0, "mpirun")?;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("`{shown}` printed no JSON line; its output:\n{stdout}"))?;
    serde_json::from_str(line)
        .map(Some)
        .map_err(|e| format!("`{shown}`: cannot parse {line:?}: {e}"))
}

/// The shared-memory BTL's name: `vader` up to Open MPI 4, `sm` from 5 on (`sm` when
/// `ompi_info` does not list `vader`).
fn shm_btl(dir: &Path) -> &'static str {
    match run(
        Command::new("ompi_info").arg("--parsable"),
        dir,
        "ompi_info",
    ) {
        Ok(out) if out.lines().any(|l| l.starts_with("mca:btl:vader:")) => "vader",
        _ => "sm",
    }
}

/// A command line as it would be typed.
fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` with its output in files `dir/name.out` and `dir/name.err` (files, not pipes: a
/// stray rank holding them open cannot block us) and returns its standard output. Past
/// [`DEADLINE`] it gets SIGTERM (mpirun passes it on to its ranks), five seconds later
/// SIGKILL. Errors name the command and include its standard error.
fn run(cmd: &mut Command, dir: &Path, name: &str) -> Result<String, String> {
    let shown = show(cmd);
    let (out_path, err_path) = (
        dir.join(format!("{name}.out")),
        dir.join(format!("{name}.err")),
    );
    let create =
        |p: &Path| std::fs::File::create(p).map_err(|e| format!("creating {}: {e}", p.display()));
    cmd.stdin(Stdio::null())
        .stdout(create(&out_path)?)
        .stderr(create(&err_path)?);
    let mut child = cmd
        .spawn()
        .map_err(|e| format!("`{shown}`: cannot start: {e}"))?;
    let start = Instant::now();
    let mut term_sent: Option<Instant> = None;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) => {}
            Err(e) => return Err(format!("`{shown}`: waiting: {e}")),
        }
        if let Some(t) = term_sent {
            if t.elapsed() > Duration::from_secs(5) {
                let _ = child.kill();
                break child
                    .wait()
                    .map_err(|e| format!("`{shown}`: waiting: {e}"))?;
            }
        } else if start.elapsed() > DEADLINE {
            // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            term_sent = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let stderr = read(&err_path);
    if term_sent.is_some() {
        Err(format!(
            "`{shown}` killed after {} s; its stderr:\n{stderr}",
            DEADLINE.as_secs()
        ))
    } else if status.success() {
        Ok(read(&out_path))
    } else {
        Err(format!(
            "`{shown}` failed ({status}); its stderr:\n{stderr}"
        ))
    }
}

/// A fresh directory under the system's temporary directory, removed with everything in it
/// when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory (never reusing an existing one).
    fn new() -> Result<TempDir, String> {
        let path = std::env::temp_dir().join(format!(
            "volley-mpi-coll-{}-{:x}",
            std::process::id(),
            volley::bootstrap::random_u64()
        ));
        std::fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
        Ok(TempDir(path))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_rank_0_line() {
        let line = r#"{"ranks": 4, "mpi_barrier_ns": 242.1, "mpi_bcast_8B_ns": 104.1, "mpi_allreduce_8B_ns": 262.3, "mpi_allreduce_1MiB_ns": 363001.0, "mpi_alltoall_8B_ns": 237.4, "mpi_alltoall_64KiB_ns": 37517.0}"#;
        let m: MpiColl = serde_json::from_str(line).unwrap();
        assert_eq!(m.ranks, 4);
        assert_eq!(m.mpi_barrier_ns, 242.1);
        assert_eq!(m.mpi_bcast_8b_ns, 104.1);
        assert_eq!(m.mpi_allreduce_8b_ns, 262.3);
        assert_eq!(m.mpi_allreduce_1mib_ns, 363001.0);
        assert_eq!(m.mpi_alltoall_8b_ns, 237.4);
        assert_eq!(m.mpi_alltoall_64kib_ns, 37517.0);
        // And back to the same keys.
        let v = serde_json::to_value(&m).unwrap();
        assert_eq!(v["mpi_alltoall_64KiB_ns"], 37517.0);
    }

    #[test]
    fn measures_two_ranks() {
        if !available() {
            eprintln!("mpi_peer: skipped, Open MPI (mpicc, mpirun) is not installed");
            return;
        }
        let m = measure(2, 0.01, 1).unwrap().expect("Open MPI is available");
        assert_eq!(m.ranks, 2);
        let figures = [
            m.mpi_barrier_ns,
            m.mpi_bcast_8b_ns,
            m.mpi_allreduce_8b_ns,
            m.mpi_allreduce_1mib_ns,
            m.mpi_alltoall_8b_ns,
            m.mpi_alltoall_64kib_ns,
        ];
        assert!(figures.iter().all(|f| f.is_finite() && *f > 0.0), "{m:?}");
    }
}
