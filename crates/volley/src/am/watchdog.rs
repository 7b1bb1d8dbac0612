//! The handler watchdog (seed 000 §6: a node that stops draining the network stalls its
//! senders). With `VOLLEY_WATCHDOG_MS=N` a thread per rank watches the handler that is running
//! and reports, once per invocation, a handler that has run longer than N ms, by name, while
//! it still runs.
//!
//! With a watchdog on, every handler is wrapped (see [`Watchdog::watch_requests`]) so that the
//! start and end of every outermost handler set a few relaxed and release stores (a sequence
//! number that is odd while a handler runs, the start time, which handler); the thread reads
//! them like a seqlock and never touches anything else. Without one, no handler pays for it.

use super::handler::{ReplyFn, RequestFn};
use crate::transport::Channel;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

#[derive(Debug)]
struct Shared {
    /// Odd while a handler runs; bumped at its start and end.
    seq: AtomicU64,
    /// When the running handler started, ns since `epoch`.
    started: AtomicU64,
    /// Which: channel << 16 | index.
    which: AtomicU32,
    /// Handlers running, nested in one another: only the outermost is timed. Handlers of a
    /// rank run one at a time (the progress thread and the rank thread hand the engine over
    /// with acquire and release), so relaxed accesses count exactly.
    nesting: AtomicU32,
    stop: AtomicBool,
    epoch: Instant,
    /// Every report made (also printed), for tests and statistics.
    reports: Mutex<Vec<String>>,
}

/// One rank's watchdog: the marks its wrapped handlers set and the thread that reads them.
#[derive(Debug)]
pub(crate) struct Watchdog {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

impl Watchdog {
    /// Starts watching with `limit`; `names[ch]` are the handler names by index.
    pub(crate) fn start(rank: usize, limit: Duration, names: [Vec<String>; 2]) -> Self {
        let shared = Arc::new(Shared {
            seq: AtomicU64::new(0),
            started: AtomicU64::new(0),
            which: AtomicU32::new(0),
            nesting: AtomicU32::new(0),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            reports: Mutex::new(Vec::new()),
        });
        let s = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("volley-watchdog-{rank}"))
            .spawn(move || watch(&s, rank, limit, &names))
            .expect("spawning the watchdog thread");
        Self {
            shared,
            thread: Some(thread),
        }
    }

    /// The request handlers `fs` (by index), each wrapped to be timed when outermost.
    pub(crate) fn watch_requests(&self, fs: Vec<Box<RequestFn>>) -> Vec<Box<RequestFn>> {
        let wrap = |(index, f): (usize, Box<RequestFn>)| -> Box<RequestFn> {
            let shared = self.shared.clone();
            Box::new(move |m, token| {
                let _timed = Timed::begin(&shared, Channel::Request, index as u16);
                f(m, token)
            })
        };
        fs.into_iter().enumerate().map(wrap).collect()
    }

    /// The reply handlers `fs` (by index), each wrapped to be timed when outermost.
    pub(crate) fn watch_replies(&self, fs: Vec<Box<ReplyFn>>) -> Vec<Box<ReplyFn>> {
        let wrap = |(index, f): (usize, Box<ReplyFn>)| -> Box<ReplyFn> {
            let shared = self.shared.clone();
            Box::new(move |m| {
                let _timed = Timed::begin(&shared, Channel::Reply, index as u16);
                f(m)
            })
        };
        fs.into_iter().enumerate().map(wrap).collect()
    }

    /// The reports made so far.
    #[cfg(test)]
    pub(crate) fn reports(&self) -> Vec<String> {
        self.shared
            .reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

/// A handler being timed: dropping it (when the handler returns or unwinds) ends its timing.
struct Timed<'a> {
    shared: &'a Shared,
    outermost: bool,
}

impl<'a> Timed<'a> {
    /// Handler `index` of channel `ch` starts; it is timed if no other handler is running.
    fn begin(shared: &'a Shared, ch: Channel, index: u16) -> Self {
        let nesting = shared.nesting.load(Ordering::Relaxed);
        shared.nesting.store(nesting + 1, Ordering::Relaxed);
        let outermost = nesting == 0;
        if outermost {
            shared
                .started
                .store(shared.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
            shared
                .which
                .store((ch as u32) << 16 | index as u32, Ordering::Relaxed);
            // Release: the fields above are visible to a reader that sees the odd number.
            shared.seq.fetch_add(1, Ordering::Release);
        }
        Self { shared, outermost }
    }
}

impl Drop for Timed<'_> {
    fn drop(&mut self) {
        let s = self.shared;
        s.nesting
            .store(s.nesting.load(Ordering::Relaxed) - 1, Ordering::Relaxed);
        if self.outermost {
            s.seq.fetch_add(1, Ordering::Release);
        }
    }
}

impl Drop for Watchdog {
    fn drop(&mut self) {
        self.shared.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

fn watch(s: &Shared, rank: usize, limit: Duration, names: &[Vec<String>; 2]) {
    let tick = (limit / 4).clamp(Duration::from_millis(1), Duration::from_millis(250));
    let mut reported = u64::MAX;
    while !s.stop.load(Ordering::Relaxed) {
        std::thread::park_timeout(tick);
        let seq = s.seq.load(Ordering::Acquire);
        if seq % 2 == 0 || seq == reported {
            continue;
        }
        let started = s.started.load(Ordering::Relaxed);
        let which = s.which.load(Ordering::Relaxed);
        if s.seq.load(Ordering::Acquire) != seq {
            continue; // it ended (and maybe another began) while we read
        }
        let ran =
            Duration::from_nanos((s.epoch.elapsed().as_nanos() as u64).saturating_sub(started));
        if ran < limit {
            continue;
        }
        reported = seq;
        let (ch, index) = ((which >> 16) as usize, (which & 0xffff) as usize);
        let kind = if ch == Channel::Reply as usize {
            "reply"
        } else {
            "request"
        };
        let name = names[ch.min(1)]
            .get(index)
            .map_or("(unknown)", String::as_str);
        let line = format!(
            "volley: rank {rank}: watchdog: {kind} handler \"{name}\" has been running for {} ms \
             (limit {} ms); this rank drains no messages meanwhile",
            ran.as_millis(),
            limit.as_millis()
        );
        let _ = std::io::Write::write_all(
            &mut std::io::stderr().lock(),
            format!("{line}\n").as_bytes(),
        );
        s.reports
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
    }
}
