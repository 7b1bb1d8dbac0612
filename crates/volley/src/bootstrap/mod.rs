//! Bootstrap: who am I, how many are we, and how do I reach the others.
//!
//! A rank learns its identity from the environment that `volley run` sets, or from the PMIx
//! server of a cluster launcher ([`pmix`]); a program started bare is a job of one rank
//! ([`JobInfo::from_env`]). Endpoint information (here: each rank's shared-memory region,
//! passed as a file descriptor) is exchanged through the launcher's [`rendezvous`] socket, or
//! under PMIx through a fence and a node-local rendezvous, and that exchange doubles as the
//! init barrier.
//!
//! This layer knows nothing about messages or handlers: it moves opaque blobs and descriptors.

mod job;
pub mod pmix;
pub mod rendezvous;

pub use job::{random_u64, Start, ENV_HOST_CPUS, ENV_HOST_RANKS, ENV_RENDEZVOUS, ENV_SIZE};
pub use job::{
    JobInfo, ENV_JOB_ID, ENV_JOB_KEY, ENV_LOCAL_RANK, ENV_LOCAL_SIZE, ENV_NODE, ENV_RANK,
};

/// What went wrong while setting up the job.
#[derive(Debug, thiserror::Error)]
pub enum BootstrapError {
    /// A `VOLLEY_*` variable is malformed: the program was probably started by hand with a
    /// partial environment; start it with `volley run` or without any `VOLLEY_*` variables.
    #[error("environment variable {name}={value:?} is invalid: {why}")]
    BadEnv {
        /// Variable name.
        name: &'static str,
        /// Its value.
        value: String,
        /// Why it was refused.
        why: &'static str,
    },
    /// The rendezvous socket could not be reached or spoke an unexpected protocol.
    #[error("rendezvous at {path}: {why}")]
    Rendezvous {
        /// Socket path.
        path: String,
        /// What happened.
        why: String,
    },
    /// Joining a job started by a PMIx launcher failed (the library, the server, or what
    /// it answered).
    #[error("{0}")]
    Pmix(String),
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Os {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

impl BootstrapError {
    pub(crate) fn os(what: &'static str, source: impl Into<std::io::Error>) -> Self {
        Self::Os {
            what,
            source: source.into(),
        }
    }
}
