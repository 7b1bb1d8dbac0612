//! Radix sort with bulk stores (seed 004's `radixb`).
//!
//! The same LSD radix sort as `radix` (64-bit keys, 8 bits per pass, a global exclusive scan
//! of the digit counts to find where this rank's keys of each digit go in a blocked spread
//! array), but the keys travel in bulk. Each pass first counting-sorts this rank's keys by the
//! digit (stably), so the keys of one digit lie together here; their destination is one
//! contiguous range of the global array, which may cross rank boundaries. That range is cut
//! at the boundaries and every piece is sent with one `bulk_store`: at most `256 + PROCS`
//! stores per rank and pass instead of one per key. `all_store_sync` then waits for every
//! byte, and each rank reads its part back as its keys for the next pass.
//!
//! Bulk one-way stores: the message count, and with it the per-message overhead that
//! separates the strategies in `radix`, drops by the average run length (thousands of keys),
//! so what is left is bandwidth and the local counting sort.

use volley_apps::sort::{check_keys, destinations, digit, input_keys, BITS, DIGITS, PASSES};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

/// Stable counting sort of `keys` by digit into `out`; returns how many keys have each digit.
fn local_counting_sort(keys: &[u64], out: &mut [u64], shift: u32) -> Vec<u64> {
    let mut counts = vec![0u64; DIGITS];
    for &k in keys {
        counts[digit(k, shift)] += 1;
    }
    let mut at = vec![0usize; DIGITS];
    let mut sum = 0;
    for d in 0..DIGITS {
        at[d] = sum;
        sum += counts[d] as usize;
    }
    for &k in keys {
        let d = digit(k, shift);
        out[at[d]] = k;
        at[d] += 1;
    }
    counts
}

/// Stores `run` at global index `at` of `dst` (blocked, `per` keys a rank): one `bulk_store`
/// for each rank the range covers.
fn store_run(g: &Global<'_>, dst: &SpreadArray<u64>, per: usize, mut at: usize, mut run: &[u64]) {
    while !run.is_empty() {
        let (rank, local) = (at / per, at % per);
        let n = run.len().min(per - local);
        must(
            g.my_proc(),
            "bulk_store",
            g.bulk_store(dst.ptr_on(rank, local), &run[..n]),
        );
        run = &run[n..];
        at += n;
    }
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(16384, 1 << 23) as usize;
    let n = per * p;
    let (mut keys, input) = input_keys(g, per);
    let dst = must(me, "alloc", g.all_spread_alloc::<u64>(n, Layout::Blocked));
    let mut by_digit = vec![0u64; per];
    let ((), seconds) = ctx.timed(|| {
        for pass in 0..PASSES {
            let shift = pass * BITS;
            let counts = local_counting_sort(&keys, &mut by_digit, shift);
            let first = destinations(g, &counts);
            let mut from = 0;
            for d in 0..DIGITS {
                let len = counts[d] as usize;
                store_run(g, &dst, per, first[d] as usize, &by_digit[from..from + len]);
                from += len;
            }
            must(me, "all_store_sync", g.all_store_sync());
            // SAFETY: every store of this pass is in, and the next pass's stores start only
            // after every rank has copied its part (the all_reduce in `destinations` needs
            // every rank's counts, which a rank computes only after its copy).
            keys.copy_from_slice(unsafe { dst.local_slice() });
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
    run("radixb", |_, _| (), body);
}
