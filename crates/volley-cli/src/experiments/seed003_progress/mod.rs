//! `seed003-progress`: seed 003's progress experiments E3, E4, E11 and E12 (§4, §5, §6.2) on
//! seed 003's primitives (`volley-prim`), two ranks on one node, pinned.
//!
//! - **E3** ([`notify`]): the per-message cost of each notification threshold (never, start,
//!   end, half-full) against plain polling, for a stream and for a ping-pong. Each threshold
//!   runs twice: with a polling receiver (the notification is raised and nobody sleeps: the
//!   sender's cost alone) and with an `interrupt` receiver (it sleeps on a futex, so a
//!   notification is a kernel wake-up, the analogue of the i860's interrupt).
//! - **E4** ([`checked`]): the unchecked fast path against a "checked" send that makes one
//!   system call per send (an `eventfd` write of the packet's header word, see there why).
//! - **E11** ([`capacity`]): a stream into a slower receiver through input buffers of 1, 4,
//!   16 and 64 KiB: back-pressure alone, credit flow control, and no flow control with the
//!   receiver spilling its buffer into memory at the half-full notification.
//! - **E12** ([`signal`]): a request served by a POSIX signal handler on the target's busy
//!   program thread (the sender raises `SIGUSR1` with `tgkill`) against a communication
//!   thread and a futex-woken thread (the ordering is reported, not required: with two
//!   cores and two busy ranks the thread has no core of its own).
//!
//! The floor of every part is measured in the same run: the cache-line bounce (one word in
//! mapped memory) and the plain polling figures.

mod capacity;
mod checked;
mod notify;
mod signal;

use super::RankArgs;
use super::{rank_job, require_figures, verdict, write_result, Experiment, Options, Outcome};
use crate::bench::{median_opt, median_present};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use volley_prim::{Notify, Prim, PrimConfig, Progress};

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed003-progress",
    about: "seed 003 E3, E4, E11, E12: notification thresholds against polling, checked sends, buffer capacity and spills, signal handlers against a thread",
    run,
    rank: Some(rank),
};

/// What a rank job measures: `base` (polling figures, the floor, E4, E12), `notify` (E3
/// under the job's threshold and progress mode), `capacity` (E11 at the job's capacity).
const PARTS: [&str; 3] = ["base", "notify", "capacity"];

/// One repetition of one job (ns figures; `None` when this job does not measure it).
#[derive(Debug, Default, Serialize, Deserialize)]
struct Rep {
    floor_ns: Option<f64>,
    stream_ns: Option<f64>,
    pingpong_ns: Option<f64>,
    notifications: Option<u64>,
    checked: Option<checked::Figures>,
    capacity: Option<Vec<capacity::Figures>>,
    signal: Option<signal::Figures>,
    failures: Vec<String>,
}

/// Both ranks' parts of a small scratch segment, mapped here (flags, the floor's word, E12's
/// request and reply).
pub(super) struct Words {
    base: [*mut u8; 2],
}

impl Words {
    fn new(p: &Prim) -> Result<Self, String> {
        let seg = p
            .rma()
            .alloc_symmetric(4096, volley::rma::Perms::ALL)
            .map_err(|e| e.to_string())?;
        let mut base = [std::ptr::null_mut(); 2];
        for (r, b) in base.iter_mut().enumerate() {
            let m = p
                .rma()
                .mapped(seg.on(r), 0, 4096, volley::rma::Perms::ALL)
                .map_err(|e| e.to_string())?
                .ok_or("the ranks' memory is not mapped: run both ranks on one node")?;
            *b = m.as_ptr();
        }
        Ok(Self { base })
    }

    /// The 8-byte word at `off` (8-aligned, below 4096) of `rank`'s part.
    pub(super) fn at(&self, rank: usize, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off < 4096);
        // SAFETY: `off` lies in the 4096 mapped bytes of `rank`'s part (checked by `mapped`
        // in `new`), 8-aligned (segments are word aligned), alive until the job finalizes,
        // which outlives `self`; shared between processes, so only reached atomically.
        unsafe { &*(self.base[rank].add(off) as *const AtomicU64) }
    }
}

/// E12's signal round trip with the requester spinning (ns per request on rank 0, NaN on
/// rank 1; collective: both ranks of a 2-rank job call it): the floor of an interrupt-driven
/// fetch, for `seed003-trisolve`.
pub(super) fn signal_round_trip(
    p: &Prim,
    iters: u64,
    failures: &mut Vec<String>,
) -> Result<f64, String> {
    let w = Words::new(p)?;
    Ok(signal::signal_round_trip(p, &w, iters, failures))
}

