//! Reliable, ordered delivery over an unreliable datagram transport, without I/O.
//!
//! A [`Peer`] is the deterministic state machine for one peer pair, in the style of
//! quinn-proto: it owns no socket, reads no clock and starts no thread. The caller feeds it
//! datagrams ([`Peer::handle_datagram`]) and the time ([`Peer::handle_timeout`], a `u64`
//! nanosecond timestamp from any monotonic clock), and takes out datagrams to send
//! ([`Peer::poll_transmit`]), messages delivered in order ([`Peer::poll_deliver`]) and the
//! next deadline at which it wants to be called ([`Peer::poll_timeout`]). The UDP transport is
//! a thin loop around it; the tests drive it through a seeded simulated network.
//!
//! The protocol (seed 002 §3.4, MBCF/Ether's extended Go-back-N, with 64-bit sequence numbers):
//! - Messages queued together are packed into one datagram up to
//!   [`Config::max_datagram_size`]; a message larger than a datagram is split into fragments
//!   in consecutive datagrams and reassembled. Each data datagram gets the next sequence
//!   number of the pair.
//! - Every datagram carries a cumulative ack (the highest sequence received in order) and a
//!   64-bit selective ack of the datagrams after it. A receiver that has nothing to send
//!   answers with an ack datagram after [`Config::ack_delay`], or at once after
//!   [`Config::ack_every`] unacknowledged data datagrams.
//! - The receiver keeps out-of-order datagrams within the window and delivers in order;
//!   duplicates and datagrams beyond the window are dropped and counted.
//! - Each unacknowledged datagram has its own retransmission timer, from an RTT estimate
//!   (RFC 6298, Karn's rule), doubled on every retransmission up to [`Config::max_rto`].
//! - Flow control: at most [`Config::window`] datagrams are unacknowledged, and queued plus
//!   unacknowledged bytes are bounded by [`Config::send_buffer`]; beyond that
//!   [`Peer::send`] returns [`SendError::WouldBlock`]. A receiver whose delivery queue holds
//!   [`Config::recv_buffer`] bytes refuses new datagrams unacknowledged, so the sender
//!   retransmits them later; the receiver never blocks.
//! - Every datagram carries the job key (others are dropped and counted), the sender's
//!   incarnation and the receiver's incarnation as the sender knows it. A new incarnation of
//!   the peer puts the pair in [`State::Failed`] with [`Failure::PeerRestarted`]; datagrams
//!   addressed to an earlier incarnation of this side are dropped as stale.
//! - When unacknowledged datagrams see no ack progress for [`Config::peer_timeout`], the
//!   pair fails with [`Failure::PeerTimeout`].
//! - Unsequenced datagrams (seed 002's "no flow control", [`Peer::send_unsequenced`]) carry one
//!   message each outside the sequenced stream: no sequence number, no ack, no
//!   retransmission, no window, no holding for order; delivered on arrival, at most once
//!   (each has a per-pair id, and the receiver refuses an id it has seen, [`replay`]). A lost
//!   one is lost. They change none of the sequenced stream's state.
//!
//! The wire format is in [`wire`]. Both sides of a pair must use the same [`Config::window`].
//!
//! Deviations from the seed: out-of-order datagrams are kept rather than discarded, and lost
//! datagrams are found by per-datagram timers and selective acks rather than by
//! resend-request packets and one-at-a-time handshaked retransmission.

#[cfg(test)]
mod lent_tests;
mod peer;
#[cfg(test)]
mod placed_tests;
mod pool;
pub mod replay;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod unsequenced_tests;
pub mod wire;

pub use peer::{Lent, LentDatagram, Peer, Tail};
pub use pool::BufferPool;

