//! The wake-up descriptor of a rank that sleeps in `poll(2)`: an eventfd.
//!
//! A rank with network peers sleeps on its socket, where a futex cannot reach it. Its
//! node-mates (and its own threads) wake it by writing to its eventfd, which it polls beside
//! the socket. Each rank creates one and passes it to its node-mates at the rendezvous, next
//! to its region; see [`super::doorbell`] for when a ring writes it.

use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// An eventfd used only as a wake-up: written to ring, read to clear.
#[derive(Debug)]
pub struct WakeFd(OwnedFd);

impl WakeFd {
    /// A fresh wake-up descriptor (non-blocking, closed on exec).
    pub fn new() -> io::Result<Self> {
        use nix::sys::eventfd::{EfdFlags, EventFd};
        let fd = EventFd::from_flags(EfdFlags::EFD_CLOEXEC | EfdFlags::EFD_NONBLOCK)?;
        Ok(Self(fd.into()))
    }

    /// The descriptor as received from a node-mate at the rendezvous.
    pub fn from_owned(fd: OwnedFd) -> Self {
        Self(fd)
    }

    /// The descriptor, to send to node-mates at the rendezvous.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Wakes the sleeper polling this eventfd. Errors are ignored: the only one possible on
    /// an eventfd is a saturated counter (`EAGAIN`), which is already a pending wake-up.
    pub fn signal(&self) {
        let _ = nix::unistd::write(&self.0, &1u64.to_ne_bytes());
    }

    /// Sleeps until `other` (the network socket) is readable, this eventfd is signalled, or
    /// `timeout` passes; then clears the eventfd if it was signalled.
    pub fn sleep_beside(&self, other: RawFd, timeout: Duration) {
        let mut pfds = [other, self.raw()].map(|fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        });
        // `ppoll`, whose timeout has nanoseconds: `poll`'s milliseconds would turn a deadline
        // under 1 ms away (a delayed ack, a retransmission) into a busy loop.
        let ts = libc::timespec {
            tv_sec: timeout.as_secs() as libc::time_t,
            tv_nsec: timeout.subsec_nanos() as libc::c_long,
        };
        // SAFETY: two valid pollfds and a timespec on this stack frame for the duration of the
        // call; a null signal mask leaves the thread's mask unchanged.
        unsafe { libc::ppoll(pfds.as_mut_ptr(), 2, &ts, std::ptr::null()) };
        if pfds[1].revents != 0 {
            // Read only once woken through it: it costs a system call.
            self.clear();
        }
    }

    /// Reads the counter back to zero, so that the next `poll` sleeps. Returns whether it was
    /// set.
    pub fn clear(&self) -> bool {
        let mut buf = [0u8; 8];
        matches!(nix::unistd::read(self.raw(), &mut buf), Ok(8))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_signal_sets_the_counter_and_clear_resets_it() {
        let w = WakeFd::new().unwrap();
        assert!(!w.clear(), "a fresh eventfd is clear");
        w.signal();
        w.signal();
        assert!(w.clear(), "two signals read as one wake-up");
        assert!(!w.clear(), "clear resets the counter");
    }
}
