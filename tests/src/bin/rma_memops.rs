//! Seed 002's memory-based operations across processes: `rma_memops [entries] [rounds]`.
//!
//! Every rank allocates one symmetric segment; rank 0 is the target of everything.
//! 1. **FIFO.** Rank 0 creates a FIFO of `CAPACITY` 16-byte entries and puts its
//!    [`FifoRef`] (as words) into every rank's mailbox. Every other rank enqueues `entries`
//!    entries (sender, sequence number) with `fifo_enqueue_retry` while rank 0 dequeues (and
//!    polls between empty dequeues, which serves the enqueues on the AM path): every sender's
//!    entries must arrive exactly once, in send order. Then, with rank 0 in a barrier (not
//!    dequeuing), rank 1 fills the FIFO with plain `fifo_enqueue`s (each `Stored`), and every
//!    other rank's plain `fifo_enqueue` must return `Full` and leave the FIFO's bytes as they
//!    were (read with `get` before and after); rank 0 then dequeues exactly rank 1's entries.
//! 2. **Write with flag.** Every other rank `put_with_flag`s a block of `BLOCK` bytes (a
//!    pattern of its own per round) and flag = round into its own area of rank 0's segment,
//!    `rounds` times. Rank 0 polls every flag (`read_local`, with `poll` between); whenever a
//!    flag shows a new round it checks that the round is the next one and that the whole block
//!    holds that round's pattern, then acknowledges with an empty `put_with_flag` into the
//!    sender's segment, which the sender waits for before its next round.
//! 3. **Signals.** Every rank (rank 0 too) signals rank 0 with data at distinct offsets
//!    (0 bytes to a few multi-fragment ones); the handler records source, offset and length and
//!    checks that the data it is given is already the sender's pattern. Rank 0 then checks that
//!    it saw every signal once, in each sender's order, and its memory with `read_local`.
//! 4. **Conditional writes.** Every rank issues conditional writes with distinct reference
//!    values into the same z-buffer at rank 0, in a scrambled order. Rank 0's image must then
//!    equal the sequential result: per pixel, the data of the smallest reference value that is
//!    below the initial reference word (strictly: an equal value does not write), or the
//!    untouched background. Each rank also checks that what it was told about its own writes
//!    is consistent (after writing `v` the word is at most `v`).

use std::sync::{Arc, Mutex};
use volley::rma::{FifoRef, FifoStatus, Perms, Rma, SegmentRef};
use volley::Runtime;
use volley_tests::{
    arg_u64, check_pattern, fail, fill_pattern, join, mix, path_name, pattern_byte,
};

const CAPACITY: usize = 4;
const ENTRY: usize = 16;
/// Where the FIFO lives (at rank 0), and the room kept for it.
const FIFO_AT: usize = 0;
const FIFO_ROOM: usize = 1024;
/// Where rank 0 puts the FIFO's words, at every rank.
const MAILBOX_AT: usize = FIFO_AT + FIFO_ROOM;
/// The acknowledgement flag rank 0 sets at each sender of part 2.
const ACK_AT: usize = MAILBOX_AT + 64;
/// Part 2's areas (one per rank; rank 0's unused): the flag, then the block at an odd offset.
const WF_AT: usize = ACK_AT + 64;
const BLOCK: usize = 150_001;
const WF_STRIDE: usize = (64 + 1 + BLOCK).next_multiple_of(64);
/// Signals per rank.
const SIGNALS: usize = 40;
/// Conditional writes: pixels, candidates per rank and pixel, bytes per pixel.
const PIXELS: usize = 256;
const CANDIDATES: usize = 4;
const PIXEL_BYTES: usize = 40;

/// Offsets of the parts that depend on the job size.
#[derive(Debug, Clone)]
struct Layout {
    /// (offset, length) of signal `i` of rank `r` at `sig[r][i]`.
    sig: Vec<Vec<(usize, usize)>>,
    zref_at: usize,
    zdata_at: usize,
    len: usize,
}

fn signal_len(i: usize) -> usize {
    match i {
        0 => 0,
        _ if i % 10 == 3 => 70_001 + i,
        _ => 1 + i * 37 % 500,
    }
}

