//! A single-producer single-consumer ring of 64-byte slots: one per (sender, receiver, channel).
//!
//! The fast path moves one cache line per short message: the sender writes the arguments and
//! then the header word (release) into the next slot; the receiver polls that header word
//! (acquire) for the sequence number it expects. There is no shared head or tail index. Credits
//! flow back lazily: the receiver publishes how far it has consumed (`RingCtl::consumed`, on its
//! own cache line) once per quarter ring, and the sender reads it only when its cached limit
//! runs out.
//!
//! A frame spans 1..=[`MAX_FRAME_SLOTS`] consecutive slots and never wraps: a frame that would
//! cross the end is preceded by a `Skip` frame covering the rest of the ring.
//!
//! Slot invariant (why a 15-bit sequence is enough): the first word of every slot is either 0 or
//! the header of the frame that last started at that slot. The receiver zeroes the first word of
//! every non-header slot it consumes before returning the credit, so stale payload can never be
//! mistaken for a header; a stale header belongs to the previous lap and carries the previous
//! lap's sequence, which differs because the ring has fewer than 2^15 slots.
//!
//! Padded frames: a sender whose receiver has caught up (to within a quarter of the ring, by
//! its cached credit) may mark a one-slot frame [`PADDED`](super::frame::PADDED): it then
//! claims the rest of its quarter, and the next frame starts at the next quarter boundary. A
//! ping-pong, where each side sends only after the other answered, so cycles through four
//! slots per ring instead of all of them. On this machine a round trip over a ring is about a
//! third slower when it cycles through 16 lines than through 4 or fewer (`BENCHMARKS.md`, "Four
//! lines per ring"). The receiver zeroes the padding's first words like those of any
//! non-header slot, so the slot invariant holds; a ring larger than [`PAD_MAX_RING_SLOTS`] is
//! never padded, so that the zeroing stays short.
//!
//! Credit hints: a padded frame needs fresh credit (each one uses a quarter of it), and reading
//! the control line for it makes that line cross between the cores on every round trip, a
//! cost as large as the padding's gain. So the answer carries the credit instead: a padded
//! one-slot short frame with at most [`MAX_HINTED_ARGS`] arguments holds, in its slot's last
//! word ([`CREDIT_HINT_WORD`]), how far its sender had consumed the ring that runs the other
//! way (on the other channel), and the receiver takes it with [`Producer::take_hint`]. The
//! position is one up to which the sender had retired the slots and zeroed them, and whose
//! frames no handler reads any more, so the hint says what a credit return would; it travels
//! under the frame's release and acquire instead of the control line's. A hint may be old
//! (lower than the credit already known), never too high: it is a full position, not a
//! residue that could alias. The control line stays the way credit returns otherwise, and a
//! padded frame without a hint (a medium, a short with seven arguments) has its receiver read
//! the control line at the point where it would have taken the hint
//! ([`Producer::refresh`]).
//!
//! The hint is taken when its frame is retired, after the frame's handler (and the answer it
//! sent), so that taking it lies on neither side's path from a frame to its answer. The
//! credit a sender holds in a ping-pong is so one round trip old: the receiver had consumed up
//! to the frame before last, half a ring behind the tail; a padded reservation asks for no
//! more than that.

#[cfg(test)]
use super::frame::HeaderWord;
#[cfg(test)]
use super::frame::KIND_WORDS;
use super::frame::{seq_for, seq_of, FrameHeader, FrameKey, KIND_SKIP};
use crate::sync::{AtomicU64, Ordering, UnsafeCell};

/// Bytes per slot: one cache line.
pub const SLOT_BYTES: usize = 64;
/// The most slots one frame may occupy (header + 16 arguments + inline payload).
pub const MAX_FRAME_SLOTS: u64 = 4;
/// Smallest allowed ring. A sender needs at most 7 slots at once (a skip of up to 3 plus a frame
/// of 4), and the receiver may hold back up to `batch - 1 = size/4 - 1` slots of credit, so
/// `size/4 - 1 + 7 <= size` must hold: true from 8 slots up.
pub const MIN_RING_SLOTS: usize = 8;
/// Largest allowed ring, so a 15-bit sequence never aliases across one lap.
pub const MAX_RING_SLOTS: usize = 1 << 14;

