//! `seed001-contention`: seed 001's contention microbenchmark (requirements 15 and 23).
//! Short-message floods, all-to-one and all-to-all, through four queue designs that differ
//! only in how a sender reserves a slot (`volley-ablations`): volley's per-pair rings (nothing
//! to reserve), one shared queue per receiver with compare-and-swap on its tail (seed 001's
//! design), the same with a ticket lock (the seed's ablation), and the CAS queue with the
//! footnote's "prewrite plus barrier" (a store to an unused word of the slot and a fence
//! before the check that it is free). Each runs with one thread per CPU (dedicated) and with
//! four per CPU (multiprogrammed). The seed's claims: CAS is more robust than a lock when
//! multiprogrammed, and never worse; the prewrite, a gain in isolation, loses under load.
//!
//! Threads stand for ranks, so that the designs share everything else; every message
//! carries its sender and number, and each receiver checks that it gets every message once,
//! each sender's in order.

use super::{Experiment, Options, Outcome};
use crate::bench::median;
use serde::Serialize;
use std::fmt::Write as _;
use std::time::Instant;
use volley_ablations::{CasQueue, Enqueue, LockQueue, Message, PrewriteQueue, Ring};

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed001-contention",
    about: "seed 001: all-to-one and all-to-all floods through per-pair rings, a CAS queue, a lock queue and a CAS queue with prewrite plus barrier, dedicated and multiprogrammed",
    run,
    rank: None,
};

/// Slots per queue (per pair for rings, per receiver for the shared queues): the same room
/// per receiver either way would favour the rings, so each shared queue gets as many slots
/// as all of a receiver's rings together.
const SLOTS_PER_SENDER: usize = 32;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Design {
    Rings,
    Cas,
    Lock,
    Prewrite,
}

/// Every design, in the order of the table's columns.
const DESIGNS: [Design; 4] = [Design::Rings, Design::Cas, Design::Lock, Design::Prewrite];

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Pattern {
    AllToOne,
    AllToAll,
}

/// One flood's result.
#[derive(Debug, Serialize)]
struct Point {
    design: Design,
    pattern: Pattern,
    threads: usize,
    multiprogrammed: bool,
    /// Messages per microsecond, all receivers together (median over the repetitions).
    msgs_per_us: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    cpus: usize,
    messages_per_sender: u64,
    points: Vec<Point>,
    /// CAS throughput over lock throughput, per pattern and load.
    cas_over_lock: Vec<Ratio>,
    /// Ring throughput over CAS throughput, per pattern and load.
    rings_over_cas: Vec<Ratio>,
    /// Prewrite-plus-barrier throughput over plain CAS throughput, per pattern and load.
    prewrite_over_cas: Vec<Ratio>,
}

#[derive(Debug, Serialize)]
struct Ratio {
    pattern: Pattern,
    multiprogrammed: bool,
    ratio: f64,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let cpus = crate::affinity::allowed_cpus().len().max(1);
    let per_sender: u64 = if o.quick { 20_000 } else { 400_000 };
    let mut failures = Vec::new();
    let mut points = Vec::new();
    for pattern in [Pattern::AllToOne, Pattern::AllToAll] {
        for multiprogrammed in [false, true] {
            // All-to-one needs a sender besides the receiver even on one CPU.
            let threads = (if multiprogrammed { 4 * cpus } else { cpus }).max(2);
            for design in DESIGNS {
                let mut v = Vec::new();
                for rep in 0..o.reps {
                    // --corrupt: the first flood's first sender skips a message number.
                    let corrupt = o.corrupt && points.is_empty() && rep == 0;
                    match flood(design, pattern, threads, per_sender, corrupt) {
                        Ok(r) => v.push(r),
                        Err(e) => failures.push(format!("{design:?} {pattern:?} x{threads}: {e}")),
                    }
                }
                points.push(Point {
                    design,
                    pattern,
                    threads,
                    multiprogrammed,
                    msgs_per_us: median(&mut v),
                });
            }
        }
    }
    let ratio = |a: Design, b: Design| -> Vec<Ratio> {
        let mut out = Vec::new();
        for pattern in [Pattern::AllToOne, Pattern::AllToAll] {
            for multiprogrammed in [false, true] {
                let of = |d| {
                    points
                        .iter()
                        .find(|p| {
                            p.design == d
                                && p.pattern == pattern
                                && p.multiprogrammed == multiprogrammed
                        })
                        .map_or(f64::NAN, |p| p.msgs_per_us)
                };
                out.push(Ratio {
                    pattern,
                    multiprogrammed,
                    ratio: of(a) / of(b),
                });
            }
        }
        out
    };
    let report = Report {
        verified: failures.is_empty(),
        failures,
        cpus,
        messages_per_sender: per_sender,
        cas_over_lock: ratio(Design::Cas, Design::Lock),
        rings_over_cas: ratio(Design::Rings, Design::Cas),
        prewrite_over_cas: ratio(Design::Prewrite, Design::Cas),
        points,
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
        "seed 001 contention: short-message floods, {} messages per sender, {} CPUs (messages/us, all receivers)",
        r.messages_per_sender, r.cpus
    );
    let _ = writeln!(
        t,
        "  {:<11} {:<16} {:>7}  {:>9} {:>9} {:>9} {:>9}  {:>8} {:>9} {:>12}",
        "pattern",
        "load",
        "threads",
        "rings",
        "CAS",
        "lock",
        "prewrite",
        "CAS/lock",
        "rings/CAS",
        "prewrite/CAS"
    );
    for pattern in [Pattern::AllToOne, Pattern::AllToAll] {
        for multiprogrammed in [false, true] {
            let row: Vec<&Point> = r
                .points
                .iter()
                .filter(|p| p.pattern == pattern && p.multiprogrammed == multiprogrammed)
                .collect();
            let of = |d| {
                row.iter()
                    .find(|p| p.design == d)
                    .map_or(f64::NAN, |p| p.msgs_per_us)
            };
            let _ = writeln!(
                t,
                "  {:<11} {:<16} {:>7}  {:>9.2} {:>9.2} {:>9.2} {:>9.2}  {:>8.2} {:>9.2} {:>12.2}",
                match pattern {
                    Pattern::AllToOne => "all-to-one",
                    Pattern::AllToAll => "all-to-all",
                },
                if multiprogrammed {
                    "multiprogrammed"
                } else {
                    "dedicated"
                },
                row.first().map_or(0, |p| p.threads),
                of(Design::Rings),
                of(Design::Cas),
                of(Design::Lock),
                of(Design::Prewrite),
                of(Design::Cas) / of(Design::Lock),
                of(Design::Rings) / of(Design::Cas),
                of(Design::Prewrite) / of(Design::Cas),
            );
        }
    }
    let _ = writeln!(
        t,
        "  seed: CAS at least as fast as the lock dedicated, and more robust multiprogrammed;"
    );
    let _ = writeln!(
        t,
        "  prewrite plus barrier saved 40 cycles of an isolated send but lost in full use"
    );
    t.push_str(&super::verdict(r.verified, "", &r.failures));
    t
}

