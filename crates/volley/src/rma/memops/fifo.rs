//! Seed 002's memory-based FIFO (MBCF_FIFO, FIFOe_RETRY's ordered, lossless mode and
//! FIFOe_NORMAL's stopped state): its structure in a segment, the lock-free enqueue and dequeue
//! on it, and the initiator's calls.
//! The handler that enqueues at the target on the AM path is with the other handlers in
//! [`super`].

use super::{word, ALREADY_STOPPED, FULL, MODE_NORMAL, MODE_PLAIN, STOPPED_NOW, STORED};
use crate::rma::error::{Error, Result};
use crate::rma::segment::{Perms, Refusal, SegmentRef};
use crate::rma::Rma;
use std::sync::atomic::Ordering;

/// The outcome of one FIFO enqueue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FifoStatus {
    /// The entry is in the FIFO.
    Stored,
    /// The FIFO was full: the entry was cancelled (nothing was written).
    Full,
}

/// The outcome of one FIFOe_NORMAL enqueue ([`Rma::fifo_enqueue_normal`]): the seed's three
/// status values.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NormalStatus {
    /// The entry is in the FIFO (status 1).
    Stored,
    /// The entry was not stored and comes back to its sender: `entered_stop` when this very
    /// enqueue found the FIFO full and stopped it (status 2), otherwise the FIFO was already
    /// stopped (status 3). The FIFO takes no NORMAL entry until its owner calls
    /// [`Rma::fifo_restart`].
    Returned {
        /// The entry, returned to the sender.
        entry: Vec<u8>,
        /// Whether this enqueue stopped the FIFO.
        entered_stop: bool,
    },
}

/// A memory-based FIFO in a segment: fixed-size entries, many remote producers, one consumer
/// (the rank that created it). Plain data: send it to other ranks with
/// [`FifoRef::to_words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FifoRef {
    pub(in crate::rma) seg: SegmentRef,
    pub(in crate::rma) offset: u64,
    pub(in crate::rma) entry_size: u32,
    pub(in crate::rma) capacity: u32,
}

impl FifoRef {
    /// The rank that owns (and dequeues from) the FIFO.
    pub fn rank(&self) -> usize {
        self.seg.rank
    }

    /// Bytes per entry.
    pub fn entry_size(&self) -> usize {
        self.entry_size as usize
    }

    /// Entries the FIFO holds.
    pub fn capacity(&self) -> usize {
        self.capacity as usize
    }

    /// Bytes of segment the FIFO occupies from its offset on.
    pub fn footprint(&self) -> usize {
        fifo_bytes(self.entry_size as u64, self.capacity as u64).unwrap_or(u64::MAX) as usize
    }

    /// Five words for message arguments.
    pub fn to_words(&self) -> [u64; 5] {
        let [a, b, c] = self.seg.to_words();
        [
            a,
            b,
            c,
            self.offset,
            (self.entry_size as u64) << 32 | self.capacity as u64,
        ]
    }

    /// The handle back from [`FifoRef::to_words`].
    pub fn from_words(w: [u64; 5]) -> Self {
        Self {
            seg: SegmentRef::from_words([w[0], w[1], w[2]]),
            offset: w[3],
            entry_size: (w[4] >> 32) as u32,
            capacity: w[4] as u32,
        }
    }

    /// A copy with another key (to test protection).
    #[doc(hidden)]
    pub fn with_key(mut self, key: u64) -> Self {
        self.seg = self.seg.with_key(key);
        self
    }

    /// A copy with another capacity (to test the structure check).
    #[doc(hidden)]
    pub fn with_capacity(mut self, capacity: u32) -> Self {
        self.capacity = capacity;
        self
    }
}

// ---------------------------------------------------------------------------------------------
// The FIFO structure in memory.
//
// At the FIFO's offset (8-byte aligned): a header line {magic, entry_size, capacity}, the tail
// (enqueue counter) on its own line, the head (dequeue counter) on the next, then `capacity`
// slots of {sequence word, entry bytes rounded up to 8}. This is a bounded MPMC queue with
// per-slot sequence numbers (D. Vyukov's): slot i starts with sequence i; a producer at
// position p may use slot p % capacity only when its sequence is p (the consumer has freed it),
// reserves it by a CAS of the tail from p to p+1, writes the entry and publishes sequence p+1
// with release. The consumer at position p takes the slot when its sequence is p+1 and frees it
// by storing p+capacity. A sequence below p means the FIFO is full: the entry is cancelled.
// ---------------------------------------------------------------------------------------------

