//! Fault injection on outgoing datagrams, to exercise the reliable layer on a clean network.
//!
//! Users turn it on with `VOLLEY_FAULTS`, e.g. `drop=0.05,dup=0.01,reorder=0.05,delay_us=200`
//! (any subset; `seed=N` makes a run reproducible). Each outgoing datagram, data and ack alike,
//! is independently
//! - dropped with probability `drop`;
//! - otherwise sent twice with probability `dup` (each copy then goes through the rest
//!   independently);
//! - held back with probability `reorder` and sent right after the next datagram that leaves
//!   (or after [`REORDER_HOLD`] if none does, so a lone datagram is late rather than lost);
//! - delayed by a uniformly random time in `0..=delay_us` microseconds when `delay_us > 0`,
//!   which also reorders datagrams whose delays differ.
//!
//! The decisions come from a small seeded generator, so a given seed and a given sequence of
//! datagrams and times give the same faults.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Longest a datagram held back for reordering waits for a successor, in nanoseconds.
pub const REORDER_HOLD: u64 = 1_000_000;

/// What to inject; all zero injects nothing.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FaultConfig {
    /// Probability of dropping a datagram, in `0..=1`.
    pub drop: f64,
    /// Probability of sending a datagram twice, in `0..=1`.
    pub dup: f64,
    /// Probability of holding a datagram back behind the next one, in `0..=1`.
    pub reorder: f64,
    /// Largest extra delay of a datagram, in microseconds; each gets a uniform draw up to it.
    pub delay_us: u64,
    /// Seed of the decisions; `None` picks a random one (see [`FaultInjector::seed`]).
    pub seed: Option<u64>,
}

impl FaultConfig {
    /// Parses `key=value` pairs separated by commas: `drop`, `dup`, `reorder` (probabilities),
    /// `delay_us` and `seed` (unsigned integers). An empty string injects nothing. Errors name
    /// the offending key or item.
    pub fn parse(s: &str) -> Result<FaultConfig, String> {
        let mut c = FaultConfig::default();
        let mut seen: Vec<&str> = Vec::new();
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let Some((key, value)) = item.split_once('=') else {
                return Err(format!("fault `{item}`: expected key=value"));
            };
            let (key, value) = (key.trim(), value.trim());
            if seen.contains(&key) {
                return Err(format!("fault `{key}`: given twice"));
            }
            seen.push(key);
            let probability = || match value.parse::<f64>() {
                Ok(p) if (0.0..=1.0).contains(&p) => Ok(p),
                _ => Err(format!(
                    "fault `{key}`: `{value}` is not a probability in 0..=1"
                )),
            };
            let integer = || {
                value
                    .parse::<u64>()
                    .map_err(|_| format!("fault `{key}`: `{value}` is not an unsigned integer"))
            };
            match key {
                "drop" => c.drop = probability()?,
                "dup" => c.dup = probability()?,
                "reorder" => c.reorder = probability()?,
                "delay_us" => c.delay_us = integer()?,
                "seed" => c.seed = Some(integer()?),
                _ => {
                    return Err(format!(
                        "fault `{key}`: unknown (expected drop, dup, reorder, delay_us, seed)"
                    ))
                }
            }
        }
        Ok(c)
    }

    /// The faults set in `VOLLEY_FAULTS`, or `None` when it is unset or empty.
    pub fn from_env() -> Result<Option<FaultConfig>, String> {
        match std::env::var("VOLLEY_FAULTS") {
            Ok(s) if !s.trim().is_empty() => FaultConfig::parse(&s)
                .map(Some)
                .map_err(|e| format!("VOLLEY_FAULTS: {e}")),
            _ => Ok(None),
        }
    }

    /// Whether any fault is configured.
    pub fn is_active(&self) -> bool {
        self.drop > 0.0 || self.dup > 0.0 || self.reorder > 0.0 || self.delay_us > 0
    }
}

/// A datagram waiting for its release time; ordered so the heap yields the earliest first,
/// and datagrams released at the same time in the order they were delayed.
#[derive(Debug)]
struct Delayed<T> {
    at: u64,
    order: u64,
    item: T,
}

impl<T> PartialEq for Delayed<T> {
    fn eq(&self, other: &Self) -> bool {
        (self.at, self.order) == (other.at, other.order)
    }
}

impl<T> Eq for Delayed<T> {}

