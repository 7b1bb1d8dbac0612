//! Segments: ranges of a rank's shared segment area that remote operations may touch, each
//! with a key and permissions, described in a table that every local rank can read.

use crate::transport::shm::UPPER_BYTES;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most segments a rank can have at once.
pub const MAX_SEGMENTS: usize = 64;
/// Segments start on cache-line boundaries.
const ALIGN: usize = 64;

/// What remote ranks may do with a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Perms(u8);

impl Perms {
    /// Remote reads (get).
    pub const READ: Perms = Perms(1);
    /// Remote writes (put).
    pub const WRITE: Perms = Perms(2);
    /// Remote atomic operations.
    pub const ATOMIC: Perms = Perms(4);
    /// Read, write and atomics.
    pub const ALL: Perms = Perms(7);
    /// Nothing.
    pub const NONE: Perms = Perms(0);

    /// Whether every permission in `other` is granted.
    pub fn contains(self, other: Perms) -> bool {
        self.0 & other.0 == other.0
    }

    pub(crate) fn bits(self) -> u64 {
        self.0 as u64
    }

    pub(crate) fn from_bits(bits: u64) -> Self {
        Perms((bits & 7) as u8)
    }
}

impl std::ops::BitOr for Perms {
    type Output = Perms;
    fn bitor(self, rhs: Perms) -> Perms {
        Perms(self.0 | rhs.0)
    }
}

/// Why a remote access was refused. The target's memory is unchanged whenever one is returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The segment id names no live segment at the target.
    #[error("no such segment")]
    NoSuchSegment,
    /// The key does not match the segment's key.
    #[error("wrong key")]
    WrongKey,
    /// The range does not fit in the segment (or its length overflows).
    #[error(
        "access of {len} bytes at offset {offset} does not fit the {segment_len}-byte segment"
    )]
    OutOfBounds {
        /// Requested offset.
        offset: u64,
        /// Requested length.
        len: u64,
        /// Segment length.
        segment_len: u64,
    },
    /// The segment does not grant remote reads.
    #[error("the segment is not readable")]
    NotReadable,
    /// The segment does not grant remote writes.
    #[error("the segment is not writable")]
    NotWritable,
    /// The segment does not grant remote atomics.
    #[error("the segment does not allow atomics")]
    NoAtomics,
    /// An atomic operation (or a flag, reference or FIFO word) on a word that is not 8-byte
    /// aligned.
    #[error("atomic operation on an offset that is not 8-byte aligned")]
    Misaligned,
    /// No memory-based FIFO with the handle's geometry lives at that offset.
    #[error("no FIFO with this entry size and capacity at that offset")]
    NotAFifo,
    /// A FIFO entry whose length is not the FIFO's entry size.
    #[error("the entry's length is not the FIFO's entry size")]
    EntrySize,
}

impl Refusal {
    /// Encodes for a status word (0 is success).
    pub(crate) fn code(self) -> u64 {
        match self {
            Refusal::NoSuchSegment => 1,
            Refusal::WrongKey => 2,
            Refusal::OutOfBounds { .. } => 3,
            Refusal::NotReadable => 4,
            Refusal::NotWritable => 5,
            Refusal::NoAtomics => 6,
            Refusal::Misaligned => 7,
            Refusal::NotAFifo => 8,
            Refusal::EntrySize => 9,
        }
    }

    /// Decodes a status word; `offset`/`len`/`segment_len` fill an out-of-bounds refusal.
    pub(crate) fn from_code(code: u64, offset: u64, len: u64, segment_len: u64) -> Option<Self> {
        Some(match code {
            1 => Refusal::NoSuchSegment,
            2 => Refusal::WrongKey,
            3 => Refusal::OutOfBounds {
                offset,
                len,
                segment_len,
            },
            4 => Refusal::NotReadable,
            5 => Refusal::NotWritable,
            6 => Refusal::NoAtomics,
            7 => Refusal::Misaligned,
            8 => Refusal::NotAFifo,
            9 => Refusal::EntrySize,
            _ => return None,
        })
    }
}

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

/// One table entry, written by the owner, read by any local rank.
#[repr(C)]
pub(crate) struct Entry {
    /// 0 = free; otherwise 1 | perms << 1.
    state: AtomicU64,
    key: AtomicU64,
    offset: AtomicU64,
    len: AtomicU64,
}

/// The table in a rank's region: a refusal counter, then the entries.
#[repr(C)]
pub(crate) struct Table {
    /// Remote accesses refused against this rank's segments (counted by whoever refused).
    pub(crate) refused: AtomicU64,
    _pad: [u64; 7],
    entries: [Entry; MAX_SEGMENTS],
}

