//! The sparse layers' errors.

use volley_prim::PrimError;

/// What can go wrong in the conditional fetch or the inspector/executor.
#[derive(Debug, thiserror::Error)]
pub enum SparseError {
    /// A primitive failed (bad rank, finalized layer, full own buffer, ...).
    #[error(transparent)]
    Prim(#[from] PrimError),
    /// The typed layer failed (level-scheduled solve).
    #[error(transparent)]
    Typed(#[from] crate::typed::TypedError),
    /// An unknown outside the system.
    #[error("unknown {index} is outside the system of {n} unknowns")]
    UnknownIndex {
        /// The unknown asked for.
        index: usize,
        /// Unknowns in the system.
        n: usize,
    },
    /// A rank produced (or a schedule named) an unknown another rank owns.
    #[error("unknown {index} belongs to rank {owner}, not to rank {rank}")]
    NotOwner {
        /// The unknown.
        index: usize,
        /// Its owner.
        owner: usize,
        /// The rank that tried.
        rank: usize,
    },
    /// An unknown produced twice in one solve.
    #[error("unknown {0} was already produced in this solve")]
    AlreadyProduced(usize),
    /// This rank asked for one of its own unknowns before producing it: waiting would never
    /// end.
    #[error("unknown {0} is this rank's own and not produced yet")]
    NotProducedHere(usize),
    /// The owner finished its solve without producing the unknown this rank asked for.
    #[error("rank {owner} finished without producing unknown {index}")]
    NeverProduced {
        /// The unknown.
        index: usize,
        /// Its owner.
        owner: usize,
    },
    /// This rank finished with requests parked for unknowns it never produced; each
    /// requester was told ([`SparseError::NeverProduced`]).
    #[error("finished with {} request(s) parked for unknowns never produced: {}", .0.len(), fmt_parked(.0))]
    ParkedAtFinish(Vec<(usize, usize)>),
    /// The network buffer held a packet these layers do not send (another layer's, or a
    /// corrupt one).
    #[error("unexpected packet in the network buffer: {0}")]
    Protocol(String),
    /// A setting out of range (for example a buffer too small for the ranks).
    #[error("bad configuration: {0}")]
    Config(String),
}

fn fmt_parked(v: &[(usize, usize)]) -> String {
    let shown: Vec<String> = v
        .iter()
        .take(8)
        .map(|(i, r)| format!("unknown {i} for rank {r}"))
        .collect();
    let more = if v.len() > 8 { ", ..." } else { "" };
    format!("{}{more}", shown.join(", "))
}

/// The sparse layers' result.
pub type Result<T> = std::result::Result<T, SparseError>;
