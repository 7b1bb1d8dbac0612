//! `volley bench am`'s typed results: one repetition, their medians, and the ratios to the
//! floor of the same run (serialized as the JSON that outside checks read).

use super::*;

/// A round trip at one payload size.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SizeRtt {
    /// Payload bytes.
    pub size: usize,
    /// Round trip, ns.
    pub rtt_ns: f64,
}

impl CurvePoint for SizeRtt {
    fn figure(&self) -> f64 {
        self.rtt_ns
    }
    fn set_figure(&mut self, v: f64) {
        self.rtt_ns = v;
    }
}

/// One repetition's figures, rank 0's (ns unless named otherwise).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AmRep {
    /// Short request round trip: median over the blocks.
    pub am_short_rtt_ns: f64,
    /// One-way flood, per message: median over the blocks.
    pub am_flood_ns_per_msg: f64,
    /// The floor and the bare ring reference measured in the blocks (shared memory only).
    #[serde(flatten, default, skip_serializing_if = "Option::is_none")]
    pub blocks: Option<BlockFigures>,
    /// Medium request round trips by payload size.
    pub am_medium_rtt_ns: Vec<SizeRtt>,
    /// Long request round trips by payload size (the payload travels both ways).
    pub am_long_rtt_ns: Vec<SizeRtt>,
    /// Flood in both directions at once, per message.
    pub am_flood_2way_ns_per_msg: f64,
    /// LogP receive overhead; None (null) when rank 1 kept no sample (it keeps only polls
    /// that found a whole burst waiting).
    pub o_recv_ns: Option<f64>,
    /// LogP send overhead.
    pub o_send_ns: f64,
    /// Rank 0 copying 1 MiB between two buffers of its own, GB/s, right before the long
    /// round trips.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// The long round trip's data movement with no runtime (shared memory only): 2 MiB per
    /// round trip of a memcpy ping-pong between the two ranks, GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_pingpong_gbps: Option<f64>,
    /// Rank 0 copying 64 KiB between two buffers of its own, ns per copy (the medium
    /// round trip's yardstick).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_64k_ns: Option<f64>,
    /// A one-way stream of 1 MiB long requests, GB/s.
    #[serde(
        rename = "long_stream_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_gbps_1mib: Option<f64>,
}

/// What the shared-memory blocks measure beside the short round trip and the flood: medians
/// over the blocks, the ratios taken block by block (each beside its own floor).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct BlockFigures {
    /// The floor: a cache-line ping-pong between the two ranks.
    pub cacheline_rtt_ns: f64,
    /// Short round trip over the block's floor.
    pub am_short_rtt_over_floor: f64,
    /// Flood per message over the block's floor.
    pub am_flood_over_floor: f64,
    /// Round trip on two bare rings with boxed handlers and no runtime (the reference).
    pub bare_am_rtt_ns: f64,
    /// The reference over the block's floor.
    pub bare_am_rtt_over_floor: f64,
    /// Short round trip over the block's reference.
    pub am_short_rtt_over_bare: f64,
}

impl Medians for BlockFigures {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        Self {
            cacheline_rtt_ns: med(|r| r.cacheline_rtt_ns),
            am_short_rtt_over_floor: med(|r| r.am_short_rtt_over_floor),
            am_flood_over_floor: med(|r| r.am_flood_over_floor),
            bare_am_rtt_ns: med(|r| r.bare_am_rtt_ns),
            bare_am_rtt_over_floor: med(|r| r.bare_am_rtt_over_floor),
            am_short_rtt_over_bare: med(|r| r.am_short_rtt_over_bare),
        }
    }
}

impl Medians for AmRep {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        let blocks: Vec<BlockFigures> = reps.iter().filter_map(|r| r.blocks.clone()).collect();
        Self {
            am_short_rtt_ns: med(|r| r.am_short_rtt_ns),
            am_flood_ns_per_msg: med(|r| r.am_flood_ns_per_msg),
            blocks: (!blocks.is_empty()).then(|| BlockFigures::medians(&blocks)),
            am_medium_rtt_ns: median_curve(reps, |r| &r.am_medium_rtt_ns),
            am_long_rtt_ns: median_curve(reps, |r| &r.am_long_rtt_ns),
            am_flood_2way_ns_per_msg: med(|r| r.am_flood_2way_ns_per_msg),
            o_recv_ns: median_opt(reps.iter().map(|r| r.o_recv_ns)),
            o_send_ns: med(|r| r.o_send_ns),
            memcpy_gbps: median_opt(reps.iter().map(|r| r.memcpy_gbps)),
            memcpy_pingpong_gbps: median_opt(reps.iter().map(|r| r.memcpy_pingpong_gbps)),
            memcpy_64k_ns: median_opt(reps.iter().map(|r| r.memcpy_64k_ns)),
            long_stream_gbps_1mib: median_opt(reps.iter().map(|r| r.long_stream_gbps_1mib)),
        }
    }
}

