//! `volley run` itself: output, exit codes, failure handling, signals, bad command lines and
//! cleanup. (Every run also checks that the launcher's TMPDIR is empty afterwards, that no
//! /dev/shm entry appeared and that no process of the job survived: see `common`.)

mod common;

use common::{process_gone, voluntary_switches, Job};
use std::time::{Duration, Instant};

const HELLO: &str = env!("CARGO_BIN_EXE_hello");
const CRASH: &str = env!("CARGO_BIN_EXE_crash");

fn sorted_lines(s: &str) -> Vec<String> {
    let mut v: Vec<String> = s.lines().map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn every_rank_runs_once_with_its_identity() {
    let out = Job::run(4, HELLO, &[]).output();
    out.assert_success();
    let want: Vec<String> = (0..4).map(|r| format!("rank {r} of 4")).collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
}

#[test]
fn one_rank_job() {
    let out = Job::run(1, HELLO, &[]).output();
    out.assert_success();
    assert_eq!(out.stdout, "rank 0 of 1\n", "\n{out}");
}

#[test]
fn label_prefixes_every_line_with_its_rank() {
    let out = Job::raw(["run", "-n", "3", "--label", HELLO]).output();
    out.assert_success();
    let want: Vec<String> = (0..3).map(|r| format!("[{r}] rank {r} of 3")).collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
}

#[test]
fn a_failing_ranks_last_words_come_before_the_failure_line() {
    // The labelled copy of a rank's output runs in its own thread: the launcher waits for it
    // before saying how the rank ended, so the cause is not printed after the verdict.
    for _ in 0..8 {
        let out = Job::raw([
            "run",
            "-n",
            "2",
            "--label",
            "/bin/sh",
            "-c",
            "echo about to fail $VOLLEY_RANK >&2; [ $VOLLEY_RANK = 1 ] && exit 5; sleep 5",
        ])
        .output();
        out.assert_code(5);
        let at = |needle: &str| {
            out.stderr
                .find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing:\n{out}"))
        };
        assert!(
            at("[1] about to fail 1") < at("rank 1 (pid "),
            "the failure line came before the rank's last words:\n{out}"
        );
    }
}

#[test]
fn label_keeps_lines_whole_and_in_order_per_rank() {
    let (ranks, lines) = (4, 2000);
    let out = Job::raw(["run", "-n", "4", "--label", HELLO, "lines", "2000"]).output();
    out.assert_success();
    for (stream, text, word) in [
        ("stdout", &out.stdout, "line"),
        ("stderr", &out.stderr, "err"),
    ] {
        let mut next = vec![0usize; ranks];
        for l in text.lines() {
            // stderr may also carry the launcher's own lines; stdout only ranks' lines.
            if stream == "stderr" && !l.starts_with('[') {
                continue;
            }
            let (label, rest) = l
                .split_once("] ")
                .unwrap_or_else(|| panic!("unlabelled {stream} line {l:?}"));
            let r: usize = label
                .strip_prefix('[')
                .and_then(|r| r.parse().ok())
                .unwrap_or_else(|| panic!("bad label in {stream} line {l:?}"));
            if rest.starts_with("rank ") && rest.contains(" of ") {
                assert_eq!(rest, format!("rank {r} of {ranks}"), "{stream}: {l:?}");
                continue;
            }
            assert_eq!(
                rest,
                format!("rank {r} {word} {}", next[r]),
                "{stream}: line out of order, mixed up or under the wrong label"
            );
            next[r] += 1;
        }
        assert_eq!(next, vec![lines; ranks], "{stream}: lines per rank");
    }
}

#[test]
fn bind_runs_more_ranks_than_cores() {
    let out = Job::raw(["run", "-n", "5", "--bind", HELLO]).output();
    out.assert_success();
    let want: Vec<String> = (0..5).map(|r| format!("rank {r} of 5")).collect();
    assert_eq!(sorted_lines(&out.stdout), want, "\n{out}");
}

#[test]
fn double_dash_separates_program_arguments() {
    let out = Job::raw(["run", "-n", "3", "--", HELLO, "fail-on-rank", "7"]).output();
    out.assert_success();
    assert_eq!(out.stdout.lines().count(), 3, "\n{out}");
}

#[test]
fn failing_rank_status_is_propagated_and_named() {
    // Rank 2 exits 1 without finalizing; the others wait for it in finalize until stopped.
    let out = Job::run(4, HELLO, &["fail-on-rank", "2"]).output();
    out.assert_code(1)
        .assert_stderr_has(&["volley run: rank 2 (pid ", "exited with status 1"]);
}

#[test]
fn rank_killed_by_sigkill_ends_the_job() {
    let out = Job::run(3, CRASH, &["kill"]).output();
    out.assert_code(128 + libc::SIGKILL)
        .assert_stderr_has(&["rank 1 (pid ", "SIGKILL"]);
    let line = out
        .stderr
        .lines()
        .find(|l| l.contains("rank 1 (pid "))
        .unwrap();
    assert!(
        line.contains("killed by signal SIGKILL"),
        "the line naming rank 1 should say how it died: {line:?}\n{out}"
    );
    assert!(
        out.elapsed < Duration::from_secs(30),
        "took {:?} to end the job",
        out.elapsed
    );
}

#[test]
fn background_children_of_ranks_do_not_outlive_the_job() {
    // Each rank starts a long sleep in the background and exits 0 at once. The job must end
    // promptly, and the harness fails the test if any process of the job survives it.
    let out = Job::run(2, "/bin/sh", &["-c", "sleep 300 & echo started"]).output();
    out.assert_success().assert_stdout_has(&["started"]);
    assert!(
        out.elapsed < Duration::from_secs(20),
        "took {:?}: the launcher waited for the background sleep",
        out.elapsed
    );
}

#[test]
fn rank_leaving_without_finalizing_ends_the_job() {
    // Rank 1 exits 0 without dropping its Runtime while the others wait forever: the launcher
    // tells them it left, and they fail loudly instead of hanging.
    let out = Job::run(3, CRASH, &["leave"]).output();
    assert_ne!(out.code(), Some(0), "the job must fail\n{out}");
    out.assert_stderr_has(&["rank 1 exited without finalizing"]);
    assert!(
        out.elapsed < Duration::from_secs(30),
        "took {:?} to end the job",
        out.elapsed
    );
}

#[test]
fn rank_exit_status_7_is_propagated() {
    let out = Job::run(3, CRASH, &["exit7"]).output();
    out.assert_code(7)
        .assert_stderr_has(&["rank 1 (pid ", "exited with status 7"]);
}

#[test]
fn short_grace_still_stops_everything() {
    let out = Job::raw(["run", "-n", "4", "--grace", "0", CRASH, "exit7"]).output();
    out.assert_code(7);
}

/// Starts `crash hang` on `n` ranks and waits until every rank is polling; returns their pids.
fn start_hanging_job(n: usize) -> (common::Running, Vec<u32>) {
    let mut job = Job::run(n, CRASH, &["hang"]).spawn();
    let ready = job.wait_for_lines(n, Duration::from_secs(30), |l| {
        l.starts_with("crash: rank ") && l.ends_with(" ready")
    });
    let pids = ready
        .iter()
        .map(|l| {
            let after = l.split(" pid ").nth(1).expect("pid in ready line");
            after
                .split_whitespace()
                .next()
                .unwrap()
                .parse::<u32>()
                .unwrap()
        })
        .collect();
    (job, pids)
}

fn check_interrupted(job: common::Running, pids: &[u32], sent: Instant) {
    let out = job.finish();
    let took = sent.elapsed();
    // Either an exit code (conventionally 128 + signal) or death by the signal re-raised.
    assert!(!out.status.success(), "interrupted job exited 0:\n{out}");
    assert!(
        took < Duration::from_secs(15),
        "the launcher took {took:?} to exit after the signal:\n{out}"
    );
    for pid in pids {
        assert!(process_gone(*pid), "rank pid {pid} survived:\n{out}");
    }
}

#[test]
fn ctrl_c_to_the_launcher_stops_hanging_ranks() {
    let (job, pids) = start_hanging_job(4);
    assert_eq!(pids.len(), 4);
    let sent = Instant::now();
    job.signal(libc::SIGINT);
    check_interrupted(job, &pids, sent);
}

#[test]
fn ctrl_c_to_the_foreground_group_stops_hanging_ranks() {
    // What a terminal does: SIGINT to the foreground process group (here the launcher's).
    let (job, pids) = start_hanging_job(3);
    let sent = Instant::now();
    job.signal_group(libc::SIGINT);
    check_interrupted(job, &pids, sent);
}

#[test]
fn sigterm_to_the_launcher_stops_hanging_ranks() {
    let (job, pids) = start_hanging_job(2);
    let sent = Instant::now();
    job.signal(libc::SIGTERM);
    check_interrupted(job, &pids, sent);
}

#[test]
fn the_launcher_sleeps_while_its_ranks_run() {
    // It wakes when a rank ends, a signal comes or the rendezvous has news, not on a timer:
    // a loop that looked every 2 ms switched about 250 times in these 500 ms.
    let (job, pids) = start_hanging_job(2);
    let before = voluntary_switches(job.pid());
    std::thread::sleep(Duration::from_millis(500));
    let woke = voluntary_switches(job.pid()).since(&before);
    let sent = Instant::now();
    job.signal(libc::SIGTERM);
    check_interrupted(job, &pids, sent);
    assert!(
        woke < 25,
        "the launcher's threads woke {woke} times in 500 ms with nothing to do"
    );
}

/// Runs a bad command line: exit code 2, one line on stderr, nothing started.
fn bad_command_line(args: &[&str], mention: &str) {
    bad_command_line_with(args, &[], mention);
}

/// [`bad_command_line`] with `env` set for the launcher.
fn bad_command_line_with(args: &[&str], env: &[(&str, &str)], mention: &str) {
    let mut job = Job::raw(args).timeout(Duration::from_secs(10));
    for (k, v) in env {
        job = job.env(k, v);
    }
    let out = job.output();
    out.assert_code(2);
    assert!(out.stdout.is_empty(), "something ran:\n{out}");
    let lines: Vec<&str> = out
        .stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "expected a one-line error on stderr for {args:?}, got {} lines:\n{out}",
        lines.len()
    );
    assert!(
        lines[0].to_lowercase().contains(&mention.to_lowercase()),
        "the error for {args:?} should mention {mention:?}: {:?}",
        lines[0]
    );
}

