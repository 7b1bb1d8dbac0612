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
use std::sync::{Mutex, PoisonError};

/// Collective messages that have arrived, whole or in part.
#[derive(Debug, Default)]
pub(crate) struct Mailbox {
    parcels: Mutex<Vec<Parcel>>,
    /// Buffers of parcels already read, for the next ones: large collectives then reuse
    /// memory whose pages are in, instead of faulting fresh pages in on every call.
    pool: Mutex<Vec<Vec<u8>>>,
}

#[derive(Debug)]
struct Parcel {
    src: usize,
    epoch: u64,
    step: u64,
    what: u64,
    total: usize,
    got: usize,
    data: Vec<u8>,
}

impl Mailbox {
    /// Files one fragment: header words (epoch, what, total, offset, step) and its bytes.
    pub(crate) fn deliver(&self, src: usize, h: [u64; 5], bytes: &[u8]) {
        let [epoch, what, total, off, step] = h;
        let mut parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        let i = match parcels
            .iter()
            .position(|p| p.src == src && p.epoch == epoch && p.step == step)
        {
            Some(i) => i,
            None => {
                parcels.push(Parcel {
                    src,
                    epoch,
                    step,
                    what,
                    total: total as usize,
                    got: 0,
                    data: self.buffer(total as usize),
                });
                parcels.len() - 1
            }
        };
        let p = &mut parcels[i];
        let range = (off as usize)..(off as usize).saturating_add(bytes.len());
        if let Some(dst) = p.data.get_mut(range) {
            dst.copy_from_slice(bytes);
            p.got += bytes.len();
        } else {
            // Cannot be placed: make the parcel complete and mismatched so the receiver
            // reports it.
            p.what = u64::MAX;
            p.got = p.total;
        }
    }

    /// What collective a parcel of call `epoch` belongs to, if one has arrived (for mismatch
    /// diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        let parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        parcels
            .iter()
            .find(|p| p.epoch == epoch)
            .map(|p| (p.what, p.src))
    }

    fn ready(&self, src: usize, epoch: u64, step: u64) -> bool {
        let parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        parcels
            .iter()
            .any(|p| p.src == src && p.epoch == epoch && p.step == step && p.got >= p.total)
    }

    /// A buffer of `len` bytes, recycled when one is free.
    fn buffer(&self, len: usize) -> Vec<u8> {
        let mut v = self
            .pool
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        v.clear();
        v.resize(len, 0);
        v
    }

    /// Returns a parcel's buffer for reuse (a bounded number are kept).
    pub(crate) fn recycle(&self, v: Vec<u8>) {
        const KEEP: usize = 64;
        let mut pool = self.pool.lock().unwrap_or_else(PoisonError::into_inner);
        if pool.len() < KEEP && v.capacity() <= 64 << 20 {
            pool.push(v);
        }
    }

    fn take(&self, src: usize, epoch: u64, step: u64) -> Option<Parcel> {
        let mut parcels = self.parcels.lock().unwrap_or_else(PoisonError::into_inner);
        let i = parcels
            .iter()
            .position(|p| p.src == src && p.epoch == epoch && p.step == step)?;
        Some(parcels.swap_remove(i))
    }
}

/// Which collective a parcel belongs to: kind, root, element size and operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct What {
    kind: Kind,
    root: u32,
    elem: u16,
    op: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum Kind {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    AllReduce = 4,
    Scan = 5,
    Gather = 6,
    AllGather = 7,
    AllToAll = 8,
    AllToAllV = 9,
}

impl What {
    fn new(kind: Kind) -> Self {
        Self {
            kind,
            root: 0,
            elem: 0,
            op: 0,
        }
    }

    fn of<T>(kind: Kind) -> Self {
        Self {
            elem: std::mem::size_of::<T>() as u16,
            ..Self::new(kind)
        }
    }

    fn root(mut self, root: usize) -> Self {
        self.root = root as u32;
        self
    }

    fn op(mut self, op: u8) -> Self {
        self.op = op;
        self
    }

