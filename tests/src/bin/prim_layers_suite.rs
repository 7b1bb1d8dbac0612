//! Seed 003's layers (`volley-prim-layers`) across processes. `prim_layers_suite SECTION...`;
//! each section checks its own results and rank 0 prints `layers SECTION: ok (...)`. The
//! progress mode and capacity come from `VOLLEY_PRIM_*`.
//!
//! - `typed-order`: every rank sends each other rank messages of several types, in an order
//!   the receiver does not follow; each type arrives whole and in per-type send order, long
//!   payloads (several times the input buffer) included (item 22).
//! - `typed-bounds`: a too-small receive buffer and a full unexpected memory are clear
//!   errors, and the message is still delivered afterwards (nothing lost); probe sees
//!   arrived types and not absent ones.
//! - `trisolve`: the banded solve in each version matches the serial solve (items 19, 22;
//!   `fetch` needs 2 ranks and the handler).
//! - `fetch-order`: a conditional fetch made before the value exists is parked and answered
//!   when it is produced; one made after is answered at once (item 21).
//! - `fetch-many`: every rank parks a window of requests from every other rank, then
//!   produces; each parked request is answered once, with the right value.
//! - `schedule`: the inspector's lists equal a reference computed serially from the whole
//!   pattern, and its plan sends each list whole, in batches no larger than allowed (item 23).
//! - `sparse-solve`: the fetch solve and the executor (three solves on one schedule,
//!   alternating with fetch solves) equal the serial solve bit for bit; the executor never
//!   finds a buffer full (no stall) and never has more than its allowance uncredited.
//! - `sparse-errors`: unknown and foreign unknowns, double production, a value never
//!   produced (the requester is told, the owner reports the parked request), bad schedules.

use std::process::exit;
use volley::Runtime;
use volley_prim::{Prim, PrimConfig};
use volley_prim_layers::sparse::{
    self, Executor, Fetcher, InspectOptions, Layout, LevelStats, Pattern, SparseError, SparseSetup,
    Step,
};
use volley_prim_layers::timing::Latencies;
use volley_prim_layers::trisolve::{self, Version};
use volley_prim_layers::{Typed, TypedError};

fn fail(msg: String) -> ! {
    eprintln!("layers: FAILED: {msg}");
    exit(1)
}

/// The payload of message `k` of type `ty` from `from`: its length varies up to 3 buffers.
fn payload(from: usize, ty: u32, k: usize, cap: usize) -> Vec<u8> {
    let len = (k * 37 + ty as usize * 11) % (3 * cap + 5);
    (0..len)
        .map(|j| (from * 31 + ty as usize * 7 + k * 3 + j) as u8)
        .collect()
}

fn typed_order(p: &Prim, rt: &Runtime) {
    let t = Typed::new(p);
    let (me, n) = (p.rank(), p.size());
    const TYPES: [u32; 3] = [5, 9, 1000];
    const PER: usize = 4;
    // Long messages pair by pair, in one global order (a sender waits for room only while
    // its receiver works through earlier pairs); the receiver asks for the types in reverse.
    // `recv` does not select a sender, so each sender has its own types.
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            if me == a {
                send_all(&t, b, me, &TYPES, PER, p.capacity());
            } else if me == b {
                recv_all(&t, a, &TYPES, PER, p.capacity());
            }
        }
    }
    // Short messages from every rank at once (they fit the buffer), a type per sender and
    // kind, received in an order unrelated to arrival.
    rt.barrier();
    for to in (0..n).filter(|&r| r != me) {
        for k in 0..2u32 {
            for kind in 0..3u32 {
                let ty = 100 + 10 * me as u32 + kind;
                t.send(to, ty, &[me as u8, kind as u8, k as u8]).unwrap();
            }
        }
    }
    for kind in (0..3u32).rev() {
        for from in (0..n).rev().filter(|&r| r != me) {
            for k in 0..2u8 {
                let ty = 100 + 10 * from as u32 + kind;
                let got = t
                    .recv(ty)
                    .unwrap_or_else(|e| fail(format!("recv {ty}: {e}")));
                if got != [from as u8, kind as u8, k] {
                    fail(format!("type {ty}: {got:?} out of order"));
                }
            }
        }
    }
    if t.unexpected_bytes() != 0 {
        fail(format!("{} unexpected bytes left", t.unexpected_bytes()));
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers typed-order: ok ({} types x {PER} messages per pair up to {} bytes, then all to all)",
            TYPES.len(),
            3 * p.capacity() + 4
        );
    }
}

