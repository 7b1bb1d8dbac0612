//! Seed 003's primitives (`volley-prim`) across processes. `prim_suite SECTION...`; each
//! section checks its own results and rank 0 prints `prim SECTION: ok (...)`. The progress
//! mode, notification threshold and capacity come from `VOLLEY_PRIM_*`.
//!
//! - `basic`: every destination x information combination (items 6-8): a data packet and a
//!   procedure packet to one rank and to a rank list, `(0, 0)` packets that open and close
//!   chains and deliver nothing, `is_information`'s three states produced in a fixed order.
//! - `capacity`: rank 1 lets its buffer fill before it drains; rank 0 sends three buffers'
//!   worth, so it waits for room; every byte arrives in order, and the buffer never held more
//!   than its capacity (item 2).
//! - `internal`: requests to the communication thread and its replies keep FIFO order,
//!   and data looped through the internal buffer too (item 3; comm-thread mode only).
//! - `notify`: fills rank 1's buffer past half twice: the threshold's count is exact (item 5).
//! - `chain`: payload inside a channel costs no header bytes (item 9); the send and pipe
//!   forms deliver the same words.
//! - `torture`: several senders, chains of random lengths to rank 0, rank 1 or both
//!   (multicast chains): no foreign word inside a chain, per-pair order kept (items 10, 11).
//! - `multicast`: to the odd ranks: each gets it once, the others nothing (item 12).
//! - `order`: random-size streams between every pair, in send order (item 10).
//! - `vector`: a strided send equals k single sends in content, in fewer ring bytes (14).
//! - `handlers`: an unknown id is refused at the sender, and at the receiver with an error,
//!   without a crash (item 16).
//! - `fastpath`: a pipe of many words (one a put, then pairs) makes no system call (item 15)
//!   and delivers them in order.
//! - `errors`: the bad inputs (wrong rank, empty or duplicate list, no chain, chain open,
//!   too large, own buffer full, bad configuration, finalize with a channel open).
//! - `modes`: a fixed program whose result line must be the same in every progress mode.

use std::process::exit;
use std::sync::atomic::{AtomicU64, Ordering};
use volley::Runtime;
use volley_prim::{
    Dest, Info, InfoType, Notify, Prim, PrimConfig, PrimError, Probe, Progress, Recv, Source,
};

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n
    }
}

/// Handler 1 adds its u64 argument to SUM; handler 2 replies twice its argument; handler 3
/// takes no argument and counts.
static SUM: AtomicU64 = AtomicU64::new(0);
static CALLS: AtomicU64 = AtomicU64::new(0);

fn config(rank: usize) -> PrimConfig {
    let mut c = PrimConfig::from_env()
        .unwrap()
        .handler(1, |inv| {
            let v = inv.receive_u64().unwrap();
            SUM.fetch_add(v, Ordering::Relaxed);
        })
        .unwrap()
        .handler(2, |inv| {
            let v = inv.receive_u64().unwrap();
            inv.reply(&(2 * v).to_le_bytes()).unwrap();
        })
        .unwrap()
        .handler(3, |_| {
            CALLS.fetch_add(1, Ordering::Relaxed);
        })
        .unwrap();
    // Rank 1 alone knows handler 9: its procedure packets meet no handler at rank 0.
    if rank == 1 {
        c = c.handler(9, |_| {}).unwrap();
    }
    c
}

fn recv_u64(p: &Prim) -> (u64, Option<usize>) {
    let mut b = [0u8; 8];
    let r = p.receive(Source::Network, Recv::Data(&mut b)).unwrap();
    (u64::from_le_bytes(b), r.from)
}

fn fail(what: String) -> ! {
    eprintln!("prim_suite: {what}");
    exit(1)
}

fn check(ok: bool, what: impl FnOnce() -> String) {
    if !ok {
        fail(what())
    }
}

fn ok(p: &Prim, section: &str, detail: String) {
    p.runtime().barrier();
    if p.rank() == 0 {
        println!("prim {section}: ok ({detail})");
    }
}

