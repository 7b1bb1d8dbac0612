//! `seed002-signal`: seed 002's one-way latencies of high-level commands (its Tables 6.4 and
//! 6.11: WRITE < FIFO < SIGNAL, SIGNAL about 2.0-2.3 times WRITE at 4 bytes), for every
//! signal mode volley builds, beside a plain write, over shared memory and the network.
//!
//! Two ranks ping-pong: each side waits for the other's operation to arrive, checks it, and
//! sends its own; the one-way latency is half the round trip, as in the seed. The write is a
//! write with flag (the receiver polls the flag, then has the data); the FIFO is an enqueue
//! and the owner's dequeue; a signal is the signal plus what the seed counts with it: a
//! program invoked at the target (or, for POLLING, the owner's "next entry" call). Every
//! arrival is checked: exactly once, with the sender's sequence number and data.

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use volley::rma::{
    Condition, FifoRef, Invocation, Perms, Rma, SignalConfig, SignalHandler, SignalRef,
    SignalStatus, Storage,
};
use volley::Runtime;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed002-signal",
    about: "seed 002 Tables 6.4/6.11: one-way latency of WRITE, FIFO and every SIGNAL mode (shm, udp, tcp)",
    run,
    rank: Some(rank),
};

/// The seed's one-way latencies (µs) at 4, 16, 64, 256, 1024 bytes.
const SEED_SIZES: [usize; 5] = [4, 16, 64, 256, 1024];
const SEED_SS20: [[f64; 5]; 3] = [
    [24.5, 27.5, 34.0, 60.5, 172.0],
    [32.0, 32.0, 40.5, 73.0, 210.5],
    [49.0, 52.5, 60.5, 93.0, 227.5],
];
const SEED_ULTRA60: [[f64; 5]; 3] = [
    [9.6, 11.0, 11.5, 16.2, 35.9],
    [14.7, 15.3, 16.4, 23.5, 54.8],
    [22.5, 24.0, 24.9, 31.4, 57.8],
];

/// The modes, in the order of the table: the write and the FIFO first, as in the seed.
const MODES: [&str; 7] = [
    "write",
    "fifo",
    "signal_polling_quew",
    "signal_dsp_quew_first_only_nonblk",
    "signal_dsp_quew_every_time_nonblk",
    "signal_dsp_memw_every_time_blk",
    "signal_memw_ssp",
];

/// What one job (one transport) measured: mode → size → one-way ns.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobResult {
    one_way_ns: BTreeMap<String, BTreeMap<usize, f64>>,
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    sizes: Vec<usize>,
    iterations: u64,
    /// transport → mode → size → one-way ns.
    one_way_ns: BTreeMap<String, BTreeMap<String, BTreeMap<usize, f64>>>,
    /// transport → mode → (one-way at the smallest size) / (the write's).
    over_write_smallest: BTreeMap<String, BTreeMap<String, f64>>,
    /// Whether WRITE < FIFO < every signal mode at the smallest size, per transport.
    seed_ordering_holds: BTreeMap<String, bool>,
    seed: SeedFigures,
}

#[derive(Debug, Serialize)]
struct SeedFigures {
    sizes: [usize; 5],
    ss20_100base_tx_us: BTreeMap<&'static str, [f64; 5]>,
    ultra60_1000base_sx_us: BTreeMap<&'static str, [f64; 5]>,
    signal_over_write_4b: [f64; 2],
    fifo_over_write_4b: [f64; 2],
}

fn seed_figures() -> SeedFigures {
    let map =
        |t: [[f64; 5]; 3]| BTreeMap::from([("write", t[0]), ("fifo", t[1]), ("signal", t[2])]);
    SeedFigures {
        sizes: SEED_SIZES,
        ss20_100base_tx_us: map(SEED_SS20),
        ultra60_1000base_sx_us: map(SEED_ULTRA60),
        signal_over_write_4b: [
            SEED_SS20[2][0] / SEED_SS20[0][0],
            SEED_ULTRA60[2][0] / SEED_ULTRA60[0][0],
        ],
        fifo_over_write_4b: [
            SEED_SS20[1][0] / SEED_SS20[0][0],
            SEED_ULTRA60[1][0] / SEED_ULTRA60[0][0],
        ],
    }
}

