//! Medium and long payload integrity between ranks 0 and 1, both directions at once: `payload`.
//!
//! Each of ranks 0 and 1 sends the other (started bare: itself)
//! - a medium request of every size 0..=8192, then `max_medium() - 1` and `max_medium()`, with
//!   1..16 arguments (so payloads travel inline in the ring and through medium buffers, on both
//!   sides of the threshold); the handler checks every argument and byte and echoes the payload
//!   back with `reply_medium`, whose handler checks it again;
//! - a long request of every size 0..=8192 into the target's segment at odd offsets (cycling
//!   through a window of disjoint regions, waiting for the reply of a long before reusing its
//!   region); the handler checks the offset and every byte and replies either with a short
//!   checksum (even index) or by echoing the payload into the requester's segment with
//!   `reply_long` (odd index), checked by the requester's reply handler;
//! - two 1 MiB long requests, one at an odd offset, one ending exactly at the end of the segment.
//!
//! Patterns depend on direction, class, index and size, so a misplaced, shifted, truncated or
//! stale payload fails. Also checks that oversized medium payloads and out-of-bounds longs are
//! refused, and that every request got exactly one reply.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use volley::{MessageClass, Runtime};
use volley_tests::{check_pattern, checksum, fail, fill_pattern, join, mix};

/// Largest size of the sweeps.
const SWEEP_MAX: usize = 8192;
/// Regions a long sweep cycles through (longs in flight per direction).
const WINDOW: usize = 8;
/// Bytes per region: the largest sweep size plus room for the odd skew.
const REGION: usize = SWEEP_MAX + 128;
/// Where request longs land in the target's segment.
const REQ_BASE: usize = 0;
/// Where echoed longs land in the requester's segment.
const ECHO_BASE: usize = 1 << 20;
/// Bytes of the big longs.
const BIG: usize = 1 << 20;
/// Where the first big long lands (odd offset, after both sweep areas; the second one ends at
/// the end of the segment, from 3 MiB - 1 on).
const BIG_OFFSET: usize = ECHO_BASE + (128 << 10) + 1;
/// A scratch area for a local write/read check (between the two big longs).
const SCRATCH: usize = 5 << 19;
/// The segment size this program needs (the default).
const SEGMENT_NEEDED: usize = 4 << 20;

const MEDIUM: u64 = 0;
const LONG: u64 = 1;
const BIG_LONG: u64 = 2;

fn seed(kind: u64, sender: usize, i: u64, size: usize) -> u64 {
    mix((kind << 60) ^ ((sender as u64) << 48) ^ (i << 24) ^ size as u64)
}

/// Arguments of medium message `i`: [i, size, check words...], 2..=16 of them.
fn medium_args(sender: usize, i: u64, size: usize) -> Vec<u64> {
    let extra = (i as usize * 5 + sender) % 15;
    [i, size as u64]
        .into_iter()
        .chain((0..extra).map(|j| mix(seed(MEDIUM, sender, i, size) ^ j as u64)))
        .collect()
}

/// Odd offset of long `i` within its region.
fn skew(i: u64) -> usize {
    1 + 2 * (i as usize % 61)
}

fn long_offset(base: usize, i: u64) -> usize {
    base + (i as usize % WINDOW) * REGION + skew(i)
}

fn pattern(kind: u64, sender: usize, i: u64, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    fill_pattern(seed(kind, sender, i, size), &mut v);
    v
}

fn expect_pattern(what: &str, kind: u64, sender: usize, i: u64, payload: &[u8], size: usize) {
    assert_eq!(
        payload.len(),
        size,
        "payload: {what} {i}: {} bytes delivered, expected {size}",
        payload.len()
    );
    if let Some(pos) = check_pattern(seed(kind, sender, i, size), payload) {
        panic!("payload: {what} {i} of {size} bytes from rank {sender}: byte {pos} is corrupt");
    }
}

#[derive(Default)]
struct Counters {
    med_handled: AtomicU64,
    med_echoed: AtomicU64,
    long_handled: AtomicU64,
    long_replied: AtomicU64,
    big_handled: AtomicU64,
    big_replied: AtomicU64,
}

fn next(counter: &AtomicU64, got: u64, what: &str) {
    let expect = counter.load(Ordering::Relaxed);
    assert_eq!(
        got, expect,
        "payload: {what} {got} arrived when {expect} was expected (lost, duplicated or reordered)"
    );
    counter.store(expect + 1, Ordering::Relaxed);
}

/// Ranks 0 and 1 exchange (a lone rank talks to itself); the others stay idle.
fn peer_of(rank: usize, size: usize) -> usize {
    match (rank, size) {
        (_, 1) => 0,
        (0, _) => 1,
        (1, _) => 0,
        _ => usize::MAX,
    }
}

