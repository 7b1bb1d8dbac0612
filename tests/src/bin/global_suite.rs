//! The global layer's correctness suite: `global_suite [SECTION ...]` (default: all).
//!
//! One program that runs unchanged under every strategy (`VOLLEY_STRATEGY=proc|np|hw`) and
//! over every transport: the launcher's emulated nodes make it cross UDP or TCP. Every rank
//! checks what it sees; rank 0 prints `global <section> [<strategy>]: ok ...` per section, which
//! the tests match. Sections: rw, sync, handle, spread, store, radix, atomics, buckets, barrier,
//! coll, bulk, overlap, flood, exchange, protect.

use bytemuck::{Pod, Zeroable};
use std::time::Duration;
use volley::rma::{Perms, Refusal};
use volley::Runtime;
use volley_global::{AtomicProc, Global, GlobalError, GlobalPtr, Layout, Op, Strategy};
use volley_tests::{fail, fill_pattern, mix, pattern_byte};

const SECTIONS: [&str; 15] = [
    "rw", "sync", "handle", "spread", "store", "radix", "atomics", "buckets", "barrier", "coll",
    "bulk", "overlap", "flood", "exchange", "protect",
];
/// Sections run only when named: `late` (rank 0 waits in store_sync for bytes that rank 1
/// stores 1.5 s later, so that the wait's diagnostic shows) and `mismatch` (rank 0 calls a
/// barrier where the others call an all-reduce, and the job ends with status 3), and `paths`
/// (small collectives send no medium message, and none at all under `hw` on one node), and
/// `big` (large all-reduces and all-to-alls around the size where they leave the small paths),
/// `bcast` (small broadcasts from roots that run ahead, through the ring under `hw`), and
/// `mismatch-bcast` (rank 0 calls a barrier where the others receive its broadcast) and
/// `mismatch-root` (rank 0 broadcasts where the others call a barrier), and `hubwait` (ranks
/// at the hub spin while the rank they wait for needs another core), and `syncwait` (a sync
/// awaiting one rank spins while it runs).
const EXTRA: [&str; 9] = [
    "late",
    "mismatch",
    "paths",
    "big",
    "bcast",
    "mismatch-bcast",
    "mismatch-root",
    "hubwait",
    "syncwait",
];

/// A small struct read and written whole.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
struct Particle {
    pos: [f64; 3],
    id: u32,
    flags: u32,
}

/// Larger than a get's inline reply: travels as a medium payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
struct Block {
    words: [u64; 32],
}

struct Suite<'g, 'rt> {
    g: &'g Global<'rt>,
    me: usize,
    p: usize,
    name: &'static str,
    bump: AtomicProc<u64>,
    maxer: AtomicProc<Particle>,
}

macro_rules! check {
    ($s:expr, $cond:expr, $($msg:tt)+) => {{
        let holds: bool = $cond;
        if !holds {
            fail($s.me, 1, &format!("[{}] {}", $s.name, format!($($msg)+)));
        }
    }};
}

fn ok<T>(s: &Suite<'_, '_>, what: &str, r: volley_global::Result<T>) -> T {
    r.unwrap_or_else(|e| fail(s.me, 1, &format!("[{}] {what}: {e}", s.name)))
}

impl Suite<'_, '_> {
    fn done(&self, section: &str, detail: &str) {
        ok(self, "barrier", self.g.barrier());
        if self.me == 0 {
            println!("global {section} [{}]: ok {detail}", self.name);
        }
    }

