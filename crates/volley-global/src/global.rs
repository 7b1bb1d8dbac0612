//! The entry points: [`GlobalSetup`] (registered in the runtime builder) and [`Global`] (the
//! global address space of one built runtime), with allocation, pointer conversion and the
//! waits every operation shares.

use crate::atomics::AtomicProc;
use crate::error::{GlobalError, Result};
use crate::handlers::{self, Handlers, Procedure, Shared};
use crate::ptr::GlobalPtr;
use crate::split_dests::SplitDests;
use crate::spread::{self, Layout, SpreadArray};
use crate::strategy::Strategy;
use bytemuck::Pod;
use std::cell::{Cell, RefCell};
use std::sync::{Arc, PoisonError};
use std::time::{Duration, Instant};
use volley::rma::{Perms, Rma, RmaPath, RmaSetup, SymmetricSegment};
use volley::{Runtime, RuntimeBuilder};

/// The global layer's part of a runtime under construction: register it in the builder
/// (every rank, at the same place), add atomic procedures, then [`GlobalSetup::attach`] it to
/// the built runtime.
#[derive(Debug)]
pub struct GlobalSetup {
    pub(crate) shared: Arc<Shared>,
    rma: RmaSetup,
    h: Handlers,
    strategy: Strategy,
}

/// Where an operation on a rank's memory is carried out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Route {
    /// This rank's own memory: a checked local copy.
    Local,
    /// A peer's mapped memory (`hw` on one node): the one-sided layer's direct path.
    Direct,
    /// Active Messages to the owner.
    Am,
}

/// The global address space of one runtime (Split-C's view of the job): `MYPROC`, `PROCS`,
/// allocation, and every global operation. Not `Sync`: one thread of the rank drives it.
pub struct Global<'rt> {
    pub(crate) rt: &'rt Runtime,
    pub(crate) rma: Rma<'rt>,
    pub(crate) shared: Arc<Shared>,
    pub(crate) h: Handlers,
    pub(crate) strategy: Strategy,
    pub(crate) me: usize,
    pub(crate) procs: usize,
    /// Word 0 of this segment, on every rank, counts the bytes stored into that rank.
    pub(crate) ctrl: SymmetricSegment,
    /// Bytes this rank has stored into each rank, ever.
    pub(crate) stored_to: Box<[Cell<u64>]>,
    /// Bytes of arrived stores that `store_sync` has consumed.
    pub(crate) consumed: Cell<u64>,
    /// Store refusals at each rank already reported by `all_store_sync`.
    pub(crate) refusals_reported: RefCell<Vec<u64>>,
    /// Refusals here already reported by `store_sync`.
    pub(crate) local_refusals_reported: Cell<u64>,
    /// Collective calls so far (every rank counts the same).
    pub(crate) epoch: Cell<u64>,
    /// Calls so far on each fast lane (barriers, small all-reduces, small all-to-alls).
    pub(crate) fast_calls: [Cell<u64>; crate::handlers::LANES],
    /// Every rank's fast lanes in mapped memory, where senders write them directly.
    pub(crate) direct_lanes: Option<crate::coll::DirectLanes>,
    /// Where small collectives meet when every rank shares a core with others.
    pub(crate) hub: Option<crate::coll::Hub>,
    /// Where small broadcasts go under `hw` on one node.
    pub(crate) bcast_ring: Option<crate::coll::BcastRing>,
    /// This rank's part of every spread array: (start address, segment).
    arrays: RefCell<Vec<(usize, usize, volley::rma::SegmentRef)>>,
    /// Bytes per message of a bulk transfer.
    pub(crate) chunk: Cell<usize>,
    /// The symmetric scratch of large all-reduces and all-to-alls on mapped memory (`hw`,
    /// one node).
    pub(crate) mapped_scratch: RefCell<Option<SymmetricSegment>>,
    /// All-to-alls through the mapped scratch so far: alternate calls use alternate halves.
    pub(crate) mapped_all_to_alls: Cell<u64>,
    /// The peers' processes for single-copy large collectives, once the first such call has
    /// decided (inner `None`: the kernel or `VOLLEY_COLL_CMA` said no).
    pub(crate) cma: std::cell::OnceCell<Option<crate::coll::CmaPeers>>,
    hang_warn: Duration,
    /// Where the split-phase gets and puts since the last sync went: a sync that awaits one
    /// rank waits as a round trip to it does ([`Global::wait_on`]).
    pub(crate) split_dests: SplitDests,
    /// Whether accesses to this rank's own memory go through Active Messages to itself.
    loopback_am: Cell<bool>,
}

