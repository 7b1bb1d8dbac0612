//! The engine: injects frames into peers' rings, polls this rank's rings and runs handlers.
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

use super::backoff::Backoff;
use super::critical::CriticalState;
use super::handler::{Message, MessageClass, ReplyFn, ReplyToken, RequestFn};
use super::net_frame;
use super::path_marks;
use super::poll_policy::{NetPollState, PollPolicy};
use super::progress::ThreadSync;
use super::stats::{bump, NetworkStats, StatCells, Stats};
use super::watchdog::Watchdog;
use crate::bootstrap::rendezvous::{self, Notice};
use crate::error::{Error, Result};
use crate::sync::{AtomicU64, Ordering};
use crate::transport::net::{NetError, NetTransport};
use crate::transport::shm::doorbell::{Ordering as BellOrder, SleepOn};
use crate::transport::shm::frame::{FrameHeader, FrameKey, FrameKind, HeaderWord, PADDED};
use crate::transport::shm::ring::{
    Consumer, Producer, RingRef, CREDIT_HINT_WORD, MAX_FRAME_SLOTS, MAX_HINTED_ARGS, SLOT_BYTES,
};
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::{PoolFlags, Region, MEDIUM_MAX};
use crate::transport::Channel;
use crate::MAX_ARGS;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Instant;

/// Longest single sleep of a blocked wait (then the job's health is checked).
const SLEEP_MAX: std::time::Duration = std::time::Duration::from_millis(100);

/// Sends closer together than this share a flush (about the cost of one send system call).
const FLUSH_INTERVAL_NS: u64 = 2_000;

/// `local_of` entry of a rank not on this node; as the route of a reply (`ReplyToken`), the
/// network.
pub(crate) const REMOTE: u32 = u32::MAX;

/// Frames (skips and dropped ones included) one ring may retire in one poll before the poll
/// moves on (fairness).
const DRAIN_BUDGET: usize = 32;
/// How many slots ahead of the head a drain prefetches. A line takes about half a floor round
/// trip (50-60 ns here) to cross, several frames' worth of handling: with 2 the one-way flood
/// waited on most lines; 8 and 12 measured alike and best (interleaved pairs of `volley bench
/// am`, BENCHMARKS.md), 4 and 6 in between.
const PREFETCH_AHEAD: u64 = 8;
/// Waits in a row that may end right after the reply rings, leaving the request rings for
/// later (see [`Engine::poll_waiting`]); then one full poll comes first.
const EARLY_EXITS: u32 = 16;

/// [`Engine::deferred`] when no retirement waits.
const NO_DEFERRED: u32 = u32::MAX;

/// Most rounds a dissemination barrier can need (log2 of the largest job).
pub(crate) const MAX_BARRIER_ROUNDS: usize = 64;

/// Runtime-internal one-way operations (the handler field of a `System` frame).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub(crate) enum SystemOp {
    /// args: [epoch, round]
    Barrier = 1,
    /// Phase 1 of leaving: the sender will send no more requests.
    Finalize = 2,
    /// Phase 2: the sender has received every rank's Finalize (so it has handled every
    /// request sent to it and injected every reply). A rank exits only after all of these.
    FinalizeAck = 3,
}

/// Per-rank engine state.
pub(crate) struct Engine {
    pub(crate) me: usize,
    pub(crate) size: usize,
    /// The job key as frame headers are checked with it.
    key: FrameKey,
    /// Global rank -> local index, or [`REMOTE`].
    local_of: Vec<u32>,
    /// Local index -> global rank.
    local_ranks: Vec<usize>,
    /// This rank's local index.
    me_local: usize,
    /// What this rank sends through to each rank on this node, by local index.
    tx: Vec<TxPeer>,
    /// This rank's incoming rings with their consumer state, `[channel][src local]`: the poll
    /// loop walks one channel's rings in order.
    rx: [Vec<RxRing>; 2],
    /// Regions by local index. Declared after the ring views that point into them.
    regions: Vec<Region>,
    /// Eventfds by local index, written by a ring that finds that rank asleep in `poll`. Not
    /// in `tx`, whose entries every send indexes, so that those stay small.
    wakes: Vec<WakeFd>,
    pool_bufs: usize,
    /// The network route, when some peers are on other nodes.
    net: Option<NetRoute>,
    pool_next: [Cell<usize>; 2],
    /// Handler tables by index (the names stay with the builder and the watchdog).
    requests: Vec<Box<RequestFn>>,
    replies: Vec<Box<ReplyFn>>,
    pub(crate) stats: StatCells,
    depth: Cell<u64>,
    /// Critical sections of the rank thread: no handler runs while one is open (except on
    /// the progress thread while it holds the word's busy bit; the section waits for those).
    critical: CriticalState,
    /// The progress thread is running handlers (it holds the critical word's busy bit).
    serving: Cell<bool>,
    /// Waits that ended in a row right after the reply rings (see [`Engine::poll_waiting`]).
    early_exits: Cell<u32>,
    /// The reply ring (by local index of its sender) whose head frame ran its handler and
    /// ended a wait, but whose consumer has not yet moved past it: the wait left first, so
    /// that the requester's next request goes out sooner, and the next look at the reply
    /// rings finishes the retirement (see [`Engine::retire_deferred`]). [`NO_DEFERRED`]: none.
    deferred: Cell<u32>,
    /// The last frame this rank handled came alone ([`Engine::serve_short`], not a drain), and
    /// no one-slot frame has been sent since: the next one may be padded (see `ring`,
    /// "Padded frames"). A round trip's request and reply are such sends; a stream's are not.
    lone: Cell<bool>,
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
    /// The rendezvous connection, on which the launcher reports ranks that exited.
    launcher: Option<OwnedFd>,
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

/// How a rank with nothing to do sleeps, decided by the engine's owner and carried out
/// without it.
#[derive(Debug, Clone, Copy)]
pub(crate) enum SleepPlan {
    /// On the doorbell, after `Doorbell::prepare` returned `seen`.
    Bell {
        seen: u32,
        timeout: std::time::Duration,
    },
    /// In `poll` on the network socket and this rank's eventfd (a rank with network peers),
    /// after `Doorbell::prepare` announced it.
    Socket {
        fd: std::os::fd::RawFd,
        timeout: std::time::Duration,
    },
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("me", &self.me)
            .field("size", &self.size)
            .finish_non_exhaustive()
    }
}

/// A message from the network: source rank and bytes.
type Delivered = (usize, Vec<u8>);

/// The network transport and the messages it delivered that no handler has run for yet.
struct NetRoute {
    transport: RefCell<Box<dyn NetTransport>>,
    /// Requests and replies received, in arrival order per source. Requests wait here while a
    /// blocked reply send polls (it may run reply handlers only).
    inbox: [RefCell<VecDeque<Delivered>>; 2],
    /// Scratch for `progress`, kept to avoid an allocation per poll.
    scratch: Cell<Vec<Delivered>>,
    /// Encoding buffer for outgoing messages (taken while in use).
    encode_buf: Cell<Vec<u8>>,
    policy: RefCell<NetPollState>,
    epoch: Instant,
    /// When queued messages were last pushed out.
    last_flush: Cell<u64>,
    /// Whether a send since then left its message queued in the transport (a run of sends
    /// shares one flush; the poll that ran the handlers which sent them flushes at its end).
    unflushed: Cell<bool>,
    polls: Cell<u64>,
    empty_polls: Cell<u64>,
    /// Messages sent and handled through the network.
    sent: Cell<u64>,
    handled: Cell<u64>,
    /// Peers that left normally: a broken connection to them is no failure.
    departed: Vec<Cell<bool>>,
}

impl NetRoute {
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }
}

/// What the runtime hands the engine: how peers are reached and how to wait.
pub(crate) struct EngineSetup {
    /// Regions of the ranks on this node, by local index (this rank's own included).
    pub(crate) regions: Vec<Region>,
    /// Global rank of each local index.
    pub(crate) local_ranks: Vec<usize>,
    /// The network transport, connected, when some ranks are on other nodes.
    pub(crate) net: Option<Box<dyn NetTransport>>,
    /// When to poll the network.
    pub(crate) poll_policy: PollPolicy,
    /// Waits sleep once they have spun.
    pub(crate) block: bool,
    /// By local index: whether that rank wants its doorbell rung (see `TxPeer`).
    pub(crate) bells: Vec<Option<BellOrder>>,
    /// By local index: that rank's eventfd, written to wake it when it sleeps in `poll`.
    pub(crate) wakes: Vec<WakeFd>,
    /// This process registered for `membarrier` (see `doorbell.rs`).
    pub(crate) membarrier: bool,
    /// A progress thread will share the engine.
    pub(crate) thread: bool,
    /// Report handlers that run longer than this.
    pub(crate) watchdog: Option<std::time::Duration>,
}

