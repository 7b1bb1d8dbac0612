//! Recycled byte buffers, so a steady stream of small messages allocates nothing.
//!
//! Every message crosses the reliable layer in owned buffers: the queued copy, the datagram body
//! kept for retransmission, the delivered message. Without recycling that is three allocations
//! and three frees per message per side, a measurable share of a loopback UDP round trip.

/// A bounded stack of empty byte buffers, and a shorter one of large buffers.
#[derive(Debug, Default)]
pub struct BufferPool {
    spare: Vec<Vec<u8>>,
    /// Buffers for messages larger than a datagram. A fresh buffer of a megabyte comes from
    /// `mmap` and costs a page fault per 4 KiB on first touch (more than the copy into it),
    /// and its free unmaps it again: a stream of long messages reuses a few instead.
    large: Vec<Vec<u8>>,
}

/// Buffers kept at most: a default send window's worth. The pool never holds more than was
/// in use at once (bounded by the send and receive buffers), and at most this many.
const MAX_SPARE: usize = 64;
/// Buffers with more capacity than this go to the large stack: the largest datagram body
/// (65507 bytes) stays among the small ones.
const MAX_KEPT_CAPACITY: usize = 64 * 1024;
/// Large buffers kept at most: the sixteen 1 MiB parts of a 16 MiB long message, which a
/// rank that talks with several peers queues at once (see the UDP transport's
/// `send_gather_part`), and one being reassembled. A fresh megabyte costs its page faults, more
/// than the copy into it: a pipelined 16 MiB send held its caller 5.6-6.3 ms with three kept,
/// 1.4-1.7 ms with seventeen. The pool never holds more than was in use at once.
const MAX_LARGE: usize = 17;
/// Large buffers with more capacity than this are freed (the transports' largest message is
/// a little over 8 MiB).
const MAX_LARGE_CAPACITY: usize = 9 << 20;

impl BufferPool {
    /// An empty buffer, recycled when one is available.
    #[inline]
    pub fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// An empty buffer with room for at least `len` bytes, recycled when one is available.
    #[inline]
    pub fn take_for(&mut self, len: usize) -> Vec<u8> {
        let mut b = if len > MAX_KEPT_CAPACITY {
            self.large.pop().unwrap_or_default()
        } else {
            self.take()
        };
        b.reserve(len);
        b
    }

    /// A buffer holding a copy of `bytes`.
    #[inline]
    pub fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.take_for(bytes.len());
        b.extend_from_slice(bytes);
        b
    }

    /// Gives a buffer back for reuse (emptied here; dropped if its stack is full or it is
    /// larger than any message).
    #[inline]
    pub fn give(&mut self, mut buf: Vec<u8>) {
        let cap = buf.capacity();
        if cap <= MAX_KEPT_CAPACITY {
            if self.spare.len() < MAX_SPARE {
                buf.clear();
                self.spare.push(buf);
            }
        } else if cap <= MAX_LARGE_CAPACITY && self.large.len() < MAX_LARGE {
            buf.clear();
            self.large.push(buf);
        }
    }

    /// Buffers held for reuse.
    pub fn len(&self) -> usize {
        self.spare.len() + self.large.len()
    }

    /// Whether no buffer is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recycled_buffers_come_back_empty_and_keep_their_allocation() {
        let mut p = BufferPool::default();
        let b = p.copy_of(b"hello");
        assert_eq!(b, b"hello");
        let ptr = b.as_ptr();
        p.give(b);
        assert_eq!(p.len(), 1);
        let again = p.take();
        assert!(again.is_empty());
        assert_eq!(again.as_ptr(), ptr, "the allocation is reused");
        assert!(p.is_empty());
    }

    #[test]
    fn the_pool_is_bounded_in_count_and_in_buffer_size() {
        let mut p = BufferPool::default();
        p.give(Vec::with_capacity(MAX_LARGE_CAPACITY + 1));
        assert!(
            p.is_empty(),
            "a buffer beyond any message is freed, not kept"
        );
        for _ in 0..MAX_SPARE + 10 {
            p.give(Vec::with_capacity(8));
        }
        assert_eq!(p.len(), MAX_SPARE);
        for _ in 0..MAX_LARGE + 2 {
            p.give(Vec::with_capacity(MAX_KEPT_CAPACITY + 1));
        }
        assert_eq!(p.len(), MAX_SPARE + MAX_LARGE);
    }

    #[test]
    fn large_buffers_are_reused_for_large_messages_only() {
        let mut p = BufferPool::default();
        let big = p.copy_of(&vec![7u8; 1 << 20]);
        let ptr = big.as_ptr();
        p.give(big);
        let small = p.copy_of(b"small");
        assert_ne!(
            small.as_ptr(),
            ptr,
            "a small message does not take a large buffer"
        );
        let again = p.take_for(1 << 20);
        assert!(again.is_empty());
        assert_eq!(
            again.as_ptr(),
            ptr,
            "the megabyte is reused, not mapped afresh"
        );
    }
}