fn send_all(t: &Typed, to: usize, me: usize, types: &[u32], per: usize, cap: usize) {
    for k in 0..per {
        for &ty in types {
            t.send(to, ty + 10_000 * me as u32, &payload(me, ty, k, cap))
                .unwrap_or_else(|e| fail(format!("send: {e}")));
        }
    }
}

fn recv_all(t: &Typed, from: usize, types: &[u32], per: usize, cap: usize) {
    for &ty in types.iter().rev() {
        for k in 0..per {
            let got = t
                .recv(ty + 10_000 * from as u32)
                .unwrap_or_else(|e| fail(format!("recv {ty}: {e}")));
            if got != payload(from, ty, k, cap) {
                fail(format!(
                    "type {ty} message {k} from {from}: {} bytes, not as sent",
                    got.len()
                ));
            }
        }
    }
}

fn typed_bounds(p: &Prim, rt: &Runtime) {
    let me = p.rank();
    if p.size() < 2 {
        fail("typed-bounds needs 2 ranks".into());
    }
    // Room for one 100-byte message, not two.
    let t = Typed::with_limit(p, 150);
    if me == 0 {
        t.send(1, 1, &[1; 100]).unwrap();
        t.send(1, 2, &[2; 100]).unwrap();
        t.send(1, 3, &[3; 40]).unwrap();
        t.send(1, 4, b"done").unwrap();
    } else if me == 1 {
        // Waits for type 4: type 1 is filed, type 2 does not fit.
        match t.recv(4) {
            Err(TypedError::UnexpectedFull {
                ty: 2,
                bytes: 100,
                limit: 150,
            }) => {}
            other => fail(format!("expected UnexpectedFull for type 2, got {other:?}")),
        }
        if !t.probe(2).unwrap() || !t.probe(1).unwrap() || t.probe(4).unwrap() {
            fail("probe after UnexpectedFull".into());
        }
        let mut small = [0u8; 10];
        match t.recv_into(1, &mut small) {
            Err(TypedError::TooSmall {
                ty: 1,
                need: 100,
                have: 10,
            }) => {}
            other => fail(format!("expected TooSmall, got {other:?}")),
        }
        let mut b = [0u8; 100];
        if t.recv_into(2, &mut b).unwrap() != 100 || b != [2; 100] {
            fail("type 2 after the bound".into());
        }
        if t.recv(1).unwrap() != [1; 100] || t.recv(4).unwrap() != b"done" {
            fail("types 1 and 4".into());
        }
        if t.recv(3).unwrap() != [3; 40] || t.unexpected_bytes() != 0 {
            fail("type 3".into());
        }
        if t.probe(3).unwrap() {
            fail("probe of a type never sent again".into());
        }
        match t.send(p.size(), 1, b"x") {
            Err(TypedError::Prim(_)) => {}
            other => fail(format!("send to a wrong rank: {other:?}")),
        }
    }
    rt.barrier();
    if me == 0 {
        println!("layers typed-bounds: ok (too small, unexpected full, probe, wrong rank)");
    }
}

fn trisolve_section(p: &Prim, rt: &Runtime) {
    // More rows than a 4 KiB buffer has words: B3' once hung past 512 requests.
    let n = 700;
    let (me, size) = (p.rank(), p.size());
    let t = Typed::new(p);
    let want = trisolve::serial(n, size);
    let mut versions = vec![Version::Typed, Version::Raw, Version::Pipe];
    if size == 2 {
        versions.push(Version::Fetch);
        if p.progress() == volley_prim::Progress::CommThread {
            versions.push(Version::FetchComm);
        }
    }
    for v in versions {
        rt.barrier();
        let col = trisolve::solve(p, &t, n, v, &[])
            .unwrap_or_else(|e| fail(format!("{v:?}: {e}")))
            .y;
        for (r, y) in col.iter().enumerate() {
            if *y != want[r * size + me] {
                fail(format!(
                    "{v:?}: row {r} on rank {me}: {y} != {}",
                    want[r * size + me]
                ));
            }
        }
    }
    rt.barrier();
    if me == 0 {
        println!("layers trisolve: ok ({n} rows on {size} ranks equal the serial solve)");
    }
}

