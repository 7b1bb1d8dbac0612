//! Segments: ranges of a rank's shared segment area that remote operations may touch, each
//! with a key and permissions, described in a table that every local rank can read
//! (`segment_table`, kept in the region the shared-memory transport maps). This module has
//! the handles and the allocator.

pub use super::segment_table::{Perms, MAX_SEGMENTS};
pub use crate::refusal::Refusal;

/// Segments start on cache-line boundaries.
const ALIGN: usize = 64;

/// A handle to one rank's segment: what an initiator needs to address it. Plain data: send it
/// to other ranks in message arguments with [`SegmentRef::to_words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentRef {
    /// The rank that owns the segment.
    pub rank: usize,
    pub(crate) id: u16,
    pub(crate) key: u64,
    pub(crate) len: u64,
}

impl SegmentRef {
    /// The segment's length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the segment is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Three words for message arguments.
    pub fn to_words(&self) -> [u64; 3] {
        [
            self.rank as u64 | (self.id as u64) << 32,
            self.key,
            self.len,
        ]
    }

    /// The handle from [`SegmentRef::to_words`]. A forged or stale handle is refused at the
    /// target, never trusted.
    pub fn from_words(w: [u64; 3]) -> Self {
        Self {
            rank: (w[0] & 0xffff_ffff) as usize,
            id: (w[0] >> 32) as u16,
            key: w[1],
            len: w[2],
        }
    }

    /// A copy of this handle with another key (to test protection).
    #[doc(hidden)]
    pub fn with_key(mut self, key: u64) -> Self {
        self.key = key;
        self
    }
}

/// A segment allocated collectively: the same id, key and length on every rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SymmetricSegment {
    pub(crate) id: u16,
    pub(crate) key: u64,
    pub(crate) len: u64,
}

impl SymmetricSegment {
    /// This segment at `rank`.
    pub fn on(&self, rank: usize) -> SegmentRef {
        SegmentRef {
            rank,
            id: self.id,
            key: self.key,
            len: self.len,
        }
    }

    /// The length in bytes.
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Whether the segment is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// First-fit allocator over the segment area, deterministic so that ranks making the same
/// calls in the same order get the same offsets (symmetric allocation relies on it).
#[derive(Debug)]
pub(crate) struct AreaAllocator {
    free: Vec<(usize, usize)>,
    ids: [bool; MAX_SEGMENTS],
    live: Vec<(u16, usize, usize)>,
}

impl AreaAllocator {
    pub(crate) fn new(area_len: usize) -> Self {
        Self {
            free: vec![(0, area_len)],
            ids: [false; MAX_SEGMENTS],
            live: Vec::new(),
        }
    }

    /// Reserves `len` bytes and an id: `(id, offset)`.
    pub(crate) fn alloc(&mut self, len: usize) -> Option<(u16, usize)> {
        let id = self.ids.iter().position(|used| !used)?;
        // Checked: a length near usize::MAX would round up to a size of 0.
        let size = len.max(1).checked_next_multiple_of(ALIGN)?;
        let i = self.free.iter().position(|&(_, l)| l >= size)?;
        let (off, l) = self.free[i];
        if l == size {
            self.free.remove(i);
        } else {
            self.free[i] = (off + size, l - size);
        }
        self.ids[id] = true;
        self.live.push((id as u16, off, size));
        Some((id as u16, off))
    }

    /// Reserves an id without space (an agent's window aliases its segment's space).
    pub(crate) fn alloc_id(&mut self) -> Option<u16> {
        let id = self.ids.iter().position(|used| !used)?;
        self.ids[id] = true;
        Some(id as u16)
    }

    /// Returns an id reserved by [`AreaAllocator::alloc_id`].
    pub(crate) fn free_id(&mut self, id: u16) {
        if let Some(used) = self.ids.get_mut(id as usize) {
            *used = false;
        }
    }

    /// Returns segment `id`'s space.
    pub(crate) fn free(&mut self, id: u16) -> bool {
        let Some(i) = self.live.iter().position(|&(x, _, _)| x == id) else {
            return false;
        };
        let (_, off, size) = self.live.swap_remove(i);
        self.ids[id as usize] = false;
        self.free.push((off, size));
        self.free.sort_unstable();
        // Coalesce neighbours.
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(self.free.len());
        for &(o, l) in &self.free {
            match merged.last_mut() {
                Some((mo, ml)) if *mo + *ml == o => *ml += l,
                _ => merged.push((o, l)),
            }
        }
        self.free = merged;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allocator_is_deterministic_and_coalesces() {
        let mut a = AreaAllocator::new(1024);
        let (i0, o0) = a.alloc(100).unwrap();
        let (i1, o1) = a.alloc(64).unwrap();
        assert_eq!((i0, o0, i1, o1), (0, 0, 1, 128));
        assert!(a.alloc(1024).is_none(), "no room");
        assert!(a.free(i0));
        assert!(!a.free(i0), "double free refused");
        assert!(a.free(i1));
        assert_eq!(
            a.alloc(1024),
            Some((0, 0)),
            "space coalesced back into one range"
        );
    }

    #[test]
    fn ids_without_space_are_reserved_and_returned() {
        let mut a = AreaAllocator::new(1024);
        let (i0, _) = a.alloc(64).unwrap();
        let alias = a.alloc_id().unwrap();
        assert_ne!(alias, i0);
        let (i1, o1) = a.alloc(64).unwrap();
        assert!(i1 != alias && o1 == 64, "an id alone takes no space");
        a.free_id(alias);
        assert_eq!(a.alloc_id(), Some(alias), "a returned id is reused");
        a.free_id(MAX_SEGMENTS as u16 + 3);
    }
}
