//! Handlers that send, and remote reads and writes (`volley-prim`, seed 003 items 18 and 20),
//! across processes. `prim_comm_suite SECTION...`; each section checks its own results and
//! rank 0 prints `prim-comm SECTION: ok (...)`. The progress mode comes from
//! `VOLLEY_PRIM_PROGRESS`; in `comm-thread` mode the handlers run on the communication thread.
//!
//! - `relay` (3 ranks or more): every rank but 1 and 2 streams procedure packets of random
//!   sizes to rank 1, whose handler sends each on to rank 2 as data; meanwhile rank 1's
//!   program thread sends rank 2 chains of one-word packets. Rank 2 checks every forwarded
//!   packet arrives once, in per-origin order, with its bytes, and no packet lands inside a
//!   chain (the program thread and the communication thread never interleave).
//! - `remote`: every rank reads from and writes to its right neighbour's remote memory at
//!   random places; completion flags count exactly, the bytes are right, and bad requests
//!   (wrong rank, out of range, unknown flag, too large) are refused with nothing sent.
//! - `sends`: a handler's bad sends (wrong rank, unknown handler, too large, arguments on
//!   data) give their errors, nothing sent; its good send arrives once, from the
//!   communication thread to another node too.
//! - `idle` (`comm-thread` mode, ranks 0 and 1 on one node): rank 1's idle communication
//!   thread is seen asleep in the kernel (`/proc`), then rank 0's request wakes it (its
//!   doorbell rung, not the sleep's timeout) and its handler answers, three times.

use std::process::exit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use volley::Runtime;
use volley_prim::{Dest, Info, InfoType, Prim, PrimConfig, PrimError, Probe, Recv, Source};

const RELAY: usize = 1;
const SINK: usize = 2;
const FORWARD_ID: u32 = 5;
const DONE_ID: u32 = 6;
const BAD_SENDS_ID: u32 = 7;
const ECHO_ID: u32 = 8;
/// How long a waiting loop sleeps in volley's kernel wait at most: a message ends it, but a
/// node-mate's stores into mapped memory and the communication thread's work do not.
const WAIT: Duration = Duration::from_micros(200);
/// Forwarded packets per origin, chains from the relay's program thread.
const PER_ORIGIN: u64 = 300;
const CHAINS: u64 = 300;
/// First word of a chain's opening packet (never a rank).
const CHAIN_MAGIC: u64 = 0xC4A1_0000_0000_0000;
const REMOTE_LEN: usize = 4096;
const FLAGS: usize = 4;

static RELAYED: AtomicU64 = AtomicU64::new(0);
static RELAY_ERRORS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static DONE: AtomicU64 = AtomicU64::new(0);
static BAD_SENDS: Mutex<Vec<String>> = Mutex::new(Vec::new());
static ECHOED: AtomicU64 = AtomicU64::new(0);

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

fn fail(what: String) -> ! {
    eprintln!("prim_comm_suite: {what}");
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
        println!("prim-comm {section}: ok ({detail})");
    }
}

/// Byte `i` of origin `o`'s packet `seq`.
fn pattern(o: u64, seq: u64, i: usize) -> u8 {
    (o * 31 + seq * 7 + i as u64) as u8
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap())
}

/// The relay's handler: `[seq][len][bytes]` from an origin goes on to the sink as
/// `[origin][seq][bytes]`.
fn forward(inv: &mut volley_prim::Invocation<'_>) {
    inv.quiet();
    let r = (|| -> Result<(), PrimError> {
        let seq = inv.receive_u64()?;
        let len = inv.receive_u64()? as usize;
        let mut body = vec![0u8; 16 + len];
        inv.receive(&mut body[16..])?;
        let origin = inv.from().expect("from a rank") as u64;
        body[..8].copy_from_slice(&origin.to_le_bytes());
        body[8..16].copy_from_slice(&seq.to_le_bytes());
        inv.send(SINK, Info::Data(&body), &[])
    })();
    if let Err(e) = r {
        RELAY_ERRORS.lock().unwrap().push(e.to_string());
    }
    RELAYED.fetch_add(1, Ordering::Release);
}