/// The sparse sections' system: the pattern every rank draws from.
fn pattern(size: usize) -> Pattern {
    Pattern {
        n: 150 * size + 7,
        per_row: 4,
        window: 8 * size,
        seed: 0x5eed_0031,
    }
}

fn fetch_order(p: &Prim, rt: &Runtime, s: &SparseSetup) {
    let (me, size) = (p.rank(), p.size());
    let layout = Layout { n: 4 * size, size };
    let mut f = Fetcher::new(p, s, layout).unwrap_or_else(|e| fail(format!("fetcher: {e}")));
    let value = |i: usize| 1000.0 + i as f64;
    // Before: everyone asks rank 0 for unknown 0; rank 0 produces it only once every
    // request is parked.
    if me == 0 {
        while f.parked() < size - 1 {
            f.poll().unwrap_or_else(|e| fail(format!("poll: {e}")));
            std::thread::yield_now();
        }
        f.produce(0, value(0)).unwrap();
    } else {
        let v = f.get(0).unwrap_or_else(|e| fail(format!("get 0: {e}")));
        if v != value(0) {
            fail(format!("parked fetch of 0 gave {v}"));
        }
    }
    // After: rank 0 produces unknown `size` before anyone asks.
    if me == 0 {
        f.produce(size, value(size)).unwrap();
    }
    rt.barrier();
    if me == 0 {
        while f.stats().served_at_once < (size - 1) as u64 {
            f.poll().unwrap_or_else(|e| fail(format!("poll: {e}")));
            std::thread::yield_now();
        }
    } else {
        let v = f
            .get(size)
            .unwrap_or_else(|e| fail(format!("get {size}: {e}")));
        if v != value(size) {
            fail(format!("fetch of produced {size} gave {v}"));
        }
    }
    f.finish().unwrap_or_else(|e| fail(format!("finish: {e}")));
    let st = f.stats();
    if me == 0 && (st.parked, st.served_at_once) != ((size - 1) as u64, (size - 1) as u64) {
        fail(format!(
            "rank 0 parked {} and served at once {}",
            st.parked, st.served_at_once
        ));
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers fetch-order: ok ({} parked then answered, {} answered at once)",
            size - 1,
            size - 1
        );
    }
}

fn fetch_many(p: &Prim, rt: &Runtime, s: &SparseSetup) {
    let (me, size) = (p.rank(), p.size());
    let layout = Layout { n: 64 * size, size };
    let mut f = Fetcher::new(p, s, layout).unwrap_or_else(|e| fail(format!("fetcher: {e}")));
    let w = f.window();
    let value = |i: usize| (i * 7) as f64 + 0.5;
    // Rank r asks first for the first `w` unknowns not its own, from r + 1 on.
    let first = |r: usize| -> Vec<usize> {
        (0..layout.n)
            .map(|k| (k + r + 1) % layout.n)
            .filter(|&i| layout.owner(i) != r)
            .take(w)
            .collect()
    };
    for &i in &first(me) {
        f.request(i)
            .unwrap_or_else(|e| fail(format!("request {i}: {e}")));
    }
    let expect: usize = (0..size)
        .filter(|&r| r != me)
        .map(|r| first(r).iter().filter(|&&i| layout.owner(i) == me).count())
        .sum();
    while f.parked() < expect {
        f.poll().unwrap_or_else(|e| fail(format!("poll: {e}")));
        std::thread::yield_now();
    }
    rt.barrier();
    for i in (me..layout.n).step_by(size) {
        f.produce(i, value(i)).unwrap();
    }
    for i in (0..layout.n).filter(|&i| layout.owner(i) != me) {
        let v = f.get(i).unwrap_or_else(|e| fail(format!("get {i}: {e}")));
        if v != value(i) {
            fail(format!("unknown {i}: {v} != {}", value(i)));
        }
    }
    f.finish().unwrap_or_else(|e| fail(format!("finish: {e}")));
    if f.stats().parked != expect as u64 {
        fail(format!(
            "rank {me} parked {} requests, expected {expect}",
            f.stats().parked
        ));
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers fetch-many: ok (a window of {w} parked requests per rank, {} unknowns)",
            layout.n
        );
    }
}

