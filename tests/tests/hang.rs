//! The hang report of `volley run` (`--hang-report-after SECONDS`, SIGUSR1): each classic hang
//! of the `hang` program runs until the report, which must name the right ranks and what they
//! do; then the test stops the job (SIGTERM to the launcher). Also under a progress thread,
//! blocking waits and the network transports (emulated nodes of one rank each).

mod common;

use common::{last_report, stuck_report, Job};
use std::time::Duration;

const HANG: &str = env!("CARGO_BIN_EXE_hang");
/// How the report is asked for.
#[derive(Clone, Copy, PartialEq)]
enum Ask {
    /// `--hang-report-after 2`.
    After,
    /// SIGUSR1 once every rank is ready.
    Signal,
}

/// Runs `hang MODE` on `n` ranks (with `flags` before the program and `env` for every rank),
/// waits for a hang report made while every rank is in its hang, checks that the job still
/// runs after it, stops the job and returns the report.
fn report_of(mode: &str, n: usize, flags: &[&str], env: &[(&str, &str)], ask: Ask) -> String {
    let n_text = n.to_string();
    let mut args = vec!["run", "-n", &n_text];
    args.extend_from_slice(flags);
    if ask == Ask::After {
        args.extend_from_slice(&["--hang-report-after", "2"]);
    }
    args.extend_from_slice(&[HANG, mode]);
    let mut job = Job::raw(&args).timeout(Duration::from_secs(120));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let mut job = job.spawn();
    job.wait_for_lines(n, Duration::from_secs(60), |l| {
        l.starts_with("hang: rank ") && l.ends_with(" ready")
    });
    let stderr = stuck_report(&mut job, ask == Ask::Signal);
    assert!(job.alive(), "the job ended after the report:\n{stderr}");
    job.signal(libc::SIGTERM);
    let out = job.finish();
    assert!(!out.status.success(), "a stopped hang exited 0:\n{out}");
    last_report(&stderr).expect("a complete report")
}

/// Asserts that `report` has every one of `needles` in its "likely cause" section.
fn assert_causes(report: &str, needles: &[&str]) {
    let causes = &report[report.find("likely cause").expect("a cause section")..];
    for n in needles {
        assert!(causes.contains(n), "the causes lack {n:?}:\n{report}");
    }
}

/// The table line of `rank` in `report`.
fn row(report: &str, rank: usize) -> String {
    report
        .lines()
        .find(|l| l.split_whitespace().next() == Some(&rank.to_string()))
        .unwrap_or_else(|| panic!("no line for rank {rank}:\n{report}"))
        .to_string()
}

#[test]
fn a_rank_that_never_polls_is_named_by_the_rank_that_waits_for_it() {
    let report = report_of("no-poll", 3, &[], &[], Ask::After);
    assert_causes(
        &report,
        &[
            "rank 0 waits for a reply from rank 1 (rank 1 has taken 0 of the 1 \
             requests rank 0 sent it)",
            "rank 1 has been computing for",
            "without polling",
        ],
    );
    assert!(
        row(&report, 0).contains("waiting in wait_until"),
        "{report}"
    );
    assert!(
        row(&report, 1).contains("computing, not polling"),
        "{report}"
    );
}

#[test]
fn a_missing_reply_is_named() {
    let report = report_of("no-reply", 3, &[], &[], Ask::After);
    assert_causes(
        &report,
        &[
            "rank 0 waits for a reply from rank 1 (rank 1 handled its 1 requests but \
           sent only 0 replies",
        ],
    );
    assert!(
        row(&report, 1).contains("waiting in wait_until"),
        "{report}"
    );
}

#[test]
fn a_barrier_one_rank_never_reaches_names_that_rank() {
    let report = report_of("barrier", 4, &[], &[], Ask::After);
    assert_causes(
        &report,
        &["ranks 0, 1 and 2 wait in barrier; 3 never reached it: rank 3 has been computing for"],
    );
    assert!(
        row(&report, 0).contains("in barrier (round 0, waits for rank 3)"),
        "{report}"
    );
}

