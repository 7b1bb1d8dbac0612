//! `seed001-hardware`: seed 001's Table 1 for this machine. The seed's point is the order of
//! the costs a shared-memory message pays: a cache-to-cache transfer (80 cycles) costs more
//! than a miss to memory (50), a compare-and-swap is cheap (15), and a read from the network
//! interface is dear (152). Here the interface is a socket, so its "read" is an empty
//! non-blocking `recv` (what a network poll costs).
//!
//! Every measurement checks what it touched: the pointer chase visits every element once, the
//! ping-pong ends at the count it must, the copy equals its source, the CAS counter ends at the
//! number of CASes, the stream delivers every byte.

use super::{Experiment, Options, Outcome};
use crate::bench::median;
use serde::Serialize;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The experiment.
pub const EXPERIMENT: Experiment = Experiment {
    name: "seed001-hardware",
    about: "seed 001 Table 1: memory and cache-to-cache miss latency, memcpy, CAS, network poll, link bandwidth",
    run,
    rank: None,
};

/// The seed's Table 1 (Enterprise 5000, 167 MHz): cycles, and memcpy in MB/s.
const SEED_MEMORY_CYCLES: f64 = 50.0;
const SEED_C2C_CYCLES: f64 = 80.0;
const SEED_CAS_CYCLES: f64 = 15.0;
const SEED_NIC_READ_CYCLES: f64 = 152.0;
const SEED_MEMCPY_MBS: f64 = 200.0;
const SEED_SBUS_MBS: f64 = 38.0;

/// The results.
#[derive(Debug, Serialize)]
struct Report {
    verified: bool,
    /// What failed, if anything.
    failures: Vec<String>,
    /// Pointer chase over a buffer far larger than the caches: ns per dependent load.
    memory_miss_ns: f64,
    /// The same chase over 16 KiB (L1): the hit the miss is compared with.
    l1_hit_ns: f64,
    /// Half the round trip of a cache line written in turn by two threads on two CPUs.
    cache_to_cache_ns: f64,
    /// Copy between two buffers larger than the caches.
    memcpy_gbps: f64,
    /// Uncontended compare-and-swap, dependent chain.
    cas_ns: f64,
    /// Empty non-blocking `recv` on a UDP socket (EAGAIN): the cost of a network poll.
    network_poll_ns: f64,
    /// One loopback TCP connection streaming 1 MiB messages.
    loopback_tcp_gbps: f64,
    /// The seed's ratios beside this machine's.
    ratios: Ratios,
    sizes: Sizes,
}

#[derive(Debug, Serialize)]
struct Ratios {
    cache_to_cache_over_memory: f64,
    seed_cache_to_cache_over_memory: f64,
    cas_over_memory: f64,
    seed_cas_over_memory: f64,
    network_poll_over_memory: f64,
    seed_nic_read_over_memory: f64,
    memcpy_over_link: f64,
    seed_memcpy_over_sbus: f64,
}

#[derive(Debug, Serialize)]
struct Sizes {
    chase_bytes: usize,
    memcpy_bytes: usize,
    pingpong_rounds: u64,
}

fn run(o: &Options) -> Result<Outcome, String> {
    let chase_bytes = if o.quick { 64 << 20 } else { 512 << 20 };
    let memcpy_bytes = if o.quick { 64 << 20 } else { 256 << 20 };
    let rounds: u64 = if o.quick { 200_000 } else { 2_000_000 };
    let mut failures = Vec::new();
    let mut rep = |f: &mut dyn FnMut() -> Result<f64, String>| -> f64 {
        let mut v = Vec::new();
        for _ in 0..o.reps {
            match f() {
                Ok(x) => v.push(x),
                Err(e) => failures.push(e),
            }
        }
        median(&mut v)
    };
    let memory_miss_ns = rep(&mut || chase_ns(chase_bytes, 2_000_000, o.corrupt));
    let l1_hit_ns = rep(&mut || chase_ns(16 << 10, 20_000_000, false));
    let cache_to_cache_ns = rep(&mut || cache_to_cache_ns(rounds));
    let memcpy_gbps = rep(&mut || memcpy_gbps(memcpy_bytes));
    let cas_ns = rep(&mut || cas_ns(20_000_000));
    let network_poll_ns = rep(&mut || poll_ns(1_000_000));
    let loopback_tcp_gbps = rep(&mut || tcp_gbps(if o.quick { 200 } else { 2000 }));
    super::require_figures(
        &mut failures,
        &[
            ("memory miss", memory_miss_ns),
            ("L1 hit", l1_hit_ns),
            ("cache to cache", cache_to_cache_ns),
            ("memcpy", memcpy_gbps),
            ("CAS", cas_ns),
            ("network poll", network_poll_ns),
            ("loopback TCP", loopback_tcp_gbps),
        ],
    );
    // A chase that is no slower than an L1 hit did not miss: the buffer stayed cached or the
    // loads were not dependent.
    if memory_miss_ns <= l1_hit_ns {
        failures.push(format!(
            "the memory chase ({memory_miss_ns:.1} ns) is no slower than the L1 chase ({l1_hit_ns:.1} ns)"
        ));
    }
    let report = Report {
        verified: failures.is_empty(),
        failures,
        memory_miss_ns,
        l1_hit_ns,
        cache_to_cache_ns,
        memcpy_gbps,
        cas_ns,
        network_poll_ns,
        loopback_tcp_gbps,
        ratios: Ratios {
            cache_to_cache_over_memory: cache_to_cache_ns / memory_miss_ns,
            seed_cache_to_cache_over_memory: SEED_C2C_CYCLES / SEED_MEMORY_CYCLES,
            cas_over_memory: cas_ns / memory_miss_ns,
            seed_cas_over_memory: SEED_CAS_CYCLES / SEED_MEMORY_CYCLES,
            network_poll_over_memory: network_poll_ns / memory_miss_ns,
            seed_nic_read_over_memory: SEED_NIC_READ_CYCLES / SEED_MEMORY_CYCLES,
            memcpy_over_link: memcpy_gbps / loopback_tcp_gbps,
            seed_memcpy_over_sbus: SEED_MEMCPY_MBS / SEED_SBUS_MBS,
        },
        sizes: Sizes {
            chase_bytes,
            memcpy_bytes,
            pingpong_rounds: rounds,
        },
    };
    Ok(Outcome {
        table: table(&report),
        doc: serde_json::to_value(&report).map_err(|e| e.to_string())?,
    })
}

