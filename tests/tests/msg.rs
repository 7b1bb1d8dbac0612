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

#[test]
fn every_section_on_4_ranks() {
    let sections = ["stream", "errors", "pingpong", "finalize"];
    run(Job::run(4, SUITE, &sections), &sections);
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
        run(Job::raw(args).env("VOLLEY_NET", net), &sections);
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
}
