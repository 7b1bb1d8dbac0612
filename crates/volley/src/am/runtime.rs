//! The public face of the Active Message layer: [`RuntimeBuilder`] and [`Runtime`].

mod delivery;
mod sleep;
mod try_send;

use super::config::Config;
use super::engine::{Engine, EngineSetup, SharedEngine, SystemOp, MAX_BARRIER_ROUNDS};
use super::handler::{Message, ReplyFn, ReplyHandler, ReplyToken, RequestFn, RequestHandler};
use super::progress::{ProgressThread, ThreadSync};
use super::report::reporter::Reporter;
use super::report::{Doing, OutstandingFn};
use super::stats::Stats;
use super::wireup::{bind_network, wire, EndpointInfo, Wired};
use crate::am::error::{Error, Result};
use crate::bootstrap::{BootstrapError, JobInfo, Start};
use crate::settings::{self, Setting, SETTINGS};
use crate::transport::contract::LongGuard;
use crate::transport::shm::doorbell;
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::{Layout, Region, MEDIUM_MAX};
use crate::transport::Channel;
use std::cell::{Cell, RefCell};
use std::marker::PhantomData;
use std::sync::Arc;

/// Most handlers of each kind (request, reply): indices are 16 bits.
pub const MAX_HANDLERS: usize = 1 << 16;

/// Registers handlers and settings, then joins the job with [`RuntimeBuilder::build`].
///
/// Every rank must register the same handlers, by the same names, in the same order: the index
/// is what travels in a message. `build` checks this across the job and fails with
/// [`Error::HandlerTableMismatch`] otherwise.
#[derive(Default)]
pub struct RuntimeBuilder {
    requests: Vec<(String, Box<RequestFn>)>,
    replies: Vec<(String, Box<ReplyFn>)>,
    config: Config,
    duplicate: Option<String>,
    /// A setting a layer above found wrong while registering (the first one): `build` fails
    /// with it.
    refused: Option<Error>,
    /// Run with this rank's memory once built, before any handler can run (layers above
    /// attach their handlers' state here).
    after_build: Vec<Box<dyn FnOnce(DirectMemory)>>,
    /// What refuses a long message on a segment (see [`LongGuard`]).
    long_guard: Option<Arc<dyn LongGuard>>,
    /// The `VOLLEY_*` settings of the layers above (see [`RuntimeBuilder::settings`]).
    settings: Vec<&'static [Setting]>,
    /// What layers above add to the hang report (see [`RuntimeBuilder::report_outstanding`]).
    outstanding: Vec<OutstandingFn>,
}

impl std::fmt::Debug for RuntimeBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RuntimeBuilder")
            .field(
                "requests",
                &self.requests.iter().map(|r| &r.0).collect::<Vec<_>>(),
            )
            .field(
                "replies",
                &self.replies.iter().map(|r| &r.0).collect::<Vec<_>>(),
            )
            .field("config", &self.config)
            .finish()
    }
}

impl RuntimeBuilder {
    fn note_name(&mut self, name: &str) {
        let taken = self.requests.iter().any(|(n, _)| n == name)
            || self.replies.iter().any(|(n, _)| n == name);
        if taken && self.duplicate.is_none() {
            self.duplicate = Some(name.to_string());
        }
    }

    /// Registers a request handler. It runs at the target with the message and a
    /// [`ReplyToken`] that can send at most one reply back to the requester.
    pub fn request_handler<F>(&mut self, name: &str, handler: F) -> RequestHandler
    where
        F: Fn(&Message<'_>, ReplyToken<'_>) + Send + Sync + 'static,
    {
        self.note_name(name);
        self.requests.push((name.to_string(), Box::new(handler)));
        RequestHandler((self.requests.len() - 1) as u16)
    }

