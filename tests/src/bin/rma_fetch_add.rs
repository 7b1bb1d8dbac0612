//! One-sided fetch-and-add on one word: `rma_fetch_add [M]`.
//!
//! Every rank (rank 0 too) applies M (default 1000) remote `fetch_add(.., 1)` to one word of a
//! symmetric segment at rank 0, on the path `VOLLEY_RMA` selects. The values one rank gets back
//! must increase; the ranks send them to rank 0 in medium requests (not through the layer under
//! test), and rank 0 checks that they are exactly {0, …, P·M−1}, each once, and that the word
//! ends at P·M while the words around it keep the values rank 0 wrote there. Every rank then
//! reads the word back with an atomic load and a get. The AM statistics show that the path is
//! the one asked for: the direct path sends no request for an atomic, the AM path one each.

use volley::rma::{AtomicOp, Perms, Rma};
use volley::Runtime;
use volley_tests::{arg_u64, check_exactly_0_to, fail, join, mix, path_name, Gather};

/// Words in the segment; the counter is one of them, the others are guards.
const WORDS: usize = 16;
/// The counter's word (not the first, so that an offset ignored somewhere shows).
const COUNTER: usize = 5;

fn guard(i: usize) -> u64 {
    mix(0xfadd ^ i as u64)
}

fn main() {
    let m = arg_u64(0, 1000);

    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let gather = Gather::register(&mut b, "rma-fadd-gather");
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let total = m * size as u64;

    let seg = rma
        .alloc_symmetric(WORDS * 8, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    let target = seg.on(0);
    if rank == 0 {
        let image: Vec<u8> = (0..WORDS)
            .flat_map(|i| if i == COUNTER { 0 } else { guard(i) }.to_le_bytes())
            .collect();
        rma.write_local(target, 0, &image).unwrap();
    }
    rt.barrier();

    let before = rt.stats();
    let mut olds = Vec::with_capacity(m as usize);
    for i in 0..m {
        let old = rma
            .fetch_add(target, COUNTER * 8, 1)
            .unwrap_or_else(|e| fail(rank, 1, &format!("fetch_add {i}: {e}")));
        if let Some(&last) = olds.last() {
            if old <= last {
                fail(
                    rank,
                    1,
                    &format!("fetch_add {i} returned {old} after {last}: not increasing"),
                );
            }
        }
        olds.push(old);
    }
    let sent = rt.stats().sent[0][0] - before.sent[0][0];
    // The direct path sends nothing to a rank it maps; ranks of other nodes are served by
    // handlers whatever the path.
    let want_sent = if path == "am" || !rt.is_local(0) {
        m
    } else {
        0
    };
    if sent != want_sent {
        fail(
            rank,
            1,
            &format!(
                "path {path}: {sent} short requests sent for {m} fetch_adds, expected {want_sent}"
            ),
        );
    }

    gather.send(&rt, 0, &olds);
    if rank == 0 {
        let all = gather.collect(&rt, m as usize);
        if let Err(e) = check_exactly_0_to(&all, total) {
            fail(rank, 1, &format!("returned values: {e}"));
        }
        let mut image = vec![0u8; WORDS * 8];
        rma.read_local(target, 0, &mut image).unwrap();
        for (i, w) in image.chunks_exact(8).enumerate() {
            let w = u64::from_le_bytes(w.try_into().unwrap());
            let want = if i == COUNTER { total } else { guard(i) };
            if w != want {
                fail(
                    rank,
                    1,
                    &format!(
                        "word {i} of the segment is {w}, expected {want} (counter is {COUNTER})"
                    ),
                );
            }
        }
    }
    rt.barrier();

    let loaded = rma
        .atomic(target, COUNTER * 8, AtomicOp::Load, 0, 0)
        .unwrap_or_else(|e| fail(rank, 1, &format!("atomic load: {e}")));
    let mut word = [0u8; 8];
    rma.get(target, COUNTER * 8, &mut word)
        .unwrap_or_else(|e| fail(rank, 1, &format!("get: {e}")));
    let got = u64::from_le_bytes(word);
    if loaded != total || got != total {
        fail(
            rank,
            1,
            &format!("after the barrier the counter loads as {loaded} and gets as {got}, expected {total}"),
        );
    }
    rt.barrier();
    if rank == 0 {
        println!(
            "rma_fetch_add: path={path}: {size} ranks x {m} fetch_adds: counter = {total}, \
             returned values are exactly 0..{total}"
        );
    }
}
