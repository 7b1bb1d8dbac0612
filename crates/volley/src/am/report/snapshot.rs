//! A rank's report, put together on the reporter thread from what the engine publishes and
//! what the reporter sampled (see [`Sampler`]).

use super::activity::Doing;
use super::wire::{PeerReport, RankReport, RankState, RunningHandler};
use super::OutstandingFn;
use crate::am::engine::Engine;
use crate::transport::Channel;
use std::sync::atomic::Ordering;
use std::time::Instant;

/// When the reporter last saw the rank's counters move: how long a rank has been computing
/// or running one handler is the time since its counters stopped moving.
#[derive(Debug)]
pub(super) struct Sampler {
    /// Empty polls plus messages sent and received: what moves while the rank's thread (or
    /// its progress thread) is inside the runtime.
    moving: (u64, Instant),
    /// The rank thread's runtime calls (with a progress thread, whose polls do not count).
    calls: (u32, Instant),
    /// (depth, handler, handled so far): one handler running for as long as it stays put.
    handler: ((u64, u32, u64), Instant),
}

impl Sampler {
    pub(super) fn new(engine: &Engine) -> Self {
        let now = Instant::now();
        let mut s = Self {
            moving: (0, now),
            calls: (0, now),
            handler: ((0, 0, 0), now),
        };
        s.sample(engine);
        s
    }

    /// Notes which counters moved since the last look.
    pub(super) fn sample(&mut self, engine: &Engine) {
        let now = Instant::now();
        let traffic = engine.traffic_total();
        moved(
            &mut self.moving,
            engine.stats.empty_polls.get() + traffic,
            now,
        );
        if let Some(sync) = engine.thread_sync() {
            let (calls, outside) = sync.rank_thread();
            // Inside a call counts as moving: a long call is a wait, published as such.
            if !outside {
                self.calls = (calls, now);
            }
            moved(&mut self.calls, calls, now);
        }
        let depth = engine.depth.get();
        let key = (depth, engine.running.load(Ordering::Relaxed), traffic);
        if depth == 0 {
            self.handler = (key, now);
        }
        moved(&mut self.handler, key, now);
    }
}

/// Notes in `slot` the time `now` if its value changed to `v`.
fn moved<T: PartialEq>(slot: &mut (T, Instant), v: T, now: Instant) {
    if slot.0 != v {
        *slot = (v, now);
    }
}

/// The report of `engine`'s rank, whose process is `pid`.
pub(super) fn report(
    engine: &Engine,
    sampler: &Sampler,
    outstanding: &[OutstandingFn],
) -> RankReport {
    let now = Instant::now();
    let since = |t: Instant| now.saturating_duration_since(t).as_secs_f64();
    let channel = |ch: Channel| match ch {
        Channel::Request => "request".to_string(),
        Channel::Reply => "reply".to_string(),
    };
    let depth = engine.depth.get();
    // Only request handlers name themselves (see `HandlerScope::run`): at depth 2 the inner
    // one is a reply handler inside the named request handler.
    let handler = (depth > 0).then(|| {
        let which = engine.running.load(Ordering::Relaxed);
        let name = engine.names[Channel::Request as usize]
            .get(which as usize)
            .cloned()
            .unwrap_or_else(|| "(unknown)".into());
        let (name, ch) = match depth {
            1 => (name, Channel::Request),
            _ => (
                format!("(a reply handler, inside \"{name}\")"),
                Channel::Reply,
            ),
        };
        RunningHandler {
            name,
            channel: channel(ch),
            secs: since(sampler.handler.1),
        }
    });
    let peers = engine.peer_reports();
    let (doing, age) = engine.activity.read();
    let (state, secs) = match doing {
        Doing::Wait => (RankState::Waiting, age.as_secs_f64()),
        Doing::Barrier { round, from } => (
            RankState::Barrier {
                round,
                from: from as usize,
            },
            age.as_secs_f64(),
        ),
        Doing::Finalize => (RankState::Finalize, age.as_secs_f64()),
        Doing::SendBlocked { peer, ch } => (
            RankState::SendBlocked {
                peer: peer as usize,
                channel: channel(ch),
            },
            age.as_secs_f64(),
        ),
        Doing::Nothing => match engine.thread_sync() {
            Some(sync) => {
                let (_, outside) = sync.rank_thread();
                if outside {
                    (RankState::Computing, since(sampler.calls.1))
                } else {
                    (RankState::Polling, 0.0)
                }
            }
            None if depth > 0 => (RankState::Polling, 0.0),
            None => {
                let quiet = since(sampler.moving.1);
                let now_moving = engine.stats.empty_polls.get() + engine.traffic_total();
                if sampler.moving.0 == now_moving && quiet > 0.0 {
                    (RankState::Computing, quiet)
                } else {
                    (RankState::Polling, 0.0)
                }
            }
        },
    };
    let by_channel = |f: fn(&PeerReport) -> [u64; 2]| {
        [0, 1].map(|ch| peers.iter().map(|p| f(p)[ch]).sum::<u64>())
    };
    let (sent, handled) = (by_channel(|p| p.sent), by_channel(|p| p.received));
    let mut ops = Vec::new();
    for f in outstanding {
        f(&mut ops);
    }
    RankReport {
        rank: engine.me,
        pid: std::process::id(),
        state,
        secs,
        handler,
        progress_thread: engine.thread_sync().is_some(),
        empty_polls: engine.stats.empty_polls.get(),
        sent,
        received: handled,
        peers,
        outstanding: ops,
    }
}
