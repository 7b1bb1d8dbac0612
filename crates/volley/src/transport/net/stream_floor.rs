//! The floor of a network stream: 1 MiB messages sent one after another over raw loopback
//! sockets between two ends, with no protocol around them, so that `volley bench am` can put a
//! stream of long Active Messages beside what the sockets themselves carry.
//!
//! - **TCP**: one connection with the socket options of volley's TCP transport (`TCP_NODELAY`,
//!   its socket buffers and congestion control); the sender writes the messages back to back
//!   and the receiver reads them, then answers one byte, which ends the timing.
//! - **UDP**: two connected sockets with enlarged buffers; each message leaves as datagrams of
//!   [`UDP_DATAGRAM`] bytes handed to `sendmmsg` in batches, and since loopback drops what
//!   overflows the receive buffer, the sender sends a batch only when the receiver has
//!   acknowledged the one before it (a window of one batch, sized to half the receive buffer).
//!
//! As in [`super::floor`], the ends are made before the caller forks; nothing here allocates
//! after [`stream_pair`].

use super::floor::SocketFloor;
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::os::fd::AsRawFd;
use std::time::Instant;

/// Bytes of one streamed message.
pub const STREAM_MESSAGE: usize = 1 << 20;
/// Bytes of one UDP datagram of the stream (the largest loopback payload, rounded down).
pub const UDP_DATAGRAM: usize = 65000;
/// Socket buffers asked for on UDP (granted up to the system's limit unless privileged).
const UDP_BUFFER: usize = 8 << 20;

/// One end of a raw stream pair.
#[derive(Debug)]
pub struct StreamEnd {
    kind: SocketFloor,
    udp: Option<UdpSocket>,
    tcp: Option<TcpStream>,
    /// Datagrams per acknowledged batch (UDP).
    batch: usize,
    buf: Box<[u8]>,
}

/// Two connected ends on 127.0.0.1 that stream [`STREAM_MESSAGE`]-byte messages.
pub fn stream_pair(kind: SocketFloor) -> io::Result<(StreamEnd, StreamEnd)> {
    let end = |udp, tcp, batch| StreamEnd {
        kind,
        udp,
        tcp,
        batch,
        buf: vec![0x5a; STREAM_MESSAGE].into_boxed_slice(),
    };
    match kind {
        SocketFloor::Udp => {
            let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            a.connect(b.local_addr()?)?;
            b.connect(a.local_addr()?)?;
            let mut rcvbuf = usize::MAX;
            for s in [&a, &b] {
                s.set_nonblocking(true)?;
                rcvbuf = rcvbuf.min(enlarge(s));
            }
            // Half the receive buffer per batch: the kernel counts more than the payload.
            let batch = (rcvbuf / 2 / UDP_DATAGRAM).clamp(1, 64);
            Ok((end(Some(a), None, batch), end(Some(b), None, batch)))
        }
        SocketFloor::Tcp => {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            // The socket options of volley's TCP connections (buffers, congestion control),
            // so that the floor differs from volley's stream only by the protocol.
            let config = floor_config()?;
            for s in [&a, &b] {
                super::tcp::apply_socket_options(s, &config).map_err(io::Error::other)?;
            }
            Ok((end(None, Some(a), 0), end(None, Some(b), 0)))
        }
    }
}

/// The TCP settings of volley's connections under this environment.
fn floor_config() -> io::Result<super::tcp::TcpConfig> {
    let congestion = super::tcp::Congestion::from_env().map_err(|(v, why)| {
        io::Error::other(format!("{}={v}: {why}", super::tcp::Congestion::ENV))
    })?;
    Ok(super::tcp::TcpConfig {
        congestion,
        ..Default::default()
    })
}

/// The congestion control volley's TCP connections get under this environment, as the kernel
/// reports it on a loopback connection set up like theirs.
pub fn tcp_congestion() -> io::Result<String> {
    let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
    let a = TcpStream::connect(l.local_addr()?)?;
    super::tcp::apply_socket_options(&a, &floor_config()?).map_err(io::Error::other)?;
    super::tcp::congestion_in_use(&a).ok_or_else(|| io::Error::other("TCP_CONGESTION unreadable"))
}

/// Messages sent untimed before a stream of `count`: a tenth, and at least [`MIN_WARM_UP`].
pub fn warm_up(count: u64) -> u64 {
    (count / 10).max(MIN_WARM_UP)
}

/// At least this many messages (64 MiB) warm a fresh connection up before the timing: over
/// TCP a shorter warm-up left the timed stream slower than volley's on a connection in use
/// (6.8-9.6 GB/s with 6 messages of warm-up, 11.8-12.3 with 64, same sitting).
pub const MIN_WARM_UP: u64 = 64;

/// Asks for large UDP buffers (forced where privileged); returns the receive buffer granted.
fn enlarge(s: &UdpSocket) -> usize {
    use nix::sys::socket::{getsockopt, setsockopt, sockopt};
    if setsockopt(s, sockopt::SndBufForce, &UDP_BUFFER).is_err() {
        let _ = setsockopt(s, sockopt::SndBuf, &UDP_BUFFER);
    }
    if setsockopt(s, sockopt::RcvBufForce, &UDP_BUFFER).is_err() {
        let _ = setsockopt(s, sockopt::RcvBuf, &UDP_BUFFER);
    }
    getsockopt(s, sockopt::RcvBuf).unwrap_or(212_992)
}

fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl StreamEnd {
    /// Datagrams of one message (UDP).
    fn datagrams() -> usize {
        STREAM_MESSAGE.div_ceil(UDP_DATAGRAM)
    }

    fn write_all(&mut self, len: usize) -> io::Result<()> {
        let mut s: &TcpStream = self.tcp.as_ref().expect("a TCP end");
        let mut sent = 0;
        while sent < len {
            match s.write(&self.buf[sent..len]) {
                Ok(n) => sent += n,
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    fn read_exact(&mut self, len: usize) -> io::Result<()> {
        let mut s: &TcpStream = self.tcp.as_ref().expect("a TCP end");
        let mut got = 0;
        while got < len {
            match s.read(&mut self.buf[got..len]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => got += n,
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sends datagrams `first..first + n` of a message with `sendmmsg`, spinning while the
    /// socket's buffer is full.
    fn send_datagrams(&mut self, first: usize, n: usize) -> io::Result<()> {
        let fd = self.udp.as_ref().expect("a UDP end").as_raw_fd();
        // SAFETY: all-zero iovecs and message headers are valid values (null pointers,
        // zero lengths); they are filled below before use.
        let mut iov: [libc::iovec; 64] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut hdr: [libc::mmsghdr; 64] = unsafe { std::mem::zeroed() };
        let mut done = 0;
        while done < n {
            let k = (n - done).min(64);
            for i in 0..k {
                let start = (first + done + i) * UDP_DATAGRAM;
                let len = (STREAM_MESSAGE - start).min(UDP_DATAGRAM);
                iov[i].iov_base = self.buf[start..].as_mut_ptr().cast();
                iov[i].iov_len = len;
                hdr[i].msg_hdr.msg_iov = &mut iov[i];
                hdr[i].msg_hdr.msg_iovlen = 1;
            }
            // SAFETY: the first `k` headers point at `k` iovecs describing bytes of
            // `self.buf`, which outlives the call; the socket is connected, so no addresses.
            let r = unsafe { libc::sendmmsg(fd, hdr.as_mut_ptr(), k as libc::c_uint, 0) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if !retry(&e) {
                    return Err(e);
                }
            } else {
                done += r as usize;
            }
        }
        Ok(())
    }

    /// Spins until `n` datagrams have arrived (into the end's buffer, one over the other).
    fn recv_datagrams(&mut self, n: usize) -> io::Result<()> {
        let s = self.udp.as_ref().expect("a UDP end");
        let mut got = 0;
        while got < n {
            match s.recv(&mut self.buf[..UDP_DATAGRAM]) {
                Ok(_) => got += 1,
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Sending side: streams `count` messages after [`warm_up`] of them and waits for the
    /// receiver's answer to the last; returns GB/s of the timed messages.
    pub fn stream(&mut self, count: u64) -> io::Result<f64> {
        let warm = warm_up(count);
        let mut t0 = Instant::now();
        for i in 0..warm + count {
            if i == warm {
                t0 = Instant::now();
            }
            self.send_message()?;
        }
        // The answer to the last message: everything has arrived.
        match self.kind {
            SocketFloor::Tcp => self.read_exact(1)?,
            SocketFloor::Udp => self.recv_datagrams(1)?,
        }
        Ok((count as usize * STREAM_MESSAGE) as f64 / t0.elapsed().as_nanos() as f64)
    }

    fn send_message(&mut self) -> io::Result<()> {
        match self.kind {
            SocketFloor::Tcp => self.write_all(STREAM_MESSAGE),
            SocketFloor::Udp => {
                let (total, batch) = (Self::datagrams(), self.batch);
                let mut first = 0;
                while first < total {
                    let n = batch.min(total - first);
                    self.send_datagrams(first, n)?;
                    // The receiver's acknowledgement of this batch.
                    self.recv_datagrams(1)?;
                    first += n;
                }
                Ok(())
            }
        }
    }

    /// Receiving side of [`StreamEnd::stream`] with the same `count`: takes every message
    /// (acknowledging each UDP batch) and answers the last.
    pub fn sink(&mut self, count: u64) -> io::Result<()> {
        for _ in 0..warm_up(count) + count {
            match self.kind {
                SocketFloor::Tcp => self.read_exact(STREAM_MESSAGE)?,
                SocketFloor::Udp => {
                    let (total, batch) = (Self::datagrams(), self.batch);
                    let mut first = 0;
                    while first < total {
                        let n = batch.min(total - first);
                        self.recv_datagrams(n)?;
                        self.send_ack()?;
                        first += n;
                    }
                }
            }
        }
        match self.kind {
            SocketFloor::Tcp => self.write_all(1),
            SocketFloor::Udp => self.send_ack(),
        }
    }

    fn send_ack(&mut self) -> io::Result<()> {
        let s = self.udp.as_ref().expect("a UDP end");
        loop {
            match s.send(&self.buf[..1]) {
                Ok(_) => return Ok(()),
                Err(e) if retry(&e) => {}
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_stream_whole_messages() {
        for kind in [SocketFloor::Udp, SocketFloor::Tcp] {
            let (mut a, mut b) = stream_pair(kind).unwrap();
            let sink = std::thread::spawn(move || b.sink(5));
            let gbps = a.stream(5).unwrap();
            sink.join().unwrap().unwrap();
            assert!(gbps > 0.0, "{kind:?}");
        }
    }
}
