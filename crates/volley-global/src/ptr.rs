//! Global pointers: a typed (rank, segment, offset) triple.

use crate::error::{GlobalError, Result};
use bytemuck::Pod;
use std::marker::PhantomData;
use volley::rma::SegmentRef;

/// A pointer to a `T` in the memory of some rank: (rank, segment, byte offset).
///
/// Typed, so a `GlobalPtr<f64>` is not read as a `u32` by accident ([`GlobalPtr::cast`] says
/// so when it is meant). Arithmetic moves only the offset, never the rank (Split-C's global
/// pointers; spread arrays move across ranks through [`crate::SpreadArray::ptr`]). Any pointer
/// may be formed; every access checks it (bounds here, then key, liveness and permissions at
/// the owner) and refuses with an error naming what was wrong.
pub struct GlobalPtr<T> {
    seg: SegmentRef,
    offset: usize,
    _t: PhantomData<fn() -> T>,
}

impl<T> Clone for GlobalPtr<T> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<T> Copy for GlobalPtr<T> {}

impl<T> PartialEq for GlobalPtr<T> {
    fn eq(&self, other: &Self) -> bool {
        self.seg == other.seg && self.offset == other.offset
    }
}
impl<T> Eq for GlobalPtr<T> {}

impl<T> std::hash::Hash for GlobalPtr<T> {
    fn hash<H: std::hash::Hasher>(&self, h: &mut H) {
        self.seg.hash(h);
        self.offset.hash(h);
    }
}

impl<T> std::fmt::Debug for GlobalPtr<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "GlobalPtr<{}>(rank {}, +{})",
            std::any::type_name::<T>(),
            self.seg.rank,
            self.offset
        )
    }
}

impl<T: Pod> GlobalPtr<T> {
    /// The `T` at byte `offset` of segment `seg` (on `seg.rank`). The offset must be aligned
    /// for `T`; bounds are checked at each access.
    pub fn new(seg: SegmentRef, offset: usize) -> Result<Self> {
        let align = std::mem::align_of::<T>();
        if offset % align != 0 {
            return Err(GlobalError::Misaligned { offset, align });
        }
        Ok(Self::new_unchecked(seg, offset))
    }

    pub(crate) fn new_unchecked(seg: SegmentRef, offset: usize) -> Self {
        Self {
            seg,
            offset,
            _t: PhantomData,
        }
    }

    /// The owner (Split-C's `toproc`).
    pub fn rank(&self) -> usize {
        self.seg.rank
    }

    /// Byte offset in the segment.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The segment.
    pub fn segment(&self) -> SegmentRef {
        self.seg
    }

    /// Whether `rank` owns the pointee (pass `MYPROC` to ask "is it mine").
    pub fn is_local_to(&self, rank: usize) -> bool {
        self.seg.rank == rank
    }

    /// The pointer `n` elements further (negative: back). Only the offset moves.
    pub fn offset_by(self, n: isize) -> Self {
        let bytes = n.wrapping_mul(std::mem::size_of::<T>() as isize);
        Self::new_unchecked(self.seg, self.offset.wrapping_add_signed(bytes))
    }

    /// Elements from `other` to `self` (same rank and segment; `None` otherwise).
    pub fn offset_from(self, other: Self) -> Option<isize> {
        if self.seg != other.seg {
            return None;
        }
        let d = self.offset as isize - other.offset as isize;
        Some(d / std::mem::size_of::<T>().max(1) as isize)
    }

    /// The same address seen as another type (alignment checked).
    pub fn cast<U: Pod>(self) -> Result<GlobalPtr<U>> {
        GlobalPtr::new(self.seg, self.offset)
    }

    /// Checks that `count` elements from here fit the segment (before anything is sent).
    pub(crate) fn check_fits(&self, count: usize) -> Result<usize> {
        let len = count.saturating_mul(std::mem::size_of::<T>());
        if self
            .offset
            .checked_add(len)
            .is_none_or(|e| e > self.seg.len())
        {
            return Err(GlobalError::OutOfBounds {
                rank: self.seg.rank,
                offset: self.offset,
                len,
                segment_len: self.seg.len(),
            });
        }
        Ok(len)
    }
}

impl<T: Pod> std::ops::Add<usize> for GlobalPtr<T> {
    type Output = Self;
    fn add(self, n: usize) -> Self {
        self.offset_by(n as isize)
    }
}

impl<T: Pod> std::ops::Sub<usize> for GlobalPtr<T> {
    type Output = Self;
    fn sub(self, n: usize) -> Self {
        self.offset_by(-(n as isize))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(rank: usize, len: u64) -> SegmentRef {
        SegmentRef::from_words([rank as u64 | 3 << 32, 0xfeed, len])
    }

    #[test]
    fn arithmetic_moves_only_the_offset() {
        let p = GlobalPtr::<f64>::new(seg(2, 800), 16).unwrap();
        let q = p + 5;
        assert_eq!(q.rank(), 2);
        assert_eq!(q.offset(), 16 + 40);
        assert_eq!((q - 5), p);
        assert_eq!(q.offset_from(p), Some(5));
        assert_eq!(p.offset_by(-2).offset(), 0);
        assert!(q.is_local_to(2) && !q.is_local_to(0));
        assert_ne!(p, GlobalPtr::new(seg(1, 800), 16).unwrap());
        assert_eq!(
            p.offset_from(GlobalPtr::new(seg(1, 800), 16).unwrap()),
            None
        );
    }

    #[test]
    fn misaligned_pointers_and_oversized_accesses_are_refused() {
        let e = GlobalPtr::<u64>::new(seg(0, 64), 4).unwrap_err();
        assert!(matches!(
            e,
            GlobalError::Misaligned {
                offset: 4,
                align: 8
            }
        ));
        let p = GlobalPtr::<u32>::new(seg(0, 64), 4).unwrap();
        assert!(p.cast::<u64>().is_err());
        assert_eq!(p.check_fits(15).unwrap(), 60);
        assert!(matches!(
            p.check_fits(16),
            Err(GlobalError::OutOfBounds {
                len: 64,
                segment_len: 64,
                ..
            })
        ));
        assert!(p.check_fits(usize::MAX / 2).is_err());
    }
}
