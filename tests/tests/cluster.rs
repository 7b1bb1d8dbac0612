//! Jobs started by the cluster's own launchers, which speak PMIx: Open MPI's `mpirun` and
//! Slurm's `srun --mpi=pmix` (a one-node Slurm: `scripts/slurm-local start`). The suites of
//! `ranks`, `rma` and `global` run whole under each launcher too (`VOLLEY_TEST_LAUNCHER`, see
//! `scripts/test-matrix`); these tests cover what is particular to them: failures, cleanup,
//! and how a process without a launcher behind its `PMIX_NAMESPACE` fails.
//!
//! A launcher missing here skips its tests with a message, except under CI (`CI` set), which
//! must provide both.

mod common;

use common::Job;
use std::time::Duration;

const CRASH: &str = env!("CARGO_BIN_EXE_crash");
const HELLO: &str = env!("CARGO_BIN_EXE_hello");
const ROUTES: &str = env!("CARGO_BIN_EXE_routes");

/// Whether `launcher` can start jobs here; skips (or, under CI, fails) the test if not.
fn have(launcher: &str) -> bool {
    let works = match launcher {
        "mpirun" => std::process::Command::new("mpirun")
            .arg("--version")
            .output()
            .is_ok_and(|o| o.status.success()),
        _ => std::process::Command::new("srun")
            .args(["-n1", "--quiet", "true"])
            .output()
            .is_ok_and(|o| o.status.success()),
    };
    if !works {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must provide {launcher} (openmpi-bin; scripts/slurm-local start)"
        );
        eprintln!("skipped: {launcher} cannot start jobs here");
    }
    works
}

/// Names of abstract Unix sockets of volley's node rendezvous now bound on this host.
fn node_rendezvous_sockets() -> Vec<String> {
    std::fs::read_to_string("/proc/net/unix")
        .unwrap_or_default()
        .lines()
        .filter_map(|l| l.split_whitespace().nth(7))
        .filter(|name| name.starts_with("@volley-"))
        .map(str::to_string)
        .collect()
}

#[test]
fn a_job_under_each_launcher_has_every_rank_and_routes_like_volley_run() {
    for launcher in ["mpirun", "srun"] {
        if !have(launcher) {
            continue;
        }
        let out = Job::under(launcher, 4, HELLO, &[]).output();
        out.assert_success();
        for r in 0..4 {
            out.assert_stdout_has(&[&format!("rank {r} of 4")]);
        }
        // All four share one node: every message goes through shared memory.
        let out = Job::under(launcher, 4, ROUTES, &["4"]).output();
        out.assert_success();
        for r in 0..4 {
            out.assert_stdout_has(&[&format!(
                "routes: rank {r} node 0: 1200 messages through shared memory, 0 through the \
                 network"
            )]);
        }
        // Emulated nodes of two ranks: node-mates through shared memory, the rest through
        // each network transport.
        for net in ["udp", "tcp"] {
            let out = Job::under(launcher, 4, ROUTES, &["2"])
                .env("VOLLEY_NET", net)
                .env("VOLLEY_RANKS_PER_NODE", "2")
                .output();
            out.assert_success();
            for r in 0..4 {
                out.assert_stdout_has(&[&format!(
                    "routes: rank {r} node {}: 400 messages through shared memory, 800 through \
                     {net}",
                    r / 2
                )]);
            }
        }
    }
}

#[test]
fn a_killed_rank_ends_the_job_under_each_launcher_naming_it_and_leaves_nothing() {
    let before = node_rendezvous_sockets();
    for launcher in ["mpirun", "srun"] {
        if !have(launcher) {
            continue;
        }
        // On one node (shared memory), and on emulated nodes over each network transport.
        for net in [None, Some("udp"), Some("tcp")] {
            let mut job = Job::under(launcher, 4, CRASH, &["kill"]);
            if let Some(net) = net {
                job = job.env("VOLLEY_NET", net).env("VOLLEY_RANKS_PER_NODE", "2");
            }
            let out = job.timeout(Duration::from_secs(60)).output();
            assert_ne!(out.code(), Some(0), "the job must fail:\n{out}");
            // Named by the other ranks, or by the launcher in its own words.
            let named = [
                "rank 1 exited without finalizing",
                "process rank 1 ",
                "task 1: Killed",
            ];
            assert!(
                named.iter().any(|n| out.stderr.contains(n)),
                "nothing names rank 1 ({launcher}, {net:?}):\n{out}"
            );
            assert!(
                out.elapsed < Duration::from_secs(30),
                "took {:?} to end the job",
                out.elapsed
            );
        }
    }
    // The job's files (TMPDIR, /dev/shm) and processes are checked by the harness; the node
    // rendezvous sockets are abstract and must be gone with their processes.
    let left: Vec<_> = node_rendezvous_sockets()
        .into_iter()
        .filter(|s| !before.contains(s))
        .collect();
    assert!(left.is_empty(), "node rendezvous sockets left: {left:?}");
}

