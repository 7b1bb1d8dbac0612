//! The hub's rows and their protocol: atomics only, all zero before the first call, so that
//! they may live in mapped shared memory; under `--cfg loom` on loom's atomics, for the model
//! below.
//!
//! Every rank has a row for each parity of the hub's call number. A rank arrives at a call by
//! writing its blocks and header into its row of the call's parity, the row's mark last, with
//! release; it has arrived when the mark shows the call's epoch. A rank writes call c + 2's
//! row only after every rank arrived at call c + 1, so after every rank has read call c's
//! rows.

// Under loom only the model uses the rows, and not all of them.
#![cfg_attr(loom, allow(dead_code))]

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Words of a row before its blocks: mark (see [`mark`]), what, block length, CPU.
const ROW_HEADER: usize = 4;

/// What a row shows of its rank's call, once the rank arrived.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The collective's epoch.
    pub(crate) epoch: u64,
    /// The collective's code (see `What`).
    pub(crate) what: u64,
    /// Bytes per block.
    pub(crate) len: usize,
    /// The CPU the rank arrived on.
    pub(crate) cpu: u64,
}

/// Both parities' rows of every rank.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rows<'a> {
    words: &'a [AtomicU64],
    procs: usize,
    row_words: usize,
}

impl<'a> Rows<'a> {
    /// Words for the rows of `procs` ranks whose blocks hold up to `block_words` words each
    /// (each row starts a cache line).
    pub(crate) fn words_for(procs: usize, block_words: usize) -> usize {
        2 * procs * Self::row_words(procs, block_words)
    }

    fn row_words(procs: usize, block_words: usize) -> usize {
        (ROW_HEADER + procs * block_words).next_multiple_of(8)
    }

    /// The rows of `procs` ranks in `words` (zeroed before the first call; see
    /// [`Rows::words_for`]).
    #[inline]
    pub(crate) fn new(words: &'a [AtomicU64], procs: usize, block_words: usize) -> Self {
        let row_words = Self::row_words(procs, block_words);
        assert!(words.len() >= 2 * procs * row_words, "hub rows too small");
        Self {
            words,
            procs,
            row_words,
        }
    }

    /// Word `i` of rank `r`'s row of call `call`.
    #[inline]
    fn word(&self, call: u64, r: usize, i: usize) -> &'a AtomicU64 {
        let row = (call as usize & 1) * self.procs + r;
        &self.words[row * self.row_words + i]
    }

    /// Writes `bytes` as block `j` (blocks of `bytes.len()` bytes) of rank `me`'s row of
    /// `call`, before [`Rows::arrive`]: in native byte order, since every rank that reads
    /// the rows runs on this node.
    #[inline]
    pub(crate) fn put_bytes(&self, call: u64, me: usize, j: usize, bytes: &[u8]) {
        let first = block_word(j, bytes.len());
        for (k, chunk) in bytes.chunks(8).enumerate() {
            // Whole words by a load each (a copy of a length unknown here calls memcpy).
            let w = <[u8; 8]>::try_from(chunk).unwrap_or_else(|_| {
                let mut w = [0u8; 8];
                w[..chunk.len()].copy_from_slice(chunk);
                w
            });
            self.word(call, me, first + k)
                .store(u64::from_ne_bytes(w), Ordering::Relaxed);
        }
    }

    /// Block `j` (blocks of `dst.len()` bytes) of rank `r`'s row of `call` into `dst` (once
    /// the rank arrived; see [`Rows::put_bytes`]).
    #[inline]
    pub(crate) fn read_bytes(&self, call: u64, r: usize, j: usize, dst: &mut [u8]) {
        let first = block_word(j, dst.len());
        for (k, chunk) in dst.chunks_mut(8).enumerate() {
            let w = self
                .word(call, r, first + k)
                .load(Ordering::Relaxed)
                .to_ne_bytes();
            match <&mut [u8; 8]>::try_from(&mut *chunk) {
                Ok(whole) => *whole = w,
                Err(_) => chunk.copy_from_slice(&w[..chunk.len()]),
            }
        }
    }

    /// Rank `me` arrives at `call`: writes its header, the mark last.
    pub(crate) fn arrive(&self, call: u64, me: usize, h: Header) {
        self.word(call, me, 1).store(h.what, Ordering::Relaxed);
        self.word(call, me, 2)
            .store(h.len as u64, Ordering::Relaxed);
        self.word(call, me, 3).store(h.cpu, Ordering::Relaxed);
        // Release: whoever sees the mark sees the row.
        self.word(call, me, 0)
            .store(mark(h.epoch), Ordering::Release);
    }

    /// The epoch rank `r`'s row of `call`'s parity shows: `call`'s once the rank arrived,
    /// before that the call's two before (`None` before the rank's first call of the parity).
    pub(crate) fn epoch_of(&self, call: u64, r: usize) -> Option<u64> {
        self.word(call, r, 0).load(Ordering::Acquire).checked_sub(1)
    }

    /// Rank `r`'s header of `call` (once it arrived; its epoch is `None` before).
    pub(crate) fn header(&self, call: u64, r: usize) -> (Option<u64>, Header) {
        let epoch = self.epoch_of(call, r);
        let h = Header {
            epoch: epoch.unwrap_or(0),
            what: self.word(call, r, 1).load(Ordering::Relaxed),
            len: self.word(call, r, 2).load(Ordering::Relaxed) as usize,
            cpu: self.word(call, r, 3).load(Ordering::Relaxed),
        };
        (epoch, h)
    }

    /// What collective a rank's row at `epoch` belongs to, and the rank, if one is here (for
    /// mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        (0..2u64).find_map(|call| {
            (0..self.procs).find_map(|r| {
                // The mark first: a row that shows it shows the rest of its call.
                (self.epoch_of(call, r) == Some(epoch))
                    .then(|| (self.word(call, r, 1).load(Ordering::Relaxed), r))
            })
        })
    }
}

