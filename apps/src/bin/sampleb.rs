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

use volley_apps::{check_sorted, die, hash, input_checksum, must, run, Ctx, Outcome, Rng};
use volley_global::{Global, Layout, Op};

/// Samples each rank contributes to the choice of splitters.
const OVERSAMPLE: usize = 256;

/// Chooses the `PROCS - 1` splitters from a random sample of every rank's keys (collective):
/// gathered and sorted on rank 0, broadcast from there.
fn splitters(g: &Global<'_>, keys: &[u64]) -> Vec<u64> {
    let (me, p) = (g.my_proc(), g.procs());
    let mut rng = Rng::new(hash(11, me as u64));
    let sample: Vec<u64> = (0..OVERSAMPLE)
        .map(|_| {
            keys.get(rng.next_u64() as usize % keys.len().max(1))
                .copied()
                .unwrap_or(0)
        })
        .collect();
    let mut all = vec![0u64; if me == 0 { OVERSAMPLE * p } else { 0 }];
    must(me, "gather", g.gather(0, &sample, &mut all));
    let mut spl = vec![0u64; p - 1];
    if me == 0 {
        all.sort_unstable();
        for (i, s) in spl.iter_mut().enumerate() {
            *s = all[(i + 1) * OVERSAMPLE];
        }
    }
    must(me, "broadcast", g.broadcast(0, &mut spl));
    spl
}

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
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(16384, 1 << 24) as usize;
    let n = per * p;
    let mut keys: Vec<u64> = (0..per).map(|l| hash(7, (me * per + l) as u64)).collect();
    let input = input_checksum(g, &keys).unwrap_or_else(|e| die(me, &e));
    let (mut mine, seconds) = ctx.timed(|| {
        let spl = splitters(g, &keys);
        keys.sort_unstable();
        let mut mine = exchange(g, &keys, &spl);
        // Sorted runs, one per source: the stable sort merges them.
        mine.sort();
        mine
    });
    if ctx.corrupt && mine.len() > 1 {
        mine.swap(0, 1);
    }
    let verified = check_sorted(g, &mine, input);
    Outcome {
        problem: format!("{n} keys"),
        seconds,
        verified,
    }
}

fn main() {
    run("sampleb", |_, _| (), body);
}
