//! The reporter thread of a rank started by `volley run`: answers each request byte on the
//! report socket with one line of JSON, and samples the rank's counters in between.

use super::snapshot::{report, Sampler};
use super::{OutstandingFn, ENV_REPORT_FD};
use crate::am::engine::SharedEngine;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How often the reporter looks at the counters between requests.
const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// How long a request waits for the network route to publish its backlogs.
const BACKLOG_WAIT: Duration = Duration::from_millis(100);

/// The report socket is taken once per process: a second runtime (after the first was
/// dropped) must not take a descriptor number that may name something else by then.
static TAKEN: AtomicBool = AtomicBool::new(false);

/// A running reporter; dropping it stops the thread.
#[derive(Debug)]
pub(crate) struct Reporter {
    socket: UnixStream,
    thread: Option<JoinHandle<()>>,
}

impl Reporter {
    /// Starts the reporter if `volley run` handed this rank a report socket.
    pub(crate) fn from_env(
        engine: Arc<SharedEngine>,
        outstanding: Vec<OutstandingFn>,
    ) -> Option<Self> {
        let fd: i32 = std::env::var(ENV_REPORT_FD).ok()?.trim().parse().ok()?;
        if fd < 3 || !is_socket(fd) || TAKEN.swap(true, Ordering::Relaxed) {
            return None;
        }
        // SAFETY: the launcher opened this descriptor for this process alone and nothing else
        // in it takes ownership of it (`TAKEN`); it is a socket (checked above).
        let owned = unsafe { OwnedFd::from_raw_fd(fd) };
        let socket = UnixStream::from(owned);
        // Not inherited by what the program starts.
        // SAFETY: fcntl on a descriptor we own.
        unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
        let ours = socket.try_clone().ok()?;
        ours.set_read_timeout(Some(SAMPLE_EVERY)).ok()?;
        let rank = engine.get().me;
        let thread = std::thread::Builder::new()
            .name(format!("volley-report-{rank}"))
            .spawn(move || serve(ours, &engine, &outstanding))
            .ok()?;
        Some(Self {
            socket,
            thread: Some(thread),
        })
    }
}

impl Drop for Reporter {
    fn drop(&mut self) {
        // Ends the thread's read (with end of file); the launcher then sees the socket close.
        let _ = self.socket.shutdown(std::net::Shutdown::Both);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn is_socket(fd: i32) -> bool {
    // SAFETY: fstat writes into a zeroed local struct; an invalid descriptor only fails.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    }
}

fn serve(mut socket: UnixStream, engine: &SharedEngine, outstanding: &[OutstandingFn]) {
    let engine = engine.get();
    let mut sampler = Sampler::new(engine);
    let mut buf = [0u8; 64];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {
                if engine.want_backlog() {
                    let deadline = Instant::now() + BACKLOG_WAIT;
                    while !engine.backlog_fresh() && Instant::now() < deadline {
                        std::thread::sleep(Duration::from_millis(2));
                    }
                }
                sampler.sample(engine);
                let r = report(engine, &sampler, outstanding);
                let mut line = serde_json::to_string(&r).unwrap_or_default();
                line.push('\n');
                if socket.write_all(line.as_bytes()).is_err() {
                    return;
                }
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                sampler.sample(engine);
            }
            Err(e) if e.kind() == ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}
