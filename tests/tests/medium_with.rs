//! Layer-owned medium buffers (`request_medium_with`, `reply_medium_with`; seed 000
//! requirement 27): every size from 0 to the largest, both ways, each byte checked at the
//! target and in the reply (see `src/bin/medium_with.rs`), over shared memory and between
//! emulated nodes over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const MEDIUM_WITH: &str = env!("CARGO_BIN_EXE_medium_with");

fn medium_with(net: &str) {
    let mut argv = vec!["run", "-n", "2"];
    if !net.is_empty() {
        argv.extend(["--ranks-per-node", "1"]);
    }
    argv.push(MEDIUM_WITH);
    let mut job = Job::raw(argv)
        // Few medium buffers and the smallest rings, so that sends wait for both.
        .env("VOLLEY_RING_SLOTS", "8")
        .env("VOLLEY_MEDIUM_BUFFERS", "1")
        .timeout(Duration::from_secs(120));
    if !net.is_empty() {
        job = job.env("VOLLEY_NET", net);
    }
    let how = if net.is_empty() {
        "shared memory"
    } else {
        "network"
    };
    let lines = [0, 1].map(|r| format!("medium_with rank {r}: "));
    let out = job.output();
    out.assert_success()
        .assert_stdout_has(&[lines[0].as_str(), lines[1].as_str(), how]);
}

#[test]
fn every_size_over_shared_memory() {
    medium_with("");
}

#[test]
fn every_size_over_udp() {
    medium_with("udp");
}

#[test]
fn every_size_over_tcp() {
    medium_with("tcp");
}