#[test]
fn zero_ranks_is_refused() {
    bad_command_line(&["run", "-n", "0", HELLO], "rank");
}

#[test]
fn missing_program_is_refused() {
    bad_command_line(&["run", "-n", "2"], "program");
}

#[test]
fn program_not_found_is_refused() {
    bad_command_line(
        &["run", "-n", "2", "/nonexistent/volley-no-such-program"],
        "volley-no-such-program",
    );
    bad_command_line(
        &["run", "-n", "2", "volley-no-such-program-on-path"],
        "not found",
    );
}

#[test]
fn unknown_option_is_refused() {
    bad_command_line(
        &["run", "--no-such-option", "-n", "2", HELLO],
        "--no-such-option",
    );
}

#[test]
fn unknown_subcommand_is_refused() {
    bad_command_line(&["frobnicate"], "frobnicate");
}

#[test]
fn malformed_rank_count_is_refused() {
    bad_command_line(&["run", "-n", "two", HELLO], "two");
}

#[test]
fn huge_rank_counts_are_refused() {
    // A typo, not a wish for that many processes: refused before anything starts (these
    // used to end in a capacity-overflow panic, or in starting processes without end).
    for n in ["65537", "1152921504606846976", "18446744073709551615"] {
        bad_command_line(&["run", "-n", n, HELLO], "at most 65536");
        bad_command_line(
            &["run", "-n", n, "--ranks-per-node", "1", HELLO],
            "at most 65536",
        );
        bad_command_line(&["run", "-n", n, "--hosts", "a,b", HELLO], "at most 65536");
    }
}

