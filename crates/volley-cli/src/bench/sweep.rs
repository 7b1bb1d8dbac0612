//! What the size sweeps of several benches share: the options that ask for extra outputs
//! (`--osu`, `--csv`, `--plot`) and the OSU micro-benchmarks' text layout.

use super::loggp::{BandwidthPoint, LatencyPoint};
use serde_json::Value;
use std::io::Write;
use std::path::PathBuf;

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