fn schedule_section(p: &Prim, rt: &Runtime) {
    let (me, size) = (p.rank(), p.size());
    let pat = pattern(size);
    let layout = Layout { n: pat.n, size };
    let rows = pat.local_rows(layout, me);
    let opts = InspectOptions {
        max_batch: Some(5),
        flow_control: true,
    };
    let sched =
        sparse::inspect(p, layout, &rows, opts).unwrap_or_else(|e| fail(format!("inspect: {e}")));
    // The reference, from the whole pattern: what this rank reads from whom, and which of
    // its unknowns each other rank reads.
    let mut needs = vec![Vec::new(); size];
    let mut sends = vec![Vec::new(); size];
    for i in 0..pat.n {
        let r = layout.owner(i);
        for (c, _) in pat.row(i).entries {
            let o = layout.owner(c);
            if r == me && o != me {
                needs[o].push(c);
            }
            if o == me && r != me {
                sends[r].push(c);
            }
        }
    }
    for v in needs.iter_mut().chain(sends.iter_mut()) {
        v.sort_unstable();
        v.dedup();
    }
    if sched.needs != needs || sched.sends != sends {
        fail(format!(
            "rank {me}: the inspector's lists differ from the serial reference"
        ));
    }
    let reference = sparse::plan(layout, me, &rows, needs, sends, p.capacity(), opts).unwrap();
    if reference != sched {
        fail(format!(
            "rank {me}: the plan differs from the serial reference"
        ));
    }
    // Each list goes whole, in batches of at most the largest, rows once in order.
    let mut sent = vec![0usize; size];
    let mut next_row = 0;
    for s in &sched.steps {
        match *s {
            Step::Row(k) => {
                if k != next_row {
                    fail(format!("rank {me}: row step {k} out of order"));
                }
                next_row += 1;
            }
            Step::Send { to, count } => {
                if count == 0 || count > sched.max_batch {
                    fail(format!(
                        "rank {me}: a batch of {count} (largest {})",
                        sched.max_batch
                    ));
                }
                sent[to] += count;
            }
        }
    }
    let whole: Vec<usize> = sched.sends.iter().map(Vec::len).collect();
    if next_row != rows.len() || sent != whole {
        fail(format!(
            "rank {me}: the plan sends {sent:?}, the lists are {whole:?}"
        ));
    }
    if sched.values_in() == 0 && size > 1 {
        fail(format!(
            "rank {me} receives nothing: the pattern does not cross ranks"
        ));
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers schedule: ok ({} unknowns on {size} ranks; rank 0 sends {} values in {} batches)",
            pat.n,
            sched.values_out(),
            sched.batches()
        );
    }
}

