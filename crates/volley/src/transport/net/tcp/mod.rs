//! The TCP transport: one stream per pair of network peers, length-prefixed frames,
//! non-blocking sockets, vectored writes.
//!
//! # Wire format
//! - Handshake, once per connection, from the higher rank to the lower: 24 bytes, little-endian:
//!   the magic `"VLYT"`, the protocol version, the job key, the connecting rank.
//! - Frame: a 4-byte little-endian length, then that many message bytes (at most
//!   [`MAX_MESSAGE`]).
//! - Goodbye: the length value `u32::MAX` with no body. [`NetTransport::close`] writes it just
//!   before shutting down the write side, so a peer can tell an orderly departure from a crash:
//!   an end of stream after a goodbye is expected, one without it means the peer failed. Nothing
//!   may follow a goodbye.
//!
//! # Setup without deadlock
//! Every rank first connects to each network peer with a lower rank (a blocking connect
//! completes from the peer's listen backlog, without the peer calling `accept`), then accepts
//! from each peer with a higher rank. No rank ever waits on one that is itself waiting, so the
//! whole job connects in one pass whatever order the ranks arrive in. Connections that fail the
//! handshake (another job, a port scanner, a duplicate) are closed and counted in
//! [`NetStats::dropped`] without disturbing the setup.
//!
//! # System calls in the steady state
//! `send` only copies into the peer's queue; `progress` writes each non-empty queue with one
//! vectored write (`sendmsg` with an iovec list; `MSG_NOSIGNAL` so that a dead peer is an error
//! and never a `SIGPIPE`, which `writev` cannot promise) and then reads: with one network peer
//! a single `read` on its socket, with several one `epoll_wait` (timeout 0) and a `read` per
//! ready connection. A small-message ping-pong therefore costs one write and one successful
//! read per side and round trip, plus the empty polls.
//!
//! # Parts
//! This module holds the transport and its steady state; `setup` establishes the connections,
//! `send_queue` and `receive` are a connection's two directions, and `close` is the orderly
//! departure.

#[cfg(test)]
mod bulk_tests;
mod close;
mod options;
#[cfg(test)]
mod placed_tests;
pub(crate) mod receive;
mod send_queue;
mod setup;
#[cfg(test)]
mod tests;

use std::fmt;
use std::io;
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use nix::sys::socket::{self as sock, Backlog};

use super::traffic::{RecentTraffic, MAX_DEFERRED_POLLS};
use super::{NetError, NetKind, NetStats, NetTransport, Placer, MAX_MESSAGE};
use crate::reliable::BufferPool;
use receive::{Read1, Receiver};
use send_queue::{ChunkPool, SendQueue, SMALL_MESSAGE};

pub(crate) use options::apply as apply_socket_options;
pub use options::{congestion_in_use, Congestion};

/// Bytes in a frame's length prefix.
const PREFIX: usize = 4;
/// The length value that announces an orderly close; it is far above [`MAX_MESSAGE`], so it can
/// never be mistaken for a frame.
const GOODBYE: u32 = u32::MAX;
/// `slot` value of a rank that has no connection.
const NO_CONN: usize = usize::MAX;

pub use super::traffic::{PIPELINE_NS, QUIET_NS};

/// How soon a rank asleep with output queued wakes to write more of it.
const RETRY_WRITE_NS: u64 = 100_000;

