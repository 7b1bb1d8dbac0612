//! xfer segments between ranks: `xfer [ROUNDS]`.
//!
//! Every rank opens one segment per source rank (itself included), in source order, so the
//! segment for source `s` is number 255 - s everywhere (the highest free id first). Each round
//! every rank sends every rank `LEN` bytes of a pattern of (source, target, round): all but the
//! last 64 as a block xfer whose 1000-byte fragments go in a random order, the last 64 as four
//! `xfer_4i` packets. The end function checks the memory byte for byte and re-arms the segment
//! for the next round, or closes it after the last. A rank waits until every segment of its
//! own has ended this round, then the barrier starts the next. Checks: every end function ran
//! exactly once per round, every byte intact; after the close, a packet to a closed segment is
//! refused and the sender learns it through `Xfer::check`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use volley::xfer::Error;
use volley::xfer::{SegmentId, Xfer};
use volley::{Runtime, XferRefusal};
use volley_tests::{arg_u64, fail, fill_pattern, join, mix};

const LEN: usize = 50_000;

fn pattern(src: usize, dst: usize, round: u64) -> Vec<u8> {
    let mut v = vec![0u8; LEN];
    fill_pattern(mix((src as u64) << 40 ^ (dst as u64) << 20 ^ round), &mut v);
    v
}

fn main() {
    let rounds = arg_u64(0, 3);
    let mut b = Runtime::builder();
    let xs = Xfer::register(&mut b);
    let rt = join(b);
    let x = xs.attach(&rt);
    let (me, size) = (rt.rank(), rt.size());
    // Ends per source, and the first corrupt byte seen (u64::MAX: none).
    let ends: Arc<Vec<AtomicU64>> = Arc::new((0..size).map(|_| AtomicU64::new(0)).collect());
    let corrupt = Arc::new(Mutex::new(None::<String>));
    for src in 0..size {
        let (ends, corrupt) = (ends.clone(), corrupt.clone());
        let id = x
            .open_segment(vec![0; LEN].into(), LEN, move |memory| {
                let round = ends[src].fetch_add(1, Ordering::Relaxed);
                if memory[..] != pattern(src, me, round)[..] {
                    let pos = memory
                        .iter()
                        .zip(pattern(src, me, round))
                        .position(|(a, b)| *a != b);
                    *corrupt.lock().unwrap() =
                        Some(format!("from {src} round {round}: byte {pos:?} wrong"));
                }
                memory.fill(0);
                if round + 1 < rounds {
                    LEN
                } else {
                    0
                }
            })
            .unwrap();
        assert_eq!(id.number() as usize, 255 - src, "highest free id first");
    }
    let seg_for = |src: usize| SegmentId::new(255 - src as u8, 1);
    x.set_fragment_bytes(1000);
    rt.barrier();
    for round in 0..rounds {
        x.reorder_fragments(Some(mix(round ^ (me as u64) << 32)));
        for d in 0..size {
            let dst = (me + d) % size;
            let p = pattern(me, dst, round);
            let seg = seg_for(me);
            x.xfer(dst, seg, 0, &p[..LEN - 64]).unwrap();
            for i in 0..4 {
                let off = LEN - 64 + i * 16;
                let w = |j: usize| {
                    u32::from_le_bytes(p[off + 4 * j..off + 4 * j + 4].try_into().unwrap())
                };
                x.xfer_4i(dst, seg, off as u64, [w(0), w(1), w(2), w(3)])
                    .unwrap();
            }
        }
        rt.wait_until(|| ends.iter().all(|e| e.load(Ordering::Relaxed) > round));
        if let Some(what) = corrupt.lock().unwrap().take() {
            fail(me, 1, &format!("xfer: rank {me}: {what}"));
        }
        if let Err(e) = x.check() {
            fail(
                me,
                1,
                &format!("xfer: rank {me}: a packet was refused: {e}"),
            );
        }
        rt.barrier();
    }
    for (src, e) in ends.iter().enumerate() {
        let n = e.load(Ordering::Relaxed);
        if n != rounds {
            fail(
                me,
                1,
                &format!("xfer: rank {me}: segment of {src} ended {n} times, not {rounds}"),
            );
        }
    }
    // Every segment is closed now: a packet to one is refused, and we hear of it.
    let right = (me + 1) % size;
    x.xfer_4i(right, seg_for(me), 0, [1, 2, 3, 4]).unwrap();
    let mut refused = None;
    rt.wait_until(|| {
        refused = x.check().err();
        refused.is_some()
    });
    match refused {
        Some(Error::Refused {
            rank,
            refusal: XferRefusal::NotOpen { .. },
        }) if rank == right => {}
        other => fail(
            me,
            1,
            &format!("xfer: rank {me}: expected a refusal from {right}, got {other:?}"),
        ),
    }
    let stats = x.stats();
    println!(
        "xfer: rank {me}: {} ends, {} packets, {} refused, every byte intact",
        stats.ends, stats.packets, stats.refused
    );
    rt.barrier();
}
