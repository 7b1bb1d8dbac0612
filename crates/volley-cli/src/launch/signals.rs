//! What wakes a supervising loop: Ctrl-C, SIGTERM and SIGHUP to the launcher (remembered in a
//! flag the loop reads), SIGUSR1 (a hang report is asked for), a rank that ended (SIGCHLD),
//! and news from the launcher's own threads (the rendezvous, the connections to agents).
//!
//! All of them write one byte into a self-pipe, and the loop sleeps in `poll(2)` on its read
//! end, so it runs when something happened rather than every few milliseconds. A byte written
//! between the loop's last look and its sleep stays in the pipe and ends the sleep at once:
//! no wake-up is lost.

use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// The last stopping signal received (0: none).
static RECEIVED: AtomicI32 = AtomicI32::new(0);
/// How many stopping signals have been received.
static STOPS: AtomicU32 = AtomicU32::new(0);
/// Reports asked for with SIGUSR1 and not yet taken.
static REPORTS: AtomicU32 = AtomicU32::new(0);
/// The self-pipe's write end, for the signal handlers (-1 until installed).
static WAKE_WRITE: AtomicI32 = AtomicI32::new(-1);
/// The self-pipe: (read end, write end).
static PIPE: OnceLock<(OwnedFd, OwnedFd)> = OnceLock::new();

/// Writes a wake-up byte. Async-signal-safe: one `write(2)`, with `errno` kept as it was.
fn ring() {
    let fd = WAKE_WRITE.load(Ordering::Relaxed);
    if fd < 0 {
        return;
    }
    // SAFETY: errno is thread-local and `__errno_location` always returns its address; the
    // write's own result is ignored (a full pipe already holds a wake-up).
    unsafe {
        let errno = libc::__errno_location();
        let saved = *errno;
        let _ = libc::write(fd, [1u8].as_ptr().cast(), 1);
        *errno = saved;
    }
}

extern "C" fn on_stop_signal(sig: libc::c_int) {
    RECEIVED.store(sig, Ordering::Relaxed);
    STOPS.fetch_add(1, Ordering::Relaxed);
    ring();
}

extern "C" fn on_report(_: libc::c_int) {
    REPORTS.fetch_add(1, Ordering::Relaxed);
    ring();
}

extern "C" fn on_child(_: libc::c_int) {
    ring();
}

/// Creates the self-pipe and installs the handlers (once per process; later calls do nothing).
pub fn install() {
    PIPE.get_or_init(|| {
        let (r, w) =
            nix::unistd::pipe2(nix::fcntl::OFlag::O_CLOEXEC | nix::fcntl::OFlag::O_NONBLOCK)
                .expect("creating the launcher's wake-up pipe");
        WAKE_WRITE.store(w.as_raw_fd(), Ordering::Relaxed);
        let stop = SigAction::new(
            SigHandler::Handler(on_stop_signal),
            SaFlags::SA_RESTART,
            SigSet::empty(),
        );
        let child = SigAction::new(
            SigHandler::Handler(on_child),
            SaFlags::SA_RESTART | SaFlags::SA_NOCLDSTOP,
            SigSet::empty(),
        );
        // SAFETY: the handlers only store to an atomic and call `ring`, which is
        // async-signal-safe; the pipe they write to lives as long as the process.
        unsafe {
            for sig in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
                let _ = sigaction(sig, &stop);
            }
            let _ = sigaction(Signal::SIGCHLD, &child);
            let report = SigAction::new(
                SigHandler::Handler(on_report),
                SaFlags::SA_RESTART,
                SigSet::empty(),
            );
            let _ = sigaction(Signal::SIGUSR1, &report);
        }
        (r, w)
    });
}

/// The last stopping signal received, if any.
pub fn received() -> Option<i32> {
    match RECEIVED.load(Ordering::Relaxed) {
        0 => None,
        s => Some(s),
    }
}

/// Whether a hang report was asked for (SIGUSR1) since the last call.
pub fn report_asked() -> bool {
    REPORTS.swap(0, Ordering::Relaxed) > 0
}

/// How many stopping signals (SIGINT, SIGTERM, SIGHUP) have been received: one received while
/// the ranks are being stopped ends their grace period.
pub fn stops() -> u32 {
    STOPS.load(Ordering::Relaxed)
}

/// Wakes the supervising loop (called by the launcher's threads after they record news).
pub fn notify() {
    ring();
}

/// Sleeps until a wake-up (a signal, a rank's end, [`notify`]) or `timeout`, then empties the
/// pipe. Without [`install`] it just sleeps.
pub fn wait(timeout: Duration) {
    let Some((r, _)) = PIPE.get() else {
        std::thread::sleep(timeout);
        return;
    };
    let mut fds = [libc::pollfd {
        fd: r.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    }];
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd; an interruption (EINTR) just ends the wait early.
    unsafe { libc::poll(fds.as_mut_ptr(), 1, ms) };
    let mut buf = [0u8; 64];
    // SAFETY: reading into a local buffer from our non-blocking pipe until it is empty.
    while unsafe { libc::read(r.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
}

/// Receives from `rx`, sleeping in [`wait`] (up to `timeout`) when nothing is there yet: the
/// senders call [`notify`] after they send.
pub fn recv<T>(
    rx: &std::sync::mpsc::Receiver<T>,
    timeout: Duration,
) -> Result<T, std::sync::mpsc::RecvTimeoutError> {
    use std::sync::mpsc::{RecvTimeoutError, TryRecvError};
    let map = |e| match e {
        TryRecvError::Empty => RecvTimeoutError::Timeout,
        TryRecvError::Disconnected => RecvTimeoutError::Disconnected,
    };
    match rx.try_recv() {
        Err(TryRecvError::Empty) => {
            wait(timeout);
            rx.try_recv().map_err(map)
        }
        other => other.map_err(map),
    }
}