const MAGIC: u64 = 0x766f_6c6c_6579_4649;
const ENTRY_SIZE_AT: usize = 8;
const CAPACITY_AT: usize = 16;
/// FIFOe_NORMAL's stopped flag (0 running, 1 stopped), in the header line.
const STOPPED_AT: usize = 24;
const TAIL_AT: usize = 64;
const HEAD_AT: usize = 128;
const SLOTS_AT: usize = 192;

pub(in crate::rma) fn stride(entry_size: u64) -> u64 {
    8 + entry_size.div_ceil(8) * 8
}

/// Bytes of a FIFO with this geometry, or `None` if that overflows.
pub(in crate::rma) fn fifo_bytes(entry_size: u64, capacity: u64) -> Option<u64> {
    stride(entry_size)
        .checked_mul(capacity)?
        .checked_add(SLOTS_AT as u64)
}

/// Writes an empty FIFO's structure at `base`.
///
/// # Safety
/// `base` must be 8-byte aligned and `fifo_bytes(entry_size, capacity)` bytes from it must be
/// mapped memory that no one else uses as a FIFO meanwhile.
pub(in crate::rma) unsafe fn fifo_init(base: *mut u8, entry_size: u64, capacity: u64) {
    let st = stride(entry_size) as usize;
    // SAFETY (whole block): every word below lies inside the FIFO's bytes and is 8-aligned
    // (the base is, and all offsets and the stride are multiples of 8).
    unsafe {
        word(base).store(0, Ordering::Relaxed);
        for i in 0..capacity as usize {
            word(base.add(SLOTS_AT + i * st)).store(i as u64, Ordering::Relaxed);
        }
        word(base.add(TAIL_AT)).store(0, Ordering::Relaxed);
        word(base.add(HEAD_AT)).store(0, Ordering::Relaxed);
        word(base.add(STOPPED_AT)).store(0, Ordering::Relaxed);
        word(base.add(ENTRY_SIZE_AT)).store(entry_size, Ordering::Relaxed);
        word(base.add(CAPACITY_AT)).store(capacity, Ordering::Relaxed);
        // Release: a producer that sees the magic sees the initialized slots.
        word(base).store(MAGIC, Ordering::Release);
    }
}

/// Checks that the FIFO at `base` has this geometry.
///
/// # Safety
/// As for [`fifo_enqueue_at`].
pub(in crate::rma) unsafe fn fifo_header_ok(base: *mut u8, entry_size: u64, capacity: u64) -> bool {
    // SAFETY: the header words lie inside the FIFO's bytes and are 8-aligned.
    unsafe {
        word(base).load(Ordering::Acquire) == MAGIC
            && word(base.add(ENTRY_SIZE_AT)).load(Ordering::Relaxed) == entry_size
            && word(base.add(CAPACITY_AT)).load(Ordering::Relaxed) == capacity
    }
}