fn table(r: &Report) -> String {
    let mut t = String::new();
    let q = &r.ratios;
    let _ = writeln!(
        t,
        "seed 001 Table 1 on this machine (seed: Enterprise 5000, 167 MHz)"
    );
    let _ = writeln!(
        t,
        "  {:<34} {:>12}  {:>12}  {:>10}  {:>10}",
        "", "here", "seed", "here/mem", "seed/mem"
    );
    let row =
        |t: &mut String, what: &str, here: String, seed: String, ratio: f64, seed_ratio: f64| {
            let _ = writeln!(
                t,
                "  {what:<34} {here:>12}  {seed:>12}  {ratio:>10.2}  {seed_ratio:>10.2}"
            );
        };
    row(
        &mut t,
        "L2 miss (memory)",
        format!("{:.1} ns", r.memory_miss_ns),
        "50 cycles".into(),
        1.0,
        1.0,
    );
    row(
        &mut t,
        "L2 miss (other cache)",
        format!("{:.1} ns", r.cache_to_cache_ns),
        "80 cycles".into(),
        q.cache_to_cache_over_memory,
        q.seed_cache_to_cache_over_memory,
    );
    row(
        &mut t,
        "compare-and-swap",
        format!("{:.1} ns", r.cas_ns),
        "15 cycles".into(),
        q.cas_over_memory,
        q.seed_cas_over_memory,
    );
    row(
        &mut t,
        "NIC read / empty network poll",
        format!("{:.1} ns", r.network_poll_ns),
        "152 cycles".into(),
        q.network_poll_over_memory,
        q.seed_nic_read_over_memory,
    );
    let _ = writeln!(
        t,
        "  {:<34} {:>12}",
        "L1 hit (for scale)",
        format!("{:.1} ns", r.l1_hit_ns)
    );
    let _ = writeln!(
        t,
        "  {:<34} {:>12}  {:>12}",
        "memcpy",
        format!("{:.1} GB/s", r.memcpy_gbps),
        "200 MB/s"
    );
    let _ = writeln!(
        t,
        "  {:<34} {:>12}  {:>12}",
        "link (loopback TCP / SBUS)",
        format!("{:.1} GB/s", r.loopback_tcp_gbps),
        "38 MB/s"
    );
    let _ = writeln!(
        t,
        "  memcpy over link: {:.1} here, {:.1} in the seed",
        q.memcpy_over_link, q.seed_memcpy_over_sbus
    );
    t.push_str(&super::verdict(r.verified, "", &r.failures));
    t
}

/// A random cyclic permutation of `bytes / 64` cache lines, chased `loads` times: ns per load.
/// Fails unless the chase visits every line once per lap.
/// `corrupt`: one link skips a line (the lap check must notice).
fn chase_ns(bytes: usize, loads: u64, corrupt: bool) -> Result<f64, String> {
    const STRIDE: usize = 8; // u64s per cache line
    let lines = (bytes / 64).max(2);
    let mut next = vec![0u64; lines * STRIDE];
    // Sattolo's shuffle: one cycle through every line, in random order.
    let mut order: Vec<usize> = (0..lines).collect();
    let mut rng = volley::bootstrap::random_u64() | 1;
    for i in (1..lines).rev() {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        let j = (rng % i as u64) as usize;
        order.swap(i, j);
    }
    for w in 0..lines {
        next[order[w] * STRIDE] = (order[(w + 1) % lines] * STRIDE) as u64;
    }
    if corrupt {
        next[order[0] * STRIDE] = (order[2 % lines] * STRIDE) as u64;
    }
    // One whole lap checks the cycle (and warms the TLB as far as it can be warmed).
    let (mut at, mut seen) = (0usize, 0usize);
    loop {
        at = next[at] as usize;
        seen += 1;
        if at == 0 || seen > lines {
            break;
        }
    }
    if seen != lines {
        return Err(format!(
            "pointer chase: a lap took {seen} loads, not {lines}"
        ));
    }
    let t0 = Instant::now();
    let mut at = 0usize;
    for _ in 0..loads {
        at = next[at] as usize;
    }
    let ns = t0.elapsed().as_nanos() as f64 / loads as f64;
    std::hint::black_box(at);
    Ok(ns)
}

