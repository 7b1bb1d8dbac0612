//! The segment table of one rank: 256 slots, the highest free one taken by an open, each with
//! its memory, the bytes it still expects and its end function; and the hot descriptor, a
//! copy of the last segment a packet landed in, so that back-to-back packets to one segment
//! touch only it (seed 000's xfer handler kept it in registers). A packet for another segment
//! writes the hot count back and loads the other descriptor: the cost that makes two
//! alternating segments slower than one.

use super::error::XferRefusal;
use super::SegmentId;

/// Segments per rank (seed 000: 256).
pub const SEGMENTS: usize = 256;

/// What runs when a segment's remaining count reaches zero: it gets the segment's memory (it
/// may keep it with `std::mem::take`) and returns the next count to re-arm the segment, or 0
/// to close it.
pub type EndFn = Box<dyn FnMut(&mut Box<[u8]>) -> usize + Send>;

/// An open segment. Its memory is held as a raw pointer, so that the hot descriptor's copy of
/// it stays valid however the table is borrowed (see [`Seg::take_memory`]).
struct Seg {
    base: *mut u8,
    len: usize,
    remaining: u64,
    end_fn: EndFn,
}

impl Seg {
    fn new(memory: Box<[u8]>, remaining: u64, end_fn: EndFn) -> Self {
        let len = memory.len();
        let base = Box::into_raw(memory).cast::<u8>();
        Seg {
            base,
            len,
            remaining,
            end_fn,
        }
    }

    /// The memory as a box again (for the end function), the segment's pointer left dangling
    /// until [`Seg::put_memory`].
    fn take_memory(&mut self) -> Box<[u8]> {
        let raw = std::ptr::slice_from_raw_parts_mut(self.base, self.len);
        self.base = std::ptr::null_mut();
        self.len = 0;
        // SAFETY: `raw` came from `Box::into_raw` of a `Box<[u8]>` of `len` bytes (in `new`
        // or `put_memory`), and ownership was not taken back since (`base` is nulled here).
        unsafe { Box::from_raw(raw) }
    }

    fn put_memory(&mut self, memory: Box<[u8]>) {
        self.len = memory.len();
        self.base = Box::into_raw(memory).cast::<u8>();
    }
}

impl Drop for Seg {
    fn drop(&mut self) {
        if !self.base.is_null() {
            drop(self.take_memory());
        }
    }
}

/// One slot of the table.
enum Slot {
    Free,
    Open(Seg),
    /// Its end function is running (the segment is out of the table meanwhile).
    Ending,
}

/// "No segment" in [`Hot::number`].
const NONE: usize = usize::MAX;

/// The copy of the last segment a packet landed in.
struct Hot {
    number: usize,
    generation: u16,
    base: *mut u8,
    len: u64,
    remaining: u64,
}

/// A segment whose count reached zero, taken out of the table for its end function (see
/// [`Table::take_ended`]).
pub(super) struct Ended {
    number: usize,
    seg: Seg,
}

impl Ended {
    /// Runs the end function; returns the new count (0: close).
    pub(super) fn run(&mut self) -> usize {
        let mut memory = self.seg.take_memory();
        let next = (self.seg.end_fn)(&mut memory);
        self.seg.put_memory(memory);
        next
    }
}

/// The segment table (see the module's documentation).
pub(super) struct Table {
    slots: Vec<Slot>,
    generations: Vec<u16>,
    hot: Hot,
    /// Packets that landed and end functions run, for the statistics.
    pub(super) packets: u64,
    pub(super) ends: u64,
    /// Times the hot descriptor was swapped for another segment's.
    pub(super) swaps: u64,
}

// SAFETY: the raw pointers (each open segment's memory, and the hot descriptor's copy of one)
// point into boxes this table owns; nothing else holds them, so the table may move to another
// thread (the progress thread) with everything it owns.
unsafe impl Send for Table {}

impl Table {
    pub(super) fn new() -> Self {
        Table {
            slots: (0..SEGMENTS).map(|_| Slot::Free).collect(),
            generations: vec![0; SEGMENTS],
            hot: Hot {
                number: NONE,
                generation: 0,
                base: std::ptr::null_mut(),
                len: 0,
                remaining: 0,
            },
            packets: 0,
            ends: 0,
            swaps: 0,
        }
    }

    /// Writes the hot descriptor's count back to its segment and forgets it.
    fn flush_hot(&mut self) {
        if self.hot.number != NONE {
            if let Slot::Open(seg) = &mut self.slots[self.hot.number] {
                seg.remaining = self.hot.remaining;
            }
            self.hot.number = NONE;
        }
    }

