//! What the layer's messages carry in volley's argument words.
//!
//! An endpoint request or reply is one volley request (short without a payload, medium with
//! one) whose first [`HEADER_WORDS`] arguments are a [`Header`] and the rest the program's
//! arguments. A returned message is the same words reordered ([`Header::returned_words`]):
//! the endpoint to return to first, then the reason.

use crate::name::EndpointId;

/// Words of a header, ahead of the program's arguments.
pub(crate) const HEADER_WORDS: usize = 5;

/// "No translation index" (replies, which go back by token).
pub(crate) const NO_INDEX: u32 = u32::MAX;

/// Which queue a message goes to at its destination endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A request: the destination's request queue, a request handler.
    Request = 0,
    /// A reply: the destination's reply queue, a reply handler.
    Reply = 1,
}

/// The layer's header of one message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The destination endpoint.
    pub(crate) dest: EndpointId,
    /// The tag the sender holds for the destination.
    pub(crate) dest_tag: u64,
    /// The sending endpoint (where replies and returned messages go).
    pub(crate) src: EndpointId,
    /// The sending endpoint's tag, which a reply to it must carry.
    pub(crate) src_tag: u64,
    /// The handler index at the destination.
    pub(crate) handler: u8,
    /// Program arguments that follow the header.
    pub(crate) nargs: u8,
    /// The sender's translation index ([`NO_INDEX`] for replies), handed back with a
    /// returned message.
    pub(crate) index: u32,
}

impl Header {
    fn meta(&self) -> u64 {
        self.handler as u64 | (self.nargs as u64) << 8 | (self.index as u64) << 16
    }

    fn with_meta(mut self, meta: u64) -> Self {
        self.handler = meta as u8;
        self.nargs = (meta >> 8) as u8;
        self.index = (meta >> 16) as u32;
        self
    }

    /// The header as sent.
    pub(crate) fn words(&self) -> [u64; HEADER_WORDS] {
        [
            self.dest.word(),
            self.dest_tag,
            self.src.word(),
            self.src_tag,
            self.meta(),
        ]
    }

    /// A header from a message's arguments; `None` if there are too few for it and the
    /// arguments it announces.
    pub(crate) fn from_words(w: &[u64]) -> Option<Self> {
        let h = Self {
            dest: EndpointId::from_word(*w.first()?),
            dest_tag: *w.get(1)?,
            src: EndpointId::from_word(*w.get(2)?),
            src_tag: *w.get(3)?,
            handler: 0,
            nargs: 0,
            index: 0,
        }
        .with_meta(*w.get(4)?);
        (w.len() == HEADER_WORDS + h.nargs as usize).then_some(h)
    }

    /// The header of this message returned to its sender for `reason` (a [`crate::Reason`]
    /// as a number): the sender's endpoint first.
    pub(crate) fn returned_words(&self, kind: Kind, reason: u8) -> [u64; HEADER_WORDS] {
        [
            self.src.word(),
            reason as u64 | (kind as u64) << 8,
            self.dest.word(),
            self.dest_tag,
            self.meta(),
        ]
    }

    /// The inverse of [`Header::returned_words`]: the original header, its kind and the
    /// reason; `None` if the words are short or malformed.
    pub(crate) fn from_returned_words(w: &[u64]) -> Option<(Self, Kind, u8)> {
        let how = *w.get(1)?;
        let kind = match how >> 8 {
            0 => Kind::Request,
            1 => Kind::Reply,
            _ => return None,
        };
        let h = Self {
            src: EndpointId::from_word(*w.first()?),
            src_tag: 0,
            dest: EndpointId::from_word(*w.get(2)?),
            dest_tag: *w.get(3)?,
            handler: 0,
            nargs: 0,
            index: 0,
        }
        .with_meta(*w.get(4)?);
        (w.len() == HEADER_WORDS + h.nargs as usize).then_some((h, kind, how as u8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Header {
        Header {
            dest: EndpointId {
                id: 1,
                generation: 2,
            },
            dest_tag: u64::MAX - 5,
            src: EndpointId {
                id: 3,
                generation: u32::MAX,
            },
            src_tag: 0xdead_beef,
            handler: 255,
            nargs: 2,
            index: 77,
        }
    }

    #[test]
    fn header_round_trip() {
        let h = header();
        let mut w = h.words().to_vec();
        w.extend([10, 11]);
        assert_eq!(Header::from_words(&w), Some(h));
        // The announced argument count must match what came.
        assert_eq!(Header::from_words(&w[..6]), None);
        assert_eq!(Header::from_words(&w[..3]), None);
    }

    #[test]
    fn returned_round_trip_keeps_what_the_sender_needs() {
        let h = header();
        let mut w = h.returned_words(Kind::Reply, 4).to_vec();
        w.extend([10, 11]);
        let (r, kind, reason) = Header::from_returned_words(&w).unwrap();
        assert_eq!((kind, reason), (Kind::Reply, 4));
        assert_eq!((r.src, r.dest, r.dest_tag), (h.src, h.dest, h.dest_tag));
        assert_eq!((r.handler, r.nargs, r.index), (h.handler, h.nargs, h.index));
        w[1] = 2 << 8;
        assert_eq!(Header::from_returned_words(&w), None);
    }
}
