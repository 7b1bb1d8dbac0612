//! Sample sort with bulk stores (seed 004's `sampleb`).
//!
//! Splitters as in `sample`: a random sample of `OVERSAMPLE` keys per rank, gathered and
//! sorted on rank 0, `PROCS - 1` evenly spaced splitters broadcast to all. The keys then move
//! in bulk. Each rank sorts its keys first, so the keys bound for one rank are one contiguous
//! run, found by a binary search per splitter. An exclusive scan of the per-destination
//! counts gives, for every destination, where this rank's run goes among the runs of all
//! ranks bound there (runs land in source-rank order), and an all-reduce of the counts gives
//! every rank's total, whose maximum sizes a blocked spread array exactly: no overflow can
//! happen. Each rank then sends each run with one `bulk_store` to its slot at the owner and
//! `all_store_sync` waits for them all. What arrives is `PROCS` sorted runs, which a stable
//! sort (a run-detecting merge sort) merges in `O(n log PROCS)`.
//!
//! Bulk one-way stores, `PROCS` per rank: the per-key events of `sample` become one message
//! stream per pair of ranks, so the strategies differ only by bandwidth.

use volley_apps::sort::{check_keys, input_keys, splitters};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::{Global, Layout, Op};

/// Where each rank's run starts in `sorted` (plus the end): rank `i` owns the keys from
/// splitter `i - 1` (inclusive) to splitter `i` (exclusive).
fn run_bounds(sorted: &[u64], spl: &[u64]) -> Vec<usize> {
    let mut b = Vec::with_capacity(spl.len() + 2);
    b.push(0);
    b.extend(spl.iter().map(|&s| sorted.partition_point(|&k| k < s)));
    b.push(sorted.len());
    b
}

/// Sends every run to its owner with one `bulk_store` each; returns this rank's keys, the
/// runs of every source in rank order (collective).
fn exchange(g: &Global<'_>, sorted: &[u64], spl: &[u64]) -> Vec<u64> {
    let (me, p) = (g.my_proc(), g.procs());
    let bounds = run_bounds(sorted, spl);
    let counts: Vec<u64> = bounds.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    let mut slot = counts.clone();
    must(me, "scan", g.exclusive_scan(&mut slot, Op::Sum, 0));
    let mut totals = counts;
    must(me, "all_reduce", g.all_reduce(&mut totals, Op::Sum));
    let cap = totals.iter().copied().max().unwrap_or(0).max(1) as usize;
    let dst = must(
        me,
        "alloc",
        g.all_spread_alloc::<u64>(cap * p, Layout::Blocked),
    );
    for k in 1..=p {
        // Start with the next rank, so that not every rank sends to rank 0 first.
        let r = (me + k) % p;
        let run = &sorted[bounds[r]..bounds[r + 1]];
        if !run.is_empty() {
            must(
                me,
                "bulk_store",
                g.bulk_store(dst.ptr_on(r, slot[r] as usize), run),
            );
        }
    }
    must(me, "all_store_sync", g.all_store_sync());
    // SAFETY: every store is in, and nothing writes `dst` again before it is freed.
    let mine = unsafe { dst.local_slice() }[..totals[me] as usize].to_vec();
    g.free(dst);
    mine
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, p) = (ctx.g, ctx.procs());
    let per = ctx.size.pick(16384, 1 << 24) as usize;
    let n = per * p;
    let (mut keys, input) = input_keys(g, per);
    let (mut mine, seconds) = ctx.timed(|| {
        let spl = splitters(g, &keys);
        keys.sort_unstable();
        let mut mine = exchange(g, &keys, &spl);
        // Sorted runs, one per source: the stable sort merges them.
        mine.sort();
        mine
    });
    let verified = check_keys(ctx, &mut mine, input);
    Outcome {
        problem: format!("{n} keys"),
        seconds,
        verified,
    }
}

fn main() {
    run("sampleb", |_, _| (), body);
}
