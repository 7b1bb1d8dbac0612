//! An input buffer: a ring of 8-byte words with a control block, in shared memory (a rank's
//! network input buffer, in a volley segment) or on the heap (the internal buffers between
//! the program thread and the communication thread). One layout, one reader, for both.
//!
//! Layout from the base: `OWNER` (0 = link free, else the holding rank + 1) and `TAIL`
//! (bytes published, written by the link holder) share a cache line, since a sender touches
//! both; each of the others has its own: `HEAD` (bytes consumed, written by the reader), `DOORBELL`/`SLEEPING`
//! (futex word and the reader's "asleep" flag), `NOTIFIED` (notifications raised at this
//! buffer), then the ring itself and one mark byte per ring word. A mark of 1 says "this
//! word is a packet header" (the iPSC/860 FIFO's end-of-data sideband): chained payload
//! words have mark 0 and carry no header at all. The reader clears a header's mark when it
//! consumes it, so marks are 0 everywhere else.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

pub(crate) const OWNER: usize = 0;
pub(crate) const TAIL: usize = 8;
pub(crate) const HEAD: usize = 128;
pub(crate) const DOORBELL: usize = 192;
pub(crate) const SLEEPING: usize = 196;
pub(crate) const NOTIFIED: usize = 256;
/// Where the ring's words start: a constant, so that the inlined put addresses them from
/// the base with no load.
pub(crate) const RING: usize = 320;

/// Where the mark bytes start, after the ring of `cap` bytes.
pub(crate) fn marks_offset(cap: usize) -> usize {
    RING + cap
}

/// Bytes of a whole buffer of capacity `cap`.
pub(crate) fn total_len(cap: usize) -> usize {
    (marks_offset(cap) + cap / 8).next_multiple_of(64)
}

/// Packet kinds in a header word's low byte.
pub(crate) const DATA: u64 = 1;
pub(crate) const PROC: u64 = 2;
pub(crate) const CLOSE: u64 = 3;
/// A procedure the communication thread ran, forwarded so that the program's procedure
/// receive returns after it.
pub(crate) const PROC_DONE: u64 = 4;

/// Sender value in a header from the program thread over the internal buffer.
pub(crate) const NO_RANK: u64 = 0xffff;

/// A header word: kind, sender, whether it opens a chain, and the length (data) or handler
/// id (procedure).
pub(crate) fn header(kind: u64, from: u64, opens: bool, value: u32) -> u64 {
    kind | (from & 0xffff) << 8 | (opens as u64) << 24 | (value as u64) << 32
}

/// A decoded header word.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Header {
    pub kind: u64,
    pub from: Option<usize>,
    pub value: u32,
}

impl Header {
    pub(crate) fn decode(w: u64) -> Self {
        let from = (w >> 8) & 0xffff;
        Header {
            kind: w & 0xff,
            from: (from != NO_RANK).then_some(from as usize),
            value: (w >> 32) as u32,
        }
    }
}

/// Bytes a payload of `n` bytes takes in the ring (whole words).
pub(crate) fn padded(n: usize) -> usize {
    n.next_multiple_of(8)
}

/// A buffer's base address and capacity. The memory is shared with other threads and
/// processes, so it is only reached through atomics and raw copies.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RingPtr {
    base: *mut u8,
    cap: u64,
}

// SAFETY: the pointer names memory shared on purpose (a mapped segment that lives as long as
// the runtime, or a heap buffer the layer keeps alive while any thread uses it); every
// access goes through atomics or copies ordered by the TAIL/HEAD release-acquire pairs.
unsafe impl Send for RingPtr {}

impl RingPtr {
    /// # Safety
    /// `base` must point at `total_len(cap)` bytes, 8-byte aligned, alive and zeroed at
    /// first, for as long as any copy of the result is used; `cap` a power of two >= 64.
    pub(crate) unsafe fn new(base: *mut u8, cap: usize) -> Self {
        Self {
            base,
            cap: cap as u64,
        }
    }

    pub(crate) fn cap(&self) -> u64 {
        self.cap
    }

    /// The base address (the inlined put addresses TAIL and the ring from it).
    pub(crate) fn base(&self) -> *mut u8 {
        self.base
    }