fn sparse_solve(p: &Prim, rt: &Runtime, s: &SparseSetup) {
    let (me, size) = (p.rank(), p.size());
    let pat = pattern(size);
    let layout = Layout { n: pat.n, size };
    let want = pat.serial();
    let rows = pat.local_rows(layout, me);
    let check = |what: &str, y: &[f64]| {
        for (k, v) in y.iter().enumerate() {
            let i = rows[k].index;
            if *v != want[i] {
                fail(format!(
                    "{what}: unknown {i} on rank {me}: {v} != {}",
                    want[i]
                ));
            }
        }
    };
    let mut f = Fetcher::new(p, s, layout).unwrap_or_else(|e| fail(format!("fetcher: {e}")));
    let y =
        sparse::solve_fetch(&mut f, &rows).unwrap_or_else(|e| fail(format!("fetch solve: {e}")));
    check("fetch", &y);
    let sched = sparse::inspect(p, layout, &rows, InspectOptions::default())
        .unwrap_or_else(|e| fail(format!("inspect: {e}")));
    let allowance = sched.allowance as u64;
    let mut x = Executor::new(p, s, sched).unwrap_or_else(|e| fail(format!("executor: {e}")));
    let stalls = p.stats().full_stalls;
    for rep in 0..3 {
        let y = x
            .solve(&rows)
            .unwrap_or_else(|e| fail(format!("executor solve {rep}: {e}")));
        check("executor", &y);
        // An executor solve ends when this rank's consumers are done with it, not every
        // rank: the others may still be executing, so wait before other packets go out.
        rt.barrier();
        let y = sparse::solve_fetch(&mut f, &rows)
            .unwrap_or_else(|e| fail(format!("fetch solve: {e}")));
        check("fetch again", &y);
        // A rank leaves `finish` once it has every rank's end mark; others may still wait
        // for theirs, so the executor's batches must not overtake them.
        rt.barrier();
    }
    let st = x.stats();
    let stalled = p.stats().full_stalls - stalls;
    if stalled != 0 || st.most_outstanding > allowance {
        fail(format!(
            "rank {me}: {stalled} full-buffer stalls, {} bytes uncredited (allowance {allowance})",
            st.most_outstanding
        ));
    }
    if p.stats().spills != 0 {
        fail("spills".into());
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers sparse-solve: ok ({} unknowns on {size} ranks, {}-byte buffers: fetch and 3 executor solves equal the serial solve; rank 0: {} batches, {} credits, {} credit waits, no stall)",
            pat.n,
            p.capacity(),
            st.batches,
            st.credits,
            st.credit_waits
        );
    }
}

/// The level-scheduled typed solve (E9's variant (a)): two solves in a row equal the serial
/// solve, one level message received per other rank and round; a buffer too small for a
/// round message from every rank is a clear error before anything is sent.
fn sparse_levels(p: &Prim, rt: &Runtime) {
    let (me, size) = (p.rank(), p.size());
    let t = Typed::new(p);
    let pat = pattern(size);
    let layout = Layout { n: pat.n, size };
    let want = pat.serial();
    let rows = pat.local_rows(layout, me);
    let mut waits = Latencies::new();
    let mut st = LevelStats::default();
    let limit = sparse::round_limit(p.capacity(), size);
    if limit == 0 {
        match sparse::solve_levels(&t, layout, &rows, &mut waits, &mut st) {
            Err(SparseError::Config(_)) if st.messages == 0 => {}
            other => fail(format!("levels on a too small buffer: {other:?}")),
        }
    } else {
        for rep in 0..2 {
            let y = sparse::solve_levels(&t, layout, &rows, &mut waits, &mut st)
                .unwrap_or_else(|e| fail(format!("levels solve {rep}: {e}")));
            for (k, v) in y.iter().enumerate() {
                let i = rows[k].index;
                if *v != want[i] {
                    fail(format!(
                        "levels: unknown {i} on rank {me}: {v} != {}",
                        want[i]
                    ));
                }
            }
        }
        if waits.count() != st.messages || st.rounds == 0 {
            fail(format!(
                "rank {me}: {} level messages waited for, {} sent, {} rounds",
                waits.count(),
                st.messages,
                st.rounds
            ));
        }
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers sparse-levels: ok ({} unknowns on {size} ranks, {}-byte buffers, {limit} values per round message: {} rounds in 2 solves equal the serial solve)",
            pat.n,
            p.capacity(),
            st.rounds
        );
    }
}

