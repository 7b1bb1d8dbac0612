//! Setting up the connections: the handshake, dialling the lower ranks and accepting the
//! higher ones, all within one deadline (see "Setup without deadlock" in the [parent](super)).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::poll::{PollFd, PollFlags};

use super::{io_err, Conn, TcpTransport, NO_CONN};
use crate::transport::net::NetError;

/// First field of the handshake: `"VLYT"`.
const MAGIC: u32 = u32::from_le_bytes(*b"VLYT");
/// Bumped whenever the wire format changes, so mixed builds refuse each other at setup.
const VERSION: u32 = 1;
/// Bytes in a handshake.
pub(super) const HANDSHAKE_LEN: usize = 24;

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

/// The handshake rank `rank` of job `job_key` sends first on a connection it makes.
pub(super) fn handshake(job_key: u64, rank: usize) -> [u8; HANDSHAKE_LEN] {
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

impl TcpTransport {
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

    /// Establishes a connection with every rank `peers` gives an address (see
    /// [`NetTransport::connect`](crate::transport::net::NetTransport::connect)); `me` is in
    /// range and this transport not yet connected.
    pub(super) fn establish(
        &mut self,
        me: usize,
        peers: &[Option<SocketAddr>],
    ) -> Result<(), NetError> {
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
                super::options::apply(&s, &self.config)?;
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
}
