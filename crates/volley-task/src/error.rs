//! The task layer's errors.

/// What went wrong in a task-layer call.
#[derive(Debug, thiserror::Error)]
pub enum TaskError {
    /// No task of this logical id is known to its home rank (counted there:
    /// [`crate::Tasks::unknown_lookups`]).
    #[error("unknown logical task {task}")]
    UnknownTask {
        /// The logical id.
        task: u64,
    },
    /// [`crate::Tasks::create`] with an id that is taken.
    #[error("logical task {task} exists already")]
    Exists {
        /// The logical id.
        task: u64,
    },
    /// A call that needs the task's owner, made at another rank.
    #[error("logical task {task} is not owned by rank {rank}")]
    NotHere {
        /// The logical id.
        task: u64,
        /// This rank.
        rank: usize,
    },
    /// The task has no segment of this index.
    #[error("logical task {task} has {count} segments, not one of index {index}")]
    NoSuchSegment {
        /// The logical id.
        task: u64,
        /// The index asked for.
        index: usize,
        /// How many it has.
        count: usize,
    },
    /// A migration was asked of a rank that is neither the task's owner nor its new owner,
    /// or to the rank that owns it already.
    #[error("cannot move task {task} to rank {to} from rank {me}: {why}")]
    BadMigration {
        /// The logical id.
        task: u64,
        /// The rank asked to take it.
        to: usize,
        /// This rank.
        me: usize,
        /// Why.
        why: &'static str,
    },
    /// A rank outside the job.
    #[error("rank {rank} is not in this job of {size} ranks")]
    InvalidRank {
        /// The rank given.
        rank: usize,
        /// The job's size.
        size: usize,
    },
    /// A first-contact message larger than one medium message.
    #[error("a first-contact message of {len} bytes exceeds the medium maximum of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The maximum.
        max: usize,
    },
    /// The one-sided layer refused or failed (a refusal that is not a move: a wrong offset,
    /// a permission the segment lacks, ...).
    #[error(transparent)]
    Rma(#[from] volley::rma::Error),
    /// The Active Message layer failed.
    #[error(transparent)]
    Am(#[from] volley::am::Error),
}

/// Result type of the task layer.
pub type Result<T, E = TaskError> = std::result::Result<T, E>;
