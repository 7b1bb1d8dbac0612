//! Which transport carried what: `routes RANKS_PER_NODE [K]`.
//!
//! Run on emulated nodes (`volley run --ranks-per-node RANKS_PER_NODE`). Every rank sends K
//! (default 200) short requests to every other rank and answers each with a reply; then each
//! rank checks, from counter snapshots taken around the exchange, that the messages to and
//! from ranks of its own node went through shared memory and all others through the
//! network: exactly 2·K per off-node peer counted as network traffic (K requests and K
//! replies each way), nothing more, and `is_local` agrees with the node layout the launcher
//! was asked for. Prints one line per rank with the split.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use volley::Runtime;
use volley_tests::{arg_u64, fail};

fn main() {
    let per_node = arg_u64(0, 1) as usize;
    let k = arg_u64(1, 200);
    let replies = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let rep = {
        let replies = replies.clone();
        b.reply_handler("routes-reply", move |_| {
            replies.fetch_add(1, Ordering::Relaxed);
        })
    };
    let req = {
        let requests = requests.clone();
        b.request_handler("routes-request", move |m, token| {
            requests.fetch_add(1, Ordering::Relaxed);
            token.reply_short(rep, &[m.arg(0)]).expect("reply");
        })
    };
    let rt = b.build().expect("build");
    let (me, size) = (rt.rank(), rt.size());
    let node = |r: usize| r / per_node;
    for r in 0..size {
        if rt.is_local(r) != (node(r) == node(me)) {
            fail(
                me,
                1,
                &format!(
                    "routes: rank {me}: is_local({r}) = {} but nodes are {} and {}",
                    rt.is_local(r),
                    node(me),
                    node(r)
                ),
            );
        }
    }
    let off_node = (0..size).filter(|&r| node(r) != node(me)).count() as u64;
    let peers = size as u64 - 1;
    // Before the barrier: requests of ranks that leave it early are handled while this rank
    // still waits in it, and must count. Barrier notices are runtime messages, not counted.
    let before = rt.stats();
    rt.barrier();
    for i in 0..k {
        for r in (0..size).filter(|&r| r != me) {
            rt.request_short(r, req, &[i]).expect("request");
        }
    }
    rt.wait_until(|| {
        replies.load(Ordering::Relaxed) == k * peers
            && requests.load(Ordering::Relaxed) == k * peers
    });
    let after = rt.stats();
    let sent = |s: &volley::Stats| s.sent.iter().flatten().sum::<u64>();
    let total = sent(&after) - sent(&before);
    let net_sent = after.network.sent - before.network.sent;
    let net_handled = after.network.handled - before.network.handled;
    let expect_net = 2 * k * off_node;
    if total != 2 * k * peers || net_sent != expect_net || net_handled != expect_net {
        fail(
            me,
            1,
            &format!(
                "routes: rank {me}: sent {total} (expected {}), through the network sent \
             {net_sent} and handled {net_handled} (expected {expect_net} each)",
                2 * k * peers
            ),
        );
    }
    // A rank with node-mates polls the network adaptively (every 8 to 32 polls); a rank
    // alone on its node has nothing else to poll and polls it every time.
    let interval = after.network.interval;
    let alone = (0..size).all(|r| r == me || node(r) != node(me));
    let interval_ok = match (off_node > 0, alone) {
        (false, _) => interval == 0,
        (true, true) => interval == 1,
        (true, false) => (8..=32).contains(&interval),
    };
    if !interval_ok {
        fail(
            me,
            1,
            &format!("routes: rank {me}: network poll interval {interval}"),
        );
    }
    if off_node > 0 && after.network.transport_stats.packets_sent == 0 {
        fail(
            me,
            1,
            &format!("routes: rank {me}: network traffic but no packets sent"),
        );
    }
    println!(
        "routes: rank {me} node {}: {} messages through shared memory, {net_sent} through {}",
        node(me),
        total - net_sent,
        if off_node > 0 {
            after.network.transport
        } else {
            "the network (none)"
        }
    );
    rt.finalize();
}
