//! A connection's output queue: frames copied into chunks of [`CHUNK`] bytes, written out
//! with gathering `sendmsg` calls of at most a quantum each. A large frame with nothing queued
//! ahead of it is written straight from the caller's bytes, up to a limit, and only its
//! unwritten rest is copied in.
//!
//! Why a quantum: one `sendmsg` on loopback (or to a fast receiver) lasts as long as the
//! receiver keeps draining, milliseconds for a 16 MiB transfer, and meanwhile the rank reads
//! nothing from its other peers and sends them nothing. Writing at most a quantum per call
//! returns to the progress loop every few tens of microseconds. Why fixed-size chunks: every
//! chunk serves any frame, so a stream of large messages reuses the same (already mapped)
//! memory instead of mapping and faulting in a buffer per message.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::{GOODBYE, PREFIX};
use crate::transport::net::NetStats;

/// Frames longer than this, with nothing queued ahead of them, are written from the caller's
/// bytes; shorter ones are always copied (with their neighbours, one system call for many).
pub(super) const SMALL_MESSAGE: usize = 16 << 10;
/// Bytes of one output chunk.
pub(super) const CHUNK: usize = 64 << 10;
/// Spare chunks a transport keeps for reuse at most (16 MiB): what a burst of large messages
/// needed stays mapped for the next one, up to this much.
const MAX_SPARE_CHUNKS: usize = 256;
/// Linux's limit on iovecs per call (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// Empty chunks shared by a transport's connections.
#[derive(Default)]
pub(super) struct ChunkPool {
    spare: Vec<Vec<u8>>,
}

impl ChunkPool {
    fn take(&mut self) -> Vec<u8> {
        self.spare
            .pop()
            .unwrap_or_else(|| Vec::with_capacity(CHUNK))
    }

    fn give(&mut self, mut chunk: Vec<u8>) {
        if self.spare.len() < MAX_SPARE_CHUNKS {
            chunk.clear();
            self.spare.push(chunk);
        }
    }

    /// Chunks held for reuse.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.spare.len()
    }
}

/// One chunk of a connection's queue.
struct Chunk {
    data: Vec<u8>,
    /// Frames that end in this chunk (for [`NetStats::packets_sent`]).
    frames: u64,
}

/// The bytes queued toward one peer and not yet taken by the kernel.
#[derive(Default)]
pub(super) struct SendQueue {
    out: VecDeque<Chunk>,
    /// Bytes of `out.front()` already written.
    head: usize,
    /// Bytes queued and not yet written.
    queued: usize,
}

impl SendQueue {
    /// Bytes queued and not yet written.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Sends one frame of `head` followed by `body`: a large one with nothing queued ahead of
    /// it is written straight from them (prefix, head and body gathered in one `sendmsg` of at
    /// most `direct` bytes, none when it is 0), and what the kernel does not take is copied
    /// into the queue; any other frame is queued whole.
    pub(super) fn send(
        &mut self,
        stream: &TcpStream,
        head: &[u8],
        body: &[u8],
        direct: usize,
        pool: &mut ChunkPool,
        stats: &mut NetStats,
    ) -> io::Result<()> {
        let len = head.len() + body.len();
        let prefix = (len as u32).to_le_bytes();
        let parts: [&[u8]; 3] = [&prefix, head, body];
        if self.queued > 0 || len <= SMALL_MESSAGE || direct == 0 {
            self.append(&parts, 1, pool);
            return Ok(());
        }
        let mut budget = direct;
        let iov = parts.map(|p| {
            let take = p.len().min(budget);
            budget -= take;
            libc::iovec {
                iov_base: p.as_ptr() as *mut libc::c_void,
                iov_len: take,
            }
        });
        let n = send_iov(stream, &iov, stats)?;
        stats.bytes_sent += n as u64;
        if n == PREFIX + len {
            stats.packets_sent += 1;
            return Ok(());
        }
        // The rest goes into the queue.
        let mut skip = n;
        let rest = parts.map(|p| {
            let cut = skip.min(p.len());
            skip -= cut;
            &p[cut..]
        });
        self.append(&rest, 1, pool);
        Ok(())
    }

    /// Appends the goodbye, the last thing a connection carries.
    pub(super) fn enqueue_goodbye(&mut self, pool: &mut ChunkPool) {
        self.append(&[&GOODBYE.to_le_bytes()], 0, pool);
    }

