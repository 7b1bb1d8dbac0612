//! Fast lanes in mapped memory: under `hw` with every rank on this node, each rank's lanes
//! live in a symmetric segment and a sender writes its message straight into the receiver's
//! slot (the stores the `coll_fast` handler would make), so a small collective's step costs
//! the cache lines of one slot instead of a ring entry, a handler call and a copy.

use crate::error::{GlobalError, Result};
use crate::handlers::Lanes;
use crate::strategy::Strategy;
use std::ptr::NonNull;
use volley::rma::{Perms, Rma, SymmetricSegment};
use volley::Runtime;

/// Every rank's lanes, as mapped in this process (by rank; this rank's own included).
#[derive(Debug)]
pub(crate) struct DirectLanes {
    by_rank: Vec<NonNull<Lanes>>,
}

// SAFETY: the pointers name mapped shared memory that stays valid for the job's life (the
// segments are never freed), and it is only accessed through atomics.
unsafe impl Send for DirectLanes {}

impl DirectLanes {
    /// Allocates (collectively: every rank calls it at the same place) and maps every rank's
    /// lanes; `None`, on every rank alike, where the direct path does not apply: another
    /// strategy, or a rank on another node.
    pub(crate) fn new(rma: &Rma<'_>, rt: &Runtime, strategy: Strategy) -> Result<Option<Self>> {
        let local = (0..rt.size()).all(|r| rt.is_local(r));
        if strategy != Strategy::Hw || !local || rt.size() < 2 {
            return Ok(None);
        }
        let bytes = std::mem::size_of::<Lanes>();
        let seg = crate::global::zeroed_symmetric(rma, rt, bytes)?;
        let by_rank = (0..rt.size())
            .map(|r| map_on(rma, rt, &seg, r, bytes, "collective lanes").map(NonNull::cast))
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Self { by_rank }))
    }

    /// Rank `r`'s lanes.
    pub(crate) fn of(&self, r: usize) -> &Lanes {
        // SAFETY: a mapping of `size_of::<Lanes>()` zeroed bytes, 64-aligned as segments are,
        // valid for the job's life; `Lanes` is atomics only (all zero is its empty state), so
        // shared references to it are sound while other ranks write it.
        unsafe { self.by_rank[r].as_ref() }
    }
}

/// This process's view of `bytes` bytes of rank `r`'s part of `seg` (its own, or mapped), which
/// must be cache-line aligned (`what` names the memory in the error).
pub(super) fn map_on(
    rma: &Rma<'_>,
    rt: &Runtime,
    seg: &SymmetricSegment,
    r: usize,
    bytes: usize,
    what: &str,
) -> Result<NonNull<u8>> {
    let p = if r == rt.rank() {
        rma.own_segments()
            .range(seg.on(r), 0, bytes, Perms::NONE)
            .map_err(|e| GlobalError::refused(r, e))?
    } else {
        rma.mapped(seg.on(r), 0, bytes, Perms::WRITE)?
            .ok_or_else(|| {
                GlobalError::BadArguments(format!("rank {r}'s {what} are not mapped here"))
            })?
    };
    if p.as_ptr() as usize % 64 != 0 {
        return Err(GlobalError::BadArguments(format!(
            "rank {r}'s {what} are not cache-line aligned"
        )));
    }
    Ok(p)
}
