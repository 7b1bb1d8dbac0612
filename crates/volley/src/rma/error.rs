//! The one-sided layer's errors.

use crate::refusal::Refusal;

/// What went wrong in a one-sided call (segments, puts, gets, atomics, seed 002's memory-based
/// operations), and what to do about it. A failure of the Active Message layer under it comes
/// as [`Error::Am`].
#[derive(Debug, thiserror::Error)]
pub enum Error {
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
    /// A payload larger than the medium maximum where one medium message carries it (a FIFO
    /// entry, a conditional write, a signal's data on some paths).
    #[error("payload of {len} bytes exceeds the medium maximum of {max} bytes")]
    PayloadTooLarge {
        /// The payload length.
        len: usize,
        /// The maximum medium payload.
        max: usize,
    },
    /// A packet sent without flow control ([`crate::rma::Flow::Unreliable`]) whose request
    /// or reply would not fit one unsequenced datagram to its target (over UDP such a
    /// packet is never split, since a lost piece could not be resent); nothing was sent.
    #[error(
        "an unreliable packet's {what} of {len} bytes exceeds the {max} bytes one unsequenced \
         datagram to rank {rank} carries; send it reliably or in smaller packets"
    )]
    UnreliableTooLarge {
        /// The target rank.
        rank: usize,
        /// `"request"` or `"reply"`.
        what: &'static str,
        /// Its length.
        len: usize,
        /// What one datagram carries.
        max: usize,
    },
    /// A setting or an argument of the one-sided layer is invalid.
    #[error("invalid setting {name}={value}: {why}")]
    InvalidConfig {
        /// The setting's (or argument's) name.
        name: &'static str,
        /// The value given.
        value: String,
        /// Why it was refused.
        why: &'static str,
    },
    /// A combined packet breaks one of seed 002's combining rules (see
    /// [`crate::rma::Combined::finish`]; rule 0: an empty packet); nothing was sent.
    #[error("illegal combined packet (rule {rule}): {why}")]
    IllegalCombination {
        /// The rule broken.
        rule: u8,
        /// How.
        why: String,
    },
    /// The Active Message layer under it failed (a bad rank, a finalized runtime, ...).
    #[error(transparent)]
    Am(#[from] crate::am::Error),
}

impl Error {
    /// The Active Message layer's error, if that is what this is.
    pub fn am(&self) -> Option<&crate::am::Error> {
        match self {
            Error::Am(e) => Some(e),
            _ => None,
        }
    }
}

/// Result type of the one-sided layer's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;
