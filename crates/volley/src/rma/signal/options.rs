//! Seed 002's command options for non-blocking signals ([`crate::rma::Rma::signal_to_nbi`]):
//! the status reply (none, always, only on failure) and the elastic memory barrier (EMB):
//! per-colour request and reply counters at the requester, which the program reads and waits
//! on to learn that every earlier signal of a colour has been delivered (stored or cancelled).
//!
//! An EMB colour makes the target reply whatever the status option says (the seed: EMB
//! implies an acknowledgement); the reply bumps the colour's reply counter, and the status is
//! logged only as the option asks. On the direct path the sender delivers the signal itself,
//! so the reply is immediate and local.

use crate::refusal::Refusal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

/// EMB colours.
pub const EMB_COLOURS: usize = 16;

/// Which statuses come back to the requester (seed 002's status-reply option).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum StatusReply {
    /// NO_REPLY_STATUS: none.
    #[default]
    None,
    /// REPLY_STATUS: every signal's status.
    Always,
    /// REPLY_ONLY_FAILURES: only cancellations (full, busy, disabled) and refusals.
    OnlyFailures,
}

/// Options of one non-blocking signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct SignalOptions {
    /// Which statuses are reported (taken with [`crate::rma::Rma::take_signal_reports`]).
    pub status: StatusReply,
    /// The EMB colour (`0..EMB_COLOURS`), if any.
    pub colour: Option<u8>,
}

impl SignalOptions {
    /// As one message argument: 0 is reserved for blocking calls.
    pub(super) fn word(self) -> u64 {
        let status = match self.status {
            StatusReply::None => 0,
            StatusReply::Always => 1,
            StatusReply::OnlyFailures => 2,
        };
        1 | status << 1 | self.colour.map_or(0, |c| c as u64 + 1) << 8
    }

    pub(super) fn from_word(w: u64) -> Self {
        let status = match (w >> 1) & 3 {
            1 => StatusReply::Always,
            2 => StatusReply::OnlyFailures,
            _ => StatusReply::None,
        };
        let c = (w >> 8) & 0xff;
        Self {
            status,
            colour: (c != 0).then(|| (c - 1) as u8),
        }
    }

    /// Whether the target replies to a signal with this outcome.
    pub(super) fn replies(self, outcome: &Result<super::SignalStatus, Refusal>) -> bool {
        self.colour.is_some() || self.reports(outcome)
    }

    /// Whether the requester logs this outcome.
    pub(super) fn reports(self, outcome: &Result<super::SignalStatus, Refusal>) -> bool {
        match self.status {
            StatusReply::None => false,
            StatusReply::Always => true,
            StatusReply::OnlyFailures => !matches!(outcome, Ok(s) if !s.cancelled()),
        }
    }
}

/// One reported status: the target and what became of the signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SignalReport {
    /// The target rank.
    pub rank: usize,
    /// The status, or why it was refused.
    pub outcome: Result<super::SignalStatus, Refusal>,
}

/// The requester's side: EMB counters and the reports not yet taken.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    requests: [AtomicU64; EMB_COLOURS],
    replies: [AtomicU64; EMB_COLOURS],
    reports: Mutex<Vec<SignalReport>>,
}

impl Requester {
    pub(super) fn issued(&self, colour: Option<u8>) {
        if let Some(c) = colour {
            self.requests[c as usize].fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A reply (or the direct path's immediate outcome) for a signal with `opts`.
    pub(super) fn replied(
        &self,
        opts: SignalOptions,
        rank: usize,
        outcome: Result<super::SignalStatus, Refusal>,
    ) {
        if opts.reports(&outcome) {
            self.reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push(SignalReport { rank, outcome });
        }
        if let Some(c) = opts.colour {
            // Release: the report is logged before the counter says the signal is done.
            self.replies[c as usize % EMB_COLOURS].fetch_add(1, Ordering::Release);
        }
    }

    /// `n` commands of `colour` issued.
    pub(crate) fn issued_n(&self, colour: Option<u8>, n: u64) {
        if let Some(c) = colour {
            self.requests[c as usize % EMB_COLOURS].fetch_add(n, Ordering::Relaxed);
        }
    }

    /// The reply for `n` commands of `colour` arrived.
    pub(crate) fn replied_n(&self, colour: Option<u8>, n: u64) {
        if let Some(c) = colour {
            // Release: what the reply logged comes before the counter says done.
            self.replies[c as usize % EMB_COLOURS].fetch_add(n, Ordering::Release);
        }
    }

    pub(super) fn counters(&self, c: usize) -> (u64, u64) {
        (
            self.requests[c].load(Ordering::Relaxed),
            self.replies[c].load(Ordering::Acquire),
        )
    }

    pub(super) fn take_reports(&self) -> Vec<SignalReport> {
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rma::SignalStatus;

    #[test]
    fn options_round_trip_and_decide_replies() {
        for status in [
            StatusReply::None,
            StatusReply::Always,
            StatusReply::OnlyFailures,
        ] {
            for colour in [None, Some(0), Some(15)] {
                let o = SignalOptions { status, colour };
                assert_eq!(SignalOptions::from_word(o.word()), o);
                assert_ne!(o.word(), 0);
            }
        }
        let only = SignalOptions {
            status: StatusReply::OnlyFailures,
            colour: None,
        };
        assert!(!only.replies(&Ok(SignalStatus::Invoked)));
        assert!(only.replies(&Ok(SignalStatus::Full)));
        assert!(only.replies(&Err(Refusal::NotASignal)));
        let emb = SignalOptions {
            status: StatusReply::None,
            colour: Some(3),
        };
        assert!(emb.replies(&Ok(SignalStatus::Stored)) && !emb.reports(&Ok(SignalStatus::Stored)));
    }
}
