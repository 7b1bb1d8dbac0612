//! A rank dies mid-job: `crash [kill|exit7|hang]`.
//!
//! After a barrier every rank prints `crash: rank R pid P ready`. Then rank 1 (rank 0 if alone)
//! - `kill` (default): kills itself with SIGKILL;
//! - `exit7`: exits with status 7 (without finalizing the runtime);
//! - `hang`: like every other rank, waits forever.
//!
//! The other ranks wait in `wait_until(|| false)`, polling forever: only the launcher can end
//! them, which is what the tests check.

use std::io::Write;
use volley::Runtime;
use volley_tests::{arg_str, eprint_line};

fn main() {
    let mode = arg_str(0).unwrap_or_else(|| "kill".into());
    if !matches!(mode.as_str(), "kill" | "exit7" | "leave" | "hang") {
        eprint_line(&format!(
            "crash: unknown mode {mode:?}; expected kill, exit7, leave or hang"
        ));
        std::process::exit(2);
    }
    let mut b = Runtime::builder();
    let done = b.reply_handler("done", |_| {});
    b.request_handler("work", move |_, token| {
        let _ = token.reply_short(done, &[]);
    });
    let rt = b.build().unwrap_or_else(|e| {
        eprint_line(&format!("crash: build: {e}"));
        std::process::exit(2)
    });
    rt.barrier();
    let victim = if rt.size() > 1 { 1 } else { 0 };
    println!("crash: rank {} pid {} ready", rt.rank(), std::process::id());
    std::io::stdout().flush().unwrap();
    if rt.rank() == victim {
        match mode.as_str() {
            "kill" => {
                // SAFETY: plain system calls on our own process.
                unsafe {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
                unreachable!("SIGKILL did not kill the process");
            }
            "exit7" => std::process::exit(7),
            // Status 0 but without finalizing: the others must not wait forever.
            "leave" => std::process::exit(0),
            _ => {}
        }
    }
    rt.wait_until(|| false);
    unreachable!("wait_until(|| false) returned");
}
