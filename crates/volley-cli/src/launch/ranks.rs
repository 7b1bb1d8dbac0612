//! Starting the ranks of one host and watching them, shared by the local launcher and the
//! agent that runs a host's share of a multi-host job.
//!
//! All ranks go in one new process group, so the starter alone receives a terminal's Ctrl-C
//! and can stop every rank (and anything they started) with one signal. Each rank also gets
//! `PR_SET_PDEATHSIG`, so ranks die if their starter is killed outright.

use super::output;
use super::report::{Asked, ReportSocket};
use super::status::{RankExit, RankStatus};
use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use volley::am::report::ENV_REPORT_FD;

/// What every rank of a host runs, and how.
#[derive(Debug)]
pub struct RankPlan<'a> {
    /// The program (already resolved).
    pub program: &'a Path,
    /// Its arguments.
    pub args: &'a [OsString],
    /// Prefix every output line with `[rank] `.
    pub label: bool,
    /// Pin the i-th rank of this host to the i-th allowed CPU (mod their number).
    pub bind: bool,
    /// Give the first rank this process's standard input (the others read `/dev/null`).
    pub stdin_to_first: bool,
    /// Variables set for every rank, after the per-rank ones.
    pub env: Vec<(OsString, OsString)>,
}

/// The running ranks of one host.
pub struct RankSet {
    /// (global rank, process), in host order.
    children: Vec<(usize, Child)>,
    done: Vec<bool>,
    pgid: Pid,
    /// The `--label` copy threads, by rank.
    pumps: Vec<(usize, JoinHandle<()>)>,
    /// The launcher's ends of the ranks' report sockets, in host order (`None` if one could
    /// not be made: that rank is then reported silent).
    reports: Vec<Option<ReportSocket>>,
}

