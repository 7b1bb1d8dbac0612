//! The socket's batched system calls: `sendmmsg` of queued datagrams and `recvmmsg` into
//! buffers kept from call to call, with the one-datagram `send`/`recv` forms a connected
//! socket allows.

use std::io;
use std::mem::size_of;
use std::net::SocketAddr;
use std::os::fd::RawFd;

use super::addr::{from_raw, RawAddr};

/// Bytes of each receive buffer: the largest UDP payload fits.
pub(super) const RECV_BUF: usize = 65536;
/// Most datagrams per `sendmmsg`/`recvmmsg` (the kernel's `UIO_MAXIOV`).
pub(super) const MAX_BATCH: usize = 1024;

/// The message headers of one `sendmmsg` or `recvmmsg` call.
///
/// Their pointers are written just before each call, into buffers that live at least as long
/// as the call, and are never read by Rust code; between calls they may dangle.
pub(super) struct MsgVec {
    hdrs: Vec<libc::mmsghdr>,
    iovs: Vec<libc::iovec>,
}

// SAFETY: the raw pointers inside are only dereferenced by the kernel during a system call
// made through `&mut self` right after they were set to memory the caller owns; no pointer is
// shared with or read by another thread, so moving the struct between threads is sound.
unsafe impl Send for MsgVec {}

impl MsgVec {
    pub(super) fn new(n: usize) -> Self {
        // SAFETY: mmsghdr and iovec are plain C structs of integers and raw pointers, for
        // which all-zero bytes are a valid value (null pointers, zero lengths).
        let (h, v) = unsafe { (std::mem::zeroed(), std::mem::zeroed()) };
        // Two iovecs per message: a datagram's head and the tail gathered from its message.
        Self {
            hdrs: vec![h; n],
            iovs: vec![v; 2 * n],
        }
    }
}

/// Where `recvmmsg` writes: `batch` buffers of [`RECV_BUF`] bytes and their source addresses.
pub(super) struct RecvRing {
    data: Box<[u8]>,
    names: Box<[libc::sockaddr_storage]>,
    msgs: MsgVec,
}

impl RecvRing {
    pub(super) fn new(batch: usize) -> Self {
        // SAFETY: sockaddr_storage is a plain C struct; all-zero bytes are a valid value.
        let name: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
        Self {
            data: vec![0; batch * RECV_BUF].into_boxed_slice(),
            names: vec![name; batch].into_boxed_slice(),
            msgs: MsgVec::new(batch),
        }
    }