fn sparse_errors(p: &Prim, rt: &Runtime, s: &SparseSetup) {
    let (me, size) = (p.rank(), p.size());
    if size < 2 {
        fail("sparse-errors needs 2 ranks".into());
    }
    let layout = Layout { n: 4 * size, size };
    let mut f = Fetcher::new(p, s, layout).unwrap_or_else(|e| fail(format!("fetcher: {e}")));
    let n = layout.n;
    match f.get(n) {
        Err(SparseError::UnknownIndex { index, .. }) if index == n => {}
        other => fail(format!("get({n}): {other:?}")),
    }
    match f.request(n + 5) {
        Err(SparseError::UnknownIndex { .. }) => {}
        other => fail(format!("request({}): {other:?}", n + 5)),
    }
    let foreign = (me + 1) % size;
    match f.produce(foreign, 1.0) {
        Err(SparseError::NotOwner { owner, .. }) if owner == foreign => {}
        other => fail(format!("produce(foreign): {other:?}")),
    }
    match f.get(me + size) {
        Err(SparseError::NotProducedHere(_)) => {}
        other => fail(format!("get(own, not produced): {other:?}")),
    }
    f.produce(me, 2.0).unwrap();
    match f.produce(me, 3.0) {
        Err(SparseError::AlreadyProduced(i)) if i == me => {}
        other => fail(format!("produce twice: {other:?}")),
    }
    // Rank 1 asks rank 0 for unknown `size`, which rank 0 never produces.
    if me == 1 {
        match f.get(size) {
            Err(SparseError::NeverProduced { index, owner: 0 }) if index == size => {}
            other => fail(format!("fetch of a value never produced: {other:?}")),
        }
    }
    match (me, f.finish()) {
        (0, Err(SparseError::ParkedAtFinish(v))) if v == vec![(size, 1)] => {}
        (0, other) => fail(format!("rank 0's finish: {other:?}")),
        (_, Ok(())) => {}
        (_, other) => fail(format!("finish: {other:?}")),
    }
    // The next solve works as usual after the failed one.
    if me == 0 {
        f.produce(size, 4.0).unwrap();
    }
    if me == 1
        && f.get(size)
            .unwrap_or_else(|e| fail(format!("get after: {e}")))
            != 4.0
    {
        fail("the next solve's fetch".into());
    }
    f.finish()
        .unwrap_or_else(|e| fail(format!("second finish: {e}")));
    // Schedules: too small a buffer, a row of another rank, the wrong rows for a schedule.
    if sparse::limits(64, 8, InspectOptions::default()).is_ok() {
        fail("a 64-byte buffer for 8 ranks was accepted".into());
    }
    let pat = pattern(size);
    let big = Layout { n: pat.n, size };
    let rows = pat.local_rows(big, me);
    rt.barrier();
    let sched = sparse::inspect(p, big, &rows, InspectOptions::default()).unwrap();
    let mut x = Executor::new(p, s, sched).unwrap();
    match x.solve(&rows[1..]) {
        Err(SparseError::Config(_)) => {}
        other => fail(format!("executor on the wrong rows: {other:?}")),
    }
    let y = x
        .solve(&rows)
        .unwrap_or_else(|e| fail(format!("executor after: {e}")));
    if y.len() != rows.len() {
        fail("executor after the error".into());
    }
    // Another rank's rows: refused before any communication.
    let theirs = pat.local_rows(big, (me + 1) % size);
    match sparse::inspect(p, big, &theirs, InspectOptions::default()) {
        Err(SparseError::NotOwner { .. }) => {}
        other => fail(format!("inspect of another rank's rows: {other:?}")),
    }
    rt.barrier();
    if me == 0 {
        println!("layers sparse-errors: ok (unknown, foreign, twice, never produced reported on both sides, bad schedules)");
    }
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let cfg = trisolve::with_handlers(PrimConfig::from_env().unwrap()).unwrap();
    let (cfg, sparse_setup) = sparse::with_handlers(cfg).unwrap();
    let mut b = Runtime::builder();
    let setup = Prim::register(&mut b, cfg);
    let rt = b.build().unwrap();
    let p = setup.attach(&rt).unwrap();
    for s in &sections {
        match s.as_str() {
            "typed-order" => typed_order(&p, &rt),
            "typed-bounds" => typed_bounds(&p, &rt),
            "trisolve" => trisolve_section(&p, &rt),
            "fetch-order" => fetch_order(&p, &rt, &sparse_setup),
            "fetch-many" => fetch_many(&p, &rt, &sparse_setup),
            "schedule" => schedule_section(&p, &rt),
            "sparse-solve" => sparse_solve(&p, &rt, &sparse_setup),
            "sparse-errors" => sparse_errors(&p, &rt, &sparse_setup),
            "sparse-levels" => sparse_levels(&p, &rt),
            other => fail(format!("unknown section {other}")),
        }
    }
    drop(p);
    rt.finalize();
}
