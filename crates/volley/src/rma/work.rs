//! Target-side work of the AM path, counted per segment-table entry (a segment or an agent's
//! window: seed 002's target task): each put, get or atomic frame a handler of this rank ran
//! for it, and the bytes it moved. A frame carries at most [`Rma::frame_bound`] bytes, so the
//! work of one handler run is bounded whatever the operation's size. The direct path runs no
//! code at the target and counts nothing; a get or put in place (the AM path within a node)
//! is one frame of 0 bytes at the target, the initiator moving the bytes.

use super::segment::SegmentRef;
use super::{Error, Refusal, Result, Rma};

/// Work done at this rank by the AM path's handlers for one segment or window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TargetWork {
    /// Handler runs (one per fragment of a put or get, one per atomic).
    pub frames: u64,
    /// Bytes those runs copied.
    pub bytes: u64,
    /// The most bytes one run copied.
    pub largest_frame: u64,
}

impl Rma<'_> {
    /// The most bytes one frame of the AM path carries (the medium maximum).
    pub fn frame_bound(&self) -> usize {
        self.rt.max_medium()
    }

    /// The target-side work counted for `seg`, a live segment or window of this rank, since
    /// it was made.
    pub fn target_work(&self, seg: SegmentRef) -> Result<TargetWork> {
        let live = seg.rank == self.rt.rank()
            && self
                .owned
                .borrow()
                .iter()
                .any(|o| o.id == seg.id && o.key == seg.key);
        if !live {
            return Err(Error::Refused {
                rank: self.rt.rank(),
                reason: Refusal::NoSuchSegment,
            });
        }
        let [frames, bytes, largest_frame] = self.shared.work(seg.id);
        Ok(TargetWork {
            frames,
            bytes,
            largest_frame,
        })
    }
}