fn bad_sends(inv: &mut volley_prim::Invocation<'_>) {
    let mut notes = BAD_SENDS.lock().unwrap();
    let mut expect = |what: &str, r: Result<(), PrimError>, ok: fn(&PrimError) -> bool| match r {
        Err(e) if ok(&e) => {}
        other => notes.push(format!("{what}: {other:?}")),
    };
    expect("rank 99", inv.send(99, Info::Data(b"x"), &[]), |e| {
        matches!(e, PrimError::InvalidRank { rank: 99, .. })
    });
    expect("handler 999", inv.send(0, Info::Procedure(999), &[]), |e| {
        matches!(e, PrimError::UnknownHandler { id: 999, .. })
    });
    expect(
        "too large",
        inv.send(0, Info::Data(&vec![0u8; 1 << 20]), &[]),
        |e| matches!(e, PrimError::TooLarge { .. }),
    );
    expect(
        "arguments on data",
        inv.send(0, Info::Data(b"x"), b"y"),
        |e| matches!(e, PrimError::Config(_)),
    );
    let sent = match inv.send(0, Info::Data(b"ok"), &[]) {
        Ok(()) => "sent".to_string(),
        Err(e) => e.to_string(),
    };
    notes.push(format!("comm thread: {}, {sent}", inv.on_comm_thread()));
}

fn config() -> PrimConfig {
    PrimConfig::from_env()
        .unwrap()
        .handler(FORWARD_ID, forward)
        .unwrap()
        .handler(DONE_ID, |inv| {
            inv.quiet();
            DONE.fetch_add(1, Ordering::Release);
        })
        .unwrap()
        .handler(BAD_SENDS_ID, bad_sends)
        .unwrap()
        .handler(ECHO_ID, |inv| {
            inv.quiet();
            let x = inv.receive_u64().expect("an echo carries a word");
            let from = inv.from().expect("from a rank");
            inv.send(from, Info::Data(&(x + 1).to_le_bytes()), &[])
                .expect("the echo's answer");
            ECHOED.fetch_add(1, Ordering::Release);
        })
        .unwrap()
        .remote_memory(REMOTE_LEN, FLAGS)
        .unwrap()
}

/// Waits a little, serving procedures (the progress of modes without a communication
/// thread): sleeps until a message arrives (or `WAIT`), then polls, since over UDP and TCP
/// the peers' one-sided operations land when this rank polls volley.
fn serve(p: &Prim) {
    p.serve_procedures().unwrap();
    p.runtime().sleep_until_message(WAIT);
    p.runtime().poll();
}

