//! Collectives, written once on Active Messages: every rank counts its collective calls
//! (the epoch), and each message of a collective is a parcel (epoch, step, source) delivered
//! into the receiver's mailbox. Algorithms are chosen for latency at small sizes
//! (dissemination barrier, binomial trees, recursive doubling) and for bandwidth at large
//! ones (all-reduce as a direct reduce-scatter and all-gather, so every byte crosses once
//! each way and no rank waits on a chain of others).
//!
//! Every parcel says which collective sent it and how many bytes it has, so ranks that call
//! different collectives, or one with different sizes or roots, get
//! [`GlobalError::CollectiveMismatch`] instead of wrong data.

use crate::error::{GlobalError, Result};
use crate::global::Global;
use crate::handlers::FAST_WORDS;
use crate::reduce::{Op, Reducible};
use bytemuck::Pod;
use std::sync::atomic::Ordering;
use std::sync::PoisonError;
use volley::copy::copy_bytes;

/// Evaluates `$body` with `$f` bound to `$t::combine` of the operator `$op` made a constant:
/// one instance per operator, so the combining loops vectorize, where a match per element
/// keeps them scalar (a third of a 1 MiB all-reduce's time on 2 ranks).
macro_rules! with_op {
    ($op:expr, $t:ty, |$f:ident| $body:expr) => {
        match $op {
            Op::Sum => {
                let $f = |a, b| <$t>::combine(Op::Sum, a, b);
                $body
            }
            Op::Min => {
                let $f = |a, b| <$t>::combine(Op::Min, a, b);
                $body
            }
            Op::Max => {
                let $f = |a, b| <$t>::combine(Op::Max, a, b);
                $body
            }
        }
    };
}

mod cma;
mod direct;
mod hub;
mod mailbox;
mod mapped;
mod parcels;
mod ring;
mod what;

pub(crate) use cma::CmaPeers;
pub(crate) use direct::DirectLanes;
pub(crate) use hub::Hub;
pub(crate) use mailbox::Mailbox;
use parcels::*;
pub(crate) use ring::BcastRing;
use what::*;

