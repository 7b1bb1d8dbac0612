//! `volley run`: start N ranks on this host, supervise them, clean up.
//!
//! The launcher gives each rank its identity through `VOLLEY_*` variables and serves the
//! rendezvous socket (in a private 0700 temporary directory) through which ranks exchange their
//! shared-memory regions. It puts all ranks in one new process group, so it alone receives the
//! terminal's Ctrl-C, and can stop every rank (and anything they started) with one signal. Each
//! rank also gets `PR_SET_PDEATHSIG`, so ranks die if the launcher is killed outright.

mod output;
mod signals;

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::fd::OwnedFd;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use volley::bootstrap::rendezvous::{self, RendezvousServer};
use volley::bootstrap::{
    ENV_HOST_CPUS, ENV_HOST_RANKS, ENV_JOB_ID, ENV_JOB_KEY, ENV_LOCAL_RANK, ENV_LOCAL_SIZE,
    ENV_NODE, ENV_RANK, ENV_RENDEZVOUS, ENV_SIZE,
};

/// What to launch and how.
#[derive(Debug, Clone)]
pub struct LaunchOptions {
    /// Number of ranks.
    pub ranks: usize,
    /// Prefix every output line with `[rank] `.
    pub label: bool,
    /// Pin rank r to CPU r mod (number of CPUs).
    pub bind: bool,
    /// Ranks per (emulated) node: rank r runs on node r / ranks_per_node.
    pub ranks_per_node: usize,
    /// Extra environment variables for every rank.
    pub env: Vec<(OsString, OsString)>,
    /// Time between SIGTERM and SIGKILL when stopping the job.
    pub grace: Duration,
    /// The program each rank runs.
    pub program: OsString,
    /// Its arguments.
    pub args: Vec<OsString>,
}

/// Why the job could not be started (reported with exit code 2).
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    /// `-n 0`.
    #[error("the number of ranks must be at least 1")]
    NoRanks,
    /// The program does not exist or is not executable.
    #[error("program {0:?} not found or not executable")]
    ProgramNotFound(OsString),
    /// Setting up the temporary directory, socket or processes failed.
    #[error("{0}")]
    Setup(String),
}

/// Finds `program` the way a shell would: a path if it contains '/', else a search of `PATH`.
pub fn resolve_program(program: &OsString) -> Result<PathBuf, LaunchError> {
    let is_exec = |p: &Path| {
        std::fs::metadata(p)
            .map(|m| {
                m.is_file()
                    && std::os::unix::fs::PermissionsExt::mode(&m.permissions()) & 0o111 != 0
            })
            .unwrap_or(false)
    };
    let p = Path::new(program);
    if program.is_empty() {
        return Err(LaunchError::ProgramNotFound(program.clone()));
    }
    if p.as_os_str().as_encoded_bytes().contains(&b'/') {
        return if is_exec(p) {
            Ok(p.to_path_buf())
        } else {
            Err(LaunchError::ProgramNotFound(program.clone()))
        };
    }
    std::env::var_os("PATH")
        .iter()
        .flat_map(std::env::split_paths)
        .map(|dir| dir.join(p))
        .find(|c| is_exec(c))
        .ok_or_else(|| LaunchError::ProgramNotFound(program.clone()))
}

/// What the launcher and its rendezvous thread share.
#[derive(Default)]
struct JobLink {
    /// The ranks' connections, once every rank has joined.
    conns: Vec<OwnedFd>,
    /// Ranks that have exited with status 0.
    exited: Vec<usize>,
    /// Why the rendezvous failed, if it did.
    error: Option<String>,
}

/// Removes the job's temporary directory however the launcher leaves.
struct TempDir(PathBuf);

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn describe(status: ExitStatus) -> String {
    match (status.code(), status.signal()) {
        (Some(code), _) => format!("exited with status {code}"),
        (None, Some(sig)) => {
            let name = Signal::try_from(sig)
                .map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string());
            format!("was killed by signal {name}")
        }
        _ => "ended for an unknown reason".into(),
    }
}

fn exit_code(status: ExitStatus) -> i32 {
    status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0))
}

