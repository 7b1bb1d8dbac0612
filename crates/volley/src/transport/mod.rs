//! Transports move frames between two ranks.
//!
//! Today there is one: [`shm`], rings in shared memory between ranks on one host (a rank's
//! messages to itself use the same rings: the loopback path). Network transports come later and
//! sit beside it; nothing here knows about handlers or request/reply semantics beyond the frame
//! header fields it carries.

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