fn basic(p: &Prim) {
    let (me, n) = (p.rank(), p.size());
    let right = (me + 1) % n;
    SUM.store(0, Ordering::Relaxed);
    // Data to one rank, with a chained empty open and close around it.
    p.send(Dest::Rank(right), Info::Data(&[]), true).unwrap();
    p.send(
        Dest::PreviousChain,
        Info::Data(&(me as u64).to_le_bytes()),
        true,
    )
    .unwrap();
    p.send(Dest::PreviousChain, Info::Data(&[]), false).unwrap();
    let (v, from) = recv_u64(p);
    check(v == ((me + n - 1) % n) as u64 && from.is_none(), || {
        format!("chained word {v} {from:?}")
    });
    // A lone data packet carries its sender.
    p.send(Dest::Rank(right), Info::Data(&7u64.to_le_bytes()), false)
        .unwrap();
    let (v, from) = recv_u64(p);
    check(v == 7 && from == Some((me + n - 1) % n), || {
        format!("lone packet {v} {from:?}")
    });
    // A procedure with a chained argument, to one rank.
    p.send(Dest::Rank(right), Info::Procedure(1), true).unwrap();
    p.send(Dest::PreviousChain, Info::Data(&5u64.to_le_bytes()), false)
        .unwrap();
    let r = p.receive(Source::Network, Recv::Procedure).unwrap();
    check(r.procedure == Some(1), || format!("procedure {r:?}"));
    check(SUM.load(Ordering::Relaxed) == 5, || {
        "handler 1 did not run".into()
    });
    // To a rank list: everyone sends a data packet and a procedure to all others.
    let others: Vec<usize> = (0..n).filter(|&r| r != me).collect();
    p.runtime().barrier();
    if !others.is_empty() {
        p.send(
            Dest::Ranks(&others),
            Info::Data(&(100 + me as u64).to_le_bytes()),
            false,
        )
        .unwrap();
        p.send(Dest::Ranks(&others), Info::Procedure(3), false)
            .unwrap();
    }
    let mut seen = vec![0u32; n];
    let mut procs = 0;
    for _ in 0..others.len() {
        // From any sender: data then procedure, in pair order; the sender's procedure may
        // come before another sender's data, so take what comes.
        loop {
            match p.is_information(Source::Network, InfoType::Data).unwrap() {
                Probe::Match => {
                    let (v, from) = recv_u64(p);
                    let f = from.unwrap();
                    check(v == 100 + f as u64, || {
                        format!("multicast data {v} from {f}")
                    });
                    seen[f] += 1;
                    break;
                }
                Probe::WrongType => {
                    p.receive(Source::Network, Recv::Procedure).unwrap();
                    procs += 1;
                }
                Probe::Empty => {
                    p.runtime().poll();
                }
            }
        }
    }
    while procs < others.len() {
        p.receive(Source::Network, Recv::Procedure).unwrap();
        procs += 1;
    }
    check(CALLS.load(Ordering::Relaxed) == others.len() as u64, || {
        "handler 3 runs".into()
    });
    check(others.iter().all(|&r| seen[r] == 1), || {
        format!("multicast seen {seen:?}")
    });
    p.runtime().barrier();
    // The three states, deterministically: empty, then data (a wrong type for procedure).
    check(
        p.is_information(Source::Network, InfoType::Data).unwrap() == Probe::Empty,
        || "not empty".into(),
    );
    p.runtime().barrier();
    p.send(Dest::Rank(right), Info::Data(&1u64.to_le_bytes()), false)
        .unwrap();
    while p.is_information(Source::Network, InfoType::Data).unwrap() == Probe::Empty {
        p.runtime().poll();
    }
    check(
        p.is_information(Source::Network, InfoType::Procedure)
            .unwrap()
            == Probe::WrongType,
        || "wrong type".into(),
    );
    check(
        p.is_information(Source::Network, InfoType::Data).unwrap() == Probe::Match,
        || "match".into(),
    );
    // A procedure receive on data is refused and consumes nothing.
    check(
        matches!(
            p.receive(Source::Network, Recv::Procedure),
            Err(PrimError::WrongType { .. })
        ),
        || "proc on data".into(),
    );
    let mut small = [0u8; 4];
    check(
        matches!(
            p.receive(Source::Network, Recv::Data(&mut small)),
            Err(PrimError::SizeMismatch { have: 8, want: 4 })
        ),
        || "size".into(),
    );
    recv_u64(p);
    ok(p, "basic", format!("{} ranks", n));
}

