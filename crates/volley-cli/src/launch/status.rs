//! How ranks ended and what that means for the job: the launcher's messages and exit code,
//! the same for a job on one host and a job spread over several.

use nix::sys::signal::Signal;
use serde::{Deserialize, Serialize};
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// How one rank's process ended (travels from agents to the launcher).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum RankStatus {
    /// Exited with this status.
    Code(i32),
    /// Killed by this signal.
    Signal(i32),
}

impl From<ExitStatus> for RankStatus {
    fn from(s: ExitStatus) -> Self {
        match (s.code(), s.signal()) {
            (Some(c), _) => Self::Code(c),
            (None, Some(sig)) => Self::Signal(sig),
            // Neither: cannot happen for a reaped child; count it as a failure.
            (None, None) => Self::Code(1),
        }
    }
}

impl RankStatus {
    /// Exited with status 0.
    pub fn success(self) -> bool {
        self == Self::Code(0)
    }

    /// "exited with status 7", "was killed by signal SIGKILL".
    pub fn describe(self) -> String {
        match self {
            Self::Code(code) => format!("exited with status {code}"),
            Self::Signal(sig) => format!("was killed by signal {}", signal_name(sig)),
        }
    }

    /// The launcher's exit code for a job this rank ended: its status, or 128 + signal.
    pub fn exit_code(self) -> i32 {
        match self {
            Self::Code(c) => c,
            Self::Signal(s) => 128 + s,
        }
    }
}

/// "SIGKILL", or "signal 99" for a number without a name.
pub fn signal_name(sig: i32) -> String {
    Signal::try_from(sig).map_or_else(|_| format!("signal {sig}"), |s| s.as_str().to_string())
}

/// One rank's end, as seen by whoever started it.
#[derive(Debug, Clone, Copy)]
pub struct RankExit {
    /// The rank.
    pub rank: usize,
    /// Its process id (on its host).
    pub pid: u32,
    /// How it ended.
    pub status: RankStatus,
}

/// The job's fate, decided from its ranks' exits: the first failure ends it.
#[derive(Debug)]
pub struct JobWatch {
    done: Vec<bool>,
    /// A rank that exited 0 before every rank had joined the rendezvous, and where.
    exited_before_join: Option<(usize, u32, String)>,
}

impl JobWatch {
    /// A job of `size` ranks, none ended.
    pub fn new(size: usize) -> Self {
        Self {
            done: vec![false; size],
            exited_before_join: None,
        }
    }

    /// Ranks still running.
    pub fn running(&self) -> usize {
        self.done.iter().filter(|d| !**d).count()
    }

    /// Whether every rank has exited 0.
    pub fn all_done(&self) -> bool {
        self.done.iter().all(|d| *d)
    }

    /// Whether `rank` has ended.
    pub fn is_done(&self, rank: usize) -> bool {
        self.done.get(rank).copied().unwrap_or(true)
    }

    /// Records that a rank ended (`place` is "" on one host, " on host NAME" otherwise);
    /// `all_joined` tells whether the rendezvous had completed. A failure is announced on
    /// stderr and returned as the job's exit code: the caller stops the job.
    pub fn exited(&mut self, e: RankExit, place: &str, all_joined: bool) -> Result<(), i32> {
        if self.is_done(e.rank) {
            return Ok(());
        }
        self.done[e.rank] = true;
        if !e.status.success() {
            say!(
                "volley run: rank {} (pid {}){place} {}; stopping the job",
                e.rank,
                e.pid,
                e.status.describe()
            );
            return Err(e.status.exit_code());
        }
        if !all_joined && self.exited_before_join.is_none() {
            self.exited_before_join = Some((e.rank, e.pid, place.to_string()));
        }
        Ok(())
    }

    /// A rank that left before the rendezvous finished can never be waited for: fails the
    /// job once other ranks are waiting in it (`arrived` hellos, not all of them).
    pub fn check_stranded(&self, arrived: usize) -> Result<(), i32> {
        if let Some((rank, pid, place)) = &self.exited_before_join {
            if arrived > 0 && arrived < self.done.len() {
                say!(
                    "volley run: rank {rank} (pid {pid}){place} exited before joining the job \
                     while other ranks wait for it; stopping the job"
                );
                return Err(1);
            }
        }
        Ok(())
    }

    /// Announces an interruption by `sig` and returns the job's exit code.
    pub fn interrupted(&self, sig: i32) -> i32 {
        let n = self.running();
        say!(
            "volley run: interrupted by {}, stopping {n} rank{}",
            Signal::try_from(sig).map_or("a signal", |s| s.as_str()),
            if n == 1 { "" } else { "s" }
        );
        128 + sig
    }
}
