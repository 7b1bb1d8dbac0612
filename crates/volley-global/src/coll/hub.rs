//! The hub: barriers, small all-reduces and small all-to-alls of ranks that share cores
//! (every rank polite, under `hw` on one node). Each rank writes its contribution into its
//! row in rank 0's mapped memory, the call's epoch last, and waits until every row shows the
//! epoch; then it reads what it needs from every row (the rows' protocol: [`crate::hub_rows`]).
//! The rows are the only shared words a call writes: the last arrival's row reaches each
//! waiter in one cache-line transfer, with its data (a shared count of arrivals would add a
//! transfer to the writer and one back to every waiter). A rank that gets the core then has
//! nothing to wait for but the last arrival, which completes the call without waking anyone:
//! each rank needs the core about once per call, where a dissemination or recursive-doubling
//! round waits on a rank that may not have run since the last round. A waiting rank yields
//! its core only while an awaited rank needs that core (see [`Hub::elsewhere`]), so that each
//! core changes hands about once per call.

use super::combine_in_order;
use super::what::What;
use crate::error::{GlobalError, Result};
use crate::global::Global;
use crate::handlers::{from_words, to_words, FAST_WORDS};
use crate::hub_rows::{Header, Rows};
use crate::strategy::Strategy;
use bytemuck::Pod;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use volley::rma::Rma;
use volley::Runtime;

/// The hub serves jobs of up to this many ranks (a row holds a block for every rank).
const HUB_RANKS: usize = 16;
/// A CPU number that no CPU has.
const NO_CPU: u64 = u64::MAX;
/// Rounds of a call's wait before it becomes a general wait (a hand-off takes one or two, and
/// up to a few dozen spins while the other CPU hands its core over).
const QUICK_ROUNDS: u32 = 256;
/// A call's quick rounds poll for messages every this many rounds.
const POLL_ROUNDS: u32 = 4;
/// Spins in a row while every awaited rank looks elsewhere, before a yield anyway (a rank that
/// moved, or a CPU that another process took).
const QUICK_SPINS: u32 = 64;
/// Words before the rows: word 0 counts ranks that are not polite (set at attach).
const HEAD_WORDS: usize = 8;

/// Rank 0's hub, as mapped in this process.
#[derive(Debug)]
pub(crate) struct Hub {
    base: NonNull<AtomicU64>,
    procs: usize,
    /// Words of the mapping.
    words: usize,
    /// Hub calls so far (every rank counts the same).
    calls: Cell<u64>,
    /// The epoch of the last call of each parity (`None`: none yet): what a row of that
    /// parity shows until its rank arrives at the next call.
    before: [Cell<Option<u64>>; 2],
    /// The CPU each rank arrived on at the last call (`NO_CPU`: not known), kept here so
    /// that a wait does not read the rows of ranks on another CPU while they write them.
    cpus: [Cell<u64>; HUB_RANKS],
}

// SAFETY: `base` names mapped shared memory that stays valid for the job's life (the segment
// is never freed while the hub exists), only accessed through atomics.
unsafe impl Send for Hub {}

impl Hub {
    /// Allocates the hub (collectively: every rank calls it at the same place); `None`, on
    /// every rank alike, unless the strategy is `hw`, every rank is on this node, there are 2
    /// to [`HUB_RANKS`] ranks, and every rank is polite (more ranks than cores).
    pub(crate) fn new(rma: &Rma<'_>, rt: &Runtime, strategy: Strategy) -> Result<Option<Self>> {
        let p = rt.size();
        let local = (0..p).all(|r| rt.is_local(r));
        if strategy != Strategy::Hw || !local || !(2..=HUB_RANKS).contains(&p) {
            return Ok(None);
        }
        let words = HEAD_WORDS + Rows::words_for(p, FAST_WORDS);
        let bytes = words * 8;
        let seg = crate::global::zeroed_symmetric(rma, rt, bytes)?;
        let base = super::direct::map_on(rma, rt, &seg, 0, bytes, "collective hub")?;
        let hub = Self {
            base: base.cast(),
            procs: p,
            words,
            calls: Cell::new(0),
            before: [Cell::new(None), Cell::new(None)],
            cpus: std::array::from_fn(|_| Cell::new(NO_CPU)),
        };
        // Polite or not is each rank's own setting: the ranks vote, so that all choose alike.
        if !rt.is_polite() {
            hub.mapping()[0].fetch_add(1, Ordering::Relaxed);
        }
        rt.barrier();
        if hub.mapping()[0].load(Ordering::Relaxed) == 0 {
            return Ok(Some(hub));
        }
        // Every rank read the vote before any frees (the barrier orders the reads first).
        rt.barrier();
        rma.free_symmetric(seg);
        Ok(None)
    }