    /// Registers a reply handler. It runs at the requester and cannot send.
    pub fn reply_handler<F>(&mut self, name: &str, handler: F) -> ReplyHandler
    where
        F: Fn(&Message<'_>) + Send + Sync + 'static,
    {
        self.note_name(name);
        self.replies.push((name.to_string(), Box::new(handler)));
        ReplyHandler((self.replies.len() - 1) as u16)
    }

    /// Runs `f` with this rank's memory at the end of `build`, before a progress thread
    /// starts (so before any handler runs).
    pub(crate) fn after_build(&mut self, f: impl FnOnce(DirectMemory) + 'static) {
        self.after_build.push(Box::new(f));
    }

    /// Adds the `VOLLEY_*` variables a layer above reads to those [`RuntimeBuilder::build`]
    /// checks (so that they are checked, and not taken for typos).
    pub fn settings(&mut self, table: &'static [Setting]) -> &mut Self {
        self.settings.push(table);
        self
    }

    /// Adds a layer's operations in flight to this rank's hang report (see
    /// [`super::report`]).
    pub(crate) fn report_outstanding(&mut self, f: OutstandingFn) {
        self.outstanding.push(f);
    }

    /// Installs the guard that refuses long messages on segments (the one-sided layer's).
    pub(crate) fn guard_long_messages(&mut self, guard: Arc<dyn LongGuard>) {
        self.long_guard = Some(guard);
    }

    /// Checks the `VOLLEY_*` environment (see [`crate::settings`]): a bad value fails the
    /// build. Warnings are printed by rank 0 of a job not started by `volley run` (which
    /// checked them before it started the ranks).
    fn check_settings(&self, job: &JobInfo) -> Result<()> {
        let mut tables = vec![SETTINGS];
        tables.extend(self.settings.iter().copied());
        let checked = settings::check(std::env::vars(), &tables, job.local_size < job.size);
        if let Some(first) = checked.errors.first() {
            return Err(Error::Settings(first.clone()));
        }
        let launcher_checked = matches!(job.start, Start::Launcher { .. });
        if !launcher_checked && job.rank == 0 && !checked.warnings.is_empty() {
            let lines: String = checked
                .warnings
                .iter()
                .map(|w| format!("volley: warning: {w}\n"))
                .collect();
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), lines.as_bytes());
        }
        Ok(())
    }

    /// Makes `build` fail with `e` (the first such error wins): for settings of a layer above
    /// that are read while it registers its handlers.
    pub(crate) fn refuse_build(&mut self, e: Error) {
        self.refused.get_or_insert(e);
    }

    /// Slots per ring (power of two, 8..=16384; default 64, or `VOLLEY_RING_SLOTS`).
    pub fn ring_slots(&mut self, slots: usize) -> &mut Self {
        self.config.ring_slots = Some(slots);
        self
    }

    /// Medium buffers per channel (1..=64; default 4, or `VOLLEY_MEDIUM_BUFFERS`).
    pub fn medium_buffers(&mut self, n: usize) -> &mut Self {
        self.config.medium_buffers = Some(n);
        self
    }

    /// Bytes in this rank's segment (default 4 MiB, or `VOLLEY_SEGMENT_BYTES`).
    pub fn segment_bytes(&mut self, n: usize) -> &mut Self {
        self.config.segment_bytes = Some(n);
        self
    }

    /// Sleep in the kernel once a wait has spun for a while, woken by traffic (default: spin,
    /// or `VOLLEY_WAIT=spin|block`). Every rank must choose the same.
    pub fn block_when_idle(&mut self, block: bool) -> &mut Self {
        self.config.block = Some(block);
        self
    }

    /// Run a progress thread that polls and runs handlers while the program computes
    /// (default: inline progress only, or `VOLLEY_PROGRESS=inline|thread`). Ranks may differ.
    pub fn progress_thread(&mut self, thread: bool) -> &mut Self {
        self.config.progress_thread = Some(thread);
        self
    }

    /// Report, by name, any handler that runs longer than `limit` (default: off, or
    /// `VOLLEY_WATCHDOG_MS`). A thread per rank watches; handlers pay two stores each.
    pub fn watchdog(&mut self, limit: std::time::Duration) -> &mut Self {
        self.config.watchdog = Some(limit);
        self
    }

    /// Yield the core early while waiting (default: automatic, on when this host runs more
    /// ranks than this process has cores; or `VOLLEY_POLITE=0|1|auto`). A polite rank pinned
    /// to a CPU that no other rank of its node is pinned to spins where it would yield (it has
    /// nobody to give its core to), yielding once per 16k empty polls.
    pub fn polite(&mut self, polite: bool) -> &mut Self {
        self.config.polite = Some(polite);
        self
    }

    /// Joins the job: creates this rank's shared-memory region, exchanges regions with the
    /// other ranks (the init barrier), and checks that all ranks agree on handlers and settings.
    pub fn build(mut self) -> Result<Runtime> {
        if let Some(name) = self.duplicate {
            return Err(Error::DuplicateHandler(name));
        }
        if let Some(e) = self.refused.take() {
            return Err(e);
        }
        for (kind, n) in [
            ("request", self.requests.len()),
            ("reply", self.replies.len()),
        ] {
            if n > MAX_HANDLERS {
                return Err(Error::TooManyHandlers {
                    kind,
                    registered: n,
                    max: MAX_HANDLERS,
                });
            }
        }
        let job = JobInfo::from_env()?;
        self.check_settings(&job)?;
        let layout = Layout {
            ranks: job.local_size,
            ring_slots: self.config.ring_slots()?,
            pool_bufs: self.config.medium_buffers()?,
            segment_len: self.config.segment_bytes()?,
        };
        layout
            .validate()
            .map_err(|(name, value, why)| Error::InvalidConfig { name, value, why })?;
        let polite = self.config.polite(job.host_ranks, job.host_cpus)?;
        let poll_policy = self.config.poll_policy()?;
        let block = self.config.block()?;
        let thread = self.config.progress_thread()?;
        let watchdog = self.config.watchdog()?;
        // Bound before the rendezvous so that its address can be published there.
        let mut net = if job.local_size < job.size {
            Some(bind_network(&self.config, &job)?)
        } else {
            None
        };
        let own = Region::create(layout, job.rank, job.job_key)?;
        let own_wake = WakeFd::new().map_err(|e| BootstrapError::os("creating an eventfd", e))?;
        let membarrier = doorbell::register_membarrier();
        let info = EndpointInfo {
            layout,
            requests: self.requests.iter().map(|(n, _)| n.clone()).collect(),
            replies: self.replies.iter().map(|(n, _)| n.clone()).collect(),
            node: job.node,
            net: net
                .as_ref()
                .map(|n| (n.kind().name().to_string(), n.local_addr())),
            block,
            thread,
            membarrier,
        };
        let Wired {
            regions,
            local_ranks,
            bells,
            wakes,
            watch,
        } = wire(&job, &info, membarrier, own, own_wake, net.as_mut())?;
        let setup = EngineSetup {
            regions,
            local_ranks,
            net,
            poll_policy,
            block,
            bells,
            wakes,
            membarrier,
            thread,
            watchdog,
            long_guard: self.long_guard.take(),
        };
        let engine = Engine::new(
            job.rank,
            job.size,
            job.job_key,
            setup,
            self.requests,
            self.replies,
            polite,
            watch,
        );
        let plain = engine.thread_sync().is_none();
        let rt = Runtime {
            shared: Arc::new(SharedEngine::new(engine)),
            progress: RefCell::new(None),
            reporter: RefCell::new(None),
            held: Cell::new(false),
            job,
            barrier_epoch: Cell::new(0),
            finalized: Cell::new(false),
            plain: Cell::new(plain),
            not_send: PhantomData,
        };
        let own = rt
            .direct_memory(rt.rank())
            .expect("a rank can always address its own region");
        for f in self.after_build {
            f(own);
        }
        // From here on handlers may run at any time.
        if thread {
            *rt.progress.borrow_mut() = Some(ProgressThread::start(rt.shared.clone()));
        }
        *rt.reporter.borrow_mut() = Reporter::from_env(rt.shared.clone(), self.outstanding);
        Ok(rt)
    }
}

