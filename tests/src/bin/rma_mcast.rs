//! Seed 002's multicast UPDATE across processes: `rma_mcast [rounds]`.
//!
//! 1. **Bad input** (rank 0): an empty list, a repeated rank, a rank out of range, arity 0 and
//!    an update too large for one message are refused before anything is sent.
//! 2. **Refusals.** Every rank allocates a rank-local segment (random key); rank 0 multicasts
//!    with its own handle to every rank, itself listed last: the other members refuse (their
//!    memory untouched), rank 0 is written, and the error names the member at list position 0.
//! 3. **Exactly once.** Every rank, at once, multicasts `rounds` updates, each to a random
//!    subset of the ranks in random order (itself sometimes included) along a tree of random
//!    arity (1, 2, 3 or the list's length), each into a slot of its own. Each update must
//!    return with one ack. Ranks then multicast a done marker to every rank and serve until
//!    they hold every marker and have nothing left to forward.
//! 4. **Checks.** At every rank, each slot holds its update's pattern when the rank was listed
//!    and zeros otherwise; the updates delivered here equal the number of lists naming this
//!    rank (a duplicate would count twice); the acks received equal this rank's updates, with
//!    no stray ack.

use volley::rma::multicast::Multicast;
use volley::rma::{Error, Perms, Rma};
use volley::Runtime;
use volley_tests::{arg_u64, check_pattern, fail, fill_pattern, join, mix, path_name};

/// Bytes of one update's data, and of its slot.
const DATA: usize = 40;
const SLOT: usize = 64;

/// The list, arity and pattern seed of update `round` of `origin`.
fn plan(origin: usize, round: usize, size: usize) -> (Vec<usize>, usize, u64) {
    let seed = mix((origin as u64) << 32 | round as u64);
    let mut ranks: Vec<usize> = (0..size).collect();
    // Fisher-Yates with the seed's stream, then a prefix.
    let mut x = seed;
    for i in (1..size).rev() {
        x = mix(x);
        ranks.swap(i, (x % (i as u64 + 1)) as usize);
    }
    let n = 1 + (mix(x ^ 1) % size as u64) as usize;
    ranks.truncate(n);
    let arity = match mix(x ^ 2) % 4 {
        0 => 1,
        1 => 2,
        2 => 3,
        _ => n,
    };
    (ranks, arity, seed)
}

