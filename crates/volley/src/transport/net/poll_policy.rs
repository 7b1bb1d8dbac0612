//! When a poll also polls the network (seed 001 §3.4): shared memory is polled on every call,
//! the network, whose poll is a system call costing tens of shared-memory polls, only on some.
//!
//! `VOLLEY_POLL`:
//! - `always`: the network on every poll (the naive baseline);
//! - `every:K`: the network on every K-th poll (fractional polling);
//! - `adaptive` (default), optionally `adaptive:MIN:MAX:HISTORY` (default 8:32:32): the network
//!   every `interval` polls, `interval` in `MIN..=MAX`, set after each network poll from the
//!   history of the last HISTORY network polls: the messages they found divided by the polls
//!   that elapsed predicts messages per poll, and the network is polled when one message is
//!   expected (interval = ceil(polls / messages)); with no messages in the history, MAX.
//!
//! A rank whose only shared-memory peer is itself has nothing cheaper to poll, so it polls the
//! network on every call whatever the policy (the seed's network-only mode).

use super::NetError;

type Result<T> = std::result::Result<T, NetError>;

/// Longest history the adaptive policy keeps.
pub(crate) const MAX_HISTORY: usize = 256;

/// A parsed `VOLLEY_POLL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PollPolicy {
    /// Every poll.
    Always,
    /// Every K-th poll.
    Every(u32),
    /// Between `min` and `max`, from the last `history` network polls.
    Adaptive { min: u32, max: u32, history: usize },
}

impl Default for PollPolicy {
    fn default() -> Self {
        PollPolicy::Adaptive {
            min: 8,
            max: 32,
            history: 32,
        }
    }
}

impl PollPolicy {
    /// Parses the `VOLLEY_POLL` syntax.
    pub(crate) fn parse(s: &str) -> Result<Self> {
        let bad = |why: &'static str| NetError::InvalidSetting {
            name: "VOLLEY_POLL",
            value: s.to_string(),
            why,
        };
        let num = |t: &str| t.parse::<u32>().ok().filter(|&n| n >= 1);
        let mut parts = s.split(':');
        match parts.next().unwrap_or("") {
            "always" if parts.next().is_none() => Ok(PollPolicy::Always),
            "every" => {
                let k = parts
                    .next()
                    .and_then(num)
                    .ok_or(bad("every:K needs K >= 1"))?;
                if parts.next().is_some() {
                    return Err(bad("every:K takes one number"));
                }
                Ok(PollPolicy::Every(k))
            }
            "adaptive" => {
                let rest: Vec<&str> = parts.collect();
                if rest.is_empty() {
                    return Ok(Self::default());
                }
                let [min, max, history] = rest[..] else {
                    return Err(bad("adaptive takes MIN:MAX:HISTORY or nothing"));
                };
                let (min, max) = (num(min), num(max));
                let history = history.parse::<usize>().ok();
                match (min, max, history) {
                    (Some(min), Some(max), Some(history))
                        if min <= max && (1..=MAX_HISTORY).contains(&history) =>
                    {
                        Ok(PollPolicy::Adaptive { min, max, history })
                    }
                    _ => Err(bad("need 1 <= MIN <= MAX and 1 <= HISTORY <= 256")),
                }
            }
            _ => Err(bad("expected adaptive, always or every:K")),
        }
    }

    /// From `VOLLEY_POLL`, else the default.
    pub(crate) fn from_env() -> Result<Self> {
        match std::env::var("VOLLEY_POLL") {
            Ok(v) if !v.is_empty() => Self::parse(&v),
            _ => Ok(Self::default()),
        }
    }
}

/// The policy's running state.
#[derive(Debug, Clone)]
pub(crate) struct NetPollState {
    policy: PollPolicy,
    /// Polls since the last network poll.
    since: u32,
    /// The next poll looks at the network whatever the interval (see [`NetPollState::make_due`]).
    due: bool,
    interval: u32,
    /// Ring of (messages found, polls elapsed) for the last network polls.
    found: [u32; MAX_HISTORY],
    elapsed: [u32; MAX_HISTORY],
    next: usize,
    sum_found: u64,
    sum_elapsed: u64,
}

impl NetPollState {
    pub(crate) fn new(policy: PollPolicy) -> Self {
        let interval = match policy {
            PollPolicy::Always => 1,
            PollPolicy::Every(k) => k,
            PollPolicy::Adaptive { max, .. } => max,
        };
        Self {
            policy,
            since: 0,
            due: false,
            interval,
            found: [0; MAX_HISTORY],
            elapsed: [0; MAX_HISTORY],
            next: 0,
            sum_found: 0,
            sum_elapsed: 0,
        }
    }

    /// Counts one poll; whether this one should poll the network.
    #[inline]
    pub(crate) fn tick(&mut self) -> bool {
        self.since += 1;
        self.due || self.since >= self.interval
    }