/// Settings of a [`TcpTransport`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// How long [`NetTransport::connect`] waits for all connections to be established.
    pub connect_timeout: Duration,
    /// `send` writes to the socket at once when more than this many bytes are queued toward
    /// the peer; below it, sending waits for the next `progress`.
    pub flush_threshold: usize,
    /// Most bytes queued toward one peer before `send` answers [`NetError::WouldBlock`]. A
    /// message is always accepted into an empty queue, so any message up to [`MAX_MESSAGE`]
    /// can be sent.
    pub max_queued: usize,
    /// `SO_SNDBUF` and `SO_RCVBUF` requested for each connection (best effort: the kernel caps
    /// them at `wmem_max`/`rmem_max`). Setting them turns off the kernel's buffer autotuning for
    /// the socket; 0 leaves the kernel's defaults and autotuning alone.
    pub socket_buffer: usize,
    /// Most bytes of a bulk transfer one poll writes toward one peer (a queue longer than
    /// this is a bulk transfer) while the rank has traffic with its other peers (see
    /// [`QUIET_NS`]): the transfer then returns to the progress loop, and to those peers, every
    /// few tens of microseconds instead of once the receiver has drained it all. Otherwise a
    /// poll writes up to `direct_write` bytes, which costs fewer system calls. A later part of
    /// a long message that is queued (see [`PIPELINE_NS`]) has at most one quantum written by
    /// its send, so that the send returns once the message is queued.
    pub write_quantum: usize,
    /// Most bytes a send writes straight from the caller's bytes when nothing is queued ahead
    /// of its message; the rest of the message is copied into the queue and the send returns.
    /// The default, one long-message part (1 MiB) and its header, lets a stream of such parts
    /// leave without a copy.
    pub direct_write: usize,
    /// The congestion control asked for each connection (see [`Congestion::default`] for why
    /// CUBIC).
    pub congestion: Congestion,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            connect_timeout: Duration::from_secs(30),
            flush_threshold: 64 << 10,
            max_queued: 64 << 20,
            socket_buffer: 4 << 20,
            write_quantum: 64 << 10,
            direct_write: (1 << 20) + (4 << 10),
            congestion: Congestion::default(),
        }
    }
}

/// Where a connection stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Both directions in use.
    Open,
    /// The peer sent its goodbye: its end of stream is expected, and nothing else may arrive.
    Leaving,
    /// The peer's end of stream has been read after a goodbye (or during our close).
    Finished,
    /// Broken for good; already reported.
    Failed,
}

/// Which queues a flush writes, and how much of each.
#[derive(Debug, Clone, Copy)]
enum Pass {
    /// Those a quantum empties, whole.
    Short,
    /// The longer ones, one bulk quantum each at time `.0`.
    Bulk(u64),
    /// All, as much as the kernel takes.
    All,
}

/// Turns an OS error into [`NetError::Io`] naming what was being done.
fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> NetError {
    move |source| NetError::Io { what, source }
}

/// The connection with one network peer.
struct Conn {
    rank: usize,
    stream: TcpStream,
    state: State,
    /// Whether this connection is in [`TcpTransport::dirty`].
    dirty: bool,
    tx: SendQueue,
    rx: Receiver,
}

impl Conn {
    fn new(rank: usize, stream: TcpStream) -> Self {
        Conn {
            rank,
            stream,
            state: State::Open,
            dirty: false,
            tx: SendQueue::default(),
            rx: Receiver::new(),
        }
    }
}

/// A [`NetTransport`] with one TCP connection per network peer.
///
/// Created bound to a listening socket ([`TcpTransport::bind`]); [`NetTransport::connect`]
/// establishes the connections and closes the listener. It is `Send`, so a rank can be set up
/// on one thread and driven on another.
///
/// A broken connection is reported once, as [`NetError::PeerFailed`] from the `progress` (or
/// `send`) call that finds it; its queued output is dropped, later sends to that rank return
/// `PeerFailed`, and the other connections carry on. Messages a failing `progress` call had
/// already appended stay in the inbox.
///
/// Memory per connection: a 128 KiB receive buffer, plus the output queue (at most
/// [`TcpConfig::max_queued`] bytes, give or take one message).
pub struct TcpTransport {
    config: TcpConfig,
    job_key: u64,
    local: SocketAddr,
    /// Open from `bind` until `connect` has all its connections.
    listener: Option<TcpListener>,
    /// This rank, once connected.
    me: Option<usize>,
    /// Rank to index in `conns`, [`NO_CONN`] for ranks without a connection.
    slot: Vec<usize>,
    conns: Vec<Conn>,
    /// Indices of connections with queued output, each at most once.
    dirty: Vec<usize>,
    /// Readiness of all connections, when there is not exactly one.
    epoll: Option<OwnedFd>,
    events: Vec<libc::epoll_event>,
    stats: NetStats,
    closed: bool,
    /// Buffers of delivered messages given back by `recycle`, for the next ones.
    pool: BufferPool,
    /// Chunks of the output queues.
    chunks: ChunkPool,
    /// How many `progress` calls in a row have left their bulk quantum to the next one.
    deferred_polls: u32,
    /// Whether a short message was sent since the last `progress`.
    short_sent: bool,
    /// When each connection last had short traffic (see [`QUIET_NS`]).
    traffic: RecentTraffic,
    /// The latest time a send or `progress` was given.
    clock: u64,
    /// Where large frames' long payloads go as they arrive, if set.
    placer: Option<Arc<dyn Placer>>,
}

