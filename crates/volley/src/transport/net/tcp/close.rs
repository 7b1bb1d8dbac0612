//! Leaving the job in order: the goodbye, writing out what is queued, shutting down the write
//! side, and reading until every peer has done the same.

use std::io::{self, Read};
use std::net::Shutdown;
use std::os::fd::AsFd;

use nix::poll::{PollFd, PollFlags};

use super::{State, TcpTransport};
use crate::transport::net::NetError;

/// How long close sleeps in `poll` at most before looking at the clock again.
const POLL_SLICE_MS: u64 = 10;

/// Milliseconds to sleep in `poll`: the time left before `deadline` (ns), capped at a slice.
fn poll_ms(now: u64, deadline: u64) -> u16 {
    let left = deadline.saturating_sub(now).div_ceil(1_000_000);
    left.min(POLL_SLICE_MS) as u16
}

impl TcpTransport {
    /// [`NetTransport::close`](crate::transport::net::NetTransport::close).
    pub(super) fn leave(
        &mut self,
        now: &mut dyn FnMut() -> u64,
        deadline: u64,
    ) -> Result<(), NetError> {
        if self.closed {
            return Ok(());
        }
        self.closed = true;
        self.listener = None;
        let mut first: Option<NetError> = None;
        for idx in 0..self.conns.len() {
            let conn = &mut self.conns[idx];
            conn.rx.reset();
            if matches!(conn.state, State::Open | State::Leaving) {
                conn.tx.enqueue_goodbye(&mut self.chunks);
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
                    why: format!("{} bytes still unsent at the close deadline", c.tx.queued()),
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

    /// During close: reads and throws away whatever connection `idx` has, noting its end of
    /// stream (expected now, goodbye or not).
    fn discard(&mut self, idx: usize) -> Result<(), NetError> {
        loop {
            let conn = &mut self.conns[idx];
            if !matches!(conn.state, State::Open | State::Leaving) {
                return Ok(());
            }
            self.stats.recv_calls += 1;
            let scratch = conn.rx.scratch();
            match (&conn.stream).read(scratch) {
                Ok(0) => {
                    conn.state = State::Finished;
                    self.unwatch(idx);
                    return Ok(());
                }
                Ok(n) if n < scratch.len() => return Ok(()),
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
                if c.tx.queued() > 0 {
                    flags |= PollFlags::POLLOUT;
                }
                (!flags.is_empty()).then(|| PollFd::new(c.stream.as_fd(), flags))
            })
            .collect();
        // An error here (EINTR) only shortens the sleep; the caller loops on the clock.
        let _ = nix::poll::poll(&mut fds, ms);
    }
}
