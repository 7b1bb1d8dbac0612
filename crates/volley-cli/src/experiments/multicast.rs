//! `seed002-multicast`: seed 002's E11 (multicast UPDATE with acknowledge combining: one ack
//! per update whatever the fan-out, latency growing with the tree's depth) and E9 (FIFOe
//! ordering under overflow: NORMAL's stop, return-to-sender and restart against RETRY, with
//! the plain FIFO's cancellations beside them).
//!
//! (a) E11. Rank 0 multicasts 8 bytes to ranks 1..=f for every fan-out f up to P-1, along a
//! chain (arity 1, depth f), a binary tree and a flat tree (arity f: the root and f-1 children,
//! depth 2), and beside them makes f separate blocking puts of the same bytes. Latency is the
//! median over reps of the mean over iterations. Checked: rank 0 received exactly one ack per
//! update and no stray one, and every member was delivered exactly the updates that listed it.
//!
//! (b) E9. Every other rank sends `entries` entries (sender, sequence number) as fast as it
//! can into a FIFO of 4 at rank 0, once per mode: NORMAL (a `FifoSender`; rank 0 restarts the
//! FIFO whenever it finds it stopped and empty), RETRY (`fifo_enqueue_retry`) and plain
//! (`fifo_enqueue`, a full FIFO cancels the entry). Rank 0 dequeues one entry per turn and
//! checks each sender's order. Checked: NORMAL and RETRY deliver every entry exactly once in
//! each sender's order; plain delivers in order with the cancelled ones missing, and delivered
//! plus cancelled equals sent.

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;
use volley::rma::multicast::{tree, Multicast};
use volley::rma::{AtomicOp, FifoRef, FifoSender, FifoStatus, Perms, Rma};
use volley::Runtime;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed002-multicast",
    about: "seed 002 E11/E9: multicast UPDATE with ack combining vs fan-out and depth; FIFOe NORMAL vs RETRY under overflow",
    run,
    rank: Some(rank),
};

const FIFO_CAPACITY: usize = 4;
const ENTRY: usize = 16;
const MODES: [&str; 3] = ["normal", "retry", "plain"];

/// One multicast configuration's result.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Row {
    fanout: usize,
    shape: String,
    arity: usize,
    depth: usize,
    /// Median over reps of the mean latency of one update (or of the f puts), ns.
    ns: f64,
}

