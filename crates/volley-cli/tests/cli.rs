//! The `volley` command's own subcommands: `info`, quick `bench` runs and `report`. (The launcher is
//! tested with real rank programs in the `volley-tests` package.)

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");

/// Runs `volley ARGS`, killing it after `limit`.
fn run(args: &[&str], limit: Duration) -> (Option<i32>, String, String) {
    let child = Command::new(VOLLEY)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("volley starts");
    let pid = child.id() as i32;
    let start = Instant::now();
    let watchdog = std::thread::spawn(move || {
        while start.elapsed() < limit {
            std::thread::sleep(Duration::from_millis(50));
            // SAFETY: signal 0 only checks that the process exists.
            if unsafe { libc::kill(pid, 0) } != 0 {
                return;
            }
        }
        // SAFETY: terminating our own child, which overran its deadline.
        unsafe { libc::kill(pid, libc::SIGINT) };
    });
    let out = child.wait_with_output().expect("volley runs");
    let _ = watchdog.join();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Runs `volley experiments NAME --quick --reps 1 EXTRA --json -` and returns its exit code,
/// its JSON (the test fails, showing both streams, when stdout holds none) and its stderr.
fn experiment(
    name: &str,
    extra: &[&str],
    limit: Duration,
) -> (Option<i32>, serde_json::Value, String) {
    let mut args = vec!["experiments", name, "--quick", "--reps", "1"];
    args.extend_from_slice(extra);
    args.extend(["--json", "-"]);
    let (code, out, err) = run(&args, limit);
    let doc = serde_json::from_str(&out)
        .unwrap_or_else(|e| panic!("{e}: stdout:\n{out}\nstderr:\n{err}"));
    (code, doc, err)
}

/// Runs `name` with one datum damaged (`--corrupt`), which must exit 1 with `"verified":
/// false`; returns its stderr.
fn corrupted_experiment(name: &str, limit: Duration) -> String {
    let (code, doc, err) = experiment(name, &["--corrupt"], limit);
    assert_eq!(
        code,
        Some(1),
        "a corrupted run of {name}: {doc}\nstderr:\n{err}"
    );
    assert_eq!(doc["verified"], false, "{doc}");
    err
}

#[test]
fn info_reports_limits_and_footprint() {
    let (code, out, _) = run(&["info"], Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert!(out.contains("max medium payload     65536 bytes"), "{out}");
    assert!(out.contains(" 64 local ranks: rings"), "{out}");
}

#[test]
fn bench_am_reports_every_figure_as_json_and_its_sweeps_as_osu_csv_and_a_plot() {
    let dir = std::env::temp_dir().join(format!("volley-am-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, png) = (dir.join("am.csv"), dir.join("am.png"));
    let (code, out, err) = run(
        &[
            "bench",
            "am",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--json",
            "-",
            "--osu",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            png.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    // The medium and long echoes in the OSU layout (on stderr with --json -), a CSV row per
    // size and a PNG.
    let header = "# Size          Latency (us)";
    assert_eq!(err.matches(header).count(), 2, "{err}");
    assert!(
        err.contains("\n16777216  "),
        "a long row for 16 MiB:\n{err}"
    );
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    assert_eq!(csv.lines().count(), 1 + 14 + 22, "{csv}");
    assert!(
        csv.contains("\nmedium,65536,") && csv.contains("\nlong,16777216,"),
        "{csv}"
    );
    let png = std::fs::read(&png).expect("the plot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
    let _ = std::fs::remove_dir_all(&dir);
    for key in [
        "cacheline_rtt_ns",
        "am_short_rtt_ns",
        "am_flood_ns_per_msg",
        "am_flood_2way_ns_per_msg",
        "o_send_ns",
        "long_gbps_1MiB",
        "memcpy_gbps",
        "memcpy_pingpong_gbps",
        "memcpy_64KiB_ns",
        "long_stream_gbps_1MiB",
    ] {
        let v = doc[key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key} = {v} in {doc}");
    }
    // o_recv keeps only samples in which the whole burst was already waiting; on a loaded
    // machine every sample may be discarded, and then it (and L) is null, never zero.
    for key in ["o_recv_ns", "L_ns"] {
        let v = &doc[key];
        assert!(
            v.is_null()
                || v.as_f64()
                    .is_some_and(|x| x.is_finite() && (key == "L_ns" || x > 0.0)),
            "{key} = {v} in {doc}"
        );
    }
    let sizes = |key: &str| -> Vec<u64> {
        doc[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key} is not an array: {doc}"))
            .iter()
            .map(|e| {
                let ns = e["rtt_ns"].as_f64().unwrap_or(f64::NAN);
                assert!(ns.is_finite() && ns > 0.0, "{key}: {e}");
                e["size"].as_u64().unwrap()
            })
            .collect()
    };
    let powers = |top: u32| (3..=top).map(|p| 1u64 << p);
    let medium: Vec<u64> = std::iter::once(0).chain(powers(16)).collect();
    assert_eq!(sizes("am_medium_rtt_ns"), medium);
    assert_eq!(sizes("am_long_rtt_ns"), powers(24).collect::<Vec<_>>());
    // The floor was measured by the ranks themselves, beside their round trips, and the
    // ratio is the blocks' own.
    let runs = doc["runs"].as_array().expect("runs array");
    assert!(
        !runs.is_empty()
            && runs
                .iter()
                .all(|r| r["cacheline_rtt_ns"].as_f64().is_some_and(|x| x > 0.0)),
        "{doc}"
    );
    // The bare ring reference ran in the same blocks (and its reply count was checked there).
    let bare = doc["bare_am_rtt_ns"].as_f64().unwrap_or(f64::NAN);
    assert!(
        bare.is_finite() && bare > 0.0,
        "bare_am_rtt_ns = {bare} in {doc}"
    );
    // The bulk floors and their ratios: the long round trip beside the memcpy of the same run.
    for key in [
        "long_gbps_1MiB_over_memcpy",
        "long_gbps_1MiB_over_memcpy_pingpong",
        "medium_64KiB_rtt_over_two_memcpys",
    ] {
        let ratio = doc["ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(ratio.is_finite() && ratio > 0.0, "{key}: {doc}");
    }
    assert!(err.contains("memcpy_gbps (floor)"), "{err}");
    assert!(err.contains("memcpy_64KiB_ns (floor)"), "{err}");
    // The raw socket stream is the network runs' alone.
    assert!(doc["raw_stream_gbps"].is_null(), "{doc}");
    for key in [
        "am_short_rtt_over_floor",
        "am_flood_over_floor",
        "bare_am_rtt_over_floor",
        "am_short_rtt_over_bare",
    ] {
        let ratio = doc["ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(ratio.is_finite() && ratio > 0.0, "{key}: {doc}");
        assert!(
            runs.iter()
                .all(|r| r[key].as_f64().is_some_and(|x| x > 0.0)),
            "{key} is not each repetition's own: {doc}"
        );
    }
    // The table went to stderr, with every figure beside the floor.
    assert!(err.contains("x floor"), "{err}");
    assert!(err.contains("bare ring reference:"), "{err}");
}

#[test]
fn bench_rma_reports_both_paths_as_json_osu_csv_and_a_plot() {
    let dir = std::env::temp_dir().join(format!("volley-rma-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg) = (dir.join("rma.csv"), dir.join("rma.svg"));
    let (code, out, err) = run(
        &[
            "bench",
            "rma",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--json",
            "-",
            "--osu",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    // With --json -, the table and the OSU blocks go to stderr: four operations, each a
    // latency block and a bandwidth block from 8 B to 16 MiB.
    for header in [
        "# Size          Latency (us)",
        "# Size      Bandwidth (MB/s)",
    ] {
        assert_eq!(err.matches(header).count(), 4, "{header:?}:\n{err}");
    }
    assert!(err.contains("\n16777216  "), "a row for 16 MiB:\n{err}");
    let names: Vec<&str> = doc["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["put direct", "get direct", "put am", "get am"]);
    assert_eq!(
        doc["configs"][0]["memcpy"].as_array().map(Vec::len),
        Some(22)
    );
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    assert!(csv.starts_with("config,size,latency_us,bandwidth_mb_per_s,memcpy_mb_per_s\n"));
    assert_eq!(csv.lines().count(), 1 + 4 * 22, "{csv}");
    assert!(csv.contains("\nget am,16777216,"), "{csv}");
    let svg = std::fs::read_to_string(&svg).expect("the plot");
    for series in ["volley put direct", "volley get am", "memcpy (floor)"] {
        assert!(svg.contains(series), "{series} in the plot");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let positive = |v: &serde_json::Value, what: &str| {
        let x = v.as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{what} = {v} in {doc}");
    };
    positive(&doc["memcpy_gbps"], "memcpy_gbps");
    // The AM path's 1 MiB figures at the top level too, beside the floor.
    for key in ["am_put_gbps_1MiB", "am_get_gbps_1MiB"] {
        positive(&doc[key], key);
    }
    assert_eq!(doc["am_put_gbps_1MiB"], doc["am"]["put_gbps_1MiB"], "{doc}");
    assert_eq!(doc["am_get_gbps_1MiB"], doc["am"]["get_gbps_1MiB"], "{doc}");
    for path in [&doc, &doc["am"]] {
        for key in ["put_gbps_1MiB", "get_gbps_1MiB", "fadd_ns"] {
            positive(&path[key], key);
        }
        for (key, field, n) in [
            ("put_latency_ns", "ns", 22),
            ("get_latency_ns", "ns", 22),
            ("put_gbps", "gbps", 22),
            ("get_gbps", "gbps", 22),
        ] {
            let list = path[key]
                .as_array()
                .unwrap_or_else(|| panic!("{key}: {doc}"));
            assert_eq!(list.len(), n, "{key}");
            for e in list {
                positive(&e[field], key);
            }
        }
    }
}

#[test]
fn bench_rejects_bad_arguments() {
    for args in [
        &["bench", "am", "--scale", "0"][..],
        &["bench", "am", "--reps", "0"],
        &["bench", "nope"],
        &["bench", "am", "--json"],
    ] {
        let (code, _, err) = run(args, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert_eq!(
            err.trim().lines().count(),
            1,
            "{args:?}: one line expected: {err}"
        );
    }
}

#[test]
fn bench_refuses_a_results_path_it_cannot_write_before_measuring() {
    for path in ["/nonexistent/dir/x.json", "", "/tmp"] {
        let t = Instant::now();
        let (code, _, err) = run(
            &["bench", "am", "--reps", "3", "--json", path],
            Duration::from_secs(60),
        );
        assert_eq!(code, Some(2), "--json {path:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "--json {path:?}: {err}");
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "--json {path:?} was refused only after {:?}",
            t.elapsed()
        );
    }
}

#[test]
fn bench_refuses_to_measure_on_one_cpu() {
    // The floor and the ranks need two CPUs: on one, every figure would be meaningless.
    let one = Command::new("taskset")
        .args([
            "-c", "0", VOLLEY, "bench", "am", "--reps", "1", "--scale", "0.01",
        ])
        .output();
    let Ok(out) = one else {
        eprintln!("skipped: no taskset here");
        return;
    };
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("needs two CPUs"), "{err}");
}

#[test]
fn output_that_cannot_be_written_is_an_error_not_a_panic() {
    let full = std::fs::OpenOptions::new().write(true).open("/dev/full");
    let Ok(full) = full else {
        eprintln!("skipped: no /dev/full here");
        return;
    };
    let out = Command::new(VOLLEY)
        .arg("info")
        .stdout(full)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(!err.contains("panicked"), "{err}");
    assert!(err.contains("No space left"), "{err}");
}

#[test]
fn a_killed_bench_leaves_no_floor_process_behind() {
    // The network floor runs in a forked child; a bench killed while it measures must take
    // that child with it, not leave it spinning on a CPU.
    let mut bench = Command::new(VOLLEY)
        .args([
            "bench",
            "am",
            "--transport",
            "tcp",
            "--scale",
            "100",
            "--reps",
            "3",
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pid = bench.id();
    // Wait for the fork: a child of the bench process.
    let children = || -> Vec<u32> {
        std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children"))
            .unwrap_or_default()
            .split_whitespace()
            .filter_map(|c| c.parse().ok())
            .collect()
    };
    let start = Instant::now();
    let child = loop {
        if let Some(&c) = children().first() {
            break c;
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the bench never forked its floor process"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    // SAFETY: signalling our own child.
    unsafe { libc::kill(pid as i32, libc::SIGTERM) };
    let _ = bench.wait();
    let gone = Instant::now();
    // A zombie (reaped by init soon) counts as gone: it runs nothing.
    let running = || {
        std::fs::read_to_string(format!("/proc/{child}/stat"))
            .map(|s| !s.contains(") Z "))
            .unwrap_or(false)
    };
    while running() {
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the floor process {child} outlived its bench"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn bench_am_over_each_network_reports_its_floor() {
    for (transport, floor) in [("udp", "udp_raw_rtt_ns"), ("tcp", "tcp_raw_rtt_ns")] {
        let (code, out, err) = run(
            &[
                "bench",
                "am",
                "--transport",
                transport,
                "--reps",
                "1",
                "--scale",
                "0.05",
                "--json",
                "-",
            ],
            Duration::from_secs(240),
        );
        assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
        let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
        assert_eq!(doc["transport"], transport, "{doc}");
        for key in [
            floor,
            "am_short_rtt_ns",
            "am_flood_ns_per_msg",
            "long_gbps_1MiB",
            "memcpy_gbps",
            "raw_stream_gbps",
            "long_stream_gbps_1MiB",
            "short_rtt_idle_ns",
            "bulk_send_return_ns",
        ] {
            let v = doc[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key} = {v} in {doc}");
        }
        let share = doc["short_rtt_overlap_share"].as_f64().unwrap_or(f64::NAN);
        assert!(
            (0.0..=1.0).contains(&share),
            "overlap share {share} in {doc}"
        );
        assert!(err.contains("bulk_send_return_ns"), "{err}");
        // Counted only for pings answered before the 16 MiB transfer: null if none was.
        for key in [
            "short_rtt_during_bulk_ns",
            "short_rtt_during_bulk_over_idle",
        ] {
            let v = &doc[key];
            assert!(
                v.is_null() || v.as_f64().is_some_and(|x| x.is_finite() && x > 0.0),
                "{key} = {v} in {doc}"
            );
        }
        assert!(doc["am_medium_rtt_ns"]
            .as_array()
            .is_some_and(|a| a.len() == 15));
        assert!(doc["am_long_rtt_ns"]
            .as_array()
            .is_some_and(|a| a.len() == 22));
        let ratio = doc["ratios"]["long_stream_gbps_1MiB_over_raw_stream"]
            .as_f64()
            .unwrap_or(f64::NAN);
        assert!(ratio.is_finite() && ratio > 0.0, "{doc}");
        assert!(err.contains("raw_stream_gbps (floor)"), "{err}");
        // TCP names the congestion control its connections and its floor ran under.
        let cc = &doc["tcp_congestion"];
        if transport == "tcp" {
            assert!(cc.as_str().is_some_and(|c| !c.is_empty()), "{doc}");
        } else {
            assert!(cc.is_null(), "{doc}");
        }
        // The bare ring reference is shared memory's alone.
        assert!(doc["bare_am_rtt_ns"].is_null(), "{doc}");
        assert!(doc["ratios"]["bare_am_rtt_over_floor"].is_null(), "{doc}");
    }
    let (code, _, err) = run(
        &["bench", "rma", "--transport", "udp"],
        Duration::from_secs(20),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("only --transport shm"), "{err}");
}

#[test]
fn bench_progress_reports_modes_and_the_granularity_sweep() {
    let (code, out, err) = run(
        &[
            "bench", "progress", "--reps", "1", "--scale", "0.05", "--json", "-",
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    for key in [
        "rtt_inline_ns",
        "rtt_block_ns",
        "rtt_thread_ns",
        "wakeup_ns",
    ] {
        let v = doc[key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key} = {v} in {doc}");
    }
    // The wake-up across nodes, beside the same ranks' round trip.
    for key in ["rtt_block_ns", "wakeup_ns"] {
        let v = doc["udp_mixed_node"][key].as_f64().unwrap_or(f64::NAN);
        assert!(
            v.is_finite() && v > 0.0,
            "udp_mixed_node.{key} = {v} in {doc}"
        );
    }
    for key in ["rtt_thread_over_inline", "thread_granularity_max_over_min"] {
        let v = doc["ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key} = {v} in {doc}");
    }
    let g = doc["granularity"].as_array().expect("granularity array");
    assert_eq!(g.len(), 12, "{doc}");
    for (mode, sweep) in [("inline", &g[..6]), ("thread", &g[6..])] {
        assert!(
            sweep
                .iter()
                .all(|e| e["mode"] == mode
                    && e["ns_per_iteration"].as_f64().is_some_and(|x| x > 0.0)),
            "{doc}"
        );
        // The last entry of each sweep is "never polls".
        assert!(sweep[5]["compute_ns"].is_null(), "{doc}");
        assert!(
            sweep[..5]
                .iter()
                .all(|e| e["compute_ns"].as_u64().is_some()),
            "{doc}"
        );
    }
}

#[test]
fn soak_checks_traffic_end_to_end_and_fails_on_a_damaged_payload() {
    let (code, stdout, stderr) = run(
        &[
            "soak",
            "--minutes",
            "0.05",
            "--transport",
            "shm",
            "--json",
            "-",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(0), "{stderr}");
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(doc["verified"], true, "{doc}");
    let configs = doc["configurations"].as_array().expect("configurations");
    assert_eq!(configs.len(), 2, "inline and thread progress: {doc}");
    for c in configs {
        let job = &c["job"];
        assert_eq!(job["verified"], true, "{c}");
        assert!(job["sent"].as_u64().unwrap() > 0, "{c}");
        assert_eq!(job["sent"], job["received"], "{c}");
        assert_eq!(job["counter"], job["expected_counter"], "{c}");
    }
    assert!(
        stderr.contains("shm   inline"),
        "the summary table: {stderr}"
    );
    // One payload damaged on its way: the checks must catch it.
    let (code, stdout, _) = run(
        &[
            "soak",
            "--minutes",
            "0.02",
            "--transport",
            "shm",
            "--corrupt-one",
            "--json",
            "-",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(doc["verified"], false, "{doc}");
    // One wrong contribution to an all-reduce: every rank's check must catch it.
    let (code, stdout, _) = run(
        &[
            "soak",
            "--minutes",
            "0.02",
            "--transport",
            "shm",
            "--corrupt-collective",
            "--json",
            "-",
        ],
        Duration::from_secs(60),
    );
    assert_eq!(code, Some(1));
    let doc: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(doc["verified"], false, "{doc}");
    let text = doc.to_string();
    assert!(text.contains("\"collectives\""), "{doc}");
}

#[test]
fn soak_rejects_bad_arguments() {
    for (args, mention) in [
        (&["soak", "--minutes", "0"][..], "--minutes"),
        (&["soak", "--minutes", "1", "--ranks", "1"][..], "--ranks"),
        (
            &["soak", "--minutes", "1", "--faults", "garbage"][..],
            "--faults",
        ),
    ] {
        let (code, _, stderr) = run(args, Duration::from_secs(10));
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert_eq!(stderr.lines().count(), 1, "{args:?}: {stderr}");
        assert!(stderr.contains(mention), "{args:?}: {stderr}");
    }
}

#[test]
fn bench_launchers_measures_every_launcher_that_works_here() {
    let (code, out, err) = run(
        &[
            "bench",
            "launchers",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--ranks",
            "3",
            "--json",
            "-",
        ],
        Duration::from_secs(120),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    assert_eq!(doc["ranks"], 3, "{doc}");
    let launchers = doc["launchers"].as_array().expect("launchers");
    let names: Vec<&str> = launchers
        .iter()
        .map(|l| l["launcher"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(names[0], "volley run", "{doc}");
    // CI provides the cluster launchers too (openmpi-bin, scripts/slurm-local).
    if std::env::var_os("CI").is_some() {
        assert_eq!(names, ["volley run", "mpirun", "srun"], "{doc}");
    }
    for l in launchers {
        for key in ["startup_ms", "startup_true_ms", "short_rtt_ns"] {
            let v = l[key].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{key} of {l}");
        }
    }
    assert!(
        err.contains("rtt / volley"),
        "the table goes to stderr:\n{err}"
    );
}

#[test]
fn bench_loggp_gives_the_table_the_osu_sweeps_and_a_report() {
    let dir = std::env::temp_dir().join(format!("volley-loggp-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let json = dir.join("loggp.json");
    let svg = dir.join("loggp.svg");
    let html = dir.join("report.html");
    let (code, out, err) = run(
        &[
            "bench",
            "loggp",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--osu",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    // The OSU layout: osu_latency's and osu_bw's header lines, then `%-10d%18.2f` rows.
    for header in [
        "# Size          Latency (us)",
        "# Size      Bandwidth (MB/s)",
    ] {
        assert_eq!(
            out.matches(header).count(),
            3,
            "{header:?} per transport:\n{out}"
        );
    }
    assert!(out.contains("\n8    "), "a row for 8 bytes:\n{out}");
    assert!(out.contains("\n16777216  "), "a row for 16 MiB:\n{out}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    let configs = doc["configs"].as_array().expect("configs");
    let names: Vec<&str> = configs
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["shm", "udp", "tcp"]);
    for c in configs {
        let f = |k: &str| c[k].as_f64().unwrap_or(f64::NAN);
        let name = &c["name"];
        for key in ["L_ns", "o_s_ns"] {
            // Differences of two timings: finite, and may dip below zero (L by design).
            assert!(f(key).is_finite(), "{name}: {key} = {} in {c}", f(key));
        }
        for key in ["g_ns", "G_ns_per_byte", "half_power_bytes", "rtt_ns"] {
            assert!(f(key).is_finite() && f(key) > 0.0, "{name}: {key} in {c}");
        }
        // o_r keeps only polls that found the message waiting: null when none did.
        assert!(
            c["o_r_ns"].is_null() || f("o_r_ns") > 0.0,
            "{name}: o_r in {c}"
        );
        assert!(
            f("o_s_ns") < f("rtt_ns"),
            "{name}: o_s below the round trip"
        );
        assert!(
            f("g_ns") < f("rtt_ns"),
            "{name}: the gap below the round trip"
        );
        // G small: above 10 MB/s even on a loaded loopback, and consistent with the peak.
        assert!(f("G_ns_per_byte") < 100.0, "{name}: G in {c}");
        let peak = f("peak_mb_per_s");
        assert!((f("G_ns_per_byte") * peak - 1e3).abs() < 1e-6 * peak);
        let half = f("half_power_bytes");
        assert!((8.0..=16.0 * 1048576.0).contains(&half), "{name}: {half}");
        for (curve, key) in [("latency", "latency_us"), ("bandwidth", "mb_per_s")] {
            let pts = c[curve].as_array().expect(curve);
            let sizes: Vec<u64> = pts.iter().map(|p| p["size"].as_u64().unwrap()).collect();
            let expect: Vec<u64> = (3..=24).map(|p| 1 << p).collect();
            assert_eq!(sizes, expect, "{name}: {curve} sizes");
            assert!(pts.iter().all(|p| p[key].as_f64().is_some_and(|v| v > 0.0)));
        }
    }
    let plot = std::fs::read_to_string(&svg).expect("--plot wrote the SVG");
    assert!(plot.starts_with("<svg") && plot.contains("volley udp") && plot.contains("memcpy"));
    // The report from that JSON: one page, both figures inline, every series in them.
    let (code, out, err) = run(
        &[
            "report",
            json.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let page = std::fs::read_to_string(&html).expect("the report");
    assert_eq!(
        page.matches("<svg").count(),
        2,
        "latency and bandwidth figures"
    );
    for series in ["volley shm", "volley udp", "volley tcp", "memcpy (floor)"] {
        // In each figure's legend (the bandwidth one) and the sweep table.
        assert!(page.matches(series).count() >= 2, "{series} in the report");
    }
    assert!(page.contains("Gap per byte G") && page.contains("Measured: 20"));
    assert!(!page.contains("src=\"http"), "self-contained");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn report_refuses_what_it_cannot_read() {
    let (code, _, err) = run(
        &["report", "/nonexistent/x.json", "-o", "/tmp/never.html"],
        Duration::from_secs(10),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(
        err.contains("volley report: reading /nonexistent/x.json"),
        "{err}"
    );
}

#[test]
fn experiment_seed000_xfer_verifies_and_reports_every_figure() {
    let (code, list, _) = run(&["experiments", "--list"], Duration::from_secs(10));
    assert_eq!(code, Some(0));
    assert!(list.contains("seed000-xfer"), "{list}");
    let (code, doc, err) = experiment("seed000-xfer", &[], Duration::from_secs(240));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    assert_eq!(doc["experiment"], "seed000-xfer");
    for key in [
        "one_segment_mbs",
        "two_segments_mbs",
        "block_gbps",
        "hot_source_ns_per_packet",
        "cold_source_ns_per_packet",
        "reply_4i_mbs",
    ] {
        let v = doc["figures"][key].as_f64().unwrap_or(f64::NAN);
        assert!(v.is_finite() && v > 0.0, "{key}: {v}");
    }
    let ratio = doc["one_over_two"].as_f64().unwrap_or(f64::NAN);
    assert!(ratio.is_finite() && ratio > 0.0, "{ratio}");
    assert!((doc["seed_one_over_two"].as_f64().unwrap() - 10.0 / 7.4).abs() < 1e-9);
    // The table goes to stderr beside the seed's figures.
    assert!(err.contains("1 segment / 2 segments"), "{err}");
}

#[test]
fn bench_msg_reports_the_tagged_layer_beside_am_and_open_mpi() {
    let dir = std::env::temp_dir().join(format!("volley-msg-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg) = (dir.join("msg.csv"), dir.join("msg.svg"));
    let (code, out, err) = run(
        &[
            "bench",
            "msg",
            "--reps",
            "1",
            "--scale",
            "0.02",
            "--json",
            "-",
            "--osu",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(240),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    // The sweeps: one curve, latency and bandwidth from 8 B to 16 MiB, beside memcpy; in the
    // OSU layout on stderr, as CSV and as a plot.
    let curve = &doc["configs"][0];
    assert_eq!(curve["name"], "tagged send/recv", "{doc}");
    for key in ["latency", "bandwidth", "memcpy"] {
        let points = curve[key]
            .as_array()
            .unwrap_or_else(|| panic!("{key}: {doc}"));
        let sizes: Vec<u64> = points.iter().map(|p| p["size"].as_u64().unwrap()).collect();
        assert_eq!(
            sizes,
            (3..=24).map(|p| 1u64 << p).collect::<Vec<_>>(),
            "{key}"
        );
        for p in points {
            let x = p["latency_us"].as_f64().or(p["mb_per_s"].as_f64());
            assert!(x.is_some_and(|x| x.is_finite() && x > 0.0), "{key}: {p}");
        }
    }
    for header in [
        "# Size          Latency (us)",
        "# Size      Bandwidth (MB/s)",
    ] {
        assert_eq!(err.matches(header).count(), 1, "{header:?}:\n{err}");
    }
    assert!(err.contains("\n16777216  "), "a row for 16 MiB:\n{err}");
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    assert_eq!(csv.lines().count(), 1 + 22, "{csv}");
    assert!(csv.contains("\ntagged send/recv,16777216,"), "{csv}");
    let svg = std::fs::read_to_string(&svg).expect("the plot");
    for series in ["volley tagged send/recv", "memcpy (floor)"] {
        assert!(svg.contains(series), "{series} in the plot");
    }
    let _ = std::fs::remove_dir_all(&dir);
    let mut keys = vec![
        "tagged_rtt_ns",
        "am_short_rtt_ns",
        "tagged_overhead_ns",
        "am_overhead_ns",
        "tagged_send_overhead_ns",
        "am_send_overhead_ns",
        "tagged_recv_overhead_ns",
        "am_recv_overhead_ns",
        "floor_ns",
    ];
    // Present exactly when Open MPI is installed (it is measured in the same run).
    let mpi = std::process::Command::new("mpicc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if mpi {
        keys.push("mpi_sendrecv_rtt_ns");
    } else {
        assert!(doc.get("mpi_sendrecv_rtt_ns").is_none(), "{doc}");
    }
    for key in keys {
        let x = doc[key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{key} = {} in {doc}", doc[key]);
    }
    assert!(doc["checked"].as_u64().unwrap_or(0) > 0, "{doc}");
    assert_eq!(doc["failures"], serde_json::json!([]), "{doc}");
    assert!(err.is_empty() || !err.contains("FAILED"), "{err}");
}

#[test]
fn bench_splitc_reports_table_1_per_strategy_and_its_bulk_curves() {
    let dir = std::env::temp_dir().join(format!("volley-splitc-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg) = (dir.join("splitc.csv"), dir.join("splitc.svg"));
    let (code, out, err) = run(
        &[
            "bench",
            "splitc",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--json",
            "-",
            "--osu",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    let positive = |v: &serde_json::Value, what: &str| {
        let x = v.as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{what} = {v} in {doc}");
    };
    positive(&doc["memcpy_gbps"], "memcpy_gbps");
    for s in ["proc", "np", "hw"] {
        let f = &doc["strategies"][s];
        for key in [
            "am_rtt_ns",
            "read_rtt_ns",
            "get_overhead_ns",
            "store_overhead_ns",
            "bulk_get_peak_gbps",
            "bulk_store_peak_gbps",
        ] {
            positive(&f[key], &format!("{s} {key}"));
        }
    }
    // The bulk curves: get and store per strategy, 8 B to 16 MiB, as JSON curves, OSU blocks,
    // CSV rows and plot series.
    let names: Vec<&str> = doc["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let want = [
        "bulk_get hw",
        "bulk_store hw",
        "bulk_get np",
        "bulk_store np",
        "bulk_get proc",
        "bulk_store proc",
    ];
    assert_eq!(names, want, "{doc}");
    for c in doc["configs"].as_array().unwrap() {
        for key in ["latency", "bandwidth"] {
            let points = c[key].as_array().expect(key);
            let sizes: Vec<u64> = points.iter().map(|p| p["size"].as_u64().unwrap()).collect();
            assert_eq!(sizes.first(), Some(&8), "{c}");
            assert_eq!(sizes.last(), Some(&(16 << 20)), "{c}");
        }
    }
    assert_eq!(
        err.matches("# Size          Latency (us)").count(),
        6,
        "{err}"
    );
    assert_eq!(
        err.matches("# Size      Bandwidth (MB/s)").count(),
        6,
        "{err}"
    );
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    assert!(csv.contains("\nbulk_store proc,16777216,"), "{csv}");
    let svg = std::fs::read_to_string(&svg).expect("the plot");
    for series in [
        "volley bulk_get hw",
        "volley bulk_store proc",
        "memcpy (floor)",
    ] {
        assert!(svg.contains(series), "{series} in the plot");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn bench_coll_reports_every_collective_beside_its_floor_and_open_mpi() {
    let dir = std::env::temp_dir().join(format!("volley-coll-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (csv, svg) = (dir.join("coll.csv"), dir.join("coll.svg"));
    let (code, out, err) = run(
        &[
            "bench",
            "coll",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--ranks",
            "2,4",
            "--json",
            "-",
            "--osu",
            "--csv",
            csv.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
        ],
        Duration::from_secs(300),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value = serde_json::from_str(&out).expect("JSON on stdout");
    let runs = doc["runs"].as_array().expect("runs");
    assert_eq!(
        runs.iter().map(|r| r["ranks"].as_u64()).collect::<Vec<_>>(),
        [Some(2), Some(4)],
        "{doc}"
    );
    // Open MPI's figures are there exactly when it is installed (measured in the same run).
    let mpi = std::process::Command::new("mpicc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    for r in runs {
        let mut keys = vec![
            "barrier_ns",
            "bcast_8B_ns",
            "allreduce_8B_ns",
            "allreduce_1MiB_ns",
            "alltoall_8B_ns",
            "alltoall_64KiB_ns",
            "handoff_ns",
            "cacheline_rtt_ns",
            "floor_ns",
        ];
        let mpi_keys = [
            "mpi_barrier_ns",
            "mpi_allreduce_8B_ns",
            "mpi_alltoall_8B_ns",
        ];
        if mpi {
            keys.extend(mpi_keys);
        } else {
            for k in mpi_keys {
                assert!(r.get(k).is_none(), "{k} without Open MPI: {doc}");
            }
        }
        for key in keys {
            let x = r[key].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{key} = {} in {doc}", r[key]);
        }
        // The floor is the one the table explains, from the hand-off and line of the run.
        let ranks = r["ranks"].as_u64().unwrap() as usize;
        let (h, l) = (
            r["handoff_ns"].as_f64().unwrap(),
            r["cacheline_rtt_ns"].as_f64().unwrap(),
        );
        let want = if ranks > cpus {
            (ranks.div_ceil(cpus) - 1) as f64 * h
        } else {
            l / 2.0
        };
        assert!(
            (r["floor_ns"].as_f64().unwrap() - want).abs() < 1e-6 * want,
            "{doc}"
        );
    }
    assert!(
        err.contains("v/floor") && err.contains("floor on 4 ranks"),
        "{err}"
    );
    // The sweeps: three collectives per rank count, 8 B to 1 MiB, as JSON curves, OSU blocks
    // on stderr, CSV rows and plot series.
    let names: Vec<&str> = doc["configs"]
        .as_array()
        .expect("configs")
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    let want = [
        "allreduce 2 ranks",
        "alltoall 2 ranks",
        "bcast 2 ranks",
        "allreduce 4 ranks",
        "alltoall 4 ranks",
        "bcast 4 ranks",
    ];
    assert_eq!(names, want, "{doc}");
    for c in doc["configs"].as_array().unwrap() {
        let points = c["latency"].as_array().expect("latency");
        let sizes: Vec<u64> = points.iter().map(|p| p["size"].as_u64().unwrap()).collect();
        assert_eq!(sizes, (3..=20).map(|p| 1u64 << p).collect::<Vec<_>>());
        for p in points {
            let x = p["latency_us"].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x > 0.0, "{c}");
        }
    }
    assert_eq!(
        err.matches("# Size          Latency (us)").count(),
        6,
        "{err}"
    );
    assert!(err.contains("\n1048576  "), "a row for 1 MiB:\n{err}");
    let csv = std::fs::read_to_string(&csv).expect("the CSV");
    assert_eq!(csv.lines().count(), 1 + 6 * 18, "{csv}");
    assert!(csv.contains("\nbcast 4 ranks,1048576,"), "{csv}");
    let svg = std::fs::read_to_string(&svg).expect("the plot");
    for series in want {
        assert!(
            svg.contains(&format!("volley {series}")),
            "{series} in the plot"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn experiment_am_vs_sendrecv_is_verified_and_reports_the_ratios() {
    let (code, doc, err) = experiment("seed000-am-vs-sendrecv", &[], Duration::from_secs(240));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    for key in [
        "overhead",
        "send_overhead",
        "recv_overhead",
        "rtt",
        "signal",
    ] {
        let x = doc["ratios"][key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "ratios.{key} in {doc}");
    }
    // A message's overhead is seed 000's: the sender's and the receiver's time added.
    for layer in ["am", "tagged"] {
        let f = |k: &str| doc[format!("{layer}_{k}")].as_f64().unwrap_or(f64::NAN);
        let (o, os, or) = (
            f("overhead_ns"),
            f("send_overhead_ns"),
            f("recv_overhead_ns"),
        );
        assert!(os > 0.0 && or > 0.0, "{layer}: o_s {os}, o_r {or} in {doc}");
        assert!(
            (o - (os + or)).abs() <= 1e-6 * o,
            "{layer}: {o} != {os} + {or}"
        );
    }
    assert!(err.contains("every one arrived intact"), "{err}");
}

#[test]
fn experiment_seed002_agents_measures_beside_its_floors_and_fails_when_corrupted() {
    let (code, doc, err) = experiment("seed002-agents", &[], Duration::from_secs(240));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    for place in ["shm-direct", "udp"] {
        for fig in [
            "put8_segment",
            "put8_window",
            "fetch_add_segment_handlers",
            "fetch_add_task",
            "migrate_64k",
        ] {
            let v = doc["ns"][place][fig].as_f64().unwrap_or(f64::NAN);
            assert!(v.is_finite() && v > 0.0, "{place} {fig}: {v}");
        }
    }
    let err = corrupted_experiment("seed002-agents", Duration::from_secs(240));
    assert!(err.contains("NOT VERIFIED"), "{err}");
}

#[test]
fn experiment_seed002_signal_measures_every_mode_and_verifies_them() {
    let (code, doc, err) = experiment("seed002-signal", &[], Duration::from_secs(300));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    assert_eq!(doc["experiment"], "seed002-signal", "{doc}");
    for transport in ["shm", "udp"] {
        for mode in [
            "write",
            "fifo",
            "signal_polling_quew",
            "signal_dsp_quew_first_only_nonblk",
            "signal_dsp_quew_every_time_nonblk",
            "signal_dsp_memw_every_time_blk",
            "signal_memw_ssp",
        ] {
            for size in ["4", "64", "1024"] {
                let v = doc["one_way_ns"][transport][mode][size]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                assert!(v.is_finite() && v > 0.0, "{transport} {mode} {size}: {v}");
            }
        }
    }
    assert!(
        doc["seed"]["signal_over_write_4b"][0].as_f64() == Some(2.0),
        "{doc}"
    );
    // The table goes to stderr with --json -, the seed's figures beside.
    assert!(err.contains("SIGNAL / WRITE at 4 B"), "{err}");
}

/// Whether `name` is an executable on PATH.
fn on_path(name: &str) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// In CI (`CI` set, as `CI=true`) what a test needs is installed by `.ci/run`: missing, the
/// test fails; elsewhere it says it is skipped.
fn skip_unless(present: bool, what: &str) -> bool {
    if present {
        return false;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{what} is missing, and .ci/run installs it in CI"
    );
    eprintln!("skipped: {what} is not installed here");
    true
}

#[test]
fn bench_loggp_with_peers_puts_their_sweeps_in_the_json_the_table_and_the_plot() {
    let (ucx, mpi) = (
        on_path("ucx_perftest"),
        on_path("mpirun") && on_path("mpicc"),
    );
    if skip_unless(
        ucx && mpi,
        "ucx_perftest (ucx-utils) or Open MPI (mpirun, mpicc)",
    ) {
        return;
    }
    let dir = std::env::temp_dir().join(format!("volley-peers-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, svg, csv) = (dir.join("p.json"), dir.join("p.svg"), dir.join("p.csv"));
    let (code, out, err) = run(
        &[
            "bench",
            "loggp",
            "--transport",
            "shm",
            "--reps",
            "1",
            "--scale",
            "0.01",
            "--peers",
            "--json",
            json.to_str().unwrap(),
            "--plot",
            svg.to_str().unwrap(),
            "--csv",
            csv.to_str().unwrap(),
        ],
        Duration::from_secs(400),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let doc: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).expect("JSON");
    let peers = doc["peers"].as_array().expect("peers in the JSON");
    let names: Vec<&str> = peers.iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(
        names,
        [
            "ucx ucp_am_lat",
            "ucx ucp_am_bw",
            "ucx ucp_put_bw",
            "open mpi"
        ],
        "stderr:\n{err}"
    );
    let expect: Vec<u64> = (3..=24).map(|p| 1 << p).collect();
    for p in peers {
        let mut curves = 0;
        for (curve, key) in [("latency", "latency_us"), ("bandwidth", "mb_per_s")] {
            let pts = p[curve].as_array().expect(curve);
            if pts.is_empty() {
                continue;
            }
            curves += 1;
            let sizes: Vec<u64> = pts.iter().map(|q| q["size"].as_u64().unwrap()).collect();
            assert_eq!(sizes, expect, "{}: {curve} sizes", p["name"]);
            assert!(
                pts.iter()
                    .all(|q| q[key].as_f64().is_some_and(|v| v.is_finite() && v > 0.0)),
                "{}: {curve} in {p}",
                p["name"]
            );
        }
        assert!(curves > 0, "{p}");
    }
    // Beside volley's sweeps in the table, the plot and the CSV.
    assert!(
        out.contains("sweeps beside the peers: latency (us)"),
        "{out}"
    );
    let head = out
        .lines()
        .find(|l| l.contains("ucx ucp_put_bw"))
        .unwrap_or_else(|| panic!("a column per peer:\n{out}"));
    assert!(
        head.contains("volley shm") && head.contains("open mpi"),
        "{head}"
    );
    let plot = std::fs::read_to_string(&svg).expect("--plot wrote the SVG");
    for name in names {
        assert!(plot.contains(name), "{name} in the plot");
    }
    let csv = std::fs::read_to_string(&csv).expect("--csv wrote the CSV");
    assert!(
        csv.lines().any(|l| l.starts_with("open mpi,16777216,")),
        "{csv}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_report_renders_in_a_headless_browser() {
    let browser = ["chromium", "chromium-browser", "google-chrome"]
        .into_iter()
        .find(|b| on_path(b));
    if skip_unless(browser.is_some(), "chromium (headless check of the report)") {
        return;
    }
    let dir = std::env::temp_dir().join(format!("volley-render-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (json, html, png) = (dir.join("r.json"), dir.join("r.html"), dir.join("r.png"));
    let sweep = |k: &str, f: &dyn Fn(f64) -> f64| {
        (3..=24)
            .map(|p| serde_json::json!({"size": 1u64 << p, k: f(f64::from(1u32 << p))}))
            .collect::<Vec<_>>()
    };
    let doc = serde_json::json!({
        "machine": {"host": "h", "cpu": "c", "cpus": 2, "kernel": "6", "date": "2026-01-01"},
        "reps": 1, "scale": 1.0,
        "configs": [{
            "name": "shm", "L_ns": 50.0, "o_s_ns": 20.0, "o_r_ns": 40.0, "g_ns": 30.0,
            "G_ns_per_byte": 0.05, "half_power_bytes": 4096.0, "floor_rtt_ns": 200.0,
            "latency": sweep("latency_us", &|n| 0.2 + n / 1e4),
            "bandwidth": sweep("mb_per_s", &|n| 2e4 * n / (n + 4096.0)),
            "memcpy": sweep("mb_per_s", &|n| 5e4 * n / (n + 512.0))
        }],
        "peers": [{"name": "open mpi", "latency": sweep("latency_us", &|n| 0.5 + n / 5e3),
                   "bandwidth": sweep("mb_per_s", &|n| 1e4 * n / (n + 8192.0))}]
    });
    std::fs::write(&json, doc.to_string()).unwrap();
    let (code, out, err) = run(
        &[
            "report",
            json.to_str().unwrap(),
            "-o",
            html.to_str().unwrap(),
        ],
        Duration::from_secs(30),
    );
    assert_eq!(code, Some(0), "stdout:\n{out}\nstderr:\n{err}");
    let shot = Command::new(browser.unwrap())
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--window-size=1200,900",
        ])
        .arg(format!("--screenshot={}", png.display()))
        .arg(format!("file://{}", html.display()))
        .stdin(Stdio::null())
        .output()
        .expect("the browser starts");
    let file = std::fs::File::open(&png).unwrap_or_else(|e| {
        panic!(
            "no screenshot ({e}); the browser said:\n{}",
            String::from_utf8_lossy(&shot.stderr)
        )
    });
    let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).expect("a frame");
    assert!(info.width >= 600 && info.height >= 400, "{info:?}");
    let px = info.color_type.samples();
    let pixels: Vec<&[u8]> = buf[..info.buffer_size()].chunks(px).collect();
    let colours: std::collections::HashSet<&[u8]> = pixels.iter().copied().collect();
    let inked = pixels.iter().filter(|p| p[..3] != [255, 255, 255]).count();
    // Text, axes and coloured curves: many colours, and ink on a fair part of the page.
    assert!(
        colours.len() >= 16,
        "{} colours: a blank page?",
        colours.len()
    );
    assert!(
        inked * 100 >= pixels.len(),
        "{inked} of {} pixels inked",
        pixels.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn experiment_seed002_combined_measures_both_modes_and_its_check_can_fail() {
    let (code, doc, err) = experiment("seed002-combined", &[], Duration::from_secs(300));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    assert_eq!(doc["experiment"], "seed002-combined", "{doc}");
    for transport in ["shm", "udp"] {
        for mode in ["single", "combined"] {
            for size in ["8", "1024"] {
                let v = doc["cmds_per_s"][transport][mode][size]
                    .as_f64()
                    .unwrap_or(f64::NAN);
                assert!(
                    v.is_finite() && v > 0.0,
                    "{transport} {mode} {size} in {doc}"
                );
            }
        }
    }
    // A damaged datum must be caught (and the job must still end).
    corrupted_experiment("seed002-combined", Duration::from_secs(300));
}

#[test]
fn experiment_seed002_multicast_counts_one_ack_per_update_and_fails_when_corrupted() {
    let (code, doc, err) = experiment("seed002-multicast", &[], Duration::from_secs(300));
    assert_eq!(code, Some(0), "{doc}\nstderr:\n{err}");
    assert_eq!(doc["verified"], true, "{doc}");
    assert_eq!(doc["experiment"], "seed002-multicast", "{doc}");
    let job = &doc["jobs"]["shm"];
    let updates = job["updates"].as_u64().unwrap_or(0);
    assert!(
        updates > 0 && job["acks"] == updates && job["stray"] == 0,
        "{job}"
    );
    let modes: Vec<&str> = job["fifo"]
        .as_array()
        .expect("fifo rows")
        .iter()
        .map(|r| r["mode"].as_str().unwrap_or(""))
        .collect();
    assert_eq!(modes, ["normal", "retry", "plain"], "{job}");
    assert!(err.contains("one ack per update"), "{err}");
    // The check can fail: one ack too many must not verify.
    corrupted_experiment("seed002-multicast", Duration::from_secs(300));
}

#[test]
fn experiment_seed003_trisolve_solves_correctly_and_reports_every_version() {
    let (code, doc, err) = experiment("seed003-trisolve", &[], Duration::from_secs(240));
    assert_eq!(doc["experiment"], "seed003-trisolve", "{doc}");
    // Correctness is required; the seed's ordering is reported (B3's kernel wake-ups put it
    // behind B0 on this machine), and `verified` follows both.
    assert_eq!(doc["correct"], true, "{doc}");
    let ordering = doc["ordering_holds"].as_bool().expect("ordering_holds");
    assert_eq!(doc["verified"], ordering, "{doc}");
    assert_eq!(code, Some(if ordering { 0 } else { 1 }), "{err}");
    let rows = doc["rows"].as_array().expect("rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["version"].as_str()).collect();
    assert_eq!(names, ["B0", "B1", "B2", "B3", "B3'"], "{doc}");
    for key in ["b3p_over_b3", "b3p_over_b0"] {
        let x = doc[key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{key} in {doc}");
    }
    assert!(doc["b3p_below_b3"].is_boolean(), "{doc}");
    // The interrupt floor: a signal's round trip to the running owner, times N.
    let floor = &doc["b3_signal_floor"];
    for key in ["round_trip_ns", "b3_floor_us", "b0_communication_us"] {
        let x = floor[key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{key} in {doc}");
    }
    assert!(floor["below_b0"].is_boolean(), "{doc}");
    for r in rows {
        for key in ["computation_us", "communication_us"] {
            let x = r[key].as_f64().unwrap_or(f64::NAN);
            assert!(x.is_finite() && x >= 0.0, "{key} in {r}");
        }
    }
    assert_eq!(rows[0]["seed_communication"], "\"474us\"", "{doc}");
    let timing = doc["timing"].as_array().expect("timing rows");
    assert_eq!(timing.len(), 5, "{doc}");
    for r in timing {
        assert_timing_row(r);
        assert!(r["compute_ns"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(err.contains("last rank"), "{err}");
}

#[test]
fn experiment_seed003_trisolve_corrupt_fails_its_check() {
    let (code, doc, _) = experiment("seed003-trisolve", &["--corrupt"], Duration::from_secs(240));
    assert_eq!(doc["correct"], false, "{doc}");
    assert_eq!(doc["verified"], false, "{doc}");
    assert_eq!(code, Some(1));
}

#[test]
fn experiment_seed003_sparse_solves_correctly_and_reports_the_break_even() {
    let (code, doc, err) = experiment("seed003-sparse", &[], Duration::from_secs(240));
    assert_eq!(doc["experiment"], "seed003-sparse", "{doc}");
    // Correctness and the flow control are required; the speed shape is reported and
    // `verified` follows all three.
    assert_eq!(doc["correct"], true, "{doc}");
    assert_eq!(doc["no_stalls"], true, "{doc}");
    let pays = doc["schedule_pays_off"]
        .as_bool()
        .expect("schedule_pays_off");
    assert_eq!(doc["verified"], pays, "{doc}");
    assert_eq!(code, Some(if pays { 0 } else { 1 }), "{err}");
    for key in [
        "serial_us",
        "levels_us_per_solve",
        "fetch_us_per_solve",
        "fetch_interrupt_us_per_solve",
        "fetch_inline_us_per_solve",
        "executor_us_per_solve",
        "inspector_us",
    ] {
        let x = doc[key].as_f64().unwrap_or(f64::NAN);
        assert!(x.is_finite() && x > 0.0, "{key} in {doc}");
    }
    assert_eq!(doc["break_even_solves"].is_u64(), pays, "{doc}");
    assert!(
        doc["remote_values_per_solve"].as_u64().unwrap_or(0) > 0,
        "{doc}"
    );
    assert!(
        doc["level_rounds_per_solve"].as_u64().unwrap_or(0) > 0,
        "{doc}"
    );
    assert!(err.contains("break-even"), "{err}");
    // The timing harness: a row per variant, each with the five figures.
    let rows = doc["timing"].as_array().expect("timing rows");
    let names: Vec<&str> = rows.iter().filter_map(|r| r["variant"].as_str()).collect();
    for v in ["(a)", "(b)", "(c)", "(d)"] {
        assert!(names.iter().any(|n| n.starts_with(v)), "{v} in {names:?}");
    }
    for r in rows {
        assert_timing_row(r);
        assert!(r["compute_ns"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(err.contains("last rank"), "{err}");
}

/// One timing row of the harness: computation and communication that add up to the last
/// rank's time, and latencies (p50 <= p99) over at least one message.
fn assert_timing_row(r: &serde_json::Value) {
    let f = |k: &str| r[k].as_f64().unwrap_or(f64::NAN);
    let (comp, comm, last) = (f("compute_ns"), f("comm_ns"), f("last_rank_ns"));
    assert!(comp >= 0.0 && comm >= 0.0 && last > 0.0, "{r}");
    assert!((comp + comm - last).abs() <= 1.0 || comm == 0.0, "{r}");
    let (p50, p99) = (
        r["latency_p50_ns"].as_u64().expect("p50"),
        r["latency_p99_ns"].as_u64().expect("p99"),
    );
    assert!(p50 <= p99, "{r}");
    assert!(r["messages"].as_u64().unwrap_or(0) > 0, "{r}");
}

#[test]
fn experiment_seed003_sparse_corrupt_fails_its_check() {
    let (code, doc, _) = experiment("seed003-sparse", &["--corrupt"], Duration::from_secs(240));
    assert_eq!(doc["correct"], false, "{doc}");
    assert_eq!(doc["verified"], false, "{doc}");
    assert_eq!(code, Some(1));
    // Every variant's solution is checked: each one's damage is reported.
    let failures = doc["failures"].to_string();
    for v in [
        "(a) typed, level-scheduled",
        "(b) executor",
        "fetch (comm-thread)",
        "fetch (interrupt)",
    ] {
        assert!(failures.contains(v), "{v} in {failures}");
    }
}