fn layout(size: usize) -> Layout {
    let mut at = WF_AT + size * WF_STRIDE;
    let sig = (0..size)
        .map(|_| {
            (0..SIGNALS)
                .map(|i| {
                    let item = (at + 1, signal_len(i));
                    at += 1 + item.1 + 2;
                    item
                })
                .collect()
        })
        .collect();
    let zref_at = at.next_multiple_of(64);
    let zdata_at = zref_at + PIXELS * 8 + 3;
    Layout {
        sig,
        zref_at,
        zdata_at,
        len: zdata_at + PIXELS * PIXEL_BYTES,
    }
}

fn block_seed(sender: usize, round: u64) -> u64 {
    mix(0xb10c ^ (sender as u64) << 40 ^ round)
}

fn signal_seed(sender: usize, offset: usize) -> u64 {
    mix(0x5196 ^ (sender as u64) << 40 ^ offset as u64)
}

/// The reference value of candidate `k` of rank `r` for pixel `p`: distinct for every (r, k)
/// of a pixel (the low part), in a scrambled order (the high part).
fn zvalue(size: usize, r: usize, k: usize, p: usize) -> u64 {
    let n = (size * CANDIDATES) as u64;
    let hi = mix((p as u64) << 32 ^ (r as u64) << 16 ^ k as u64) % 1000;
    hi * n + (r * CANDIDATES + k) as u64
}

/// The smallest reference value any rank writes to pixel `p`.
fn zmin(size: usize, p: usize) -> u64 {
    (0..size)
        .flat_map(|r| (0..CANDIDATES).map(move |k| zvalue(size, r, k, p)))
        .min()
        .unwrap()
}

/// The reference word of pixel `p` before the writes: no limit, half the range, exactly the
/// smallest value written (which therefore does not write: the test is strict), or 0.
fn zinitial(size: usize, p: usize) -> u64 {
    match p % 4 {
        0 => u64::MAX,
        1 => 500 * (size * CANDIDATES) as u64,
        2 => zmin(size, p),
        _ => 0,
    }
}

fn zdata(p: usize, v: u64, out: &mut [u8]) {
    fill_pattern(mix(0x2b0f ^ (p as u64) << 48 ^ v), out);
}

fn zbackground(p: usize, out: &mut [u8]) {
    fill_pattern(mix(0xbac6 ^ p as u64), out);
}

fn entry(sender: usize, seq: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..8].copy_from_slice(&(sender as u64).to_le_bytes());
    e[8..].copy_from_slice(&seq.to_le_bytes());
    e
}

fn parse_entry(e: &[u8]) -> (u64, u64) {
    (
        u64::from_le_bytes(e[..8].try_into().unwrap()),
        u64::from_le_bytes(e[8..16].try_into().unwrap()),
    )
}

fn read_word(rma: &Rma<'_>, seg: SegmentRef, at: usize) -> u64 {
    let mut w = [0u8; 8];
    rma.read_local(seg, at, &mut w).unwrap();
    u64::from_le_bytes(w)
}

/// What the signal handler saw: (source, offset, length, data was the source's pattern).
type Seen = Arc<Mutex<Vec<(usize, usize, usize, bool)>>>;

