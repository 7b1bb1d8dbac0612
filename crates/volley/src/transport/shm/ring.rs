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
mod tests {
    use super::*;

    fn ring_mem(n: usize) -> (RingCtl, Vec<Slot>) {
        let ctl = RingCtl {
            consumed: AtomicU64::new(0),
        };
        let slots = (0..n)
            .map(|_| Slot {
                header: AtomicU64::new(0),
                body: UnsafeCell::new([0; 7]),
            })
            .collect();
        (ctl, slots)
    }

    /// Sends frame `tag` of `n` slots, a one-slot frame padded if `pad` and the credit allows
    /// (see "Padded frames"); `None` without credit, else whether it was padded.
    fn send(p: &mut Producer, ring: RingRef<'_>, n: u64, tag: u64, pad: bool) -> Option<bool> {
        let key = FrameKey::new(9);
        let (pos, flags) = match pad.then(|| p.reserve_padded(ring)).flatten() {
            Some(pos) => (pos, super::super::frame::PADDED),
            None => (p.reserve(ring, n, key)?, 0),
        };
        for w in 1..(n as usize * 8) {
            ring.write_word(pos, w, tag * 1000 + w as u64);
        }
        let h = FrameHeader {
            handler: tag as u16,
            nargs: 0,
            kind: KIND_WORDS,
            nslots: n as u8,
        };
        ring.publish(pos, h.encode_with(pos, key, flags));
        if pad {
            p.refresh(ring);
        }
        Some(flags != 0)
    }

    /// Receives the next frame, moving past skips and padding: its tag, slots and whether it
    /// was padded.
    fn recv(c: &mut Consumer, ring: RingRef<'_>) -> Option<(u64, u64, bool)> {
        loop {
            let w = c.peek(ring)?;
            let h = HeaderWord::check(w, FrameKey::new(9)).unwrap();
            if h.is(KIND_SKIP) {
                c.release(ring, h.nslots());
                continue;
            }
            let tag = h.handler() as u64;
            for wi in 1..(h.nslots() as usize * 8) {
                assert_eq!(ring.read_word(c.head(), wi), tag * 1000 + wi as u64);
            }
            if h.padded() {
                c.retire_padded(ring);
                assert_eq!(
                    c.head() % (ring.slot_count() / 4),
                    0,
                    "padding ended mid-quarter"
                );
                c.settle(ring);
            } else {
                c.release(ring, h.nslots());
            }
            return Some((tag, h.nslots(), h.padded()));
        }
    }

    #[test]
    fn padded_frames_use_one_slot_per_quarter_and_streams_between_them_stay_in_order() {
        // Phases of lone frames (each received before the next is sent: they are padded, and
        // every frame starts a quarter) and of bursts (sent before any is received; as in the
        // runtime, only the first asks to be padded, and the credit may refuse). The lone phases run for more than 2^15 ring positions, so a
        // sequence wraps while the bursts' old headers lie in the padding: a stale header
        // taken for a new frame, or a frame lost, skipped or read twice, fails the tags.
        for size in [8usize, 64, 256] {
            let (ctl, slots) = ring_mem(size);
            let ring = RingRef::new(&ctl, &slots);
            let (mut p, mut c) = (Producer::new(size), Consumer::new(size));
            let (mut sent, mut padded) = (0u64, 0u64);
            for phase in 0..6 {
                if phase % 2 == 0 {
                    for k in 0..(1u64 << 15) / (size as u64 / 4) + 100 {
                        // The first may find its credit stale after a burst (and refreshes it).
                        let was_padded = send(&mut p, ring, 1, sent % 60_000, true).unwrap();
                        assert!(was_padded || k == 0, "lone frame {k} was not padded");
                        assert_eq!(recv(&mut c, ring), Some((sent % 60_000, 1, was_padded)));
                        sent += 1;
                        padded += u64::from(was_padded);
                    }
                } else {
                    let first = sent;
                    for k in 0..size as u64 + 3 {
                        let Some(was_padded) = send(&mut p, ring, 1, sent % 60_000, k == 0) else {
                            break;
                        };
                        assert!(!was_padded || k == 0);
                        sent += 1;
                    }
                    for tag in first..sent {
                        assert_eq!(recv(&mut c, ring).map(|r| r.0), Some(tag % 60_000));
                    }
                    assert_eq!(recv(&mut c, ring), None);
                    c.flush(ring);
                }
            }
            // All lone frames but at most the first of each phase.
            let lone = 3 * ((1u64 << 15) / (size as u64 / 4) + 100);
            assert!(padded + 3 >= lone, "{padded} of {lone} lone frames padded");
        }
        // A ring above the padding limit is never padded.
        let (ctl, slots) = ring_mem(512);
        let ring = RingRef::new(&ctl, &slots);
        let mut p = Producer::new(512);
        assert_eq!(p.reserve_padded(ring), None);
    }

