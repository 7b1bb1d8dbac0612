//! Wire-up: the engine built from what the runtime hands it (regions, rings, the network
//! route, handler tables).

use super::super::critical::CriticalState;
use super::super::handler::{ReplyFn, RequestFn};
use super::super::progress::ThreadSync;
use super::super::report::{Activity, Doing};
use super::super::stats::StatCells;
use super::super::watchdog::Watchdog;
use super::super::wireup::Watch;
use super::job::net_failed;
use super::{Engine, REMOTE};
use crate::counter::Counter;
use crate::transport::contract::LongGuard;
use crate::transport::net::link::{NetLink, Placement};
use crate::transport::net::poll_policy::PollPolicy;
use crate::transport::net::NetTransport;
use crate::transport::shm::doorbell::Ordering as BellOrder;
use crate::transport::shm::link::Links;
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::Region;
use std::cell::Cell;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

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
    /// What refuses a long message on a segment (installed by the one-sided layer).
    pub(crate) long_guard: Option<Arc<dyn LongGuard>>,
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
        watch: Watch,
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
            long_guard,
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
        let nlocal = regions.len();
        let net_only = nlocal == 1 && net.is_some();
        let own = &regions[me_local];
        // Pinned by now, if bound: for node-mates that ask whether they share a CPU with it.
        own.presence().note_pinning();
        let placement = Placement {
            segment: own.segment_ptr(),
            len: own.segment_len(),
            upper: own.upper_ptr(),
            guard: long_guard.clone(),
        };
        let shm = Links::new(
            me_local,
            key,
            regions,
            &local_ranks,
            bells,
            wakes,
            long_guard,
        );
        // A rank alone on its node has nothing cheaper than the network to poll.
        let policy = if nlocal == 1 {
            PollPolicy::Always
        } else {
            poll_policy
        };
        let names: [Vec<String>; 2] = [
            requests.iter().map(|(n, _)| n.clone()).collect(),
            replies.iter().map(|(n, _)| n.clone()).collect(),
        ];
        let watchdog = watchdog.map(|limit| Watchdog::start(me, limit, names.clone()));
        let mut requests: Vec<Box<RequestFn>> = requests.into_iter().map(|(_, f)| f).collect();
        let mut replies: Vec<Box<ReplyFn>> = replies.into_iter().map(|(_, f)| f).collect();
        if let Some(w) = &watchdog {
            // Timed in the handlers themselves, so that without a watchdog no handler pays
            // for one.
            requests = w.watch_requests(requests);
            replies = w.watch_replies(replies);
        }
        // Debug builds check that handlers do not allocate (see `crate::debug`); release
        // builds run the handlers as registered.
        #[cfg(debug_assertions)]
        {
            requests = crate::debug::check_requests(requests, &names[0]);
            replies = crate::debug::check_replies(replies, &names[1]);
        }
        let net_kind = net.as_ref().map_or("", |t| t.kind().name());
        let has_launcher = !matches!(watch, Watch::Nothing);
        let net = net.map(|t| {
            let fail = Box::new(move |e| net_failed(me, has_launcher, e));
            NetLink::new(t, size, policy, placement, fail)
        });
        Self {
            shm,
            me,
            size,
            local_of,
            me_local,
            net,
            net_kind,
            net_dest: Cell::new(0),
            blocked_waits: Default::default(),
            requests,
            replies,
            names,
            stats: StatCells::default(),
            depth: Counter::default(),
            running: AtomicU32::new(0),
            activity: Activity::new(),
            purpose: Cell::new(Doing::Wait),
            critical: CriticalState::default(),
            serving: Cell::new(false),
            early_exits: Cell::new(0),
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
            watch,
        }
    }
}