/// The queues of one flood: `inbox[r]` is how anyone reaches receiver `r`; for rings, one
/// ring per sender (`rings[r][s]`), for the shared designs one queue.
enum Inboxes {
    Rings(Vec<Vec<Ring>>),
    Shared(Vec<Box<dyn Enqueue + Send>>),
}

impl Inboxes {
    fn new(design: Design, threads: usize) -> Self {
        let cap = SLOTS_PER_SENDER;
        let shared = |make: fn(usize) -> Box<dyn Enqueue + Send>| {
            Inboxes::Shared(
                (0..threads)
                    .map(|_| make(cap * (threads - 1).max(1)))
                    .collect(),
            )
        };
        match design {
            Design::Rings => Inboxes::Rings(
                (0..threads)
                    .map(|_| (0..threads).map(|_| Ring::new(cap)).collect())
                    .collect(),
            ),
            Design::Cas => shared(|n| Box::new(CasQueue::new(n))),
            Design::Lock => shared(|n| Box::new(LockQueue::new(n))),
            Design::Prewrite => shared(|n| Box::new(PrewriteQueue::new(n))),
        }
    }

    /// The queue sender `s` pushes into to reach `r`.
    fn to(&self, r: usize, s: usize) -> &dyn Enqueue {
        match self {
            Inboxes::Rings(v) => &v[r][s],
            Inboxes::Shared(v) => &*v[r],
        }
    }

    /// Takes one message for `r`, scanning its queues from `from` (rings: round robin).
    fn pop(&self, r: usize, from: &mut usize) -> Option<Message> {
        match self {
            Inboxes::Rings(v) => {
                let n = v[r].len();
                for k in 0..n {
                    let s = (*from + k) % n;
                    if let Some(m) = v[r][s].slots().try_pop() {
                        *from = s + 1;
                        return Some(m);
                    }
                }
                None
            }
            Inboxes::Shared(v) => v[r].slots().try_pop(),
        }
    }
}

/// What a receiver checks of its messages: every sender's arrive once, in order. A wrong
/// message is recorded and counted, so that the flood still ends (its senders would wait for
/// room forever if the receiver stopped taking).
struct Check {
    me: usize,
    next: Vec<u64>,
    got: u64,
    error: Option<String>,
}

impl Check {
    fn new(me: usize, threads: usize) -> Self {
        Self {
            me,
            next: vec![0; threads],
            got: 0,
            error: None,
        }
    }

    fn take(&mut self, m: &Message) {
        self.got += 1;
        let (s, i, me) = (m[0] as usize, m[1], self.me);
        let Some(want) = self.next.get(s).copied() else {
            self.error
                .get_or_insert(format!("receiver {me}: a message from unknown sender {s}"));
            return;
        };
        if i != want || m[2] != (s as u64) ^ i ^ 0x5a5a || m[3] != me as u64 {
            self.error.get_or_insert(format!(
                "receiver {me}: from {s} got #{i} (addressed to {}), expected #{want}",
                m[3]
            ));
        }
        self.next[s] = i + 1;
    }

