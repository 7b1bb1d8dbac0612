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

use std::collections::VecDeque;
use std::fmt;
use std::io::{self, Read, Write};
use std::mem::MaybeUninit;
use std::net::{IpAddr, Shutdown, SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};
use nix::sys::socket::{self as sock, sockopt, Backlog};

use super::{NetError, NetKind, NetStats, NetTransport, MAX_MESSAGE};
use crate::reliable::BufferPool;

/// First field of the handshake: `"VLYT"`.
const MAGIC: u32 = u32::from_le_bytes(*b"VLYT");
/// Bumped whenever the wire format changes, so mixed builds refuse each other at setup.
const VERSION: u32 = 1;
/// Bytes in a handshake.
const HANDSHAKE_LEN: usize = 24;
/// Bytes in a frame's length prefix.
const PREFIX: usize = 4;
/// The length value that announces an orderly close; it is far above [`MAX_MESSAGE`], so it can
/// never be mistaken for a frame.
const GOODBYE: u32 = u32::MAX;
/// Messages up to this size are copied into shared chunks with their neighbours; larger ones
/// get a buffer of their own, so a chunk never needs to grow.
const SMALL_MESSAGE: usize = 16 << 10;
/// Capacity of a shared output chunk.
const CHUNK: usize = 64 << 10;
/// Per-connection receive buffer. One read can take in this much of a burst of small frames.
const RECV_BUF: usize = 128 << 10;
/// An incomplete frame longer than this is received straight into its own `Vec` (the one
/// delivered to the inbox) instead of through the receive buffer, saving a copy.
const BIG_FRAME: usize = 32 << 10;
/// Linux's limit on iovecs per call (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;
/// `slot` value of a rank that has no connection.
const NO_CONN: usize = usize::MAX;
/// How long close and connect sleep in `poll` at most before looking at the clock again.
const POLL_SLICE_MS: u64 = 10;

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
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            connect_timeout: Duration::from_secs(30),
            flush_threshold: 64 << 10,
            max_queued: 64 << 20,
            socket_buffer: 4 << 20,
        }
    }
}

/// One output buffer of a connection's queue.
struct OutBuf {
    data: Vec<u8>,
    /// Frames that end in this buffer (for [`NetStats::packets_sent`]).
    frames: u64,
    /// Whether later small messages may be appended (a shared chunk rather than one large
    /// message's own buffer).
    shared: bool,
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

/// What one read did.
enum Read1 {
    /// Some bytes arrived; `full` when they filled all the space offered, so more may wait.
    Data { full: bool },
    /// The peer closed its write side.
    Eof,
}

/// The connection with one network peer.
struct Conn {
    rank: usize,
    stream: TcpStream,
    state: State,
    out: VecDeque<OutBuf>,
    /// Bytes of `out.front()` already written.
    head: usize,
    /// Bytes queued and not yet written.
    queued: usize,
    /// Whether this connection is in [`TcpTransport::dirty`].
    dirty: bool,
    /// A written shared chunk kept for reuse, so a steady stream of small sends allocates
    /// nothing.
    spare: Option<Vec<u8>>,
    /// Receive buffer; bytes `rstart..rend` are received and not yet parsed.
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    /// A large frame being received directly: its bytes so far (capacity = its length).
    big: Vec<u8>,
    /// That frame's length, 0 when none is in progress (empty frames never take this path).
    big_len: usize,
}

impl Conn {
    fn new(rank: usize, stream: TcpStream) -> Self {
        Conn {
            rank,
            stream,
            state: State::Open,
            out: VecDeque::new(),
            head: 0,
            queued: 0,
            dirty: false,
            spare: None,
            rbuf: vec![0; RECV_BUF].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            big: Vec::new(),
            big_len: 0,
        }
    }

    /// Appends one frame (prefix and body) to the output queue.
    fn enqueue(&mut self, msg: &[u8]) {
        let prefix = (msg.len() as u32).to_le_bytes();
        if msg.len() <= SMALL_MESSAGE {
            self.append_shared(&[&prefix, msg], 1);
        } else {
            // The copy that takes ownership is unavoidable (the caller keeps its slice); the
            // prefix rides along for free and the buffer is written as one iovec.
            let mut data = Vec::with_capacity(PREFIX + msg.len());
            data.extend_from_slice(&prefix);
            data.extend_from_slice(msg);
            self.queued += data.len();
            self.out.push_back(OutBuf {
                data,
                frames: 1,
                shared: false,
            });
        }
    }

    /// Appends `parts` to the last shared chunk, or to a new one if it does not fit.
    fn append_shared(&mut self, parts: &[&[u8]], frames: u64) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let fits = matches!(self.out.back(), Some(b) if b.shared && b.data.len() + len <= CHUNK);
        if !fits {
            let data = self
                .spare
                .take()
                .unwrap_or_else(|| Vec::with_capacity(CHUNK));
            self.out.push_back(OutBuf {
                data,
                frames: 0,
                shared: true,
            });
        }
        let b = self.out.back_mut().expect("a chunk was just ensured");
        for p in parts {
            b.data.extend_from_slice(p);
        }
        b.frames += frames;
        self.queued += len;
    }

