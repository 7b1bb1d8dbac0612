//! The job identity a rank reads from its environment.

use super::BootstrapError;

/// Environment variable holding the rank (0-based).
pub const ENV_RANK: &str = "VOLLEY_RANK";
/// Environment variable holding the number of ranks.
pub const ENV_SIZE: &str = "VOLLEY_SIZE";
/// Environment variable holding the rank's index among the ranks of its host.
pub const ENV_LOCAL_RANK: &str = "VOLLEY_LOCAL_RANK";
/// Environment variable holding the number of ranks on this host.
pub const ENV_LOCAL_SIZE: &str = "VOLLEY_LOCAL_SIZE";
/// Environment variable holding the job id (16 hex digits).
pub const ENV_JOB_ID: &str = "VOLLEY_JOB_ID";
/// Environment variable holding the job key (16 hex digits), carried in frames to keep jobs apart.
pub const ENV_JOB_KEY: &str = "VOLLEY_JOB_KEY";
/// Environment variable holding the node (host, or emulated node) index; ranks of one node
/// share memory. Absent means node 0.
pub const ENV_NODE: &str = "VOLLEY_NODE";
/// Environment variable holding the number of ranks of the job on this host, all emulated
/// nodes together (decides whether waiting ranks must yield the core). Absent means
/// `VOLLEY_LOCAL_SIZE`.
pub const ENV_HOST_RANKS: &str = "VOLLEY_HOST_RANKS";
/// Environment variable holding the number of CPUs the job may use on this host (the
/// launcher's affinity mask), which decides with `VOLLEY_HOST_RANKS` whether ranks are
/// oversubscribed. Absent means this process's own mask.
pub const ENV_HOST_CPUS: &str = "VOLLEY_HOST_CPUS";
/// Environment variable holding the path of the launcher's rendezvous socket.
pub const ENV_RENDEZVOUS: &str = "VOLLEY_RENDEZVOUS";

/// How this process was started, which decides how it joins its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// Without a launcher: a job of one rank.
    Bare,
    /// By `volley run`, which serves a rendezvous socket at this path.
    Launcher {
        /// The rendezvous socket's path.
        rendezvous: String,
    },
    /// By a PMIx launcher (Open MPI's `mpirun`, Slurm's `srun --mpi=pmix`), in this namespace.
    Pmix {
        /// The job's PMIx namespace.
        namespace: String,
    },
}

impl Start {
    /// Which start a process with this environment would make, and why (for `volley info`).
    pub fn detect(get: impl Fn(&str) -> Option<String>) -> (&'static str, String) {
        if let Some(path) = get(ENV_RENDEZVOUS) {
            return (
                "volley run",
                format!("{ENV_RENDEZVOUS}={path} is set: started by `volley run`"),
            );
        }
        if let Some(ns) = get(super::pmix::ENV_NAMESPACE) {
            let library = match super::pmix::library_status() {
                Ok(lib) => format!("{lib} loads"),
                Err(e) => format!("but it would fail: {e}"),
            };
            return (
                "pmix",
                format!(
                    "{}={ns} is set: started by a PMIx launcher (mpirun, srun --mpi=pmix); {library}",
                    super::pmix::ENV_NAMESPACE
                ),
            );
        }
        (
            "bare",
            format!(
                "neither {ENV_RENDEZVOUS} nor {} is set: a job of one rank",
                super::pmix::ENV_NAMESPACE
            ),
        )
    }
}

/// Identity of this rank within its job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobInfo {
    /// This rank, `0..size`.
    pub rank: usize,
    /// Number of ranks in the job.
    pub size: usize,
    /// Index of this rank among the ranks on its host.
    pub local_rank: usize,
    /// Number of ranks on this host.
    pub local_size: usize,
    /// Random job id chosen by the launcher.
    pub job_id: u64,
    /// Random job key chosen by the launcher; frames of other jobs carry other keys.
    pub job_key: u64,
    /// How the process was started.
    pub start: Start,
    /// The node this rank runs on (ranks of one node share memory).
    pub node: usize,
    /// Ranks of the job on this host (several emulated nodes may share it).
    pub host_ranks: usize,
    /// CPUs the job may use on this host, when the launcher said.
    pub host_cpus: Option<usize>,
}