#[test]
fn a_rank_that_exits_early_is_named_under_each_launcher() {
    for launcher in ["mpirun", "srun"] {
        if !have(launcher) {
            continue;
        }
        let out = Job::under(launcher, 3, CRASH, &["exit7"]).output();
        assert_ne!(out.code(), Some(0), "the job must fail:\n{out}");
        let named = [
            "rank 1 exited without finalizing",
            "[[", // mpirun: "Process name: [[job,1],1]"
            "task 1: Exited with exit code 7",
        ];
        assert!(
            named.iter().any(|n| out.stderr.contains(n)),
            "nothing names rank 1 ({launcher}):\n{out}"
        );
    }
}

#[test]
fn a_namespace_without_a_server_fails_at_once_in_one_line() {
    let out = std::process::Command::new(HELLO)
        .env("PMIX_NAMESPACE", "no-such-job")
        .env_remove("VOLLEY_RENDEZVOUS")
        .env_remove("PMIX_SERVER_URI41")
        .env_remove("PMIX_SERVER_URI4")
        .env_remove("PMIX_SERVER_URI3")
        .env_remove("PMIX_SERVER_URI2")
        .output()
        .expect("hello runs");
    let err = String::from_utf8_lossy(&out.stderr);
    // Without libpmix the process cannot try the server (that refusal is tested in
    // `a_missing_libpmix_is_named_with_its_package`); CI installs it (libpmix-dev).
    if err.contains("install the Debian package libpmix") && std::env::var_os("CI").is_none() {
        eprintln!("skipped: libpmix is not installed here");
        return;
    }
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(
        err.contains("PMIX_NAMESPACE=no-such-job") && err.contains("cannot be reached"),
        "{err}"
    );
}

#[test]
fn a_missing_libpmix_is_named_with_its_package() {
    let out = std::process::Command::new(HELLO)
        .env("PMIX_NAMESPACE", "some-job")
        .env("VOLLEY_PMIX_LIBRARY", "/nonexistent/libpmix.so.2")
        .env_remove("VOLLEY_RENDEZVOUS")
        .output()
        .expect("hello runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert_eq!(err.lines().count(), 1, "one line:\n{err}");
    assert!(
        err.contains("/nonexistent/libpmix.so.2") && err.contains("libpmix2"),
        "{err}"
    );
}

#[test]
fn volley_info_says_which_bootstrap_a_process_would_use() {
    let launcher = common::launcher();
    let line = |out: &[u8]| {
        String::from_utf8_lossy(out)
            .lines()
            .find(|l| l.starts_with("bootstrap"))
            .map(str::to_string)
            .unwrap_or_default()
    };
    let mut bare = std::process::Command::new(&launcher);
    bare.arg("info").env_remove("PMIX_NAMESPACE");
    common::without_outer_job(&mut bare);
    let out = bare.output().expect("volley info runs");
    assert!(line(&out.stdout).contains("bare"), "{}", line(&out.stdout));
    let out = Job::raw(["run", "-n", "1", &launcher.display().to_string(), "info"]).output();
    assert!(
        line(out.stdout.as_bytes()).contains("volley run"),
        "{}",
        out.stdout
    );
    for name in ["mpirun", "srun"] {
        if !have(name) {
            continue;
        }
        let out = Job::under(name, 1, &launcher.display().to_string(), &["info"]).output();
        let l = line(out.stdout.as_bytes());
        assert!(l.contains("pmix") && l.contains("loads"), "{name}: {l}");
    }
}