impl Global<'_> {
    /// Every rank waits here until all have arrived (dissemination: ⌈log₂ P⌉ rounds of one
    /// short message each).
    pub fn barrier(&self) -> Result<()> {
        let epoch = self.next_epoch();
        let what = What::new(Kind::Barrier);
        if let Some(r) = self.hub_barrier(epoch, what) {
            return r;
        }
        self.dissemination_barrier(epoch, what)
    }

    /// The barrier on Active Messages: ⌈log₂ P⌉ rounds of one message each. Out of line,
    /// like every collective's general path, so that a call through the hub spans few
    /// instruction lines (see `hub_call`).
    #[inline(never)]
    fn dissemination_barrier(&self, epoch: u64, what: What) -> Result<()> {
        let p = self.procs;
        let lane = self.lane(BARRIER_LANE, 0);
        let mut dist = 1;
        let mut step = 0;
        while dist < p {
            self.send_fast(lane, (self.me + dist) % p, epoch, step, what, &[])?;
            self.recv_fast(lane, (self.me + p - dist) % p, epoch, step, what, &mut [])?;
            dist *= 2;
            step += 1;
        }
        Ok(())
    }

    /// Copies `root`'s `data` into every rank's `data` (binomial tree; small data under `hw`
    /// on one node through the broadcast ring). Every rank passes the same length.
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        self.check_rank(root)?;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Broadcast).root(root);
        if let Some(r) = self.ring_broadcast(root, epoch, what, data) {
            return r;
        }
        let p = self.procs;
        let vr = (self.me + p - root) % p;
        let mut mask = 1;
        while mask < p {
            if vr & mask != 0 {
                let parent = (vr - mask + root) % p;
                self.recv_into(parent, epoch, 0, what, data)?;
                break;
            }
            mask <<= 1;
        }
        mask >>= 1;
        while mask > 0 {
            if vr + mask < p {
                let child = (vr + mask + root) % p;
                self.send_parcel(child, epoch, 0, what, bytemuck::cast_slice(data))?;
            }
            mask >>= 1;
        }
        Ok(())
    }

    /// Element-wise reduction of every rank's `data` with a built-in operator; every rank
    /// gets the result in `data` (the same bits on every rank).
    pub fn all_reduce<T: Reducible>(&self, data: &mut [T], op: Op) -> Result<()> {
        with_op!(op, T, |f| self.all_reduce_by(data, op.code(), f))
    }

    /// [`Global::all_reduce`] of one value.
    pub fn all_reduce_one<T: Reducible>(&self, v: T, op: Op) -> Result<T> {
        let mut d = [v];
        self.all_reduce(&mut d, op)?;
        Ok(d[0])
    }

    /// Element-wise reduction with a user operator `f`, which must be associative and
    /// commutative (it is applied in an order that depends on the rank count).
    pub fn all_reduce_with<T: Pod>(&self, data: &mut [T], f: impl Fn(T, T) -> T) -> Result<()> {
        self.all_reduce_by(data, USER_OP, f)
    }

    fn all_reduce_by<T: Pod>(&self, data: &mut [T], op: u8, f: impl Fn(T, T) -> T) -> Result<()> {
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::AllReduce).op(op);
        if self.procs == 1 {
            return Ok(());
        }
        if let Some(r) = self.hub_all_reduce(epoch, what, data, &f) {
            return r;
        }
        self.all_reduce_general(epoch, what, data, &f)
    }

    /// The all-reduce where the hub does not serve: recursive doubling for small data, else
    /// the large paths. Out of line (see [`Global::dissemination_barrier`]).
    #[inline(never)]
    fn all_reduce_general<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Result<()> {
        if std::mem::size_of_val(data) <= SMALL_REDUCE || data.len() < self.procs {
            self.recursive_doubling(epoch, what, data, f)
        } else if self.cma_all_reduce(epoch, what, data, f)? || self.mapped_all_reduce(data, f)? {
            Ok(())
        } else {
            self.reduce_scatter_gather(epoch, what, data, f)
        }
    }

    /// Recursive doubling; ranks beyond the largest power of two first fold into a partner
    /// and get the result back at the end. Operands are always combined lower ranks first,
    /// so every rank computes the same tree.
    fn recursive_doubling<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Result<()> {
        let (me, p) = (self.me, self.procs);
        let pof2 = 1 << (usize::BITS - 1 - p.leading_zeros());
        let rem = p - pof2;
        let lane = self.lane(REDUCE_LANE, std::mem::size_of_val(data));
        // The partner's data: on the stack when it fits a fast-lane message (no allocation on
        // a small all-reduce's path).
        let mut stack = [0u64; FAST_WORDS];
        let mut heap = Vec::new();
        let bytes = std::mem::size_of_val(data);
        let theirs: &mut [T] = match bytemuck::try_cast_slice_mut(
            &mut bytemuck::cast_slice_mut::<u64, u8>(&mut stack)[..bytes.min(FAST_WORDS * 8)],
        ) {
            Ok(t) if bytes <= FAST_WORDS * 8 && t.len() == data.len() => t,
            _ => {
                heap.resize(data.len(), T::zeroed());
                &mut heap
            }
        };
        // Fold: among the first 2·rem ranks, even ranks hand their data to the next one.
        let newrank = if me < 2 * rem {
            if me % 2 == 0 {
                self.send_fast(lane, me + 1, epoch, 0, what, bytemuck::cast_slice(data))?;
                None
            } else {
                self.recv_fast(
                    lane,
                    me - 1,
                    epoch,
                    0,
                    what,
                    bytemuck::cast_slice_mut(theirs),
                )?;
                fold_under(theirs, data, f);
                Some(me / 2)
            }
        } else {
            Some(me - rem)
        };
        if let Some(nr) = newrank {
            let mut mask = 1;
            let mut step = 1;
            while mask < pof2 {
                let np = nr ^ mask;
                let partner = if np < rem { np * 2 + 1 } else { np + rem };
                self.send_fast(lane, partner, epoch, step, what, bytemuck::cast_slice(data))?;
                self.recv_fast(
                    lane,
                    partner,
                    epoch,
                    step,
                    what,
                    bytemuck::cast_slice_mut(theirs),
                )?;
                if partner < me {
                    fold_under(theirs, data, f);
                } else {
                    fold(data, theirs, f);
                }
                mask <<= 1;
                step += 1;
            }
        }
        // Unfold.
        if me < 2 * rem {
            if me % 2 == 1 {
                self.send_fast(
                    lane,
                    me - 1,
                    epoch,
                    UNFOLD_STEP,
                    what,
                    bytemuck::cast_slice(data),
                )?;
            } else {
                self.recv_fast(
                    lane,
                    me + 1,
                    epoch,
                    UNFOLD_STEP,
                    what,
                    bytemuck::cast_slice_mut(data),
                )?;
            }
        }
        Ok(())
    }

    /// Rank j reduces chunk j of every rank's data (in rank order), then sends it to all.
    fn reduce_scatter_gather<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Result<()> {
        let (me, p) = (self.me, self.procs);
        let len = data.len();
        let chunk = |j: usize| reduce_chunk(len, p, j);
        for k in 1..p {
            let j = (me + k) % p;
            self.send_parcel(j, epoch, 0, what, bytemuck::cast_slice(&data[chunk(j)]))?;
        }
        let mine = chunk(me);
        let mut acc: Vec<T> = Vec::new();
        let mut theirs = vec![T::zeroed(); mine.len()];
        for src in 0..p {
            let part: &[T] = if src == me {
                &data[mine.clone()]
            } else {
                self.recv_into(src, epoch, 0, what, &mut theirs)?;
                &theirs
            };
            if src == 0 {
                acc.extend_from_slice(part);
            } else {
                fold(&mut acc, part, f);
            }
        }
        copy_pod(&mut data[mine.clone()], &acc);
        for k in 1..p {
            let j = (me + k) % p;
            self.send_parcel(j, epoch, 1, what, bytemuck::cast_slice(&acc))?;
        }
        for k in 1..p {
            let src = (me + p - k) % p;
            self.recv_into(src, epoch, 1, what, &mut data[chunk(src)])?;
        }
        Ok(())
    }

    /// Reduces every rank's `data` into `root`'s `data` (binomial tree; other ranks' `data`
    /// is left as it was).
    pub fn reduce<T: Reducible>(&self, root: usize, data: &mut [T], op: Op) -> Result<()> {
        with_op!(op, T, |f| self.reduce_by(root, data, op, f))
    }

    fn reduce_by<T: Pod>(
        &self,
        root: usize,
        data: &mut [T],
        op: Op,
        f: impl Fn(T, T) -> T,
    ) -> Result<()> {
        self.check_rank(root)?;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Reduce).root(root).op(op.code());
        let p = self.procs;
        let vr = (self.me + p - root) % p;
        let mut acc = data.to_vec();
        let mut theirs = vec![T::zeroed(); data.len()];
        let mut mask = 1;
        while mask < p {
            if vr & mask != 0 {
                let parent = (vr - mask + root) % p;
                self.send_parcel(parent, epoch, 0, what, bytemuck::cast_slice(&acc))?;
                return Ok(());
            }
            if vr + mask < p {
                let child = (vr + mask + root) % p;
                self.recv_into(child, epoch, 0, what, &mut theirs)?;
                fold(&mut acc, &theirs, &f);
            }
            mask <<= 1;
        }
        copy_pod(data, &acc);
        Ok(())
    }

    /// Inclusive prefix reduction: rank r gets `data₀ op … op data_r` (Hillis–Steele, in rank
    /// order, so the operator need not commute).
    pub fn scan<T: Reducible>(&self, data: &mut [T], op: Op) -> Result<()> {
        with_op!(op, T, |f| self.scan_by(data, op.code(), f))
    }

    /// Exclusive prefix reduction: rank r gets `data₀ op … op data_{r-1}`, rank 0 gets
    /// `identity` in every element.
    pub fn exclusive_scan<T: Reducible>(&self, data: &mut [T], op: Op, identity: T) -> Result<()> {
        self.scan(data, op)?;
        // Inclusive minus this rank's own contribution, by shifting: send to the next rank.
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Scan).op(op.code());
        let (me, p) = (self.me, self.procs);
        if me + 1 < p {
            self.send_parcel(me + 1, epoch, 0, what, bytemuck::cast_slice(data))?;
        }
        if me == 0 {
            data.fill(identity);
        } else {
            self.recv_into(me - 1, epoch, 0, what, data)?;
        }
        Ok(())
    }

    /// Inclusive scan with a user operator (associative; applied in rank order).
    pub fn scan_with<T: Pod>(&self, data: &mut [T], f: impl Fn(T, T) -> T) -> Result<()> {
        self.scan_by(data, USER_OP, f)
    }

    fn scan_by<T: Pod>(&self, data: &mut [T], op: u8, f: impl Fn(T, T) -> T) -> Result<()> {
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Scan).op(op);
        let (me, p) = (self.me, self.procs);
        let mut theirs = vec![T::zeroed(); data.len()];
        let mut dist = 1;
        let mut step = 0;
        while dist < p {
            if me + dist < p {
                self.send_parcel(me + dist, epoch, step, what, bytemuck::cast_slice(data))?;
            }
            if me >= dist {
                self.recv_into(me - dist, epoch, step, what, &mut theirs)?;
                fold_under(&theirs, data, &f);
            }
            dist *= 2;
            step += 1;
        }
        Ok(())
    }

    /// Gathers every rank's `mine` into `root`'s `out`, by rank (`out.len()` must be
    /// `PROCS · mine.len()` on the root; other ranks may pass an empty slice).
    pub fn gather<T: Pod>(&self, root: usize, mine: &[T], out: &mut [T]) -> Result<()> {
        self.check_rank(root)?;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Gather).root(root);
        let n = mine.len();
        if self.me != root {
            return self.send_parcel(root, epoch, 0, what, bytemuck::cast_slice(mine));
        }
        self.check_out("gather", out.len(), n * self.procs)?;
        for src in 0..self.procs {
            let dst = &mut out[src * n..(src + 1) * n];
            if src == root {
                copy_pod(dst, mine);
            } else {
                self.recv_into(src, epoch, 0, what, dst)?;
            }
        }
        Ok(())
    }

    /// Every rank gets every rank's `mine` in `out`, by rank (`out.len() = PROCS · mine.len()`).
    pub fn all_gather<T: Pod>(&self, mine: &[T], out: &mut [T]) -> Result<()> {
        let n = mine.len();
        self.check_out("all_gather", out.len(), n * self.procs)?;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::AllGather);
        let (me, p) = (self.me, self.procs);
        for k in 1..p {
            self.send_parcel((me + k) % p, epoch, 0, what, bytemuck::cast_slice(mine))?;
        }
        copy_pod(&mut out[me * n..(me + 1) * n], mine);
        for k in 1..p {
            let src = (me + p - k) % p;
            self.recv_into(src, epoch, 0, what, &mut out[src * n..(src + 1) * n])?;
        }
        Ok(())
    }

    /// Personalized exchange: block j of `send` (blocks of `send.len() / PROCS`) goes to
    /// rank j, and block i of `recv` comes from rank i.
    pub fn all_to_all<T: Pod>(&self, send: &[T], recv: &mut [T]) -> Result<()> {
        let p = self.procs;
        if send.len() != recv.len() || send.len() % p != 0 {
            return Err(GlobalError::BadArguments(format!(
                "all_to_all: send ({}) and receive ({}) buffers must have the same length, a multiple of PROCS = {p}",
                send.len(),
                recv.len()
            )));
        }
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::AllToAll);
        if let Some(r) = self.hub_all_to_all(epoch, what, send, recv) {
            return r;
        }
        self.all_to_all_general(epoch, what, send, recv)
    }

    /// The all-to-all where the hub does not serve. Out of line (see
    /// [`Global::dissemination_barrier`]).
    #[inline(never)]
    fn all_to_all_general<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        send: &[T],
        recv: &mut [T],
    ) -> Result<()> {
        let (me, p) = (self.me, self.procs);
        let n = send.len() / p;
        // Checked here first: a small all-to-all's path then calls neither large path.
        let large = self.mapped_applies(std::mem::size_of_val(send));
        if large
            && (self.cma_all_to_all(epoch, what, send, recv)?
                || self.mapped_all_to_all(send, recv)?)
        {
            return Ok(());
        }
        // Step k of a small all-to-all is the message from rank me - k: the fast lane's rule
        // (one sender per step) holds. Larger blocks go through the mailbox, all at step 0.
        let block = n * std::mem::size_of::<T>();
        let lane = self.lane(ALLTOALL_LANE, block);
        let fast = matches!(lane, Lane::Fast { .. });
        for k in 1..p {
            let j = (me + k) % p;
            let step = if fast { k as u64 } else { 0 };
            let bytes = bytemuck::cast_slice(&send[j * n..(j + 1) * n]);
            self.send_fast(lane, j, epoch, step, what, bytes)?;
        }
        copy_pod(&mut recv[me * n..(me + 1) * n], &send[me * n..(me + 1) * n]);
        for k in 1..p {
            let src = (me + p - k) % p;
            let step = if fast { k as u64 } else { 0 };
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            self.recv_fast(lane, src, epoch, step, what, into)?;
        }
        Ok(())
    }

    /// Personalized exchange of varying sizes: `counts[j]` elements of `send` (in order) go
    /// to rank j. Returns what arrived, by source rank, and how many came from each.
    pub fn all_to_all_v<T: Pod>(
        &self,
        send: &[T],
        counts: &[usize],
    ) -> Result<(Vec<T>, Vec<usize>)> {
        let p = self.procs;
        if counts.len() != p || counts.iter().sum::<usize>() != send.len() {
            return Err(GlobalError::BadArguments(format!(
                "all_to_all_v: {} counts summing to {} for {} elements; need PROCS = {p} counts summing to the send length",
                counts.len(),
                counts.iter().sum::<usize>(),
                send.len()
            )));
        }
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::AllToAllV);
        let me = self.me;
        let starts: Vec<usize> = counts
            .iter()
            .scan(0, |s, &c| {
                let start = *s;
                *s += c;
                Some(start)
            })
            .collect();
        for k in 1..p {
            let j = (me + k) % p;
            let block = &send[starts[j]..starts[j] + counts[j]];
            self.send_parcel(j, epoch, 0, what, bytemuck::cast_slice(block))?;
        }
        let size = std::mem::size_of::<T>().max(1);
        let mut blocks: Vec<Vec<u8>> = vec![Vec::new(); p];
        blocks[me] = bytemuck::cast_slice(&send[starts[me]..starts[me] + counts[me]]).to_vec();
        for k in 1..p {
            let src = (me + p - k) % p;
            let data = self.recv_parcel(src, epoch, 0, what, None)?;
            if data.len() % size != 0 {
                return Err(GlobalError::CollectiveMismatch {
                    epoch,
                    me,
                    rank: src,
                    mine: What::describe(what.code()),
                    theirs: format!("a block of {} bytes", data.len()),
                });
            }
            blocks[src] = data;
        }
        let got: Vec<usize> = blocks.iter().map(|b| b.len() / size).collect();
        let mut out = vec![T::zeroed(); got.iter().sum()];
        let mut at = 0;
        for b in blocks {
            let n = b.len() / size;
            copy_bytes(bytemuck::cast_slice_mut::<T, u8>(&mut out[at..at + n]), &b);
            at += n;
            self.shared.mailbox.recycle(b);
        }
        Ok((out, got))
    }

    fn check_out(&self, what: &str, have: usize, need: usize) -> Result<()> {
        if have != need {
            return Err(GlobalError::BadArguments(format!(
                "{what}: the receive buffer has {have} elements; PROCS x the contribution is {need}"
            )));
        }
        Ok(())
    }

    /// Collective: returns on every rank once every store (and push) issued anywhere before
    /// the call is in its target's memory (Split-C's `all_store_sync`). Refused stores are an
    /// error on every rank, naming a rank that refused them.
    pub fn all_store_sync(&self) -> Result<()> {
        let sent: Vec<u64> = self.stored_to.iter().map(std::cell::Cell::get).collect();
        let mut expected_from = vec![0u64; self.procs];
        self.all_to_all(&sent, &mut expected_from)?;
        let expected: u64 = expected_from.iter().sum();
        self.wait_for(|| self.stored_bytes() >= expected, &|| {
            format!(
                "all_store_sync: {} of {expected} bytes stored here have arrived",
                self.stored_bytes()
            )
        });
        // Everyone's stores are in at their targets; exchanging refusal counts is the final
        // barrier and tells every rank of any refusal.
        let refused = self
            .shared
            .store_refused
            .load(std::sync::atomic::Ordering::Relaxed);
        let first = self
            .shared
            .store_first_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .map_or(0, |w| w.0);
        let mut all = vec![[0u64; 2]; self.procs];
        self.all_gather(&[[refused, first]], &mut all)?;
        let mut reported = self.refusals_reported.borrow_mut();
        let mut err = None;
        for (rank, [count, code]) in all.iter().copied().enumerate() {
            let new = count - reported[rank];
            if new > 0 && err.is_none() {
                let reason = volley::rma::Refusal::from_code(code, 0, 0, 0)
                    .unwrap_or(volley::rma::Refusal::NoSuchSegment);
                err = Some(GlobalError::StoreRefused {
                    rank,
                    count: new,
                    reason,
                });
            }
            reported[rank] = count;
        }
        if refused > self.local_refusals_reported.get() {
            self.local_refusals_reported.set(refused);
            self.shared
                .store_first_refusal
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take();
        }
        err.map_or(Ok(()), Err)
    }
}

