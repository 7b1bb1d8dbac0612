//! The hang report: what a rank tells `volley run` when asked what it is doing (`SIGUSR1` to
//! the launcher, or `volley run --hang-report-after SECONDS`).
//!
//! A rank that computes without polling cannot answer through the engine, so each rank that
//! `volley run` started gets a reporter thread (`reporter`), blocked on a socket the launcher
//! hands it (named by [`ENV_REPORT_FD`]). On a request byte it reads what the rank's thread
//! publishes and answers with one line of JSON, a [`RankReport`]. It reads only atomics,
//! shared memory and what never changes after `build()`: the published long wait
//! (`activity`), the statistics and per-peer counters, the rings' credit, the network's
//! backlog (published by the next network poll after the reporter asks) and what layers
//! above report (the one-sided layer's operations in flight). How long a rank has been
//! computing or running a handler is measured by the reporter itself, which samples the
//! rank's call and poll counters four times a second, so the message paths pay nothing
//! for it. A rank started without `volley run` has no reporter.
//!
//! ```text
//! launcher ──byte──▶ reporter thread ──reads──▶ activity, counters, rings, backlog
//!          ◀─JSON───
//! ```

pub(crate) mod activity;
pub(crate) mod reporter;
mod snapshot;
mod wire;

pub(crate) use activity::{Activity, Doing, LongWait};
pub use wire::{Outstanding, PeerReport, RankReport, RankState, RunningHandler};

/// The variable through which `volley run` gives a rank the descriptor of its end of the
/// report socket.
pub const ENV_REPORT_FD: &str = "VOLLEY_REPORT_FD";

/// What a layer above adds to its rank's report: its operations in flight. Called on the
/// reporter thread, so it may read only what is safe to read from there (atomics).
pub type OutstandingFn = Box<dyn Fn(&mut Vec<Outstanding>) + Send + Sync>;