/// Enqueues `data` into the FIFO at `base` (any number of concurrent producers, in any
/// processes).
///
/// # Safety
/// `base` must be 8-byte aligned, and `fifo_bytes(entry_size, capacity)` bytes from it must be
/// mapped for the call.
pub(in crate::rma) unsafe fn fifo_enqueue_at(
    base: *mut u8,
    entry_size: u64,
    capacity: u64,
    data: &[u8],
) -> Result<FifoStatus, Refusal> {
    // SAFETY: as guaranteed by the caller.
    if capacity < 2 || !unsafe { fifo_header_ok(base, entry_size, capacity) } {
        return Err(Refusal::NotAFifo);
    }
    if data.len() as u64 != entry_size {
        return Err(Refusal::EntrySize);
    }
    let st = stride(entry_size) as usize;
    // SAFETY: the tail word lies inside the FIFO's bytes, 8-aligned.
    let tail = unsafe { word(base.add(TAIL_AT)) };
    let mut pos = tail.load(Ordering::Relaxed);
    loop {
        // SAFETY: slot `pos % capacity` lies inside the FIFO's bytes; its sequence word is
        // 8-aligned.
        let slot = unsafe { base.add(SLOTS_AT + (pos % capacity) as usize * st) };
        // SAFETY: as above.
        let seq = unsafe { word(slot) }.load(Ordering::Acquire);
        let diff = seq.wrapping_sub(pos) as i64;
        if diff == 0 {
            match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => {
                    // SAFETY: we reserved this slot (no other producer may write it until the
                    // consumer frees it again); its entry bytes follow the sequence word.
                    unsafe {
                        std::ptr::copy_nonoverlapping(data.as_ptr(), slot.add(8), data.len());
                        // Release: the consumer that sees pos+1 sees the entry.
                        word(slot).store(pos + 1, Ordering::Release);
                    }
                    return Ok(FifoStatus::Stored);
                }
                Err(p) => pos = p,
            }
        } else if diff < 0 {
            // The slot still holds the entry of the previous lap: full.
            return Ok(FifoStatus::Full);
        } else {
            pos = tail.load(Ordering::Relaxed);
        }
    }
}

/// What a FIFOe_NORMAL enqueue did at the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(in crate::rma) enum NormalOutcome {
    Stored,
    EnteredStop,
    AlreadyStopped,
}

/// FIFOe_NORMAL: enqueues `data` unless the FIFO at `base` is stopped; a full FIFO is stopped
/// by the enqueue that finds it full. Another producer that read the flag just before the stop
/// may still store into room freed meanwhile: each sender's order is all the mode promises.
///
/// # Safety
/// As for [`fifo_enqueue_at`].
pub(in crate::rma) unsafe fn fifo_enqueue_normal_at(
    base: *mut u8,
    entry_size: u64,
    capacity: u64,
    data: &[u8],
) -> Result<NormalOutcome, Refusal> {
    // SAFETY: as guaranteed by the caller.
    if capacity < 2 || !unsafe { fifo_header_ok(base, entry_size, capacity) } {
        return Err(Refusal::NotAFifo);
    }
    // SAFETY: the flag word lies in the FIFO's header line, 8-aligned.
    let stopped = unsafe { word(base.add(STOPPED_AT)) };
    // Acquire: pairs with the release of the restart, so a sender that sees the FIFO running
    // again sees the room the owner made before restarting.
    if stopped.load(Ordering::Acquire) != 0 {
        return Ok(NormalOutcome::AlreadyStopped);
    }
    // SAFETY: as guaranteed by the caller.
    match unsafe { fifo_enqueue_at(base, entry_size, capacity, data) }? {
        FifoStatus::Stored => Ok(NormalOutcome::Stored),
        FifoStatus::Full => {
            if stopped.swap(1, Ordering::AcqRel) == 0 {
                Ok(NormalOutcome::EnteredStop)
            } else {
                Ok(NormalOutcome::AlreadyStopped)
            }
        }
    }
}

/// Clears the stopped flag of the FIFO at `base`; returns whether it was stopped.
///
/// # Safety
/// As for [`fifo_enqueue_at`].
pub(in crate::rma) unsafe fn fifo_restart_at(
    base: *mut u8,
    entry_size: u64,
    capacity: u64,
) -> Result<bool, Refusal> {
    // SAFETY: as guaranteed by the caller.
    if capacity < 2 || !unsafe { fifo_header_ok(base, entry_size, capacity) } {
        return Err(Refusal::NotAFifo);
    }
    // SAFETY: the flag word lies in the FIFO's header line, 8-aligned.
    let stopped = unsafe { word(base.add(STOPPED_AT)) };
    // Release: the room made by the owner's dequeues is visible to whoever sees it running.
    Ok(stopped.swap(0, Ordering::AcqRel) != 0)
}

