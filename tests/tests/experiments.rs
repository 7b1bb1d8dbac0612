//! `volley experiments`: the list, bad names, and each experiment at its quick size, whose
//! JSON must say it verified its results and carry its figures.

mod common;

use common::Job;
use serde_json::Value;

/// Runs `volley experiments NAME --quick --reps 1 --json -` and returns the document.
fn quick(name: &str) -> Value {
    let out = Job::raw(["experiments", name, "--quick", "--reps", "1", "--json", "-"]).output();
    assert!(out.status.success(), "{name} failed:\n{out}");
    let doc: Value =
        serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{out}"));
    assert_eq!(doc["experiment"], name, "{doc}");
    assert_eq!(doc["verified"], true, "{doc}");
    assert_eq!(doc["quick"], true, "{doc}");
    doc
}

fn positive(doc: &Value, key: &str) -> f64 {
    let x = doc[key]
        .as_f64()
        .unwrap_or_else(|| panic!("{key} missing: {doc}"));
    assert!(x.is_finite() && x > 0.0, "{key} = {x}: {doc}");
    x
}

#[test]
fn the_list_names_every_experiment_and_a_bad_name_is_refused() {
    let out = Job::raw(["experiments", "--list"]).output();
    assert!(out.status.success(), "{out}");
    for name in [
        "seed001-hardware",
        "seed001-contention",
        "seed001-send-breakdown",
    ] {
        assert!(
            out.stdout.lines().any(|l| l.starts_with(name)),
            "{name} not listed:\n{out}"
        );
    }
    let out = Job::raw(["experiments", "seed999-nothing"]).output();
    assert_eq!(out.status.code(), Some(2), "{out}");
    assert!(
        out.stderr.contains("no experiment \"seed999-nothing\"")
            && out.stderr.contains("seed001-hardware"),
        "{out}"
    );
    let out = Job::raw(["experiments"]).output();
    assert_eq!(out.status.code(), Some(2), "{out}");
    let out = Job::raw([
        "experiments",
        "seed001-hardware",
        "--json",
        "/nonexistent/dir/x.json",
    ])
    .output();
    assert_eq!(out.status.code(), Some(2), "{out}");
    assert!(out.stderr.contains("cannot write --json"), "{out}");
}

#[test]
fn seed001_hardware_measures_table_1() {
    let doc = quick("seed001-hardware");
    let memory = positive(&doc, "memory_miss_ns");
    let l1 = positive(&doc, "l1_hit_ns");
    assert!(memory > l1, "a miss no slower than a hit: {doc}");
    for key in [
        "cache_to_cache_ns",
        "memcpy_gbps",
        "cas_ns",
        "network_poll_ns",
        "loopback_tcp_gbps",
    ] {
        positive(&doc, key);
    }
    assert_eq!(
        doc["ratios"]["seed_cache_to_cache_over_memory"], 1.6,
        "{doc}"
    );
}

#[test]
fn seed001_contention_floods_every_design_and_pattern() {
    let doc = quick("seed001-contention");
    let points = doc["points"].as_array().expect("points");
    // 4 designs x 2 patterns x 2 loads, each with a throughput.
    assert_eq!(points.len(), 16, "{doc}");
    for p in points {
        positive(p, "msgs_per_us");
    }
    for design in ["rings", "cas", "lock", "prewrite"] {
        assert_eq!(
            points.iter().filter(|p| p["design"] == design).count(),
            4,
            "{doc}"
        );
    }
    for ratio in ["cas_over_lock", "rings_over_cas", "prewrite_over_cas"] {
        assert_eq!(
            doc[ratio].as_array().map(Vec::len),
            Some(4),
            "{ratio}: {doc}"
        );
    }
}

#[test]
fn a_damaged_datum_fails_the_self_check_with_exit_1() {
    for name in [
        "seed001-hardware",
        "seed001-contention",
        "seed001-send-breakdown",
    ] {
        let out = Job::raw([
            "experiments",
            name,
            "--quick",
            "--reps",
            "1",
            "--corrupt",
            "--json",
            "-",
        ])
        .output();
        assert_eq!(out.status.code(), Some(1), "{name}: {out}");
        assert!(out.stderr.contains("NOT VERIFIED"), "{name}: {out}");
        let doc: Value =
            serde_json::from_str(&out.stdout).unwrap_or_else(|e| panic!("{name}: {e}\n{out}"));
        assert_eq!(doc["verified"], false, "{name}: {doc}");
        assert!(
            !doc["failures"].as_array().expect("failures").is_empty(),
            "{name}: {doc}"
        );
    }
}

#[test]
fn seed001_send_breakdown_adds_up_every_component() {
    let doc = quick("seed001-send-breakdown");
    let components = doc["components"].as_array().expect("components");
    assert_eq!(components.len(), 8, "{doc}");
    let sum: f64 = components
        .iter()
        .map(|c| c["cycles"].as_f64().expect("cycles"))
        .sum();
    let total = positive(&doc, "multi_protocol_cycles");
    assert!(
        (sum - total).abs() < 1e-6 * total.max(1.0),
        "components {sum} != total {total}: {doc}"
    );
    positive(&doc, "tsc_ghz");
    positive(&doc, "shm_only_cycles");
    let prewrite = &doc["prewrite"];
    positive(prewrite, "with_cycles");
    positive(prewrite, "without_cycles");
    assert_eq!(prewrite["seed_saved_cycles"], 40.0, "{doc}");
}

