//! Protection of one-sided accesses: `rma_protect [basic|large]`.
//!
//! Every rank owns a set of segments: two symmetric ones (read+write without atomics, and
//! everything), and per-rank ones that are read-only, write-only, without any permission, and
//! two that it frees before the attacks (the id of the first is then reused by a new segment,
//! the second stays free). It sends the per-rank handles to its left neighbour, fills every
//! segment with a pattern and takes checksums of each (`read_local`) and of its whole segment
//! area. Then each rank attacks its right neighbour:
//! - `basic` (default): wrong key, out of bounds, zero bytes past the end, offsets near
//!   `usize::MAX`, put to read-only and permissionless segments, get from write-only ones,
//!   atomics without the atomic permission, misaligned atomics, freed and reused segments,
//!   forged segment ids, and the non-blocking forms (`put_nb`, `get_nb`, `put_nbi` + `sync`);
//! - `large`: the same kind of refusals for puts and gets of 200000 bytes (several AM
//!   fragments).
//!
//! Both modes then send two long messages onto the target's segments (refused: `OnSegment`,
//! by the sender on one node, by the target across nodes) and one to the free end of its
//! segment area (accepted: the only one whose handler runs).
//!
//! Each access must fail with the right `Error::Refused { rank, reason }` (out-of-bounds
//! details included). The attacker tells the target how many it made; after a barrier the
//! target checks that its `refused()` counter equals that number, and that every checksum is
//! unchanged. Valid reads of the same segments before the attacks show the handles are right,
//! and local refusals (`read_local`/`write_local` outside a segment) are not counted.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use volley::rma::{AtomicOp, Perms, Refusal, Rma, SegmentRef};
use volley::rma::{Error, Result};
use volley::Runtime;
use volley_tests::{arg_str, checksum, fail, fill_pattern, join, mix, path_name};

const RW_LEN: usize = 4160;
const ALL_LEN: usize = 300_000;
const SMALL_LEN: usize = 1000;
const VICTIM_LEN: usize = 512;
/// Bytes of the large accesses.
const LARGE: usize = 200_000;

/// The per-rank segments a target sends its attacker, by index.
const RO: usize = 0;
const WO: usize = 1;
const NONE: usize = 2;
const VICTIM: usize = 3;
const VICTIM2: usize = 4;
const HANDLES: usize = 5;

fn seed(owner: usize, which: u64) -> u64 {
    mix(0x5e9 ^ (owner as u64) << 16 ^ which)
}

/// The attacks against one target: how many were made, and what went wrong (every problem is
/// collected and reported at the end, so one run shows them all).
struct Attacker<'a> {
    target: usize,
    path: &'static str,
    /// Whether this rank maps the target's memory (same node).
    target_local: bool,
    made: u64,
    problems: Vec<String>,
    rma: &'a Rma<'a>,
}

impl Attacker<'_> {
    /// Counts an access that must be refused and checks that `r` is the target's refusal for
    /// `want`.
    fn refused<T: std::fmt::Debug>(&mut self, what: &str, r: Result<T>, want: Refusal) {
        self.made += 1;
        match r {
            // A long message onto a segment is refused by the AM layer, whose error the
            // one-sided one carries.
            Err(
                Error::Refused { rank, reason }
                | Error::Am(volley::am::Error::Refused { rank, reason }),
            ) if rank == self.target && reason == want => {}
            other => self.problems.push(format!(
                "{what}: expected Refused {{ rank: {}, reason: {want:?} }}, got {other:?}",
                self.target
            )),
        }
    }

    fn put(&mut self, what: &str, to: SegmentRef, offset: usize, len: usize, want: Refusal) {
        let data = vec![0xa5u8; len];
        let r = self.rma.put(to, offset, &data);
        self.refused(what, r, want);
    }

    fn get(&mut self, what: &str, from: SegmentRef, offset: usize, len: usize, want: Refusal) {
        let mut buf = vec![0x5au8; len];
        let r = self.rma.get(from, offset, &mut buf);
        self.refused(what, r, want);
        // (Only for gets of one AM fragment: what a refused multi-fragment get leaves in the
        // buffer is not specified.)
        if buf.iter().any(|&b| b != 0x5a) && len <= SMALL_LEN {
            self.problems
                .push(format!("{what}: a refused get wrote the buffer"));
        }
    }

    fn atomic(&mut self, what: &str, at: SegmentRef, offset: usize, op: AtomicOp, want: Refusal) {
        let r = self.rma.atomic(at, offset, op, 1, 0);
        self.refused(what, r, want);
    }
}