impl std::fmt::Debug for Global<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Global")
            .field("me", &self.me)
            .field("procs", &self.procs)
            .field("strategy", &self.strategy)
            .finish_non_exhaustive()
    }
}

impl GlobalSetup {
    /// Adds an atomic procedure: `f` runs at the owner of the pointer it is applied to
    /// ([`Global::atomic`]), on a copy of the pointee that is written back, serialized with
    /// every other handler and procedure there; its `u64` is returned to the caller. Every
    /// rank must add the same procedures in the same order (checked at `build`, by name).
    pub fn atomic_proc<T, F>(&mut self, b: &mut RuntimeBuilder, name: &str, f: F) -> AtomicProc<T>
    where
        T: Pod,
        F: Fn(&mut T, &[u64]) -> u64 + Send + Sync + 'static,
    {
        // A marker in the handler table: ranks whose procedures differ fail at init, naming
        // them.
        b.request_handler(&format!("volley.global.proc:{name}"), |_, _| {});
        let run = move |bytes: &mut [u8], args: &[u64]| {
            let mut v: T = bytemuck::pod_read_unaligned(bytes);
            let r = f(&mut v, args);
            bytes.copy_from_slice(bytemuck::bytes_of(&v));
            r
        };
        let mut procs = self
            .shared
            .procs
            .write()
            .unwrap_or_else(PoisonError::into_inner);
        procs.push(Procedure {
            size: std::mem::size_of::<T>(),
            run: Box::new(run),
        });
        AtomicProc::new(procs.len() - 1)
    }

    /// The strategy this job runs.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// Binds the layer to the built runtime: allocates the store counters (collective: every
    /// rank calls it, after `build`).
    pub fn attach(self, rt: &Runtime) -> Result<Global<'_>> {
        let rma = self.rma.attach(rt);
        if self.strategy == Strategy::Np && !rt.has_progress_thread() {
            return Err(GlobalError::BadArguments(
                "strategy np needs the progress thread, which this runtime does not run".into(),
            ));
        }
        let ctrl = zeroed_symmetric(&rma, rt, 64)?;
        let direct_lanes = crate::coll::DirectLanes::new(&rma, rt, self.strategy)?;
        let hub = crate::coll::Hub::new(&rma, rt, self.strategy)?;
        let bcast_ring = crate::coll::BcastRing::new(&rma, rt, self.strategy)?;
        let procs = rt.size();
        let hang_warn = std::env::var("VOLLEY_HANG_WARN_SECS")
            .ok()
            .and_then(|s| s.parse::<f64>().ok())
            .filter(|s| *s > 0.0)
            .map_or(Duration::from_secs(10), Duration::from_secs_f64);
        Ok(Global {
            rt,
            rma,
            shared: self.shared,
            h: self.h,
            strategy: self.strategy,
            me: rt.rank(),
            procs,
            ctrl,
            stored_to: (0..procs).map(|_| Cell::new(0)).collect(),
            consumed: Cell::new(0),
            refusals_reported: RefCell::new(vec![0; procs]),
            local_refusals_reported: Cell::new(0),
            epoch: Cell::new(0),
            fast_calls: Default::default(),
            direct_lanes,
            hub,
            bcast_ring,
            arrays: RefCell::new(Vec::new()),
            chunk: Cell::new(rt.max_medium()),
            mapped_scratch: RefCell::new(None),
            mapped_all_to_alls: Cell::new(0),
            cma: std::cell::OnceCell::new(),
            hang_warn,
            split_dests: SplitDests::default(),
            loopback_am: Cell::new(false),
        })
    }
}