/// One E9 mode's counts.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct FifoRow {
    mode: String,
    sent: u64,
    delivered: u64,
    /// NORMAL: entries returned to their senders (each return counts).
    returned: u64,
    /// NORMAL: stops (status 2) and the owner's restarts.
    stops: u64,
    restarts: u64,
    /// RETRY: enqueues answered Full and tried again.
    retried: u64,
    /// Plain: entries cancelled (lost).
    cancelled: u64,
    /// Entries out of their sender's order, duplicated, or missing (missing: not for plain).
    order_violations: u64,
    duplicates: u64,
    missing: u64,
    ms: f64,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobResult {
    ranks: usize,
    rows: Vec<Row>,
    fifo: Vec<FifoRow>,
    updates: u64,
    acks: u64,
    stray: u64,
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    iterations: u64,
    entries: u64,
    /// transport → result.
    jobs: BTreeMap<String, JobResult>,
    /// transport → whether latency at the largest fan-out grows with depth (chain above the
    /// flat tree) while the flat tree's stays within 3x of its 1-member latency.
    depth_not_fanout: BTreeMap<String, bool>,
    seed: &'static str,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let (ranks, iters, entries, transports): (usize, u64, u64, &[&str]) = if o.quick {
        (4, 100, 300, &["shm"])
    } else {
        (5, 1000, 1000, &["shm", "udp"])
    };
    let args = vec![iters.to_string(), o.reps.to_string(), entries.to_string()];
    let mut failures = Vec::new();
    let mut jobs = BTreeMap::new();
    let mut depth_ok = BTreeMap::new();
    for &t in transports {
        // The AM path: the separate puts are then acknowledged one by one, like the
        // multicast's members (on the direct path a put to this node is a memcpy).
        let (per_node, env): (usize, Vec<(&str, &str)>) = match t {
            "shm" => (ranks, vec![("VOLLEY_RMA", "am")]),
            net => (1, vec![("VOLLEY_NET", net), ("VOLLEY_RMA", "am")]),
        };
        match rank_job::<JobResult>(EXPERIMENT.name, ranks, per_node, &env, &args) {
            Ok(mut r) => {
                if o.corrupt {
                    r.acks += 1;
                }
                failures.extend(r.failures.iter().map(|f| format!("{t}: {f}")));
                if r.acks != r.updates || r.stray != 0 {
                    failures.push(format!(
                        "{t}: {} acks for {} updates, {} stray",
                        r.acks, r.updates, r.stray
                    ));
                }
                for f in &r.fifo {
                    let lossless = f.mode != "plain";
                    let bad = f.order_violations > 0
                        || f.duplicates > 0
                        || (lossless && (f.missing > 0 || f.delivered != f.sent))
                        || (!lossless && f.delivered + f.cancelled != f.sent);
                    if bad {
                        failures.push(format!("{t}: fifo {}: {f:?}", f.mode));
                    }
                }
                let ok = depth_grows(&r);
                // Gating only at full size: the quick run's few updates on a shared machine
                // are too noisy to judge a shape by.
                if !ok && !o.quick {
                    failures.push(format!(
                        "{t}: latency did not grow with depth rather than fan-out"
                    ));
                }
                depth_ok.insert(t.to_string(), ok);
                jobs.insert(t.to_string(), r);
            }
            Err(e) => failures.push(format!("{t}: {e}")),
        }
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        iterations: iters,
        entries,
        jobs,
        depth_not_fanout: depth_ok,
        seed: "no figures: the seed states E11's shape (one ack per update, latency by tree \
               depth) and E9's claim (per-sender order, no loss) without measuring them",
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

/// At the largest fan-out the chain (deepest) is slower than the flat tree (depth 2). (How
/// far the flat tree's latency stays from a one-member update's is reported, not judged: on a
/// machine with more ranks than cores it is mostly the scheduler's.)
fn depth_grows(r: &JobResult) -> bool {
    let fmax = r.ranks - 1;
    let at = |shape: &str, f: usize| {
        r.rows
            .iter()
            .find(|x| x.shape == shape && x.fanout == f)
            .map(|x| x.ns)
    };
    match (at("chain", fmax), at("flat", fmax)) {
        (Some(chain), Some(flat)) if fmax >= 3 => chain > flat,
        _ => false,
    }
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed 002 E11: one multicast UPDATE of 8 B from rank 0 to ranks 1..=f (µs, median of \
         reps of {} updates); one ack per update",
        r.iterations
    );
    for (tr, j) in &r.jobs {
        let _ = writeln!(t, "\n{tr} ({} ranks):", j.ranks);
        let _ = write!(t, "  {:<26}", "shape \\ fan-out");
        for f in 1..j.ranks {
            let _ = write!(t, " {f:>8}");
        }
        let _ = writeln!(t);
        for shape in ["chain", "binary", "flat", "puts"] {
            let _ = write!(t, "  {:<26}", shape_label(shape));
            for f in 1..j.ranks {
                let cell = j
                    .rows
                    .iter()
                    .find(|x| x.shape == shape && x.fanout == f)
                    .map_or("-".to_string(), |x| {
                        if shape == "puts" {
                            format!("{:.2}", x.ns / 1000.0)
                        } else {
                            format!("{:.2}/d{}", x.ns / 1000.0, x.depth)
                        }
                    });
                let _ = write!(t, " {cell:>8}");
            }
            let _ = writeln!(t);
        }
        let _ = writeln!(
            t,
            "  acks at rank 0: {} for {} updates ({} stray); latency grows with depth, not \
             fan-out: {}",
            j.acks,
            j.updates,
            j.stray,
            if r.depth_not_fanout.get(tr) == Some(&true) {
                "yes"
            } else {
                "no"
            }
        );
        let _ = writeln!(
            t,
            "\n  seed 002 E9: {} senders x {} entries into a FIFO of {FIFO_CAPACITY}",
            j.ranks - 1,
            r.entries
        );
        let _ = writeln!(
            t,
            "  {:<7} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>9} {:>6} {:>5} {:>7} {:>8}",
            "mode",
            "sent",
            "delivered",
            "returned",
            "stops",
            "restarts",
            "retried",
            "cancelled",
            "order",
            "dups",
            "missing",
            "ms"
        );
        for f in &j.fifo {
            let _ = writeln!(
                t,
                "  {:<7} {:>9} {:>9} {:>9} {:>6} {:>8} {:>8} {:>9} {:>6} {:>5} {:>7} {:>8.1}",
                f.mode,
                f.sent,
                f.delivered,
                f.returned,
                f.stops,
                f.restarts,
                f.retried,
                f.cancelled,
                f.order_violations,
                f.duplicates,
                f.missing,
                f.ms
            );
        }
    }
    let _ = writeln!(t, "\nthe seed: {}", r.seed);
    t.push_str(&super::verdict(
        r.verified,
        "one ack per update, every member delivered exactly once, latency by depth; NORMAL and \
         RETRY lossless and in order, plain's losses accounted",
        &r.failures,
    ));
    t
}

