//! Message-passing peers of five programs of the Split-C suite: `radix`, `radixb`, `sample`,
//! `sampleb` and `cannon` written in C against Open MPI (`apps/mpi/*.c`), with the same
//! algorithm, problem sizes, input and check as the volley programs, so `volley apps` can show
//! volley's one-sided model beside conventional message passing. The fine-grained two move
//! every key on its own as the volley programs do: `radix` with one `MPI_Put` per key in a
//! fence epoch, `sample` with an `MPI_Fetch_and_op` for the slot and an `MPI_Put` per key.
//!
//! The C sources are embedded (with the headers they share), so an installed `volley`
//! needs no source tree. The first [`run`] of a program compiles it with `mpicc` into a
//! temporary directory that lives as long as this process (removed when it exits); every run
//! is `mpirun -n P` on this host's shared memory (`--mca pml ob1 --mca btl self,vader`, as the
//! collectives peer in `bench::mpi_peer`, both through `crate::mpi`), and rank 0's
//! `volley-app {json}` line is the result.

pub use crate::mpi::available;
use crate::mpi::{self, TempDir};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The programs with an MPI version: the suite's name and the C source.
const SOURCES: [(&str, &str); 5] = [
    ("radix", include_str!("../../../apps/mpi/radix.c")),
    ("radixb", include_str!("../../../apps/mpi/radixb.c")),
    ("sample", include_str!("../../../apps/mpi/sample.c")),
    ("sampleb", include_str!("../../../apps/mpi/sampleb.c")),
    ("cannon", include_str!("../../../apps/mpi/cannon.c")),
];

/// The headers the programs include (the harness, the radix sorts' digits, the sample sorts'
/// sorting), written next to them in the build directory.
const HEADERS: [(&str, &str); 3] = [
    ("harness.h", include_str!("../../../apps/mpi/harness.h")),
    (
        "radix_digits.h",
        include_str!("../../../apps/mpi/radix_digits.h"),
    ),
    ("sort_keys.h", include_str!("../../../apps/mpi/sort_keys.h")),
];

/// How long one run may take before it is stopped (as `volley apps`' own runs).
const DEADLINE: Duration = Duration::from_secs(900);

/// How long compiling one program may take.
const COMPILE_DEADLINE: Duration = Duration::from_secs(300);

/// The start of the temporary directories' names: `volley-apps-mpi-WHAT-PID-RANDOM`.
const PREFIX: &str = "volley-apps-mpi";

/// The compiled programs of this process, by suite name (each compiled once).
static BUILT: Mutex<BTreeMap<&'static str, PathBuf>> = Mutex::new(BTreeMap::new());

/// The directory the programs are compiled into, made by the first compilation and removed
/// when the process exits.
static BUILD_DIR: OnceLock<PathBuf> = OnceLock::new();

/// Whether `program` of the suite has a C version against Open MPI.
pub fn has_version(program: &str) -> bool {
    SOURCES.iter().any(|(n, _)| *n == program)
}

/// Runs the MPI version of `program` (`radix`, `radixb`, `sample`, `sampleb` or `cannon`) on `ranks` local
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
    let dir = TempDir::new(&format!("{PREFIX}-run"))?;
    let mut mpirun = mpi::mpirun(ranks, &dir.0);
    mpirun.arg(&exe).arg("--size").arg(size);
    let shown = mpi::show(&mpirun);
    let (status, stdout, stderr) =
        mpi::run_with_deadline(&mut mpirun, &dir.0, "mpirun", DEADLINE, "stopped")?;
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
    let headers = HEADERS.iter().map(|&(h, text)| (dir.join(h), text));
    for (path, text) in headers.chain([(src.clone(), source)]) {
        std::fs::write(&path, text).map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let logs = TempDir::new(&format!("{PREFIX}-cc"))?;
    mpi::compile(&src, &exe, &["-lm"], &logs.0, COMPILE_DEADLINE, "stopped")?;
    built.insert(name, exe.clone());
    Ok(exe)
}

/// The process's build directory, created (and its removal at exit arranged) on first use.
fn build_dir() -> Result<PathBuf, String> {
    if let Some(d) = BUILD_DIR.get() {
        return Ok(d.clone());
    }
    // Only `compiled` calls this, under the BUILT lock: no two threads get here at once.
    let path = mpi::fresh_dir(&format!("{PREFIX}-build"))?;
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
        for program in ["radix", "radixb", "sample", "sampleb", "cannon"] {
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
