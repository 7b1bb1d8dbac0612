//! `volley bench am`'s table.

use super::*;

/// The table: every figure beside the floor, with its target where it has one.
pub fn print_table(r: &AmReport, w: &mut dyn Write) {
    let floor = r.floor_ns();
    let row = |w: &mut dyn Write, name: &str, v: f64, note: &str| {
        let _ = if v.is_nan() {
            writeln!(
                w,
                "  {name:<28} {:>10} ns  {:>6} x floor  {note}",
                "n/a", "n/a"
            )
        } else {
            writeln!(
                w,
                "  {name:<28} {v:>10.1} ns  {:>6.2} x floor  {note}",
                v / floor
            )
        };
    };
    let (how, rtt_target, flood_target) = match r.transport.as_str() {
        "shm" => (
            "one node, shared memory",
            "target <= 1.30 x floor",
            "target <= 0.15 x floor",
        ),
        "udp" => (
            "two emulated nodes, UDP on loopback",
            "target <= 1.20 x floor",
            "",
        ),
        _ => (
            "two emulated nodes, TCP on loopback",
            "target <= 1.20 x floor",
            "",
        ),
    };
    let _ = writeln!(
        w,
        "volley bench am: 2 ranks on one host, {how}, pinned; median of {} repetitions",
        r.reps
    );
    let floor_note = if r.transport == "shm" {
        "between the two ranks, in blocks before the short round trip and flood"
    } else {
        "raw sockets, measured before the job"
    };
    row(w, &format!("{} (floor)", r.floor_key), floor, floor_note);
    if let Some(bare) = r.bare_am_rtt_ns.filter(|x| !x.is_nan()) {
        row(
            w,
            "bare_am_rtt_ns (reference)",
            bare,
            "two bare rings, boxed handlers, no runtime: in the same blocks",
        );
    }
    for (key, v, note) in [
        ("am_short_rtt_ns", r.am_short_rtt_ns, rtt_target),
        ("am_flood_ns_per_msg", r.am_flood_ns_per_msg, flood_target),
        (
            "am_flood_2way_ns_per_msg",
            r.am_flood_2way_ns_per_msg,
            "both directions at once, per message",
        ),
        ("o_send_ns", r.o_send_ns, "LogP send overhead"),
        (
            "o_recv_ns",
            r.o_recv_ns.unwrap_or(f64::NAN),
            "LogP receive overhead",
        ),
        (
            "L_ns",
            r.l_ns.unwrap_or(f64::NAN),
            "RTT/2 - o_send - o_recv (may be negative)",
        ),
    ] {
        row(w, key, v, note);
    }
    if let Some(e) = r.am_medium_rtt_ns.iter().find(|e| e.size == 0) {
        row(w, "medium rtt 0 B", e.rtt_ns, "");
    }
    let cols: Vec<_> = r
        .configs
        .iter()
        .map(|c| (format!("{} rtt/2", c.name), &c.latency[..], &[][..]))
        .collect();
    super::super::peers::print_side_by_side("echo sweeps", &cols, w);
    let ratios = &r.ratios;
    let _ = writeln!(
        w,
        "  over the floor: am_short_rtt {:.2}, am_flood {:.3} (shared memory: medians of the \
         blocks' ratios, each block beside the floor measured just before it)",
        ratios.am_short_rtt_over_floor, ratios.am_flood_over_floor,
    );
    if let Some(bare_over_floor) = ratios.bare_am_rtt_over_floor {
        let _ = writeln!(
            w,
            "  bare ring reference: {:.2} x floor; am_short_rtt {:.2} x the bare ring (medians \
             of the same blocks' ratios)",
            bare_over_floor,
            ratios.am_short_rtt_over_bare.unwrap_or(f64::NAN),
        );
    }
    let _ = writeln!(
        w,
        "  {:<28} {:>10.2} GB/s (1 MiB long, both ways)",
        "long_gbps_1MiB", r.long_gbps_1mib
    );
    let gbps = |w: &mut dyn Write, name: &str, v: Option<f64>, note: String| {
        if let Some(v) = v {
            let _ = writeln!(w, "  {name:<28} {v:>10.2} GB/s {note}");
        }
    };
    let times = |x: Option<f64>, what: &str, target: &str| {
        x.map_or(String::new(), |x| format!("(long {x:.2} x {what}{target})"))
    };
    let ratios = &r.ratios;
    gbps(
        w,
        "memcpy_gbps (floor)",
        r.memcpy_gbps,
        format!(
            "rank 0 copying 1 MiB between two buffers of its own {}",
            times(ratios.long_over_memcpy, "this", ", target >= 0.80")
        ),
    );
    gbps(
        w,
        "memcpy_pingpong_gbps",
        r.memcpy_pingpong_gbps,
        format!(
            "1 MiB memcpy each way between the two ranks, no runtime {}",
            times(ratios.long_over_memcpy_pingpong, "this", "")
        ),
    );
    if let (Some(ns), Some(x)) = (r.memcpy_64k_ns, ratios.medium_64k_over_two_memcpys) {
        let _ = writeln!(
            w,
            "  {:<28} {ns:>9.1} ns    rank 0 copying 64 KiB (medium 64 KiB round trip {x:.2} x two of these, target <= 2)",
            "memcpy_64KiB_ns (floor)"
        );
    }
    gbps(
        w,
        "raw_stream_gbps (floor)",
        r.raw_stream_gbps,
        match &r.tcp_congestion {
            Some(cc) => format!(
                "1 MiB messages streamed over raw sockets, measured before the job (congestion control {cc}, as volley's)"
            ),
            None => "1 MiB messages streamed over raw sockets, measured before the job".into(),
        },
    );
    let over_raw = ratios
        .long_stream_over_raw_stream
        .map_or(String::new(), |x| format!(" ({x:.2} x raw_stream_gbps)"));
    gbps(
        w,
        "long_stream_gbps_1MiB",
        r.long_stream_gbps_1mib,
        format!("1 MiB long requests, one way{over_raw}"),
    );
    if let (Some(idle), Some(bulk)) = (r.short_rtt_idle_ns, r.short_rtt_during_bulk_ns) {
        let x = r.short_rtt_during_bulk_over_idle.unwrap_or(f64::NAN);
        let _ = writeln!(
            w,
            "  {:<28} {idle:>9.1} ns    rank 0 to rank 2 of three, one per node\n  {:<28} {bulk:>9.1} ns    the same while rank 0 sends 16 MiB longs to rank 1 ({x:.2} x idle, target <= 3)",
            "short_rtt_idle_ns", "short_rtt_during_bulk_ns"
        );
    }
    if let (Some(share), Some(ret)) = (r.short_rtt_overlap_share, r.bulk_send_return_ns) {
        let _ = writeln!(
            w,
            "  {:<28} {:>9.1} us    the 16 MiB long request's return to its caller; {:.0} % of the pings overlapped the transfer",
            "bulk_send_return_ns",
            ret / 1e3,
            share * 100.0
        );
    }
}
