//! Transports move Active Messages between two ranks, behind one contract (`contract.rs`:
//! send a message of a class, poll what arrived into a sink, flush; direct memory access to
//! peers' segments as an optional capability), tested by one suite run on every
//! implementation (`contract_tests.rs`).
//!
//! [`shm`] carries them through rings in shared memory between ranks on one host (a rank's
//! messages to itself use the same rings: the loopback path), and maps the peers' segments;
//! [`net`] carries them as whole messages between hosts over UDP (with the
//! [`crate::reliable`] protocol) or TCP. Nothing here knows about handlers or request/reply
//! semantics beyond the fields a message carries.

#[cfg(not(loom))]
pub(crate) mod contract;
#[cfg(all(test, not(loom)))]
mod contract_tests;
#[cfg(not(loom))]
pub mod net;
pub mod shm;

/// The two logical networks. Requests and replies never share a ring, so replies always drain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(usize)]
pub enum Channel {
    /// Requests (and one-way system messages such as barrier notifications).
    Request = 0,
    /// Replies, sent only from request handlers.
    Reply = 1,
}

impl Channel {
    /// `"request"` or `"reply"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Request => "request",
            Self::Reply => "reply",
        }
    }

    /// The other channel: the one a frame of this channel is answered on.
    #[inline(always)]
    pub fn other(self) -> Self {
        match self {
            Self::Request => Self::Reply,
            Self::Reply => Self::Request,
        }
    }
}
