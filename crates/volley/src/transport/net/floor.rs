//! The floor of a network round trip: a message bounced between two raw loopback sockets, both
//! ends busy-polling non-blocking receives, with no protocol around it. That is the best any
//! library on these sockets can do, so `volley bench` and the transports' profiling tests
//! measure the transports against it.
//!
//! This module only makes the sockets and bounces the message; where the two ends run (two
//! threads, two pinned processes, or one thread driving both with [`bounce`]) is the caller's
//! choice. Nothing here allocates after [`pair`], so an end can be driven in a forked child.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, TcpListener, TcpStream, UdpSocket};
use std::time::Instant;

/// Which raw socket the floor bounces a message over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SocketFloor {
    /// UDP datagrams on loopback, as `shared/peers/limits.c` measures.
    Udp,
    /// One TCP connection on loopback with `TCP_NODELAY`.
    Tcp,
}

/// The socket of one end.
#[derive(Debug)]
enum Socket {
    Udp(UdpSocket),
    Tcp(TcpStream),
}

/// One end of a raw loopback pair: its non-blocking socket, the message it sends, and room for
/// the message it receives (of the same size).
#[derive(Debug)]
pub struct RawEnd {
    socket: Socket,
    msg: Box<[u8]>,
    buf: Box<[u8]>,
}

/// Two connected ends on 127.0.0.1 that bounce `size`-byte messages (at least one byte, since
/// an empty TCP message would never be noticed).
pub fn pair(kind: SocketFloor, size: usize) -> io::Result<(RawEnd, RawEnd)> {
    let (a, b) = match kind {
        SocketFloor::Udp => {
            let a = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            let b = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0))?;
            a.connect(b.local_addr()?)?;
            b.connect(a.local_addr()?)?;
            a.set_nonblocking(true)?;
            b.set_nonblocking(true)?;
            (Socket::Udp(a), Socket::Udp(b))
        }
        SocketFloor::Tcp => {
            let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
            let a = TcpStream::connect(l.local_addr()?)?;
            let (b, _) = l.accept()?;
            for s in [&a, &b] {
                s.set_nodelay(true)?;
                s.set_nonblocking(true)?;
            }
            (Socket::Tcp(a), Socket::Tcp(b))
        }
    };
    let end = |socket| RawEnd {
        socket,
        msg: vec![0x5a; size.max(1)].into_boxed_slice(),
        buf: vec![0; size.max(1)].into_boxed_slice(),
    };
    Ok((end(a), end(b)))
}

/// Whether an error only means "not now" on a non-blocking socket.
fn retry(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
    )
}

impl RawEnd {
    /// Sends this end's message, spinning while the socket's buffer is full.
    pub fn send(&mut self) -> io::Result<()> {
        match &self.socket {
            Socket::Udp(s) => loop {
                match s.send(&self.msg) {
                    Ok(_) => return Ok(()),
                    Err(e) if retry(&e) => {}
                    Err(e) => return Err(e),
                }
            },
            Socket::Tcp(s) => {
                let mut s: &TcpStream = s;
                let mut sent = 0;
                while sent < self.msg.len() {
                    match s.write(&self.msg[sent..]) {
                        Ok(n) => sent += n,
                        Err(e) if retry(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }

    /// Spins until one whole message from the other end has arrived. A TCP end of stream is
    /// [`io::ErrorKind::UnexpectedEof`].
    pub fn recv(&mut self) -> io::Result<()> {
        match &self.socket {
            Socket::Udp(s) => loop {
                match s.recv(&mut self.buf) {
                    Ok(_) => return Ok(()),
                    Err(e) if retry(&e) => {}
                    Err(e) => return Err(e),
                }
            },
            Socket::Tcp(s) => {
                let mut s: &TcpStream = s;
                let mut got = 0;
                while got < self.buf.len() {
                    match s.read(&mut self.buf[got..]) {
                        Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                        Ok(n) => got += n,
                        Err(e) if retry(&e) => {}
                        Err(e) => return Err(e),
                    }
                }
                Ok(())
            }
        }
    }

    /// Measuring side: `iters` round trips, each a send and the wait for the echo. Returns ns
    /// per round trip, the first tenth excluded as warm-up.
    pub fn ping(&mut self, iters: u64) -> io::Result<f64> {
        let warm = (iters / 10).max(1);
        let mut t0 = Instant::now();
        for i in 0..iters {
            if i == warm {
                t0 = Instant::now();
            }
            self.send()?;
            self.recv()?;
        }
        Ok(t0.elapsed().as_nanos() as f64 / iters.saturating_sub(warm).max(1) as f64)
    }

    /// Echoing side of [`RawEnd::ping`] with the same `iters`: waits for each message and
    /// sends one back.
    pub fn echo(&mut self, iters: u64) -> io::Result<()> {
        for _ in 0..iters {
            self.recv()?;
            self.send()?;
        }
        Ok(())
    }
}

/// One round trip driven from a single thread: `a` sends, `b` receives and answers, `a`
/// receives. No scheduling is involved, so it measures the system calls alone.
pub fn bounce(a: &mut RawEnd, b: &mut RawEnd) -> io::Result<()> {
    a.send()?;
    b.recv()?;
    b.send()?;
    a.recv()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_kinds_bounce_whole_messages() {
        for kind in [SocketFloor::Udp, SocketFloor::Tcp] {
            for size in [0, 8, 3000] {
                let (mut a, mut b) = pair(kind, size).unwrap();
                b.msg.fill(0xa5);
                for _ in 0..10 {
                    bounce(&mut a, &mut b).unwrap();
                    assert!(b.buf.iter().all(|&x| x == 0x5a), "{kind:?} {size}");
                    assert!(a.buf.iter().all(|&x| x == 0xa5), "{kind:?} {size}");
                }
                let echo = std::thread::spawn(move || b.echo(100).map(|()| b));
                let ns = a.ping(100).unwrap();
                echo.join().unwrap().unwrap();
                assert!(ns > 0.0, "{kind:?}");
            }
        }
    }

    #[test]
    fn tcp_end_of_stream_is_an_error() {
        let (mut a, b) = pair(SocketFloor::Tcp, 8).unwrap();
        drop(b);
        let e = a.recv().unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::UnexpectedEof);
    }
}