fn capacity(p: &Prim) {
    if p.size() < 2 {
        return ok(p, "capacity", "1 rank".into());
    }
    let cap = p.capacity();
    let total = 3 * cap / 64;
    match p.rank() {
        0 => {
            for i in 0..total as u64 {
                p.send(Dest::Rank(1), Info::Data(&[i as u8; 56]), false)
                    .unwrap();
            }
            // Three buffers' worth went through one that rank 1 let fill before draining:
            // rank 0 had to wait for room (whether it counted a stall depends on when it
            // looked again, so the count is reported, not checked).
            eprintln!(
                "prim capacity: rank 0 stalled {} times",
                p.stats().full_stalls
            );
        }
        1 => {
            // Let the buffer fill to within one packet, then drain.
            let mut most = 0;
            while p.buffered() + 64 <= cap {
                most = most.max(p.buffered());
                p.runtime().poll();
            }
            for i in 0..total {
                most = most.max(p.buffered());
                let mut b = [0u8; 56];
                let r = p.receive(Source::Network, Recv::Data(&mut b)).unwrap();
                check(b == [i as u8; 56] && r.from == Some(0), || {
                    format!("packet {i}: {:?}", &b[..4])
                });
                check(most <= cap, || format!("buffer held {most} > {cap}"));
            }
        }
        _ => {}
    }
    ok(
        p,
        "capacity",
        format!("{total} packets through {cap} bytes"),
    )
}

fn internal(p: &Prim) {
    if p.progress() != Progress::CommThread {
        check(
            matches!(
                p.send(Dest::Internal, Info::Procedure(2), false),
                Err(PrimError::NoCommThread)
            ),
            || "internal without thread".into(),
        );
        return ok(p, "internal", "refused without the thread".into());
    }
    // In batches that fit both internal buffers: each side waits for room, by design.
    let (k, batch) = (200u64, 40u64);
    for start in (0..k).step_by(batch as usize) {
        for i in start..start + batch {
            p.send(Dest::Internal, Info::Procedure(2), true).unwrap();
            p.send(Dest::PreviousChain, Info::Data(&i.to_le_bytes()), false)
                .unwrap();
            p.send(Dest::Internal, Info::Data(&(1000 + i).to_le_bytes()), false)
                .unwrap();
        }
        for i in start..start + batch {
            let mut b = [0u8; 8];
            p.receive(Source::Internal, Recv::Data(&mut b)).unwrap();
            check(u64::from_le_bytes(b) == 2 * i, || {
                format!("reply {i}: {}", u64::from_le_bytes(b))
            });
            let r = p.receive(Source::Internal, Recv::Procedure).unwrap();
            check(r.procedure == Some(2), || "done".into());
            p.receive(Source::Internal, Recv::Data(&mut b)).unwrap();
            check(u64::from_le_bytes(b) == 1000 + i, || format!("loop {i}"));
        }
    }
    ok(p, "internal", format!("{k} requests and replies in order"))
}

fn notify(p: &Prim) {
    if p.size() < 2 {
        return ok(p, "notify", "1 rank".into());
    }
    let cap = p.capacity();
    let per = cap / 64 * 3 / 4; // three quarters full: past half, not full
    let mode = std::env::var("VOLLEY_PRIM_NOTIFY")
        .unwrap_or_else(|_| Notify::default_for(p.progress()).name().into());
    let want = match Notify::parse(&mode).unwrap() {
        Notify::Never => 0,
        Notify::Start | Notify::End => 2 * per as u64,
        Notify::HalfFull => 2,
    };
    let before = p.notifications();
    for _round in 0..2 {
        p.runtime().barrier();
        if p.rank() == 0 {
            for i in 0..per {
                p.send(Dest::Rank(1), Info::Data(&[i as u8; 56]), false)
                    .unwrap();
            }
        }
        p.runtime().barrier();
        if p.rank() == 1 {
            for i in 0..per {
                let mut b = [0u8; 56];
                p.receive(Source::Network, Recv::Data(&mut b)).unwrap();
                check(b[0] == i as u8, || "notify data".into());
            }
        }
    }
    p.runtime().barrier();
    if p.rank() == 1 {
        let got = p.notifications() - before;
        check(got == want, || {
            format!("{mode}: {got} notifications, want {want}")
        });
    }
    ok(p, "notify", format!("{mode}: {want}"))
}