fn shape_label(shape: &str) -> &'static str {
    match shape {
        "chain" => "chain (arity 1) µs/depth",
        "binary" => "binary (arity 2) µs/depth",
        "flat" => "flat (arity f) µs/depth",
        _ => "f separate puts (AM) µs",
    }
}

// ---------------------------------------------------------------------------------------------
// One rank of the job.
// ---------------------------------------------------------------------------------------------

/// Segment layout (the same at every rank).
const SLOT_AT: usize = 0;
const STOP_AT: usize = 64;
const COUNT_AT: usize = 128;
/// Rank 0's counters: per mode, senders done and the senders' summed counts.
const DONE_AT: usize = 1024;
const FIFO_AT: usize = 4096;
const FIFO_ROOM: usize = 1024;
const MAILBOX_AT: usize = FIFO_AT + 3 * FIFO_ROOM;
const SEG: usize = MAILBOX_AT + 3 * 64;

/// The configurations of (a): (fan-out, shape, arity).
fn configs(ranks: usize) -> Vec<(usize, &'static str, usize)> {
    let mut v = Vec::new();
    for f in 1..ranks {
        v.push((f, "chain", 1));
        v.push((f, "binary", 2));
        v.push((f, "flat", f));
        v.push((f, "puts", 0));
    }
    v
}