/// One rank's endpoint in a job: send Active Messages, poll, wait, synchronize.
///
/// **When handlers run.** In the default inline progress mode, handlers run only inside calls
/// to this runtime: [`Runtime::poll`], [`Runtime::wait_until`], [`Runtime::barrier`], and
/// inside a send that cannot inject at once (it polls while it waits for ring credit). Code
/// between those calls is never interrupted by a handler, so it needs no locks against
/// handlers (seed 000's "free critical sections").
///
/// With a progress thread ([`RuntimeBuilder::progress_thread`], `VOLLEY_PROGRESS=thread`),
/// handlers also run on that thread while the program computes, so a rank that never polls
/// still serves requests and one-sided operations. Handlers stay atomic with respect to each
/// other; code that must not overlap a handler goes in [`Runtime::critical`]. Whatever a
/// handler did is visible to the program once a later runtime call (a poll, a wait) returns.
///
/// **Deadlock freedom.** Requests and replies travel on separate rings. A blocked request send
/// polls requests and replies; a blocked reply send polls replies only, whose handlers cannot
/// send. The reply rings are reserved for replies, so replies always drain.
///
/// **Completion.** A send returns once the message is in the target's ring (or, for long
/// messages, the payload is in the target's segment and the frame in its ring); the source
/// buffers can be reused at once. `barrier` does not wait for messages in flight: wait for
/// replies (or count arrivals) before relying on remote effects.
///
/// The runtime is neither `Send` nor `Sync`: the thread that built it drives it, and handlers
/// (which must be `Send + Sync`) cannot capture it, which is how "no requests from inside a
/// handler" is enforced.
#[derive(Debug)]
pub struct Runtime {
    shared: Arc<SharedEngine>,
    /// The progress thread, in thread mode (stopped at finalize or drop).
    progress: RefCell<Option<ProgressThread>>,
    /// The hang reporter, when `volley run` started this rank (stopped at drop).
    reporter: RefCell<Option<Reporter>>,
    /// Whether this (the rank's) thread owns the engine, in thread mode: calls made
    /// while it does (a wait's condition that sends, say) do not take it again.
    held: Cell<bool>,
    job: JobInfo,
    barrier_epoch: Cell<u64>,
    finalized: Cell<bool>,
    /// Inline progress and not finalized: a short request needs only the check that no
    /// handler is running (one flag for the other two checks, as every request passes here).
    plain: Cell<bool>,
    /// The rank's thread drives the runtime: not `Send`, not `Sync`.
    not_send: PhantomData<*const ()>,
}