    fn word(&self, off: usize) -> &AtomicU64 {
        // SAFETY: `off` is a control-word offset inside the block, 8-byte aligned (new's
        // contract); the block outlives `self`.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    pub(crate) fn owner(&self) -> &AtomicU64 {
        self.word(OWNER)
    }
    pub(crate) fn tail(&self) -> &AtomicU64 {
        self.word(TAIL)
    }
    pub(crate) fn head(&self) -> &AtomicU64 {
        self.word(HEAD)
    }
    pub(crate) fn notified(&self) -> &AtomicU64 {
        self.word(NOTIFIED)
    }
    pub(crate) fn doorbell(&self) -> &AtomicU32 {
        // SAFETY: as `word`, 4-byte aligned.
        unsafe { &*(self.base.add(DOORBELL) as *const AtomicU32) }
    }
    pub(crate) fn sleeping(&self) -> &AtomicU32 {
        // SAFETY: as `word`, 4-byte aligned.
        unsafe { &*(self.base.add(SLEEPING) as *const AtomicU32) }
    }
    /// The first byte of the ring's words.
    pub(crate) fn data(&self) -> *mut u8 {
        // SAFETY: inside the block (layout above).
        unsafe { self.base.add(RING) }
    }
    /// The mark byte of the word at byte position `pos`.
    fn mark(&self, pos: u64) -> *mut u8 {
        // SAFETY: one mark per word of the ring, inside the block.
        unsafe {
            self.base
                .add(marks_offset(self.cap as usize) + ((pos & (self.cap - 1)) / 8) as usize)
        }
    }

    /// Writes `words` at byte position `pos` (wrapping) and marks the words listed in
    /// `headers` (indices into `words`). The caller holds the link and checked the room.
    pub(crate) fn write_words(&self, pos: u64, words: &[u64], headers: &[usize]) {
        let mask = self.cap - 1;
        let start = (pos & mask) as usize;
        let bytes = words.len() * 8;
        let first = bytes.min(self.cap as usize - start);
        // SAFETY: `first` bytes from `start` and the rest from 0 lie in the ring; the reader
        // does not touch them before the TAIL release that follows.
        unsafe {
            let src = words.as_ptr() as *const u8;
            std::ptr::copy_nonoverlapping(src, self.data().add(start), first);
            std::ptr::copy_nonoverlapping(src.add(first), self.data(), bytes - first);
        }
        for &h in headers {
            // SAFETY: the mark of a word being written, same rule as the words.
            unsafe { self.mark(pos + 8 * h as u64).write(1) };
        }
    }
}

/// What waits at the head of a buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Peek {
    Empty,
    Header(u64),
    /// Chained payload: this many bare bytes before the next header or the tail.
    Bare(u64),
}

/// The reading side of one buffer (one thread at a time).
#[derive(Debug)]
pub(crate) struct Reader {
    pub(crate) ring: RingPtr,
    pub(crate) head: u64,
    tail: u64,
}

impl Reader {
    pub(crate) fn new(ring: RingPtr) -> Self {
        let head = ring.head().load(Ordering::Relaxed);
        Self {
            ring,
            head,
            tail: head,
        }
    }

    /// Bytes published and not consumed (refreshes the cached tail when it runs out).
    #[inline]
    pub(crate) fn available(&mut self) -> u64 {
        if self.tail == self.head {
            self.tail = self.ring.tail().load(Ordering::Acquire);
        }
        self.tail - self.head
    }

    /// The word at `head + off` (must be published).
    fn word_at(&self, off: u64) -> u64 {
        let pos = (self.head + off) & (self.ring.cap - 1);
        // SAFETY: a published word inside the ring (acquired through TAIL).
        unsafe { (self.ring.data().add(pos as usize) as *const u64).read() }
    }

    fn is_header(&self, off: u64) -> bool {
        // SAFETY: a published word's mark.
        unsafe { self.ring.mark(self.head + off).read() == 1 }
    }

    /// Bytes published and not consumed as of the last look at the tail.
    pub(crate) fn seen(&self) -> u64 {
        self.tail - self.head
    }

    /// What waits at the head; looks at the tail afresh.
    pub(crate) fn peek(&mut self) -> Peek {
        self.tail = self.ring.tail().load(Ordering::Acquire);
        let avail = self.tail - self.head;
        if avail == 0 {
            return Peek::Empty;
        }
        if self.is_header(0) {
            return Peek::Header(self.word_at(0));
        }
        let mut n = 8;
        while n < avail && !self.is_header(n) {
            n += 8;
        }
        Peek::Bare(n)
    }

    /// Takes one chained (header-less) word if one is published at the head.
    #[inline]
    pub(crate) fn take_bare_word(&mut self) -> Option<u64> {
        if self.available() < 8 || self.is_header(0) {
            return None;
        }
        let w = self.word_at(0);
        self.head += 8;
        self.ring.head().store(self.head, Ordering::Release);
        Some(w)
    }