impl fmt::Debug for TcpTransport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TcpTransport")
            .field("local", &self.local)
            .field("rank", &self.me)
            .field(
                "peers",
                &self.conns.iter().map(|c| c.rank).collect::<Vec<_>>(),
            )
            .field(
                "queued",
                &self.conns.iter().map(|c| c.tx.queued()).sum::<usize>(),
            )
            .field("closed", &self.closed)
            .finish_non_exhaustive()
    }
}

impl TcpTransport {
    /// Opens a listening socket on `addr` with a port the kernel picks. `job_key` must be the
    /// same on every rank of the job: connections presenting another key are refused.
    pub fn bind(addr: IpAddr, job_key: u64, config: TcpConfig) -> Result<Self, NetError> {
        // std creates the socket close-on-exec; its backlog is too small for a large job, and
        // listen(2) on a listening socket just resizes the queue. The port is not published
        // yet, so nothing can arrive in between.
        let listener = TcpListener::bind((addr, 0)).map_err(io_err("tcp bind"))?;
        // Every peer with a higher rank may connect before this rank starts accepting, so ask
        // for the largest queue the system allows (-1: net.core.somaxconn, 4096 by default).
        sock::listen(&listener, Backlog::MAXALLOWABLE)
            .map_err(|e| io_err("tcp listen")(e.into()))?;
        let local = listener.local_addr().map_err(io_err("tcp local address"))?;
        Ok(TcpTransport {
            config,
            job_key,
            local,
            listener: Some(listener),
            me: None,
            slot: Vec::new(),
            conns: Vec::new(),
            dirty: Vec::new(),
            epoll: None,
            events: Vec::new(),
            stats: NetStats::default(),
            closed: false,
            pool: BufferPool::default(),
            chunks: ChunkPool::default(),
            deferred_polls: 0,
            short_sent: false,
            traffic: RecentTraffic::default(),
            clock: 0,
            placer: None,
        })
    }

    /// Marks a connection failed, discards its output and stops watching it.
    fn fail(&mut self, idx: usize, why: String) -> NetError {
        let conn = &mut self.conns[idx];
        conn.state = State::Failed;
        conn.tx.clear(&mut self.chunks);
        if conn.dirty {
            conn.dirty = false;
            self.dirty.retain(|&i| i != idx);
        }
        self.unwatch(idx);
        NetError::PeerFailed {
            peer: self.conns[idx].rank,
            why,
        }
    }

    /// Removes a connection from the epoll set (after its end of stream or failure; a
    /// level-triggered hang-up would otherwise wake every poll).
    fn unwatch(&mut self, idx: usize) {
        if let Some(ep) = &self.epoll {
            // SAFETY: both descriptors are open (owned by self); EPOLL_CTL_DEL ignores the
            // event argument, which may be null.
            unsafe {
                libc::epoll_ctl(
                    ep.as_raw_fd(),
                    libc::EPOLL_CTL_DEL,
                    self.conns[idx].stream.as_raw_fd(),
                    std::ptr::null_mut(),
                );
            }
        }
    }

    fn mark_dirty(&mut self, idx: usize) {
        let conn = &mut self.conns[idx];
        if !conn.dirty && conn.tx.queued() > 0 {
            conn.dirty = true;
            self.dirty.push(idx);
        }
    }

