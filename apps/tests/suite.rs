//! The application suite through the real launcher: every program at its test size on 1 to 4
//! ranks, under each strategy, over UDP and TCP, with a damaged result caught by its own
//! check, and the `volley apps` runner's table and JSON.

#[path = "../../tests/tests/common/mod.rs"]
mod common;

use common::{launcher, Job};
use std::time::Duration;

/// Every program, by name, with its binary.
const PROGRAMS: [(&str, &str); 12] = [
    ("radix", env!("CARGO_BIN_EXE_radix")),
    ("radixb", env!("CARGO_BIN_EXE_radixb")),
    ("sample", env!("CARGO_BIN_EXE_sample")),
    ("sampleb", env!("CARGO_BIN_EXE_sampleb")),
    ("bitonic", env!("CARGO_BIN_EXE_bitonic")),
    ("fft", env!("CARGO_BIN_EXE_fft")),
    ("fftb", env!("CARGO_BIN_EXE_fftb")),
    ("cannon", env!("CARGO_BIN_EXE_cannon")),
    ("mm", env!("CARGO_BIN_EXE_mm")),
    ("shell", env!("CARGO_BIN_EXE_shell")),
    ("p-ray", env!("CARGO_BIN_EXE_p-ray")),
    ("wator", env!("CARGO_BIN_EXE_wator")),
];

const DEADLINE: Duration = Duration::from_secs(180);

/// Whether `program` runs on `ranks` ranks (bitonic needs a power of two, cannon a square).
fn runs_on(program: &str, ranks: usize) -> bool {
    match program {
        "bitonic" => ranks.is_power_of_two(),
        "cannon" => (1..=ranks).any(|q| q * q == ranks),
        _ => true,
    }
}

/// Runs `program` at its test size and checks that it verified (or, where the rank count
/// does not suit it, that it refused with status 2 and said why).
fn check(program: &str, bin: &str, ranks: usize, strategy: &str, net: Option<&str>) {
    let mut args = vec!["run".to_string(), "-n".into(), ranks.to_string()];
    if net.is_some() {
        args.extend(["--ranks-per-node".into(), "1".into()]);
    }
    args.extend([bin.to_string(), "--size".into(), "test".into()]);
    let mut job = Job::raw(&args)
        .env("VOLLEY_STRATEGY", strategy)
        .timeout(DEADLINE);
    if let Some(n) = net {
        job = job.env("VOLLEY_NET", n);
    }
    let out = job.output();
    if runs_on(program, ranks) {
        out.assert_success().assert_stdout_has(&[
            &format!("app {program} [{strategy}] on {ranks} ranks"),
            "verified",
            &format!("\"program\":\"{program}\""),
        ]);
    } else {
        out.assert_code(2);
        assert!(
            out.stderr.contains(&ranks.to_string()) || out.stderr.contains("rank"),
            "{program} on {ranks} ranks should say why it refuses:\n{out}"
        );
    }
}

#[test]
fn every_program_on_1_to_4_ranks() {
    for (name, bin) in PROGRAMS {
        for ranks in 1..=4 {
            check(name, bin, ranks, "hw", None);
        }
    }
}

#[test]
fn every_program_under_proc_and_np() {
    for (name, bin) in PROGRAMS {
        for strategy in ["proc", "np"] {
            check(name, bin, 4, strategy, None);
        }
    }
}

#[test]
fn a_subset_over_udp_and_tcp() {
    for net in ["udp", "tcp"] {
        for (name, bin) in PROGRAMS
            .iter()
            .filter(|(n, _)| ["radix", "sample", "fftb", "mm", "wator", "cannon"].contains(n))
        {
            let strategy = if net == "udp" { "proc" } else { "np" };
            check(name, bin, 4, strategy, Some(net));
        }
    }
}

#[test]
fn a_damaged_result_is_caught_by_every_program() {
    for (name, bin) in PROGRAMS {
        let out = Job::run(4, bin, &["--size", "test", "--corrupt"])
            .timeout(DEADLINE)
            .output();
        assert_eq!(
            out.code(),
            Some(1),
            "{name} --corrupt should fail its check:\n{out}"
        );
        assert!(out.stdout.contains("NOT VERIFIED"), "{name}:\n{out}");
        assert!(out.stderr.contains("verification failed"), "{name}:\n{out}");
    }
}

#[test]
fn the_runner_prints_table_2_and_writes_every_run_as_json() {
    let dir = std::path::Path::new(PROGRAMS[0].1).parent().unwrap();
    let json = std::env::temp_dir().join(format!("volley-apps-test-{}.json", std::process::id()));
    let out = Job::raw([
        "apps",
        "radix",
        "mm",
        "--size",
        "test",
        "--reps",
        "2",
        "--ranks",
        "2",
        "--dir",
        dir.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ])
    .timeout(DEADLINE)
    .output();
    out.assert_success()
        .assert_stdout_has(&["program", "np/proc", "Meiko", "Paragon", "radix", "mm"]);
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let runs = doc["runs"].as_array().unwrap();
    // radix also has an Open MPI version, run when Open MPI is installed.
    let mpi = runs.iter().filter(|r| r["strategy"] == "mpi").count();
    assert!(mpi == 0 || mpi == 2, "{doc}");
    assert!(runs
        .iter()
        .filter(|r| r["strategy"] == "mpi")
        .all(|r| r["program"] == "radix"));
    assert_eq!(
        runs.len() - mpi,
        2 * 2 * 2,
        "2 programs x proc,np x 2 reps: {doc}"
    );
    for r in runs {
        for key in [
            "program",
            "strategy",
            "ranks",
            "transport",
            "seconds",
            "verified",
        ] {
            assert!(!r[key].is_null(), "run without {key}: {r}");
        }
        assert_eq!(r["verified"], true, "{r}");
        assert_eq!(r["ranks"], 2);
        assert!(r["seconds"].as_f64().unwrap() > 0.0);
    }
    let table = doc["table"].as_array().unwrap();
    assert_eq!(table.len(), 2);
    assert!(table[0]["np_over_proc"].as_f64().is_some());
    assert_eq!(table[0]["seed_meiko"], 1.574);
    // A program the suite does not have is refused with status 2.
    Job::raw(["apps", "quicksort", "--dir", dir.to_str().unwrap()])
        .output()
        .assert_code(2)
        .assert_stderr_has(&["unknown program \"quicksort\""]);
    let _ = launcher();
}
