//! `seed000-am-vs-sendrecv`: seed 000's requirement 37. The same ping-pong and one-way signal
//! with Active Messages and with a conventional buffered, tag-matching send and receive
//! (`volley-msg`) on the same transport, in the same job, overheads side by side.
//!
//! The seed's claim: Active Messages cut a message's overhead 5-7 times on the nCUBE/2
//! (Table 4-1: vendor send&receive 92 µs to send and 102 µs to receive, 194 µs, against
//! 13.1 + 15.0 = 28 µs) and more than 10 times on the CM-5 (LogP o about 80 µs against
//! 1.6 µs). Overhead here is the same sum, o_s + o_r, each side measured on its own. Both
//! layers run on the same rings, so the ratio measures what tag matching, the unexpected queue
//! and flow control add on top of a bare Active Message.
//!
//! Verified: every message of both protocols arrived with the value it had to carry (the
//! ranks check each one), and every figure was measured.

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median_present;
use crate::bench::msg::{Pair, PairFigures};
use serde::Serialize;
use std::fmt::Write as _;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed000-am-vs-sendrecv",
    about: "seed 000 req. 37: ping-pong and one-way signal, Active Messages against tag-matching send/receive, overheads side by side",
    run,
    rank: Some(rank),
};

/// The seed's overhead ratios (send&receive over Active Messages).
const SEED_NCUBE_RATIO: (f64, f64) = (5.0, 7.0);
const SEED_CM5_RATIO: f64 = 10.0;
/// The target shape: AM overhead at least this many times lower.
const TARGET_RATIO: f64 = 5.0;

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    /// Messages checked on both ranks.
    checked: u64,
    am_short_rtt_ns: f64,
    tagged_rtt_ns: f64,
    /// o_s + o_r.
    am_overhead_ns: f64,
    /// o_s + o_r.
    tagged_overhead_ns: f64,
    am_send_overhead_ns: f64,
    tagged_send_overhead_ns: f64,
    am_recv_overhead_ns: f64,
    tagged_recv_overhead_ns: f64,
    am_signal_ns: f64,
    tagged_signal_ns: f64,
    /// Tagged over AM, for each pair of figures.
    ratios: Ratios,
    /// Each repetition's figures.
    runs: Vec<PairFigures>,
}

#[derive(Debug, Serialize)]
struct Ratios {
    /// Of o_s + o_r.
    overhead: f64,
    send_overhead: f64,
    recv_overhead: f64,
    rtt: f64,
    signal: f64,
    target_overhead_at_least: f64,
    seed_ncube2_overhead: (f64, f64),
    seed_cm5_overhead_above: f64,
}

/// One rank: every repetition; rank 0 writes them.
fn rank(a: &RankArgs) -> Result<(), String> {
    let scale: f64 = a
        .args
        .first()
        .and_then(|s| s.parse().ok())
        .ok_or("expected SCALE REPS")?;
    let reps: usize = a
        .args
        .get(1)
        .and_then(|s| s.parse().ok())
        .ok_or("expected SCALE REPS")?;
    let (pair, setup) = Pair::new(scale)?;
    let msg = setup.attach(&pair.rt).map_err(|e| e.to_string())?;
    let mut runs = Vec::new();
    for _ in 0..reps {
        let mut f = pair.one_rep(&msg);
        pair.merge_receiver(&msg, &mut f)?;
        runs.push(f);
    }
    if pair.rt.rank() == 0 {
        write_result(&a.out, &runs)?;
    }
    Ok(())
}

