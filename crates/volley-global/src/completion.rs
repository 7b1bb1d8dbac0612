//! Where a reply lands: the rank's split counter (split-phase operations completed by
//! `sync`), or a [`Completion`] of one operation (blocking operations and handles).

use std::sync::atomic::{AtomicU64, Ordering};
use volley::rma::Refusal;

/// The completion of one blocking operation or handle: replies still expected, the first
/// refusal, and an atomic's result.
#[derive(Debug, Default)]
pub(crate) struct Completion {
    remaining: AtomicU64,
    /// 0, or the first refusal's code.
    status: AtomicU64,
    value: AtomicU64,
    /// The first refusal's rank, offset, length and segment length.
    detail: [AtomicU64; 4],
}

/// A refusal as carried in message words: (code, rank, offset, len, segment_len).
pub(crate) type RefusalWords = (u64, usize, u64, u64, u64);

pub(crate) fn refusal_of(w: RefusalWords) -> (usize, Refusal) {
    let (code, rank, off, len, seg_len) = w;
    (
        rank,
        Refusal::from_code(code, off, len, seg_len).unwrap_or(Refusal::NoSuchSegment),
    )
}

impl Completion {
    /// A completion that waits for `n` replies.
    #[inline]
    pub(crate) fn expecting(n: u64) -> Self {
        let c = Self::default();
        c.remaining.store(n, Ordering::Relaxed);
        c
    }

    /// Takes back `n` replies that will never come (their requests were not sent).
    pub(crate) fn forget(&self, n: u64) {
        self.remaining.fetch_sub(n, Ordering::Relaxed);
    }

    /// Whether every reply is in.
    #[inline]
    pub(crate) fn done(&self) -> bool {
        self.remaining.load(Ordering::Acquire) == 0
    }

    /// Records one successful reply that carries no value (called by the reply handler,
    /// after the data is written).
    #[inline]
    pub(crate) fn arrive(&self) {
        // Release: the waiter that sees zero sees the data.
        self.remaining.fetch_sub(1, Ordering::Release);
    }

    /// Records one successful reply that carries a value (a blocking read's word).
    #[inline]
    pub(crate) fn deliver(&self, value: u64) {
        self.value.store(value, Ordering::Relaxed);
        // Release: the waiter that sees zero sees the value.
        self.remaining.fetch_sub(1, Ordering::Release);
    }

    /// Records one reply (called by the reply handler, after the data is written).
    pub(crate) fn record(&self, status: u64, value: u64, detail: [u64; 4]) {
        if status != 0
            && self
                .status
                .compare_exchange(0, status, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            for (d, v) in self.detail.iter().zip(detail) {
                d.store(v, Ordering::Relaxed);
            }
        }
        self.value.store(value, Ordering::Relaxed);
        // Release: the waiter that sees zero sees the data, status and value.
        self.remaining.fetch_sub(1, Ordering::Release);
    }

    /// The result once done: the value, or the first refusal.
    #[inline]
    pub(crate) fn result(&self) -> Result<u64, RefusalWords> {
        match self.status.load(Ordering::Relaxed) {
            0 => Ok(self.value.load(Ordering::Relaxed)),
            code => Err(self.refusal(code)),
        }
    }

    #[cold]
    fn refusal(&self, code: u64) -> RefusalWords {
        let d = self.detail.each_ref().map(|x| x.load(Ordering::Relaxed));
        (code, d[0] as usize, d[1], d[2], d[3])
    }

    /// This completion's address, as the `kind` word of a request (never 0: 0 names the
    /// split counter).
    pub(crate) fn word(&self) -> u64 {
        self as *const Completion as u64
    }
}
