//! What a rank does while it waits: spin briefly, then yield the core.
//!
//! With more ranks than cores a spinning rank steals the core from the rank it waits for, so a
//! rank that knows it is oversubscribed ("polite") yields almost at once; otherwise it spins for
//! 16k empty polls first (each followed by a `pause`), which keeps round trips at cache-line
//! speed, and then yields anyway so that an undetected oversubscription still makes progress.
//!
//! A polite wait that knows which ranks it awaits (a reply, a barrier partner) asks whether they
//! are on a CPU (`transport::shm::presence`): it spins while they are, since the answer may then
//! come within a round trip and the spin takes no core from them, and yields at once when one
//! is not, since that rank needs a core before anything can arrive.
//!
//! A polite rank pinned to a CPU that no other rank of its node is pinned to (one alone on its
//! core while its peers share the other) has nobody to give its core to: its yields would only
//! make it look away to the ranks that wait for it, and cost it a system call's time before it
//! sees their messages. Where it wants to yield it spins instead, as long as a rank with a core
//! of its own spins, then yields once (another task may want the core) and looks again.

use crate::transport::shm::presence::Presence;

/// Empty polls before a dedicated-core rank starts yielding.
const SPIN_POLLS: u32 = 1 << 14;
/// Empty polls before a polite rank starts yielding.
const POLITE_SPIN_POLLS: u32 = 8;
/// Empty polls a polite rank spins between two looks at the clock while the ranks it awaits are
/// on a CPU.
const AWAITED_SPIN_POLLS: u32 = 64;
/// How long a polite rank spins in a row while the ranks it awaits are on a CPU (bounded: a
/// rank preempted without yielding still looks running). About what giving the core to another
/// rank and getting it back costs on a VM (2.1-2.4 µs measured): a reply that takes longer
/// then costs at most about twice what yielding at once would have, and one that comes sooner
/// (a bulk piece being copied) costs no yield.
const AWAITED_SPIN: std::time::Duration = std::time::Duration::from_micros(2);
/// Yields between two checks of the job's health (peers that exited without finalizing).
pub(crate) const YIELDS_PER_HEALTH_CHECK: u32 = 2048;
/// Yields after which a polite wait counts as long: a round trip to a rank that waits for a
/// core yields once or twice, a wait for a rank that computes many times.
const LONG_WAIT_YIELDS: u32 = 4;

/// What one step of a wait did after a poll that found nothing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Snooze {
    /// Spun (a `pause`, or nothing).
    Spun,
    /// Yielded the core; `check_health`: about every 2048 yields, time for the caller to
    /// check the job's health.
    Yielded { check_health: bool },
}

/// Wait state of one waiting loop.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Backoff {
    empty: u32,
    limit: u32,
    yields: u32,
    /// Empty polls spun for running awaited ranks since the last look at the clock.
    awaited: u32,
    /// When the spin for running awaited ranks first looked at the clock (after its first
    /// [`AWAITED_SPIN_POLLS`] polls), since the last yield.
    awaited_since: Option<std::time::Instant>,
    /// Empty polls still to spin instead of yielding, on a core the rank has to itself.
    own_core: u32,
}

impl Default for Backoff {
    /// The state of a rank that is not polite (see [`Backoff::new`]).
    fn default() -> Self {
        Self::new(false)
    }
}

impl Backoff {
    pub(crate) fn new(polite: bool) -> Self {
        Self {
            empty: 0,
            limit: if polite {
                POLITE_SPIN_POLLS
            } else {
                SPIN_POLLS
            },
            yields: 0,
            awaited: 0,
            awaited_since: None,
            own_core: 0,
        }
    }

