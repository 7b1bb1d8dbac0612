//! The instructions of seed 003's `pipe_put` inside an open channel, for
//! `scripts/count-pipe-put`: `pipe_put inline|library BURSTS`, run bare (one rank), sends
//! BURSTS bursts of 64 one-word puts (unrolled) down a channel to itself, draining each burst outside
//! the counted function. `inline` is `Pipe::put_u64` (inlined into `inline_burst`), `library`
//! the general `send(PREVIOUS_CHAIN, word, 1)` call (`library_burst`).

use volley_prim::{Dest, Info, Pipe, Prim, PrimConfig};

const BURST: u64 = 64;

/// Eight times `$e`.
macro_rules! eight {
    ($e:expr) => {{
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
        $e;
    }};
}

/// 64 inlined puts of `w`, unrolled so that no loop instruction is counted; the counted
/// function.
#[inline(never)]
fn inline_burst(pipe: &mut Pipe<'_, '_>, w: u64) {
    eight!(eight!(pipe.put_u64(w)));
}

/// 64 library sends of `w`, unrolled; the counted function.
#[inline(never)]
fn library_burst(p: &Prim<'_>, w: u64) {
    let b = w.to_le_bytes();
    eight!(eight!(p
        .send(Dest::PreviousChain, Info::Data(&b), true)
        .expect("send")));
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_default();
    let bursts: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(1000);
    let mut b = volley::Runtime::builder();
    let cfg = PrimConfig::default().capacity(1 << 20).expect("capacity");
    let setup = Prim::register(&mut b, cfg);
    let rt = b.build().expect("runtime");
    let p = setup.attach(&rt).expect("prim");
    let mut sum = 0u64;
    match mode.as_str() {
        "inline" => {
            let mut pipe = p.pipe_create(0).expect("pipe");
            for k in 0..bursts {
                inline_burst(&mut pipe, k);
                for _ in 0..BURST {
                    sum = sum.wrapping_add(p.pipe_get_u64().expect("get"));
                }
            }
            pipe.close().expect("close");
        }
        "library" => {
            p.send(Dest::Rank(0), Info::Data(&[]), true).expect("open");
            for k in 0..bursts {
                library_burst(&p, k);
                for _ in 0..BURST {
                    sum = sum.wrapping_add(p.pipe_get_u64().expect("get"));
                }
            }
            p.send(Dest::PreviousChain, Info::Data(&[]), false)
                .expect("close");
        }
        _ => {
            eprintln!("usage: pipe_put inline|library BURSTS");
            std::process::exit(2);
        }
    }
    // Burst k carries the word k, 64 times.
    assert_eq!(
        sum,
        BURST * bursts * (bursts - 1) / 2,
        "words lost or changed"
    );
    drop(p);
    rt.finalize();
}
