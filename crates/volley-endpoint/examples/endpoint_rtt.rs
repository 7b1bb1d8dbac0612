//! The round trip of an endpoint request and its reply beside volley's own short round trip,
//! measured in the same job, alternately. Run on 2 ranks:
//!
//! ```text
//! volley run -n 2 target/release/examples/endpoint_rtt [ROUND_TRIPS] [REPETITIONS]
//! ```
//!
//! Rank 0 prints, for each, the median over the repetitions of the mean round trip (µs),
//! and the ratio endpoint / core.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley_endpoint::{EndpointName, Endpoints};

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let mut args = std::env::args().skip(1);
    let n: u64 = args
        .next()
        .map_or(20_000, |a| a.parse().expect("round trips"));
    let reps: usize = args.next().map_or(7, |a| a.parse().expect("repetitions"));
    let mut b = volley::Runtime::builder();
    let core_got = Arc::new(AtomicU64::new(0));
    let g = core_got.clone();
    let pong = b.reply_handler("rtt.pong", move |m| g.store(m.arg(0), Ordering::Release));
    let ping = b.request_handler("rtt.ping", move |m, t| {
        let _ = t.reply_short(pong, &[m.arg(0)]);
    });
    // Names of rank 1's endpoint, for rank 0.
    let name = Arc::new(std::sync::Mutex::new(None));
    let nm = name.clone();
    let give = b.request_handler("rtt.name", move |m, _| {
        *nm.lock().unwrap() = Some(EndpointName::from_bytes(m.payload()).expect("a name"));
    });
    let setup = Endpoints::register(&mut b);
    let rt = b.build().expect("a job");
    if rt.size() != 2 {
        eprintln!("endpoint_rtt: run on 2 ranks");
        std::process::exit(2);
    }
    let eps = setup.attach(&rt);
    let ep = eps.open(0x5eed);
    let ep_got = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let s = served.clone();
    ep.set_request_handler(1, move |m, t| {
        let _ = t.reply(2, &[m.arg(0)], &[]);
        s.fetch_add(1, Ordering::Relaxed);
    })
    .unwrap();
    let g = ep_got.clone();
    ep.set_reply_handler(2, move |m| g.store(m.arg(0), Ordering::Release))
        .unwrap();
    ep.set_returned_handler(|r| panic!("returned: {:?}", r.reason()));
    if rt.rank() == 1 {
        rt.request_medium(0, give, &[], &ep.name().to_bytes())
            .unwrap();
    }
    rt.wait_until(|| rt.rank() == 1 || name.lock().unwrap().is_some());
    let (mut core, mut endpoint) = (Vec::new(), Vec::new());
    if rt.rank() == 0 {
        let peer = name.lock().unwrap().expect("rank 1's name");
        let i = ep.map_any(peer, 0x5eed).unwrap();
        let mut k = 0u64;
        for rep in 0..=reps {
            let t = Instant::now();
            for _ in 0..n {
                k += 1;
                rt.request_short(1, ping, &[k]).unwrap();
                rt.wait_until(|| core_got.load(Ordering::Acquire) == k);
            }
            let c = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            let t = Instant::now();
            for _ in 0..n {
                k += 1;
                ep.request(i, 1, &[k], &[]).unwrap();
                ep.wait_until(|| ep_got.load(Ordering::Acquire) == k);
            }
            let e = t.elapsed().as_secs_f64() * 1e6 / n as f64;
            // The first repetition warms up.
            if rep > 0 {
                core.push(c);
                endpoint.push(e);
            }
        }
        // Tell rank 1 to stop serving: one more request, with k = 0, and its reply.
        ep.request(i, 1, &[0], &[]).unwrap();
        ep.wait_until(|| ep_got.load(Ordering::Acquire) == 0);
    } else {
        ep.wait_until(|| served.load(Ordering::Relaxed) == (reps as u64 + 1) * n + 1);
    }
    rt.barrier();
    if rt.rank() == 0 {
        let (c, e) = (median(core), median(endpoint));
        println!(
            "round trip (median of {reps} x {n}): core short {c:.3} us, endpoint short {e:.3} us, \
             endpoint / core {:.2}",
            e / c
        );
    }
}
