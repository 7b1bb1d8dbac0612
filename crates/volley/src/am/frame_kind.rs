//! What an Active Message frame carries, as the header's kind field says it on every route (a
//! ring frame's header, a network message's first word).

use crate::transport::shm::frame::KIND_WORDS;

/// What a frame carries; decides how the words after the header are read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum FrameKind {
    /// Handler + arguments: the frame's body is its argument words (the kind a ring serves
    /// straight from its slot).
    Short = KIND_WORDS,
    /// Handler + arguments + payload inline in the following bytes.
    MediumInline = 2,
    /// Handler + arguments + payload in one of the sender's medium buffers.
    MediumPooled = 3,
    /// Handler + arguments; the payload was already written into the target's segment.
    Long = 4,
    /// A runtime-internal one-way message (barrier, finalize).
    System = 6,
}

impl FrameKind {
    /// The kind a header's field names, if it names one.
    #[inline(always)]
    pub(crate) fn from_bits(bits: u8) -> Option<Self> {
        Some(match bits {
            KIND_WORDS => Self::Short,
            2 => Self::MediumInline,
            3 => Self::MediumPooled,
            4 => Self::Long,
            6 => Self::System,
            _ => return None,
        })
    }

    /// Words between the header and the arguments.
    #[inline(always)]
    pub(crate) fn extra_words(self) -> usize {
        match self {
            Self::Short | Self::System => 0,
            Self::MediumInline | Self::MediumPooled => 1,
            Self::Long => 2,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::FrameKind;
    use crate::transport::shm::frame::KIND_SKIP;

    #[test]
    fn kinds_round_trip_and_leave_the_ring_its_skip() {
        for bits in 0..8u8 {
            if let Some(k) = FrameKind::from_bits(bits) {
                assert_eq!(k as u8, bits);
            }
        }
        assert_eq!(FrameKind::from_bits(KIND_SKIP), None);
        assert_eq!(FrameKind::from_bits(0), None);
    }
}
