//! What endpoint handlers receive: a [`Message`] (and, for requests, a [`Token`] to reply
//! with), or at handler 0 a [`Returned`] message with its [`Reason`].

use crate::error::Result;
use crate::layer::Endpoints;
use crate::name::EndpointId;
use crate::wire::{Header, Kind, NO_INDEX};

/// Why a message came back to its sender's handler 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum Reason {
    /// The tag it carried is not the destination endpoint's (AM-II's `EBADTAG`): mapped with a
    /// wrong tag, or the destination changed its tag since ([`crate::Endpoint::set_tag`]).
    BadTag = 1,
    /// The destination endpoint is closed: closed before the message arrived (a name of an
    /// older generation), or closed with the message still queued.
    Closed = 2,
    /// No endpoint of that number and generation was ever opened on the destination rank
    /// (AM-II's `EUNREACHABLE`).
    Unreachable = 3,
    /// The destination's request (or reply) queue was full.
    Full = 4,
    /// The destination endpoint has no handler of the message's kind at its index.
    NoHandler = 5,
}

impl Reason {
    pub(crate) fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            1 => Self::BadTag,
            2 => Self::Closed,
            3 => Self::Unreachable,
            4 => Self::Full,
            5 => Self::NoHandler,
            _ => return None,
        })
    }
}

/// A request or reply as its endpoint handler sees it. The payload was copied out of volley's
/// buffer when the message was queued; it lives while the handler runs.
#[derive(Debug)]
pub struct Message<'a> {
    pub(crate) src_rank: usize,
    pub(crate) src: EndpointId,
    pub(crate) args: &'a [u64],
    pub(crate) payload: &'a [u8],
}

impl<'a> Message<'a> {
    /// The rank that sent it.
    pub fn src_rank(&self) -> usize {
        self.src_rank
    }

    /// The endpoint that sent it, on [`Message::src_rank`].
    pub fn src_endpoint(&self) -> EndpointId {
        self.src
    }

    /// The arguments (at most [`crate::MAX_ARGS`]).
    pub fn args(&self) -> &'a [u64] {
        self.args
    }

    /// Argument `i`, or 0 if fewer were sent.
    pub fn arg(&self, i: usize) -> u64 {
        self.args.get(i).copied().unwrap_or(0)
    }

    /// The payload (empty for a short message).
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }
}

/// The right to reply once to the endpoint whose request is being handled (AM-II's opaque
/// token): the reply goes into that endpoint's reply queue. [`Token::reply`] takes it by
/// value, so a second reply does not compile; dropping it sends nothing.
#[derive(Debug)]
pub struct Token<'a> {
    pub(crate) layer: &'a Endpoints<'a>,
    pub(crate) to_rank: usize,
    pub(crate) to: EndpointId,
    pub(crate) to_tag: u64,
    pub(crate) from: EndpointId,
    pub(crate) from_tag: u64,
}

impl Token<'_> {
    /// The requester's rank.
    pub fn requester_rank(&self) -> usize {
        self.to_rank
    }

    /// The requester's endpoint.
    pub fn requester(&self) -> EndpointId {
        self.to
    }

    /// Replies: reply handler `handler` (not 0) of the requester's endpoint runs with `args`
    /// (at most [`crate::MAX_ARGS`]) and `payload` (at most the runtime's medium size) when
    /// that endpoint polls. A reply the requester cannot take (its endpoint closed, its tag
    /// changed, its reply queue full) comes back to this endpoint's handler 0.
    pub fn reply(self, handler: u8, args: &[u64], payload: &[u8]) -> Result<()> {
        let header = Header {
            dest: self.to,
            dest_tag: self.to_tag,
            src: self.from,
            src_tag: self.from_tag,
            handler,
            nargs: args.len().min(u8::MAX as usize) as u8,
            index: NO_INDEX,
        };
        self.layer
            .send(Kind::Reply, self.to_rank, header, args, payload)
    }
}

/// A message that came back to the endpoint that sent it, as handler 0 sees it: why, and the
/// message whole (handler index, arguments, payload).
#[derive(Debug)]
pub struct Returned<'a> {
    pub(crate) reason: Reason,
    pub(crate) kind: Kind,
    pub(crate) by_rank: usize,
    pub(crate) header: Header,
    pub(crate) args: &'a [u64],
    pub(crate) payload: &'a [u8],
}

impl<'a> Returned<'a> {
    /// Why it came back.
    pub fn reason(&self) -> Reason {
        self.reason
    }

    /// Whether it was a request or a reply.
    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// The handler index it named at the destination.
    pub fn handler(&self) -> u8 {
        self.header.handler
    }

    /// Its arguments.
    pub fn args(&self) -> &'a [u64] {
        self.args
    }

    /// Its payload.
    pub fn payload(&self) -> &'a [u8] {
        self.payload
    }

    /// For a request, the translation index it was sent through (`None` for a reply).
    pub fn index(&self) -> Option<usize> {
        (self.header.index != NO_INDEX).then_some(self.header.index as usize)
    }

    /// The rank it was sent to (which returned it).
    pub fn dest_rank(&self) -> usize {
        self.by_rank
    }

    /// The endpoint it was sent to.
    pub fn dest(&self) -> EndpointId {
        self.header.dest
    }

    /// The tag it carried.
    pub fn tag(&self) -> u64 {
        self.header.dest_tag
    }
}
