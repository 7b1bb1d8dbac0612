//! The requester's side of FIFOe_NORMAL: keeps the entries a stopped FIFO returned and sends
//! them again, oldest first, before any newer one, so that the sender's order holds across a
//! stop and a restart.

use super::fifo::{FifoRef, NormalStatus};
use crate::rma::error::Result;
use crate::rma::Rma;
use std::collections::VecDeque;

/// One sender's FIFOe_NORMAL queue towards one FIFO (the seed's requester-side library).
///
/// [`FifoSender::send`] stores an entry at once when nothing of this sender is held back and
/// the FIFO takes it; otherwise the entry joins the held entries (in send order).
/// [`FifoSender::resend`] sends the held entries again, oldest first, and stops at the first
/// one returned again. Entries from one sender therefore enter the FIFO in send order, each
/// exactly once, whatever the stops and restarts.
#[derive(Debug)]
pub struct FifoSender {
    fifo: FifoRef,
    held: VecDeque<Vec<u8>>,
    returned: u64,
    stops: u64,
    stored: u64,
}

impl FifoSender {
    /// A sender to `fifo` with nothing held.
    pub fn new(fifo: FifoRef) -> Self {
        Self {
            fifo,
            held: VecDeque::new(),
            returned: 0,
            stops: 0,
            stored: 0,
        }
    }

    /// Sends `entry` (exactly the FIFO's entry size): `Ok(true)` if it is in the FIFO,
    /// `Ok(false)` if it is held (returned by a stopped FIFO, or queued behind entries that
    /// were). An error (a refusal, a bad size) holds nothing.
    pub fn send(&mut self, rma: &Rma<'_>, entry: &[u8]) -> Result<bool> {
        if !self.held.is_empty() {
            if entry.len() != self.fifo.entry_size() {
                // The same refusal the FIFO would give, without holding a bad entry.
                return rma.fifo_enqueue_normal(self.fifo, entry).map(|_| false);
            }
            self.held.push_back(entry.to_vec());
            return Ok(false);
        }
        match rma.fifo_enqueue_normal(self.fifo, entry)? {
            NormalStatus::Stored => {
                self.stored += 1;
                Ok(true)
            }
            NormalStatus::Returned {
                entry,
                entered_stop,
            } => {
                self.note_return(entered_stop);
                self.held.push_back(entry);
                Ok(false)
            }
        }
    }

    /// Sends the held entries again, oldest first, until one is returned again or none is
    /// left; returns how many went in.
    pub fn resend(&mut self, rma: &Rma<'_>) -> Result<usize> {
        let mut n = 0;
        while let Some(front) = self.held.front() {
            match rma.fifo_enqueue_normal(self.fifo, front)? {
                NormalStatus::Stored => {
                    self.held.pop_front();
                    self.stored += 1;
                    n += 1;
                }
                NormalStatus::Returned { entered_stop, .. } => {
                    self.note_return(entered_stop);
                    break;
                }
            }
        }
        Ok(n)
    }

    fn note_return(&mut self, entered_stop: bool) {
        self.returned += 1;
        self.stops += entered_stop as u64;
    }

    /// Entries held back, waiting to be sent again.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// Entries the FIFO returned so far (each return of an entry counts).
    pub fn returned(&self) -> u64 {
        self.returned
    }

    /// Times one of this sender's enqueues stopped the FIFO (status 2).
    pub fn stops(&self) -> u64 {
        self.stops
    }

    /// Entries stored so far.
    pub fn stored(&self) -> u64 {
        self.stored
    }

    /// The FIFO this sender feeds.
    pub fn fifo(&self) -> FifoRef {
        self.fifo
    }
}