/// Runs the job to completion and returns the launcher's exit code: 0 if every rank exited 0,
/// otherwise the failing rank's status (128 + signal for a signal), 128 + signal for an
/// interrupted launcher.
pub fn launch(opts: &LaunchOptions) -> Result<i32, LaunchError> {
    if opts.ranks == 0 {
        return Err(LaunchError::NoRanks);
    }
    let program = resolve_program(&opts.program)?;
    let job_id = volley::bootstrap::random_u64();
    let job_key = volley::bootstrap::random_u64() | 1;
    let dir = std::env::temp_dir().join(format!("volley-{job_id:016x}"));
    std::fs::DirBuilder::new()
        .mode(0o700)
        .create(&dir)
        .map_err(|e| LaunchError::Setup(format!("creating {}: {e}", dir.display())))?;
    let dir = TempDir(dir);
    let sock = dir.0.join("rendezvous.sock");
    let server =
        RendezvousServer::bind(&sock, opts.ranks).map_err(|e| LaunchError::Setup(e.to_string()))?;
    // Hellos received so far. All ranks have joined once it reaches `ranks`, which happens
    // before any rank is released from the rendezvous, so no rank can exit "early" after it.
    let arrived = Arc::new(AtomicUsize::new(0));
    let shared: Arc<Mutex<JobLink>> = Arc::default();
    {
        let (arrived, shared, sock, dir) =
            (arrived.clone(), shared.clone(), sock.clone(), dir.0.clone());
        std::thread::spawn(move || {
            let result = server.serve_with(|n| arrived.store(n, Ordering::Release));
            let mut link = shared.lock().unwrap_or_else(|e| e.into_inner());
            match result {
                Ok(conns) => {
                    // Every rank is connected: the socket is no longer needed, so nothing is
                    // left in the file system even if the launcher is killed outright.
                    let _ = std::fs::remove_file(&sock);
                    let _ = std::fs::remove_dir(&dir);
                    // Ranks that exited before the connections were handed over.
                    for &rank in &link.exited {
                        rendezvous::notify_exit(&conns, rank);
                    }
                    link.conns = conns;
                }
                Err(e) => link.error = Some(e.to_string()),
            }
        });
    }
    signals::install();
    let cpus = crate::affinity::allowed_cpus();
    let launcher_pid = std::process::id() as libc::pid_t;
    // A rank reading a terminal from a background process group would stop (SIGTTIN) and
    // hang the job, so a terminal is forwarded to rank 0 through a pipe.
    // SAFETY: isatty only inspects descriptor 0.
    let stdin_is_tty = unsafe { libc::isatty(0) } == 1;
    let mut children: Vec<Child> = Vec::with_capacity(opts.ranks);
    let mut pgid: Option<Pid> = None;
    let mut pumps = Vec::new();
    for rank in 0..opts.ranks {
        let mut cmd = Command::new(&program);
        let per_node = opts.ranks_per_node.clamp(1, opts.ranks);
        let node = rank / per_node;
        let node_size = per_node.min(opts.ranks - node * per_node);
        cmd.args(&opts.args)
            .env(ENV_RANK, rank.to_string())
            .env(ENV_SIZE, opts.ranks.to_string())
            .env(ENV_LOCAL_RANK, (rank % per_node).to_string())
            .env(ENV_LOCAL_SIZE, node_size.to_string())
            .env(ENV_NODE, node.to_string())
            .env(ENV_HOST_RANKS, opts.ranks.to_string())
            .env(ENV_HOST_CPUS, cpus.len().max(1).to_string())
            .envs(opts.env.iter().map(|(k, v)| (k, v)))
            .env(ENV_JOB_ID, format!("{job_id:016x}"))
            .env(ENV_JOB_KEY, format!("{job_key:016x}"))
            .env(ENV_RENDEZVOUS, &sock)
            .process_group(pgid.map_or(0, |p| p.as_raw()));
        if rank > 0 {
            cmd.stdin(Stdio::null());
        } else if stdin_is_tty {
            cmd.stdin(Stdio::piped());
        }
        if opts.label {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        let bind_cpu = (opts.bind && !cpus.is_empty()).then(|| cpus[rank % cpus.len()]);
        // SAFETY: the closure runs in the child between fork and exec and only makes
        // async-signal-safe system calls (prctl, getppid, sched_setaffinity).
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // The launcher may have died before prctl took effect.
                if libc::getppid() != launcher_pid {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                if let Some(cpu) = bind_cpu {
                    if !crate::affinity::pin(cpu) {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                if let Some(g) = pgid {
                    stop_all(g, &mut children, opts.grace);
                }
                return Err(LaunchError::Setup(format!("starting rank {rank}: {e}")));
            }
        };
        if pgid.is_none() {
            pgid = Some(Pid::from_raw(child.id() as i32));
        }
        if let Some(mut to_rank) = child.stdin.take() {
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_rank);
            });
        }
        if opts.label {
            pumps.extend(output::label(rank, &mut child));
        }
        children.push(child);
    }
    let pgid = pgid.expect("at least one rank");
    let code = supervise(opts, &mut children, pgid, &arrived, &shared);
    // Whatever the ranks left running in their group (background children) goes too.
    let _ = killpg(pgid, Signal::SIGKILL);
    // Output copies end when the pipes close; a descendant that escaped the group could hold
    // them open, so wait a bounded time.
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for p in pumps {
            let _ = p.join();
        }
        let _ = done_tx.send(());
    });
    let _ = done_rx.recv_timeout(Duration::from_secs(2));
    drop(dir);
    Ok(code)
}