    /// Writes as much of the queue as the kernel takes. Stops after a partial write, since the
    /// next attempt would almost surely find the socket full: one call per progress.
    fn flush(&mut self, stats: &mut NetStats) -> io::Result<()> {
        while self.queued > 0 {
            let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; IOV_MAX];
            let mut count = 0;
            let mut offered = 0;
            debug_assert!(!self.out.is_empty(), "queued bytes live in buffers");
            for (i, b) in self.out.iter().take(IOV_MAX).enumerate() {
                let bytes = if i == 0 {
                    &b.data[self.head..]
                } else {
                    &b.data[..]
                };
                iov[i].write(libc::iovec {
                    iov_base: bytes.as_ptr() as *mut libc::c_void,
                    iov_len: bytes.len(),
                });
                count += 1;
                offered += bytes.len();
            }
            // SAFETY: msghdr is plain old data (pointers and integers); all zeroes is a valid,
            // empty header, and zeroing also covers the private padding fields some libcs have.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_iov = iov.as_mut_ptr().cast();
            hdr.msg_iovlen = count as _;
            // SAFETY: the first `count` iovecs are initialised and each points into a buffer of
            // `self.out` with its exact remaining length; those buffers are neither moved nor
            // freed during the call, and the kernel only reads from them.
            let n = unsafe {
                libc::sendmsg(
                    self.stream.as_raw_fd(),
                    &hdr,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            stats.send_calls += 1;
            if n < 0 {
                let e = io::Error::last_os_error();
                match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => continue,
                    _ => return Err(e),
                }
            }
            let n = n as usize;
            stats.bytes_sent += n as u64;
            self.consume(n, stats);
            if n < offered {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Drops the first `n` queued bytes, which the kernel has taken.
    fn consume(&mut self, mut n: usize, stats: &mut NetStats) {
        self.queued -= n;
        while n > 0 {
            let left = self
                .out
                .front()
                .expect("bytes written were queued")
                .data
                .len()
                - self.head;
            if n < left {
                self.head += n;
                return;
            }
            n -= left;
            self.head = 0;
            let b = self.out.pop_front().expect("checked above");
            stats.packets_sent += b.frames;
            if b.shared && self.spare.is_none() {
                let mut data = b.data;
                data.clear();
                self.spare = Some(data);
            }
        }
    }

    /// One read into the receive buffer (or, while a large frame is in progress, into that
    /// frame's buffer and then the receive buffer, with one `readv`).
    fn read_once(&mut self) -> io::Result<Read1> {
        if self.big_len > 0 {
            debug_assert!(self.rstart == 0 && self.rend == 0);
            let want = self.big_len - self.big.len();
            let spare = self.big.spare_capacity_mut();
            debug_assert!(spare.len() >= want);
            let iov = [
                libc::iovec {
                    iov_base: spare.as_mut_ptr().cast(),
                    iov_len: want,
                },
                libc::iovec {
                    iov_base: self.rbuf.as_mut_ptr().cast(),
                    iov_len: self.rbuf.len(),
                },
            ];
            // SAFETY: both iovecs describe writable memory we own exclusively for the call: the
            // first `want` bytes of `big`'s spare capacity (capacity was reserved for the whole
            // frame) and the whole receive buffer, which holds no unparsed bytes now.
            let n = unsafe { libc::readv(self.stream.as_raw_fd(), iov.as_ptr(), 2) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n == 0 {
                return Ok(Read1::Eof);
            }
            let into_big = n.min(want);
            // SAFETY: the kernel initialised the first `into_big` bytes of the spare capacity,
            // and `big.len() + into_big <= big_len <= capacity`.
            unsafe { self.big.set_len(self.big.len() + into_big) };
            self.rend = n - into_big;
            return Ok(Read1::Data {
                full: n == want + self.rbuf.len(),
            });
        }
        if self.rstart > 0 && self.rbuf.len() - self.rend < self.rbuf.len() / 4 {
            self.compact();
        }
        debug_assert!(self.rend < self.rbuf.len(), "parse leaves room to read");
        match (&self.stream).read(&mut self.rbuf[self.rend..]) {
            Ok(0) => Ok(Read1::Eof),
            Ok(n) => {
                self.rend += n;
                Ok(Read1::Data {
                    full: self.rend == self.rbuf.len(),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Moves the unparsed bytes to the start of the receive buffer.
    fn compact(&mut self) {
        self.rbuf.copy_within(self.rstart..self.rend, 0);
        self.rend -= self.rstart;
        self.rstart = 0;
    }

    /// Delivers every complete frame received so far. Leaves the receive buffer able to take
    /// the rest of an incomplete small frame, or starts a direct receive for a large one.
    fn parse(
        &mut self,
        inbox: &mut Vec<(usize, Vec<u8>)>,
        stats: &mut NetStats,
        pool: &mut BufferPool,
    ) -> Result<(), String> {
        if self.big_len > 0 {
            if self.big.len() < self.big_len {
                return Ok(());
            }
            self.big_len = 0;
            inbox.push((self.rank, std::mem::take(&mut self.big)));
            stats.packets_received += 1;
            stats.messages_received += 1;
        }
        loop {
            let avail = self.rend - self.rstart;
            if self.state == State::Leaving && avail > 0 {
                return Err("protocol violation: data after goodbye".into());
            }
            if avail < PREFIX {
                break;
            }
            let at = self.rstart;
            let len = u32::from_le_bytes(self.rbuf[at..at + PREFIX].try_into().expect("4 bytes"));
            if len == GOODBYE {
                self.state = State::Leaving;
                self.rstart += PREFIX;
                continue;
            }
            let len = len as usize;
            if len > MAX_MESSAGE {
                return Err(format!(
                    "protocol violation: frame of {len} bytes exceeds the limit of {MAX_MESSAGE}"
                ));
            }
            if avail >= PREFIX + len {
                inbox.push((
                    self.rank,
                    pool.copy_of(&self.rbuf[at + PREFIX..at + PREFIX + len]),
                ));
                stats.packets_received += 1;
                stats.messages_received += 1;
                self.rstart += PREFIX + len;
                continue;
            }
            if len > BIG_FRAME {
                let mut big = Vec::with_capacity(len);
                big.extend_from_slice(&self.rbuf[at + PREFIX..self.rend]);
                self.big = big;
                self.big_len = len;
                self.rstart = 0;
                self.rend = 0;
            } else if at + PREFIX + len > self.rbuf.len() {
                self.compact();
            }
            break;
        }
        if self.rstart == self.rend {
            self.rstart = 0;
            self.rend = 0;
        } else if self.rend == self.rbuf.len() {
            // Only a partial prefix can be left at the very end: make room for its rest.
            self.compact();
        }
        Ok(())
    }

    /// Forgets any partially received frame (close discards what arrives).
    fn reset_receive(&mut self) {
        self.big = Vec::new();
        self.big_len = 0;
        self.rstart = 0;
        self.rend = 0;
    }
}

/// A connection accepted during setup whose handshake has not fully arrived.
struct Pending {
    stream: TcpStream,
    buf: [u8; HANDSHAKE_LEN],
    have: usize,
}

/// What reading a pending connection's handshake gave.
enum Hello {
    /// Not all of it has arrived yet.
    Incomplete,
    /// A well-formed handshake for this job from the given rank.
    From(usize),
    /// Garbage, another job or protocol version, an error or an early end of stream.
    Bad,
}

impl Pending {
    fn read(&mut self, job_key: u64) -> Hello {
        // Reads exactly what is missing of the handshake, so that frames the peer sends right
        // after it stay in the socket for the transport proper.
        match (&self.stream).read(&mut self.buf[self.have..]) {
            Ok(0) => Hello::Bad,
            Ok(n) => {
                self.have += n;
                if self.have < HANDSHAKE_LEN {
                    Hello::Incomplete
                } else {
                    parse_handshake(&self.buf, job_key).map_or(Hello::Bad, Hello::From)
                }
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
                ) =>
            {
                Hello::Incomplete
            }
            Err(_) => Hello::Bad,
        }
    }
}

fn handshake(job_key: u64, rank: usize) -> [u8; HANDSHAKE_LEN] {
    let mut h = [0; HANDSHAKE_LEN];
    h[0..4].copy_from_slice(&MAGIC.to_le_bytes());
    h[4..8].copy_from_slice(&VERSION.to_le_bytes());
    h[8..16].copy_from_slice(&job_key.to_le_bytes());
    h[16..24].copy_from_slice(&(rank as u64).to_le_bytes());
    h
}

/// The rank a handshake names, if it is one of ours.
fn parse_handshake(h: &[u8; HANDSHAKE_LEN], job_key: u64) -> Option<usize> {
    let word = |r: std::ops::Range<usize>| u64::from_le_bytes(h[r].try_into().expect("8 bytes"));
    let magic = u32::from_le_bytes(h[0..4].try_into().expect("4 bytes"));
    let version = u32::from_le_bytes(h[4..8].try_into().expect("4 bytes"));
    (magic == MAGIC && version == VERSION && word(8..16) == job_key)
        .then(|| usize::try_from(word(16..24)).ok())
        .flatten()
}

fn io_err(what: &'static str) -> impl FnOnce(io::Error) -> NetError {
    move |source| NetError::Io { what, source }
}

/// Milliseconds to sleep in `poll`: the time left before `deadline` (ns), capped at a slice.
fn poll_ms(now: u64, deadline: u64) -> u16 {
    let left = deadline.saturating_sub(now).div_ceil(1_000_000);
    left.min(POLL_SLICE_MS) as u16
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
                &self.conns.iter().map(|c| c.queued).sum::<usize>(),
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
        })
    }

    /// Connects to a lower rank and introduces this one; retries until the deadline, since the
    /// peer's listener may be momentarily unreachable.
    fn dial(
        &self,
        me: usize,
        peer: usize,
        addr: SocketAddr,
        deadline: Instant,
    ) -> Result<TcpStream, NetError> {
        let hello = handshake(self.job_key, me);
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let err = if left.is_zero() {
                io::Error::from(io::ErrorKind::TimedOut)
            } else {
                match TcpStream::connect_timeout(&addr, left) {
                    Ok(mut s) => match s.write_all(&hello) {
                        Ok(()) => return Ok(s),
                        Err(e) => e,
                    },
                    Err(e) => e,
                }
            };
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(NetError::PeerFailed {
                    peer,
                    why: format!(
                        "could not connect to {addr} within {:?}: {err}",
                        self.config.connect_timeout
                    ),
                });
            }
            std::thread::sleep(left.min(Duration::from_millis(20)));
        }
    }

    /// Accepts connections until every rank in `expected` has one (`conns[r]` set).
    fn accept_all(
        &mut self,
        me: usize,
        expected: &[bool],
        conns: &mut [Option<TcpStream>],
        deadline: Instant,
    ) -> Result<(), NetError> {
        let listener = self.listener.take().expect("checked by connect");
        let result = self.accept_from(&listener, me, expected, conns, deadline);
        self.listener = Some(listener);
        result
    }

    fn accept_from(
        &mut self,
        listener: &TcpListener,
        me: usize,
        expected: &[bool],
        conns: &mut [Option<TcpStream>],
        deadline: Instant,
    ) -> Result<(), NetError> {
        let missing = |conns: &[Option<TcpStream>]| -> Vec<usize> {
            (0..expected.len())
                .filter(|&r| expected[r] && conns[r].is_none())
                .collect()
        };
        let mut left = missing(conns).len();
        if left == 0 {
            return Ok(());
        }
        listener
            .set_nonblocking(true)
            .map_err(io_err("tcp listener nonblocking"))?;
        let mut pending: Vec<Pending> = Vec::new();
        loop {
            loop {
                match listener.accept() {
                    Ok((stream, _)) => {
                        stream
                            .set_nonblocking(true)
                            .map_err(io_err("tcp nonblocking"))?;
                        pending.push(Pending {
                            stream,
                            buf: [0; HANDSHAKE_LEN],
                            have: 0,
                        });
                    }
                    Err(e) => match e.kind() {
                        io::ErrorKind::WouldBlock => break,
                        // A connection that died in the backlog is the stranger's problem.
                        io::ErrorKind::Interrupted | io::ErrorKind::ConnectionAborted => {}
                        _ => return Err(io_err("tcp accept")(e)),
                    },
                }
            }
            let mut i = 0;
            while i < pending.len() {
                match pending[i].read(self.job_key) {
                    Hello::Incomplete => i += 1,
                    Hello::From(r)
                        if r > me && expected.get(r) == Some(&true) && conns[r].is_none() =>
                    {
                        conns[r] = Some(pending.swap_remove(i).stream);
                        left -= 1;
                    }
                    Hello::From(_) | Hello::Bad => {
                        pending.swap_remove(i);
                        self.stats.dropped += 1;
                    }
                }
            }
            if left == 0 {
                // Connections still introducing themselves are not ours: everyone expected
                // has arrived.
                self.stats.dropped += pending.len() as u64;
                return Ok(());
            }
            let remaining = deadline.saturating_duration_since(Instant::now());
            if remaining.is_zero() {
                self.stats.dropped += pending.len() as u64;
                let m = missing(conns);
                return Err(NetError::PeerFailed {
                    peer: m[0],
                    why: format!(
                        "no connection from ranks {m:?} within {:?}",
                        self.config.connect_timeout
                    ),
                });
            }
            let ms = remaining.as_millis().clamp(1, 100) as u16;
            let mut fds: Vec<PollFd<'_>> = std::iter::once(listener.as_fd())
                .chain(pending.iter().map(|p| p.stream.as_fd()))
                .map(|fd| PollFd::new(fd, PollFlags::POLLIN))
                .collect();
            match nix::poll::poll(&mut fds, ms) {
                Ok(_) | Err(nix::errno::Errno::EINTR) => {}
                Err(e) => return Err(io_err("tcp poll")(e.into())),
            }
        }
    }

    /// Prepares an established connection for the steady state.
    fn configure(&self, s: &TcpStream) -> Result<(), NetError> {
        s.set_nonblocking(true).map_err(io_err("tcp nonblocking"))?;
        s.set_nodelay(true).map_err(io_err("tcp nodelay"))?;
        if self.config.socket_buffer > 0 {
            // Best effort: the kernel silently caps these, and a refusal only costs bandwidth.
            let _ = sock::setsockopt(s, sockopt::SndBuf, &self.config.socket_buffer);
            let _ = sock::setsockopt(s, sockopt::RcvBuf, &self.config.socket_buffer);
        }
        Ok(())
    }

    /// Marks a connection failed, discards its output and stops watching it.
    fn fail(&mut self, idx: usize, why: String) -> NetError {
        let conn = &mut self.conns[idx];
        conn.state = State::Failed;
        conn.out.clear();
        conn.queued = 0;
        conn.head = 0;
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
        if !conn.dirty && conn.queued > 0 {
            conn.dirty = true;
            self.dirty.push(idx);
        }
    }

    /// Writes every non-empty queue. On a broken connection, stops and reports it.
    fn flush_all(&mut self) -> Result<(), NetError> {
        let mut i = 0;
        while i < self.dirty.len() {
            let idx = self.dirty[i];
            let conn = &mut self.conns[idx];
            if let Err(e) = conn.flush(&mut self.stats) {
                let why = write_failure(conn.state, &e);
                return Err(self.fail(idx, why));
            }
            if conn.queued == 0 {
                conn.dirty = false;
                self.dirty.swap_remove(i);
            } else {
                i += 1;
            }
        }
        Ok(())
    }

    /// Reads what connection `idx` has and delivers its complete frames.
    fn receive(&mut self, idx: usize, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<(), NetError> {
        loop {
            let conn = &mut self.conns[idx];
            if !matches!(conn.state, State::Open | State::Leaving) {
                return Ok(());
            }
            self.stats.recv_calls += 1;
            match conn.read_once() {
                Ok(Read1::Data { full }) => {
                    if let Err(why) = conn.parse(inbox, &mut self.stats, &mut self.pool) {
                        return Err(self.fail(idx, why));
                    }
                    if !full {
                        return Ok(());
                    }
                }
                Ok(Read1::Eof) => {
                    if conn.state == State::Leaving && conn.rend == conn.rstart && conn.big_len == 0
                    {
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

    /// During close: reads and throws away whatever connection `idx` has, noting its end of
    /// stream (expected now, goodbye or not).
    fn discard(&mut self, idx: usize) -> Result<(), NetError> {
        loop {
            let conn = &mut self.conns[idx];
            if !matches!(conn.state, State::Open | State::Leaving) {
                return Ok(());
            }
            self.stats.recv_calls += 1;
            match (&conn.stream).read(&mut conn.rbuf[..]) {
                Ok(0) => {
                    conn.state = State::Finished;
                    self.unwatch(idx);
                    return Ok(());
                }
                Ok(n) if n < conn.rbuf.len() => return Ok(()),
                Ok(_) => {}
                Err(e) => match e.kind() {
                    io::ErrorKind::WouldBlock => return Ok(()),
                    io::ErrorKind::Interrupted => {}
                    // A peer in an orderly close reads until our end of stream, so it never
                    // resets: a reset means data we sent may not have been read.
                    io::ErrorKind::ConnectionReset => {
                        return Err(
                            self.fail(idx, "connection reset by the peer during close".into())
                        )
                    }
                    _ => return Err(self.fail(idx, format!("read failed during close: {e}"))),
                },
            }
        }
    }

    /// During close: waits until some connection can make progress or `ms` pass.
    fn wait(&self, ms: u16) {
        let mut fds: Vec<PollFd<'_>> = self
            .conns
            .iter()
            .filter_map(|c| {
                let mut flags = PollFlags::empty();
                if matches!(c.state, State::Open | State::Leaving) {
                    flags |= PollFlags::POLLIN;
                }
                if c.queued > 0 {
                    flags |= PollFlags::POLLOUT;
                }
                (!flags.is_empty()).then(|| PollFd::new(c.stream.as_fd(), flags))
            })
            .collect();
        // An error here (EINTR) only shortens the sleep; the caller loops on the clock.
        let _ = nix::poll::poll(&mut fds, ms);
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
        let deadline = Instant::now() + self.config.connect_timeout;
        let mut streams: Vec<Option<TcpStream>> = (0..peers.len()).map(|_| None).collect();
        for (r, addr) in peers.iter().enumerate().take(me) {
            if let Some(addr) = *addr {
                streams[r] = Some(self.dial(me, r, addr, deadline)?);
            }
        }
        let expected: Vec<bool> = peers
            .iter()
            .enumerate()
            .map(|(r, a)| r > me && a.is_some())
            .collect();
        self.accept_all(me, &expected, &mut streams, deadline)?;

        let mut slot = vec![NO_CONN; peers.len()];
        let mut conns = Vec::new();
        for (r, s) in streams.into_iter().enumerate() {
            if let Some(s) = s {
                self.configure(&s)?;
                slot[r] = conns.len();
                conns.push(Conn::new(r, s));
            }
        }
        if conns.len() != 1 {
            // SAFETY: epoll_create1 takes no pointers; the result is checked before use.
            let raw = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
            if raw < 0 {
                return Err(io_err("epoll_create1")(io::Error::last_os_error()));
            }
            // SAFETY: `raw` is a fresh descriptor that nothing else owns.
            let ep = unsafe { OwnedFd::from_raw_fd(raw) };
            for (i, c) in conns.iter().enumerate() {
                let mut ev = libc::epoll_event {
                    events: libc::EPOLLIN as u32,
                    u64: i as u64,
                };
                // SAFETY: both descriptors are open and `ev` is a valid event for the call.
                let rc = unsafe {
                    libc::epoll_ctl(
                        ep.as_raw_fd(),
                        libc::EPOLL_CTL_ADD,
                        c.stream.as_raw_fd(),
                        &mut ev,
                    )
                };
                if rc < 0 {
                    return Err(io_err("epoll_ctl")(io::Error::last_os_error()));
                }
            }
            self.events = vec![libc::epoll_event { events: 0, u64: 0 }; conns.len().clamp(1, 256)];
            self.epoll = Some(ep);
        }
        self.slot = slot;
        self.conns = conns;
        self.me = Some(me);
        // Nobody else may join; strangers now get refused by the kernel instead of piling up.
        self.listener = None;
        Ok(())
    }

    fn send(&mut self, peer: usize, msg: &[u8], _now: u64) -> Result<(), NetError> {
        if msg.len() > MAX_MESSAGE {
            return Err(NetError::TooLarge {
                len: msg.len(),
                max: MAX_MESSAGE,
            });
        }
        let idx = match self.slot.get(peer) {
            Some(&i) if i != NO_CONN => i,
            _ => return Err(NetError::NotAPeer { peer }),
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
        if conn.queued > 0 && conn.queued + PREFIX + msg.len() > self.config.max_queued {
            self.stats.would_block += 1;
            return Err(NetError::WouldBlock);
        }
        conn.enqueue(msg);
        self.stats.messages_sent += 1;
        if conn.queued > self.config.flush_threshold {
            if let Err(e) = conn.flush(&mut self.stats) {
                let why = write_failure(conn.state, &e);
                return Err(self.fail(idx, why));
            }
        }
        self.mark_dirty(idx);
        Ok(())
    }

    fn recycle(&mut self, _peer: usize, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    fn flush(&mut self, _now: u64) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.flush_all()
    }

    fn progress(
        &mut self,
        _now: u64,
        inbox: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<usize, NetError> {
        let before = inbox.len();
        if self.closed {
            return Ok(0);
        }
        self.flush_all()?;
        match self.epoll.as_ref().map(|ep| ep.as_raw_fd()) {
            None if self.conns.len() == 1 => self.receive(0, inbox)?,
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
                    self.receive(idx, inbox)?;
                }
            }
        }
        Ok(inbox.len() - before)
    }

    fn is_idle(&self) -> bool {
        self.dirty.iter().all(|&i| self.conns[i].queued == 0)
    }

    fn next_deadline(&self) -> Option<u64> {
        None
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
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.listener = None;
        let mut first: Option<NetError> = None;
        let goodbye = GOODBYE.to_le_bytes();
        for idx in 0..self.conns.len() {
            let conn = &mut self.conns[idx];
            conn.reset_receive();
            if matches!(conn.state, State::Open | State::Leaving) {
                conn.append_shared(&[&goodbye], 0);
                self.mark_dirty(idx);
            }
        }

        // Write everything, reading meanwhile so that a peer blocked on writing to us (and
        // so not reading) gets unstuck.
        loop {
            while let Err(e) = self.flush_all() {
                first.get_or_insert(e);
            }
            for idx in 0..self.conns.len() {
                if let Err(e) = self.discard(idx) {
                    first.get_or_insert(e);
                }
            }
            if self.dirty.is_empty() {
                break;
            }
            let t = now();
            if t >= deadline {
                let c = &self.conns[self.dirty[0]];
                first.get_or_insert(NetError::PeerFailed {
                    peer: c.rank,
                    why: format!("{} bytes still unsent at the close deadline", c.queued),
                });
                break;
            }
            self.wait(poll_ms(t, deadline));
        }

        for c in &self.conns {
            if c.state != State::Failed {
                // Errors mean the connection is already gone, which the reads below notice.
                let _ = c.stream.shutdown(Shutdown::Write);
            }
        }

        // Read until every peer has finished too, so that no unread data of theirs makes
        // our kernel answer with a reset that could destroy what we wrote.
        loop {
            for idx in 0..self.conns.len() {
                if let Err(e) = self.discard(idx) {
                    first.get_or_insert(e);
                }
            }
            let open: Vec<usize> = self
                .conns
                .iter()
                .filter(|c| matches!(c.state, State::Open | State::Leaving))
                .map(|c| c.rank)
                .collect();
            if open.is_empty() {
                break;
            }
            let t = now();
            if t >= deadline {
                first.get_or_insert(NetError::PeerFailed {
                    peer: open[0],
                    why: format!("ranks {open:?} did not close their side before the deadline"),
                });
                break;
            }
            self.wait(poll_ms(t, deadline));
        }
        first.map_or(Ok(()), Err)
    }

    fn stats(&self) -> NetStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;
    use std::sync::OnceLock;
    use std::thread;

    const KEY: u64 = 0x0123_4567_89ab_cdef;
    const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

    type Inbox = Vec<(usize, Vec<u8>)>;

    fn now() -> u64 {
        static EPOCH: OnceLock<Instant> = OnceLock::new();
        EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
    }

    fn config() -> TcpConfig {
        TcpConfig {
            connect_timeout: Duration::from_secs(10),
            ..TcpConfig::default()
        }
    }

    fn bind_with(config: &TcpConfig) -> TcpTransport {
        TcpTransport::bind(LOCAL, KEY, config.clone()).expect("bind")
    }

    /// Connects bound transports as ranks 0..n, each in its own thread (connect blocks until
    /// the higher ranks have arrived).
    fn connect_all(ts: Vec<TcpTransport>) -> Vec<TcpTransport> {
        let addrs: Vec<Option<SocketAddr>> = ts.iter().map(|t| Some(t.local_addr())).collect();
        let handles: Vec<_> = ts
            .into_iter()
            .enumerate()
            .map(|(me, mut t)| {
                let mut peers = addrs.clone();
                peers[me] = None;
                thread::spawn(move || t.connect(me, &peers).map(|()| t))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("connect thread").expect("connect"))
            .collect()
    }

    fn mesh_with(n: usize, config: &TcpConfig) -> Vec<TcpTransport> {
        connect_all((0..n).map(|_| bind_with(config)).collect())
    }

    fn mesh(n: usize) -> Vec<TcpTransport> {
        mesh_with(n, &config())
    }

    fn inboxes(n: usize) -> Vec<Inbox> {
        (0..n).map(|_| Vec::new()).collect()
    }

    /// One progress call on every transport.
    fn pump(ts: &mut [TcpTransport], inboxes: &mut [Inbox]) {
        for (t, inbox) in ts.iter_mut().zip(inboxes.iter_mut()) {
            t.progress(now(), inbox).expect("progress");
        }
    }

    /// A message of `len` bytes whose content depends on `tag`; its first 8 bytes (or fewer)
    /// are `tag` itself.
    fn message(tag: u64, len: usize) -> Vec<u8> {
        let mut m: Vec<u8> = (0..len)
            .map(|i| (tag as usize).wrapping_mul(31).wrapping_add(i) as u8)
            .collect();
        let n = len.min(8);
        m[..n].copy_from_slice(&tag.to_le_bytes()[..n]);
        m
    }

    fn tag_of(m: &[u8]) -> u64 {
        u64::from_le_bytes(m[..8].try_into().unwrap())
    }

    fn assert_message(m: &[u8], tag: u64, len: usize) {
        assert_eq!(m.len(), len, "length of message {tag}");
        assert!(m == message(tag, len), "content of message {tag}");
    }

    fn give_up_after(secs: u64) -> impl Fn(&str) {
        let end = Instant::now() + Duration::from_secs(secs);
        move |what: &str| assert!(Instant::now() < end, "timed out: {what}")
    }

    /// Sends, progressing everyone while the queue is full.
    fn send_retry(ts: &mut [TcpTransport], ins: &mut [Inbox], from: usize, to: usize, m: &[u8]) {
        let check = give_up_after(10);
        loop {
            match ts[from].send(to, m, now()) {
                Ok(()) => return,
                Err(NetError::WouldBlock) => pump(ts, ins),
                Err(e) => panic!("send {from}->{to}: {e}"),
            }
            check("send_retry");
        }
    }

    #[test]
    fn transport_is_send() {
        fn is_send<T: Send>() {}
        is_send::<TcpTransport>();
    }

    #[test]
    fn small_messages_arrive_once_and_in_order_both_ways() {
        const N: u64 = 100_000;
        let len = |seq: u64| 8 + (seq % 57) as usize;
        let mut ts = mesh(2);
        let mut ins = inboxes(2);
        let mut sent = [0u64; 2];
        let mut next = [0u64; 2];
        let check = give_up_after(15);
        while next != [N, N] {
            for from in 0..2 {
                for _ in 0..100 {
                    if sent[from] == N {
                        break;
                    }
                    let m = message(sent[from], len(sent[from]));
                    match ts[from].send(1 - from, &m, now()) {
                        Ok(()) => sent[from] += 1,
                        Err(NetError::WouldBlock) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            pump(&mut ts, &mut ins);
            for (r, inbox) in ins.iter_mut().enumerate() {
                for (src, m) in inbox.drain(..) {
                    assert_eq!(src, 1 - r);
                    assert_eq!(tag_of(&m), next[r], "rank {r} got a message out of order");
                    assert_message(&m, next[r], len(next[r]));
                    next[r] += 1;
                }
            }
            check(&format!("delivered {next:?}"));
        }
        for _ in 0..20 {
            pump(&mut ts, &mut ins);
        }
        assert!(ins.iter().all(|i| i.is_empty()), "extra messages");
        for t in &ts {
            let s = t.stats();
            assert_eq!((s.messages_sent, s.messages_received), (N, N));
            assert_eq!((s.packets_sent, s.packets_received), (N, N));
            assert!(s.send_calls < N / 10, "writes were not batched: {s:?}");
            assert!(t.is_idle());
        }
    }

    #[test]
    fn message_sizes_arrive_intact() {
        let sizes = [
            0,
            1,
            4095,
            SMALL_MESSAGE,
            SMALL_MESSAGE + 1,
            BIG_FRAME,
            BIG_FRAME + 1,
            65536,
            RECV_BUF + 3,
            1 << 20,
            MAX_MESSAGE,
            5,
            0,
            MAX_MESSAGE - 1,
            9,
        ];
        let mut ts = mesh(2);
        let mut ins = inboxes(2);
        for (i, &len) in sizes.iter().enumerate() {
            send_retry(&mut ts, &mut ins, 0, 1, &message(i as u64, len));
            send_retry(&mut ts, &mut ins, 1, 0, &message(i as u64, len));
        }
        let check = give_up_after(15);
        while ins.iter().map(|i| i.len()).sum::<usize>() < 2 * sizes.len() {
            pump(&mut ts, &mut ins);
            check("sizes");
        }
        for (r, inbox) in ins.iter().enumerate() {
            assert_eq!(inbox.len(), sizes.len());
            for (i, ((src, m), &len)) in inbox.iter().zip(&sizes).enumerate() {
                assert_eq!(*src, 1 - r);
                assert_eq!(m.len(), len);
                if len >= 8 {
                    assert_message(m, i as u64, len);
                }
            }
        }
        assert!(matches!(
            ts[0].send(1, &vec![0; MAX_MESSAGE + 1], now()),
            Err(NetError::TooLarge { len, max }) if len == MAX_MESSAGE + 1 && max == MAX_MESSAGE
        ));
        assert!(matches!(
            ts[0].send(0, b"me", now()),
            Err(NetError::NotAPeer { peer: 0 })
        ));
        assert!(matches!(
            ts[0].send(7, b"x", now()),
            Err(NetError::NotAPeer { peer: 7 })
        ));
    }

    #[test]
    fn all_to_all_among_four_is_attributed_to_sources() {
        const N: usize = 4;
        const M: u64 = 2000;
        let len = |seq: u64| {
            if seq % 97 == 0 {
                100_000
            } else {
                8 + (seq % 200) as usize
            }
        };
        let tag =
            |src: usize, dst: usize, seq: u64| ((src as u64) << 40) | ((dst as u64) << 32) | seq;
        let mut ts = mesh(N);
        let mut ins = inboxes(N);
        for seq in 0..M {
            for src in 0..N {
                for dst in (0..N).filter(|&d| d != src) {
                    send_retry(
                        &mut ts,
                        &mut ins,
                        src,
                        dst,
                        &message(tag(src, dst, seq), len(seq)),
                    );
                }
            }
            pump(&mut ts, &mut ins);
        }
        let mut next = [[0u64; N]; N];
        let mut done = 0;
        let check = give_up_after(15);
        while done < N * (N - 1) * M as usize {
            for (dst, inbox) in ins.iter_mut().enumerate() {
                for (src, m) in inbox.drain(..) {
                    let seq = next[dst][src];
                    assert_eq!(tag_of(&m), tag(src, dst, seq), "rank {dst} from {src}");
                    assert_message(&m, tag(src, dst, seq), len(seq));
                    next[dst][src] += 1;
                    done += 1;
                }
            }
            pump(&mut ts, &mut ins);
            check("all to all");
        }
        for t in &ts {
            assert_eq!(t.stats().messages_received, (N as u64 - 1) * M);
            assert!(t.epoll.is_some() && t.readable_fd() == t.epoll.as_ref().unwrap().as_raw_fd());
        }
    }

    #[test]
    fn strangers_during_setup_are_dropped_and_counted() {
        let ts: Vec<_> = (0..3).map(|_| bind_with(&config())).collect();
        let target = ts[0].local_addr();
        let connect = || TcpStream::connect(target).expect("stranger connect");
        let mut garbage = connect();
        garbage.write_all(&[0xab; 40]).unwrap();
        let mut foreign = connect();
        foreign.write_all(&handshake(KEY ^ 1, 1)).unwrap();
        let mut old = connect();
        let mut h = handshake(KEY, 2);
        h[4] = 99; // another protocol version
        old.write_all(&h).unwrap();
        let mut impostor = connect();
        impostor.write_all(&handshake(KEY, 0)).unwrap(); // rank 0 never connects to itself
        let mut partial = connect();
        partial.write_all(&handshake(KEY, 2)[..10]).unwrap();
        drop(partial);
        let mut silent = connect();

        let mut ts = connect_all(ts);
        assert_eq!(ts[0].stats().dropped, 6);
        assert_eq!(ts[1].stats().dropped, 0);

        // The silent stranger has been hung up on.
        silent
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut buf = [0; 8];
        match silent.read(&mut buf) {
            Ok(0) => {}
            Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
            other => panic!("stranger still connected: {other:?}"),
        }

        let mut ins = inboxes(3);
        for (from, to) in [(0, 1), (0, 2), (1, 0), (2, 0)] {
            send_retry(&mut ts, &mut ins, from, to, &message(from as u64, 16));
        }
        let check = give_up_after(5);
        while ins.iter().map(|i| i.len()).sum::<usize>() < 4 {
            pump(&mut ts, &mut ins);
            check("traffic after strangers");
        }
        let mut got0: Vec<usize> = ins[0].iter().map(|(s, _)| *s).collect();
        got0.sort();
        assert_eq!(got0, [1, 2]);
        assert_eq!(ins[1][0].0, 0);
        assert_eq!(ins[2][0].0, 0);
    }

    #[test]
    fn connect_times_out_naming_missing_ranks() {
        let cfg = TcpConfig {
            connect_timeout: Duration::from_millis(300),
            ..config()
        };
        let mut ts: Vec<_> = (0..3).map(|_| bind_with(&cfg)).collect();
        let peers = [None, Some(ts[1].local_addr()), Some(ts[2].local_addr())];
        let start = Instant::now();
        match ts[0].connect(0, &peers) {
            Err(NetError::PeerFailed { peer: 1, why }) => assert!(why.contains("[1, 2]"), "{why}"),
            other => panic!("expected a timeout, got {other:?}"),
        }
        assert!(start.elapsed() < Duration::from_secs(5));
    }

    #[test]
    fn dropped_peer_is_reported_by_rank() {
        // Orderly end of stream but no goodbye: the peer process went away.
        let mut ts = mesh(2);
        let mut ins = inboxes(2);
        for i in 0..100 {
            send_retry(&mut ts, &mut ins, 0, 1, &message(i, 64));
        }
        let check = give_up_after(5);
        while ins[1].len() < 100 {
            pump(&mut ts, &mut ins);
            check("delivery before the drop");
        }
        drop(ts.pop());
        let check = give_up_after(5);
        loop {
            match ts[0].progress(now(), &mut ins[0]) {
                Ok(_) => check("failure report"),
                Err(NetError::PeerFailed { peer, .. }) => {
                    assert_eq!(peer, 1);
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
        assert!(matches!(
            ts[0].send(1, b"x", now()),
            Err(NetError::PeerFailed { peer: 1, .. })
        ));
        assert!(ts[0].is_idle());
    }

    #[test]
    fn reset_peer_is_reported_and_the_others_carry_on() {
        // Rank 2 dies with unread data, so its kernel resets the connection.
        let mut ts = mesh(3);
        let mut ins = inboxes(3);
        ts[0].send(2, &message(1, 1 << 20), now()).unwrap();
        ts[0].progress(now(), &mut ins[0]).unwrap();
        thread::sleep(Duration::from_millis(50));
        drop(ts.pop());
        for r in 0..2 {
            let check = give_up_after(5);
            loop {
                match ts[r].progress(now(), &mut ins[r]) {
                    Ok(_) => check("failure report"),
                    Err(NetError::PeerFailed { peer, why }) => {
                        assert_eq!(peer, 2, "{why}");
                        break;
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        send_retry(&mut ts, &mut ins, 0, 1, &message(5, 100));
        send_retry(&mut ts, &mut ins, 1, 0, &message(6, 100));
        let check = give_up_after(5);
        while ins[0].is_empty() || ins[1].is_empty() {
            pump(&mut ts, &mut ins);
            check("survivors");
        }
        assert_message(&ins[1][0].1, 5, 100);
        assert_message(&ins[0][0].1, 6, 100);
    }

    /// A transport as rank 0 whose rank 1 is a raw socket in the test's hands.
    fn with_raw_peer() -> (TcpTransport, TcpStream) {
        let mut t = bind_with(&config());
        let mut raw = TcpStream::connect(t.local_addr()).unwrap();
        raw.write_all(&handshake(KEY, 1)).unwrap();
        // Rank 0 accepts from rank 1 and never dials it, so its address is not used.
        let unused = SocketAddr::new(LOCAL, 9);
        t.connect(0, &[None, Some(unused)]).unwrap();
        (t, raw)
    }

    fn frame(body: &[u8]) -> Vec<u8> {
        let mut f = (body.len() as u32).to_le_bytes().to_vec();
        f.extend_from_slice(body);
        f
    }

    /// Progresses until an error, returning it with what was delivered before.
    fn progress_until_error(t: &mut TcpTransport) -> (NetError, Inbox) {
        let mut inbox = Vec::new();
        let check = give_up_after(5);
        loop {
            if let Err(e) = t.progress(now(), &mut inbox) {
                return (e, inbox);
            }
            check("an error");
        }
    }

    #[test]
    fn oversized_length_prefix_is_a_protocol_violation() {
        let (mut t, mut raw) = with_raw_peer();
        raw.write_all(&frame(b"fine")).unwrap();
        raw.write_all(&(MAX_MESSAGE as u32 + 1).to_le_bytes())
            .unwrap();
        let (e, inbox) = progress_until_error(&mut t);
        assert_eq!(inbox, [(1, b"fine".to_vec())]);
        match e {
            NetError::PeerFailed { peer: 1, why } => assert!(why.contains("protocol violation")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn end_of_stream_after_goodbye_is_orderly() {
        let (mut t, mut raw) = with_raw_peer();
        raw.write_all(&frame(b"last words")).unwrap();
        raw.write_all(&GOODBYE.to_le_bytes()).unwrap();
        raw.shutdown(Shutdown::Write).unwrap();
        let mut inbox = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_millis(100) {
            t.progress(now(), &mut inbox)
                .expect("an announced close is no failure");
        }
        assert_eq!(inbox, [(1, b"last words".to_vec())]);
        assert!(matches!(
            t.send(1, b"x", now()),
            Err(NetError::PeerFailed { peer: 1, .. })
        ));
        assert_eq!(t.conns[0].state, State::Finished);
    }

    #[test]
    fn data_after_goodbye_is_a_protocol_violation() {
        let (mut t, mut raw) = with_raw_peer();
        raw.write_all(&GOODBYE.to_le_bytes()).unwrap();
        raw.write_all(&frame(b"zombie")).unwrap();
        let (e, inbox) = progress_until_error(&mut t);
        assert!(inbox.is_empty());
        assert!(
            matches!(e, NetError::PeerFailed { peer: 1, why } if why.contains("after goodbye"))
        );
    }

    #[test]
    fn flood_without_reader_blocks_then_drains_in_order() {
        const N: u64 = 800;
        let len = |seq: u64| 100 + (seq * 7919 % 60_000) as usize;
        let cfg = TcpConfig {
            socket_buffer: 64 << 10,
            max_queued: 1 << 20,
            ..config()
        };
        let mut ts = mesh_with(2, &cfg);
        let mut ins = inboxes(2);
        // Rank 1 does not read: kernel buffers fill, writes become partial, the queue grows
        // to its bound.
        let mut sent = 0;
        let check = give_up_after(5);
        loop {
            match ts[0].send(1, &message(sent, len(sent)), now()) {
                Ok(()) => sent += 1,
                Err(NetError::WouldBlock) => {
                    ts[0].progress(now(), &mut ins[0]).unwrap();
                    if !ts[0].is_idle() && ts[0].stats().would_block >= 3 {
                        break;
                    }
                }
                Err(e) => panic!("{e}"),
            }
            assert!(sent < N, "the queue never filled");
            check("flood");
        }
        assert!(ts[0].conns[0].queued > (1 << 20) / 2);
        // Now it reads.
        let mut next = 0;
        let check = give_up_after(10);
        while next < N {
            if sent < N {
                match ts[0].send(1, &message(sent, len(sent)), now()) {
                    Ok(()) => sent += 1,
                    Err(NetError::WouldBlock) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            pump(&mut ts, &mut ins);
            for (src, m) in ins[1].drain(..) {
                assert_eq!(src, 0);
                assert_eq!(tag_of(&m), next, "out of order");
                assert_message(&m, next, len(next));
                next += 1;
            }
            check("drain");
        }
        assert!(ts[0].stats().would_block >= 3);
    }

    #[test]
    fn ping_pong_costs_one_write_per_message_per_side() {
        const ROUNDS: u64 = 2000;
        let mut ts = mesh(2);
        let mut ins = inboxes(2);
        let check = give_up_after(10);
        for round in 0..ROUNDS {
            for (from, to) in [(0, 1), (1, 0)] {
                ts[from].send(to, &round.to_le_bytes(), now()).unwrap();
                ts[from].progress(now(), &mut ins[from]).unwrap();
                while ins[to].is_empty() {
                    ts[to].progress(now(), &mut ins[to]).unwrap();
                    check("ping-pong");
                }
                let (src, m) = ins[to].pop().unwrap();
                assert_eq!((src, tag_of(&m)), (from, round));
            }
        }
        for t in &ts {
            let s = t.stats();
            assert_eq!(s.send_calls, ROUNDS, "{s:?}");
            assert_eq!(s.packets_sent, ROUNDS);
            assert_eq!(s.bytes_sent, ROUNDS * 12);
            assert!(s.recv_calls >= ROUNDS);
        }
    }

    #[test]
    fn close_after_sending_delivers_everything() {
        const N: u64 = 3000;
        let len = |seq: u64| {
            if seq % 100 == 0 {
                300_000
            } else {
                8 + (seq % 300) as usize
            }
        };
        let mut ts = mesh(2);
        let mut b = ts.pop().unwrap();
        let mut a = ts.pop().unwrap();
        let sender = thread::spawn(move || {
            let mut inbox = Vec::new();
            for seq in 0..N {
                let m = message(seq, len(seq));
                loop {
                    match a.send(1, &m, now()) {
                        Ok(()) => break,
                        Err(NetError::WouldBlock) => {
                            a.progress(now(), &mut inbox).unwrap();
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            // Close at once: most of the data is still queued or in flight.
            let r = a.close(&mut now, now() + 10_000_000_000);
            (r, a.stats())
        });
        let mut inbox = Vec::new();
        let mut next = 0;
        let check = give_up_after(10);
        while next < N {
            b.progress(now(), &mut inbox)
                .expect("the sender's goodbye is no failure");
            for (src, m) in inbox.drain(..) {
                assert_eq!(src, 0);
                assert_message(&m, next, len(next));
                next += 1;
            }
            check("delivery");
        }
        for _ in 0..100 {
            b.progress(now(), &mut inbox)
                .expect("the sender's goodbye is no failure");
        }
        b.close(&mut now, now() + 10_000_000_000)
            .expect("receiver close");
        let (r, stats) = sender.join().unwrap();
        r.expect("sender close");
        assert_eq!(stats.messages_sent, N);
        assert_eq!(b.stats().messages_received, N);
    }

    #[test]
    fn simultaneous_close_after_all_to_all() {
        const N: usize = 3;
        const M: u64 = 500;
        let mut ts = mesh(N);
        let mut ins = inboxes(N);
        for seq in 0..M {
            for src in 0..N {
                for dst in (0..N).filter(|&d| d != src) {
                    send_retry(&mut ts, &mut ins, src, dst, &message(seq, 40));
                }
            }
        }
        let check = give_up_after(10);
        while ins.iter().any(|i| i.len() < (N - 1) * M as usize) {
            pump(&mut ts, &mut ins);
            check("all to all");
        }
        let closers: Vec<_> = ts
            .into_iter()
            .map(|mut t| {
                thread::spawn(move || {
                    // Something sent just before close still goes out; the peers discard it.
                    let me = t.me.unwrap();
                    t.send((me + 1) % N, b"late", now()).unwrap();
                    t.close(&mut now, now() + 10_000_000_000).map(|()| t)
                })
            })
            .collect();
        for c in closers {
            let t = c.join().unwrap().expect("close");
            assert!(t.is_idle());
            assert!(t.conns.iter().all(|c| c.state == State::Finished));
        }
    }

    /// Round-trip time of the transport against a raw busy-polling TCP ping-pong of the same
    /// 8-byte payload. `cargo test --release -p volley --lib bench_ping_pong -- --ignored
    /// --nocapture`.
    #[test]
    #[ignore = "benchmark"]
    fn bench_ping_pong_against_raw_tcp() {
        const ROUNDS: u64 = 20_000;
        /// Fills `buf` from a non-blocking stream, busy-polling.
        fn read_spinning(s: &mut TcpStream, buf: &mut [u8]) {
            let mut got = 0;
            while got < buf.len() {
                match s.read(&mut buf[got..]) {
                    Ok(0) => panic!("eof"),
                    Ok(n) => got += n,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }
        fn raw() -> Duration {
            let l = TcpListener::bind((LOCAL, 0)).unwrap();
            let addr = l.local_addr().unwrap();
            let echo = thread::spawn(move || {
                let (mut s, _) = l.accept().unwrap();
                s.set_nodelay(true).unwrap();
                s.set_nonblocking(true).unwrap();
                let mut buf = [0u8; 8];
                for _ in 0..ROUNDS {
                    read_spinning(&mut s, &mut buf);
                    s.write_all(&buf).unwrap();
                }
            });
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_nodelay(true).unwrap();
            s.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 8];
            let start = Instant::now();
            for i in 0..ROUNDS {
                s.write_all(&i.to_le_bytes()).unwrap();
                read_spinning(&mut s, &mut buf);
            }
            let t = start.elapsed();
            echo.join().unwrap();
            t
        }
        fn volley() -> Duration {
            let mut ts = mesh(2);
            let mut b = ts.pop().unwrap();
            let mut a = ts.pop().unwrap();
            let echo = thread::spawn(move || {
                let mut inbox = Vec::new();
                for _ in 0..ROUNDS {
                    while inbox.is_empty() {
                        b.progress(0, &mut inbox).unwrap();
                    }
                    let (_, m) = inbox.pop().unwrap();
                    b.send(0, &m, 0).unwrap();
                    b.progress(0, &mut inbox).unwrap();
                }
                b
            });
            let mut inbox = Vec::new();
            let start = Instant::now();
            for i in 0..ROUNDS {
                a.send(1, &i.to_le_bytes(), 0).unwrap();
                while inbox.is_empty() {
                    a.progress(0, &mut inbox).unwrap();
                }
                inbox.clear();
            }
            let t = start.elapsed();
            let b = echo.join().unwrap();
            println!(
                "volley stats a: {:?}\nvolley stats b: {:?}",
                a.stats(),
                b.stats()
            );
            t
        }
        let mut best = (Duration::MAX, Duration::MAX);
        for _ in 0..3 {
            best.0 = best.0.min(raw());
            best.1 = best.1.min(volley());
        }
        let per = |d: Duration| d.as_nanos() as f64 / ROUNDS as f64 / 1000.0;
        println!(
            "round trip: raw {:.2} us, volley {:.2} us, ratio {:.3}",
            per(best.0),
            per(best.1),
            per(best.1) / per(best.0)
        );
    }
}