fn chain(p: &Prim) {
    if p.size() < 2 {
        return ok(p, "chain", "1 rank".into());
    }
    let k = 300u64;
    if p.rank() == 0 {
        let before = p.stats().ring_bytes_sent;
        p.send(Dest::Rank(1), Info::Data(&[]), true).unwrap();
        let opened = p.stats().ring_bytes_sent;
        for i in 0..k {
            p.send(Dest::PreviousChain, Info::Data(&i.to_le_bytes()), true)
                .unwrap();
        }
        let payload = p.stats().ring_bytes_sent - opened;
        check(payload == 8 * k, || {
            format!("{k} chained words took {payload} ring bytes")
        });
        p.send(Dest::PreviousChain, Info::Data(&[]), false).unwrap();
        check(
            opened - before == 8 && p.stats().ring_bytes_sent - before == 8 * k + 16,
            || "open/close".into(),
        );
        let mut pipe = p.pipe_create(1).unwrap();
        for i in 0..k {
            pipe.put_u64(k + i);
        }
        pipe.close().unwrap();
        let all = p.stats().ring_bytes_sent - before;
        check(all == 2 * (8 * k + 16), || {
            format!("pipe: {all} ring bytes")
        });
    } else if p.rank() == 1 {
        for i in 0..2 * k {
            let v = p.pipe_get_u64().unwrap();
            check(v == i, || format!("word {i}: {v}"));
        }
    }
    ok(p, "chain", format!("{k} words, 8 ring bytes each"))
}

/// A chain's first word names its sender and length; every later word is sender << 32 | i.
fn torture(p: &Prim) {
    let n = p.size();
    if n < 3 {
        return ok(p, "torture", "needs 3 ranks".into());
    }
    let receivers: Vec<usize> = if n >= 4 { vec![0, 1] } else { vec![0] };
    let chains = 40;
    let me = p.rank();
    // Which receivers chain c of sender s goes to, and its length.
    let shape = |s: usize, c: usize| {
        let mut r = Rng::new((s * 1000 + c) as u64);
        let to: Vec<usize> = match (receivers.len(), r.below(3)) {
            (1, _) => vec![0],
            (_, 0) => vec![0],
            (_, 1) => vec![1],
            _ => vec![0, 1],
        };
        (to, 1 + r.below(100) as usize)
    };
    if !receivers.contains(&me) {
        for c in 0..chains {
            let (to, len) = shape(me, c);
            let head = (me as u64) << 32 | len as u64;
            p.send(Dest::Ranks(&to), Info::Data(&head.to_le_bytes()), true)
                .unwrap();
            for i in 0..len as u64 {
                p.send(
                    Dest::PreviousChain,
                    Info::Data(&((me as u64) << 32 | i).to_le_bytes()),
                    true,
                )
                .unwrap();
            }
            p.send(Dest::PreviousChain, Info::Data(&[]), false).unwrap();
        }
    } else {
        let mut expect = 0;
        let mut next = vec![0usize; n];
        for s in (0..n).filter(|s| !receivers.contains(s)) {
            expect += (0..chains).filter(|&c| shape(s, c).0.contains(&me)).count();
        }
        for _ in 0..expect {
            let (h, from) = recv_u64(p);
            let (s, len) = ((h >> 32) as usize, (h & 0xffff_ffff) as usize);
            check(from == Some(s), || {
                format!("chain header from {from:?} names {s}")
            });
            // Per pair order: this chain is the next one s sends here.
            while !shape(s, next[s]).0.contains(&me) {
                next[s] += 1;
            }
            check(shape(s, next[s]).1 == len, || {
                format!("chain {} of {s} out of order", next[s])
            });
            next[s] += 1;
            for i in 0..len as u64 {
                let (w, f) = recv_u64(p);
                check(f.is_none() && w == (s as u64) << 32 | i, || {
                    format!("intrusion in {s}'s chain at {i}: {w:#x}")
                });
            }
        }
    }
    ok(
        p,
        "torture",
        format!("{} senders, {chains} chains each", n - receivers.len()),
    )
}

fn multicast(p: &Prim) {
    let n = p.size();
    let odd: Vec<usize> = (1..n).step_by(2).collect();
    if p.rank() == 0 && !odd.is_empty() {
        p.send(Dest::Ranks(&odd), Info::Data(b"once"), false)
            .unwrap();
    }
    if odd.contains(&p.rank()) {
        let mut b = [0u8; 4];
        let r = p.receive(Source::Network, Recv::Data(&mut b)).unwrap();
        check(&b == b"once" && r.from == Some(0), || {
            "multicast content".into()
        });
    }
    p.runtime().barrier();
    // Nothing more anywhere: no second copy, nothing at the unlisted ranks.
    check(
        p.is_information(Source::Network, InfoType::Data).unwrap() == Probe::Empty
            && p.buffered() == 0,
        || format!("rank {} has more", p.rank()),
    );
    ok(p, "multicast", format!("to {odd:?}"))
}