fn main() {
    let long_sizes: Vec<usize> = (0..=SWEEP_MAX).collect();
    let c = Arc::new(Counters::default());
    // (rank, peer), set before build: with a progress thread, handlers may run as soon as
    // build returns.
    let me = Arc::new(OnceLock::<(usize, usize)>::new());
    let job = volley_tests::job();
    me.set((job.rank, peer_of(job.rank, job.size))).unwrap();

    let mut b = Runtime::builder();
    let med_echo = {
        let (c, me) = (c.clone(), me.clone());
        b.reply_handler("med-echo", move |m| {
            let (rank, peer) = *me.get().unwrap();
            assert_eq!(m.src(), peer);
            assert_eq!(m.class(), MessageClass::Medium);
            let (i, size) = (m.arg(0), m.arg(1) as usize);
            next(&c.med_echoed, i, "medium echo");
            assert_eq!(
                m.args(),
                &medium_args(rank, i, size)[..],
                "medium echo {i} args"
            );
            expect_pattern("medium echo", MEDIUM, rank, i, m.payload(), size);
        })
    };
    let med = {
        let (c, me) = (c.clone(), me.clone());
        b.request_handler("med", move |m, token| {
            let (_, peer) = *me.get().unwrap();
            assert_eq!(m.src(), peer);
            assert_eq!(m.class(), MessageClass::Medium);
            assert_eq!(m.segment_offset(), None);
            let (i, size) = (m.arg(0), m.arg(1) as usize);
            next(&c.med_handled, i, "medium request");
            assert_eq!(m.args(), &medium_args(peer, i, size)[..], "medium {i} args");
            expect_pattern("medium request", MEDIUM, peer, i, m.payload(), size);
            token
                .reply_medium(med_echo, m.args(), m.payload())
                .expect("payload: reply_medium failed");
        })
    };
    let long_sum = {
        let (c, me) = (c.clone(), me.clone());
        b.reply_handler("long-sum", move |m| {
            let (rank, peer) = *me.get().unwrap();
            assert_eq!(m.src(), peer);
            assert_eq!(m.class(), MessageClass::Short);
            let (i, size, sum) = (m.arg(0), m.arg(1) as usize, m.arg(2));
            next(&c.long_replied, i, "long reply");
            assert_eq!(i & 1, 0, "payload: long {i} got a checksum reply");
            assert_eq!(
                sum,
                checksum(&pattern(LONG, rank, i, size)),
                "payload: checksum of long {i} ({size} bytes) differs at the target"
            );
        })
    };
    let long_echo = {
        let (c, me) = (c.clone(), me.clone());
        b.reply_handler("long-echo", move |m| {
            let (rank, peer) = *me.get().unwrap();
            assert_eq!(m.src(), peer);
            assert_eq!(m.class(), MessageClass::Long);
            let (i, size, offset) = (m.arg(0), m.arg(1) as usize, m.arg(2) as usize);
            next(&c.long_replied, i, "long reply");
            assert_eq!(i & 1, 1, "payload: long {i} got an echo reply");
            assert_eq!(offset, long_offset(ECHO_BASE, i));
            assert_eq!(m.segment_offset(), Some(offset), "long echo {i} offset");
            expect_pattern("long echo", LONG, rank, i, m.payload(), size);
        })
    };
    let long = {
        let (c, me) = (c.clone(), me.clone());
        b.request_handler("long", move |m, token| {
            let (_, peer) = *me.get().unwrap();
            assert_eq!(m.src(), peer);
            assert_eq!(m.class(), MessageClass::Long);
            let (i, size) = (m.arg(0), m.arg(1) as usize);
            next(&c.long_handled, i, "long request");
            assert_eq!(
                m.segment_offset(),
                Some(long_offset(REQ_BASE, i)),
                "payload: long {i} landed at the wrong offset"
            );
            expect_pattern("long request", LONG, peer, i, m.payload(), size);
            if i & 1 == 0 {
                token
                    .reply_short(long_sum, &[i, size as u64, checksum(m.payload())])
                    .expect("payload: reply_short failed");
            } else {
                let at = long_offset(ECHO_BASE, i);
                token
                    .reply_long(long_echo, &[i, size as u64, at as u64], m.payload(), at)
                    .expect("payload: reply_long failed");
            }
        })
    };
    let big_ack = {
        let (c, me) = (c.clone(), me.clone());
        b.reply_handler("big-ack", move |m| {
            let (rank, _) = *me.get().unwrap();
            let (j, size, sum) = (m.arg(0), m.arg(1) as usize, m.arg(2));
            next(&c.big_replied, j, "big long reply");
            assert_eq!(
                sum,
                checksum(&pattern(BIG_LONG, rank, j, size)),
                "payload: checksum of big long {j} differs at the target"
            );
        })
    };
    let big = {
        let (c, me) = (c.clone(), me.clone());
        b.request_handler("big", move |m, token| {
            let (_, peer) = *me.get().unwrap();
            let (j, size, offset) = (m.arg(0), m.arg(1) as usize, m.arg(2) as usize);
            next(&c.big_handled, j, "big long request");
            assert_eq!(m.segment_offset(), Some(offset), "big long {j} offset");
            expect_pattern("big long", BIG_LONG, peer, j, m.payload(), size);
            token
                .reply_short(big_ack, &[j, size as u64, checksum(m.payload())])
                .expect("payload: reply_short failed");
        })
    };
    let rt = join(b);
    let (rank, size) = (rt.rank(), rt.size());
    let peer = peer_of(rank, size);
    let seg = rt.segment_len();
    if seg < SEGMENT_NEEDED {
        fail(
            rank,
            2,
            &format!("segment of {seg} bytes; this test needs {SEGMENT_NEEDED}"),
        );
    }
    let active = peer != usize::MAX;
    let max = rt.max_medium();
    let medium_sizes: Vec<usize> = (0..=SWEEP_MAX).chain([max - 1, max]).collect();

    if active {
        // Refusals at the sender: nothing is sent.
        let before = rt.stats();
        let too_big = vec![0u8; rt.max_medium() + 1];
        assert!(
            matches!(
                rt.request_medium(peer, med, &[0, 0], &too_big),
                Err(volley::am::Error::PayloadTooLarge { .. })
            ),
            "payload: a medium of max_medium()+1 bytes was not refused"
        );
        assert!(
            matches!(
                rt.request_long(peer, long, &[0, 0], &[1, 2, 3], seg - 2),
                Err(volley::am::Error::OutOfBounds { .. })
            ),
            "payload: a long past the end of the segment was not refused"
        );
        assert_eq!(
            rt.stats(),
            before,
            "payload: a refused send changed the stats"
        );

        // Local segment access round trip, in an area nobody sends to.
        let here = pattern(7, rank, 0, 4099);
        rt.write_segment(SCRATCH, &here).unwrap();
        let mut back = vec![0u8; here.len()];
        rt.read_segment(SCRATCH, &mut back).unwrap();
        assert_eq!(
            back, here,
            "payload: read_segment differs from write_segment"
        );
    }
    rt.barrier();

    if active {
        // Medium sweep, fully pipelined.
        for (i, &n) in medium_sizes.iter().enumerate() {
            let i = i as u64;
            rt.request_medium(
                peer,
                med,
                &medium_args(rank, i, n),
                &pattern(MEDIUM, rank, i, n),
            )
            .expect("payload: request_medium failed");
        }
        // Long sweep, at most WINDOW in flight (a region is reused only after its reply).
        for (i, &n) in long_sizes.iter().enumerate() {
            let i = i as u64;
            if i as usize >= WINDOW {
                let need = i - WINDOW as u64 + 1;
                rt.wait_until(|| c.long_replied.load(Ordering::Relaxed) >= need);
            }
            rt.request_long(
                peer,
                long,
                &[i, n as u64],
                &pattern(LONG, rank, i, n),
                long_offset(REQ_BASE, i),
            )
            .expect("payload: request_long failed");
        }
        rt.wait_until(|| c.long_replied.load(Ordering::Relaxed) >= long_sizes.len() as u64);
        rt.wait_until(|| c.med_echoed.load(Ordering::Relaxed) >= medium_sizes.len() as u64);
        // Big longs, one at a time.
        let bigs = [(BIG, BIG_OFFSET), (BIG + 1, seg - (BIG + 1))];
        for (j, &(n, at)) in bigs.iter().enumerate() {
            let j = j as u64;
            rt.request_long(
                peer,
                big,
                &[j, n as u64, at as u64],
                &pattern(BIG_LONG, rank, j, n),
                at,
            )
            .expect("payload: big request_long failed");
            rt.wait_until(|| c.big_replied.load(Ordering::Relaxed) > j);
        }
    }
    rt.barrier();

    let counts = [
        (
            "medium requests handled",
            &c.med_handled,
            medium_sizes.len(),
        ),
        ("medium echoes received", &c.med_echoed, medium_sizes.len()),
        ("long requests handled", &c.long_handled, long_sizes.len()),
        ("long replies received", &c.long_replied, long_sizes.len()),
        ("big longs handled", &c.big_handled, 2),
        ("big long replies received", &c.big_replied, 2),
    ];
    for (what, counter, n) in counts {
        let expect = if active { n as u64 } else { 0 };
        let got = counter.load(Ordering::Relaxed);
        if got != expect {
            fail(rank, 1, &format!("{what}: {got}, expected {expect}"));
        }
    }
    if active {
        // The first big long is still intact in this rank's segment (nothing else writes there).
        let mut buf = vec![0u8; BIG];
        rt.read_segment(BIG_OFFSET, &mut buf).unwrap();
        expect_pattern("big long (read back)", BIG_LONG, peer, 0, &buf, BIG);
        let s = rt.stats();
        let (m, l) = (medium_sizes.len() as u64, long_sizes.len() as u64);
        let want_sent = [[0, m, l + 2], [l.div_ceil(2) + 2, m, l / 2]];
        if s.sent != want_sent || s.handled != want_sent || s.dropped != 0 {
            fail(
                rank,
                1,
                &format!("stats {s}; expected sent = handled = {want_sent:?}, none dropped"),
            );
        }
        if rank == 0 {
            println!(
                "payload: {} medium sizes (max {}) and {} long sizes plus 2 x 1 MiB verified in \
                 both directions",
                medium_sizes.len(),
                rt.max_medium(),
                long_sizes.len()
            );
        }
    }
}