const _: () = assert!(std::mem::size_of::<Table>() <= UPPER_BYTES);

/// A validated range, as an offset into the owner's segment area.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Grant {
    pub(crate) area_offset: usize,
}

impl Table {
    /// Views the table bytes of a region.
    ///
    /// # Safety
    /// `ptr` must be a region's upper-layer bytes, which live as long as the runtime.
    pub(crate) unsafe fn at<'a>(ptr: *mut u8) -> &'a Table {
        // SAFETY: the caller guarantees the bytes exist; they are zeroed at creation (a valid
        // Table: all atomics), 64-byte aligned, and at least size_of::<Table>() long.
        unsafe { &*ptr.cast::<Table>() }
    }

    /// Publishes entry `id` (owner only).
    pub(crate) fn publish(&self, id: u16, key: u64, area_offset: usize, len: usize, perms: Perms) {
        let e = &self.entries[id as usize];
        e.key.store(key, Ordering::Relaxed);
        e.offset.store(area_offset as u64, Ordering::Relaxed);
        e.len.store(len as u64, Ordering::Relaxed);
        // Release: a reader that acquires `state` sees the fields above.
        e.state.store(1 | perms.bits() << 1, Ordering::Release);
    }

    /// Retires entry `id` (owner only).
    pub(crate) fn retire(&self, id: u16) {
        self.entries[id as usize].state.store(0, Ordering::Release);
    }

    /// Checks an access of `len` bytes at `offset` of segment `id` needing `need`.
    pub(crate) fn check(
        &self,
        id: u16,
        key: u64,
        offset: u64,
        len: u64,
        need: Perms,
    ) -> Result<Grant, Refusal> {
        let e = self
            .entries
            .get(id as usize)
            .ok_or(Refusal::NoSuchSegment)?;
        let state = e.state.load(Ordering::Acquire);
        if state & 1 == 0 {
            return Err(Refusal::NoSuchSegment);
        }
        if e.key.load(Ordering::Relaxed) != key {
            return Err(Refusal::WrongKey);
        }
        let segment_len = e.len.load(Ordering::Relaxed);
        if offset.checked_add(len).is_none_or(|end| end > segment_len) {
            return Err(Refusal::OutOfBounds {
                offset,
                len,
                segment_len,
            });
        }
        let perms = Perms::from_bits(state >> 1);
        if !perms.contains(need) {
            return Err(if need.contains(Perms::ATOMIC) {
                Refusal::NoAtomics
            } else if need.contains(Perms::WRITE) {
                Refusal::NotWritable
            } else {
                Refusal::NotReadable
            });
        }
        let area_offset = e
            .offset
            .load(Ordering::Relaxed)
            .checked_add(offset)
            .ok_or(Refusal::NoSuchSegment)?;
        Ok(Grant {
            area_offset: area_offset as usize,
        })
    }

    /// Counts a refusal against this rank.
    pub(crate) fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
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
    fn table_checks_key_bounds_and_permissions() {
        let mem = vec![0u64; UPPER_BYTES / 8];
        // SAFETY: a zeroed, 8-aligned buffer of UPPER_BYTES stands in for a region's bytes
        // (Table needs only 8-byte alignment for its atomics).
        let t = unsafe { Table::at(mem.as_ptr().cast_mut().cast()) };
        t.publish(3, 99, 4096, 100, Perms::READ);
        assert_eq!(
            t.check(3, 99, 0, 100, Perms::READ).unwrap().area_offset,
            4096
        );
        assert_eq!(
            t.check(3, 98, 0, 1, Perms::READ).unwrap_err(),
            Refusal::WrongKey
        );
        assert!(matches!(
            t.check(3, 99, 50, 51, Perms::READ),
            Err(Refusal::OutOfBounds { .. })
        ));
        assert!(matches!(
            t.check(3, 99, u64::MAX, 2, Perms::READ),
            Err(Refusal::OutOfBounds { .. })
        ));
        assert_eq!(
            t.check(3, 99, 0, 8, Perms::WRITE).unwrap_err(),
            Refusal::NotWritable
        );
        assert_eq!(
            t.check(3, 99, 0, 8, Perms::ATOMIC).unwrap_err(),
            Refusal::NoAtomics
        );
        assert_eq!(
            t.check(4, 99, 0, 8, Perms::READ).unwrap_err(),
            Refusal::NoSuchSegment
        );
        assert_eq!(
            t.check(200, 99, 0, 8, Perms::READ).unwrap_err(),
            Refusal::NoSuchSegment
        );
        t.retire(3);
        assert_eq!(
            t.check(3, 99, 0, 8, Perms::READ).unwrap_err(),
            Refusal::NoSuchSegment
        );
    }
}
