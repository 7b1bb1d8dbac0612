//! Seed 002's multicast UPDATE with acknowledge combining and FIFOe_NORMAL across processes,
//! on both one-sided paths (see `rma.rs`); `scripts/test` runs them over UDP and TCP between
//! emulated nodes too (`VOLLEY_TEST_NET`).

mod common;

use common::{Job, Outcome};
use std::time::Duration;

const MCAST: &str = env!("CARGO_BIN_EXE_rma_mcast");
const FIFOE: &str = env!("CARGO_BIN_EXE_rma_fifoe");

/// Deadline of each run: far above the few seconds they take, for a loaded machine.
const DEADLINE: Duration = Duration::from_secs(180);

/// Runs `ranks` ranks of `program` once per path and checks each printed `path=<path>: want`.
fn on_both_paths(ranks: usize, program: &str, args: &[&str], want: &str) {
    let mut failures = Vec::new();
    for path in ["direct", "am"] {
        let out: Outcome = Job::run(ranks, program, args)
            .env("VOLLEY_RMA", path)
            .timeout(DEADLINE)
            .output();
        let line = format!("path={path}: {want}");
        if !out.status.success() || !out.stdout.contains(&line) {
            failures.push(format!(
                "VOLLEY_RMA={path}: expected success and {line:?} on stdout:\n{out}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

fn multicast(ranks: usize, rounds: &str) {
    let want = format!(
        "{ranks} ranks x {rounds} multicasts delivered exactly once to each listed rank and no \
         other, one ack each; bad input and refusals reported"
    );
    on_both_paths(ranks, MCAST, &[rounds], &want);
}

#[test]
fn multicast_exactly_once_on_1_rank() {
    multicast(1, "20");
}

#[test]
fn multicast_exactly_once_with_one_ack_on_4_ranks() {
    multicast(4, "100");
}

#[test]
fn multicast_exactly_once_with_one_ack_on_7_ranks() {
    // More ranks than cores: inner members are preempted between their write and forwarding.
    multicast(7, "50");
}

#[test]
fn fifo_normal_mode_keeps_each_senders_order_on_3_ranks() {
    on_both_paths(
        3,
        FIFOE,
        &["1000"],
        "2 senders x 1000 NORMAL entries into a FIFO of 4: exactly once, in each sender's order",
    );
}

#[test]
fn fifo_normal_mode_keeps_each_senders_order_on_5_ranks() {
    on_both_paths(
        5,
        FIFOE,
        &["500"],
        "4 senders x 500 NORMAL entries into a FIFO of 4: exactly once, in each sender's order",
    );
}
