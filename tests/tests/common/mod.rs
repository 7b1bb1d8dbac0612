//! Running rank programs through the real `volley` launcher, with a deadline and cleanup checks.
//!
//! Every launcher run made through [`Job`]:
//! - holds a process-wide lock, so the multi-process tests of one test binary run one at a time
//!   (cargo runs test binaries one after another, so no two jobs ever share the machine);
//! - gets `TMPDIR` set to a fresh empty directory, which must be empty again when the launcher
//!   has exited (the rendezvous directory is removed);
//! - must not leave new `/dev/shm` entries whose name contains "volley";
//! - must not leave any process running that inherited that `TMPDIR` (the ranks, and anything
//!   they started): survivors are killed and the test fails;
//! - runs in its own process group and is killed (with everything in the group and every
//!   survivor) when it misses its deadline, which fails the test with the output so far.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Default deadline of a launcher run.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);

/// The `volley` launcher: `$VOLLEY_LAUNCHER` if set, else `volley` beside this test's profile
/// directory (`target/<profile>/deps/<test>-<hash>` → `target/<profile>/volley`).
///
/// `cargo test --workspace` builds it: `volley-cli` has integration tests of its own, so cargo
/// builds its binary before running any test.
pub fn launcher() -> PathBuf {
    static LAUNCHER: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    LAUNCHER
        .get_or_init(find_launcher)
        .clone()
        .unwrap_or_else(|e| panic!("{e}"))
}

fn find_launcher() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("VOLLEY_LAUNCHER") {
        return Ok(p.into());
    }
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .ok_or("the test executable should live in target/<profile>/deps")?;
    let p = profile_dir.join("volley");
    if !p.is_file() {
        return Err(format!(
            "the launcher {} does not exist: build it in the same profile first \
             (`cargo build --release -p volley-cli`), or point VOLLEY_LAUNCHER at it",
            p.display()
        ));
    }
    Ok(p)
}

static SERIAL: Mutex<()> = Mutex::new(());

/// Serializes multi-process work within this test binary (a failed test does not poison it).
pub fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// A fresh, empty temporary directory, removed on drop.
#[derive(Debug)]
pub struct Scratch {
    path: PathBuf,
}

impl Scratch {
    /// Creates `$TMPDIR/volley-tests-<pid>-<n>-<tag>`.
    pub fn new(tag: &str) -> Self {
        static N: AtomicUsize = AtomicUsize::new(0);
        let path = std::env::temp_dir().join(format!(
            "volley-tests-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir(&path).unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
        Self { path }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// What is in it (recursively, relative paths).
    pub fn entries(&self) -> Vec<String> {
        fn walk(dir: &Path, base: &Path, out: &mut Vec<String>) {
            let Ok(rd) = std::fs::read_dir(dir) else {
                return;
            };
            for e in rd.flatten() {
                let p = e.path();
                out.push(p.strip_prefix(base).unwrap_or(&p).display().to_string());
                if e.file_type().is_ok_and(|t| t.is_dir()) {
                    walk(&p, base, out);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.path, &self.path, &mut out);
        out.sort();
        out
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Removes from `cmd`'s environment the `VOLLEY_*` settings of a job the tests may themselves
/// run under (all but `VOLLEY_LAUNCHER`), so that it does not leak into the jobs they start.
pub fn without_outer_job(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VOLLEY_") && k != "VOLLEY_LAUNCHER" {
            cmd.env_remove(&k);
        }
    }
}

/// `TMPDIR=<dir>`, as it appears in the environment of a job's processes (for
/// [`processes_with_env`]).
pub fn tmpdir_var(dir: &Path) -> Vec<u8> {
    let mut v = b"TMPDIR=".to_vec();
    v.extend_from_slice(dir.as_os_str().as_encoded_bytes());
    v
}

/// Names in `/dev/shm` that contain "volley".
pub fn shm_volley_entries() -> BTreeSet<OsString> {
    std::fs::read_dir("/dev/shm")
        .map(|rd| {
            rd.flatten()
                .map(|e| e.file_name())
                .filter(|n| n.to_string_lossy().contains("volley"))
                .collect()
        })
        .unwrap_or_default()
}

/// Live (non-zombie) processes whose environment contains `needle` (`NAME=value`), excluding
/// this process.
pub fn processes_with_env(needle: &[u8]) -> Vec<(u32, String)> {
    let me = std::process::id();
    let mut found = Vec::new();
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return found;
    };
    for e in rd.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        if pid == me {
            continue;
        }
        // A zombie's environment reads as empty, so it never matches.
        let Ok(env) = std::fs::read(format!("/proc/{pid}/environ")) else {
            continue;
        };
        if env.split(|&b| b == 0).any(|var| var == needle) {
            let cmd = std::fs::read(format!("/proc/{pid}/cmdline"))
                .map(|c| String::from_utf8_lossy(&c).replace('\0', " "))
                .unwrap_or_default();
            found.push((pid, cmd.trim().to_string()));
        }
    }
    found
}

/// Voluntary context switches of each thread of process `pid` so far, by thread id.
pub fn voluntary_switches(pid: u32) -> Switches {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).expect("the process's threads");
    Switches(
        tasks
            .filter_map(|t| {
                let t = t.ok()?;
                let tid = t.file_name().to_str()?.parse().ok()?;
                let status = std::fs::read_to_string(t.path().join("status")).ok()?;
                let n = status
                    .lines()
                    .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
                    .and_then(|v| v.trim().parse::<u64>().ok())?;
                Some((tid, n))
            })
            .collect(),
    )
}

/// A sample of [`voluntary_switches`].
#[derive(Debug, Clone)]
pub struct Switches(std::collections::BTreeMap<u32, u64>);

impl Switches {
    /// Switches since `earlier` by the threads alive now (a thread that ended meanwhile takes
    /// its count with it, so totals of two samples cannot simply be subtracted).
    pub fn since(&self, earlier: &Switches) -> u64 {
        self.0
            .iter()
            .map(|(tid, n)| n.saturating_sub(earlier.0.get(tid).copied().unwrap_or(0)))
            .sum()
    }
}

/// Whether `pid` is gone (no such process, or a zombie).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // Field 3 (after the parenthesized command) is the state.
        Ok(stat) => stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().next())
            .is_some_and(|state| state == "Z" || state == "X"),
    }
}

