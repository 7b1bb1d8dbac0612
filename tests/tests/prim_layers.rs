//! Seed 003's layers (`volley-prim-layers`) across processes: `src/bin/prim_layers_suite.rs`
//! checks each section and rank 0 prints a line per section, which these tests match.

mod common;

use common::Job;
use std::time::Duration;

const SUITE: &str = env!("CARGO_BIN_EXE_prim_layers_suite");
const DEADLINE: Duration = Duration::from_secs(240);

fn run(job: Job, sections: &[&str]) {
    common::run_sections(job, "layers", sections, DEADLINE);
}

#[test]
fn typed_messages_match_out_of_order_on_4_ranks_in_every_mode() {
    for mode in ["inline", "comm-thread", "interrupt", "probe"] {
        run(
            Job::run(4, SUITE, &["typed-order"]).env("VOLLEY_PRIM_PROGRESS", mode),
            &["typed-order"],
        );
    }
    run(
        Job::run(4, SUITE, &["typed-order"])
            .env("VOLLEY_PRIM_PROGRESS", "comm-thread")
            .env("VOLLEY_PRIM_CAPACITY", "65536"),
        &["typed-order"],
    );
}

#[test]
fn typed_bounds_are_clear_errors_and_lose_nothing() {
    run(Job::run(2, SUITE, &["typed-bounds"]), &["typed-bounds"]);
}

#[test]
fn banded_solve_matches_the_serial_solve() {
    // Fetch (2 ranks) in the seed's interrupt mode and inline, and B3' with the fetch
    // answered by the communication thread; the pipeline on 3 ranks.
    for mode in ["interrupt", "inline", "comm-thread"] {
        run(
            Job::run(2, SUITE, &["trisolve"]).env("VOLLEY_PRIM_PROGRESS", mode),
            &["trisolve"],
        );
    }
    run(Job::run(3, SUITE, &["trisolve"]), &["trisolve"]);
}

#[test]
fn conditional_fetch_parks_requests_until_the_value_is_produced() {
    // 2, 3 and 5 ranks (more than the 2 cores), every progress mode on 3.
    for n in [2, 5] {
        run(
            Job::run(n, SUITE, &["fetch-order", "fetch-many"]),
            &["fetch-order", "fetch-many"],
        );
    }
    for mode in ["inline", "comm-thread", "interrupt", "probe"] {
        run(
            Job::run(3, SUITE, &["fetch-order", "fetch-many"]).env("VOLLEY_PRIM_PROGRESS", mode),
            &["fetch-order", "fetch-many"],
        );
    }
}

#[test]
fn inspector_schedule_matches_the_serial_reference() {
    for n in [2, 3, 6] {
        run(Job::run(n, SUITE, &["schedule"]), &["schedule"]);
    }
}

#[test]
fn sparse_solves_equal_the_serial_solve_without_overflowing_a_small_buffer() {
    // 256-byte buffers on 4 ranks: 32 bytes allowed per pair, a batch of one value, a
    // credit for each.
    run(
        Job::run(4, SUITE, &["sparse-solve"]).env("VOLLEY_PRIM_CAPACITY", "256"),
        &["sparse-solve"],
    );
    for n in [2, 5] {
        run(Job::run(n, SUITE, &["sparse-solve"]), &["sparse-solve"]);
    }
    for mode in ["comm-thread", "interrupt"] {
        run(
            Job::run(3, SUITE, &["sparse-solve"])
                .env("VOLLEY_PRIM_PROGRESS", mode)
                .env("VOLLEY_PRIM_CAPACITY", "512"),
            &["sparse-solve"],
        );
    }
}

#[test]
fn level_scheduled_typed_solve_equals_the_serial_solve() {
    for n in [2, 5] {
        run(Job::run(n, SUITE, &["sparse-levels"]), &["sparse-levels"]);
    }
    // One value per round message (512 bytes on 3 ranks), through the other modes.
    for mode in ["comm-thread", "interrupt", "probe"] {
        run(
            Job::run(3, SUITE, &["sparse-levels"])
                .env("VOLLEY_PRIM_PROGRESS", mode)
                .env("VOLLEY_PRIM_CAPACITY", "512"),
            &["sparse-levels"],
        );
    }
    // Too small for a round message from each of 3 others: a clear error.
    run(
        Job::run(4, SUITE, &["sparse-levels"]).env("VOLLEY_PRIM_CAPACITY", "256"),
        &["sparse-levels"],
    );
}

#[test]
fn sparse_bad_inputs_are_clear_errors_and_nothing_hangs() {
    for n in [2, 4] {
        run(Job::run(n, SUITE, &["sparse-errors"]), &["sparse-errors"]);
    }
}
