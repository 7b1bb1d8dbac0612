//! `seed001-send-breakdown`: seed 001's Figure 4, the cost of a short-message send taken apart
//! (requirement 22). A send is built up one component at a time, each step a separate
//! monomorphized sender (the build-time switches of the seed), and timed as a stream of sends
//! to a receiver thread on another CPU; a component's cost is what its step adds. Cycles are
//! the time-stamp counter's.
//!
//! Steps: the call with its arguments; locating the destination's queue and advancing its
//! tail; filling the 64-byte packet in lines nobody else touches; the same packet into a ring
//! a receiver drains (the overflow check and the lines the receiver last held: the "bus"
//! share); the argument and handler checks; a compare-and-swap on a shared tail instead of a
//! private one (concurrency); a poll of the sender's own queue after each send (local poll);
//! an empty `recv` on a UDP socket after every 8th send (network poll, at the highest rate
//! of the multi-protocol build's adaptive policy).
//!
//! Beside the steps, the footnote's "prewrite plus barrier": the send up to the CAS step again,
//! through a queue whose sender writes an unused word of the slot and fences before the
//! overflow check, in alternation with the plain one (the seed saved 40 cycles with it in
//! isolation; `seed001-contention` floods it under load).
//!
//! The receiver checks every message (sender, number, payload), so a step that lost or tore a
//! message fails the experiment.

use super::{Experiment, Options, Outcome};
use crate::bench::median;
use serde::Serialize;
use std::fmt::Write as _;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;
use volley_ablations::{CasQueue, Enqueue, Message, PrewriteQueue, Ring};

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed001-send-breakdown",
    about: "seed 001 Figure 4: a short send's cost by component (call, tail, fill, bus, checks, CAS, polls), in cycles",
    run,
    rank: None,
};

/// Ring slots: the receiver keeps up, so the ring rarely fills.
const SLOTS: usize = 64;
/// Destinations the sender could address (the table the "locate" step indexes).
const PEERS: usize = 8;
/// Handlers a message may name.
const HANDLERS: u32 = 256;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
enum Step {
    Call,
    LocateAndTail,
    FillPacket,
    ReceiverLines,
    Checks,
    CasTail,
    LocalPoll,
    NetworkPoll,
}

impl Step {
    const ALL: [Step; 8] = [
        Step::Call,
        Step::LocateAndTail,
        Step::FillPacket,
        Step::ReceiverLines,
        Step::Checks,
        Step::CasTail,
        Step::LocalPoll,
        Step::NetworkPoll,
    ];