/// How a launcher run ended.
pub struct Outcome {
    /// The launcher's exit status.
    pub status: ExitStatus,
    /// Everything it (and the ranks) wrote to stdout.
    pub stdout: String,
    /// Everything it (and the ranks) wrote to stderr.
    pub stderr: String,
    /// From spawn to exit.
    pub elapsed: Duration,
    /// The command line, for messages.
    pub command: String,
}

impl Outcome {
    /// The exit code, or `None` if the launcher was killed by a signal.
    pub fn code(&self) -> Option<i32> {
        self.status.code()
    }

    /// Panics with the whole outcome unless the launcher exited 0.
    pub fn assert_success(&self) -> &Self {
        assert!(self.status.success(), "job failed:\n{self}");
        self
    }

    /// Panics unless the launcher exited with `code`.
    pub fn assert_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code(),
            Some(code),
            "expected exit code {code}:\n{self}"
        );
        self
    }

    /// Panics unless the job failed with `code`, the status of its first failed rank, as
    /// `volley run` reports it; under a cluster launcher, which combines its ranks' statuses
    /// its own way (srun: the highest), unless it failed.
    pub fn assert_job_code(&self, code: i32) -> &Self {
        if under_volley_run() {
            return self.assert_code(code);
        }
        assert!(!self.status.success(), "expected the job to fail:\n{self}");
        self
    }

    /// Panics unless stderr contains every one of `needles`.
    pub fn assert_stderr_has(&self, needles: &[&str]) -> &Self {
        for n in needles {
            assert!(self.stderr.contains(n), "stderr lacks {n:?}:\n{self}");
        }
        self
    }

    /// Panics unless stdout contains every one of `needles`.
    pub fn assert_stdout_has(&self, needles: &[&str]) -> &Self {
        for n in needles {
            assert!(self.stdout.contains(n), "stdout lacks {n:?}:\n{self}");
        }
        self
    }
}

impl fmt::Display for Outcome {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "command: {}", self.command)?;
        writeln!(
            f,
            "status: {:?} (code {:?}, signal {:?}) after {:.2?}",
            self.status,
            self.status.code(),
            self.status.signal(),
            self.elapsed
        )?;
        writeln!(f, "--- stdout ---\n{}", tail(&self.stdout, 60))?;
        write!(f, "--- stderr ---\n{}", tail(&self.stderr, 60))
    }
}

