//! The timing harness's figures (`volley_prim_layers::timing`) in the seed 003 experiments'
//! JSON and tables: one row per variant with `compute_ns`, `comm_ns`, `last_rank_ns`,
//! `latency_p50_ns` and `latency_p99_ns`.

use serde::Serialize;
use std::fmt::Write as _;
use volley_prim_layers::timing::{summarize, RankTiming, TimingSummary};

/// One variant's figures, reduced over its ranks.
#[derive(Debug, Serialize)]
pub struct TimingRow {
    /// The variant.
    pub variant: String,
    /// What a latency is in this variant.
    pub latency_is: &'static str,
    /// The reduced figures.
    #[serde(flatten)]
    pub t: TimingSummary,
}

/// The row of `variant` from every rank's figures; a failure when there are none.
pub fn row(
    variant: &str,
    latency_is: &'static str,
    ranks: &[RankTiming],
    failures: &mut Vec<String>,
) -> Option<TimingRow> {
    let Some(t) = summarize(ranks) else {
        failures.push(format!("{variant}: no timing"));
        return None;
    };
    Some(TimingRow {
        variant: variant.into(),
        latency_is,
        t,
    })
}

/// The figures a job recorded under `variant` (none if it recorded none, which [`row`]
/// reports as a failure).
pub fn of(timing: &[(String, Vec<RankTiming>)], variant: &str) -> Vec<RankTiming> {
    timing
        .iter()
        .find(|(v, _)| v == variant)
        .map(|(_, t)| t.clone())
        .unwrap_or_default()
}

/// The rows as a table (us for times, ns for latencies).
pub fn table(t: &mut String, rows: &[TimingRow]) {
    let _ = writeln!(
        t,
        "  {:<44} {:>11} {:>11} {:>12} {:>9} {:>9}",
        "timing (item 25): the last rank to complete",
        "compute us",
        "comm us",
        "last rank us",
        "p50 ns",
        "p99 ns"
    );
    for r in rows {
        let _ = writeln!(
            t,
            "  {:<44} {:>11.1} {:>11.1} {:>12.1} {:>9} {:>9}  ({} latencies: {})",
            r.variant,
            r.t.compute_ns / 1e3,
            r.t.comm_ns / 1e3,
            r.t.last_rank_ns / 1e3,
            r.t.latency_p50_ns,
            r.t.latency_p99_ns,
            r.t.messages,
            r.latency_is
        );
    }
}
