//! The rings' unit tests.

use super::*;

fn ring_mem(n: usize) -> (RingCtl, Vec<Slot>) {
    let ctl = RingCtl {
        consumed: AtomicU64::new(0),
    };
    let slots = (0..n)
        .map(|_| Slot {
            header: AtomicU64::new(0),
            body: UnsafeCell::new([0; 7]),
        })
        .collect();
    (ctl, slots)
}

/// Sends frame `tag` of `n` slots, a one-slot frame padded if `pad` and the credit allows
/// (see "Padded frames"); `None` without credit, else whether it was padded.
fn send(p: &mut Producer, ring: RingRef<'_>, n: u64, tag: u64, pad: bool) -> Option<bool> {
    let key = FrameKey::new(9);
    let (pos, flags) = match pad.then(|| p.reserve_padded(ring)).flatten() {
        Some(pos) => (pos, super::super::frame::PADDED),
        None => (p.reserve(ring, n, key)?, 0),
    };
    for w in 1..(n as usize * 8) {
        ring.write_word(pos, w, tag * 1000 + w as u64);
    }
    let h = FrameHeader {
        handler: tag as u16,
        nargs: 0,
        kind: KIND_WORDS,
        nslots: n as u8,
    };
    ring.publish(pos, h.encode_with(pos, key, flags));
    if pad {
        p.refresh(ring);
    }
    Some(flags != 0)
}

/// Receives the next frame, moving past skips and padding: its tag, slots and whether it
/// was padded.
fn recv(c: &mut Consumer, ring: RingRef<'_>) -> Option<(u64, u64, bool)> {
    loop {
        let w = c.peek(ring)?;
        let h = HeaderWord::check(w, FrameKey::new(9)).unwrap();
        if h.is(KIND_SKIP) {
            c.release(ring, h.nslots());
            continue;
        }
        let tag = h.handler() as u64;
        for wi in 1..(h.nslots() as usize * 8) {
            assert_eq!(ring.read_word(c.head(), wi), tag * 1000 + wi as u64);
        }
        if h.padded() {
            c.retire_padded(ring);
            assert_eq!(
                c.head() % (ring.slot_count() / 4),
                0,
                "padding ended mid-quarter"
            );
            c.settle(ring);
        } else {
            c.release(ring, h.nslots());
        }
        return Some((tag, h.nslots(), h.padded()));
    }
}

#[test]
fn padded_frames_use_one_slot_per_quarter_and_streams_between_them_stay_in_order() {
    // Phases of lone frames (each received before the next is sent: they are padded, and
    // every frame starts a quarter) and of bursts (sent before any is received; as in the
    // runtime, only the first asks to be padded, and the credit may refuse). The lone phases run for more than 2^15 ring positions, so a
    // sequence wraps while the bursts' old headers lie in the padding: a stale header
    // taken for a new frame, or a frame lost, skipped or read twice, fails the tags.
    for size in [8usize, 64, 256] {
        let (ctl, slots) = ring_mem(size);
        let ring = RingRef::new(&ctl, &slots);
        let (mut p, mut c) = (Producer::new(size), Consumer::new(size));
        let (mut sent, mut padded) = (0u64, 0u64);
        for phase in 0..6 {
            if phase % 2 == 0 {
                for k in 0..(1u64 << 15) / (size as u64 / 4) + 100 {
                    // The first may find its credit stale after a burst (and refreshes it).
                    let was_padded = send(&mut p, ring, 1, sent % 60_000, true).unwrap();
                    assert!(was_padded || k == 0, "lone frame {k} was not padded");
                    assert_eq!(recv(&mut c, ring), Some((sent % 60_000, 1, was_padded)));
                    sent += 1;
                    padded += u64::from(was_padded);
                }
            } else {
                let first = sent;
                for k in 0..size as u64 + 3 {
                    let Some(was_padded) = send(&mut p, ring, 1, sent % 60_000, k == 0) else {
                        break;
                    };
                    assert!(!was_padded || k == 0);
                    sent += 1;
                }
                for tag in first..sent {
                    assert_eq!(recv(&mut c, ring).map(|r| r.0), Some(tag % 60_000));
                }
                assert_eq!(recv(&mut c, ring), None);
                c.flush(ring);
            }
        }
        // All lone frames but at most the first of each phase.
        let lone = 3 * ((1u64 << 15) / (size as u64 / 4) + 100);
        assert!(padded + 3 >= lone, "{padded} of {lone} lone frames padded");
    }
    // A ring above the padding limit is never padded.
    let (ctl, slots) = ring_mem(512);
    let ring = RingRef::new(&ctl, &slots);
    let mut p = Producer::new(512);
    assert_eq!(p.reserve_padded(ring), None);
}