fn relay(p: &Prim) {
    let (me, n) = (p.rank(), p.size());
    check(n >= 3, || "relay needs 3 ranks".into());
    let origins: Vec<usize> = (0..n).filter(|&r| r != RELAY && r != SINK).collect();
    RELAYED.store(0, Ordering::Relaxed);
    p.runtime().barrier();
    if origins.contains(&me) {
        let mut rng = Rng::new(me as u64 + 11);
        for seq in 0..PER_ORIGIN {
            let len = 1 + rng.below(300) as usize;
            let mut args = Vec::with_capacity(16 + len);
            args.extend_from_slice(&seq.to_le_bytes());
            args.extend_from_slice(&(len as u64).to_le_bytes());
            args.extend((0..len).map(|i| pattern(me as u64, seq, i)));
            p.send(Dest::Rank(RELAY), Info::Procedure(FORWARD_ID), true)
                .unwrap();
            p.send(Dest::PreviousChain, Info::Data(&args), false)
                .unwrap();
        }
    } else if me == RELAY {
        let mut rng = Rng::new(5);
        let want = PER_ORIGIN * origins.len() as u64;
        for c in 0..CHAINS {
            let k = 1 + rng.below(12);
            let mut head = Vec::new();
            for w in [CHAIN_MAGIC, c, k] {
                head.extend_from_slice(&w.to_le_bytes());
            }
            p.send(Dest::Rank(SINK), Info::Data(&head), true).unwrap();
            for i in 0..k {
                // One packet per word: another sender could slip in between if the
                // link did not keep it out.
                let w = c << 32 | i;
                p.send(Dest::PreviousChain, Info::Data(&w.to_le_bytes()), true)
                    .unwrap();
            }
            p.send(Dest::PreviousChain, Info::Data(&[]), false).unwrap();
            p.serve_procedures().unwrap();
        }
        while RELAYED.load(Ordering::Acquire) < want {
            serve(p);
        }
        // The last forwards to a sink on another node may still wait for this thread (the
        // communication thread hands those sends over): a call into the layer sends them.
        p.serve_procedures().unwrap();
        let errors = RELAY_ERRORS.lock().unwrap();
        check(errors.is_empty(), || format!("relay: {errors:?}"));
    } else {
        let mut next = vec![0u64; n];
        let mut chains = 0u64;
        let total = PER_ORIGIN * origins.len() as u64;
        let mut got = 0u64;
        while got < total || chains < CHAINS {
            let len = loop {
                if p.is_information(Source::Network, InfoType::Data).unwrap() == Probe::Match {
                    if let Some(len) = p.pending_len(Source::Network).unwrap() {
                        break len;
                    }
                    let mut w = [0u8; 8];
                    let r = p.receive(Source::Network, Recv::Data(&mut w));
                    fail(format!(
                        "bare chained bytes where a packet should start (after {chains} chains, \
                         {got} forwarded): {:#x} {r:?}",
                        u64::from_le_bytes(w)
                    ));
                }
                p.runtime().sleep_until_message(WAIT);
                p.runtime().poll();
            };
            let mut b = vec![0u8; len];
            let from = p.receive(Source::Network, Recv::Data(&mut b)).unwrap().from;
            check(from == Some(RELAY), || format!("a packet from {from:?}"));
            if len == 24 && u64_at(&b, 0) == CHAIN_MAGIC {
                let (c, k) = (u64_at(&b, 1), u64_at(&b, 2));
                check(c == chains, || format!("chain {c}, expected {chains}"));
                let mut words = vec![0u8; 8 * k as usize];
                p.receive(Source::Network, Recv::Data(&mut words))
                    .unwrap_or_else(|e| fail(format!("inside chain {c}: {e}")));
                for i in 0..k as usize {
                    let w = u64_at(&words, i);
                    check(w == c << 32 | i as u64, || {
                        format!("chain {c} word {i}: {w:#x}")
                    });
                }
                chains += 1;
                continue;
            }
            check(len >= 17, || format!("a {len}-byte packet"));
            let (o, seq) = (u64_at(&b, 0) as usize, u64_at(&b, 1));
            check(origins.contains(&o), || format!("origin {o}"));
            check(seq == next[o], || {
                format!("from origin {o}: seq {seq}, expected {}", next[o])
            });
            for (i, &x) in b[16..].iter().enumerate() {
                check(x == pattern(o as u64, seq, i), || {
                    format!("origin {o} seq {seq} byte {i}")
                });
            }
            next[o] += 1;
            got += 1;
        }
    }
    p.runtime().barrier();
    if me == SINK {
        let left = p.is_information(Source::Network, InfoType::Data).unwrap();
        check(left == Probe::Empty, || {
            format!("extra packets at the sink: {left:?}")
        });
    }
    ok(
        p,
        "relay",
        format!(
            "{} origins x {PER_ORIGIN} forwarded in order, {CHAINS} chains unbroken",
            n - 2
        ),
    );
}