/// The ratios to the floor and to the bare ring reference.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmRatios {
    /// Short round trip over the floor.
    pub am_short_rtt_over_floor: f64,
    /// Flood per message over the floor.
    pub am_flood_over_floor: f64,
    /// The bare ring reference over the floor (shared memory only; null otherwise).
    pub bare_am_rtt_over_floor: Option<f64>,
    /// Short round trip over the bare ring reference (shared memory only; null otherwise).
    pub am_short_rtt_over_bare: Option<f64>,
    /// `long_gbps_1MiB` over `memcpy_gbps`.
    #[serde(
        rename = "long_gbps_1MiB_over_memcpy",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_over_memcpy: Option<f64>,
    /// `long_gbps_1MiB` over `memcpy_pingpong_gbps` (shared memory only).
    #[serde(
        rename = "long_gbps_1MiB_over_memcpy_pingpong",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_over_memcpy_pingpong: Option<f64>,
    /// The medium round trip at 64 KiB over two 64 KiB memcpys of the same run (issue
    /// target: at most 2).
    #[serde(
        rename = "medium_64KiB_rtt_over_two_memcpys",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub medium_64k_over_two_memcpys: Option<f64>,
    /// `long_stream_gbps_1MiB` over `raw_stream_gbps` (network only).
    #[serde(
        rename = "long_stream_gbps_1MiB_over_raw_stream",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_over_raw_stream: Option<f64>,
}

/// The whole benchmark's results: the medians over the repetitions (ns unless named
/// otherwise), the floor, and every repetition's own figures.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AmReport {
    /// Short request round trip.
    pub am_short_rtt_ns: f64,
    /// One-way flood, per message (the gap g).
    pub am_flood_ns_per_msg: f64,
    /// Flood in both directions at once, per message.
    pub am_flood_2way_ns_per_msg: f64,
    /// Medium request round trips by payload size.
    pub am_medium_rtt_ns: Vec<SizeRtt>,
    /// Long request round trips by payload size.
    pub am_long_rtt_ns: Vec<SizeRtt>,
    /// Long round trip bandwidth at 1 MiB, GB/s (the payload travels both ways).
    #[serde(rename = "long_gbps_1MiB")]
    pub long_gbps_1mib: f64,
    /// The bulk floor: rank 0 copying 1 MiB between two buffers of its own, in the same run
    /// (median of the repetitions), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_gbps: Option<f64>,
    /// The long round trip's data movement without a runtime: a memcpy ping-pong of 1 MiB
    /// each way between the two ranks (shared memory only), GB/s.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub memcpy_pingpong_gbps: Option<f64>,
    /// A 64 KiB memcpy by rank 0 in the same run, ns (median of the repetitions).
    #[serde(
        rename = "memcpy_64KiB_ns",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub memcpy_64k_ns: Option<f64>,
    /// A one-way stream of 1 MiB long requests, GB/s.
    #[serde(
        rename = "long_stream_gbps_1MiB",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub long_stream_gbps_1mib: Option<f64>,
    /// The network's stream floor: 1 MiB messages streamed over raw sockets between two
    /// processes pinned like the ranks, measured before the job, GB/s (UDP and TCP only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_stream_gbps: Option<f64>,
    /// The congestion control of volley's TCP connections and of the raw stream beside them,
    /// as the kernel reports it (TCP only; set with `VOLLEY_TCP_CONGESTION`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_congestion: Option<String>,
    /// Short round trip from rank 0 to rank 2 of a three-rank job (one rank per node), idle,
    /// ns (UDP and TCP only; see `pipe`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_idle_ns: Option<f64>,
    /// The same round trip while rank 0 streams 16 MiB long messages to rank 1, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_during_bulk_ns: Option<f64>,
    /// `short_rtt_during_bulk_ns` over `short_rtt_idle_ns` (target: small, about 3 at most).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_during_bulk_over_idle: Option<f64>,
    /// Share of those pings answered while the 16 MiB transfer was still in flight (the
    /// others are not counted in `short_rtt_during_bulk_ns`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_rtt_overlap_share: Option<f64>,
    /// How long the 16 MiB long request took to return to its caller, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bulk_send_return_ns: Option<f64>,
    /// LogP receive overhead (absent when no repetition kept a sample).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub o_recv_ns: Option<f64>,
    /// LogP send overhead.
    pub o_send_ns: f64,
    /// LogP latency: RTT/2 - o_send - o_recv (may be negative; null without o_recv).
    #[serde(rename = "L_ns")]
    pub l_ns: Option<f64>,
    /// The shared-memory floor: a cache-line ping-pong between the two ranks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cacheline_rtt_ns: Option<f64>,
    /// The UDP floor: raw sockets, measured before the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub udp_raw_rtt_ns: Option<f64>,
    /// The TCP floor: raw sockets, measured before the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp_raw_rtt_ns: Option<f64>,
    /// Which of the three floors this run has.
    pub floor_key: String,
    /// The bare ring reference (shared memory only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bare_am_rtt_ns: Option<f64>,
    /// The ratios.
    pub ratios: AmRatios,
    /// The medium and long round trips as one-way latency curves (µs), as `volley report` and
    /// `--plot` read them (the same messages' bandwidth is `volley bench loggp`'s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub configs: Vec<crate::bench::sweep::Curves>,
    /// Where and when.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub machine: Option<crate::bench::loggp::Machine>,
    /// shm, udp or tcp.
    pub transport: String,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
    /// CPUs this machine offers.
    pub cpus: usize,
    /// Every repetition's figures.
    pub runs: Vec<AmRep>,
}

impl AmReport {
    /// The floor named by `floor_key` (NaN if it is missing).
    pub fn floor_ns(&self) -> f64 {
        match self.floor_key.as_str() {
            "udp_raw_rtt_ns" => self.udp_raw_rtt_ns,
            "tcp_raw_rtt_ns" => self.tcp_raw_rtt_ns,
            _ => self.cacheline_rtt_ns,
        }
        .unwrap_or(f64::NAN)
    }
}