/// Largest ring whose frames may be padded to a quarter (64 slots of padding at most).
pub const PAD_MAX_RING_SLOTS: u64 = 256;

/// The word of a padded one-slot short frame that carries a credit hint (see the module's
/// "Credit hints"): the slot's last.
pub const CREDIT_HINT_WORD: usize = SLOT_BYTES / 8 - 1;
/// The most arguments a padded one-slot short frame has when it carries a credit hint: those
/// that leave [`CREDIT_HINT_WORD`] free.
pub const MAX_HINTED_ARGS: usize = CREDIT_HINT_WORD - 1;

/// One cache line of a ring.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct Slot {
    /// Frame header (in a frame's first slot) or the frame's next 8 bytes (in later slots).
    pub(crate) header: AtomicU64,
    pub(crate) body: UnsafeCell<[u64; 7]>,
}

/// The receiver-written control line of a ring.
#[repr(C, align(64))]
#[derive(Debug)]
pub struct RingCtl {
    /// Ring position up to which the receiver has consumed (and zeroed) slots.
    pub(crate) consumed: AtomicU64,
}

/// A view of one ring in (shared) memory.
#[derive(Clone, Copy, Debug)]
pub struct RingRef<'a> {
    ctl: &'a RingCtl,
    slots: &'a [Slot],
}

impl<'a> RingRef<'a> {
    /// Views `slots` (a power of two in `MIN_RING_SLOTS..=MAX_RING_SLOTS`) with control line `ctl`.
    ///
    /// # Panics
    /// If the slot count is not a power of two or exceeds `MAX_RING_SLOTS`: slot indexing
    /// relies on it (checked once per view, not per access).
    pub fn new(ctl: &'a RingCtl, slots: &'a [Slot]) -> Self {
        assert!(slots.len().is_power_of_two() && slots.len() <= MAX_RING_SLOTS);
        Self { ctl, slots }
    }