/// Runs `cmd` to completion, retrying while its program is "text file busy".
///
/// A test that has just written an executable can meet `ETXTBSY`: another test thread of the
/// same binary may have forked while the file was still open for writing, and its child holds
/// that descriptor until it execs. The hold lasts microseconds, so a few retries end it.
pub fn output_of_fresh_executable(cmd: &mut Command) -> std::process::Output {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match cmd.output() {
            Err(e)
                if e.kind() == std::io::ErrorKind::ExecutableFileBusy
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(Duration::from_millis(20))
            }
            other => return other.unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}")),
        }
    }
}

/// Runs a suite program's job and requires, besides success, a line "`prefix` SECTION: ok" on
/// its stdout for each of `sections` (a section that did not run fails the test).
pub fn run_sections(job: Job, prefix: &str, sections: &[&str], deadline: Duration) -> Outcome {
    let wanted: Vec<String> = sections
        .iter()
        .map(|s| format!("{prefix} {s}: ok"))
        .collect();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let out = job.timeout(deadline).output();
    out.assert_success().assert_stdout_has(&wanted);
    out
}

/// The last `n` lines of `s`.
pub fn tail(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.lines().collect();
    let skip = lines.len().saturating_sub(n);
    let mut out = String::new();
    if skip > 0 {
        out.push_str(&format!("[... {skip} lines omitted ...]\n"));
    }
    for l in &lines[skip..] {
        out.push_str(l);
        out.push('\n');
    }
    out
}

/// The cluster launcher the suites run under instead of `volley run`, if any:
/// `VOLLEY_TEST_LAUNCHER=mpirun` (Open MPI) or `srun` (Slurm, with its PMIx plugin; see
/// `scripts/slurm-local`).
pub fn cluster_launcher() -> Option<String> {
    std::env::var("VOLLEY_TEST_LAUNCHER")
        .ok()
        .filter(|l| !l.is_empty())
}

/// The network transport this run of the suites crosses (`VOLLEY_TEST_NET=udp|tcp`, see
/// `scripts/test-matrix`), if any.
pub fn test_net() -> Option<String> {
    std::env::var("VOLLEY_TEST_NET")
        .ok()
        .filter(|n| !n.is_empty())
}

/// Whether the jobs of this test run start under `volley run` (tests of the launcher's own
/// behaviour, its messages and options, apply only then).
pub fn under_volley_run() -> bool {
    cluster_launcher().is_none()
}

/// The command line that starts `ranks` ranks of `program` under the cluster launcher `name`.
fn cluster_command(name: &str, ranks: usize, program: &str, args: &[&str]) -> Vec<OsString> {
    let mut v: Vec<OsString> = match name {
        "mpirun" => {
            let mut v: Vec<OsString> = vec!["mpirun".into(), "--oversubscribe".into()];
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                v.push("--allow-run-as-root".into());
            }
            v
        }
        "srun" => vec!["srun".into(), "--mpi=pmix".into(), "--quiet".into()],
        other => panic!("VOLLEY_TEST_LAUNCHER={other}: expected mpirun or srun"),
    };
    v.extend(["-n".into(), ranks.to_string().into(), program.into()]);
    v.extend(args.iter().map(OsString::from));
    v
}

/// A launcher command line to run.
pub struct Job {
    /// The program to start instead of `volley`, with its arguments first in `args`.
    command: Option<OsString>,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    timeout: Duration,
    unlocked: bool,
}

impl Job {
    /// `volley run -n N PROGRAM ARGS...`.
    ///
    /// With `VOLLEY_TEST_NET=udp|tcp` in the test's environment the same job runs on
    /// emulated nodes of `VOLLEY_TEST_RANKS_PER_NODE` ranks (default 1) whose traffic crosses
    /// that network transport: this is how the core and one-sided suites run, unchanged, over
    /// UDP and TCP (see `scripts/test`).
    ///
    /// With `VOLLEY_TEST_LAUNCHER=mpirun|srun` the same job starts under that launcher
    /// instead, the emulated nodes then made by `VOLLEY_RANKS_PER_NODE`.
    pub fn run(ranks: usize, program: &str, args: &[&str]) -> Self {
        let net = test_net();
        if let Some(name) = cluster_launcher() {
            let mut job = Self::under(&name, ranks, program, args);
            if let Some(n) = net {
                let per_node = std::env::var("VOLLEY_TEST_RANKS_PER_NODE").unwrap_or("1".into());
                job = job
                    .env("VOLLEY_NET", &n)
                    .env("VOLLEY_RANKS_PER_NODE", &per_node);
            }
            return job;
        }
        let mut v: Vec<OsString> = vec!["run".into(), "-n".into(), ranks.to_string().into()];
        if net.is_some() {
            let per_node = std::env::var("VOLLEY_TEST_RANKS_PER_NODE").unwrap_or("1".into());
            v.extend(["--ranks-per-node".into(), per_node.into()]);
        }
        v.push(program.into());
        v.extend(args.iter().map(OsString::from));
        let job = Self::raw(v);
        match net {
            Some(n) => job.env("VOLLEY_NET", &n),
            None => job,
        }
    }

