//! Seed 003's pipeline fast path (Fig. 4): a channel opened once, then one word per put,
//! stored straight into the receiver's mapped buffer by inlined code.

use crate::error::{PrimError, Result};
use crate::prim::{Backend, Prim};
use crate::{Dest, Info, Source};
use std::sync::atomic::{AtomicU64, Ordering};

/// An open channel to one rank carrying one 8-byte word per put (`pipe_create` ..
/// `pipe_kill`). On a mapped link a put is: compare with the cached credit, store the word
/// at the cached tail, advance, publish the tail (a release store): no call, no size
/// dispatch, no header. Without credit, or over the network, the put goes through
/// [`Prim::send`] instead (out of line). Puts do not raise notifications; the close does.
#[derive(Debug)]
pub struct Pipe<'p, 'rt> {
    prim: &'p Prim<'rt>,
    rank: usize,
    /// The destination buffer's base (null when not mapped): TAIL and the ring's words lie
    /// at constant offsets from it.
    base: *mut u8,
    mask: u64,
    tail: u64,
    /// `tail` may grow up to here before the buffer's head must be read again.
    limit: u64,
    first: u64,
    error: Option<PrimError>,
    open: bool,
}

impl<'rt> Prim<'rt> {
    /// `pipe_create(node)`: opens a channel to `rank` (an empty chained packet), waiting
    /// while another sender's chain holds its link.
    pub fn pipe_create(&self, rank: usize) -> Result<Pipe<'_, 'rt>> {
        self.send(Dest::Rank(rank), Info::Data(&[]), true)?;
        let links = self.links.borrow();
        let l = &links[rank];
        let (base, limit) = match l.backend {
            // A head read before other senders' packets may be far behind: no credit then.
            Backend::Mapped(p) => (p.base(), (l.head + self.cap).max(l.tail)),
            Backend::Remote(_) => (std::ptr::null_mut(), l.tail),
        };
        Ok(Pipe {
            prim: self,
            rank,
            base,
            mask: self.cap - 1,
            tail: l.tail,
            limit,
            first: l.tail,
            error: None,
            open: true,
        })
    }

    /// `pipe_get` for one word: receives the next 8 bytes of the network buffer (a chained
    /// word straight from the ring when one is there, else as [`Prim::receive`]).
    #[inline]
    pub fn pipe_get_u64(&self) -> Result<u64> {
        if let Some(w) = self.net.borrow_mut().take_bare_word() {
            crate::counters::Counters::add_own(&self.counters.messages_received, 1);
            crate::counters::Counters::add_own(&self.counters.bytes_received, 8);
            return Ok(w);
        }
        let mut b = [0u8; 8];
        self.receive(Source::Network, crate::Recv::Data(&mut b))?;
        Ok(u64::from_le_bytes(b))
    }

    /// `pipe_get_float`.
    pub fn pipe_get_f64(&self) -> Result<f64> {
        self.pipe_get_u64().map(f64::from_bits)
    }
}

impl Pipe<'_, '_> {
    /// `pipe_put` of one word. An error of the out-of-line path (a failed one-sided operation
    /// to another node) is kept, later puts do nothing, and [`Pipe::close`] returns it.
    #[inline(always)]
    pub fn put_u64(&mut self, w: u64) {
        let t = self.tail;
        if t == self.limit {
            return self.put_slow(w);
        }
        // SAFETY: `t < limit = head + capacity`, so the slot is free (the receiver has
        // consumed it) and ours while we hold the link; `base + RING + (t & mask)` is a word
        // of the mapped ring.
        unsafe {
            self.base
                .add(crate::ring::RING + (t & self.mask) as usize)
                .cast::<u64>()
                .write(w)
        };
        self.tail = t + 8;
        // SAFETY: the buffer's TAIL word, mapped and aligned, while the link is held.
        // Release publishes the word just stored.
        unsafe {
            (*(self.base.add(crate::ring::TAIL) as *const AtomicU64))
                .store(t + 8, Ordering::Release)
        };
    }

    /// Two words published together (one tail store): a 2-word message, as a send of two
    /// writes to MX's mapped FIFO. Without credit for both, as two [`Pipe::put_u64`].
    #[inline(always)]
    pub fn put_2_u64(&mut self, a: u64, b: u64) {
        let t = self.tail;
        if self.limit - t < 16 {
            self.put_u64(a);
            return self.put_u64(b);
        }
        for (i, w) in [a, b].into_iter().enumerate() {
            // SAFETY: `t + 16 <= limit = head + capacity`, so both slots are free and ours
            // while we hold the link; each is a word of the mapped ring (wrapping apart).
            unsafe {
                self.base
                    .add(crate::ring::RING + ((t + 8 * i as u64) & self.mask) as usize)
                    .cast::<u64>()
                    .write(w)
            };
        }
        self.tail = t + 16;
        // SAFETY: as in `put_u64`; the release publishes both words.
        unsafe {
            (*(self.base.add(crate::ring::TAIL) as *const AtomicU64))
                .store(t + 16, Ordering::Release)
        };
    }

    /// `pipe_put_float`.
    #[inline(always)]
    pub fn put_f64(&mut self, x: f64) {
        self.put_u64(x.to_bits())
    }

    /// The rank this pipe goes to.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Without credit (or not mapped): waits for room, or sends through the library.
    #[cold]
    #[inline(never)]
    fn put_slow(&mut self, w: u64) {
        if self.error.is_some() {
            return;
        }
        if self.base.is_null() {
            if let Err(e) = self
                .prim
                .send(Dest::PreviousChain, Info::Data(&w.to_le_bytes()), true)
            {
                self.error = Some(e);
            }
            return;
        }
        self.prim.links.borrow_mut()[self.rank].tail = self.tail;
        if let Err(e) = self.prim.wait_room(self.rank, 8) {
            self.error = Some(e);
            return;
        }
        self.limit = self.prim.links.borrow()[self.rank].head + self.prim.cap;
        self.put_u64(w);
    }

    /// `pipe_kill`: closes the channel (the link is free for other senders again).
    pub fn close(mut self) -> Result<()> {
        self.finish()
    }

    fn finish(&mut self) -> Result<()> {
        if !self.open {
            return Ok(());
        }
        self.open = false;
        if !self.base.is_null() {
            self.prim.links.borrow_mut()[self.rank].tail = self.tail;
            let words = (self.tail - self.first) / 8;
            let c = &self.prim.counters;
            crate::counters::Counters::add(&c.messages_sent, words);
            crate::counters::Counters::add(&c.bytes_sent, words * 8);
            crate::counters::Counters::add(&c.ring_bytes_sent, words * 8);
        }
        let closed = self.prim.send(Dest::PreviousChain, Info::Data(&[]), false);
        match self.error.take() {
            Some(e) => Err(e),
            None => closed,
        }
    }
}

impl Drop for Pipe<'_, '_> {
    fn drop(&mut self) {
        let _ = self.finish();
    }
}
