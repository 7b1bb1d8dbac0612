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

use super::parcels::{QUICK_POLL, QUICK_ROUNDS};
use super::what::What;
use crate::error::{GlobalError, Result};
use crate::global::Global;
use crate::handlers::FAST_WORDS;
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
/// Spins in a row while every awaited rank looks elsewhere, before a yield anyway (a rank that
/// moved, or a CPU that another process took).
const QUICK_SPINS: u32 = 64;
/// Words before the rows: word 0 counts ranks that are not polite (set at attach); word
/// `CPU_WORDS + r` holds the CPU rank r last arrived on, plus one (0: not known), written only
/// when it changes, so that reading it costs a cache hit.
const HEAD_WORDS: usize = CPU_WORDS + HUB_RANKS;
/// Where the ranks' CPUs start, a cache line after the vote.
const CPU_WORDS: usize = 8;

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
    before: [Cell<Option<u32>>; 2],
    /// The CPU each rank had published by the last call (`NO_CPU`: not known), copied here
    /// so that a wait does not read the rows of ranks on another CPU while they write them.
    cpus: [Cell<u64>; HUB_RANKS],
    /// The CPU this rank last published in its CPU word.
    my_cpu: Cell<u64>,
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
            my_cpu: Cell::new(NO_CPU),
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

    /// The next hub call's number (every rank counts the same) and the rows, into which the
    /// caller writes its blocks before it makes the call (`Global::hub_call`).
    #[inline]
    fn next_call(&self) -> (Rows<'_>, u64) {
        let call = self.calls.get();
        self.calls.set(call + 1);
        (self.rows(), call)
    }

    #[inline]
    fn rows(&self) -> Rows<'_> {
        Rows::new(&self.mapping()[HEAD_WORDS..], self.procs, FAST_WORDS)
    }

    /// Rank `r`'s CPU word (see [`HEAD_WORDS`]).
    fn cpu_word(&self, r: usize) -> &AtomicU64 {
        &self.mapping()[CPU_WORDS + r]
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
    /// One hub call, after the caller took its rows and number from [`Hub::next_call`] and
    /// wrote its blocks (of `mine.len` bytes): arrives, waits for every rank and checks that
    /// all called the same collective with blocks of the same length; the caller may then
    /// read the call's rows until it takes the next number. Out of line, one copy for every collective: what a
    /// rank runs after its core comes back is a cold start (another process ran meanwhile),
    /// so the fewer instruction lines a call spans, the shorter each hand-off.
    #[inline(never)]
    fn hub_call(
        &self,
        hub: &Hub,
        rows: &Rows<'_>,
        call: u64,
        epoch: u64,
        mine: Header,
    ) -> Result<()> {
        let (me, p) = (self.me, self.procs);
        let stale = hub.before[call as usize & 1].replace(Some(mine.epoch));
        let cpu = nix::sched::sched_getcpu().map_or(NO_CPU, |c| c as u64);
        if hub.my_cpu.replace(cpu) != cpu {
            hub.cpu_word(me)
                .store(cpu.wrapping_add(1), Ordering::Relaxed);
        }
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
            if round % QUICK_POLL == 0 {
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
                    What::describe(mine.what)
                )
            },
        );
        if let Some((theirs, rank)) = elsewhere {
            return Err(mismatch(epoch, me, rank, mine, (theirs, None)));
        }
        for r in 0..p {
            let theirs = rows.header(call, r);
            if theirs != Some(mine) {
                let theirs = theirs.map_or((0, None), |h| (h.what, Some(h.len)));
                return Err(mismatch(epoch, me, r, mine, theirs));
            }
            let cpu = hub.cpu_word(r).load(Ordering::Relaxed);
            hub.cpus[r].set(cpu.wrapping_sub(1));
        }
        Ok(())
    }

    /// The barrier through the hub; `None` where there is no hub.
    pub(super) fn hub_barrier(&self, epoch: u64, what: What) -> Option<Result<()>> {
        let hub = self.hub.as_ref()?;
        let mine = Header::new(epoch, what.code(), 0)?;
        let (rows, call) = hub.next_call();
        Some(self.hub_call(hub, &rows, call, epoch, mine))
    }

    /// The all-reduce of `data` (at most a block) through the hub, combined in rank order
    /// (the same bits on every rank); `None` where there is no hub, `data` is larger or its
    /// elements do not fit a row's header (see [`Header::new`]).
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
        let mine = Header::new(epoch, what.code(), bytes)?;
        let (rows, call) = hub.next_call();
        rows.put_bytes(call, self.me, 0, bytemuck::cast_slice(data));
        if let Err(e) = self.hub_call(hub, &rows, call, epoch, mine) {
            return Some(Err(e));
        }
        // Every rank's part, this one's too, read back from the rows in rank order: each
        // element straight from the row's bytes into the fold (no copies of whole parts).
        let size = std::mem::size_of::<T>();
        let mut words = [0u64; FAST_WORDS];
        let part: &mut [u8] = &mut bytemuck::cast_slice_mut(&mut words)[..bytes];
        for r in 0..self.procs {
            rows.read_bytes(call, r, 0, part);
            for (i, acc) in data.iter_mut().enumerate() {
                let theirs: T = bytemuck::pod_read_unaligned(&part[i * size..(i + 1) * size]);
                *acc = if r == 0 { theirs } else { f(*acc, theirs) };
            }
        }
        Some(Ok(()))
    }

    /// The all-to-all of `send` into `recv` (checked by the caller: `PROCS` blocks each)
    /// through the hub; `None` where there is no hub, a block is larger than the hub's or its
    /// elements do not fit a row's header. A row holds the blocks for the other ranks in
    /// their order, then this rank's own (see [`slot`]).
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
        let mine = Header::new(epoch, what.code(), bytes)?;
        let (rows, call) = hub.next_call();
        for j in 0..p {
            let block = bytemuck::cast_slice(&send[j * n..(j + 1) * n]);
            rows.put_bytes(call, me, slot(me, j, p), block);
        }
        if let Err(e) = self.hub_call(hub, &rows, call, epoch, mine) {
            return Some(Err(e));
        }
        for src in 0..p {
            let into = bytemuck::cast_slice_mut(&mut recv[src * n..(src + 1) * n]);
            rows.read_bytes(call, src, slot(src, me, p), into);
        }
        Some(Ok(()))
    }
}

/// The block of rank `src`'s row that holds its all-to-all block for rank `dst`: the blocks
/// for the other ranks first, in their order, so that with one-word blocks on 8 ranks they
/// fill the header's cache line, the one line each reader fetches; the block a rank keeps
/// last, in a line that stays in its own cache.
fn slot(src: usize, dst: usize, p: usize) -> usize {
    if src == dst {
        p - 1
    } else {
        dst - usize::from(dst > src)
    }
}

/// The error of a hub call at `epoch` where rank `rank` called another collective than this
/// rank `me`: theirs as (what code, bytes per block), without a length where only a parcel
/// elsewhere told. Cold and out of line, like all of a call's failures.
#[cold]
#[inline(never)]
fn mismatch(
    epoch: u64,
    me: usize,
    rank: usize,
    mine: Header,
    theirs: (u64, Option<usize>),
) -> GlobalError {
    let bytes = |len: usize| format!(" ({len} bytes per message)");
    GlobalError::CollectiveMismatch {
        epoch,
        me,
        rank,
        mine: What::describe(mine.what) + &bytes(mine.len),
        theirs: What::describe(theirs.0) + &theirs.1.map(bytes).unwrap_or_default(),
    }
}