impl JobInfo {
    /// A job of one rank, for a program started without `volley run`.
    pub fn single() -> Self {
        let pid = std::process::id() as u64;
        Self {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            job_id: pid,
            job_key: random_u64() | 1,
            start: Start::Bare,
            node: 0,
            host_ranks: 1,
            host_cpus: None,
        }
    }

    /// Reads the identity from `VOLLEY_*` variables set by `volley run`; else, when a PMIx
    /// launcher started this process (`PMIX_NAMESPACE` is set), from its PMIx server;
    /// else returns [`JobInfo::single`].
    pub fn from_env() -> Result<Self, BootstrapError> {
        let get = |name: &str| std::env::var(name).ok().filter(|v| !v.is_empty());
        if get(ENV_RENDEZVOUS).is_none() {
            if let Some(namespace) = get(super::pmix::ENV_NAMESPACE) {
                let per_node = match get(super::pmix::ENV_RANKS_PER_NODE) {
                    None => None,
                    Some(v) => Some(v.parse::<usize>().ok().filter(|&n| n > 0).ok_or(
                        BootstrapError::BadEnv {
                            name: super::pmix::ENV_RANKS_PER_NODE,
                            value: v,
                            why: "not a positive integer",
                        },
                    )?),
                };
                return super::pmix::job_info(&namespace, per_node).map(|(job, _)| job);
            }
        }
        Self::from_lookup(|name| std::env::var(name).ok())
    }

    /// Like [`JobInfo::from_env`] with a custom variable lookup (used by tests).
    pub fn from_lookup(get: impl Fn(&str) -> Option<String>) -> Result<Self, BootstrapError> {
        let Some(rendezvous) = get(ENV_RENDEZVOUS) else {
            // A job of several ranks needs its launcher: without one this process would run
            // alone, silently.
            if let Some(size) = get(ENV_SIZE).filter(|s| s.trim() != "1" && !s.is_empty()) {
                return Err(BootstrapError::BadEnv {
                    name: ENV_SIZE,
                    value: size,
                    why: "set without VOLLEY_RENDEZVOUS: start a job of several ranks with \
                          `volley run -n N`",
                });
            }
            return Ok(Self::single());
        };
        let num = |name: &'static str| -> Result<usize, BootstrapError> {
            let value = get(name).ok_or(BootstrapError::BadEnv {
                name,
                value: String::new(),
                why: "missing although VOLLEY_RENDEZVOUS is set",
            })?;
            value.parse().map_err(|_| BootstrapError::BadEnv {
                name,
                value,
                why: "not a non-negative integer",
            })
        };
        let hex = |name: &'static str| -> Result<u64, BootstrapError> {
            let value = get(name).unwrap_or_default();
            u64::from_str_radix(&value, 16).map_err(|_| BootstrapError::BadEnv {
                name,
                value,
                why: "not a hexadecimal u64",
            })
        };
        let info = Self {
            rank: num(ENV_RANK)?,
            size: num(ENV_SIZE)?,
            local_rank: num(ENV_LOCAL_RANK)?,
            local_size: num(ENV_LOCAL_SIZE)?,
            job_id: hex(ENV_JOB_ID)?,
            job_key: hex(ENV_JOB_KEY)?,
            start: Start::Launcher { rendezvous },
            node: match get(ENV_NODE) {
                None => 0,
                Some(_) => num(ENV_NODE)?,
            },
            host_ranks: 0,
            host_cpus: match get(ENV_HOST_CPUS) {
                None => None,
                Some(_) => Some(num(ENV_HOST_CPUS)?.max(1)),
            },
        };
        let info = Self {
            host_ranks: match get(ENV_HOST_RANKS) {
                None => info.local_size,
                Some(_) => num(ENV_HOST_RANKS)?.max(info.local_size),
            },
            ..info
        };
        info.validate()?;
        Ok(info)
    }

    /// Checks that the ranks are in range.
    pub(crate) fn validate(&self) -> Result<(), BootstrapError> {
        let info = self;
        if info.size == 0 || info.rank >= info.size {
            return Err(BootstrapError::BadEnv {
                name: ENV_RANK,
                value: info.rank.to_string(),
                why: "rank must be below VOLLEY_SIZE, which must be positive",
            });
        }
        if info.local_size == 0 || info.local_rank >= info.local_size || info.local_size > info.size
        {
            return Err(BootstrapError::BadEnv {
                name: ENV_LOCAL_RANK,
                value: info.local_rank.to_string(),
                why: "local rank must be below VOLLEY_LOCAL_SIZE <= VOLLEY_SIZE",
            });
        }
        Ok(())
    }
}