    fn mapping(&self) -> &[AtomicU64] {
        // SAFETY: the hub's mapping is `words` zeroed, 8-aligned words, valid for the job's
        // life and only accessed through atomics.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr(), self.words) }
    }

    fn rows(&self) -> Rows<'_> {
        Rows::new(&self.mapping()[HEAD_WORDS..], self.procs, FAST_WORDS)
    }

    /// Block `j` of rank `r`'s row of call `call`, into `dst` (blocks of `dst.len()` bytes).
    fn read_block(&self, call: u64, r: usize, j: usize, dst: &mut [u8]) {
        let rows = self.rows();
        let mut words = [0u64; FAST_WORDS];
        for (k, w) in words.iter_mut().enumerate().take(dst.len().div_ceil(8)) {
            *w = rows.block(call, r, j, dst.len(), k);
        }
        from_words(&words, dst);
    }

    /// Whether rank `r` waits for a core other than `cpu` (this rank's) when it has not
    /// arrived: true if it arrived at the last call on another CPU (the CPU it needs, if
    /// pinned, and most likely otherwise); `None` if that is not known.
    fn elsewhere(&self, r: usize, cpu: u64) -> Option<bool> {
        let before = self.cpus[r].get();
        (cpu != NO_CPU && before != NO_CPU).then_some(before != cpu)
    }

    /// What collective rank `r`'s row of a call at `epoch` belongs to, if one is here (for
    /// mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        self.rows().what_of(epoch)
    }
}