/// Tuning of a [`Peer`]. Times are in nanoseconds of the caller's clock.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Largest datagram written, header included: 1472 for a 1500-byte Ethernet MTU, up to
    /// 65507 for loopback or jumbo paths. At least [`wire::HEADER_LEN`] + 64.
    pub max_datagram_size: usize,
    /// Largest message [`Peer::send`] accepts (at most `u32::MAX`).
    pub max_message_size: usize,
    /// Most data datagrams sent and not yet acknowledged; both sides must agree. Selective
    /// acks cover 64 datagrams past the cumulative ack, so windows above 65 fall back to
    /// timer-driven retransmission for the rest.
    pub window: usize,
    /// Bound on bytes queued by [`Peer::send`] plus bytes unacknowledged; at least
    /// `max_message_size` + 5.
    pub send_buffer: usize,
    /// Bytes waiting in the delivery queue at which new in-order datagrams are refused.
    pub recv_buffer: usize,
    /// Longest a received data datagram waits for a piggybacked ack before an ack is sent.
    pub ack_delay: u64,
    /// Data datagrams received after which an ack is sent at once.
    pub ack_every: u32,
    /// Retransmission timeout before the first RTT sample.
    pub initial_rto: u64,
    /// Lower bound of the retransmission timeout.
    pub min_rto: u64,
    /// Upper bound of the retransmission timeout, also after exponential backoff.
    pub max_rto: u64,
    /// Time without ack progress, while datagrams are unacknowledged, after which the pair
    /// fails with [`Failure::PeerTimeout`]. A peer whose application stops taking messages
    /// (its delivery queue full) also stops acknowledging, and times out the same way.
    pub peer_timeout: u64,
}

impl Default for Config {
    /// Values for a LAN: 1472-byte datagrams, 64 in flight, 4 MiB send buffer.
    fn default() -> Self {
        Self {
            max_datagram_size: 1472,
            max_message_size: 1 << 20,
            window: 64,
            send_buffer: 4 << 20,
            recv_buffer: 4 << 20,
            ack_delay: 100_000,
            ack_every: 8,
            initial_rto: 10_000_000,
            min_rto: 1_000_000,
            max_rto: 500_000_000,
            peer_timeout: 10_000_000_000,
        }
    }
}

impl Config {
    /// Checks the bounds documented on each field.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let bad = |what: &'static str| Err(ConfigError(what));
        if self.max_datagram_size < wire::HEADER_LEN + 64 || self.max_datagram_size > 65507 {
            return bad("max_datagram_size must be in header + 64 ..= 65507");
        }
        if self.max_message_size > u32::MAX as usize {
            return bad("max_message_size must fit in u32");
        }
        if self.window == 0 {
            return bad("window must be at least 1");
        }
        if self.send_buffer < self.max_message_size + wire::RECORD_OVERHEAD {
            return bad("send_buffer must be at least max_message_size + 5");
        }
        if self.recv_buffer == 0 || self.ack_every == 0 || self.peer_timeout == 0 {
            return bad("recv_buffer, ack_every and peer_timeout must be positive");
        }
        if self.min_rto == 0 || self.min_rto > self.initial_rto || self.initial_rto > self.max_rto {
            return bad("need 0 < min_rto <= initial_rto <= max_rto");
        }
        Ok(())
    }
}

/// A [`Config`] out of bounds; the text names the rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("invalid reliable-layer config: {0}")]
pub struct ConfigError(pub &'static str);

/// Why a peer pair stopped working.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Failure {
    /// Unacknowledged datagrams saw no ack progress for [`Config::peer_timeout`].
    #[error("peer stopped acknowledging")]
    PeerTimeout,
    /// A datagram came from a new incarnation of the peer: it restarted.
    #[error("peer restarted (incarnation {old} became {new})")]
    PeerRestarted {
        /// The incarnation seen first.
        old: u64,
        /// The incarnation seen now.
        new: u64,
    },
    /// A well-formed datagram broke the protocol (fragments out of order, message too large).
    #[error("peer violated the protocol")]
    Protocol,
}

/// Whether a pair works.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Sending and receiving.
    Active,
    /// Stopped for good: sends fail, datagrams are dropped, nothing is transmitted. Messages
    /// delivered before the failure can still be taken with [`Peer::poll_deliver`].
    Failed(Failure),
}

