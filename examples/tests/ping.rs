//! The `ping` example runs bare (one rank, loopback rings) and reports what it did; a bad
//! round count is refused with exit code 2.

use std::process::Command;

#[test]
fn ping_bare_completes_every_round_trip() {
    let out = Command::new(env!("CARGO_BIN_EXE_ping"))
        .arg("2000")
        .env_remove("VOLLEY_RANK")
        .output()
        .expect("running ping");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "ping failed: {out:?}");
    assert!(
        stdout.contains("ping: 2000 round trips between ranks 0 and 0:"),
        "unexpected output: {stdout}"
    );
}

#[test]
fn ping_refuses_a_bad_round_count() {
    let out = Command::new(env!("CARGO_BIN_EXE_ping"))
        .arg("many")
        .output()
        .expect("running ping");
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("ROUNDS must be a whole number"));
}