/// A rank on this node as a destination: the rings this rank sends into, by channel, and
/// whether its doorbell must be rung after a send (it may sleep: block mode or a progress
/// thread) with how to order the ring after the frame. One entry per local index, so a send
/// finds all of it with one bounds check.
struct TxPeer {
    rings: [TxRing; 2],
    bell: Option<BellOrder>,
}

/// One outgoing ring and this rank's producer state for it.
struct TxRing {
    ring: RingRef<'static>,
    producer: Cell<Producer>,
}

impl TxRing {
    /// The common case of [`TxRing::reserve`], inline: `None` when the cached credit runs
    /// out or a skip is needed (the caller then calls [`TxRing::reserve`]).
    #[inline(always)]
    fn reserve_within(&self, nslots: u64) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_within(nslots)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// A one-slot reservation padded to its quarter (see [`Producer::reserve_padded`]).
    #[inline(always)]
    fn reserve_padded(&self) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_padded(self.ring)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// Reserves `nslots` slots (see [`Producer::reserve`]); `None` while the ring is full.
    #[inline(always)]
    fn reserve(&self, nslots: u64, key: FrameKey) -> Option<u64> {
        let mut producer = self.producer.get();
        let reserved = producer.reserve(self.ring, nslots, key);
        self.producer.set(producer);
        reserved
    }
}

/// A drain in progress: its consumer state, stored back into the ring when the drain ends, also
/// when a handler unwinds. The frame whose handler unwound is retired with the frames before
/// it: it was delivered, and running it again on the next poll would deliver it twice.
struct Draining<'a> {
    rx: &'a RxRing,
    consumer: Consumer,
    /// The slots of the frame at the head while `deliver` runs its handler, otherwise 0 (a
    /// one-slot short is retired before its handler runs).
    delivering: u64,
}

impl Drop for Draining<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.delivering != 0 {
            self.consumer.release(self.rx.ring, self.delivering);
        }
        self.rx.advance(self.consumer);
    }
}

/// The one-slot frame that [`Engine::serve_short`] hands to its handler: if the handler
/// unwinds, dropping this moves the consumer past the frame, so that it does not run again.
/// After a handler that returns, the guard is forgotten and the frame is retired (with its
/// credit) by [`Engine::retire_served`], now or, when the handler ended a wait, at the next
/// poll ([`Engine::deferred`]). The consumer state is read only then, after the handler, so
/// that none of it lies on the path from the frame to the handler.
struct Unwinding<'a> {
    rx: &'a RxRing,
    /// The frame is padded ([`HeaderWord::padded`]).
    padded: bool,
}

impl Drop for Unwinding<'_> {
    #[cold]
    fn drop(&mut self) {
        let mut consumer = self.rx.consumer.get();
        match self.padded {
            true => consumer.retire_padded(self.rx.ring),
            false => consumer.retire_one(),
        }
        self.rx.advance(consumer);
    }
}

/// A pooled medium buffer being read; dropping it (after the handler, or when the handler
/// unwinds) returns the buffer to its sender.
struct PooledBuffer<'a> {
    flags: PoolFlags<'a>,
    ch: Channel,
    idx: usize,
    bufs: usize,
}

impl Drop for PooledBuffer<'_> {
    fn drop(&mut self) {
        self.flags.release(self.ch, self.idx, self.bufs);
    }
}

/// Handlers delivered as one batch (the frames of one drain, or one network message) run at
/// one nesting depth: the depth and its statistic are settled once per batch, not once per
/// handler. Dropping the scope (also on unwind) restores the depth.
struct HandlerScope<'a> {
    engine: &'a Engine,
    depth: u64,
}

impl<'a> HandlerScope<'a> {
    #[inline(always)]
    fn enter(engine: &'a Engine) -> Self {
        let depth = engine.depth.get() + 1;
        engine.depth.set(depth);
        if depth > engine.stats.max_nesting.get() {
            engine.stats.max_nesting.set(depth);
        }
        Self { engine, depth }
    }

    /// Runs handler `index` of channel `ch` for `msg`, which came from local index `route`
    /// (or through the network: [`REMOTE`]), where a reply goes. `Err(())`: no such handler.
    /// (The watchdog, when on, is in the handlers themselves: see [`Watchdog::watch_requests`].)
    #[inline(always)]
    fn run(&self, ch: Channel, index: u16, msg: &Message<'_>, route: u32) -> Result<(), ()> {
        let engine = self.engine;
        let found = match ch {
            Channel::Request => engine
                .requests
                .get(index as usize)
                .map(|f| f(msg, ReplyToken::new(engine, msg.src, route))),
            Channel::Reply => engine.replies.get(index as usize).map(|f| f(msg)),
        };
        found.ok_or(())
    }
}

impl Drop for HandlerScope<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.engine.depth.set(self.depth - 1);
    }
}

/// One incoming ring and this rank's consumer state for it.
struct RxRing {
    /// The frame at the consumer's head (its header word first) and the sequence the next
    /// frame carries: what the poll loop watches, kept ready so that checking a ring is three
    /// loads and a compare, and serving a one-slot frame needs no other address. The pointer
    /// is derived from the whole ring, so it covers the frame's slot (see `RingRef::frame_ptr`).
    watch: Cell<(*mut u64, u64)>,
    /// Whether frames have been arriving in a stream: then each poll drains the ring in one
    /// batch instead of serving the head frame by itself first (see `poll_rings`).
    streaming: Cell<bool>,
    /// The local index of the rank that sends into this ring.
    src: u32,
    /// The global rank that sends into this ring (kept here: a drain reads it with the ring's
    /// state, not from a table with a bounds check).
    src_rank: usize,
    ring: RingRef<'static>,
    consumer: Cell<Consumer>,
}

impl RxRing {
    /// The ring `ring`, which local index `src` (global rank `src_rank`) sends into, read from
    /// `consumer`'s position on.
    fn new(ring: RingRef<'static>, consumer: Consumer, src: usize, src_rank: usize) -> Self {
        Self {
            watch: Cell::new(Self::watch_of(ring, consumer)),
            streaming: Cell::new(false),
            src: src as u32,
            src_rank,
            ring,
            consumer: Cell::new(consumer),
        }
    }

    /// What to watch for the next frame of `ring` read by `consumer`.
    #[inline(always)]
    fn watch_of(ring: RingRef<'static>, consumer: Consumer) -> (*mut u64, u64) {
        (ring.frame_ptr(consumer.head()).cast(), consumer.next_seq())
    }

    /// The header word at the head, if it starts the next frame.
    #[inline(always)]
    fn ready_word(&self) -> Option<u64> {
        let word = self.head_word();
        Consumer::starts_next(word, self.watch.get().1).then_some(word)
    }

    /// Whether a frame is waiting at the head.
    #[inline(always)]
    fn ready(&self) -> bool {
        self.ready_word().is_some()
    }

    /// The word in the header slot at the head, whatever it is (see [`RxRing::ready_word`]
    /// for whether it starts the next frame).
    #[inline(always)]
    fn head_word(&self) -> u64 {
        let (frame, _) = self.watch.get();
        // SAFETY: `frame` points at the header word of a slot of this ring (8-aligned: slots
        // are 64-aligned), which lives in the region mapped for as long as the engine; every
        // access to that word, ours and the producer's, is atomic.
        let header = unsafe { AtomicU64::from_ptr(frame) };
        // Acquire: pairs with the producer's release in `RingRef::publish`, so the frame's
        // other words, read after this, are the ones written before it was published.
        header.load(Ordering::Acquire)
    }

    /// Stores the consumer state after frames were retired.
    #[inline(always)]
    fn advance(&self, consumer: Consumer) {
        self.consumer.set(consumer);
        self.watch.set(Self::watch_of(self.ring, consumer));
    }
}

/// What [`Engine::serve_short`] did with the frame at a ring's head.
enum HeadFrame {
    /// It is not a one-slot short: nothing was done (the drain takes it).
    Other,
    /// The frame was served; its handler ran (1) or it named none and was dropped (0).
    Ran(usize),
    /// A reply handler ran and the poll's `stop` ended it; the frame's retirement waits for
    /// the next poll ([`Engine::deferred`]).
    Left,
}

/// How the payload of a frame travels.
enum Payload<'p> {
    None,
    Inline(&'p [u8]),
    Pooled { len: usize, idx: usize },
    Long { len: usize, offset: usize },
}

