//! `seed000-xfer`: seed 000's xfer benchmark (CMAM, §4.3.4 and Table 4-7): 16-byte `xfer_4i`
//! packets streamed into one segment against the same packets alternating between two
//! segments (seed: 10.0 against 7.4 MB/s: the xfer handler kept the segment's descriptor in
//! registers for back-to-back packets to one segment), a block `xfer`, and the cache effect of
//! sending from buffers that are not in the cache (requirement 33: +10 cycles per message at
//! the sender, nothing at the receiver), and `reply_xfer_4i` packets (seed: 9.8 MB/s; here each
//! is the reply to a request of the segment's owner, since volley's replies answer requests).
//!
//! Two ranks on one node: rank 0 sends, rank 1 opens the segments and sends their ids, and
//! answers once every end function has run. Every figure is the sender's, from its first send
//! to that answer. Verified: after each run rank 1 compares every byte of every segment with
//! what rank 0 sent, and counts the end functions (exactly one per segment); no packet may be
//! refused.

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median;
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;
use volley::xfer::{SegmentId, Xfer};
use volley::Runtime;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed000-xfer",
    about: "seed 000 CMAM xfer: 16-byte packets into 1 segment vs 2 alternating, block xfer, sending from out-of-cache buffers",
    run,
    rank: Some(rank),
};

/// The seed's figures (CM-5, Table 4-7): MB/s and µs per packet.
const SEED_ONE_SEGMENT_MBS: f64 = 10.0;
const SEED_TWO_SEGMENTS_MBS: f64 = 7.4;
const SEED_ONE_SEGMENT_US: f64 = 1.6;
const SEED_TWO_SEGMENTS_US: f64 = 2.2;
const SEED_XFER_N_REQUEST_MBS: f64 = 9.3;
const SEED_COLD_SEND_EXTRA_CYCLES: f64 = 10.0;
const SEED_XFER_4_REPLY_MBS: f64 = 9.8;
const SEED_XFER_4_REPLY_US: f64 = 1.6;

/// What rank 0 reports for one repetition (and, as medians, for the run).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Figures {
    /// `xfer_4i` packets into one segment: payload MB/s and ns per packet.
    one_segment_mbs: f64,
    one_segment_ns_per_packet: f64,
    /// The same packets alternating between two segments.
    two_segments_mbs: f64,
    two_segments_ns_per_packet: f64,
    /// Block `xfer` in the largest fragments: payload GB/s.
    block_gbps: f64,
    /// `xfer_4i` from a hot 16-byte source against sources strided through a buffer far
    /// larger than the caches: ns per packet at the sender, and the difference.
    hot_source_ns_per_packet: f64,
    cold_source_ns_per_packet: f64,
    cold_extra_ns: f64,
    /// `reply_xfer_4i` packets into one segment, each the reply to a request of the segment's
    /// owner: payload MB/s and ns per packet (timed by the owner).
    reply_4i_mbs: f64,
    reply_4i_ns_per_packet: f64,
}

/// The results.
#[derive(Debug, Serialize, Deserialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    figures: Figures,
    /// One segment's rate over two alternating segments' (seed: 10.0 / 7.4 = 1.35).
    one_over_two: f64,
    seed_one_over_two: f64,
    packets: u64,
    block_bytes: u64,
    reps: usize,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let args = vec![o.quick.to_string(), o.reps.to_string()];
    let mut report: Report = rank_job(EXPERIMENT.name, 2, 2, &[], &args)?;
    report.seed_one_over_two = SEED_ONE_SEGMENT_MBS / SEED_TWO_SEGMENTS_MBS;
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn table(r: &Report) -> String {
    let f = &r.figures;
    let mut t = String::new();
    let _ = writeln!(
        t,
        "seed 000 xfer on this machine, 2 ranks over shared memory ({} packets of 16 bytes, median of {})",
        r.packets, r.reps
    );
    let _ = writeln!(t, "  {:<40} {:>22}  {:>22}", "", "here", "seed (CM-5)");
    let mut row = |what: &str, here: String, seed: String| {
        let _ = writeln!(t, "  {what:<40} {here:>22}  {seed:>22}");
    };
    row(
        "xfer_4i into 1 segment",
        format!(
            "{:.1} MB/s, {:.1} ns",
            f.one_segment_mbs, f.one_segment_ns_per_packet
        ),
        format!("{SEED_ONE_SEGMENT_MBS} MB/s, {SEED_ONE_SEGMENT_US} us"),
    );
    row(
        "xfer_4i alternating 2 segments",
        format!(
            "{:.1} MB/s, {:.1} ns",
            f.two_segments_mbs, f.two_segments_ns_per_packet
        ),
        format!("{SEED_TWO_SEGMENTS_MBS} MB/s, {SEED_TWO_SEGMENTS_US} us"),
    );
    row(
        "1 segment / 2 segments",
        format!("{:.2}", r.one_over_two),
        format!("{:.2}", r.seed_one_over_two),
    );
    row(
        "reply_xfer_4i (each the reply to a request)",
        format!(
            "{:.1} MB/s, {:.1} ns",
            f.reply_4i_mbs, f.reply_4i_ns_per_packet
        ),
        format!("{SEED_XFER_4_REPLY_MBS} MB/s, {SEED_XFER_4_REPLY_US} us"),
    );
    row(
        "block xfer (64 KiB fragments)",
        format!("{:.2} GB/s", f.block_gbps),
        format!("{SEED_XFER_N_REQUEST_MBS} MB/s (16 B packets)"),
    );
    row(
        "send from a cold source, extra per packet",
        format!(
            "{:+.1} ns ({:.1} vs {:.1})",
            f.cold_extra_ns, f.cold_source_ns_per_packet, f.hot_source_ns_per_packet
        ),
        format!("+{SEED_COLD_SEND_EXTRA_CYCLES} cycles"),
    );
    let _ = writeln!(
        t,
        "  verified: {} (every byte of every segment, one end function per segment, no packet refused)",
        r.verified
    );
    for e in &r.failures {
        let _ = writeln!(t, "  FAILED: {e}");
    }
    t
}

