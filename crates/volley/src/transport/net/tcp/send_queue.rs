//! A connection's output queue: frames copied in by `send`, written out with one gathering
//! `sendmsg` per attempt. A large frame with nothing queued ahead of it is written straight
//! from the caller's bytes, and only its unwritten rest is copied in.

use std::collections::VecDeque;
use std::io;
use std::mem::MaybeUninit;
use std::net::TcpStream;
use std::os::fd::AsRawFd;

use super::{GOODBYE, PREFIX};
use crate::transport::net::NetStats;

/// Messages up to this size are copied into shared chunks with their neighbours; larger ones
/// get a buffer of their own, so a chunk never needs to grow.
pub(super) const SMALL_MESSAGE: usize = 16 << 10;
/// Capacity of a shared output chunk.
const CHUNK: usize = 64 << 10;
/// Linux's limit on iovecs per call (`UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// One output buffer of a connection's queue.
struct OutBuf {
    data: Vec<u8>,
    /// Frames that end in this buffer (for [`NetStats::packets_sent`]).
    frames: u64,
    /// Whether later small messages may be appended (a shared chunk rather than one large
    /// message's own buffer).
    shared: bool,
}

/// The bytes queued toward one peer and not yet taken by the kernel.
#[derive(Default)]
pub(super) struct SendQueue {
    out: VecDeque<OutBuf>,
    /// Bytes of `out.front()` already written.
    head: usize,
    /// Bytes queued and not yet written.
    queued: usize,
    /// A written shared chunk kept for reuse, so a steady stream of small sends allocates
    /// nothing.
    spare: Option<Vec<u8>>,
}

impl SendQueue {
    /// Bytes queued and not yet written.
    pub(super) fn queued(&self) -> usize {
        self.queued
    }

    /// Appends one frame: the prefix and the message `head` followed by `body`.
    pub(super) fn enqueue(&mut self, head: &[u8], body: &[u8]) {
        let len = head.len() + body.len();
        let prefix = (len as u32).to_le_bytes();
        if len <= SMALL_MESSAGE {
            self.append_shared(&[&prefix, head, body], 1);
        } else {
            // The copy that takes ownership is unavoidable (the caller keeps its slices); the
            // prefix rides along for free and the buffer is written as one iovec.
            self.push_own(&[&prefix, head, body]);
        }
    }

    /// Queues `parts`, joined, as a buffer of their own.
    fn push_own(&mut self, parts: &[&[u8]]) {
        let len: usize = parts.iter().map(|p| p.len()).sum();
        let mut data = Vec::with_capacity(len);
        for p in parts {
            data.extend_from_slice(p);
        }
        self.queued += len;
        self.out.push_back(OutBuf {
            data,
            frames: 1,
            shared: false,
        });
    }

    /// Sends one large frame of `head` followed by `body`: with nothing queued ahead of it,
    /// it is written straight from them (prefix, head and body gathered in one `sendmsg`),
    /// and only what the kernel does not take is copied into the queue; otherwise it is
    /// queued like any other.
    pub(super) fn send_large(
        &mut self,
        stream: &TcpStream,
        head: &[u8],
        body: &[u8],
        stats: &mut NetStats,
    ) -> io::Result<()> {
        let len = head.len() + body.len();
        if self.queued > 0 || len <= SMALL_MESSAGE {
            self.enqueue(head, body);
            return Ok(());
        }
        let prefix = (len as u32).to_le_bytes();
        let parts: [&[u8]; 3] = [&prefix, head, body];
        let iov = parts.map(|p| libc::iovec {
            iov_base: p.as_ptr() as *mut libc::c_void,
            iov_len: p.len(),
        });
        let n = loop {
            // SAFETY: msghdr is plain old data; all zeroes is a valid, empty header.
            let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
            hdr.msg_iov = iov.as_ptr() as *mut libc::iovec;
            hdr.msg_iovlen = iov.len() as _;
            // SAFETY: the iovecs point at live byte slices (`prefix`, `head`, `body`) with
            // their exact lengths, which outlive the call; the kernel only reads them.
            let n = unsafe {
                libc::sendmsg(
                    stream.as_raw_fd(),
                    &hdr,
                    libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT,
                )
            };
            stats.send_calls += 1;
            if n >= 0 {
                break n as usize;
            }
            let e = io::Error::last_os_error();
            match e.kind() {
                io::ErrorKind::WouldBlock => break 0,
                io::ErrorKind::Interrupted => continue,
                _ => return Err(e),
            }
        };
        stats.bytes_sent += n as u64;
        if n == PREFIX + len {
            stats.packets_sent += 1;
            return Ok(());
        }
        // The rest, as the queue's only (own) buffer.
        let mut skip = n;
        let rest = parts.map(|p| {
            let cut = skip.min(p.len());
            skip -= cut;
            &p[cut..]
        });
        self.push_own(&rest);
        Ok(())
    }

    /// Appends the goodbye, the last thing a connection carries.
    pub(super) fn enqueue_goodbye(&mut self) {
        self.append_shared(&[&GOODBYE.to_le_bytes()], 0);
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

    /// Drops everything queued (the connection is gone).
    pub(super) fn clear(&mut self) {
        self.out.clear();
        self.queued = 0;
        self.head = 0;
    }

    /// Writes as much of the queue to `stream` as the kernel takes. Stops after a partial
    /// write, since the next attempt would almost surely find the socket full: one call per
    /// progress.
    pub(super) fn flush(&mut self, stream: &TcpStream, stats: &mut NetStats) -> io::Result<()> {
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
                    stream.as_raw_fd(),
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
}
