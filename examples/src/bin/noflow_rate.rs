//! Seed 002's "no flow control" against the reliable protocol: how fast rank 1 issues 8-byte
//! puts to rank 0 with `Flow::Reliable` and with `Flow::Unreliable` (no status reply), each run
//! ended by one reliable get, so that every reliable put has run. Prints the median over the
//! repetitions of nanoseconds per put for each.
//!
//! Run it over UDP, two nodes of one rank:
//! `VOLLEY_NET=udp volley run -n 2 --ranks-per-node 1 target/release/noflow_rate [N] [REPS]`

use std::time::Instant;
use volley::rma::{CmdOptions, Flow, Perms, Rma};
use volley::Runtime;

fn arg(i: usize, default: usize) -> usize {
    match std::env::args().nth(i) {
        None => default,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("noflow_rate: argument {i} must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (n, reps) = (arg(1, 20_000), arg(2, 5).max(1));
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = b.build().unwrap_or_else(|e| {
        eprintln!("noflow_rate: {e}");
        std::process::exit(2)
    });
    let rma = setup.attach(&rt);
    if rt.size() != 2 {
        eprintln!("noflow_rate: run it on 2 ranks");
        std::process::exit(2);
    }
    let seg = rma.alloc_symmetric(4096, Perms::ALL).expect("segment");
    rt.barrier();
    if rt.rank() == 1 {
        let target = seg.on(0);
        let mut per_put = [Vec::new(), Vec::new()];
        let mut back = [0u8; 8];
        for _ in 0..reps {
            for (k, flow) in [Flow::Reliable, Flow::Unreliable].into_iter().enumerate() {
                let opts = CmdOptions {
                    flow,
                    ..Default::default()
                };
                let t = Instant::now();
                for i in 0..n {
                    rma.put_with(target, 8 * (i % 256), &(i as u64).to_le_bytes(), opts)
                        .expect("put");
                }
                rma.get(target, 0, &mut back).expect("get");
                per_put[k].push(t.elapsed().as_nanos() as f64 / n as f64);
            }
        }
        let [reliable, unreliable] = per_put.map(median);
        println!(
            "noflow_rate: {n} puts x {reps}: reliable {reliable:.0} ns/put, unreliable \
             {unreliable:.0} ns/put (medians)"
        );
    }
    rt.barrier();
}