fn remote(p: &Prim) {
    let (me, n) = (p.rank(), p.size());
    let mem = p.remote_memory().unwrap();
    let right = (me + 1) % n;
    let fill = |r: usize, i: usize| (r * 13 + i * 5) as u8;
    let mine: Vec<u8> = (0..REMOTE_LEN).map(|i| fill(me, i)).collect();
    mem.write(0, &mine).unwrap();
    DONE.store(0, Ordering::Relaxed);
    let base = [mem.flag_value(0).unwrap(), mem.flag_value(1).unwrap()];
    p.runtime().barrier();
    // Reads come from [0, 2048) of the neighbour into [2048, 3072) here; writes go to
    // [3072, 4096) there.
    let mut rng = Rng::new(me as u64 + 3);
    let reads = 40;
    for k in 0..reads {
        let len = 1 + rng.below(1000) as usize;
        let off = rng.below((2048 - len) as u64) as usize;
        let local = 2048 + rng.below((1024 - len.min(1024)) as u64 + 1) as usize;
        let len = len.min(1024);
        p.remote_read(right, off, len, local, 0).unwrap();
        p.wait_flag(0, base[0] + k + 1).unwrap();
        let mut got = vec![0u8; len];
        mem.read(local, &mut got).unwrap();
        for (i, &x) in got.iter().enumerate() {
            check(x == fill(right, off + i), || {
                format!("read {k}: byte {i} of {len} at {off} from {right}")
            });
        }
    }
    let writes = 40u64;
    for k in 0..writes {
        let len = 1 + rng.below(512) as usize;
        let off = rng.below((1024 - len) as u64 + 1) as usize;
        let data: Vec<u8> = (0..len).map(|i| (k as usize * 3 + i + me) as u8).collect();
        p.remote_write(right, 3072 + off, &data, 1).unwrap();
        // A few writes in flight at most: every rank writes to its neighbour, and requests
        // wait for room in the buffers, so the bytes outstanding must stay well inside one.
        if k % 2 == 1 {
            p.wait_flag(1, base[1] + k - 1).unwrap();
        }
    }
    p.wait_flag(1, base[1] + writes).unwrap();
    // Bad requests: refused here, nothing sent (the flags and failures below stay exact).
    let bad = [
        p.remote_read(n, 0, 8, 0, 0).err(),
        p.remote_read(right, REMOTE_LEN - 4, 8, 0, 0).err(),
        p.remote_read(right, usize::MAX, 2, 0, 0).err(),
        p.remote_read(right, 0, 8, REMOTE_LEN, 0).err(),
        p.remote_write(right, 0, b"x", FLAGS).err(),
        p.remote_write(right, 0, &[0u8; REMOTE_LEN], 0).err(),
        p.flag(FLAGS).err(),
    ];
    let kinds = bad
        .iter()
        .map(|e| match e {
            Some(PrimError::InvalidRank { .. }) => "rank",
            Some(PrimError::OutOfRange { .. }) => "range",
            Some(PrimError::BadFlag { .. }) => "flag",
            Some(PrimError::TooLarge { .. }) => "large",
            Some(_) => "other",
            None => "accepted",
        })
        .collect::<Vec<_>>();
    check(
        kinds == ["rank", "range", "range", "range", "flag", "large", "flag"],
        || format!("bad requests gave {kinds:?}: {bad:?}"),
    );
    // Everyone serves until everyone is done.
    for r in 0..n {
        p.send(Dest::Rank(r), Info::Procedure(DONE_ID), false)
            .unwrap();
    }
    while DONE.load(Ordering::Acquire) < n as u64 {
        serve(p);
    }
    p.runtime().barrier();
    let left = (me + n - 1) % n;
    let mut rng = Rng::new(left as u64 + 3);
    // Replay the left neighbour's generator to know what it wrote here.
    for _ in 0..reads {
        let len = 1 + rng.below(1000) as usize;
        let _ = rng.below((2048 - len) as u64);
        let _ = rng.below((1024 - len.min(1024)) as u64 + 1);
    }
    let mut theirs = vec![None; 1024];
    for k in 0..writes {
        let len = 1 + rng.below(512) as usize;
        let off = rng.below((1024 - len) as u64 + 1) as usize;
        for i in 0..len {
            theirs[off + i] = Some((k as usize * 3 + i + left) as u8);
        }
    }
    let mut here = vec![0u8; 1024];
    mem.read(3072, &mut here).unwrap();
    for (i, (&x, w)) in here.iter().zip(&theirs).enumerate() {
        let want = w.unwrap_or(fill(me, 3072 + i));
        check(x == want, || {
            format!("byte {} written by {left}: {x} != {want}", 3072 + i)
        });
    }
    let counts = [
        mem.flag_value(0).unwrap() - base[0],
        mem.flag_value(1).unwrap() - base[1],
        mem.flag_value(2).unwrap(),
    ];
    check(counts == [reads, writes, 0], || {
        format!("flags counted {counts:?}")
    });
    check(mem.failures() == 0, || {
        format!("{} failed requests", mem.failures())
    });
    ok(
        p,
        "remote",
        format!("{reads} reads and {writes} writes per rank, flags exact, 7 bad requests refused"),
    );
}

