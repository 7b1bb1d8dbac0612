//! Single-rank tests of the xfer layer: packets to this rank's own segments go through the
//! loopback rings and the same handlers as between ranks.

use super::*;
use std::sync::atomic::AtomicUsize;

fn setup() -> (Runtime, XferSetup) {
    let mut b = Runtime::builder();
    let xs = Xfer::register(&mut b);
    (b.build().unwrap(), xs)
}

/// A segment whose end function counts its calls, keeps a copy of the memory and returns
/// `next`.
fn counted(
    x: &Xfer<'_>,
    len: usize,
    next: usize,
) -> (SegmentId, Arc<AtomicUsize>, Arc<Mutex<Vec<u8>>>) {
    let calls = Arc::new(AtomicUsize::new(0));
    let got = Arc::new(Mutex::new(Vec::new()));
    let (c, g) = (calls.clone(), got.clone());
    let id = x
        .open_segment(vec![0; len].into(), len, move |m| {
            c.fetch_add(1, Ordering::Relaxed);
            *g.lock().unwrap() = m.to_vec();
            next
        })
        .unwrap();
    (id, calls, got)
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31) ^ seed)
        .collect()
}

#[test]
fn a_block_xfer_in_shuffled_fragments_lands_whole_and_ends_once() {
    let (rt, xs) = setup();
    let x = xs.attach(&rt);
    let len = 100_000;
    let (id, calls, got) = counted(&x, len, 0);
    x.set_fragment_bytes(1000);
    x.reorder_fragments(Some(7));
    let data = pattern(len, 3);
    x.xfer(0, id, 0, &data).unwrap();
    rt.wait_until(|| calls.load(Ordering::Relaxed) > 0);
    rt.poll();
    assert_eq!(calls.load(Ordering::Relaxed), 1);
    assert!(*got.lock().unwrap() == data);
    x.check().unwrap();
    // Closed: its number is free and the old id refused.
    assert!(matches!(
        x.remaining(id),
        Err(Error::Refused {
            refusal: XferRefusal::NotOpen { .. },
            ..
        })
    ));
}

#[test]
fn the_permutation_is_one() {
    for n in [0, 1, 2, 10, 1000] {
        let mut p = permutation(n, 99);
        if n > 5 {
            assert_ne!(p, (0..n).collect::<Vec<_>>(), "shuffled");
        }
        p.sort_unstable();
        assert_eq!(p, (0..n).collect::<Vec<_>>());
    }
}

#[test]
fn xfer_4i_packets_re_arm_and_shorten_ends_a_segment() {
    let (rt, xs) = setup();
    let x = xs.attach(&rt);
    let (id, calls, got) = counted(&x, 64, 64);
    for round in 0..3u32 {
        for i in 0..4u32 {
            x.xfer_4i(0, id, i as u64 * 16, [round, i, 2, 3]).unwrap();
        }
        rt.wait_until(|| calls.load(Ordering::Relaxed) == round as usize + 1);
        let mem = got.lock().unwrap().clone();
        assert_eq!(mem[20..24], 1u32.to_le_bytes());
        assert_eq!(mem[0..4], round.to_le_bytes());
    }
    // Half the bytes, then the sender gives up on the rest.
    x.xfer_4i(0, id, 0, [9, 9, 9, 9]).unwrap();
    x.xfer_4i(0, id, 16, [9, 9, 9, 9]).unwrap();
    rt.wait_until(|| x.remaining(id).unwrap() == 32);
    assert!(matches!(
        x.shorten_segment(id, 33),
        Err(Error::Refused {
            refusal: XferRefusal::PastCount {
                len: 33,
                remaining: 32
            },
            ..
        })
    ));
    x.shorten_segment(id, 32).unwrap();
    assert_eq!(calls.load(Ordering::Relaxed), 4);
}

