//! The two ranks of `volley bench rma`, on one path per job. Rank 0 drives and records; rank 1
//! owns the target segment and polls (which the AM path needs and the direct path ignores).

use serde_json::json;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley::rma::{Perms, Rma, RmaPath};
use volley::Runtime;

const LATENCY_SIZES: [usize; 4] = [8, 64, 512, 4096];
const BANDWIDTH_SIZES: [usize; 5] = [4096, 65536, 1 << 20, 4 << 20, 16 << 20];
/// Where the atomic word lives, clear of the data area.
const WORD: usize = 16 << 20;

/// Runs one rank; rank 0 writes medians over `reps` repetitions to `out`.
pub fn run(out: &std::path::Path, path: RmaPath, scale: f64, reps: usize) -> Result<(), String> {
    let ends = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let e = ends.clone();
    let end = b.request_handler("bench.end", move |_, _| {
        e.fetch_add(1, Ordering::Relaxed);
    });
    let setup = Rma::register_with(&mut b, Ok(path));
    b.segment_bytes(WORD + 4096);
    let rt = b
        .build()
        .map_err(|e| format!("joining the benchmark job: {e}"))?;
    if rt.size() != 2 {
        return Err(format!(
            "the rma benchmark needs 2 ranks, got {}",
            rt.size()
        ));
    }
    let rma = setup.attach(&rt);
    let seg = rma
        .alloc_symmetric(WORD + 64, Perms::ALL)
        .map_err(|e| e.to_string())?;
    let target = seg.on(1);
    let iters = |n: u64| ((n as f64 * scale) as u64).max(5);
    let mut runs = Vec::new();
    for rep in 0..reps {
        rt.barrier();
        if rt.rank() == 1 {
            rt.wait_until(|| ends.load(Ordering::Relaxed) > rep as u64);
            continue;
        }
        let mut r = serde_json::Map::new();
        let time = |n: u64, f: &mut dyn FnMut()| {
            for _ in 0..(n / 10).max(1) {
                f();
            }
            let t0 = Instant::now();
            for _ in 0..n {
                f();
            }
            t0.elapsed().as_nanos() as f64 / n as f64
        };
        let mut put_lat = Vec::new();
        let mut get_lat = Vec::new();
        for &size in &LATENCY_SIZES {
            let src = vec![1u8; size];
            let mut dst = vec![0u8; size];
            let n = iters(20_000);
            let p = time(n, &mut || rma.put(target, 8, &src).expect("put"));
            let g = time(n, &mut || rma.get(target, 8, &mut dst).expect("get"));
            put_lat.push(json!({"size": size, "ns": p}));
            get_lat.push(json!({"size": size, "ns": g}));
        }
        r.insert("put_latency_ns".into(), json!(put_lat));
        r.insert("get_latency_ns".into(), json!(get_lat));
        let mut put_bw = Vec::new();
        let mut get_bw = Vec::new();
        for &size in &BANDWIDTH_SIZES {
            let src = vec![3u8; size];
            let mut dst = vec![0u8; size];
            let n = iters((256 << 20) as u64 / size as u64).min(iters(2000));
            let p = time(n, &mut || rma.put(target, 0, &src).expect("put"));
            let g = time(n, &mut || rma.get(target, 0, &mut dst).expect("get"));
            put_bw.push(json!({"size": size, "gbps": size as f64 / p}));
            get_bw.push(json!({"size": size, "gbps": size as f64 / g}));
            if size == 1 << 20 {
                r.insert("put_gbps_1MiB".into(), json!(size as f64 / p));
                r.insert("get_gbps_1MiB".into(), json!(size as f64 / g));
            }
        }
        r.insert("put_gbps".into(), json!(put_bw));
        r.insert("get_gbps".into(), json!(get_bw));
        let n = iters(200_000);
        let f = time(n, &mut || {
            rma.fetch_add(target, WORD, 1).expect("fetch_add");
        });
        let c = time(n, &mut || {
            let old = rma
                .atomic(target, WORD, volley::rma::AtomicOp::Load, 0, 0)
                .expect("load");
            rma.compare_swap(target, WORD, old, old + 1).expect("cas");
        });
        r.insert("fadd_ns".into(), json!(f));
        // One CAS (the load before it is timed separately below and subtracted).
        let l = time(n, &mut || {
            rma.atomic(target, WORD, volley::rma::AtomicOp::Load, 0, 0)
                .expect("load");
        });
        r.insert("cas_ns".into(), json!((c - l).max(0.0)));
        runs.push(serde_json::Value::Object(r));
        rt.request_short(1, end, &[]).map_err(|e| e.to_string())?;
    }
    rt.barrier();
    if rt.rank() == 0 {
        super::write_reps(out, runs)?;
    }
    Ok(())
}

/// The floor for bandwidth: one process copying 1 MiB, in GB/s (median of `reps`).
pub fn memcpy_gbps(reps: usize, scale: f64) -> f64 {
    let src = vec![5u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    let n = ((2000.0 * scale) as usize).max(20);
    let mut samples = Vec::new();
    for _ in 0..reps.max(3) {
        dst.copy_from_slice(&src);
        let t0 = Instant::now();
        for _ in 0..n {
            dst.copy_from_slice(std::hint::black_box(&src));
            std::hint::black_box(&mut dst);
        }
        samples.push((n << 20) as f64 / t0.elapsed().as_nanos() as f64);
    }
    super::median(&mut samples)
}
