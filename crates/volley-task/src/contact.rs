//! First contact: a bounded per-rank queue any rank may write without a key (seed 002's task
//! queue for a first message), the issuer recorded by the runtime, not by the sender.

use crate::state::contact;
use crate::{Result, TaskError, Tasks};

/// Messages a rank's first-contact queue holds by default.
pub const CONTACT_CAPACITY: usize = 64;

/// What became of a first-contact message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ContactStatus {
    /// In the target's queue.
    Queued,
    /// The queue was full; nothing was kept.
    Full,
    /// The target refuses this issuer; nothing was kept.
    Refused,
}

/// A first-contact message, as the target reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Contact {
    /// The rank that sent it (filled by the runtime).
    pub issuer: usize,
    /// Its bytes.
    pub data: Vec<u8>,
}

/// First-contact counts at this rank.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ContactCounts {
    /// Messages queued.
    pub queued: u64,
    /// Messages turned away because the queue was full.
    pub full: u64,
    /// Messages turned away from a refused issuer.
    pub refused: u64,
    /// Queued messages dropped by a cancel or a refusal.
    pub cancelled: u64,
}

impl Tasks<'_, '_> {
    /// Sends a first-contact message to `rank`'s queue and waits for its status.
    pub fn contact(&self, rank: usize, data: &[u8]) -> Result<ContactStatus> {
        self.check_rank(rank)?;
        let max = self.rt.max_medium();
        if data.len() > max {
            return Err(TaskError::TooLarge {
                len: data.len(),
                max,
            });
        }
        let seq = self.next_seq();
        self.rt
            .request_medium(rank, self.shared.contact, &[seq], data)?;
        let answer = self.wait_answer(seq);
        Ok(match answer.first() {
            Some(&contact::QUEUED) => ContactStatus::Queued,
            Some(&contact::FULL) => ContactStatus::Full,
            _ => ContactStatus::Refused,
        })
    }

    /// The oldest message of this rank's queue, if any (a light call: it serves pending
    /// messages once, then takes a lock).
    pub fn contact_poll(&self) -> Option<Contact> {
        self.rt.poll();
        let mut st = self.shared.lock();
        st.contact
            .queue
            .pop_front()
            .map(|(issuer, data)| Contact { issuer, data })
    }

    /// Drops `issuer`'s queued messages (counted); returns how many.
    pub fn contact_cancel(&self, issuer: usize) -> Result<usize> {
        self.check_rank(issuer)?;
        let mut st = self.shared.lock();
        let before = st.contact.queue.len();
        st.contact.queue.retain(|(i, _)| *i != issuer);
        let dropped = before - st.contact.queue.len();
        st.contact.counts.cancelled += dropped as u64;
        Ok(dropped)
    }

    /// Refuses `issuer` from now on, and drops its queued messages (counted); returns how
    /// many were dropped.
    pub fn contact_refuse(&self, issuer: usize) -> Result<usize> {
        let dropped = self.contact_cancel(issuer)?;
        self.shared.lock().contact.refused_issuers.insert(issuer);
        Ok(dropped)
    }

    /// Takes `issuer`'s messages again after [`Tasks::contact_refuse`].
    pub fn contact_admit(&self, issuer: usize) -> Result<()> {
        self.check_rank(issuer)?;
        self.shared.lock().contact.refused_issuers.remove(&issuer);
        Ok(())
    }

    /// This rank's first-contact counts.
    pub fn contact_counts(&self) -> ContactCounts {
        self.shared.lock().contact.counts
    }
}
