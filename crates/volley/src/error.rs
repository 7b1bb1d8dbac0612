//! The error type of every volley call, and the reasons a one-sided access is refused.
//!
//! One enum for the whole crate, so that a program matches one type whichever layer refused
//! its call; its variants say which layer they come from. It depends on no layer but the
//! bootstrap's error, so every layer can return it.

use crate::bootstrap::BootstrapError;

/// What went wrong in a volley call, and what to do about it.
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
    /// A one-sided access was refused by the target's checks; the target's memory is
    /// unchanged.
    #[error("rank {rank} refused the access: {reason}")]
    Refused {
        /// The target rank.
        rank: usize,
        /// Why.
        reason: Refusal,
    },
    /// No room left in the segment area (or no free segment id) for a new segment.
    #[error("no room for a {len}-byte segment in the {area}-byte segment area (VOLLEY_SEGMENT_BYTES) or all segment ids in use")]
    SegmentSpace {
        /// Requested length.
        len: usize,
        /// Size of the whole area.
        area: usize,
    },
    /// A symmetric allocation came out differently on another rank (no room there, another
    /// segment id, or other arguments); no rank kept a segment.
    #[error("symmetric allocation differs: rank {rank} has {theirs} but rank {me} has {mine}")]
    SymmetricMismatch {
        /// This rank.
        me: usize,
        /// The first rank whose allocation differs.
        rank: usize,
        /// What this rank got.
        mine: String,
        /// What the other rank got.
        theirs: String,
    },
    /// Too many non-blocking one-sided operations are in flight.
    #[error("more than {max} one-sided operations in flight; wait for some first")]
    TooManyOutstanding {
        /// The limit.
        max: usize,
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
    /// An xfer operation on a communication segment (seed 000's `open_segment` / `xfer`) was
    /// refused: by this rank for a local call, or by the target `rank` for a packet (reported
    /// back to the sender by [`crate::xfer::Xfer::check`]). Nothing was written.
    #[error("xfer segment at rank {rank}: {refusal}")]
    Xfer {
        /// The rank that owns the segment.
        rank: usize,
        /// Why.
        refusal: XferRefusal,
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

/// Result type of volley calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a remote access was refused. The target's memory is unchanged whenever one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The segment id names no live segment at the target.
    #[error("no such segment")]
    NoSuchSegment,
    /// The key does not match the segment's key.
    #[error("wrong key")]
    WrongKey,
    /// The range does not fit in the segment (or its length overflows).
    #[error(
        "access of {len} bytes at offset {offset} does not fit the {segment_len}-byte segment"
    )]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Segment length.
        segment_len: u64,
    },
    /// The segment does not grant remote reads.
    #[error("the segment is not readable")]
    NotReadable,
    /// The segment does not grant remote writes.
    #[error("the segment is not writable")]
    NotWritable,
    /// The segment does not grant remote atomics.
    #[error("the segment does not allow atomics")]
    NoAtomics,
    /// An atomic operation (or a flag, reference or FIFO word) on a word that is not 8-byte
    /// aligned.
    #[error("atomic operation on an offset that is not 8-byte aligned")]
    Misaligned,
    /// No memory-based FIFO with the handle's geometry lives at that offset.
    #[error("no FIFO with this entry size and capacity at that offset")]
    NotAFifo,
    /// A FIFO entry whose length is not the FIFO's entry size.
    #[error("the entry's length is not the FIFO's entry size")]
    EntrySize,
    /// A long message whose payload would land on a segment: segments are written only by
    /// one-sided operations that present the segment's key and find it writable; long
    /// messages go to the rest of the segment area.
    #[error(
        "the long message's range lies on a segment, which only keyed one-sided writes may change"
    )]
    OnSegment,
    /// No signal structure with the handle's id and configuration lives at that offset (never
    /// created, destroyed, or overwritten by plain writes).
    #[error("no signal structure with this id and configuration at that offset")]
    NotASignal,
    /// A signal named a program (source-specified, SSP) that no rank registered with
    /// `register_signal`, or a structure whose type takes none.
    #[error("the signal names a program that is not registered")]
    UnknownSignal,
}