    #[test]
    fn a_header_left_in_padding_for_a_whole_sequence_wrap_is_not_taken_for_a_frame() {
        // Frames at positions 0..20 leave their headers in slots 0..20 of a 64-slot ring.
        // Then lone frames (padded once the credit is fresh, then one per quarter) bring the
        // tail to 32768 = 2^15, and 5 frames fill slots 0..5. Slot 5 still holds the header
        // of position 5, whose sequence is that of position 32773, where the receiver now
        // looks: unless the padding was zeroed, it takes that stale header for a new frame.
        let (ctl, slots) = ring_mem(64);
        let ring = RingRef::new(&ctl, &slots);
        let (mut p, mut c) = (Producer::new(64), Consumer::new(64));
        let mut tag = 0;
        let burst = |p: &mut Producer, c: &mut Consumer, n: u64, tag: &mut u64| {
            for k in 0..n {
                assert_eq!(send(p, ring, 1, *tag + k, false), Some(false));
            }
            for k in 0..n {
                assert_eq!(recv(c, ring), Some((*tag + k, 1, false)));
            }
            *tag += n;
            c.flush(ring);
        };
        burst(&mut p, &mut c, 20, &mut tag);
        let mut padded_frames = 0;
        while p.tail < 1 << 15 {
            let padded = send(&mut p, ring, 1, tag, true).unwrap();
            assert_eq!(recv(&mut c, ring), Some((tag, 1, padded)));
            tag += 1;
            padded_frames += u64::from(padded);
        }
        assert_eq!(p.tail, 1 << 15);
        assert!(padded_frames > 2040, "{padded_frames} padded");
        burst(&mut p, &mut c, 5, &mut tag);
        assert_eq!(c.head(), (1 << 15) + 5);
        assert_eq!(recv(&mut c, ring), None, "a stale header read as a frame");
    }

    #[test]
    fn mixed_sizes_stream_in_order_with_skips_and_credit() {
        let (ctl, slots) = ring_mem(8);
        let ring = RingRef::new(&ctl, &slots);
        let mut p = Producer::new(8);
        let mut c = Consumer::new(8);
        let mut next_send = 0u64;
        let mut next_recv = 0u64;
        let size_of = |i: u64| 1 + (i * 7 % 4);
        while next_recv < 5000 {
            while next_send < 5000
                && send(&mut p, ring, size_of(next_send), next_send % 60000, false).is_some()
            {
                next_send += 1;
            }
            while let Some((tag, n, _)) = recv(&mut c, ring) {
                assert_eq!(tag, next_recv % 60000);
                assert_eq!(n, size_of(next_recv));
                next_recv += 1;
            }
        }
        assert_eq!(next_send, 5000);
    }

    #[test]
    fn the_quick_reservation_agrees_with_the_full_one() {
        let (ctl, slots) = ring_mem(8);
        let ring = RingRef::new(&ctl, &slots);
        let (mut p, mut c) = (Producer::new(8), Consumer::new(8));
        let (mut quick_hits, mut quick_misses) = (0, 0);
        for i in 0..5000u64 {
            let n = 1 + (i * 7 % 4);
            let mut quick = p;
            let within = quick.reserve_within(n);
            let before = p.tail;
            match p.reserve(ring, n, FrameKey::new(9)) {
                Some(pos) => {
                    if let Some(q) = within {
                        // Same slots, and no skip was needed.
                        assert_eq!((q, quick.tail), (pos, p.tail));
                        assert_eq!(pos, before);
                        quick_hits += 1;
                    } else {
                        quick_misses += 1;
                    }
                    ring.publish(
                        pos,
                        FrameHeader {
                            handler: 0,
                            nargs: 0,
                            kind: KIND_WORDS,
                            nslots: n as u8,
                        }
                        .encode(pos, FrameKey::new(9)),
                    );
                }
                None => assert_eq!(within, None, "quick reservation without credit"),
            }
            // Retire everything every third frame, so credit runs out in between.
            if i % 3 == 2 {
                while let Some(w) = c.peek(ring) {
                    c.release(ring, FrameHeader::claimed_slots(w));
                }
                c.flush(ring);
            }
        }
        assert!(
            quick_hits > 1000 && quick_misses > 100,
            "{quick_hits} {quick_misses}"
        );
    }

