//! Jobs whose ranks sit on several emulated nodes (`--ranks-per-node`): routing by node,
//! both network transports, real UDP with injected faults, peer death, bad settings.
//!
//! The whole core and one-sided suites also run over each transport: `scripts/test` runs
//! `ranks` and `rma` again with `VOLLEY_TEST_NET=udp` and `=tcp` (see `common::Job::run`).

mod common;

use common::Job;
use std::time::Duration;

const ROUTES: &str = env!("CARGO_BIN_EXE_routes");
const PINGPONG: &str = env!("CARGO_BIN_EXE_pingpong");
const FETCH_ADD: &str = env!("CARGO_BIN_EXE_fetch_add_check");
const PAYLOAD: &str = env!("CARGO_BIN_EXE_payload");
const RMA_PUTGET: &str = env!("CARGO_BIN_EXE_rma_putget");
const CRASH: &str = env!("CARGO_BIN_EXE_crash");
const BULK: &str = env!("CARGO_BIN_EXE_bulk");
const CMD: &str = env!("CARGO_BIN_EXE_rma_cmd");

const SLOW: Duration = Duration::from_secs(180);

fn routes_on_four_nodes_of_two(net: &str) {
    let out = Job::raw(["run", "-n", "8", "--ranks-per-node", "2", ROUTES, "2"])
        .env("VOLLEY_NET", net)
        .timeout(SLOW)
        .output();
    out.assert_success();
    // 200 requests and 200 replies with each of the 7 others: 1 node-mate, 6 elsewhere.
    for rank in 0..8 {
        out.assert_stdout_has(&[&format!(
            "routes: rank {rank} node {}: 400 messages through shared memory, 2400 through {net}",
            rank / 2
        )]);
    }
}

#[test]
fn four_nodes_of_two_ranks_route_by_node_over_udp() {
    routes_on_four_nodes_of_two("udp");
}

#[test]
fn four_nodes_of_two_ranks_route_by_node_over_tcp() {
    routes_on_four_nodes_of_two("tcp");
}

#[test]
fn one_node_uses_no_network() {
    Job::raw(["run", "-n", "3", "--ranks-per-node", "3", ROUTES, "3"])
        .output()
        .assert_success()
        .assert_stdout_has(&["routes: rank 2 node 0: 800 messages through shared memory, 0 through the network (none)"]);
}

#[test]
fn uneven_nodes_route_by_node() {
    // 5 ranks in nodes of 2: the last node has one rank.
    Job::raw(["run", "-n", "5", "--ranks-per-node", "2", ROUTES, "2", "50"])
        .env("VOLLEY_NET", "udp")
        .timeout(SLOW)
        .output()
        .assert_success()
        .assert_stdout_has(&[
            "routes: rank 4 node 2: 0 messages through shared memory, 400 through udp",
        ]);
}

const FAULTS: &str = "drop=0.05,dup=0.02,reorder=0.05,delay_us=200";

/// Runs `program` on `ranks` ranks, one per node, over real UDP with injected faults; the
/// program checks its own results, and the counters must show that faults were injected.
fn under_faults(ranks: usize, per_node: usize, program: &str, args: &[&str], env: &[(&str, &str)]) {
    let n = ranks.to_string();
    let rpn = per_node.to_string();
    let mut argv = vec!["run", "-n", &n, "--ranks-per-node", &rpn, program];
    argv.extend_from_slice(args);
    let mut job = Job::raw(argv);
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job
        .env("VOLLEY_NET", "udp")
        .env("VOLLEY_FAULTS", FAULTS)
        .env("VOLLEY_STATS", "1")
        .timeout(SLOW)
        .output();
    out.assert_success();
    let injected: u64 = out
        .stderr
        .lines()
        .filter_map(|l| l.split(" | faults ").nth(1))
        .filter_map(|v| v.trim().parse::<u64>().ok())
        .sum();
    assert!(injected > 0, "no fault was injected:\n{out}");
}

#[test]
fn pingpong_over_udp_with_loss_duplication_reordering_and_delay() {
    under_faults(2, 1, PINGPONG, &["20000", "8"], &[]);
}

#[test]
fn fetch_add_over_udp_with_faults_on_mixed_nodes() {
    under_faults(4, 2, FETCH_ADD, &["500"], &[]);
}

#[test]
fn payload_integrity_over_udp_with_faults() {
    under_faults(2, 1, PAYLOAD, &[], &[]);
}

