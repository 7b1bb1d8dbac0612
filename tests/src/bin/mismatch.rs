//! Ranks that disagree: `mismatch [handlers|config]`.
//!
//! - `handlers` (default): rank 1 registers a different handler table from the other ranks (an
//!   extra request handler), so `build()` must fail on every rank with
//!   `Error::HandlerTableMismatch`.
//! - `config`: rank 1 asks for a different ring size, so `build()` must fail on every rank with
//!   `Error::ConfigMismatch`.
//!
//! Each rank prints the error, waits a second (so every rank reports before the launcher stops
//! the job) and exits with status 3. If `build()` succeeds, the rank reports it and exits 1; if
//! it fails with another error, the rank exits 4.

use volley::am::Error;
use volley::Runtime;
use volley_tests::{arg_str, eprint_line, job};

fn main() {
    let config = match arg_str(0).as_deref() {
        None | Some("handlers") => false,
        Some("config") => true,
        Some(other) => {
            eprint_line(&format!(
                "mismatch: unknown mode {other:?}; expected handlers or config"
            ));
            std::process::exit(2);
        }
    };
    let rank = job().rank;
    let mut b = Runtime::builder();
    let done = b.reply_handler("done", |_| {});
    b.request_handler("work", move |_, token| {
        let _ = token.reply_short(done, &[]);
    });
    if rank == 1 {
        if config {
            b.ring_slots(16);
        } else {
            b.request_handler("only-on-rank-1", |_, _| {});
        }
    }
    let result = b.build();
    let expected = match &result {
        Err(Error::HandlerTableMismatch { .. }) => !config,
        Err(Error::ConfigMismatch { .. }) => config,
        _ => false,
    };
    match result {
        Err(e) if expected => {
            eprint_line(&format!(
                "mismatch: rank {rank}: build failed as expected: {e}"
            ));
            // Give the other ranks time to report too before the launcher, seeing this rank
            // exit, stops them: the test checks that every rank failed.
            std::thread::sleep(std::time::Duration::from_millis(1000));
            std::process::exit(3);
        }
        Err(e) => {
            eprint_line(&format!(
                "mismatch: rank {rank}: build failed with an unexpected error: {e}"
            ));
            std::process::exit(4);
        }
        Ok(rt) => {
            if rt.size() == 1 {
                // Started bare: one rank cannot disagree with itself.
                println!("mismatch: single rank, nothing to compare");
                return;
            }
            eprint_line(&format!(
                "mismatch: rank {rank}: build succeeded although rank 1 disagrees with the others"
            ));
            std::process::exit(1);
        }
    }
}