fn order(p: &Prim) {
    let (me, n) = (p.rank(), p.size());
    let budget = p.capacity() / n; // one round's bytes into one buffer fit it
    let rounds = 30u64;
    let shape = |s: usize, d: usize, round: u64| {
        let mut r = Rng::new(((s * 64 + d) as u64) << 16 | round);
        let count = 1 + r.below(3) as usize;
        let sizes: Vec<usize> = (0..count)
            .map(|_| 8 + r.below((budget / count - 16) as u64) as usize)
            .collect();
        sizes
    };
    let fill = |s: usize, d: usize, round: u64, i: usize, len: usize| -> Vec<u8> {
        (0..len)
            .map(|j| (s * 31 + d * 7 + round as usize * 5 + i * 3 + j) as u8)
            .collect()
    };
    for round in 0..rounds {
        for d in (0..n).filter(|&d| d != me) {
            for (i, len) in shape(me, d, round).into_iter().enumerate() {
                p.send(
                    Dest::Rank(d),
                    Info::Data(&fill(me, d, round, i, len)),
                    false,
                )
                .unwrap();
            }
        }
        // Packets from several senders interleave; each sender's come in its order.
        let mut next: Vec<usize> = vec![0; n];
        let total: usize = (0..n)
            .filter(|&s| s != me)
            .map(|s| shape(s, me, round).len())
            .sum();
        for _ in 0..total {
            let len = loop {
                if let Some(len) = p.pending_len(Source::Network).unwrap() {
                    break len;
                }
                p.runtime().poll();
            };
            let mut b = vec![0u8; len];
            let f = p
                .receive(Source::Network, Recv::Data(&mut b))
                .unwrap()
                .from
                .unwrap();
            let want = shape(f, me, round).get(next[f]).copied();
            check(
                want == Some(len) && b == fill(f, me, round, next[f], len),
                || {
                    format!(
                        "round {round}: message {} from {f} wrong or out of order",
                        next[f]
                    )
                },
            );
            next[f] += 1;
        }
        p.runtime().barrier();
    }
    ok(
        p,
        "order",
        format!("{rounds} rounds between every pair of {n}"),
    )
}

fn vector(p: &Prim) {
    if p.size() < 2 {
        return ok(p, "vector", "1 rank".into());
    }
    let k = 64usize;
    let base: Vec<u8> = (0..k * 24).map(|i| i as u8).collect();
    if p.rank() == 0 {
        let a = p.stats().ring_bytes_sent;
        for i in 0..k {
            p.send(Dest::Rank(1), Info::Data(&base[i * 24..i * 24 + 8]), false)
                .unwrap();
        }
        let singles = p.stats().ring_bytes_sent - a;
        p.send_strided(Dest::Rank(1), &base, 8, 24, k, false)
            .unwrap();
        let strided = p.stats().ring_bytes_sent - a - singles;
        p.send_vectored(Dest::Rank(1), &[&base[..8], &base[24..32]], false)
            .unwrap();
        check(strided < singles, || {
            format!("strided {strided} >= singles {singles}")
        });
    } else if p.rank() == 1 {
        let mut singles = Vec::new();
        for _ in 0..k {
            let mut b = [0u8; 8];
            p.receive(Source::Network, Recv::Data(&mut b)).unwrap();
            singles.extend_from_slice(&b);
        }
        let mut strided = vec![0u8; 8 * k];
        p.receive(Source::Network, Recv::Data(&mut strided))
            .unwrap();
        check(strided == singles, || "strided differs".into());
        let mut v = [0u8; 16];
        p.receive(Source::Network, Recv::Data(&mut v)).unwrap();
        check(v[..] == singles[..16], || "vectored differs".into());
    }
    ok(p, "vector", format!("{k} elements"))
}

