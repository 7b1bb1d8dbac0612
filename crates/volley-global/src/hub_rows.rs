//! The hub's rows and their protocol: atomics only, all zero before the first call, so that
//! they may live in mapped shared memory; under `--cfg loom` on loom's atomics, for the model
//! below.
//!
//! Every rank has a row for each parity of the hub's call number: a header word, then the
//! blocks. A rank arrives at a call by writing its blocks, then its header with release; it
//! has arrived when the header shows the call's epoch. A rank writes call c + 2's row only
//! after every rank arrived at call c + 1, so after every rank has read call c's rows.

// Under loom only the model uses the rows, and not all of them.
#![cfg_attr(loom, allow(dead_code))]

use crate::words::{padded_word, store_word};
#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// Words of a row before its blocks: the header (see [`Header`]).
const ROW_HEADER: usize = 1;

/// What a row shows of its rank's call once the rank arrived, in one word: the header and
/// the seven 8-byte blocks of an all-to-all on 8 ranks fill one cache line, the one line a
/// reader fetches from each row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Header {
    /// The collective's epoch, modulo 2^32: ranks of one call are never 2^32 collectives
    /// apart.
    pub(crate) epoch: u32,
    /// The collective's code (see `What`: kind, operator, element size; no root).
    pub(crate) what: u64,
    /// Bytes per block.
    pub(crate) len: usize,
}

impl Header {
    /// The header of a call at `epoch` of the collective `what` with blocks of `len` bytes;
    /// `None` if it does not fit a word (a kind above 15, an element above 255 bytes or a
    /// block above 255, a root): such a call does not come to the hub.
    pub(crate) fn new(epoch: u64, what: u64, len: usize) -> Option<Self> {
        let (kind, elem, root) = (what & 0xff, (what >> 16) & 0xffff, what >> 32);
        (kind < 16 && elem < 256 && root == 0 && len < 256).then_some(Self {
            epoch: epoch as u32,
            what,
            len,
        })
    }

    /// The word: epoch (bits 0-31), kind (32-35), operator (36-43), element size (44-51),
    /// block length (52-59). Never 0, which the rows hold before any call: no kind is 0.
    fn word(self) -> u64 {
        let (kind, op, elem) = (self.what & 0xff, (self.what >> 8) & 0xff, self.what >> 16);
        u64::from(self.epoch) | kind << 32 | op << 36 | elem << 44 | (self.len as u64) << 52
    }

    /// The header a row's word shows (`None` for 0: no call yet).
    fn of_word(w: u64) -> Option<Self> {
        let field = |at: u32, bits: u32| (w >> at) & ((1 << bits) - 1);
        (w != 0).then(|| Self {
            epoch: w as u32,
            what: field(32, 4) | field(36, 8) << 8 | field(44, 8) << 16,
            len: field(52, 8) as usize,
        })
    }
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
            self.word(call, me, first + k)
                .store(u64::from_ne_bytes(padded_word(chunk)), Ordering::Relaxed);
        }
    }

    /// Block `j` (blocks of `dst.len()` bytes) of rank `r`'s row of `call` into `dst` (once
    /// the rank arrived; see [`Rows::put_bytes`]).
    #[inline]
    pub(crate) fn read_bytes(&self, call: u64, r: usize, j: usize, dst: &mut [u8]) {
        let first = block_word(j, dst.len());
        for (k, chunk) in dst.chunks_mut(8).enumerate() {
            let w = self.word(call, r, first + k).load(Ordering::Relaxed);
            store_word(chunk, w.to_ne_bytes());
        }
    }

    /// Rank `me` arrives at `call`: writes its header, after its blocks.
    pub(crate) fn arrive(&self, call: u64, me: usize, h: Header) {
        // Release: whoever sees the header sees the blocks.
        self.word(call, me, 0).store(h.word(), Ordering::Release);
    }

    /// Rank `r`'s header of `call`'s parity: `call`'s once the rank arrived, before that the
    /// call's two before (`None` before the rank's first call of the parity).
    #[inline]
    pub(crate) fn header(&self, call: u64, r: usize) -> Option<Header> {
        Header::of_word(self.word(call, r, 0).load(Ordering::Acquire))
    }

    /// The epoch (modulo 2^32) rank `r`'s row of `call`'s parity shows (see
    /// [`Rows::header`]).
    #[inline]
    pub(crate) fn epoch_of(&self, call: u64, r: usize) -> Option<u32> {
        self.header(call, r).map(|h| h.epoch)
    }

    /// What collective a rank's row at `epoch` belongs to, and the rank, if one is here (for
    /// mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        (0..2u64).find_map(|call| {
            (0..self.procs).find_map(|r| {
                let h = self.header(call, r)?;
                (h.epoch == epoch as u32).then_some((h.what, r))
            })
        })
    }
}

/// The row word where block `j` of a call with blocks of `len` bytes starts: blocks are
/// packed, so that small blocks share the header's cache line.
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
                    let h = Header::new(epoch, 0x08_0108, 8).expect("fits");
                    rows.arrive(call, me, h);
                    // As the hub waits: until no row shows the epoch of the call two before.
                    let stale = call.checked_sub(2).map(|c| 10 + c as u32);
                    while (0..ranks).any(|r| rows.epoch_of(call, r) == stale) {
                        loom::thread::yield_now();
                    }
                    for r in (0..ranks).filter(|&r| r != me) {
                        assert_eq!(
                            rows.header(call, r),
                            Some(h),
                            "call {call}: rank {r}'s header"
                        );
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

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn a_header_comes_back_whole_from_its_word() {
        // An all-to-all of 8-byte elements, an all-reduce of 4-byte ones with operator 2, a
        // barrier; epochs past 2^32 keep their low half.
        for (epoch, what, len) in [
            (7, 0x08_0008, 96),
            ((1 << 32) + 5, 0x04_0204, 12),
            (u64::MAX, 0x1, 0),
        ] {
            let h = Header::new(epoch, what, len).expect("fits");
            assert_eq!(Header::of_word(h.word()), Some(h));
            assert_eq!(h.epoch, epoch as u32);
            assert_ne!(h.word(), 0);
        }
        assert_eq!(Header::of_word(0), None);
    }

    #[test]
    fn a_collective_that_does_not_fit_a_header_word_is_refused() {
        assert_eq!(Header::new(1, 0x1_0000_0002, 8), None, "a root");
        assert_eq!(Header::new(1, 0x100_0008, 8), None, "256-byte elements");
        assert_eq!(Header::new(1, 0x08_0008, 256), None, "256-byte blocks");
        assert_eq!(Header::new(1, 0x10, 8), None, "kind 16");
    }

    #[test]
    fn headers_of_different_calls_differ() {
        let h = |epoch, what, len| Header::new(epoch, what, len).unwrap().word();
        let base = h(9, 0x08_0108, 8);
        assert_ne!(base, h(10, 0x08_0108, 8));
        assert_ne!(base, h(9, 0x08_0104, 8));
        assert_ne!(base, h(9, 0x08_0208, 8));
        assert_ne!(base, h(9, 0x04_0108, 8));
        assert_ne!(base, h(9, 0x08_0108, 16));
    }
}
