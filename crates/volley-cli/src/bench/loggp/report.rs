//! `volley bench loggp`'s typed results: the sweeps' points, one repetition, a
//! configuration's figures, the machine, and the report (the JSON outside checks read).

use super::*;

/// A latency point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LatencyPoint {
    /// Message bytes.
    pub size: usize,
    /// One-way latency: half the round trip, µs (OSU's figure).
    pub latency_us: f64,
}

impl CurvePoint for LatencyPoint {
    fn figure(&self) -> f64 {
        self.latency_us
    }
    fn set_figure(&mut self, v: f64) {
        self.latency_us = v;
    }
}

/// A bandwidth point of the sweep.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BandwidthPoint {
    /// Message bytes.
    pub size: usize,
    /// 10^6 bytes per second (OSU's MB/s).
    pub mb_per_s: f64,
}

impl CurvePoint for BandwidthPoint {
    fn figure(&self) -> f64 {
        self.mb_per_s
    }
    fn set_figure(&mut self, v: f64) {
        self.mb_per_s = v;
    }
}

/// One repetition's figures, rank 0's (rank 1's o_r handed over), ns unless named otherwise.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoggpRep {
    /// Short round trip.
    pub rtt_ns: f64,
    /// Gap per short message in a flood.
    pub g_ns: f64,
    /// Send overhead.
    pub o_s_ns: f64,
    /// Receive overhead; None when rank 1 kept no sample.
    pub o_r_ns: Option<f64>,
    /// The delay loop's calibration on rank 0: ns per iteration.
    pub delay_ns_per_iter: f64,
    /// Latency sweep.
    pub latency: Vec<LatencyPoint>,
    /// Bandwidth sweep.
    pub bandwidth: Vec<BandwidthPoint>,
    /// memcpy of each size between two buffers of rank 0.
    pub memcpy: Vec<BandwidthPoint>,
}

impl Medians for LoggpRep {
    fn medians(reps: &[Self]) -> Self {
        let med = |f: fn(&Self) -> f64| median_present(reps.iter().map(f));
        Self {
            rtt_ns: med(|r| r.rtt_ns),
            g_ns: med(|r| r.g_ns),
            o_s_ns: med(|r| r.o_s_ns),
            o_r_ns: median_opt(reps.iter().map(|r| r.o_r_ns)),
            delay_ns_per_iter: med(|r| r.delay_ns_per_iter),
            latency: median_curve(reps, |r| &r.latency),
            bandwidth: median_curve(reps, |r| &r.bandwidth),
            memcpy: median_curve(reps, |r| &r.memcpy),
        }
    }
}

/// One column of the table: one transport's LogGP parameters, its sweeps and its floors.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoggpConfig {
    /// shm, udp or tcp.
    pub name: String,
    /// Latency: RTT/2 − o_s − o_r (may be negative; null without o_r).
    #[serde(rename = "L_ns")]
    pub l_ns: Option<f64>,
    /// Send overhead.
    pub o_s_ns: f64,
    /// Receive overhead (null when no repetition kept a sample).
    pub o_r_ns: Option<f64>,
    /// Gap between short messages.
    pub g_ns: f64,
    /// Gap per byte: 1 / peak bandwidth.
    #[serde(rename = "G_ns_per_byte")]
    pub big_g_ns_per_byte: f64,
    /// Size at which the bandwidth first reaches half its peak.
    pub half_power_bytes: f64,
    /// Short round trip.
    pub rtt_ns: f64,
    /// Peak of the bandwidth sweep (1/G), MB/s.
    pub peak_mb_per_s: f64,
    /// Latency sweep.
    pub latency: Vec<LatencyPoint>,
    /// Bandwidth sweep.
    pub bandwidth: Vec<BandwidthPoint>,
    /// The bulk floor: memcpy of each size by rank 0.
    pub memcpy: Vec<BandwidthPoint>,
    /// The round trip floor: a cache line between two processes (shm) or 8 bytes over raw
    /// sockets (udp, tcp), measured before the job.
    pub floor_rtt_ns: Option<f64>,
    /// The network's stream floor: 1 MiB messages over raw sockets, MB/s (udp, tcp).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub raw_stream_mb_per_s: Option<f64>,
    /// Every repetition's figures.
    pub runs: Vec<LoggpRep>,
}

/// Where and when the figures were measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Machine {
    /// Host name.
    pub host: String,
    /// CPU model.
    pub cpu: String,
    /// CPUs this machine offers.
    pub cpus: usize,
    /// Kernel release.
    pub kernel: String,
    /// UTC time of the run, `YYYY-MM-DD HH:MM:SS UTC`.
    pub date: String,
}

impl Machine {
    /// This machine, now.
    pub fn here() -> Self {
        let read = |p: &str| std::fs::read_to_string(p).unwrap_or_default();
        let cpu = read("/proc/cpuinfo")
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or(String::new(), |(_, v)| v.trim().to_string());
        Self {
            host: read("/proc/sys/kernel/hostname").trim().to_string(),
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            kernel: read("/proc/sys/kernel/osrelease").trim().to_string(),
            date: utc_now(),
        }
    }
}

/// The current UTC time as `YYYY-MM-DD HH:MM:SS UTC` (no date crate for one line).
pub(super) fn utc_now() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// The whole run: one configuration per transport.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LoggpReport {
    /// What ran, in the order given.
    pub configs: Vec<LoggpConfig>,
    /// Where and when.
    pub machine: Machine,
    /// Repetitions.
    pub reps: usize,
    /// Iteration scale.
    pub scale: f64,
    /// Peers measured in the same run (`--peers`): UCX's and Open MPI's sweeps, medians over
    /// the repetitions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub peers: Vec<super::super::peers::PeerSeries>,
}