impl<T> PartialOrd for Delayed<T> {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl<T> Ord for Delayed<T> {
    fn cmp(&self, other: &Self) -> Ordering {
        // Reversed: BinaryHeap is a max-heap.
        (other.at, other.order).cmp(&(self.at, self.order))
    }
}

/// Applies a [`FaultConfig`] to a stream of outgoing datagrams of any type `T` (the UDP
/// transport uses its own datagram buffers; tests use plain numbers).
///
/// Feed every datagram to [`submit`](Self::submit) and call [`release`](Self::release) at
/// each progress; both hand the datagrams to send now to `out`.
#[derive(Debug)]
pub struct FaultInjector<T> {
    config: FaultConfig,
    seed: u64,
    rng: u64,
    /// Held back for reordering, with the time it was held.
    held: Option<(u64, T)>,
    delayed: BinaryHeap<Delayed<T>>,
    delayed_count: u64,
    injected: u64,
}

impl<T: Clone> FaultInjector<T> {
    /// An injector for `config`, seeded with its seed or a random one.
    pub fn new(config: &FaultConfig) -> Self {
        let seed = config.seed.unwrap_or_else(random_seed);
        Self {
            config: config.clone(),
            seed,
            rng: seed,
            held: None,
            delayed: BinaryHeap::new(),
            delayed_count: 0,
            injected: 0,
        }
    }

    /// The seed in use: pass it as `seed=N` to replay a run's decisions.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Datagrams dropped, duplicated, held back or delayed so far (a datagram affected twice
    /// counts twice).
    pub fn injected(&self) -> u64 {
        self.injected
    }

    /// Whether no datagram is held back or delayed.
    pub fn is_empty(&self) -> bool {
        self.held.is_none() && self.delayed.is_empty()
    }

