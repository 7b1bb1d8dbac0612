//! Non-blocking sends (`try_request_*`, `wait_sendable`) over shared memory and over UDP and
//! TCP between emulated nodes: a try-send that finds no room sends nothing and runs no
//! handler, and every message that went is handled exactly once (see `src/bin/try_send.rs`).

mod common;

use common::Job;
use std::time::Duration;

const TRY_SEND: &str = env!("CARGO_BIN_EXE_try_send");

const SLOW: Duration = Duration::from_secs(180);

/// Runs `try_send CLASS` on two ranks: over shared memory (`net` empty), or on two emulated
/// nodes over `net`.
fn try_send(net: &str, class: &str) {
    let mut argv = vec!["run", "-n", "2"];
    if !net.is_empty() {
        argv.extend(["--ranks-per-node", "1"]);
    }
    argv.extend([TRY_SEND, class]);
    let mut job = Job::raw(argv)
        // The smallest ring, so that shared memory refuses early; a segment with room for
        // every long message's two places until TCP refuses (its send queue takes 64 MiB
        // and the kernel's buffers more; the pages a rank never touches cost nothing).
        .env("VOLLEY_RING_SLOTS", "8")
        .env("VOLLEY_SEGMENT_BYTES", "256M")
        .env("VOLLEY_PROGRESS", "inline")
        .timeout(SLOW);
    if !net.is_empty() {
        job = job.env("VOLLEY_NET", net);
    }
    let out = job.output();
    out.assert_success();
    out.assert_stderr_has(&["first would-block after", "rank 1 handled"]);
}

#[test]
fn try_send_short_over_shared_memory() {
    try_send("", "short");
}

#[test]
fn try_send_medium_over_shared_memory() {
    try_send("", "medium");
}

#[test]
fn try_send_long_over_shared_memory() {
    try_send("", "long");
}

#[test]
fn try_send_short_over_udp() {
    try_send("udp", "short");
}

#[test]
fn try_send_medium_over_udp() {
    try_send("udp", "medium");
}

#[test]
fn try_send_long_over_udp() {
    try_send("udp", "long");
}

#[test]
fn try_send_short_over_tcp() {
    try_send("tcp", "short");
}

#[test]
fn try_send_medium_over_tcp() {
    try_send("tcp", "medium");
}

#[test]
fn try_send_long_over_tcp() {
    try_send("tcp", "long");
}
