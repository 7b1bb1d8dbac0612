//! Symmetric allocation when the ranks' allocations do not agree: `rma_symmetric`.
//!
//! 1. Rank 0 alone allocates a rank-local segment first, so its next segment id differs from
//!    every other rank's: the symmetric allocation must fail on every rank
//!    (`SymmetricMismatch`) and leave no segment behind anywhere.
//! 2. Rank 0 alone fills its segment area, so it has no room: rank 0 gets `SegmentSpace`, the
//!    others `SymmetricMismatch` naming rank 0; again nothing is left behind.
//! 3. With rank 0's local segments freed, a symmetric allocation works on every rank, with
//!    the same id, and every rank can write its right neighbour's copy.
//!
//! A hang (a rank waiting for an allocation the others gave up on) ends in the test's
//! deadline. Prints `path=<path>: symmetric allocation agrees or fails everywhere`.

use volley::rma::Error;
use volley::rma::{Perms, Rma};
use volley::Runtime;
use volley_tests::{fail, join, path_name};

const LEN: usize = 4096;

fn main() {
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    if size < 2 {
        fail(rank, 2, "rma_symmetric needs at least 2 ranks");
    }
    let die = |what: &str| -> ! { fail(rank, 1, &format!("path {path}: {what}")) };

    // 1. Ids that differ.
    let shift = (rank == 0).then(|| rma.alloc(64, Perms::ALL).expect("local alloc"));
    match rma.alloc_symmetric(LEN, Perms::ALL) {
        Err(Error::SymmetricMismatch { rank: other, .. }) if other != rank => {}
        other => die(&format!(
            "ids differ, expected SymmetricMismatch, got {other:?}"
        )),
    }
    rt.barrier();

    // 2. No room on rank 0.
    let filler = (rank == 0).then(|| {
        let room = rt.segment_len() - 64 - LEN / 2;
        rma.alloc(room, Perms::ALL).expect("local filler")
    });
    match (rank, rma.alloc_symmetric(LEN, Perms::ALL)) {
        (0, Err(Error::SegmentSpace { .. })) => {}
        (r, Err(Error::SymmetricMismatch { rank: 0, .. })) if r != 0 => {}
        (_, other) => die(&format!("no room on rank 0, got {other:?}")),
    }
    rt.barrier();

    // 3. Agreement again: the failed allocations left nothing, so after rank 0 frees its local
    // segments every rank makes the same segment.
    for seg in [shift, filler].into_iter().flatten() {
        if !rma.free(seg) {
            die("freeing a local segment");
        }
    }
    let seg = rma
        .alloc_symmetric(LEN, Perms::ALL)
        .unwrap_or_else(|e| die(&format!("agreeing allocation: {e}")));
    let right = (rank + 1) % size;
    rma.put(seg.on(right), 0, &(rank as u64).to_le_bytes())
        .unwrap_or_else(|e| die(&format!("put to the right neighbour: {e}")));
    rt.barrier();
    let mut got = [0u8; 8];
    rma.read_local(seg.on(rank), 0, &mut got)
        .unwrap_or_else(|e| die(&format!("read_local: {e}")));
    let left = (rank + size - 1) % size;
    if u64::from_le_bytes(got) != left as u64 {
        die(&format!(
            "expected {left} from the left neighbour, found {got:?}"
        ));
    }
    if !rma.free_symmetric(seg) {
        die("free_symmetric");
    }
    if rank == 0 {
        println!("path={path}: symmetric allocation agrees or fails everywhere");
    }
}