impl Engine {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        size: usize,
        key: u64,
        setup: EngineSetup,
        requests: Vec<(String, Box<RequestFn>)>,
        replies: Vec<(String, Box<ReplyFn>)>,
        polite: bool,
        launcher: Option<OwnedFd>,
    ) -> Self {
        let EngineSetup {
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
        } = setup;
        assert_eq!(bells.len(), local_ranks.len());
        assert_eq!(wakes.len(), local_ranks.len());
        // A reply token carries a rank in 32 bits (see `ReplyToken`).
        assert!(u32::try_from(size).is_ok(), "a job of {size} ranks");
        let mut local_of = vec![REMOTE; size];
        for (l, &r) in local_ranks.iter().enumerate() {
            local_of[r] = l as u32;
        }
        let me_local = local_of[me] as usize;
        assert!(me_local < regions.len() && regions.len() == local_ranks.len());
        let layout = *regions[me_local].layout();
        let nlocal = regions.len();
        let net_only = nlocal == 1 && net.is_some();
        let view = |r: RingRef<'_>| -> RingRef<'static> {
            // SAFETY: a RingRef points into a region's mapping, whose address never changes
            // while the Region is alive (moving the Region value does not move the mapping).
            // The regions live in this Engine next to the views and are unmapped only when the
            // Engine is dropped, after which no view is used.
            unsafe { std::mem::transmute::<RingRef<'_>, RingRef<'static>>(r) }
        };
        let tx = (0..nlocal)
            .zip(bells)
            .map(|(d, bell)| TxPeer {
                rings: [Channel::Request, Channel::Reply].map(|ch| TxRing {
                    ring: view(regions[d].ring(me_local, ch)),
                    producer: Cell::new(Producer::new(layout.ring_slots)),
                }),
                bell,
            })
            .collect();
        let rx = [Channel::Request, Channel::Reply].map(|ch| {
            (0..nlocal)
                .map(|s| {
                    let ring = view(regions[me_local].ring(s, ch));
                    RxRing::new(ring, Consumer::new(layout.ring_slots), s, local_ranks[s])
                })
                .collect()
        });
        // A rank alone on its node has nothing cheaper than the network to poll.
        let policy = if nlocal == 1 {
            PollPolicy::Always
        } else {
            poll_policy
        };
        let watchdog = watchdog.map(|limit| {
            let req = requests.iter().map(|(n, _)| n.clone()).collect();
            let rep = replies.iter().map(|(n, _)| n.clone()).collect();
            Watchdog::start(me, limit, [req, rep])
        });
        let mut requests: Vec<Box<RequestFn>> = requests.into_iter().map(|(_, f)| f).collect();
        let mut replies: Vec<Box<ReplyFn>> = replies.into_iter().map(|(_, f)| f).collect();
        if let Some(w) = &watchdog {
            // Timed in the handlers themselves, so that without a watchdog no handler pays
            // for one.
            requests = w.watch_requests(requests);
            replies = w.watch_replies(replies);
        }
        let net = net.map(|t| NetRoute {
            transport: RefCell::new(t),
            inbox: Default::default(),
            scratch: Cell::new(Vec::new()),
            encode_buf: Cell::new(Vec::new()),
            policy: RefCell::new(NetPollState::new(policy)),
            epoch: Instant::now(),
            last_flush: Cell::new(0),
            unflushed: Cell::new(false),
            polls: Cell::new(0),
            empty_polls: Cell::new(0),
            sent: Cell::new(0),
            handled: Cell::new(0),
            departed: (0..size).map(|_| Cell::new(false)).collect(),
        });
        Self {
            tx,
            rx,
            me,
            size,
            key: FrameKey::new(key),
            local_of,
            local_ranks,
            me_local,
            net,
            pool_bufs: layout.pool_bufs,
            regions,
            wakes,
            pool_next: Default::default(),
            requests,
            replies,
            stats: StatCells::default(),
            depth: Cell::new(0),
            critical: CriticalState::default(),
            serving: Cell::new(false),
            early_exits: Cell::new(0),
            deferred: Cell::new(NO_DEFERRED),
            lone: Cell::new(false),
            polite,
            net_only,
            block,
            membarrier,
            thread: thread.then(ThreadSync::default),
            watchdog,
            barrier_arrivals: std::array::from_fn(|_| std::array::from_fn(|_| Cell::new(0))),
            finalized_peers: Cell::new(0),
            finalize_acks: Cell::new(0),
            finalized_from: (0..size).map(|_| Cell::new(false)).collect(),
            launcher,
        }
    }

    /// Fails loudly if a peer has exited without finalizing: nothing it owed us can arrive, so
    /// waiting on would hang. Called from long waits only.
    #[cold]
    pub(crate) fn check_health(&self) {
        let Some(conn) = &self.launcher else {
            return;
        };
        let fatal = |why: String| -> ! {
            let line = format!("volley: rank {}: {why}; ending this rank\n", self.me);
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
            std::process::exit(70);
        };
        match rendezvous::poll_notices(conn) {
            Ok(notices) => {
                for Notice::Exited { rank } in notices {
                    if rank < self.size && rank != self.me && !self.finalized_from[rank].get() {
                        fatal(format!(
                            "rank {rank} exited without finalizing (dropping its Runtime) while \
                             this rank still runs"
                        ));
                    }
                }
            }
            Err(e) => fatal(format!("lost the launcher ({e})")),
        }
    }

    /// A frame whose length cannot be right: the ring is out of step and nothing after this
    /// frame can be trusted, so the rank stops loudly rather than read garbage.
    #[cold]
    #[inline(never)]
    fn corrupt_ring(&self, src: usize, ch: Channel, word: u64) -> ! {
        let line = format!(
            "volley: rank {}: corrupt frame header {word:#018x} on the {ch:?} ring from rank \
             {src}; ending this rank\n",
            self.me
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        std::process::exit(70);
    }

    /// One step of an idle wait.
    #[inline(always)]
    fn idle(&self, backoff: &mut Backoff) {
        if backoff.snooze(!self.net_only) {
            self.check_health();
        }
    }

    pub(crate) fn own(&self) -> &Region {
        &self.regions[self.me_local]
    }

    /// This rank's eventfd, which its senders write when it sleeps in `poll`.
    fn own_wake(&self) -> &WakeFd {
        &self.wakes[self.me_local]
    }

    /// Wakes this rank's sleeping threads wherever they sleep (to stop a progress thread).
    pub(crate) fn wake_owner(&self) {
        self.own().doorbell().wake_owner(self.own_wake());
    }

    /// The region of `rank` when this rank can address it directly (ranks of this node).
    pub(crate) fn region_of(&self, rank: usize) -> Option<&Region> {
        let l = *self.local_of.get(rank)?;
        self.regions.get(l as usize)
    }

    /// `rank`'s local index, or `None` when it is reached through the network.
    #[inline(always)]
    fn local(&self, rank: usize) -> Option<usize> {
        match self.local_of[rank] {
            REMOTE => None,
            l => Some(l as usize),
        }
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
        // A frame whose retirement a wait left for later is not waiting.
        self.retire_deferred();
        self.rx.iter().flatten().any(RxRing::ready)
            || self
                .net
                .as_ref()
                .is_some_and(|n| n.inbox.iter().any(|q| !q.borrow().is_empty()))
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

    fn check_dest(&self, dest: usize) -> Result<()> {
        if dest >= self.size {
            return Err(self.invalid_rank(dest));
        }
        Ok(())
    }

    #[cold]
    fn invalid_rank(&self, dest: usize) -> Error {
        Error::InvalidRank {
            rank: dest,
            size: self.size,
        }
    }

    fn check_handler(&self, ch: Channel, index: u16) -> Result<()> {
        let (registered, kind) = match ch {
            Channel::Request => (self.requests.len(), "request"),
            Channel::Reply => (self.replies.len(), "reply"),
        };
        if index as usize >= registered {
            return Err(Error::UnknownHandler {
                index,
                registered,
                kind,
            });
        }
        Ok(())
    }

    fn check_args(args: &[u64]) -> Result<()> {
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        Ok(())
    }

    /// Sends a short message.
    #[inline]
    pub(crate) fn send_short(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        // One bounds check for the rank and its route.
        let Some(&route) = self.local_of.get(dest) else {
            return Err(self.invalid_rank(dest));
        };
        self.send_short_by(dest, route, ch, handler, args)
    }

    /// Sends a short reply to `dest`, reached through local index `route` (or the network:
    /// [`REMOTE`]): the requester, whose rank needs no check.
    #[inline]
    pub(crate) fn reply_short(
        &self,
        dest: usize,
        route: u32,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.send_short_by(dest, route, Channel::Reply, handler, args)
    }

    /// Sends a short message to the valid rank `dest`, reached through local index `route` or
    /// the network ([`REMOTE`]).
    #[inline(always)]
    fn send_short_by(
        &self,
        dest: usize,
        route: u32,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // A local index has its rings; [`REMOTE`] (u32::MAX) has none: one compare tells the
        // route and bounds the index.
        match self.tx.get(route as usize) {
            Some(peer) => self.inject_to(
                route as usize,
                peer,
                ch,
                FrameKind::Short,
                handler,
                args,
                Payload::None,
            ),
            None => self.net_send(dest, ch, FrameKind::Short, handler, args, &[], 0),
        }
        self.stats.sent(ch, MessageClass::Short);
        Ok(())
    }

    /// Sends a medium message: inline in the ring when it fits in a few slots, otherwise through
    /// one of this rank's medium buffers.
    pub(crate) fn send_medium(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        if payload.len() > MEDIUM_MAX {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: MEDIUM_MAX,
            });
        }
        let Some(dest) = self.local(dest) else {
            self.net_send(dest, ch, FrameKind::MediumInline, handler, args, payload, 0);
            self.stats.sent(ch, MessageClass::Medium);
            return Ok(());
        };
        let inline_bytes = (2 + args.len()) * 8 + payload.len();
        if inline_bytes <= MAX_FRAME_SLOTS as usize * SLOT_BYTES {
            self.inject(
                dest,
                ch,
                FrameKind::MediumInline,
                handler,
                args,
                Payload::Inline(payload),
            );
        } else {
            let idx = self.claim_medium_buffer(ch);
            // SAFETY: `idx` is a buffer we just claimed, so no receiver reads it until the frame
            // naming it is published; it holds MEDIUM_MAX >= payload.len() bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    payload.as_ptr(),
                    self.own().pool_buf(ch, idx),
                    payload.len(),
                );
            }
            let p = Payload::Pooled {
                len: payload.len(),
                idx,
            };
            self.inject(dest, ch, FrameKind::MediumPooled, handler, args, p);
        }
        self.stats.sent(ch, MessageClass::Medium);
        Ok(())
    }

    /// Sends a long message: copies `payload` into `dest`'s segment at `offset`, then a frame.
    pub(crate) fn send_long(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // Every rank's segment has the same length (checked at init).
        let segment_len = self.own().segment_len();
        if offset
            .checked_add(payload.len())
            .is_none_or(|end| end > segment_len)
        {
            return Err(Error::OutOfBounds {
                offset,
                len: payload.len(),
                segment_len,
            });
        }
        let Some(dest) = self.local(dest) else {
            if payload.len() + 256 > crate::transport::net::MAX_MESSAGE {
                return Err(Error::LongTooLarge {
                    len: payload.len(),
                    max: crate::transport::net::MAX_MESSAGE - 256,
                });
            }
            let off = offset as u64;
            self.net_send(dest, ch, FrameKind::Long, handler, args, payload, off);
            self.stats.sent(ch, MessageClass::Long);
            return Ok(());
        };
        let target = &self.regions[dest];
        // The sender writes the payload, so the sender checks it does not land on a segment.
        if let Err(reason) = target.segment_table().admit_long(offset, payload.len()) {
            let rank = self.local_ranks[dest];
            return Err(Error::Refused { rank, reason });
        }
        // SAFETY: bounds checked above; the target's segment is mapped for the life of the
        // engine. Concurrent writes to overlapping ranges are the program's race to avoid, as
        // with any remote write; they cannot touch memory outside the segment.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                target.segment_ptr().add(offset),
                payload.len(),
            );
        }
        let p = Payload::Long {
            len: payload.len(),
            offset,
        };
        self.inject(dest, ch, FrameKind::Long, handler, args, p);
        self.stats.sent(ch, MessageClass::Long);
        Ok(())
    }

    /// Sends a runtime-internal one-way message on the request channel.
    pub(crate) fn send_system(&self, dest: usize, op: SystemOp, args: &[u64]) {
        let (ch, kind, h) = (Channel::Request, FrameKind::System, op as u16);
        match self.local(dest) {
            Some(l) => self.inject(l, ch, kind, h, args, Payload::None),
            None => self.net_send(dest, ch, kind, h, args, &[], 0),
        }
        bump(&self.stats.system_sent);
    }

    fn claim_medium_buffer(&self, ch: Channel) -> usize {
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            let start = self.pool_next[ch as usize].get();
            if let Some(idx) = self.own().pool_flags().claim(ch, start, self.pool_bufs) {
                self.pool_next[ch as usize].set(idx + 1);
                return idx;
            }
            if !blocked {
                blocked = true;
                bump(&self.stats.blocked_sends);
            }
            self.wait_step(ch, &mut backoff);
        }
    }

    /// One step of a blocked send: a blocked request polls everything, a blocked reply polls
    /// replies only.
    fn wait_step(&self, ch: Channel, backoff: &mut Backoff) {
        if self.poll(ch == Channel::Request) == 0 {
            self.idle(backoff);
        } else {
            backoff.reset();
        }
    }

    /// Sends one message through the network transport, polling while its window is full.
    #[allow(clippy::too_many_arguments)]
    #[inline(never)]
    fn net_send(
        &self,
        dest: usize,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: u64,
    ) {
        let net = self
            .net
            .as_ref()
            .expect("a rank off this node implies a network route");
        let mut buf = net.encode_buf.take();
        net_frame::encode(&mut buf, ch, kind, handler, args, payload, offset);
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            let now = net.now();
            let sent = net.transport.borrow_mut().send(dest, &buf, now);
            match sent {
                Ok(()) => {
                    // A message alone leaves at once; messages sent in a quick run share the
                    // system calls of a flush every FLUSH_INTERVAL_NS (and a poll flushes too).
                    if now.saturating_sub(net.last_flush.get()) >= FLUSH_INTERVAL_NS {
                        self.flush_net_at(now);
                    } else {
                        net.unflushed.set(true);
                    }
                    break;
                }
                Err(NetError::WouldBlock) => {
                    if !blocked {
                        blocked = true;
                        bump(&self.stats.blocked_sends);
                    }
                    // The window opens only when acks arrive: poll the network itself, not
                    // just when the policy's turn comes.
                    self.poll_net(ch == Channel::Request, true);
                    self.wait_step(ch, &mut backoff);
                }
                Err(e) => self.net_failed(e),
            }
        }
        net.encode_buf.set(buf);
        if kind != FrameKind::System {
            bump(&net.sent);
        }
    }

    /// Pushes out what the network transport has queued.
    #[inline]
    pub(crate) fn flush_net(&self) {
        if let Some(net) = &self.net {
            self.flush_net_at(net.now());
        }
    }

    fn flush_net_at(&self, now: u64) {
        let Some(net) = &self.net else { return };
        let result = net.transport.borrow_mut().flush(now);
        // From the flush's end: a flush that takes longer than the interval must not make
        // every following send flush again.
        net.last_flush.set(net.now());
        net.unflushed.set(false);
        if let Err(e) = result {
            self.net_peer_failed(e);
        }
    }

    /// A network failure the rank cannot recover from: report it and end the rank, as for a
    /// corrupt ring (the launcher then ends the job and names this rank).
    #[cold]
    #[inline(never)]
    fn net_failed(&self, e: NetError) -> ! {
        let line = format!(
            "volley: rank {}: network transport failed: {e}; ending this rank\n",
            self.me
        );
        let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        // A peer that died is usually seen here before its launcher has reaped it: give the
        // launcher a moment to stop this rank and name the rank that really failed.
        if self.launcher.is_some() {
            std::thread::sleep(std::time::Duration::from_secs(2));
        }
        std::process::exit(70);
    }

    /// Polls the network transport (when `force` or the policy says so) and runs the handlers
    /// of what it delivered: replies always, requests if `requests`. Returns handlers run.
    #[inline(never)]
    fn poll_net(&self, requests: bool, force: bool) -> usize {
        let Some(net) = &self.net else {
            return 0;
        };
        if force || net.policy.borrow_mut().tick() {
            let mut scratch = net.scratch.take();
            let now = net.now();
            net.last_flush.set(now);
            net.unflushed.set(false);
            let result = net.transport.borrow_mut().progress(now, &mut scratch);
            bump(&net.polls);
            if scratch.is_empty() {
                bump(&net.empty_polls);
            }
            net.policy.borrow_mut().record(scratch.len());
            for (src, msg) in scratch.drain(..) {
                // The channel bit is in the first word; a message too short for it is
                // dropped by the decoder later, so any channel will do.
                let reply = msg.get(3).is_some_and(|b| b & 1 != 0);
                net.inbox[reply as usize].borrow_mut().push_back((src, msg));
            }
            net.scratch.set(scratch);
            if let Err(e) = result {
                self.net_peer_failed(e);
            }
        }
        let mut handled = 0;
        if self.handlers_held() {
            return 0;
        }
        for (ch, wanted) in [(Channel::Reply, true), (Channel::Request, requests)] {
            if !wanted {
                continue;
            }
            // One message at a time: handlers may poll again and append to the inbox.
            loop {
                let next = net.inbox[ch as usize].borrow_mut().pop_front();
                let Some((src, msg)) = next else { break };
                match self.deliver_net(src, ch, &msg) {
                    Ok(user) => {
                        handled += 1;
                        if user {
                            bump(&net.handled);
                        }
                    }
                    Err(()) => bump(&self.stats.dropped),
                }
                net.transport.borrow_mut().recycle(src, msg);
            }
        }
        handled
    }

    /// A failed pair: harmless when the peer had finished (it sent us its FinalizeAck, so
    /// it needs nothing more and we expect nothing more), fatal otherwise.
    fn net_peer_failed(&self, e: NetError) {
        if let NetError::PeerFailed { peer, .. } = &e {
            if let Some(net) = &self.net {
                if net.departed.get(*peer).is_some_and(Cell::get) {
                    return;
                }
            }
        }
        self.net_failed(e)
    }

    /// Runs the handler of one network message; `Ok(true)` for a user handler, `Ok(false)`
    /// for a runtime message.
    fn deliver_net(&self, src: usize, ch: Channel, bytes: &[u8]) -> Result<bool, ()> {
        let f = net_frame::decode(bytes).ok_or(())?;
        if f.ch != ch {
            return Err(());
        }
        let args = &f.args[..f.nargs];
        let (class, payload, offset): (MessageClass, &[u8], usize) = match f.kind {
            FrameKind::System if ch == Channel::Request => {
                return self.deliver_system(src, f.handler, args).map(|()| false)
            }
            FrameKind::Short => (MessageClass::Short, &[], 0),
            FrameKind::MediumInline => (MessageClass::Medium, f.payload, 0),
            FrameKind::Long => {
                let seg = self.own();
                let offset = usize::try_from(f.offset).map_err(|_| ())?;
                if offset
                    .checked_add(f.payload.len())
                    .is_none_or(|e| e > seg.segment_len())
                {
                    return Err(());
                }
                // The sender could not see our segments: refused here, dropped and counted.
                seg.segment_table()
                    .admit_long(offset, f.payload.len())
                    .map_err(|_| ())?;
                // SAFETY: bounds checked against our own segment, which stays mapped. Writing
                // before the handler runs is the long message's contract; the handler then
                // sees the segment's copy, as on the shared-memory path.
                let placed = unsafe {
                    let dst = seg.segment_ptr().add(offset);
                    std::ptr::copy_nonoverlapping(f.payload.as_ptr(), dst, f.payload.len());
                    std::slice::from_raw_parts(dst, f.payload.len())
                };
                (MessageClass::Long, placed, offset)
            }
            _ => return Err(()),
        };
        let msg = Message::new(src, args, class, payload, offset);
        let result = HandlerScope::enter(self).run(ch, f.handler, &msg, REMOTE);
        if result.is_ok() {
            self.stats.handled(ch, class);
        }
        result.map(|()| true)
    }

    /// Reserves ring space (polling while there is none), writes the frame and publishes it.
    #[inline(always)]
    fn inject(
        &self,
        dest: usize,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: Payload<'_>,
    ) {
        self.inject_to(dest, &self.tx[dest], ch, kind, handler, args, payload);
    }

    /// [`Engine::inject`] with `dest`'s entry already found.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn inject_to(
        &self,
        dest: usize,
        peer: &TxPeer,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        payload: Payload<'_>,
    ) {
        let (extra, inline): ([u64; 2], &[u8]) = match payload {
            Payload::None => ([0, 0], &[]),
            Payload::Inline(p) => ([p.len() as u64, 0], p),
            Payload::Pooled { len, idx } => ([len as u64 | (idx as u64) << 32, 0], &[]),
            Payload::Long { len, offset } => ([len as u64, offset as u64], &[]),
        };
        let nextra = extra_words(kind);
        let words = 1 + nextra + args.len();
        // Without a payload inline (known when this is inlined), whole words: a shift.
        let nslots = match inline.is_empty() {
            true => words.div_ceil(SLOT_BYTES / 8),
            false => (words * 8 + inline.len()).div_ceil(SLOT_BYTES),
        } as u64;
        debug_assert!(nslots <= MAX_FRAME_SLOTS);
        let tx = &peer.rings[ch as usize];
        let ring = tx.ring;
        // The first one-slot frame after a frame that came alone (a round trip's turn) is
        // padded if its receiver has caught up: see `ring`, "Padded frames".
        let padded = nslots == 1 && self.lone.get();
        let padded_at = match padded {
            true => {
                self.lone.set(false);
                tx.reserve_padded()
            }
            false => None,
        };
        let header = FrameHeader {
            handler,
            nargs: args.len() as u8,
            kind,
            nslots: nslots as u8,
        };
        // Writes the frame's words at `pos` (all but the header); returns its first word.
        let write = |pos: u64| {
            let frame = ring.frame_ptr(pos).cast::<u64>();
            // SAFETY: slots pos..pos+nslots are reserved for us and contiguous (frames never
            // wrap); the header, words and payload take at most nslots * 64 bytes, so every
            // write stays inside the reservation. The receiver does not read them until the
            // header is published.
            unsafe {
                if nextra > 0 {
                    frame.add(1).write(extra[0]);
                    if nextra > 1 {
                        frame.add(2).write(extra[1]);
                    }
                }
                let at = frame.add(1 + nextra);
                copy_args(args, at);
                if !inline.is_empty() {
                    std::ptr::copy_nonoverlapping(
                        inline.as_ptr(),
                        frame.cast::<u8>().add((1 + nextra + args.len()) * 8),
                        inline.len(),
                    );
                }
            }
            frame
        };
        // Two ways to publish, so that a stream's sends carry no padding flag to merge.
        match padded_at {
            Some(pos) => {
                let frame = write(pos);
                // A padded short hands back the credit of the ring its answer will come
                // through (see `ring`, "Credit hints"), so that the answer can be padded too.
                if kind == FrameKind::Short && args.len() <= MAX_HINTED_ARGS {
                    let rings = &self.rx[ch.other() as usize];
                    debug_assert!(dest < rings.len());
                    // SAFETY: `dest` is a local index (it found `peer` in `tx`), and there is
                    // a ring from every local index on each channel.
                    let consumed = unsafe { rings.get_unchecked(dest) }.consumer.get().head();
                    // SAFETY: the frame's one reserved slot holds the header and at most
                    // MAX_HINTED_ARGS arguments, so its last word is ours and unused; the
                    // receiver reads it only after acquiring the header published below.
                    unsafe { frame.add(CREDIT_HINT_WORD).write(consumed) };
                }
                ring.publish(pos, header.encode_with(pos, self.key, PADDED));
            }
            None => {
                let pos = match tx.reserve_within(nslots) {
                    Some(pos) => pos,
                    None => self.reserve_out_of_line(dest, ch, nslots),
                };
                write(pos);
                ring.publish(pos, header.encode(pos, self.key));
            }
        }
        if kind == FrameKind::Short {
            path_marks::mark(ch, path_marks::Point::Published);
        }
        if let Some(order) = peer.bell {
            self.regions[dest]
                .doorbell()
                .ring_if_asleep(order, &self.wakes[dest]);
        }
    }

    /// The rest of a reservation whose common case failed: a skip, fresh credit, or a wait for
    /// it. Out of line, so a send's common case is two compares.
    #[cold]
    #[inline(never)]
    fn reserve_out_of_line(&self, dest: usize, ch: Channel, nslots: u64) -> u64 {
        match self.tx[dest].rings[ch as usize].reserve(nslots, self.key) {
            Some(pos) => pos,
            None => self.reserve_blocked(dest, ch, nslots),
        }
    }

    /// The ring to `dest` is full: polls (requests too only for a blocked request, so that
    /// replies always drain) until the receiver returns enough credit for `nslots`.
    #[cold]
    #[inline(never)]
    fn reserve_blocked(&self, dest: usize, ch: Channel, nslots: u64) -> u64 {
        let tx = &self.tx[dest].rings[ch as usize];
        let mut backoff = Backoff::new(self.polite);
        let mut blocked = false;
        loop {
            if dest == self.me_local && self.handlers_held() {
                self.self_deadlock();
            }
            if !blocked {
                blocked = true;
                bump(&self.stats.blocked_sends);
            }
            self.wait_step(ch, &mut backoff);
            // Handlers that ran meanwhile never send on this ring (a request handler can only
            // reply, on the other channel; a reply handler cannot send), but the state is
            // re-read each time, so that nothing depends on it.
            if let Some(pos) = tx.reserve(nslots, self.key) {
                return pos;
            }
        }
    }

    /// Polls this rank's rings: replies always, requests if `requests`. Returns frames handled.
    #[inline]
    pub(crate) fn poll(&self, requests: bool) -> usize {
        match self.poll_replies(requests) {
            None => 0,
            Some(replies) => self.poll_after_replies(requests, replies),
        }
    }

    /// A poll for a wait on `cond`. After a reply handler ran it checks `cond` at once,
    /// before the rest of the reply rings and the request rings: a requester whose reply just
    /// came sends its next request that much sooner. `None`: `cond` holds and the rest of the
    /// poll was left (or handlers are held). At most [`EARLY_EXITS`] waits in a row end that
    /// way, so no ring is left for long (each wait that does not end at its first poll serves
    /// them all).
    #[inline(always)]
    fn poll_waiting(&self, cond: &mut impl FnMut() -> bool) -> Option<usize> {
        bump(&self.stats.polls);
        if self.handlers_held() {
            self.poll_held(true);
            return None;
        }
        let early = self.early_exits.get();
        let Some(replies) = self.poll_rings(Channel::Reply, || early < EARLY_EXITS && cond())
        else {
            self.early_exits.set(early + 1);
            return None;
        };
        self.early_exits.set(0);
        Some(self.poll_after_replies(true, replies))
    }

    /// The first part of a poll: the reply rings. `None` when handlers are held (the poll is
    /// then over; the network was polled for requests too if `requests`).
    #[inline(always)]
    fn poll_replies(&self, requests: bool) -> Option<usize> {
        bump(&self.stats.polls);
        if self.handlers_held() {
            self.poll_held(requests);
            return None;
        }
        // Every ring with a frame is served up to its budget in each poll, so no source can
        // starve another; replies first, as a blocked reply send needs them.
        self.poll_rings(Channel::Reply, || false)
    }

    /// A poll while handlers are held: they wait for the section to end, but the network
    /// still takes in what arrives (and acknowledges it) so that peers do not time out.
    #[cold]
    #[inline(never)]
    fn poll_held(&self, requests: bool) {
        self.critical.defer(self.thread.is_some());
        self.poll_net(requests, false);
    }

    /// The rest of a poll after the reply rings, which handled `replies` frames.
    #[inline(always)]
    fn poll_after_replies(&self, requests: bool, replies: usize) -> usize {
        let mut handled = replies;
        if requests {
            handled += self.poll_rings(Channel::Request, || false).unwrap_or(0);
        }
        if let Some(net) = &self.net {
            handled += self.poll_net(requests, false);
            // What the handlers just sent (replies, above all) leaves now, together, instead
            // of waiting for the next network poll: the peer is waiting for it.
            if handled > 0 && net.unflushed.get() {
                self.flush_net();
            }
        }
        if handled == 0 {
            bump(&self.stats.empty_polls);
        }
        handled
    }

    /// Serves the rings of channel `ch` that have a frame at their head. The readiness check
    /// is inlined and cheap; the delivery path is called only for a ring that has a frame, so
    /// an empty poll is a handful of loads. After each ring whose frames ran handlers, `stop`
    /// may end the scan there (`None`): a wait whose condition a reply handler just made true
    /// leaves at once (see [`Engine::poll_waiting`]); other polls pass `|| false`.
    #[inline(always)]
    fn poll_rings(&self, ch: Channel, mut stop: impl FnMut() -> bool) -> Option<usize> {
        if ch == Channel::Reply {
            self.retire_deferred();
        }
        let mut rings = self.rx[ch as usize].iter();
        let mut handled = 0;
        // The scan is a loop of its own, so that the delivery path's state does not crowd
        // the registers of the loop that every empty poll runs; it goes on from the ring
        // after the one it found.
        while let Some((rx, word)) = rings.find_map(|rx| Some((rx, rx.ready_word()?))) {
            // A path starts here, where the frame was seen: what the poll does before it
            // reads the frame is on the path too.
            path_marks::mark(ch, path_marks::Point::Seen);
            // A lone short frame (a round trip's) is served at once; a stream goes to the
            // drain, whose set-up is paid once per batch.
            let first = match rx.streaming.get() {
                false => self.serve_short(rx, word, ch, &mut stop),
                true => HeadFrame::Other,
            };
            // One call site for the drain, so that it is compiled once.
            let drain = match first {
                HeadFrame::Ran(n) => {
                    handled += n;
                    // A frame right behind the first: a stream has begun.
                    rx.ready()
                }
                HeadFrame::Left => return None,
                HeadFrame::Other => true,
            };
            if drain {
                let n = self.drain(rx, ch);
                // The stream goes on while drains find more than one frame.
                rx.streaming
                    .set(matches!(first, HeadFrame::Ran(_)) || n > 1);
                handled += n;
                if n > 0 && stop() {
                    return None;
                }
            }
        }
        Some(handled)
    }

    /// After the handler of a padded frame `h` at `frame` that came through `rx` on channel
    /// `ch` (before the frame is retired): fresh credit for the ring this rank answers
    /// through, the one it sends into on the other channel to the same rank, so that its next
    /// frame there can be padded too. From the frame's credit hint if it carries one (see
    /// `ring`, "Credit hints"), otherwise from that ring's control line: either way off the
    /// path from a frame to its answer.
    #[inline(always)]
    fn credit_after_padded(&self, rx: &RxRing, ch: Channel, h: HeaderWord, frame: *const u64) {
        let tx = &self.tx[rx.src as usize].rings[ch.other() as usize];
        let mut producer = tx.producer.get();
        if h.carries_hint() {
            // SAFETY: the frame's slot is published to us and not yet retired, so its sender
            // leaves it untouched; its last word is the hint (`carries_hint`).
            producer.take_hint(tx.ring, unsafe { frame.add(CREDIT_HINT_WORD).read() });
        } else {
            producer.refresh(tx.ring);
        }
        tx.producer.set(producer);
    }

    /// [`Engine::credit_after_padded`] out of line, for the drain: a padded frame (a round
    /// trip's) rarely meets a drain, and the drain's loop keeps its registers for streams.
    #[cold]
    #[inline(never)]
    fn credit_after_padded_in_drain(
        &self,
        rx: &RxRing,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) {
        self.credit_after_padded(rx, ch, h, frame);
    }

    /// Finishes the retirement that a wait left for later (see [`Engine::deferred`]): before
    /// anything reads the reply rings' consumer state again.
    #[inline(always)]
    fn retire_deferred(&self) {
        let deferred = self.deferred.replace(NO_DEFERRED);
        if deferred != NO_DEFERRED {
            let rx = &self.rx[Channel::Reply as usize][deferred as usize];
            self.retire_served(
                rx,
                Channel::Reply,
                HeaderWord::checked_before(rx.head_word()),
            );
        }
    }

    /// Moves the consumer of `rx` (of channel `ch`) past the one-slot short frame at its head,
    /// whose handler has run and whose header is `h` (and past its padding if it is padded),
    /// takes the credit hint it carries, and returns credit if a batch has accumulated.
    #[inline(always)]
    fn retire_served(&self, rx: &RxRing, ch: Channel, h: HeaderWord) {
        let ring = rx.ring;
        let mut consumer = rx.consumer.get();
        if h.padded() {
            self.credit_after_padded(rx, ch, h, rx.watch.get().0);
            consumer.retire_padded(ring);
        } else {
            consumer.retire_one();
            // A receiver that keeps up with a stream takes most frames here, one per poll:
            // fetching a later slot now keeps several cache misses in flight, as the drain
            // does.
            ring.prefetch(consumer.head() + PREFETCH_AHEAD - 1);
        }
        consumer.settle(ring);
        rx.advance(consumer);
    }

    /// The common case of a ring with a frame at its head: a short frame in one slot, served
    /// without the drain's set-up, which would otherwise lie on a round trip's path. `word`
    /// is the frame's header, read by the poll. After a reply handler ran, `stop` may end the
    /// poll at once ([`HeadFrame::Left`]), before the frame is retired (see [`Engine::deferred`]).
    #[inline(always)]
    fn serve_short(
        &self,
        rx: &RxRing,
        word: u64,
        ch: Channel,
        stop: &mut impl FnMut() -> bool,
    ) -> HeadFrame {
        let Some(h) = HeaderWord::one_slot_short(word, self.key) else {
            return HeadFrame::Other;
        };
        let (frame, _) = rx.watch.get();
        // If the handler unwinds, the guard moves the consumer past its frame. Otherwise the
        // consumer moves after the handler, off the path from this frame to the answer its
        // handler sends (nothing the handler runs touches this ring's consumer: see `drain`).
        let unwinding = Unwinding {
            rx,
            padded: h.padded(),
        };
        // SAFETY: `frame` points at the frame's slot (see `RxRing::watch`), published to us,
        // which the sender leaves untouched until its credit returns; that happens only after
        // the handler (when the frame is retired, or in a later drain if the handler unwinds).
        // A one-slot short's arguments fit in its slot.
        let args = unsafe { std::slice::from_raw_parts(frame.add(1).cast_const(), h.nargs()) };
        let msg = Message::short(rx.src_rank, args);
        #[cfg(debug_assertions)]
        let entry = rx.consumer.get().head();
        let scope = HandlerScope::enter(self);
        self.lone.set(true);
        let ran = scope.run(ch, h.handler(), &msg, rx.src).is_ok();
        drop(scope);
        #[cfg(debug_assertions)]
        assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
        std::mem::forget(unwinding);
        if !ran {
            bump(&self.stats.dropped);
            self.retire_served(rx, ch, h);
            return HeadFrame::Ran(0);
        }
        self.stats.handled(ch, MessageClass::Short);
        if ch == Channel::Reply {
            // Marked for retirement before `stop` runs: a condition that polls retires it
            // there, instead of running its handler again.
            self.deferred.set(rx.src);
            if stop() {
                return HeadFrame::Left;
            }
            // Ours, or one that a poll inside `stop` left (ours was retired by that poll).
            self.retire_deferred();
        } else {
            self.retire_served(rx, ch, h);
        }
        HeadFrame::Ran(1)
    }

    /// Retires up to DRAIN_BUDGET frames from the ring `rx`, running their handlers; returns
    /// how many handlers ran.
    #[inline(always)]
    fn drain(&self, rx: &RxRing, ch: Channel) -> usize {
        let ring = rx.ring;
        let src = rx.src as usize;
        // Nothing that runs below touches this ring's consumer: a request handler's nested
        // polls serve reply rings only, reply handlers cannot poll at all, and no handler can
        // wait or sleep (which returns credit). So the state is stored back once, at the end.
        let mut draining = Draining {
            rx,
            consumer: rx.consumer.get(),
            delivering: 0,
        };
        #[cfg(debug_assertions)]
        let entry = draining.consumer.head();
        let (key, src_rank) = (self.key, rx.src_rank);
        let scope = HandlerScope::enter(self);
        // Frames that come in a batch are a stream's: what their handlers send is not padded.
        self.lone.set(false);
        // The message of a one-slot short frame: only its arguments change from frame to frame.
        let mut short = Message::short(src_rank, &[]);
        let mut handled = 0;
        for _ in 0..DRAIN_BUDGET {
            let Some(word) = draining.consumer.peek(ring) else {
                break;
            };
            let head = draining.consumer.head();
            // Start fetching a later slot now, so a stream of frames arrives with several
            // cache misses in flight instead of one at a time.
            ring.prefetch(head + PREFETCH_AHEAD);
            if let Some(h) = HeaderWord::one_slot_unpadded_short(word, key) {
                // The common case, kept short: a stream's frame (a padded one, a round
                // trip's, takes the general path below). A slot always lies within the ring,
                // and the header and up to 7 arguments fit in it.
                let frame = ring.frame_ptr(head).cast::<u64>().cast_const();
                // SAFETY: the frame's slot is published to us and stays untouched by the
                // sender until its credit returns, which happens only after the handler (at
                // `settle`, or in a later drain if the handler unwinds); the arguments fit.
                short.args = unsafe { std::slice::from_raw_parts(frame.add(1), h.nargs()) };
                // Retired now, so that it stays retired if its handler unwinds; the slot
                // returns to the sender only at `settle`, after the handler.
                draining.consumer.retire_one();
                if scope.run(ch, h.handler(), &short, src as u32).is_ok() {
                    self.stats.handled(ch, MessageClass::Short);
                    handled += 1;
                } else {
                    bump(&self.stats.dropped);
                }
                #[cfg(debug_assertions)]
                assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
                draining.consumer.settle(ring);
                continue;
            }
            // The length decides what we read and what we zero: it must be a legal frame
            // length that does not run past the end of the ring, whatever else is wrong.
            let mut claimed = FrameHeader::claimed_slots(word);
            if !ring.fits(head, claimed) {
                self.corrupt_ring(src, ch, word);
            }
            match HeaderWord::check(word, key) {
                Ok(h) if h.is(FrameKind::Skip) => {
                    if claimed != ring.slots_to_end(head) || h.padded() {
                        self.corrupt_ring(src, ch, word);
                    }
                }
                Ok(h) => {
                    let frame = ring.frame_ptr(head).cast::<u64>().cast_const();
                    // Its padding too (trusted only from a header whose check passed).
                    if h.padded() {
                        claimed = ring.quarter_end(head + claimed - 1) - head;
                    }
                    draining.delivering = claimed;
                    let delivered = self.deliver(&scope, src, ch, h, frame);
                    draining.delivering = 0;
                    if h.padded() {
                        self.credit_after_padded_in_drain(rx, ch, h, frame);
                    }
                    if delivered.is_err() {
                        bump(&self.stats.dropped);
                    } else {
                        handled += 1;
                    }
                }
                Err(_) => {
                    // A bad check byte: corrupt, or not from this job. Drop it; its length
                    // was checked above, so the ring stays in step if only other bits are
                    // damaged.
                    bump(&self.stats.dropped);
                }
            }
            #[cfg(debug_assertions)]
            assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
            draining.consumer.release(ring, claimed);
        }
        handled
    }

    /// Validates and runs one frame from local index `src` that the drain does not handle
    /// itself (any kind but a one-slot short and a skip), its handler in `scope`. `Err(())`
    /// means it was dropped.
    #[inline(never)]
    fn deliver(
        &self,
        scope: &HandlerScope<'_>,
        src: usize,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) -> Result<(), ()> {
        let src_rank = self.local_ranks[src];
        let nargs = h.nargs();
        let kind = h.kind();
        let frame_bytes = h.nslots() as usize * SLOT_BYTES;
        let nextra = extra_words(kind);
        let words = 1 + nextra + nargs;
        if words * 8 > frame_bytes {
            return Err(());
        }
        // SAFETY: the frame's nslots slots are published to us and stay untouched by the sender
        // until we release them after the handler returns; `words` fits inside them.
        let (w1, w2, args) = unsafe {
            (
                if nextra > 0 { *frame.add(1) } else { 0 },
                if nextra > 1 { *frame.add(2) } else { 0 },
                std::slice::from_raw_parts(frame.add(1 + nextra), nargs),
            )
        };
        // A pooled buffer goes back to its sender after the handler, also if it unwinds.
        let mut _pooled = None;
        let (class, payload, offset): (MessageClass, &[u8], usize) = match kind {
            // A short frame of more than one slot (8 or more arguments).
            FrameKind::Short => (MessageClass::Short, &[][..], 0),
            FrameKind::Skip => unreachable!("the drain retires skips itself"),
            FrameKind::System if ch == Channel::Request => {
                return self.deliver_system(src_rank, h.handler(), args)
            }
            FrameKind::System => return Err(()),
            FrameKind::MediumInline => {
                let len = w1 as usize;
                // `words * 8 <= frame_bytes` was checked above; no overflow here.
                if len > frame_bytes - words * 8 {
                    return Err(());
                }
                // SAFETY: checked above that the payload lies inside the frame's slots.
                let p = unsafe { std::slice::from_raw_parts(frame.add(words).cast::<u8>(), len) };
                (MessageClass::Medium, p, 0)
            }
            FrameKind::MediumPooled => {
                let len = (w1 & 0xffff_ffff) as usize;
                let idx = (w1 >> 32) as usize;
                if idx >= self.pool_bufs {
                    return Err(());
                }
                _pooled = Some(PooledBuffer {
                    flags: self.regions[src].pool_flags(),
                    ch,
                    idx,
                    bufs: self.pool_bufs,
                });
                if len > MEDIUM_MAX {
                    return Err(());
                }
                // SAFETY: the sender filled buffer idx before publishing the frame and will not
                // reuse it until `_pooled` releases its flag, when this function returns (after
                // the handler) or unwinds.
                let p =
                    unsafe { std::slice::from_raw_parts(self.regions[src].pool_buf(ch, idx), len) };
                (MessageClass::Medium, p, 0)
            }
            FrameKind::Long => {
                let len = w1 as usize;
                let offset = w2 as usize;
                let seg = self.own();
                if offset
                    .checked_add(len)
                    .is_none_or(|e| e > seg.segment_len())
                {
                    return Err(());
                }
                // SAFETY: bounds checked against our own segment.
                let p = unsafe { std::slice::from_raw_parts(seg.segment_ptr().add(offset), len) };
                (MessageClass::Long, p, offset)
            }
        };
        let msg = Message::new(src_rank, args, class, payload, offset);
        let result = scope.run(ch, h.handler(), &msg, src as u32);
        if result.is_ok() {
            self.stats.handled(ch, class);
        }
        result
    }

    fn deliver_system(&self, src: usize, op: u16, args: &[u64]) -> Result<(), ()> {
        match op {
            x if x == SystemOp::Barrier as u16 => {
                let (epoch, round) = (args.first().ok_or(())?, *args.get(1).ok_or(())? as usize);
                let c = self.barrier_arrivals[(*epoch & 1) as usize]
                    .get(round)
                    .ok_or(())?;
                c.set(c.get() + 1);
                Ok(())
            }
            x if x == SystemOp::Finalize as u16 => {
                if !self.finalized_from[src].replace(true) {
                    self.finalized_peers.set(self.finalized_peers.get() + 1);
                }
                Ok(())
            }
            x if x == SystemOp::FinalizeAck as u16 => {
                self.finalize_acks.set(self.finalize_acks.get() + 1);
                if let Some(net) = &self.net {
                    net.departed[src].set(true);
                }
                Ok(())
            }
            _ => Err(()),
        }
    }

    /// Polls until `cond` holds.
    #[inline]
    pub(crate) fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        // A wait whose condition already holds polls nothing: what this rank queued for the
        // network (a barrier notice, say) must still leave now, not at some later poll.
        self.flush_net();
        let mut backoff = Backoff::new(self.polite);
        while !cond() {
            let Some(handled) = self.poll_waiting(&mut cond) else {
                return;
            };
            if handled == 0 {
                if self.block && backoff.spun_out() {
                    // Stays spun out: after a sleep that brought nothing, sleep again at once
                    // (spinning again would cost 16k polls, system calls on a network).
                    match &self.thread {
                        None => self.sleep_until_traffic(),
                        Some(sync) => {
                            // The progress thread serves meanwhile and wakes us after
                            // handlers ran (only a handler can make `cond` true).
                            self.flush_credit();
                            self.flush_net();
                            sync.sleep_until_handled(SLEEP_MAX);
                        }
                    }
                } else {
                    self.idle(&mut backoff);
                }
            } else {
                backoff.reset();
            }
        }
    }

    /// Block mode: sleeps in the kernel until traffic arrives (or a bounded time passes; the
    /// caller polls and checks its condition either way).
    #[cold]
    #[inline(never)]
    fn sleep_until_traffic(&self) {
        if let Some(plan) = self.prepare_sleep() {
            self.sleep(plan);
            self.check_health();
        }
    }

    /// Gets ready to sleep until traffic arrives: returns every credit, sends what is queued
    /// (nobody may wait on a sleeper), announces the sleep on the doorbell and decides where to
    /// sleep; `None` if something is already waiting.
    pub(crate) fn prepare_sleep(&self) -> Option<SleepPlan> {
        self.flush_credit();
        self.flush_net();
        let bell = self.own().doorbell();
        // A rank with network peers sleeps in `poll` on its socket; shared-memory senders
        // (its node-mates, and its own other thread) then write its eventfd.
        let on = match self.net {
            Some(_) => SleepOn::Poll,
            None => SleepOn::Futex,
        };
        let seen = bell.prepare(self.membarrier, on);
        if self.pending() {
            bell.awake();
            return None;
        }
        let mut timeout = SLEEP_MAX;
        let Some(net) = &self.net else {
            return Some(SleepPlan::Bell { seen, timeout });
        };
        // Whatever ends the sleep, the next poll reads the socket.
        net.policy.borrow_mut().make_due();
        let transport = net.transport.borrow();
        if let Some(d) = transport.next_deadline() {
            timeout = timeout.min(std::time::Duration::from_nanos(d.saturating_sub(net.now())));
        }
        Some(SleepPlan::Socket {
            fd: transport.readable_fd(),
            timeout,
        })
    }

    /// Sleeps as planned by [`Engine::prepare_sleep`]; needs no engine state (the engine lease
    /// is not held). Returns true if the sleep lasted most of its timeout (nothing woke it).
    pub(crate) fn sleep(&self, plan: SleepPlan) -> bool {
        let bell = self.own().doorbell();
        let t = Instant::now();
        let timeout = match plan {
            SleepPlan::Bell { seen, timeout } => {
                bell.sleep(seen, timeout);
                timeout
            }
            SleepPlan::Socket { fd, timeout } => {
                self.own_wake().sleep_beside(fd, timeout);
                timeout
            }
        };
        bell.awake();
        t.elapsed() >= timeout / 2
    }

    /// The progress thread's round (owning the engine): polls and runs handlers unless a
    /// critical section holds them back.
    pub(crate) fn serve(&self) -> Served {
        if !self.critical.begin_handlers() {
            // Not even a network poll: by now the section may have ended, and a poll would
            // then run handlers without the busy bit. The section's end delivers.
            return Served::Deferred;
        }
        self.serving.set(true);
        let handled = self.poll(true);
        self.serving.set(false);
        self.critical.end_handlers();
        if handled > 0 {
            Served::Handled
        } else {
            Served::Nothing
        }
    }

    /// Takes one barrier arrival for (epoch, round), waiting for it.
    pub(crate) fn await_barrier_arrival(&self, epoch: u64, round: usize) {
        let c = &self.barrier_arrivals[(epoch & 1) as usize][round];
        self.wait_until(|| c.get() > 0);
        c.set(c.get() - 1);
    }

    /// Leaves the network after the two-phase finalize: lingers until our last messages are
    /// acknowledged and the peers no longer need our acks (bounded).
    pub(crate) fn close_net(&self) {
        let Some(net) = &self.net else {
            return;
        };
        let deadline = net.now() + 10_000_000_000;
        let mut now = || net.now();
        if let Err(e) = net.transport.borrow_mut().close(&mut now, deadline) {
            let line = format!("volley: rank {}: closing the network: {e}\n", self.me);
            let _ = std::io::Write::write_all(&mut std::io::stderr().lock(), line.as_bytes());
        }
    }

    /// What the watchdog reported so far.
    #[cfg(test)]
    pub(crate) fn watchdog_reports(&self) -> Vec<String> {
        self.watchdog
            .as_ref()
            .map_or_else(Vec::new, Watchdog::reports)
    }

    /// All counters of this rank.
    pub(crate) fn stats(&self) -> Stats {
        let mut stats = self.stats.snapshot();
        if let Some(sync) = self.thread_sync() {
            stats.progress = sync.stats();
        }
        if let Some(net) = &self.net {
            let t = net.transport.borrow();
            stats.network = NetworkStats {
                transport: t.kind().name(),
                sent: net.sent.get(),
                handled: net.handled.get(),
                polls: net.polls.get(),
                empty_polls: net.empty_polls.get(),
                interval: net.policy.borrow().interval() as u64,
                transport_stats: t.stats(),
            };
        }
        stats
    }

    /// Flushes the credit of every incoming ring (before sleeping or exiting).
    pub(crate) fn flush_credit(&self) {
        self.retire_deferred();
        for src in 0..self.local_ranks.len() {
            for ch in [Channel::Request, Channel::Reply] {
                let rx = &self.rx[ch as usize][src];
                let mut c = rx.consumer.get();
                c.flush(rx.ring);
                rx.consumer.set(c);
            }
        }
    }

    /// Test hook: publishes a raw frame header (and words) into our own loopback ring.
    #[cfg(test)]
    pub(crate) fn inject_raw(&self, ch: Channel, header: impl FnOnce(u64) -> u64, words: &[u64]) {
        let tx = &self.tx[self.me_local].rings[ch as usize];
        let ring = tx.ring;
        let pos = tx.reserve(1, self.key).expect("room in the loopback ring");
        for (i, w) in words.iter().enumerate() {
            ring.write_word(pos, i + 1, *w);
        }
        ring.publish(pos, header(pos));
    }

    /// Test hook: where this rank's next frame into its own loopback ring of channel `ch`
    /// would start.
    #[cfg(test)]
    pub(crate) fn loopback_tail(&self, ch: Channel) -> u64 {
        self.tx[self.me_local].rings[ch as usize]
            .producer
            .get()
            .tail()
    }

    #[cfg(test)]
    pub(crate) fn key(&self) -> FrameKey {
        self.key
    }
}

/// Writes `args` to `at`. A short's few arguments (the common case: at most a slot's worth)
/// are copied by an unrolled loop that stops after the last, a few instructions each; the
/// general loop's set-up alone cost more than that.
///
/// # Safety
/// `at` must be valid for writing `args.len()` words.
#[inline(always)]
unsafe fn copy_args(args: &[u64], at: *mut u64) {
    const FEW: usize = 7;
    if args.len() <= FEW {
        for i in 0..FEW {
            if i == args.len() {
                break;
            }
            // SAFETY: i < args.len(), for which the caller vouches.
            unsafe { at.add(i).write(args[i]) };
        }
    } else {
        for (i, w) in args.iter().enumerate() {
            // SAFETY: as above.
            unsafe { at.add(i).write(*w) };
        }
    }
}

/// Words between the header and the arguments.
#[inline(always)]
fn extra_words(kind: FrameKind) -> usize {
    match kind {
        FrameKind::Short | FrameKind::System | FrameKind::Skip => 0,
        FrameKind::MediumInline | FrameKind::MediumPooled => 1,
        FrameKind::Long => 2,
    }
}