    /// One non-blocking `recvmmsg` for up to `n` datagrams; returns how many arrived.
    pub(super) fn recv(&mut self, fd: RawFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.names.len());
        let data = self.data.as_mut_ptr();
        for (i, v) in self.msgs.iovs[..n].iter_mut().enumerate() {
            v.iov_base = data.wrapping_add(i * RECV_BUF).cast();
            v.iov_len = RECV_BUF;
        }
        let iovs = self.msgs.iovs.as_mut_ptr();
        let names = self.names.as_mut_ptr();
        for (i, h) in self.msgs.hdrs[..n].iter_mut().enumerate() {
            h.msg_hdr.msg_name = names.wrapping_add(i).cast();
            h.msg_hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            h.msg_hdr.msg_iov = iovs.wrapping_add(i);
            h.msg_hdr.msg_iovlen = 1;
            h.msg_hdr.msg_control = std::ptr::null_mut();
            h.msg_hdr.msg_controllen = 0;
            h.msg_hdr.msg_flags = 0;
            h.msg_len = 0;
        }
        // SAFETY: the first `n` headers were just set to point at `n` iovecs of `RECV_BUF`
        // writable bytes each inside `self.data` and at `n` sockaddr_storage slots with their
        // true size; all are owned by `self`, which is borrowed mutably for the whole call, so
        // nothing else reads or writes them while the kernel does. The timeout is null (none).
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.msgs.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(r as usize)
        }
    }

    /// One non-blocking `recv` of one datagram on a connected socket (no source address to
    /// fill in, one message header fewer to copy): the cheaper call for a socket with one
    /// peer, whose polls mostly find nothing. Returns 0 or 1.
    pub(super) fn recv_one(&mut self, fd: RawFd, from: &RawAddr) -> io::Result<usize> {
        // SAFETY: the first RECV_BUF bytes of `self.data` are writable and owned by `self`,
        // borrowed mutably for the call.
        let r = unsafe {
            libc::recv(
                fd,
                self.data.as_mut_ptr().cast(),
                RECV_BUF,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
            )
        };
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        // With MSG_TRUNC the kernel returns the datagram's real length.
        let h = &mut self.msgs.hdrs[0];
        h.msg_len = (r as usize).min(RECV_BUF) as libc::c_uint;
        h.msg_hdr.msg_flags = if r as usize > RECV_BUF {
            libc::MSG_TRUNC
        } else {
            0
        };
        // The connected peer is the only possible source.
        self.names[0] = from.storage;
        h.msg_hdr.msg_namelen = from.len;
        Ok(1)
    }

    /// Datagram `i` of the last call: its source (if the kernel gave a usable one), its bytes,
    /// and whether it was truncated.
    pub(super) fn datagram(&self, i: usize) -> (Option<SocketAddr>, &[u8], bool) {
        let h = &self.msgs.hdrs[i];
        let len = (h.msg_len as usize).min(RECV_BUF);
        let addr = from_raw(&self.names[i], h.msg_hdr.msg_namelen);
        let truncated = h.msg_hdr.msg_flags & libc::MSG_TRUNC != 0;
        (
            addr,
            &self.data[i * RECV_BUF..i * RECV_BUF + len],
            truncated,
        )
    }
}

/// One non-blocking `sendmmsg` of the given (destination, head, tail) datagrams, each sent as
/// its head followed by its tail (gathered, not joined), at most as many as `msgs` has room for
/// (without addresses when the socket is connected: `single`); returns how many were sent.
pub(super) fn send_batch<'a>(
    single: bool,
    msgs: &mut MsgVec,
    fd: RawFd,
    datagrams: impl Iterator<Item = (&'a RawAddr, &'a [u8], &'a [u8])>,
) -> io::Result<usize> {
    let iovs = msgs.iovs.as_mut_ptr();
    let mut n = 0;
    for ((h, v), (addr, head, tail)) in msgs
        .hdrs
        .iter_mut()
        .zip(msgs.iovs.chunks_exact_mut(2))
        .zip(datagrams)
    {
        // The kernel only reads through these pointers when sending.
        v[0].iov_base = head.as_ptr().cast_mut().cast();
        v[0].iov_len = head.len();
        v[1].iov_base = tail.as_ptr().cast_mut().cast();
        v[1].iov_len = tail.len();
        h.msg_hdr.msg_name = (&addr.storage as *const libc::sockaddr_storage)
            .cast_mut()
            .cast();
        h.msg_hdr.msg_namelen = addr.len;
        if single {
            h.msg_hdr.msg_name = std::ptr::null_mut();
            h.msg_hdr.msg_namelen = 0;
        }
        h.msg_hdr.msg_iov = iovs.wrapping_add(2 * n);
        h.msg_hdr.msg_iovlen = if tail.is_empty() { 1 } else { 2 };
        h.msg_hdr.msg_control = std::ptr::null_mut();
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
        h.msg_len = 0;
        n += 1;
    }
    // SAFETY: the first `n` headers were just set to point at pairs of iovecs, each
    // describing a live byte slice borrowed for `'a`, and at live socket addresses with their true lengths;
    // `sendmmsg` only reads those, and the borrows last until this function returns.
    let r = unsafe {
        libc::sendmmsg(
            fd,
            msgs.hdrs.as_mut_ptr(),
            n as libc::c_uint,
            libc::MSG_DONTWAIT,
        )
    };
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}
