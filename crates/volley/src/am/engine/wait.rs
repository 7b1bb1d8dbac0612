//! Waiting: polling until a condition holds, and sleeping in the kernel when there is nothing
//! to do (block mode, the progress thread).

use super::super::backoff::{Backoff, Snooze, YIELDS_PER_HEALTH_CHECK};
use super::super::report::{Doing, LongWait};
use super::super::stats::bump;
use super::{Engine, Served};
use crate::transport::contract::Transport;
use crate::transport::shm::doorbell::SleepOn;
use crate::transport::shm::presence::current_cpu;
use std::time::Instant;

/// Longest single sleep of a blocked wait (then the job's health is checked).
pub(super) const SLEEP_MAX: std::time::Duration = std::time::Duration::from_millis(100);

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

impl SleepPlan {
    /// The same plan with its timeout cut to `limit`.
    fn at_most(self, limit: std::time::Duration) -> Self {
        match self {
            SleepPlan::Bell { seen, timeout } => SleepPlan::Bell {
                seen,
                timeout: timeout.min(limit),
            },
            SleepPlan::Socket { fd, timeout } => SleepPlan::Socket {
                fd,
                timeout: timeout.min(limit),
            },
        }
    }
}

impl Engine {
    /// One step of an idle wait.
    #[inline(always)]
    pub(super) fn idle(&self, backoff: &mut Backoff) {
        self.snoozed(backoff.snooze(!self.net_only, self.own().presence(), || {
            self.core_to_itself()
        }));
    }

    /// Whether this rank has its CPU to itself among the ranks of its node: every rank of
    /// the node was pinned to one CPU when it started, none other to this rank's, and this
    /// rank still runs there; and no progress thread of its own may need the core. Where
    /// ranks float, the scheduler may bring any of them here at any time: never alone. Asked
    /// only where a polite wait would yield (see `am::backoff`); reads lines written once.
    pub(crate) fn core_to_itself(&self) -> bool {
        if self.thread.is_some() {
            return false;
        }
        let Some(mine) = self.own().presence().pinned() else {
            return false;
        };
        current_cpu() == Some(mine)
            && (0..self.shm.len()).all(|l| {
                l == self.me_local
                    || self
                        .shm
                        .region(l)
                        .presence()
                        .pinned()
                        .is_some_and(|c| c != mine)
            })
    }

    /// Counts a yield and checks the job's health when it is time.
    #[inline(always)]
    fn snoozed(&self, step: Snooze) {
        if let Snooze::Yielded { check_health } = step {
            bump(&self.stats.yields);
            if check_health {
                self.check_health();
            }
        }
    }

