//! `--peers`: established libraries measured in the same run as volley, over this machine's
//! shared memory, with the same sizes (8 B to 16 MiB by powers of two), so a table and a plot
//! show volley, UCX, Open MPI and the floor together.
//!
//! - **UCX** (`ucx_perftest`, Debian's ucx-utils): a server and a client on localhost for every
//!   test and size; `ucp_am_lat` (one-way latency of Active Messages), `ucp_am_bw` and
//!   `ucp_put_bw` (bandwidth of a window of Active Messages and of puts).
//! - **Open MPI** (`mpicc`, `mpirun`): `mpi_sweep.c`, an OSU-style ping-pong and windowed
//!   `MPI_Isend` stream, compiled and run as the other MPI peers are ([`crate::mpi`]).
//!
//! A peer that is not installed (or fails) is one note, and the run goes on without it.

use super::loggp::{BandwidthPoint, LatencyPoint, SIZES};
use crate::mpi::{self, TempDir};
use serde::{Deserialize, Serialize};
use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

/// One peer's curves (either may be empty: a bandwidth test has no latency curve).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PeerSeries {
    /// `ucx ucp_am_bw`, `open mpi`, ...
    #[serde(default)]
    pub name: String,
    /// One-way latency sweep (half the round trip).
    #[serde(default)]
    pub latency: Vec<LatencyPoint>,
    /// Bandwidth sweep, 10^6 bytes per second.
    #[serde(default)]
    pub bandwidth: Vec<BandwidthPoint>,
}

/// Every peer's curves, and a line for each peer that could not be measured.
#[derive(Debug, Clone, Default)]
pub struct Peers {
    /// Curves measured.
    pub series: Vec<PeerSeries>,
    /// "ucx_perftest is not installed (apt-get install ucx-utils): UCX skipped", ...
    pub notes: Vec<String>,
}

/// How long one `ucx_perftest` or `mpirun` may take.
const DEADLINE: Duration = Duration::from_secs(300);

/// Measures every peer installed here `reps` times, iteration counts scaled by `scale`: each
/// curve's points are medians over the repetitions (as volley's are). `step` is called before
/// each peer of each repetition with its name (for a progress bar).
pub fn measure(scale: f64, reps: usize, mut step: impl FnMut(&str)) -> Peers {
    let runs: Vec<Peers> = (0..reps.max(1))
        .map(|_| measure_once(scale, &mut step))
        .collect();
    let mut out = Peers::default();
    for r in &runs {
        for n in &r.notes {
            if !out.notes.contains(n) {
                out.notes.push(n.clone());
            }
        }
    }
    for s in &runs[0].series {
        let same: Vec<&PeerSeries> = runs
            .iter()
            .filter_map(|r| r.series.iter().find(|t| t.name == s.name))
            .collect();
        out.series.push(PeerSeries {
            name: s.name.clone(),
            latency: super::median_curve(&same, |t| &t.latency),
            bandwidth: super::median_curve(&same, |t| &t.bandwidth),
        });
    }
    out
}

fn measure_once(scale: f64, step: &mut impl FnMut(&str)) -> Peers {
    let mut out = Peers::default();
    step("ucx");
    if on_path("ucx_perftest") {
        for (test, lat) in [
            ("ucp_am_lat", true),
            ("ucp_am_bw", false),
            ("ucp_put_bw", false),
        ] {
            match ucx_sweep(test, lat, scale) {
                Ok(s) => out.series.push(s),
                Err(e) => out.notes.push(format!("ucx {test}: {e}")),
            }
        }
    } else {
        out.notes
            .push("ucx_perftest is not installed (Debian: ucx-utils): UCX skipped".into());
    }
    step("open mpi");
    if mpi::available() {
        match mpi_sweep(scale) {
            Ok(s) => out.series.push(s),
            Err(e) => out.notes.push(format!("open mpi: {e}")),
        }
    } else {
        out.notes
            .push("mpicc/mpirun are not installed (Debian: openmpi-bin): Open MPI skipped".into());
    }
    out
}