fn handlers(p: &Prim) {
    check(
        matches!(
            p.send(Dest::Rank(0), Info::Procedure(77), false),
            Err(PrimError::UnknownHandler { id: 77, from: None })
        ),
        || "unknown at sender".into(),
    );
    check(
        matches!(
            p.send(Dest::Rank(0), Info::Procedure(0), false),
            Err(PrimError::BadHandlerId(0))
        ),
        || "id 0".into(),
    );
    if p.size() >= 2 {
        if p.rank() == 1 {
            p.send(Dest::Rank(0), Info::Procedure(9), false).unwrap();
            p.send(Dest::Rank(0), Info::Procedure(3), false).unwrap();
        } else if p.rank() == 0 {
            let e = p.receive(Source::Network, Recv::Procedure);
            check(
                matches!(
                    e,
                    Err(PrimError::UnknownHandler {
                        id: 9,
                        from: Some(1)
                    })
                ),
                || format!("unknown at receiver: {e:?}"),
            );
            let r = p.receive(Source::Network, Recv::Procedure).unwrap();
            check(r.procedure == Some(3), || "after unknown".into());
        }
    }
    ok(p, "handlers", "unknown ids refused".into())
}

fn fastpath(p: &Prim) {
    if p.size() < 2 {
        return ok(p, "fastpath", "1 rank".into());
    }
    let k = 100_000u64;
    if p.rank() == 0 {
        let before = p.stats().syscalls;
        let mut pipe = p.pipe_create(1).unwrap();
        let opened = p.stats().syscalls;
        // Half one word a put, then pairs published together, starting at an odd word so
        // that some pairs straddle the ring's end.
        let singles = k / 2 + 1;
        for i in 0..singles {
            pipe.put_u64(i);
        }
        let mut i = singles;
        while i + 1 < k {
            pipe.put_2_u64(i, i + 1);
            i += 2;
        }
        if i < k {
            pipe.put_u64(i);
        }
        let puts = p.stats().syscalls - opened;
        pipe.close().unwrap();
        let n = p.stats().syscalls - before;
        match p.progress() {
            Progress::Interrupt => {}
            // The receiver's idle communication thread may sleep: the opening and the
            // closing packet may each ring it once, the puts never.
            Progress::CommThread => check(puts == 0 && n <= 2, || {
                format!("{puts} system calls in the puts, {n} with the open and the close")
            }),
            _ => check(n == 0, || format!("{n} system calls on the fast path")),
        }
    } else if p.rank() == 1 {
        let mut sum = 0;
        for i in 0..k {
            let w = p.pipe_get_u64().unwrap();
            check(w == i, || format!("pipe word {i}: {w}"));
            sum += w;
        }
        check(sum == k * (k - 1) / 2, || "pipe sum".into());
    }
    ok(p, "fastpath", format!("{k} words"))
}

fn errors(p: &Prim, rt: &Runtime) {
    let n = p.size();
    let e = |r: volley_prim::Result<()>| r.err().map(|e| e.to_string()).unwrap_or_default();
    check(
        matches!(
            p.send(Dest::Rank(n), Info::Data(b"x"), false),
            Err(PrimError::InvalidRank { .. })
        ),
        || "rank".into(),
    );
    check(
        matches!(
            p.send(Dest::Ranks(&[]), Info::Data(b"x"), false),
            Err(PrimError::EmptyList)
        ),
        || "empty".into(),
    );
    if n >= 2 {
        check(
            matches!(
                p.send(Dest::Ranks(&[1, 0, 1]), Info::Data(b"x"), false),
                Err(PrimError::DuplicateRank(1))
            ),
            || "dup".into(),
        );
    }
    check(
        matches!(
            p.send(Dest::PreviousChain, Info::Data(b"x"), false),
            Err(PrimError::NoOpenChain)
        ),
        || "no chain".into(),
    );
    let big = vec![0u8; p.capacity()];
    check(
        matches!(
            p.send(Dest::Rank(0), Info::Data(&big), false),
            Err(PrimError::TooLarge { .. })
        ),
        || e(p.send(Dest::Rank(0), Info::Data(&big), false)),
    );
    check(
        PrimConfig::default().capacity(1000).is_err()
            && PrimConfig::default().capacity(32).is_err(),
        || "capacity".into(),
    );
    check(PrimConfig::default().handler(5000, |_| {}).is_err(), || {
        "handler id".into()
    });
    check(
        Progress::parse("sideways").is_err() && Notify::parse("often").is_err(),
        || "names".into(),
    );
    // Our own buffer full: a clear error, not a hang; everything sent so far is intact.
    rt.barrier();
    let mut sent = 0u64;
    let err = loop {
        match p.send(Dest::Rank(p.rank()), Info::Data(&sent.to_le_bytes()), false) {
            Ok(()) => sent += 1,
            Err(e) => break e,
        }
    };
    check(matches!(err, PrimError::OwnBufferFull), || {
        format!("own full: {err}")
    });
    for i in 0..sent {
        check(recv_u64(p).0 == i, || "own buffer order".into());
    }
    // A chain open: a new destination is refused, finalize closes it and says so.
    rt.barrier();
    let right = (p.rank() + 1) % n;
    p.send(Dest::Rank(right), Info::Data(&1u64.to_le_bytes()), true)
        .unwrap();
    check(
        matches!(
            p.send(Dest::Rank(right), Info::Data(b"x"), false),
            Err(PrimError::ChainOpen(_))
        ),
        || "chain open".into(),
    );
    let (v, _) = recv_u64(p);
    check(v == 1, || "chain head".into());
    let fin = p.finalize();
    check(
        matches!(fin, Err(PrimError::ChannelOpenAtFinalize(_))),
        || format!("finalize: {fin:?}"),
    );
    check(
        matches!(
            p.send(Dest::Rank(right), Info::Data(b"x"), false),
            Err(PrimError::Finalized)
        ),
        || "after finalize".into(),
    );
    rt.barrier();
    if p.rank() == 0 {
        println!("prim errors: ok (each refused with its error)");
    }
}