    /// Appends `parts`, joined, filling the last chunk and then fresh ones; `frames` frames
    /// end with them.
    fn append(&mut self, parts: &[&[u8]], frames: u64, pool: &mut ChunkPool) {
        for part in parts {
            let mut rest: &[u8] = part;
            while !rest.is_empty() {
                if self.out.back().is_none_or(|c| c.data.len() == CHUNK) {
                    self.out.push_back(Chunk {
                        data: pool.take(),
                        frames: 0,
                    });
                }
                let chunk = &mut self.out.back_mut().expect("a chunk was just ensured").data;
                let n = rest.len().min(CHUNK - chunk.len());
                append_bytes(chunk, &rest[..n]);
                self.queued += n;
                rest = &rest[n..];
            }
        }
        if let Some(last) = self.out.back_mut() {
            last.frames += frames;
        }
    }

    /// Drops everything queued (the connection is gone).
    pub(super) fn clear(&mut self, pool: &mut ChunkPool) {
        for c in self.out.drain(..) {
            pool.give(c.data);
        }
        self.queued = 0;
        self.head = 0;
    }

    /// Writes up to `quantum` bytes of the queue to `stream`, as many as the kernel takes.
    /// Stops after a partial write, since the next attempt would almost surely find the socket
    /// full: one call per progress.
    pub(super) fn flush(
        &mut self,
        stream: &TcpStream,
        quantum: usize,
        pool: &mut ChunkPool,
        stats: &mut NetStats,
    ) -> io::Result<()> {
        let mut left = quantum;
        while self.queued > 0 && left > 0 {
            let mut iov = [const { MaybeUninit::<libc::iovec>::uninit() }; IOV_MAX];
            let mut count = 0;
            let mut offered = 0;
            debug_assert!(!self.out.is_empty(), "queued bytes live in chunks");
            for (i, c) in self.out.iter().take(IOV_MAX).enumerate() {
                let bytes = if i == 0 {
                    &c.data[self.head..]
                } else {
                    &c.data[..]
                };
                let take = bytes.len().min(left - offered);
                iov[i].write(libc::iovec {
                    iov_base: bytes.as_ptr() as *mut libc::c_void,
                    iov_len: take,
                });
                count += 1;
                offered += take;
                if offered == left {
                    break;
                }
            }
            // SAFETY: the first `count` iovecs were initialised just above.
            let iov = unsafe { std::slice::from_raw_parts(iov.as_ptr().cast(), count) };
            let n = send_iov(stream, iov, stats)?;
            stats.bytes_sent += n as u64;
            self.consume(n, pool, stats);
            left -= n;
            if n < offered {
                return Ok(());
            }
        }
        Ok(())
    }

    /// Drops the first `n` queued bytes, which the kernel has taken.
    fn consume(&mut self, mut n: usize, pool: &mut ChunkPool, stats: &mut NetStats) {
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
            let c = self.out.pop_front().expect("checked above");
            stats.packets_sent += c.frames;
            pool.give(c.data);
        }
    }
}

/// Appends `src` to `chunk`, which has room for it, at full speed whatever their alignment.
fn append_bytes(chunk: &mut Vec<u8>, src: &[u8]) {
    let at = chunk.len();
    assert!(chunk.capacity() - at >= src.len(), "the chunk has room");
    // SAFETY: the chunk's spare capacity holds `src.len()` bytes (checked), which `src`, a
    // separate live borrow, cannot overlap; after the copy they are initialised.
    unsafe {
        crate::copy::copy_nonoverlapping(src.as_ptr(), chunk.as_mut_ptr().add(at), src.len());
        chunk.set_len(at + src.len());
    }
}

/// One non-blocking gathering `sendmsg` of `iov`: the bytes the kernel took (0 when the socket
/// is full), retried when interrupted.
fn send_iov(stream: &TcpStream, iov: &[libc::iovec], stats: &mut NetStats) -> io::Result<usize> {
    loop {
        // SAFETY: msghdr is plain old data (pointers and integers); all zeroes is a valid,
        // empty header, and zeroing also covers the private padding fields some libcs have.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = iov.as_ptr() as *mut libc::iovec;
        hdr.msg_iovlen = iov.len() as _;
        // SAFETY: every iovec points at live bytes of its exact length (the caller's slices or
        // the queue's chunks), which are neither moved nor freed during the call; the kernel
        // only reads them.
        let n = unsafe {
            libc::sendmsg(
                stream.as_raw_fd(),
                &hdr,
                libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
            )
        };
        stats.send_calls += 1;
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::WouldBlock => return Ok(0),
            io::ErrorKind::Interrupted => continue,
            _ => return Err(e),
        }
    }
}
