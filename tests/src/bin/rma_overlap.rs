//! Several ranks writing into one region of rank 0: `rma_overlap`.
//!
//! Rank 0 fills a symmetric segment with a background pattern. Then, at the same time, every
//! rank puts its own patterns into interleaved stripes of two areas of that segment: stripe k
//! belongs to rank k mod P, stripes are 13 bytes wide in the first area and 70001 bytes (more
//! than one AM fragment) in the second, both at odd offsets. A third area is P blocks of 100003
//! bytes written in 2·P rounds separated by barriers: in round k, rank j writes a range of block
//! (j + k) mod P whose start and length change from round to round, so the final image is a
//! patchwork of several rounds in a known order. At the end rank 0 checks its whole segment with
//! `read_local`, and every rank gets it and checks it too, against the image each computes.

use volley::rma::{Perms, Rma};
use volley::Runtime;
use volley_tests::{fail, join, mix, path_name, pattern_byte};

/// Stripe widths and stripes per rank of the two striped areas.
const STRIPES: [(usize, usize); 2] = [(13, 97), (70_001, 2)];
/// Block length of the rounds area.
const BLOCK: usize = 100_003;
/// Background bytes before each area and after the last.
const GAP: usize = 17;

fn seed(kind: u64, index: u64, writer: usize) -> u64 {
    mix(kind << 56 ^ index << 16 ^ writer as u64)
}

/// A write: (offset in the segment, length, pattern seed).
type Write = (usize, usize, u64);
/// Writes with their writers.
type Writes = Vec<(usize, Write)>;

/// Every write of the job, in an order that respects the barriers (the stripes first, in any
/// order since they are disjoint, then the rounds), and the segment length.
fn writes(size: usize) -> (Writes, Vec<Writes>, usize) {
    let mut at = 3; // odd
    let mut stripes = Vec::new();
    for (kind, &(width, per_rank)) in STRIPES.iter().enumerate() {
        at += GAP;
        for k in 0..size * per_rank {
            let writer = k % size;
            stripes.push((writer, (at, width, seed(kind as u64, k as u64, writer))));
            at += width;
        }
    }
    at += GAP;
    let base = at;
    let rounds = (0..2 * size)
        .map(|k| {
            let start = k * 4099 % 5000;
            let len = BLOCK - start - k * 7919 % 5000;
            (0..size)
                .map(|j| {
                    let block = (j + k) % size;
                    let w = (base + block * BLOCK + start, len, seed(2, k as u64, j));
                    (j, w)
                })
                .collect()
        })
        .collect();
    (stripes, rounds, base + size * BLOCK + GAP)
}

fn pattern(w: &Write) -> Vec<u8> {
    (0..w.1).map(|p| pattern_byte(w.2, p)).collect()
}

fn main() {
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let (stripes, rounds, len) = writes(size);

    // The final image, computed alike by every rank, and what wrote it (for messages).
    let background = mix(0xbac6);
    let mut image: Vec<u8> = (0..len).map(|p| pattern_byte(background, p)).collect();
    let mut log: Vec<(Write, String)> = Vec::new();
    for (writer, w) in &stripes {
        log.push((*w, format!("a {}-byte stripe of rank {writer}", w.1)));
    }
    for (k, round) in rounds.iter().enumerate() {
        for (writer, w) in round {
            log.push((*w, format!("round {k} of rank {writer}")));
        }
    }
    for (w, _) in &log {
        for p in 0..w.1 {
            image[w.0 + p] = pattern_byte(w.2, p);
        }
    }
    // The last write that covers a byte.
    let culprit = |p: usize| {
        log.iter()
            .rev()
            .find(|(w, _)| (w.0..w.0 + w.1).contains(&p))
            .map_or("background".to_string(), |(w, d)| {
                format!("byte {} of {d} at {}", p - w.0, w.0)
            })
    };

    let seg = rma
        .alloc_symmetric(len, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric({len}): {e}")));
    let target = seg.on(0);
    if rank == 0 {
        let bg: Vec<u8> = (0..len).map(|p| pattern_byte(background, p)).collect();
        rma.write_local(target, 0, &bg).unwrap();
    }
    rt.barrier();

    for (_, w) in stripes.iter().filter(|(writer, _)| *writer == rank) {
        rma.put(target, w.0, &pattern(w))
            .unwrap_or_else(|e| fail(rank, 1, &format!("put of {} bytes at {}: {e}", w.1, w.0)));
    }
    rt.barrier();
    for round in &rounds {
        for (_, w) in round.iter().filter(|(writer, _)| *writer == rank) {
            rma.put(target, w.0, &pattern(w)).unwrap_or_else(|e| {
                fail(rank, 1, &format!("put of {} bytes at {}: {e}", w.1, w.0))
            });
        }
        rt.barrier();
    }

    let check = |how: &str, got: &[u8]| {
        if let Some(p) = (0..len).find(|&p| got[p] != image[p]) {
            fail(
                rank,
                1,
                &format!(
                    "path {path}: {how}: byte {p} of rank 0's segment is {:#04x}, expected \
                     {:#04x} ({})",
                    got[p],
                    image[p],
                    culprit(p)
                ),
            );
        }
    };
    let mut got = vec![0u8; len];
    if rank == 0 {
        rma.read_local(target, 0, &mut got).unwrap();
        check("read_local", &got);
    }
    got.fill(0xee);
    rma.get(target, 0, &mut got)
        .unwrap_or_else(|e| fail(rank, 1, &format!("get of the whole segment: {e}")));
    check("get", &got);
    rt.barrier();
    if rank == 0 {
        println!(
            "rma_overlap: path={path}: {size} ranks: {} interleaved stripes and {} rounds of \
             overlapping blocks in rank 0's {len}-byte segment checked",
            stripes.len(),
            rounds.len()
        );
    }
}
