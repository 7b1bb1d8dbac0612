//! The communication thread's sends to ranks on other nodes, handed to the program thread.
//!
//! Those ranks are reached through volley's one-sided operations, which only the thread
//! driving the runtime can run (volley's `Runtime` is neither `Send` nor `Sync`). The
//! communication thread checks a send, queues its whole packet image here, and the program
//! thread sends the queue in order, under the destination's link, from its next call into
//! the layer (a send, a receive's wait, `serve_procedures`, `wait_flag`). Across nodes the
//! program thread already carries everything (the peers' one-sided operations land when it
//! polls volley), so a handed-off send leaves as soon as traffic moves at all.
//!
//! Back-pressure: at most one buffer's capacity of bytes waits here per destination; past
//! that the communication thread waits, as it would for room in a full buffer.

use crate::error::Result;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Mutex;

/// One packet image waiting for the program thread.
#[derive(Debug)]
pub(crate) struct Parcel {
    pub(crate) rank: usize,
    pub(crate) words: Vec<u64>,
    pub(crate) headers: Vec<usize>,
    pub(crate) payload: usize,
}

/// The queue between the two threads of a rank.
#[derive(Debug)]
pub(crate) struct Handoff {
    queue: Mutex<VecDeque<Parcel>>,
    /// Whether the queue may hold something (the program thread's cheap look).
    pending: AtomicBool,
    /// Bytes queued per destination.
    queued: Vec<AtomicU64>,
    cap: u64,
}

impl Handoff {
    pub(crate) fn new(size: usize, cap: u64) -> Self {
        Self {
            queue: Mutex::new(VecDeque::new()),
            pending: AtomicBool::new(false),
            queued: (0..size).map(|_| AtomicU64::new(0)).collect(),
            cap,
        }
    }

    /// Every buffer's capacity (the bound per destination here).
    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// Whether `bytes` more for `rank` fit now (the communication thread waits otherwise).
    pub(crate) fn has_room(&self, rank: usize, bytes: u64) -> bool {
        self.queued[rank].load(Ordering::Acquire) + bytes <= self.cap
    }

    /// Queues a parcel (after `has_room` said yes).
    pub(crate) fn push(&self, p: Parcel) {
        self.queued[p.rank].fetch_add(p.words.len() as u64 * 8, Ordering::AcqRel);
        self.queue.lock().expect("the handoff queue").push_back(p);
        self.pending.store(true, Ordering::Release);
    }

    /// Sends what waits, in order, through `send`, stopping at the first parcel `blocked`
    /// says cannot go now (its rank's link is this thread's open chain): the parcels behind it
    /// wait too, so each destination sees them in the order the handlers sent them.
    pub(crate) fn drain(
        &self,
        blocked: impl Fn(usize) -> bool,
        mut send: impl FnMut(&Parcel) -> Result<()>,
    ) -> Result<()> {
        if !self.pending.load(Ordering::Acquire) {
            return Ok(());
        }
        loop {
            let next = {
                let mut q = self.queue.lock().expect("the handoff queue");
                match q.front() {
                    None => {
                        self.pending.store(false, Ordering::Release);
                        return Ok(());
                    }
                    Some(p) if blocked(p.rank) => return Ok(()),
                    Some(_) => q.pop_front().expect("a front"),
                }
            };
            let sent = send(&next);
            self.queued[next.rank].fetch_sub(next.words.len() as u64 * 8, Ordering::AcqRel);
            sent?;
        }
    }
}