    #[test]
    fn frame_lengths_are_checked_against_the_ring_end() {
        let (ctl, slots) = ring_mem(8);
        let ring = RingRef::new(&ctl, &slots);
        assert!(ring.fits(0, 4));
        assert!(ring.fits(4, 4));
        assert!(!ring.fits(5, 4), "would run past the end");
        assert!(!ring.fits(0, 0));
        assert!(!ring.fits(0, MAX_FRAME_SLOTS + 1));
        assert_eq!(ring.slots_to_end(13), 3);
        assert_eq!(ring.slots_to_end(8), 8);
    }

    #[test]
    fn full_ring_refuses_until_credit_returns() {
        let (ctl, slots) = ring_mem(8);
        let ring = RingRef::new(&ctl, &slots);
        let mut p = Producer::new(8);
        let mut c = Consumer::new(8);
        for i in 0..8 {
            assert!(send(&mut p, ring, 1, i, false).is_some(), "slot {i}");
        }
        assert!(
            send(&mut p, ring, 1, 8, false).is_none(),
            "ninth frame must not fit"
        );
        assert_eq!(recv(&mut c, ring), Some((0, 1, false)));
        assert!(
            send(&mut p, ring, 1, 8, false).is_none(),
            "credit is returned in batches of 2"
        );
        assert_eq!(recv(&mut c, ring), Some((1, 1, false)));
        assert!(send(&mut p, ring, 1, 8, false).is_some());
    }