impl Global<'_> {
    /// One hub call: writes this rank's row (header, then `blocks[j]` as block j), arrives,
    /// waits for every rank and checks that all called the same collective with blocks of the
    /// same length. Returns the call number, whose rows the caller may read until it makes
    /// its next hub call.
    fn hub_call(
        &self,
        hub: &Hub,
        epoch: u64,
        what: What,
        len: usize,
        blocks: &[&[u8]],
    ) -> Result<u64> {
        let (me, p) = (self.me, self.procs);
        let call = hub.calls.get();
        hub.calls.set(call + 1);
        let rows = hub.rows();
        let stale = hub.before[call as usize & 1].replace(Some(epoch));
        for (j, block) in blocks.iter().enumerate() {
            let mut words = [0u64; FAST_WORDS];
            let n = to_words(block, &mut words);
            rows.put_block(call, me, j, len, &words[..n]);
        }
        let cpu = nix::sched::sched_getcpu().map_or(NO_CPU, |c| c as u64);
        let mine = Header {
            epoch,
            what: what.code(),
            len,
            cpu,
        };
        rows.arrive(call, me, mine);
        let (mut polls, mut elsewhere) = (0u32, None);
        let mb = &self.shared.mailbox;
        // The ranks still awaited are those whose row is not yet this call's. Spin while none
        // of them needs this CPU: a rank that waits for the other CPU gets it from the rank
        // running there, and a yield here would only pass this core to a rank that has
        // arrived and back. Yield while one needs this CPU (it shares it with this rank; or,
        // where CPUs are not known, it is not on a CPU). Only the rows of ranks that may need
        // this CPU are read: a row being written on another CPU is not pulled away from it.
        // A rank arrived once its row shows another epoch than the call two before: this
        // call's, or another that the check below refuses (a rank at another collective).
        let arrived = |r: usize| rows.epoch_of(call, r) != stale;
        let running = || {
            (0..p).all(|r| {
                r == me
                    || match hub.elsewhere(r, cpu) {
                        Some(away) => away || arrived(r),
                        None => arrived(r) || self.rt.is_running(r),
                    }
            })
        };
        // The ranks not yet seen at this call, one bit each (a row keeps this call's epoch
        // until every rank has arrived at the next call).
        let pending = Cell::new(((1u32 << p) - 1) & !(1 << me));
        let done = || {
            let mut left = pending.get();
            let mut todo = left;
            while todo != 0 {
                let r = todo.trailing_zeros() as usize;
                todo &= todo - 1;
                if arrived(r) {
                    left &= !(1 << r);
                }
            }
            pending.set(left);
            left == 0
        };
        // A call's wait is a hand-off of the cores: first a few rounds of a spin or a yield,
        // and now and then a poll, nothing else (measured 0.1-0.2 µs a call faster than the
        // runtime's general wait, whose rounds do more); a wait that outlasts them goes on in
        // that wait, which publishes it for the hang report and watches for mismatches.
        let mut spins = 0;
        for round in 1..=QUICK_ROUNDS {
            if done() {
                break;
            }
            // A hand-off usually ends the wait in its second round, with no message to
            // serve; a longer wait serves messages every few rounds (a rank may need this
            // one's reply before it can arrive).
            if round % POLL_ROUNDS == 0 {
                self.rt.poll();
                if done() {
                    break;
                }
            }
            if running() && spins < QUICK_SPINS {
                spins += 1;
                std::hint::spin_loop();
            } else {
                spins = 0;
                self.rt.yield_core();
            }
        }
        self.wait_awaiting(
            || {
                if done() {
                    return true;
                }
                polls = polls.wrapping_add(1);
                // Now and then: has another rank called a collective that does not come here?
                if polls % 4096 == 0 {
                    // (Not the hub: this rank's own row is there.)
                    elsewhere = mb
                        .what_of(epoch)
                        .or_else(|| self.lanes_what_of(epoch, None, false));
                }
                elsewhere.is_some()
            },
            running,
            &|| {
                format!(
                    "every rank in collective #{epoch} ({}); a rank that never calls it, or \
                     calls another, keeps every other rank here",
                    What::describe(what.code())
                )
            },
        );
        let mismatch = |rank: usize, theirs: String| GlobalError::CollectiveMismatch {
            epoch,
            me,
            rank,
            mine: What::describe(what.code()) + &format!(" ({len} bytes per message)"),
            theirs,
        };
        if let Some((theirs, rank)) = elsewhere {
            return Err(mismatch(rank, What::describe(theirs)));
        }
        for r in 0..p {
            let (e, theirs) = rows.header(call, r);
            if e != Some(epoch) || theirs.what != what.code() || theirs.len != len {
                return Err(mismatch(
                    r,
                    What::describe(theirs.what) + &format!(" ({} bytes per message)", theirs.len),
                ));
            }
            hub.cpus[r].set(theirs.cpu);
        }
        Ok(call)
    }

    /// The barrier through the hub; `None` where there is no hub.
    pub(super) fn hub_barrier(&self, epoch: u64, what: What) -> Option<Result<()>> {
        let hub = self.hub.as_ref()?;
        Some(self.hub_call(hub, epoch, what, 0, &[]).map(drop))
    }

    /// The all-reduce of `data` (at most a block) through the hub, combined in rank order
    /// (the same bits on every rank); `None` where there is no hub or `data` is larger.
    pub(super) fn hub_all_reduce<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        data: &mut [T],
        f: &impl Fn(T, T) -> T,
    ) -> Option<Result<()>> {
        let hub = self.hub.as_ref()?;
        let bytes = std::mem::size_of_val(data);
        if bytes > FAST_WORDS * 8 {
            return None;
        }
        let block: &[u8] = bytemuck::cast_slice(data);
        let call = match self.hub_call(hub, epoch, what, bytes, &[block]) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        let mut mine = [T::zeroed(); FAST_WORDS * 8];
        let n = data.len();
        mine[..n].copy_from_slice(data);
        let mut theirs = [T::zeroed(); FAST_WORDS * 8];
        for r in 0..self.procs {
            let part: &[T] = if r == self.me {
                &mine[..n]
            } else {
                hub.read_block(call, r, 0, bytemuck::cast_slice_mut(&mut theirs[..n]));
                &theirs[..n]
            };
            combine_in_order(r, data, part, f);
        }
        Some(Ok(()))
    }

    /// The all-to-all of `send` into `recv` (checked by the caller: `PROCS` blocks each)
    /// through the hub; `None` where there is no hub or a block is larger than the hub's.
    pub(super) fn hub_all_to_all<T: Pod>(
        &self,
        epoch: u64,
        what: What,
        send: &[T],
        recv: &mut [T],
    ) -> Option<Result<()>> {
        let hub = self.hub.as_ref()?;
        let (me, p) = (self.me, self.procs);
        let n = send.len() / p;
        let bytes = n * std::mem::size_of::<T>();
        if bytes > FAST_WORDS * 8 {
            return None;
        }
        let mut blocks: [&[u8]; HUB_RANKS] = [&[]; HUB_RANKS];
        for (j, b) in blocks.iter_mut().enumerate().take(p) {
            if j != me {
                *b = bytemuck::cast_slice(&send[j * n..(j + 1) * n]);
            }
        }
        let call = match self.hub_call(hub, epoch, what, bytes, &blocks[..p]) {
            Ok(c) => c,
            Err(e) => return Some(Err(e)),
        };
        recv[me * n..(me + 1) * n].copy_from_slice(&send[me * n..(me + 1) * n]);
        for src in (0..p).filter(|&s| s != me) {
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            hub.read_block(call, src, me, into);
        }
        Some(Ok(()))
    }
}
