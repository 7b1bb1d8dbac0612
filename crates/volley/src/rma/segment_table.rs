//! The segment table: which ranges of a rank's segment area are segments, with their keys and
//! permissions. It lives in the rank's region, in the header-page bytes the shared-memory
//! transport reserves for the layer above ([`crate::transport::shm::UPPER_BYTES`]), so that
//! every local rank can read it: the one-sided layer checks its accesses against it, and it
//! refuses a long message whose range would land on a segment (see [`Table::overlapping`]),
//! through the guard it installs in the AM layer.

use crate::refusal::Refusal;
use crate::transport::shm::UPPER_BYTES;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most segments a rank can have at once.
pub const MAX_SEGMENTS: usize = 64;

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
    /// One past the highest id ever published: the ids a scan for live segments must look at
    /// (0 while the rank has made none, so that a long message to it checks one word).
    ids_used: AtomicU64,
    _pad: [u64; 6],
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
        // Only the owner writes it, so a load and a store make the maximum.
        if u64::from(id) >= self.ids_used.load(Ordering::Relaxed) {
            self.ids_used.store(u64::from(id) + 1, Ordering::Release);
        }
    }

    /// The permissions of live entry `id`.
    pub(crate) fn perms(&self, id: u16) -> Option<Perms> {
        let state = self.entries.get(id as usize)?.state.load(Ordering::Acquire);
        (state & 1 == 1).then(|| Perms::from_bits(state >> 1))
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

    /// The first live segment that bytes `area_offset..area_offset + len` of the segment area
    /// touch, if any (an empty range touches none). A long message must not land on one: it
    /// carries no key and would bypass the segment's permissions.
    ///
    /// Read without a lock while the owner may be making or freeing segments: a segment made
    /// after this check can still be written by the message, as any access can race with the
    /// owner's free. Programs make segments before handing them out, so this does not arise
    /// in a correct program; the check catches a long message aimed at the wrong offset.
    pub(crate) fn overlapping(&self, area_offset: usize, len: usize) -> Option<u16> {
        let end = area_offset.checked_add(len)? as u64;
        if len == 0 {
            return None;
        }
        let start = area_offset as u64;
        // Acquire: pairs with `publish`, so every id published before is in the range.
        let used = (self.ids_used.load(Ordering::Acquire) as usize).min(MAX_SEGMENTS);
        self.entries[..used]
            .iter()
            .position(|e| {
                // Acquire: pairs with `publish`, so that offset and length are the entry's.
                e.state.load(Ordering::Acquire) & 1 == 1 && {
                    let (at, n) = (
                        e.offset.load(Ordering::Relaxed),
                        e.len.load(Ordering::Relaxed),
                    );
                    start < at.saturating_add(n) && at < end
                }
            })
            .map(|id| id as u16)
    }

    /// Admits a long message's payload at `area_offset..area_offset + len`, or refuses it
    /// (and counts the refusal) when it would touch a live segment (see
    /// [`Table::overlapping`]). Whoever writes the payload checks: the sender on one node, the
    /// target across nodes.
    pub(crate) fn admit_long(&self, area_offset: usize, len: usize) -> Result<(), Refusal> {
        match self.overlapping(area_offset, len) {
            None => Ok(()),
            Some(_) => {
                self.count_refusal();
                Err(Refusal::OnSegment)
            }
        }
    }

    /// Counts a refusal against this rank.
    pub(crate) fn count_refusal(&self) {
        self.refused.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn overlapping_finds_the_live_segments_a_range_touches() {
        let mem = vec![0u64; UPPER_BYTES / 8];
        // SAFETY: as in the test above.
        let t = unsafe { Table::at(mem.as_ptr().cast_mut().cast()) };
        assert_eq!(t.overlapping(0, 1 << 20), None, "no segments yet");
        t.publish(63, 3, 1 << 16, 8, Perms::READ);
        assert_eq!(
            t.overlapping(0, 1 << 20),
            Some(63),
            "the last id is scanned"
        );
        t.retire(63);
        t.publish(5, 1, 4096, 100, Perms::ALL);
        t.publish(9, 2, 8192, 64, Perms::NONE);
        assert_eq!(
            t.overlapping(0, 4096),
            None,
            "ends where the segment starts"
        );
        assert_eq!(
            t.overlapping(4196, 10),
            None,
            "starts where the segment ends"
        );
        assert_eq!(t.overlapping(4195, 1), Some(5), "its last byte");
        assert_eq!(t.overlapping(4000, 97), Some(5), "its first byte");
        assert_eq!(
            t.overlapping(4100, 0),
            None,
            "an empty range touches nothing"
        );
        assert_eq!(t.overlapping(0, 1 << 20), Some(5), "a range covering both");
        assert_eq!(t.overlapping(8200, 8), Some(9), "inside the second");
        assert_eq!(t.overlapping(usize::MAX, 2), None, "an overflowing range");
        t.retire(5);
        assert_eq!(
            t.overlapping(4100, 8),
            None,
            "a freed segment is open again"
        );
        assert_eq!(t.overlapping(0, 1 << 20), Some(9));
        assert_eq!(t.admit_long(8192, 1), Err(Refusal::OnSegment));
        assert_eq!(t.admit_long(8256, 64), Ok(()));
        assert_eq!(
            t.refused.load(Ordering::Relaxed),
            1,
            "the refusal is counted"
        );
    }
}
