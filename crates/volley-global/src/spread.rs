//! Spread arrays: one array whose elements are dealt out over the ranks, allocated
//! collectively so that every rank's part sits at the same segment offset.

use crate::ptr::GlobalPtr;
use bytemuck::Pod;
use std::marker::PhantomData;
use std::ptr::NonNull;
use volley::rma::SymmetricSegment;

/// How the elements of a spread array are dealt out over `PROCS` ranks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layout {
    /// Element `i` on rank `i % PROCS` (Split-C's processor-first spread arrays).
    Cyclic,
    /// Blocks of `b` consecutive elements dealt cyclically: Split-C's `A[n]::[b]`, row `i` of
    /// `b` elements on rank `i % PROCS`.
    BlockCyclic(usize),
    /// One contiguous block of `ceil(n / PROCS)` elements per rank.
    Blocked,
}

/// A spread array of `len` elements of `T` over every rank (see [`crate::Global::all_spread_alloc`]).
pub struct SpreadArray<T> {
    pub(crate) seg: SymmetricSegment,
    len: usize,
    procs: usize,
    me: usize,
    layout: Layout,
    /// This rank's part, in its own segment.
    base: NonNull<T>,
    _t: PhantomData<T>,
}

impl<T> std::fmt::Debug for SpreadArray<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SpreadArray")
            .field("len", &self.len)
            .field("procs", &self.procs)
            .field("layout", &self.layout)
            .finish()
    }
}

/// Elements per rank (the most any rank holds) for `len` elements over `procs` ranks.
pub(crate) fn per_rank(len: usize, procs: usize, layout: Layout) -> usize {
    match layout {
        Layout::Cyclic => len.div_ceil(procs),
        Layout::BlockCyclic(b) => len.div_ceil(b.max(1)).div_ceil(procs) * b.max(1),
        Layout::Blocked => len.div_ceil(procs),
    }
}

/// Where element `i` lives: (rank, index in that rank's part).
pub(crate) fn locate(i: usize, procs: usize, len: usize, layout: Layout) -> (usize, usize) {
    match layout {
        Layout::Cyclic => (i % procs, i / procs),
        Layout::BlockCyclic(b) => {
            let b = b.max(1);
            let (row, col) = (i / b, i % b);
            (row % procs, (row / procs) * b + col)
        }
        Layout::Blocked => {
            let per = len.div_ceil(procs).max(1);
            (i / per, i % per)
        }
    }
}

/// How many of `len` elements over `procs` ranks `rank` owns (constant time).
pub(crate) fn len_on(rank: usize, procs: usize, len: usize, layout: Layout) -> usize {
    if rank >= procs {
        return 0;
    }
    match layout {
        Layout::Cyclic => len.saturating_sub(rank).div_ceil(procs),
        Layout::Blocked => {
            let per = len.div_ceil(procs).max(1);
            len.saturating_sub(rank * per).min(per)
        }
        Layout::BlockCyclic(b) => {
            let b = b.max(1);
            let rows = len.div_ceil(b);
            if rank >= rows {
                return 0;
            }
            let mine = (rows - 1 - rank) / procs + 1;
            let short = if (rows - 1) % procs == rank {
                rows * b - len
            } else {
                0
            };
            mine * b - short
        }
    }
}

/// The global index of element `local` of `rank`'s part (the inverse of [`locate`]).
pub(crate) fn global_index(
    rank: usize,
    local: usize,
    procs: usize,
    len: usize,
    layout: Layout,
) -> usize {
    match layout {
        Layout::Cyclic => local * procs + rank,
        Layout::BlockCyclic(b) => {
            let b = b.max(1);
            ((local / b) * procs + rank) * b + local % b
        }
        Layout::Blocked => rank * len.div_ceil(procs).max(1) + local,
    }
}

impl<T: Pod> SpreadArray<T> {
    pub(crate) fn new(
        seg: SymmetricSegment,
        len: usize,
        procs: usize,
        me: usize,
        layout: Layout,
        base: NonNull<T>,
    ) -> Self {
        Self {
            seg,
            len,
            procs,
            me,
            layout,
            base,
            _t: PhantomData,
        }
    }

    /// Elements in the whole array.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the array has no elements.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The layout.
    pub fn layout(&self) -> Layout {
        self.layout
    }

    /// Where element `i` lives: (rank, index within that rank's part). Panics if `i >= len`.
    pub fn locate(&self, i: usize) -> (usize, usize) {
        assert!(
            i < self.len,
            "index {i} out of a spread array of {}",
            self.len
        );
        locate(i, self.procs, self.len, self.layout)
    }

    /// The global pointer to element `i`. Panics if `i >= len` (like slice indexing).
    pub fn ptr(&self, i: usize) -> GlobalPtr<T> {
        let (rank, local) = self.locate(i);
        GlobalPtr::new_unchecked(self.seg.on(rank), local * std::mem::size_of::<T>())
    }

    /// The global pointer to element `local` of `rank`'s part (for bulk transfers of a
    /// rank's consecutive elements).
    pub fn ptr_on(&self, rank: usize, local: usize) -> GlobalPtr<T> {
        GlobalPtr::new_unchecked(self.seg.on(rank), local * std::mem::size_of::<T>())
    }

