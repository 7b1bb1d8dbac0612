//! The tag-matching layer's errors: each says what went wrong and what to do.

/// What went wrong in a send, receive or probe.
#[derive(Debug, thiserror::Error)]
pub enum MsgError {
    /// A rank outside the job was named as a destination or a source.
    #[error("rank {rank} is not in this job (size {size}); valid ranks are 0..{size}")]
    InvalidRank {
        /// The rank named.
        rank: usize,
        /// Ranks in the job.
        size: usize,
    },
    /// A tag above [`crate::MAX_TAG`].
    #[error("tag {tag} is out of range; tags are 0..={max}")]
    TagOutOfRange {
        /// The tag given.
        tag: u64,
        /// The largest tag.
        max: u64,
    },
    /// The matched message is longer than the receive buffer. Nothing was consumed: the
    /// message is still there for a receive with a larger buffer (or [`crate::Msg::recv`]).
    #[error(
        "the message from rank {src} with tag {tag} has {len} bytes, the receive buffer only {capacity}; \
         it is still queued: receive it with a larger buffer"
    )]
    BufferTooSmall {
        /// The message's sender.
        src: usize,
        /// Its tag.
        tag: u64,
        /// Its length.
        len: usize,
        /// The buffer's length.
        capacity: usize,
    },
    /// This rank's share of `dest`'s unexpected queue is used up by messages `dest` has not
    /// received yet: the message was not sent (it is still the caller's). `dest` frees room as
    /// it receives; a blocking [`crate::Msg::send`] waits for that instead of failing.
    #[error(
        "rank {dest}'s unexpected queue has no room for this message: {in_use} of this rank's \
         {share} bytes there are taken by messages it has not received yet (this message needs \
         {need}); nothing was sent: wait for it to receive, or raise VOLLEY_MSG_UNEXPECTED_BYTES"
    )]
    UnexpectedFull {
        /// The destination.
        dest: usize,
        /// Bytes of `dest`'s unexpected queue this sender may fill.
        share: usize,
        /// Bytes of the share in use.
        in_use: usize,
        /// Bytes this message needs.
        need: usize,
    },
    /// The runtime has been finalized: no more messages move.
    #[error("the runtime is finalized; no more messages can be sent or received")]
    Finalized,
    /// A setting of this layer is invalid.
    #[error("invalid setting {name}={value}: {why}")]
    InvalidConfig {
        /// The setting.
        name: &'static str,
        /// The value given.
        value: String,
        /// What is accepted.
        why: String,
    },
    /// The runtime refused an operation underneath.
    #[error(transparent)]
    Runtime(#[from] volley::am::Error),
}

/// Result of the tag-matching layer's calls.
pub type Result<T, E = MsgError> = std::result::Result<T, E>;