/// Takes the oldest entry of the FIFO at `base` into `buf` (at least `entry_size` bytes);
/// `false` if empty. One consumer at a time.
///
/// # Safety
/// As for [`fifo_enqueue_at`], and no other thread dequeues from this FIFO meanwhile.
pub(in crate::rma) unsafe fn fifo_dequeue_at(
    base: *mut u8,
    entry_size: u64,
    capacity: u64,
    buf: &mut [u8],
) -> Result<bool, Refusal> {
    // SAFETY: as guaranteed by the caller.
    if capacity < 2 || !unsafe { fifo_header_ok(base, entry_size, capacity) } {
        return Err(Refusal::NotAFifo);
    }
    if (buf.len() as u64) < entry_size {
        return Err(Refusal::EntrySize);
    }
    let st = stride(entry_size) as usize;
    // SAFETY: the head word lies inside the FIFO's bytes, 8-aligned.
    let head = unsafe { word(base.add(HEAD_AT)) };
    let pos = head.load(Ordering::Relaxed);
    // SAFETY: slot `pos % capacity` lies inside the FIFO's bytes, 8-aligned.
    let slot = unsafe { base.add(SLOTS_AT + (pos % capacity) as usize * st) };
    // SAFETY: as above.
    let seq = unsafe { word(slot) }.load(Ordering::Acquire);
    if seq != pos + 1 {
        return Ok(false);
    }
    // SAFETY: the slot is published (acquired above) and no producer writes it until we free
    // it below; its entry bytes follow the sequence word.
    unsafe {
        std::ptr::copy_nonoverlapping(slot.add(8), buf.as_mut_ptr(), entry_size as usize);
        // Release: the producer that reuses the slot sees our reads done.
        word(slot).store(pos + capacity, Ordering::Release);
    }
    head.store(pos + 1, Ordering::Relaxed);
    Ok(true)
}

impl<'rt> Rma<'rt> {
    /// Creates an empty memory-based FIFO of `capacity` entries of `entry_size` bytes at
    /// `offset` (8-byte aligned) of `seg`, a segment of this rank; returns the handle producers
    /// use. It occupies [`FifoRef::footprint`] bytes. Producers need write and atomic
    /// permission on the segment. Only this rank dequeues ([`Rma::fifo_dequeue`]).
    pub fn fifo_create(
        &self,
        seg: SegmentRef,
        offset: usize,
        entry_size: usize,
        capacity: usize,
    ) -> Result<FifoRef> {
        let _e = self.rt.enter();
        let me = self.rt.rank();
        if entry_size == 0 || entry_size > u32::MAX as usize {
            return Err(Error::InvalidConfig {
                name: "fifo entry size",
                value: entry_size.to_string(),
                why: "expected 1..=u32::MAX bytes",
            });
        }
        if !(2..=u32::MAX as usize).contains(&capacity) {
            return Err(Error::InvalidConfig {
                name: "fifo capacity",
                value: capacity.to_string(),
                why: "expected 2..=u32::MAX entries",
            });
        }
        if seg.rank != me {
            return Err(Error::Refused {
                rank: me,
                reason: Refusal::NoSuchSegment,
            });
        }
        let bytes = fifo_bytes(entry_size as u64, capacity as u64).unwrap_or(u64::MAX);
        let at = self.owned_range(seg, offset, bytes as usize)?;
        // SAFETY: `at..at+bytes` lies in our own segment area (checked).
        let base = unsafe { self.shared.local().segment.add(at) };
        if (base as usize) % 8 != 0 {
            return Err(Error::Refused {
                rank: me,
                reason: Refusal::Misaligned,
            });
        }
        // SAFETY: 8-aligned, `bytes` bytes of our own mapped segment.
        unsafe { fifo_init(base, entry_size as u64, capacity as u64) };
        Ok(FifoRef {
            seg,
            offset: offset as u64,
            entry_size: entry_size as u32,
            capacity: capacity as u32,
        })
    }

    /// MBCF_FIFO: appends one entry (exactly [`FifoRef::entry_size`] bytes) to a FIFO at any
    /// rank. Returns [`FifoStatus::Full`] when there is no room: the entry is cancelled,
    /// nothing is written, and the caller decides (drop, retry, or use
    /// [`Rma::fifo_enqueue_retry`]). Safe with any number of concurrent producers.
    pub fn fifo_enqueue(&self, fifo: FifoRef, data: &[u8]) -> Result<FifoStatus> {
        match self.enqueue_in_mode(fifo, data, MODE_PLAIN)? {
            STORED => Ok(FifoStatus::Stored),
            _ => Ok(FifoStatus::Full),
        }
    }