#[test]
fn a_send_blocked_on_a_full_ring_names_the_rank_that_computes() {
    let report = report_of("full-ring", 3, &[], &[], Ask::After);
    assert_causes(
        &report,
        &[
            "rank 0 is blocked sending a request to rank 1 (the request ring to it \
             has 64/64 slots in use)",
            "rank 1 has been computing for",
        ],
    );
    assert!(
        row(&report, 0).contains("blocked sending a request to rank 1"),
        "{report}"
    );
}

#[test]
fn a_handler_that_runs_forever_is_named() {
    let report = report_of("slow-handler", 3, &[], &[], Ask::After);
    assert_causes(
        &report,
        &[
            "rank 0 waits for a reply from rank 1",
            "rank 1 has been running its request handler \"spin\" for",
        ],
    );
}

#[test]
fn sigusr1_to_the_launcher_prints_a_report_and_the_job_goes_on() {
    let report = report_of("no-poll", 3, &[], &[], Ask::Signal);
    assert_causes(&report, &["rank 0 waits for a reply from rank 1"]);
}

#[test]
fn a_missing_reply_is_named_with_a_progress_thread() {
    let report = report_of(
        "no-reply",
        3,
        &[],
        &[("VOLLEY_PROGRESS", "thread")],
        Ask::After,
    );
    assert_causes(
        &report,
        &["rank 0 waits for a reply from rank 1 (rank 1 handled its 1 requests"],
    );
}

#[test]
fn a_rank_that_never_polls_is_named_with_blocking_waits() {
    let report = report_of("no-poll", 3, &[], &[("VOLLEY_WAIT", "block")], Ask::After);
    assert_causes(
        &report,
        &["rank 0 waits for a reply from rank 1", "without polling"],
    );
}

#[test]
fn the_network_hangs_are_named_over_udp_and_tcp() {
    for net in ["udp", "tcp"] {
        let per_node = ["--ranks-per-node", "1"];
        let report = report_of("no-reply", 3, &per_node, &[("VOLLEY_NET", net)], Ask::After);
        assert_causes(
            &report,
            &["rank 0 waits for a reply from rank 1 (rank 1 handled its 1 requests"],
        );
        assert!(
            row(&report, 0).contains("waiting in wait_until"),
            "{net}: {report}"
        );
        let report = report_of("no-poll", 3, &per_node, &[("VOLLEY_NET", net)], Ask::After);
        assert_causes(
            &report,
            &["rank 1 has taken 0 of the 1 requests", "without polling"],
        );
    }
}

#[test]
fn a_stopped_rank_is_reported_as_not_answering() {
    let mut job = Job::raw(["run", "-n", "3", HANG, "no-reply"]).spawn();
    let ready = job.wait_for_lines(3, Duration::from_secs(60), |l| {
        l.starts_with("hang: rank ") && l.ends_with(" ready")
    });
    let pid: i32 = ready
        .iter()
        .find(|l| l.starts_with("hang: rank 2 "))
        .and_then(|l| {
            l.split(" pid ")
                .nth(1)?
                .split_whitespace()
                .next()?
                .parse()
                .ok()
        })
        .expect("rank 2's pid in its ready line");
    // SAFETY: plain system call on a rank of this job.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    // The stop takes effect asynchronously: ask only once the rank is stopped, or its
    // reporter may still answer.
    let stopped = || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            stat.rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|state| state == "T")
        })
    };
    let until = std::time::Instant::now() + Duration::from_secs(10);
    while !stopped() {
        assert!(
            std::time::Instant::now() < until,
            "rank 2 (pid {pid}) did not stop"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    job.signal(libc::SIGUSR1);
    let stderr = job.wait_for_stderr(Duration::from_secs(60), |s| last_report(s).is_some());
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    job.signal(libc::SIGTERM);
    let _ = job.finish();
    let report = last_report(&stderr).unwrap();
    assert!(
        row(&report, 2).contains("did not answer within 2 s"),
        "{report}"
    );
    assert_causes(&report, &["rank 2 did not answer"]);
}
