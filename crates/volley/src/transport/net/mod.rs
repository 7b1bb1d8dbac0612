//! Network transports: whole messages between ranks on different hosts (or emulated nodes),
//! reliably and in order per peer pair.
//!
//! Two implementations sit behind [`NetTransport`]:
//! - [`udp`]: one datagram socket per rank running the [`crate::reliable`] protocol, with
//!   `sendmmsg`/`recvmmsg` batching and optional fault injection ([`faults`]);
//! - [`tcp`]: one stream per peer pair, length-prefixed frames, non-blocking, vectored writes.
//!
//! The network side of the transport contract, for either, is the route in `link.rs`: it
//! frames each Active Message as one network message (`frame.rs`) and polls the network as
//! often as `poll_policy.rs` says.
//!
//! [`floor`] is what they are measured against: a message bounced between raw sockets;
//! [`stream_floor`] the same sockets carrying a stream of 1 MiB messages.
//!
//! The contract both keep (the AM engine relies on it):
//! - [`NetTransport::send`] only queues (or writes at once when a datagram's worth or more is
//!   queued); everything queued is on its way after the next [`NetTransport::flush`] or
//!   [`NetTransport::progress`]. A send refused with [`NetError::WouldBlock`] queued nothing:
//!   progress and retry.
//! - [`NetTransport::progress`] transmits what is queued, takes in what arrived, runs timers,
//!   and appends each delivered message to `inbox` as `(source rank, bytes)`, in order per
//!   source. It never blocks.
//! - Messages are opaque bytes up to [`MAX_MESSAGE`]; the transport adds its own framing.
//! - A peer that stops answering (UDP: no ack progress for the configured timeout; TCP: the
//!   connection breaks) is reported as [`NetError::PeerFailed`] naming the rank.
//!
//! Times are nanoseconds from a monotonic clock the caller reads (`now` arguments), so the
//! transports read no clock themselves.

#[cfg(test)]
pub(crate) mod contract_tests;
pub mod faults;
pub mod floor;
pub(crate) mod frame;
pub(crate) mod link;
pub(crate) mod placing;
pub(crate) mod poll_policy;
pub mod stream_floor;
pub mod tcp;
pub(crate) mod traffic;
pub mod udp;

use std::net::SocketAddr;

/// Largest message a network transport carries (a long message's payload plus its header).
pub const MAX_MESSAGE: usize = (8 << 20) + 4096;

/// Which network transport a job uses (`VOLLEY_NET=udp|tcp`, default udp).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetKind {
    /// The reliable protocol over UDP datagrams.
    Udp,
    /// One TCP connection per peer pair.
    Tcp,
}

impl NetKind {
    /// The name used in `VOLLEY_NET` and in statistics.
    pub fn name(self) -> &'static str {
        match self {
            NetKind::Udp => "udp",
            NetKind::Tcp => "tcp",
        }
    }
}

/// Counters of one rank's network transport, summed over its peers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetStats {
    /// Messages accepted by `send`.
    pub messages_sent: u64,
    /// Messages appended to an inbox by `progress`.
    pub messages_received: u64,
    /// System calls that sent (UDP sendmmsg, TCP gathering sendmsg).
    pub send_calls: u64,
    /// System calls that received (recvmmsg / read), empty ones included.
    pub recv_calls: u64,
    /// Datagrams (UDP) or frames (TCP) written.
    pub packets_sent: u64,
    /// Datagrams (UDP) or frames (TCP) read.
    pub packets_received: u64,
    /// Bytes written to the network, transport framing included.
    pub bytes_sent: u64,
    /// UDP: data datagrams sent again after a timeout.
    pub retransmissions: u64,
    /// Datagrams or frames dropped as malformed, foreign (another job's key), from an unknown
    /// address, duplicate, or otherwise unusable.
    pub dropped: u64,
    /// UDP with `VOLLEY_FAULTS`: datagrams the fault injector dropped, duplicated, reordered
    /// and delayed.
    pub faults_injected: u64,
    /// `send` calls refused with [`NetError::WouldBlock`].
    pub would_block: u64,
    /// UDP: unsequenced datagrams sent ([`NetTransport::send_unsequenced`]).
    pub unsequenced_sent: u64,
    /// UDP: unsequenced datagrams received and delivered.
    pub unsequenced_received: u64,
    /// UDP: unsequenced datagrams dropped as duplicates (or too old to tell; also in
    /// `dropped`).
    pub unsequenced_duplicates: u64,
    /// UDP: messages sent from the caller's bytes, without the queued copy.
    pub lent_messages: u64,
    /// UDP: bytes of those copied all the same, being unacknowledged or unsent when their
    /// send returned.
    pub lent_bytes_kept: u64,
}