    #[inline(always)]
    fn slot(&self, pos: u64) -> &'a Slot {
        let idx = (pos as usize) & (self.slots.len() - 1);
        // SAFETY: the length is a power of two (checked in `new`), so the masked index is in
        // bounds. Every frame poll, send and delivery indexes here: no bounds check to pay.
        unsafe { self.slots.get_unchecked(idx) }
    }

    /// Slots in the ring.
    #[inline(always)]
    pub fn slot_count(&self) -> u64 {
        self.slots.len() as u64
    }

    /// Writes the `word`-th 8-byte word of the frame starting at `pos` (word 0 is the header and
    /// is written by [`RingRef::publish`] instead).
    #[cfg(test)]
    #[inline(always)]
    pub fn write_word(&self, pos: u64, word: usize, value: u64) {
        debug_assert!(word > 0);
        let slot = self.slot(pos + (word / 8) as u64);
        let within = word % 8;
        if within == 0 {
            // Relaxed: ordered before the consumer's read by the release store in `publish`.
            slot.header.store(value, Ordering::Relaxed);
        } else {
            // SAFETY: the producer owns slots between its reservation and `publish`; the
            // consumer does not read them until it acquires the header published afterwards.
            slot.body.with_mut(|b| unsafe { (*b)[within - 1] = value });
        }
    }

    /// Reads the `word`-th word of a frame the consumer has acquired.
    #[cfg(test)]
    #[inline(always)]
    pub fn read_word(&self, pos: u64, word: usize) -> u64 {
        let slot = self.slot(pos + (word / 8) as u64);
        let within = word % 8;
        if within == 0 {
            slot.header.load(Ordering::Relaxed)
        } else {
            // SAFETY: the consumer acquired this frame's header, so the producer's writes are
            // visible and the producer will not touch the slots until the credit comes back.
            slot.body.with(|b| unsafe { (*b)[within - 1] })
        }
    }

    /// Address of the first byte of the frame at `pos`; the frame's `nslots * 64` bytes are
    /// contiguous because frames never wrap.
    #[cfg(not(loom))]
    #[inline(always)]
    pub fn frame_ptr(&self, pos: u64) -> *mut u8 {
        // Derived from the whole slice, so the pointer may cover the frame's following slots.
        let idx = (pos as usize) & (self.slots.len() - 1);
        self.slots.as_ptr().wrapping_add(idx).cast_mut().cast()
    }

    /// The first quarter boundary of the ring after position `pos`: where a padded frame that
    /// ends in `pos`'s slot leaves the next frame.
    #[inline(always)]
    pub fn quarter_end(&self, pos: u64) -> u64 {
        (pos | (self.slot_count() / 4 - 1)) + 1
    }

    /// Slots from `pos` to the end of the ring.
    #[inline(always)]
    pub fn slots_to_end(&self, pos: u64) -> u64 {
        self.slot_count() - (pos & (self.slot_count() - 1))
    }

    /// Whether a frame of `nslots` starting at `pos` lies within the ring without wrapping.
    #[inline(always)]
    pub fn fits(&self, pos: u64, nslots: u64) -> bool {
        let idx = pos & (self.slot_count() - 1);
        (1..=MAX_FRAME_SLOTS).contains(&nslots) && idx + nslots <= self.slot_count()
    }

    /// Hints the CPU to start loading the slot at `pos` (no effect on correctness).
    #[inline(always)]
    pub fn prefetch(&self, pos: u64) {
        #[cfg(all(target_arch = "x86_64", not(loom)))]
        // SAFETY: prefetch never faults and the address is inside the ring.
        unsafe {
            use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
            _mm_prefetch::<_MM_HINT_T0>((self.slot(pos) as *const Slot).cast());
        }
        #[cfg(not(all(target_arch = "x86_64", not(loom))))]
        let _ = pos;
    }

    /// Slots from the consumer's last credit return up to the end of the last frame published
    /// after it: what the producer cannot reuse yet. Reads only atomics, from any thread (the
    /// hang report); a frame published meanwhile may or may not be counted.
    #[cfg(not(loom))]
    pub fn slots_in_use(&self) -> u64 {
        let size = self.slot_count();
        let start = self.ctl.consumed.load(Ordering::Acquire);
        let mut pos = start;
        while pos - start < size {
            let word = self.slot(pos).header.load(Ordering::Acquire);
            if seq_of(word) != seq_for(pos) {
                break;
            }
            let nslots = FrameHeader::claimed_slots(word).clamp(1, size);
            pos = if word & super::frame::PADDED != 0 {
                self.quarter_end(pos + nslots - 1)
            } else {
                pos + nslots
            };
        }
        (pos - start).min(size)
    }

    /// Makes the frame at `pos` visible to the consumer.
    #[inline(always)]
    pub fn publish(&self, pos: u64, header: u64) {
        // Release: everything written into the frame happens-before the consumer's acquire
        // load of this word in `Consumer::peek`.
        self.slot(pos).header.store(header, Ordering::Release);
    }
}

/// The sender's private state for one ring.
#[derive(Debug, Clone, Copy, Default)]
pub struct Producer {
    tail: u64,
    /// Where the credit last fetched ends.
    limit: u64,
    /// The nearer of `limit` and the end of the ring's lap that `tail` is in: a frame that
    /// ends there needs neither fresh credit nor a skip (see [`Producer::reserve_within`]).
    bound: u64,
}

impl Producer {
    /// A producer for a fresh ring of `slots` slots.
    pub fn new(slots: usize) -> Self {
        Self {
            tail: 0,
            limit: slots as u64,
            bound: slots as u64,
        }
    }

    /// Where the next frame would start.
    #[cfg(test)]
    pub fn tail(&self) -> u64 {
        self.tail
    }

    /// The common case of [`Producer::reserve`] in one compare: reserves `n` slots if the
    /// cached credit suffices and they end before the end of the ring (no skip). `None`: call
    /// [`Producer::reserve`].
    #[inline(always)]
    pub fn reserve_within(&mut self, n: u64) -> Option<u64> {
        let pos = self.tail;
        if pos + n <= self.bound {
            self.tail = pos + n;
            return Some(pos);
        }
        None
    }

