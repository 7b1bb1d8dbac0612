//! The global layer's errors: each names what was wrong, and no memory changed.

use volley::rma::Refusal;

/// What went wrong in a global operation.
#[derive(Debug, thiserror::Error)]
pub enum GlobalError {
    /// An error of the layers below (a finalized runtime, a dead peer, no room for a segment,
    /// ...). Their refusals become [`GlobalError::Refused`].
    #[error(transparent)]
    Volley(volley::Error),
    /// `VOLLEY_STRATEGY` (or a parsed name) is not a strategy.
    #[error("unknown strategy {0:?}: expected proc, np or hw (VOLLEY_STRATEGY)")]
    InvalidStrategy(String),
    /// A pointer names a rank outside the job.
    #[error("rank {rank} is not in this job (PROCS = {procs})")]
    InvalidRank {
        /// The rank named.
        rank: usize,
        /// The job size.
        procs: usize,
    },
    /// The access does not fit the segment the pointer names (checked before anything is
    /// sent).
    #[error("access of {len} bytes at offset {offset} does not fit the {segment_len}-byte segment of rank {rank}")]
    OutOfBounds {
        /// The owner.
        rank: usize,
        /// Byte offset in the segment.
        offset: usize,
        /// Bytes accessed.
        len: usize,
        /// The segment's length.
        segment_len: usize,
    },
    /// A typed pointer whose offset is not a multiple of its type's alignment.
    #[error("offset {offset} is not aligned to {align} bytes for this pointer's type")]
    Misaligned {
        /// Byte offset.
        offset: usize,
        /// Required alignment.
        align: usize,
    },
    /// The owner refused the access (freed or foreign segment, wrong key, permissions); its
    /// memory is unchanged.
    #[error("rank {rank} refused the access: {reason}")]
    Refused {
        /// The owner.
        rank: usize,
        /// Why.
        reason: Refusal,
    },
    /// `to_local` of a pointer owned by another rank.
    #[error("to_local on rank {me} of a pointer owned by rank {owner}: only the owner has a local address for it")]
    NotLocal {
        /// This rank.
        me: usize,
        /// The pointer's owner.
        owner: usize,
    },
    /// `to_global` of an address that lies in no array this layer allocated.
    #[error("address {addr:#x} lies in no spread array of this rank")]
    NotGlobal {
        /// The address.
        addr: usize,
    },
    /// Ranks called different collectives, or the same one with different sizes or roots.
    #[error(
        "collective #{epoch} mismatch: rank {me} called {mine} but rank {rank} called {theirs}"
    )]
    CollectiveMismatch {
        /// Collective sequence number (every rank counts its collective calls).
        epoch: u64,
        /// This rank.
        me: usize,
        /// The rank that differs.
        rank: usize,
        /// What this rank called.
        mine: String,
        /// What the other rank called.
        theirs: String,
    },
    /// Buffers of a collective call that do not fit together (for example a receive buffer
    /// shorter than the data it must hold).
    #[error("{0}")]
    BadArguments(String),
    /// One-way stores (or pushes) were refused at their target; the data was not written.
    #[error("{count} store(s) were refused at rank {rank}; the first: {reason}")]
    StoreRefused {
        /// A rank that refused.
        rank: usize,
        /// How many it refused.
        count: u64,
        /// The first refusal.
        reason: Refusal,
    },
    /// A bucket received more pushes than it holds; the excess was dropped.
    #[error("bucket of rank {rank} received {pushed} pushes but holds {capacity}: {} dropped", pushed - capacity)]
    BucketOverflow {
        /// The owner.
        rank: usize,
        /// Pushes received.
        pushed: u64,
        /// Capacity.
        capacity: u64,
    },
    /// An atomic procedure index that was never registered.
    #[error("atomic procedure {index} is not registered ({registered} are)")]
    UnknownProcedure {
        /// The index named.
        index: usize,
        /// How many are registered.
        registered: usize,
    },
    /// A single-copy transfer of a large collective to or from another process of this node
    /// failed after the kernel had allowed it at setup.
    #[error("copying to or from rank {rank}'s memory failed: {source}")]
    CrossMemory {
        /// The other rank.
        rank: usize,
        /// What the kernel said.
        source: std::io::Error,
    },
}

/// Results of the global layer.
pub type Result<T, E = GlobalError> = std::result::Result<T, E>;

impl From<volley::Error> for GlobalError {
    /// A refusal of the one-sided layer is this layer's refusal; anything else is wrapped.
    fn from(e: volley::Error) -> Self {
        match e {
            volley::Error::Rma(volley::rma::Error::Refused { rank, reason }) => {
                GlobalError::Refused { rank, reason }
            }
            e => GlobalError::Volley(e),
        }
    }
}

impl From<volley::rma::Error> for GlobalError {
    fn from(e: volley::rma::Error) -> Self {
        volley::Error::from(e).into()
    }
}

impl From<volley::am::Error> for GlobalError {
    fn from(e: volley::am::Error) -> Self {
        GlobalError::Volley(e.into())
    }
}

impl GlobalError {
    /// The error for a refusal reported by `rank`.
    pub(crate) fn refused(rank: usize, reason: Refusal) -> Self {
        GlobalError::Refused { rank, reason }
    }
}