/// Why a network operation did not complete.
#[derive(Debug, thiserror::Error)]
pub enum NetError {
    /// The send window or buffer toward this peer is full; nothing was queued. Call
    /// `progress` and retry.
    #[error("send window full")]
    WouldBlock,
    /// The message exceeds [`MAX_MESSAGE`].
    #[error("message of {len} bytes exceeds the network limit of {max}")]
    TooLarge {
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// `peer` is not reached through this transport (same node, itself, or out of range).
    #[error("rank {peer} is not a network peer of this rank")]
    NotAPeer {
        /// The rank.
        peer: usize,
    },
    /// The pair with `peer` has failed for good.
    #[error("rank {peer}: {why}")]
    PeerFailed {
        /// The rank.
        peer: usize,
        /// What happened (timeout, restart, connection reset, protocol violation).
        why: String,
    },
    /// A network setting (for example `VOLLEY_POLL`) has a value it does not accept.
    #[error("invalid setting {name}={value}: {why}")]
    InvalidSetting {
        /// The setting's name.
        name: &'static str,
        /// The value given.
        value: String,
        /// Why it was refused.
        why: &'static str,
    },
    /// An operating-system call failed.
    #[error("{what}: {source}")]
    Io {
        /// What was being done.
        what: &'static str,
        /// The OS error.
        source: std::io::Error,
    },
}

/// One rank's network endpoint.
///
/// Life cycle: create bound to a local address (before the rendezvous, so the address can be
/// published), [`NetTransport::connect`] with every rank's address (after the rendezvous),
/// then any number of `send`/`progress` calls, then [`NetTransport::close`].
///
/// `Send`: a rank's progress thread may drive the transport (one thread at a time).
pub trait NetTransport: std::fmt::Debug + Send {
    /// Which transport this is.
    fn kind(&self) -> NetKind;

    /// The address other ranks reach this rank at.
    fn local_addr(&self) -> SocketAddr;

    /// Sets up the pairs: `peers[r]` is rank `r`'s address, or `None` for ranks not reached
    /// through the network (this rank, ranks on the same node). TCP establishes its
    /// connections here (blocking, with a deadline); UDP only records the addresses.
    fn connect(&mut self, me: usize, peers: &[Option<SocketAddr>]) -> Result<(), NetError>;

    /// Queues `msg` for `peer` (see the module contract).
    fn send(&mut self, peer: usize, msg: &[u8], now: u64) -> Result<(), NetError> {
        self.send_gather(peer, msg, &[], now)
    }

