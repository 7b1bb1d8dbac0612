//! Large all-reduces and all-to-alls on mapped memory, where the single copy between
//! processes (`cma.rs`) is refused: under `hw` with every rank on this node, each rank has a
//! symmetric scratch segment. An all-reduce puts its data in its scratch, reduces its chunk
//! reading every rank's scratch, leaves the result there, and reads the other chunks back;
//! an all-to-all writes each block straight into its receiver's scratch and reads what
//! arrived in its own. No message per byte: the medium messages of the AM path cost a copy
//! into a mailbox and one out.

use super::{combine_in_order, copy_pod, reduce_chunk};
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
        let bytes = std::mem::size_of_val(data);
        let Some(scratch) = self.mapped_scratch(bytes, bytes)? else {
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
        copy_pod(&mut data[mine], &acc);
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
    /// through mapped memory; `Ok(false)`, having done nothing, where it does not apply. Each
    /// rank writes its block for rank j straight into j's scratch, in the half of this call's
    /// parity, and after one barrier reads what arrived in its own.
    pub(super) fn mapped_all_to_all<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<bool> {
        let bytes = std::mem::size_of_val(send);
        let Some(scratch) = self.mapped_scratch(bytes, 2 * bytes)? else {
            return Ok(false);
        };
        let (me, p) = (self.me, self.procs);
        let n = send.len() / p;
        let block = n * std::mem::size_of::<T>();
        let call = self.mapped_all_to_alls.get();
        self.mapped_all_to_alls.set(call + 1);
        // Halves of a fixed place (the scratch's), whatever this call's size: a rank writes
        // this half again two calls on, after the barrier of the next call, which every rank
        // enters only once it has read this call's blocks. A grown scratch is a new segment,
        // allocated when every rank has reached the call.
        let half = (call % 2) as usize * (scratch.len() / 2);
        for k in 1..p {
            let j = (me + k) % p;
            let from = bytemuck::cast_slice(&send[j * n..(j + 1) * n]);
            self.rma.put(scratch.on(j), half + me * block, from)?;
        }
        copy_pod(&mut recv[me * n..(me + 1) * n], &send[me * n..(me + 1) * n]);
        // Every rank's blocks are in their receivers' scratch.
        self.barrier()?;
        for k in 1..p {
            let src = (me + p - k) % p;
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            self.rma.get(scratch.on(me), half + src * block, into)?;
        }
        Ok(true)
    }

    /// Whether a large collective of `bytes` may move its data on this node by itself
    /// (`hw`, every rank on this node, at least two ranks): the same answer on every rank.
    pub(super) fn mapped_applies(&self, bytes: usize) -> bool {
        // The size first: a small collective's path pays for one compare here, not a look
        // at every rank.
        bytes >= MAPPED_BYTES
            && self.strategy == Strategy::Hw
            && self.procs > 1
            && (0..self.procs).all(|r| self.rt.is_local(r))
    }

    /// The scratch (of at least `room` bytes) for a collective of `bytes`, allocated
    /// (collectively) or grown on first need; `None` where the mapped path does not apply.
    fn mapped_scratch(&self, bytes: usize, room: usize) -> Result<Option<SymmetricSegment>> {
        if !self.mapped_applies(bytes) {
            return Ok(None);
        }
        let held = *self.mapped_scratch.borrow();
        if let Some(seg) = held {
            if seg.len() >= room {
                return Ok(Some(seg));
            }
            *self.mapped_scratch.borrow_mut() = None;
            self.rma.free_symmetric(seg);
        }
        // Every rank asks for the same length and learns the same outcome.
        match self
            .rma
            .alloc_symmetric(room.next_power_of_two(), Perms::READ | Perms::WRITE)
        {
            Ok(seg) => {
                *self.mapped_scratch.borrow_mut() = Some(seg);
                Ok(Some(seg))
            }
            Err(_) => Ok(None),
        }
    }
}