fn main() {
    let entries = arg_u64(0, 2000);
    let rounds = arg_u64(1, 200);
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let seen: Seen = Arc::default();
    let s = seen.clone();
    let sig_handler = setup.register_signal(&mut b, "memops.check", move |sig| {
        let ok = check_pattern(signal_seed(sig.src(), sig.offset()), sig.data()).is_none()
            && sig.is_empty() == sig.data().is_empty()
            && sig.data().len() == sig.len();
        s.lock()
            .unwrap()
            .push((sig.src(), sig.offset(), sig.len(), ok));
    });
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    if size < 2 {
        fail(rank, 2, "needs at least 2 ranks");
    }
    let path = path_name(rma.path());
    let lay = layout(size);
    let seg = rma
        .alloc_symmetric(lay.len, Perms::ALL)
        .unwrap_or_else(|e| {
            fail(
                rank,
                2,
                &format!(
                    "alloc_symmetric({}): {e} (set VOLLEY_SEGMENT_BYTES)",
                    lay.len
                ),
            )
        });
    let (mine, root) = (seg.on(rank), seg.on(0));
    let die = |msg: String| -> ! { fail(rank, 1, &format!("path {path}: {msg}")) };

    // ---- 1. FIFO -----------------------------------------------------------------------------
    if rank == 0 {
        let fifo = rma
            .fifo_create(mine, FIFO_AT, ENTRY, CAPACITY)
            .unwrap_or_else(|e| die(format!("fifo_create: {e}")));
        if fifo.footprint() > FIFO_ROOM {
            die(format!("the FIFO takes {} bytes", fifo.footprint()));
        }
        let words: Vec<u8> = fifo
            .to_words()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        for r in 0..size {
            rma.put(seg.on(r), MAILBOX_AT, &words)
                .unwrap_or_else(|e| die(format!("put of the FIFO's words to rank {r}: {e}")));
        }
    }
    rt.barrier();
    let mut words = [0u8; 40];
    rma.read_local(mine, MAILBOX_AT, &mut words).unwrap();
    let fifo = FifoRef::from_words(std::array::from_fn(|i| {
        u64::from_le_bytes(words[i * 8..i * 8 + 8].try_into().unwrap())
    }));
    if fifo.rank() != 0 || fifo.entry_size() != ENTRY || fifo.capacity() != CAPACITY {
        die(format!("the FIFO's words decode to {fifo:?}"));
    }

    let total = (size as u64 - 1) * entries;
    if rank == 0 {
        let mut next = vec![0u64; size];
        let (mut got, mut idle) = (0u64, 0u64);
        let mut buf = [0u8; ENTRY];
        while got < total {
            if rma
                .fifo_dequeue(fifo, &mut buf)
                .unwrap_or_else(|e| die(format!("fifo_dequeue: {e}")))
            {
                let (src, seq) = parse_entry(&buf);
                if src == 0 || src >= size as u64 {
                    die(format!("dequeued entry {got} names sender {src}"));
                }
                let want = &mut next[src as usize];
                if seq != *want {
                    die(format!(
                        "dequeued entry {got}: sender {src}'s sequence number {seq}, expected \
                         {want} (lost, repeated or reordered)"
                    ));
                }
                *want += 1;
                got += 1;
            } else if rt.poll() == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        }
        if rma.fifo_dequeue(fifo, &mut buf).unwrap() {
            die(format!(
                "an entry {:?} beyond the {total} sent",
                parse_entry(&buf)
            ));
        }
    } else {
        for seq in 0..entries {
            rma.fifo_enqueue_retry(fifo, &entry(rank, seq))
                .unwrap_or_else(|e| die(format!("fifo_enqueue_retry of entry {seq}: {e}")));
        }
    }
    rt.barrier();

    // Full: rank 0 sits in barriers (serving requests, not dequeuing) while rank 1 fills it.
    const MARK: u64 = 1 << 40;
    if rank == 1 {
        for i in 0..CAPACITY as u64 {
            match rma.fifo_enqueue(fifo, &entry(rank, MARK + i)) {
                Ok(FifoStatus::Stored) => {}
                other => die(format!("enqueue {i} into an empty FIFO: {other:?}")),
            }
        }
    }
    rt.barrier();
    if rank != 0 {
        let mut before = vec![0u8; fifo.footprint()];
        let mut after = vec![0u8; fifo.footprint()];
        rma.get(root, FIFO_AT, &mut before).unwrap();
        match rma.fifo_enqueue(fifo, &entry(rank, 2 * MARK)) {
            Ok(FifoStatus::Full) => {}
            other => die(format!("plain enqueue into a full FIFO: {other:?}")),
        }
        rma.get(root, FIFO_AT, &mut after).unwrap();
        if let Some(p) = (0..before.len()).find(|&p| before[p] != after[p]) {
            die(format!(
                "the enqueue refused as Full changed byte {p} of the FIFO: {:#04x} -> {:#04x}",
                before[p], after[p]
            ));
        }
    }
    rt.barrier();
    if rank == 0 {
        let mut buf = [0u8; ENTRY];
        for i in 0..CAPACITY as u64 {
            if !rma.fifo_dequeue(fifo, &mut buf).unwrap() {
                die(format!("the full FIFO held only {i} entries"));
            }
            if parse_entry(&buf) != (1, MARK + i) {
                die(format!(
                    "entry {i} of the full FIFO is {:?}, expected (1, {})",
                    parse_entry(&buf),
                    MARK + i
                ));
            }
        }
        if rma.fifo_dequeue(fifo, &mut buf).unwrap() {
            die(format!(
                "the full FIFO held a further entry {:?} (a Full enqueue stored it)",
                parse_entry(&buf)
            ));
        }
    }
    rt.barrier();

    // ---- 2. Write with flag --------------------------------------------------------------------
    let wf = |r: usize| WF_AT + r * WF_STRIDE;
    if rank == 0 {
        let mut last = vec![0u64; size];
        let mut block = vec![0u8; BLOCK];
        let mut idle = 0u64;
        while last[1..].iter().any(|&l| l < rounds) {
            let mut progress = false;
            for (s, last) in last.iter_mut().enumerate().skip(1) {
                let flag = read_word(&rma, mine, wf(s));
                if flag == *last {
                    continue;
                }
                if flag != *last + 1 {
                    die(format!(
                        "sender {s}'s flag went from {} to {flag} (the sender waits for an \
                         acknowledgement of each round)",
                        *last
                    ));
                }
                rma.read_local(mine, wf(s) + 65, &mut block).unwrap();
                if let Some(p) = check_pattern(block_seed(s, flag), &block) {
                    let older = (1..flag).rfind(|&r| block[p] == pattern_byte(block_seed(s, r), p));
                    die(format!(
                        "flag {flag} of sender {s} is set but byte {p} of its {BLOCK}-byte block \
                         is {:#04x}, expected {:#04x}{}",
                        block[p],
                        pattern_byte(block_seed(s, flag), p),
                        match older {
                            Some(r) => format!(" (matches round {r}'s pattern)"),
                            None => String::new(),
                        }
                    ));
                }
                *last = flag;
                progress = true;
                rma.put_with_flag(seg.on(s), ACK_AT, &[], ACK_AT, flag)
                    .unwrap_or_else(|e| die(format!("acknowledgement to rank {s}: {e}")));
            }
            if !progress && rt.poll() == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        }
    } else {
        let mut block = vec![0u8; BLOCK];
        let mut idle = 0u64;
        for round in 1..=rounds {
            fill_pattern(block_seed(rank, round), &mut block);
            rma.put_with_flag(root, wf(rank) + 65, &block, wf(rank), round)
                .unwrap_or_else(|e| die(format!("put_with_flag of round {round}: {e}")));
            loop {
                let ack = read_word(&rma, mine, ACK_AT);
                if ack == round {
                    break;
                }
                if ack > round {
                    die(format!("acknowledged {ack} while at round {round}"));
                }
                if rt.poll() == 0 {
                    idle += 1;
                    if idle % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            }
        }
    }
    rt.barrier();

    // ---- 3. Signals ----------------------------------------------------------------------------
    let mut data = Vec::new();
    for &(at, n) in &lay.sig[rank] {
        data.resize(n, 0);
        fill_pattern(signal_seed(rank, at), &mut data);
        rma.signal(root, at, &data, sig_handler)
            .unwrap_or_else(|e| die(format!("signal of {n} bytes at {at}: {e}")));
    }
    rt.barrier();
    if rank == 0 {
        let seen = std::mem::take(&mut *seen.lock().unwrap());
        if seen.len() != size * SIGNALS {
            die(format!(
                "the signal handler ran {} times, expected {}",
                seen.len(),
                size * SIGNALS
            ));
        }
        for (s, sent) in lay.sig.iter().enumerate() {
            let got: Vec<_> = seen.iter().filter(|x| x.0 == s).collect();
            if got.len() != sent.len() {
                die(format!(
                    "{} signals from rank {s}, expected {}",
                    got.len(),
                    sent.len()
                ));
            }
            for (i, (&&(_, off, len, ok), &(at, n))) in got.iter().zip(sent).enumerate() {
                if (off, len) != (at, n) {
                    die(format!(
                        "signal {i} of rank {s} arrived as {len} bytes at {off}, expected {n} \
                         bytes at {at}"
                    ));
                }
                if !ok {
                    die(format!(
                        "signal {i} of rank {s} ({n} bytes at {at}): the handler's data was not \
                         the sender's (not all in place when the handler ran)"
                    ));
                }
                data.resize(n, 0);
                rma.read_local(mine, at, &mut data).unwrap();
                if let Some(p) = check_pattern(signal_seed(s, at), &data) {
                    die(format!(
                        "signal {i} of rank {s}: byte {p} of its {n} bytes at {at} is wrong"
                    ));
                }
            }
        }
    }
    rt.barrier();

    // ---- 4. Conditional writes -----------------------------------------------------------------
    let mut pix = [0u8; PIXEL_BYTES];
    if rank == 0 {
        for p in 0..PIXELS {
            rma.write_local(mine, lay.zref_at + p * 8, &zinitial(size, p).to_le_bytes())
                .unwrap();
            zbackground(p, &mut pix);
            rma.write_local(mine, lay.zdata_at + p * PIXEL_BYTES, &pix)
                .unwrap();
        }
    }
    rt.barrier();
    let mut order: Vec<(usize, usize)> = (0..PIXELS)
        .flat_map(|p| (0..CANDIDATES).map(move |k| (p, k)))
        .collect();
    order.sort_by_key(|&(p, k)| mix((rank as u64) << 48 ^ (p as u64) << 8 ^ k as u64));
    let mut own_min = vec![u64::MAX; PIXELS];
    let mut wrote = 0u64;
    for &(p, k) in &order {
        let v = zvalue(size, rank, k, p);
        zdata(p, v, &mut pix);
        let w = rma
            .conditional_write(
                root,
                lay.zref_at + p * 8,
                v,
                lay.zdata_at + p * PIXEL_BYTES,
                &pix,
            )
            .unwrap_or_else(|e| die(format!("conditional_write of {v} to pixel {p}: {e}")));
        if w && (v >= own_min[p] || v >= zinitial(size, p)) {
            die(format!(
                "conditional write of {v} to pixel {p} wrote, but the word was already at most \
                 {} (initial {})",
                own_min[p],
                zinitial(size, p)
            ));
        }
        own_min[p] = own_min[p].min(v);
        wrote += w as u64;
    }
    rt.barrier();
    if rank == 0 {
        let mut want = [0u8; PIXEL_BYTES];
        for p in 0..PIXELS {
            let (init, low) = (zinitial(size, p), zmin(size, p));
            let want_ref = init.min(low);
            if low < init {
                zdata(p, low, &mut want);
            } else {
                zbackground(p, &mut want);
            }
            let got_ref = read_word(&rma, mine, lay.zref_at + p * 8);
            rma.read_local(mine, lay.zdata_at + p * PIXEL_BYTES, &mut pix)
                .unwrap();
            if got_ref != want_ref || pix != want {
                die(format!(
                    "pixel {p}: reference word {got_ref}, expected {want_ref} (initial {init}, \
                     smallest written {low}); data {}",
                    if pix == want { "right" } else { "wrong" }
                ));
            }
        }
        if rma.refused() != 0 {
            die(format!("{} refused accesses counted", rma.refused()));
        }
    }
    rt.barrier();
    if rank == 0 {
        println!(
            "rma_memops: path={path}: {size} ranks: fifo of {CAPACITY} took {} x {entries} \
             entries in order, full enqueues refused untouched; {rounds} flagged rounds of \
             {BLOCK} bytes per sender; {} signals; {} conditional writes match the sequential \
             image (rank 0 wrote {wrote})",
            size - 1,
            size * SIGNALS,
            size * PIXELS * CANDIDATES
        );
    }
}