    /// Reserves one slot padded to the end of its quarter (see the module's "Padded frames")
    /// if the cached credit says the receiver has consumed up to at most half a ring before
    /// the tail; `None` otherwise (nothing changes). A padded reservation never waits and
    /// never needs a skip: a quarter ends at or before the end of the ring.
    #[inline(always)]
    pub fn reserve_padded(&mut self, ring: RingRef<'_>) -> Option<u64> {
        let size = ring.slot_count();
        let pos = self.tail;
        // limit - size is where the receiver had consumed to: caught up when it is at least
        // pos - size/2 (in a ping-pong the credit known is one round trip old: see "Credit
        // hints"). The claim then ends within the limit (at most pos + size/4).
        if size > PAD_MAX_RING_SLOTS || pos + size / 2 > self.limit {
            return None;
        }
        self.tail = ring.quarter_end(pos);
        self.bound = self.bound_for(size);
        Some(pos)
    }

    /// Reads the receiver's credit afresh: where a padded frame that carries no credit hint
    /// leaves its receiver, after its handler, in place of the hint (see "Credit hints").
    #[inline(always)]
    pub fn refresh(&mut self, ring: RingRef<'_>) {
        let size = ring.slot_count();
        // Acquire: pairs with the consumer's release store of `consumed` (as in `reserve`).
        self.limit = ring.ctl.consumed.load(Ordering::Acquire).wrapping_add(size);
        self.bound = self.bound_for(size);
    }

    /// Takes a credit hint (see the module's "Credit hints"): the receiver had consumed this
    /// ring up to `consumed` when it sent the frame that carried it. An old hint changes
    /// nothing.
    ///
    /// A hint is trusted exactly as far as the control line that [`Producer::refresh`] reads:
    /// both are written by the receiver, which could write either. A receiver that overstates
    /// its consumption loses its own unread frames of this ring and nothing else: slot indices
    /// are masked into the ring, and the laps that `bound` allows stay within it. So a hint
    /// beyond the tail is not an error here (the addition wraps rather than panics in a debug
    /// build, which fuzzing reached with a hint near `u64::MAX`).
    #[inline(always)]
    pub fn take_hint(&mut self, ring: RingRef<'_>, consumed: u64) {
        let size = ring.slot_count();
        self.limit = self.limit.max(consumed.wrapping_add(size));
        self.bound = self.bound_for(size);
    }

    /// Reserves `n` consecutive slots (writing a skip frame first if they would wrap) and returns
    /// the position of the first, or `None` if the receiver has not returned enough credit.
    #[inline(always)]
    pub fn reserve(&mut self, ring: RingRef<'_>, n: u64, key: FrameKey) -> Option<u64> {
        let size = ring.slot_count();
        let idx = self.tail & (size - 1);
        let skip = if idx + n > size { size - idx } else { 0 };
        let need = skip + n;
        if self.tail + need > self.limit {
            // Acquire: pairs with the consumer's release store of `consumed`, so its reads and
            // zeroing of those slots happen-before we overwrite them.
            self.limit = ring.ctl.consumed.load(Ordering::Acquire).wrapping_add(size);
            if self.tail + need > self.limit {
                self.bound = self.bound_for(size);
                return None;
            }
        }
        if skip > 0 {
            let header = FrameHeader {
                handler: 0,
                nargs: 0,
                kind: KIND_SKIP,
                nslots: skip as u8,
            };
            ring.publish(self.tail, header.encode(self.tail, key));
            self.tail += skip;
        }
        let pos = self.tail;
        self.tail += n;
        self.bound = self.bound_for(size);
        Some(pos)
    }

    /// Whether [`Producer::reserve`] of `n` slots would succeed now (skip included), reading
    /// the receiver's credit afresh if the cached one is short; reserves nothing. Only the
    /// receiver's consuming changes the answer, and only from false to true.
    pub fn has_room(&mut self, ring: RingRef<'_>, n: u64) -> bool {
        let size = ring.slot_count();
        let idx = self.tail & (size - 1);
        let skip = if idx + n > size { size - idx } else { 0 };
        let need = skip + n;
        if self.tail + need > self.limit {
            // Acquire: as in `reserve`.
            self.limit = ring.ctl.consumed.load(Ordering::Acquire).wrapping_add(size);
            self.bound = self.bound_for(size);
        }
        self.tail + need <= self.limit
    }

