//! Seed 003's primitives (`volley-prim`) across processes: `src/bin/prim_suite.rs` checks
//! each numbered requirement it exercises and rank 0 prints a line per section, which these
//! tests match (a section that did not run fails). Over shared memory in every progress mode,
//! with more ranks than cores, and between emulated nodes over UDP and TCP.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_prim_suite");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) -> String {
    common::run_sections(job, "prim", sections, DEADLINE).stdout
}

const ALL: [&str; 12] = [
    "basic",
    "capacity",
    "internal",
    "notify",
    "chain",
    "torture",
    "multicast",
    "order",
    "vector",
    "handlers",
    "fastpath",
    "errors",
];

#[test]
fn every_section_in_every_progress_mode_on_4_ranks() {
    for mode in ["inline", "comm-thread", "interrupt", "probe"] {
        run(
            Job::run(4, SUITE, &ALL).env("VOLLEY_PRIM_PROGRESS", mode),
            &ALL,
        );
    }
}

#[test]
fn the_same_program_gives_the_same_result_in_every_mode() {
    let digest = |mode: &str| {
        let out = run(
            Job::run(3, SUITE, &["modes"]).env("VOLLEY_PRIM_PROGRESS", mode),
            &["modes"],
        );
        out.lines()
            .find(|l| l.starts_with("prim modes: ok"))
            .unwrap()
            .to_string()
    };
    let first = digest("inline");
    for mode in ["comm-thread", "interrupt", "probe"] {
        assert_eq!(digest(mode), first, "{mode}");
    }
}

#[test]
fn notification_thresholds_count_exactly() {
    for notify in ["never", "start", "end", "half-full"] {
        for mode in ["inline", "interrupt"] {
            run(
                Job::run(2, SUITE, &["notify", "capacity"])
                    .env("VOLLEY_PRIM_NOTIFY", notify)
                    .env("VOLLEY_PRIM_PROGRESS", mode),
                &["notify", "capacity"],
            );
        }
    }
}

#[test]
fn torture_and_order_with_more_ranks_than_cores() {
    let s = ["torture", "order", "multicast"];
    run(Job::run(8, SUITE, &s), &s);
    run(
        Job::run(6, SUITE, &s).env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
        &s,
    );
}

#[test]
fn a_larger_buffer_changes_nothing_but_the_stalls() {
    let s = ["basic", "capacity", "chain", "order"];
    run(
        Job::run(3, SUITE, &s).env("VOLLEY_PRIM_CAPACITY", "65536"),
        &s,
    );
}

#[test]
fn over_udp_and_tcp_between_emulated_nodes() {
    let s = [
        "basic",
        "capacity",
        "chain",
        "torture",
        "multicast",
        "vector",
        "handlers",
        "modes",
    ];
    for net in ["udp", "tcp"] {
        let mut args = vec!["run", "-n", "4", "--ranks-per-node", "1", SUITE];
        args.extend(s);
        run(Job::raw(args.clone()).env("VOLLEY_NET", net), &s);
        run(
            Job::raw(args)
                .env("VOLLEY_NET", net)
                .env("VOLLEY_PRIM_PROGRESS", "comm-thread"),
            &s,
        );
    }
}
