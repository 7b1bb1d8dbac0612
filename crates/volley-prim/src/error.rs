//! The layer's errors.

/// Why a primitive failed. Nothing was sent or consumed unless the variant says otherwise.
#[derive(Debug, thiserror::Error)]
pub enum PrimError {
    /// A rank outside the job.
    #[error("rank {rank} is not in the job of {size} ranks")]
    InvalidRank {
        /// The rank asked for.
        rank: usize,
        /// Ranks in the job.
        size: usize,
    },
    /// A multicast to an empty rank list.
    #[error("multicast to an empty rank list")]
    EmptyList,
    /// A rank listed twice in a multicast.
    #[error("rank {0} is listed twice in a multicast")]
    DuplicateRank(usize),
    /// `PREVIOUS_CHAIN` with no chain open.
    #[error("PREVIOUS_CHAIN used with no chain open")]
    NoOpenChain,
    /// A new destination while a chain is open (close it with `is_more = false` first).
    #[error("a chain is open to {0:?}: close it before sending elsewhere")]
    ChainOpen(String),
    /// Finalize found a chain still open; it was closed (the receivers see its end).
    #[error("a chain to {0:?} was still open at finalize (closed now)")]
    ChannelOpenAtFinalize(String),
    /// A procedure id with no registered handler (at the sender, or met at the receiver: then
    /// the packet was consumed and its chained arguments, if any, stay in the buffer as data).
    #[error("no handler registered under id {id}{}", from.map(|r| format!(" (packet from rank {r})")).unwrap_or_default())]
    UnknownHandler {
        /// The id.
        id: u32,
        /// The sending rank, when the packet came from the network.
        from: Option<usize>,
    },
    /// A handler id outside 1..=MAX_HANDLER_ID.
    #[error("handler id {0} is outside 1..={max}", max = crate::MAX_HANDLER_ID)]
    BadHandlerId(u32),
    /// A data receive of a size other than the waiting packet's (nothing consumed).
    #[error("the waiting data packet has {have} bytes, the receive asked for {want}")]
    SizeMismatch {
        /// Bytes in the packet.
        have: usize,
        /// Bytes asked for.
        want: usize,
    },
    /// A receive of one kind found the other kind first (nothing consumed).
    #[error("the next packet is a {found}, the receive asked for a {want}")]
    WrongType {
        /// What is waiting.
        found: &'static str,
        /// What was asked for.
        want: &'static str,
    },
    /// Bare chained data read across the start of the next packet (nothing consumed).
    #[error("the chained data ends after {have} bytes, the receive asked for {want}")]
    ChainEnded {
        /// Bare bytes before the next packet.
        have: usize,
        /// Bytes asked for.
        want: usize,
    },
    /// One send larger than a whole input buffer.
    #[error("{bytes} bytes do not fit a {capacity}-byte input buffer")]
    TooLarge {
        /// Bytes of the packet (header included).
        bytes: usize,
        /// The buffer's capacity.
        capacity: usize,
    },
    /// A send to this rank's own full buffer: waiting would never end.
    #[error("this rank's own input buffer is full (receive before sending more to yourself)")]
    OwnBufferFull,
    /// `INTERNAL` without a communication thread.
    #[error("the internal buffer needs the communication thread (progress mode comm-thread)")]
    NoCommThread,
    /// A configuration value out of range.
    #[error("bad configuration: {0}")]
    Config(String),
    /// Used after finalize.
    #[error("the primitives layer was finalized")]
    Finalized,
    /// Remote memory used without [`crate::PrimConfig::remote_memory`].
    #[error("no remote memory configured (PrimConfig::remote_memory)")]
    NoRemoteMemory,
    /// A remote read or write outside the remote memory (nothing sent).
    #[error("{len} bytes at offset {offset} are outside the {size}-byte remote memory")]
    OutOfRange {
        /// The offset asked for.
        offset: usize,
        /// The length asked for.
        len: usize,
        /// The remote memory's size.
        size: usize,
    },
    /// A completion flag outside the configured ones (nothing sent).
    #[error("completion flag {flag} is not one of the {flags} configured")]
    BadFlag {
        /// The flag asked for.
        flag: usize,
        /// Flags configured.
        flags: usize,
    },
    /// volley's one-sided layer failed.
    #[error(transparent)]
    Rma(#[from] volley::rma::Error),
}

/// The layer's result.
pub type Result<T> = std::result::Result<T, PrimError>;