    /// What it received, or the first wrong message.
    fn result(self) -> Result<u64, String> {
        match self.error {
            Some(e) => Err(e),
            None => Ok(self.got),
        }
    }
}

/// A flood's message; its last word stays 0, the spare word of [`PrewriteQueue`].
fn message(s: usize, i: u64, r: usize) -> Message {
    [s as u64, i, (s as u64) ^ i ^ 0x5a5a, r as u64, 0, 0, 0]
}

/// One flood: messages per microsecond, or what went wrong.
fn flood(
    design: Design,
    pattern: Pattern,
    threads: usize,
    per_sender: u64,
    corrupt: bool,
) -> Result<f64, String> {
    let inboxes = Inboxes::new(design, threads);
    let cpus = crate::affinity::allowed_cpus();
    let saved = crate::affinity::current();
    let start = std::sync::Barrier::new(threads + 1);
    let t0 = std::cell::Cell::new(None::<Instant>);
    let results: Vec<Result<u64, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|me| {
                let (inboxes, start, cpus) = (&inboxes, &start, &cpus);
                scope.spawn(move || {
                    crate::affinity::pin(cpus[me % cpus.len()]);
                    start.wait();
                    match pattern {
                        Pattern::AllToOne => all_to_one(inboxes, me, threads, per_sender, corrupt),
                        Pattern::AllToAll => all_to_all(inboxes, me, threads, per_sender),
                    }
                })
            })
            .collect();
        start.wait();
        t0.set(Some(Instant::now()));
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a thread panicked".into())))
            .collect()
    });
    let elapsed = t0.get().map_or(0, |t| t.elapsed().as_nanos()) as f64;
    crate::affinity::restore(&saved);
    let mut received = 0;
    for r in results {
        received += r?;
    }
    let expected = match pattern {
        Pattern::AllToOne => (threads as u64 - 1) * per_sender,
        Pattern::AllToAll => threads as u64 * per_sender,
    };
    if received != expected {
        return Err(format!("{received} messages received, {expected} sent"));
    }
    Ok(received as f64 / (elapsed / 1000.0))
}

/// Thread 0 receives; the others each send `per_sender` messages to it. Returns what this
/// thread received.
fn all_to_one(
    inboxes: &Inboxes,
    me: usize,
    threads: usize,
    per_sender: u64,
    corrupt: bool,
) -> Result<u64, String> {
    let mut spins = 0u32;
    if me == 0 {
        let mut check = Check::new(0, threads);
        let mut from = 0;
        while check.got < (threads as u64 - 1) * per_sender {
            match inboxes.pop(0, &mut from) {
                Some(m) => check.take(&m),
                None => wait(&mut spins),
            }
        }
        return check.result();
    }
    let q = inboxes.to(0, me);
    for i in 0..per_sender {
        // --corrupt: sender 1 skips a number halfway.
        let skip = u64::from(corrupt && me == 1 && i >= per_sender / 2);
        let m = message(me, i + skip, 0);
        while !q.try_push(&m) {
            wait(&mut spins);
        }
    }
    Ok(0)
}

/// Every thread sends `per_sender` messages, round robin to every other thread, and serves
/// its own queue whenever a send finds the target full (or nothing is left to send), so that
/// no cycle of full queues can stall. Returns what this thread received.
fn all_to_all(
    inboxes: &Inboxes,
    me: usize,
    threads: usize,
    per_sender: u64,
) -> Result<u64, String> {
    let mut check = Check::new(me, threads);
    let mut from = 0;
    let mut sent_to = vec![0u64; threads];
    let mut spins = 0u32;
    for k in 0..per_sender {
        let r = (me + 1 + (k as usize % (threads - 1))) % threads;
        let m = message(me, sent_to[r], r);
        let q = inboxes.to(r, me);
        while !q.try_push(&m) {
            match inboxes.pop(me, &mut from) {
                Some(got) => check.take(&got),
                None => wait(&mut spins),
            }
        }
        sent_to[r] += 1;
        // Serve a little as we go, as a program that polls would.
        if k % 8 == 0 {
            if let Some(got) = inboxes.pop(me, &mut from) {
                check.take(&got);
            }
        }
    }
    // What this thread receives: every other thread's messages addressed to it.
    // Sender s reaches `me` on the k with k mod (threads - 1) = (me - s - 1) mod threads.
    let others = threads as u64 - 1;
    let incoming: u64 = (0..threads)
        .filter(|&s| s != me)
        .map(|s| {
            let j = ((me + threads - s - 1) % threads) as u64;
            per_sender / others + u64::from(j < per_sender % others)
        })
        .sum();
    while check.got < incoming {
        match inboxes.pop(me, &mut from) {
            Some(got) => check.take(&got),
            None => wait(&mut spins),
        }
    }
    check.result()
}

/// A spin, yielding now and then: with more threads than CPUs, the thread waited for must get
/// to run.
fn wait(spins: &mut u32) {
    *spins = spins.wrapping_add(1);
    if *spins % 64 == 0 {
        std::thread::yield_now();
    } else {
        std::hint::spin_loop();
    }
}
