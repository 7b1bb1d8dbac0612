//! The AM path's single copy within a node. A rank of this node has its segment mapped, so a
//! write or read of the AM path need not carry its bytes through medium messages (a copy into
//! the sender's buffer, another out of it at the target, and a third out of a get's staging):
//! the initiator checks the target's table as the target would, copies the bytes straight
//! between the caller's buffer and the target's segment, and sends the target one short
//! request naming the whole range. The target's handler checks key, bounds and permission
//! again, applies the final action (a flag, a signal handler) and replies as for any
//! fragment, so completion and refusals reach the initiator exactly as before.
//!
//! - A **write** (put, write with flag, signal) is copied before its request leaves (the
//!   request ring is FIFO and its publication is a release, so the handler sees the bytes).
//! - A **get** is one request whose fragment is empty: the target checks the range and
//!   replies; the initiator copies the bytes when the get is waited for and the reply said
//!   yes, so a refused get reads nothing, and a leaked event reads nothing either.
//! - An access the initiator's check refuses is sent the old way, in fragments, so that the
//!   target refuses it, counts it once and reports it with the same details as ever. Nothing
//!   is written.
//!
//! Writes reach the target's memory in program order, as on the direct path; an access that
//! overlaps another one in flight without a `sync` between them races, as on any path.

use super::segment::{Perms, SegmentRef};
use super::segment_table::Table;
use super::Rma;
use std::sync::atomic::{fence, Ordering};

impl Rma<'_> {
    /// Where `len` bytes at `offset` of `target` lie in its mapped segment, if the target is
    /// a rank of this node whose table grants `need` for them and the runtime is not
    /// finalized; `None` otherwise (a refusal is not counted: the target counts it when it
    /// refuses the request sent instead).
    pub(super) fn admit_in_place(
        &self,
        target: SegmentRef,
        offset: u64,
        len: u64,
        need: Perms,
    ) -> Option<*mut u8> {
        // After the finalize the target may have exited: the request sent instead fails.
        if self.rt.is_finalized() {
            return None;
        }
        let mem = self.rt.direct_memory(target.rank)?;
        // SAFETY: the table bytes of a mapped region live as long as the runtime.
        let table = unsafe { Table::at(mem.table) };
        let grant = table.check(target.id, target.key, offset, len, need).ok()?;
        // The entry's offset comes from shared memory: never trust it to stay in range.
        let end = grant.area_offset.checked_add(usize::try_from(len).ok()?)?;
        // SAFETY: inside the target's mapped segment area (checked just above).
        (end <= mem.segment_len).then(|| unsafe { mem.segment.add(grant.area_offset) })
    }

    /// Writes `data` at `offset` of `target` in place, if the target is a rank of this node
    /// and its table grants the range (and the 8-byte aligned `flag` word, when the write has
    /// one). Returns whether it wrote; if not, nothing was written.
    pub(super) fn put_in_place(
        &self,
        target: SegmentRef,
        offset: u64,
        data: &[u8],
        flag: Option<u64>,
    ) -> bool {
        let Some(dst) = self.admit_in_place(target, offset, data.len() as u64, Perms::WRITE) else {
            return false;
        };
        // A refused flag word refuses the whole write, data included.
        if let Some(f) = flag {
            match self.admit_in_place(target, f, 8, Perms::WRITE) {
                Some(p) if (p as usize) % 8 == 0 => {}
                _ => return false,
            }
        }
        // SAFETY: `dst..dst + len` lies in the target's mapped segment (checked). Concurrent
        // writers to one range race by the program's choice, as with any remote write.
        unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        // Release: the request published next makes the data visible to its handler.
        fence(Ordering::Release);
        true
    }
}