/// The rank thread's hold on the engine for one runtime call (thread mode); released on drop.
pub(crate) struct Entered<'a> {
    rt: &'a Runtime,
    owned: bool,
}

impl Drop for Entered<'_> {
    #[inline]
    fn drop(&mut self) {
        if self.owned {
            self.rt.held.set(false);
            let sync = self
                .rt
                .engine()
                .thread_sync()
                .expect("owned implies thread mode");
            // SAFETY: `owned` means this call took the engine in `Runtime::enter`, and the call is over.
            unsafe { sync.leave() };
        }
    }
}

impl Runtime {
    /// Starts registering handlers.
    pub fn builder() -> RuntimeBuilder {
        RuntimeBuilder::default()
    }

    /// This rank, `0..size()`.
    pub fn rank(&self) -> usize {
        self.job.rank
    }

    /// Number of ranks in the job.
    pub fn size(&self) -> usize {
        self.job.size
    }

    /// This rank's index among the ranks on its host.
    pub fn local_rank(&self) -> usize {
        self.job.local_rank
    }

    /// The job's random id.
    pub fn job_id(&self) -> u64 {
        self.job.job_id
    }

    /// Largest medium payload in bytes (64 KiB).
    pub fn max_medium(&self) -> usize {
        MEDIUM_MAX
    }

    /// Whether waiting loops yield the core early (see [`RuntimeBuilder::polite`]).
    pub fn is_polite(&self) -> bool {
        self.engine().polite
    }

    /// Whether a progress thread serves this rank (see [`RuntimeBuilder::progress_thread`]).
    pub fn has_progress_thread(&self) -> bool {
        self.engine().thread_sync().is_some()
    }

    #[inline(always)]
    pub(crate) fn engine(&self) -> &Engine {
        self.shared.get()
    }