/// The elements of a `len`-element all-reduce that rank `j` of `p` reduces: `len / p` each,
/// the first `len % p` ranks one more.
/// `dst.copy_from_slice(src)` at full speed whatever the two blocks' relative alignment
/// ([`volley::copy`]): large collectives copy blocks between buffers a program allocated one
/// after the other, the slow case of this CPU family's `rep movsb`.
fn copy_pod<T: Pod>(dst: &mut [T], src: &[T]) {
    copy_bytes(bytemuck::cast_slice_mut(dst), bytemuck::cast_slice(src));
}

fn reduce_chunk(len: usize, p: usize, j: usize) -> std::ops::Range<usize> {
    let (base, extra) = (len / p, len % p);
    let start = j * base + j.min(extra);
    start..start + base + usize::from(j < extra)
}

/// Folds rank `src`'s `part` into `acc`, ranks taken in order from 0 (rank 0's part starts
/// the accumulation), so every path combines the same operands in the same order.
fn combine_in_order<T: Pod>(src: usize, acc: &mut [T], part: &[T], f: &impl Fn(T, T) -> T) {
    if src == 0 {
        acc.copy_from_slice(part);
    } else {
        fold(acc, part, f);
    }
}

/// `acc = f(acc, part)` element by element: `part` holds the operands of higher ranks.
fn fold<T: Pod>(acc: &mut [T], part: &[T], f: &impl Fn(T, T) -> T) {
    for (a, b) in acc.iter_mut().zip(part) {
        *a = f(*a, *b);
    }
}

/// `acc = f(lower, acc)` element by element: `lower` holds the operands of lower ranks.
fn fold_under<T: Pod>(lower: &[T], acc: &mut [T], f: &impl Fn(T, T) -> T) {
    for (a, l) in acc.iter_mut().zip(lower) {
        *a = f(*l, *a);
    }
}
