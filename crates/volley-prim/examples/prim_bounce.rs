//! The bounce round trip of seed 003's primitives between rank 0 and the last rank, in the
//! progress mode `VOLLEY_PRIM_PROGRESS` gives (a command, not a test): a 16-byte data packet
//! each way. Run across emulated nodes to time the network path, for instance
//! `VOLLEY_NET=tcp VOLLEY_PRIM_PROGRESS=interrupt volley run -n 2 --ranks-per-node 1
//! target/release/examples/prim_bounce [ROUND_TRIPS]`. Prints the median over five blocks of
//! the round trip in µs; checks every value that comes back.

use std::time::Instant;
use volley_prim::{Dest, Info, Prim, PrimConfig, Recv, Source};

fn main() {
    let n: u64 = std::env::args()
        .nth(1)
        .map_or(200, |s| s.parse().expect("ROUND_TRIPS is a number"));
    let mut b = volley::Runtime::builder();
    let setup = Prim::register(
        &mut b,
        PrimConfig::from_env().expect("the layer's settings"),
    );
    let rt = b.build().expect("the runtime");
    let p = setup.attach(&rt).expect("the layer");
    let last = p.size() - 1;
    assert!(last > 0, "prim_bounce needs 2 ranks or more");
    let mut buf = [0u8; 16];
    let mut bounce = |v: u64| {
        let out = [v.to_le_bytes(), (!v).to_le_bytes()].concat();
        if p.rank() == 0 {
            p.send(Dest::Rank(last), Info::Data(&out), false).unwrap();
            p.receive(Source::Network, Recv::Data(&mut buf)).unwrap();
            assert_eq!(buf[..], out[..], "round trip {v} came back changed");
        } else if p.rank() == last {
            p.receive(Source::Network, Recv::Data(&mut buf)).unwrap();
            assert_eq!(buf[..], out[..], "round trip {v} arrived changed");
            p.send(Dest::Rank(0), Info::Data(&buf), false).unwrap();
        }
    };
    for v in 0..n / 4 {
        bounce(v);
    }
    let mut blocks = Vec::new();
    for block in 0..5 {
        let t = Instant::now();
        for i in 0..n {
            bounce(block * n + i);
        }
        blocks.push(t.elapsed().as_secs_f64() * 1e6 / n as f64);
    }
    blocks.sort_by(f64::total_cmp);
    rt.barrier();
    if p.rank() == 0 {
        println!(
            "prim_bounce {} {} peer mapped: {}, round trip {:.1} us (median of 5 x {n}; blocks {:.1}-{:.1})",
            p.progress().name(),
            std::env::var("VOLLEY_NET").unwrap_or_else(|_| "udp".into()),
            p.is_mapped(last),
            blocks[2],
            blocks[0],
            blocks[4]
        );
    }
    drop(p);
    rt.finalize();
}
