//! `seed002-agents`: what seed 002's protection and addressing options cost (issue 32): an
//! 8-byte put through an agent's window beside the same put on the segment (the floor: a
//! window is a table entry like a segment's, so the two should match), a fetch-add by logical
//! task beside the same fetch-add on the segment through the target's handlers (the floor:
//! the task layer adds a table lookup), and the time of one migration of a 64 KiB task
//! between the two ranks. Rank 1 owns everything; rank 0 measures.
//!
//! Verified when the correctness checks pass: a put with a wrong agent key and one past the
//! window are refused and counted at the target, and the task's counter holds exactly the
//! adds made, across every migration (an add lost or doubled breaks it).

use super::{rank_job, write_result, Experiment, Options, Outcome, RankArgs};
use crate::bench::median;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use volley::rma::{AgentRef, Perms, Rma, SegmentRef, Window};
use volley::Runtime;
use volley_task::Tasks;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed002-agents",
    about: "seed 002 req. 1/5/9: put through an agent window, fetch-add by logical task, migration (shm, udp, tcp)",
    run,
    rank: Some(rank),
};

const TASK: u64 = 1;
const TASK_BYTES: usize = 64 << 10;
const SEG_BYTES: usize = 4096;

/// What one job measured: figure → ns (medians over reps).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct JobResult {
    ns: BTreeMap<String, f64>,
    failures: Vec<String>,
}

#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    failures: Vec<String>,
    iterations: u64,
    /// place → figure → ns.
    ns: BTreeMap<String, BTreeMap<String, f64>>,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let (iters, places): (u64, &[&str]) = if o.quick {
        (200, &["shm-direct", "udp"])
    } else {
        (5000, &["shm-direct", "shm-am", "udp", "tcp"])
    };
    let args = vec![
        iters.to_string(),
        o.reps.to_string(),
        u8::from(o.corrupt).to_string(),
    ];
    let mut failures = Vec::new();
    let mut ns = BTreeMap::new();
    for &p in places {
        let (per_node, env): (usize, Vec<(&str, &str)>) = match p {
            "shm-direct" => (2, vec![("VOLLEY_RMA", "direct")]),
            "shm-am" => (2, vec![("VOLLEY_RMA", "am")]),
            net => (1, vec![("VOLLEY_NET", net)]),
        };
        match rank_job::<JobResult>(EXPERIMENT.name, 2, per_node, &env, &args) {
            Ok(r) => {
                failures.extend(r.failures.iter().map(|f| format!("{p}: {f}")));
                ns.insert(p.to_string(), r.ns);
            }
            Err(e) => failures.push(format!("{p}: {e}")),
        }
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        iterations: iters,
        ns,
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
        "seed 002 agents and logical tasks: 2 ranks, medians (ns); floors beside each figure"
    );
    let _ = writeln!(
        t,
        "{:<12} {:>12} {:>12} {:>14} {:>14} {:>12}",
        "place", "put8 seg", "put8 window", "fadd seg (AM)", "fadd by task", "migrate"
    );
    for (p, f) in &r.ns {
        let g = |k: &str| f.get(k).copied().unwrap_or(f64::NAN);
        let _ = writeln!(
            t,
            "{:<12} {:>12.0} {:>12.0} {:>14.0} {:>14.0} {:>12.0}",
            p,
            g("put8_segment"),
            g("put8_window"),
            g("fetch_add_segment_handlers"),
            g("fetch_add_task"),
            g("migrate_64k")
        );
    }
    t.push_str(&super::verdict(
        r.verified,
        "refusals counted, no add lost across migrations",
        &r.failures,
    ));
    t
}