    /// How many elements `rank` owns.
    pub fn len_on(&self, rank: usize) -> usize {
        len_on(rank, self.procs, self.len, self.layout)
    }

    /// How many elements this rank owns.
    pub fn local_len(&self) -> usize {
        self.len_on(self.me)
    }

    /// The global indices of this rank's elements, in local order (for owner-computes
    /// loops: `for (l, i) in a.local_indices().enumerate()`).
    pub fn local_indices(&self) -> impl Iterator<Item = usize> + '_ {
        (0..per_rank(self.len, self.procs, self.layout))
            .map(|l| global_index(self.me, l, self.procs, self.len, self.layout))
            .filter(|&i| i < self.len)
    }

    /// The global index of element `local` of `rank`'s part.
    pub fn global_index(&self, rank: usize, local: usize) -> usize {
        global_index(rank, local, self.procs, self.len, self.layout)
    }

    /// This rank's part as a slice (Split-C's local pointer to the owned elements).
    ///
    /// # Safety
    /// Other ranks may write this memory (puts, stores, atomics): the caller must make sure
    /// none does while the slice lives, as Split-C programs do by computing on their part
    /// between barriers (or `all_store_sync`). Under the `np` strategy the progress thread
    /// serves remote writes at any time, so the same rule holds there.
    pub unsafe fn local_slice(&self) -> &[T] {
        // SAFETY: `base` points at `per_rank` elements of our own segment, mapped for the
        // runtime's life; the caller guarantees no concurrent writer.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.local_len()) }
    }

    /// This rank's part as a mutable slice.
    ///
    /// # Safety
    /// As [`SpreadArray::local_slice`], and no other slice of this part may be alive.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn local_slice_mut(&self) -> &mut [T] {
        // SAFETY: as in `local_slice`; the caller guarantees exclusivity.
        unsafe { std::slice::from_raw_parts_mut(self.base.as_ptr(), self.local_len()) }
    }

    /// Reads element `local` of this rank's part (a copy; no exclusivity needed).
    pub fn local_get(&self, local: usize) -> T {
        assert!(local < self.local_len(), "local index {local} out of range");
        // SAFETY: inside our part (asserted); a volatile copy of plain data.
        unsafe { self.base.as_ptr().add(local).read_volatile() }
    }

    /// Writes element `local` of this rank's part.
    pub fn local_set(&self, local: usize, v: T) {
        assert!(local < self.local_len(), "local index {local} out of range");
        // SAFETY: as in `local_get`.
        unsafe { self.base.as_ptr().add(local).write_volatile(v) }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every index maps to one (rank, local) and back, every rank's part is dense from 0, and
    /// no local slot exceeds the per-rank allocation.
    fn check_bijection(len: usize, procs: usize, layout: Layout) {
        let per = per_rank(len, procs, layout);
        let mut seen = vec![vec![false; per]; procs];
        for i in 0..len {
            let (r, l) = locate(i, procs, len, layout);
            assert!(
                r < procs && l < per,
                "{layout:?} n={len} P={procs}: {i} -> ({r},{l})"
            );
            assert!(!seen[r][l], "{layout:?}: slot ({r},{l}) taken twice");
            seen[r][l] = true;
            assert_eq!(global_index(r, l, procs, len, layout), i);
        }
    }

    #[test]
    fn index_mapping_is_a_bijection_for_several_procs() {
        for procs in [1, 2, 3, 4, 7, 8] {
            for len in [0, 1, 5, 16, 17, 100] {
                for layout in [
                    Layout::Cyclic,
                    Layout::Blocked,
                    Layout::BlockCyclic(1),
                    Layout::BlockCyclic(4),
                ] {
                    check_bijection(len, procs, layout);
                }
            }
        }
    }

    #[test]
    fn part_lengths_match_the_mapping() {
        for procs in [1, 2, 3, 4, 7, 8] {
            for len in [0, 1, 5, 16, 17, 100] {
                for layout in [
                    Layout::Cyclic,
                    Layout::Blocked,
                    Layout::BlockCyclic(1),
                    Layout::BlockCyclic(4),
                ] {
                    let mut count = vec![0; procs];
                    for i in 0..len {
                        count[locate(i, procs, len, layout).0] += 1;
                    }
                    for (r, c) in count.iter().enumerate() {
                        assert_eq!(
                            len_on(r, procs, len, layout),
                            *c,
                            "{layout:?} n={len} P={procs} rank {r}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn cyclic_is_processor_first_and_block_cyclic_keeps_rows_together() {
        assert_eq!(locate(0, 4, 10, Layout::Cyclic), (0, 0));
        assert_eq!(locate(5, 4, 10, Layout::Cyclic), (1, 1));
        // A[6]::[3] on 4 ranks: row 5 on rank 1, second row there.
        assert_eq!(locate(5 * 3 + 2, 4, 18, Layout::BlockCyclic(3)), (1, 3 + 2));
        assert_eq!(locate(9, 4, 10, Layout::Blocked), (3, 0));
        assert_eq!(locate(2, 4, 10, Layout::Blocked), (0, 2));
    }
}
