//! Large all-reduces and all-to-alls on mapped memory: under `hw` with every rank on this
//! node, each rank puts its data in a symmetric scratch segment and the others read what they
//! need straight from it. An all-reduce reduces each rank's chunk reading every rank's
//! scratch, leaves the result there, and reads the other chunks back; an all-to-all reads its
//! block from every rank's scratch. One copy in and one read per byte, with no message per
//! byte: the medium messages of the AM path cost a copy into a mailbox and one out.

use super::{combine_in_order, reduce_chunk};
use crate::error::Result;
use crate::global::Global;
use crate::strategy::Strategy;
use bytemuck::Pod;
use volley::rma::{Perms, SymmetricSegment};

/// All-reduces and all-to-alls from this many bytes go through mapped memory when they can.
const MAPPED_BYTES: usize = 16 << 10;

impl Global<'_> {
    /// The all-reduce of `data` through mapped memory, combining chunk by chunk in rank order
    /// (as the AM path does, so both give the same bits). `Ok(false)`, having done nothing,
    /// where it does not apply: another strategy, a rank on another node, a small array, or
    /// no room for the scratch (every rank decides alike).
    pub(super) fn mapped_all_reduce<T: Pod>(
        &self,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Result<bool> {
        let Some(scratch) = self.mapped_scratch(std::mem::size_of_val(data))? else {
            return Ok(false);
        };
        let (me, p, len, size) = (self.me, self.procs, data.len(), std::mem::size_of::<T>());
        self.rma
            .put(scratch.on(me), 0, bytemuck::cast_slice(data))?;
        // Every rank's data is in its scratch.
        self.barrier()?;
        let mine = reduce_chunk(len, p, me);
        let mut acc = data[mine.clone()].to_vec();
        let mut theirs = vec![T::zeroed(); mine.len()];
        for src in 0..p {
            let part: &[T] = if src == me {
                &data[mine.clone()]
            } else {
                let at = mine.start * size;
                let into = bytemuck::cast_slice_mut(&mut theirs);
                self.rma.get(scratch.on(src), at, into)?;
                &theirs
            };
            combine_in_order(src, &mut acc, part, f);
        }
        // Only this rank reads its own chunk of its scratch: the result may go there now.
        self.rma.put(
            scratch.on(me),
            mine.start * size,
            bytemuck::cast_slice(&acc),
        )?;
        data[mine].copy_from_slice(&acc);
        // Every rank's result chunk is in its scratch.
        self.barrier()?;
        for src in (0..p).filter(|&s| s != me) {
            let c = reduce_chunk(len, p, src);
            let at = c.start * size;
            self.rma
                .get(scratch.on(src), at, bytemuck::cast_slice_mut(&mut data[c]))?;
        }
        // No rank writes its scratch again before every rank has read it.
        self.barrier()?;
        Ok(true)
    }

    /// The all-to-all of `send` into `recv` (checked by the caller: `PROCS` blocks each)
    /// through mapped memory; `Ok(false)`, having done nothing, where it does not apply.
    pub(super) fn mapped_all_to_all<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<bool> {
        let Some(scratch) = self.mapped_scratch(std::mem::size_of_val(send))? else {
            return Ok(false);
        };
        let (me, p, size) = (self.me, self.procs, std::mem::size_of::<T>());
        let n = send.len() / p;
        self.rma
            .put(scratch.on(me), 0, bytemuck::cast_slice(send))?;
        // Every rank's blocks are in its scratch.
        self.barrier()?;
        recv[me * n..(me + 1) * n].copy_from_slice(&send[me * n..(me + 1) * n]);
        for k in 1..p {
            let src = (me + k) % p;
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            self.rma.get(scratch.on(src), me * n * size, into)?;
        }
        // No rank writes its scratch again before every rank has read its block.
        self.barrier()?;
        Ok(true)
    }

    /// Whether a large collective of `bytes` may move its data on this node by itself
    /// (`hw`, every rank on this node, at least two ranks): the same answer on every rank.
    pub(super) fn mapped_applies(&self, bytes: usize) -> bool {
        let local = (0..self.procs).all(|r| self.rt.is_local(r));
        self.strategy == Strategy::Hw && bytes >= MAPPED_BYTES && local && self.procs > 1
    }

    /// The scratch for a collective of `bytes`, allocated (collectively) or grown on first
    /// need; `None` where the mapped path does not apply.
    fn mapped_scratch(&self, bytes: usize) -> Result<Option<SymmetricSegment>> {
        if !self.mapped_applies(bytes) {
            return Ok(None);
        }
        let held = *self.mapped_scratch.borrow();
        if let Some(seg) = held {
            if seg.len() >= bytes {
                return Ok(Some(seg));
            }
            *self.mapped_scratch.borrow_mut() = None;
            self.rma.free_symmetric(seg);
        }
        // Every rank asks for the same length and learns the same outcome.
        match self
            .rma
            .alloc_symmetric(bytes.next_power_of_two(), Perms::READ | Perms::WRITE)
        {
            Ok(seg) => {
                *self.mapped_scratch.borrow_mut() = Some(seg);
                Ok(Some(seg))
            }
            Err(_) => Ok(None),
        }
    }
}
