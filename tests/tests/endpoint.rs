//! AM-II endpoints (`volley-endpoint`) across processes: `src/bin/endpoint_suite.rs` checks
//! what it receives and what comes back to handler 0, and rank 0 prints a line per section,
//! which these tests match (a section that did not run fails). Over shared memory, and between
//! emulated nodes over UDP and TCP; with `VOLLEY_TEST_NET` (`scripts/test-matrix`) the
//! shared-memory jobs cross the network too.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_endpoint_suite");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) {
    common::run_sections(job, "endpoint", sections, DEADLINE);
}

const ALL: [&str; 4] = ["pingpong", "returned", "errors", "libraries"];

#[test]
fn every_section_on_2_and_4_ranks() {
    for ranks in [2, 4] {
        run(Job::run(ranks, SUITE, &ALL), &ALL);
    }
}

#[test]
fn pingpong_with_more_ranks_than_cores() {
    // 6 ranks, 3 endpoints each, on a machine of 2 cores.
    run(
        Job::run(6, SUITE, &["pingpong", "returned"]),
        &["pingpong", "returned"],
    );
}

/// `volley run` on emulated nodes of `per_node` ranks over `net`.
fn on_nodes(net: &str, ranks: usize, per_node: usize, sections: &[&str]) -> Job {
    let (n, p) = (ranks.to_string(), per_node.to_string());
    let mut args = vec!["run", "-n", &n, "--ranks-per-node", &p, SUITE];
    args.extend(sections);
    Job::raw(args).env("VOLLEY_NET", net)
}

#[test]
fn over_udp_and_tcp_between_emulated_nodes() {
    for net in ["udp", "tcp"] {
        run(on_nodes(net, 3, 1, &ALL), &ALL);
    }
}

#[test]
fn replies_to_a_node_mate_never_touch_the_network() {
    for net in ["udp", "tcp"] {
        let sections = ["local", "pingpong"];
        run(on_nodes(net, 4, 2, &sections), &sections);
    }
}

#[test]
fn with_a_progress_thread() {
    // volley's handlers (which queue) on the progress thread, endpoints polled by the program.
    run(
        Job::run(3, SUITE, &ALL).env("VOLLEY_PROGRESS", "thread"),
        &ALL,
    );
    let sections = ["local", "returned"];
    run(
        on_nodes("udp", 4, 2, &sections).env("VOLLEY_PROGRESS", "thread"),
        &sections,
    );
}