/// Why [`Peer::send`] refused a message. Nothing was queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum SendError {
    /// The send window or buffer is full: transmit, handle acks, and try again.
    #[error("send window full; poll and retry")]
    WouldBlock,
    /// The message exceeds [`Config::max_message_size`].
    #[error("message of {len} bytes exceeds the limit of {max}")]
    TooLarge {
        /// Length of the message.
        len: usize,
        /// The configured limit.
        max: usize,
    },
    /// The pair has failed.
    #[error(transparent)]
    Failed(Failure),
}

/// Why [`Peer::handle_datagram`] (or [`wire::decode`]) dropped a datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Shorter than the header.
    #[error("datagram shorter than the header")]
    Truncated,
    /// Not a volley datagram.
    #[error("bad magic")]
    BadMagic,
    /// A protocol version this build does not speak.
    #[error("unknown protocol version")]
    BadVersion,
    /// Unknown datagram kind.
    #[error("unknown datagram kind")]
    BadKind,
    /// The checksum does not match: corrupt or truncated.
    #[error("checksum mismatch")]
    BadChecksum,
    /// The body does not parse into records, an ack carries a body, or an unsequenced
    /// datagram is not exactly one whole message with its acknowledgement fields zero.
    #[error("malformed body")]
    BadBody,
    /// An acknowledgement of a sequence number never sent.
    #[error("ack beyond what was sent")]
    AckOutOfRange,
    /// From another job.
    #[error("datagram from another job")]
    ForeignJob,
    /// Addressed to an earlier incarnation of this side.
    #[error("datagram for an earlier incarnation")]
    StaleIncarnation,
    /// From a new incarnation of the peer; the pair is now failed.
    #[error("peer restarted")]
    PeerRestarted,
    /// The pair has failed; nothing is accepted.
    #[error("pair has failed")]
    PairFailed,
}

/// Counters of one [`Peer`]. Every datagram handed to [`Peer::handle_datagram`] is counted
/// exactly once: in `datagrams_received` or in one of the `*_dropped` counters other than
/// `duplicates_dropped`, `out_of_window_dropped` and `recv_full_dropped` (which count valid
/// received datagrams whose data was not used).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Datagrams written by [`Peer::poll_transmit`], retransmissions and acks included.
    pub datagrams_sent: u64,
    /// Bytes in those datagrams.
    pub bytes_sent: u64,
    /// Valid datagrams of this job and pair received.
    pub datagrams_received: u64,
    /// Messages accepted by [`Peer::send`].
    pub messages_sent: u64,
    /// Messages made available to [`Peer::poll_deliver`].
    pub messages_delivered: u64,
    /// Data datagrams sent again after a timeout.
    pub retransmissions: u64,
    /// Ack-only datagrams sent (piggybacked acks are not counted).
    pub acks_sent: u64,
    /// Data datagrams received again.
    pub duplicates_dropped: u64,
    /// Data datagrams beyond the receive window.
    pub out_of_window_dropped: u64,
    /// Data datagrams refused because the delivery queue was full.
    pub recv_full_dropped: u64,
    /// Datagrams that failed to decode, or acknowledged what was never sent.
    pub malformed_dropped: u64,
    /// Datagrams carrying another job's key.
    pub foreign_dropped: u64,
    /// Datagrams addressed to an earlier incarnation of this side.
    pub stale_dropped: u64,
    /// Datagrams dropped because the pair had failed (or failed on them).
    pub failed_dropped: u64,
    /// [`Peer::send`] calls refused with [`SendError::WouldBlock`].
    pub would_block: u64,
    /// Unsequenced datagrams written by [`Peer::send_unsequenced`].
    pub unsequenced_sent: u64,
    /// Unsequenced datagrams whose message was delivered (also in `messages_delivered`).
    pub unsequenced_delivered: u64,
    /// Unsequenced datagrams refused because their id was seen before, or is too old to
    /// tell (see [`replay`]); valid received datagrams, like `duplicates_dropped`.
    pub unsequenced_duplicates: u64,
    /// Messages sent by [`Peer::send_lent`] from the caller's bytes.
    pub lent_messages: u64,
    /// Bytes of lent messages copied because they were not acknowledged by the end of their
    /// send (what [`Peer::send`] would have copied whole).
    pub lent_bytes_kept: u64,
}
