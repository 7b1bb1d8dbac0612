//! Seed 002 requirement 28: commands without flow control (`Flow::Unreliable`) bypass the
//! reliable protocol's sequencing over UDP (unsequenced datagrams: at most once, never
//! retransmitted, lost when the network loses them), and are simply delivered over TCP and
//! shared memory. The rank program `rma_noflow` checks the memory and counters itself.

mod common;

use common::Job;
use std::time::Duration;

const NOFLOW: &str = env!("CARGO_BIN_EXE_rma_noflow");

const SLOW: Duration = Duration::from_secs(180);

/// Loss and duplication high enough that a few thousand datagrams surely see both.
const FAULTS: &str = "drop=0.1,dup=0.1,reorder=0.05,delay_us=200";

fn job(ranks: usize, per_node: usize, n: usize, expect: &str) -> Job {
    let (ranks, per_node, n) = (ranks.to_string(), per_node.to_string(), n.to_string());
    Job::raw([
        "run",
        "-n",
        &ranks,
        "--ranks-per-node",
        &per_node,
        NOFLOW,
        &n,
        expect,
    ])
    .timeout(SLOW)
}

/// The number after `key` in a `VOLLEY_STATS` line, summed over the ranks' lines.
fn stat_sum(stderr: &str, key: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| l.split(key).nth(1))
        .filter_map(|v| v.split_whitespace().next()?.parse::<u64>().ok())
        .sum()
}

#[test]
fn unreliable_commands_run_at_most_once_and_are_never_resent_over_udp_with_faults() {
    let out = job(3, 1, 1500, "lossy")
        .env("VOLLEY_NET", "udp")
        .env("VOLLEY_FAULTS", FAULTS)
        .env("VOLLEY_STATS", "1")
        .output();
    out.assert_success()
        .assert_stdout_has(&["rma_noflow lossy: 3000 reliable fetch-adds ran once each"]);
    // The counters are visible with VOLLEY_STATS, and faults were injected.
    assert!(
        stat_sum(&out.stderr, " | faults ") > 0,
        "no fault injected\n{out}"
    );
    assert!(
        stat_sum(&out.stderr, "| unsequenced sent ") >= 2 * 3 * 1500,
        "{out}"
    );
    assert!(stat_sum(&out.stderr, " duplicates ") > 0, "{out}");
}

#[test]
fn unreliable_commands_all_arrive_over_udp_without_faults() {
    job(2, 1, 1000, "clean")
        .env("VOLLEY_NET", "udp")
        .output()
        .assert_success()
        .assert_stdout_has(&[
            "unreliable: 1000/1000 fetch-adds, 1000/1000 packets, 1000/1000 puts ran",
        ]);
}

#[test]
fn unreliable_commands_are_delivered_over_tcp() {
    job(3, 1, 500, "stream")
        .env("VOLLEY_NET", "tcp")
        .output()
        .assert_success()
        .assert_stdout_has(&["unreliable: 1000/1000 fetch-adds, 1000/1000 packets"]);
}

#[test]
fn unreliable_commands_are_delivered_over_shared_memory() {
    job(3, 3, 500, "stream")
        .output()
        .assert_success()
        .assert_stdout_has(&["unreliable: 1000/1000 fetch-adds, 1000/1000 packets"]);
}