    /// FIFOe_NORMAL: appends one entry unless the FIFO is stopped. The enqueue that finds
    /// the FIFO full stops it; it and every later NORMAL enqueue come back as
    /// [`NormalStatus::Returned`] with the entry (return-to-sender: nothing is written, nothing
    /// lost) until the owner calls [`Rma::fifo_restart`]. A sender keeps its order by sending
    /// its returned entries again, oldest first, before any new one ([`super::FifoSender`] does
    /// that). Plain and RETRY enqueues ignore the stopped state.
    pub fn fifo_enqueue_normal(&self, fifo: FifoRef, data: &[u8]) -> Result<NormalStatus> {
        let returned = |entered_stop| NormalStatus::Returned {
            entry: data.to_vec(),
            entered_stop,
        };
        match self.enqueue_in_mode(fifo, data, MODE_NORMAL)? {
            STORED => Ok(NormalStatus::Stored),
            STOPPED_NOW => Ok(returned(true)),
            _ => Ok(returned(false)),
        }
    }

    /// One enqueue in `mode` on either path; returns the status code.
    fn enqueue_in_mode(&self, fifo: FifoRef, data: &[u8], mode: u64) -> Result<u64> {
        let target = fifo.seg;
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        let (ent, cap) = (fifo.entry_size as u64, fifo.capacity as u64);
        let bytes = fifo_bytes(ent, cap).unwrap_or(u64::MAX);
        if direct {
            let p = self.check_direct(target, fifo.offset, bytes, Perms::WRITE | Perms::ATOMIC)?;
            if (p as usize) % 8 != 0 {
                return Err(self.refuse_direct(target.rank, Refusal::Misaligned));
            }
            // SAFETY: 8-aligned, and the FIFO's bytes lie in the target's mapped segment.
            return unsafe { enqueue_at_in_mode(p, ent, cap, data, mode) }
                .map_err(|r| self.refuse_direct(target.rank, r));
        }
        if data.len() > self.rt.max_medium() {
            return Err(Error::PayloadTooLarge {
                len: data.len(),
                max: self.rt.max_medium(),
            });
        }
        let slot = self.take_slot()?;
        self.shared.add_remaining(slot, 1, target.rank);
        let args = [
            target.id as u64,
            target.key,
            fifo.offset,
            ent,
            cap,
            slot as u64,
            mode,
        ];
        if let Err(e) = self
            .rt
            .request_medium(target.rank, self.handlers.mem.fifo, &args, data)
        {
            self.shared.add_remaining_neg(slot, 1);
            return Err(self.abandon_slot(slot, target, fifo.offset, bytes, e.into()));
        }
        self.finish_slot(slot, target, fifo.offset, bytes)
    }

