//! This rank's own segments as code running on the rank reaches them: checked copies and
//! atomics that handlers of layers above (the global address space) can call from whichever
//! thread runs them.

use super::atomic::{self, AtomicOp};
use super::handlers::Shared;
use super::segment::{Perms, Refusal, SegmentRef};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// Checked access to this rank's own segments, for handlers: the same key, bounds and
/// permission checks as a remote access (a refusal is counted in [`super::Rma::refused`]).
///
/// Cheap to clone, `Send` and `Sync`, usable before the runtime is built (from
/// [`super::RmaSetup::own_segments`]) and inside any handler. The segment is named by a
/// [`SegmentRef`]'s id and key; its rank is not looked at, so a [`super::SymmetricSegment`]'s
/// handle for any rank names this rank's part.
#[derive(Debug, Clone)]
pub struct OwnSegments {
    shared: Arc<Shared>,
}

impl OwnSegments {
    pub(crate) fn new(shared: Arc<Shared>) -> Self {
        Self { shared }
    }

    /// Where `len` bytes at `offset` of `seg` lie in this rank's memory, after the checks for
    /// `need`. Dereferencing the pointer is the caller's business: the memory is shared with
    /// every rank that holds the segment's key, so it must be read and written as such (copies
    /// and atomics, never references held across a point where others may write).
    pub fn range(
        &self,
        seg: SegmentRef,
        offset: usize,
        len: usize,
        need: Perms,
    ) -> Result<NonNull<u8>, Refusal> {
        let p = self
            .shared
            .check_with(
                seg.id as u64,
                seg.key,
                offset as u64,
                len as u64,
                need,
                true,
            )
            .map_err(|(code, seg_len)| {
                Refusal::from_code(code, offset as u64, len as u64, seg_len)
                    .unwrap_or(Refusal::NoSuchSegment)
            })?;
        NonNull::new(p).ok_or(Refusal::NoSuchSegment)
    }

    /// Copies `buf.len()` bytes at `offset` of `seg` into `buf`.
    pub fn read(&self, seg: SegmentRef, offset: usize, buf: &mut [u8]) -> Result<(), Refusal> {
        let src = self.range(seg, offset, buf.len(), Perms::READ)?;
        // Acquire: pairs with the release of whoever wrote the data (a direct put's fence).
        fence(Ordering::Acquire);
        // SAFETY: the range was checked to lie inside this rank's segment area, mapped for
        // the runtime's life; `buf` is ours and cannot overlap shared memory we do not own.
        unsafe { crate::copy::copy_nonoverlapping(src.as_ptr(), buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` to `offset` of `seg`.
    pub fn write(&self, seg: SegmentRef, offset: usize, data: &[u8]) -> Result<(), Refusal> {
        let dst = self.range(seg, offset, data.len(), Perms::WRITE)?;
        // SAFETY: as in `read`; concurrent writers of one range race by the program's choice,
        // as with any remote write.
        unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), dst.as_ptr(), data.len()) };
        // Release: a flag or counter published after this makes the data visible.
        fence(Ordering::Release);
        Ok(())
    }

    /// Applies `op` to the 8-byte aligned word at `offset` of `seg`; returns the old value.
    pub fn atomic(
        &self,
        seg: SegmentRef,
        offset: usize,
        op: AtomicOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64, Refusal> {
        let p = self.range(seg, offset, 8, Perms::ATOMIC)?;
        if (p.as_ptr() as usize) % 8 != 0 {
            self.shared.count_refusal();
            return Err(Refusal::Misaligned);
        }
        // SAFETY: 8-aligned, inside this rank's segment area; every access to a word used
        // atomically goes through atomics.
        let word = unsafe { AtomicU64::from_ptr(p.as_ptr().cast()) };
        Ok(atomic::apply(word, op, operand, compare))
    }
}