/// [`Global::alloc_zeroed`], before the `Global` exists.
pub(crate) fn zeroed_symmetric(
    rma: &Rma<'_>,
    rt: &Runtime,
    bytes: usize,
) -> Result<SymmetricSegment> {
    let seg = rma.alloc_symmetric(bytes, Perms::ALL)?;
    let mine = rma
        .own_segments()
        .range(seg.on(rt.rank()), 0, bytes, Perms::NONE)
        .map_err(|r| GlobalError::refused(rt.rank(), r))?;
    // SAFETY: `bytes` bytes of this rank's fresh segment (range checked above); no other
    // rank reaches it before the barrier below.
    unsafe { std::ptr::write_bytes(mine.as_ptr(), 0, bytes) };
    rt.barrier();
    Ok(seg)
}

impl Global<'static> {
    /// Registers the global layer in `b` with the strategy of `VOLLEY_STRATEGY` (`hw` when
    /// unset). Every rank must register it at the same place of its registrations.
    pub fn register(b: &mut RuntimeBuilder) -> Result<GlobalSetup> {
        Ok(Self::register_with(b, Strategy::from_env()?))
    }

    /// Registers the global layer with an explicit strategy. It sets up the layers below to
    /// match: the one-sided layer's path (direct for `hw`, AM otherwise) and, for `np`, the
    /// progress thread.
    pub fn register_with(b: &mut RuntimeBuilder, strategy: Strategy) -> GlobalSetup {
        let path = match strategy {
            Strategy::Hw => RmaPath::Direct,
            Strategy::Proc | Strategy::Np => RmaPath::ActiveMessages,
        };
        b.progress_thread(strategy == Strategy::Np);
        b.settings(crate::settings::SETTINGS);
        // In the handler table, so ranks that run different strategies fail at init.
        b.request_handler(&format!("volley.global.strategy={strategy}"), |_, _| {});
        let rma = Rma::register_with(b, Ok(path));
        let shared = Arc::new(Shared::new(rma.own_segments()));
        let h = handlers::register(b, &shared);
        GlobalSetup {
            shared,
            rma,
            h,
            strategy,
        }
    }
}

impl<'rt> Global<'rt> {
    /// This rank (Split-C's `MYPROC`).
    pub fn my_proc(&self) -> usize {
        self.me
    }

    /// Ranks in the job (`PROCS`).
    pub fn procs(&self) -> usize {
        self.procs
    }

    /// The strategy this job runs.
    pub fn strategy(&self) -> Strategy {
        self.strategy
    }

