//! A connection's input: bytes read into a receive buffer (or straight into a large frame's
//! own buffer) and cut into frames.

use std::io::{self, Read};
use std::os::fd::AsRawFd;

use super::{State, GOODBYE, PREFIX};
use crate::reliable::BufferPool;
use crate::transport::net::placing::Placing;
use crate::transport::net::{NetStats, Placer, MAX_MESSAGE};

/// Per-connection receive buffer. One read can take in this much of a burst of small frames.
pub(super) const RECV_BUF: usize = 128 << 10;
/// An incomplete frame longer than this is received straight into its own `Vec` (the one
/// delivered to the inbox) instead of through the receive buffer, saving a copy.
pub(super) const BIG_FRAME: usize = 32 << 10;

/// What one read did.
pub(super) enum Read1 {
    /// Some bytes arrived; `full` when they filled all the space offered, so more may wait.
    Data { full: bool },
    /// The peer closed its write side.
    Eof,
}

/// The bytes received from one peer and not yet delivered.
pub(super) struct Receiver {
    /// Receive buffer; bytes `rstart..rend` are received and not yet parsed.
    rbuf: Box<[u8]>,
    rstart: usize,
    rend: usize,
    /// A large frame being received directly: its bytes so far (capacity at least its length).
    big: Vec<u8>,
    /// That frame's length, 0 when none is in progress (empty frames never take this path).
    big_len: usize,
    /// A large frame whose payload is being received straight into the segment.
    direct: Option<Placing>,
}

impl Receiver {
    pub(super) fn new() -> Self {
        Receiver {
            rbuf: vec![0; RECV_BUF].into_boxed_slice(),
            rstart: 0,
            rend: 0,
            big: Vec::new(),
            big_len: 0,
            direct: None,
        }
    }

    /// Whether no part of a frame is waiting for the rest of it.
    pub(super) fn is_empty(&self) -> bool {
        self.rend == self.rstart && self.big_len == 0 && self.direct.is_none()
    }

    /// The whole receive buffer, to read into and throw away (only after [`Receiver::reset`]:
    /// nothing received is kept).
    pub(super) fn scratch(&mut self) -> &mut [u8] {
        &mut self.rbuf
    }

