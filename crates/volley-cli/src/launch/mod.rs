//! `volley run`: start N ranks on this host (or, with `--hosts`, on several), supervise them,
//! clean up.
//!
//! The launcher gives each rank its identity through `VOLLEY_*` variables and serves the
//! rendezvous socket (in a private 0700 temporary directory) through which ranks exchange their
//! shared-memory regions ([`rdv`]). Starting, watching and stopping the ranks of a host
//! ([`ranks`]) and judging their exits ([`status`]) are shared with the agent that runs each
//! host's share of a multi-host job ([`agent`], started by [`remote`]).

/// `eprintln!` in one write: the launcher's lines are written while ranks (and agents) write
/// to the same stderr, and `eprintln!` writes each formatted piece separately, so a line could
/// be split by theirs.
macro_rules! say {
    ($($arg:tt)*) => {{
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
    }};
}

pub mod agent;
mod diagnose;
pub mod hosts;
mod output;
mod ranks;
mod rdv;
pub mod remote;
mod report;
mod signals;
mod status;
mod wire;

use ranks::{RankPlan, RankSet};
use status::JobWatch;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;
use volley::bootstrap::{
    ENV_HOST_CPUS, ENV_HOST_RANKS, ENV_JOB_ID, ENV_JOB_KEY, ENV_LOCAL_RANK, ENV_LOCAL_SIZE,
    ENV_NODE, ENV_RANK, ENV_RENDEZVOUS, ENV_SIZE,
};

/// Longest sleep of a supervising loop (launcher or agent) with no news. Every event it acts
/// on wakes it earlier ([`signals`]); this only bounds the cost of one that would not.
pub(crate) const SUPERVISE_BACKSTOP: Duration = Duration::from_millis(500);

/// The CPUs this launcher (or agent) may use, which its ranks share: with `VOLLEY_HOST_RANKS`
/// it decides whether they are oversubscribed, whatever `--bind` does to each rank's own mask.
pub(crate) fn host_cpus() -> String {
    crate::affinity::allowed_cpus().len().max(1).to_string()
}

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
    /// Print a hang report this long after the start if the job still runs (SIGUSR1 asks for
    /// one at any time).
    pub hang_report_after: Option<Duration>,
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
    /// `-n` above [`MAX_RANKS`] (a typo more likely than a wish for that many processes).
    #[error("{0} ranks asked for; at most {MAX_RANKS} are possible")]
    TooManyRanks(usize),
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

/// The stopping signal (SIGINT, SIGTERM, SIGHUP) that interrupted a job of this process, if
/// any: a caller that runs jobs (the benchmarks) then exits with 128 + it, as the launcher
/// does.
pub fn interrupted_by() -> Option<i32> {
    signals::received()
}

/// The most ranks one job may have.
pub const MAX_RANKS: usize = 1 << 16;

/// Refuses a job of no ranks or of more than [`MAX_RANKS`].
pub fn check_rank_count(ranks: usize) -> Result<(), LaunchError> {
    match ranks {
        0 => Err(LaunchError::NoRanks),
        n if n > MAX_RANKS => Err(LaunchError::TooManyRanks(n)),
        _ => Ok(()),
    }
}

/// Runs the job to completion and returns the launcher's exit code: 0 if every rank exited 0,
/// otherwise the failing rank's status (128 + signal for a signal), 128 + signal for an
/// interrupted launcher.
pub fn launch(opts: &LaunchOptions) -> Result<i32, LaunchError> {
    check_rank_count(opts.ranks)?;
    let program = resolve_program(&opts.program)?;
    let job_id = volley::bootstrap::random_u64();
    let job_key = volley::bootstrap::random_u64() | 1;
    let rdv = rdv::HostRendezvous::start(&format!("{job_id:016x}"), 0..opts.ranks, Box::new(Ok))
        .map_err(LaunchError::Setup)?;
    signals::install();
    let mut env = opts.env.clone();
    env.extend([
        (ENV_JOB_ID.into(), format!("{job_id:016x}").into()),
        (ENV_JOB_KEY.into(), format!("{job_key:016x}").into()),
        (ENV_RENDEZVOUS.into(), rdv.socket().into()),
    ]);
    let plan = RankPlan {
        program: &program,
        args: &opts.args,
        label: opts.label,
        bind: opts.bind,
        stdin_to_first: true,
        env,
    };
    let (n, per_node) = (opts.ranks, opts.ranks_per_node.clamp(1, opts.ranks));
    let all: Vec<usize> = (0..n).collect();
    let mut ranks = RankSet::spawn(&plan, &all, |rank| {
        let node = rank / per_node;
        vec![
            (ENV_RANK, rank.to_string()),
            (ENV_SIZE, n.to_string()),
            (ENV_LOCAL_RANK, (rank % per_node).to_string()),
            (
                ENV_LOCAL_SIZE,
                per_node.min(n - node * per_node).to_string(),
            ),
            (ENV_NODE, node.to_string()),
            (ENV_HOST_RANKS, n.to_string()),
            (ENV_HOST_CPUS, host_cpus()),
        ]
    })
    .map_err(LaunchError::Setup)?;
    let mut clock = report::ReportClock::new(opts.hang_report_after);
    let code = match supervise(&mut ranks, &rdv, n, &mut clock) {
        Ok(()) => 0,
        Err(code) => {
            ranks.stop(opts.grace);
            code
        }
    };
    ranks.finish();
    drop(rdv);
    Ok(code)
}

/// Watches the ranks until all have exited 0 (`Ok`) or the job must stop (`Err(exit code)`,
/// the reason already printed).
fn supervise(
    ranks: &mut RankSet,
    rdv: &rdv::HostRendezvous,
    n: usize,
    clock: &mut report::ReportClock,
) -> Result<(), i32> {
    let mut watch = JobWatch::new(n);
    loop {
        if let Some(sig) = signals::received() {
            return Err(watch.interrupted(sig));
        }
        if clock.due() {
            let answers = report::ask(ranks.report_targets());
            report::print(
                n,
                answers.into_iter().map(|a| (a, String::new())).collect(),
                clock,
            );
        }
        if let Some(e) = rdv.take_error() {
            say!("volley run: rendezvous failed: {e}; stopping the job");
            return Err(1);
        }
        let ended = ranks.poll().map_err(|e| {
            say!("volley run: {e}");
            1
        })?;
        for e in &ended {
            watch.exited(*e, "", rdv.arrived() >= n)?;
            rdv.notify_exit(e.rank);
        }
        watch.check_stranded(rdv.arrived())?;
        if watch.all_done() {
            return Ok(());
        }
        if ended.is_empty() {
            // Until a rank ends, a signal comes or the rendezvous has news (each wakes this
            // sleep); the timeout is only a backstop.
            signals::wait(clock.bound(SUPERVISE_BACKSTOP));
        }
    }
}