    #[test]
    fn stale_payload_is_never_read_as_a_header() {
        // Fill a lap with 4-slot frames whose payload words look exactly like headers of the
        // next lap, then check that the consumer sees nothing until the real frames arrive.
        let (ctl, slots) = ring_mem(8);
        let ring = RingRef::new(&ctl, &slots);
        let mut p = Producer::new(8);
        let mut c = Consumer::new(8);
        for _ in 0..2 {
            let pos = p.reserve(ring, 4, FrameKey::new(9)).unwrap();
            for w in 1..32 {
                let fake = FrameHeader {
                    handler: 1,
                    nargs: 0,
                    kind: KIND_WORDS,
                    nslots: 1,
                };
                let slot_pos = pos + (w / 8) as u64 + 8;
                ring.write_word(pos, w, fake.encode(slot_pos, FrameKey::new(9)));
            }
            let h = FrameHeader {
                handler: 2,
                nargs: 0,
                kind: KIND_WORDS,
                nslots: 4,
            };
            ring.publish(pos, h.encode(pos, FrameKey::new(9)));
        }
        for _ in 0..2 {
            let w = c.peek(ring).unwrap();
            c.release(
                ring,
                FrameHeader::decode(w, FrameKey::new(9)).unwrap().nslots as u64,
            );
        }
        assert_eq!(
            c.peek(ring),
            None,
            "stale payload must not look like a frame"
        );
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::super::frame::PADDED;
    use super::*;
    use loom::sync::Arc;

    struct Mem {
        ctl: RingCtl,
        slots: Vec<Slot>,
    }

    fn mem(n: usize) -> Arc<Mem> {
        Arc::new(Mem {
            ctl: RingCtl {
                consumed: AtomicU64::new(0),
            },
            slots: (0..n)
                .map(|_| Slot {
                    header: AtomicU64::new(0),
                    body: UnsafeCell::new([0; 7]),
                })
                .collect(),
        })
    }

    /// One producer streams frames through a tiny ring while one consumer drains it; loom
    /// explores the interleavings and weak-memory outcomes of publish/consume and credit return.
    /// Each frame is (slots, pad): a one-slot frame with `pad` asks to be padded (see "Padded
    /// frames"), the producer reading the credit afresh after it. `retire_first`: one-slot
    /// frames are retired (padding zeroed) before they are read and settled after, as the
    /// drain does for one-slot shorts; padded frames are always retired so.
    fn model(ring_slots: usize, frames: &'static [(u64, bool)], retire_first: bool) {
        loom::model(move || {
            let m = mem(ring_slots);
            let pm = m.clone();
            let producer = loom::thread::spawn(move || {
                let ring = RingRef::new(&pm.ctl, &pm.slots);
                let mut p = Producer::new(ring_slots);
                for (i, &(n, pad)) in frames.iter().enumerate() {
                    let (pos, flags) = loop {
                        if pad {
                            if let Some(pos) = p.reserve_padded(ring) {
                                break (pos, PADDED);
                            }
                        }
                        if let Some(pos) = p.reserve(ring, n, FrameKey::new(3)) {
                            break (pos, 0);
                        }
                        loom::thread::yield_now();
                    };
                    for w in 1..(n as usize * 8) {
                        ring.write_word(pos, w, (i as u64) << 8 | w as u64);
                    }
                    let h = FrameHeader {
                        handler: i as u16,
                        nargs: 0,
                        kind: KIND_WORDS,
                        nslots: n as u8,
                    };
                    ring.publish(pos, h.encode_with(pos, FrameKey::new(3), flags));
                    if pad {
                        p.refresh(ring);
                    }
                }
            });
            let ring = RingRef::new(&m.ctl, &m.slots);
            let mut c = Consumer::new(ring_slots);
            let mut got = 0;
            while got < frames.len() {
                let Some(w) = c.peek(ring) else {
                    loom::thread::yield_now();
                    continue;
                };
                let h = HeaderWord::check(w, FrameKey::new(3)).expect("torn or stale header");
                if h.is(KIND_SKIP) {
                    c.release(ring, h.nslots());
                    continue;
                }
                assert_eq!(h.handler() as usize, got, "frames out of order");
                assert_eq!(h.nslots(), frames[got].0);
                let at = c.head();
                let early = (retire_first && h.nslots() == 1) || h.padded();
                if h.padded() {
                    c.retire_padded(ring);
                } else if early {
                    c.retire_one();
                }
                for wi in 1..(h.nslots() as usize * 8) {
                    assert_eq!(ring.read_word(at, wi), (got as u64) << 8 | wi as u64);
                }
                if early {
                    c.settle(ring);
                } else {
                    c.release(ring, h.nslots());
                }
                got += 1;
            }
            producer.join().unwrap();
        });
    }

    /// Sends frame `i` (padded: its producer must have the credit for that) with a credit
    /// hint `hint` in its last word.
    fn send_hinted(p: &mut Producer, ring: RingRef<'_>, i: u64, hint: u64) {
        let pos = p
            .reserve_padded(ring)
            .expect("a ping-pong's frame refused its padding: the hints fell short");
        for w in 1..CREDIT_HINT_WORD {
            ring.write_word(pos, w, i << 8 | w as u64);
        }
        ring.write_word(pos, CREDIT_HINT_WORD, hint);
        publish(ring, pos, i, MAX_HINTED_ARGS as u8, 1, PADDED);
    }

    fn publish(ring: RingRef<'_>, pos: u64, i: u64, nargs: u8, nslots: u8, flags: u64) {
        let h = FrameHeader {
            handler: i as u16,
            nargs,
            kind: KIND_WORDS,
            nslots,
        };
        ring.publish(pos, h.encode_with(pos, FrameKey::new(3), flags));
    }

    /// Waits for the frame at the head, checks that it is frame `i` of `nslots` slots and its
    /// words (all but a padded frame's hint), and returns its header.
    fn receive(c: &Consumer, ring: RingRef<'_>, i: u64, nslots: u64) -> HeaderWord {
        let w = loop {
            match c.peek(ring) {
                Some(w) => break w,
                None => loom::thread::yield_now(),
            }
        };
        let h = HeaderWord::check(w, FrameKey::new(3)).expect("torn or stale header");
        assert_eq!(
            (h.handler() as u64, h.nslots()),
            (i, nslots),
            "frames out of order"
        );
        let words = if h.padded() {
            CREDIT_HINT_WORD
        } else {
            nslots as usize * 8
        };
        for w in 1..words {
            assert_eq!(ring.read_word(c.head(), w), i << 8 | w as u64);
        }
        h
    }

    /// The hint of the padded frame at the head.
    fn hint_at_head(c: &Consumer, ring: RingRef<'_>) -> u64 {
        ring.read_word(c.head(), CREDIT_HINT_WORD)
    }

    /// Takes the hint of the padded frame at the head and retires it, as the engine does
    /// after the frame's handler.
    fn retire_hinted(c: &mut Consumer, ring: RingRef<'_>, p: &mut Producer, back: RingRef<'_>) {
        p.take_hint(back, hint_at_head(c, ring));
        c.retire_padded(ring);
        c.settle(ring);
    }

    /// A ping-pong of padded frames whose only credit is the hints (no producer reads the
    /// control lines): each reply carries how far its sender had consumed the requests and
    /// each request how far the replies, taken when the frame carrying it is retired, after
    /// its handler's answer, as the engine does (the requester retires a reply after sending
    /// its next request). Four round trips in rings of 8 slots: each side's last frame is
    /// padded on a hint's credit. Then the requester streams two-slot frames over the whole
    /// ring on what credit it has (the last on the control line's): the responder may still be
    /// zeroing the last request's padding after its reply, so a hint that promised that
    /// padding shows here as a lost word (checked: a hint one quarter too high fails).
    #[test]
    fn loom_a_ping_pong_on_credit_hints_reuses_slots_only_after_they_were_read() {
        const ROUNDS: u64 = 4;
        const STREAM: u64 = 4;
        // Both sides spin on each other: four preemptions keep the search to seconds (two
        // already find a hint one quarter too high).
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(4);
        model.check(|| {
            let (a, b) = (mem(8), mem(8));
            let (pa, pb) = (a.clone(), b.clone());
            let responder = loom::thread::spawn(move || {
                let requests = RingRef::new(&pa.ctl, &pa.slots);
                let replies = RingRef::new(&pb.ctl, &pb.slots);
                let (mut c, mut p) = (Consumer::new(8), Producer::new(8));
                for i in 0..ROUNDS {
                    receive(&c, requests, i, 1);
                    send_hinted(&mut p, replies, i, c.head());
                    retire_hinted(&mut c, requests, &mut p, replies);
                }
                for i in ROUNDS..ROUNDS + STREAM {
                    receive(&c, requests, i, 2);
                    c.release(requests, 2);
                }
            });
            let requests = RingRef::new(&a.ctl, &a.slots);
            let replies = RingRef::new(&b.ctl, &b.slots);
            let (mut p, mut c) = (Producer::new(8), Consumer::new(8));
            for i in 0..ROUNDS {
                send_hinted(&mut p, requests, i, c.head());
                if i > 0 {
                    retire_hinted(&mut c, replies, &mut p, requests);
                }
                receive(&c, replies, i, 1);
            }
            retire_hinted(&mut c, replies, &mut p, requests);
            for i in ROUNDS..ROUNDS + STREAM {
                let pos = loop {
                    match p.reserve(requests, 2, FrameKey::new(3)) {
                        Some(pos) => break pos,
                        None => loom::thread::yield_now(),
                    }
                };
                for w in 1..16 {
                    requests.write_word(pos, w, i << 8 | w as u64);
                }
                publish(requests, pos, i, 0, 2, 0);
            }
            responder.join().unwrap();
        });
    }

    #[test]
    fn loom_padded_frames_zero_their_padding_before_the_credit_returns() {
        model(
            8,
            &[(1, true), (1, true), (1, false), (1, true), (1, false)],
            true,
        );
    }

    #[test]
    fn loom_single_slot_frames_wrap_with_credit() {
        model(2, &[(1, false); 3], false);
    }

    #[test]
    fn loom_multi_slot_frames_skip_and_zero() {
        model(4, &[(1, false), (2, false), (2, false)], false);
    }

    #[test]
    fn loom_one_slot_frames_retired_before_they_are_read_keep_their_slot() {
        model(2, &[(1, false); 3], true);
    }
}
