//! What the size sweeps of several benches share: the options that ask for extra outputs
//! (`--osu`, `--csv`, `--plot`) and the OSU micro-benchmarks' text layout.

use super::loggp::{BandwidthPoint, LatencyPoint};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;
use std::time::Instant;

/// Operations a sweep makes at `size` before `--scale`: `cap` for small sizes, `bytes` of
/// payload for large ones.
pub fn per_size(size: usize, cap: u64, bytes: u64) -> f64 {
    (cap as f64).min(bytes as f64 / size as f64)
}

/// [`per_size`] scaled by `scale`, never fewer than 3.
pub fn sweep_iters(scale: f64, size: usize, cap: u64, bytes: u64) -> u64 {
    ((per_size(size, cap, bytes) * scale) as u64).max(3)
}

/// Copies `size` bytes between two buffers `n` times after a warm-up: MB/s (the bulk floor
/// of a sweep).
pub fn memcpy_mb_per_s(size: usize, n: u64) -> f64 {
    let src = vec![5u8; size];
    let mut dst = vec![0u8; size];
    dst.copy_from_slice(std::hint::black_box(&src));
    let t0 = Instant::now();
    for _ in 0..n {
        dst.copy_from_slice(std::hint::black_box(&src));
        std::hint::black_box(&mut dst);
    }
    (n as usize * size) as f64 / t0.elapsed().as_nanos() as f64 * 1e3
}

/// memcpy of every sweep size in this process, MB/s (median of `reps`, at least three).
pub fn memcpy_curve(reps: usize, scale: f64) -> Vec<BandwidthPoint> {
    super::loggp::SIZES
        .map(|p| {
            let size = 1usize << p;
            let n = sweep_iters(scale, size, 100_000, 256 << 20);
            let mut samples: Vec<f64> =
                (0..reps.max(3)).map(|_| memcpy_mb_per_s(size, n)).collect();
            BandwidthPoint {
                size,
                mb_per_s: super::median(&mut samples),
            }
        })
        .collect()
}

/// One operation's sweeps as named curves, in the layout `volley report` and `--plot` read
/// (µs and MB/s, like OSU's): a report's `configs`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Curves {
    /// `put direct`, `long`, ...
    pub name: String,
    /// One-way latency by size (OSU's: half an echo's round trip, or one blocking operation).
    pub latency: Vec<LatencyPoint>,
    /// Bandwidth by size (empty when the bench has none).
    #[serde(default)]
    pub bandwidth: Vec<BandwidthPoint>,
    /// The floor: memcpy of each size in one process (on one curve of a report only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memcpy: Vec<BandwidthPoint>,
}

/// Every curve's sweeps in the OSU micro-benchmarks' layout, each block headed by
/// `volley bench BENCH NAME: WHAT`.
pub fn print_osu(
    bench: &str,
    what_latency: &str,
    what_bandwidth: &str,
    configs: &[Curves],
    w: &mut dyn Write,
) {
    for c in configs {
        if !c.latency.is_empty() {
            osu_latency(
                w,
                &format!("volley bench {bench} {}: {what_latency}", c.name),
                &c.latency,
            );
        }
        if !c.bandwidth.is_empty() {
            osu_bandwidth(
                w,
                &format!("volley bench {bench} {}: {what_bandwidth}", c.name),
                &c.bandwidth,
            );
        }
    }
}

/// Every curve's sweeps side by side under `heading`, with the memcpy floor of the first curve
/// that has one as the last column; nothing when there are no curves.
pub fn print_curves(heading: &str, configs: &[Curves], w: &mut dyn Write) {
    if configs.is_empty() {
        return;
    }
    let mut cols: Vec<(String, &[LatencyPoint], &[BandwidthPoint])> = configs
        .iter()
        .map(|c| (c.name.clone(), &c.latency[..], &c.bandwidth[..]))
        .collect();
    if let Some(c) = configs.iter().find(|c| !c.memcpy.is_empty()) {
        cols.push(("memcpy (floor)".into(), &[], &c.memcpy[..]));
    }
    super::peers::print_side_by_side(heading, &cols, w);
}

/// The curves as CSV: `config,size,latency_us,bandwidth_mb_per_s,memcpy_mb_per_s`, the memcpy
/// column from the first curve that has the floor (empty where a figure is missing).
pub fn csv(configs: &[Curves]) -> String {
    let floor = configs
        .iter()
        .find(|c| !c.memcpy.is_empty())
        .map_or(&[][..], |c| &c.memcpy[..]);
    let cell = |x: Option<f64>, digits: usize| x.map_or(String::new(), |x| format!("{x:.digits$}"));
    let mut s = String::from("config,size,latency_us,bandwidth_mb_per_s,memcpy_mb_per_s\n");
    for c in configs {
        for (i, p) in c.latency.iter().enumerate() {
            let bw = c
                .bandwidth
                .get(i)
                .filter(|b| b.size == p.size)
                .map(|b| b.mb_per_s);
            let mc = floor.iter().find(|b| b.size == p.size).map(|b| b.mb_per_s);
            s += &format!(
                "{},{},{:.3},{},{}\n",
                c.name,
                p.size,
                p.latency_us,
                cell(bw, 1),
                cell(mc, 1)
            );
        }
    }
    s
}

/// The sweeps' extra outputs, beside the table and `--json`.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SweepOutputs {
    /// Also print the sweeps in the OSU micro-benchmarks' layout (`# Size  Latency (us)`,
    /// `# Size  Bandwidth (MB/s)`).
    #[arg(long)]
    pub osu: bool,
    /// Write the sweeps as CSV to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Draw the sweeps (latency and bandwidth against size, beside the floors) to FILE: PNG if
    /// its name ends in .png, SVG otherwise.
    #[arg(long, value_name = "FILE.svg|FILE.png")]
    pub plot: Option<PathBuf>,
}

impl SweepOutputs {
    /// Writes the CSV (made by `csv` only when asked for) and the plot of `doc`, a report with
    /// `configs` of named curves (see `crate::report`).
    pub fn write(
        &self,
        bench: &str,
        doc: &Value,
        csv: impl FnOnce() -> String,
    ) -> Result<(), String> {
        if let Some(path) = &self.csv {
            std::fs::write(path, csv()).map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        if let Some(path) = &self.plot {
            crate::report::write_sweep_plot(
                &[(format!("volley bench {bench}"), doc.clone())],
                path,
            )
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
        }
        Ok(())
    }
}

/// One latency block in `osu_latency`'s layout (`%-10d%18.2f`) under the comment `heading`.
pub fn osu_latency(w: &mut dyn Write, heading: &str, points: &[LatencyPoint]) {
    let _ = writeln!(w, "# {heading}");
    let _ = writeln!(w, "{:<10}{:>18}", "# Size", "Latency (us)");
    for p in points {
        let _ = writeln!(w, "{:<10}{:>18.2}", p.size, p.latency_us);
    }
}

/// One bandwidth block in `osu_bw`'s layout under the comment `heading`.
pub fn osu_bandwidth(w: &mut dyn Write, heading: &str, points: &[BandwidthPoint]) {
    let _ = writeln!(w, "# {heading}");
    let _ = writeln!(w, "{:<10}{:>18}", "# Size", "Bandwidth (MB/s)");
    for p in points {
        let _ = writeln!(w, "{:<10}{:>18.2}", p.size, p.mb_per_s);
    }
}