impl RankSet {
    /// Starts one process per entry of `ranks` (global rank numbers, in host order), each
    /// with `identity(i)` (i = index on this host) and then `plan.env` in its environment.
    /// On failure nothing is left running.
    pub fn spawn(
        plan: &RankPlan<'_>,
        ranks: &[usize],
        identity: impl Fn(usize) -> Vec<(&'static str, String)>,
    ) -> Result<Self, String> {
        let cpus = crate::affinity::allowed_cpus();
        let starter_pid = std::process::id() as libc::pid_t;
        // A rank reading a terminal from a background process group would stop (SIGTTIN) and
        // hang the job, so a terminal is forwarded to the first rank through a pipe.
        // SAFETY: isatty only inspects descriptor 0.
        let stdin_is_tty = unsafe { libc::isatty(0) } == 1;
        let mut set = RankSet {
            children: Vec::with_capacity(ranks.len()),
            done: vec![false; ranks.len()],
            pgid: Pid::from_raw(0),
            pumps: Vec::new(),
            reports: Vec::with_capacity(ranks.len()),
        };
        for (i, &rank) in ranks.iter().enumerate() {
            let mut cmd = Command::new(plan.program);
            cmd.args(plan.args)
                .envs(identity(i))
                .envs(plan.env.iter().map(|(k, v)| (k, v)))
                .process_group(set.pgid.as_raw());
            if i > 0 || !plan.stdin_to_first {
                cmd.stdin(Stdio::null());
            } else if stdin_is_tty {
                cmd.stdin(Stdio::piped());
            }
            if plan.label {
                cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
            }
            let mut report = ReportSocket::new().ok();
            let report_fd = report.as_ref().and_then(ReportSocket::child_fd);
            if let Some(fd) = report_fd {
                cmd.env(ENV_REPORT_FD, fd.to_string());
            }
            let bind_cpu = (plan.bind && !cpus.is_empty()).then(|| cpus[i % cpus.len()]);
            // SAFETY: the closure runs in the child between fork and exec and only makes
            // async-signal-safe system calls (fcntl, prctl, getppid, sched_setaffinity).
            unsafe {
                cmd.pre_exec(move || {
                    // The rank's end of its report socket survives the exec (only in this
                    // child: the parent's copy keeps close-on-exec).
                    if let Some(fd) = report_fd {
                        if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                            return Err(std::io::Error::last_os_error());
                        }
                    }
                    if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    // The starter may have died before prctl took effect.
                    if libc::getppid() != starter_pid {
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
                // Dropping `set` kills the ranks already started.
                Err(e) => {
                    return Err(format!(
                        "starting rank {rank}: {}",
                        start_error(plan.program, &e)
                    ))
                }
            };
            if i == 0 {
                set.pgid = Pid::from_raw(child.id() as i32);
            }
            if let Some(r) = &mut report {
                r.started();
            }
            set.reports.push(report);
            if let Some(mut to_rank) = child.stdin.take() {
                std::thread::spawn(move || {
                    let _ = std::io::copy(&mut std::io::stdin().lock(), &mut to_rank);
                });
            }
            if plan.label {
                set.pumps.extend(
                    output::label(rank, &mut child)
                        .into_iter()
                        .map(|p| (rank, p)),
                );
            }
            set.children.push((rank, child));
        }
        Ok(set)
    }

    /// Every rank of this host to ask for a report (those that ended without a socket).
    pub fn report_targets(&mut self) -> Vec<Asked<'_>> {
        self.children
            .iter()
            .zip(&self.done)
            .zip(self.reports.iter_mut())
            .map(|(((rank, _), done), sock)| Asked {
                rank: *rank,
                socket: if *done { None } else { sock.as_mut() },
            })
            .collect()
    }

    /// Ranks still running (not yet reported by [`RankSet::poll`]).
    pub fn running(&self) -> usize {
        self.done.iter().filter(|d| !**d).count()
    }

    /// Reaps the ranks that have ended since the last call, without blocking. `Err` names a
    /// rank that cannot be waited for (the caller stops the job).
    pub fn poll(&mut self) -> Result<Vec<RankExit>, String> {
        let mut ended = Vec::new();
        for (i, (rank, child)) in self.children.iter_mut().enumerate() {
            if self.done[i] {
                continue;
            }
            match child.try_wait() {
                Ok(Some(s)) => {
                    self.done[i] = true;
                    ended.push(RankExit {
                        rank: *rank,
                        pid: child.id(),
                        status: RankStatus::from(s),
                    });
                }
                Ok(None) => {}
                Err(e) => return Err(format!("cannot wait for rank {rank}: {e}")),
            }
        }
        self.drain_output_of(&ended);
        Ok(ended)
    }

    /// Waits, a bounded time, until the `--label` copies of the ranks that just `ended` have
    /// printed everything those ranks wrote: whatever the caller reports about their ends
    /// (a failure, say) then comes after their last words, not before. A copy ends when its
    /// pipe closes, at once unless a descendant of the rank holds it open.
    fn drain_output_of(&self, ended: &[RankExit]) {
        let deadline = Instant::now() + Duration::from_millis(200);
        let pending = || {
            self.pumps
                .iter()
                .any(|(r, p)| ended.iter().any(|e| e.rank == *r) && !p.is_finished())
        };
        while pending() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// SIGTERM to every rank, SIGKILL to whatever is left after `grace` (or at once when a
    /// stopping signal, a second Ctrl-C, comes meanwhile), and reap them all.
    pub fn stop(&mut self, grace: Duration) {
        if self.children.is_empty() {
            return;
        }
        let stops = super::signals::stops();
        let _ = killpg(self.pgid, Signal::SIGTERM);
        let deadline = Instant::now() + grace;
        loop {
            let mut alive = 0;
            for (_, c) in self.children.iter_mut() {
                if matches!(c.try_wait(), Ok(None)) {
                    alive += 1;
                }
            }
            if alive == 0 {
                break;
            }
            if Instant::now() >= deadline || super::signals::stops() != stops {
                let _ = killpg(self.pgid, Signal::SIGKILL);
                for (_, c) in self.children.iter_mut() {
                    let _ = c.wait();
                }
                break;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        self.done.fill(true);
        // Descendants the ranks started may still be in the group.
        let _ = killpg(self.pgid, Signal::SIGKILL);
    }

    /// Kills whatever the ranks left running in their group (background children) and waits a
    /// bounded time for the `--label` copies to drain.
    pub fn finish(mut self) {
        self.kill_group();
        // Output copies end when the pipes close; a descendant that escaped the group could
        // hold them open, so wait a bounded time.
        let pumps = std::mem::take(&mut self.pumps);
        let (done_tx, done_rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for (_, p) in pumps {
                let _ = p.join();
            }
            let _ = done_tx.send(());
        });
        let _ = done_rx.recv_timeout(Duration::from_secs(2));
    }

    fn kill_group(&mut self) {
        if !self.children.is_empty() {
            let _ = killpg(self.pgid, Signal::SIGKILL);
            for (_, c) in self.children.iter_mut() {
                let _ = c.wait();
            }
        }
    }
}

impl Drop for RankSet {
    /// Whatever path the starter leaves by (an error, a panic), no rank outlives it.
    fn drop(&mut self) {
        self.kill_group();
    }
}

/// Why `program` could not be started, for a person. The kernel reports a script whose `#!`
/// interpreter is missing as the script itself not existing; the interpreter is named then
/// (in quotes, so that a stray carriage return of a DOS line ending shows).
fn start_error(program: &Path, e: &std::io::Error) -> String {
    let mut why = format!("{}: {e}", program.display());
    if e.kind() == std::io::ErrorKind::NotFound {
        if let Some(interpreter) = interpreter_of(program).filter(|i| !Path::new(i).exists()) {
            why.push_str(&format!(
                "; the interpreter its #! line names, {interpreter:?}, does not exist"
            ));
        }
    }
    why
}

/// The interpreter named on `program`'s `#!` line, if it has one.
fn interpreter_of(program: &Path) -> Option<String> {
    use std::io::Read;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(program).ok()?.read(&mut head).ok()?;
    let line = head[..n]
        .strip_prefix(b"#!")?
        .split(|&b| b == b'\n')
        .next()?;
    let line = String::from_utf8_lossy(line);
    // The kernel splits the line at spaces and tabs only: a carriage return stays in the name.
    line.split([' ', '\t'])
        .find(|w| !w.is_empty())
        .map(str::to_string)
}
