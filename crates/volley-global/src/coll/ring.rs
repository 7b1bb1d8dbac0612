//! The broadcast ring in mapped memory: small broadcasts under `hw` with every rank on this
//! node (the protocol: `crate::slot::Ring`). The root writes its data into a slot of a ring
//! in rank 0's mapped memory and returns; every other rank reads the slot. The root waits only
//! when the ring is full (some rank has not yet read the broadcast `DEPTH` calls back), so a
//! root that runs ahead does not wait for its receivers on every call, and a receiver waits
//! only for the root.

use super::what::What;
use crate::error::Result;
use crate::global::Global;
use crate::handlers::{to_words, FAST_WORDS};
use crate::slot::{Consumed, FastSlot, Ring};
use crate::strategy::Strategy;
use bytemuck::Pod;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::Ordering;
use volley::rma::Rma;
use volley::Runtime;

/// Broadcasts a root may be ahead of the slowest rank. Where ranks share cores, every rank must
/// have a core once for each ring's worth of broadcasts, so the cores' hand-offs are shared by
/// this many calls (8-byte broadcasts on 8 ranks of 2 cores: 0.14-0.18 µs a call, where a
/// hand-off costs 1.5 µs); 48 KiB of slots.
const DEPTH: usize = 256;

/// Rank 0's broadcast ring, as mapped in this process: `DEPTH` slots, then a consumed count
/// per rank.
#[derive(Debug)]
pub(crate) struct BcastRing {
    base: NonNull<u8>,
    procs: usize,
    /// Ring broadcasts so far (every rank counts the same).
    calls: Cell<u64>,
    /// Broadcasts below this number have a free slot (as last seen: the least consumed
    /// count plus `DEPTH`).
    free_below: Cell<u64>,
}

// SAFETY: `base` names mapped shared memory that stays valid for the job's life (the segment
// is never freed), only accessed through atomics.
unsafe impl Send for BcastRing {}

impl BcastRing {
    /// Allocates the ring (collectively: every rank calls it at the same place); `None`, on
    /// every rank alike, unless the strategy is `hw`, every rank is on this node and there
    /// are at least 2 ranks.
    pub(crate) fn new(rma: &Rma<'_>, rt: &Runtime, strategy: Strategy) -> Result<Option<Self>> {
        let p = rt.size();
        let local = (0..p).all(|r| rt.is_local(r));
        if strategy != Strategy::Hw || !local || p < 2 {
            return Ok(None);
        }
        let bytes = DEPTH * size_of::<FastSlot>() + p * size_of::<Consumed>();
        let seg = crate::global::zeroed_symmetric(rma, rt, bytes)?;
        let base = super::direct::map_on(rma, rt, &seg, 0, bytes, "broadcast ring")?;
        Ok(Some(Self {
            base,
            procs: p,
            calls: Cell::new(0),
            free_below: Cell::new(DEPTH as u64),
        }))
    }

    fn ring(&self) -> Ring<'_> {
        let slots = self.base.as_ptr().cast::<FastSlot>();
        // SAFETY: the mapping holds `DEPTH` slots, then `procs` counts (both 64-aligned: the
        // mapping is, and a slot is a multiple of 64 bytes), zeroed, valid for the job's life;
        // both types are atomics only (all zero is their empty state), so shared references
        // are sound while other ranks write them.
        unsafe {
            Ring {
                slots: std::slice::from_raw_parts(slots, DEPTH),
                consumed: std::slice::from_raw_parts(
                    slots.add(DEPTH).cast::<Consumed>(),
                    self.procs,
                ),
            }
        }
    }

    /// What collective a broadcast of call `epoch` in the ring belongs to and its root, if
    /// one is here (for mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        self.ring().slots.iter().find_map(|s| {
            (s.seq.load(Ordering::Acquire) != 0 && s.epoch.load(Ordering::Relaxed) == epoch).then(
                || {
                    let src = s.src.load(Ordering::Relaxed) as usize;
                    (s.what.load(Ordering::Relaxed), src)
                },
            )
        })
    }
}

impl Global<'_> {
    /// The broadcast of `data` (at most a fast-lane message) from `root` through the ring;
    /// `None` where there is no ring or `data` is larger.
    pub(super) fn ring_broadcast<T: Pod>(
        &self,
        root: usize,
        epoch: u64,
        what: What,
        data: &mut [T],
    ) -> Option<Result<()>> {
        let ring = self.bcast_ring.as_ref()?;
        let bytes = std::mem::size_of_val(data);
        if bytes > FAST_WORDS * 8 {
            return None;
        }
        let call = ring.calls.get();
        ring.calls.set(call + 1);
        let r = if self.me == root {
            self.ring_send(ring, call, epoch, what, bytemuck::cast_slice(data));
            Ok(())
        } else {
            self.ring_recv(
                ring,
                call,
                root,
                epoch,
                what,
                bytemuck::cast_slice_mut(data),
            )
        };
        ring.ring().consume(self.me, call);
        Some(r)
    }

    fn ring_send(&self, ring: &BcastRing, call: u64, epoch: u64, what: What, bytes: &[u8]) {
        let r = ring.ring();
        if call >= ring.free_below.get() {
            // Full as far as this rank knows: wait until every rank has read the broadcast
            // that last used the slot.
            let need = r.room_at(call);
            let running =
                || (0..self.procs).all(|q| r.consumed_by(q) >= need || self.rt.is_running(q));
            self.wait_awaiting(|| r.all_consumed() >= need, running, &|| {
                format!(
                    "every rank to read ring broadcast #{}, before collective #{epoch} (a \
                     broadcast from this rank) can reuse its slot",
                    need - 1
                )
            });
            ring.free_below.set(r.all_consumed() + DEPTH as u64);
        }
        let mut words = [0u64; FAST_WORDS];
        let n = to_words(bytes, &mut words);
        let h = [call, epoch, what.code(), bytes.len() as u64, self.me as u64];
        r.slot(call).fill(h, &words[..n]);
    }

    fn ring_recv(
        &self,
        ring: &BcastRing,
        call: u64,
        root: usize,
        epoch: u64,
        what: What,
        dst: &mut [u8],
    ) -> Result<()> {
        let slot = ring.ring().slot(call);
        let elsewhere = self.await_slot(slot, call, root, epoch, Some(super::RING_LANE), &|| {
            format!(
                "rank {root} in collective #{epoch} ({}); a rank that never calls it, or \
                 calls another, keeps every other rank here",
                What::describe(what.code())
            )
        });
        self.read_slot(slot, root, epoch, what, elsewhere, dst)
    }
}