fn oob(offset: usize, len: usize, segment_len: usize) -> Refusal {
    Refusal::OutOfBounds {
        offset: offset as u64,
        len: len as u64,
        segment_len: segment_len as u64,
    }
}

fn main() {
    let large = match arg_str(0).as_deref() {
        None | Some("basic") => false,
        Some("large") => true,
        Some(other) => panic!("rma_protect: unknown mode {other:?} (basic or large)"),
    };
    let handles = Arc::new(Mutex::new(vec![None::<SegmentRef>; HANDLES]));
    let tally = Arc::new(AtomicU64::new(u64::MAX));

    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let handle_msg = {
        let handles = handles.clone();
        b.request_handler("rma-protect-handle", move |m, _| {
            let h = SegmentRef::from_words([m.arg(1), m.arg(2), m.arg(3)]);
            handles.lock().unwrap()[m.arg(0) as usize] = Some(h);
        })
    };
    // Long messages that reached this rank (only one of those its attacker sends may).
    let longs = Arc::new(AtomicU64::new(0));
    let long_msg = {
        let longs = longs.clone();
        b.request_handler("rma-protect-long", move |_, _| {
            longs.fetch_add(1, Ordering::Relaxed);
        })
    };
    let tally_msg = {
        let tally = tally.clone();
        b.request_handler("rma-protect-tally", move |m, _| {
            tally.store(m.arg(0), Ordering::Relaxed);
        })
    };
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let alloc_fail = |e: Error| -> ! { fail(rank, 2, &format!("alloc: {e}")) };

    // The target side: segments, handles to the attacker, patterns, checksums.
    let rw = rma
        .alloc_symmetric(RW_LEN, Perms::READ | Perms::WRITE)
        .unwrap_or_else(|e| alloc_fail(e));
    let all = rma
        .alloc_symmetric(ALL_LEN, Perms::ALL)
        .unwrap_or_else(|e| alloc_fail(e));
    let local = [
        (SMALL_LEN, Perms::READ),
        (SMALL_LEN, Perms::WRITE),
        (SMALL_LEN, Perms::NONE),
        (VICTIM_LEN, Perms::ALL),
        (VICTIM_LEN, Perms::ALL),
    ]
    .map(|(n, p)| rma.alloc(n, p).unwrap_or_else(|e| alloc_fail(e)));
    for (i, seg) in local.iter().enumerate() {
        let [a, b, c] = seg.handle().to_words();
        rt.request_short(left, handle_msg, &[i as u64, a, b, c])
            .unwrap_or_else(|e| fail(rank, 1, &format!("sending a handle: {e}")));
    }
    rt.wait_until(|| handles.lock().unwrap().iter().all(Option::is_some));
    let theirs: Vec<SegmentRef> = handles.lock().unwrap().iter().flatten().copied().collect();
    assert!(rma.free(local[VICTIM]), "freeing a live segment failed");
    assert!(rma.free(local[VICTIM2]), "freeing a live segment failed");
    assert!(!rma.free(local[VICTIM2]), "a double free succeeded");
    let reuse = rma
        .alloc(VICTIM_LEN, Perms::ALL)
        .unwrap_or_else(|e| alloc_fail(e));
    // Same rank and id as the first victim (the lowest free id), so the stale handle meets a
    // live segment with another key.
    let reused_id = reuse.handle().to_words()[0] == local[VICTIM].handle().to_words()[0];
    if !reused_id {
        fail(
            rank,
            1,
            "the freed segment's id was not reused by the next alloc",
        );
    }
    let live: Vec<(&str, SegmentRef, usize)> = vec![
        ("read+write", rw.on(rank), RW_LEN),
        ("all", all.on(rank), ALL_LEN),
        ("read-only", local[RO].handle(), SMALL_LEN),
        ("write-only", local[WO].handle(), SMALL_LEN),
        ("no-permission", local[NONE].handle(), SMALL_LEN),
        ("reused", reuse.handle(), VICTIM_LEN),
    ];
    for (i, &(_, seg, n)) in live.iter().enumerate() {
        let mut data = vec![0u8; n];
        fill_pattern(seed(rank, i as u64), &mut data);
        rma.write_local(seg, 0, &data).unwrap();
    }
    let sums = || -> Vec<u64> {
        let mut v: Vec<u64> = live
            .iter()
            .map(|&(_, seg, n)| {
                let mut buf = vec![0u8; n];
                rma.read_local(seg, 0, &mut buf).unwrap();
                checksum(&buf)
            })
            .collect();
        let mut area = vec![0u8; rt.segment_len()];
        rt.read_segment(0, &mut area).unwrap();
        v.push(checksum(&area));
        v
    };
    let before = sums();
    if rma.refused() != 0 {
        fail(
            rank,
            1,
            &format!("{} refusals before any attack", rma.refused()),
        );
    }
    rt.barrier();

    // The attacker side, against the right neighbour.
    let (all_t, rw_t) = (all.on(right), rw.on(right));
    let key = |s: SegmentRef| s.to_words()[1];
    let bad_key = all_t.with_key(key(all_t) ^ 1);
    // Valid reads first: the handles are right.
    let mut probe = vec![0u8; SMALL_LEN];
    let mut want = vec![0u8; SMALL_LEN];
    for (i, seg) in [(1u64, all_t), (2, theirs[RO])] {
        rma.get(seg, 0, &mut probe)
            .unwrap_or_else(|e| fail(rank, 1, &format!("path {path}: a valid get: {e}")));
        fill_pattern(seed(right, i), &mut want);
        if probe != want {
            fail(
                rank,
                1,
                &format!("path {path}: a valid get read other bytes"),
            );
        }
    }
    let word = rma
        .atomic(all_t, 0, AtomicOp::Load, 0, 0)
        .unwrap_or_else(|e| fail(rank, 1, &format!("path {path}: a valid atomic load: {e}")));
    if word.to_le_bytes() != want_first_word(right) {
        fail(
            rank,
            1,
            &format!("path {path}: a valid atomic load read {word:#x}"),
        );
    }
    let mut a = Attacker {
        target: right,
        path,
        target_local: rt.is_local(right),
        made: 0,
        problems: Vec::new(),
        rma: &rma,
    };
    if large {
        let n = LARGE;
        a.put("large put, wrong key", bad_key, 0, n, Refusal::WrongKey);
        a.get("large get, wrong key", bad_key, 0, n, Refusal::WrongKey);
        let at = ALL_LEN - n / 2;
        a.put("large put past the end", all_t, at, n, oob(at, n, ALL_LEN));
        a.get("large get past the end", all_t, at, n, oob(at, n, ALL_LEN));
        let at = usize::MAX - 2;
        a.put(
            "large put at usize::MAX - 2",
            all_t,
            at,
            n,
            oob(at, n, ALL_LEN),
        );
        a.get(
            "large get at usize::MAX - 2",
            all_t,
            at,
            n,
            oob(at, n, ALL_LEN),
        );
        let (n, at) = (ALL_LEN + 1, 0);
        a.get(
            "get of one byte more than the segment",
            all_t,
            at,
            n,
            oob(at, n, ALL_LEN),
        );
    } else {
        basic_attacks(&mut a, all_t, rw_t, bad_key, &theirs, size);
    }
    // Long messages write the segment area by offset, never a segment's memory. Segments are
    // carved first fit from offset 0: the target's read+write segment starts there, and its
    // "all" segment right after it; the end of the area is free. To a rank of this node the
    // sender sees the segments and refuses; to a rank of another node the send succeeds and
    // the target drops the message and counts the refusal.
    let zeros = [0u8; 256];
    for (what, offset, len) in [
        ("long message onto the first segment", 0, 64),
        ("long message across two segments", RW_LEN - 128, 256),
    ] {
        let r = rt.request_long(right, long_msg, &[], &zeros[..len], offset);
        match (a.target_local, r) {
            (true, r) => a.refused(what, r.map_err(Error::from), Refusal::OnSegment),
            (false, Ok(())) => a.made += 1,
            (false, Err(e)) => a.problems.push(format!("{what}, over the network: {e}")),
        }
    }
    // Zeros onto the free end's zeros: accepted, and the area's checksum holds.
    let free_end = rt.segment_len() - 64;
    if let Err(e) = rt.request_long(right, long_msg, &[], &zeros[..64], free_end) {
        a.problems
            .push(format!("a long message to the free end of the area: {e}"));
    }
    let Attacker {
        made, mut problems, ..
    } = a;

    rt.request_short(right, tally_msg, &[made])
        .unwrap_or_else(|e| fail(rank, 1, &format!("sending the tally: {e}")));
    rt.wait_until(|| tally.load(Ordering::Relaxed) != u64::MAX);
    rt.barrier();

    // Local refusals: reported, not counted, nothing written.
    let mut buf = [0u8; 2];
    let local_refusals = [
        rma.read_local(local[VICTIM2].handle(), 0, &mut buf),
        rma.read_local(all.on(rank), ALL_LEN - 1, &mut buf),
        rma.write_local(all.on(rank), ALL_LEN - 1, &buf),
        rma.write_local(rw.on(rank), usize::MAX, &buf),
    ];
    for (i, r) in local_refusals.into_iter().enumerate() {
        if !matches!(r, Err(Error::Refused { rank: r, .. }) if r == rank) {
            problems.push(format!("local refusal {i}: got {r:?}"));
        }
    }
    let after = sums();
    for (i, (b, a)) in before.iter().zip(&after).enumerate() {
        if b != a {
            let what = live
                .get(i)
                .map_or("its whole segment area".to_string(), |l| {
                    format!("its {} segment", l.0)
                });
            problems.push(format!(
                "refused accesses from rank {left} changed {what} (checksum {b:#x} -> {a:#x})"
            ));
        }
    }
    if longs.load(Ordering::Relaxed) != 1 {
        problems.push(format!(
            "{} long messages from rank {left} ran their handler, not 1",
            longs.load(Ordering::Relaxed)
        ));
    }
    let expect = tally.load(Ordering::Relaxed);
    if rma.refused() != expect {
        problems.push(format!(
            "refused() = {}, but rank {left} made {expect} accesses that must be refused",
            rma.refused()
        ));
    }
    if !problems.is_empty() {
        fail(
            rank,
            1,
            &format!(
                "path {path}: {} problems:\n  {}",
                problems.len(),
                problems.join("\n  ")
            ),
        );
    }
    rt.barrier();
    if rank == 0 {
        println!(
            "rma_protect: path={path}: {size} ranks: {made} {} refused accesses per rank, each \
             with the right reason, counted once, memory unchanged",
            if large { "large" } else { "basic" }
        );
    }
}