#[repr(align(128))]
struct Line(AtomicU64);

/// Two threads on the first two CPUs this process may use take turns incrementing one cache
/// line, `rounds` times each: ns per transfer (half a round trip).
fn cache_to_cache_ns(rounds: u64) -> Result<f64, String> {
    let cpus = crate::affinity::allowed_cpus();
    if cpus.len() < 2 {
        return Err("cache to cache: needs two CPUs".into());
    }
    let line = Line(AtomicU64::new(0));
    let saved = crate::affinity::current();
    let ns = std::thread::scope(|s| {
        let other = s.spawn(|| {
            crate::affinity::pin(cpus[1]);
            for i in 0..rounds {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        });
        crate::affinity::pin(cpus[0]);
        let t0 = Instant::now();
        for i in 0..rounds {
            line.0.store(2 * i + 1, Ordering::Release);
            while line.0.load(Ordering::Acquire) != 2 * i + 2 {
                std::hint::spin_loop();
            }
        }
        let ns = t0.elapsed().as_nanos() as f64 / (2 * rounds) as f64;
        other
            .join()
            .map_err(|_| "cache to cache: the other thread panicked".to_string())?;
        Ok::<f64, String>(ns)
    });
    crate::affinity::restore(&saved);
    let ns = ns?;
    let end = line.0.load(Ordering::Relaxed);
    if end != 2 * rounds {
        return Err(format!(
            "cache to cache: the line ended at {end}, not {}",
            2 * rounds
        ));
    }
    Ok(ns)
}

/// Copies `bytes` (placed half a page apart modulo 4 KiB, as the bench floor does): GB/s.
fn memcpy_gbps(bytes: usize) -> Result<f64, String> {
    let iters = ((1u64 << 30) / bytes as u64).max(4);
    let ns = crate::bench::floor::memcpy_ns(bytes, iters);
    // The floor copies a constant pattern; check a copy of a varied one here.
    let src: Vec<u8> = (0..bytes).map(|i| (i * 7 + i / 4096) as u8).collect();
    let mut dst = vec![0u8; bytes];
    dst.copy_from_slice(&src);
    if dst != src {
        return Err("memcpy: the copy differs from its source".into());
    }
    Ok(bytes as f64 / ns)
}

/// `n` dependent compare-and-swaps on one line of this thread: ns each.
fn cas_ns(n: u64) -> Result<f64, String> {
    let line = Line(AtomicU64::new(0));
    let t0 = Instant::now();
    let mut v = 0u64;
    for _ in 0..n {
        match line
            .0
            .compare_exchange(v, v + 1, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => v += 1,
            Err(now) => v = now,
        }
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let end = line.0.load(Ordering::Relaxed);
    if end != n {
        return Err(format!("CAS: the counter ended at {end}, not {n}"));
    }
    Ok(ns)
}

/// `n` empty non-blocking receives on a UDP socket: ns each. Each must say "nothing there".
fn poll_ns(n: u64) -> Result<f64, String> {
    let s = std::net::UdpSocket::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| format!("network poll: {e}"))?;
    s.set_nonblocking(true)
        .map_err(|e| format!("network poll: {e}"))?;
    let mut buf = [0u8; 64];
    let t0 = Instant::now();
    for _ in 0..n {
        match s.recv(&mut buf) {
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            Ok(len) => {
                return Err(format!(
                    "network poll: a datagram of {len} bytes from nowhere"
                ))
            }
            Err(e) => return Err(format!("network poll: {e}")),
        }
    }
    Ok(t0.elapsed().as_nanos() as f64 / n as f64)
}

/// `count` 1 MiB messages over one loopback TCP connection, between two threads: GB/s.
fn tcp_gbps(count: u64) -> Result<f64, String> {
    use volley::transport::net::floor::SocketFloor;
    use volley::transport::net::stream_floor::stream_pair;
    let (mut tx, mut rx) =
        stream_pair(SocketFloor::Tcp).map_err(|e| format!("loopback TCP: {e}"))?;
    std::thread::scope(|s| {
        let sink = s.spawn(move || rx.sink(count));
        let gbps = tx.stream(count).map_err(|e| format!("loopback TCP: {e}"))?;
        sink.join()
            .map_err(|_| "loopback TCP: the receiver panicked".to_string())?
            .map_err(|e| format!("loopback TCP: receiving: {e}"))?;
        Ok(gbps)
    })
}