    /// Makes the next poll look at the network whatever the interval: a rank about to sleep
    /// may be woken by the network, and the poll after the sleep must then not skip it (a
    /// rank that sleeps after each empty poll would otherwise sleep up to `interval` times
    /// before it reads what woke it).
    pub(crate) fn make_due(&mut self) {
        self.due = true;
    }

    /// Records a network poll that found `messages`; sets the next interval.
    pub(crate) fn record(&mut self, messages: usize) {
        let elapsed = self.since.max(1);
        self.since = 0;
        self.due = false;
        let PollPolicy::Adaptive { min, max, history } = self.policy else {
            return;
        };
        let i = self.next;
        self.sum_found -= self.found[i] as u64;
        self.sum_elapsed -= self.elapsed[i] as u64;
        self.found[i] = messages.min(u32::MAX as usize) as u32;
        self.elapsed[i] = elapsed;
        self.sum_found += self.found[i] as u64;
        self.sum_elapsed += elapsed as u64;
        self.next = if i + 1 >= history { 0 } else { i + 1 };
        self.interval = if self.sum_found == 0 {
            max
        } else {
            self.sum_elapsed
                .div_ceil(self.sum_found)
                .clamp(min as u64, max as u64) as u32
        };
    }

    /// The current interval in polls.
    pub(crate) fn interval(&self) -> u32 {
        self.interval
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Drives the state with a message source: `arrivals(poll)` messages become available
    /// at each poll and wait until a network poll takes them.
    fn run(state: &mut NetPollState, polls: u32, arrivals: impl Fn(u32) -> usize) -> Vec<u32> {
        let mut waiting = 0;
        let mut intervals = Vec::new();
        for p in 0..polls {
            waiting += arrivals(p);
            if state.tick() {
                state.record(std::mem::take(&mut waiting));
                intervals.push(state.interval());
            }
        }
        intervals
    }

    #[test]
    fn adaptive_moves_to_max_when_idle_and_to_min_under_steady_traffic() {
        let mut s = NetPollState::new(PollPolicy::default());
        // Steady traffic: a message every poll.
        let busy = run(&mut s, 2000, |_| 1);
        assert_eq!(*busy.last().unwrap(), 8, "{busy:?}");
        // Then silence: back to 32.
        let idle = run(&mut s, 5000, |_| 0);
        assert_eq!(*idle.last().unwrap(), 32, "{idle:?}");
        // A message every 16 polls settles in between.
        let mid = run(&mut s, 20_000, |p| (p % 16 == 0) as usize);
        assert!((12..=20).contains(mid.last().unwrap()), "{mid:?}");
        for v in busy.iter().chain(&idle).chain(&mid) {
            assert!((8..=32).contains(v), "interval {v} out of bounds");
        }
    }

    #[test]
    fn bursts_never_leave_the_bounds() {
        let mut s = NetPollState::new(PollPolicy::parse("adaptive:4:64:16").unwrap());
        let v = run(&mut s, 50_000, |p| if p % 1000 < 10 { 50 } else { 0 });
        assert!(v.iter().all(|i| (4..=64).contains(i)));
        assert!(v.contains(&4) && v.contains(&64), "both bounds reached");
    }

    #[test]
    fn fixed_policies() {
        let mut s = NetPollState::new(PollPolicy::parse("every:5").unwrap());
        let hits = (0..100).filter(|_| {
            let t = s.tick();
            if t {
                s.record(0);
            }
            t
        });
        assert_eq!(hits.count(), 20);
        let mut s = NetPollState::new(PollPolicy::parse("always").unwrap());
        assert!((0..10).all(|_| {
            let t = s.tick();
            s.record(0);
            t
        }));
    }

    #[test]
    fn a_due_network_is_polled_next_then_the_interval_resumes() {
        let mut s = NetPollState::new(PollPolicy::parse("every:5").unwrap());
        assert!(!s.tick());
        s.make_due();
        assert!(s.tick(), "the poll after make_due reads the network");
        s.record(1);
        // Cleared by the network poll: the next one is 5 polls away again.
        let next = (1..=10).find(|_| s.tick()).unwrap();
        assert_eq!(next, 5);
    }

    #[test]
    fn bad_settings_are_refused() {
        for bad in [
            "",
            "sometimes",
            "every",
            "every:0",
            "every:x",
            "every:2:3",
            "always:1",
            "adaptive:8",
            "adaptive:32:8:32",
            "adaptive:8:32:0",
            "adaptive:8:32:999",
        ] {
            let e = PollPolicy::parse(bad).unwrap_err();
            assert!(e.to_string().contains("VOLLEY_POLL"), "{bad}: {e}");
        }
        assert_eq!(
            PollPolicy::parse("adaptive").unwrap(),
            PollPolicy::default()
        );
    }
}
