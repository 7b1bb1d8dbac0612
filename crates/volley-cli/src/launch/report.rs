//! Asking the ranks of one host what they are doing (the launcher for its own ranks, an agent
//! for its host's): one request byte on each rank's report socket, then every answer (a line
//! of JSON from the rank's reporter thread, see `volley::am::report`) read until a deadline.
//! A rank that does not answer in time (stopped, or not inside a runtime) is said to be
//! silent; nothing waits on it longer.
//!
//! Each rank gets its end of a socket pair at its start, inherited under the number that
//! [`volley::am::report::ENV_REPORT_FD`] names.

pub use super::wire::RankAnswer;
use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// How long the ranks have to answer.
pub const ANSWER_WITHIN: Duration = Duration::from_secs(2);
/// The longest answer read (a report of a rank with many busy peers stays far below).
const MAX_ANSWER: usize = 4 << 20;

/// The launcher's end of a rank's report socket, and the rank's end until the rank starts.
pub struct ReportSocket {
    ours: UnixStream,
    theirs: Option<OwnedFd>,
}

impl ReportSocket {
    /// A socket pair whose ends are both closed on exec; [`ReportSocket::child_fd`] names the
    /// end a rank inherits (the caller clears close-on-exec on it in the child).
    pub fn new() -> std::io::Result<Self> {
        let (ours, theirs) = UnixStream::pair()?;
        ours.set_nonblocking(true)?;
        Ok(Self {
            ours,
            theirs: Some(theirs.into()),
        })
    }

    /// The descriptor the rank inherits.
    pub fn child_fd(&self) -> Option<i32> {
        self.theirs.as_ref().map(AsRawFd::as_raw_fd)
    }

    /// The rank has started (it holds its end): closes ours of its end.
    pub fn started(&mut self) {
        self.theirs = None;
    }
}

/// A rank to ask: its number, and its socket unless it has ended.
pub struct Asked<'a> {
    /// The rank.
    pub rank: usize,
    /// Its report socket; `None` if it has exited.
    pub socket: Option<&'a mut ReportSocket>,
}

/// Asks every rank of `asked` and waits up to [`ANSWER_WITHIN`] for their answers.
pub fn ask(asked: Vec<Asked<'_>>) -> Vec<RankAnswer> {
    struct Pending<'a> {
        rank: usize,
        stream: &'a mut UnixStream,
        got: Vec<u8>,
        answer: Option<Result<String, String>>,
    }
    let mut pending = Vec::new();
    let mut done = Vec::new();
    for a in asked {
        let Some(sock) = a.socket else {
            done.push(RankAnswer {
                rank: a.rank,
                answer: Err("has exited".into()),
            });
            continue;
        };
        let stream = &mut sock.ours;
        // Whatever a late answer to an earlier request left is not this answer.
        let mut stale = [0u8; 4096];
        let mut closed = false;
        loop {
            match stream.read(&mut stale) {
                Ok(0) => {
                    closed = true;
                    break;
                }
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(_) => break,
            }
        }
        let answer = if closed || stream.write_all(b"?").is_err() {
            Some(Err(
                "has no runtime any more (its reporter has closed)".to_string()
            ))
        } else {
            None
        };
        pending.push(Pending {
            rank: a.rank,
            stream,
            got: Vec::new(),
            answer,
        });
    }
    let deadline = Instant::now() + ANSWER_WITHIN;
    loop {
        let open: Vec<usize> = (0..pending.len())
            .filter(|&i| pending[i].answer.is_none())
            .collect();
        let left = deadline.saturating_duration_since(Instant::now());
        if open.is_empty() || left.is_zero() {
            break;
        }
        let mut fds: Vec<libc::pollfd> = open
            .iter()
            .map(|&i| libc::pollfd {
                fd: pending[i].stream.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as libc::c_int;
        // SAFETY: `fds` is a valid array of pollfd of the length given.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        for (k, &i) in open.iter().enumerate() {
            if fds[k].revents == 0 {
                continue;
            }
            let p = &mut pending[i];
            let mut buf = [0u8; 16384];
            loop {
                match p.stream.read(&mut buf) {
                    Ok(0) => {
                        p.answer = Some(Err("closed its report socket without answering".into()));
                        break;
                    }
                    Ok(n) => {
                        p.got.extend_from_slice(&buf[..n]);
                        if let Some(end) = p.got.iter().position(|&b| b == b'\n') {
                            let line = String::from_utf8_lossy(&p.got[..end]).into_owned();
                            p.answer = Some(Ok(line));
                            break;
                        }
                        if p.got.len() > MAX_ANSWER {
                            p.answer = Some(Err("answered more than a report".into()));
                            break;
                        }
                    }
                    Err(e) if e.kind() == ErrorKind::Interrupted => {}
                    Err(_) => break,
                }
            }
        }
    }
    done.extend(pending.into_iter().map(|p| RankAnswer {
        rank: p.rank,
        answer: p.answer.unwrap_or_else(|| {
            Err(format!(
                "did not answer within {} s (stopped? not inside a runtime?)",
                ANSWER_WITHIN.as_secs()
            ))
        }),
    }));
    done.sort_by_key(|a| a.rank);
    done
}

/// When a hang report is due: SIGUSR1 asked for one, or `--hang-report-after` has passed
/// (once).
#[derive(Debug)]
pub struct ReportClock {
    started: Instant,
    auto: Option<Instant>,
}

impl ReportClock {
    /// A clock for a job started now, reporting by itself `after` (if given).
    pub fn new(after: Option<Duration>) -> Self {
        let started = Instant::now();
        Self {
            started,
            auto: after.map(|d| started + d),
        }
    }

    /// Whether a report is due now (and, for the automatic one, not again).
    pub fn due(&mut self) -> bool {
        let asked = super::signals::report_asked();
        let auto = self.auto.is_some_and(|t| Instant::now() >= t);
        if auto {
            self.auto = None;
        }
        asked || auto
    }

    /// How long a supervising loop may sleep: `backstop`, or less if the automatic report
    /// comes sooner.
    pub fn bound(&self, backstop: Duration) -> Duration {
        match self.auto {
            Some(t) => backstop.min(t.saturating_duration_since(Instant::now())),
            None => backstop,
        }
    }

    /// Time since the job started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }
}

/// Prints the collated report of `answers` (rank, answer, host) for a job of `n` ranks in
/// one write to standard error.
pub fn print(n: usize, answers: Vec<(RankAnswer, String)>, clock: &ReportClock) {
    let seen = super::diagnose::collate(n, answers);
    let text = super::diagnose::render(&seen, clock.elapsed());
    let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), text.as_bytes());
}