fn on_path(name: &str) -> bool {
    std::env::var_os("PATH").is_some_and(|p| {
        std::env::split_paths(&p).any(|d| {
            use std::os::unix::fs::PermissionsExt;
            std::fs::metadata(d.join(name))
                .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
    })
}

/// Iterations of `ucx_perftest` for a size: fewer for long messages.
fn ucx_iters(scale: f64, lat: bool, size: usize) -> u64 {
    let base: f64 = if lat { 20_000.0 } else { 2_000.0 };
    let n = if size <= 8192 {
        base
    } else {
        base * 8192.0 / size as f64
    };
    ((n * scale) as u64).max(4)
}

/// One `ucx_perftest` test over every size: a server and a client per size.
fn ucx_sweep(test: &str, lat: bool, scale: f64) -> Result<PeerSeries, String> {
    let dir = TempDir::new("volley-ucx")?;
    let mut s = PeerSeries {
        name: format!("ucx {test}"),
        ..Default::default()
    };
    for lg in SIZES {
        let size = 1usize << lg;
        let mut n = ucx_iters(scale, lat, size);
        // A run too short for ucx_perftest's clock reports 0 or `inf`: longer runs, then give up.
        let mut tries = 0;
        let f = loop {
            let line = ucx_once(test, size, n, &dir)?;
            let f = parse_final(&line).ok_or_else(|| format!("cannot read {line:?}"))?;
            let figure = if lat { f.0 } else { f.1 };
            if figure.is_finite() && figure > 0.0 {
                break f;
            }
            tries += 1;
            if tries == 3 {
                return Err(format!("no usable figure at {size} bytes in {line:?}"));
            }
            n *= 4;
        };
        if lat {
            s.latency.push(LatencyPoint {
                size,
                latency_us: f.0,
            });
        } else {
            s.bandwidth.push(BandwidthPoint {
                size,
                mb_per_s: f.1,
            });
        }
    }
    Ok(s)
}

/// Runs a server and a client of `test` on localhost; the client's `Final:` line.
fn ucx_once(test: &str, size: usize, n: u64, dir: &TempDir) -> Result<String, String> {
    let warmup = (n / 10).max(1).to_string();
    // Pinned, one CPU each, as volley's ranks are.
    let cpus = crate::affinity::allowed_cpus();
    let cpu = |i: usize| {
        cpus.get(i)
            .or(cpus.first())
            .map_or("0".into(), |c| c.to_string())
    };
    let (server_cpu, client_cpu) = (cpu(0), cpu(1));
    let mut last = String::new();
    // A port may be taken, or the server not yet listening: a few tries on new ports.
    for attempt in 0..5u64 {
        let port = (13_000 + (volley::bootstrap::random_u64() % 4000)).to_string();
        let mut server = Command::new("ucx_perftest")
            .args(["-p", &port, "-c", &server_cpu])
            .env("UCX_TLS", "posix,self")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("cannot start ucx_perftest: {e}"))?;
        std::thread::sleep(Duration::from_millis(200 + 300 * attempt));
        let mut client = Command::new("ucx_perftest");
        client
            .args(["localhost", "-p", &port, "-t", test, "-c", &client_cpu])
            .args(["-s", &size.to_string(), "-n", &n.to_string(), "-w", &warmup])
            .env("UCX_TLS", "posix,self");
        let got = mpi::run_with_deadline(&mut client, &dir.0, "ucx", DEADLINE, "stopped");
        let _ = server.kill();
        let _ = server.wait();
        match got {
            Ok((st, out, err)) => {
                if let Some(l) = out.lines().find(|l| l.starts_with("Final:")) {
                    return Ok(l.to_string());
                }
                last = format!("`ucx_perftest -t {test} -s {size}` ({st}): {}", err.trim());
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// `Final:  ITERS  TYPICAL  AVG  OVERALL  BW_AVG  BW_OVERALL  RATE_AVG  RATE_OVERALL`: the
/// average one-way latency (µs) and the overall bandwidth converted from ucx_perftest's MiB/s
/// to 10^6 bytes per second.
fn parse_final(line: &str) -> Option<(f64, f64)> {
    let f: Vec<f64> = line
        .split_whitespace()
        .skip(1)
        .filter_map(|w| w.parse().ok())
        .collect();
    let (lat, bw) = (*f.get(2)?, *f.get(5)?);
    Some((lat, bw * 1.048_576))
}

/// The MPI program: `mpi_sweep SCALE`.
const MPI_SOURCE: &str = include_str!("mpi_sweep.c");

fn mpi_sweep(scale: f64) -> Result<PeerSeries, String> {
    // Pinned, as volley's ranks are.
    let mut s: PeerSeries = mpi::run_json(
        "mpi_sweep",
        MPI_SOURCE,
        2,
        true,
        &[scale.to_string()],
        DEADLINE,
    )?;
    s.name = "open mpi".into();
    Ok(s)
}

/// The peers' sweeps in the OSU layout, one block per curve.
pub fn print_osu(peers: &[PeerSeries], w: &mut dyn Write) {
    for p in peers {
        if !p.latency.is_empty() {
            super::sweep::osu_latency(w, &format!("{}: one-way latency", p.name), &p.latency);
        }
        if !p.bandwidth.is_empty() {
            super::sweep::osu_bandwidth(w, &format!("{}: bandwidth", p.name), &p.bandwidth);
        }
    }
}

/// A sweep table: one row per size, a latency (µs) or bandwidth (MB/s) column per curve,
/// `columns` being (name, latency points, bandwidth points).
pub fn print_side_by_side(
    title: &str,
    columns: &[(String, &[LatencyPoint], &[BandwidthPoint])],
    w: &mut dyn Write,
) {
    for lat in [true, false] {
        let cols: Vec<_> = columns
            .iter()
            .filter(|c| {
                if lat {
                    !c.1.is_empty()
                } else {
                    !c.2.is_empty()
                }
            })
            .collect();
        if cols.is_empty() {
            continue;
        }
        let what = if lat {
            "latency (us)"
        } else {
            "bandwidth (MB/s)"
        };
        let _ = writeln!(w, "  {title}: {what}");
        let mut head = format!("  {:>10}", "size");
        for c in &cols {
            head += &format!(" {:>16}", c.0);
        }
        let _ = writeln!(w, "{head}");
        for lg in SIZES {
            let size = 1usize << lg;
            let mut line = format!("  {size:>10}");
            for c in &cols {
                let v = if lat {
                    c.1.iter().find(|p| p.size == size).map(|p| p.latency_us)
                } else {
                    c.2.iter().find(|p| p.size == size).map(|p| p.mb_per_s)
                };
                line += &match v {
                    Some(v) if v.is_finite() => format!(" {v:>16.2}"),
                    _ => format!(" {:>16}", "-"),
                };
            }
            let _ = writeln!(w, "{line}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_ucx_perftest_final_line() {
        let l = "Final:               1000     0.000     0.216     0.216       35.26      35.26     4623762     4623762";
        let (lat, bw) = parse_final(l).unwrap();
        assert_eq!(lat, 0.216);
        assert!((bw - 35.26 * 1.048_576).abs() < 1e-9);
        assert_eq!(parse_final("Final: 1 2"), None);
    }

    #[test]
    fn the_side_by_side_table_has_a_column_per_curve() {
        let lat = [LatencyPoint {
            size: 8,
            latency_us: 1.5,
        }];
        let bw = [BandwidthPoint {
            size: 16,
            mb_per_s: 99.0,
        }];
        let mut out = Vec::new();
        print_side_by_side(
            "t",
            &[("a".into(), &lat, &[]), ("b".into(), &[], &bw)],
            &mut out,
        );
        let s = String::from_utf8(out).unwrap();
        assert!(
            s.contains("t: latency (us)") && s.contains("t: bandwidth (MB/s)"),
            "{s}"
        );
        assert!(s
            .lines()
            .any(|l| l.trim_start().starts_with("8 ") && l.contains("1.50")));
        assert!(s
            .lines()
            .any(|l| l.trim_start().starts_with("16 ") && l.contains("99.00")));
    }
}
