//! Single-rank tests of both paths (the loopback rings carry the AM path).

use super::*;
use crate::am::MessageClass;
use crate::transport::Channel;

/// The atomic word, clear of the put data.
const W: usize = 250_000;

fn setup(path: RmaPath) -> (Runtime, RmaSetup) {
    let mut b = Runtime::builder();
    let setup = Rma::register_with(&mut b, Ok(path));
    (b.build().unwrap(), setup)
}

#[test]
fn put_get_atomics_and_refusals_on_both_paths() {
    for path in [RmaPath::Direct, RmaPath::ActiveMessages] {
        let (rt, setup) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(300_000, Perms::ALL).unwrap().on(0);
        let data: Vec<u8> = (0..200_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        rma.put(seg, 13, &data).unwrap();
        let mut back = vec![0u8; data.len()];
        rma.get(seg, 13, &mut back).unwrap();
        assert!(
            back == data,
            "{path:?}: get returned other bytes than put wrote"
        );
        assert_eq!(rma.fetch_add(seg, W, 5).unwrap(), 0, "{path:?}");
        assert_eq!(rma.fetch_add(seg, W, 5).unwrap(), 5);
        assert_eq!(rma.compare_swap(seg, W, 10, 42).unwrap(), 10);
        assert_eq!(rma.atomic(seg, W, AtomicOp::Load, 0, 0).unwrap(), 42);
        // Refusals: the memory must not change, and each is counted.
        let mut before = vec![0u8; 300_000];
        rma.read_local(seg, 0, &mut before).unwrap();
        let refused = |r: Result<()>| match r {
            Err(Error::Refused { reason, .. }) => reason,
            other => panic!("{path:?}: expected a refusal, got {other:?}"),
        };
        assert_eq!(
            refused(rma.put(seg.with_key(1), 0, b"x")),
            Refusal::WrongKey
        );
        assert!(matches!(
            refused(rma.put(seg, 299_999, b"xy")),
            Refusal::OutOfBounds {
                offset: 299_999,
                len: 2,
                segment_len: 300_000
            }
        ));
        assert!(matches!(
            refused(rma.put(seg, usize::MAX, b"x")),
            Refusal::OutOfBounds { .. }
        ));
        // A large put that overruns the segment: refused as a whole, nothing written even by
        // the fragments that would fit.
        let big = vec![0xEEu8; 150_000];
        assert!(matches!(
            refused(rma.put(seg, 200_000, &big)),
            Refusal::OutOfBounds {
                offset: 200_000,
                len: 150_000,
                segment_len: 300_000
            }
        ));
        let ro = rma.alloc(64, Perms::READ).unwrap().handle();
        assert_eq!(refused(rma.put(ro, 0, b"x")), Refusal::NotWritable);
        assert!(matches!(
            rma.fetch_add(ro, 0, 1),
            Err(Error::Refused {
                reason: Refusal::NoAtomics,
                ..
            })
        ));
        assert!(matches!(
            rma.fetch_add(seg, W + 3, 1),
            Err(Error::Refused {
                reason: Refusal::Misaligned,
                ..
            })
        ));
        let mut after = vec![0u8; 300_000];
        rma.read_local(seg, 0, &mut after).unwrap();
        assert!(before == after, "{path:?}: a refused access changed memory");
        assert_eq!(
            rma.refused(),
            7,
            "{path:?}: refusals counted at the target, once each"
        );
        // Implicit puts complete at sync.
        for i in 0..100u64 {
            rma.put_nbi(seg, 1000 + 8 * i as usize, &i.to_le_bytes())
                .unwrap();
        }
        rma.put_nbi(seg.with_key(7), 0, b"z").unwrap_or(());
        let synced = rma.sync();
        if path == RmaPath::ActiveMessages {
            assert!(matches!(
                synced,
                Err(Error::Refused {
                    reason: Refusal::WrongKey,
                    ..
                })
            ));
        }
        let mut w = [0u8; 8];
        rma.get(seg, 1000 + 8 * 99, &mut w).unwrap();
        assert_eq!(u64::from_le_bytes(w), 99);
        // Non-blocking get with an event.
        let mut buf = [0u8; 5];
        let mut ev = rma.get_nb(seg, 13, &mut buf).unwrap();
        let _ = ev.test();
        ev.wait().unwrap();
        assert_eq!(&buf, &data[..5]);
        let seg_id = seg;
        assert!(rma.free_symmetric(SymmetricSegment {
            id: seg_id.id,
            key: seg_id.key,
            len: seg_id.len
        }));
        assert!(matches!(
            rma.put(seg, 0, b"x"),
            Err(Error::Refused {
                reason: Refusal::NoSuchSegment,
                ..
            })
        ));
    }
}

#[test]
fn implicit_scope_completes_gets_and_puts_at_its_end() {
    for path in [RmaPath::Direct, RmaPath::ActiveMessages] {
        let (rt, setup) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc(200_000, Perms::ALL).unwrap().handle();
        let src: Vec<u8> = (0..150_000u32).map(|i| (i % 253) as u8).collect();
        rma.put(seg, 0, &src).unwrap();
        let mut a = vec![0u8; 100_000];
        let mut b = [0u8; 7];
        let n = rma
            .implicit(|s| {
                s.get(seg, 3, &mut a)?;
                s.get(seg, 149_000, &mut b)?;
                s.put(seg, 160_000, b"tail")?;
                Ok(3)
            })
            .unwrap();
        assert_eq!(n, 3);
        assert!(a[..] == src[3..100_003], "{path:?}");
        assert_eq!(&b[..], &src[149_000..149_007]);
        let mut t = [0u8; 4];
        rma.get(seg, 160_000, &mut t).unwrap();
        assert_eq!(&t, b"tail");
        // An error inside the scope is returned after everything issued has completed.
        let mut c = [0u8; 4];
        let mut d = [0u8; 1];
        let r = rma.implicit(|s| {
            s.get(seg, 0, &mut c)?;
            s.get(seg.with_key(5), 0, &mut d)
        });
        assert!(
            matches!(
                r,
                Err(Error::Refused {
                    reason: Refusal::WrongKey,
                    ..
                })
            ),
            "{path:?}: {r:?}"
        );
        assert_eq!(&c, &src[..4], "{path:?}: the good get still completed");
    }
}

#[test]
fn a_leaked_get_never_writes_into_its_buffer() {
    // Leaking an Event ends the buffer's borrow without waiting, so safe code may then free
    // or reuse the buffer: the data must go nowhere near it. (The AM path is the one where
    // data arrives after `get_nb` returns.)
    let (rt, setup) = setup(RmaPath::ActiveMessages);
    let rma = setup.attach(&rt);
    let seg = rma.alloc(4096, Perms::ALL).unwrap().handle();
    rma.put(seg, 0, &[0x5Au8; 4096]).unwrap();
    let mut buf = vec![0u8; 4096];
    std::mem::forget(rma.get_nb(seg, 0, &mut buf).unwrap());
    for _ in 0..100 {
        rt.poll();
    }
    assert!(
        buf.iter().all(|&b| b == 0),
        "the leaked get wrote into its buffer after the borrow ended"
    );
    // The runtime goes on working; a get that is waited for fills its buffer.
    rma.get(seg, 0, &mut buf).unwrap();
    assert!(buf.iter().all(|&b| b == 0x5A));
}

#[test]
fn local_accesses_and_frees_check_the_whole_handle() {
    let (rt, setup) = setup(RmaPath::Direct);
    let rma = setup.attach(&rt);
    let a = rma.alloc(64, Perms::ALL).unwrap();
    assert!(rma.free(a));
    // The id of `a` is reused by `b`: freeing `a` again must not free `b`.
    let b = rma.alloc(64, Perms::ALL).unwrap();
    assert!(!rma.free(a), "a segment was freed twice");
    rma.write_local(b.handle(), 0, b"still here").unwrap();
    let refused = |r: Result<()>| match r {
        Err(Error::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    };
    let mut x = [0u8; 4];
    assert_eq!(
        refused(rma.read_local(a.handle(), 0, &mut x)),
        Refusal::WrongKey,
        "a freed segment's handle reached the segment that reuses its id"
    );
    let mut other_rank = b.handle();
    other_rank.rank = 1;
    assert_eq!(
        refused(rma.read_local(other_rank, 0, &mut x)),
        Refusal::NoSuchSegment,
        "a handle of another rank read this rank's memory"
    );
    assert!(rma.free(b));
}

#[test]
fn a_segment_length_that_cannot_be_rounded_is_refused() {
    let (rt, setup) = setup(RmaPath::Direct);
    let rma = setup.attach(&rt);
    for len in [usize::MAX, usize::MAX - 62, rt.segment_len() + 1] {
        assert!(
            matches!(rma.alloc(len, Perms::ALL), Err(Error::SegmentSpace { .. })),
            "a {len}-byte segment was granted"
        );
    }
}

#[test]
fn a_bad_path_setting_fails_the_build() {
    let mut b = Runtime::builder();
    let _setup = Rma::register_with(
        &mut b,
        Err(Error::InvalidConfig {
            name: "VOLLEY_RMA",
            value: "AM".into(),
            why: "expected direct or am",
        }),
    );
    assert!(matches!(
        b.build(),
        Err(crate::am::Error::InvalidConfig {
            name: "VOLLEY_RMA",
            ..
        })
    ));
}

#[test]
fn symmetric_allocation_after_finalize_is_an_error() {
    let (rt, setup) = setup(RmaPath::Direct);
    let rma = setup.attach(&rt);
    let seg = rma.alloc_symmetric(64, Perms::ALL).unwrap();
    rt.finalize();
    assert!(matches!(
        rma.alloc_symmetric(64, Perms::ALL),
        Err(Error::Am(crate::am::Error::Finalized))
    ));
    // Freeing needs no other rank any more: no barrier, no hang.
    assert!(rma.free_symmetric(seg));
}

#[test]
fn every_operation_after_finalize_is_refused_on_both_paths() {
    for path in [RmaPath::Direct, RmaPath::ActiveMessages] {
        let (rt, setup) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(4096, Perms::ALL).unwrap().on(0);
        rma.put(seg, 0, &[7u8; 64]).unwrap();
        rt.finalize();
        let finalized = |r: Result<(), Error>, op: &str| {
            assert!(
                matches!(r, Err(Error::Am(crate::am::Error::Finalized))),
                "{path:?}: {op} after finalize returned {r:?}"
            );
        };
        finalized(rma.put(seg, 0, &[1u8; 64]), "put");
        finalized(rma.put_nbi(seg, 0, &[1u8; 64]), "put_nbi");
        let mut back = [0u8; 64];
        finalized(rma.get(seg, 0, &mut back), "get");
        assert_eq!(
            back, [0u8; 64],
            "{path:?}: get after finalize filled the buffer"
        );
        finalized(rma.fetch_add(seg, 64, 5).map(drop), "fetch_add");
        finalized(rma.compare_swap(seg, 64, 0, 9).map(drop), "compare_swap");
        finalized(
            rma.put_with_flag(seg, 0, &[1u8; 8], 128, 1),
            "put_with_flag",
        );
        // The memory is as it was before the finalize.
        let mut own = [0u8; 136];
        rma.read_local(seg, 0, &mut own).unwrap();
        assert_eq!(
            own[..64],
            [7u8; 64],
            "{path:?}: a put after finalize landed"
        );
        assert_eq!(
            own[64..136],
            [0u8; 72],
            "{path:?}: an atomic or flag after finalize landed"
        );
    }
}

/// Medium messages sent on the request channel so far.
fn medium_requests(rt: &Runtime) -> u64 {
    rt.stats().sent[Channel::Request as usize][MessageClass::Medium as usize]
}

#[test]
fn the_am_path_moves_bulk_data_within_a_node_with_one_request() {
    let (rt, setup) = setup(RmaPath::ActiveMessages);
    let rma = setup.attach(&rt);
    let seg = rma.alloc_symmetric(3 << 20, Perms::ALL).unwrap().on(0);
    let data: Vec<u8> = (0..(1u32 << 20) + 5)
        .map(|i| (i * 13 + i / 509) as u8)
        .collect();
    let mediums = medium_requests(&rt);
    // Unaligned on both sides: the segment offset and the caller's buffer.
    rma.put(seg, 7, &data[3..]).unwrap();
    let mut back = vec![0u8; data.len()];
    rma.get(seg, 7, &mut back[1..data.len() - 2]).unwrap();
    assert!(
        back[1..data.len() - 2] == data[3..],
        "get returned other bytes"
    );
    assert_eq!(
        medium_requests(&rt),
        mediums,
        "the bytes went through medium messages instead of one copy"
    );
    // Non-blocking and implicit forms go the same way.
    let ev = rma.put_nb(seg, 1 << 20, &data).unwrap();
    ev.wait().unwrap();
    rma.put_nbi(seg, (2 << 20) + 1, &data[..1000]).unwrap();
    rma.sync().unwrap();
    let mut tail = vec![0u8; 1000];
    rma.implicit(|s| s.get(seg, (2 << 20) + 1, &mut tail))
        .unwrap();
    assert!(tail == data[..1000]);
    assert_eq!(medium_requests(&rt), mediums);
    // A refused write is refused by the target as before: the same reason and details,
    // counted once, nothing written (it travels in fragments, which the target refuses).
    let mut before = vec![0u8; 3 << 20];
    rma.read_local(seg, 0, &mut before).unwrap();
    let refused = rma.refused();
    let big = vec![0xEEu8; 1 << 20];
    match rma.put(seg, (3 << 20) - 100, &big) {
        Err(Error::Refused {
            rank: 0,
            reason:
                Refusal::OutOfBounds {
                    offset,
                    len,
                    segment_len,
                },
        }) => assert_eq!(
            (offset, len, segment_len),
            ((3 << 20) - 100, 1 << 20, 3 << 20)
        ),
        other => panic!("expected an out-of-bounds refusal, got {other:?}"),
    }
    let ev = rma.put_nb(seg.with_key(5), 0, &big).unwrap();
    assert!(matches!(
        ev.wait(),
        Err(Error::Refused {
            reason: Refusal::WrongKey,
            ..
        })
    ));
    rma.put_nbi(seg.with_key(5), 0, &big).unwrap();
    assert!(matches!(
        rma.sync(),
        Err(Error::Refused {
            reason: Refusal::WrongKey,
            ..
        })
    ));
    assert_eq!(rma.refused(), refused + 3, "each refusal counted once");
    let mut after = vec![0u8; 3 << 20];
    rma.read_local(seg, 0, &mut after).unwrap();
    assert!(before == after, "a refused put changed the segment");
    // A refused get reads nothing into its buffer.
    let mut buf = vec![0x11u8; 1 << 20];
    assert!(matches!(
        rma.get(seg.with_key(5), 0, &mut buf),
        Err(Error::Refused {
            reason: Refusal::WrongKey,
            ..
        })
    ));
    assert!(buf.iter().all(|&b| b == 0x11));
    // A write with flag whose flag word is refused writes neither data nor flag.
    let mut old = [0u8; 16];
    rma.read_local(seg, 96, &mut old).unwrap();
    assert!(matches!(
        rma.put_with_flag(seg, 100, &[1u8; 8], 3, 1),
        Err(Error::Refused {
            reason: Refusal::Misaligned,
            ..
        })
    ));
    let mut now = [0u8; 16];
    rma.read_local(seg, 96, &mut now).unwrap();
    assert_eq!(old, now, "a write with a refused flag wrote its data");
}