fn rank(a: &RankArgs) -> Result<(), String> {
    let arg = |i: usize| a.args.get(i).cloned().unwrap_or_default();
    let iters: u64 = arg(0).parse().map_err(|_| "iterations")?;
    let reps: usize = arg(1).parse().map_err(|_| "reps")?;
    let entries: u64 = arg(2).parse().map_err(|_| "entries")?;
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let mc = Multicast::register(&mut b, &setup);
    let rt = b.build().map_err(|e| e.to_string())?;
    let rma = setup.attach(&rt);
    let mc = mc.attach(&rt);
    let (me, size) = (rt.rank(), rt.size());
    if size < 2 {
        return Err("runs on 2 ranks or more".into());
    }
    let e = |e: volley::rma::Error| e.to_string();
    let seg = rma.alloc_symmetric(SEG, Perms::ALL).map_err(e)?;
    let mine = seg.on(me);
    let own = rma.own_segments();
    let load = |off: usize| own.atomic(mine, off, AtomicOp::Load, 0, 0).unwrap_or(0);
    rt.barrier();

    // ---- (a) E11 ------------------------------------------------------------------------------
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    let warm = iters / 10 + 1;
    let mut updates = 0u64;
    let mut listed = vec![0u64; size];
    if me == 0 {
        for (f, shape, arity) in configs(size) {
            let list: Vec<usize> = (1..=f).collect();
            let mut v = Vec::new();
            for _ in 0..reps {
                let mut t0 = Instant::now();
                for i in 0..iters + warm {
                    if i == warm {
                        t0 = Instant::now();
                    }
                    let data = (updates + i).to_le_bytes();
                    if shape == "puts" {
                        for &r in &list {
                            rma.put(seg.on(r), SLOT_AT, &data).map_err(e)?;
                        }
                    } else {
                        mc.update(&list, mine, SLOT_AT, &data, arity).map_err(e)?;
                    }
                }
                v.push(t0.elapsed().as_nanos() as f64 / iters as f64);
                if shape != "puts" {
                    updates += iters + warm;
                    for &r in &list {
                        listed[r] += iters + warm;
                    }
                }
            }
            rows.push(Row {
                fanout: f,
                shape: shape.into(),
                arity,
                depth: if shape == "puts" {
                    1
                } else {
                    tree::depth(f, arity)
                },
                ns: median(&mut v),
            });
        }
        let all: Vec<usize> = (1..size).collect();
        mc.update(&all, mine, STOP_AT, &1u64.to_le_bytes(), 2)
            .map_err(e)?;
        updates += 1;
    } else {
        mc.serve_until(|| load(STOP_AT) == 1 && !mc.busy())
            .map_err(e)?;
        // Report the deliveries to rank 0.
        let n = mc.counts().delivered;
        rma.put(seg.on(0), COUNT_AT + me * 8, &n.to_le_bytes())
            .map_err(e)?;
    }
    rt.barrier();
    if me == 0 {
        for (r, &want) in listed.iter().enumerate().skip(1) {
            let got = load(COUNT_AT + r * 8);
            // The stop marker listed every member once more.
            if got != want + 1 {
                failures.push(format!(
                    "rank {r} was delivered {got} updates, {} listed it",
                    want + 1
                ));
            }
        }
    }

    // ---- (b) E9 -------------------------------------------------------------------------------
    let mut fifos = Vec::new();
    if me == 0 {
        for m in 0..MODES.len() {
            let f = rma
                .fifo_create(mine, FIFO_AT + m * FIFO_ROOM, ENTRY, FIFO_CAPACITY)
                .map_err(e)?;
            let words: Vec<u8> = f.to_words().iter().flat_map(|w| w.to_le_bytes()).collect();
            for r in 0..size {
                rma.put(seg.on(r), MAILBOX_AT + m * 64, &words).map_err(e)?;
            }
        }
    }
    rt.barrier();
    for m in 0..MODES.len() {
        let mut w = [0u8; 40];
        rma.read_local(mine, MAILBOX_AT + m * 64, &mut w)
            .map_err(e)?;
        fifos.push(FifoRef::from_words(std::array::from_fn(|i| {
            u64::from_le_bytes(w[i * 8..i * 8 + 8].try_into().expect("8"))
        })));
    }
    let mut fifo_rows = Vec::new();
    for (m, mode) in MODES.iter().enumerate() {
        let counters = DONE_AT + m * 64;
        let t0 = Instant::now();
        if me == 0 {
            fifo_rows.push(consume(&rt, &rma, fifos[m], mode, size, entries, || {
                load(counters) == size as u64 - 1
            })?);
            let row = fifo_rows.last_mut().expect("pushed");
            row.ms = t0.elapsed().as_secs_f64() * 1000.0;
            row.returned = load(counters + 8);
            row.stops = load(counters + 16);
            row.retried = load(counters + 24);
            row.cancelled = load(counters + 32);
            row.sent = entries * (size as u64 - 1);
            if mode != &"plain" {
                row.missing = row.sent.saturating_sub(row.delivered);
            }
        } else {
            let [returned, stops, retried, cancelled] =
                produce(&rt, &rma, fifos[m], mode, me, entries)?;
            let root = seg.on(0);
            for (i, v) in [returned, stops, retried, cancelled].iter().enumerate() {
                rma.fetch_add(root, counters + 8 + i * 8, *v).map_err(e)?;
            }
            rma.fetch_add(root, counters, 1).map_err(e)?;
        }
        rt.barrier();
    }

    let c = mc.counts();
    if me == 0 {
        let r = JobResult {
            ranks: size,
            rows,
            fifo: fifo_rows,
            updates,
            acks: c.acks,
            stray: c.stray,
            failures,
        };
        write_result(&a.out, &r)?;
    } else if c.stray != 0 {
        return Err(format!("{} stray acks at rank {me}", c.stray));
    }
    rt.barrier();
    Ok(())
}