    fn rw(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(4 * p, Layout::Cyclic),
        );
        let bytes = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u8>(4 * p, Layout::Cyclic),
        );
        let parts = ok(
            self,
            "alloc",
            g.all_spread_alloc::<Particle>(p, Layout::Cyclic),
        );
        let blocks = ok(
            self,
            "alloc",
            g.all_spread_alloc::<Block>(p, Layout::Cyclic),
        );
        let right = (me + 1) % p;
        // Every rank writes elements owned by its right neighbour (1, 8, 32 and 320 bytes).
        ok(
            self,
            "write u64",
            g.write(a.ptr(4 * right + 1), mix(me as u64)),
        );
        ok(
            self,
            "write u8",
            g.write(bytes.ptr(right + p), me as u8 ^ 0x5a),
        );
        let part = Particle {
            pos: [me as f64, 0.5, -1.0],
            id: me as u32,
            flags: 7,
        };
        ok(self, "write struct", g.write(parts.ptr(right), part));
        let mut blk = Block { words: [0; 32] };
        for (i, w) in blk.words.iter_mut().enumerate() {
            *w = mix(me as u64 * 100 + i as u64);
        }
        ok(self, "write block", g.write(blocks.ptr(right), blk));
        // write returned after the owner acknowledged: after a barrier a third rank (the
        // left neighbour's left) reads the value.
        ok(self, "barrier", g.barrier());
        let left = (me + p - 1) % p;
        let third = (me + 2) % p;
        let v = ok(self, "read", g.read(a.ptr(4 * third + 1)));
        check!(
            self,
            v == mix(((third + p - 1) % p) as u64),
            "read {v:#x} of rank {third}"
        );
        let mine = ok(self, "read own", g.read(a.ptr(4 * me + 1)));
        check!(self, mine == mix(left as u64), "own element {mine:#x}");
        let b = ok(self, "read u8", g.read(bytes.ptr(me + p)));
        check!(self, b == left as u8 ^ 0x5a, "u8 {b}");
        let q = ok(self, "read struct", g.read(parts.ptr(third)));
        check!(
            self,
            q.id as usize == (third + p - 1) % p && q.pos[1] == 0.5,
            "struct {q:?}"
        );
        let bl = ok(self, "read block", g.read(blocks.ptr(third)));
        let writer = (third + p - 1) % p;
        check!(
            self,
            bl.words
                .iter()
                .enumerate()
                .all(|(i, w)| *w == mix(writer as u64 * 100 + i as u64)),
            "block read from rank {third} differs"
        );
        g.free(a);
        g.free(bytes);
        g.free(parts);
        g.free(blocks);
        self.done(
            "rw",
            "(1/8/32/256-byte values written and read back by a third rank)",
        );
    }

    fn sync(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const K: usize = 1000;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(K * p, Layout::Cyclic),
        );
        // K puts spread over every rank, then sync.
        let stats0 = g.runtime().stats();
        ok(self, "empty sync", g.sync());
        let stats1 = g.runtime().stats();
        // Requests only: another rank's puts may already arrive here, and their replies
        // (under `np` sent by the progress thread meanwhile) are not this sync's.
        check!(
            self,
            stats1.sent[0] == stats0.sent[0],
            "sync with nothing outstanding sent requests"
        );
        // K puts per rank: for each k the ranks write the P elements of row k, each a
        // different one, so the owners vary with k.
        let idx_put = |k: usize| k * p + (me + k) % p;
        let idx_get = |k: usize| k * p + (me + 1 + k) % p;
        ok(
            self,
            "puts",
            g.phase(|s| {
                for k in 0..K {
                    s.put(a.ptr(idx_put(k)), &mix(idx_put(k) as u64))?;
                }
                Ok(())
            }),
        );
        ok(self, "barrier", g.barrier());
        // K gets of elements other ranks wrote, each checked.
        let mut got = vec![0u64; K];
        ok(
            self,
            "gets",
            g.phase(|s| {
                for (k, slot) in got.iter_mut().enumerate() {
                    s.get(slot, a.ptr(idx_get(k)))?;
                }
                Ok(())
            }),
        );
        for (k, v) in got.iter().enumerate() {
            check!(
                self,
                *v == mix(idx_get(k) as u64),
                "get {k} of element {}: {v:#x}",
                idx_get(k)
            );
        }
        // Unscoped puts completed by sync.
        ok(self, "barrier", g.barrier());
        for k in 0..K {
            let idx = k * p + me;
            ok(self, "put", g.put(a.ptr(idx), &(idx as u64 * 3)));
        }
        ok(self, "sync", g.sync());
        ok(self, "barrier", g.barrier());
        for k in (0..K).step_by(97) {
            let idx = k * p + (me + 1) % p;
            let v = ok(self, "read", g.read(a.ptr(idx)));
            check!(self, v == idx as u64 * 3, "after sync element {idx} = {v}");
        }
        g.free(a);
        self.done(
            "sync",
            &format!("({K} puts and {K} gets per rank to every rank)"),
        );
    }

    fn handle(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let a = ok(self, "alloc", g.all_spread_alloc::<u64>(p, Layout::Cyclic));
        ok(self, "write", g.write(a.ptr(me), 1000 + me as u64));
        ok(self, "barrier", g.barrier());
        let handles: Vec<_> = (0..p)
            .map(|r| ok(self, "get_nb", g.get_nb(a.ptr(r))))
            .collect();
        for (r, h) in handles.into_iter().enumerate() {
            let v = ok(self, "wait", h.wait());
            check!(self, v == 1000 + r as u64, "handle {r}: {v}");
        }
        // A handle dropped unwaited waits, and leaves nothing outstanding.
        drop(ok(self, "get_nb", g.get_nb(a.ptr((me + 1) % p))));
        ok(self, "barrier", g.barrier());
        g.free(a);
        self.done("handle", "(get_nb handles to every rank)");
    }

    fn spread(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        for layout in [Layout::Cyclic, Layout::Blocked, Layout::BlockCyclic(3)] {
            let n = 5 * p + 2;
            let a = ok(self, "alloc", g.all_spread_alloc::<u32>(n, layout));
            // Owner computes: each rank fills its part through the local slice.
            {
                // SAFETY: no rank accesses the array until the barrier below.
                let local = unsafe { a.local_slice_mut() };
                for (l, i) in a.local_indices().enumerate() {
                    local[l] = i as u32 * 7;
                }
            }
            let owned: usize = (0..p).map(|r| a.len_on(r)).sum();
            check!(self, owned == n, "{layout:?}: parts hold {owned} of {n}");
            ok(self, "barrier", g.barrier());
            for i in 0..n {
                let v = ok(self, "read", g.read(a.ptr(i)));
                check!(self, v == i as u32 * 7, "{layout:?} element {i} = {v}");
            }
            // to_global / to_local round trips, and arithmetic within a rank's part.
            if a.local_len() > 1 {
                // SAFETY: read-only while every rank only reads.
                let first = unsafe { &a.local_slice()[0] };
                let gp = ok(self, "to_global", g.to_global(me, first));
                check!(self, gp == a.ptr_on(me, 0), "to_global {gp:?}");
                let back = ok(self, "to_local", g.to_local(gp));
                check!(self, std::ptr::eq(back.as_ptr(), first), "to_local");
                let second = ok(self, "read", g.read(gp + 1));
                check!(
                    self,
                    second == a.global_index(me, 1) as u32 * 7,
                    "gp + 1 reads {second}"
                );
                let remote = (me + 1) % p;
                let rp = ok(self, "to_global remote", g.to_global(remote, first));
                check!(self, rp.rank() == remote && rp.offset() == 0, "{rp:?}");
                match g.to_local(rp) {
                    Err(GlobalError::NotLocal { owner, .. }) if p > 1 => {
                        check!(self, owner == remote, "NotLocal names {owner}")
                    }
                    Ok(_) if p == 1 => {}
                    other => check!(self, false, "to_local of a remote pointer: {other:?}"),
                }
            }
            let x = 5u32;
            check!(
                self,
                matches!(g.to_global(0, &x), Err(GlobalError::NotGlobal { .. })),
                "to_global of a stack address"
            );
            ok(self, "barrier", g.barrier());
            g.free(a);
        }
        self.done(
            "spread",
            "(cyclic, blocked and block-cyclic layouts, local parts, to_global/to_local)",
        );
    }

    fn store(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const PER: usize = 300;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(PER * p * p, Layout::Blocked),
        );
        // Every rank but 0 stores PER words into rank 0's part (disjoint slots), then a bulk
        // of 1000 bytes.
        let bulk = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u8>(1000 * p * p, Layout::Blocked),
        );
        if me != 0 {
            for k in 0..PER {
                let slot = me * PER + k;
                ok(self, "store", g.store(a.ptr_on(0, slot), &mix(slot as u64)));
            }
            let mut data = vec![0u8; 1000];
            fill_pattern(me as u64, &mut data);
            ok(
                self,
                "bulk_store",
                g.bulk_store(bulk.ptr_on(0, me * 1000), &data),
            );
        } else {
            let total = ((p - 1) * (PER * 8 + 1000)) as u64;
            ok(self, "store_sync", g.store_sync(total));
            check!(
                self,
                g.store_pending() == 0,
                "{} bytes pending after store_sync(total)",
                g.store_pending()
            );
            for r in 1..p {
                for k in 0..PER {
                    let slot = r * PER + k;
                    let v = a.local_get(slot);
                    check!(
                        self,
                        v == mix(slot as u64),
                        "stored slot {slot} = {v:#x} after store_sync"
                    );
                }
                for i in 0..1000 {
                    let v = bulk.local_get(r * 1000 + i);
                    check!(
                        self,
                        v == pattern_byte(r as u64, i),
                        "bulk store byte {i} from {r}"
                    );
                }
            }
        }
        ok(self, "barrier", g.barrier());
        g.free(a);
        g.free(bulk);
        self.done(
            "store",
            &format!(
                "({} senders x {} bytes, store_sync(total) on rank 0)",
                p - 1,
                PER * 8 + 1000
            ),
        );
    }

    fn radix(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const PER: usize = 500;
        let n = PER * p;
        let mut keys: Vec<u32> = (0..PER)
            .map(|l| (mix((me * PER + l) as u64) % 4096) as u32)
            .collect();
        let mut expected: Vec<u32> = (0..p)
            .flat_map(|r| (0..PER).map(move |l| (mix((r * PER + l) as u64) % 4096) as u32))
            .collect();
        expected.sort_unstable();
        let dst = ok(self, "alloc", g.all_spread_alloc::<u32>(n, Layout::Blocked));
        for pass in 0..3 {
            let shift = pass * 4;
            let mut counts = [0u64; 16];
            for k in &keys {
                counts[((k >> shift) & 15) as usize] += 1;
            }
            // Position of this rank's first key of each digit: keys of smaller digits
            // everywhere, plus keys of this digit on lower ranks.
            let mut before = counts;
            ok(self, "scan", g.exclusive_scan(&mut before, Op::Sum, 0));
            let mut totals = counts;
            ok(self, "all_reduce", g.all_reduce(&mut totals, Op::Sum));
            let mut base = [0u64; 16];
            let mut acc = 0;
            for d in 0..16 {
                base[d] = acc + before[d];
                acc += totals[d];
            }
            for k in &keys {
                let d = ((k >> shift) & 15) as usize;
                ok(self, "store", g.store(dst.ptr(base[d] as usize), k));
                base[d] += 1;
            }
            ok(self, "all_store_sync", g.all_store_sync());
            // SAFETY: every store is in (all_store_sync) and none comes before the next pass's
            // all_store_sync, which every rank reaches only after copying its part here.
            keys = unsafe { dst.local_slice() }.to_vec();
            ok(self, "barrier", g.barrier());
        }
        let mut all = vec![0u32; n];
        ok(self, "all_gather", g.all_gather(&keys, &mut all));
        check!(
            self,
            all == expected,
            "radix sort by stores is not sorted / not a permutation"
        );
        g.free(dst);
        self.done(
            "radix",
            &format!("({n} keys, 3 passes of stores and all_store_sync)"),
        );
    }

    fn atomics(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const M: u64 = 300;
        let w = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(4 * p, Layout::Cyclic),
        );
        let parts = ok(
            self,
            "alloc",
            g.all_spread_alloc::<Particle>(p, Layout::Cyclic),
        );
        let counter = w.ptr(0); // on rank 0
        let procd = w.ptr(3 * p - 1); // on the last rank
        let mut olds = Vec::new();
        for _ in 0..M {
            olds.push(ok(self, "fetch_add", g.fetch_add(counter, 1)));
            ok(self, "atomic", g.atomic(self.bump, procd, &[2]));
        }
        check!(
            self,
            olds.windows(2).all(|w| w[0] < w[1]),
            "fetch_add olds not increasing"
        );
        // CAS loop on a word of rank 1 % P.
        let casw = w.ptr(1 % p + p);
        for _ in 0..M / 3 {
            loop {
                let cur = ok(self, "read", g.read(casw));
                if ok(self, "cas", g.compare_swap(casw, cur, cur + 1)) == cur {
                    break;
                }
            }
        }
        let _ = ok(self, "swap", g.swap(w.ptr(4 * p - 1), me as u64));
        // A procedure on a struct: keep the max id.
        ok(
            self,
            "atomic struct",
            g.atomic(self.maxer, parts.ptr(0), &[me as u64 + 10]),
        );
        ok(self, "barrier", g.barrier());
        let total = ok(self, "read", g.read(counter));
        check!(
            self,
            total == p as u64 * M,
            "fetch_add total {total}, want {}",
            p as u64 * M
        );
        let byproc = ok(self, "read", g.read(procd));
        check!(self, byproc == 2 * p as u64 * M, "procedure total {byproc}");
        let cas = ok(self, "read", g.read(casw));
        check!(self, cas == p as u64 * (M / 3), "cas total {cas}");
        let part = ok(self, "read", g.read(parts.ptr(0)));
        check!(
            self,
            part.id as usize == p - 1 + 10 && part.flags == p as u32,
            "struct procedure: {part:?}"
        );
        // Every fetch_add old value is distinct across ranks.
        let mut all = vec![0u64; M as usize * p];
        ok(self, "all_gather", g.all_gather(&olds, &mut all));
        all.sort_unstable();
        check!(
            self,
            all.iter().enumerate().all(|(i, v)| *v == i as u64),
            "olds not 0..P*M"
        );
        g.free(w);
        g.free(parts);
        self.done(
            "atomics",
            &format!("({p} x {M} fetch_adds, procedures, CAS loops)"),
        );
    }

    fn buckets(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const M: usize = 400;
        let b = ok(self, "bucket", g.all_bucket_alloc::<[u64; 2]>(M * p));
        for k in 0..M {
            for r in 0..p {
                ok(
                    self,
                    "push",
                    g.push(&b, r, &[me as u64, (k * p + r) as u64]),
                );
            }
        }
        ok(self, "all_store_sync", g.all_store_sync());
        let items = ok(self, "take", g.take(&b));
        check!(
            self,
            items.len() == M * p,
            "{} items arrived, want {}",
            items.len(),
            M * p
        );
        let mut seen = vec![vec![false; M]; p];
        for [src, v] in items {
            let (src, v) = (src as usize, v as usize);
            check!(self, src < p && v % p == me, "foreign item ({src}, {v})");
            let k = v / p;
            check!(self, !seen[src][k], "item ({src}, {k}) twice");
            seen[src][k] = true;
        }
        // Overflow: a bucket of 2 receiving P·2 + 1 pushes reports the loss.
        let small = ok(self, "bucket", g.all_bucket_alloc::<u64>(2));
        for k in 0..2 {
            ok(
                self,
                "push",
                g.push(&small, 0, &(k as u64)).or_else(|e| match e {
                    GlobalError::BucketOverflow { .. } => Ok(()),
                    e => Err(e),
                }),
            );
        }
        ok(self, "all_store_sync", g.all_store_sync());
        if me == 0 {
            match g.take(&small) {
                Err(GlobalError::BucketOverflow {
                    pushed,
                    capacity: 2,
                    ..
                }) if p > 1 => {
                    check!(self, pushed == 2 * p as u64, "overflow counts {pushed}")
                }
                Ok(v) if p == 1 => check!(self, v.len() == 2, "{v:?}"),
                other => check!(self, false, "take of an overfull bucket: {other:?}"),
            }
        }
        g.free_bucket(small);
        g.free_bucket(b);
        self.done(
            "buckets",
            &format!("({p} ranks x {M} pushes to every rank, each exactly once)"),
        );
    }

    fn barrier(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let c = ok(self, "alloc", g.all_spread_alloc::<u64>(p, Layout::Cyclic));
        for round in 1..=20u64 {
            // Skew: a different rank is late each round.
            if (round as usize) % p == me {
                std::thread::sleep(Duration::from_millis(3));
            }
            ok(self, "fetch_add", g.fetch_add(c.ptr(0), 1));
            ok(self, "barrier", g.barrier());
            let v = ok(self, "read", g.read(c.ptr(0)));
            check!(
                self,
                v == round * p as u64,
                "round {round}: passed the barrier at {v}"
            );
            ok(self, "barrier", g.barrier());
        }
        g.free(c);
        self.done("barrier", "(20 skewed rounds)");
    }

    fn coll(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let val = |r: usize, i: usize, salt: u64| mix(salt ^ (r as u64) << 32 ^ i as u64);
        // From 5000 elements the all-reduces under `hw` go through mapped memory; 70000 grows
        // its scratch.
        for (round, n) in [1usize, 3, 17, 1000, 5000, 70_000].into_iter().enumerate() {
            let salt = round as u64 * 0x1000;
            let root = (round * 3 + 1) % p;
            // broadcast
            let mut d: Vec<u64> = (0..n)
                .map(|i| if me == root { val(root, i, salt) } else { 0 })
                .collect();
            ok(self, "broadcast", g.broadcast(root, &mut d));
            check!(
                self,
                d.iter().enumerate().all(|(i, v)| *v == val(root, i, salt)),
                "broadcast n={n}"
            );
            // all_reduce u64 sum / min / max
            for op in [Op::Sum, Op::Min, Op::Max] {
                let mut d: Vec<u64> = (0..n).map(|i| val(me, i, salt) >> 8).collect();
                ok(self, "all_reduce", g.all_reduce(&mut d, op));
                for (i, v) in d.iter().enumerate() {
                    let want = (0..p)
                        .map(|r| val(r, i, salt) >> 8)
                        .reduce(|a, b| <u64 as volley_global::Reducible>::combine(op, a, b))
                        .unwrap();
                    check!(self, *v == want, "all_reduce {op:?} n={n} element {i}");
                }
            }
            // all_reduce f64 sum: the same bits on every rank.
            let mut f: Vec<f64> = (0..n)
                .map(|i| (val(me, i, salt) % 1000) as f64 / 7.0)
                .collect();
            ok(self, "all_reduce f64", g.all_reduce(&mut f, Op::Sum));
            let mut bits: Vec<u64> = f.iter().map(|x| x.to_bits()).collect();
            let mut from0 = bits.clone();
            ok(self, "broadcast", g.broadcast(0, &mut from0));
            check!(
                self,
                bits == from0,
                "f64 all_reduce differs between ranks (n={n})"
            );
            for (i, x) in f.iter().enumerate() {
                let want: f64 = (0..p).map(|r| (val(r, i, salt) % 1000) as f64 / 7.0).sum();
                check!(
                    self,
                    (x - want).abs() <= 1e-9 * want.abs().max(1.0),
                    "f64 sum {i}"
                );
            }
            bits.clear();
            // user-defined op (xor) and i32 min
            let mut x: Vec<u64> = (0..n).map(|i| val(me, i, salt)).collect();
            ok(
                self,
                "all_reduce_with",
                g.all_reduce_with(&mut x, |a, b| a ^ b),
            );
            check!(
                self,
                x.iter()
                    .enumerate()
                    .all(|(i, v)| *v == (0..p).fold(0, |a, r| a ^ val(r, i, salt))),
                "user op n={n}"
            );
            let mut m: Vec<i32> = (0..n).map(|i| val(me, i, salt) as i32).collect();
            ok(self, "all_reduce i32", g.all_reduce(&mut m, Op::Min));
            check!(
                self,
                m.iter()
                    .enumerate()
                    .all(|(i, v)| *v == (0..p).map(|r| val(r, i, salt) as i32).min().unwrap()),
                "i32 min n={n}"
            );
            // reduce to root
            let mut r: Vec<u64> = (0..n).map(|i| val(me, i, salt) >> 4).collect();
            ok(self, "reduce", g.reduce(root, &mut r, Op::Sum));
            if me == root {
                check!(
                    self,
                    r.iter().enumerate().all(|(i, v)| *v
                        == (0..p)
                            .map(|q| val(q, i, salt) >> 4)
                            .fold(0u64, |a, b| a.wrapping_add(b))),
                    "reduce n={n}"
                );
            }
            // scans
            let mut s: Vec<u64> = (0..n).map(|i| val(me, i, salt) >> 4).collect();
            ok(self, "scan", g.scan(&mut s, Op::Sum));
            let mut e: Vec<u64> = (0..n).map(|i| val(me, i, salt) >> 4).collect();
            ok(self, "exclusive_scan", g.exclusive_scan(&mut e, Op::Sum, 0));
            for i in 0..n {
                let incl = (0..=me)
                    .map(|q| val(q, i, salt) >> 4)
                    .fold(0u64, |a, b| a.wrapping_add(b));
                let excl = (0..me)
                    .map(|q| val(q, i, salt) >> 4)
                    .fold(0u64, |a, b| a.wrapping_add(b));
                check!(self, s[i] == incl && e[i] == excl, "scan n={n} element {i}");
            }
            // A non-commutative user scan: string concatenation as (len, hash) — here
            // keep "first rank's value", which is associative but not commutative.
            let mut firsts = vec![me as u64; 2];
            ok(self, "scan_with", g.scan_with(&mut firsts, |a, _b| a));
            check!(
                self,
                firsts == [0, 0],
                "scan_with keeps rank order: {firsts:?}"
            );
            // gather / all_gather
            let mine: Vec<u64> = (0..n).map(|i| val(me, i, salt)).collect();
            let mut out = if me == root {
                vec![0; n * p]
            } else {
                Vec::new()
            };
            ok(self, "gather", g.gather(root, &mine, &mut out));
            if me == root {
                check!(
                    self,
                    (0..p).all(|q| (0..n).all(|i| out[q * n + i] == val(q, i, salt))),
                    "gather n={n}"
                );
            }
            let mut all = vec![0; n * p];
            ok(self, "all_gather", g.all_gather(&mine, &mut all));
            check!(
                self,
                (0..p).all(|q| (0..n).all(|i| all[q * n + i] == val(q, i, salt))),
                "all_gather n={n}"
            );
            // all_to_all: block j of rank q holds val(q, j*n + i)
            let send: Vec<u64> = (0..n * p).map(|i| val(me, i, salt)).collect();
            let mut recv = vec![0; n * p];
            ok(self, "all_to_all", g.all_to_all(&send, &mut recv));
            check!(
                self,
                (0..p).all(|q| (0..n).all(|i| recv[q * n + i] == val(q, me * n + i, salt))),
                "all_to_all n={n}"
            );
            // Blocks of 2-byte elements, which end inside a word (2, 6 and 34 bytes through
            // the hub).
            let send: Vec<u16> = (0..n * p).map(|i| val(me, i, salt) as u16).collect();
            let mut recv = vec![0u16; n * p];
            ok(self, "all_to_all u16", g.all_to_all(&send, &mut recv));
            check!(
                self,
                (0..p).all(|q| (0..n).all(|i| recv[q * n + i] == val(q, me * n + i, salt) as u16)),
                "all_to_all u16 n={n}"
            );
            // all_to_all_v: rank q sends (q + j + round) % 4 elements to rank j.
            let counts: Vec<usize> = (0..p).map(|j| (me + j + round) % 4).collect();
            let send: Vec<u64> = counts
                .iter()
                .enumerate()
                .flat_map(|(j, &c)| (0..c).map(move |i| val(me, j * 10 + i, salt)))
                .collect();
            let (got, from) = ok(self, "all_to_all_v", g.all_to_all_v(&send, &counts));
            let want: Vec<u64> = (0..p)
                .flat_map(|q| (0..(q + me + round) % 4).map(move |i| val(q, me * 10 + i, salt)))
                .collect();
            check!(self, got == want, "all_to_all_v round {round}");
            check!(
                self,
                from == (0..p).map(|q| (q + me + round) % 4).collect::<Vec<_>>(),
                "counts"
            );
        }
        // Mismatched collectives are reported, not mixed up: rank 0 gathers u32 pairs where
        // the others gather u64s of the same byte length.
        if p > 1 {
            let r = if me == 0 {
                let mut out = vec![0u32; 2 * p];
                g.all_gather(&[1u32, 2], &mut out)
            } else {
                let mut out = vec![0u64; p];
                g.all_gather(&[3u64], &mut out)
            };
            match r {
                Err(GlobalError::CollectiveMismatch { .. }) => {}
                other => check!(self, false, "mismatched all_gather: {other:?}"),
            }
            // Bad buffer lengths are refused before anything is sent.
            let mut short = vec![0u64; 1];
            check!(
                self,
                matches!(
                    g.all_to_all(&[1u64, 2], &mut short),
                    Err(GlobalError::BadArguments(_))
                ),
                "all_to_all with mismatched buffers"
            );
            check!(
                self,
                matches!(
                    g.broadcast(p, &mut short),
                    Err(GlobalError::InvalidRank { .. })
                ),
                "broadcast from a rank outside the job"
            );
        }
        self.done(
            "coll",
            &format!("(every collective on {p} ranks, 5 sizes, against sequential references)"),
        );
    }

    fn bulk(&self, max_mib: usize) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let max = max_mib << 20;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u8>((max + 64) * p, Layout::Blocked),
        );
        let peer = (me + 1) % p;
        let mut sizes = vec![
            1usize, 7, 8, 63, 64, 100, 4095, 4096, 65535, 65536, 65537, 300_001,
        ];
        let mut s = 1 << 20;
        while s <= max {
            sizes.push(s);
            s <<= 2;
        }
        if *sizes.last().unwrap() != max {
            sizes.push(max);
        }
        for (k, &n) in sizes.iter().enumerate() {
            let off = 1 + k % 13; // unaligned
            let mut data = vec![0u8; n];
            fill_pattern(mix(n as u64 ^ me as u64), &mut data);
            let dst = a.ptr_on(peer, off);
            // Alternate the write forms; read back with alternating forms.
            match k % 3 {
                0 => ok(self, "bulk_write", g.bulk_write(dst, &data)),
                1 => {
                    ok(self, "bulk_put", g.bulk_put(dst, &data));
                    ok(self, "sync", g.sync());
                }
                _ => {
                    ok(self, "bulk_store", g.bulk_store(dst, &data));
                }
            }
            ok(self, "all_store_sync", g.all_store_sync());
            let mut back = vec![0u8; n];
            if k % 2 == 0 {
                ok(self, "bulk_read", g.bulk_read(&mut back, dst));
            } else {
                let mut b2 = vec![0u8; n];
                ok(self, "bulk_get", g.phase(|s| s.bulk_get(&mut b2, dst)));
                back = b2;
            }
            check!(
                self,
                back == data,
                "bulk size {n} at offset {off}: round trip differs"
            );
            // The owner sees the bytes its left neighbour wrote.
            let left = (me + p - 1) % p;
            let mut want = vec![0u8; n];
            fill_pattern(mix(n as u64 ^ left as u64), &mut want);
            // SAFETY: every rank only reads until the barrier.
            let local = unsafe { a.local_slice() };
            check!(
                self,
                local[off..off + n] == want[..],
                "owner's copy of size {n}"
            );
            ok(self, "barrier", g.barrier());
        }
        // A small chunk interleaves fragments with other traffic; results are the same.
        ok(self, "chunk", g.set_bulk_chunk(512));
        let mut data = vec![0u8; 10_000];
        fill_pattern(77 + me as u64, &mut data);
        ok(self, "bulk_write", g.bulk_write(a.ptr_on(peer, 3), &data));
        let mut back = vec![0u8; 10_000];
        ok(self, "bulk_read", g.bulk_read(&mut back, a.ptr_on(peer, 3)));
        check!(self, back == data, "512-byte chunks");
        ok(self, "chunk", g.set_bulk_chunk(g.runtime().max_medium()));
        check!(self, g.set_bulk_chunk(0).is_err(), "chunk 0 accepted");
        ok(self, "barrier", g.barrier());
        g.free(a);
        self.done(
            "bulk",
            &format!(
                "({} sizes from 1 B to {max_mib} MiB, unaligned)",
                sizes.len()
            ),
        );
    }

    fn overlap(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const N: usize = 200_000;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u8>((N + 4096) * p, Layout::Blocked),
        );
        // Every rank writes an overlapping, unaligned range of rank 0's part with its own
        // byte value; each byte must end up as one writer's value, and bytes only one rank
        // covers must be that rank's.
        let start = 17 + me * 1000;
        let data = vec![me as u8 + 1; N];
        ok(self, "bulk_put", g.bulk_put(a.ptr_on(0, start), &data));
        ok(self, "sync", g.sync());
        ok(self, "barrier", g.barrier());
        if me == 0 {
            // SAFETY: nobody writes after the barrier.
            let local = unsafe { a.local_slice() };
            for (i, &b) in local.iter().enumerate().take(17 + (p - 1) * 1000 + N + 10) {
                let writers: Vec<u8> = (0..p)
                    .filter(|&r| (17 + r * 1000..17 + r * 1000 + N).contains(&i))
                    .map(|r| r as u8 + 1)
                    .collect();
                if writers.is_empty() {
                    check!(self, b == 0, "byte {i} written by nobody is {b}");
                } else {
                    check!(
                        self,
                        writers.contains(&b),
                        "byte {i} = {b}, writers {writers:?}"
                    );
                }
            }
        }
        ok(self, "barrier", g.barrier());
        g.free(a);
        self.done(
            "overlap",
            &format!("({p} overlapping unaligned {N}-byte puts into rank 0)"),
        );
    }

    fn flood(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const M: usize = 20_000;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(M * p, Layout::Blocked),
        );
        // Everyone floods rank 0 with one-way stores (rank 0 too, to itself).
        for k in 0..M {
            ok(self, "store", g.store(a.ptr(me * M + k), &(k as u64)));
        }
        ok(self, "all_store_sync", g.all_store_sync());
        for k in (0..M).step_by(1013) {
            let v = ok(self, "read", g.read(a.ptr(me * M + k)));
            check!(self, v == k as u64, "flood value {k}");
        }
        g.free(a);
        self.done("flood", &format!("({p} ranks x {M} stores, no deadlock)"));
    }

    fn exchange(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        const M: usize = 5000;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(2 * M * p, Layout::Blocked),
        );
        let partner = me ^ 1;
        if partner < p {
            // Both partners issue puts and gets to each other at once.
            let mut got = vec![0u64; M];
            ok(
                self,
                "exchange",
                g.phase(|s| {
                    for k in 0..M {
                        s.put(a.ptr_on(partner, k), &((me * M + k) as u64))?;
                    }
                    Ok(())
                }),
            );
            ok(self, "barrier", g.barrier());
            ok(
                self,
                "exchange gets",
                g.phase(|s| {
                    for (k, slot) in got.iter_mut().enumerate() {
                        s.get(slot, a.ptr_on(partner, M + k))?;
                        s.put(a.ptr_on(partner, M + k), &0)?;
                    }
                    Ok(())
                }),
            );
            let _ = got;
        } else {
            ok(self, "barrier", g.barrier());
        }
        ok(self, "barrier", g.barrier());
        if partner < p {
            for k in (0..M).step_by(97) {
                let v = a.local_get(k);
                check!(
                    self,
                    v == (partner * M + k) as u64,
                    "exchange slot {k} = {v}"
                );
            }
        }
        g.free(a);
        self.done(
            "exchange",
            &format!("(pairs exchange {M} puts and gets at once)"),
        );
    }

    /// Barriers, 8-byte all-reduces and all-to-alls of 8 bytes per pair take their fast
    /// paths: short messages only over Active Messages, and under `hw` on one node no message
    /// at all (the mapped lanes, or the hub when every rank is polite). Every value checked.
    fn paths(&self) {
        let (g, me, p) = (self.g, self.me, self.p);
        let rt = g.runtime();
        if p < 2 {
            return;
        }
        const CALLS: usize = 300;
        ok(self, "barrier", g.barrier());
        let before = rt.stats().sent[0];
        for k in 0..CALLS {
            let mut w = [(me + k) as u64];
            ok(self, "all_reduce", g.all_reduce(&mut w, Op::Sum));
            let want = (0..p).map(|r| (r + k) as u64).sum::<u64>();
            check!(
                self,
                w[0] == want,
                "all_reduce call {k}: {} != {want}",
                w[0]
            );
            let send: Vec<u64> = (0..p).map(|j| (me * 1000 + j + k) as u64).collect();
            let mut recv = vec![0u64; p];
            ok(self, "all_to_all", g.all_to_all(&send, &mut recv));
            for (q, v) in recv.iter().enumerate() {
                let want = (q * 1000 + me + k) as u64;
                check!(
                    self,
                    *v == want,
                    "all_to_all call {k} from {q}: {v} != {want}"
                );
            }
            ok(self, "barrier", g.barrier());
        }
        let after = rt.stats().sent[0];
        let [short, medium, long] = [0, 1, 2].map(|c| after[c] - before[c]);
        check!(
            self,
            medium == 0 && long == 0,
            "small collectives sent {medium} medium and {long} long requests"
        );
        let one_node = (0..p).all(|r| rt.is_local(r));
        if self.name == "hw" && one_node {
            check!(
                self,
                short == 0,
                "under hw on one node: {short} short requests"
            );
        } else {
            check!(self, short > 0, "no short requests over Active Messages");
        }
        self.done(
            "paths",
            &format!(
                "({CALLS} calls of each small collective on {p} ranks, {short} short requests)"
            ),
        );
    }

    /// Ranks waiting at the hub for a rank that needs another core spin rather than yield
    /// theirs at every poll: after each barrier rank 1 waits politely for 100 µs (giving up
    /// its core again and again), while the other ranks wait for it in the next barrier. Run
    /// with ranks pinned (`volley run --bind`), where rank 1 has a core of its own or shares
    /// one with ranks other than 0 and 2. Counts yields per empty poll, never times.
    fn hubwait(&self) {
        let (g, me, p) = (self.g, self.me, self.p);
        let rt = g.runtime();
        const CALLS: usize = 300;
        ok(self, "barrier", g.barrier());
        let before = rt.stats();
        for _ in 0..CALLS {
            ok(self, "barrier", g.barrier());
            if me == 1 {
                let t = std::time::Instant::now();
                rt.wait_until(|| t.elapsed() >= Duration::from_micros(100));
            }
        }
        let after = rt.stats();
        let (yields, empty) = (
            after.yields - before.yields,
            after.empty_polls - before.empty_polls,
        );
        let hub = self.name == "hw" && rt.is_polite() && (0..p).all(|r| rt.is_local(r));
        if rt.is_polite() && me == 1 {
            check!(self, yields > 0, "30 ms of polite waits counted no yield");
        }
        if hub && me != 1 && p >= 3 {
            check!(
                self,
                yields * 4 <= empty,
                "rank {me} yielded {yields} times in {empty} empty polls waiting for rank 1"
            );
        }
        self.done(
            "hubwait",
            &format!("({CALLS} barriers on {p} ranks, rank 0 yielded {yields} times in {empty} empty polls)"),
        );
    }

    /// A sync whose gets all went to one rank waits as a round trip to it does: it spins
    /// while that rank is on a CPU instead of giving its core away after a few polls. Meant
    /// for 3 polite ranks pinned round-robin under `proc` (rank 1 alone on its CPU, ranks 0
    /// and 2 sharing the other): rank 0 gets 16 KiB from rank 1 in 1000 phases, each reply a
    /// few µs of copying, every byte checked, and yields in fewer than a quarter of them.
    fn syncwait(&self) {
        let (g, me, p) = (self.g, self.me, self.p);
        let rt = g.runtime();
        const PHASES: usize = 1000;
        const BYTES: usize = 16 << 10;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u8>(BYTES * p, Layout::Blocked),
        );
        let mut mine = vec![0u8; BYTES];
        fill_pattern(me as u64 + 77, &mut mine);
        ok(self, "fill", g.bulk_write(a.ptr_on(me, 0), &mine));
        ok(self, "barrier", g.barrier());
        let mut yields = 0;
        if me == 0 && p > 1 {
            let mut buf = vec![0u8; BYTES];
            let mut expect = vec![0u8; BYTES];
            fill_pattern(1 + 77, &mut expect);
            let get =
                |buf: &mut [u8]| ok(self, "phase", g.phase(|s| s.bulk_get(buf, a.ptr_on(1, 0))));
            for _ in 0..50 {
                get(&mut buf);
            }
            let before = rt.stats().yields;
            for k in 0..PHASES {
                buf.fill(0);
                get(&mut buf);
                check!(self, buf == expect, "phase {k}: the get's bytes differ");
            }
            yields = rt.stats().yields - before;
            if rt.is_polite() {
                check!(
                    self,
                    yields * 4 < PHASES as u64,
                    "rank 0 yielded {yields} times in {PHASES} syncs awaiting rank 1 alone"
                );
            }
        }
        self.done(
            "syncwait",
            &format!("({PHASES} syncs of a 16 KiB get, rank 0 yielded {yields} times)"),
        );
    }

    /// Small broadcasts from roots that run ahead of their receivers: 1000 calls from
    /// rotating roots, each root for 40 calls in a row (more than the ring holds) while the
    /// other ranks now and then give up their core, lengths of 1 to 12 words, every value
    /// checked. Under `hw` on one node they send no message at all (the ring); then a few of
    /// 13 words (the binomial tree's parcels), interleaved with small ones.
    fn bcast(&self) {
        let (g, me, p) = (self.g, self.me, self.p);
        let rt = g.runtime();
        const CALLS: usize = 1000;
        let value = |k: usize, i: usize| (k * 1000 + i) as u64 ^ 0x5a5a_0000_0000;
        let call = |k: usize, words: usize| {
            let root = (k / 40) % p;
            let mut data = vec![0u64; words];
            if me == root {
                for (i, d) in data.iter_mut().enumerate() {
                    *d = value(k, i);
                }
            } else if k % 7 == me % 7 {
                // A receiver that falls behind.
                std::thread::yield_now();
            }
            ok(self, "broadcast", g.broadcast(root, &mut data));
            for (i, d) in data.iter().enumerate() {
                check!(
                    self,
                    *d == value(k, i),
                    "broadcast {k} from {root}, word {i}: {d:#x} != {:#x}",
                    value(k, i)
                );
            }
        };
        ok(self, "barrier", g.barrier());
        let before = rt.stats().sent[0];
        for k in 0..CALLS {
            call(k, 1 + k % 12);
        }
        let after = rt.stats().sent[0];
        let sent: u64 = (0..3).map(|c| after[c] - before[c]).sum();
        let one_node = (0..p).all(|r| rt.is_local(r));
        if self.name == "hw" && one_node && p > 1 {
            check!(self, sent == 0, "under hw on one node: {sent} requests");
        }
        for k in CALLS..CALLS + 100 {
            call(k, if k % 2 == 0 { 13 } else { 1 });
        }
        self.done(
            "bcast",
            &format!("({CALLS} small broadcasts on {p} ranks, {sent} requests)"),
        );
    }

    /// Large all-reduces and all-to-alls at lengths around 16 KiB (where they leave the small
    /// paths), unaligned, and at 1 MiB, against sequential references; the f64 sums must have
    /// the bits of a rank-order sum. Says whether they copied straight between processes
    /// (never where they cannot: another strategy, another node, `VOLLEY_COLL_CMA=off`).
    fn big(&self) {
        let (g, me, p) = (self.g, self.me, self.p);
        let single = ok(self, "single_copy", g.single_copy_collectives());
        let one_node = (0..p).all(|r| g.runtime().is_local(r));
        let off = std::env::var("VOLLEY_COLL_CMA").is_ok_and(|v| v == "off");
        check!(
            self,
            !single || (self.name == "hw" && one_node && !off && p > 1),
            "single copy where it cannot apply"
        );
        let val = |r: usize, i: usize, salt: u64| mix(salt ^ (r as u64) << 32 ^ i as u64);
        const K: usize = 16 << 10;
        for (round, bytes) in [K - 1, K, K + 1, K + 8, K + 13, 100_003, 1 << 20]
            .into_iter()
            .enumerate()
        {
            let salt = round as u64 * 0x1_0000;
            // Bytes, summed with a user operator.
            let mut b: Vec<u8> = (0..bytes).map(|i| val(me, i, salt) as u8).collect();
            ok(
                self,
                "all_reduce_with u8",
                g.all_reduce_with(&mut b, u8::wrapping_add),
            );
            check!(
                self,
                b.iter()
                    .enumerate()
                    .all(|(i, v)| *v
                        == (0..p).fold(0u8, |a, r| a.wrapping_add(val(r, i, salt) as u8))),
                "u8 sum of {bytes} bytes"
            );
            // f64 sums: rank order above 16 KiB (a tree below it, within rounding).
            let n = bytes / 8;
            let x = |r: usize, i: usize| (val(r, i, salt) % 100_000) as f64 / 7.0;
            let mut f: Vec<f64> = (0..n).map(|i| x(me, i)).collect();
            ok(self, "all_reduce f64", g.all_reduce(&mut f, Op::Sum));
            for (i, v) in f.iter().enumerate() {
                let want = (1..p).fold(x(0, i), |a, r| a + x(r, i));
                let exact = n * 8 > K;
                check!(
                    self,
                    v.to_bits() == want.to_bits()
                        || (!exact && (v - want).abs() <= 1e-9 * want.abs().max(1.0)),
                    "f64 sum of {n} elements, element {i}: {v} != {want}"
                );
            }
            // u32 min, an element count that does not divide among the ranks.
            let n = bytes / 4 + 1;
            let mut m: Vec<u32> = (0..n).map(|i| val(me, i, salt) as u32).collect();
            ok(self, "all_reduce u32", g.all_reduce(&mut m, Op::Min));
            check!(
                self,
                m.iter()
                    .enumerate()
                    .all(|(i, v)| *v == (0..p).map(|r| val(r, i, salt) as u32).min().unwrap()),
                "u32 min of {n} elements"
            );
            // All-to-all: `bytes` in all, rounded to PROCS blocks; and blocks of `bytes / 8`
            // u64s each.
            let n = (bytes / p).max(1);
            let send: Vec<u8> = (0..n * p).map(|i| val(me, i, salt) as u8).collect();
            let mut recv = vec![0u8; n * p];
            ok(self, "all_to_all u8", g.all_to_all(&send, &mut recv));
            check!(
                self,
                (0..p).all(|q| (0..n).all(|i| recv[q * n + i] == val(q, me * n + i, salt) as u8)),
                "all_to_all of {n}-byte blocks"
            );
            let n = bytes / 8;
            let send: Vec<u64> = (0..n * p).map(|i| val(me, i, salt)).collect();
            let mut recv = vec![0u64; n * p];
            ok(self, "all_to_all u64", g.all_to_all(&send, &mut recv));
            check!(
                self,
                (0..p).all(|q| (0..n).all(|i| recv[q * n + i] == val(q, me * n + i, salt))),
                "all_to_all of {n}-word blocks"
            );
        }
        // On the single-copy path, mismatched lengths are refused on every rank, and the
        // next collectives work.
        if single {
            let n = if me == 0 { 8192 } else { 4096 };
            let send = vec![1u64; n * p];
            let mut recv = vec![0u64; n * p];
            match g.all_to_all(&send, &mut recv) {
                Err(GlobalError::CollectiveMismatch { .. }) => {}
                other => check!(self, false, "mismatched large all_to_all: {other:?}"),
            }
            let mut d = vec![1u64; if me == 0 { 20_000 } else { 20_001 }];
            match g.all_reduce(&mut d, Op::Sum) {
                Err(GlobalError::CollectiveMismatch { .. }) => {}
                other => check!(self, false, "mismatched large all_reduce: {other:?}"),
            }
            let mut d = vec![me as u64; 20_000];
            ok(self, "all_reduce", g.all_reduce(&mut d, Op::Sum));
            let want = (p * (p - 1) / 2) as u64;
            check!(
                self,
                d.iter().all(|v| *v == want),
                "all_reduce after a mismatch"
            );
        }
        let how = if single { "on" } else { "off" };
        self.done("big", &format!("(single copy {how}, {p} ranks)"));
    }

    /// Ends the job: a rank that detects the mismatch exits with status 3 naming it; ranks
    /// that only see silence wait (saying so after VOLLEY_HANG_WARN_SECS) until the launcher
    /// stops the job because of that exit.
    fn mismatch(&self) {
        let g = self.g;
        if self.p < 2 {
            return;
        }
        let r = if self.me == 0 {
            g.barrier()
        } else {
            g.all_reduce_one(1u64, Op::Sum).map(|_| ())
        };
        self.mismatched("barrier against all_reduce", r);
    }

    /// Rank 0 calls a barrier where the others receive its broadcast, or (`root_bcasts`)
    /// broadcasts where the others call a barrier: the root returns at once and then waits
    /// for the others to find its broadcast and end the job.
    fn mismatch_bcast(&self, root_bcasts: bool) {
        let g = self.g;
        if self.p < 2 {
            return;
        }
        let r = if (self.me == 0) == root_bcasts {
            let r = g.broadcast(0, &mut [0u64]);
            if root_bcasts && r.is_ok() {
                std::thread::sleep(Duration::from_secs(120));
            }
            r
        } else {
            g.barrier()
        };
        self.mismatched("barrier against broadcast", r);
    }

    /// A rank that detected a mismatch says so and ends the job with status 3.
    fn mismatched(&self, case: &str, r: volley_global::Result<()>) {
        match r {
            Err(e @ GlobalError::CollectiveMismatch { .. }) => {
                volley_tests::eprint_line(&format!("rank {} detected: {e}", self.me));
                std::process::exit(3)
            }
            other => check!(self, false, "{case}: {other:?}"),
        }
    }

    fn late(&self) {
        let g = self.g;
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(g.procs(), Layout::Cyclic),
        );
        if self.me == 1 % self.p {
            std::thread::sleep(Duration::from_millis(1500));
            ok(self, "store", g.store(a.ptr(0), &99));
        }
        if self.me == 0 {
            ok(self, "store_sync", g.store_sync(8));
            check!(self, a.local_get(0) == 99, "late store");
        }
        self.done("late", "(store_sync waited for a late store)");
    }

    fn protect(&self) {
        let g = self.g;
        let (me, p) = (self.me, self.p);
        let a = ok(
            self,
            "alloc",
            g.all_spread_alloc::<u64>(4 * p, Layout::Cyclic),
        );
        let peer = (me + 1) % p;
        ok(self, "write", g.write(a.ptr_on(me, 0), 42));
        ok(self, "barrier", g.barrier());
        // Out of bounds: refused before sending, memory unchanged.
        let past = a.ptr_on(peer, 4);
        match g.write(past, 1) {
            Err(GlobalError::OutOfBounds { rank, .. }) => {
                check!(self, rank == peer, "OOB names {rank}")
            }
            other => check!(self, false, "write past the end: {other:?}"),
        }
        check!(
            self,
            g.read(a.ptr_on(peer, 4)).is_err(),
            "read past the end"
        );
        check!(
            self,
            g.bulk_write(a.ptr_on(peer, 2), &[1u64, 2, 3]).is_err(),
            "bulk write across the end"
        );
        // A rank outside the job.
        let seg = a.ptr(0).segment();
        let mut bad = seg;
        bad.rank = p + 3;
        let outside = GlobalPtr::<u64>::new(bad, 0).unwrap();
        match g.read(outside) {
            Err(GlobalError::InvalidRank { rank, procs }) => {
                check!(self, rank == p + 3 && procs == p, "InvalidRank")
            }
            other => check!(self, false, "read on rank {}: {other:?}", p + 3),
        }
        // Misaligned typed pointers cannot be formed.
        check!(
            self,
            matches!(
                GlobalPtr::<u64>::new(seg, 3),
                Err(GlobalError::Misaligned { .. })
            ),
            "misaligned pointer"
        );
        // A foreign segment: a read-only per-rank segment, written by a neighbour.
        let ro = ok(
            self,
            "alloc",
            g.rma().alloc(64, Perms::READ).map_err(GlobalError::from),
        );
        ok(
            self,
            "zero",
            g.rma()
                .write_local(ro.handle(), 0, &[0; 64])
                .map_err(GlobalError::from),
        );
        let handles = {
            let mut mine = ro.handle().to_words().to_vec();
            let mut all = vec![0u64; 3 * p];
            ok(self, "all_gather", g.all_gather(&mine, &mut all));
            mine.clear();
            all
        };
        let theirs = volley::rma::SegmentRef::from_words([
            handles[3 * peer],
            handles[3 * peer + 1],
            handles[3 * peer + 2],
        ]);
        let rp = GlobalPtr::<u64>::new(theirs, 8).unwrap();
        match g.write(rp, 9) {
            Err(GlobalError::Refused {
                rank,
                reason: Refusal::NotWritable,
            }) => check!(self, rank == peer, "refusal names {rank}"),
            other => check!(self, false, "write to a read-only segment: {other:?}"),
        }
        let v = ok(self, "read ro", g.read(rp));
        check!(self, v == 0, "read-only word changed to {v}");
        // A wrong key (a forged handle).
        let forged = GlobalPtr::<u64>::new(theirs.with_key(0x1234), 0).unwrap();
        match g.read(forged) {
            Err(GlobalError::Refused {
                reason: Refusal::WrongKey,
                ..
            }) => {}
            other => check!(self, false, "read with a forged key: {other:?}"),
        }
        // A store to the read-only segment: refused at once where the owner's memory is
        // reached directly (this rank, or `hw` on one node); otherwise one-way, and then
        // all_store_sync reports it on every rank.
        let immediate = peer == me || (g.strategy() == Strategy::Hw && g.runtime().is_local(peer));
        let one_way = ok(
            self,
            "all_reduce",
            g.all_reduce_one(u64::from(!immediate), Op::Max),
        );
        let stored = g.store(rp, &5);
        let synced = g.all_store_sync();
        if immediate {
            check!(
                self,
                matches!(
                    stored,
                    Err(GlobalError::Refused {
                        reason: Refusal::NotWritable,
                        ..
                    })
                ),
                "direct store to a read-only segment: {stored:?}"
            );
        } else {
            check!(self, stored.is_ok(), "one-way store: {stored:?}");
        }
        match synced {
            Ok(()) if one_way == 0 => {}
            Err(GlobalError::StoreRefused {
                reason: Refusal::NotWritable,
                count: 1,
                ..
            }) if one_way == 1 => {}
            other => check!(
                self,
                false,
                "all_store_sync after refused stores: {other:?}"
            ),
        }
        let v = ok(self, "read ro", g.read(rp));
        check!(self, v == 0, "read-only word changed to {v} by a store");
        // Freed memory: a pointer into a freed array is refused, the memory unchanged.
        let stale = a.ptr_on(peer, 0);
        ok(self, "barrier", g.barrier());
        g.free(a);
        ok(self, "barrier", g.barrier()); // every rank has freed its part
        match g.read(stale) {
            Err(GlobalError::Refused { .. }) => {}
            other => check!(self, false, "read through a freed array: {other:?}"),
        }
        match g.write(stale, 7) {
            Err(GlobalError::Refused { .. }) => {}
            other => check!(self, false, "write through a freed array: {other:?}"),
        }
        // Atomic procedure with too many arguments.
        check!(
            self,
            matches!(
                g.atomic(self.bump, stale, &[0; 12]),
                Err(GlobalError::BadArguments(_))
            ),
            "12 procedure arguments"
        );
        ok(self, "barrier", g.barrier());
        let _ = g.rma().free(ro);
        self.done(
            "protect",
            "(bounds, ranks, alignment, permissions, keys, freed arrays, refused stores)",
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut bulk_mib = 16;
    let mut sections: Vec<&str> = Vec::new();
    for a in &args {
        if let Some(m) = a.strip_prefix("--bulk-mib=") {
            bulk_mib = m.parse().unwrap_or_else(|_| fail(0, 2, "--bulk-mib=N"));
        } else if a == "all" {
            sections.extend(SECTIONS);
        } else if let Some(s) = SECTIONS.iter().chain(&EXTRA).find(|s| **s == a.as_str()) {
            sections.push(s);
        } else {
            fail(
                0,
                2,
                &format!("unknown section {a:?}; sections: {}", SECTIONS.join(" ")),
            );
        }
    }
    if sections.is_empty() {
        sections.extend(SECTIONS);
    }
    let mut b = Runtime::builder();
    b.segment_bytes((3 * bulk_mib + 8) << 20);
    let mut setup = Global::register(&mut b).unwrap_or_else(|e| fail(0, 2, &e.to_string()));
    let bump = setup.atomic_proc(&mut b, "suite.bump", |x: &mut u64, a: &[u64]| {
        let old = *x;
        *x += a[0];
        old
    });
    let maxer = setup.atomic_proc(&mut b, "suite.max_id", |q: &mut Particle, a: &[u64]| {
        q.id = q.id.max(a[0] as u32);
        q.flags += 1;
        q.id as u64
    });
    let rt = volley_tests::join(b);
    let g = setup
        .attach(&rt)
        .unwrap_or_else(|e| fail(rt.rank(), 2, &format!("attach: {e}")));
    let s = Suite {
        g: &g,
        me: g.my_proc(),
        p: g.procs(),
        name: g.strategy().name(),
        bump,
        maxer,
    };
    for sec in sections {
        match sec {
            "rw" => s.rw(),
            "sync" => s.sync(),
            "handle" => s.handle(),
            "spread" => s.spread(),
            "store" => s.store(),
            "radix" => s.radix(),
            "atomics" => s.atomics(),
            "buckets" => s.buckets(),
            "barrier" => s.barrier(),
            "coll" => s.coll(),
            "bulk" => s.bulk(bulk_mib),
            "overlap" => s.overlap(),
            "flood" => s.flood(),
            "exchange" => s.exchange(),
            "protect" => s.protect(),
            "late" => s.late(),
            "mismatch" => s.mismatch(),
            "mismatch-bcast" => s.mismatch_bcast(false),
            "mismatch-root" => s.mismatch_bcast(true),
            "paths" => s.paths(),
            "big" => s.big(),
            "bcast" => s.bcast(),
            "hubwait" => s.hubwait(),
            "syncwait" => s.syncwait(),
            _ => unreachable!(),
        }
    }
}