    /// Opens a segment on `memory` expecting `nbytes`: the highest free number, under the
    /// next generation of that number.
    pub(super) fn open(
        &mut self,
        memory: Box<[u8]>,
        nbytes: usize,
        end_fn: EndFn,
    ) -> Result<SegmentId, XferRefusal> {
        if nbytes == 0 {
            return Err(XferRefusal::PastCount {
                len: 0,
                remaining: 0,
            });
        }
        let number = (0..SEGMENTS)
            .rev()
            .find(|&n| matches!(self.slots[n], Slot::Free))
            .ok_or(XferRefusal::NoFreeSegment)?;
        let generation = self.generations[number].wrapping_add(1);
        self.generations[number] = generation;
        self.slots[number] = Slot::Open(Seg::new(memory, nbytes as u64, end_fn));
        Ok(SegmentId::new(number as u8, generation))
    }

    /// The open segment `id` names, or why none.
    fn open_seg(&mut self, id: SegmentId) -> Result<&mut Seg, XferRefusal> {
        let number = id.number() as usize;
        let not_open = XferRefusal::NotOpen {
            number: id.number(),
            generation: id.generation(),
        };
        if self.generations[number] != id.generation() {
            return Err(not_open);
        }
        match &mut self.slots[number] {
            Slot::Open(seg) => Ok(seg),
            _ => Err(not_open),
        }
    }

    /// Makes `id`'s segment the hot one.
    #[inline]
    fn load_hot(&mut self, id: SegmentId) -> Result<(), XferRefusal> {
        let number = id.number() as usize;
        if self.hot.number == number && self.hot.generation == id.generation() {
            return Ok(());
        }
        self.flush_hot();
        let seg = self.open_seg(id)?;
        let (base, len, remaining) = (seg.base, seg.len as u64, seg.remaining);
        self.hot = Hot {
            number,
            generation: id.generation(),
            base,
            len,
            remaining,
        };
        self.swaps += 1;
        Ok(())
    }