    /// Takes the engine for one call: in thread mode, the engine lease (unless this thread
    /// already holds it); in inline mode, nothing.
    #[inline(always)]
    pub(crate) fn enter(&self) -> Entered<'_> {
        self.enter_by(ThreadSync::enter)
    }

    /// Takes the engine for an operation that serves nobody (a copy into or out of a segment,
    /// a direct access to a node-mate's memory): as [`Runtime::enter`], but the progress
    /// thread does not count it as a call, so a rank that computes with such operations in its
    /// loop is still served between them.
    #[inline(always)]
    pub(crate) fn enter_local(&self) -> Entered<'_> {
        self.enter_by(ThreadSync::enter_local)
    }

    #[inline(always)]
    fn enter_by(&self, take: fn(&ThreadSync)) -> Entered<'_> {
        let owned = match self.engine().thread_sync() {
            Some(sync) if !self.held.get() => {
                take(sync);
                self.held.set(true);
                true
            }
            _ => false,
        };
        Entered { rt: self, owned }
    }

    #[inline(always)]
    fn guard(&self, what: &'static str) {
        if self.engine().in_handler() {
            called_from_handler(what);
        }
    }

    #[inline(always)]
    fn critical_guard(&self, what: &'static str) {
        if self.engine().in_critical() {
            panic!(
                "volley: {what} called inside a critical section; it would wait for handlers \
                 that cannot run until the section ends"
            );
        }
    }

    /// Whether [`Runtime::finalize`] has run.
    pub fn is_finalized(&self) -> bool {
        self.finalized.get()
    }

    #[inline(always)]
    fn send_guard(&self, what: &'static str) -> Result<()> {
        self.guard(what);
        if self.finalized.get() {
            return Err(Error::Finalized);
        }
        Ok(())
    }

    /// Sends a short request: `handler` runs at `dest` with `args` (at most 16).
    #[inline]
    pub fn request_short(&self, dest: usize, handler: RequestHandler, args: &[u64]) -> Result<()> {
        let engine = self.engine();
        if self.plain.get() && !engine.in_handler() {
            return engine.send_short(dest, Channel::Request, handler.0, args);
        }
        self.request_short_guarded(dest, handler, args)
    }

    /// [`Runtime::request_short`] in thread mode, after finalize, or from a handler (which
    /// is refused).
    #[inline(never)]
    fn request_short_guarded(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("request_short")?;
        self.engine()
            .send_short(dest, Channel::Request, handler.0, args)
    }

    /// Sends a medium request; the payload is copied, so `payload` is reusable on return.
    pub fn request_medium(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("request_medium")?;
        self.engine()
            .send_medium(dest, Channel::Request, handler.0, args, payload)
    }

    /// [`Runtime::request_medium`] outside the network's sequencing (seed 002's "no flow
    /// control"): to a rank on another node over UDP one unsequenced datagram, delivered at
    /// most once or lost, never retransmitted; otherwise as `request_medium`. The payload must
    /// fit [`Runtime::max_unsequenced`].
    pub(crate) fn request_medium_unsequenced(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("request_medium")?;
        self.engine()
            .send_medium_unsequenced(dest, Channel::Request, handler.0, args, payload)
    }

    /// The largest payload [`Runtime::request_medium_unsequenced`] (and an unsequenced reply)
    /// carries between this rank and `dest` with `nargs` arguments.
    pub(crate) fn max_unsequenced(&self, dest: usize, nargs: usize) -> Result<usize> {
        self.engine().check_dest(dest)?;
        Ok(self.engine().max_unsequenced(dest, nargs))
    }

    /// Sends a medium request of `len` bytes whose payload `fill` writes in place, in a buffer
    /// of the runtime's own (seed 000's layer-owned send buffer, `AMsendBuf`): on shared
    /// memory one of this rank's medium buffers, which the receiver reads from; on the
    /// network the message's encoding. The payload is written once and the program hands
    /// the runtime no pointer. `fill` gets exactly `len` bytes (zeroed on the network, stale
    /// on shared memory: write them all) and runs once, after the checks, before the message
    /// goes; it must not call the runtime. Errors as for [`Runtime::request_medium`].
    pub fn request_medium_with(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("request_medium_with")?;
        self.engine()
            .send_medium_with(dest, Channel::Request, handler.0, args, len, fill)
    }

    /// Sends a long request: `payload` is written into `dest`'s segment at `offset`, then
    /// `handler` runs there with the written bytes as its payload. Any size that fits the
    /// segment goes to a rank of this node and to a rank on another node (beyond one network
    /// message's worth, 8 MiB, in parts that are written as they arrive; the handler runs once
    /// every part is in place).
    ///
    /// Long messages write the part of the segment area that no segment covers: segments of
    /// the one-sided layer ([`crate::rma`]) are carved from the same area, and only keyed
    /// one-sided operations may change them. A payload that would touch a live segment is
    /// refused, and nothing is written: to a rank of this node the send returns
    /// [`Error::Refused`] ([`crate::rma::Refusal::OnSegment`]); to a rank on another node,
    /// whose segments the sender cannot see, the target drops the message and counts it
    /// (`dropped` in its statistics). Either way the target's refusal count goes up.
    pub fn request_long(
        &self,
        dest: usize,
        handler: RequestHandler,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        let _e = self.enter();
        self.send_guard("request_long")?;
        self.engine()
            .send_long(dest, Channel::Request, handler.0, args, payload, offset)
    }

    /// Hands the network everything sent so far, without running any handler. Sends to
    /// other nodes that follow each other within microseconds share system calls, and the
    /// last of such a run leaves at the next runtime call: a rank that sends and then
    /// computes for long without calling the runtime (or waits outside it) flushes first.
    /// A long message's payload beyond what the network takes at once moves on in later
    /// runtime calls (over TCP, a quantum per poll, so that it never holds up this rank's
    /// other traffic); `flush` writes as much of it as the network takes now.
    /// Shared-memory sends are visible at once and need no flush.
    pub fn flush(&self) {
        let _e = self.enter();
        self.engine().flush_net_out();
    }

    /// Runs the handlers of every message that has arrived; returns how many ran.
    #[inline]
    pub fn poll(&self) -> usize {
        let _e = self.enter();
        self.guard("poll");
        self.engine().poll(true)
    }

    /// Runs `f` as a critical section: no handler runs inside it, neither in polls nor in
    /// sends that wait for room. Messages that arrive meanwhile stay queued and their handlers
    /// run when the outermost section ends (in arrival order per source, as always). Entering
    /// and leaving with nothing pending is a counter write and a few loads: no system call,
    /// no lock.
    ///
    /// Inside, `poll` returns 0 and `wait_until` and `barrier` panic (they would wait for
    /// handlers that cannot run). Sends work, but a send that finds the target's ring full
    /// waits for the target to drain it without serving anyone: two ranks that flood each other
    /// from critical sections can deadlock, as with interrupts disabled on both sides.
    ///
    /// In the default inline progress mode any stretch of code without runtime calls is
    /// already a critical section; `critical` makes that explicit and also covers sends and
    /// polls. With a progress thread, `critical` is how code keeps handlers out: entering
    /// waits for a handler that is running to finish, and leaving with nothing pending is
    /// one atomic operation. Sections nest; inside a handler (already atomic) `f` simply runs.
    pub fn critical<R>(&self, f: impl FnOnce() -> R) -> R {
        struct Leave<'a>(&'a Runtime);
        impl Drop for Leave<'_> {
            fn drop(&mut self) {
                if self.0.engine().leave_critical() {
                    let _e = self.0.enter();
                    self.0.engine().deliver_deferred();
                }
            }
        }
        self.engine().enter_critical();
        let leave = Leave(self);
        let r = f();
        drop(leave);
        r
    }

    /// Whether the caller is inside a critical section.
    pub fn in_critical(&self) -> bool {
        self.engine().in_critical()
    }

    /// Polls until `cond()` is true. `cond` is typically a flag set by a reply handler.
    #[inline]
    pub fn wait_until(&self, cond: impl FnMut() -> bool) {
        let _e = self.enter();
        self.guard("wait_until");
        self.critical_guard("wait_until");
        self.engine().wait_until(cond)
    }

    /// Polls until `cond()` is true, like [`Runtime::wait_until`], in a wait for one rank's
    /// answer (a reply, a partner's message): a polite rank (see [`RuntimeBuilder::polite`])
    /// spins while `rank` is on a CPU, so that an answer within a round trip is seen at once,
    /// and yields its core at once while `rank` is not.
    #[inline]
    pub fn wait_on(&self, rank: usize, cond: impl FnMut() -> bool) {
        self.wait_until_awaiting(cond, || self.is_running(rank))
    }

    /// Polls until `cond()` is true, like [`Runtime::wait_on`], for a wait on several ranks:
    /// `running()` says whether every rank the wait still awaits is on a CPU (see
    /// [`Runtime::is_running`]).
    #[inline]
    pub fn wait_until_awaiting(&self, cond: impl FnMut() -> bool, running: impl FnMut() -> bool) {
        let _e = self.enter();
        self.guard("wait_until");
        self.critical_guard("wait_until");
        self.engine().wait_awaiting(cond, running)
    }

    /// Whether `rank` is on a CPU now: it runs on this node and none of its threads is
    /// yielding its core or sleeping in a wait (a thread the scheduler preempted still counts
    /// as running). `false` for ranks on other nodes and outside the job. One load of a cache
    /// line that `rank` writes only around its yields and sleeps.
    #[inline]
    pub fn is_running(&self, rank: usize) -> bool {
        self.engine().is_running(rank)
    }

    /// Gives this rank's core to another process once, as a polite wait does between its
    /// polls: the rank counts as not running meanwhile (see [`Runtime::is_running`]), the
    /// yield is counted in [`Stats::yields`], and every 2048 yields the job's health is
    /// checked (a rank that exits without finalizing ends the others). For waits of one's
    /// own that hand a shared core back and forth, between [`Runtime::poll`]s.
    pub fn yield_core(&self) {
        let _e = self.enter();
        self.engine().yield_core();
    }

    /// Waits until every rank has called `barrier` (a dissemination barrier over Active
    /// Messages; handlers keep running meanwhile).
    ///
    /// # Panics
    ///
    /// After [`Runtime::finalize`]: the other ranks may have left, so it could never end.
    pub fn barrier(&self) {
        let _e = self.enter();
        self.guard("barrier");
        self.critical_guard("barrier");
        if self.finalized.get() {
            panic!("volley: barrier called after finalize; the other ranks may have left the job");
        }
        let size = self.size();
        let epoch = self.barrier_epoch.get();
        self.barrier_epoch.set(epoch + 1);
        let mut dist = 1;
        let mut round = 0;
        while dist < size {
            debug_assert!(round < MAX_BARRIER_ROUNDS);
            let peer = (self.rank() + dist) % size;
            self.engine()
                .send_system(peer, SystemOp::Barrier, &[epoch, round as u64]);
            let from = (self.rank() + size - dist) % size;
            self.engine().await_barrier_arrival(epoch, round, from);
            dist *= 2;
            round += 1;
        }
    }

    /// A snapshot of this rank's counters.
    pub fn stats(&self) -> Stats {
        let _e = self.enter();
        self.engine().stats()
    }

    /// Bytes in this rank's segment.
    pub fn segment_len(&self) -> usize {
        self.engine().own().segment_len()
    }

    fn segment_range(&self, offset: usize, len: usize) -> Result<()> {
        let segment_len = self.segment_len();
        if offset.checked_add(len).is_none_or(|e| e > segment_len) {
            return Err(Error::OutOfBounds {
                offset,
                len,
                segment_len,
            });
        }
        Ok(())
    }

    /// Copies bytes out of this rank's segment (where long messages land). With a progress
    /// thread, handlers wait meanwhile (and this waits for a running one), so the copy never
    /// overlaps a handler that holds a view of the segment.
    pub fn read_segment(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let _e = self.enter_local();
        self.segment_range(offset, buf.len())?;
        // SAFETY: range checked; the segment is mapped for the runtime's life.
        unsafe {
            crate::copy::copy_nonoverlapping(
                self.engine().own().segment_ptr().add(offset),
                buf.as_mut_ptr(),
                buf.len(),
            );
        }
        Ok(())
    }

    /// Copies bytes into this rank's segment (handlers wait meanwhile, as for
    /// [`Runtime::read_segment`]).
    pub fn write_segment(&self, offset: usize, data: &[u8]) -> Result<()> {
        let _e = self.enter_local();
        self.segment_range(offset, data.len())?;
        // SAFETY: range checked; the segment is mapped for the runtime's life.
        unsafe {
            crate::copy::copy_nonoverlapping(
                data.as_ptr(),
                self.engine().own().segment_ptr().add(offset),
                data.len(),
            );
        }
        Ok(())
    }

    /// Leaves the job (collective): waits until every rank has finalized and every request
    /// sent to this rank has been handled and replied to, so no rank exits while another may
    /// still send to it. Afterwards sends fail with [`Error::Finalized`]. Called by `Drop`
    /// (except while panicking, when the launcher ends the job instead).
    pub fn finalize(&self) {
        let entered = self.enter();
        self.guard("finalize");
        self.critical_guard("finalize");
        self.plain.set(false);
        if self.finalized.replace(true) {
            return;
        }
        let engine = self.engine();
        // Two phases. Finalize says "no more requests from me"; a rank that has every other
        // rank's Finalize has handled every request sent to it (rings are FIFO) and injected
        // every reply, and says so with FinalizeAck. Exiting only after every FinalizeAck means
        // no rank leaves while another may still need to reply to it.
        let others = self.size() - 1;
        let peers = || (0..self.size()).filter(|&p| p != self.rank());
        for peer in peers() {
            engine.send_system(peer, SystemOp::Finalize, &[]);
        }
        engine.waiting_for(Doing::Finalize, || {
            engine.wait_until(|| engine.finalized_peers.get() >= others);
            for peer in peers() {
                engine.send_system(peer, SystemOp::FinalizeAck, &[]);
            }
            engine.wait_until(|| engine.finalize_acks.get() >= others);
        });
        // Nothing more will arrive that needs a handler: stop the progress thread (it may
        // need the engine to finish its round, so let go first). The rest runs on this thread alone.
        drop(entered);
        if let Some(mut progress) = self.progress.borrow_mut().take() {
            progress.stop();
        }
        engine.flush_credit();
        engine.close_net();
        if let Start::Pmix { namespace } = &self.job.start {
            if let Err(e) = crate::bootstrap::pmix::leave(namespace) {
                let line = format!("volley: rank {}: leaving PMIx: {e}\n", self.rank());
                let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            }
        }
        if std::env::var("VOLLEY_STATS").is_ok_and(|v| v.trim() == "1") {
            // One write, so lines of different ranks never interleave.
            let line = format!("volley stats rank {}: {}\n", self.rank(), self.stats());
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    }

    /// Direct access to `rank`'s memory, for layers above (one-sided operations): the base
    /// and length of its segment area and its upper-layer table bytes, or `None` when the
    /// transport to `rank` cannot map it.
    pub(crate) fn direct_memory(&self, rank: usize) -> Option<DirectMemory> {
        self.engine().region_of(rank).map(|r| DirectMemory {
            segment: r.segment_ptr(),
            segment_len: r.segment_len(),
            table: r.upper_ptr(),
        })
    }

    /// Whether `rank` runs on this rank's node, so that messages to it go through shared
    /// memory (and, on the direct path, one-sided operations touch its memory directly);
    /// `false` for ranks reached through the network and for ranks outside the job.
    pub fn is_local(&self, rank: usize) -> bool {
        self.engine().region_of(rank).is_some()
    }

    /// The job key (for keys every rank derives alike).
    pub(crate) fn job_key(&self) -> u64 {
        self.job.job_key
    }
}

#[cold]
#[inline(never)]
fn called_from_handler(what: &str) -> ! {
    panic!("volley: {what} called from inside a handler; handlers may only reply")
}

/// A peer's memory as mapped into this process (see `Runtime::direct_memory`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct DirectMemory {
    pub(crate) segment: *mut u8,
    pub(crate) segment_len: usize,
    pub(crate) table: *mut u8,
}

impl Drop for Runtime {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            self.finalize();
        }
        // After a panic (no finalize), still stop the progress thread before the engine goes.
        if let Some(mut progress) = self.progress.get_mut().take() {
            progress.stop();
        }
        drop(self.reporter.get_mut().take());
    }
}