    /// FIFOe_RETRY: appends one entry, retrying (and polling, so this rank's handlers keep
    /// running) until it is stored. A sender that uses only this keeps its entries in send
    /// order with none lost. Waits as long as the FIFO stays full: its owner must dequeue
    /// meanwhile (another rank, or this rank's handlers; never this thread).
    pub fn fifo_enqueue_retry(&self, fifo: FifoRef, data: &[u8]) -> Result<()> {
        let mut tries = 0u32;
        loop {
            if self.fifo_enqueue(fifo, data)? == FifoStatus::Stored {
                return Ok(());
            }
            tries = tries.wrapping_add(1);
            if self.rt.poll() == 0 {
                if tries % 64 == 0 {
                    std::thread::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
        }
    }

    /// Takes the oldest entry of a FIFO this rank created into `buf` (at least
    /// [`FifoRef::entry_size`] bytes); `Ok(false)` if it is empty.
    pub fn fifo_dequeue(&self, fifo: FifoRef, buf: &mut [u8]) -> Result<bool> {
        let _e = self.rt.enter_local();
        let me = self.rt.rank();
        let refused = |reason| Error::Refused { rank: me, reason };
        if fifo.seg.rank != me {
            return Err(refused(Refusal::NoSuchSegment));
        }
        let (ent, cap) = (fifo.entry_size as u64, fifo.capacity as u64);
        let bytes = fifo_bytes(ent, cap).unwrap_or(u64::MAX);
        let at = self.owned_range(fifo.seg, fifo.offset as usize, bytes as usize)?;
        // SAFETY: `at..at+bytes` lies in our own segment area (checked).
        let base = unsafe { self.shared.local().segment.add(at) };
        if (base as usize) % 8 != 0 {
            return Err(refused(Refusal::Misaligned));
        }
        // SAFETY: 8-aligned, inside our own segment; `Rma` is not `Sync` and only its owner
        // dequeues, so there is one consumer.
        unsafe { fifo_dequeue_at(base, ent, cap, buf) }.map_err(refused)
    }

    /// Restarts a FIFO this rank created after FIFOe_NORMAL stopped it; returns whether it
    /// was stopped. Senders then send their returned entries again ([`super::FifoSender::resend`]).
    pub fn fifo_restart(&self, fifo: FifoRef) -> Result<bool> {
        let _e = self.rt.enter_local();
        let base = self.own_fifo(fifo)?;
        let me = self.rt.rank();
        // SAFETY: 8-aligned, inside our own segment (checked by `own_fifo`).
        unsafe { fifo_restart_at(base, fifo.entry_size as u64, fifo.capacity as u64) }
            .map_err(|reason| Error::Refused { rank: me, reason })
    }

    /// Whether a FIFO this rank created is stopped (FIFOe_NORMAL found it full and no
    /// [`Rma::fifo_restart`] has run since).
    pub fn fifo_stopped(&self, fifo: FifoRef) -> Result<bool> {
        let _e = self.rt.enter_local();
        let base = self.own_fifo(fifo)?;
        // SAFETY: 8-aligned, inside our own segment (checked by `own_fifo`); the flag word
        // lies in the FIFO's header line.
        Ok(unsafe { word(base.add(STOPPED_AT)) }.load(Ordering::Acquire) != 0)
    }

    /// The base of a FIFO of this rank, checked.
    fn own_fifo(&self, fifo: FifoRef) -> Result<*mut u8> {
        let me = self.rt.rank();
        let refused = |reason| Error::Refused { rank: me, reason };
        if fifo.seg.rank != me {
            return Err(refused(Refusal::NoSuchSegment));
        }
        let bytes = fifo_bytes(fifo.entry_size as u64, fifo.capacity as u64).unwrap_or(u64::MAX);
        let at = self.owned_range(fifo.seg, fifo.offset as usize, bytes as usize)?;
        // SAFETY: `at..at+bytes` lies in our own segment area (checked).
        let base = unsafe { self.shared.local().segment.add(at) };
        if (base as usize) % 8 != 0 {
            return Err(refused(Refusal::Misaligned));
        }
        Ok(base)
    }
}

/// Runs one enqueue in `mode` on the mapped FIFO at `base`; returns the status code the AM
/// path's reply carries.
///
/// # Safety
/// As for [`fifo_enqueue_at`].
pub(in crate::rma) unsafe fn enqueue_at_in_mode(
    base: *mut u8,
    entry_size: u64,
    capacity: u64,
    data: &[u8],
    mode: u64,
) -> Result<u64, Refusal> {
    if mode == MODE_NORMAL {
        // SAFETY: as guaranteed by the caller.
        return Ok(
            match unsafe { fifo_enqueue_normal_at(base, entry_size, capacity, data) }? {
                NormalOutcome::Stored => STORED,
                NormalOutcome::EnteredStop => STOPPED_NOW,
                NormalOutcome::AlreadyStopped => ALREADY_STOPPED,
            },
        );
    }
    // SAFETY: as guaranteed by the caller.
    Ok(
        match unsafe { fifo_enqueue_at(base, entry_size, capacity, data) }? {
            FifoStatus::Stored => STORED,
            FifoStatus::Full => FULL,
        },
    )
}
