//! Single-rank tests of the memory-based operations on both paths (the loopback rings carry
//! the AM path), and a multi-threaded test of the FIFO's lock-free core.

use super::*;
use crate::rma::{Perms, Rma, RmaPath, RmaSetup};
use crate::Runtime;
use std::sync::atomic::AtomicBool;
use std::sync::Mutex;

const PATHS: [RmaPath; 2] = [RmaPath::Direct, RmaPath::ActiveMessages];

/// What a test signal handler saw: (src, offset, data).
type Seen = Arc<Mutex<Vec<(usize, usize, Vec<u8>)>>>;

fn setup(path: RmaPath) -> (Runtime, RmaSetup, SignalHandler, Seen) {
    let mut b = Runtime::builder();
    let setup = Rma::register_with(&mut b, Ok(path));
    let seen: Seen = Arc::default();
    let log = seen.clone();
    let sig = setup.register_signal(&mut b, "test", move |s| {
        log.lock()
            .unwrap()
            .push((s.src(), s.offset(), s.data().to_vec()));
    });
    (b.build().unwrap(), setup, sig, seen)
}

fn reason<T: std::fmt::Debug>(r: Result<T>) -> Refusal {
    match r {
        Err(Error::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn snapshot(rma: &Rma<'_>, seg: SegmentRef) -> Vec<u8> {
    let mut v = vec![0u8; seg.len()];
    rma.read_local(seg, 0, &mut v).unwrap();
    v
}

fn u64_at(rma: &Rma<'_>, seg: SegmentRef, off: usize) -> u64 {
    let mut w = [0u8; 8];
    rma.read_local(seg, off, &mut w).unwrap();
    u64::from_le_bytes(w)
}

#[test]
fn write_f_data_then_flag_and_refusals() {
    const FLAG: usize = 200_000;
    for path in PATHS {
        let (rt, setup, _, _) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(200_064, Perms::ALL).unwrap().on(0);
        // Small and multi-fragment data.
        for (len, v) in [(100usize, 1u64), (150_000, 2)] {
            let data: Vec<u8> = (0..len).map(|i| (i * 13 + v as usize) as u8).collect();
            rma.put_with_flag(seg, 8, &data, FLAG, v).unwrap();
            let mut back = vec![0u8; len];
            rma.read_local(seg, 8, &mut back).unwrap();
            assert!(back == data, "{path:?}: data of {len} bytes");
            assert_eq!(u64_at(&rma, seg, FLAG), v, "{path:?}: flag");
        }
        rma.put_with_flag_nbi(seg, 0, b"nbi", FLAG, 3).unwrap();
        rma.sync().unwrap();
        assert_eq!(u64_at(&rma, seg, FLAG), 3);
        // Refusals leave everything unchanged, including multi-fragment data.
        let before = snapshot(&rma, seg);
        let big = vec![0xAB; 150_000];
        assert_eq!(
            reason(rma.put_with_flag(seg, 0, &big, FLAG + 4, 9)),
            Refusal::Misaligned
        );
        assert!(matches!(
            reason(rma.put_with_flag(seg, 0, &big, 200_064, 9)),
            Refusal::OutOfBounds { .. }
        ));
        assert!(matches!(
            reason(rma.put_with_flag(seg, 100_000, &big, FLAG, 9)),
            Refusal::OutOfBounds { .. }
        ));
        assert_eq!(
            reason(rma.put_with_flag(seg.with_key(5), 0, &big, FLAG, 9)),
            Refusal::WrongKey
        );
        let ro = rma.alloc(64, Perms::READ | Perms::ATOMIC).unwrap().handle();
        assert_eq!(
            reason(rma.put_with_flag(ro, 0, b"x", 8, 9)),
            Refusal::NotWritable
        );
        assert!(
            before == snapshot(&rma, seg),
            "{path:?}: refusal changed memory"
        );
        assert_eq!(
            rma.refused(),
            5,
            "{path:?}: one refusal counted per operation"
        );
    }
}

#[test]
fn write_f_observer_never_sees_the_flag_before_the_data() {
    const LEN: usize = 150_000;
    const FLAG: usize = LEN;
    const ROUNDS: u64 = 20;
    for path in PATHS {
        let (rt, setup, _, _) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(LEN + 8, Perms::ALL).unwrap().on(0);
        let at = rma.owned_range(seg, 0, LEN + 8).unwrap();
        // SAFETY: inside our own segment area.
        let base = unsafe { rma.shared.local().segment.add(at) } as usize;
        let acked = Arc::new(AtomicU64::new(0));
        let failed = Arc::new(AtomicBool::new(false));
        let observer = {
            let (acked, failed) = (acked.clone(), failed.clone());
            std::thread::spawn(move || {
                let base = base as *mut u8;
                for r in 1..=ROUNDS {
                    // SAFETY: the flag word is 8-aligned in our mapped segment, accessed
                    // atomically.
                    let flag = unsafe { word(base.add(FLAG)) };
                    while flag.load(Ordering::Acquire) != r {
                        std::hint::spin_loop();
                    }
                    // SAFETY: the writer does not touch the data until we ack this round.
                    let data = unsafe { std::slice::from_raw_parts(base, LEN) };
                    if data.iter().any(|&b| b != r as u8) {
                        failed.store(true, Ordering::Relaxed);
                    }
                    acked.store(r, Ordering::Release);
                }
            })
        };
        for r in 1..=ROUNDS {
            rma.put_with_flag(seg, 0, &vec![r as u8; LEN], FLAG, r)
                .unwrap();
            rt.wait_until(|| acked.load(Ordering::Acquire) == r);
        }
        observer.join().unwrap();
        assert!(
            !failed.load(Ordering::Relaxed),
            "{path:?}: flag seen before data"
        );
    }
}

#[test]
fn fifo_full_order_retry_and_refusals() {
    for path in PATHS {
        let (rt, setup, _, _) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(4096, Perms::ALL).unwrap().on(0);
        let fifo = rma.fifo_create(seg, 64, 12, 4).unwrap();
        let fifo = FifoRef::from_words(fifo.to_words());
        assert_eq!(
            (fifo.rank(), fifo.entry_size(), fifo.capacity()),
            (0, 12, 4)
        );
        let entry = |i: u8| [i; 12];
        let mut buf = [0u8; 12];
        assert!(!rma.fifo_dequeue(fifo, &mut buf).unwrap(), "empty at first");
        for i in 0..4 {
            assert_eq!(
                rma.fifo_enqueue(fifo, &entry(i)).unwrap(),
                FifoStatus::Stored
            );
        }
        let before = snapshot(&rma, seg);
        assert_eq!(
            rma.fifo_enqueue(fifo, &entry(99)).unwrap(),
            FifoStatus::Full,
            "{path:?}"
        );
        assert!(
            before == snapshot(&rma, seg),
            "{path:?}: a full enqueue wrote"
        );
        assert!(rma.fifo_dequeue(fifo, &mut buf).unwrap());
        assert_eq!(buf, entry(0));
        rma.fifo_enqueue_retry(fifo, &entry(4)).unwrap();
        // Several laps around the ring, in order and intact.
        let mut next_in = 5u8;
        let mut next_out = 1u8;
        for _ in 0..10 {
            while rma.fifo_enqueue(fifo, &entry(next_in)).unwrap() == FifoStatus::Stored {
                next_in += 1;
            }
            for _ in 0..3 {
                assert!(rma.fifo_dequeue(fifo, &mut buf).unwrap());
                assert_eq!(buf, entry(next_out), "{path:?}: order");
                next_out += 1;
            }
        }
        while rma.fifo_dequeue(fifo, &mut buf).unwrap() {
            assert_eq!(buf, entry(next_out));
            next_out += 1;
        }
        assert_eq!(next_in, next_out, "{path:?}: none lost");
        // Refusals: nothing changes, each one counted.
        let before = snapshot(&rma, seg);
        assert_eq!(
            reason(rma.fifo_enqueue(fifo.with_key(3), &entry(0))),
            Refusal::WrongKey
        );
        assert_eq!(
            reason(rma.fifo_enqueue(fifo, &[0u8; 5])),
            Refusal::EntrySize
        );
        assert_eq!(
            reason(rma.fifo_enqueue(fifo.with_capacity(3), &entry(0))),
            Refusal::NotAFifo
        );
        let not_there = FifoRef {
            offset: 1024,
            ..fifo
        };
        assert_eq!(
            reason(rma.fifo_enqueue(not_there, &entry(0))),
            Refusal::NotAFifo
        );
        let misaligned = FifoRef { offset: 68, ..fifo };
        assert_eq!(
            reason(rma.fifo_enqueue(misaligned, &entry(0))),
            Refusal::Misaligned
        );
        let huge = FifoRef {
            capacity: u32::MAX,
            entry_size: u32::MAX,
            ..fifo
        };
        assert!(matches!(
            reason(rma.fifo_enqueue(huge, &entry(0))),
            Refusal::OutOfBounds { .. }
        ));
        assert!(
            before == snapshot(&rma, seg),
            "{path:?}: a refused enqueue wrote"
        );
        assert_eq!(rma.refused(), 6, "{path:?}");
        // Producers need write and atomic permission.
        let wo = rma.alloc(1024, Perms::WRITE).unwrap();
        let f2 = rma.fifo_create(wo.handle(), 0, 8, 2).unwrap();
        assert_eq!(reason(rma.fifo_enqueue(f2, &[1; 8])), Refusal::NoAtomics);
        // Creation checks.
        assert!(rma.fifo_create(seg, 0, 8, 1).is_err());
        assert!(rma.fifo_create(seg, 0, 0, 4).is_err());
        assert!(matches!(
            reason(rma.fifo_create(seg, 4000, 8, 4)),
            Refusal::OutOfBounds { .. }
        ));
        assert_eq!(reason(rma.fifo_create(seg, 4, 8, 4)), Refusal::Misaligned);
        assert_eq!(
            reason(rma.fifo_dequeue(fifo, &mut [0u8; 4])),
            Refusal::EntrySize
        );
    }
}

#[test]
fn fifo_core_many_producers_keep_order_and_lose_nothing() {
    const PRODUCERS: u64 = 4;
    const EACH: u64 = 2000;
    const CAP: u64 = 8;
    let mem = vec![0u64; (fifo_bytes(16, CAP).unwrap() / 8) as usize];
    let base = mem.as_ptr() as usize;
    // SAFETY: an 8-aligned buffer of the FIFO's size, alive until the threads are joined.
    unsafe { fifo_init(base as *mut u8, 16, CAP) };
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            std::thread::spawn(move || {
                let mut full = 0u64;
                for i in 0..EACH {
                    let mut e = [0u8; 16];
                    e[..8].copy_from_slice(&p.to_le_bytes());
                    e[8..].copy_from_slice(&i.to_le_bytes());
                    loop {
                        // SAFETY: as above; producers only enqueue.
                        match unsafe { fifo_enqueue_at(base as *mut u8, 16, CAP, &e) }.unwrap() {
                            FifoStatus::Stored => break,
                            FifoStatus::Full => {
                                full += 1;
                                std::thread::yield_now();
                            }
                        }
                    }
                }
                full
            })
        })
        .collect();
    let mut next = [0u64; PRODUCERS as usize];
    let mut got = 0;
    let mut buf = [0u8; 16];
    while got < PRODUCERS * EACH {
        // SAFETY: this thread is the only consumer.
        if unsafe { fifo_dequeue_at(base as *mut u8, 16, CAP, &mut buf) }.unwrap() {
            let p = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
            let i = u64::from_le_bytes(buf[8..].try_into().unwrap());
            assert_eq!(i, next[p], "producer {p}'s entries out of order");
            next[p] += 1;
            got += 1;
        } else {
            std::thread::yield_now();
        }
    }
    for t in producers {
        t.join().unwrap();
    }
    assert!(next.iter().all(|&n| n == EACH));
    // SAFETY: all producers are done.
    assert!(!unsafe { fifo_dequeue_at(base as *mut u8, 16, CAP, &mut buf) }.unwrap());
    drop(mem);
}

#[test]
fn signal_runs_the_handler_after_the_data() {
    for path in PATHS {
        let (rt, setup, sig, seen) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(300_000, Perms::ALL).unwrap().on(0);
        let small: Vec<u8> = (0..37u8).collect();
        rma.signal(seg, 1000, &small, sig).unwrap();
        let big: Vec<u8> = (0..150_000u32).map(|i| (i / 7) as u8).collect();
        rma.signal(seg, 2000, &big, sig).unwrap();
        rma.signal_nbi(seg, 200_000, b"late", sig).unwrap();
        rma.signal_nbi(seg, 0, b"", sig).unwrap();
        rma.sync().unwrap();
        {
            let s = seen.lock().unwrap();
            assert_eq!(s.len(), 4, "{path:?}: one invocation per signal");
            assert_eq!(s[0], (0, 1000, small.clone()));
            assert!(s[1] == (0, 2000, big.clone()), "{path:?}: big signal data");
            assert_eq!(s[2], (0, 200_000, b"late".to_vec()));
            assert_eq!(s[3], (0, 0, Vec::new()));
        }
        let mut back = vec![0u8; big.len()];
        rma.read_local(seg, 2000, &mut back).unwrap();
        assert!(back == big);
        // Refusals: no data written, no handler run, counted once each.
        let before = snapshot(&rma, seg);
        assert_eq!(
            reason(rma.signal(seg.with_key(1), 0, &big, sig)),
            Refusal::WrongKey
        );
        assert!(matches!(
            reason(rma.signal(seg, 200_000, &big, sig)),
            Refusal::OutOfBounds { .. }
        ));
        let ro = rma.alloc(64, Perms::READ).unwrap().handle();
        assert_eq!(reason(rma.signal(ro, 0, b"x", sig)), Refusal::NotWritable);
        let nbi = rma.signal_nbi(seg.with_key(2), 0, b"x", sig);
        let synced = rma.sync();
        assert_eq!(
            reason(nbi.and(synced)),
            Refusal::WrongKey,
            "{path:?}: nbi refusal reported by sync or at once"
        );
        assert!(before == snapshot(&rma, seg));
        assert_eq!(
            seen.lock().unwrap().len(),
            4,
            "{path:?}: refused signal ran"
        );
        assert_eq!(rma.refused(), 4, "{path:?}");
    }
}

/// A z-buffer of 16 pixels: reference words at Z, 8-byte colours at C.
const Z: usize = 0;
const C: usize = 1024;
const PIXELS: usize = 16;

fn zbuf_writes() -> Vec<(usize, u64, u64)> {
    // (pixel, depth, colour), several candidates per pixel with distinct depths.
    let mut v = Vec::new();
    for p in 0..PIXELS {
        for k in 0..5u64 {
            let depth = 100 + ((p as u64 * 31 + k * 17) % 97) * 8 + k;
            v.push((p, depth, (p as u64) << 32 | depth));
        }
    }
    v
}

fn shuffle<T>(v: &mut [T], mut seed: u64) {
    for i in (1..v.len()).rev() {
        seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        v.swap(i, (seed >> 33) as usize % (i + 1));
    }
}

#[test]
fn conditional_write_matches_the_sequential_z_buffer_in_any_order() {
    for path in PATHS {
        let (rt, setup, _, _) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(2048, Perms::ALL).unwrap().on(0);
        // The sequential result: the nearest (smallest) depth wins each pixel.
        let mut expect_z = [u64::MAX; PIXELS];
        let mut expect_c = [0u64; PIXELS];
        for (p, d, c) in zbuf_writes() {
            if expect_z[p] > d {
                expect_z[p] = d;
                expect_c[p] = c;
            }
        }
        for seed in 0..4 {
            for p in 0..PIXELS {
                rma.write_local(seg, Z + 8 * p, &u64::MAX.to_le_bytes())
                    .unwrap();
                rma.write_local(seg, C + 8 * p, &0u64.to_le_bytes())
                    .unwrap();
            }
            let mut writes = zbuf_writes();
            shuffle(&mut writes, seed);
            let mut current = [u64::MAX; PIXELS];
            for (p, d, c) in writes {
                let wrote = rma
                    .conditional_write(seg, Z + 8 * p, d, C + 8 * p, &c.to_le_bytes())
                    .unwrap();
                assert_eq!(wrote, current[p] > d, "{path:?}: wrote iff nearer");
                current[p] = current[p].min(d);
            }
            for p in 0..PIXELS {
                assert_eq!(u64_at(&rma, seg, Z + 8 * p), expect_z[p], "{path:?} depth");
                assert_eq!(u64_at(&rma, seg, C + 8 * p), expect_c[p], "{path:?} colour");
            }
        }
        // Equal reference: no write.
        assert!(!rma
            .conditional_write(seg, Z, expect_z[0], C, b"zzzzzzzz")
            .unwrap());
        // Refusals change nothing and are counted.
        let before = snapshot(&rma, seg);
        assert_eq!(
            reason(rma.conditional_write(seg, Z + 4, 0, C, b"x")),
            Refusal::Misaligned
        );
        assert!(matches!(
            reason(rma.conditional_write(seg, 2048, 0, C, b"x")),
            Refusal::OutOfBounds { .. }
        ));
        assert!(matches!(
            reason(rma.conditional_write(seg, Z, 0, 2047, b"xy")),
            Refusal::OutOfBounds {
                offset: 2047,
                len: 2,
                segment_len: 2048
            }
        ));
        assert_eq!(
            reason(rma.conditional_write(seg.with_key(9), Z, 0, C, b"x")),
            Refusal::WrongKey
        );
        let ro = rma.alloc(64, Perms::READ | Perms::ATOMIC).unwrap().handle();
        assert_eq!(
            reason(rma.conditional_write(ro, 0, 0, 8, b"x")),
            Refusal::NotWritable
        );
        assert!(
            before == snapshot(&rma, seg),
            "{path:?}: refusal changed memory"
        );
        assert_eq!(rma.refused(), 5, "{path:?}");
        assert!(matches!(
            rma.conditional_write(seg, Z, 0, C, &vec![0u8; rt.max_medium() + 1]),
            Err(Error::PayloadTooLarge { .. })
        ));
    }
}

#[test]
fn packed_conditional_writes_match_the_sequential_z_buffer_in_any_order() {
    for path in PATHS {
        let (rt, setup, _, _) = setup(path);
        let rma = setup.attach(&rt);
        let seg = rma.alloc_symmetric(2048, Perms::ALL).unwrap().on(0);
        let mut expect_z = [u64::MAX; PIXELS];
        let mut expect_c = [0u64; PIXELS];
        for (p, d, c) in zbuf_writes() {
            if expect_z[p] > d {
                expect_z[p] = d;
                expect_c[p] = c;
            }
        }
        for seed in 0..4 {
            for p in 0..PIXELS {
                rma.write_local(seg, Z + 8 * p, &u64::MAX.to_le_bytes())
                    .unwrap();
                rma.write_local(seg, C + 8 * p, &0u64.to_le_bytes())
                    .unwrap();
            }
            // Batches over every pixel, one candidate per pixel each (pixels without one get
            // the reference u64::MAX, which never writes), in a shuffled order of batches.
            let mut writes = zbuf_writes();
            shuffle(&mut writes, seed);
            let mut batches: Vec<(Vec<u64>, Vec<u8>)> = Vec::new();
            for (p, d, c) in writes {
                let i = match batches.iter().position(|b| b.0[p] == u64::MAX) {
                    Some(i) => i,
                    None => {
                        batches.push((vec![u64::MAX; PIXELS], vec![0u8; 8 * PIXELS]));
                        batches.len() - 1
                    }
                };
                let b = &mut batches[i];
                b.0[p] = d;
                b.1[8 * p..8 * p + 8].copy_from_slice(&c.to_le_bytes());
            }
            for (refs, data) in &batches {
                rma.conditional_write_packed(seg, Z, refs, C, data).unwrap();
            }
            for p in 0..PIXELS {
                assert_eq!(u64_at(&rma, seg, Z + 8 * p), expect_z[p], "{path:?} depth");
                assert_eq!(u64_at(&rma, seg, C + 8 * p), expect_c[p], "{path:?} colour");
            }
        }
        // Every location decides on its own: equal does not write, smaller does.
        let z0 = expect_z[0];
        let wrote = rma
            .conditional_write_packed(seg, Z, &[z0, z0 - 1], C, b"aaaaaaaabbbbbbbb")
            .unwrap();
        assert_eq!(wrote, (expect_z[1] > z0 - 1) as usize, "{path:?}");
        // Refusals: nothing written (not even the locations that were fine), counted.
        let before = snapshot(&rma, seg);
        let refused = rma.refused();
        assert_eq!(
            reason(rma.conditional_write_packed(seg, Z + 4, &[0, 0], C, b"xy")),
            Refusal::Misaligned
        );
        assert!(matches!(
            reason(rma.conditional_write_packed(seg, 2040, &[0, 0], C, b"xy")),
            Refusal::OutOfBounds { .. }
        ));
        assert!(matches!(
            reason(rma.conditional_write_packed(seg, Z, &[0, 0], 2047, b"xy")),
            Refusal::OutOfBounds { .. }
        ));
        assert!(
            before == snapshot(&rma, seg),
            "{path:?}: refusal changed memory"
        );
        assert_eq!(rma.refused(), refused + 3, "{path:?}");
        assert!(matches!(
            rma.conditional_write_packed(seg, Z, &[0, 0], C, b"xyz"),
            Err(Error::InvalidConfig { .. })
        ));
    }
}