fn rank(a: &RankArgs) -> Result<(), String> {
    let arg = |i: usize| a.args.get(i).cloned().unwrap_or_default();
    let iters: u64 = arg(0).parse().map_err(|_| "iterations")?;
    let reps: usize = arg(1).parse().map_err(|_| "reps")?;
    let corrupt = arg(2) == "1";
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let tasks = Tasks::register(&mut b);
    let got: Arc<Mutex<Option<Vec<u64>>>> = Arc::default();
    let g = got.clone();
    let handles = b.request_handler("experiment.agents.handles", move |m, _| {
        let w = m
            .payload()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
            .collect();
        *g.lock().unwrap_or_else(|e| e.into_inner()) = Some(w);
    });
    let rt = b.build().map_err(|e| e.to_string())?;
    let rma = setup.attach(&rt);
    let tasks = tasks.attach(&rt, &rma);
    let (me, size) = (rt.rank(), rt.size());
    if size != 2 {
        return Err("runs on 2 ranks".into());
    }
    let err = |e: &dyn std::fmt::Display| e.to_string();
    let mut failures = Vec::new();
    let mut ns = BTreeMap::new();
    if me == 1 {
        let seg = rma.alloc(SEG_BYTES, Perms::ALL).map_err(|e| err(&e))?;
        let agent = rma
            .agent_create(&[Window {
                segment: seg.handle(),
                offset: 1024,
                len: 1024,
                perms: Perms::ALL,
            }])
            .map_err(|e| err(&e))?;
        tasks
            .create(TASK, &[(TASK_BYTES, Perms::ALL)])
            .map_err(|e| err(&e))?;
        let mut w = seg.handle().to_words().to_vec();
        w.extend(agent.handle().to_words());
        let bytes: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        rt.request_medium(0, handles, &[], &bytes)
            .map_err(|e| err(&e))?;
    } else {
        rt.wait_until(|| got.lock().unwrap_or_else(|e| e.into_inner()).is_some());
    }
    rt.barrier();
    let mut adds = 0u64;
    if me == 0 {
        let w = got
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
            .unwrap_or_default();
        let seg = SegmentRef::from_words([w[0], w[1], w[2]]);
        let agent = AgentRef::from_words(&w[3..]).ok_or("agent words")?;
        let win = agent.window(0).map_err(|e| err(&e))?;
        let time = |f: &mut dyn FnMut() -> Result<(), String>| -> Result<f64, String> {
            // A warm-up: the first accesses fill caches and the network's windows.
            for _ in 0..iters.div_ceil(4) {
                f()?;
            }
            let mut v = Vec::with_capacity(reps);
            for _ in 0..reps {
                let t = Instant::now();
                for _ in 0..iters {
                    f()?;
                }
                v.push(t.elapsed().as_nanos() as f64 / iters as f64);
            }
            Ok(median(&mut v))
        };
        let word = 7u64.to_le_bytes();
        ns.insert(
            "put8_segment".into(),
            time(&mut || rma.put(seg, 1024, &word).map_err(|e| err(&e)))?,
        );
        ns.insert(
            "put8_window".into(),
            time(&mut || rma.put(win, 0, &word).map_err(|e| err(&e)))?,
        );
        ns.insert(
            "fetch_add_segment_handlers".into(),
            time(&mut || {
                rma.through_handlers(|| rma.fetch_add(seg, 8, 1))
                    .map(|_| ())
                    .map_err(|e| err(&e))
            })?,
        );
        ns.insert(
            "fetch_add_task".into(),
            time(&mut || {
                adds += 1;
                tasks
                    .fetch_add(TASK, 0, 0, 1)
                    .map(|_| ())
                    .map_err(|e| err(&e))
            })?,
        );
        // Refusals: a wrong agent key, and a put past the window (still inside the segment).
        let bad = agent.clone().with_key(agent.to_words()[1] ^ 1);
        let wrong = rma.put(bad.window(0).map_err(|e| err(&e))?, 0, &word);
        let past = rma.put(win, 1020, &word);
        if wrong.is_ok() || past.is_ok() {
            failures.push("an access outside the agent's windows was accepted".into());
        }
    }
    rt.barrier();
    // Migrations of the task between the ranks, an add by rank 0 after each.
    let mut moves = Vec::with_capacity(reps);
    for r in 0..reps.max(2) {
        let to = r % 2;
        let t = Instant::now();
        tasks.migrate(TASK, to).map_err(|e| err(&e))?;
        moves.push(t.elapsed().as_nanos() as f64);
        if me == 0 {
            tasks.fetch_add(TASK, 0, 0, 1).map_err(|e| err(&e))?;
            adds += 1;
        }
        rt.barrier();
    }
    if me == 0 {
        ns.insert("migrate_64k".into(), median(&mut moves));
        let mut c = [0u8; 8];
        tasks.get(TASK, 0, 0, &mut c).map_err(|e| err(&e))?;
        let want = adds + u64::from(corrupt);
        if u64::from_le_bytes(c) != want {
            failures.push(format!(
                "the task's counter is {}, after {want} adds",
                u64::from_le_bytes(c)
            ));
        }
    }
    rt.barrier();
    if me == 1 && rma.refused() != 2 {
        failures.push(format!(
            "{} refusals counted at the target, not 2",
            rma.refused()
        ));
    }
    let result = JobResult { ns, failures };
    if me == 1 && !result.failures.is_empty() {
        return Err(result.failures.join("; "));
    }
    if me == 0 {
        write_result(&a.out, &result)?;
    }
    rt.finalize();
    Ok(())
}
