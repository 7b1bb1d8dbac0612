//! The global layer (`volley-global`) across processes: one suite program
//! (`src/bin/global_suite.rs`) runs unchanged under every strategy. With `VOLLEY_TEST_NET`
//! (`scripts/test-matrix`) the same jobs run on emulated nodes, over UDP or TCP. Each section
//! checks its own results; these tests match the line rank 0 prints for each, so a section
//! that silently did not run fails.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_global_suite");
const SECTIONS: [&str; 15] = [
    "rw", "sync", "handle", "spread", "store", "radix", "atomics", "buckets", "barrier", "coll",
    "bulk", "overlap", "flood", "exchange", "protect",
];
const DEADLINE: Duration = Duration::from_secs(240);

/// Runs the whole suite on `ranks` ranks under `strategy` and checks every section passed.
fn whole_suite(strategy: &str, ranks: usize) {
    let out = Job::run(ranks, SUITE, &["all"])
        .env("VOLLEY_STRATEGY", strategy)
        .timeout(DEADLINE)
        .output();
    out.assert_success();
    let lines: Vec<String> = SECTIONS
        .iter()
        .map(|s| format!("global {s} [{strategy}]: ok"))
        .collect();
    let wanted: Vec<&str> = lines.iter().map(String::as_str).collect();
    out.assert_stdout_has(&wanted);
}

#[test]
fn the_suite_under_proc() {
    whole_suite("proc", 4);
}

#[test]
fn the_suite_under_np() {
    whole_suite("np", 4);
}

#[test]
fn the_suite_under_hw() {
    whole_suite("hw", 4);
}

#[test]
fn the_suite_on_3_ranks_under_np() {
    whole_suite("np", 3);
}

#[test]
fn collectives_against_references_on_1_to_8_ranks() {
    for ranks in 1..=8 {
        for strategy in ["hw", "proc"] {
            Job::run(ranks, SUITE, &["coll", "barrier", "radix"])
                .env("VOLLEY_STRATEGY", strategy)
                .timeout(DEADLINE)
                .output()
                .assert_success()
                .assert_stdout_has(&[
                    &format!("global coll [{strategy}]: ok (every collective on {ranks} ranks"),
                    &format!("global radix [{strategy}]: ok"),
                ]);
        }
    }
}

/// Runs suite `section` on 2 ranks with cores of their own and on 5 polite ranks, under every
/// strategy; rank 0's line must start with `ok (` and `detail(ranks)`.
fn on_2_and_5_polite_ranks(section: &str, detail: impl Fn(usize) -> String) {
    for (ranks, polite) in [(2, "0"), (5, "1")] {
        for strategy in ["proc", "np", "hw"] {
            Job::run(ranks, SUITE, &[section])
                .env("VOLLEY_STRATEGY", strategy)
                .env("VOLLEY_POLITE", polite)
                .timeout(DEADLINE)
                .output()
                .assert_success()
                .assert_stdout_has(&[&format!(
                    "global {section} [{strategy}]: ok ({}",
                    detail(ranks)
                )]);
        }
    }
}

/// The small collectives' fast paths under every strategy: on 2 ranks with cores of their
/// own (fast lanes: Active Messages, or mapped memory under `hw`) and on 5 polite ranks (the
/// hub under `hw`).
#[test]
fn small_collectives_take_their_fast_paths() {
    on_2_and_5_polite_ranks("paths", |ranks| {
        format!("300 calls of each small collective on {ranks} ranks")
    });
}

/// Ranks at the hub (`hw`, polite, pinned round-robin) yield their core to each other, not
/// at every poll while the rank they wait for needs another core: see the suite's `hubwait`.
#[test]
fn hub_waits_spin_while_the_awaited_rank_needs_another_core() {
    let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !two_cores || common::test_net().is_some() {
        return;
    }
    Job::raw(["run", "--bind", "-n", "3", SUITE, "hubwait"])
        .env("VOLLEY_STRATEGY", "hw")
        .env("VOLLEY_POLITE", "1")
        .timeout(DEADLINE)
        .output()
        .assert_success()
        .assert_stdout_has(&["global hubwait [hw]: ok (300 barriers on 3 ranks"]);
}

/// A sync whose gets all went to one running rank spins for it rather than yielding: see the
/// suite's `syncwait`.
#[test]
fn a_sync_awaiting_one_running_rank_spins_for_it() {
    let two_cores = std::thread::available_parallelism().is_ok_and(|n| n.get() >= 2);
    if !two_cores || common::test_net().is_some() {
        return;
    }
    Job::raw(["run", "--bind", "-n", "3", SUITE, "syncwait"])
        .env("VOLLEY_STRATEGY", "proc")
        .env("VOLLEY_POLITE", "1")
        .timeout(DEADLINE)
        .output()
        .assert_success()
        .assert_stdout_has(&["global syncwait [proc]: ok (1000 syncs of a 16 KiB get"]);
}

/// Small broadcasts whose roots run ahead: through the broadcast ring under `hw` on one node
/// (no message sent), on 2 ranks with cores of their own and 5 polite ones, under every
/// strategy, every value checked.
#[test]
fn small_broadcasts_from_roots_that_run_ahead() {
    on_2_and_5_polite_ranks("bcast", |ranks| {
        format!("1000 small broadcasts on {ranks} ranks")
    });
}

