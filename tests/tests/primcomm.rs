//! Handlers that send to any rank and remote reads and writes with completion flags
//! (`volley-prim`, seed 003 items 18 and 20): `src/bin/prim_comm_suite.rs` checks each
//! section and rank 0 prints a line per section, which these tests match. Over shared memory
//! in every progress mode with more ranks than cores, and over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_prim_comm_suite");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) {
    let wanted: Vec<String> = sections
        .iter()
        .map(|s| format!("prim-comm {s}: ok"))
        .collect();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    job.timeout(DEADLINE)
        .output()
        .assert_success()
        .assert_stdout_has(&wanted);
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
        // The communication thread cannot reach other nodes: only the refusals run there.
        let mut args = vec!["run", "-n", "3", "--ranks-per-node", "1", SUITE];
        args.extend(["sends", "remote"]);
        run(
            Job::raw(args)
                .env("VOLLEY_NET", net)
                .env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
            &["sends", "remote"],
        );
    }
}