    /// Polls until `cond` holds. The spinning part is here, inline; a wait that spins out
    /// goes on in [`Engine::wait_long`], which publishes it for the hang report.
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
                if backoff.spun_out() {
                    return self.wait_long(cond, backoff, || None);
                }
                backoff.spin(!self.net_only);
            } else {
                backoff.reset();
            }
        }
    }

    /// Polls until `cond` holds, in a wait for what `running` watches: it says whether every
    /// rank the wait still awaits is on a CPU (see [`Engine::is_running`]). A polite rank
    /// spins while they are and yields at once when one is not; any other rank waits as in
    /// [`Engine::wait_until`].
    #[inline(never)]
    pub(crate) fn wait_awaiting(
        &self,
        mut cond: impl FnMut() -> bool,
        mut running: impl FnMut() -> bool,
    ) {
        if !self.polite || self.block {
            return self.wait_until(cond);
        }
        self.flush_net();
        // One poll before the first yield: the answer may be there already.
        if cond() || self.poll_waiting(&mut cond).is_none() || cond() {
            return;
        }
        self.wait_long(cond, Backoff::new(true), || Some(running()))
    }

    /// Gives the core away once, as a polite wait does between polls (see
    /// [`Runtime::yield_core`](crate::Runtime::yield_core)).
    pub(crate) fn yield_core(&self) {
        self.own().presence().away_during(std::thread::yield_now);
        bump(&self.stats.yields);
        if self.stats.yields.get() % u64::from(YIELDS_PER_HEALTH_CHECK) == 0 {
            self.check_health();
        }
    }

    /// Whether `rank` is on a CPU now: on this node, and none of its threads is yielding or
    /// sleeping in a wait. False for ranks on other nodes (nothing tells).
    #[inline]
    pub(crate) fn is_running(&self, rank: usize) -> bool {
        self.region_of(rank).is_some_and(|r| r.presence().running())
    }

    /// The rest of a wait that spun out: yields (or, in block mode, sleeps) between polls,
    /// checks the job's health, and is published as what this rank does meanwhile. `awaited`:
    /// whether the ranks the wait awaits are on a CPU, if the wait knows them.
    #[cold]
    #[inline(never)]
    fn wait_long(
        &self,
        mut cond: impl FnMut() -> bool,
        mut backoff: Backoff,
        mut awaited: impl FnMut() -> Option<bool>,
    ) {
        let _published = LongWait(&self.activity);
        let mut handled = 0;
        let mut first = true;
        'wait: loop {
            if handled == 0 {
                // Published before every round but a first one that only yields, and again
                // each time (a blocked send inside a handler may have ended its own): a polite
                // wait that ends after its first yield, a collective's hand-off of the core, is
                // no hang and skips the clock read. A sleep is published from the first.
                if !std::mem::take(&mut first) || self.block {
                    self.activity.begin(self.purpose.get());
                }
                if self.block && backoff.spun_out() {
                    // Stays spun out: after a sleep that brought nothing, sleep again at once
                    // (spinning again would cost 16k polls, system calls on a network).
                    self.sleep_for(SLEEP_MAX);
                } else if let Some(running) = awaited() {
                    let me = self.own().presence();
                    self.snoozed(
                        backoff
                            .snooze_awaiting(!self.net_only, running, me, || self.core_to_itself()),
                    );
                } else {
                    self.idle(&mut backoff);
                }
            } else {
                backoff.reset();
            }
            if cond() {
                break 'wait;
            }
            let Some(h) = self.poll_waiting(&mut cond) else {
                break 'wait;
            };
            handled = h;
        }
        // A long wait may be followed by computation, which only the progress thread serves
        // (a wait that spun out without being polite is long already).
        if let Some(sync) = &self.thread {
            if !self.polite || backoff.yielded_often() {
                sync.wait_ended();
            }
        }
    }

    /// Runs `f` (which waits) as a wait for `purpose`, for the hang report.
    pub(crate) fn waiting_for<R>(&self, purpose: Doing, f: impl FnOnce() -> R) -> R {
        let before = self.purpose.replace(purpose);
        let r = f();
        self.purpose.set(before);
        r
    }

    /// Sleeps in the kernel until traffic arrives or `timeout` passes (the caller polls and
    /// checks its condition either way). With a progress thread serving, until that thread
    /// has run handlers (only a handler can change what a wait looks at); in a polling phase
    /// it serves nothing, so this rank sleeps as without one.
    #[cold]
    #[inline(never)]
    pub(crate) fn sleep_for(&self, timeout: std::time::Duration) {
        match &self.thread {
            Some(sync) if !sync.paused() => {
                self.shm.flush_credit();
                self.flush_net_out();
                self.own()
                    .presence()
                    .away_during(|| sync.sleep_until_handled(timeout));
            }
            _ => {
                if let Some(plan) = self.prepare_sleep() {
                    self.sleep(plan.at_most(timeout));
                    self.check_health();
                }
            }
        }
    }

    /// Gets ready to sleep until traffic arrives: returns every credit, sends what is queued
    /// (nobody may wait on a sleeper), announces the sleep on the doorbell and decides where to
    /// sleep; `None` if something is already waiting.
    pub(crate) fn prepare_sleep(&self) -> Option<SleepPlan> {
        self.shm.flush_credit();
        self.flush_net_out();
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
        net.make_due();
        let (fd, until) = net.sleep_on();
        if let Some(ns) = until {
            timeout = timeout.min(std::time::Duration::from_nanos(ns));
        }
        Some(SleepPlan::Socket { fd, timeout })
    }

    /// Sleeps as planned by [`Engine::prepare_sleep`]; needs no engine state (the engine lease
    /// is not held). Returns true if the sleep lasted most of its timeout (nothing woke it).
    pub(crate) fn sleep(&self, plan: SleepPlan) -> bool {
        let bell = self.own().doorbell();
        let t = Instant::now();
        let timeout = self.own().presence().away_during(|| match plan {
            SleepPlan::Bell { seen, timeout } => {
                bell.sleep(seen, timeout);
                timeout
            }
            SleepPlan::Socket { fd, timeout } => {
                self.own_wake().sleep_beside(fd, timeout);
                timeout
            }
        });
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

    /// Pushes out what the network transport has queued (bulk transfers move on in polls).
    #[inline]
    pub(crate) fn flush_net(&self) {
        if let Some(net) = &self.net {
            net.flush();
        }
    }

    /// Pushes out everything the network transport has queued, bulk transfers included, as
    /// far as the network takes it now.
    pub(crate) fn flush_net_out(&self) {
        if let Some(net) = &self.net {
            net.flush_out();
        }
    }
}