/// Offsets in the scratch segment: the floor's word, the receiver's "done" flag, E12's words
/// (from `SIG` on); E11 uses 256 and up.
pub(super) const FLOOR: usize = 0;
pub(super) const DONE: usize = 64;
pub(super) const SIG: usize = 128;

/// One rank: `PART ITERS REPS`; the layer's settings come from the environment.
fn rank(a: &RankArgs) -> Result<(), String> {
    let part = a.args.first().map(String::as_str).unwrap_or_default();
    if !PARTS.contains(&part) {
        return Err(format!("expected PART ITERS REPS, PART one of {PARTS:?}"));
    }
    let arg = |i: usize| -> Result<u64, String> {
        a.args
            .get(i)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| "expected PART ITERS REPS".to_string())
    };
    let (iters, reps) = (arg(1)?, arg(2)?);
    let cfg = PrimConfig::from_env().map_err(|e| e.to_string())?;
    let mut b = volley::Runtime::builder();
    let setup = Prim::register(&mut b, cfg);
    let rt = b.build().map_err(|e| e.to_string())?;
    if rt.size() != 2 {
        return Err("seed003-progress runs on exactly 2 ranks".into());
    }
    let p = setup.attach(&rt).map_err(|e| e.to_string())?;
    let w = Words::new(&p)?;
    let me = rt.rank();
    let mut out = Vec::new();
    let e = |e: volley_prim::PrimError| e.to_string();
    // Warm the path once.
    let mut scratch = Vec::new();
    notify::stream(&p, &w, iters / 10 + 1, &mut scratch).map_err(e)?;
    for _ in 0..reps {
        let mut r = Rep::default();
        let n0 = p.stats().notifications_raised;
        match part {
            "base" => {
                rt.barrier();
                w.at(0, FLOOR).store(0, Ordering::Release);
                rt.barrier();
                r.floor_ns = Some(super::seed003_bounce::floor_bounce(
                    w.at(0, FLOOR),
                    me,
                    iters,
                ));
                r.stream_ns = Some(notify::stream(&p, &w, iters, &mut r.failures).map_err(e)?);
                r.pingpong_ns = Some(notify::pingpong(&p, iters, &mut r.failures).map_err(e)?);
                r.checked = Some(checked::measure(&p, &w, iters, &mut r.failures)?);
                r.signal = Some(signal::measure(&p, &w, iters / 4 + 1, &mut r.failures)?);
            }
            "notify" => {
                r.stream_ns = Some(notify::stream(&p, &w, iters, &mut r.failures).map_err(e)?);
                // A lone 16-byte packet never crosses half of the buffer: a sleeping
                // receiver of a half-full ping-pong would only wake on its timeout.
                let sleeps = p.progress() == Progress::Interrupt;
                if !(sleeps && std::env::var("VOLLEY_PRIM_NOTIFY").as_deref() == Ok("half-full")) {
                    r.pingpong_ns = Some(notify::pingpong(&p, iters, &mut r.failures).map_err(e)?);
                }
            }
            _ => r.capacity = Some(capacity::measure(&p, &w, iters, &mut r.failures)?),
        }
        r.notifications = Some(p.stats().notifications_raised - n0);
        out.push(r);
    }
    rt.barrier();
    drop(p);
    if me == 0 {
        write_result(&a.out, &out)?;
    }
    rt.finalize();
    Ok(())
}

/// One row of E3: a threshold under a receiver's progress mode.
#[derive(Debug, Serialize)]
struct NotifyRow {
    notify: &'static str,
    receiver: &'static str,
    stream_ns: Option<f64>,
    pingpong_ns: Option<f64>,
    /// Notifications the job raised per repetition (median).
    notifications: f64,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    /// Which shapes `verified` requires (the rest are reported).
    checks: &'static str,
    iters: u64,
    floor_ns: f64,
    /// E3: plain polling (no notification) and each threshold.
    e3: Vec<NotifyRow>,
    /// E3's shape: a sleeping receiver's notification costs more than polling.
    e3_notify_costs_more: bool,
    e4: checked::Figures,
    /// E4's shape: checked > fast path.
    e4_checked_costs_more: bool,
    e11: Vec<capacity::Figures>,
    /// E11's shapes: credits never find a full buffer, nothing is lost in any mode.
    e11_credits_never_stall: bool,
    e12: signal::Figures,
    /// E12's shape: the signal handler is slower than the communication thread (reported:
    /// with two cores and two busy ranks the thread has no core of its own).
    e12_signal_costs_more: bool,
    seed: SeedFigures,
}

