//! `seed002-combined`: throughput of one-sided writes sent one command per packet against
//! the same writes combined into packets of up to `PER_PACKET` commands (seed 002 §4.4's
//! combined packets), by payload, over shared memory and the network.
//!
//! Rank 0 streams `n` writes of `size` bytes to rank 1, each at slot `i % SLOTS` of a window,
//! with an EMB colour (so the target acknowledges every packet: the same options both ways),
//! and waits on the colour at the end. Then it reads the window back: every slot must hold the
//! last write sent to it. The seed's figures beside are its single-WRITE streams (Tables 6.2
//! and 6.9, acks checked every 16 packets); the seed gives no figure for combined packets.

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median;
use crate::bench::sweep::memcpy_mb_per_s;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Instant;
use volley::rma::{CmdOptions, Command, Perms, Rma};
use volley::Runtime;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed002-combined",
    about: "seed 002 §4.4: throughput of combined packets against single commands by payload (shm, udp, tcp)",
    run,
    rank: Some(rank),
};

/// Commands combined into one packet (fewer when they do not fit one packet).
const PER_PACKET: usize = 32;
/// Distinct slots the writes cycle over.
const SLOTS: usize = 64;
const MAX_SIZE: usize = 1024;
/// The seed's single-WRITE stream rates (MB/s) at 4, 16, 64, 256, 1024 bytes.
const SEED_SIZES: [usize; 5] = [4, 16, 64, 256, 1024];
const SEED_100BASE_TX: [f64; 5] = [0.34, 1.27, 4.82, 9.63, 11.64];
const SEED_1000BASE_SX: [f64; 5] = [2.29, 5.67, 22.30, 55.41, 78.22];