fn supervise(
    opts: &LaunchOptions,
    children: &mut [Child],
    pgid: Pid,
    arrived: &AtomicUsize,
    shared: &Mutex<JobLink>,
) -> i32 {
    let ranks = children.len();
    let all_joined = || arrived.load(Ordering::Acquire) >= ranks;
    let mut done = vec![false; children.len()];
    let mut exited_before_join = None;
    loop {
        if let Some(sig) = signals::received() {
            eprintln!(
                "volley run: interrupted by {}, stopping {} ranks",
                Signal::try_from(sig).map_or("a signal", |s| s.as_str()),
                done.iter().filter(|d| !**d).count()
            );
            stop_all(pgid, children, opts.grace);
            return 128 + sig;
        }
        let rendezvous_error = shared
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .error
            .take();
        if let Some(e) = rendezvous_error {
            eprintln!("volley run: rendezvous failed: {e}; stopping the job");
            stop_all(pgid, children, opts.grace);
            return 1;
        }
        let mut progressed = false;
        for (rank, child) in children.iter_mut().enumerate() {
            if done[rank] {
                continue;
            }
            let status = match child.try_wait() {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    eprintln!("volley run: cannot wait for rank {rank}: {e}");
                    stop_all(pgid, children, opts.grace);
                    return 1;
                }
            };
            done[rank] = true;
            progressed = true;
            if !status.success() {
                eprintln!(
                    "volley run: rank {rank} (pid {}) {}; stopping the job",
                    child.id(),
                    describe(status)
                );
                stop_all(pgid, children, opts.grace);
                return exit_code(status);
            }
            if !all_joined() && exited_before_join.is_none() {
                exited_before_join = Some((rank, child.id()));
            }
            // Ranks still waiting on this one learn it is gone (they fail loudly if it left
            // without finalizing, instead of waiting forever). If the connections are not
            // handed over yet, the rendezvous thread replays the notice.
            let mut link = shared.lock().unwrap_or_else(|e| e.into_inner());
            link.exited.push(rank);
            rendezvous::notify_exit(&link.conns, rank);
        }
        // A rank that left before the rendezvous finished can never be waited for.
        if let Some((rank, pid)) = exited_before_join {
            if arrived.load(Ordering::Acquire) > 0 && !all_joined() {
                eprintln!(
                    "volley run: rank {rank} (pid {pid}) exited before joining the job while \
                     other ranks wait for it; stopping the job"
                );
                stop_all(pgid, children, opts.grace);
                return 1;
            }
        }
        if done.iter().all(|d| *d) {
            return 0;
        }
        if !progressed {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

/// SIGTERM to every rank, SIGKILL to whatever is left after `grace`, and reap them all.
fn stop_all(pgid: Pid, children: &mut [Child], grace: Duration) {
    let _ = killpg(pgid, Signal::SIGTERM);
    let deadline = Instant::now() + grace;
    loop {
        let mut alive = 0;
        for c in children.iter_mut() {
            if matches!(c.try_wait(), Ok(None)) {
                alive += 1;
            }
        }
        if alive == 0 {
            break;
        }
        if Instant::now() >= deadline {
            let _ = killpg(pgid, Signal::SIGKILL);
            for c in children.iter_mut() {
                let _ = c.wait();
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    // Descendants the ranks started may still be in the group.
    let _ = killpg(pgid, Signal::SIGKILL);
}

use std::os::unix::fs::DirBuilderExt;
