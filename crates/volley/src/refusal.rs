//! Why an access to memory was refused: the one type that several layers carry (the
//! transport contract's long-message guard, the Active Message layer's long messages, the
//! one-sided layer's operations). Each layer's own errors are in its folder
//! ([`crate::am::Error`], [`crate::rma::Error`], [`crate::xfer::Error`]); [`crate::Error`] is
//! any of them, for programs that use several layers.

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
