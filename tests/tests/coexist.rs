//! Seed 000 requirement 28: the program's own Active Message handlers and `volley-msg`'s
//! tagged send and receive interleaved on one runtime and one transport, every message
//! checked on both sides (see `src/bin/coexist.rs`): over shared memory, and between emulated
//! nodes over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const COEXIST: &str = env!("CARGO_BIN_EXE_coexist");
const DEADLINE: Duration = Duration::from_secs(180);

/// Runs `coexist` on `ranks` ranks: over shared memory (`net` empty), or one rank per
/// emulated node over `net`.
fn coexist(net: &str, ranks: usize, extra_env: &[(&str, &str)]) {
    let n = ranks.to_string();
    let mut argv = vec!["run", "-n", &n];
    if !net.is_empty() {
        argv.extend(["--ranks-per-node", "1"]);
    }
    argv.extend([COEXIST, "12"]);
    let mut job = Job::raw(argv).timeout(DEADLINE);
    if !net.is_empty() {
        job = job.env("VOLLEY_NET", net);
    }
    for (k, v) in extra_env {
        job = job.env(k, v);
    }
    let lines: Vec<String> = (0..ranks)
        .map(|r| format!("coexist rank {r}: 96 active messages and 96 tagged messages"))
        .collect();
    let lines: Vec<&str> = lines.iter().map(String::as_str).collect();
    job.output().assert_success().assert_stdout_has(&lines);
}

#[test]
fn am_handlers_and_tagged_messages_share_shared_memory() {
    // 3 ranks on 2 cores, and the smallest rings, so that sends of both layers wait for room.
    coexist("", 3, &[("VOLLEY_RING_SLOTS", "8")]);
}

#[test]
fn am_handlers_and_tagged_messages_share_udp() {
    coexist("udp", 3, &[]);
}

#[test]
fn am_handlers_and_tagged_messages_share_tcp() {
    coexist("tcp", 3, &[]);
}

#[test]
fn with_a_progress_thread() {
    coexist("", 2, &[("VOLLEY_PROGRESS", "thread")]);
}