    /// The runtime underneath.
    pub fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// The one-sided layer underneath.
    pub fn rma(&self) -> &Rma<'rt> {
        &self.rma
    }

    /// Bytes per message of bulk transfers (default: the largest medium message). Smaller
    /// chunks interleave bulk transfers more finely with other traffic.
    pub fn set_bulk_chunk(&self, bytes: usize) -> Result<()> {
        if bytes == 0 || bytes > self.rt.max_medium() {
            return Err(GlobalError::BadArguments(format!(
                "bulk chunk of {bytes} bytes: must be 1..={}",
                self.rt.max_medium()
            )));
        }
        self.chunk.set(bytes);
        Ok(())
    }

    /// Sends this rank's accesses to its own memory through Active Messages to itself, as to a
    /// peer (`true`), instead of copying them locally: so that a one-rank program runs the
    /// whole request, handler and reply path of an operation, which is what
    /// `scripts/count-global-instructions` counts. Under `hw` they go on the direct path.
    #[doc(hidden)]
    pub fn set_loopback_am(&self, on: bool) {
        self.loopback_am.set(on);
    }

    /// Serves what has arrived (Split-C's `splitc_poll`): a program that computes for long
    /// under `proc` calls it so that other ranks' requests to it do not wait. Returns how many
    /// messages it handled.
    pub fn poll(&self) -> usize {
        self.rt.poll()
    }

    /// Whether this rank owns `p`'s pointee.
    pub fn is_local<T: Pod>(&self, p: GlobalPtr<T>) -> bool {
        p.rank() == self.me
    }

    /// Allocates a spread array of `len` elements (collective: every rank calls it with the
    /// same arguments; mismatches fail on every rank). Every rank's part is at the same
    /// segment offset and zeroed.
    pub fn all_spread_alloc<T: Pod>(&self, len: usize, layout: Layout) -> Result<SpreadArray<T>> {
        if let Layout::BlockCyclic(0) = layout {
            return Err(GlobalError::BadArguments(
                "BlockCyclic(0): a block has at least one element".into(),
            ));
        }
        let per = spread::per_rank(len, self.procs, layout);
        let bytes = per
            .checked_mul(std::mem::size_of::<T>())
            .ok_or_else(|| GlobalError::BadArguments(format!("{len} elements overflow")))?;
        let seg = self.alloc_zeroed(bytes.max(8))?;
        let mine = seg.on(self.me);
        let base = self
            .shared
            .own
            .range(mine, 0, bytes.max(8), Perms::NONE)
            .map_err(|r| GlobalError::refused(self.me, r))?;
        if base.as_ptr() as usize % std::mem::align_of::<T>() != 0 {
            return Err(GlobalError::Misaligned {
                offset: 0,
                align: std::mem::align_of::<T>(),
            });
        }
        self.arrays
            .borrow_mut()
            .push((base.as_ptr() as usize, bytes, mine));
        Ok(SpreadArray::new(
            seg,
            len,
            self.procs,
            self.me,
            layout,
            base.cast(),
        ))
    }

    /// Allocates a symmetric segment of `bytes` and zeroes this rank's part (the area is
    /// reused after frees); returns once every rank has zeroed its part, so no access from
    /// another rank can come before the zeroing (collective).
    pub(crate) fn alloc_zeroed(&self, bytes: usize) -> Result<SymmetricSegment> {
        zeroed_symmetric(&self.rma, self.rt, bytes)
    }

    /// Frees a spread array (collective). Later accesses to it are refused.
    pub fn free<T: Pod>(&self, a: SpreadArray<T>) {
        let mine = a.seg.on(self.me);
        self.arrays.borrow_mut().retain(|e| e.2 != mine);
        self.rma.free_symmetric(a.seg);
    }

    /// The global pointer to a local `T` on `rank` (Split-C's `toglobal`): `local` must lie in
    /// this rank's part of a spread array, and names the same offset on `rank`.
    pub fn to_global<T: Pod>(&self, rank: usize, local: &T) -> Result<GlobalPtr<T>> {
        self.check_rank(rank)?;
        let addr = local as *const T as usize;
        let arrays = self.arrays.borrow();
        let (start, _, seg) = arrays
            .iter()
            .find(|(start, len, _)| (*start..start + len).contains(&addr))
            .ok_or(GlobalError::NotGlobal { addr })?;
        let mut seg = *seg;
        seg.rank = rank;
        GlobalPtr::new(seg, addr - start)
    }

    /// This rank's address of `p` (Split-C's `tolocal`): only on the owner, and only for a
    /// live segment (checked); dereferencing it follows [`SpreadArray::local_slice`]'s rule.
    pub fn to_local<T: Pod>(&self, p: GlobalPtr<T>) -> Result<std::ptr::NonNull<T>> {
        if p.rank() != self.me {
            return Err(GlobalError::NotLocal {
                me: self.me,
                owner: p.rank(),
            });
        }
        let len = p.check_fits(1)?;
        let at = self
            .shared
            .own
            .range(p.segment(), p.offset(), len, Perms::NONE)
            .map_err(|r| GlobalError::refused(self.me, r))?;
        Ok(at.cast())
    }

    #[inline]
    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.procs {
            return Err(GlobalError::InvalidRank {
                rank,
                procs: self.procs,
            });
        }
        Ok(())
    }

    /// How an operation on `rank`'s memory goes.
    #[inline]
    pub(crate) fn route(&self, rank: usize) -> Result<Route> {
        self.check_rank(rank)?;
        if self.rt.is_finalized() {
            return Err(volley::am::Error::Finalized.into());
        }
        Ok(if rank == self.me && !self.loopback_am.get() {
            Route::Local
        } else if self.strategy == Strategy::Hw && self.rt.is_local(rank) {
            Route::Direct
        } else {
            Route::Am
        })
    }

    /// Polls until `cond` holds. A wait that lasts longer than `VOLLEY_HANG_WARN_SECS`
    /// (default 10) says on standard error what it waits for (`what`), and again at every
    /// doubling, so that a job that cannot finish is never silent.
    #[inline]
    pub(crate) fn wait_for(&self, cond: impl FnMut() -> bool, what: &dyn Fn() -> String) {
        self.wait_with(cond, None::<fn() -> bool>, what);
    }

    /// [`Global::wait_for`] in a wait for `rank`'s answer (see `Runtime::wait_on`).
    #[inline]
    pub(crate) fn wait_on(
        &self,
        rank: usize,
        cond: impl FnMut() -> bool,
        what: &dyn Fn() -> String,
    ) {
        self.wait_with(cond, Some(|| self.rt.is_running(rank)), what);
    }

    /// [`Global::wait_for`] in a wait for several ranks: `running()` says whether every rank
    /// still awaited is on a CPU (see `Runtime::wait_until_awaiting`).
    #[inline]
    pub(crate) fn wait_awaiting(
        &self,
        cond: impl FnMut() -> bool,
        running: impl FnMut() -> bool,
        what: &dyn Fn() -> String,
    ) {
        self.wait_with(cond, Some(running), what);
    }

    #[inline]
    fn wait_with(
        &self,
        mut cond: impl FnMut() -> bool,
        running: Option<impl FnMut() -> bool>,
        what: &dyn Fn() -> String,
    ) {
        if cond() {
            return;
        }
        let mut watch = HangWatch {
            polls: 0,
            start: None,
            next: self.hang_warn,
        };
        let cond = || cond() || watch.tick(self.me, what);
        match running {
            Some(running) => self.rt.wait_until_awaiting(cond, running),
            None => self.rt.wait_until(cond),
        }
    }
}

/// The clock of a long wait: read only once a wait has lasted 1024 polls, so that a short
/// wait (a round trip) pays one increment per poll for the diagnostic.
struct HangWatch {
    polls: u32,
    start: Option<Instant>,
    /// When to speak next.
    next: Duration,
}

impl HangWatch {
    /// Counts a poll; speaks if the wait has grown long. Never ends the wait.
    #[inline]
    fn tick(&mut self, me: usize, what: &dyn Fn() -> String) -> bool {
        self.polls = self.polls.wrapping_add(1);
        if self.polls % 1024 == 0 {
            self.check(me, what);
        }
        false
    }

    #[cold]
    #[inline(never)]
    fn check(&mut self, me: usize, what: &dyn Fn() -> String) {
        let t0 = *self.start.get_or_insert_with(Instant::now);
        if t0.elapsed() >= self.next {
            eprintln!(
                "volley-global: rank {me} has waited {:.0} s for {}",
                t0.elapsed().as_secs_f64(),
                what()
            );
            self.next *= 2;
        }
    }
}