#[derive(Debug, Serialize)]
struct SeedFigures {
    interrupt: &'static str,
    trap: &'static str,
    spill: &'static str,
    emulation: &'static str,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let iters: u64 = if o.quick { 2_000 } else { 40_000 };
    let reps = o.reps.to_string();
    let job = |part: &str, n: u64, env: &[(&str, &str)]| -> Result<Vec<Rep>, String> {
        rank_job(
            EXPERIMENT.name,
            2,
            2,
            env,
            &[part.to_string(), n.to_string(), reps.clone()],
        )
    };
    let mut failures = Vec::new();
    let base = job(
        "base",
        iters,
        &[
            ("VOLLEY_PRIM_PROGRESS", "inline"),
            ("VOLLEY_PRIM_NOTIFY", "never"),
        ],
    )?;
    let mut e3 = vec![row("never (polling)", "inline", &base)];
    // Each job sends `n` stream packets and `n` ping-pong packets from rank 0.
    let exact = |r: &NotifyRow, n: u64, failures: &mut Vec<String>| {
        let want = match r.notify {
            "start" | "end" => 2 * n,
            "never (polling)" => 0,
            _ => return,
        };
        if r.notifications != want as f64 {
            failures.push(format!(
                "E3 {} / {}: {} notifications raised, {want} expected",
                r.notify, r.receiver, r.notifications
            ));
        }
    };
    exact(&e3[0], iters, &mut failures);
    for n in [Notify::Start, Notify::End, Notify::HalfFull] {
        let reps = job(
            "notify",
            iters,
            &[
                ("VOLLEY_PRIM_PROGRESS", "inline"),
                ("VOLLEY_PRIM_NOTIFY", n.name()),
            ],
        )?;
        e3.push(row(n.name(), "inline", &reps));
        exact(e3.last().expect("a row"), iters, &mut failures);
        failures.extend(reps.into_iter().flat_map(|r| r.failures));
    }
    // Kernel wake-ups are slow: fewer messages keep these jobs short.
    let slow = (iters / 4).max(500);
    for n in [Notify::Start, Notify::End, Notify::HalfFull] {
        let reps = job(
            "notify",
            slow,
            &[
                ("VOLLEY_PRIM_PROGRESS", "interrupt"),
                ("VOLLEY_PRIM_NOTIFY", n.name()),
            ],
        )?;
        e3.push(row(n.name(), "interrupt", &reps));
        exact(e3.last().expect("a row"), slow, &mut failures);
        failures.extend(reps.into_iter().flat_map(|r| r.failures));
    }
    let mut e11 = Vec::new();
    let cap_iters = if o.quick { 2_000 } else { 20_000 };
    for kib in capacity::KIB {
        let bytes = (kib * 1024).to_string();
        let reps = job(
            "capacity",
            cap_iters,
            &[
                ("VOLLEY_PRIM_PROGRESS", "inline"),
                ("VOLLEY_PRIM_NOTIFY", "half-full"),
                ("VOLLEY_PRIM_CAPACITY", &bytes),
            ],
        )?;
        let all: Vec<Vec<capacity::Figures>> =
            reps.iter().filter_map(|r| r.capacity.clone()).collect();
        e11.extend(capacity::medians(&all));
        failures.extend(reps.into_iter().flat_map(|r| r.failures));
    }
    let floor = median_present(base.iter().filter_map(|r| r.floor_ns));
    let mut floor = floor;
    if o.corrupt {
        floor = f64::NAN;
    }
    let e4 = checked::medians(
        &base
            .iter()
            .filter_map(|r| r.checked.clone())
            .collect::<Vec<_>>(),
    );
    let e12 = signal::medians(
        &base
            .iter()
            .filter_map(|r| r.signal.clone())
            .collect::<Vec<_>>(),
    );
    failures.extend(base.into_iter().flat_map(|r| r.failures));
    let poll = &e3[0];
    let mut figures = vec![("floor", floor)];
    for r in &e3 {
        if let Some(v) = r.stream_ns {
            figures.push(("E3 stream", v));
        } else {
            failures.push(format!(
                "E3 {} / {}: no stream figure",
                r.notify, r.receiver
            ));
        }
    }
    figures.extend(e4.named());
    figures.extend(e12.named());
    for f in &e11 {
        figures.push(("E11 throughput", f.mbytes_per_s));
    }
    require_figures(&mut failures, &figures);
    let sleeping_end = e3
        .iter()
        .find(|r| r.notify == "end" && r.receiver == "interrupt")
        .and_then(|r| r.pingpong_ns);
    let e3_notify_costs_more =
        matches!((sleeping_end, poll.pingpong_ns), (Some(s), Some(p)) if s > p);
    let e4_checked_costs_more = e4.checked_ns > e4.fast_ns;
    let e11_credits_never_stall = e11
        .iter()
        .filter(|f| f.mode == "credits")
        .all(|f| f.full_stalls == 0.0 && f.spills == 0.0);
    if !e11_credits_never_stall {
        failures.push("E11: credit flow control found a full buffer".into());
    }
    let e12_signal_costs_more = e12.signal_ns > e12.comm_thread_ns;
    // Timing shapes hold on a quiet machine; at the quick sizes (CI, shared) they are
    // reported, and `verified` is the correctness checks and the counters.
    if !o.quick {
        for (ok, what) in [
            (
                e3_notify_costs_more,
                "E3: a woken receiver is not slower than polling",
            ),
            (
                e4_checked_costs_more,
                "E4: the checked send is not slower than the fast path",
            ),
        ] {
            if !ok {
                failures.push(what.into());
            }
        }
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        checks: "every value arrives intact and in order in every part and mode, every request is served exactly once, credits never stall, start and end raise exactly one notification per packet and polling none, every figure measured; without --quick also: woken receiver > polling (E3), checked > fast (E4); signal > comm thread (E12) is reported",
        iters,
        floor_ns: floor,
        e3,
        e3_notify_costs_more,
        e4,
        e4_checked_costs_more,
        e11,
        e11_credits_never_stall,
        e12,
        e12_signal_costs_more,
        seed: SeedFigures {
            interrupt: "\"on the order of 1000 instructions\" per i860 interrupt; bounce \"70us\" -> \"130us\" with one",
            trap: "\"roughly 50 instructions\", could be \"15 or 20\"",
            spill: "without room \"an interrupt will be required to spill data from the FIFO into memory\"",
            emulation: "interrupts instead of a communication processor: \"valid\" if cheap, \"not practical\" on the iPSC/860",
        },
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn row(notify: &'static str, receiver: &'static str, reps: &[Rep]) -> NotifyRow {
    NotifyRow {
        notify,
        receiver,
        stream_ns: median_opt(reps.iter().map(|r| r.stream_ns)),
        pingpong_ns: median_opt(reps.iter().map(|r| r.pingpong_ns)),
        notifications: median_present(
            reps.iter()
                .filter_map(|r| r.notifications.map(|n| n as f64)),
        ),
    }
}

fn opt(v: Option<f64>) -> String {
    v.map_or("n/a".into(), |v| format!("{v:.0}"))
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed003-progress: 2 ranks on one node, pinned; medians; floor (cache-line bounce, one way) {:.0} ns",
        r.floor_ns
    );
    let _ = writeln!(
        t,
        "E3 notifications against polling (16-byte packets; stream ns/message, ping-pong one-way ns)"
    );
    let _ = writeln!(
        t,
        "  {:<18} {:<10} {:>10} {:>10} {:>14}",
        "threshold", "receiver", "stream", "ping-pong", "notifications"
    );
    for row in &r.e3 {
        let _ = writeln!(
            t,
            "  {:<18} {:<10} {:>10} {:>10} {:>14.0}",
            row.notify,
            row.receiver,
            opt(row.stream_ns),
            opt(row.pingpong_ns),
            row.notifications
        );
    }
    let _ = writeln!(t, "  seed: {}", r.seed.interrupt);
    checked::table(&mut t, &r.e4);
    let _ = writeln!(t, "  seed: trap {}", r.seed.trap);
    capacity::table(&mut t, &r.e11);
    let _ = writeln!(t, "  seed: {}", r.seed.spill);
    signal::table(&mut t, &r.e12, r.floor_ns);
    let _ = writeln!(t, "  seed: {}", r.seed.emulation);
    let _ = writeln!(
        t,
        "shapes: woken receiver > polling {}, checked > fast {}, credits never stall {}, signal > thread {}",
        r.e3_notify_costs_more, r.e4_checked_costs_more, r.e11_credits_never_stall, r.e12_signal_costs_more
    );
    t.push_str(&verdict(
        r.verified,
        "values intact and in order, requests served once, credits never stall",
        &r.failures,
    ));
    t
}