    /// Lands `bytes` at `offset` in segment `id` and counts them; `Ok(true)` when the
    /// segment's count reached zero (take it out with [`Table::take_ended`] and run its end
    /// function). A refused packet writes nothing.
    #[inline]
    pub(super) fn land(
        &mut self,
        id: SegmentId,
        offset: u64,
        bytes: &[u8],
    ) -> Result<bool, XferRefusal> {
        self.load_hot(id)?;
        let hot = &mut self.hot;
        let len = bytes.len() as u64;
        if offset.checked_add(len).is_none_or(|end| end > hot.len) {
            return Err(XferRefusal::OutOfBounds {
                offset,
                len,
                segment_len: hot.len,
            });
        }
        if len > hot.remaining {
            return Err(XferRefusal::PastCount {
                len,
                remaining: hot.remaining,
            });
        }
        // SAFETY: the hot descriptor copies an open segment's memory pointer and length,
        // which stay valid while the segment is in the table (it leaves only through
        // `take_ended` or a close, both of which forget the hot descriptor first); the range
        // was checked against that length just above; `bytes` is a message's buffer, not
        // segment memory.
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                hot.base.add(offset as usize),
                bytes.len(),
            )
        };
        hot.remaining -= len;
        self.packets += 1;
        Ok(hot.remaining == 0)
    }

    /// Reduces `id`'s remaining count by `n`; `Ok(true)` when it reached zero.
    pub(super) fn shorten(&mut self, id: SegmentId, n: u64) -> Result<bool, XferRefusal> {
        self.flush_hot();
        let seg = self.open_seg(id)?;
        if n > seg.remaining {
            return Err(XferRefusal::PastCount {
                len: n,
                remaining: seg.remaining,
            });
        }
        seg.remaining -= n;
        Ok(seg.remaining == 0)
    }

    /// Takes segment `id`, whose count reached zero, out of the table for its end function
    /// (its slot stays taken meanwhile).
    pub(super) fn take_ended(&mut self, id: SegmentId) -> Ended {
        self.flush_hot();
        let number = id.number() as usize;
        match std::mem::replace(&mut self.slots[number], Slot::Ending) {
            Slot::Open(seg) => Ended { number, seg },
            _ => unreachable!("a segment whose count reached zero is open"),
        }
    }

    /// Puts a segment back after its end function returned `next`: re-armed with that count,
    /// or closed (its memory freed, its number free again) when `next` is 0.
    pub(super) fn after_end(&mut self, mut ended: Ended, next: usize) {
        self.ends += 1;
        self.slots[ended.number] = match next {
            0 => Slot::Free,
            n => {
                ended.seg.remaining = n as u64;
                Slot::Open(ended.seg)
            }
        };
    }

    /// The bytes segment `id` still expects.
    pub(super) fn remaining(&mut self, id: SegmentId) -> Result<u64, XferRefusal> {
        self.flush_hot();
        Ok(self.open_seg(id)?.remaining)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;

    fn counting_end(calls: &Arc<AtomicUsize>, next: usize) -> EndFn {
        let calls = calls.clone();
        Box::new(move |_| {
            calls.fetch_add(1, Ordering::Relaxed);
            next
        })
    }

    #[test]
    fn open_takes_the_highest_free_number_under_a_new_generation() {
        let mut t = Table::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let a = t
            .open(vec![0; 8].into(), 8, counting_end(&calls, 0))
            .unwrap();
        let b = t
            .open(vec![0; 8].into(), 8, counting_end(&calls, 0))
            .unwrap();
        assert_eq!((a.number(), b.number()), (255, 254));
        // Close a by filling it; its number comes back with the next generation.
        assert!(t.land(a, 0, &[1; 8]).unwrap());
        let ended = t.take_ended(a);
        t.after_end(ended, 0);
        let c = t
            .open(vec![0; 8].into(), 8, counting_end(&calls, 0))
            .unwrap();
        assert_eq!(c.number(), 255);
        assert_ne!(c.generation(), a.generation());
        // The old id no longer reaches it.
        assert!(matches!(
            t.land(a, 0, &[1; 4]),
            Err(XferRefusal::NotOpen { number: 255, .. })
        ));
    }

    #[test]
    fn all_256_in_use_is_refused() {
        let mut t = Table::new();
        let calls = Arc::new(AtomicUsize::new(0));
        for _ in 0..SEGMENTS {
            t.open(vec![0; 1].into(), 1, counting_end(&calls, 0))
                .unwrap();
        }
        assert_eq!(
            t.open(vec![0; 1].into(), 1, counting_end(&calls, 0)).err(),
            Some(XferRefusal::NoFreeSegment)
        );
    }

    #[test]
    fn refused_packets_write_nothing_and_count_nothing() {
        let mut t = Table::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let a = t
            .open(vec![0; 16].into(), 12, counting_end(&calls, 0))
            .unwrap();
        assert!(matches!(
            t.land(a, 10, &[7; 8]),
            Err(XferRefusal::OutOfBounds {
                offset: 10,
                len: 8,
                segment_len: 16
            })
        ));
        assert!(matches!(
            t.land(a, 0, &[7; 16]),
            Err(XferRefusal::PastCount {
                len: 16,
                remaining: 12
            })
        ));
        assert_eq!(t.remaining(a).unwrap(), 12);
        assert!(matches!(
            t.shorten(a, 13),
            Err(XferRefusal::PastCount {
                len: 13,
                remaining: 12
            })
        ));
        assert!(!t.land(a, 0, &[7; 8]).unwrap());
        assert!(t.shorten(a, 4).unwrap());
        let mut ended = t.take_ended(a);
        assert_eq!(ended.run(), 0);
        assert_eq!(calls.load(Ordering::Relaxed), 1);
        t.after_end(ended, 0);
    }

    #[test]
    fn alternating_segments_swap_the_hot_descriptor_and_keep_their_counts() {
        let mut t = Table::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let a = t
            .open(vec![0; 64].into(), 64, counting_end(&calls, 0))
            .unwrap();
        let b = t
            .open(vec![0; 64].into(), 64, counting_end(&calls, 0))
            .unwrap();
        for i in 0..4u64 {
            assert!(!t.land(a, i * 8, &[1; 8]).unwrap());
            assert!(!t.land(b, i * 8, &[2; 8]).unwrap());
        }
        assert_eq!(t.swaps, 8);
        for i in 4..8u64 {
            t.land(a, i * 8, &[1; 8]).unwrap();
        }
        assert_eq!(
            t.swaps, 9,
            "back-to-back packets to one segment keep its descriptor"
        );
        assert_eq!(t.remaining(b).unwrap(), 32);
        let mut ended = t.take_ended(a);
        ended.seg.end_fn = Box::new(|m| {
            assert!(m.iter().all(|&x| x == 1));
            0
        });
        assert_eq!(ended.run(), 0);
        t.after_end(ended, 0);
    }

    #[test]
    fn an_end_function_can_re_arm_the_segment() {
        let mut t = Table::new();
        let calls = Arc::new(AtomicUsize::new(0));
        let a = t
            .open(vec![0; 8].into(), 8, counting_end(&calls, 8))
            .unwrap();
        for round in 0..3 {
            assert!(t.land(a, 0, &[round; 8]).unwrap());
            let mut ended = t.take_ended(a);
            let next = ended.run();
            t.after_end(ended, next);
        }
        assert_eq!(calls.load(Ordering::Relaxed), 3);
        assert_eq!(t.remaining(a).unwrap(), 8);
    }
}