#[test]
fn a_header_left_in_padding_for_a_whole_sequence_wrap_is_not_taken_for_a_frame() {
    // Frames at positions 0..20 leave their headers in slots 0..20 of a 64-slot ring.
    // Then lone frames (padded once the credit is fresh, then one per quarter) bring the
    // tail to 32768 = 2^15, and 5 frames fill slots 0..5. Slot 5 still holds the header
    // of position 5, whose sequence is that of position 32773, where the receiver now
    // looks: unless the padding was zeroed, it takes that stale header for a new frame.
    let (ctl, slots) = ring_mem(64);
    let ring = RingRef::new(&ctl, &slots);
    let (mut p, mut c) = (Producer::new(64), Consumer::new(64));
    let mut tag = 0;
    let burst = |p: &mut Producer, c: &mut Consumer, n: u64, tag: &mut u64| {
        for k in 0..n {
            assert_eq!(send(p, ring, 1, *tag + k, false), Some(false));
        }
        for k in 0..n {
            assert_eq!(recv(c, ring), Some((*tag + k, 1, false)));
        }
        *tag += n;
        c.flush(ring);
    };
    burst(&mut p, &mut c, 20, &mut tag);
    let mut padded_frames = 0;
    while p.tail < 1 << 15 {
        let padded = send(&mut p, ring, 1, tag, true).unwrap();
        assert_eq!(recv(&mut c, ring), Some((tag, 1, padded)));
        tag += 1;
        padded_frames += u64::from(padded);
    }
    assert_eq!(p.tail, 1 << 15);
    assert!(padded_frames > 2040, "{padded_frames} padded");
    burst(&mut p, &mut c, 5, &mut tag);
    assert_eq!(c.head(), (1 << 15) + 5);
    assert_eq!(recv(&mut c, ring), None, "a stale header read as a frame");
}

#[test]
fn mixed_sizes_stream_in_order_with_skips_and_credit() {
    let (ctl, slots) = ring_mem(8);
    let ring = RingRef::new(&ctl, &slots);
    let mut p = Producer::new(8);
    let mut c = Consumer::new(8);
    let mut next_send = 0u64;
    let mut next_recv = 0u64;
    let size_of = |i: u64| 1 + (i * 7 % 4);
    while next_recv < 5000 {
        while next_send < 5000
            && send(&mut p, ring, size_of(next_send), next_send % 60000, false).is_some()
        {
            next_send += 1;
        }
        while let Some((tag, n, _)) = recv(&mut c, ring) {
            assert_eq!(tag, next_recv % 60000);
            assert_eq!(n, size_of(next_recv));
            next_recv += 1;
        }
    }
    assert_eq!(next_send, 5000);
}