    /// Writes every non-empty queue, as much as the kernel takes. On a broken connection,
    /// stops and reports it.
    fn flush_all(&mut self) -> Result<(), NetError> {
        self.flush_short()?;
        self.flush_where(Pass::All)
    }

    /// Writes the queues that one quantum empties: the short messages, which must not wait
    /// behind a bulk transfer.
    fn flush_short(&mut self) -> Result<(), NetError> {
        self.flush_where(Pass::Short)
    }

    /// Writes one quantum of every longer queue at time `now`: a bulk transfer's share of one
    /// `progress`.
    fn flush_bulk(&mut self, now: u64) -> Result<(), NetError> {
        self.flush_where(Pass::Bulk(now))
    }

    /// Most bytes one write of a bulk transfer on connection `idx` takes at time `now`: a
    /// quantum while the rank has short traffic with its other peers, a direct write's worth
    /// otherwise (see [`QUIET_NS`]).
    fn bulk_quantum(&self, idx: usize, now: u64) -> usize {
        let short = self.config.write_quantum;
        if self.traffic.others_within(idx, now, QUIET_NS) {
            short
        } else {
            self.config.direct_write.max(short)
        }
    }

    /// Writes the non-empty queues `pass` picks, as much of each as it allows.
    fn flush_where(&mut self, pass: Pass) -> Result<(), NetError> {
        let short = self.config.write_quantum;
        let mut i = 0;
        while i < self.dirty.len() {
            let idx = self.dirty[i];
            let queued = self.conns[idx].tx.queued();
            let quantum = match pass {
                Pass::Short if queued <= short => short,
                Pass::Bulk(now) if queued > short => self.bulk_quantum(idx, now),
                Pass::All => usize::MAX,
                _ => {
                    i += 1;
                    continue;
                }
            };
            let conn = &mut self.conns[idx];
            if let Err(e) = conn
                .tx
                .flush(&conn.stream, quantum, &mut self.chunks, &mut self.stats)
            {
                let why = write_failure(conn.state, &e);
                return Err(self.fail(idx, why));
            }
            if conn.tx.queued() == 0 {
                conn.dirty = false;
                self.dirty.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// The index in `conns` of the connection to `peer`, if it has one.
    fn conn_of(&self, peer: usize) -> Option<usize> {
        self.slot.get(peer).copied().filter(|&i| i != NO_CONN)
    }

    /// [`TcpTransport::receive`], noting the connection's traffic at `now` if it delivered.
    fn receive_noting(
        &mut self,
        idx: usize,
        now: u64,
        inbox: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<(), NetError> {
        let before = inbox.len();
        let result = self.receive(idx, inbox);
        if inbox.len() > before {
            self.traffic.note(idx, now);
        }
        result
    }

    /// Reads what connection `idx` has and delivers its complete frames.
    fn receive(&mut self, idx: usize, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<(), NetError> {
        loop {
            let conn = &mut self.conns[idx];
            if !matches!(conn.state, State::Open | State::Leaving) {
                return Ok(());
            }
            self.stats.recv_calls += 1;
            match conn.rx.read_once(&conn.stream) {
                Ok(Read1::Data { full }) => {
                    if let Err(why) = conn.rx.parse(
                        conn.rank,
                        &mut conn.state,
                        inbox,
                        &mut self.stats,
                        &mut self.pool,
                        self.placer.as_deref(),
                    ) {
                        return Err(self.fail(idx, why));
                    }
                    if !full {
                        return Ok(());
                    }
                }
                Ok(Read1::Eof) => {
                    if conn.state == State::Leaving && conn.rx.is_empty() {
                        conn.state = State::Finished;
                        self.unwatch(idx);
                        return Ok(());
                    }
                    let why = if conn.state == State::Leaving {
                        "protocol violation: incomplete frame after goodbye".into()
                    } else {
                        "connection closed by the peer without a goodbye (process died?)".into()
                    };
                    return Err(self.fail(idx, why));
                }
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::ConnectionReset => {
                        return Err(self.fail(idx, "connection reset by the peer".into()))
                    }
                    _ => return Err(self.fail(idx, format!("read failed: {e}"))),
                },
            }
        }
    }
}

/// Why a write failed, in words for [`NetError::PeerFailed`].
fn write_failure(state: State, e: &io::Error) -> String {
    match (state, e.kind()) {
        (State::Leaving | State::Finished, _) => {
            format!("the peer has left the job; unsent data dropped ({e})")
        }
        (_, io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionReset) => {
            format!("connection broken ({e})")
        }
        _ => format!("write failed: {e}"),
    }
}

impl TcpTransport {
    /// Sends one frame of `head` followed by `body` to `peer` at time `now`, writing up to
    /// `direct` bytes of it from the caller's bytes when nothing is queued ahead of it.
    fn send_frame(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        direct: usize,
        now: u64,
    ) -> Result<(), NetError> {
        self.clock = now;
        let len = head.len() + body.len();
        if len > MAX_MESSAGE {
            return Err(NetError::TooLarge {
                len,
                max: MAX_MESSAGE,
            });
        }
        let Some(idx) = self.conn_of(peer) else {
            return Err(NetError::NotAPeer { peer });
        };
        if self.closed {
            return Err(NetError::PeerFailed {
                peer,
                why: "this transport is closed".into(),
            });
        }
        let conn = &mut self.conns[idx];
        let why = match conn.state {
            State::Open => None,
            State::Leaving | State::Finished => Some("the peer has left the job"),
            State::Failed => Some("the connection failed earlier"),
        };
        if let Some(why) = why {
            return Err(NetError::PeerFailed {
                peer,
                why: why.into(),
            });
        }
        let queued = conn.tx.queued();
        if queued > 0 && queued + PREFIX + len > self.config.max_queued {
            self.stats.would_block += 1;
            return Err(NetError::WouldBlock);
        }
        if let Err(e) = conn.tx.send(
            &conn.stream,
            head,
            body,
            direct,
            &mut self.chunks,
            &mut self.stats,
        ) {
            let why = write_failure(conn.state, &e);
            return Err(self.fail(idx, why));
        }
        self.stats.messages_sent += 1;
        if conn.tx.queued() > self.config.flush_threshold {
            // A later part writes one quantum at most: the send returns once it is queued.
            let quantum = if direct == 0 {
                self.config.write_quantum
            } else {
                self.bulk_quantum(idx, now)
            };
            let conn = &mut self.conns[idx];
            if let Err(e) = conn
                .tx
                .flush(&conn.stream, quantum, &mut self.chunks, &mut self.stats)
            {
                let why = write_failure(conn.state, &e);
                return Err(self.fail(idx, why));
            }
        }
        self.mark_dirty(idx);
        Ok(())
    }
}

impl NetTransport for TcpTransport {
    fn kind(&self) -> NetKind {
        NetKind::Tcp
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    fn connect(&mut self, me: usize, peers: &[Option<SocketAddr>]) -> Result<(), NetError> {
        if self.me.is_some() || self.listener.is_none() {
            return Err(NetError::Io {
                what: "tcp connect",
                source: io::Error::other("already connected or closed"),
            });
        }
        if me >= peers.len() {
            return Err(NetError::Io {
                what: "tcp connect",
                source: io::Error::new(io::ErrorKind::InvalidInput, "own rank out of range"),
            });
        }
        self.establish(me, peers)
    }

    fn would_accept(&self, peer: usize, len: usize) -> bool {
        let Some(idx) = self.conn_of(peer) else {
            return true;
        };
        let queued = self.conns[idx].tx.queued();
        queued == 0 || queued + PREFIX + len <= self.config.max_queued
    }

    fn send_gather(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError> {
        if head.len() + body.len() <= SMALL_MESSAGE {
            if let Some(idx) = self.conn_of(peer) {
                self.traffic.note(idx, now);
            }
            self.short_sent = true;
        }
        self.send_frame(peer, head, body, self.config.direct_write, now)
    }

    /// A later part of a long message: while the rank talks with other peers (within the
    /// last [`PIPELINE_NS`]) it is queued behind the first, copied, so that the send returns
    /// before the message has gone and those peers are served meanwhile; a rank with no
    /// other peer to serve sends it like any frame, from the caller's bytes, without a copy.
    fn send_gather_part(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError> {
        let talking = self
            .conn_of(peer)
            .is_some_and(|idx| self.traffic.others_within(idx, now, PIPELINE_NS));
        let direct = if talking { 0 } else { self.config.direct_write };
        self.send_frame(peer, head, body, direct, now)
    }

    /// Large frames (over [`receive::BIG_FRAME`]) are read straight into place.
    fn set_placer(&mut self, placer: Arc<dyn Placer>) {
        self.placer = Some(placer);
    }

    fn recycle(&mut self, _peer: usize, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    /// Writes the short queues; bulk transfers move in `progress`.
    fn flush(&mut self, _now: u64) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.flush_short()
    }

    fn flush_out(&mut self, _now: u64) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.flush_all()
    }

    fn progress(&mut self, now: u64, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<usize, NetError> {
        self.clock = now;
        let before = inbox.len();
        if self.closed {
            return Ok(0);
        }
        // Short messages leave first and what arrived is read next; a bulk transfer's quantum
        // comes last, so neither waits behind it.
        self.flush_short()?;
        match self.epoll.as_ref().map(|ep| ep.as_raw_fd()) {
            None if self.conns.len() == 1 => self.receive_noting(0, now, inbox)?,
            None => {}
            Some(ep) => {
                // SAFETY: `events` is a valid writable array of its length, which is at least 1.
                let n = unsafe {
                    libc::epoll_wait(ep, self.events.as_mut_ptr(), self.events.len() as i32, 0)
                };
                if n < 0 {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(io_err("epoll_wait")(e));
                    }
                }
                for k in 0..n.max(0) as usize {
                    let idx = self.events[k].u64 as usize;
                    self.receive_noting(idx, now, inbox)?;
                }
            }
        }
        // A poll that delivered something lets their handlers run before the next quantum (an
        // answer waited for ends the wait a quantum sooner), and one after a short message was
        // sent returns at once, so that a rank sharing this CPU can answer it sooner; but at
        // most MAX_DEFERRED_POLLS in a row, so that a steady stream of small messages cannot
        // starve a transfer.
        let delivered = inbox.len() - before;
        let short = delivered > 0 || std::mem::take(&mut self.short_sent);
        if !short || self.deferred_polls >= MAX_DEFERRED_POLLS {
            self.deferred_polls = 0;
            self.flush_bulk(now)?;
        } else if !self.dirty.is_empty() {
            self.deferred_polls += 1;
        }
        Ok(delivered)
    }

    fn is_idle(&self) -> bool {
        self.dirty.iter().all(|&i| self.conns[i].tx.queued() == 0)
    }

    /// While output is queued that the kernel did not take, soon: a rank that sleeps until
    /// traffic arrives must wake to write the rest of a bulk transfer (the socket making room
    /// does not wake it).
    fn next_deadline(&self) -> Option<u64> {
        (!self.is_idle()).then_some(self.clock + RETRY_WRITE_NS)
    }

    /// With exactly one network peer, that connection's socket; otherwise (several peers or
    /// none) an epoll descriptor watching every connection. Before `connect`, the listener.
    fn readable_fd(&self) -> RawFd {
        if let Some(ep) = &self.epoll {
            ep.as_raw_fd()
        } else if let [c] = &self.conns[..] {
            c.stream.as_raw_fd()
        } else if let Some(l) = &self.listener {
            l.as_raw_fd()
        } else {
            -1
        }
    }

    fn close(&mut self, now: &mut dyn FnMut() -> u64, deadline: u64) -> Result<(), NetError> {
        self.leave(now, deadline)
    }

    fn backlog(&self, peer: usize) -> super::Backlog {
        match self.slot.get(peer).and_then(|&i| self.conns.get(i)) {
            Some(conn) => super::Backlog {
                unacked: 0,
                queued_bytes: conn.tx.queued() as u64,
            },
            None => super::Backlog::default(),
        }
    }

    fn stats(&self) -> NetStats {
        self.stats
    }
}