    /// [`NetTransport::send`] of the message `head` followed by `body`, gathered from where
    /// they lie (a long payload from the segment), so the caller need not join them and the
    /// transport copies the bytes at most where its protocol must keep them.
    fn send_gather(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError>;

    /// [`NetTransport::send_gather`] of a later part of a message whose first part was just
    /// sent (a long message larger than one network message): the transport may queue it
    /// behind the first rather than hand it to the network at once, so that sending a large
    /// message returns once it is queued instead of once most of it has gone (TCP copies
    /// such parts). Defaults to [`NetTransport::send_gather`].
    fn send_gather_part(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError> {
        self.send_gather(peer, head, body, now)
    }

    /// Queues `msg` for `peer` outside any sequencing of the transport's own (seed 002's "no
    /// flow control"): UDP sends it as one unsequenced datagram, never acknowledged or
    /// retransmitted, delivered on arrival and at most once, possibly before messages sent
    /// earlier, or lost. It waits for no acknowledgement; [`NetError::WouldBlock`] only
    /// while this rank's own queue of datagrams is long (the socket is full). A stream
    /// transport has no sequencing of its own to bypass: this is [`NetTransport::send`].
    fn send_unsequenced(&mut self, peer: usize, msg: &[u8], now: u64) -> Result<(), NetError> {
        self.send(peer, msg, now)
    }

    /// The largest message [`NetTransport::send_unsequenced`] takes (UDP: one datagram's
    /// worth).
    fn max_unsequenced(&self) -> usize {
        MAX_MESSAGE
    }

    /// Whether `send` of a message of `len` bytes to `peer` would be accepted now (not refused
    /// with [`NetError::WouldBlock`]). Only `progress` (acks, written bytes) turns it from
    /// false to true; a failed or unknown peer answers true (its `send` fails otherwise).
    fn would_accept(&self, peer: usize, len: usize) -> bool;

    /// Transmits, receives and runs timers without blocking; appends delivered messages to
    /// `inbox`. Returns the number of messages appended.
    fn progress(&mut self, now: u64, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<usize, NetError>;

    /// Lets the transport put long payloads straight where `placer` says as they arrive,
    /// instead of delivering them whole for the caller to copy. Optional: a transport that
    /// cannot place keeps delivering whole messages.
    fn set_placer(&mut self, placer: std::sync::Arc<dyn Placer>) {
        let _ = placer;
    }

    /// Gives back the buffer of a message `progress` delivered from `peer`, once read, so the
    /// transport can reuse its allocation. Optional: a buffer not given back is simply freed.
    fn recycle(&mut self, peer: usize, buf: Vec<u8>) {
        let _ = (peer, buf);
    }

    /// Transmits what is queued (and, UDP, what timers made due) without receiving: one
    /// system call when something is queued, none otherwise. A bulk transfer's queue may be
    /// left to `progress`, which moves it a quantum per call so that it never holds up the
    /// rank's other traffic (TCP).
    fn flush(&mut self, now: u64) -> Result<(), NetError>;

    /// Transmits everything queued that the network takes now, bulk transfers included, for
    /// a rank about to stop calling the runtime for a while. Defaults to [`NetTransport::flush`].
    fn flush_out(&mut self, now: u64) -> Result<(), NetError> {
        self.flush(now)
    }

    /// Whether everything sent has left this rank for good: UDP: acknowledged by every peer;
    /// TCP: written to the kernel.
    fn is_idle(&self) -> bool;

    /// The earliest time at which `progress` has timer work to do, if any (for blocking
    /// waits that must not sleep through a retransmission).
    fn next_deadline(&self) -> Option<u64>;

    /// A descriptor that becomes readable when traffic arrives (for epoll-based waits).
    fn readable_fd(&self) -> std::os::fd::RawFd;

    /// Leaves the job: call once this rank has nothing more to send and needs nothing more
    /// (after the runtime's two-phase finalize). Flushes, then lingers until `deadline` at
    /// most while the peers may still need this rank (UDP: acknowledging their
    /// retransmissions and waiting for our last datagrams' acks; TCP: shutting down the
    /// write side and reading until every peer has done the same). Messages arriving meanwhile
    /// are discarded.
    fn close(&mut self, now: &mut dyn FnMut() -> u64, deadline: u64) -> Result<(), NetError>;

    /// Counters.
    fn stats(&self) -> NetStats;

    /// What this rank sent `peer` that has not left it for good (for the hang report).
    fn backlog(&self, peer: usize) -> Backlog {
        let _ = peer;
        Backlog::default()
    }
}

/// Where a transport may put a long payload as it arrives (see [`NetTransport::set_placer`]).
pub trait Placer: Send + Sync + std::fmt::Debug {
    /// A message of `len` bytes from `src` begins with `head` (what has arrived of it). When
    /// its last bytes go to this rank's segment and `head` holds everything before them:
    /// returns where they go and how many bytes precede them, having checked that range
    /// (bounds and protection), and writes into `notice` (empty) what to deliver once they
    /// are in place (nothing if left empty). `None`: deliver the message whole as usual.
    ///
    /// A returned pointer is valid for writes of the message's remaining bytes for as long
    /// as the transport lives.
    fn place(
        &self,
        src: usize,
        head: &[u8],
        len: usize,
        notice: &mut Vec<u8>,
    ) -> Option<(std::ptr::NonNull<u8>, usize)>;
}

/// What a transport holds for one peer (see [`NetTransport::backlog`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Backlog {
    /// UDP: datagrams sent and not yet acknowledged; TCP: 0 (the kernel acknowledges).
    pub unacked: u64,
    /// Bytes queued and not yet handed to the kernel (UDP: not yet packed into datagrams).
    pub queued_bytes: u64,
}
