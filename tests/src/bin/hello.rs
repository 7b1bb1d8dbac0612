//! Prints `rank R of N`: `hello [fail-on-rank K] [lines M]`.
//!
//! With `fail-on-rank K`, rank K exits with status 1 right after printing (without finalizing,
//! so the other ranks wait for it until the launcher stops them). With `lines M`, every rank
//! then prints M more lines `rank R line I` to stdout and `rank R err I` to stderr (for the
//! `--label` tests).

use std::io::Write;
use volley::Runtime;
use volley_tests::eprint_line;

fn usage() -> ! {
    eprint_line("hello: usage: hello [fail-on-rank K] [lines M]");
    std::process::exit(2)
}

fn main() {
    let mut fail_on = None;
    let mut lines = 0;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let n: usize = args
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| usage());
        match a.as_str() {
            "fail-on-rank" => fail_on = Some(n),
            "lines" => lines = n,
            _ => usage(),
        }
    }
    let rt = Runtime::builder().build().unwrap_or_else(|e| {
        eprint_line(&format!("hello: build: {e}"));
        std::process::exit(2)
    });
    let rank = rt.rank();
    println!("rank {rank} of {}", rt.size());
    if fail_on == Some(rank) {
        eprint_line(&format!("hello: rank {rank} failing on purpose"));
        std::process::exit(1);
    }
    if lines > 0 {
        // stderr is unbuffered: each line reaches the launcher in several small writes, which
        // its --label pump must join back into whole lines.
        let mut out = std::io::stdout().lock();
        let mut err = std::io::stderr().lock();
        for i in 0..lines {
            writeln!(out, "rank {rank} line {i}").unwrap();
            writeln!(err, "rank {rank} err {i}").unwrap();
        }
        out.flush().unwrap();
    }
}
