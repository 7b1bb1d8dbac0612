//! Pieces the sorting programs share: their input and its check, the merges of a
//! compare-split (`bitonic`, `shell`), the choice of splitters (`sample`, `sampleb`), and the
//! digits and their global placement (`radix`, `radixb`).

use crate::{check_sorted, die, hash, input_checksum, must, Ctx, Rng};
use volley_global::{Global, Op};

/// This rank's `per` input keys (key i of the whole input is `hash(7, i)`, rank r holding
/// keys r·per to (r+1)·per) and the checksum of every rank's keys (collective:
/// [`input_checksum`]).
pub fn input_keys(g: &Global<'_>, per: usize) -> (Vec<u64>, [u64; 2]) {
    let me = g.my_proc();
    let keys: Vec<u64> = (0..per).map(|l| hash(7, (me * per + l) as u64)).collect();
    let input = input_checksum(g, &keys).unwrap_or_else(|e| die(me, &e));
    (keys, input)
}

/// The check of a sort (collective): under `--corrupt` swaps this rank's first two keys,
/// then [`check_sorted`] against the input's checksum `input`.
pub fn check_keys(ctx: &Ctx<'_, '_>, keys: &mut [u64], input: [u64; 2]) -> Result<(), String> {
    if ctx.corrupt && keys.len() > 1 {
        keys.swap(0, 1);
    }
    check_sorted(ctx.g, keys, input)
}

/// The `out.len()` smallest keys of sorted `a` and `b`, in order, into `out`.
pub fn merge_low(a: &[u64], b: &[u64], out: &mut [u64]) {
    let (mut i, mut j) = (0, 0);
    for o in out.iter_mut() {
        if j == b.len() || (i < a.len() && a[i] <= b[j]) {
            *o = a[i];
            i += 1;
        } else {
            *o = b[j];
            j += 1;
        }
    }
}

/// The `out.len()` largest keys of sorted `a` and `b`, in order, into `out`.
pub fn merge_high(a: &[u64], b: &[u64], out: &mut [u64]) {
    let (mut i, mut j) = (a.len(), b.len());
    for o in out.iter_mut().rev() {
        if j == 0 || (i > 0 && a[i - 1] > b[j - 1]) {
            i -= 1;
            *o = a[i];
        } else {
            j -= 1;
            *o = b[j];
        }
    }
}

/// Samples each rank contributes to the choice of splitters.
pub const OVERSAMPLE: usize = 256;

/// Chooses the `PROCS - 1` splitters from a random sample of every rank's keys (collective):
/// gathered and sorted on rank 0, broadcast from there.
pub fn splitters(g: &Global<'_>, keys: &[u64]) -> Vec<u64> {
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

/// Bits of a radix sort's digit.
pub const BITS: u32 = 8;
/// Passes of a radix sort over 64-bit keys.
pub const PASSES: u32 = 64 / BITS;
/// Values a digit takes.
pub const DIGITS: usize = 1 << BITS;

/// The digit of `k` that pass `shift` sorts by.
#[inline]
pub fn digit(k: u64, shift: u32) -> usize {
    ((k >> shift) as usize) & (DIGITS - 1)
}

/// Global index of the first key of each digit that this rank sends, given how many keys of
/// each digit it has: keys of smaller digits on every rank, then keys of this digit on lower
/// ranks (collective: an exclusive scan and an all-reduce of the counts).
pub fn destinations(g: &Global<'_>, counts: &[u64]) -> Vec<u64> {
    let me = g.my_proc();
    let mut below = counts.to_vec();
    must(me, "scan", g.exclusive_scan(&mut below, Op::Sum, 0));
    let mut totals = counts.to_vec();
    must(me, "all_reduce", g.all_reduce(&mut totals, Op::Sum));
    let mut start = 0;
    (0..DIGITS)
        .map(|d| {
            let first = start + below[d];
            start += totals[d];
            first
        })
        .collect()
}
