//! Radix sort with one signaling store per key (seed 004's `radix`).
//!
//! LSD radix sort of 64-bit keys, 8 bits per pass. Each pass: count the keys of each digit
//! locally, find where this rank's keys of each digit go with a global exclusive scan of the
//! counts (keys of smaller digits everywhere, then keys of this digit on lower ranks), `store`
//! every key to its place in a blocked spread array, and `all_store_sync` before reading the
//! permuted keys back as this rank's part. Fine-grained, one-way remote events: the pattern
//! whose cost follows the store's under each strategy.

use volley_apps::sort::{check_keys, destinations, digit, input_keys, BITS, DIGITS, PASSES};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::Layout;

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(4096, 1 << 20) as usize;
    let n = per * p;
    let (mut keys, input) = input_keys(g, per);
    let dst = must(me, "alloc", g.all_spread_alloc::<u64>(n, Layout::Blocked));
    let ((), seconds) = ctx.timed(|| {
        for pass in 0..PASSES {
            let shift = pass * BITS;
            let mut counts = vec![0u64; DIGITS];
            for &k in &keys {
                counts[digit(k, shift)] += 1;
            }
            let mut next = destinations(g, &counts);
            for &k in &keys {
                let d = digit(k, shift);
                must(me, "store", g.store(dst.ptr(next[d] as usize), &k));
                next[d] += 1;
            }
            must(me, "all_store_sync", g.all_store_sync());
            // SAFETY: every store of this pass is in, and the next pass's stores start only
            // after every rank has copied its part: the next pass's all-reduce of the counts
            // (in `destinations`) needs every rank's contribution before any rank stores
            // again.
            keys = unsafe { dst.local_slice() }.to_vec();
        }
    });
    let verified = check_keys(ctx, &mut keys, input);
    g.free(dst);
    Outcome {
        problem: format!("{n} keys"),
        seconds,
        verified,
    }
}

fn main() {
    run("radix", |_, _| (), body);
}
