//! Compare-and-swap retry loops on one word: `rma_cas [M]`.
//!
//! Every rank increments a counter in the last rank's symmetric segment M (default 500) times,
//! each time with a retry loop: read the word (atomic load), `compare_swap(old, old + 1)`, and on
//! failure read again. A failed swap must return a value other than the expected one and never
//! one smaller than a value already seen (the counter only grows); a successful one returns the
//! expected value. The values each rank swapped away are sent to rank 0, which checks that they
//! are exactly {0, …, P·M−1}, each once (every increment took effect exactly once), and the
//! owner checks that the counter ends at P·M. Then a swap with a wrong expected value must
//! change nothing, and every rank sets a bit with `FetchOr` and offers its rank to `MaxU64` on
//! two more words, whose final values are checked.

use volley::rma::{AtomicOp, Perms, Rma};
use volley::Runtime;
use volley_tests::{arg_u64, check_exactly_0_to, fail, join, path_name, Gather};

/// The counter's word offset (not 0).
const COUNTER: usize = 24;
/// The word every rank ORs its bit into.
const BITS: usize = 32;
/// The word every rank offers its rank to with `MaxU64`.
const MAX: usize = 40;
/// Segment length.
const LEN: usize = 64;

fn main() {
    let m = arg_u64(0, 500);

    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let gather = Gather::register(&mut b, "rma-cas-gather");
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    assert!(size <= 64, "rma_cas: at most 64 ranks (one bit each)");
    let path = path_name(rma.path());
    let total = m * size as u64;
    let owner = size - 1;

    let seg = rma
        .alloc_symmetric(LEN, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    let target = seg.on(owner);
    // The segment starts zeroed (fresh shared memory), which the first reads rely on.
    let load = |what: &str| {
        rma.atomic(target, COUNTER, AtomicOp::Load, 0, 0)
            .unwrap_or_else(|e| fail(rank, 1, &format!("{what}: atomic load: {e}")))
    };

    let mut won = Vec::with_capacity(m as usize);
    let mut retries = 0u64;
    let mut seen = 0u64;
    for i in 0..m {
        loop {
            let old = load("increment");
            if old < seen {
                fail(
                    rank,
                    1,
                    &format!(
                        "increment {i}: loaded {old} after seeing {seen}: the counter went back"
                    ),
                );
            }
            let prev = rma
                .compare_swap(target, COUNTER, old, old + 1)
                .unwrap_or_else(|e| fail(rank, 1, &format!("increment {i}: compare_swap: {e}")));
            if prev == old {
                won.push(old);
                seen = old + 1;
                break;
            }
            if prev < old {
                fail(
                    rank,
                    1,
                    &format!(
                        "increment {i}: swap expecting {old} failed, returning {prev} < {old}"
                    ),
                );
            }
            seen = prev;
            retries += 1;
        }
    }
    // A retry total rides along after the values this rank won.
    won.push(retries);
    gather.send(&rt, 0, &won);
    rt.barrier();

    // Every increment is done: the counter is final everywhere.
    if load("after the barrier") != total {
        fail(
            rank,
            1,
            &format!("the counter ends at {}, expected {total}", load("again")),
        );
    }
    if rank == owner {
        let mut w = [0u8; 8];
        rma.read_local(target, COUNTER, &mut w).unwrap();
        if u64::from_le_bytes(w) != total {
            fail(
                rank,
                1,
                &format!(
                    "read_local sees {}, expected {total}",
                    u64::from_le_bytes(w)
                ),
            );
        }
    }
    rt.barrier();
    if rank == 0 {
        let prev = rma
            .compare_swap(target, COUNTER, total + 1, 7)
            .unwrap_or_else(|e| fail(rank, 1, &format!("compare_swap: {e}")));
        if prev != total || load("after a failed swap") != total {
            fail(
                rank,
                1,
                &format!(
                    "a swap expecting {} returned {prev} or changed the word",
                    total + 1
                ),
            );
        }
    }
    let _ = rma
        .atomic(target, BITS, AtomicOp::FetchOr, 1 << rank, 0)
        .unwrap_or_else(|e| fail(rank, 1, &format!("fetch_or: {e}")));
    let _ = rma
        .atomic(target, MAX, AtomicOp::MaxU64, rank as u64, 0)
        .unwrap_or_else(|e| fail(rank, 1, &format!("max: {e}")));
    rt.barrier();
    let bits = rma.atomic(target, BITS, AtomicOp::Load, 0, 0).unwrap();
    let max = rma.atomic(target, MAX, AtomicOp::Load, 0, 0).unwrap();
    let want_bits = if size == 64 {
        u64::MAX
    } else {
        (1u64 << size) - 1
    };
    if bits != want_bits || max != owner as u64 {
        fail(
            rank,
            1,
            &format!(
                "FetchOr word {bits:#x} (want {want_bits:#x}), MaxU64 word {max} (want {owner})"
            ),
        );
    }

    if rank == 0 {
        let mut all = gather.collect(&rt, m as usize + 1);
        let mut retries = 0;
        for (r, v) in all.iter_mut().enumerate() {
            if v.len() != m as usize + 1 {
                fail(rank, 1, &format!("rank {r} reported {} values", v.len()));
            }
            retries += v.pop().unwrap();
        }
        if let Err(e) = check_exactly_0_to(&all, total) {
            fail(rank, 1, &format!("values swapped away: {e}"));
        }
        println!(
            "rma_cas: path={path}: {size} ranks x {m} CAS increments: counter = {total}, every \
             value swapped exactly once ({retries} retries)"
        );
    }
    rt.barrier();
}
