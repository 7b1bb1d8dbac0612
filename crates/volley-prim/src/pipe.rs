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
    data: *mut u8,
    tail_word: *const AtomicU64,
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
        let (data, tail_word, limit) = match l.backend {
            Backend::Mapped(p) => (p.data(), p.tail() as *const AtomicU64, l.head + self.cap),
            Backend::Remote(_) => (std::ptr::null_mut(), std::ptr::null(), l.tail),
        };
        Ok(Pipe {
            prim: self,
            rank,
            data,
            tail_word,
            mask: self.cap - 1,
            tail: l.tail,
            limit,
            first: l.tail,
            error: None,
            open: true,
        })
    }

    /// `pipe_get` for one word: receives the next 8 bytes of the network buffer.
    pub fn pipe_get_u64(&self) -> Result<u64> {
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
        if self.tail == self.limit {
            return self.put_slow(w);
        }
        // SAFETY: `tail < limit = head + capacity`, so the slot is free (the receiver has
        // consumed it) and ours while we hold the link; `data + (tail & mask)` is a word of
        // the mapped ring.
        unsafe {
            self.data
                .add((self.tail & self.mask) as usize)
                .cast::<u64>()
                .write(w)
        };
        self.tail += 8;
        // SAFETY: the ring's TAIL word, mapped while the link is held. Release publishes
        // the word just stored.
        unsafe { (*self.tail_word).store(self.tail, Ordering::Release) };
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
        if self.data.is_null() {
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
        if !self.data.is_null() {
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