/// A fixed program: a ring of procedures and data, a pipeline, a multicast; prints a digest
/// that must not depend on the progress mode.
fn modes(p: &Prim) {
    let (me, n) = (p.rank(), p.size());
    let right = (me + 1) % n;
    SUM.store(0, Ordering::Relaxed);
    // A communication thread runs procedures as they come: none may arrive before the reset.
    p.runtime().barrier();
    let mut digest = 0u64;
    for round in 0..50u64 {
        p.send(Dest::Rank(right), Info::Procedure(1), true).unwrap();
        p.send(
            Dest::PreviousChain,
            Info::Data(&(round * 3 + me as u64).to_le_bytes()),
            false,
        )
        .unwrap();
        p.send(
            Dest::Rank(right),
            Info::Data(&(round ^ me as u64).to_le_bytes()),
            false,
        )
        .unwrap();
        p.receive(Source::Network, Recv::Procedure).unwrap();
        let (v, _) = recv_u64(p);
        digest = digest.wrapping_mul(31).wrapping_add(v);
    }
    if n >= 2 {
        if me == 0 {
            let mut pipe = p.pipe_create(1).unwrap();
            for i in 0..1000 {
                pipe.put_f64(i as f64 * 0.5);
            }
            pipe.close().unwrap();
        } else if me == 1 {
            for _ in 0..1000 {
                digest = digest.wrapping_add(p.pipe_get_f64().unwrap() as u64);
            }
        }
    }
    digest = digest.wrapping_add(SUM.load(Ordering::Relaxed));
    // Rank 0 collects the digests by data packets, once every rank is done with the rest.
    p.runtime().barrier();
    if me != 0 {
        p.send(Dest::Rank(0), Info::Data(&digest.to_le_bytes()), false)
            .unwrap();
    } else {
        let mut total = digest;
        for _ in 1..n {
            total = total.wrapping_add(recv_u64(p).0);
        }
        println!("prim modes: ok (digest {total:#x})");
    }
    p.runtime().barrier();
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let rank: usize = std::env::var("VOLLEY_RANK")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let mut b = Runtime::builder();
    let setup = Prim::register(&mut b, config(rank));
    let rt = b.build().unwrap();
    let p = setup.attach(&rt).unwrap();
    for s in &sections {
        match s.as_str() {
            "basic" => basic(&p),
            "capacity" => capacity(&p),
            "internal" => internal(&p),
            "notify" => notify(&p),
            "chain" => chain(&p),
            "torture" => torture(&p),
            "multicast" => multicast(&p),
            "order" => order(&p),
            "vector" => vector(&p),
            "handlers" => handlers(&p),
            "fastpath" => fastpath(&p),
            "modes" => modes(&p),
            "errors" => errors(&p, &rt),
            other => fail(format!("unknown section {other}")),
        }
    }
    drop(p);
    rt.finalize();
}
