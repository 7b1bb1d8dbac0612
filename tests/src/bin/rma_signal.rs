//! Signal structures across processes: `rma_signal [signals_per_rank]`.
//!
//! Rank 0 creates three structures in a symmetric segment and puts their words into every
//! rank's mailbox; every rank (rank 0 too) then signals them, with random pauses between
//! signals so that senders interleave differently on every run.
//! 1. **FIRST_ONLY_NONBLK over a small queue (DSP).** Every rank sends `n` entries (sender,
//!    sequence, check word), resending an entry whose status is `Full` (after polling, so the
//!    target keeps draining). The program checks that no other run of it is in progress (an
//!    atomic swap: two at once fail the job), that the recorded requester is the sender named
//!    in the entry, and records the entry; every 13th run it holds the flag and rank 0's main
//!    loop drains with `signal_next_or_clear`. Every sender's entries must arrive exactly once,
//!    in send order, and the structure's counters must equal the statuses the senders saw.
//! 2. **EVERY_TIME_BLK with NONW storage.** Every rank sends `n` signals; each is `Invoked` or
//!    `Busy`, and the runs at rank 0 must equal the `Invoked` statuses, the structure's busy
//!    count the `Busy` ones.
//! 3. **MEMW_SSP (source-specified program, data at an offset of a window).** Every rank sends
//!    `n` signals naming a program of its choice; each program checks that its data is in
//!    the window at the offset, and that no requester is recorded.
//! 4. **Non-blocking signals with options.** Every rank sends `n` EVERY_TIME_BLK signals
//!    without waiting, with an EMB colour and failures reported: after waiting on the colour
//!    every signal is delivered, every report is a `Busy`, and runs plus reports add up.
//! 5. **Refusals.** Every rank signals a structure offset where none lives: refused, memory
//!    unchanged, counted at rank 0.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use volley::rma::Error;
use volley::rma::{
    Condition, Invocation, Perms, Refusal, Rma, SignalConfig, SignalOptions, SignalRef,
    SignalStatus, StatusReply, Storage,
};
use volley::Runtime;
use volley_tests::{arg_u64, fail, join, mix, path_name, Gather};

const ENTRY: usize = 24;
const CAPACITY: usize = 8;
const MAILBOX_AT: usize = 0;
const A_AT: usize = 256;
const B_AT: usize = 4096;
const C_AT: usize = 8192;
const WINDOW_AT: usize = 12288;
/// Most ranks, and most MEMW_SSP signals per rank (each has its own place in the window).
const RANKS: usize = 64;
const SSP_MSGS: u64 = 50;
const WINDOW: usize = RANKS * SSP_MSGS as usize * ENTRY;
const SEG: usize = WINDOW_AT + WINDOW;

fn entry(sender: usize, seq: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..8].copy_from_slice(&(sender as u64).to_le_bytes());
    e[8..16].copy_from_slice(&seq.to_le_bytes());
    e[16..].copy_from_slice(&mix(sender as u64 ^ seq << 20).to_le_bytes());
    e
}

fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

/// A pause of a random length (sometimes a yield), different per rank and signal.
fn pause(rank: usize, i: u64) {
    let r = mix((rank as u64) << 40 ^ i);
    if r % 7 == 0 {
        std::thread::yield_now();
    }
    for _ in 0..r % 2000 {
        std::hint::spin_loop();
    }
}

/// One recorded first-only entry: (requester, sender, sequence, check word right).
type Entry = (Option<usize>, u64, u64, bool);
/// What the SSP programs saw: (offset, data, no requester recorded).
type SspSeen = Arc<Mutex<Vec<(usize, Vec<u8>, bool)>>>;

/// What the first-only program recorded: (requester, sender, sequence, check ok), and how
/// often two runs overlapped.
#[derive(Default)]
struct Log {
    got: Mutex<Vec<Entry>>,
    running: AtomicBool,
    overlaps: AtomicU64,
    runs: AtomicU64,
}

impl Log {
    fn record(&self, requester: Option<usize>, data: &[u8]) {
        let w = words(data);
        let ok = w.len() == 3 && w[2] == mix(w[0] ^ w[1] << 20);
        self.got.lock().unwrap().push((
            requester,
            w.first().copied().unwrap_or(u64::MAX),
            w.get(1).copied().unwrap_or(0),
            ok,
        ));
    }
}