#[test]
fn put_get_over_udp_with_faults() {
    under_faults(3, 1, RMA_PUTGET, &[], &[("VOLLEY_SEGMENT_BYTES", "20M")]);
}

/// Seed 002 requirement 19: combined packets (FIFO entry, put, put with flag) and single
/// fetch-add packets under loss, duplication and reordering: the program checks that every
/// FIFO entry arrived once and in order and that the counter and the reported old values
/// count every fetch-add once.
#[test]
fn combined_packets_and_atomics_run_once_over_udp_with_faults() {
    under_faults(3, 1, CMD, &["300"], &[]);
}

#[test]
fn combined_packets_over_tcp() {
    Job::raw(["run", "-n", "3", "--ranks-per-node", "1", CMD, "300"])
        .env("VOLLEY_NET", "tcp")
        .timeout(SLOW)
        .output()
        .assert_success()
        .assert_stdout_has(&["3 ranks: 300 coloured puts, combined packets and fetch-adds"]);
}

/// A 16 MiB long message (two network messages' worth, so it travels in parts) arrives
/// intact while short and medium messages go to and come back from a third rank.
#[test]
fn sixteen_mib_long_with_traffic_to_a_third_rank_over_udp_with_faults() {
    under_faults(3, 1, BULK, &["16"], &[]);
}

#[test]
fn sixteen_mib_long_with_traffic_to_a_third_rank_over_tcp() {
    Job::raw(["run", "-n", "3", "--ranks-per-node", "1", BULK, "16"])
        .env("VOLLEY_NET", "tcp")
        .timeout(SLOW)
        .output()
        .assert_success()
        .assert_stdout_has(&["bulk: 16 MiB long intact, 55 echoes from rank 2 intact"]);
}

#[test]
fn killed_rank_of_a_multi_node_job_ends_it_quickly() {
    for net in ["udp", "tcp"] {
        let out = Job::raw(["run", "-n", "4", "--ranks-per-node", "1", CRASH, "kill"])
            .env("VOLLEY_NET", net)
            .output();
        out.assert_code(128 + libc::SIGKILL)
            .assert_stderr_has(&["rank 1 (pid ", "SIGKILL"]);
        assert!(
            out.elapsed < Duration::from_secs(10),
            "{net}: took {:?} to end the job\n{out}",
            out.elapsed
        );
    }
}

#[test]
fn bad_network_settings_are_refused_with_a_clear_error() {
    for (var, value, needle) in [
        ("VOLLEY_NET", "ib", "VOLLEY_NET"),
        ("VOLLEY_POLL", "sometimes", "VOLLEY_POLL"),
        ("VOLLEY_FAULTS", "drop=2", "VOLLEY_FAULTS"),
        ("VOLLEY_NET_ADDR", "not-an-ip", "VOLLEY_NET_ADDR"),
        ("VOLLEY_PEER_TIMEOUT", "-1", "VOLLEY_PEER_TIMEOUT"),
    ] {
        let out = Job::raw(["run", "-n", "2", "--ranks-per-node", "1", ROUTES, "1", "1"])
            .env(var, value)
            .output();
        assert_ne!(out.code(), Some(0), "{var}={value} was accepted\n{out}");
        out.assert_stderr_has(&[needle]);
    }
    let out = Job::raw(["run", "-n", "2", "--ranks-per-node", "0", ROUTES]).output();
    out.assert_code(2).assert_stderr_has(&["--ranks-per-node"]);
}

#[test]
fn tcp_congestion_control_is_chosen_or_refused_clearly() {
    let run = |value: &str| {
        Job::raw(["run", "-n", "2", "--ranks-per-node", "1", ROUTES, "1", "1"])
            .env("VOLLEY_NET", "tcp")
            .env("VOLLEY_TCP_CONGESTION", value)
            .output()
    };
    // Reno is in every Linux kernel and allowed to every process.
    for good in ["reno", "system"] {
        run(good).assert_success();
    }
    // A malformed name, and one the kernel does not have.
    for (bad, needle) in [("cu bic", "expected system"), ("nosuchcc", "nosuchcc")] {
        let out = run(bad);
        assert_ne!(out.code(), Some(0), "{bad:?} was accepted\n{out}");
        out.assert_stderr_has(&["VOLLEY_TCP_CONGESTION", needle]);
    }
}
