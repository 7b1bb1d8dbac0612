//! Bitonic sort of blocks (seed 004's `bitonic`).
//!
//! Each rank sorts its block locally; then the ranks run Batcher's bitonic merging network
//! with whole blocks as the elements: stage `k` (1 to log₂ PROCS) merges bitonic sequences of
//! `2^k` ranks in `k` steps, and in the step of distance `2^j` each rank pairs with the rank
//! whose number differs in bit `j`. A pair compare-splits its blocks: both merge the two
//! blocks, the one that must hold the smaller keys (the lower rank of an ascending sequence,
//! the upper rank of a descending one) keeps the lower half and the other the upper half.
//! Blocks stay sorted ascending throughout; only who keeps which half follows the network.
//! After `log₂ PROCS · (log₂ PROCS + 1) / 2` steps every block is sorted and each rank's last
//! key is at most the next rank's first.
//!
//! Communication: in every step each rank sends its whole block to its partner with one
//! `bulk_store` into the partner's inbox, and `all_store_sync` ends the step: bulk, and in
//! phases separated by a collective, so the strategies differ only by bandwidth. The inbox
//! has two slots used by alternate steps: a rank may store into the other slot of a partner
//! that has not yet merged, but never into the slot it is reading, since reaching the step
//! after next needs the next step's `all_store_sync`, which that partner enters only once it
//! has merged.
//!
//! Requires a power-of-two rank count; on any other, rank 0 says so and every rank exits with
//! status 2 before doing anything else.

use volley_apps::sort::{check_keys, input_keys, merge_high, merge_low};
use volley_apps::{eprint_line, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

/// One step of the network: exchanges blocks with `partner` through slot `slot` of the inbox
/// (collective), then keeps the lower or upper half of the two blocks in `block`.
fn compare_split(
    g: &Global<'_>,
    inbox: &SpreadArray<u64>,
    slot: usize,
    partner: usize,
    keep_low: bool,
    block: &mut Vec<u64>,
    scratch: &mut Vec<u64>,
) {
    let (me, per) = (g.my_proc(), block.len());
    must(
        me,
        "bulk_store",
        g.bulk_store(inbox.ptr_on(partner, slot * per), block),
    );
    must(me, "all_store_sync", g.all_store_sync());
    // SAFETY: the partner's block is in (all_store_sync), and nobody stores into this slot
    // again before this rank has entered the next step's all_store_sync (module docs).
    let theirs = &unsafe { inbox.local_slice() }[slot * per..(slot + 1) * per];
    if keep_low {
        merge_low(block, theirs, scratch);
    } else {
        merge_high(block, theirs, scratch);
    }
    std::mem::swap(block, scratch);
}

/// The bitonic merging network over ranks, on every rank's sorted block.
fn bitonic(g: &Global<'_>, inbox: &SpreadArray<u64>, block: &mut Vec<u64>) {
    let (me, p) = (g.my_proc(), g.procs());
    let mut scratch = vec![0u64; block.len()];
    let mut step = 0;
    let mut k = 2;
    while k <= p {
        let ascending = me & k == 0;
        let mut j = k / 2;
        while j > 0 {
            let partner = me ^ j;
            let keep_low = (me < partner) == ascending;
            compare_split(g, inbox, step % 2, partner, keep_low, block, &mut scratch);
            step += 1;
            j /= 2;
        }
        k *= 2;
    }
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    if !p.is_power_of_two() {
        if me == 0 {
            eprint_line(&format!(
                "bitonic: needs a power-of-two number of ranks (1, 2, 4, 8, ...), not {p}"
            ));
        }
        // Once rank 0 has said why: the first rank to exit stops the job.
        let _ = g.barrier();
        std::process::exit(2);
    }
    let per = ctx.size.pick(16384, 1 << 24) as usize;
    let n = per * p;
    let (mut keys, input) = input_keys(g, per);
    let inbox = must(
        me,
        "alloc",
        g.all_spread_alloc::<u64>(2 * n, Layout::Blocked),
    );
    let ((), seconds) = ctx.timed(|| {
        keys.sort_unstable();
        bitonic(g, &inbox, &mut keys);
    });
    let verified = check_keys(ctx, &mut keys, input);
    g.free(inbox);
    Outcome {
        problem: format!("{n} keys"),
        seconds,
        verified,
    }
}

fn main() {
    run("bitonic", |_, _| (), body);
}