fn main() {
    let n = arg_u64(0, 300);
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let log = Arc::new(Log::default());
    let l = log.clone();
    let first_only = setup.register_signal(&mut b, "signal.first_only", move |s| {
        if l.running.swap(true, Ordering::AcqRel) {
            l.overlaps.fetch_add(1, Ordering::Relaxed);
        }
        l.record(s.requester(), s.data());
        let run = l.runs.fetch_add(1, Ordering::Relaxed);
        l.running.store(false, Ordering::Release);
        if run % 13 == 12 {
            s.hold();
        }
    });
    let blk_runs = Arc::new(AtomicU64::new(0));
    let blk_busy = Arc::new(AtomicBool::new(false));
    let (r, busy) = (blk_runs.clone(), blk_busy.clone());
    let blocking = setup.register_signal(&mut b, "signal.blocking", move |_| {
        assert!(
            !busy.swap(true, Ordering::AcqRel),
            "two blocking runs at once"
        );
        r.fetch_add(1, Ordering::Relaxed);
        busy.store(false, Ordering::Release);
    });
    let ssp_seen: SspSeen = Arc::default();
    let mut ssp = Vec::new();
    for k in 0..2 {
        let seen = ssp_seen.clone();
        ssp.push(
            setup.register_signal(&mut b, &format!("signal.ssp{k}"), move |s| {
                seen.lock()
                    .unwrap()
                    .push((s.offset(), s.data().to_vec(), s.requester().is_none()));
            }),
        );
    }
    let gather = Gather::register(&mut b, "signal.gather");
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let die = |msg: String| -> ! { fail(rank, 1, &format!("path {path}: {msg}")) };
    if size > RANKS {
        die(format!("at most {RANKS} ranks"));
    }
    let seg = rma
        .alloc_symmetric(SEG, Perms::ALL)
        .unwrap_or_else(|e| die(format!("alloc_symmetric: {e}")));
    let (mine, root) = (seg.on(rank), seg.on(0));

    if rank == 0 {
        let create = |at, config| {
            rma.signal_create(mine, at, config)
                .unwrap_or_else(|e| die(format!("signal_create: {e}")))
        };
        let a = create(
            A_AT,
            SignalConfig {
                invocation: Invocation::Dsp(first_only),
                storage: Storage::Queue {
                    entry_size: ENTRY,
                    capacity: CAPACITY,
                },
                condition: Condition::FirstOnlyNonblk,
            },
        );
        let b = create(
            B_AT,
            SignalConfig {
                invocation: Invocation::Dsp(blocking),
                storage: Storage::None,
                condition: Condition::EveryTimeBlk,
            },
        );
        let c = create(
            C_AT,
            SignalConfig {
                invocation: Invocation::MemwSsp,
                storage: Storage::MemoryOffset {
                    base: WINDOW_AT,
                    len: WINDOW,
                },
                condition: Condition::EveryTimeNonblk,
            },
        );
        let bytes: Vec<u8> = [a, b, c]
            .iter()
            .flat_map(|s| s.to_words())
            .flat_map(|w| w.to_le_bytes())
            .collect();
        for r in 0..size {
            rma.put(seg.on(r), MAILBOX_AT, &bytes)
                .unwrap_or_else(|e| die(format!("put to rank {r}: {e}")));
        }
    }
    rt.barrier();
    let mut mb = [0u8; 3 * 64];
    rma.read_local(mine, MAILBOX_AT, &mut mb).unwrap();
    let w = words(&mb);
    let sref = |i: usize| SignalRef::from_words(std::array::from_fn(|k| w[i * 8 + k]));
    let (a, bs, c) = (sref(0), sref(1), sref(2));

    // Rank 0 takes what a held program left, as its main loop would.
    let drained = AtomicU64::new(0);
    let drain = || {
        if rank != 0 {
            return;
        }
        let mut buf = [0u8; ENTRY];
        while let Some(t) = rma
            .signal_next_or_clear(a, &mut buf)
            .unwrap_or_else(|e| die(format!("signal_next_or_clear: {e}")))
        {
            if log.running.swap(true, Ordering::AcqRel) {
                log.overlaps.fetch_add(1, Ordering::Relaxed);
            }
            log.record(t.requester, &buf[..t.len]);
            log.running.store(false, Ordering::Release);
            drained.fetch_add(1, Ordering::Relaxed);
        }
    };

    // ---- 1. FIRST_ONLY_NONBLK ------------------------------------------------------------------
    let (mut invoked, mut full) = (0u64, 0u64);
    for seq in 0..n {
        pause(rank, seq);
        loop {
            match rma.signal_to(a, &entry(rank, seq)) {
                Ok(SignalStatus::Invoked) => {
                    invoked += 1;
                    break;
                }
                Ok(SignalStatus::Stored) => break,
                Ok(SignalStatus::Full) => {
                    full += 1;
                    drain();
                    if rt.poll() == 0 {
                        std::thread::yield_now();
                    }
                }
                other => die(format!("first-only signal {seq}: {other:?}")),
            }
        }
    }
    gather.send(&rt, 0, &[invoked, full]);
    if rank == 0 {
        let total = size as u64 * n;
        let mut idle = 0u64;
        loop {
            drain();
            if log.got.lock().unwrap().len() as u64 >= total {
                break;
            }
            if rt.poll() == 0 {
                idle += 1;
                if idle % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        }
        let stats = gather.collect(&rt, 2);
        let got = std::mem::take(&mut *log.got.lock().unwrap());
        let mut next = vec![0u64; size];
        for (i, &(req, sender, seq, ok)) in got.iter().enumerate() {
            if !ok || sender >= size as u64 {
                die(format!("entry {i} is corrupt: sender {sender} seq {seq}"));
            }
            if req != Some(sender as usize) {
                die(format!(
                    "entry {i} from {sender} recorded requester {req:?}"
                ));
            }
            if seq != next[sender as usize] {
                die(format!(
                    "entry {i}: sender {sender}'s sequence {seq}, expected {} (lost, repeated \
                     or reordered)",
                    next[sender as usize]
                ));
            }
            next[sender as usize] += 1;
        }
        if got.len() as u64 != total {
            die(format!("{} entries, expected {total}", got.len()));
        }
        let overlaps = log.overlaps.load(Ordering::Relaxed);
        if overlaps != 0 {
            die(format!(
                "two first-only programs ran at once {overlaps} times"
            ));
        }
        let counts = rma.signal_counts(a).unwrap();
        let (inv, fulls): (u64, u64) = stats.iter().fold((0, 0), |(i, f), s| (i + s[0], f + s[1]));
        if counts.stored != total || counts.invoked != inv || counts.full != fulls {
            die(format!(
                "counters {counts:?}, senders saw {inv} invoked and {fulls} full of {total}"
            ));
        }
        if log.runs.load(Ordering::Relaxed) != total - drained.load(Ordering::Relaxed) {
            die("runs and drained entries do not add up".into());
        }
    }
    rt.barrier();

    // ---- 2. EVERY_TIME_BLK ---------------------------------------------------------------------
    let (mut inv, mut busy) = (0u64, 0u64);
    for i in 0..n {
        pause(rank, i ^ 0x5555);
        match rma.signal_to(bs, &[]) {
            Ok(SignalStatus::Invoked) => inv += 1,
            Ok(SignalStatus::Busy) => busy += 1,
            other => die(format!("blocking signal {i}: {other:?}")),
        }
        if i % 4 == 0 {
            rt.poll();
        }
    }
    gather.send(&rt, 0, &[inv, busy]);
    if rank == 0 {
        let stats = gather.collect(&rt, 2);
        let (inv, busy): (u64, u64) = stats.iter().fold((0, 0), |(i, b), s| (i + s[0], b + s[1]));
        rt.wait_until(|| blk_runs.load(Ordering::Relaxed) >= inv);
        let counts = rma.signal_counts(bs).unwrap();
        if blk_runs.load(Ordering::Relaxed) != inv || counts.invoked != inv || counts.busy != busy {
            die(format!(
                "blocking: {} runs, counters {counts:?}, senders saw {inv} invoked and {busy} busy",
                blk_runs.load(Ordering::Relaxed)
            ));
        }
        if inv + busy != size as u64 * n {
            die("blocking statuses do not add up".into());
        }
    }
    rt.barrier();

    // ---- 3. MEMW_SSP ---------------------------------------------------------------------------
    let msgs = n.min(SSP_MSGS);
    let place = |sender: u64, i: u64| (sender * SSP_MSGS + i) as usize * ENTRY;
    for i in 0..msgs {
        let data = entry(rank, i);
        let h = ssp[(i % 2) as usize];
        match rma.signal_to_at(c, place(rank as u64, i), &data, Some(h)) {
            Ok(SignalStatus::Invoked) => {}
            other => die(format!("SSP signal {i}: {other:?}")),
        }
    }
    if rank == 0 {
        rt.wait_until(|| ssp_seen.lock().unwrap().len() as u64 >= size as u64 * msgs);
        for (off, data, anonymous) in ssp_seen.lock().unwrap().iter() {
            let w = words(data);
            if !anonymous || *off != place(w[0], w[1]) || w[2] != mix(w[0] ^ w[1] << 20) {
                die(format!("SSP signal at {off}: {w:?}, anonymous {anonymous}"));
            }
        }
    }
    // Before the barrier: once past it, other ranks' signals of part 4 may run here.
    let runs_before = blk_runs.load(Ordering::Relaxed);
    rt.barrier();

    // ---- 4. Non-blocking signals with options --------------------------------------------
    // Each rank sends `n` EVERY_TIME_BLK signals without waiting, EMB colour = rank % 16,
    // failures reported: after the colour's wait, every signal is delivered, every report is a
    // cancellation, and the runs at rank 0 plus the reports add up to what was sent.
    let colour = (rank % 16) as u8;
    let opts = SignalOptions {
        status: StatusReply::OnlyFailures,
        colour: Some(colour),
    };
    let (issued_before, _) = rma.emb_counters(colour).unwrap();
    for i in 0..n {
        pause(rank, i ^ 0xaaaa);
        rma.signal_to_nbi(bs, 0, &[], None, opts)
            .unwrap_or_else(|e| die(format!("non-blocking signal {i}: {e}")));
    }
    rma.emb_wait(colour).unwrap();
    let (issued, replied) = rma.emb_counters(colour).unwrap();
    if issued != replied || issued - issued_before < n {
        die(format!(
            "EMB colour {colour}: {issued} issued, {replied} replied"
        ));
    }
    let reports = rma.take_signal_reports();
    if let Some(r) = reports
        .iter()
        .find(|r| r.rank != 0 || r.outcome != Ok(SignalStatus::Busy))
    {
        die(format!("a report that is not a cancellation: {r:?}"));
    }
    gather.send(&rt, 0, &[reports.len() as u64]);
    if rank == 0 {
        let busy: u64 = gather.collect(&rt, 1).iter().map(|s| s[0]).sum();
        let want = size as u64 * n - busy;
        rt.wait_until(|| blk_runs.load(Ordering::Relaxed) - runs_before >= want);
        let runs = blk_runs.load(Ordering::Relaxed) - runs_before;
        if runs != want {
            die(format!(
                "{runs} blocking runs for {want} signals delivered and not cancelled"
            ));
        }
    }
    rt.barrier();

    // ---- 5. Refusals ---------------------------------------------------------------------------
    let mut before = vec![0u8; 256];
    if rank != 0 {
        rma.get(root, A_AT, &mut before).unwrap();
        match rma.signal_to(a.with_offset(A_AT + 8), b"x") {
            Err(Error::Refused {
                reason: Refusal::NotASignal | Refusal::OutOfBounds { .. },
                ..
            }) => {}
            other => die(format!("a signal to no structure: {other:?}")),
        }
        let mut after = vec![0u8; 256];
        rma.get(root, A_AT, &mut after).unwrap();
        if before != after {
            die("a refused signal changed the structure".into());
        }
    }
    rt.barrier();
    if rank == 0 {
        if rma.refused() != size as u64 - 1 {
            die(format!(
                "{} refusals counted, expected {}",
                rma.refused(),
                size - 1
            ));
        }
        println!(
            "rma_signal: path={path}: {size} ranks x {n} first-only signals exactly once, in \
             order, never two programs at once; blocking and SSP signals accounted; refusals \
             counted (drained by the program: {}, full: {})",
            drained.load(Ordering::Relaxed),
            rma.signal_counts(a).unwrap().full
        );
    }
}
