//! Non-blocking one-sided operations: `rma_nb`.
//!
//! Every rank works on its right neighbour's symmetric segment, in three areas:
//! 1. 1200 `put_nb` of 1 to 700 bytes (and every hundredth of about 70 KB, several AM
//!    fragments), all outstanding at once, from one buffer that is overwritten as soon as each
//!    `put_nb` returns; one event is polled with `test` until done, then all are waited for in
//!    reverse order. Then 1200 `get_nb` of the same items into disjoint pieces of one buffer,
//!    all outstanding, waited for in reverse order and checked, and a `get_nb` whose event is
//!    dropped (dropping waits). After a barrier the owner checks the area with `read_local`.
//! 2. 2000 `put_nbi` (a few of 130 KB), the last one refused (wrong key), then `sync`: the
//!    refusal is reported once, by `put_nbi` on the direct path and by `sync` on the AM path
//!    (which must wait for that last reply to know), the next `sync` is clean, and every valid
//!    put is complete when `sync` returns (read back at once, before any barrier), and checked
//!    by the owner.
//! 3. As many 8-byte `put_nb` outstanding as the path allows (up to 5000): if a limit is
//!    reached it must be reported as `TooManyOutstanding` with the number held, and work again
//!    once the events are waited for.

use volley::rma::Error;
use volley::rma::{Perms, Refusal, Rma, SegmentRef};
use volley::Runtime;
use volley_tests::{check_pattern, fail, fill_pattern, join, mix, path_name};

const NB_ITEMS: usize = 1200;
const NBI_ITEMS: usize = 2000;
/// The `put_nbi` that goes to a wrong key (the last: a `sync` that does not wait for every
/// reply misses it).
const NBI_REFUSED: usize = NBI_ITEMS - 1;
/// Most events held at once in area 3.
const HOLD: usize = 5000;

/// An item: (offset in the segment, length).
type Item = (usize, usize);

/// Items of areas 1 and 2 and the offset of area 3, and the segment length.
fn layout() -> (Vec<Item>, Vec<Item>, usize, usize) {
    let mut at = 1;
    let mut items = |n: usize, len: &dyn Fn(usize) -> usize| -> Vec<Item> {
        (0..n)
            .map(|i| {
                let item = (at, len(i));
                at += item.1 + 3;
                item
            })
            .collect()
    };
    let nb = items(NB_ITEMS, &|i| {
        if i % 100 == 37 {
            70_000 + i
        } else {
            1 + i * 37 % 700
        }
    });
    let nbi = items(NBI_ITEMS, &|i| {
        if i % 500 == 250 {
            130_001
        } else {
            1 + i * 13 % 97
        }
    });
    let words = at.next_multiple_of(8);
    (nb, nbi, words, words + HOLD * 8)
}

fn seed(area: u64, writer: usize, i: usize) -> u64 {
    mix(area << 56 ^ (writer as u64) << 32 ^ i as u64)
}