/// One transport's figures: mode ("single", "combined") → size → commands/s.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobResult {
    cmds_per_s: BTreeMap<String, BTreeMap<usize, f64>>,
    /// Commands per combined packet, by size.
    per_packet: BTreeMap<usize, usize>,
    /// memcpy of the same bytes in the same run, MB/s by size.
    memcpy_floor_mb_s: BTreeMap<usize, f64>,
    /// Checks that failed (the job goes on: a rank that left would strand the other).
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    /// A quick run verifies the data only.
    quick: bool,
    failures: Vec<String>,
    sizes: Vec<usize>,
    commands: u64,
    /// transport → mode → size → commands/s.
    cmds_per_s: BTreeMap<String, BTreeMap<String, BTreeMap<usize, f64>>>,
    /// transport → mode → size → MB/s of payload.
    mb_per_s: BTreeMap<String, BTreeMap<String, BTreeMap<usize, f64>>>,
    /// transport → size → combined / single.
    speedup: BTreeMap<String, BTreeMap<usize, f64>>,
    per_packet: BTreeMap<usize, usize>,
    memcpy_floor_mb_s: BTreeMap<String, BTreeMap<usize, f64>>,
    /// Whether combined beats single at the smallest size, per transport.
    combined_wins_small: BTreeMap<String, bool>,
    seed_single_write_mb_s: BTreeMap<&'static str, BTreeMap<usize, f64>>,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let (sizes, n, transports): (Vec<usize>, u64, &[&str]) = if o.quick {
        (vec![8, 1024], 2048, &["shm", "udp"])
    } else {
        (SEED_SIZES.to_vec(), 32768, &["shm", "udp", "tcp"])
    };
    let sizes_arg = sizes
        .iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join(",");
    let args = vec![
        n.to_string(),
        o.reps.to_string(),
        sizes_arg,
        (o.corrupt as u8).to_string(),
    ];
    let mut failures = Vec::new();
    let mut cmds = BTreeMap::new();
    let mut floors = BTreeMap::new();
    let mut per_packet = BTreeMap::new();
    for &t in transports {
        let (per_node, env): (usize, Vec<(&str, &str)>) = match t {
            "shm" => (2, vec![]),
            net => (1, vec![("VOLLEY_NET", net)]),
        };
        match rank_job::<JobResult>(EXPERIMENT.name, 2, per_node, &env, &args) {
            Ok(r) => {
                failures.extend(r.failures.iter().map(|f| format!("{t}: {f}")));
                cmds.insert(t.to_string(), r.cmds_per_s);
                floors.insert(t.to_string(), r.memcpy_floor_mb_s);
                per_packet = r.per_packet;
            }
            Err(e) => failures.push(format!("{t}: {e}")),
        }
    }
    let mut mb = BTreeMap::new();
    let mut speedup = BTreeMap::new();
    let mut wins = BTreeMap::new();
    for (t, modes) in &cmds {
        let rate = |m: &str, s: usize| modes.get(m).and_then(|r| r.get(&s)).copied();
        mb.insert(
            t.clone(),
            modes
                .iter()
                .map(|(m, r)| {
                    let row = r.iter().map(|(&s, &c)| (s, c * s as f64 / 1e6)).collect();
                    (m.clone(), row)
                })
                .collect(),
        );
        let sp: BTreeMap<usize, f64> = sizes
            .iter()
            .filter_map(|&s| Some((s, rate("combined", s)? / rate("single", s)?)))
            .collect();
        let win = sp.get(&sizes[0]).is_some_and(|&x| x > 1.0);
        // A quick run is too short to time on a shared machine: it checks the data only and
        // reports the ordering.
        if !win && !o.quick {
            failures.push(format!(
                "{t}: combined does not beat single at {} B",
                sizes[0]
            ));
        }
        wins.insert(t.clone(), win);
        speedup.insert(t.clone(), sp);
    }
    let seed = |v: [f64; 5]| SEED_SIZES.iter().copied().zip(v).collect();
    let report = Report {
        verified: failures.is_empty(),
        quick: o.quick,
        failures,
        sizes,
        commands: n,
        cmds_per_s: cmds,
        mb_per_s: mb,
        speedup,
        per_packet,
        memcpy_floor_mb_s: floors,
        combined_wins_small: wins,
        seed_single_write_mb_s: BTreeMap::from([
            ("ss20_100base_tx", seed(SEED_100BASE_TX)),
            ("ultra60_1000base_sx", seed(SEED_1000BASE_SX)),
        ]),
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
        "seed 002 §4.4: {} writes rank 0 -> rank 1 with an EMB colour, single vs combined \
         packets, median of reps",
        r.commands
    );
    for (tr, modes) in &r.cmds_per_s {
        let _ = writeln!(t, "\n{tr}:");
        let _ = writeln!(
            t,
            "  {:>6} {:>6} {:>12} {:>12} {:>9} {:>9} {:>8} {:>11}",
            "bytes", "k", "single/s", "combined/s", "single", "combined", "x", "memcpy"
        );
        for &s in &r.sizes {
            let c = |m: &str| {
                modes
                    .get(m)
                    .and_then(|x| x.get(&s))
                    .copied()
                    .unwrap_or(f64::NAN)
            };
            let m = |m: &str| c(m) * s as f64 / 1e6;
            let floor = r.memcpy_floor_mb_s.get(tr).and_then(|f| f.get(&s)).copied();
            let _ = writeln!(
                t,
                "  {s:>6} {:>6} {:>12.0} {:>12.0} {:>6.2}MB/s {:>6.2}MB/s {:>7.2} {:>8.0}MB/s",
                r.per_packet.get(&s).copied().unwrap_or(0),
                c("single"),
                c("combined"),
                m("single"),
                m("combined"),
                c("combined") / c("single"),
                floor.unwrap_or(f64::NAN)
            );
        }
    }
    let _ = writeln!(
        t,
        "\nthe seed's single-WRITE streams (MB/s at 4 / 16 / 64 / 256 / 1024 B; no combined figure):"
    );
    for (name, v) in [
        ("SS20 100BASE-TX", SEED_100BASE_TX),
        ("Ultra 60 1000BASE-SX", SEED_1000BASE_SX),
    ] {
        let row: Vec<String> = v.iter().map(|x| format!("{x:>6.2}")).collect();
        let _ = writeln!(t, "  {name:<22} {}", row.join(" "));
    }
    t.push_str(&super::verdict(
        r.verified,
        if r.quick {
            "every slot held its last write (a quick run does not require combined to win)"
        } else {
            "every slot held its last write; combined beat single at the smallest size"
        },
        &r.failures,
    ));
    t
}

// ---------------------------------------------------------------------------------------------
// One rank of the job.
// ---------------------------------------------------------------------------------------------

fn pattern(i: u64, size: usize, buf: &mut [u8]) {
    for (k, b) in buf[..size].iter_mut().enumerate() {
        *b = (i as usize * 131 + k * 7 + 1) as u8;
    }
    let n = size.min(8);
    buf[..n].copy_from_slice(&i.to_le_bytes()[..n]);
}

