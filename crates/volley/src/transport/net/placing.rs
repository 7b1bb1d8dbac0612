//! A message whose last bytes go straight into place as they arrive (see [`Placer`]): the
//! state both transports keep while one is received, a TCP frame read in pieces or the
//! fragments of a UDP message.

use std::ptr::NonNull;

use super::Placer;
use crate::reliable::BufferPool;

/// A message whose last `want` bytes go to `dst`; `got` of them have arrived; `notice` is
/// delivered when all have.
pub(crate) struct Placing {
    dst: NonNull<u8>,
    got: usize,
    want: usize,
    notice: Vec<u8>,
}

// SAFETY: `dst` is memory the placer lent for as long as the transport lives, written only
// by the thread that drives the transport.
unsafe impl Send for Placing {}

impl Placing {
    /// Starts placing a message of `len` bytes from `rank` whose first bytes are `have`
    /// (fewer than `len`), if `placer` takes it: the payload bytes among them are copied to
    /// their place at once.
    pub(crate) fn start(
        placer: &dyn Placer,
        rank: usize,
        have: &[u8],
        len: usize,
        pool: &mut BufferPool,
    ) -> Option<Placing> {
        if have.len() >= len {
            return None;
        }
        let mut notice = pool.take();
        let Some((dst, words)) = placer.place(rank, have, len, &mut notice) else {
            pool.give(notice);
            return None;
        };
        let mut p = Placing {
            dst,
            got: 0,
            want: len - words,
            notice,
        };
        p.write(&have[words..]);
        Some(p)
    }

    /// Bytes still to come.
    pub(crate) fn missing(&self) -> usize {
        self.want - self.got
    }

    /// Copies the next `bytes` into place; they must not be more than [`Placing::missing`].
    pub(crate) fn write(&mut self, bytes: &[u8]) {
        assert!(
            bytes.len() <= self.missing(),
            "more bytes than the message has"
        );
        // SAFETY: the placer lent `want` writable bytes at `dst`; `got + bytes.len()` is
        // within them (checked above).
        unsafe {
            std::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.dst.as_ptr().add(self.got),
                bytes.len(),
            )
        };
        self.got += bytes.len();
    }

    /// Where the next bytes go, for a read straight into place: [`Placing::missing`] bytes
    /// there may be written, then [`Placing::advance`] by what was.
    pub(crate) fn next_ptr(&mut self) -> *mut u8 {
        // SAFETY: `got <= want`, so at most one past the lent range.
        unsafe { self.dst.as_ptr().add(self.got) }
    }

    /// Records `n` bytes written at [`Placing::next_ptr`] (at most [`Placing::missing`]).
    pub(crate) fn advance(&mut self, n: usize) {
        assert!(n <= self.missing(), "more bytes than the message has");
        self.got += n;
    }

    /// The message to deliver now that all its bytes are in place (empty: none).
    pub(crate) fn into_notice(self) -> Vec<u8> {
        debug_assert_eq!(self.missing(), 0);
        self.notice
    }
}