fn main() {
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let (right, left) = ((rank + 1) % size, (rank + size - 1) % size);
    let (nb, nbi, words, len) = layout();
    let seg = rma
        .alloc_symmetric(len, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric({len}): {e}")));
    let (mine, theirs): (SegmentRef, SegmentRef) = (seg.on(rank), seg.on(right));
    let die = |what: &str, e: Error| -> ! { fail(rank, 1, &format!("path {path}: {what}: {e}")) };
    let verify = |what: &str, seed: u64, at: usize, got: &[u8]| {
        if let Some(p) = check_pattern(seed, got) {
            fail(
                rank,
                1,
                &format!(
                    "path {path}: {what}: {} bytes at {at}: byte {p} is {:#04x}",
                    got.len(),
                    got[p]
                ),
            );
        }
    };

    // 1. put_nb, all outstanding, from one reused buffer; waited for in reverse order.
    let mut buf = Vec::new();
    let mut events = Vec::with_capacity(NB_ITEMS);
    for (i, &(at, n)) in nb.iter().enumerate() {
        buf.resize(n, 0);
        fill_pattern(seed(1, rank, i), &mut buf);
        events.push(
            rma.put_nb(theirs, at, &buf)
                .unwrap_or_else(|e| die(&format!("put_nb {i}"), e)),
        );
        // The data may be reused as soon as put_nb returns.
        buf.fill(0xee);
        if i == NB_ITEMS / 2 {
            let mut spins = 0u64;
            while !events[0].test() {
                spins += 1;
                if spins > 100_000_000 {
                    fail(rank, 1, "the first put_nb never completed (test)");
                }
            }
        }
    }
    while let Some(ev) = events.pop() {
        let i = events.len();
        ev.wait()
            .unwrap_or_else(|e| die(&format!("put_nb {i} wait"), e));
    }

    // get_nb of the same items into pieces of one buffer, all outstanding.
    let total: usize = nb.iter().map(|&(_, n)| n).sum();
    let mut back = vec![0xeeu8; total];
    {
        let mut rest: &mut [u8] = &mut back;
        let mut events = Vec::with_capacity(NB_ITEMS);
        for (i, &(at, n)) in nb.iter().enumerate() {
            let (piece, tail) = std::mem::take(&mut rest).split_at_mut(n);
            rest = tail;
            events.push(
                rma.get_nb(theirs, at, piece)
                    .unwrap_or_else(|e| die(&format!("get_nb {i}"), e)),
            );
        }
        while let Some(ev) = events.pop() {
            let i = events.len();
            ev.wait()
                .unwrap_or_else(|e| die(&format!("get_nb {i} wait"), e));
        }
    }
    let mut pos = 0;
    for (i, &(at, n)) in nb.iter().enumerate() {
        verify(
            &format!("get_nb {i} of rank {right}"),
            seed(1, rank, i),
            at,
            &back[pos..pos + n],
        );
        pos += n;
    }
    // Dropping an event waits for it.
    let (at, n) = nb[37];
    let mut piece = vec![0xeeu8; n];
    let ev = rma
        .get_nb(theirs, at, &mut piece)
        .unwrap_or_else(|e| die("get_nb (dropped)", e));
    drop(ev);
    verify("dropped get_nb", seed(1, rank, 37), at, &piece);

    // 2. put_nbi, one of them refused, then sync.
    let mut early = None;
    for (i, &(at, n)) in nbi.iter().enumerate() {
        buf.resize(n, 0);
        fill_pattern(seed(2, rank, i), &mut buf);
        let to = if i == NBI_REFUSED {
            theirs.with_key(0x5eed_0fba_dc0d)
        } else {
            theirs
        };
        match rma.put_nbi(to, at, &buf) {
            Ok(()) => {}
            Err(e) if i == NBI_REFUSED => early = Some(e),
            Err(e) => die(&format!("put_nbi {i}"), e),
        }
        buf.fill(0xee);
    }
    let synced = rma.sync();
    // The direct path checks at once, but only for ranks it maps: ranks of other nodes are
    // served by handlers, which report at sync.
    let checked_now = path == "direct" && rt.is_local(right);
    let (refused_now, refused_at_sync) = if checked_now {
        (early, synced.err())
    } else {
        (synced.err(), early)
    };
    let wrong_key = |e: &Option<Error>| {
        matches!(
            e,
            Some(Error::Refused {
                rank: r,
                reason: Refusal::WrongKey
            }) if *r == right
        )
    };
    if !wrong_key(&refused_now) || refused_at_sync.is_some() {
        fail(
            rank,
            1,
            &format!(
                "path {path}: the put_nbi to a wrong key was reported as {refused_now:?} (and \
                 {refused_at_sync:?}); expected WrongKey from rank {right} from {}",
                if checked_now { "put_nbi" } else { "sync" }
            ),
        );
    }
    rma.sync()
        .unwrap_or_else(|e| die("a second sync reported again", e));
    for (i, &(at, n)) in nbi.iter().enumerate() {
        if i == NBI_REFUSED {
            continue;
        }
        back.resize(n, 0);
        back.fill(0xee);
        rma.get(theirs, at, &mut back[..n])
            .unwrap_or_else(|e| die(&format!("get after sync {i}"), e));
        verify(
            &format!("put_nbi {i} read back right after sync"),
            seed(2, rank, i),
            at,
            &back[..n],
        );
    }

    // 3. As many outstanding as the path allows.
    let mut events = Vec::with_capacity(HOLD);
    let mut limit = None;
    let values: Vec<[u8; 8]> = (0..HOLD as u64)
        .map(|i| mix(i ^ (rank as u64) << 40).to_le_bytes())
        .collect();
    for (i, v) in values.iter().enumerate() {
        match rma.put_nb(theirs, words + 8 * i, v) {
            Ok(ev) => events.push(ev),
            Err(Error::TooManyOutstanding { max }) if max == i => {
                limit = Some(max);
                break;
            }
            Err(e) => die(&format!("put_nb {i} with {i} outstanding"), e),
        }
    }
    let held = events.len();
    while let Some(ev) = events.pop() {
        ev.wait()
            .unwrap_or_else(|e| die(&format!("put_nb {} wait", events.len()), e));
    }
    if held < HOLD {
        // The one refused for the limit goes through now.
        rma.put_nb(theirs, words + 8 * held, &values[held])
            .and_then(|ev| ev.wait())
            .unwrap_or_else(|e| die("put_nb after the outstanding ones completed", e));
    }
    let mut got = vec![0u8; HOLD * 8];
    rma.get(theirs, words, &mut got)
        .unwrap_or_else(|e| die("get of area 3", e));
    // Words past the last put are still zero (fresh memory).
    let written = (held + 1).min(HOLD);
    for (i, v) in values.iter().enumerate() {
        let want = if i < written { *v } else { [0; 8] };
        if got[8 * i..8 * i + 8] != want[..] {
            fail(
                rank,
                1,
                &format!(
                    "path {path}: word {i} of area 3 of rank {right} is {:02x?}, expected \
                     {want:02x?} ({written} words written)",
                    &got[8 * i..8 * i + 8]
                ),
            );
        }
    }
    rt.barrier();

    // The owner's view of areas 1 and 2 (written by the left neighbour).
    for (area, items) in [(1, &nb), (2, &nbi)] {
        for (i, &(at, n)) in items.iter().enumerate() {
            back.resize(n, 0);
            rma.read_local(mine, at, &mut back[..n]).unwrap();
            if area == 2 && i == NBI_REFUSED {
                // Nobody wrote it: still zero (fresh memory).
                if back[..n].iter().any(|&b| b != 0) {
                    fail(
                        rank,
                        1,
                        &format!("path {path}: the refused put_nbi changed memory at {at}"),
                    );
                }
                continue;
            }
            verify(
                &format!("area {area} item {i} from rank {left} (read_local)"),
                seed(area, left, i),
                at,
                &back[..n],
            );
        }
    }
    rt.barrier();
    if rank == 0 {
        let limit = limit.map_or(format!("no limit up to {HOLD}"), |m| {
            format!("limit {m} reported")
        });
        println!(
            "rma_nb: path={path}: {size} ranks: {NB_ITEMS} put_nb and get_nb outstanding, \
             {NBI_ITEMS} put_nbi with one refusal, {held} events held ({limit}): all checked"
        );
    }
}
