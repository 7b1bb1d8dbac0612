//! Radix sort with one signaling store per key (seed 004's `radix`).
//!
//! LSD radix sort of 64-bit keys, 8 bits per pass. Each pass: count the keys of each digit
//! locally, find where this rank's keys of each digit go with a global exclusive scan of the
//! counts (keys of smaller digits everywhere, then keys of this digit on lower ranks), `store`
//! every key to its place in a blocked spread array, and `all_store_sync` before reading the
//! permuted keys back as this rank's part. Fine-grained, one-way remote events: the pattern
//! whose cost follows the store's under each strategy.

use volley_apps::{check_sorted, die, hash, input_checksum, must, run, Ctx, Outcome};
use volley_global::{Layout, Op};

const BITS: u32 = 8;
const PASSES: u32 = 64 / BITS;
const DIGITS: usize = 1 << BITS;

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(4096, 1 << 20) as usize;
    let n = per * p;
    let mut keys: Vec<u64> = (0..per).map(|l| hash(7, (me * per + l) as u64)).collect();
    let input = input_checksum(g, &keys).unwrap_or_else(|e| die(me, &e));
    let dst = must(me, "alloc", g.all_spread_alloc::<u64>(n, Layout::Blocked));
    let ((), seconds) = ctx.timed(|| {
        for pass in 0..PASSES {
            let shift = pass * BITS;
            let digit = |k: u64| ((k >> shift) as usize) & (DIGITS - 1);
            let mut counts = vec![0u64; DIGITS];
            for &k in &keys {
                counts[digit(k)] += 1;
            }
            let mut below = counts.clone();
            must(me, "scan", g.exclusive_scan(&mut below, Op::Sum, 0));
            let mut totals = counts;
            must(me, "all_reduce", g.all_reduce(&mut totals, Op::Sum));
            let mut next = vec![0u64; DIGITS];
            let mut start = 0;
            for d in 0..DIGITS {
                next[d] = start + below[d];
                start += totals[d];
            }
            for &k in &keys {
                let d = digit(k);
                must(me, "store", g.store(dst.ptr(next[d] as usize), &k));
                next[d] += 1;
            }
            must(me, "all_store_sync", g.all_store_sync());
            // SAFETY: every store of this pass is in, and the next pass's stores start only
            // after every rank has copied its part: the next pass's all-reduce of the counts
            // needs every rank's contribution before any rank stores again.
            keys = unsafe { dst.local_slice() }.to_vec();
        }
    });
    if ctx.corrupt && keys.len() > 1 {
        keys.swap(0, 1);
    }
    let verified = check_sorted(g, &keys, input);
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
