//! Open MPI peers of volley's measurements (`apps_mpi`: the suite's MPI programs,
//! `bench::mpi_peer`: the collectives): whether Open MPI is installed, compiling an embedded C
//! program with `mpicc` into a temporary directory, and running it with `mpirun` on this
//! host's shared memory, every command under a deadline with its output in files.

use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How long `ompi_info` may take.
const INFO_DEADLINE: Duration = Duration::from_secs(300);

/// The shared-memory BTL's name, asked of `ompi_info` once.
static SHM_BTL: OnceLock<&'static str> = OnceLock::new();

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

/// Compiles `src` into `exe` with `mpicc -std=c11 -O2 -Wall -o EXE SRC LIBS...`, its output in
/// `logs` (see [`run_checked`] for the deadline and the errors).
pub fn compile(
    src: &Path,
    exe: &Path,
    libs: &[&str],
    logs: &Path,
    deadline: Duration,
    stopped: &str,
) -> Result<(), String> {
    let mut cc = Command::new("mpicc");
    cc.args(["-std=c11", "-O2", "-Wall", "-o"])
        .arg(exe)
        .arg(src)
        .args(libs);
    run_checked(&mut cc, logs, "mpicc", deadline, stopped).map(drop)
}

/// `mpirun -n RANKS` on this machine's shared memory only (and a rank's sends to itself:
/// `--mca pml ob1 --mca btl self,vader`, or `self,sm` from Open MPI 5 on), oversubscribed
/// and unbound, as root if need be; the caller adds the program and its arguments. `dir`
/// takes the output of the `ompi_info` that finds the BTL's name (the first time).
pub fn mpirun(ranks: usize, dir: &Path) -> Command {
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
    let btl = format!("self,{}", shm_btl(dir));
    mpirun.args(["--mca", "pml", "ob1", "--mca", "btl", &btl]);
    mpirun
}

/// The shared-memory BTL's name: `vader` up to Open MPI 4, `sm` from 5 on (`sm` when
/// `ompi_info` does not list `vader`).
fn shm_btl(dir: &Path) -> &'static str {
    SHM_BTL.get_or_init(|| {
        let mut info = Command::new("ompi_info");
        info.arg("--parsable");
        match run_with_deadline(&mut info, dir, "ompi_info", INFO_DEADLINE, "stopped") {
            Ok((s, out, _))
                if s.success() && out.lines().any(|l| l.starts_with("mca:btl:vader:")) =>
            {
                "vader"
            }
            _ => "sm",
        }
    })
}

/// A command line as it would be typed.
pub fn show(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(|s| s.to_string_lossy())
        .collect::<Vec<_>>()
        .join(" ")
}

/// Runs `cmd` with its output in files `dir/name.out` and `dir/name.err` (files, not pipes:
/// a stray rank holding them open cannot block us) and returns its status, standard output
/// and standard error. Past `deadline` it gets SIGTERM (mpirun passes it on to its ranks),
/// five seconds later SIGKILL, and the result is an error ("`CMD` STOPPED after N s; its
/// stderr: ...", `stopped` the caller's word for it).
pub fn run_with_deadline(
    cmd: &mut Command,
    dir: &Path,
    name: &str,
    deadline: Duration,
    stopped: &str,
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
            "`{shown}` {stopped} after {} s; its stderr:\n{stderr}",
            deadline.as_secs()
        ));
    }
    Ok((status, stdout, stderr))
}

/// [`run_with_deadline`], and its standard output if it succeeded; an error naming the
/// command, its status and its standard error if not.
pub fn run_checked(
    cmd: &mut Command,
    dir: &Path,
    name: &str,
    deadline: Duration,
    stopped: &str,
) -> Result<String, String> {
    let shown = show(cmd);
    let (status, stdout, stderr) = run_with_deadline(cmd, dir, name, deadline, stopped)?;
    if status.success() {
        Ok(stdout)
    } else {
        Err(format!(
            "`{shown}` failed ({status}); its stderr:\n{stderr}"
        ))
    }
}

/// Compiles the C program `source` (as `NAME.c`) with `mpicc` in a fresh temporary directory,
/// runs it on `ranks` ranks with `mpirun` (bound one per core when `pin`, as volley's ranks
/// are; the later `--bind-to` wins) and `args`, and parses the last line of its standard
/// output that starts with `{` (rank 0's JSON).
pub fn run_json<T: serde::de::DeserializeOwned>(
    name: &str,
    source: &str,
    ranks: usize,
    pin: bool,
    args: &[String],
    deadline: Duration,
) -> Result<T, String> {
    let dir = TempDir::new(&format!("volley-{name}"))?;
    let src = dir.0.join(format!("{name}.c"));
    let exe = dir.0.join(name);
    std::fs::write(&src, source).map_err(|e| format!("writing {}: {e}", src.display()))?;
    compile(&src, &exe, &[], &dir.0, deadline, "killed")?;
    let mut cmd = mpirun(ranks, &dir.0);
    if pin {
        cmd.args(["--bind-to", "core"]);
    }
    cmd.arg(&exe).args(args);
    let shown = show(&cmd);
    let stdout = run_checked(&mut cmd, &dir.0, "mpirun", deadline, "killed")?;
    let line = stdout
        .lines()
        .rev()
        .find(|l| l.trim_start().starts_with('{'))
        .ok_or_else(|| format!("`{shown}` printed no JSON line; its output:\n{stdout}"))?;
    serde_json::from_str(line).map_err(|e| format!("`{shown}`: cannot parse {line:?}: {e}"))
}

/// A new directory `PREFIX-PID-RANDOM` under the system's temporary directory (never an
/// existing one).
pub fn fresh_dir(prefix: &str) -> Result<PathBuf, String> {
    let path = std::env::temp_dir().join(format!(
        "{prefix}-{}-{:x}",
        std::process::id(),
        volley::bootstrap::random_u64()
    ));
    std::fs::create_dir(&path).map_err(|e| format!("creating {}: {e}", path.display()))?;
    Ok(path)
}

/// A fresh temporary directory, removed with everything in it when dropped.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// Creates the directory (see [`fresh_dir`]).
    pub fn new(prefix: &str) -> Result<TempDir, String> {
        fresh_dir(prefix).map(TempDir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}