/// A random u64 from the kernel, for job ids and keys.
pub fn random_u64() -> u64 {
    let mut buf = [0u8; 8];
    // SAFETY: `buf` is a valid writable buffer of 8 bytes for the duration of the call.
    let n = unsafe { libc::getrandom(buf.as_mut_ptr().cast(), buf.len(), 0) };
    if n != 8 {
        // getrandom cannot fail for 8 bytes after boot; fall back to time and pid mixing.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        return t ^ ((std::process::id() as u64) << 32);
    }
    u64::from_ne_bytes(buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn lookup(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn a_size_without_a_rendezvous_is_refused() {
        let err = JobInfo::from_lookup(lookup(&[(ENV_SIZE, "4")])).unwrap_err();
        assert!(err.to_string().contains("volley run -n N"), "{err}");
        let info = JobInfo::from_lookup(lookup(&[(ENV_SIZE, "1")])).unwrap();
        assert_eq!(info.size, 1);
    }

    #[test]
    fn bare_start_is_single_rank() {
        let info = JobInfo::from_lookup(lookup(&[])).unwrap();
        assert_eq!((info.rank, info.size), (0, 1));
        assert_eq!(info.start, Start::Bare);
    }

    #[test]
    fn full_environment_parses() {
        let info = JobInfo::from_lookup(lookup(&[
            (ENV_RENDEZVOUS, "/tmp/x.sock"),
            (ENV_RANK, "2"),
            (ENV_SIZE, "4"),
            (ENV_LOCAL_RANK, "2"),
            (ENV_LOCAL_SIZE, "4"),
            (ENV_JOB_ID, "00ff"),
            (ENV_JOB_KEY, "abcdef"),
        ]))
        .unwrap();
        assert_eq!(info.rank, 2);
        assert_eq!(info.job_id, 0xff);
        assert_eq!(info.job_key, 0xabcdef);
    }

    #[test]
    fn rank_out_of_range_is_refused() {
        let err = JobInfo::from_lookup(lookup(&[
            (ENV_RENDEZVOUS, "/tmp/x.sock"),
            (ENV_RANK, "4"),
            (ENV_SIZE, "4"),
            (ENV_LOCAL_RANK, "0"),
            (ENV_LOCAL_SIZE, "4"),
            (ENV_JOB_ID, "1"),
            (ENV_JOB_KEY, "1"),
        ]))
        .unwrap_err();
        assert!(err.to_string().contains("VOLLEY_RANK"), "{err}");
    }

    #[test]
    fn garbage_number_is_refused() {
        let err = JobInfo::from_lookup(lookup(&[
            (ENV_RENDEZVOUS, "/tmp/x.sock"),
            (ENV_RANK, "two"),
        ]))
        .unwrap_err();
        assert!(
            err.to_string().contains("not a non-negative integer"),
            "{err}"
        );
    }
}