#[test]
fn seed003_bounce_measures_every_variant_and_checks_every_value() {
    let doc = quick("seed003-bounce");
    for key in [
        "raw_channel_ns",
        "raw_ns",
        "typed_ns",
        "probe_ns",
        "interrupt_ns",
        "comm_thread_ns",
        "floor_ns",
    ] {
        positive(&doc, key);
    }
    assert_eq!(doc["seed"]["typed"], "70us", "{doc}");
    assert!(doc["ordering_holds"].is_boolean(), "{doc}");
    // Raw against typed in paired interleaved blocks: 8 pairs in the one repetition,
    // quartiles in order, the sign count within the pairs.
    let d = &doc["typed_minus_raw_ns"];
    let pairs = d["pairs"].as_u64().expect("pairs");
    assert_eq!(pairs, 8, "{doc}");
    let q = |k: &str| d[k].as_f64().unwrap_or_else(|| panic!("{k}: {doc}"));
    assert!(q("p25") <= q("median") && q("median") <= q("p75"), "{doc}");
    assert!(
        d["typed_slower"].as_u64().expect("typed_slower") <= pairs,
        "{doc}"
    );
    // The timing harness: a row per progress mode, the loop's time and latencies.
    let rows = doc["timing"].as_array().expect("timing rows");
    assert_eq!(rows.len(), 4, "{doc}");
    for r in rows {
        positive(r, "last_rank_ns");
        positive(r, "comm_ns");
        let (p50, p99) = (positive(r, "latency_p50_ns"), positive(r, "latency_p99_ns"));
        assert!(p50 <= p99, "{r}");
        assert_eq!(r["compute_ns"], 0.0, "{r}");
    }
}

#[test]
fn seed003_channels_measures_both_forms_and_checks_every_element() {
    let doc = quick("seed003-channels");
    for key in ["per_message_ns", "channel_ns", "inline_ns", "floor_ns"] {
        positive(&doc, key);
    }
    assert_eq!(doc["seed"]["channel_b2"], "4us", "{doc}");
    let out = Job::raw([
        "experiments",
        "seed003-channels",
        "--quick",
        "--reps",
        "1",
        "--corrupt",
    ])
    .output();
    assert_eq!(out.status.code(), Some(1), "{out}");
}

#[test]
fn seed003_progress_writes_every_part_to_its_json_file() {
    let dir = std::env::temp_dir().join(format!("volley-progress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("progress.json");
    let out = Job::raw([
        "experiments",
        "seed003-progress",
        "--quick",
        "--reps",
        "1",
        "--json",
        file.to_str().unwrap(),
    ])
    .output();
    assert!(out.status.success(), "{out}");
    let text = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    let doc: Value = serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert_eq!(doc["experiment"], "seed003-progress", "{doc}");
    assert_eq!(doc["verified"], true, "{doc}");
    positive(&doc, "floor_ns");
    // E3: polling, then each threshold with a polling and a sleeping receiver.
    let e3 = doc["e3"].as_array().expect("e3");
    let rows: Vec<(&str, &str)> = e3
        .iter()
        .map(|r| {
            (
                r["notify"].as_str().unwrap(),
                r["receiver"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(rows.len(), 7, "{doc}");
    assert_eq!(rows[0], ("never (polling)", "inline"), "{doc}");
    for r in e3 {
        positive(r, "stream_ns");
    }
    // Raised only when the threshold says so: none when polling, some at start and end.
    assert_eq!(e3[0]["notifications"], 0.0, "{doc}");
    assert!(e3[1]["notifications"].as_f64().unwrap() > 0.0, "{doc}");
    for key in [
        "fast_ns",
        "checked_ns",
        "syscall_ns",
        "strided_fast_ns",
        "strided_checked_ns",
    ] {
        positive(&doc["e4"], key);
    }
    // E11: 4 capacities x 3 modes; credits never stall, nothing spills but the spill mode.
    let e11 = doc["e11"].as_array().expect("e11");
    assert_eq!(e11.len(), 12, "{doc}");
    for f in e11 {
        positive(f, "mbytes_per_s");
        match f["mode"].as_str().unwrap() {
            "credits" => {
                assert_eq!(f["full_stalls"], 0.0, "{f}");
                assert!(f["credit_messages"].as_f64().unwrap() > 0.0, "{f}");
            }
            "back-pressure" => assert_eq!(f["spills"], 0.0, "{f}"),
            "spill" => {}
            m => panic!("mode {m}"),
        }
    }
    for key in ["comm_thread_ns", "futex_ns", "signal_ns"] {
        positive(&doc["e12"], key);
    }
    assert_eq!(doc["e11_credits_never_stall"], true, "{doc}");
    assert!(
        doc["seed"]["trap"].as_str().unwrap().contains("50"),
        "{doc}"
    );
    // The self-check can fail: a damaged figure makes the run unverified (exit 1).
    let out = Job::raw([
        "experiments",
        "seed003-progress",
        "--quick",
        "--reps",
        "1",
        "--corrupt",
    ])
    .output();
    assert_eq!(out.status.code(), Some(1), "{out}");
}