fn entry(sender: usize, seq: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..8].copy_from_slice(&(sender as u64).to_le_bytes());
    e[8..].copy_from_slice(&seq.to_le_bytes());
    e
}

/// A sender of (b): returns (returned, stops, retried, cancelled).
fn produce(
    rt: &Runtime,
    rma: &Rma<'_>,
    fifo: FifoRef,
    mode: &str,
    me: usize,
    entries: u64,
) -> Result<[u64; 4], String> {
    let e = |e: volley::rma::Error| e.to_string();
    let (mut retried, mut cancelled) = (0u64, 0u64);
    match mode {
        "normal" => {
            let mut tx = FifoSender::new(fifo);
            let mut seq = 0;
            while seq < entries || tx.held() > 0 {
                tx.resend(rma).map_err(e)?;
                if seq < entries {
                    tx.send(rma, &entry(me, seq)).map_err(e)?;
                    seq += 1;
                } else if rt.poll() == 0 {
                    std::thread::yield_now();
                }
            }
            return Ok([tx.returned(), tx.stops(), 0, 0]);
        }
        "retry" => {
            // `fifo_enqueue_retry`'s loop, counted.
            for seq in 0..entries {
                let mut spins = 0u32;
                while rma.fifo_enqueue(fifo, &entry(me, seq)).map_err(e)? != FifoStatus::Stored {
                    retried += 1;
                    spins = spins.wrapping_add(1);
                    if rt.poll() == 0 && spins % 64 == 0 {
                        std::thread::yield_now();
                    }
                }
            }
        }
        _ => {
            for seq in 0..entries {
                if rma.fifo_enqueue(fifo, &entry(me, seq)).map_err(e)? == FifoStatus::Full {
                    cancelled += 1;
                }
            }
        }
    }
    Ok([0, 0, retried, cancelled])
}

/// Rank 0's side of (b): dequeues one entry per turn until every sender is done and the FIFO
/// is empty, checking each sender's order.
fn consume(
    rt: &Runtime,
    rma: &Rma<'_>,
    fifo: FifoRef,
    mode: &str,
    size: usize,
    entries: u64,
    senders_done: impl Fn() -> bool,
) -> Result<FifoRow, String> {
    let e = |e: volley::rma::Error| e.to_string();
    let mut row = FifoRow {
        mode: mode.into(),
        ..FifoRow::default()
    };
    let mut next = vec![0u64; size];
    let mut seen = vec![vec![false; entries as usize]; size];
    let mut take = |buf: &[u8; ENTRY], row: &mut FifoRow| -> Result<(), String> {
        let s = u64::from_le_bytes(buf[..8].try_into().expect("8")) as usize;
        let q = u64::from_le_bytes(buf[8..].try_into().expect("8"));
        if s == 0 || s >= size || q >= entries {
            return Err(format!("a foreign entry ({s}, {q})"));
        }
        row.duplicates += seen[s][q as usize] as u64;
        seen[s][q as usize] = true;
        row.order_violations += (q < next[s]) as u64;
        next[s] = next[s].max(q + 1);
        row.delivered += 1;
        Ok(())
    };
    let mut buf = [0u8; ENTRY];
    loop {
        // A slow consumer, so that the senders' bursts overflow the FIFO: it gives up the CPU
        // every turn (with more ranks than cores the senders then run).
        std::thread::yield_now();
        rt.poll();
        if rma.fifo_dequeue(fifo, &mut buf).map_err(e)? {
            take(&buf, &mut row)?;
            continue;
        }
        if mode == "normal" && rma.fifo_restart(fifo).map_err(e)? {
            row.restarts += 1;
            continue;
        }
        if senders_done() {
            // Their last enqueues completed before they said so: one more look settles it.
            if rma.fifo_dequeue(fifo, &mut buf).map_err(e)? {
                take(&buf, &mut row)?;
                continue;
            }
            break;
        }
    }
    Ok(row)
}