    /// Called after a poll that found nothing: spins or yields. `pause`: spin with a `pause`
    /// (the rank waits on rings that other cores write); `me`: this rank's presence, marked
    /// away while it yields; `alone`: whether no other rank shares this rank's CPU (asked only
    /// where the wait would yield).
    #[inline(always)]
    pub(crate) fn snooze(
        &mut self,
        pause: bool,
        me: &Presence,
        alone: impl FnOnce() -> bool,
    ) -> Snooze {
        if self.empty < self.limit {
            // `pause` between polls: without it the short poll loop keeps many speculative
            // loads of the ring heads in flight, every remote write then costs a memory-ordering
            // machine clear, and the hot line ping-pongs while the writer tries to own it.
            // Measured: pinned ping-pong 0.2 us with it, 0.8 us without.
            self.empty += 1;
            if pause {
                std::hint::spin_loop();
            }
            Snooze::Spun
        } else {
            self.yield_core(me, alone)
        }
    }

    /// [`Backoff::snooze`] for a polite wait whose awaited ranks are `running` (all on a
    /// CPU) or not: spins while they run, for [`AWAITED_SPIN_POLLS`] polls and then up to
    /// [`AWAITED_SPIN`] more in a row, and otherwise yields at once.
    #[inline]
    pub(crate) fn snooze_awaiting(
        &mut self,
        pause: bool,
        running: bool,
        me: &Presence,
        alone: impl FnOnce() -> bool,
    ) -> Snooze {
        if running && (self.awaited < AWAITED_SPIN_POLLS || self.awaited_spin_lasts()) {
            self.awaited += 1;
            if pause {
                std::hint::spin_loop();
            }
            return Snooze::Spun;
        }
        self.awaited = 0;
        self.awaited_since = None;
        self.yield_core(me, alone)
    }

    /// Whether the spin for running awaited ranks, at the end of a run of
    /// [`AWAITED_SPIN_POLLS`] polls, may go on: the clock is read once per run, and the
    /// first read starts [`AWAITED_SPIN`].
    #[cold]
    fn awaited_spin_lasts(&mut self) -> bool {
        let now = std::time::Instant::now();
        let since = *self.awaited_since.get_or_insert(now);
        self.awaited = 0;
        now.duration_since(since) < AWAITED_SPIN
    }

    /// Yields the core, marked away meanwhile; on a core the rank has to itself (`alone`),
    /// spins instead for [`SPIN_POLLS`] empty polls between yields.
    #[inline]
    fn yield_core(&mut self, me: &Presence, alone: impl FnOnce() -> bool) -> Snooze {
        let spin = if self.own_core > 0 {
            self.own_core -= 1;
            // The spin's last poll yields once and asks again.
            self.own_core > 0
        } else if alone() {
            // This poll and SPIN_POLLS - 1 more spin; the one after them yields.
            self.own_core = SPIN_POLLS - 1;
            true
        } else {
            false
        };
        if spin {
            std::hint::spin_loop();
            return Snooze::Spun;
        }
        me.away_during(std::thread::yield_now);
        self.yields = self.yields.wrapping_add(1);
        Snooze::Yielded {
            check_health: self.yields & (YIELDS_PER_HEALTH_CHECK - 1) == 0,
        }
    }

    /// One step of the spinning phase (the caller checked [`Backoff::spun_out`] first).
    #[inline(always)]
    pub(crate) fn spin(&mut self, pause: bool) {
        self.empty += 1;
        if pause {
            // As in `snooze`.
            std::hint::spin_loop();
        }
    }

    /// Whether the spinning phase is over (block mode then sleeps instead of yielding).
    #[inline(always)]
    pub(crate) fn spun_out(&self) -> bool {
        self.empty >= self.limit
    }

    /// Whether this wait has given its core up often enough to count as long, not as a round
    /// trip (see [`LONG_WAIT_YIELDS`]).
    #[inline]
    pub(crate) fn yielded_often(&self) -> bool {
        self.yields >= LONG_WAIT_YIELDS
    }