    fn code(self) -> u64 {
        self.kind as u64
            | (self.op as u64) << 8
            | (self.elem as u64) << 16
            | (self.root as u64) << 32
    }

    fn describe(code: u64) -> String {
        if code == u64::MAX {
            return "a parcel that does not fit its announced size".into();
        }
        let kind = match code & 0xff {
            1 => "barrier",
            2 => "broadcast",
            3 => "reduce",
            4 => "all_reduce",
            5 => "scan",
            6 => "gather",
            7 => "all_gather",
            8 => "all_to_all",
            9 => "all_to_all_v",
            _ => "an unknown collective",
        };
        let (op, elem, root) = ((code >> 8) & 0xff, (code >> 16) & 0xffff, code >> 32);
        let mut s = kind.to_string();
        if elem != 0 {
            s += &format!(" of {elem}-byte elements");
        }
        if op != 0 {
            s += &format!(" with operator #{op}");
        }
        if matches!(code & 0xff, 2 | 3 | 6) {
            s += &format!(" rooted at {root}");
        }
        s
    }
}

/// Where a latency-bound collective's messages travel.
#[derive(Debug, Clone, Copy)]
enum Lane {
    /// The mailbox (data larger than a short message).
    Mailbox,
    /// Fast slots of lane `lane`, call number `seq` of that lane.
    Fast { lane: u64, seq: u64 },
}

/// The fast lane of barriers.
const BARRIER_LANE: u64 = 0;
/// The fast lane of small all-reduces.
const REDUCE_LANE: u64 = 1;
/// The step of recursive doubling's unfold (the last slot of a lane).
const UNFOLD_STEP: u64 = 63;

/// Reduces by a user closure: operator code 255.
const USER_OP: u8 = 255;
/// Reductions up to this size use recursive doubling; larger ones reduce-scatter and gather.
const SMALL_REDUCE: usize = 16 << 10;