    fn what(self) -> &'static str {
        match self {
            Step::Call => "call plus argument setup",
            Step::LocateAndTail => "locate destination, advance tail",
            Step::FillPacket => "fill packet (private lines)",
            Step::ReceiverLines => "overflow check + receiver-held lines",
            Step::Checks => "argument and handler checks",
            Step::CasTail => "CAS on a shared tail",
            Step::LocalPoll => "local poll after the send",
            Step::NetworkPoll => "network poll (every 8th send)",
        }
    }

    /// The seed's share this component belongs to.
    fn share(self) -> Share {
        match self {
            Step::Call | Step::LocateAndTail | Step::FillPacket | Step::Checks => Share::Basic,
            Step::ReceiverLines => Share::Bus,
            Step::CasTail => Share::Concurrency,
            Step::LocalPoll | Step::NetworkPoll => Share::Polls,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
enum Share {
    Basic,
    Bus,
    Concurrency,
    Polls,
}

#[derive(Debug, Serialize)]
struct Component {
    step: Step,
    /// Cycles per send with every step up to this one.
    cumulative_cycles: f64,
    /// What this step adds.
    cycles: f64,
    ns: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    /// Time-stamp counter ticks per nanosecond.
    tsc_ghz: f64,
    sends_per_step: u64,
    components: Vec<Component>,
    /// A send over shared memory only (every step but the network poll), and with it.
    shm_only_cycles: f64,
    multi_protocol_cycles: f64,
    /// Shares of the multi-protocol send, as the seed groups them.
    shares: Shares,
    /// The footnote-2 variant of the CAS step.
    prewrite: Prewrite,
}

/// A send up to the CAS step through seed 001's "prewrite plus barrier" queue, against the
/// same send through the plain CAS queue, measured in alternation (the seed: 40 cycles saved
/// in isolation).
#[derive(Debug, Serialize)]
struct Prewrite {
    with_cycles: f64,
    without_cycles: f64,
    /// `without_cycles - with_cycles`: negative when the prewrite costs.
    saved_cycles: f64,
    seed_saved_cycles: f64,
}

#[derive(Debug, Serialize)]
struct Shares {
    basic: f64,
    bus: f64,
    concurrency: f64,
    polls: f64,
}

/// The seed's Figure 4: base 108 cycles, shared memory only 299, multi-protocol 345; shares of
/// bus 32%, basic 29%, concurrency 13%, polls 26%.
const SEED: [(&str, f64); 7] = [
    ("base", 108.0),
    ("shm_only", 299.0),
    ("multi_protocol", 345.0),
    ("bus", 0.32),
    ("basic", 0.29),
    ("concurrency", 0.13),
    ("polls", 0.26),
];

fn run(o: &Options) -> Result<Outcome, String> {
    if crate::affinity::allowed_cpus().len() < 2 {
        return Err("needs two CPUs (a sender and a receiver)".into());
    }
    let sends: u64 = if o.quick { 200_000 } else { 5_000_000 };
    let tsc_ghz = tsc_ghz();
    let mut failures = Vec::new();
    let mut cumulative = Vec::new();
    let mut with_prewrite = Vec::new();
    for (k, step) in Step::ALL.into_iter().enumerate() {
        let mut v = Vec::new();
        for rep in 0..o.reps {
            let corrupt = o.corrupt && k == 3 && rep == 0;
            match measure(step, sends, corrupt, false) {
                Ok(ns) => v.push(ns * tsc_ghz),
                Err(e) => failures.push(format!("{}: {e}", step.what())),
            }
            if step == Step::CasTail {
                match measure(step, sends, false, true) {
                    Ok(ns) => with_prewrite.push(ns * tsc_ghz),
                    Err(e) => failures.push(format!("{} with prewrite: {e}", step.what())),
                }
            }
        }
        cumulative.push(median(&mut v));
    }
    let without = cumulative[Step::CasTail as usize];
    let with = median(&mut with_prewrite);
    let prewrite = Prewrite {
        with_cycles: with,
        without_cycles: without,
        saved_cycles: without - with,
        seed_saved_cycles: 40.0,
    };
    let mut components = Vec::new();
    for (k, step) in Step::ALL.into_iter().enumerate() {
        let before = if k == 0 { 0.0 } else { cumulative[k - 1] };
        let cycles = cumulative[k] - before;
        components.push(Component {
            step,
            cumulative_cycles: cumulative[k],
            cycles,
            ns: cycles / tsc_ghz,
        });
    }
    let multi = cumulative[Step::ALL.len() - 1];
    let share = |s: Share| {
        components
            .iter()
            .filter(|c| c.step.share() == s)
            .map(|c| c.cycles)
            .sum::<f64>()
            / multi
    };
    let report = Report {
        verified: failures.is_empty()
            && cumulative.iter().all(|c| c.is_finite())
            && prewrite.with_cycles.is_finite(),
        failures,
        tsc_ghz,
        sends_per_step: sends,
        shm_only_cycles: cumulative[Step::ALL.len() - 2],
        multi_protocol_cycles: multi,
        shares: Shares {
            basic: share(Share::Basic),
            bus: share(Share::Bus),
            concurrency: share(Share::Concurrency),
            polls: share(Share::Polls),
        },
        components,
        prewrite,
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
        "seed 001 Figure 4: a short send by component ({} sends per step, TSC {:.2} GHz)",
        r.sends_per_step, r.tsc_ghz
    );
    let _ = writeln!(
        t,
        "  {:<40} {:>10} {:>10} {:>8}",
        "component", "cycles", "total", "ns"
    );
    for c in &r.components {
        let _ = writeln!(
            t,
            "  {:<40} {:>10.1} {:>10.1} {:>8.2}",
            c.step.what(),
            c.cycles,
            c.cumulative_cycles,
            c.ns
        );
    }
    let seed = |k: &str| {
        SEED.iter()
            .find(|(n, _)| *n == k)
            .map_or(f64::NAN, |(_, v)| *v)
    };
    let _ = writeln!(
        t,
        "  shared memory only {:.0} cycles, multi-protocol {:.0} (seed: {:.0} and {:.0}; ratio here {:.2}, seed {:.2})",
        r.shm_only_cycles,
        r.multi_protocol_cycles,
        seed("shm_only"),
        seed("multi_protocol"),
        r.multi_protocol_cycles / r.shm_only_cycles,
        seed("multi_protocol") / seed("shm_only")
    );
    let s = &r.shares;
    let _ = writeln!(
        t,
        "  shares here: basic {:.0}%, bus {:.0}%, concurrency {:.0}%, polls {:.0}% (seed: 29%, 32%, 13%, 26%)",
        100.0 * s.basic,
        100.0 * s.bus,
        100.0 * s.concurrency,
        100.0 * s.polls
    );
    let p = &r.prewrite;
    let _ = writeln!(
        t,
        "  prewrite plus barrier (footnote 2), a send up to the CAS step: {:.0} cycles against {:.0} without, saves {:.0} (seed: saves {:.0} in isolation)",
        p.with_cycles, p.without_cycles, p.saved_cycles, p.seed_saved_cycles
    );
    t.push_str(&super::verdict(r.verified, "", &r.failures));
    t
}

/// Time-stamp counter ticks per nanosecond, over 50 ms.
fn tsc_ghz() -> f64 {
    let (c0, t0) = (tsc(), Instant::now());
    while t0.elapsed().as_millis() < 50 {
        std::hint::spin_loop();
    }
    (tsc() - c0) as f64 / t0.elapsed().as_nanos() as f64
}

#[cfg(target_arch = "x86_64")]
fn tsc() -> u64 {
    // SAFETY: rdtsc has no preconditions; it reads the time-stamp counter.
    unsafe { core::arch::x86_64::_rdtsc() }
}

#[cfg(not(target_arch = "x86_64"))]
fn tsc() -> u64 {
    // Without a cycle counter: nanoseconds, so that "cycles" read as ns at 1 GHz.
    static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn message(i: u64, handler: u32) -> Message {
    [1, i, u64::from(handler), i ^ 0x5a5a, !i, 0, 0]
}

/// The sender's state for the steps that need no receiver.
#[repr(align(64))]
struct Private {
    tails: [u64; PEERS],
    lines: [[u64; 8]; SLOTS],
}

/// Steps 1-3: the call, the tail, the fill into private lines.
#[inline(never)]
fn send_private(p: &mut Private, step: Step, dest: usize, handler: u32, i: u64) -> u64 {
    let msg = message(i, handler);
    if step == Step::Call {
        return black_box(dest as u64 ^ u64::from(handler) ^ msg[1]);
    }
    let t = p.tails[dest];
    p.tails[dest] = t + 1;
    if step == Step::LocateAndTail {
        return black_box(t);
    }
    let line = &mut p.lines[(t % SLOTS as u64) as usize];
    line[..7].copy_from_slice(&msg);
    line[7] = t + 1;
    black_box(line[7])
}

/// What the sender of steps 4-8 works with.
struct Sender<'a> {
    /// The queue a receiver drains.
    q: &'a dyn Enqueue,
    /// The sender's own input queue (local poll).
    own: &'a CasQueue,
    /// A socket nothing arrives on (network poll).
    sock: &'a std::net::UdpSocket,
    /// Set by a receiver that found a wrong message and stopped draining.
    stop: &'a AtomicBool,
}

/// Steps 4-8: a real queue drained by a receiver.
#[inline(never)]
fn send_queue(
    Sender { q, own, sock, stop }: &Sender,
    step: Step,
    dest: usize,
    handler: u32,
    i: u64,
) -> Result<(), String> {
    if step as u8 >= Step::Checks as u8 && (dest >= PEERS || handler >= HANDLERS) {
        return Err(format!("bad destination {dest} or handler {handler}"));
    }
    let msg = message(i, handler);
    let mut spins = 0u32;
    while !q.try_push(&msg) {
        spins += 1;
        if spins % 64 == 0 {
            if stop.load(Ordering::Relaxed) {
                return Err("the receiver stopped".into());
            }
            std::thread::yield_now();
        }
        std::hint::spin_loop();
    }
    if step as u8 >= Step::LocalPoll as u8 && own.slots().try_pop().is_some() {
        return Err("a message in the sender's own queue".into());
    }
    // The adaptive policy's highest rate: the network once every 8 polls.
    if step == Step::NetworkPoll && i % 8 == 0 {
        let mut buf = [0u8; 64];
        match sock.recv(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok(n) => return Err(format!("a datagram of {n} bytes from nowhere")),
            Err(e) => return Err(format!("network poll: {e}")),
        }
    }
    Ok(())
}

/// Nanoseconds per send of `sends` with every step up to `step`; with `prewrite`, the CAS
/// queue of steps 6-8 is the prewrite-plus-barrier one.
fn measure(step: Step, sends: u64, corrupt: bool, prewrite: bool) -> Result<f64, String> {
    let cpus = crate::affinity::allowed_cpus();
    let saved = crate::affinity::current();
    crate::affinity::pin(cpus[0]);
    let result = if (step as u8) < Step::ReceiverLines as u8 {
        let mut p = Box::new(Private {
            tails: [0; PEERS],
            lines: [[0; 8]; SLOTS],
        });
        let t0 = Instant::now();
        for i in 0..sends {
            black_box(send_private(&mut p, step, black_box(3), black_box(7), i));
        }
        let ns = t0.elapsed().as_nanos() as f64 / sends as f64;
        let expect = if step == Step::Call { 0 } else { sends };
        if p.tails[3] != expect {
            Err(format!("the tail ended at {}, not {expect}", p.tails[3]))
        } else {
            Ok(ns)
        }
    } else {
        with_receiver(step, sends, corrupt, prewrite, cpus[1])
    };
    crate::affinity::restore(&saved);
    result
}

fn with_receiver(
    step: Step,
    sends: u64,
    corrupt: bool,
    prewrite: bool,
    receiver_cpu: usize,
) -> Result<f64, String> {
    let ring = Ring::new(SLOTS);
    let cas = CasQueue::new(SLOTS);
    let prewriting = PrewriteQueue::new(SLOTS);
    let q: &dyn Enqueue = if (step as u8) < Step::CasTail as u8 {
        &ring
    } else if prewrite {
        &prewriting
    } else {
        &cas
    };
    let own = CasQueue::new(SLOTS);
    let sock = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .and_then(|s| s.set_nonblocking(true).map(|()| s))
        .map_err(|e| format!("socket: {e}"))?;
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        let receiver = s.spawn(|| {
            crate::affinity::pin(receiver_cpu);
            let mut next = 0u64;
            let mut spins = 0u32;
            while next < sends && !stop.load(Ordering::Relaxed) {
                match q.slots().try_pop() {
                    Some(m) => {
                        if m != message(next, 7) {
                            stop.store(true, Ordering::Relaxed);
                            return Err(format!("message {next} arrived as {m:?}"));
                        }
                        next += 1;
                    }
                    None => {
                        spins += 1;
                        if spins % 1024 == 0 {
                            std::thread::yield_now();
                        }
                        std::hint::spin_loop();
                    }
                }
            }
            if next != sends {
                return Err(format!("{next} of {sends} messages arrived"));
            }
            Ok(())
        });
        let sender = Sender {
            q,
            own: &own,
            sock: &sock,
            stop: &stop,
        };
        let t0 = Instant::now();
        let mut sent = Ok(());
        for i in 0..sends {
            let i = if corrupt && i == sends / 2 { i + 1 } else { i };
            sent = send_queue(&sender, step, black_box(3), black_box(7), i);
            if sent.is_err() {
                break;
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 / sends as f64;
        if sent.is_err() {
            stop.store(true, Ordering::Relaxed);
        }
        let received = receiver
            .join()
            .map_err(|_| "the receiver panicked".to_string())?;
        sent?;
        received?;
        Ok(ns)
    })
}