fn run(o: &Options) -> Result<Outcome, String> {
    let (sizes, iters, transports): (Vec<usize>, u64, &[&str]) = if o.quick {
        (vec![4, 64, 1024], 300, &["shm", "udp"])
    } else {
        (SEED_SIZES.to_vec(), 3000, &["shm", "udp", "tcp"])
    };
    let sizes_arg = sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let args = vec![iters.to_string(), o.reps.to_string(), sizes_arg];
    let mut failures = Vec::new();
    let mut one_way = BTreeMap::new();
    for &t in transports {
        let (per_node, env): (usize, Vec<(&str, &str)>) = match t {
            "shm" => (2, vec![]),
            net => (1, vec![("VOLLEY_NET", net)]),
        };
        match rank_job::<JobResult>(EXPERIMENT.name, 2, per_node, &env, &args) {
            Ok(r) => {
                failures.extend(r.failures.iter().map(|f| format!("{t}: {f}")));
                one_way.insert(t.to_string(), r.one_way_ns);
            }
            Err(e) => failures.push(format!("{t}: {e}")),
        }
    }
    let smallest = sizes[0];
    let mut over = BTreeMap::new();
    let mut ordering = BTreeMap::new();
    for (t, modes) in &one_way {
        let at = |m: &str| modes.get(m).and_then(|s| s.get(&smallest)).copied();
        let Some(w) = at("write") else {
            failures.push(format!("{t}: no write figure"));
            continue;
        };
        let ratios: BTreeMap<String, f64> = MODES
            .iter()
            .filter_map(|m| Some((m.to_string(), at(m)? / w)))
            .collect();
        let fifo = at("fifo").unwrap_or(f64::NAN);
        let holds = w < fifo && MODES[2..].iter().all(|m| at(m).is_some_and(|s| fifo < s));
        ordering.insert(t.clone(), holds);
        over.insert(t.clone(), ratios);
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        sizes,
        iterations: iters,
        one_way_ns: one_way,
        over_write_smallest: over,
        seed_ordering_holds: ordering,
        seed: seed_figures(),
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed 002 Tables 6.4/6.11: one-way latency (µs), 2 ranks ping-pong, median of reps"
    );
    for (tr, modes) in &r.one_way_ns {
        let _ = writeln!(t, "\n{tr}:");
        let _ = write!(t, "  {:<36}", "mode \\ bytes");
        for s in &r.sizes {
            let _ = write!(t, " {s:>8}");
        }
        let _ = writeln!(t, " {:>8}", "x write");
        for m in MODES {
            let Some(row) = modes.get(m) else { continue };
            let _ = write!(t, "  {m:<36}");
            for s in &r.sizes {
                let v = row.get(s).map_or(f64::NAN, |ns| ns / 1000.0);
                let _ = write!(t, " {v:>8.2}");
            }
            let x = r
                .over_write_smallest
                .get(tr)
                .and_then(|o| o.get(m))
                .copied()
                .unwrap_or(f64::NAN);
            let _ = writeln!(t, " {x:>8.2}");
        }
        let _ = writeln!(
            t,
            "  WRITE < FIFO < SIGNAL at {} B: {}",
            r.sizes[0],
            if r.seed_ordering_holds.get(tr) == Some(&true) {
                "yes"
            } else {
                "no"
            }
        );
    }
    let _ = writeln!(t, "\nthe seed (µs at 4 / 16 / 64 / 256 / 1024 B):");
    for (name, tab) in [
        ("SS20 100BASE-TX", SEED_SS20),
        ("Ultra 60 1000BASE-SX", SEED_ULTRA60),
    ] {
        for (i, what) in ["WRITE", "FIFO", "SIGNAL"].iter().enumerate() {
            let _ = writeln!(
                t,
                "  {name:<22} {what:<7} {}",
                tab[i]
                    .iter()
                    .map(|v| format!("{v:>6.1}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            );
        }
    }
    let s = &r.seed;
    let _ = writeln!(
        t,
        "  SIGNAL / WRITE at 4 B: {:.2} (SS20), {:.2} (Ultra 60); FIFO / WRITE: {:.2}, {:.2}",
        s.signal_over_write_4b[0],
        s.signal_over_write_4b[1],
        s.fifo_over_write_4b[0],
        s.fifo_over_write_4b[1]
    );
    t.push_str(&super::verdict(
        r.verified,
        "every operation arrived exactly once with the right data",
        &r.failures,
    ));
    t
}

// ---------------------------------------------------------------------------------------------
// One rank of the job.
// ---------------------------------------------------------------------------------------------

/// Segment layout (the same at both ranks).
const FLAG_AT: usize = 0;
const DATA_AT: usize = 64;
const FIFO_AT: usize = 4096;
const STRUCT_AT: usize = 16384;
const STRUCT_ROOM: usize = 8192;
const WINDOW_AT: usize = STRUCT_AT + 8 * STRUCT_ROOM;
const SEG: usize = WINDOW_AT + 4096;
const MAX_SIZE: usize = 1024;

/// What the programs saw: arrivals and the last arrival's first data word.
#[derive(Default)]
struct Arrivals {
    count: AtomicU64,
    last: Mutex<Vec<u8>>,
}

fn payload(seq: u64, size: usize, buf: &mut [u8]) {
    for (i, b) in buf[..size].iter_mut().enumerate() {
        *b = (seq as usize * 31 + i * 7) as u8;
    }
    let n = size.min(8);
    buf[..n].copy_from_slice(&seq.to_le_bytes()[..n]);
}

fn check(seq: u64, data: &[u8], size: usize) -> bool {
    let mut want = vec![0u8; size];
    payload(seq, size, &mut want);
    data == want.as_slice()
}

fn rank(a: &RankArgs) -> Result<(), String> {
    let arg = |i: usize| a.args.get(i).cloned().unwrap_or_default();
    let iters: u64 = arg(0).parse().map_err(|_| "iterations")?;
    let reps: usize = arg(1).parse().map_err(|_| "reps")?;
    let sizes: Vec<usize> = arg(2)
        .split(',')
        .map(|s| s.parse().map_err(|_| format!("size {s:?}")))
        .collect::<Result<_, _>>()?;
    if sizes.iter().any(|&s| s > MAX_SIZE || s == 0) {
        return Err(format!("sizes are 1..={MAX_SIZE}"));
    }
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let arrivals = Arc::new(Arrivals::default());
    let ar = arrivals.clone();
    let program = setup.register_signal(&mut b, "experiment.signal", move |s| {
        *ar.last.lock().unwrap_or_else(|e| e.into_inner()) = s.data().to_vec();
        ar.count.fetch_add(1, Ordering::Release);
    });
    let rt = b.build().map_err(|e| e.to_string())?;
    let rma = setup.attach(&rt);
    let (me, size) = (rt.rank(), rt.size());
    if size != 2 {
        return Err("runs on 2 ranks".into());
    }
    let peer = 1 - me;
    let seg = rma
        .alloc_symmetric(SEG, Perms::ALL)
        .map_err(|e| e.to_string())?;
    let mine = seg.on(me);
    let fifo = rma
        .fifo_create(mine, FIFO_AT, MAX_SIZE, 4)
        .map_err(|e| e.to_string())?;
    let configs = signal_configs(program);
    let mut structs = Vec::new();
    for (i, c) in configs.iter().enumerate() {
        structs.push(
            rma.signal_create(mine, STRUCT_AT + i * STRUCT_ROOM, *c)
                .map_err(|e| e.to_string())?,
        );
    }
    // Exchange the handles: each rank puts its structures' words into the other's flag area
    // region (before any measurement uses it), then both read what they got.
    let words: Vec<u8> = structs
        .iter()
        .flat_map(|s| s.to_words())
        .chain(fifo.to_words())
        .flat_map(|w| w.to_le_bytes())
        .collect();
    let exchange_at = WINDOW_AT;
    rma.put(seg.on(peer), exchange_at, &words)
        .map_err(|e| e.to_string())?;
    rt.barrier();
    let mut got = vec![0u8; words.len()];
    rma.read_local(mine, exchange_at, &mut got)
        .map_err(|e| e.to_string())?;
    let w: Vec<u64> = got
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
        .collect();
    let theirs: Vec<SignalRef> = (0..structs.len())
        .map(|i| SignalRef::from_words(std::array::from_fn(|k| w[i * 8 + k])))
        .collect();
    let peer_fifo = FifoRef::from_words(std::array::from_fn(|k| w[structs.len() * 8 + k]));
    rt.barrier();

    let ctx = Ctx {
        rt: &rt,
        rma: &rma,
        me,
        peer_seg: seg.on(peer),
        mine,
        fifo,
        peer_fifo,
        structs: &structs,
        theirs: &theirs,
        arrivals: &arrivals,
        program,
        seq: std::cell::Cell::new(0),
        arrived: std::cell::Cell::new(0),
    };
    let mut result = JobResult {
        one_way_ns: BTreeMap::new(),
        failures: Vec::new(),
    };
    for (mi, mode) in MODES.iter().enumerate() {
        let mut row = BTreeMap::new();
        for &size in &sizes {
            let mut v = Vec::new();
            for _ in 0..reps {
                // A failed check ends the job (the peer would wait for this side forever):
                // the experiment then reports the failure.
                let ns = ctx
                    .pingpong(mi, size, iters)
                    .map_err(|e| format!("{mode} {size} B: {e}"))?;
                v.push(ns);
                rt.barrier();
            }
            row.insert(size, median(&mut v));
        }
        result.one_way_ns.insert(mode.to_string(), row);
    }
    // Exactly one program run per signal received, none more (every run is over: the peer
    // waited for this side's last answer before the barrier).
    let ran = arrivals.count.load(Ordering::Acquire);
    if ran != ctx.arrived.get() {
        return Err(format!(
            "{ran} programs ran for {} signals received",
            ctx.arrived.get()
        ));
    }
    if me == 0 {
        write_result(&a.out, &result)?;
    }
    rt.barrier();
    Ok(())
}

fn signal_configs(program: SignalHandler) -> [SignalConfig; 5] {
    let q = Storage::Queue {
        entry_size: MAX_SIZE,
        capacity: 4,
    };
    [
        SignalConfig {
            invocation: Invocation::Polling,
            storage: q,
            condition: Condition::EveryTimeNonblk,
        },
        SignalConfig {
            invocation: Invocation::Dsp(program),
            storage: q,
            condition: Condition::FirstOnlyNonblk,
        },
        SignalConfig {
            invocation: Invocation::Dsp(program),
            storage: q,
            condition: Condition::EveryTimeNonblk,
        },
        SignalConfig {
            invocation: Invocation::Dsp(program),
            storage: Storage::Memory { size: MAX_SIZE },
            condition: Condition::EveryTimeBlk,
        },
        SignalConfig {
            invocation: Invocation::MemwSsp,
            storage: Storage::MemoryOffset {
                base: WINDOW_AT,
                len: 4096,
            },
            condition: Condition::EveryTimeNonblk,
        },
    ]
}

struct Ctx<'a> {
    rt: &'a Runtime,
    rma: &'a Rma<'a>,
    me: usize,
    peer_seg: volley::rma::SegmentRef,
    mine: volley::rma::SegmentRef,
    fifo: FifoRef,
    peer_fifo: FifoRef,
    structs: &'a [SignalRef],
    theirs: &'a [SignalRef],
    arrivals: &'a Arrivals,
    program: SignalHandler,
    seq: std::cell::Cell<u64>,
    /// Program runs waited for so far (invoked modes).
    arrived: std::cell::Cell<u64>,
}

impl Ctx<'_> {
    /// `iters` round trips of mode `mi` with `size` bytes: ns one way. Rank 0 starts; each
    /// side checks every arrival (sequence number and data) before answering.
    fn pingpong(&self, mi: usize, size: usize, iters: u64) -> Result<f64, String> {
        let warm = iters / 10 + 1;
        let mut buf = vec![0u8; MAX_SIZE];
        // Program runs this side has waited for before this run. (Not the counter's value now:
        // the peer's first message of this run may already have run its program here, while
        // this side was still leaving the barrier.)
        let base = self.arrived.get();
        let mut t0 = Instant::now();
        // Sequence numbers continue across runs: the write's flag word keeps the last one.
        let mut seq = self.seq.get();
        for i in 0..iters + warm {
            if i == warm {
                t0 = Instant::now();
            }
            // The programs' arrivals this side expects once it has received message i.
            let want = base + i + 1;
            if self.me == 0 {
                seq += 1;
                self.send(mi, size, seq, &mut buf)?;
                seq += 1;
                self.receive(mi, size, seq, want, &mut buf)?;
            } else {
                seq += 1;
                self.receive(mi, size, seq, want, &mut buf)?;
                seq += 1;
                self.send(mi, size, seq, &mut buf)?;
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 / (2 * iters) as f64;
        self.seq.set(seq);
        if mi >= 3 {
            self.arrived.set(base + iters + warm);
        }
        Ok(ns)
    }

    fn send(&self, mi: usize, size: usize, seq: u64, buf: &mut [u8]) -> Result<(), String> {
        payload(seq, size, buf);
        let data = &buf[..size];
        let mut spins = 0u32;
        let status = loop {
            let status = match mi {
                0 => {
                    return self
                        .rma
                        .put_with_flag(self.peer_seg, DATA_AT, data, FLAG_AT, seq)
                        .map_err(|e| e.to_string())
                }
                1 => {
                    // Entries are the FIFO's size; the receiver checks the first `size` bytes.
                    return self
                        .rma
                        .fifo_enqueue_retry(self.peer_fifo, &buf[..MAX_SIZE])
                        .map_err(|e| e.to_string());
                }
                6 => self
                    .rma
                    .signal_to_at(self.theirs[4], 0, data, Some(self.program)),
                _ => self.rma.signal_to(self.theirs[mi - 2], data),
            }
            .map_err(|e| e.to_string())?;
            // EVERY_TIME_BLK: the previous program may not have returned yet (a progress
            // thread runs it while this side already answers): cancelled, nothing stored;
            // send again.
            if status != SignalStatus::Busy {
                break status;
            }
            spins = spins.wrapping_add(1);
            if self.rt.poll() == 0 && spins % 256 == 0 {
                std::thread::yield_now();
            }
        };
        let ok = match mi {
            2 => status == SignalStatus::Stored,
            // With a progress thread the previous run may still be finishing: the signal
            // then queues and that run takes it.
            3 => matches!(status, SignalStatus::Invoked | SignalStatus::Stored),
            _ => status == SignalStatus::Invoked,
        };
        if !ok {
            return Err(format!("signal {seq}: {status:?}"));
        }
        Ok(())
    }

    fn receive(
        &self,
        mi: usize,
        size: usize,
        seq: u64,
        want: u64,
        buf: &mut [u8],
    ) -> Result<(), String> {
        let e = |e: volley::rma::Error| e.to_string();
        let mut spins = 0u32;
        let mut idle = || {
            spins = spins.wrapping_add(1);
            if self.rt.poll() == 0 && spins % 256 == 0 {
                std::thread::yield_now();
            }
        };
        match mi {
            0 => {
                let mut w = [0u8; 8];
                loop {
                    self.rma.read_local(self.mine, FLAG_AT, &mut w).map_err(e)?;
                    match u64::from_le_bytes(w) {
                        f if f == seq => break,
                        f if f > seq => return Err(format!("flag {f} while waiting for {seq}")),
                        _ => idle(),
                    }
                }
                self.rma
                    .read_local(self.mine, DATA_AT, &mut buf[..size])
                    .map_err(e)?;
            }
            1 => loop {
                if self.rma.fifo_dequeue(self.fifo, buf).map_err(e)? {
                    break;
                }
                idle();
            },
            2 => loop {
                if let Some(t) = self
                    .rma
                    .signal_next_or_clear(self.structs[0], buf)
                    .map_err(e)?
                {
                    if t.len != size || t.requester != Some(1 - self.me) {
                        return Err(format!("polled entry {t:?}"));
                    }
                    break;
                }
                idle();
            },
            _ => {
                while self.arrivals.count.load(Ordering::Acquire) < want {
                    idle();
                }
                let last = self.arrivals.last.lock().unwrap_or_else(|e| e.into_inner());
                buf[..last.len().min(size)].copy_from_slice(&last[..last.len().min(size)]);
                if last.len() != size {
                    return Err(format!(
                        "signal {seq}: {} bytes, expected {size}",
                        last.len()
                    ));
                }
            }
        }
        if !check(seq, &buf[..size], size) {
            return Err(format!("operation {seq} of {size} bytes: wrong data"));
        }
        Ok(())
    }
}
