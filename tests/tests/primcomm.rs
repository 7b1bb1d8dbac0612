//! Handlers that send to any rank and remote reads and writes with completion flags
//! (`volley-prim`, seed 003 items 18 and 20): `src/bin/prim_comm_suite.rs` checks each
//! section and rank 0 prints a line per section, which these tests match. Over shared memory
//! in every progress mode with more ranks than cores, and over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_prim_comm_suite");
const WAKE: &str = env!("CARGO_BIN_EXE_prim_wake");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) {
    common::run_sections(job, "prim-comm", sections, DEADLINE);
}

const ALL: [&str; 3] = ["relay", "remote", "sends"];

#[test]
fn handlers_send_and_remote_memory_in_every_progress_mode() {
    for mode in ["comm-thread", "inline", "interrupt", "probe"] {
        run(
            Job::run(4, SUITE, &ALL).env("VOLLEY_PRIM_PROGRESS", mode),
            &ALL,
        );
    }
}

#[test]
fn over_udp_and_tcp_between_emulated_nodes() {
    for net in ["udp", "tcp"] {
        let mut args = vec!["run", "-n", "3", "--ranks-per-node", "1", SUITE];
        args.extend(ALL);
        run(Job::raw(args.clone()).env("VOLLEY_NET", net), &ALL);
        // The communication thread's sends to other nodes: every rank on a node of its own,
        // and 4 ranks on 2 nodes, where one thread's completions reach a node-mate directly
        // and the other node through the program thread.
        run(
            Job::raw(args)
                .env("VOLLEY_NET", net)
                .env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
            &ALL,
        );
        let mut args = vec!["run", "-n", "4", "--ranks-per-node", "2", SUITE];
        args.extend(ALL);
        run(
            Job::raw(args)
                .env("VOLLEY_NET", net)
                .env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
            &ALL,
        );
    }
}

/// An idle communication thread sleeps in the kernel, and a request wakes it (its doorbell
/// rung by the sender) and is answered: 2 ranks on one node.
#[test]
fn idle_communication_threads_sleep_and_wake_on_a_request() {
    run(
        Job::run(2, SUITE, &["idle"]).env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
        &["idle"],
    );
}

/// `interrupt` mode between nodes sleeps in `poll`/`ppoll` on the socket (and the eventfd its
/// node-mates write) and wakes when a packet arrives: `prim_wake` sends each packet only to a
/// receiver seen blocked there. Two ranks on two nodes, and three with the receiver's
/// node-mate (mapped: its notification sends a wake-up message) beside a remote sender.
#[test]
fn interrupt_mode_sleeps_on_the_socket_until_a_packet_arrives() {
    for net in ["udp", "tcp"] {
        for (n, per_node) in [("2", "1"), ("3", "2")] {
            let job = Job::raw(["run", "-n", n, "--ranks-per-node", per_node, WAKE]);
            job.env("VOLLEY_NET", net)
                .timeout(DEADLINE)
                .output()
                .assert_success()
                .assert_stdout_has(&["prim-wake: ok"]);
        }
    }
}