    /// `ranks` ranks of `program` started by the cluster launcher `launcher` (`mpirun` or
    /// `srun`), whatever `VOLLEY_TEST_LAUNCHER` says.
    pub fn under(launcher: &str, ranks: usize, program: &str, args: &[&str]) -> Self {
        let mut v = cluster_command(launcher, ranks, program, args);
        let command = v.remove(0);
        let mut job = Self::raw(v);
        job.command = Some(command);
        job
    }

    /// `volley ARGS...` exactly as given.
    pub fn raw<I, S>(args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<OsStr>,
    {
        Self {
            command: None,
            args: args.into_iter().map(|a| a.as_ref().to_owned()).collect(),
            env: Vec::new(),
            timeout: DEFAULT_TIMEOUT,
            unlocked: false,
        }
    }

    /// Sets an environment variable of the launcher (the ranks inherit it).
    pub fn env(mut self, k: &str, v: &str) -> Self {
        self.env.push((k.into(), v.into()));
        self
    }

    /// Sets the deadline.
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }

    /// Does not take the serializing lock (the caller holds it, to run several jobs at once).
    pub fn unlocked(mut self) -> Self {
        self.unlocked = true;
        self
    }

    /// Starts the launcher.
    pub fn spawn(self) -> Running {
        let guard = (!self.unlocked).then(serial);
        let scratch = Scratch::new("tmpdir");
        let shm_before = shm_volley_entries();
        let launcher = self.command.clone().map_or_else(launcher, PathBuf::from);
        let command = std::iter::once(launcher.display().to_string())
            .chain(self.args.iter().map(|a| a.to_string_lossy().into_owned()))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(&launcher);
        cmd.args(&self.args)
            .env("TMPDIR", scratch.path())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0);
        without_outer_job(&mut cmd);
        for (k, v) in &self.env {
            cmd.env(k, v);
        }
        let start = Instant::now();
        let mut child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {command}: {e}"));
        let (tx, stdout_rx) = mpsc::channel();
        let out = child.stdout.take().unwrap();
        let stdout_thread = std::thread::spawn(move || {
            let mut r = BufReader::new(out);
            let mut line = Vec::new();
            loop {
                line.clear();
                match r.read_until(b'\n', &mut line) {
                    Ok(0) | Err(_) => break,
                    Ok(_) => {
                        let s = String::from_utf8_lossy(&line);
                        let _ = tx.send(s.trim_end_matches('\n').to_string());
                    }
                }
            }
        });
        let mut err = child.stderr.take().unwrap();
        let stderr_seen = Arc::new(Mutex::new(Vec::new()));
        let seen = stderr_seen.clone();
        let stderr_thread = std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            loop {
                match err.read(&mut chunk) {
                    Ok(0) => break,
                    Ok(n) => seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .extend_from_slice(&chunk[..n]),
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
            let buf = seen.lock().unwrap_or_else(|e| e.into_inner());
            String::from_utf8_lossy(&buf).into_owned()
        });
        Running {
            child,
            start,
            deadline: start + self.timeout,
            timeout: self.timeout,
            scratch,
            shm_before,
            stdout_rx,
            stdout_lines: Vec::new(),
            stdout_thread: Some(stdout_thread),
            stderr_thread: Some(stderr_thread),
            stderr_seen,
            command,
            _guard: guard,
        }
    }

    /// Runs the launcher to completion (see the module documentation for what is checked).
    pub fn output(self) -> Outcome {
        self.spawn().finish()
    }
}

/// A launcher that is running.
pub struct Running {
    child: Child,
    start: Instant,
    deadline: Instant,
    timeout: Duration,
    scratch: Scratch,
    shm_before: BTreeSet<OsString>,
    stdout_rx: Receiver<String>,
    stdout_lines: Vec<String>,
    stdout_thread: Option<JoinHandle<()>>,
    stderr_thread: Option<JoinHandle<String>>,
    /// What has come on stderr so far.
    stderr_seen: Arc<Mutex<Vec<u8>>>,
    command: String,
    _guard: Option<MutexGuard<'static, ()>>,
}