    /// The bound for the current tail and limit in a ring of `size` slots.
    #[inline(always)]
    fn bound_for(&self, size: u64) -> u64 {
        let lap_end = (self.tail | (size - 1)) + 1;
        self.limit.min(lap_end)
    }
}

/// The receiver's private state for one ring.
#[derive(Debug, Clone, Copy, Default)]
pub struct Consumer {
    head: u64,
    /// Where the next batch of credit is due: the position last published plus `batch`.
    settle_at: u64,
    batch: u64,
}

impl Consumer {
    /// A consumer for a fresh ring of `slots` slots; credit returns every quarter ring.
    pub fn new(slots: usize) -> Self {
        let batch = (slots as u64 / 4).max(1);
        Self {
            head: 0,
            settle_at: batch,
            batch,
        }
    }

    /// Position of the next frame.
    #[inline(always)]
    pub fn head(&self) -> u64 {
        self.head
    }

    /// The sequence the next frame's header carries (see [`Consumer::starts_next`]).
    #[inline(always)]
    pub fn next_seq(&self) -> u64 {
        seq_for(self.head)
    }

    /// Whether `word`, read from the header of the slot at the head, starts the next frame,
    /// whose sequence is `seq`.
    #[inline(always)]
    pub fn starts_next(word: u64, seq: u64) -> bool {
        // No sequence is 0, so a zeroed slot never matches.
        seq_of(word) == seq
    }

    /// The header word of the next frame if it has been published.
    #[inline(always)]
    pub fn peek(&self, ring: RingRef<'_>) -> Option<u64> {
        // Acquire: pairs with the producer's release in `RingRef::publish`.
        let word = ring.slot(self.head).header.load(Ordering::Acquire);
        Self::starts_next(word, self.next_seq()).then_some(word)
    }

    /// Retires the `nslots`-slot frame at the head: zeroes its non-header slots (the slot
    /// invariant) and returns credit once a batch has accumulated.
    #[inline(always)]
    pub fn release(&mut self, ring: RingRef<'_>, nslots: u64) {
        for k in 1..nslots {
            // Relaxed: ordered before the producer's reuse by the release store below.
            ring.slot(self.head + k).header.store(0, Ordering::Relaxed);
        }
        self.head += nslots;
        self.settle(ring);
    }

    /// Retires a padded one-slot frame (see the module's "Padded frames") whose slot its
    /// handler may still read: the padding after it is zeroed (the slot invariant) and the
    /// head moves to the next quarter boundary; credit returns at [`Consumer::settle`].
    #[inline(always)]
    pub fn retire_padded(&mut self, ring: RingRef<'_>) {
        let end = ring.quarter_end(self.head);
        for pos in self.head + 1..end {
            // Relaxed: ordered before the producer's reuse by the release store of the credit.
            ring.slot(pos).header.store(0, Ordering::Relaxed);
        }
        self.head = end;
    }

    /// Retires a one-slot frame whose slot its handler still reads: the head moves on, but no
    /// credit returns (so the sender cannot reuse the slot) until [`Consumer::settle`]. A
    /// handler that unwinds then leaves its frame retired, not waiting to run again.
    #[inline(always)]
    pub fn retire_one(&mut self) {
        self.head += 1;
    }

    /// Returns credit once a batch has accumulated, after the frames retired by
    /// [`Consumer::retire_one`] have been read.
    #[inline(always)]
    pub fn settle(&mut self, ring: RingRef<'_>) {
        if self.head >= self.settle_at {
            self.return_credit(ring);
        }
    }

    /// Returns all outstanding credit now.
    #[inline(always)]
    pub fn flush(&mut self, ring: RingRef<'_>) {
        if self.settle_at - self.batch != self.head {
            self.return_credit(ring);
        }
    }

    /// Publishes the head as consumed.
    #[inline(always)]
    fn return_credit(&mut self, ring: RingRef<'_>) {
        // Release: our reads of the retired slots and the zeroing above happen-before the
        // producer's acquire load of `consumed` and its subsequent overwrites.
        ring.ctl.consumed.store(self.head, Ordering::Release);
        self.settle_at = self.head + self.batch;
    }
}

#[cfg(all(test, not(loom)))]
mod tests;

#[cfg(all(test, loom))]
mod loom_tests;