fn sends(p: &Prim) {
    let me = p.rank();
    if me == 0 {
        p.send(Dest::Rank(1), Info::Procedure(BAD_SENDS_ID), false)
            .unwrap();
    } else if me == 1 {
        p.receive(Source::Network, Recv::Procedure).unwrap();
        let notes = BAD_SENDS.lock().unwrap();
        let comm = p.progress() == volley_prim::Progress::CommThread;
        check(
            notes.len() == 1 && notes[0] == format!("comm thread: {comm}, sent"),
            || format!("bad sends: {notes:?}"),
        );
    }
    p.runtime().barrier();
    if me == 0 {
        // Only the good send arrives.
        let mut b = [0u8; 2];
        let from = p.receive(Source::Network, Recv::Data(&mut b)).unwrap().from;
        check(&b == b"ok" && from == Some(1), || {
            format!("got {b:?} from {from:?}")
        });
        p.runtime().barrier();
        let left = p.is_information(Source::Network, InfoType::Data).unwrap();
        check(left == Probe::Empty, || {
            format!("a bad send delivered: {left:?}")
        });
    } else {
        p.runtime().barrier();
    }
    ok(
        p,
        "sends",
        "4 bad sends refused in the handler, the good one delivered once".into(),
    );
}

/// This process's communication thread's id, once it has named itself `volley-prim-comm`
/// (cut to 15 bytes in `/proc`).
fn comm_thread_id() -> Option<String> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .map(|t| t.unwrap().path())
        .find(|t| {
            std::fs::read_to_string(t.join("comm")).is_ok_and(|n| n.trim() == "volley-prim-com")
        })
        .map(|t| t.file_name().unwrap().to_string_lossy().into_owned())
}

fn idle(p: &Prim) {
    let me = p.rank();
    check(p.progress() == volley_prim::Progress::CommThread, || {
        "idle runs in comm-thread mode".into()
    });
    check(p.is_mapped(0) && p.is_mapped(1), || {
        "idle needs ranks 0 and 1 on one node".into()
    });
    let rounds = 3u64;
    for round in 0..rounds {
        let woken = p.stats().comm_woken;
        if me == 1 {
            // Asleep: blocked in futex (system call 202), as its counter says too.
            let deadline = Instant::now() + Duration::from_secs(60);
            let before = p.stats().comm_sleeps;
            loop {
                let call = comm_thread_id()
                    .and_then(|t| {
                        std::fs::read_to_string(format!("/proc/self/task/{t}/syscall")).ok()
                    })
                    .unwrap_or_default();
                if call.starts_with("202 ") && p.stats().comm_sleeps > before {
                    break;
                }
                check(Instant::now() < deadline, || {
                    format!("round {round}: the idle communication thread was never seen asleep ({call:?})")
                });
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        p.runtime().barrier();
        if me == 0 {
            p.send(Dest::Rank(1), Info::Procedure(ECHO_ID), true)
                .unwrap();
            p.send(Dest::PreviousChain, Info::Data(&round.to_le_bytes()), false)
                .unwrap();
            let mut b = [0u8; 8];
            let from = p.receive(Source::Network, Recv::Data(&mut b)).unwrap().from;
            check(
                from == Some(1) && u64::from_le_bytes(b) == round + 1,
                || format!("round {round}: answer {b:?} from {from:?}"),
            );
        } else if me == 1 {
            // No call into the layer here: only rank 0's send may ring.
            while ECHOED.load(Ordering::Acquire) <= round {
                std::thread::sleep(Duration::from_millis(1));
            }
            let now = p.stats().comm_woken;
            check(now > woken, || {
                format!("round {round}: the request did not ring the sleeping thread (woken {woken} -> {now})")
            });
        }
        p.runtime().barrier();
    }
    ok(
        p,
        "idle",
        format!("{rounds} requests woke a sleeping communication thread and were answered"),
    );
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let mut b = Runtime::builder();
    let setup = Prim::register(&mut b, config());
    let rt = b.build().unwrap();
    let p = setup.attach(&rt).unwrap();
    for s in &sections {
        match s.as_str() {
            "relay" => relay(&p),
            "remote" => remote(&p),
            "sends" => sends(&p),
            "idle" => idle(&p),
            other => fail(format!("unknown section {other}")),
        }
    }
    drop(p);
    rt.finalize();
}
