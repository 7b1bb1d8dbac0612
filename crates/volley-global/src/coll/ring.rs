//! The broadcast ring: small broadcasts under `hw` with every rank on this node. The root
//! writes its data into a slot of a ring in rank 0's mapped memory and returns; every other
//! rank reads the slot and marks the call consumed. The root waits only when the ring is full
//! (some rank has not yet read the broadcast `DEPTH` calls back), so a root that runs ahead
//! does not wait for its receivers on every call, and a receiver waits only for the root.
//!
//! Broadcast b (every rank counts its ring broadcasts alike) uses slot b mod `DEPTH`, whose
//! writer is b's root; it may write once every rank's consumed count has passed b − `DEPTH`.
//! Each rank's count has a cache line of its own, written only by that rank.

use super::what::What;
use crate::error::Result;
use crate::global::Global;
use crate::handlers::{to_words, FastSlot, FAST_WORDS};
use crate::strategy::Strategy;
use bytemuck::Pod;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use volley::rma::Rma;
use volley::Runtime;

/// Broadcasts a root may be ahead of the slowest rank.
const DEPTH: usize = 16;

/// One rank's count of ring broadcasts it has finished (on a line of its own).
#[repr(C, align(64))]
#[derive(Debug)]
struct Consumed(AtomicU64);

/// Rank 0's broadcast ring, as mapped in this process: `DEPTH` slots, then a consumed count
/// per rank.
#[derive(Debug)]
pub(crate) struct BcastRing {
    base: NonNull<u8>,
    procs: usize,
    /// Ring broadcasts so far (every rank counts the same).
    calls: Cell<u64>,
    /// Broadcasts below this number have a free slot (every count was seen past b − `DEPTH`).
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

    fn slot(&self, call: u64) -> &FastSlot {
        let i = call as usize % DEPTH;
        // SAFETY: slot `i < DEPTH` of the ring's zeroed, 64-aligned mapping, valid for the
        // job's life; `FastSlot` is atomics only (all zero is its empty state).
        unsafe { &*self.base.as_ptr().cast::<FastSlot>().add(i) }
    }

    fn consumed(&self, r: usize) -> &AtomicU64 {
        debug_assert!(r < self.procs);
        // SAFETY: count `r < procs`, after the slots, inside the mapping (as for `slot`).
        unsafe {
            &(*self
                .base
                .as_ptr()
                .add(DEPTH * size_of::<FastSlot>())
                .cast::<Consumed>()
                .add(r))
            .0
        }
    }

    /// The broadcast all ranks have finished, plus one (the least consumed count).
    fn all_consumed(&self) -> u64 {
        (0..self.procs)
            .map(|r| self.consumed(r).load(Ordering::Acquire))
            .min()
            .unwrap_or(0)
    }

    /// What collective a broadcast of call `epoch` in the ring belongs to and its root, if
    /// one is here (for mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        (0..DEPTH as u64).map(|c| self.slot(c)).find_map(|s| {
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
        // Release: the root may refill the slot once it sees this (the read is done).
        ring.consumed(self.me).store(call + 1, Ordering::Release);
        Some(r)
    }

    fn ring_send(&self, ring: &BcastRing, call: u64, epoch: u64, what: What, bytes: &[u8]) {
        if call >= ring.free_below.get() {
            // Full as far as this rank knows: wait until every rank has read the broadcast
            // that last used the slot.
            let need = call + 1 - DEPTH as u64;
            let running = || {
                (0..self.procs).all(|r| {
                    ring.consumed(r).load(Ordering::Relaxed) >= need || self.rt.is_running(r)
                })
            };
            self.wait_awaiting(|| ring.all_consumed() >= need, running, &|| {
                format!(
                    "every rank to read broadcast #{} from the ring before collective \
                         #{epoch} (a broadcast from this rank) can reuse its slot",
                    call + 1 - DEPTH as u64
                )
            });
            ring.free_below.set(ring.all_consumed() + DEPTH as u64);
        }
        let mut words = [0u64; FAST_WORDS];
        let n = to_words(bytes, &mut words);
        let h = [call, epoch, what.code(), bytes.len() as u64, self.me as u64];
        ring.slot(call).fill(h, &words[..n]);
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
        let slot = ring.slot(call);
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
