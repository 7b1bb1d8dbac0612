//! The `sink` example runs bare (one rank, its loopback ring), checks that every request it
//! sent itself was handled, and reports; a bad count is refused with exit code 2.

use std::process::Command;

#[test]
fn sink_bare_handles_every_request() {
    let out = Command::new(env!("CARGO_BIN_EXE_sink"))
        .arg("5000")
        .env_remove("VOLLEY_RANK")
        .output()
        .expect("running sink");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "sink failed: {out:?}");
    assert!(
        stdout.contains("sink: 5000 requests from rank 0 to rank 0:"),
        "unexpected output: {stdout}"
    );
}

#[test]
fn sink_refuses_a_bad_count() {
    let out = Command::new(env!("CARGO_BIN_EXE_sink"))
        .arg("lots")
        .output()
        .expect("running sink");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("COUNT must be a whole number"));
}