/// What a row's first word holds once its rank arrived at the collective of `epoch` (never
/// 0, which the rows hold before any call).
fn mark(epoch: u64) -> u64 {
    epoch + 1
}

/// The row word where block `j` of a call with blocks of `len` bytes starts: blocks are
/// packed, so that small blocks share the header's cache line (an 8-byte all-to-all on 4
/// ranks writes and reads one line per row).
fn block_word(j: usize, len: usize) -> usize {
    ROW_HEADER + j * len.div_ceil(8)
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// The value rank `src` sends rank `dst` at call `call`.
    fn value(call: u64, src: usize, dst: usize) -> u64 {
        (call << 16) | ((src as u64) << 8) | dst as u64
    }

    /// `ranks` threads make `calls` all-to-alls of one word through the rows; every rank
    /// reads every other's word of each call whole, none overwritten before it read.
    fn model(ranks: usize, calls: u64) {
        let mut builder = loom::model::Builder::new();
        builder.preemption_bound = Some(3);
        builder.max_branches = 100_000;
        builder.check(move || {
            let words: Arc<Vec<AtomicU64>> = Arc::new(
                (0..Rows::words_for(ranks, 1))
                    .map(|_| AtomicU64::new(0))
                    .collect(),
            );
            let rank = move |me: usize, words: Arc<Vec<AtomicU64>>| {
                let rows = Rows::new(&words, ranks, 1);
                for call in 0..calls {
                    let epoch = 10 + call;
                    for j in (0..ranks).filter(|&j| j != me) {
                        rows.put_bytes(call, me, j, &value(call, me, j).to_ne_bytes());
                    }
                    let h = Header {
                        epoch,
                        what: 7,
                        len: 8,
                        cpu: me as u64,
                    };
                    rows.arrive(call, me, h);
                    // As the hub waits: until no row shows the epoch of the call two before.
                    let stale = call.checked_sub(2).map(|c| 10 + c);
                    while (0..ranks).any(|r| rows.epoch_of(call, r) == stale) {
                        loom::thread::yield_now();
                    }
                    for r in (0..ranks).filter(|&r| r != me) {
                        let (e, theirs) = rows.header(call, r);
                        assert_eq!(e, Some(epoch), "call {call}: rank {r}'s mark");
                        assert_eq!((theirs.what, theirs.len, theirs.cpu), (7, 8, r as u64));
                        let mut word = [0u8; 8];
                        rows.read_bytes(call, r, me, &mut word);
                        assert_eq!(
                            u64::from_ne_bytes(word),
                            value(call, r, me),
                            "call {call}: rank {r}'s word to rank {me}"
                        );
                    }
                }
            };
            crate::loom_ranks::run_ranks(ranks, words, rank);
        });
    }

    /// Three calls, so that a row is written again (call 2 reuses call 0's rows) while a
    /// slower rank may still be at the call between.
    #[test]
    fn loom_hub_rows_reused_by_parity() {
        model(2, 3);
    }
}
