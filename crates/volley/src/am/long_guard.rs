//! Where long messages may land. A long message writes its payload straight into the target's
//! segment area. The layer that carves segments out of that area (the one-sided layer) installs
//! a guard that refuses a range touching a live segment, so that only keyed one-sided writes
//! change a segment; without a guard the whole area is the long messages'.

use crate::error::Refusal;

/// Decides whether a long message may write a range of a rank's segment area.
pub(crate) trait LongGuard: Send + Sync {
    /// `Err` with the reason (counted by the guard) when a long message may not write `len`
    /// bytes at `offset` into the segment area of the rank whose region's upper bytes (see
    /// `Region::upper_ptr`) are at `upper`.
    fn admit(&self, upper: *mut u8, offset: usize, len: usize) -> Result<(), Refusal>;
}
