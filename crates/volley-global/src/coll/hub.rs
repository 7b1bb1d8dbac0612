//! The hub: barriers, small all-reduces and small all-to-alls of ranks that share cores
//! (every rank polite, under `hw` on one node). Each rank writes its contribution into its
//! row in rank 0's mapped memory, counts itself in with one atomic add and waits for the
//! count; then it reads what it needs from every row. A rank that gets the core then has
//! nothing to wait for but the last arrival, which completes the call without waking anyone:
//! each rank needs the core about once per call, where a dissemination or recursive-doubling
//! round waits on a rank that may not have run since the last round. A waiting rank yields
//! its core only while an awaited rank needs that core (see [`Hub::elsewhere`]), so that each
//! core changes hands about once per call.
//!
//! Rows alternate by the parity of the hub's call number: a rank writes call c + 2's row only
//! after every rank arrived at call c + 1, so after every rank has read call c's rows.

use super::combine_in_order;
use super::what::What;
use crate::error::{GlobalError, Result};
use crate::global::Global;
use crate::handlers::{from_words, to_words, FAST_WORDS};
use crate::strategy::Strategy;
use bytemuck::Pod;
use std::cell::Cell;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use volley::rma::Rma;
use volley::Runtime;

/// The hub serves jobs of up to this many ranks (a row holds a block for every rank).
const HUB_RANKS: usize = 16;
/// Words of a row before its blocks: epoch, what, block length, CPU.
const ROW_HEADER: usize = 4;
/// The row word with the CPU the rank arrived on (`NO_CPU`: not known).
const CPU_WORD: usize = 3;
/// A CPU number that no CPU has.
const NO_CPU: u64 = u64::MAX;
/// Rounds of a call's wait before it becomes a general wait (a hand-off takes one or two, and
/// up to a few dozen spins while the other CPU hands its core over).
const QUICK_ROUNDS: u32 = 256;
/// Spins in a row while every awaited rank looks elsewhere, before a yield anyway (a rank that
/// moved, or a CPU that another process took).
const QUICK_SPINS: u32 = 64;
/// Word 0 counts arrivals, ever; word 1 counts ranks that are not polite (set at attach).
const HEAD_WORDS: usize = 8;

/// Rank 0's hub, as mapped in this process.
#[derive(Debug)]
pub(crate) struct Hub {
    base: NonNull<AtomicU64>,
    procs: usize,
    row_words: usize,
    /// Hub calls so far (every rank counts the same).
    calls: Cell<u64>,
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
        let row_words = (ROW_HEADER + p * FAST_WORDS).next_multiple_of(8);
        let bytes = (HEAD_WORDS + 2 * p * row_words) * 8;
        let seg = crate::global::zeroed_symmetric(rma, rt, bytes)?;
        let base = super::direct::map_on(rma, rt, &seg, 0, bytes, "collective hub")?;
        let hub = Self {
            base: base.cast(),
            procs: p,
            row_words,
            calls: Cell::new(0),
            cpus: std::array::from_fn(|_| Cell::new(NO_CPU)),
        };
        // Polite or not is each rank's own setting: the ranks vote, so that all choose alike.
        if !rt.is_polite() {
            hub.word(1).fetch_add(1, Ordering::Relaxed);
        }
        rt.barrier();
        if hub.word(1).load(Ordering::Relaxed) == 0 {
            return Ok(Some(hub));
        }
        // Every rank read the vote before any frees (the barrier orders the reads first).
        rt.barrier();
        rma.free_symmetric(seg);
        Ok(None)
    }

    fn word(&self, i: usize) -> &AtomicU64 {
        debug_assert!(i < HEAD_WORDS + 2 * self.procs * self.row_words);
        // SAFETY: `i` is inside the hub's zeroed, 8-aligned mapping, valid for the job's life
        // and only accessed through atomics.
        unsafe { &*self.base.as_ptr().add(i) }
    }

    /// Word `i` of rank `r`'s row of call `call`.
    fn row(&self, call: u64, r: usize, i: usize) -> &AtomicU64 {
        let row = (call as usize & 1) * self.procs + r;
        self.word(HEAD_WORDS + row * self.row_words + i)
    }

    /// Block `j` of rank `r`'s row of call `call`, into `dst` (blocks of `dst.len()` bytes).
    fn read_block(&self, call: u64, r: usize, j: usize, dst: &mut [u8]) {
        let mut words = [0u64; FAST_WORDS];
        for (k, w) in words.iter_mut().enumerate().take(dst.len().div_ceil(8)) {
            *w = self
                .row(call, r, block_word(j, dst.len()) + k)
                .load(Ordering::Relaxed);
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
        (0..2u64).find_map(|call| {
            (0..self.procs).find_map(|r| {
                let w = self.row(call, r, 1).load(Ordering::Acquire);
                (w != 0 && self.row(call, r, 0).load(Ordering::Acquire) == epoch).then_some((w, r))
            })
        })
    }
}