fn main() {
    let rounds = arg_u64(0, 100) as usize;
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let mc = Multicast::register(&mut b, &setup);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let mc = mc.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let die = |msg: String| -> ! { fail(rank, 1, &format!("path {path}: {msg}")) };
    let slots = size * rounds;
    let done_at = slots * SLOT;
    let len = done_at + size * 8;
    let seg = rma
        .alloc_symmetric(len, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric({len}): {e}")));
    let mine = seg.on(rank);

    // ---- 1. Bad input -------------------------------------------------------------------------
    if rank == 0 {
        let data = [7u8; 8];
        let bad = |r: Result<(), Error>, what: &str| match r {
            Err(Error::InvalidConfig { .. }) | Err(Error::PayloadTooLarge { .. }) => {}
            Err(Error::Am(volley::am::Error::InvalidRank { .. })) => {}
            other => die(format!("{what}: expected a clear error, got {other:?}")),
        };
        bad(mc.update(&[], mine, 0, &data, 2), "empty list");
        bad(mc.update(&[0, 0], mine, 0, &data, 2), "repeated rank");
        if size > 1 {
            bad(mc.update(&[1, 0, 1], mine, 0, &data, 2), "repeated rank");
        }
        bad(
            mc.update(&[0, size], mine, 0, &data, 2),
            "rank out of range",
        );
        bad(mc.update(&[0], mine, 0, &data, 0), "arity 0");
        let huge = vec![0u8; mc.max_data(1) + 1];
        bad(mc.update(&[0], mine, 0, &huge, 2), "update too large");
        let c = mc.counts();
        if c.acks != 0 || c.delivered != 0 {
            die(format!("refused updates sent something: {c:?}"));
        }
    }

    // ---- 2. Refusals --------------------------------------------------------------------------
    let local = rma
        .alloc(SLOT, Perms::ALL)
        .unwrap_or_else(|e| die(format!("alloc: {e}")));
    rt.barrier();
    if rank == 0 {
        let list: Vec<usize> = (1..size).chain([0]).collect();
        let data = [0xA5u8; DATA];
        match mc.update(&list, local.handle(), 0, &data, 2) {
            Ok(()) if size == 1 => {}
            Err(Error::Refused { rank: r, .. }) if size > 1 && r == list[0] => {}
            other => die(format!("update with a rank-local handle: {other:?}")),
        }
        let mut got = [0u8; DATA];
        rma.read_local(local.handle(), 0, &mut got).unwrap();
        if got != data {
            die("the one member whose key matched was not written".into());
        }
    }
    // Members serve rank 0's refused update (an inner member forwards only inside multicast
    // calls, never in a barrier), then check their memory is untouched.
    mc.serve_until(|| mc.counts().delivered >= 1 && !mc.busy())
        .unwrap_or_else(|e| die(format!("serve: {e}")));
    if rank != 0 {
        let mut got = [1u8; DATA];
        rma.read_local(local.handle(), 0, &mut got).unwrap();
        if got != [0u8; DATA] {
            die("a refusing member's segment was written".into());
        }
    }
    // Before the barrier: past it, others' updates may arrive.
    let base = mc.counts();
    rt.barrier();
    let expect_refused = u64::from(rank != 0);
    if base.refused != expect_refused {
        die(format!(
            "refused {} updates here, expected {expect_refused}",
            base.refused
        ));
    }

    // ---- 3. Every rank multicasts at once ---------------------------------------------------
    let mut data = [0u8; DATA];
    for round in 0..rounds {
        let (list, arity, seed) = plan(rank, round, size);
        fill_pattern(seed, &mut data);
        let at = (rank * rounds + round) * SLOT;
        mc.update(&list, mine, at, &data, arity)
            .unwrap_or_else(|e| die(format!("update {round} to {list:?} (arity {arity}): {e}")));
    }
    let all: Vec<usize> = (0..size).collect();
    mc.update(&all, mine, done_at + rank * 8, &1u64.to_le_bytes(), 2)
        .unwrap_or_else(|e| die(format!("done marker: {e}")));
    let mut markers = vec![0u8; size * 8];
    mc.serve_until(|| {
        rma.read_local(mine, done_at, &mut markers).unwrap();
        markers.chunks(8).all(|m| m[0] == 1) && !mc.busy()
    })
    .unwrap_or_else(|e| die(format!("serve: {e}")));
    rt.barrier();

    // ---- 4. Checks ----------------------------------------------------------------------------
    let mut got = [0u8; DATA];
    let mut listed = 0u64;
    for origin in 0..size {
        for round in 0..rounds {
            let (list, _, seed) = plan(origin, round, size);
            rma.read_local(mine, (origin * rounds + round) * SLOT, &mut got)
                .unwrap();
            if list.contains(&rank) {
                listed += 1;
                if let Some(i) = check_pattern(seed, &got) {
                    die(format!(
                        "update {round} of rank {origin} to {list:?}: byte {i} wrong here"
                    ));
                }
            } else if got != [0u8; DATA] {
                die(format!(
                    "update {round} of rank {origin} to {list:?} reached this unlisted rank"
                ));
            }
        }
    }
    let c = mc.counts();
    let delivered = c.delivered - base.delivered;
    // Every rank's done marker reached every rank.
    if delivered != listed + size as u64 {
        die(format!(
            "{delivered} updates delivered here, {} expected",
            listed + size as u64
        ));
    }
    if c.acks != rounds as u64 + 1 + u64::from(rank == 0) || c.stray != 0 {
        die(format!(
            "{} acks for {} updates, {} stray",
            c.acks,
            rounds + 1,
            c.stray
        ));
    }
    rt.barrier();
    if rank == 0 {
        println!(
            "path={path}: {size} ranks x {rounds} multicasts delivered exactly once to each \
             listed rank and no other, one ack each; bad input and refusals reported"
        );
    }
}
