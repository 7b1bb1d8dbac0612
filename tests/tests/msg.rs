//! The tag-matching layer (`volley-msg`) across processes: `src/bin/msg_suite.rs` checks
//! every message it receives (content, length, source, tag, per-sender order) and rank 0
//! prints a line per section, which these tests match (a section that did not run fails).
//! Over shared memory, and between emulated nodes over UDP and TCP (`--ranks-per-node 1`);
//! with `VOLLEY_TEST_NET` (`scripts/test-matrix`) the shared-memory jobs cross the network
//! too.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_msg_suite");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) {
    common::run_sections(job, "msg", sections, DEADLINE);
}

/// Whether ranks of one node can read each other's memory here (`process_vm_readv`): not
/// under Yama's ptrace restrictions (scope 1 and up refuse siblings).
fn single_copy_allowed() -> bool {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope").map_or(true, |s| s.trim() == "0")
}

#[test]
fn every_section_on_4_ranks() {
    let sections = ["stream", "errors", "pingpong", "finalize"];
    let out = common::run_sections(Job::run(4, SUITE, &sections), "msg", &sections, DEADLINE);
    // On one node a rendezvous message is read straight from its sender's memory (asserted
    // under `volley run`; a cluster launcher's processes may be kept from reading each other).
    if common::test_net().is_none() && common::cluster_launcher().is_none() && single_copy_allowed()
    {
        out.assert_stdout_has(&["rendezvous by single copy"]);
    }
}

#[test]
fn with_single_copy_off_a_rendezvous_is_pulled() {
    let out = common::run_sections(
        Job::run(2, SUITE, &["pingpong"]).env("VOLLEY_MSG_SINGLE_COPY", "off"),
        "msg",
        &["pingpong"],
        DEADLINE,
    );
    out.assert_stdout_has(&["rendezvous pulled"]);
}

#[test]
fn streams_on_3_and_8_ranks() {
    // 8 ranks on 2 cores: more ranks than cores.
    for ranks in [3, 8] {
        run(Job::run(ranks, SUITE, &["stream"]), &["stream"]);
    }
}

#[test]
fn a_small_eager_limit_sends_most_of_the_stream_by_rendezvous() {
    let sections = ["stream", "pingpong"];
    run(
        Job::run(3, SUITE, &sections).env("VOLLEY_MSG_EAGER_BYTES", "200"),
        &sections,
    );
}

#[test]
fn unexpected_queue_exhaustion_refuses_then_drains_in_order() {
    run(Job::run(2, SUITE, &["unexpected"]), &["unexpected"]);
}

#[test]
fn over_udp_and_tcp_between_emulated_nodes() {
    for net in ["udp", "tcp"] {
        let sections = ["stream", "errors", "pingpong"];
        let mut args = vec!["run", "-n", "3", "--ranks-per-node", "1", SUITE];
        args.extend(sections);
        let job = Job::raw(args).env("VOLLEY_NET", net);
        // Between nodes a rendezvous message is pulled.
        common::run_sections(job, "msg", &sections, DEADLINE)
            .assert_stdout_has(&["rendezvous pulled"]);
        let args = [
            "run",
            "-n",
            "2",
            "--ranks-per-node",
            "1",
            SUITE,
            "unexpected",
        ];
        run(Job::raw(args).env("VOLLEY_NET", net), &["unexpected"]);
    }
}

#[test]
fn with_a_progress_thread() {
    let sections = ["stream", "errors", "pingpong"];
    run(
        Job::run(3, SUITE, &sections).env("VOLLEY_PROGRESS", "thread"),
        &sections,
    );
    // Its own job: it runs with a small queue.
    run(
        Job::run(2, SUITE, &["unexpected"]).env("VOLLEY_PROGRESS", "thread"),
        &["unexpected"],
    );
}

#[test]
fn a_bad_setting_is_refused_by_name() {
    let out = Job::run(2, SUITE, &["pingpong"])
        .env("VOLLEY_MSG_EAGER_BYTES", "1m")
        .output();
    out.assert_job_code(2)
        .assert_stderr_has(&["VOLLEY_MSG_EAGER_BYTES=1m", "up to 64k"]);
    let out = Job::run(2, SUITE, &["pingpong"])
        .env("VOLLEY_MSG_SINGLE_COPY", "maybe")
        .output();
    out.assert_job_code(2)
        .assert_stderr_has(&["VOLLEY_MSG_SINGLE_COPY=maybe", "on or off"]);
}