/// Large all-reduces and all-to-alls around 16 KiB and at 1 MiB on 1-8 ranks: copied
/// straight between processes under `hw` on one node, through the mapped scratch with
/// `VOLLEY_COLL_CMA=off`, on Active Messages under `proc`.
#[test]
fn large_collectives_single_copy_and_mapped() {
    // Emulated nodes (`VOLLEY_TEST_NET`) hold `VOLLEY_TEST_RANKS_PER_NODE` ranks each.
    let per_node = common::test_net().map(|_| {
        std::env::var("VOLLEY_TEST_RANKS_PER_NODE")
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
            .unwrap_or(1)
    });
    for ranks in 1..=8 {
        let one_node = per_node.is_none_or(|n| ranks <= n);
        for (strategy, cma) in [("hw", "auto"), ("hw", "off"), ("proc", "auto")] {
            if cma == "off" && ranks % 3 != 2 || strategy == "proc" && ranks != 3 {
                continue;
            }
            let single = strategy == "hw" && cma == "auto" && ranks > 1 && one_node;
            let how = if single { "on" } else { "off" };
            Job::run(ranks, SUITE, &["big"])
                .env("VOLLEY_STRATEGY", strategy)
                .env("VOLLEY_COLL_CMA", cma)
                .timeout(DEADLINE)
                .output()
                .assert_success()
                .assert_stdout_has(&[&format!(
                    "global big [{strategy}]: ok (single copy {how}, {ranks} ranks)"
                )]);
        }
    }
}

#[test]
fn more_ranks_than_cores_with_a_progress_thread_each() {
    Job::run(
        8,
        SUITE,
        &["store", "atomics", "buckets", "flood", "exchange"],
    )
    .env("VOLLEY_STRATEGY", "np")
    .timeout(DEADLINE)
    .output()
    .assert_success()
    .assert_stdout_has(&[
        "global store [np]: ok (7 senders",
        "global atomics [np]: ok (8 x 300",
        "global buckets [np]: ok",
        "global flood [np]: ok (8 ranks x 20000 stores",
        "global exchange [np]: ok",
    ]);
}

#[test]
fn a_store_sync_that_waits_long_says_what_for() {
    for strategy in ["proc", "hw"] {
        Job::run(2, SUITE, &["late"])
            .env("VOLLEY_STRATEGY", strategy)
            .env("VOLLEY_HANG_WARN_SECS", "0.2")
            .timeout(DEADLINE)
            .output()
            .assert_success()
            .assert_stdout_has(&[&format!("global late [{strategy}]: ok")])
            .assert_stderr_has(&[
                "rank 0 has waited",
                "for store_sync(8): 0 bytes have arrived",
            ]);
    }
}

#[test]
fn an_unknown_strategy_is_refused_by_name() {
    // By `volley run`, once, before any rank starts; by every rank under another launcher.
    let out = Job::run(2, SUITE, &["rw"])
        .env("VOLLEY_STRATEGY", "fast")
        .output();
    out.assert_job_code(2).assert_stderr_has(&[
        "VOLLEY_STRATEGY",
        "fast",
        "expected proc, np or hw",
    ]);
    if common::under_volley_run() {
        out.assert_stderr_has(&["VOLLEY_STRATEGY=fast: expected proc, np or hw"]);
        // Said once, not once per rank (other lines may be warnings about other settings).
        assert_eq!(out.stderr.matches("VOLLEY_STRATEGY").count(), 1, "{out}");
    }
    // And by the layer itself in a program started without the launcher.
    let bare = std::process::Command::new(SUITE)
        .arg("rw")
        .env("VOLLEY_STRATEGY", "fast")
        .env_remove("VOLLEY_RENDEZVOUS")
        .output()
        .expect("the suite runs");
    let err = String::from_utf8_lossy(&bare.stderr);
    assert!(!bare.status.success(), "{err}");
    assert!(
        err.contains("unknown strategy \"fast\": expected proc, np or hw"),
        "{err}"
    );
}

/// Runs suite `section` (a mismatch) on each of `cases` (ranks, strategy, `VOLLEY_POLITE`):
/// a rank must detect it and end the job with status 3, naming a barrier and `other`.
fn mismatch_detected(section: &str, cases: &[(usize, &str, &str)], other: &str) {
    for &(ranks, strategy, polite) in cases {
        let out = Job::run(ranks, SUITE, &[section])
            .env("VOLLEY_STRATEGY", strategy)
            .env("VOLLEY_POLITE", polite)
            .timeout(DEADLINE)
            .output();
        out.assert_job_code(3).assert_stderr_has(&[
            "detected: collective #",
            "mismatch: rank",
            "barrier",
            other,
        ]);
    }
}

/// Rank 0 in a barrier while the others wait for its broadcast, and rank 0 broadcasting
/// while the others wait in a barrier: through the ring (2 ranks, `hw`), against the hub (5
/// polite ranks, `hw`), and as parcels (3 ranks, `proc`).
#[test]
fn a_barrier_against_a_broadcast_is_an_error_not_a_silent_hang() {
    let cases = [(2, "hw", "0"), (5, "hw", "1"), (3, "proc", "auto")];
    for section in ["mismatch-bcast", "mismatch-root"] {
        mismatch_detected(section, &cases, "broadcast");
    }
}

#[test]
fn a_barrier_against_an_all_reduce_is_an_error_not_a_silent_hang() {
    // The last at the hub (every rank polite under hw).
    let cases = [
        (2, "hw", "auto"),
        (3, "proc", "auto"),
        (4, "np", "auto"),
        (5, "hw", "1"),
    ];
    mismatch_detected("mismatch", &cases, "all_reduce");
}