#[test]
fn the_quick_reservation_agrees_with_the_full_one() {
    let (ctl, slots) = ring_mem(8);
    let ring = RingRef::new(&ctl, &slots);
    let (mut p, mut c) = (Producer::new(8), Consumer::new(8));
    let (mut quick_hits, mut quick_misses) = (0, 0);
    for i in 0..5000u64 {
        let n = 1 + (i * 7 % 4);
        let mut quick = p;
        let within = quick.reserve_within(n);
        let before = p.tail;
        match p.reserve(ring, n, FrameKey::new(9)) {
            Some(pos) => {
                if let Some(q) = within {
                    // Same slots, and no skip was needed.
                    assert_eq!((q, quick.tail), (pos, p.tail));
                    assert_eq!(pos, before);
                    quick_hits += 1;
                } else {
                    quick_misses += 1;
                }
                ring.publish(
                    pos,
                    FrameHeader {
                        handler: 0,
                        nargs: 0,
                        kind: KIND_WORDS,
                        nslots: n as u8,
                    }
                    .encode(pos, FrameKey::new(9)),
                );
            }
            None => assert_eq!(within, None, "quick reservation without credit"),
        }
        // Retire everything every third frame, so credit runs out in between.
        if i % 3 == 2 {
            while let Some(w) = c.peek(ring) {
                c.release(ring, FrameHeader::claimed_slots(w));
            }
            c.flush(ring);
        }
    }
    assert!(
        quick_hits > 1000 && quick_misses > 100,
        "{quick_hits} {quick_misses}"
    );
}

#[test]
fn frame_lengths_are_checked_against_the_ring_end() {
    let (ctl, slots) = ring_mem(8);
    let ring = RingRef::new(&ctl, &slots);
    assert!(ring.fits(0, 4));
    assert!(ring.fits(4, 4));
    assert!(!ring.fits(5, 4), "would run past the end");
    assert!(!ring.fits(0, 0));
    assert!(!ring.fits(0, MAX_FRAME_SLOTS + 1));
    assert_eq!(ring.slots_to_end(13), 3);
    assert_eq!(ring.slots_to_end(8), 8);
}

#[test]
fn full_ring_refuses_until_credit_returns() {
    let (ctl, slots) = ring_mem(8);
    let ring = RingRef::new(&ctl, &slots);
    let mut p = Producer::new(8);
    let mut c = Consumer::new(8);
    for i in 0..8 {
        assert!(send(&mut p, ring, 1, i, false).is_some(), "slot {i}");
    }
    assert!(
        send(&mut p, ring, 1, 8, false).is_none(),
        "ninth frame must not fit"
    );
    assert_eq!(recv(&mut c, ring), Some((0, 1, false)));
    assert!(
        send(&mut p, ring, 1, 8, false).is_none(),
        "credit is returned in batches of 2"
    );
    assert_eq!(recv(&mut c, ring), Some((1, 1, false)));
    assert!(send(&mut p, ring, 1, 8, false).is_some());
}

#[test]
fn stale_payload_is_never_read_as_a_header() {
    // Fill a lap with 4-slot frames whose payload words look exactly like headers of the
    // next lap, then check that the consumer sees nothing until the real frames arrive.
    let (ctl, slots) = ring_mem(8);
    let ring = RingRef::new(&ctl, &slots);
    let mut p = Producer::new(8);
    let mut c = Consumer::new(8);
    for _ in 0..2 {
        let pos = p.reserve(ring, 4, FrameKey::new(9)).unwrap();
        for w in 1..32 {
            let fake = FrameHeader {
                handler: 1,
                nargs: 0,
                kind: KIND_WORDS,
                nslots: 1,
            };
            let slot_pos = pos + (w / 8) as u64 + 8;
            ring.write_word(pos, w, fake.encode(slot_pos, FrameKey::new(9)));
        }
        let h = FrameHeader {
            handler: 2,
            nargs: 0,
            kind: KIND_WORDS,
            nslots: 4,
        };
        ring.publish(pos, h.encode(pos, FrameKey::new(9)));
    }
    for _ in 0..2 {
        let w = c.peek(ring).unwrap();
        c.release(
            ring,
            FrameHeader::decode(w, FrameKey::new(9)).unwrap().nslots as u64,
        );
    }
    assert_eq!(
        c.peek(ring),
        None,
        "stale payload must not look like a frame"
    );
}