fn rank(a: &RankArgs) -> Result<(), String> {
    let arg = |i: usize| a.args.get(i).cloned().unwrap_or_default();
    let n: u64 = arg(0).parse().map_err(|_| "commands")?;
    let reps: usize = arg(1).parse().map_err(|_| "reps")?;
    let sizes: Vec<usize> = arg(2)
        .split(',')
        .map(|s| s.parse().map_err(|_| format!("size {s:?}")))
        .collect::<Result<_, _>>()?;
    let corrupt = arg(3) == "1";
    if sizes.iter().any(|&s| s > MAX_SIZE || s == 0) {
        return Err(format!("sizes are 1..={MAX_SIZE}"));
    }
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = b.build().map_err(|e| e.to_string())?;
    let rma = setup.attach(&rt);
    if rt.size() != 2 {
        return Err("runs on 2 ranks".into());
    }
    let seg = rma
        .alloc_symmetric(SLOTS * MAX_SIZE, Perms::ALL)
        .map_err(|e| e.to_string())?;
    let target = seg.on(1);
    let opts = CmdOptions {
        colour: Some(0),
        ..Default::default()
    };
    let mut result = JobResult {
        cmds_per_s: BTreeMap::new(),
        per_packet: BTreeMap::new(),
        memcpy_floor_mb_s: BTreeMap::new(),
        failures: Vec::new(),
    };
    let mut data = vec![vec![0u8; MAX_SIZE]; SLOTS];
    for &size in &sizes {
        let k = fit(&rma, size);
        result.per_packet.insert(size, k);
        for mode in ["single", "combined"] {
            let mut v = Vec::new();
            for rep in 0..reps {
                rt.barrier();
                if rt.rank() == 0 {
                    let t0 = Instant::now();
                    let mut i = 0u64;
                    while i < n {
                        let m = if mode == "single" {
                            1
                        } else {
                            (k as u64).min(n - i) as usize
                        };
                        for j in 0..m {
                            pattern(i + j as u64, size, &mut data[(i as usize + j) % SLOTS]);
                        }
                        if m == 1 {
                            let slot = i as usize % SLOTS;
                            rma.put_with(target, slot * size, &data[slot][..size], opts)
                                .map_err(|e| e.to_string())?;
                        } else {
                            let mut c = rma.combined(1);
                            for j in 0..m {
                                let slot = (i as usize + j) % SLOTS;
                                c.push(Command::Put {
                                    target,
                                    offset: slot * size,
                                    data: &data[slot][..size],
                                });
                            }
                            let p = c.finish().map_err(|e| e.to_string())?;
                            rma.submit(&p, opts).map_err(|e| e.to_string())?;
                        }
                        i += m as u64;
                    }
                    rma.emb_wait(0).map_err(|e| e.to_string())?;
                    v.push(n as f64 / t0.elapsed().as_secs_f64());
                    if let Err(e) = check(&rma, target, n, size, corrupt && rep == 0) {
                        result.failures.push(format!("{mode} {size} B: {e}"));
                    }
                }
            }
            if rt.rank() == 0 {
                result
                    .cmds_per_s
                    .entry(mode.to_string())
                    .or_default()
                    .insert(size, median(&mut v));
            }
        }
        if rt.rank() == 0 {
            result
                .memcpy_floor_mb_s
                .insert(size, memcpy_mb_per_s(size, n));
        }
    }
    if rt.rank() == 0 {
        write_result(&a.out, &result)?;
    }
    rt.barrier();
    Ok(())
}

/// Commands of `size` bytes per combined packet: `PER_PACKET`, or as many as fit.
fn fit(rma: &Rma<'_>, size: usize) -> usize {
    let per = 48 + size.div_ceil(8) * 8;
    let room = rma.combined(1).max_bytes();
    PER_PACKET.min(room / per).max(1)
}

/// Reads the window back: every slot must hold the last write sent to it.
fn check(
    rma: &Rma<'_>,
    target: volley::rma::SegmentRef,
    n: u64,
    size: usize,
    corrupt: bool,
) -> Result<(), String> {
    let mut back = vec![0u8; SLOTS * size];
    rma.get(target, 0, &mut back).map_err(|e| e.to_string())?;
    if corrupt {
        back[0] ^= 1;
    }
    let mut want = vec![0u8; size];
    for slot in 0..SLOTS.min(n as usize) {
        let last = (n - 1) - ((n - 1) as usize + SLOTS - slot) as u64 % SLOTS as u64;
        pattern(last, size, &mut want);
        if back[slot * size..(slot + 1) * size] != want[..] {
            return Err(format!("slot {slot} does not hold write {last}"));
        }
    }
    Ok(())
}
