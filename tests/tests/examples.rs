//! The example programs on several ranks, through the launcher: `fetch_add` as README's first
//! command runs it, `ping` and `sink` between two ranks with a third rank idle. Each example
//! also has a bare (one-rank) test in `examples/tests`.

mod common;

use common::{launcher, Job};

/// An example program, built by `cargo test --workspace` beside the launcher (the examples
/// package has integration tests, so cargo builds its programs).
fn example(name: &str) -> String {
    let path = launcher().with_file_name(name);
    assert!(
        path.is_file(),
        "the example {} does not exist: build it first (`cargo build --release -p \
         volley-examples`)",
        path.display()
    );
    path.to_string_lossy().into_owned()
}

#[test]
fn the_demo_runs_on_4_ranks_as_readme_says() {
    Job::run(4, &example("fetch_add"), &[])
        .output()
        .assert_success()
        .assert_stdout_has(&["fetch_add: 4 ranks x", "all distinct and covering", ": yes"]);
}

#[test]
fn ping_between_two_ranks_completes_every_round_trip() {
    Job::run(3, &example("ping"), &["20000"])
        .output()
        .assert_success()
        .assert_stdout_has(&["ping: 20000 round trips between ranks 0 and 1:"]);
}

#[test]
fn sink_between_two_ranks_handles_every_request() {
    // The count is not a multiple of the ring, so the last batch of credit is partial.
    Job::run(3, &example("sink"), &["100003"])
        .output()
        .assert_success()
        .assert_stdout_has(&["sink: 100003 requests from rank 0 to rank 1:"]);
}
