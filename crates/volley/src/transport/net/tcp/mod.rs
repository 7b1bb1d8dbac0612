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
mod tests;
