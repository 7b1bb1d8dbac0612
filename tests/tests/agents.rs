//! Seed 002's agents, first contact, logical task addressing and bounded target-side work
//! (issue 32), each over shared memory on both one-sided paths and across emulated nodes over
//! UDP and TCP. The rank programs check their own results and print a line these tests match.

mod common;

use common::Job;
use std::time::Duration;

const AGENTS: &str = env!("CARGO_BIN_EXE_rma_agents");

const DEADLINE: Duration = Duration::from_secs(180);

/// Where a job runs: one node on a one-sided path, or emulated nodes over a network transport.
#[derive(Debug, Clone, Copy)]
enum Place {
    Shm(&'static str),
    Net(&'static str),
}

const PLACES: [Place; 4] = [
    Place::Shm("direct"),
    Place::Shm("am"),
    Place::Net("udp"),
    Place::Net("tcp"),
];

/// Runs `program` on `ranks` ranks in every place (over the network, nodes of 2 ranks, so
/// that some accesses stay within a node) and checks that each run printed `want` after its
/// path. Every place runs even if one fails; the failure names it.
fn everywhere(ranks: usize, program: &str, args: &[&str], want: &str) {
    let mut failures = Vec::new();
    for place in PLACES {
        let n = ranks.to_string();
        let (job, path) = match place {
            Place::Shm(path) => {
                let mut argv = vec!["run", "-n", &n, program];
                argv.extend_from_slice(args);
                (Job::raw(argv).env("VOLLEY_RMA", path), path)
            }
            Place::Net(net) => {
                let mut argv = vec!["run", "-n", &n, "--ranks-per-node", "2", program];
                argv.extend_from_slice(args);
                (Job::raw(argv).env("VOLLEY_NET", net), "direct")
            }
        };
        let out = job.timeout(DEADLINE).output();
        let line = format!("path={path}: {want}");
        if !out.status.success() || !out.stdout.contains(&line) {
            failures.push(format!(
                "{place:?}: expected success and {line:?} on stdout:\n{out}"
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n\n"));
}

#[test]
fn agent_windows_open_only_their_windows_and_large_ops_split_into_bounded_frames() {
    everywhere(
        3,
        AGENTS,
        &[],
        "agents: 2 actors, 7 refusals each counted, windows written, memory outside them \
         unchanged, revoked agent refused; 1 MiB put+get: ",
    );
}

const TASKS: &str = env!("CARGO_BIN_EXE_task_suite");

#[test]
fn logical_tasks_move_and_no_operation_in_flight_is_lost() {
    everywhere(
        4,
        TASKS,
        &["migrate", "200"],
        "tasks: 480 adds exactly once across 4 moves, stale puts retried once each, bad input \
         refused",
    );
}

#[test]
fn first_contact_queues_refuses_and_cancels_by_issuer() {
    everywhere(
        3,
        TASKS,
        &["contact"],
        "contact: queued, full, refused, cancelled and admitted as asked, issuers recorded",
    );
}
