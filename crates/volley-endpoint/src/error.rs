//! The layer's errors: refusals at the sender (nothing was sent) and bad names.

use crate::name::EndpointName;

/// What went wrong in a map, send or name decoding. A send that fails sent nothing.
#[derive(Debug, thiserror::Error)]
pub enum EndpointError {
    /// The runtime refused (finalized, a peer gone, ...).
    #[error(transparent)]
    Am(#[from] volley::am::Error),
    /// A translation index beyond the table.
    #[error("translation index {index} is out of range; the table has indices 0..{len}")]
    BadIndex {
        /// The index given.
        index: usize,
        /// Entries in the table.
        len: usize,
    },
    /// A send through a translation index that maps nothing.
    #[error("translation index {0} is not mapped; map(index, name, tag) it first")]
    Unmapped(usize),
    /// `map` on an index already mapped: unmap it first.
    #[error("translation index {0} is already mapped; unmap it first")]
    IndexInUse(usize),
    /// `map_any` found no free index.
    #[error("the translation table is full ({0} entries)")]
    TableFull(usize),
    /// A name whose rank is not in this job.
    #[error("{name} names rank {}, but this job has {size} ranks", name.rank)]
    RankOutOfRange {
        /// The name.
        name: EndpointName,
        /// Ranks in the job.
        size: usize,
    },
    /// A name from another job (its shared segment is not this job's).
    #[error("{name} belongs to another job (this job is {job:016x})")]
    WrongJob {
        /// The name.
        name: EndpointName,
        /// This job's id.
        job: u64,
    },
    /// A name whose node does not agree with where its rank runs in this job.
    #[error(
        "{name} says node {}, but rank {} is {} this rank's node",
        name.node,
        name.rank,
        if *local { "on" } else { "not on" }
    )]
    WrongNode {
        /// The name.
        name: EndpointName,
        /// Whether its rank shares this rank's node.
        local: bool,
    },
    /// Handler index 0 named by a request or reply: it is reserved for returned messages.
    #[error("handler index 0 is reserved for returned messages")]
    ReservedHandler,
    /// More arguments than a message carries.
    #[error("{given} arguments given; an endpoint message carries at most {max}")]
    TooManyArgs {
        /// Arguments given.
        given: usize,
        /// The maximum, [`crate::MAX_ARGS`].
        max: usize,
    },
    /// A payload beyond the runtime's medium size.
    #[error("payload of {len} bytes; an endpoint message carries at most {max}")]
    PayloadTooLarge {
        /// Bytes given.
        len: usize,
        /// The runtime's [`volley::Runtime::max_medium`].
        max: usize,
    },
    /// A bad endpoint name.
    #[error(transparent)]
    Name(#[from] NameError),
}

/// Why an encoded name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// Not [`crate::NAME_BYTES`] bytes.
    #[error("an endpoint name is {} bytes, not {0}", crate::NAME_BYTES)]
    Length(usize),
    /// The bytes do not start with the name's magic (`VEP1`).
    #[error("not an endpoint name (it does not start with VEP1)")]
    Magic,
    /// Text that is not `ep:<16 hex digits>:<node>:<rank>:<id>.<generation>`.
    #[error("{0:?} is not an endpoint name (ep:<16 hex digits>:<node>:<rank>:<id>.<generation>)")]
    Text(String),
}

/// The layer's result.
pub type Result<T, E = EndpointError> = std::result::Result<T, E>;