    /// When [`release`](Self::release) next has a datagram to let go, if any.
    pub fn next_release(&self) -> Option<u64> {
        let held = self
            .held
            .as_ref()
            .map(|(t, _)| t.saturating_add(REORDER_HOLD));
        let delayed = self.delayed.peek().map(|d| d.at);
        match (held, delayed) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Takes one outgoing datagram at time `now`; passes to `out` whatever leaves now (this
    /// datagram, a copy, a datagram held back behind it), possibly nothing.
    pub fn submit(&mut self, item: T, now: u64, out: &mut impl FnMut(T)) {
        if self.chance(self.config.drop) {
            self.injected += 1;
            return;
        }
        if self.chance(self.config.dup) {
            self.injected += 1;
            self.route(item.clone(), now, out);
        }
        self.route(item, now, out);
    }

    /// Passes to `out` the delayed datagrams due at `now`, and a datagram held back for
    /// longer than [`REORDER_HOLD`].
    pub fn release(&mut self, now: u64, out: &mut impl FnMut(T)) {
        while self.delayed.peek().is_some_and(|d| d.at <= now) {
            if let Some(d) = self.delayed.pop() {
                self.emit(d.item, out);
            }
        }
        if self
            .held
            .as_ref()
            .is_some_and(|(t, _)| t.saturating_add(REORDER_HOLD) <= now)
        {
            if let Some((_, item)) = self.held.take() {
                out(item);
            }
        }
    }

    /// Reorders or delays one surviving copy.
    fn route(&mut self, item: T, now: u64, out: &mut impl FnMut(T)) {
        if self.held.is_none() && self.chance(self.config.reorder) {
            self.injected += 1;
            self.held = Some((now, item));
            return;
        }
        if self.config.delay_us > 0 {
            let d = self.below(self.config.delay_us.saturating_mul(1000).saturating_add(1));
            if d > 0 {
                self.injected += 1;
                self.delayed_count += 1;
                self.delayed.push(Delayed {
                    at: now.saturating_add(d),
                    order: self.delayed_count,
                    item,
                });
                return;
            }
        }
        self.emit(item, out);
    }

    /// Sends `item` now, followed by the datagram held back for it.
    fn emit(&mut self, item: T, out: &mut impl FnMut(T)) {
        out(item);
        if let Some((_, h)) = self.held.take() {
            out(h);
        }
    }

    /// splitmix64: one multiply-xorshift mix of a Weyl sequence, good enough for faults.
    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    fn chance(&mut self, p: f64) -> bool {
        // Skipping the draw for p = 0 keeps an unused fault from shifting the others'
        // decisions, and p = 1 is certain.
        p > 0.0 && (p >= 1.0 || ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p)
    }
}

/// A seed that differs between processes and calls: std's per-process random hash keys mixed
/// with the time.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    if let Ok(d) = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        h.write_u128(d.as_nanos());
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_accepts_good_strings() {
        assert_eq!(FaultConfig::parse("").unwrap(), FaultConfig::default());
        let c = FaultConfig::parse("drop=0.05,dup=0.01,reorder=0.05,delay_us=200").unwrap();
        assert_eq!(
            c,
            FaultConfig {
                drop: 0.05,
                dup: 0.01,
                reorder: 0.05,
                delay_us: 200,
                seed: None
            }
        );
        let c = FaultConfig::parse(" seed = 42 , drop=1 ").unwrap();
        assert_eq!((c.drop, c.seed), (1.0, Some(42)));
        assert!(c.is_active());
        assert!(!FaultConfig::parse("seed=1").unwrap().is_active());
        assert_eq!(FaultConfig::parse("reorder=0").unwrap().reorder, 0.0);
    }

    #[test]
    fn parse_rejects_bad_strings_naming_the_key() {
        for (s, key) in [
            ("drop=1.5", "drop"),
            ("drop=-0.1", "drop"),
            ("dup=abc", "dup"),
            ("reorder=NaN", "reorder"),
            ("delay_us=-3", "delay_us"),
            ("delay_us=0.5", "delay_us"),
            ("seed=x", "seed"),
            ("loss=0.1", "loss"),
            ("drop=0.1,drop=0.2", "drop"),
            ("drop=0.1,jitter", "jitter"),
        ] {
            let e = FaultConfig::parse(s).unwrap_err();
            assert!(e.contains(&format!("`{key}`")), "{s}: {e}");
        }
    }

    /// Everything an injector sends for items `0..n` submitted 10 µs apart, with the times.
    fn run(config: &FaultConfig, n: u32) -> (Vec<(u64, u32)>, u64) {
        let mut f = FaultInjector::new(config);
        let mut sent = Vec::new();
        let mut now = 0;
        for i in 0..n {
            f.release(now, &mut |x| sent.push((now, x)));
            f.submit(i, now, &mut |x| sent.push((now, x)));
            now += 10_000;
        }
        while let Some(t) = f.next_release() {
            now = now.max(t);
            f.release(now, &mut |x| sent.push((now, x)));
        }
        assert!(f.is_empty());
        (sent, f.injected())
    }

    #[test]
    fn drop_all_drops_everything() {
        let c = FaultConfig {
            drop: 1.0,
            seed: Some(1),
            ..FaultConfig::default()
        };
        assert_eq!(run(&c, 1000), (vec![], 1000));
    }

    #[test]
    fn no_faults_pass_everything_in_order() {
        let (sent, injected) = run(&FaultConfig::default(), 1000);
        assert_eq!(injected, 0);
        assert!(sent.iter().map(|&(_, x)| x).eq(0..1000));
    }

    #[test]
    fn same_seed_same_decisions() {
        let c = FaultConfig {
            drop: 0.1,
            dup: 0.1,
            reorder: 0.1,
            delay_us: 50,
            seed: Some(7),
        };
        let a = run(&c, 5000);
        assert_eq!(a, run(&c, 5000));
        let other = run(
            &FaultConfig {
                seed: Some(8),
                ..c.clone()
            },
            5000,
        );
        assert_ne!(a, other);
        // Every kind of fault happened, and only those: each item arrives 0, 1 or 2 times.
        let (sent, injected) = a;
        let mut count = vec![0u32; 5000];
        for &(_, x) in &sent {
            count[x as usize] += 1;
        }
        assert!(count.iter().all(|&c| c <= 2));
        assert!(count.contains(&0) && count.contains(&2));
        assert!(
            sent.windows(2).any(|w| w[0].1 > w[1].1),
            "nothing reordered"
        );
        assert!(injected > 1500, "{injected}");
    }

    #[test]
    fn reorder_holds_behind_the_next_or_until_the_hold_expires() {
        let c = FaultConfig {
            reorder: 1.0,
            seed: Some(3),
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(&c);
        let mut sent = Vec::new();
        f.submit(1, 0, &mut |x| sent.push(x));
        assert!(sent.is_empty());
        f.submit(2, 10, &mut |x| sent.push(x));
        assert_eq!(sent, [2, 1]);
        f.submit(3, 20, &mut |x| sent.push(x));
        assert_eq!(f.next_release(), Some(20 + REORDER_HOLD));
        f.release(19 + REORDER_HOLD, &mut |x| sent.push(x));
        assert_eq!(sent, [2, 1]);
        f.release(20 + REORDER_HOLD, &mut |x| sent.push(x));
        assert_eq!(sent, [2, 1, 3]);
        assert_eq!(f.injected(), 2);
    }

    #[test]
    fn delays_stay_within_the_bound() {
        let c = FaultConfig {
            delay_us: 100,
            seed: Some(5),
            ..FaultConfig::default()
        };
        let mut f = FaultInjector::new(&c);
        let mut late = 0;
        for i in 0..1000u64 {
            let mut got = Vec::new();
            f.submit(i, i * 1_000_000, &mut |x| got.push(x));
            if got.is_empty() {
                late += 1;
                let t = f.next_release().unwrap();
                assert!(t > i * 1_000_000 && t <= i * 1_000_000 + 100_000);
                f.release(t, &mut |x| got.push(x));
            }
            assert_eq!(got, [i]);
        }
        assert!(late > 950, "{late}");
        assert_eq!(f.injected(), late);
    }
}