/// The row word where block `j` of a call with blocks of `len` bytes starts: blocks are
/// packed, so that small blocks share the header's cache line (an 8-byte all-to-all on 4
/// ranks writes and reads one line per row).
fn block_word(j: usize, len: usize) -> usize {
    ROW_HEADER + j * len.div_ceil(8)
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
        for (j, block) in blocks.iter().enumerate() {
            let mut words = [0u64; FAST_WORDS];
            let n = to_words(block, &mut words);
            for (k, w) in words[..n].iter().enumerate() {
                hub.row(call, me, block_word(j, len) + k)
                    .store(*w, Ordering::Relaxed);
            }
        }
        hub.row(call, me, 0).store(epoch, Ordering::Relaxed);
        hub.row(call, me, 2).store(len as u64, Ordering::Relaxed);
        let cpu = nix::sched::sched_getcpu().map_or(NO_CPU, |c| c as u64);
        hub.row(call, me, CPU_WORD).store(cpu, Ordering::Relaxed);
        hub.row(call, me, 1).store(what.code(), Ordering::Relaxed);
        // Release: whoever sees the count sees the row.
        hub.word(0).fetch_add(1, Ordering::AcqRel);
        let all_in = (p as u64) * (call + 1);
        let (mut polls, mut elsewhere) = (0u32, None);
        let mb = &self.shared.mailbox;
        // The ranks still awaited are those whose row is not yet this call's. Spin while none
        // of them needs this CPU: a rank that waits for the other CPU gets it from the rank
        // running there, and a yield here would only pass this core to a rank that has
        // arrived and back. Yield while one needs this CPU (it shares it with this rank; or,
        // where CPUs are not known, it is not on a CPU). Only the rows of ranks that may need
        // this CPU are read: a row being written on another CPU is not pulled away from it.
        let arrived = |r: usize| hub.row(call, r, 0).load(Ordering::Relaxed) == epoch;
        let running = || {
            (0..p).all(|r| {
                r == me
                    || match hub.elsewhere(r, cpu) {
                        Some(away) => away || arrived(r),
                        None => arrived(r) || self.rt.is_running(r),
                    }
            })
        };
        // A call's wait is a hand-off of the cores: first a few rounds of a poll and a spin
        // or a yield, nothing else (measured 0.1-0.2 µs a call faster than the runtime's
        // general wait, whose rounds do more); a wait that outlasts them goes on in that
        // wait, which publishes it for the hang report and watches for mismatches.
        let done = || hub.word(0).load(Ordering::Acquire) >= all_in;
        let mut spins = 0;
        for _ in 0..QUICK_ROUNDS {
            if done() {
                break;
            }
            self.rt.poll();
            if done() {
                break;
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
            let (e, w, l) = (
                hub.row(call, r, 0).load(Ordering::Relaxed),
                hub.row(call, r, 1).load(Ordering::Relaxed),
                hub.row(call, r, 2).load(Ordering::Relaxed) as usize,
            );
            if e != epoch || w != what.code() || l != len {
                return Err(mismatch(
                    r,
                    What::describe(w) + &format!(" ({l} bytes per message)"),
                ));
            }
            hub.cpus[r].set(hub.row(call, r, CPU_WORD).load(Ordering::Relaxed));
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
