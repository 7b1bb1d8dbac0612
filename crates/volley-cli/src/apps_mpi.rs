//! Message-passing peers of three programs of the Split-C suite: `radixb`, `sampleb` and
//! `cannon` written in C against Open MPI (`apps/mpi/*.c`), with the same algorithm, problem
//! sizes, input and check as the volley programs, so `volley apps` can show volley's
//! one-sided model beside conventional message passing.
//!
//! The C sources are embedded, so an installed `volley` needs no source tree. The first
//! [`run`] of a program compiles it with `mpicc` into a temporary directory that lives as
//! long as this process (removed when it exits); every run is `mpirun -n P` on this host's
//! shared memory (`--mca pml ob1 --mca btl self,vader`, as the collectives peer in
//! `bench::mpi_peer`), and rank 0's `volley-app {json}` line is the result.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The programs with an MPI version: the suite's name and the C source.
const SOURCES: [(&str, &str); 3] = [
    ("radixb", include_str!("../../../apps/mpi/radixb.c")),
    ("sampleb", include_str!("../../../apps/mpi/sampleb.c")),
    ("cannon", include_str!("../../../apps/mpi/cannon.c")),
];

/// How long one run may take before it is stopped (as `volley apps`' own runs).
const DEADLINE: Duration = Duration::from_secs(900);

/// How long compiling one program may take.
const COMPILE_DEADLINE: Duration = Duration::from_secs(300);

/// The compiled programs of this process, by suite name (each compiled once).
static BUILT: Mutex<BTreeMap<&'static str, PathBuf>> = Mutex::new(BTreeMap::new());

/// The directory the programs are compiled into, made by the first compilation and removed
/// when the process exits.
static BUILD_DIR: OnceLock<PathBuf> = OnceLock::new();

/// The shared-memory BTL's name, asked of `ompi_info` once.
static SHM_BTL: OnceLock<&'static str> = OnceLock::new();

/// Whether Open MPI is installed: both `mpicc` and `mpirun` are on `PATH`.
pub fn available() -> bool {
    on_path("mpicc") && on_path("mpirun")
}

/// Runs the MPI version of `program` (`radixb`, `sampleb` or `cannon`) on `ranks` local
/// ranks with `--size size` and returns what its result line says: the problem in words,
/// the timed phase's seconds (the slowest rank's) and whether its check passed.
///
/// `Ok(None)` when Open MPI is not installed or `program` has no MPI version. A run that
/// printed its result line but did not verify is `Ok` with `false`; a compilation or run
/// that failed otherwise (including `cannon` on a rank count that is not a square, and a
/// run stopped after 900 s) is an error that includes the command's standard error.
pub fn run(program: &str, ranks: usize, size: &str) -> Result<Option<(String, f64, bool)>, String> {
    let Some(&(name, source)) = SOURCES.iter().find(|(n, _)| *n == program) else {
        return Ok(None);
    };
    if !available() {
        return Ok(None);
    }
    if ranks == 0 {
        return Err(format!("{name}-mpi: ranks must be at least 1"));
    }
    let exe = compiled(name, source)?;
    let dir = TempDir::new("run")?;
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
    mpirun.arg(&exe).arg("--size").arg(size);
    let shown = show(&mpirun);
    let (status, stdout, stderr) = run_with_deadline(&mut mpirun, &dir.0, "mpirun", DEADLINE)?;
    match parse_result(&stdout, name) {
        Some((problem, seconds, verified)) if status.success() || !verified => {
            Ok(Some((problem, seconds, verified && status.success())))
        }
        _ if !status.success() => Err(format!(
            "`{shown}` failed ({status}); its stderr:\n{stderr}"
        )),
        _ => Err(format!(
            "`{shown}` printed no volley-app result line; its output:\n{stdout}{stderr}"
        )),
    }
}

/// Reads rank 0's `volley-app {json}` line of program `name`'s MPI version: (problem,
/// seconds, verified). `None` when there is no such line or it lacks a field.
fn parse_result(stdout: &str, name: &str) -> Option<(String, f64, bool)> {
    let line = stdout
        .lines()
        .find_map(|l| l.trim_start().strip_prefix("volley-app "))?;
    let v: serde_json::Value = serde_json::from_str(line).ok()?;
    if v["program"].as_str()? != format!("{name}-mpi") {
        return None;
    }
    Some((
        v["problem"].as_str()?.to_string(),
        v["seconds"].as_f64()?,
        v["verified"].as_bool()?,
    ))
}

/// The path of program `name` compiled from `source`: compiled on the first call (with
/// `mpicc -std=c11 -O2 -Wall ... -lm`), the same path afterwards.
fn compiled(name: &'static str, source: &str) -> Result<PathBuf, String> {
    // A panic while compiling leaves nothing half-recorded: the map is only inserted into.
    let mut built = BUILT.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(exe) = built.get(name) {
        return Ok(exe.clone());
    }
    let dir = build_dir()?;
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    std::fs::write(&src, source).map_err(|e| format!("writing {}: {e}", src.display()))?;
    let mut cc = Command::new("mpicc");
    cc.args(["-std=c11", "-O2", "-Wall", "-o"])
        .arg(&exe)
        .arg(&src)
        .arg("-lm");
    let shown = show(&cc);
    let logs = TempDir::new("cc")?;
    let (status, _, stderr) = run_with_deadline(&mut cc, &logs.0, "mpicc", COMPILE_DEADLINE)?;
    if !status.success() {
        return Err(format!(
            "`{shown}` failed ({status}); its stderr:\n{stderr}"
        ));
    }
    built.insert(name, exe.clone());
    Ok(exe)
}