/// Why an xfer operation on a communication segment was refused; nothing was written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum XferRefusal {
    /// All 256 segment ids are in use.
    #[error("all 256 segment ids are in use; close one first")]
    NoFreeSegment,
    /// The id names no open segment: never opened, closed since (its end function returned
    /// 0), or opened again since under a new generation.
    #[error("segment {number} (generation {generation}) is not open")]
    NotOpen {
        /// The segment's number, 0..256.
        number: u8,
        /// The generation the id carries.
        generation: u16,
    },
    /// The bytes do not fit in the segment's memory.
    #[error("{len} bytes at offset {offset} do not fit the {segment_len}-byte segment")]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// The segment's length.
        segment_len: u64,
    },
    /// More bytes than the segment still expects (its remaining count would go below zero),
    /// by a packet or by `shorten_segment`.
    #[error("{len} bytes but the segment expects only {remaining} more")]
    PastCount {
        /// The bytes of the packet or the shortening.
        len: u64,
        /// What the segment still expected.
        remaining: u64,
    },
    /// An offset that does not fit the 40 bits of a segment address.
    #[error("offset {offset} does not fit the 40 bits of a segment address")]
    OffsetTooLarge {
        /// The offset.
        offset: u64,
    },
}

impl XferRefusal {
    /// Encodes the refusal in two words for a notice message: (code and the first field,
    /// the second field).
    pub(crate) fn encode(self) -> [u64; 3] {
        match self {
            XferRefusal::NoFreeSegment => [1, 0, 0],
            XferRefusal::NotOpen { number, generation } => [2, number as u64, generation as u64],
            XferRefusal::OutOfBounds {
                offset,
                len,
                segment_len,
            } => [3 | offset << 8, len, segment_len],
            XferRefusal::PastCount { len, remaining } => [4, len, remaining],
            XferRefusal::OffsetTooLarge { offset } => [5, offset, 0],
        }
    }

    /// Decodes [`XferRefusal::encode`]'s words.
    pub(crate) fn decode(w: [u64; 3]) -> Option<Self> {
        Some(match w[0] & 0xff {
            1 => XferRefusal::NoFreeSegment,
            2 => XferRefusal::NotOpen {
                number: w[1] as u8,
                generation: w[2] as u16,
            },
            3 => XferRefusal::OutOfBounds {
                offset: w[0] >> 8,
                len: w[1],
                segment_len: w[2],
            },
            4 => XferRefusal::PastCount {
                len: w[1],
                remaining: w[2],
            },
            5 => XferRefusal::OffsetTooLarge { offset: w[1] },
            _ => return None,
        })
    }
}

impl Refusal {
    /// Encodes for a status word (0 is success), for layers that carry a refusal in message
    /// arguments.
    pub fn code(self) -> u64 {
        match self {
            Refusal::NoSuchSegment => 1,
            Refusal::WrongKey => 2,
            Refusal::OutOfBounds { .. } => 3,
            Refusal::NotReadable => 4,
            Refusal::NotWritable => 5,
            Refusal::NoAtomics => 6,
            Refusal::Misaligned => 7,
            Refusal::NotAFifo => 8,
            Refusal::EntrySize => 9,
            Refusal::OnSegment => 10,
            Refusal::NotASignal => 11,
            Refusal::UnknownSignal => 12,
        }
    }

    /// Decodes a status word; `offset`/`len`/`segment_len` fill an out-of-bounds refusal.
    /// `None` for 0 and for codes no refusal has.
    pub fn from_code(code: u64, offset: u64, len: u64, segment_len: u64) -> Option<Self> {
        Some(match code {
            1 => Refusal::NoSuchSegment,
            2 => Refusal::WrongKey,
            3 => Refusal::OutOfBounds {
                offset,
                len,
                segment_len,
            },
            4 => Refusal::NotReadable,
            5 => Refusal::NotWritable,
            6 => Refusal::NoAtomics,
            7 => Refusal::Misaligned,
            8 => Refusal::NotAFifo,
            9 => Refusal::EntrySize,
            10 => Refusal::OnSegment,
            11 => Refusal::NotASignal,
            12 => Refusal::UnknownSignal,
            _ => return None,
        })
    }
}