#[test]
fn a_subcommand_is_missing() {
    // `volley` alone: the usage, on stderr, exit code 2.
    for args in [&[][..], &["bench"]] {
        let out = Job::raw(args).timeout(Duration::from_secs(10)).output();
        out.assert_code(2).assert_stderr_has(&["Usage: volley"]);
    }
}

#[test]
fn a_labelled_job_ends_when_its_reader_goes_away() {
    // `volley run --label yes | head -1`: as without --label, the rank must get SIGPIPE once
    // nobody reads its output any more, and the job end, instead of running on with its
    // output thrown away.
    use std::io::{BufRead, BufReader};
    let mut child = std::process::Command::new(common::launcher())
        .args(["run", "-n", "1", "--label", "yes"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    assert_eq!(first, "[0] y\n");
    // The reader (and with it the pipe's read end) is gone now.
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            panic!("the labelled job ran on after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(128 + libc::SIGPIPE), "{status:?}");
}

#[test]
fn invalid_setting_reaches_the_ranks_and_fails_the_job() {
    // VOLLEY_* settings are inherited by every rank: an invalid ring size makes build() fail.
    let out = Job::run(2, HELLO, &[])
        .env("VOLLEY_RING_SLOTS", "7")
        .output();
    assert_ne!(out.code(), Some(0), "\n{out}");
    out.assert_stderr_has(&["VOLLEY_RING_SLOTS"]);
}

#[test]
fn two_jobs_at_once_stay_apart() {
    // Two launchers at the same time, each with its own TMPDIR, job id and key: both succeed.
    let _serial = common::serial();
    let flood = env!("CARGO_BIN_EXE_flood");
    let a = Job::run(2, flood, &["5000"]).unlocked().spawn();
    let b = Job::run(3, flood, &["5000"]).unlocked().spawn();
    let out_a = a.finish();
    let out_b = b.finish();
    out_a
        .assert_success()
        .assert_stdout_has(&["flood: 2 ranks x 2 destinations x 5000 short requests"]);
    out_b
        .assert_success()
        .assert_stdout_has(&["flood: 3 ranks x 3 destinations x 5000 short requests"]);
}

#[test]
fn politeness_follows_ranks_per_cpu_of_the_job_not_a_pinned_mask() {
    const POLITE: &str = env!("CARGO_BIN_EXE_polite");
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    // --bind pins each rank to one CPU; with no more ranks than CPUs none is oversubscribed.
    if cpus >= 2 {
        let out = Job::raw(["run", "-n", "2", "--bind", POLITE]).output();
        out.assert_success()
            .assert_stdout_has(&["rank 0 polite false", "rank 1 polite false"]);
    }
    // More ranks than CPUs: every rank yields early, pinned or not.
    let n = (cpus + 1).to_string();
    for bind in [false, true] {
        let mut args = vec!["run", "-n", &n];
        if bind {
            args.push("--bind");
        }
        args.push(POLITE);
        let out = Job::raw(args).output();
        out.assert_success()
            .assert_stdout_has(&["rank 0 polite true"]);
    }
}

#[test]
fn a_rank_in_a_polite_wait_is_seen_away_by_its_peers() {
    const PRESENCE: &str = env!("CARGO_BIN_EXE_presence");
    Job::raw(["run", "-n", "2", PRESENCE])
        .output()
        .assert_success()
        .assert_stdout_has(&["presence: rank 1 seen away"]);
}

#[test]
fn a_polite_rank_pinned_alone_on_its_core_spins_instead_of_yielding() {
    const PRESENCE: &str = env!("CARGO_BIN_EXE_presence");
    if std::thread::available_parallelism().map_or(1, |n| n.get()) < 2 {
        eprintln!("skipped: one CPU, so two bound ranks share it");
        return;
    }
    // Rank 1 waits 200 ms; bound, each of the two ranks has a CPU of its own.
    let yields = |bind: bool| -> u64 {
        let mut args = vec!["run", "-n", "2"];
        if bind {
            args.push("--bind");
        }
        args.extend([PRESENCE, "yields"]);
        let out = Job::raw(args).output();
        out.assert_success();
        let line = out
            .stdout
            .lines()
            .find_map(|l| {
                l.split("presence: rank 1 yielded ")
                    .nth(1)
                    .map(str::to_owned)
            })
            .expect("rank 1's yields");
        line.trim_end_matches(" times")
            .trim()
            .parse()
            .expect("a count")
    };
    let (alone, floating) = (yields(true), yields(false));
    // Alone: a yield per 16k empty polls (tens of µs or more each); floating: one every few
    // polls.
    assert!(
        alone < 5_000 && alone * 10 < floating,
        "rank 1 yielded {alone} times pinned alone, {floating} times unpinned"
    );
}

/// A bare `volley run` with `TMPDIR` set to `tmp` (none of the suite's checks: this test makes
/// its own), output thrown away.
fn launcher_in(tmp: &std::path::Path, args: &[&str]) -> std::process::Command {
    let mut cmd = std::process::Command::new(common::launcher());
    cmd.arg("run")
        .args(args)
        .env("TMPDIR", tmp)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null());
    common::without_outer_job(&mut cmd);
    cmd
}

#[test]
fn a_rendezvous_left_by_a_killed_launcher_is_removed_by_the_next_one() {
    let _serial = common::serial();
    let tmp = common::Scratch::new("killed-launcher");
    let rendezvous_dirs = || {
        tmp.entries()
            .into_iter()
            .filter(|e| e.starts_with("volley-") && !e.contains('/'))
            .collect::<Vec<_>>()
    };
    // `sleep` never joins the rendezvous, so its directory stays while the launcher lives.
    let mut first = launcher_in(tmp.path(), &["-n", "2", "sleep", "60"])
        .spawn()
        .expect("starting the launcher");
    let until = Instant::now() + Duration::from_secs(20);
    while rendezvous_dirs().is_empty() {
        assert!(Instant::now() < until, "no rendezvous directory appeared");
        std::thread::sleep(Duration::from_millis(10));
    }
    let dir = rendezvous_dirs();
    // Another launcher with the same TMPDIR leaves a live launcher's directory alone.
    let second = launcher_in(tmp.path(), &["-n", "1", "true"])
        .status()
        .unwrap();
    assert!(second.success(), "a second job failed: {second:?}");
    assert_eq!(
        rendezvous_dirs(),
        dir,
        "a live launcher's directory was touched"
    );
    // Killed outright, the first launcher leaves its directory (its ranks die with it).
    // SAFETY: plain system call.
    assert_eq!(unsafe { libc::kill(first.id() as i32, libc::SIGKILL) }, 0);
    first.wait().unwrap();
    let needle = common::tmpdir_var(tmp.path());
    let until = Instant::now() + Duration::from_secs(10);
    while !common::processes_with_env(&needle).is_empty() {
        assert!(
            Instant::now() < until,
            "the killed launcher's ranks survived"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(rendezvous_dirs(), dir, "nothing was left to clean up");
    // The next launcher removes it, and leaves nothing itself.
    let third = launcher_in(tmp.path(), &["-n", "1", "true"])
        .status()
        .unwrap();
    assert!(third.success(), "the next job failed: {third:?}");
    assert_eq!(
        tmp.entries(),
        Vec::<String>::new(),
        "the abandoned directory is still there"
    );
}

#[test]
fn a_script_whose_interpreter_is_missing_is_refused_naming_it() {
    use std::os::unix::fs::PermissionsExt;
    let dir = common::Scratch::new("bad-interpreter");
    // A missing interpreter, and a DOS line ending (the kernel looks for "/bin/sh\r").
    for (name, text, shown) in [
        (
            "missing",
            "#!/nonexistent/volley-interp -x\necho hi\n",
            r#""/nonexistent/volley-interp", does not exist"#,
        ),
        (
            "dos",
            "#!/bin/sh\r\necho hi\r\n",
            r#""/bin/sh\r", does not exist"#,
        ),
    ] {
        let script = dir.path().join(name);
        std::fs::write(&script, text).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        bad_command_line(&["run", "-n", "2", script.to_str().unwrap()], shown);
    }
}

#[test]
fn a_second_ctrl_c_ends_the_grace_period() {
    // Ranks that ignore SIGTERM, and a grace period of a minute: the first Ctrl-C starts it,
    // the second kills them at once.
    let mut job = Job::raw([
        "run",
        "-n",
        "2",
        "--grace",
        "60",
        "--",
        "sh",
        "-c",
        "trap '' TERM; echo ready; exec sleep 60",
    ])
    .timeout(Duration::from_secs(40))
    .spawn();
    job.wait_for_lines(2, Duration::from_secs(20), |l| l == "ready");
    job.signal(libc::SIGINT);
    std::thread::sleep(Duration::from_secs(1));
    // Still in its grace period (the ranks ignore SIGTERM).
    let waited = !process_gone(job.pid());
    let second = Instant::now();
    job.signal(libc::SIGINT);
    let out = job.finish();
    assert!(!out.status.success(), "interrupted job exited 0:\n{out}");
    assert!(
        waited,
        "the launcher did not wait after the first Ctrl-C:\n{out}"
    );
    assert!(
        second.elapsed() < Duration::from_secs(10),
        "the launcher took {:?} after the second Ctrl-C:\n{out}",
        second.elapsed()
    );
}

#[test]
fn negative_counts_say_what_is_wrong() {
    bad_command_line(&["run", "-n", "-3", HELLO], "at least 1");
    bad_command_line(&["run", "--grace", "-1", "-n", "2", HELLO], "--grace");
}

#[test]
fn a_bad_setting_is_one_line_before_any_rank_starts() {
    for (name, value, accepted) in [
        ("VOLLEY_NET", "ib", "udp or tcp"),
        ("VOLLEY_FAULTS", "garbage", "drop=P"),
        ("VOLLEY_STATS", "banana", "0 or 1"),
        ("VOLLEY_STRATEGY", "fast", "proc, np or hw"),
    ] {
        let setting = format!("{name}={value}");
        bad_command_line_with(&["run", "-n", "4", HELLO], &[(name, value)], &setting);
        bad_command_line_with(&["run", "-n", "4", HELLO], &[(name, value)], accepted);
    }
}

/// How many lines of `text` contain `needle`.
fn lines_with(text: &str, needle: &str) -> usize {
    text.lines().filter(|l| l.contains(needle)).count()
}

#[test]
fn settings_warnings_are_printed_once_not_per_rank() {
    // A typo: the job runs, and the launcher names the setting meant, once.
    let out = Job::raw(["run", "-n", "4", HELLO])
        .env("VOLLEY_RIGN_SLOTS", "64")
        .output();
    out.assert_success();
    assert_eq!(
        lines_with(&out.stderr, "did you mean VOLLEY_RING_SLOTS?"),
        1,
        "{out}"
    );
    // A network setting on a one-node job has no effect: said once; on emulated nodes it
    // matters: nothing said.
    let out = Job::raw(["run", "-n", "3", HELLO])
        .env("VOLLEY_NET", "tcp")
        .output();
    out.assert_success();
    assert_eq!(
        lines_with(&out.stderr, "VOLLEY_NET has no effect"),
        1,
        "{out}"
    );
    let out = Job::raw(["run", "-n", "3", "--ranks-per-node", "1", HELLO])
        .env("VOLLEY_NET", "tcp")
        .output();
    out.assert_success();
    assert_eq!(lines_with(&out.stderr, "VOLLEY_NET"), 0, "{out}");
}