/// The process's build directory, created (and its removal at exit arranged) on first use.
fn build_dir() -> Result<PathBuf, String> {
    if let Some(d) = BUILD_DIR.get() {
        return Ok(d.clone());
    }
    // Only `compiled` calls this, under the BUILT lock: no two threads get here at once.
    let path = fresh_dir("build")?;
    let dir = BUILD_DIR.get_or_init(|| path).clone();
    // SAFETY: `remove_build_dir` is an `extern "C" fn()` that never unwinds.
    unsafe { libc::atexit(remove_build_dir) };
    Ok(dir)
}

/// Removes the build directory (registered with `atexit`).
extern "C" fn remove_build_dir() {
    if let Some(d) = BUILD_DIR.get() {
        let _ = std::fs::remove_dir_all(d);
    }
}

/// The shared-memory BTL's name: `vader` up to Open MPI 4, `sm` from 5 on (`sm` when
/// `ompi_info` does not list `vader`).
fn shm_btl(dir: &Path) -> &'static str {
    SHM_BTL.get_or_init(|| {
        let mut info = Command::new("ompi_info");
        info.arg("--parsable");
        match run_with_deadline(&mut info, dir, "ompi_info", COMPILE_DEADLINE) {
            Ok((s, out, _))
                if s.success() && out.lines().any(|l| l.starts_with("mca:btl:vader:")) =>
            {
                "vader"
            }
            _ => "sm",
        }
    })
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

/// A command line as it would be typed.
fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` with its output in files `dir/name.out` and `dir/name.err` (files, not pipes:
/// a stray rank holding them open cannot block us) and returns its status, standard output
/// and standard error. Past `deadline` it gets SIGTERM (mpirun passes it on to its ranks),
/// five seconds later SIGKILL, and the result is an error.
fn run_with_deadline(
    cmd: &mut Command,
    dir: &Path,
    name: &str,
    deadline: Duration,
) -> Result<(ExitStatus, String, String), String> {
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
        } else if start.elapsed() > deadline {
            // SAFETY: kill has no memory-safety preconditions; the pid is our unreaped child.
            unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGTERM) };
            term_sent = Some(Instant::now());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read =
        |p: &Path| String::from_utf8_lossy(&std::fs::read(p).unwrap_or_default()).into_owned();
    let (stdout, stderr) = (read(&out_path), read(&err_path));
    if term_sent.is_some() {
        return Err(format!(
            "`{shown}` stopped after {} s; its stderr:\n{stderr}",
            deadline.as_secs()
        ));
    }
    Ok((status, stdout, stderr))
}

/// A new directory `volley-apps-mpi-WHAT-PID-RANDOM` under the system's temporary directory
/// (never an existing one).
fn fresh_dir(what: &str) -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!(
        "volley-apps-mpi-{what}-{}-{:x}",
        std::process::id(),
        volley::bootstrap::random_u64()
    ));
    std::fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    Ok(path)
}

/// A fresh temporary directory, removed with everything in it when dropped.
struct TempDir(PathBuf);

impl TempDir {
    /// Creates the directory (see [`fresh_dir`]).
    fn new(what: &str) -> Result<TempDir, String> {
        fresh_dir(what).map(TempDir)
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
        let out = "noise\nvolley-app {\"program\":\"radixb-mpi\",\"strategy\":\"mpi\",\"ranks\":4,\
                   \"problem\":\"65536 keys\",\"seconds\":0.0041,\"verified\":true}\n";
        assert_eq!(
            parse_result(out, "radixb"),
            Some(("65536 keys".to_string(), 0.0041, true))
        );
        // Another program's line, or none, is no result.
        assert_eq!(parse_result(out, "cannon"), None);
        assert_eq!(parse_result("nothing\n", "radixb"), None);
    }

    #[test]
    fn other_programs_have_no_mpi_version() {
        assert_eq!(run("wator", 4, "test"), Ok(None));
    }

    #[test]
    fn mpi_versions_verify_at_test_size() {
        if !available() {
            eprintln!("apps_mpi: skipped, Open MPI (mpicc, mpirun) is not installed");
            return;
        }
        for program in ["radixb", "sampleb", "cannon"] {
            let (problem, seconds, verified) = run(program, 4, "test")
                .unwrap_or_else(|e| panic!("{program}: {e}"))
                .expect("Open MPI is available");
            assert!(verified, "{program}-mpi on 4 ranks did not verify");
            assert!(!problem.is_empty(), "{program}-mpi: no problem");
            assert!(
                seconds.is_finite() && seconds >= 0.0,
                "{program}-mpi: {seconds}"
            );
        }
        // Compiled once: the second run reuses the binary.
        let exe = BUILT
            .lock()
            .unwrap()
            .get("radixb")
            .cloned()
            .expect("compiled");
        assert!(run("radixb", 4, "test").unwrap().unwrap().2);
        assert_eq!(BUILT.lock().unwrap().get("radixb"), Some(&exe));
        // Cannon needs a square number of ranks.
        let err = run("cannon", 3, "test").unwrap_err();
        assert!(err.contains("perfect square"), "{err}");
    }
}
