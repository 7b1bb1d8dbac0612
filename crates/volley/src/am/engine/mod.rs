//! The engine: sends each message through the transport of its route (the node's rings,
//! [`Links`], or the network, [`NetLink`]), polls both and runs handlers: it is the sink of
//! every transport. Its jobs, one module each: [`send`], [`try_send`] (sends that go at once
//! or not at all), [`receive`] (what a poll serves, in
//! what order), [`dispatch`] (running handlers, one `deliver` for every transport), [`wait`]
//! (waits and sleep), [`job`] (barrier, finalize, health, watchdog, statistics) and [`setup`]
//! (composing it).
//!
//! State lives in `Cell`s so that handlers can run while a send is blocked (a blocked request
//! send polls requests and replies; a blocked reply send polls replies only, whose handlers
//! cannot send, so nesting stops at depth 2). One thread at a time uses the engine: the rank's
//! own thread in inline progress mode; in thread mode, whichever of the rank thread and the
//! progress thread owns the engine through the lease (see `lease.rs`).
//!
//! Each peer is reached by one route: the rings of the shared-memory transport when it is on
//! this rank's node (this rank included: the loopback path), the network transport otherwise.
//! Ring state is indexed by *local* index (position among the node's ranks); everything the
//! user sees uses global ranks.

mod dispatch;
mod job;
mod observe;
mod receive;
mod send;
mod setup;
mod try_send;
mod wait;

pub(crate) use job::{SystemOp, MAX_BARRIER_ROUNDS};
pub(crate) use setup::EngineSetup;

use super::backoff::Backoff;
use super::critical::CriticalState;
use super::handler::{ReplyFn, RequestFn};
use super::progress::ThreadSync;
use super::report::{Activity, Doing};
use super::stats::StatCells;
use super::watchdog::Watchdog;
use super::wireup::Watch;
use crate::counter::Counter;
use crate::transport::contract::Transport;
use crate::transport::net::link::NetLink;
use crate::transport::shm::link::Links;
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::Region;
use std::cell::Cell;
use std::sync::atomic::AtomicU32;

pub(crate) use crate::transport::contract::REMOTE;

/// Per-rank engine state.
pub(crate) struct Engine {
    pub(crate) me: usize,
    pub(crate) size: usize,
    /// Global rank -> local index, or [`REMOTE`].
    local_of: Vec<u32>,
    /// This rank's local index.
    me_local: usize,
    /// The rings to and from the ranks of this node.
    shm: Links,
    /// The network route, when some peers are on other nodes.
    net: Option<NetLink>,
    /// Its transport's name (`"udp"`, `"tcp"`; empty without one), for the hang report.
    net_kind: &'static str,
    /// The destination of the network send in progress (a blocked one names it).
    net_dest: Cell<usize>,
    /// The wait state of a blocked send, by channel (at most one per channel at a time: a
    /// send blocked on requests runs request handlers, whose replies may block in turn, but
    /// reply handlers cannot send).
    blocked_waits: [Cell<Backoff>; 2],
    /// Handler tables by index.
    requests: Vec<Box<RequestFn>>,
    replies: Vec<Box<ReplyFn>>,
    /// Handler names by channel and index, for the hang report.
    pub(crate) names: [Vec<String>; 2],
    pub(crate) stats: StatCells,
    /// Handlers running, nested (readable by the hang reporter).
    pub(crate) depth: Counter,
    /// The request handler that started last (for the hang report: one relaxed store per
    /// request handler; reply handlers, which cannot wait or send, are not named).
    pub(crate) running: AtomicU32,
    /// Where the rank's thread is when it waits long (see `report::activity`).
    pub(crate) activity: Activity,
    /// What a wait that spins out is for: a plain wait unless a barrier, finalize or blocked
    /// send says otherwise around its wait.
    purpose: Cell<Doing>,
    /// Critical sections of the rank thread: no handler runs while one is open (except on
    /// the progress thread while it holds the word's busy bit; the section waits for those).
    critical: CriticalState,
    /// The progress thread is running handlers (it holds the critical word's busy bit).
    serving: Cell<bool>,
    /// Waits that ended in a row right after the reply rings (see [`Engine::poll_waiting`]).
    early_exits: Cell<u32>,
    pub(crate) polite: bool,
    /// No other rank shares this node: every message from another rank comes through the
    /// network, so an empty poll needs no `pause` (no ring head is written from another core)
    /// and skipping it brings the next network poll sooner.
    net_only: bool,
    /// `VOLLEY_WAIT=block`.
    block: bool,
    /// This process registered for `membarrier`: its sleepers fence for their senders.
    membarrier: bool,
    /// The engine lease and the wake-up state of a blocked wait, in thread progress mode.
    thread: Option<ThreadSync>,
    /// The watchdog's thread, which stops when this is dropped (its marks are set by the
    /// wrapped handlers); read only by tests, for its reports.
    #[cfg_attr(not(test), allow(dead_code))]
    watchdog: Option<Watchdog>,
    barrier_arrivals: [[Cell<u32>; MAX_BARRIER_ROUNDS]; 2],
    pub(crate) finalized_peers: Cell<usize>,
    /// Peers whose FinalizeAck arrived.
    pub(crate) finalize_acks: Cell<usize>,
    /// Which peers have sent their Finalize: a rank can only exit after we sent it our
    /// FinalizeAck, which we do after all Finalizes, so an exit of a rank not in this set is
    /// an exit without finalizing.
    finalized_from: Vec<Cell<bool>>,
    /// How this rank notices a rank that exited without finalizing.
    watch: Watch,
}

