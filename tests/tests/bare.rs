//! The rank programs started bare (no launcher): a job of one rank whose messages to itself go
//! through the loopback rings. Needs no launcher binary.

mod common;

use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Runs `program args` with no `VOLLEY_*` variables and a deadline.
fn bare(program: &str, args: &[&str]) -> Output {
    bare_with(program, args, &[])
}

/// [`bare`] with the variables `env` set.
fn bare_with(program: &str, args: &[&str], env: &[(&str, &str)]) -> Output {
    let _serial = common::serial();
    let mut cmd = Command::new(program);
    cmd.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("VOLLEY_") {
            cmd.env_remove(&k);
        }
    }
    cmd.envs(env.iter().copied());
    let mut child = cmd
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            let out = child.wait_with_output().unwrap();
            panic!(
                "{program} {args:?} did not finish within 60 s\nstdout: {}\nstderr: {}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    child.wait_with_output().unwrap()
}

fn show(o: &Output) -> String {
    format!(
        "status {:?}\nstdout: {}\nstderr: {}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

fn assert_ok(program: &str, args: &[&str], stdout_has: &str) {
    let o = bare(program, args);
    assert!(
        o.status.success(),
        "{program} {args:?} failed:\n{}",
        show(&o)
    );
    assert!(
        String::from_utf8_lossy(&o.stdout).contains(stdout_has),
        "{program} {args:?}: stdout lacks {stdout_has:?}:\n{}",
        show(&o)
    );
}

#[test]
fn hello_started_bare_is_rank_0_of_1() {
    let o = bare(env!("CARGO_BIN_EXE_hello"), &[]);
    assert!(o.status.success(), "{}", show(&o));
    assert_eq!(String::from_utf8_lossy(&o.stdout), "rank 0 of 1\n");
    assert!(o.stderr.is_empty(), "{}", show(&o));
}

#[test]
fn hello_fail_on_rank_exits_1() {
    let o = bare(env!("CARGO_BIN_EXE_hello"), &["fail-on-rank", "0"]);
    assert_eq!(o.status.code(), Some(1), "{}", show(&o));
}

#[test]
fn pingpong_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_pingpong"),
        &["100000"],
        "100000 round trips (window 1) between ranks 0 and 0",
    );
    assert_ok(
        env!("CARGO_BIN_EXE_pingpong"),
        &["100000", "48"],
        "100000 round trips (window 48)",
    );
}

#[test]
fn flood_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_flood"),
        &["20000"],
        "1 ranks x 1 destinations x 20000 short requests",
    );
}

#[test]
fn medium_flood_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_flood"),
        &["5000", "medium"],
        "1 ranks x 1 destinations x 5000 medium requests",
    );
}

#[test]
fn fetch_add_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_fetch_add_check"),
        &["20000"],
        "counter = 20000, returned values are exactly 0..20000",
    );
}

#[test]
fn payload_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_payload"),
        &[],
        "verified in both directions",
    );
}

#[test]
fn stats_bare() {
    assert_ok(env!("CARGO_BIN_EXE_stats"), &[], "stats: rank 0 ok");
}

#[test]
fn barrier_bare() {
    assert_ok(
        env!("CARGO_BIN_EXE_barrier"),
        &["100"],
        "barrier: 100 barriers of 1 ranks ok",
    );
}

#[test]
fn mismatch_bare_has_nothing_to_compare() {
    assert_ok(env!("CARGO_BIN_EXE_mismatch"), &[], "single rank");
}

#[test]
fn crash_exit7_bare_exits_7() {
    let o = bare(env!("CARGO_BIN_EXE_crash"), &["exit7"]);
    assert_eq!(o.status.code(), Some(7), "{}", show(&o));
}

#[test]
fn crash_kill_bare_dies_of_sigkill() {
    use std::os::unix::process::ExitStatusExt;
    let o = bare(env!("CARGO_BIN_EXE_crash"), &[]);
    assert_eq!(o.status.signal(), Some(libc::SIGKILL), "{}", show(&o));
}

#[test]
fn a_bad_setting_fails_a_bare_program_in_one_line() {
    let o = bare_with(
        env!("CARGO_BIN_EXE_hello"),
        &[],
        &[("VOLLEY_STATS", "banana")],
    );
    assert!(!o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.lines().count(), 1, "{}", show(&o));
    assert!(
        err.contains("VOLLEY_STATS=banana: expected 0 or 1"),
        "{}",
        show(&o)
    );
}

#[test]
fn a_size_without_a_launcher_is_refused_not_run_alone() {
    let o = bare_with(env!("CARGO_BIN_EXE_hello"), &[], &[("VOLLEY_SIZE", "2")]);
    assert!(!o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("VOLLEY_SIZE") && err.contains("volley run"),
        "{}",
        show(&o)
    );
    // A size of 1 is what a bare start is anyway.
    let o = bare_with(env!("CARGO_BIN_EXE_hello"), &[], &[("VOLLEY_SIZE", "1")]);
    assert!(o.status.success(), "{}", show(&o));
}

#[test]
fn a_bare_program_warns_of_a_typo_once() {
    let o = bare_with(
        env!("CARGO_BIN_EXE_hello"),
        &[],
        &[("VOLLEY_PROGRES", "thread")],
    );
    assert!(o.status.success(), "{}", show(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        err.matches("VOLLEY_PROGRES is not a volley setting; did you mean VOLLEY_PROGRESS?")
            .count(),
        1,
        "{}",
        show(&o)
    );
}