impl Running {
    /// The launcher's pid.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Waits until `n` stdout lines satisfying `pred` have been printed (in total, since the
    /// start) and returns them; fails the test (after cleaning up) on timeout or early exit.
    pub fn wait_for_lines(
        &mut self,
        n: usize,
        timeout: Duration,
        pred: impl Fn(&str) -> bool,
    ) -> Vec<String> {
        let until = Instant::now() + timeout;
        loop {
            let matching: Vec<String> = self
                .stdout_lines
                .iter()
                .filter(|l| pred(l))
                .cloned()
                .collect();
            if matching.len() >= n {
                return matching;
            }
            let now = Instant::now();
            if now >= until {
                self.abort(&format!(
                    "only {} of {n} expected stdout lines after {timeout:?}",
                    matching.len()
                ));
            }
            match self.stdout_rx.recv_timeout(until - now) {
                Ok(l) => self.stdout_lines.push(l),
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.abort(&format!(
                        "stdout closed after {} of {n} expected lines",
                        matching.len()
                    ));
                }
            }
        }
    }

    /// What the launcher (and the ranks) wrote to stderr so far.
    pub fn stderr_so_far(&self) -> String {
        let buf = self.stderr_seen.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&buf).into_owned()
    }

    /// Waits until stderr so far satisfies `pred` and returns it; fails the test (after
    /// cleaning up) on timeout.
    pub fn wait_for_stderr(&mut self, timeout: Duration, pred: impl Fn(&str) -> bool) -> String {
        let until = Instant::now() + timeout;
        loop {
            let so_far = self.stderr_so_far();
            if pred(&so_far) {
                return so_far;
            }
            if Instant::now() >= until {
                self.abort(&format!(
                    "stderr did not show what was expected in {timeout:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the launcher is still running.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Sends `sig` to the launcher.
    pub fn signal(&self, sig: i32) {
        // SAFETY: plain system call.
        let r = unsafe { libc::kill(self.child.id() as i32, sig) };
        assert_eq!(r, 0, "kill({}, {sig}) failed", self.child.id());
    }

    /// Sends `sig` to the launcher's process group, as a terminal's Ctrl-C would.
    pub fn signal_group(&self, sig: i32) {
        // SAFETY: plain system call; the launcher leads its own process group.
        let r = unsafe { libc::kill(-(self.child.id() as i32), sig) };
        assert_eq!(r, 0, "kill(-{}, {sig}) failed", self.child.id());
    }

    /// Kills the launcher's group and every process that inherited our TMPDIR.
    fn kill_everything(&mut self) -> Vec<(u32, String)> {
        // SAFETY: plain system calls.
        unsafe {
            libc::kill(-(self.child.id() as i32), libc::SIGKILL);
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let survivors = processes_with_env(&self.tmpdir_var());
        for (pid, _) in &survivors {
            // SAFETY: plain system call.
            unsafe {
                libc::kill(*pid as i32, libc::SIGKILL);
            }
        }
        survivors
    }

    fn tmpdir_var(&self) -> Vec<u8> {
        tmpdir_var(self.scratch.path())
    }

    fn collect_output(&mut self) -> (String, String) {
        if let Some(t) = self.stdout_thread.take() {
            let _ = t.join();
        }
        while let Ok(l) = self.stdout_rx.try_recv() {
            self.stdout_lines.push(l);
        }
        let stderr = self
            .stderr_thread
            .take()
            .map(|t| t.join().unwrap_or_default())
            .unwrap_or_default();
        let mut stdout = self.stdout_lines.join("\n");
        if !stdout.is_empty() {
            stdout.push('\n');
        }
        (stdout, stderr)
    }

    /// Kills everything and fails the test with `why` and the output so far.
    fn abort(&mut self, why: &str) -> ! {
        let survivors = self.kill_everything();
        let (stdout, stderr) = self.collect_output();
        panic!(
            "{why}\ncommand: {}\nafter {:.2?}; killed the job (and surviving processes \
             {survivors:?})\n--- stdout ---\n{}--- stderr ---\n{}",
            self.command,
            self.start.elapsed(),
            tail(&stdout, 60),
            tail(&stderr, 60)
        );
    }

    /// Waits for the launcher to exit (killing everything and failing at the deadline), then
    /// checks that no process, temporary file or /dev/shm entry is left behind.
    pub fn finish(mut self) -> Outcome {
        let status = loop {
            match self.child.try_wait() {
                Ok(Some(s)) => break s,
                Ok(None) => {}
                Err(e) => self.abort(&format!("waiting for the launcher: {e}")),
            }
            if Instant::now() >= self.deadline {
                let timeout = self.timeout;
                self.abort(&format!("the launcher did not exit within {timeout:?}"));
            }
            // Keep the stdout channel drained into our buffer.
            while let Ok(l) = self.stdout_rx.try_recv() {
                self.stdout_lines.push(l);
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        let elapsed = self.start.elapsed();
        // Ranks must be gone once the launcher has exited; allow a moment for the kernel to
        // finish tearing down processes that were SIGKILLed just before it exited.
        let needle = self.tmpdir_var();
        let mut survivors = processes_with_env(&needle);
        let grace = Instant::now() + Duration::from_secs(2);
        while !survivors.is_empty() && Instant::now() < grace {
            std::thread::sleep(Duration::from_millis(20));
            survivors = processes_with_env(&needle);
        }
        if !survivors.is_empty() {
            self.kill_everything();
            let (stdout, stderr) = self.collect_output();
            panic!(
                "processes of the job outlived the launcher (now killed): {survivors:?}\n\
                 command: {}\nstatus {status:?}\n--- stdout ---\n{}--- stderr ---\n{}",
                self.command,
                tail(&stdout, 60),
                tail(&stderr, 60)
            );
        }
        let (stdout, stderr) = self.collect_output();
        let outcome = Outcome {
            status,
            stdout,
            stderr,
            elapsed,
            command: self.command.clone(),
        };
        let left = self.scratch.entries();
        assert!(
            left.is_empty(),
            "the launcher left files in its TMPDIR {}: {left:?}\n{outcome}",
            self.scratch.path().display()
        );
        let new_shm: Vec<_> = shm_volley_entries()
            .difference(&self.shm_before)
            .cloned()
            .collect();
        assert!(
            new_shm.is_empty(),
            "new /dev/shm entries appeared: {new_shm:?}\n{outcome}"
        );
        eprintln!(
            "[{:.2?}] {} -> {:?}",
            outcome.elapsed, outcome.command, outcome.status
        );
        outcome
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // Only reached without `finish` when a test panicked mid-run: leave nothing behind.
        if self.stderr_thread.is_some() {
            self.kill_everything();
        }
    }
}

/// The header of a hang report.
pub const HANG_REPORT: &str = "volley run: hang report";
/// The cause a hang report gives when no rank waits on another (yet).
pub const HANG_BUSY: &str = "the job looks busy, not stuck";

/// The last complete report in `stderr`, if there is one: from its header to its last cause.
pub fn last_report(stderr: &str) -> Option<String> {
    const CAUSES: &str = "  likely cause:\n";
    let report = &stderr[stderr.rfind(HANG_REPORT)?..];
    let at = report.find(CAUSES)? + CAUSES.len();
    let causes: Vec<&str> = report[at..]
        .lines()
        .take_while(|l| l.starts_with("    "))
        .collect();
    // The report is one write: its cause lines are there once one is.
    (!causes.is_empty()).then(|| format!("{}{}\n", &report[..at], causes.join("\n")))
}

/// Waits for a hang report of `job` taken while it is stuck, asking with SIGUSR1 when `ask`
/// (else waiting for the automatic one), and returns stderr up to it. "ready" lines come
/// before the ranks enter their hang, so a report can come early and find the job busy: such
/// a report does not count, and the launcher is asked again, 10 times at most.
pub fn stuck_report(job: &mut Running, ask: bool) -> String {
    let mut stderr = job.stderr_so_far();
    let mut asked = 0;
    loop {
        let before = stderr.matches(HANG_REPORT).count();
        let early = before > 0 && last_report(&stderr).is_some_and(|r| r.contains(HANG_BUSY));
        if before > 0 && !early {
            return stderr;
        }
        if ask || early {
            assert!(asked < 10, "every report found the job busy:\n{stderr}");
            if asked > 0 {
                std::thread::sleep(Duration::from_millis(200));
            }
            asked += 1;
            job.signal(libc::SIGUSR1);
        }
        let wanted = before + 1;
        stderr = job.wait_for_stderr(Duration::from_secs(60), |s| {
            s.matches(HANG_REPORT).count() >= wanted && last_report(s).is_some()
        });
    }
}
