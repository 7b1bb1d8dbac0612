//! seed 000's xfer segments between ranks (see `src/bin/xfer.rs`): shuffled block fragments
//! and 16-byte packets, every end function once per round and re-armed, every byte intact,
//! a packet to a closed segment refused and reported; over shared memory and between emulated
//! nodes over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const XFER: &str = env!("CARGO_BIN_EXE_xfer");

fn xfer(net: &str) {
    let mut argv = vec!["run", "-n", "3"];
    if !net.is_empty() {
        argv.extend(["--ranks-per-node", "1"]);
    }
    argv.extend([XFER, "3"]);
    let mut job = Job::raw(argv).timeout(Duration::from_secs(180));
    if !net.is_empty() {
        job = job.env("VOLLEY_NET", net);
    }
    let out = job.output();
    out.assert_success();
    for rank in 0..3 {
        out.assert_stdout_has(&[&format!("xfer: rank {rank}: 9 ends")]);
    }
}

#[test]
fn xfer_segments_over_shared_memory() {
    xfer("");
}

#[test]
fn xfer_segments_over_udp() {
    xfer("udp");
}

#[test]
fn xfer_segments_over_tcp() {
    xfer("tcp");
}