/// The first 8 bytes of `owner`'s "all" segment.
fn want_first_word(owner: usize) -> [u8; 8] {
    let mut w = [0u8; 8];
    fill_pattern(seed(owner, 1), &mut w);
    w
}

fn basic_attacks(
    a: &mut Attacker<'_>,
    all_t: SegmentRef,
    rw_t: SegmentRef,
    bad_key: SegmentRef,
    theirs: &[SegmentRef],
    size: usize,
) {
    let rma = a.rma;
    let t = a.target;
    use AtomicOp::*;
    use Refusal::*;

    // Keys.
    a.put("put, wrong key", bad_key, 0, 8, WrongKey);
    a.get("get, wrong key", bad_key, 0, 8, WrongKey);
    a.atomic("fetch_add, wrong key", bad_key, 0, FetchAdd, WrongKey);
    a.atomic("load, wrong key", bad_key, 0, Load, WrongKey);

    // Bounds.
    let n = ALL_LEN;
    a.put("put across the end", all_t, n - 3, 4, oob(n - 3, 4, n));
    a.put("empty put past the end", all_t, n + 1, 0, oob(n + 1, 0, n));
    a.get("get at the end", all_t, n, 1, oob(n, 1, n));

    a.atomic("fetch_add at the end", all_t, n, FetchAdd, oob(n, 8, n));
    a.atomic(
        "swap far past the end",
        all_t,
        n << 8,
        Swap,
        oob(n << 8, 8, n),
    );
    // Lengths that overflow.
    let m = usize::MAX;
    a.put("put at usize::MAX - 2", all_t, m - 2, 8, oob(m - 2, 8, n));
    a.put("empty put at usize::MAX", all_t, m, 0, oob(m, 0, n));
    a.get("get at usize::MAX", all_t, m, 1, oob(m, 1, n));
    a.atomic(
        "fetch_add at usize::MAX - 7",
        all_t,
        m - 7,
        FetchAdd,
        oob(m - 7, 8, n),
    );

    // Permissions.
    let (ro, wo, none) = (theirs[RO], theirs[WO], theirs[NONE]);
    a.put("put to a read-only segment", ro, 0, 1, NotWritable);
    a.put("empty put to a read-only segment", ro, 0, 0, NotWritable);
    let r = rma.put_nb(ro, 10, b"xyz").and_then(|ev| ev.wait());
    a.refused("put_nb to a read-only segment", r, NotWritable);
    a.atomic(
        "fetch_add on a read-only segment",
        ro,
        0,
        FetchAdd,
        NoAtomics,
    );
    a.atomic("load on a read-only segment", ro, 0, Load, NoAtomics);
    a.get("get from a write-only segment", wo, 0, 10, NotReadable);
    let mut buf = [0x5au8; 10];
    let r = rma.get_nb(wo, 0, &mut buf).and_then(|ev| ev.wait());
    a.refused("get_nb from a write-only segment", r, NotReadable);
    if buf != [0x5a; 10] {
        a.problems
            .push("a refused get_nb wrote the buffer".to_string());
    }
    a.atomic("swap on a write-only segment", wo, 0, Swap, NoAtomics);
    a.put(
        "put to a segment without permissions",
        none,
        0,
        1,
        NotWritable,
    );
    a.get(
        "get from a segment without permissions",
        none,
        0,
        1,
        NotReadable,
    );
    a.atomic(
        "fetch_or on a segment without permissions",
        none,
        0,
        FetchOr,
        NoAtomics,
    );
    a.atomic("load on a read+write segment", rw_t, 0, Load, NoAtomics);
    let r = rma.compare_swap(rw_t, 8, 0, 1);
    a.refused("compare_swap on a read+write segment", r, NoAtomics);
    let r = rma.fetch_add(rw_t, 16, 1);
    a.refused("fetch_add on a read+write segment", r, NoAtomics);

    // Alignment.
    for d in 1..8 {
        a.atomic("misaligned fetch_add", all_t, 64 + d, FetchAdd, Misaligned);
    }
    let r = rma.compare_swap(all_t, 4, 0, 1);
    a.refused("misaligned compare_swap", r, Misaligned);
    a.atomic("misaligned load", all_t, n - 9, Load, Misaligned);

    // Freed segments, a stale handle whose id was reused, forged ids.
    let (stale, freed) = (theirs[VICTIM], theirs[VICTIM2]);
    a.put("put to a freed segment", freed, 0, 8, NoSuchSegment);
    a.get("get from a freed segment", freed, 0, 8, NoSuchSegment);
    a.atomic(
        "fetch_add on a freed segment",
        freed,
        0,
        FetchAdd,
        NoSuchSegment,
    );
    a.put("put through a stale handle", stale, 0, 8, WrongKey);
    a.get("get through a stale handle", stale, 0, 8, WrongKey);
    a.atomic("swap through a stale handle", stale, 0, Swap, WrongKey);
    for id in [40u64, 63, 64, 200, 0xffff] {
        let w = all_t.to_words();
        let forged = SegmentRef::from_words([t as u64 | id << 32, w[1], w[2]]);
        a.put("put to a forged segment id", forged, 0, 8, NoSuchSegment);
        a.get("get from a forged segment id", forged, 0, 8, NoSuchSegment);
    }

    // Implicit puts: the refusal comes from put_nbi (direct, to a rank this one maps) or from
    // sync (AM, or a rank of another node).
    let checked_now = a.path == "direct" && a.target_local;
    let early = rma.put_nbi(bad_key, 0, b"implicit");
    let synced = rma.sync();
    let r: Result<()> = match (early, synced) {
        (Err(e), Ok(())) if checked_now => Err(e),
        (Ok(()), Err(e)) if !checked_now => Err(e),
        (early, synced) => {
            a.problems.push(format!(
                "put_nbi + sync: {early:?} then {synced:?}: expected the refusal from {}",
                if checked_now { "put_nbi" } else { "sync" }
            ));
            Err(Error::Refused {
                rank: t,
                reason: WrongKey,
            })
        }
    };
    a.refused("put_nbi + sync, wrong key", r, WrongKey);
    if let Err(e) = rma.sync() {
        a.problems.push(format!("a second sync reported {e}"));
    }

    // Not a refusal: a rank outside the job is caught at the initiator.
    let w = all_t.to_words();
    let nowhere = SegmentRef::from_words([size as u64 | w[0] >> 32 << 32, w[1], w[2]]);
    match rma.put(nowhere, 0, b"x") {
        Err(Error::Am(volley::am::Error::InvalidRank { rank: r, size: s }))
            if r == size && s == size => {}
        other => a.problems.push(format!("put to rank {size}: {other:?}")),
    }
}
