//! The Active Message layer's errors.

use crate::bootstrap::BootstrapError;
use crate::refusal::Refusal;

/// What went wrong in a call of the Active Message layer (sending, registering handlers,
/// starting the job), and what to do about it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The job could not be set up (rendezvous, shared memory, environment).
    #[error(transparent)]
    Bootstrap(#[from] BootstrapError),
    /// A rank outside `0..size` was named as a destination.
    #[error("rank {rank} is not in this job (size {size}); valid ranks are 0..{size}")]
    InvalidRank {
        /// The rank that was named.
        rank: usize,
        /// The number of ranks in the job.
        size: usize,
    },
    /// A handler index that no rank registered was named; nothing was sent.
    #[error(
        "handler index {index} is not registered ({registered} {kind} handlers are registered)"
    )]
    UnknownHandler {
        /// The index that was named.
        index: u16,
        /// How many handlers of this kind are registered.
        registered: usize,
        /// "request" or "reply".
        kind: &'static str,
    },
    /// More than [`crate::MAX_ARGS`] arguments were passed.
    #[error("{given} arguments given; a message carries at most {max}")]
    TooManyArgs {
        /// Number of arguments passed.
        given: usize,
        /// The maximum.
        max: usize,
    },
    /// A payload larger than [`crate::Runtime::max_medium`] was passed where a medium message
    /// carries it (a medium message, a FIFO entry, a conditional write).
    #[error("payload of {len} bytes exceeds the medium maximum of {max} bytes")]
    PayloadTooLarge {
        /// The payload length.
        len: usize,
        /// The maximum medium payload.
        max: usize,
    },
    /// A long payload too large for one network message: a long message to a rank on another
    /// node travels whole (on one host any size that fits the segment goes).
    #[error(
        "long payload of {len} bytes exceeds the {max} bytes a long message to a rank on another node carries; split it"
    )]
    LongTooLarge {
        /// The payload length.
        len: usize,
        /// The maximum for a rank on another node.
        max: usize,
    },
    /// A segment access that does not fit inside the segment.
    #[error(
        "access of {len} bytes at offset {offset} does not fit in the {segment_len}-byte segment"
    )]
    OutOfBounds {
        /// Requested offset.
        offset: usize,
        /// Requested length.
        len: usize,
        /// Length of the segment.
        segment_len: usize,
    },
    /// The ranks registered different handler tables; every rank must register the same
    /// handlers, by the same names, in the same order.
    #[error("handler tables differ: rank {rank} registered {theirs:?} but rank {me} registered {mine:?}")]
    HandlerTableMismatch {
        /// This rank.
        me: usize,
        /// The first rank whose table differs.
        rank: usize,
        /// This rank's table.
        mine: Vec<String>,
        /// The other rank's table.
        theirs: Vec<String>,
    },
    /// The ranks were started with different runtime settings (for example `VOLLEY_RING_SLOTS`).
    #[error("runtime settings differ: rank {rank} has {theirs} but rank {me} has {mine}")]
    ConfigMismatch {
        /// This rank.
        me: usize,
        /// The rank that differs.
        rank: usize,
        /// This rank's settings.
        mine: String,
        /// The other rank's settings.
        theirs: String,
    },
    /// A `VOLLEY_*` variable has a value its setting does not accept (the text names both,
    /// and what is accepted).
    #[error("{0}")]
    Settings(String),
    /// A setting read from the environment or the builder is invalid.
    #[error("invalid setting {name}={value}: {why}")]
    InvalidConfig {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: String,
        /// Why it was refused.
        why: &'static str,
    },
    /// A non-blocking send (`try_request_*`, `try_reply_*`) found no room towards `rank` at
    /// once (shared memory: its ring full or no free medium buffer; UDP: the reliable window
    /// full; TCP: the send queue full). Nothing was sent and no handler ran: poll (for
    /// example with [`crate::Runtime::wait_sendable`]) and try again, or send blocking.
    #[error("no room to send to rank {rank} on the {channel} channel now; poll and try again")]
    WouldBlock {
        /// The destination.
        rank: usize,
        /// `"request"` or `"reply"`.
        channel: &'static str,
    },
    /// A long message was refused by the target's checks (its range lies on a segment, which
    /// only keyed one-sided writes may change); the target's memory is unchanged.
    #[error("rank {rank} refused the long message: {reason}")]
    Refused {
        /// The target rank.
        rank: usize,
        /// Why.
        reason: Refusal,
    },
    /// The runtime has been finalized; it sends nothing more.
    #[error("the runtime is finalized; no more messages can be sent")]
    Finalized,
    /// More handlers were registered than indices exist.
    #[error("{registered} {kind} handlers registered; at most {max} are possible")]
    TooManyHandlers {
        /// "request" or "reply".
        kind: &'static str,
        /// How many were registered.
        registered: usize,
        /// The maximum.
        max: usize,
    },
    /// Two handlers were registered under one name.
    #[error("handler name {0:?} is registered twice")]
    DuplicateHandler(String),
    /// The network transport could not be set up (bind, connect); the text says why.
    #[error("network: {0}")]
    Network(String),
}

/// Result type of the Active Message layer's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
