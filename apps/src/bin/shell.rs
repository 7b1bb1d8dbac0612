//! Shell sort of blocks over ranks (seed 004's `shell`).
//!
//! Each rank sorts its block locally. Then, as in Shell's sort, ranks far apart are put in
//! order first and the distance diminishes: for the increments `h = PROCS/2, PROCS/4, ..., 1`
//! the rank `i` with `(i / h)` even compare-splits with rank `i + h`, the lower rank keeping
//! the smaller half of the two blocks. This moves most keys close to their final rank in
//! `log₂ PROCS` steps, but does not sort; a last phase of odd-even transposition (pairs
//! `(0,1), (2,3), ...` then `(1,2), (3,4), ...`, alternately) finishes, and stops as soon as
//! the blocks are in order. It works for any rank count.
//!
//! Every step starts with an `all_gather` of each rank's (smallest, largest) key. From it
//! every rank knows whether the blocks are already in order (which ends the last phase: the
//! "changed" test of odd-even transposition, with no extra all-reduce), which pairs of the
//! step are already ordered (they skip the exchange), and, for the others, which keys can
//! cross: of two sorted blocks only the lower block's keys above the upper one's smallest
//! key, and the upper block's keys below the lower one's largest, can change sides. Each
//! rank of an unordered pair sends just those, with one `store` of their count and one
//! `bulk_store` of the keys into its partner's inbox; `all_store_sync` ends the step, and
//! each merges what it received with its block, keeping its half. So little moves once the
//! blocks are nearly in order, and nothing at all for a pair already in order.
//!
//! Communication: bulk one-way stores of variable size between pairs at a diminishing
//! distance, in phases separated by small collectives. The one inbox a rank has is safe to
//! reuse at every step: nobody stores into it before the next step's `all_gather`, which this
//! rank enters only once it has merged.

use volley_apps::sort::{check_keys, input_keys, merge_high, merge_low};
use volley_apps::{die, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

/// Every rank's (smallest, largest) key (collective). An empty block is (MAX, 0): in order
/// with anything.
fn bounds(g: &Global<'_>, block: &[u64]) -> Vec<[u64; 2]> {
    let mine = [
        block.first().copied().unwrap_or(u64::MAX),
        block.last().copied().unwrap_or(0),
    ];
    let mut all = vec![[0u64; 2]; g.procs()];
    must(g.my_proc(), "all_gather", g.all_gather(&[mine], &mut all));
    all
}

/// Whether every rank's largest key is at most the next rank's smallest.
fn in_order(b: &[[u64; 2]]) -> bool {
    b.windows(2).all(|w| w[0][1] <= w[1][0])
}

/// One compare-split step (collective): this rank pairs with `partner` (or sits out), given
/// every rank's bounds `b` at the start of the step.
fn step(
    g: &Global<'_>,
    inbox: &SpreadArray<u64>,
    partner: Option<usize>,
    block: &mut Vec<u64>,
    scratch: &mut Vec<u64>,
    b: &[[u64; 2]],
) {
    let me = g.my_proc();
    // The lower rank of an unordered pair sends its keys above the upper's smallest; the
    // upper, its keys below the lower's largest.
    let send = partner.and_then(|q| {
        if me < q && b[me][1] > b[q][0] {
            let from = block.partition_point(|&k| k <= b[q][0]);
            Some((q, &block[from..]))
        } else if q < me && b[q][1] > b[me][0] {
            let to = block.partition_point(|&k| k < b[q][1]);
            Some((q, &block[..to]))
        } else {
            None
        }
    });
    if let Some((q, keys)) = send {
        must(
            me,
            "store",
            g.store(inbox.ptr_on(q, 0), &(keys.len() as u64)),
        );
        must(me, "bulk_store", g.bulk_store(inbox.ptr_on(q, 1), keys));
    }
    must(me, "all_store_sync", g.all_store_sync());
    let Some((q, _)) = send else { return };
    let count = inbox.local_get(0) as usize;
    // SAFETY: the partner's keys are in (all_store_sync), and nobody stores into this inbox
    // again before this rank has entered the next step's all_gather (module docs).
    let theirs = &unsafe { inbox.local_slice() }[1..1 + count];
    if me < q {
        merge_low(block, theirs, scratch);
    } else {
        merge_high(block, theirs, scratch);
    }
    std::mem::swap(block, scratch);
}

/// The partner of `me` at increment `h`: `me + h` if `me / h` is even, else `me - h`.
fn shell_partner(me: usize, h: usize, p: usize) -> Option<usize> {
    if (me / h) % 2 == 0 {
        Some(me + h).filter(|&q| q < p)
    } else {
        Some(me - h)
    }
}

/// The partner of `me` in odd-even transposition step `t`: pairs `(0,1), (2,3), ...` when
/// `t` is even, `(1,2), (3,4), ...` when odd.
fn odd_even_partner(me: usize, t: usize, p: usize) -> Option<usize> {
    if me % 2 == t % 2 {
        Some(me + 1).filter(|&q| q < p)
    } else {
        me.checked_sub(1)
    }
}

/// The distributed Shell sort of every rank's sorted block.
fn shell(g: &Global<'_>, inbox: &SpreadArray<u64>, block: &mut Vec<u64>) {
    let (me, p) = (g.my_proc(), g.procs());
    let mut scratch = vec![0u64; block.len()];
    let mut h = p / 2;
    while h >= 1 {
        let b = bounds(g, block);
        step(g, inbox, shell_partner(me, h, p), block, &mut scratch, &b);
        h /= 2;
    }
    // Odd-even transposition sorts P blocks in at most P steps.
    for t in 0..=p {
        let b = bounds(g, block);
        if in_order(&b) {
            return;
        }
        step(
            g,
            inbox,
            odd_even_partner(me, t, p),
            block,
            &mut scratch,
            &b,
        );
    }
    die(
        me,
        &format!("blocks still out of order after {} odd-even steps", p + 1),
    )
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let per = ctx.size.pick(16384, 1 << 24) as usize;
    let n = per * p;
    let (mut keys, input) = input_keys(g, per);
    // Per rank: a count and up to a block of keys.
    let inbox = must(
        me,
        "alloc",
        g.all_spread_alloc::<u64>((per + 1) * p, Layout::Blocked),
    );
    let ((), seconds) = ctx.timed(|| {
        keys.sort_unstable();
        shell(g, &inbox, &mut keys);
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
    run("shell", |_, _| (), body);
}