    /// Called after a poll that made progress.
    #[inline(always)]
    pub(crate) fn reset(&mut self) {
        self.empty = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A CPU that another rank shares.
    fn shared() -> bool {
        false
    }

    #[test]
    fn a_wait_is_long_after_several_yields_not_after_a_round_trips_one() {
        let me = Presence::default();
        let mut b = Backoff::new(true);
        for _ in 0..POLITE_SPIN_POLLS {
            b.snooze(false, &me, shared);
        }
        assert!(!b.yielded_often(), "a wait that only spun counts as long");
        b.snooze_awaiting(false, false, &me, shared);
        assert!(
            !b.yielded_often(),
            "a wait that yielded once counts as long"
        );
        for _ in 1..LONG_WAIT_YIELDS {
            b.reset();
            b.snooze_awaiting(false, false, &me, shared);
        }
        assert!(
            b.yielded_often(),
            "a wait that yielded repeatedly is not long"
        );
    }

    #[test]
    fn an_awaited_rank_off_its_cpu_gets_the_core_at_once() {
        let me = Presence::default();
        let mut b = Backoff::new(true);
        assert_eq!(
            b.snooze_awaiting(false, false, &me, shared),
            Snooze::Yielded {
                check_health: false
            }
        );
        assert_eq!(
            b.yields, 1,
            "no yield for an awaited rank that is not running"
        );
    }

    #[test]
    fn a_running_awaited_rank_is_spun_for_then_the_spin_ends() {
        let me = Presence::default();
        let mut b = Backoff::new(true);
        let start = std::time::Instant::now();
        for _ in 0..2 * AWAITED_SPIN_POLLS {
            b.snooze_awaiting(false, true, &me, shared);
        }
        if start.elapsed() < AWAITED_SPIN {
            assert_eq!(b.yields, 0, "yielded while the awaited rank runs");
        }
        let mut polls = 2 * AWAITED_SPIN_POLLS;
        while b.yields == 0 {
            b.snooze_awaiting(false, true, &me, shared);
            polls += 1;
            assert!(
                polls < 1 << 30,
                "never yielded to a rank that looks running for long"
            );
        }
        assert!(
            start.elapsed() >= AWAITED_SPIN,
            "stopped spinning for a running rank early"
        );
        // After the yield, a new spin.
        for _ in 0..AWAITED_SPIN_POLLS {
            b.snooze_awaiting(false, true, &me, shared);
        }
        assert_eq!(b.yields, 1, "the spin after a yield was cut short");
        assert!(me.running());
    }

    #[test]
    fn a_rank_alone_on_its_core_spins_where_it_would_yield_and_yields_now_and_then() {
        let me = Presence::default();
        let mut b = Backoff::new(true);
        let mut asked = 0;
        for _ in 0..3 * SPIN_POLLS {
            let step = b.snooze_awaiting(false, false, &me, || {
                asked += 1;
                true
            });
            if step == Snooze::Spun {
                assert!(me.running());
            }
        }
        assert_eq!(
            b.yields, 3,
            "one yield per spin of a dedicated core's length"
        );
        assert_eq!(
            asked, 3,
            "asked for the core's company more than once per spin"
        );
        // A wait that awaits no rank in particular does the same, after its polite spin.
        let mut b = Backoff::new(true);
        for _ in 0..POLITE_SPIN_POLLS + SPIN_POLLS - 1 {
            assert_eq!(b.snooze(false, &me, || true), Snooze::Spun);
        }
        assert!(matches!(
            b.snooze(false, &me, || true),
            Snooze::Yielded { .. }
        ));
    }

    #[test]
    fn a_rank_that_shares_its_core_yields_at_once() {
        let me = Presence::default();
        let mut b = Backoff::new(true);
        for n in 1..=3 {
            assert!(matches!(
                b.snooze_awaiting(false, false, &me, shared),
                Snooze::Yielded { .. }
            ));
            assert_eq!(b.yields, n, "spun on a core that another rank shares");
        }
    }
}
