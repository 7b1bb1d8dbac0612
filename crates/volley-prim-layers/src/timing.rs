//! The timing harness of seed 003's experiments (item 25): per rank, the computation time and
//! the communication time apart, the time of the last rank to complete, and per-message
//! latency distributions (median, p99).
//!
//! A rank fills a [`RankTiming`]: its run's time (from a common start, a barrier), its
//! computation alone (the same arithmetic without communication) and the [`Latencies`] of its
//! messages. [`summarize`] takes every rank's and reports, as the seed does, the last rank's
//! computation and communication (run minus computation) and the merged latencies.

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::time::Instant;

/// The longest latency told apart (one minute, in ns).
pub const MAX_NS: u64 = 60_000_000_000;

/// A distribution of per-message latencies in ns (an HDR histogram, 3 significant digits).
#[derive(Debug, Clone)]
pub struct Latencies {
    h: Histogram<u64>,
}

impl Default for Latencies {
    fn default() -> Self {
        Self::new()
    }
}

impl Latencies {
    /// An empty distribution.
    pub fn new() -> Self {
        Self {
            h: Histogram::new_with_bounds(1, MAX_NS, 3).expect("valid bounds and precision"),
        }
    }

    /// Records one latency of `ns` (at most [`MAX_NS`]: longer ones count as that).
    #[inline]
    pub fn record(&mut self, ns: u64) {
        self.h.saturating_record(ns);
    }

    /// Records the time since `start`.
    #[inline]
    pub fn record_since(&mut self, start: Instant) {
        self.record(start.elapsed().as_nanos() as u64);
    }

    /// Adds every latency of `other`.
    pub fn merge(&mut self, other: &Latencies) {
        self.h
            .add(&other.h)
            .expect("histograms of the same bounds always add");
    }

    /// Forgets every latency.
    pub fn clear(&mut self) {
        self.h.reset();
    }

    /// Latencies recorded.
    pub fn count(&self) -> u64 {
        self.h.len()
    }

    /// The latency at quantile `q` (0..=1) in ns; 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        self.h.value_at_quantile(q)
    }

    /// The distribution as `(ns, count)` pairs, to send to another rank.
    pub fn to_pairs(&self) -> Vec<(u64, u64)> {
        self.h
            .iter_recorded()
            .map(|v| (v.value_iterated_to(), v.count_at_value()))
            .collect()
    }

    /// The distribution [`Latencies::to_pairs`] gave.
    pub fn from_pairs(pairs: &[(u64, u64)]) -> Self {
        let mut l = Self::new();
        for &(ns, n) in pairs {
            l.h.saturating_record_n(ns, n);
        }
        l
    }
}

/// One rank's figures for one variant of an experiment.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RankTiming {
    /// The rank's run: from the common start until it completed (ns).
    pub run_ns: f64,
    /// Its computation alone (ns).
    pub compute_ns: f64,
    /// Its per-message latencies, as [`Latencies::to_pairs`].
    pub latency: Vec<(u64, u64)>,
}

/// Every rank's figures reduced the seed's way.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct TimingSummary {
    /// The last rank's computation (ns).
    pub compute_ns: f64,
    /// The last rank's communication: its run minus its computation (ns, at least 0).
    pub comm_ns: f64,
    /// The time of the last rank to complete (ns).
    pub last_rank_ns: f64,
    /// The median latency over every rank's messages (ns).
    pub latency_p50_ns: u64,
    /// The 99th percentile latency (ns).
    pub latency_p99_ns: u64,
    /// Latencies recorded over every rank.
    pub messages: u64,
}

/// Reduces every rank's figures: the last rank to complete gives the computation and the
/// communication; the latencies are merged. `None` without ranks.
pub fn summarize(ranks: &[RankTiming]) -> Option<TimingSummary> {
    let last = ranks.iter().max_by(|a, b| a.run_ns.total_cmp(&b.run_ns))?;
    let mut lat = Latencies::new();
    for r in ranks {
        lat.merge(&Latencies::from_pairs(&r.latency));
    }
    Some(TimingSummary {
        compute_ns: last.compute_ns,
        comm_ns: (last.run_ns - last.compute_ns).max(0.0),
        last_rank_ns: last.run_ns,
        latency_p50_ns: lat.quantile(0.5),
        latency_p99_ns: lat.quantile(0.99),
        messages: lat.count(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn latencies_survive_the_trip_between_ranks() {
        let mut l = Latencies::new();
        for ns in 1..=1000 {
            l.record(ns);
        }
        let back = Latencies::from_pairs(&l.to_pairs());
        assert_eq!(back.count(), 1000);
        assert_eq!(back.quantile(0.5), l.quantile(0.5));
        assert!(
            (495..=505).contains(&back.quantile(0.5)),
            "{}",
            back.quantile(0.5)
        );
        assert!(
            (985..=995).contains(&back.quantile(0.99)),
            "{}",
            back.quantile(0.99)
        );
    }

    #[test]
    fn the_last_rank_to_complete_gives_computation_and_communication() {
        let lat = |v: &[u64]| {
            let mut l = Latencies::new();
            v.iter().for_each(|&x| l.record(x));
            l.to_pairs()
        };
        let ranks = [
            RankTiming {
                run_ns: 100.0,
                compute_ns: 90.0,
                latency: lat(&[10, 10]),
            },
            RankTiming {
                run_ns: 300.0,
                compute_ns: 50.0,
                latency: lat(&[20, 1000]),
            },
        ];
        let s = summarize(&ranks).expect("two ranks");
        assert_eq!(s.last_rank_ns, 300.0);
        assert_eq!(s.compute_ns, 50.0);
        assert_eq!(s.comm_ns, 250.0);
        assert_eq!(s.messages, 4);
        assert_eq!(s.latency_p50_ns, 10);
        assert!(s.latency_p99_ns >= 999, "{}", s.latency_p99_ns);
        assert!(summarize(&[]).is_none());
    }
}