fn run(o: &Options) -> Result<Outcome, String> {
    let scale = if o.quick { 0.05 } else { 1.0 };
    let args = [scale.to_string(), o.reps.to_string()];
    // Both ranks on one node: the shared-memory rings, pinned.
    let runs: Vec<PairFigures> = rank_job(EXPERIMENT.name, 2, 2, &[], &args)?;
    let med = |f: fn(&PairFigures) -> f64| median_present(runs.iter().map(f));
    let mut failures: Vec<String> = runs.iter().flat_map(|r| r.failures.clone()).collect();
    let checked = runs.iter().map(|r| r.checked).sum();
    let report_figures = [
        ("am_short_rtt_ns", med(|r| r.am_short_rtt_ns)),
        ("tagged_rtt_ns", med(|r| r.tagged_rtt_ns)),
        ("am_send_overhead_ns", med(|r| r.am_send_overhead_ns)),
        (
            "tagged_send_overhead_ns",
            med(|r| r.tagged_send_overhead_ns),
        ),
        ("am_recv_overhead_ns", med(|r| r.am_recv_overhead_ns)),
        (
            "tagged_recv_overhead_ns",
            med(|r| r.tagged_recv_overhead_ns),
        ),
        ("am_signal_ns", med(|r| r.am_signal_ns)),
        ("tagged_signal_ns", med(|r| r.tagged_signal_ns)),
    ];
    super::require_figures(&mut failures, &report_figures);
    if checked == 0 {
        failures.push("no message was checked".into());
    }
    let [rtt_am, rtt_tag, os_am, os_tag, or_am, or_tag, sig_am, sig_tag] =
        report_figures.map(|f| f.1);
    let (o_am, o_tag) = (os_am + or_am, os_tag + or_tag);
    let report = Report {
        verified: failures.is_empty(),
        failures,
        checked,
        am_short_rtt_ns: rtt_am,
        tagged_rtt_ns: rtt_tag,
        am_overhead_ns: o_am,
        tagged_overhead_ns: o_tag,
        am_send_overhead_ns: os_am,
        tagged_send_overhead_ns: os_tag,
        am_recv_overhead_ns: or_am,
        tagged_recv_overhead_ns: or_tag,
        am_signal_ns: sig_am,
        tagged_signal_ns: sig_tag,
        ratios: Ratios {
            overhead: o_tag / o_am,
            send_overhead: os_tag / os_am,
            recv_overhead: or_tag / or_am,
            rtt: rtt_tag / rtt_am,
            signal: sig_tag / sig_am,
            target_overhead_at_least: TARGET_RATIO,
            seed_ncube2_overhead: SEED_NCUBE_RATIO,
            seed_cm5_overhead_above: SEED_CM5_RATIO,
        },
        runs,
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed000-am-vs-sendrecv: 2 ranks on one node (shared-memory rings), pinned; medians"
    );
    let _ = writeln!(
        t,
        "  {:<22} {:>12} {:>12} {:>14}",
        "", "AM (ns)", "tagged (ns)", "tagged / AM"
    );
    for (name, am, tag) in [
        ("round trip, 8 B", r.am_short_rtt_ns, r.tagged_rtt_ns),
        (
            "send overhead o_s",
            r.am_send_overhead_ns,
            r.tagged_send_overhead_ns,
        ),
        (
            "receive overhead o_r",
            r.am_recv_overhead_ns,
            r.tagged_recv_overhead_ns,
        ),
        ("overhead o_s + o_r", r.am_overhead_ns, r.tagged_overhead_ns),
        ("one-way signal", r.am_signal_ns, r.tagged_signal_ns),
    ] {
        let _ = writeln!(t, "  {name:<22} {am:>12.1} {tag:>12.1} {:>14.2}", tag / am);
    }
    let _ = writeln!(
        t,
        "  overhead (o_s + o_r) ratio {:.2}: target >= {TARGET_RATIO} ({}); seed 000: {}-{} on the nCUBE/2, > {} on the CM-5",
        r.ratios.overhead,
        if r.ratios.overhead >= TARGET_RATIO {
            "met"
        } else {
            "NOT met"
        },
        SEED_NCUBE_RATIO.0,
        SEED_NCUBE_RATIO.1,
        SEED_CM5_RATIO
    );
    let _ = writeln!(
        t,
        "  {} messages checked; {}",
        r.checked,
        if r.verified {
            "every one arrived intact".to_string()
        } else {
            format!("FAILED: {}", r.failures.join("; "))
        }
    );
    t
}
