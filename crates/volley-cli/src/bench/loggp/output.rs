//! `volley bench loggp`'s table, the OSU micro-benchmarks' layout and CSV.

use super::*;

/// The LogGP table, shaped like seed 001's Table 2 (µs, one column per transport).
pub fn print_table(r: &LoggpReport, w: &mut dyn Write) {
    let _ = writeln!(
        w,
        "volley bench loggp: 2 ranks pinned on {} ({}), median of {} repetitions, {}",
        r.machine.host, r.machine.cpu, r.reps, r.machine.date
    );
    let _ = writeln!(
        w,
        "  shm: one node, shared memory; udp, tcp: two emulated nodes on loopback"
    );
    let mut head = format!("  {:<28}", "parameter");
    for c in &r.configs {
        head += &format!(" {:>12}", c.name);
    }
    let _ = writeln!(w, "{head}");
    let us = |x: f64| {
        if x.is_finite() {
            format!("{:.3}", x / 1e3)
        } else {
            "n/a".into()
        }
    };
    type Cell = fn(&LoggpConfig, &dyn Fn(f64) -> String) -> String;
    let rows: [(&str, Cell); 9] = [
        ("Latency L (us)", |c, us| us(c.l_ns.unwrap_or(f64::NAN))),
        ("Send overhead o_s (us)", |c, us| us(c.o_s_ns)),
        ("Receive overhead o_r (us)", |c, us| {
            us(c.o_r_ns.unwrap_or(f64::NAN))
        }),
        ("Gap g (us)", |c, us| us(c.g_ns)),
        ("Gap per byte G (ns/byte)", |c, _| {
            format!("{:.5}", c.big_g_ns_per_byte)
        }),
        ("Bandwidth 1/G (MB/s)", |c, _| {
            format!("{:.0}", c.peak_mb_per_s)
        }),
        ("Half-power point (bytes)", |c, _| {
            format!("{:.0}", c.half_power_bytes)
        }),
        ("Round trip RTT (us)", |c, us| us(c.rtt_ns)),
        ("Floor RTT (us)", |c, us| {
            us(c.floor_rtt_ns.unwrap_or(f64::NAN))
        }),
    ];
    for (name, cell) in rows {
        let mut line = format!("  {name:<28}");
        for c in &r.configs {
            line += &format!(" {:>12}", cell(c, &us));
        }
        let _ = writeln!(w, "{line}");
    }
    let _ = writeln!(
        w,
        "  L = RTT/2 - o_s - o_r (negative when the overheads overlap); G from the peak of the \
         long-message stream; floor: a cache line between the ranks (shm), 8 bytes over raw \
         sockets (udp, tcp)"
    );
    if !r.peers.is_empty() {
        let mut cols: Vec<(String, &[LatencyPoint], &[BandwidthPoint])> = Vec::new();
        for c in &r.configs {
            cols.push((format!("volley {}", c.name), &c.latency, &c.bandwidth));
        }
        if let Some(c) = r.configs.iter().find(|c| !c.memcpy.is_empty()) {
            cols.push(("memcpy (floor)".into(), &[], &c.memcpy));
        }
        for p in &r.peers {
            cols.push((p.name.clone(), &p.latency, &p.bandwidth));
        }
        super::super::peers::print_side_by_side("sweeps beside the peers", &cols, w);
    }
}

/// The sweeps in the OSU micro-benchmarks' layout: `osu_latency`'s and `osu_bw`'s headers
/// and columns (`%-10d%18.2f`), one pair of blocks per configuration.
pub fn print_osu(r: &LoggpReport, w: &mut dyn Write) {
    super::super::peers::print_osu(&r.peers, w);
    for c in &r.configs {
        let name = &c.name;
        let heading = format!(
            "volley bench loggp {name}: long Active Message ping-pong, half the round trip"
        );
        super::super::sweep::osu_latency(w, &heading, &c.latency);
        let heading = format!("volley bench loggp {name}: one-way stream of long Active Messages");
        super::super::sweep::osu_bandwidth(w, &heading, &c.bandwidth);
    }
}

/// The sweeps as CSV: `config,size,latency_us,bandwidth_mb_per_s,memcpy_mb_per_s`.
pub fn csv(r: &LoggpReport) -> String {
    let mut s = String::from("config,size,latency_us,bandwidth_mb_per_s,memcpy_mb_per_s\n");
    for c in &r.configs {
        for (i, p) in c.latency.iter().enumerate() {
            let bw = c.bandwidth.get(i).map_or(f64::NAN, |b| b.mb_per_s);
            let mc = c.memcpy.get(i).map_or(f64::NAN, |b| b.mb_per_s);
            s += &format!(
                "{},{},{:.3},{:.1},{:.1}\n",
                c.name, p.size, p.latency_us, bw, mc
            );
        }
    }
    // A peer's curves are apart (a bandwidth test has no latency): one row per size it has.
    for p in &r.peers {
        for lg in SIZES {
            let size = 1usize << lg;
            let lat = p.latency.iter().find(|q| q.size == size);
            let bw = p.bandwidth.iter().find(|q| q.size == size);
            if lat.is_none() && bw.is_none() {
                continue;
            }
            s += &format!(
                "{},{size},{:.3},{:.1},\n",
                p.name,
                lat.map_or(f64::NAN, |q| q.latency_us),
                bw.map_or(f64::NAN, |q| q.mb_per_s)
            );
        }
    }
    s
}