    /// One read into the receive buffer (or, while a large frame is in progress, into that
    /// frame's buffer and then the receive buffer, with one `readv`).
    pub(super) fn read_once<S: AsRawFd>(&mut self, mut stream: &S) -> io::Result<Read1>
    where
        for<'s> &'s S: Read,
    {
        if self.big_len > 0 || self.direct.is_some() {
            debug_assert!(self.rstart == 0 && self.rend == 0);
            let (into, want) = match &mut self.direct {
                Some(d) => (d.next_ptr(), d.missing()),
                None => {
                    let want = self.big_len - self.big.len();
                    let spare = self.big.spare_capacity_mut();
                    debug_assert!(spare.len() >= want);
                    (spare.as_mut_ptr().cast::<u8>(), want)
                }
            };
            let iov = [
                libc::iovec {
                    iov_base: into.cast(),
                    iov_len: want,
                },
                libc::iovec {
                    iov_base: self.rbuf.as_mut_ptr().cast(),
                    iov_len: self.rbuf.len(),
                },
            ];
            // SAFETY: both iovecs describe writable memory we may write for the call: the rest
            // of the placed range the placer lent, or the first `want` bytes of `big`'s spare
            // capacity (reserved for the whole frame); and the whole receive buffer, which
            // holds no unparsed bytes now.
            let n = unsafe { libc::readv(stream.as_raw_fd(), iov.as_ptr(), 2) };
            if n < 0 {
                return Err(io::Error::last_os_error());
            }
            let n = n as usize;
            if n == 0 {
                return Ok(Read1::Eof);
            }
            let into_big = n.min(want);
            match &mut self.direct {
                Some(d) => d.advance(into_big),
                // SAFETY: the kernel initialised the first `into_big` bytes of the spare
                // capacity, and `big.len() + into_big <= big_len <= capacity`.
                None => unsafe { self.big.set_len(self.big.len() + into_big) },
            }
            self.rend = n - into_big;
            return Ok(Read1::Data {
                full: n == want + self.rbuf.len(),
            });
        }
        if self.rstart > 0 && self.rbuf.len() - self.rend < self.rbuf.len() / 4 {
            self.compact();
        }
        debug_assert!(self.rend < self.rbuf.len(), "parse leaves room to read");
        match stream.read(&mut self.rbuf[self.rend..]) {
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
    /// A large frame's payload goes straight to where `placer` says, if it takes it.
    pub(super) fn parse(
        &mut self,
        rank: usize,
        state: &mut State,
        inbox: &mut Vec<(usize, Vec<u8>)>,
        stats: &mut NetStats,
        pool: &mut BufferPool,
        placer: Option<&dyn Placer>,
    ) -> Result<(), String> {
        if let Some(d) = &self.direct {
            if d.missing() > 0 {
                return Ok(());
            }
            let notice = self
                .direct
                .take()
                .map(Placing::into_notice)
                .unwrap_or_default();
            if notice.is_empty() {
                pool.give(notice);
            } else {
                inbox.push((rank, notice));
                stats.messages_received += 1;
            }
            stats.packets_received += 1;
        }
        if self.big_len > 0 {
            if self.big.len() < self.big_len {
                return Ok(());
            }
            self.big_len = 0;
            inbox.push((rank, std::mem::take(&mut self.big)));
            stats.packets_received += 1;
            stats.messages_received += 1;
        }
        loop {
            let avail = self.rend - self.rstart;
            if *state == State::Leaving && avail > 0 {
                return Err("protocol violation: data after goodbye".into());
            }
            if avail < PREFIX {
                break;
            }
            let at = self.rstart;
            let len = u32::from_le_bytes(self.rbuf[at..at + PREFIX].try_into().expect("4 bytes"));
            if len == GOODBYE {
                *state = State::Leaving;
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
                    rank,
                    pool.copy_of(&self.rbuf[at + PREFIX..at + PREFIX + len]),
                ));
                stats.packets_received += 1;
                stats.messages_received += 1;
                self.rstart += PREFIX + len;
                continue;
            }
            let have = &self.rbuf[at + PREFIX..self.rend];
            if let Some(d) = placer
                .filter(|_| len > BIG_FRAME)
                .and_then(|p| Placing::start(p, rank, have, len, pool))
            {
                self.direct = Some(d);
                self.rstart = 0;
                self.rend = 0;
            } else if len > BIG_FRAME {
                // Recycled: a fresh buffer of a megabyte would fault in every page.
                let mut big = pool.take_for(len);
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
    pub(super) fn reset(&mut self) {
        self.direct = None;
        self.big = Vec::new();
        self.big_len = 0;
        self.rstart = 0;
        self.rend = 0;
    }
}

/// A connection's input as the peer chooses it (fuzzing, and its replay in tests): `data` is
/// cut into writes of the sizes its bytes say and written into one end of a socket pair, and
/// the receiver reads and parses the other end as it does a connection's. Whatever arrives,
/// nothing may panic, and every frame delivered is one the bytes contained.
pub(crate) fn fuzz_stream(data: &[u8]) {
    use std::io::Write;
    use std::os::unix::net::UnixStream;
    let (mut tx, rx) = UnixStream::pair().expect("a socket pair");
    rx.set_nonblocking(true).expect("nonblocking");
    let mut receiver = Receiver::new();
    let mut state = State::Open;
    let (mut inbox, mut stats, mut pool) = (Vec::new(), NetStats::default(), BufferPool::default());
    let mut rest = data;
    while let Some((&n, tail)) = rest.split_first() {
        let n = (n as usize * 97)
            .clamp(1, tail.len().max(1))
            .min(tail.len());
        let (chunk, tail) = tail.split_at(n);
        rest = tail;
        if chunk.is_empty() {
            break;
        }
        tx.write_all(chunk).expect("the pair takes the chunk");
        loop {
            match receiver.read_once(&rx) {
                Ok(Read1::Data { .. }) => {}
                Ok(Read1::Eof) => return,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading the pair: {e}"),
            }
            if receiver
                .parse(0, &mut state, &mut inbox, &mut stats, &mut pool, None)
                .is_err()
            {
                return;
            }
        }
        for (_, msg) in inbox.drain(..) {
            assert!(msg.len() <= MAX_MESSAGE);
        }
    }
}