#[test]
fn bad_packets_are_refused_whole_and_reported_to_the_sender() {
    let (rt, xs) = setup();
    let x = xs.attach(&rt);
    let (id, calls, got) = counted(&x, 32, 0);
    // Past the end of the memory, and more than the count expects once 16 bytes are in.
    x.xfer(0, id, 24, &[5; 16]).unwrap();
    x.xfer_4i(0, id, 0, [1, 1, 1, 1]).unwrap();
    x.xfer(0, id, 15, &[6; 17]).unwrap();
    // An id no segment has.
    let unknown = SegmentId::new(3, 1);
    x.xfer_4i(0, unknown, 0, [1, 2, 3, 4]).unwrap();
    rt.wait_until(|| x.stats().refused == 3);
    rt.poll();
    let mut refusals = Vec::new();
    while let Err(e) = x.check() {
        refusals.push(e);
    }
    assert_eq!(refusals.len(), 3, "{refusals:?}");
    assert!(matches!(
        refusals[0],
        Error::Refused {
            rank: 0,
            refusal: XferRefusal::OutOfBounds {
                offset: 24,
                len: 16,
                segment_len: 32
            }
        }
    ));
    assert!(matches!(
        refusals[1],
        Error::Refused {
            refusal: XferRefusal::PastCount {
                len: 17,
                remaining: 16
            },
            ..
        }
    ));
    assert!(matches!(
        refusals[2],
        Error::Refused {
            refusal: XferRefusal::NotOpen {
                number: 3,
                generation: 1
            },
            ..
        }
    ));
    assert_eq!(x.remaining(id).unwrap(), 16);
    x.xfer(0, id, 16, &[7; 16]).unwrap();
    rt.wait_until(|| calls.load(Ordering::Relaxed) == 1);
    let mem = got.lock().unwrap().clone();
    assert_eq!(&mem[..16], &bytes_of(1 | 1 << 32, 1 | 1 << 32));
    assert_eq!(&mem[16..], &[7; 16], "a refused packet wrote nothing");
    // Local calls on a closed segment, and a 41-bit offset.
    assert!(x.shorten_segment(id, 1).is_err());
    assert!(matches!(
        x.xfer_4i(0, id, 1 << 40, [0; 4]),
        Err(Error::Refused {
            refusal: XferRefusal::OffsetTooLarge { .. },
            ..
        })
    ));
}

#[test]
fn reply_xfers_land_at_the_requester() {
    let mut b = Runtime::builder();
    let xs = Xfer::register(&mut b);
    let replies = xs.replies();
    let seg_bits = Arc::new(AtomicUsize::new(0));
    let s = seg_bits.clone();
    let ask = b.request_handler("ask", move |m, token| {
        let seg = SegmentId::from_bits(s.load(Ordering::Relaxed) as u32);
        match m.arg(0) {
            0 => replies.reply_xfer_4i(token, seg, 0, [1, 2, 3, 4]).unwrap(),
            _ => replies.reply_xfer(token, seg, 16, &[8; 48]).unwrap(),
        }
    });
    let rt = b.build().unwrap();
    let x = xs.attach(&rt);
    let (id, calls, got) = counted(&x, 64, 0);
    seg_bits.store(id.to_bits() as usize, Ordering::Relaxed);
    rt.request_short(0, ask, &[0]).unwrap();
    rt.request_short(0, ask, &[1]).unwrap();
    rt.wait_until(|| calls.load(Ordering::Relaxed) == 1);
    let mem = got.lock().unwrap().clone();
    assert_eq!(&mem[..4], &1u32.to_le_bytes());
    assert_eq!(&mem[12..16], &4u32.to_le_bytes());
    assert_eq!(&mem[16..], &[8; 48]);
}

#[test]
fn an_end_function_may_open_a_segment_and_ids_count_down() {
    let (rt, xs) = setup();
    let x = xs.attach(&rt);
    let (a, _, _) = counted(&x, 16, 0);
    let (b, _, _) = counted(&x, 16, 0);
    assert_eq!((a.number(), b.number()), (255, 254));
    x.xfer_4i(0, a, 0, [0; 4]).unwrap();
    rt.wait_until(|| x.remaining(a).is_err());
    let (c, _, _) = counted(&x, 16, 0);
    assert_eq!(c.number(), 255, "the highest free number again");
    assert_eq!(x.stats().ends, 1);
}
