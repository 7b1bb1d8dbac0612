//! Put/get integrity from 0 bytes to 16 MiB at unaligned offsets: `rma_putget`.
//!
//! Every rank owns a symmetric segment laid out as one region per size (0, 1, 7, 63, 64, 65,
//! 4095, 4096, 4097, 65535, 65536, 65537, 1 MiB + 3, 16 MiB), each at an odd offset after a
//! guard gap, the last one ending exactly at the end of the segment. The owner first fills the
//! whole segment with a background pattern (`write_local`). Then every rank puts a pattern of
//! its own into each region of its right neighbour, and reads it back with a get, checked byte
//! by byte, along with a few bytes of background on each side (a get at another unaligned
//! offset, of bytes the owner wrote). After a barrier each owner reads its whole segment with
//! `read_local` and checks every byte: the left neighbour's patterns in the regions, its own
//! background everywhere else. Patterns depend on the writer, region and size, so data that is
//! misplaced, shifted, truncated or stale does not verify.
//!
//! Needs a segment area of about 18 MiB (`VOLLEY_SEGMENT_BYTES`).

use volley::rma::{Perms, Rma, SegmentRef};
use volley::Runtime;
use volley_tests::{check_pattern, fail, fill_pattern, join, mix, path_name, pattern_byte};

const SIZES: [usize; 14] = [
    0,
    1,
    7,
    63,
    64,
    65,
    4095,
    4096,
    4097,
    65535,
    65536,
    65537,
    (1 << 20) + 3,
    16 << 20,
];
/// Background bytes between regions.
const GAP: usize = 29;
/// Background bytes on each side of a region that the read-back get includes.
const SIDE: usize = 5;

fn data_seed(writer: usize, region: usize) -> u64 {
    mix(0xda7a ^ (writer as u64) << 32 ^ (region as u64) << 8 ^ SIZES[region] as u64)
}

fn background_seed(owner: usize) -> u64 {
    mix(0xbac6 ^ owner as u64)
}

/// Offsets of the regions (odd, at varying distances from a cache line) and the segment length
/// (the last region ends there).
fn layout() -> (Vec<usize>, usize) {
    let mut at = 0;
    let mut offsets = Vec::new();
    for (i, &n) in SIZES.iter().enumerate() {
        at = (at + GAP).next_multiple_of(64) + 1 + 2 * (i * 7 % 32);
        offsets.push(at);
        at += n;
    }
    (offsets, at)
}

/// The bytes of `owner`'s segment from `start` on, as they must be once `writer` has put its
/// patterns into it.
fn expected(writer: usize, owner: usize, offsets: &[usize], start: usize, out: &mut [u8]) {
    fill_background(owner, start, out);
    let end = start + out.len();
    for (i, (&at, &n)) in offsets.iter().zip(&SIZES).enumerate() {
        let (lo, hi) = (at.max(start), (at + n).min(end));
        for p in lo..hi {
            out[p - start] = pattern_byte(data_seed(writer, i), p - at);
        }
    }
}

fn fill_background(owner: usize, start: usize, out: &mut [u8]) {
    for (j, b) in out.iter_mut().enumerate() {
        *b = pattern_byte(background_seed(owner), start + j);
    }
}

fn main() {
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let (offsets, len) = layout();

    let seg = rma.alloc_symmetric(len, Perms::ALL).unwrap_or_else(|e| {
        fail(
            rank,
            2,
            &format!("alloc_symmetric({len}): {e} (set VOLLEY_SEGMENT_BYTES)"),
        )
    });
    let (mine, theirs): (SegmentRef, SegmentRef) = (seg.on(rank), seg.on(right));
    let mut image = vec![0u8; len];
    fill_background(rank, 0, &mut image);
    rma.write_local(mine, 0, &image).unwrap();
    rt.barrier();

    let mut data = Vec::new();
    let mut back = Vec::new();
    let mut want = Vec::new();
    for (i, (&at, &n)) in offsets.iter().zip(&SIZES).enumerate() {
        data.resize(n, 0);
        fill_pattern(data_seed(rank, i), &mut data);
        rma.put(theirs, at, &data)
            .unwrap_or_else(|e| fail(rank, 1, &format!("put of {n} bytes at {at}: {e}")));
        back.clear();
        back.resize(n, 0xee);
        rma.get(theirs, at, &mut back)
            .unwrap_or_else(|e| fail(rank, 1, &format!("get of {n} bytes at {at}: {e}")));
        if let Some(p) = check_pattern(data_seed(rank, i), &back) {
            fail(
                rank,
                1,
                &format!(
                    "path {path}: {n} bytes put at {at} of rank {right}: byte {p} reads back as \
                     {:#04x}, expected {:#04x}",
                    back[p], data[p]
                ),
            );
        }
        // Again with background on both sides (the right neighbour wrote nothing else there).
        let (lo, hi) = (at - SIDE, (at + n + SIDE).min(len));
        back.clear();
        back.resize(hi - lo, 0xee);
        rma.get(theirs, lo, &mut back)
            .unwrap_or_else(|e| fail(rank, 1, &format!("get of {} bytes at {lo}: {e}", hi - lo)));
        want.resize(hi - lo, 0);
        expected(rank, right, &offsets, lo, &mut want);
        if let Some(p) = (0..back.len()).find(|&p| back[p] != want[p]) {
            fail(
                rank,
                1,
                &format!(
                    "path {path}: get of [{lo}, {hi}) of rank {right} around the {n}-byte region: \
                     byte {} is {:#04x}, expected {:#04x}",
                    lo + p,
                    back[p],
                    want[p]
                ),
            );
        }
    }
    rt.barrier();

    // The owner's view of its whole segment.
    rma.read_local(mine, 0, &mut image).unwrap();
    want.resize(len, 0);
    expected(left, rank, &offsets, 0, &mut want);
    if let Some(p) = (0..len).find(|&p| image[p] != want[p]) {
        let what = match offsets
            .iter()
            .zip(&SIZES)
            .position(|(&at, &n)| (at..at + n).contains(&p))
        {
            Some(i) => format!("byte {} of the {}-byte region", p - offsets[i], SIZES[i]),
            None => "background".to_string(),
        };
        fail(
            rank,
            1,
            &format!(
                "path {path}: byte {p} of the segment ({what}) is {:#04x}, expected {:#04x}",
                image[p], want[p]
            ),
        );
    }
    rt.barrier();
    if rank == 0 {
        println!(
            "rma_putget: path={path}: {size} ranks: {} sizes from 0 to 16 MiB put, read back and \
             checked by the owner ({len}-byte segments)",
            SIZES.len()
        );
    }
}