/// The 16 bytes of packet `i`.
fn packet(i: u64) -> [u32; 4] {
    let m = i.wrapping_mul(0x9e37_79b9_7f4a_7c15);
    [
        i as u32,
        (i >> 32) as u32 ^ 0x5eed,
        m as u32,
        (m >> 32) as u32,
    ]
}

fn packet_bytes(i: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    for (j, w) in packet(i).iter().enumerate() {
        b[4 * j..4 * j + 4].copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// The block xfer's byte `i`.
fn block_byte(i: usize) -> u8 {
    (i as u8).wrapping_mul(131) ^ (i >> 11) as u8
}

/// How one run spreads its data: `xfer_4i` packets over one or two segments (packet `i` to
/// segment `i % segs` at `(i / segs) * 16`), or one block.
#[derive(Clone, Copy, PartialEq)]
enum Shape {
    Packets {
        segs: u64,
        cold: bool,
    },
    Block,
    /// `reply_xfer_4i` packets into one segment of rank 1, each the reply to a request rank 1
    /// sends (reply xfers are replies: one per request); timed by rank 1.
    Reply4,
}

/// State shared with the handlers.
#[derive(Default)]
struct Shared {
    /// Rank 0: the ids rank 1 sent, as bits (0: not yet), and its answers.
    ids: [AtomicU64; 2],
    answers: AtomicU64,
    /// Rank 0: the time rank 1 measured for a reply run, in ns.
    reply_ns: AtomicU64,
    /// Rank 1: segments whose end function ran, and their memory.
    ended: AtomicU64,
    memory: Mutex<Vec<(u64, Box<[u8]>)>>,
    /// Rank 0: runs rank 1 found wrong, once it has said (`verdicts`).
    failures: AtomicU64,
    verdicts: AtomicU64,
}

fn rank(a: &RankArgs) -> Result<(), String> {
    let quick = a.args.first().is_some_and(|s| s == "true");
    let reps: usize = a
        .args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(3)
        .max(1);
    let packets: u64 = if quick { 200_000 } else { 2_000_000 };
    let block_bytes: usize = if quick { 16 << 20 } else { 128 << 20 };
    let sh = Arc::new(Shared::default());
    let mut b = Runtime::builder();
    let xs = Xfer::register(&mut b);
    let ids = {
        let sh = sh.clone();
        b.request_handler("xfer-exp.ids", move |m, _| {
            sh.ids[0].store(m.arg(0), Ordering::Relaxed);
            sh.ids[1].store(m.arg(1), Ordering::Relaxed);
        })
    };
    let answer = {
        let sh = sh.clone();
        b.request_handler("xfer-exp.answer", move |m, _| {
            sh.reply_ns.store(m.arg(0), Ordering::Relaxed);
            sh.answers.fetch_add(1, Ordering::Relaxed);
        })
    };
    let verdict = {
        let sh = sh.clone();
        b.request_handler("xfer-exp.verdict", move |m, _| {
            sh.failures.fetch_add(m.arg(0), Ordering::Relaxed);
            sh.verdicts.fetch_add(1, Ordering::Relaxed);
        })
    };
    let replies = xs.replies();
    let give = b.request_handler("xfer-exp.give", move |m, token| {
        let (seg, i) = (SegmentId::from_bits(m.arg(0) as u32), m.arg(1));
        // A refusal would be counted at rank 1 and fail the run's check there.
        let _ = replies.reply_xfer_4i(token, seg, i * 16, packet(i));
    });
    let rt = b.build().map_err(|e| e.to_string())?;
    let x = xs.attach(&rt);
    if rt.size() != 2 {
        return Err("seed000-xfer runs on 2 ranks".into());
    }
    let mut failures = Vec::new();
    // The cold sources: each packet's 16 bytes at the start of a cache line of its own, the
    // lines visited in a scattered order (so that the prefetchers do not help) in a buffer
    // far larger than the caches; the other runs between its filling and its use evict it.
    let lines = (packets as usize).next_power_of_two() * 2;
    let line_of = |i: u64| (i.wrapping_mul(2_654_435_761) as usize) & (lines - 1);
    let cold: Vec<u8> = match rt.rank() {
        0 => {
            let mut v = vec![0u8; lines * 64];
            for i in 0..packets {
                let at = line_of(i) * 64;
                v[at..at + 16].copy_from_slice(&packet_bytes(i));
            }
            v
        }
        _ => Vec::new(),
    };
    let shapes = [
        Shape::Packets {
            segs: 1,
            cold: false,
        },
        Shape::Packets {
            segs: 2,
            cold: false,
        },
        Shape::Block,
        Shape::Packets {
            segs: 1,
            cold: true,
        },
        Shape::Reply4,
    ];
    let block: Vec<u8> = match rt.rank() {
        0 => (0..block_bytes).map(block_byte).collect(),
        _ => Vec::new(),
    };
    let mut runs: Vec<[f64; 5]> = Vec::new();
    for _ in 0..reps {
        let mut secs = [0.0; 5];
        for (k, &shape) in shapes.iter().enumerate() {
            rt.barrier();
            let answers_before = sh.answers.load(Ordering::Relaxed);
            if rt.rank() == 1 {
                let handlers = [ids, answer, give];
                let failed = receive(&rt, &x, &sh, shape, packets, block_bytes, handlers);
                if let Some(e) = failed {
                    failures.push(e);
                }
            } else if shape == Shape::Reply4 {
                // Rank 1 asks and times; this rank's handler replies with the packets.
                rt.wait_until(|| sh.answers.load(Ordering::Relaxed) > answers_before);
                secs[k] = sh.reply_ns.load(Ordering::Relaxed) as f64 / 1e9;
            } else {
                rt.wait_until(|| sh.ids[0].load(Ordering::Relaxed) != 0);
                let seg =
                    |s: usize| SegmentId::from_bits(sh.ids[s].swap(0, Ordering::Relaxed) as u32);
                let segs = [seg(0), seg(1)];
                let start = Instant::now();
                match shape {
                    Shape::Block => x.xfer(1, segs[0], 0, &block).map_err(|e| e.to_string())?,
                    Shape::Reply4 => unreachable!("timed by rank 1"),
                    Shape::Packets { segs: n, cold: c } => {
                        for i in 0..packets {
                            let s = segs[(i % n) as usize];
                            let offset = (i / n) * 16;
                            let d = match c {
                                false => packet(i),
                                true => {
                                    let at = line_of(i) * 64;
                                    let src = &cold[at..at + 16];
                                    let w = |j: usize| {
                                        let b: [u8; 4] = src[4 * j..4 * j + 4].try_into().unwrap();
                                        u32::from_le_bytes(b)
                                    };
                                    [w(0), w(1), w(2), w(3)]
                                }
                            };
                            x.xfer_4i(1, s, offset, d).map_err(|e| e.to_string())?;
                        }
                    }
                }
                rt.wait_until(|| sh.answers.load(Ordering::Relaxed) > answers_before);
                secs[k] = start.elapsed().as_secs_f64();
                if let Err(e) = x.check() {
                    failures.push(format!("a packet was refused: {e}"));
                }
            }
        }
        runs.push(secs);
    }
    if rt.rank() == 1 {
        rt.request_short(0, verdict, &[failures.len() as u64])
            .map_err(|e| e.to_string())?;
        for e in &failures {
            eprintln!("seed000-xfer: rank 1: {e}");
        }
    }
    if rt.rank() == 0 {
        rt.wait_until(|| sh.verdicts.load(Ordering::Relaxed) > 0);
        let remote = sh.failures.load(Ordering::Relaxed);
        if remote > 0 {
            failures.push(format!(
                "rank 1 found {remote} runs with wrong bytes or end functions"
            ));
        }
        let med = |k: usize| median(&mut runs.iter().map(|r| r[k]).collect::<Vec<_>>());
        let bytes = packets as f64 * 16.0;
        let (one, two, blk, cold_s, reply) = (med(0), med(1), med(2), med(3), med(4));
        let ns = |s: f64| s * 1e9 / packets as f64;
        let figures = Figures {
            one_segment_mbs: bytes / one / 1e6,
            one_segment_ns_per_packet: ns(one),
            two_segments_mbs: bytes / two / 1e6,
            two_segments_ns_per_packet: ns(two),
            block_gbps: block_bytes as f64 / blk / 1e9,
            hot_source_ns_per_packet: ns(one),
            cold_source_ns_per_packet: ns(cold_s),
            cold_extra_ns: ns(cold_s) - ns(one),
            reply_4i_mbs: bytes / reply / 1e6,
            reply_4i_ns_per_packet: ns(reply),
        };
        for (what, v) in [
            ("1 segment", one),
            ("2 segments", two),
            ("block", blk),
            ("reply xfer_4i", reply),
        ] {
            if !(v.is_finite() && v > 0.0) {
                failures.push(format!("{what}: no figure"));
            }
        }
        let report = Report {
            verified: failures.is_empty(),
            failures,
            one_over_two: figures.one_segment_mbs / figures.two_segments_mbs,
            seed_one_over_two: 0.0,
            figures,
            packets,
            block_bytes: block_bytes as u64,
            reps,
        };
        write_result(&a.out, &report)?;
    }
    rt.barrier();
    Ok(())
}

/// Rank 1's side of one run: opens the segments, sends their ids (`handlers[0]`), waits for
/// every end function and says so (`handlers[1]`: the sender's clock stops), then checks
/// every byte. `Some` names what was wrong.
fn receive(
    rt: &Runtime,
    x: &Xfer<'_>,
    sh: &Arc<Shared>,
    shape: Shape,
    packets: u64,
    block_bytes: usize,
    handlers: [volley::RequestHandler; 3],
) -> Option<String> {
    let [ids, answer, give] = handlers;
    let (segs, len) = match shape {
        Shape::Packets { segs, .. } => (segs, packets as usize / segs as usize * 16),
        Shape::Block => (1, block_bytes),
        Shape::Reply4 => (1, packets as usize * 16),
    };
    sh.ended.store(0, Ordering::Relaxed);
    let mut bits = [0u64; 2];
    for (s, b) in bits.iter_mut().enumerate().take(segs as usize) {
        let sh2 = sh.clone();
        // The segment is the program's memory, already in use: touch every page first, so
        // that the run measures the transfer, not the kernel's (and this VM's host's) first
        // faults on fresh pages.
        let mut memory = vec![0u8; len];
        for page in memory.chunks_mut(4096) {
            page[0] = 1;
        }
        let id = x.open_segment(memory.into(), len, move |memory| {
            sh2.memory
                .lock()
                .unwrap()
                .push((s as u64, std::mem::take(memory)));
            sh2.ended.fetch_add(1, Ordering::Relaxed);
            0
        });
        match id {
            Ok(id) => *b = id.to_bits() as u64,
            Err(e) => return Some(format!("open_segment: {e}")),
        }
    }
    let mut elapsed_ns = 0;
    if shape == Shape::Reply4 {
        let start = Instant::now();
        for i in 0..packets {
            if rt.request_short(0, give, &[bits[0], i]).is_err() {
                return Some("asking for reply packets".into());
            }
        }
        rt.wait_until(|| sh.ended.load(Ordering::Relaxed) >= segs);
        elapsed_ns = start.elapsed().as_nanos() as u64;
    } else if rt.request_short(0, ids, &bits).is_err() {
        return Some("sending the ids".into());
    }
    rt.wait_until(|| sh.ended.load(Ordering::Relaxed) >= segs);
    if rt.request_short(0, answer, &[elapsed_ns]).is_err() {
        return Some("answering".into());
    }
    // Any further end function would show up as an extra entry.
    rt.poll();
    let memory = std::mem::take(&mut *sh.memory.lock().unwrap());
    if memory.len() as u64 != segs || sh.ended.load(Ordering::Relaxed) != segs {
        return Some(format!(
            "{} end functions ran for {segs} segments",
            memory.len()
        ));
    }
    for (s, mem) in memory {
        let ok = match shape {
            Shape::Block => mem.iter().enumerate().all(|(i, &b)| b == block_byte(i)),
            Shape::Reply4 => mem
                .chunks(16)
                .enumerate()
                .all(|(j, c)| c == packet_bytes(j as u64)),
            Shape::Packets { segs: n, .. } => mem.chunks(16).enumerate().all(|(j, c)| {
                let i = j as u64 * n + s;
                c == packet_bytes(i)
            }),
        };
        if !ok {
            return Some(format!("segment {s} holds bytes that were not sent"));
        }
    }
    if x.stats().refused > 0 {
        return Some("packets were refused".into());
    }
    None
}