/// The engine as the rank thread and its progress thread share it.
#[derive(Debug)]
pub(crate) struct SharedEngine(Engine);

// SAFETY: the engine's `Cell` state, raw ring pointers and transport are used by one thread at a
// time. In inline mode that is the rank's thread alone: the `Runtime` holding the only handle
// is neither `Send` nor `Sync`. In thread mode the rank thread and the progress thread touch
// that state only while owning the engine (the lease in `ThreadSync`); what they touch without
// it is atomic (the critical word, the lease, doorbells) or immutable after construction
// (rank numbers, regions' addresses, handler tables, which are `Send + Sync`).
unsafe impl Send for SharedEngine {}
// SAFETY: as above.
unsafe impl Sync for SharedEngine {}

impl SharedEngine {
    pub(crate) fn new(engine: Engine) -> Self {
        Self(engine)
    }

    /// The engine. Callers other than the runtime's own thread must own the engine (the lease)
    /// for anything but the atomic and immutable parts (see the `Sync` note).
    #[inline(always)]
    pub(crate) fn get(&self) -> &Engine {
        &self.0
    }
}

/// What one round of the progress thread found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Served {
    /// Handlers ran.
    Handled,
    /// Nothing to do.
    Nothing,
    /// A critical section holds handlers back.
    Deferred,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("me", &self.me)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

impl Engine {
    pub(crate) fn own(&self) -> &Region {
        self.shm.region(self.me_local)
    }

    /// This rank's eventfd, which its senders write when it sleeps in `poll`.
    fn own_wake(&self) -> &WakeFd {
        self.shm.own_wake()
    }

    /// Wakes this rank's sleeping threads wherever they sleep (to stop a progress thread).
    pub(crate) fn wake_owner(&self) {
        self.own().doorbell().wake_owner(self.own_wake());
    }

    /// The region of `rank` when this rank can address it directly (ranks of this node).
    pub(crate) fn region_of(&self, rank: usize) -> Option<&Region> {
        let l = *self.local_of.get(rank)?;
        self.shm.get_region(l as usize)
    }

    #[inline]
    pub(crate) fn in_handler(&self) -> bool {
        self.depth.get() > 0
    }

    #[inline]
    pub(crate) fn in_critical(&self) -> bool {
        self.critical.depth() > 0
    }

    /// The engine lease and wake-up state, in thread progress mode.
    #[inline(always)]
    pub(crate) fn thread_sync(&self) -> Option<&ThreadSync> {
        self.thread.as_ref()
    }

    /// Whether handlers must wait: a critical section is open and this is not the progress
    /// thread finishing the handlers it began before the section (the section waits for it).
    #[inline(always)]
    fn handlers_held(&self) -> bool {
        self.critical.depth() > 0 && !self.serving.get()
    }

    /// The rank thread enters a critical section. Inline mode: a plain counter write. Thread
    /// mode: one atomic operation, and a wait if the progress thread is running handlers.
    #[inline]
    pub(crate) fn enter_critical(&self) {
        self.critical.enter(self.thread.is_some());
    }

    /// The rank thread leaves a critical section. Returns true when the outermost section
    /// ended with messages waiting: the caller then runs [`Engine::deliver_deferred`] (under
    /// the engine lease in thread mode).
    #[inline]
    pub(crate) fn leave_critical(&self) -> bool {
        let deferred = self.critical.leave(self.thread.is_some());
        if self.thread.is_some() {
            return deferred;
        }
        // Inline: single-threaded, nothing can slip in between the flag clear and this check.
        self.critical.depth() == 0 && !self.in_handler() && self.pending()
    }

    /// Whether anything waits to be handled: a frame at the head of a ring, or a message the
    /// network already took in.
    fn pending(&self) -> bool {
        self.shm.pending() || self.net.as_ref().is_some_and(NetLink::pending)
    }

    /// A send to this rank's own full ring inside a critical section: only this rank could
    /// drain it, and it may not run handlers now.
    #[cold]
    #[inline(never)]
    fn self_deadlock(&self) -> ! {
        panic!(
            "volley: rank {}: a send to itself inside a critical section found its own ring \
             full; only the handlers this section holds back could empty it",
            self.me
        )
    }

    #[cold]
    pub(crate) fn deliver_deferred(&self) {
        // Drain what is there, bounded so that a steady stream cannot hold the caller.
        for _ in 0..64 {
            if self.poll(true) == 0 && !self.pending() {
                break;
            }
        }
    }

    /// Flushes the credit of every incoming ring (before sleeping or exiting).
    pub(crate) fn flush_credit(&self) {
        self.shm.flush_credit();
    }

    /// Test hook: the rings.
    #[cfg(test)]
    pub(crate) fn shm(&self) -> &Links {
        &self.shm
    }
}
