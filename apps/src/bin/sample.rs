//! Sample sort with one atomic remote push per key (seed 004's `sample`).
//!
//! Every rank draws a random sample of its keys (`OVERSAMPLE` of them); rank 0 gathers the
//! samples, sorts them and picks `PROCS - 1` evenly spaced splitters, which it broadcasts.
//! Splitter `i - 1` and splitter `i` bound the keys rank `i` owns. Each rank then moves every
//! key to its owner with `push` onto the owner's bucket: one fine-grained, one-way atomic
//! append per key, whose slot is taken at the owner. `all_store_sync` waits until every push
//! is in, each rank `take`s its bucket and sorts it locally. The remote event here is the
//! atomic push (not a plain store as in `radix`): under `proc` and `np` one Active Message per
//! key runs the append at the owner; under `hw` on one node the pusher takes the slot itself
//! with a fetch-and-add on the owner's mapped memory and writes the key there.
//!
//! Buckets: each holds `2 · keys per rank + 1024` keys. With `OVERSAMPLE` samples per rank a
//! bucket's share of the keys deviates from `1 / PROCS` by about `1 / √OVERSAMPLE` (6 %), so
//! twice the average is never reached at these sizes. Should a bucket still overflow, the
//! pushes beyond its capacity are dropped and its owner's `take` reports `BucketOverflow`;
//! every rank then learns of it (an all-reduce of the flag), the buckets are reallocated
//! twice as large and the keys pushed again, so the result is right either way.

use volley_apps::sort::{check_keys, input_keys, splitters};
use volley_apps::{die, eprint_line, must, run, Ctx, Outcome};
use volley_global::{Bucket, Global, GlobalError, Op};

/// The rank that owns key `k`: the number of splitters at or below it.
fn owner(spl: &[u64], k: u64) -> usize {
    spl.partition_point(|&s| s <= k)
}

/// Pushes every key onto its owner's bucket, one atomic push per key. An overflow is not an
/// error here: the owner's `take` reports it.
fn push_all(g: &Global<'_>, bucket: &Bucket<u64>, keys: &[u64], spl: &[u64]) {
    for &k in keys {
        match g.push(bucket, owner(spl, k), &k) {
            Ok(()) | Err(GlobalError::BucketOverflow { .. }) => {}
            Err(e) => die(g.my_proc(), &format!("push: {e}")),
        }
    }
}

/// Moves every key to its owner; returns this rank's keys and the bucket (reallocated larger
/// if one overflowed).
fn exchange(
    g: &Global<'_>,
    mut bucket: Bucket<u64>,
    keys: &[u64],
    spl: &[u64],
) -> (Vec<u64>, Bucket<u64>) {
    let me = g.my_proc();
    loop {
        push_all(g, &bucket, keys, spl);
        must(me, "all_store_sync", g.all_store_sync());
        let got = match g.take(&bucket) {
            Ok(v) => Some(v),
            Err(GlobalError::BucketOverflow { .. }) => None,
            Err(e) => die(me, &format!("take: {e}")),
        };
        let overflowed = must(
            me,
            "all_reduce",
            g.all_reduce_one(u64::from(got.is_none()), Op::Max),
        );
        if let (0, Some(v)) = (overflowed, got) {
            return (v, bucket);
        }
        let cap = bucket.capacity() * 2;
        if me == 0 {
            eprint_line(&format!(
                "sample: a bucket overflowed; pushing again into buckets of {cap}"
            ));
        }
        g.free_bucket(bucket);
        bucket = must(me, "bucket alloc", g.all_bucket_alloc(cap));
    }
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(16384, 1 << 23) as usize;
    let n = per * p;
    let (keys, input) = input_keys(g, per);
    let bucket = must(
        me,
        "bucket alloc",
        g.all_bucket_alloc::<u64>(2 * per + 1024),
    );
    let ((mut mine, bucket), seconds) = ctx.timed(|| {
        let spl = splitters(g, &keys);
        let (mut mine, bucket) = exchange(g, bucket, &keys, &spl);
        mine.sort_unstable();
        (mine, bucket)
    });
    let verified = check_keys(ctx, &mut mine, input);
    g.free_bucket(bucket);
    Outcome {
        problem: format!("{n} keys"),
        seconds,
        verified,
    }
}

fn main() {
    run("sample", |_, _| (), body);
}