impl Global<'_> {
    fn next_epoch(&self) -> u64 {
        let e = self.epoch.get();
        self.epoch.set(e + 1);
        e
    }

    /// Sends one parcel (fragmented into medium messages); to itself, straight into the
    /// mailbox.
    fn send_parcel(
        &self,
        dest: usize,
        epoch: u64,
        step: u64,
        what: What,
        bytes: &[u8],
    ) -> Result<()> {
        let total = bytes.len() as u64;
        if dest == self.me {
            self.shared
                .mailbox
                .deliver(self.me, [epoch, what.code(), total, 0, step], bytes);
            return Ok(());
        }
        let frag = self.rt.max_medium();
        let n = bytes.len().div_ceil(frag).max(1);
        for i in 0..n {
            let start = (i * frag).min(bytes.len());
            let piece = &bytes[start..(start + frag).min(bytes.len())];
            let h = [epoch, what.code(), total, start as u64, step];
            self.rt.request_medium(dest, self.h.coll, &h, piece)?;
        }
        Ok(())
    }

    /// Receives the parcel of `src` for (epoch, step), checking that it comes from the same
    /// collective and, when `len` is given, has that many bytes.
    fn recv_parcel(
        &self,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        len: Option<usize>,
    ) -> Result<Vec<u8>> {
        let mb = &self.shared.mailbox;
        let lanes = &self.shared.lanes;
        let (mut polls, mut elsewhere) = (0u32, None);
        let cond = || {
            if mb.ready(src, epoch, step) {
                return true;
            }
            polls = polls.wrapping_add(1);
            // Now and then: has the other rank called a fast-lane collective at this epoch?
            if polls % 4096 == 0 {
                elsewhere = lanes.iter().find_map(|l| l.what_of(epoch));
            }
            elsewhere.is_some()
        };
        self.wait_for(cond, &|| {
            format!(
                "rank {src} in collective #{epoch} ({}, step {step}); a rank that never \
                     calls it, or calls another, keeps every other rank here",
                What::describe(what.code())
            )
        });
        if let Some((theirs, rank)) = elsewhere.filter(|_| !mb.ready(src, epoch, step)) {
            return Err(GlobalError::CollectiveMismatch {
                epoch,
                me: self.me,
                rank,
                mine: What::describe(what.code()),
                theirs: What::describe(theirs),
            });
        }
        let p = mb.take(src, epoch, step).expect("ready parcel");
        if p.what != what.code() || len.is_some_and(|l| l != p.total) {
            let mine = What::describe(what.code())
                + &len.map_or(String::new(), |l| format!(" ({l} bytes per message)"));
            let theirs = What::describe(p.what) + &format!(" ({} bytes per message)", p.total);
            return Err(GlobalError::CollectiveMismatch {
                epoch,
                me: self.me,
                rank: src,
                mine,
                theirs,
            });
        }
        Ok(p.data)
    }

    fn recv_into<T: Pod>(
        &self,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        dst: &mut [T],
    ) -> Result<()> {
        let data = self.recv_parcel(src, epoch, step, what, Some(std::mem::size_of_val(dst)))?;
        bytemuck::cast_slice_mut::<T, u8>(dst).copy_from_slice(&data);
        self.shared.mailbox.recycle(data);
        Ok(())
    }

    /// Sends one step's message of a latency-bound collective on `lane`: one short message,
    /// its data inline.
    fn send_fast(
        &self,
        lane: Lane,
        dest: usize,
        epoch: u64,
        step: u64,
        what: What,
        bytes: &[u8],
    ) -> Result<()> {
        let Lane::Fast { lane, seq } = lane else {
            return self.send_parcel(dest, epoch, step, what, bytes);
        };
        let mut args = [0u64; 4 + FAST_WORDS];
        args[0] = lane | step << 8 | (bytes.len() as u64) << 16;
        args[1] = seq;
        args[2] = epoch;
        args[3] = what.code();
        let words = crate::handlers::to_words(bytes, &mut args[4..]);
        self.rt
            .request_short(dest, self.h.coll_fast, &args[..4 + words])?;
        Ok(())
    }

    /// Receives one step's message of a latency-bound collective from `src` into `dst`.
    fn recv_fast(
        &self,
        lane: Lane,
        src: usize,
        epoch: u64,
        step: u64,
        what: What,
        dst: &mut [u8],
    ) -> Result<()> {
        let Lane::Fast { lane, seq } = lane else {
            return self.recv_into(src, epoch, step, what, dst);
        };
        let slot = self.shared.lanes[lane as usize].slot(step, seq);
        let mut polls = 0u32;
        let mut elsewhere = None;
        let mb = &self.shared.mailbox;
        self.wait_for(
            || {
                if slot.seq.load(Ordering::Acquire) == seq + 1 {
                    return true;
                }
                polls = polls.wrapping_add(1);
                // Now and then: has another rank called another collective at this epoch?
                if polls % 4096 == 0 {
                    let lanes = &self.shared.lanes;
                    elsewhere = mb.what_of(epoch).or_else(|| {
                        (0..lanes.len() as u64)
                            .filter(|&l| l != lane)
                            .find_map(|l| lanes[l as usize].what_of(epoch))
                    });
                }
                elsewhere.is_some()
            },
            &|| {
                format!(
                    "rank {src} in collective #{epoch} ({}, step {step}); a rank that never \
                     calls it, or calls another, keeps every other rank here",
                    What::describe(what.code())
                )
            },
        );
        let mismatch = |rank: usize, theirs: String| GlobalError::CollectiveMismatch {
            epoch,
            me: self.me,
            rank,
            mine: What::describe(what.code()) + &format!(" ({} bytes per message)", dst.len()),
            theirs,
        };
        if let Some((theirs, rank)) = elsewhere {
            return Err(mismatch(rank, What::describe(theirs)));
        }
        let (e, w, len) = (
            slot.epoch.load(Ordering::Relaxed),
            slot.what.load(Ordering::Relaxed),
            slot.len.load(Ordering::Relaxed) as usize,
        );
        if e != epoch || w != what.code() || len != dst.len() {
            return Err(mismatch(
                src,
                What::describe(w) + &format!(" ({len} bytes per message)"),
            ));
        }
        let words: Vec<u64> = slot.words[..len.div_ceil(8)]
            .iter()
            .map(|x| x.load(Ordering::Relaxed))
            .collect();
        crate::handlers::from_words(&words, dst);
        Ok(())
    }

    /// The lane of the next call of a latency-bound collective of `bytes` per message:
    /// `lane`'s fast slots when the data fits one short message, else the mailbox.
    fn lane(&self, lane: u64, bytes: usize) -> Lane {
        if bytes > FAST_WORDS * 8 {
            return Lane::Mailbox;
        }
        let counter = &self.fast_calls[lane as usize];
        let seq = counter.get();
        counter.set(seq + 1);
        Lane::Fast { lane, seq }
    }

    /// Every rank waits here until all have arrived (dissemination: ⌈log₂ P⌉ rounds of one
    /// short message each).
    pub fn barrier(&self) -> Result<()> {
        let epoch = self.next_epoch();
        let what = What::new(Kind::Barrier);
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

    /// Copies `root`'s `data` into every rank's `data` (binomial tree). Every rank passes
    /// the same length.
    pub fn broadcast<T: Pod>(&self, root: usize, data: &mut [T]) -> Result<()> {
        self.check_rank(root)?;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::Broadcast).root(root);
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
        self.all_reduce_by(data, op.code(), |a, b| T::combine(op, a, b))
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
        if std::mem::size_of_val(data) <= SMALL_REDUCE || data.len() < self.procs {
            self.recursive_doubling(epoch, what, data, &f)
        } else {
            self.reduce_scatter_gather(epoch, what, data, &f)
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
        let combine = |lower: &[T], higher: &mut [T]| {
            for (h, l) in higher.iter_mut().zip(lower) {
                *h = f(*l, *h);
            }
        };
        let combine_into_lower = |lower: &mut [T], higher: &[T]| {
            for (l, h) in lower.iter_mut().zip(higher) {
                *l = f(*l, *h);
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
                combine(theirs, data);
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
                    combine(theirs, data);
                } else {
                    combine_into_lower(data, theirs);
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
        let chunk = |j: usize| {
            let (base, extra) = (len / p, len % p);
            let start = j * base + j.min(extra);
            start..start + base + usize::from(j < extra)
        };
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
                for (a, b) in acc.iter_mut().zip(part) {
                    *a = f(*a, *b);
                }
            }
        }
        data[mine.clone()].copy_from_slice(&acc);
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
                for (a, b) in acc.iter_mut().zip(&theirs) {
                    *a = T::combine(op, *a, *b);
                }
            }
            mask <<= 1;
        }
        data.copy_from_slice(&acc);
        Ok(())
    }

    /// Inclusive prefix reduction: rank r gets `data₀ op … op data_r` (Hillis–Steele, in rank
    /// order, so the operator need not commute).
    pub fn scan<T: Reducible>(&self, data: &mut [T], op: Op) -> Result<()> {
        self.scan_by(data, op.code(), |a, b| T::combine(op, a, b))
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
                for (d, t) in data.iter_mut().zip(&theirs) {
                    *d = f(*t, *d);
                }
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
                dst.copy_from_slice(mine);
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
        out[me * n..(me + 1) * n].copy_from_slice(mine);
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
        let n = send.len() / p;
        let epoch = self.next_epoch();
        let what = What::of::<T>(Kind::AllToAll);
        let me = self.me;
        for k in 1..p {
            let j = (me + k) % p;
            self.send_parcel(
                j,
                epoch,
                0,
                what,
                bytemuck::cast_slice(&send[j * n..(j + 1) * n]),
            )?;
        }
        recv[me * n..(me + 1) * n].copy_from_slice(&send[me * n..(me + 1) * n]);
        for k in 1..p {
            let src = (me + p - k) % p;
            self.recv_into(src, epoch, 0, what, &mut recv[src * n..(src + 1) * n])?;
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
            bytemuck::cast_slice_mut::<T, u8>(&mut out[at..at + n]).copy_from_slice(&b);
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
        let sent: Vec<u64> = self.stored_to.borrow().clone();
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