    /// Consumes the header at the head.
    pub(crate) fn take_header(&mut self) {
        // SAFETY: the mark of the published header being consumed; cleared before the HEAD
        // release lets a writer reuse the word.
        unsafe { self.ring.mark(self.head).write(0) };
        self.head += 8;
        self.ring.head().store(self.head, Ordering::Release);
    }

    /// Copies `buf.len()` published bytes from the head and consumes their whole words.
    pub(crate) fn take_bytes(&mut self, buf: &mut [u8]) {
        let mask = self.ring.cap - 1;
        let start = (self.head & mask) as usize;
        let first = buf.len().min(self.ring.cap as usize - start);
        // SAFETY: published bytes of the ring (the caller checked `available`), copied out
        // before the HEAD release that frees them.
        unsafe {
            std::ptr::copy_nonoverlapping(self.ring.data().add(start), buf.as_mut_ptr(), first);
            std::ptr::copy_nonoverlapping(
                self.ring.data(),
                buf.as_mut_ptr().add(first),
                buf.len() - first,
            );
        }
        self.head += padded(buf.len()) as u64;
        self.ring.head().store(self.head, Ordering::Release);
    }

    /// Copies `n` published words from the head into `out` with their header flags, and
    /// consumes them (the communication thread's forwarding).
    pub(crate) fn take_words(&mut self, n: u64, out: &mut Vec<u64>, headers: &mut Vec<usize>) {
        for i in 0..n / 8 {
            if self.is_header(i * 8) {
                headers.push(out.len());
                // SAFETY: as in `take_header`.
                unsafe { self.ring.mark(self.head + i * 8).write(0) };
            }
            out.push(self.word_at(i * 8));
        }
        self.head += n;
        self.ring.head().store(self.head, Ordering::Release);
    }
}

/// A heap buffer in the ring layout (the internal buffers); freed when dropped.
#[derive(Debug)]
pub(crate) struct HeapRing {
    ptr: RingPtr,
    layout: std::alloc::Layout,
}

// SAFETY: the memory is only reached through `RingPtr`s, whose accesses are atomics and
// copies ordered by TAIL/HEAD (see `RingPtr`).
unsafe impl Send for HeapRing {}
// SAFETY: as for `Send`.
unsafe impl Sync for HeapRing {}

impl HeapRing {
    pub(crate) fn new(cap: usize) -> Self {
        let layout = std::alloc::Layout::from_size_align(total_len(cap), 64).expect("ring size");
        // SAFETY: a non-zero size.
        let base = unsafe { std::alloc::alloc_zeroed(layout) };
        if base.is_null() {
            std::alloc::handle_alloc_error(layout);
        }
        // SAFETY: zeroed, aligned, `total_len(cap)` bytes, freed only in `drop`, after every
        // user (the owner keeps the ring in an `Arc` shared with the communication thread).
        let ptr = unsafe { RingPtr::new(base, cap) };
        Self { ptr, layout }
    }
    pub(crate) fn ptr(&self) -> RingPtr {
        self.ptr
    }
}

impl Drop for HeapRing {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; no user is left (see `new`).
        unsafe { std::alloc::dealloc(self.ptr.base, self.layout) };
    }
}

/// The writing side of a buffer with one writer and no link word (the internal buffers).
#[derive(Debug)]
pub(crate) struct LocalWriter {
    pub(crate) ring: RingPtr,
    tail: u64,
    head: u64,
}

impl LocalWriter {
    pub(crate) fn new(ring: RingPtr) -> Self {
        Self {
            ring,
            tail: 0,
            head: 0,
        }
    }

    /// Bytes free now.
    pub(crate) fn room(&mut self) -> u64 {
        self.head = self.ring.head().load(Ordering::Acquire);
        self.ring.cap - (self.tail - self.head)
    }

    /// Appends `words` (whole packets or chained words), waiting for room with `wait`
    /// (called with `true` the first time it has to wait, so stalls can be counted).
    pub(crate) fn emit(&mut self, words: &[u64], headers: &[usize], wait: &mut dyn FnMut(bool)) {
        let bytes = words.len() as u64 * 8;
        debug_assert!(bytes <= self.ring.cap);
        let mut first = true;
        while self.ring.cap - (self.tail - self.head) < bytes {
            if self.room() >= bytes {
                break;
            }
            wait(first);
            first = false;
        }
        self.ring.write_words(self.tail, words, headers);
        self.tail += bytes;
        self.ring.tail().store(self.tail, Ordering::Release);
    }
}
