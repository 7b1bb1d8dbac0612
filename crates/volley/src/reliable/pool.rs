//! Recycled byte buffers, so a steady stream of small messages allocates nothing.
//!
//! Every message crosses the reliable layer in owned buffers: the queued copy, the datagram body
//! kept for retransmission, the delivered message. Without recycling that is three allocations
//! and three frees per message per side, a measurable share of a loopback UDP round trip.

/// A bounded stack of empty byte buffers.
#[derive(Debug, Default)]
pub struct BufferPool {
    spare: Vec<Vec<u8>>,
}

/// Buffers kept at most: a default send window's worth. The pool never holds more than was
/// in use at once (bounded by the send and receive buffers), and at most this many.
const MAX_SPARE: usize = 64;
/// Buffers with more capacity than this are freed instead of kept (fragment reassembly can
/// grow a buffer to the maximum message size, which should not stay pinned).
const MAX_KEPT_CAPACITY: usize = 16 * 1024;

impl BufferPool {
    /// An empty buffer, recycled when one is available.
    #[inline]
    pub fn take(&mut self) -> Vec<u8> {
        self.spare.pop().unwrap_or_default()
    }

    /// A buffer holding a copy of `bytes`.
    #[inline]
    pub fn copy_of(&mut self, bytes: &[u8]) -> Vec<u8> {
        let mut b = self.take();
        b.extend_from_slice(bytes);
        b
    }

    /// Gives a buffer back for reuse (emptied here; dropped if the pool is full or it is large).
    #[inline]
    pub fn give(&mut self, mut buf: Vec<u8>) {
        if self.spare.len() < MAX_SPARE && buf.capacity() <= MAX_KEPT_CAPACITY {
            buf.clear();
            self.spare.push(buf);
        }
    }

    /// Buffers held for reuse.
    pub fn len(&self) -> usize {
        self.spare.len()
    }

    /// Whether no buffer is held.
    pub fn is_empty(&self) -> bool {
        self.spare.is_empty()
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
        p.give(Vec::with_capacity(MAX_KEPT_CAPACITY + 1));
        assert!(p.is_empty(), "a large buffer is freed, not kept");
        for _ in 0..MAX_SPARE + 10 {
            p.give(Vec::with_capacity(8));
        }
        assert_eq!(p.len(), MAX_SPARE);
    }
}
