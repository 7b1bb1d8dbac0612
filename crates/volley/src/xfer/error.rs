//! Seed 000's xfer layer's errors.

/// What went wrong in an xfer call. A failure of the Active Message layer under it comes as
/// [`Error::Am`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An xfer operation on a communication segment (seed 000's `open_segment` / `xfer`) was
    /// refused: by this rank for a local call, or by the target `rank` for a packet (reported
    /// back to the sender by [`crate::xfer::Xfer::check`]). Nothing was written.
    #[error("xfer segment at rank {rank}: {refusal}")]
    Refused {
        /// The rank that owns the segment.
        rank: usize,
        /// Why.
        refusal: XferRefusal,
    },
    /// The Active Message layer under it failed.
    #[error(transparent)]
    Am(#[from] crate::am::Error),
}

/// Result type of the xfer layer's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

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
