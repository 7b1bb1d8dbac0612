//! `volley report RESULTS.json... -o report.html`: one self-contained HTML page from benchmark
//! results: the latency and bandwidth sweeps as inline SVG plots on log axes (volley beside its
//! memcpy floor, and beside peers when their results are given), every document's figures as
//! tables, and the machine and date of the run.
//!
//! Inputs: `volley bench loggp --json` documents (their `configs` give the curves, their
//! `peers`, with `--peers`, the peers' curves measured in the same run), any other
//! `volley bench ... --json` document (a table of its figures), a peer's document
//! `{"name": "...", "latency": [{"size", "latency_us"}], "bandwidth": [{"size", "mb_per_s"}]}`
//! (`configs` of such entries work too), and the text output of the OSU micro-benchmarks
//! (`osu_latency`, `osu_bw`), named after the file. The plots are drawn with plotters' SVG
//! backend, whose text is SVG `<text>` drawn by the browser; `--plot FILE.png` draws with the
//! bitmap backend and the DejaVu Sans shipped in `assets/`.

use plotters::prelude::*;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `volley report`.
#[derive(Debug, clap::Args)]
pub struct ReportArgs {
    /// Results: `volley bench ... --json` documents, peers' JSON, OSU text output.
    #[arg(required = true, value_name = "RESULTS.json")]
    inputs: Vec<PathBuf>,
    /// The HTML file to write.
    #[arg(short = 'o', long = "output", value_name = "report.html")]
    output: PathBuf,
}

/// What a curve measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quantity {
    /// One-way latency, µs.
    Latency,
    /// Bandwidth, MB/s.
    Bandwidth,
}

impl Quantity {
    fn axis(self) -> &'static str {
        match self {
            Quantity::Latency => "latency (us)",
            Quantity::Bandwidth => "bandwidth (MB/s)",
        }
    }
    fn title(self) -> &'static str {
        match self {
            Quantity::Latency => "Latency against message size",
            Quantity::Bandwidth => "Bandwidth against message size",
        }
    }
    /// The key of a point's figure in the JSON.
    fn key(self) -> &'static str {
        match self {
            Quantity::Latency => "latency_us",
            Quantity::Bandwidth => "mb_per_s",
        }
    }
}

/// One curve of a plot.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// The legend's name.
    pub name: String,
    /// What it measures.
    pub quantity: Quantity,
    /// (bytes, figure) points.
    pub points: Vec<(f64, f64)>,
    /// A floor rather than a measurement of a library: drawn dashed.
    pub floor: bool,
}

/// One input: a name (the file's) and its document.
pub type Document = (String, Value);

fn points(v: &Value, q: Quantity) -> Vec<(f64, f64)> {
    v.as_array()
        .map(|a| {
            a.iter()
                .filter_map(|p| Some((p.get("size")?.as_f64()?, p.get(q.key())?.as_f64()?)))
                .filter(|&(x, y)| x > 0.0 && y > 0.0 && y.is_finite())
                .collect()
        })
        .unwrap_or_default()
}

/// The curves of the documents: each configuration's latency and bandwidth sweeps, and the
/// memcpy floor once per document (from its first configuration that has one).
pub fn series(docs: &[Document]) -> Vec<Series> {
    let mut out = Vec::new();
    for (file, doc) in docs {
        let is_volley = doc.get("machine").is_some();
        let entries: Vec<&Value> = match doc.get("configs").and_then(Value::as_array) {
            Some(c) => c.iter().collect(),
            None => vec![doc],
        };
        let mut floor_done = false;
        for e in entries {
            let cfg = e.get("name").and_then(Value::as_str).unwrap_or(file);
            let name = if is_volley {
                format!("volley {cfg}")
            } else {
                cfg.to_string()
            };
            for (key, q) in [
                ("latency", Quantity::Latency),
                ("bandwidth", Quantity::Bandwidth),
            ] {
                let pts = e.get(key).map_or_else(Vec::new, |v| points(v, q));
                if !pts.is_empty() {
                    out.push(Series {
                        name: name.clone(),
                        quantity: q,
                        points: pts,
                        floor: false,
                    });
                }
            }
            let memcpy = e
                .get("memcpy")
                .map_or_else(Vec::new, |v| points(v, Quantity::Bandwidth));
            let raw = e.get("raw_stream_mb_per_s").and_then(Value::as_f64);
            if let Some(raw) = raw.filter(|x| *x > 0.0) {
                out.push(Series {
                    name: format!("{cfg}: raw socket stream, 1 MiB (floor)"),
                    quantity: Quantity::Bandwidth,
                    points: vec![(1048576.0, raw)],
                    floor: true,
                });
            }
            // Within a node a message of n bytes costs at least the cache line's handoff (half
            // the floor round trip) and one copy of its bytes.
            let floor_rtt = e.get("floor_rtt_ns").and_then(Value::as_f64);
            if let (Some(rtt), "shm") = (floor_rtt, cfg) {
                if !memcpy.is_empty() {
                    out.push(Series {
                        name: format!("{cfg} floor: cache line RTT/2 + one memcpy"),
                        quantity: Quantity::Latency,
                        // MB/s is bytes per µs.
                        points: memcpy
                            .iter()
                            .map(|&(n, bw)| (n, rtt / 2e3 + n / bw))
                            .collect(),
                        floor: true,
                    });
                }
            }
            if !floor_done && !memcpy.is_empty() {
                floor_done = true;
                out.push(Series {
                    name: "memcpy (floor)".into(),
                    quantity: Quantity::Bandwidth,
                    points: memcpy,
                    floor: true,
                });
            }
        }
        // Peers measured in the same run (`volley bench ... --peers`).
        for p in doc
            .get("peers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let name = p.get("name").and_then(Value::as_str).unwrap_or("peer");
            for (key, q) in [
                ("latency", Quantity::Latency),
                ("bandwidth", Quantity::Bandwidth),
            ] {
                let pts = p.get(key).map_or_else(Vec::new, |v| points(v, q));
                if !pts.is_empty() {
                    out.push(Series {
                        name: name.to_string(),
                        quantity: q,
                        points: pts,
                        floor: false,
                    });
                }
            }
        }
    }
    out
}

/// Reads the OSU micro-benchmarks' text output (`# Size  Latency (us)` or `# Size  Bandwidth
/// (MB/s)` then `SIZE VALUE` lines) as a peer's document named `name`; None if it is not one.
pub fn parse_osu(name: &str, text: &str) -> Option<Value> {
    let mut key = None;
    let mut pts = Vec::new();
    for line in text.lines() {
        let l = line.trim();
        if l.starts_with("# Size") {
            key = if l.contains("Latency (us)") {
                Some("latency")
            } else if l.contains("Bandwidth (MB/s)") {
                Some("bandwidth")
            } else {
                None
            };
            continue;
        }
        let mut f = l.split_whitespace();
        if let (Some(k), Some(s), Some(v)) = (key, f.next(), f.next()) {
            if let (Ok(s), Ok(v)) = (s.parse::<u64>(), v.parse::<f64>()) {
                let q = if k == "latency" {
                    "latency_us"
                } else {
                    "mb_per_s"
                };
                pts.push((k, serde_json::json!({"size": s, q: v})));
            }
        }
    }
    let k = pts.first()?.0;
    let list: Vec<Value> = pts.into_iter().map(|p| p.1).collect();
    Some(serde_json::json!({"name": name, k: list}))
}

/// DejaVu Sans (Bitstream Vera licence, `assets/DejaVuSans.LICENSE`): the font of the PNG
/// plots' text, and of every plot's text layout, shipped so a fresh machine needs none.
const FONT: &[u8] = include_bytes!("../assets/DejaVuSans.ttf");

/// Registers [`FONT`] as plotters' "sans-serif", once.
fn register_font() -> Result<(), String> {
    static DONE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    let ok = *DONE.get_or_init(|| {
        plotters::style::register_font("sans-serif", FontStyle::Normal, FONT).is_ok()
    });
    if ok {
        Ok(())
    } else {
        Err("the plots' font (DejaVu Sans) did not load".into())
    }
}

/// Draws the `quantity` curves of `all` in `area`.
fn draw<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    quantity: Quantity,
    all: &[Series],
) -> Result<(), String> {
    register_font()?;
    let err = |e: DrawingAreaErrorKind<DB::ErrorType>| format!("drawing the plot: {e:?}");
    let curves: Vec<&Series> = all.iter().filter(|s| s.quantity == quantity).collect();
    let xs = curves.iter().flat_map(|s| s.points.iter().map(|p| p.0));
    let ys = curves.iter().flat_map(|s| s.points.iter().map(|p| p.1));
    let (x0, x1) = xs.fold((f64::INFINITY, 0f64), |(a, b), x| (a.min(x), b.max(x)));
    let (y0, y1) = ys.fold((f64::INFINITY, 0f64), |(a, b), y| (a.min(y), b.max(y)));
    let (x0, x1) = if x0 < x1 {
        (x0, x1)
    } else {
        (8.0, 16.0 * 1048576.0)
    };
    let (y0, y1) = if y0 < y1 {
        (y0 / 1.5, y1 * 1.5)
    } else {
        (0.1, 10.0)
    };
    area.fill(&WHITE).map_err(err)?;
    let mut chart = ChartBuilder::on(area)
        .caption(quantity.title(), ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(64)
        .build_cartesian_2d((x0..x1).log_scale(), (y0..y1).log_scale())
        .map_err(err)?;
    chart
        .configure_mesh()
        .x_desc("message size (bytes)")
        .y_desc(quantity.axis())
        .x_label_formatter(&|x| human_size(*x))
        .draw()
        .map_err(err)?;
    for (i, s) in curves.iter().enumerate() {
        let color = Palette99::pick(i).to_rgba();
        let style = ShapeStyle::from(color).stroke_width(2);
        let line: Vec<(f64, f64)> = s.points.clone();
        let anno = if s.points.len() == 1 {
            // A lone figure (a floor measured at one size): a marked point.
            chart
                .draw_series(s.points.iter().map(|&p| Cross::new(p, 6, style)))
                .map_err(err)?
        } else if s.floor {
            chart
                .draw_series(DashedLineSeries::new(line, 6, 4, style))
                .map_err(err)?
        } else {
            chart
                .draw_series(LineSeries::new(line, style).point_size(3))
                .map_err(err)?
        };
        anno.label(s.name.clone()).legend(move |(x, y)| {
            PathElement::new(vec![(x, y), (x + 20, y)], color.stroke_width(2))
        });
    }
    chart
        .configure_series_labels()
        .position(if quantity == Quantity::Latency {
            SeriesLabelPosition::UpperLeft
        } else {
            SeriesLabelPosition::LowerRight
        })
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()
        .map_err(err)?;
    area.present().map_err(err)
}

/// An axis label: K and M (binary) for whole KiB and MiB, the bytes otherwise (plotters puts
/// log-axis ticks at powers of ten, which "9K" would misname).
fn human_size(x: f64) -> String {
    let b = x.round() as u64;
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{}M", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{}K", b >> 10),
        b => b.to_string(),
    }
}

/// One SVG figure of the `quantity` curves.
pub fn figure(quantity: Quantity, all: &[Series]) -> Result<String, String> {
    let mut svg = String::new();
    {
        let area = SVGBackend::with_string(&mut svg, (720, 440)).into_drawing_area();
        draw(&area, quantity, all)?;
    }
    Ok(svg)
}

/// Writes both sweeps of `docs` side by side to `path` (`volley bench ... --plot`): a PNG when
/// the name ends in `.png`, an SVG otherwise.
pub fn write_sweep_plot(docs: &[Document], path: &Path) -> Result<(), String> {
    let png = path
        .extension()
        .is_some_and(|e| e.eq_ignore_ascii_case("png"));
    if !png {
        let svg = sweep_svg(docs)?;
        return std::fs::write(path, svg).map_err(|e| e.to_string());
    }
    let all = series(docs);
    let root = BitMapBackend::new(path, (1440, 440)).into_drawing_area();
    let halves = root.split_evenly((1, 2));
    draw(&halves[0], Quantity::Latency, &all)?;
    draw(&halves[1], Quantity::Bandwidth, &all)?;
    root.present()
        .map_err(|e| format!("writing the PNG: {e:?}"))
}

/// One SVG with both sweeps of `docs` side by side (`volley bench loggp --plot`).
pub fn sweep_svg(docs: &[Document]) -> Result<String, String> {
    let all = series(docs);
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1440, 440)).into_drawing_area();
        let halves = root.split_evenly((1, 2));
        draw(&halves[0], Quantity::Latency, &all)?;
        draw(&halves[1], Quantity::Bandwidth, &all)?;
    }
    Ok(svg)
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

fn num(v: &Value) -> String {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(x) if x.fract() != 0.0 => {
                if x.abs() >= 100.0 {
                    format!("{x:.1}")
                } else {
                    format!("{x:.4}")
                }
            }
            _ => n.to_string(),
        },
        Value::Null => "n/a".into(),
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// The LogGP table of a loggp document: one row per parameter, one column per configuration.
fn loggp_table(configs: &[Value], html: &mut String) {
    let _ = write!(html, "<table><tr><th>parameter</th>");
    for c in configs {
        let name = c.get("name").and_then(Value::as_str).unwrap_or("?");
        let _ = write!(html, "<th>{}</th>", esc(name));
    }
    html.push_str("</tr>\n");
    for (key, label, div) in [
        ("L_ns", "Latency L (µs)", 1e3),
        ("o_s_ns", "Send overhead o_s (µs)", 1e3),
        ("o_r_ns", "Receive overhead o_r (µs)", 1e3),
        ("g_ns", "Gap g (µs)", 1e3),
        ("G_ns_per_byte", "Gap per byte G (ns/byte)", 1.0),
        ("peak_mb_per_s", "Bandwidth 1/G (MB/s)", 1.0),
        ("half_power_bytes", "Half-power point (bytes)", 1.0),
        ("rtt_ns", "Round trip RTT (µs)", 1e3),
        ("floor_rtt_ns", "Floor RTT (µs)", 1e3),
    ] {
        let _ = write!(html, "<tr><td>{label}</td>");
        for c in configs {
            let cell = match c.get(key).and_then(Value::as_f64) {
                Some(x) if div == 1.0 && x >= 100.0 => format!("{x:.0}"),
                Some(x) if div == 1.0 => format!("{x:.5}"),
                Some(x) => format!("{:.3}", x / div),
                None => "n/a".into(),
            };
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// Every curve's points in one table: size, then one column per curve.
fn sweep_table(all: &[Series], html: &mut String) {
    let mut sizes: Vec<u64> = all
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.0 as u64))
        .collect();
    sizes.sort_unstable();
    sizes.dedup();
    if sizes.is_empty() {
        return;
    }
    html.push_str("<table><tr><th>size (bytes)</th>");
    for s in all {
        let unit = match s.quantity {
            Quantity::Latency => "latency µs",
            Quantity::Bandwidth => "MB/s",
        };
        let _ = write!(html, "<th>{} {unit}</th>", esc(&s.name));
    }
    html.push_str("</tr>\n");
    for size in sizes {
        let _ = write!(html, "<tr><td>{size}</td>");
        for s in all {
            let cell = s
                .points
                .iter()
                .find(|p| p.0 as u64 == size)
                .map_or(String::new(), |p| format!("{:.2}", p.1));
            let _ = write!(html, "<td>{cell}</td>");
        }
        html.push_str("</tr>\n");
    }
    html.push_str("</table>\n");
}

/// The figures of any other document: its numbers and strings, nested objects flattened one
/// level (`ratios.x`); arrays and repetitions left out.
fn scalar_table(doc: &Value, html: &mut String) {
    let Some(obj) = doc.as_object() else { return };
    html.push_str("<table><tr><th>figure</th><th>value</th></tr>\n");
    for (k, v) in obj {
        match v {
            Value::Object(inner) => {
                for (k2, v2) in inner {
                    if !v2.is_array() && !v2.is_object() {
                        let _ = writeln!(
                            html,
                            "<tr><td>{}.{}</td><td>{}</td></tr>",
                            esc(k),
                            esc(k2),
                            esc(&num(v2))
                        );
                    }
                }
            }
            Value::Array(_) => {}
            v => {
                let _ = writeln!(
                    html,
                    "<tr><td>{}</td><td>{}</td></tr>",
                    esc(k),
                    esc(&num(v))
                );
            }
        }
    }
    html.push_str("</table>\n");
}

/// The whole page.
pub fn html(docs: &[Document]) -> Result<String, String> {
    let all = series(docs);
    let machine = docs.iter().find_map(|(_, d)| d.get("machine"));
    let field = |k: &str| {
        machine
            .and_then(|m| m.get(k))
            .map_or("unknown".to_string(), num)
    };
    let mut h = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">\n\
         <title>volley benchmark report</title>\n<style>\n\
         body{font-family:sans-serif;max-width:1500px;margin:1em auto;padding:0 1em}\n\
         table{border-collapse:collapse;margin:.5em 0 1.5em}\n\
         td,th{border:1px solid #bbb;padding:2px 8px;text-align:right}\n\
         td:first-child,th:first-child{text-align:left}\n\
         .figs{display:flex;flex-wrap:wrap;gap:1em}\n</style></head><body>\n\
         <h1>volley benchmark report</h1>\n",
    );
    let _ = writeln!(
        h,
        "<p>Machine: {} ({}, {} CPUs, Linux {}). Measured: {}.</p>",
        esc(&field("host")),
        esc(&field("cpu")),
        esc(&field("cpus")),
        esc(&field("kernel")),
        esc(&field("date"))
    );
    let _ = writeln!(
        h,
        "<p>Inputs: {}.</p>",
        docs.iter()
            .map(|(n, _)| esc(n))
            .collect::<Vec<_>>()
            .join(", ")
    );
    if !all.is_empty() {
        h.push_str("<h2>Figures</h2>\n<div class=\"figs\">\n");
        for q in [Quantity::Latency, Quantity::Bandwidth] {
            if all.iter().any(|s| s.quantity == q) {
                h.push_str(&figure(q, &all)?);
                h.push('\n');
            }
        }
        h.push_str("</div>\n<h2>Sweeps</h2>\n");
        sweep_table(&all, &mut h);
    }
    h.push_str("<h2>Tables</h2>\n");
    for (name, doc) in docs {
        let _ = writeln!(h, "<h3>{}</h3>", esc(name));
        match doc.get("configs").and_then(Value::as_array) {
            Some(c) if doc.get("machine").is_some() => loggp_table(c, &mut h),
            _ => scalar_table(doc, &mut h),
        }
    }
    h.push_str("</body></html>\n");
    Ok(h)
}

/// Reads one input: JSON, or OSU text output.
fn read_input(path: &Path) -> Result<Document, String> {
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let name = path.file_stem().map_or_else(
        || path.display().to_string(),
        |s| s.to_string_lossy().into(),
    );
    match serde_json::from_str::<Value>(&text) {
        Ok(v) => Ok((name, v)),
        Err(e) => parse_osu(&name, &text)
            .map(|v| (name, v))
            .ok_or_else(|| format!("{}: neither JSON ({e}) nor OSU output", path.display())),
    }
}

/// Runs `volley report`.
pub fn main(a: ReportArgs) -> ExitCode {
    let mut docs = Vec::new();
    for p in &a.inputs {
        match read_input(p) {
            Ok(d) => docs.push(d),
            Err(e) => {
                eprintln!("volley report: {e}");
                return ExitCode::from(2);
            }
        }
    }
    let page = match html(&docs) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("volley report: {e}");
            return ExitCode::FAILURE;
        }
    };
    match std::fs::write(&a.output, page) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volley report: writing {}: {e}", a.output.display());
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loggp_doc() -> Value {
        serde_json::json!({
            "machine": {"host": "h", "cpu": "c", "cpus": 2, "kernel": "6", "date": "d"},
            "configs": [{
                "name": "shm", "L_ns": -50.0, "o_s_ns": 60.0, "o_r_ns": 40.0, "g_ns": 30.0,
                "G_ns_per_byte": 0.05, "half_power_bytes": 4096.0, "floor_rtt_ns": 200.0,
                "latency": [{"size": 8, "latency_us": 0.2}, {"size": 16, "latency_us": 0.3}],
                "bandwidth": [{"size": 8, "mb_per_s": 100.0}, {"size": 16, "mb_per_s": 200.0}],
                "memcpy": [{"size": 8, "mb_per_s": 1000.0}, {"size": 16, "mb_per_s": 2000.0}]
            }]
        })
    }

    #[test]
    fn curves_come_from_configs_peers_and_osu_text() {
        let osu = parse_osu(
            "osu_bw",
            "# OSU MPI Bandwidth Test\n# Size      Bandwidth (MB/s)\n8    12.5\n16   30.0\n",
        )
        .unwrap();
        let s = series(&[("a".into(), loggp_doc()), ("osu_bw".into(), osu)]);
        let names: Vec<_> = s.iter().map(|s| (s.name.as_str(), s.quantity)).collect();
        assert_eq!(
            names,
            [
                ("volley shm", Quantity::Latency),
                ("volley shm", Quantity::Bandwidth),
                (
                    "shm floor: cache line RTT/2 + one memcpy",
                    Quantity::Latency
                ),
                ("memcpy (floor)", Quantity::Bandwidth),
                ("osu_bw", Quantity::Bandwidth),
            ]
        );
        // 0.1 µs of handoff, then 8 bytes at 1000 MB/s (bytes per µs).
        assert_eq!(s[2].points[0], (8.0, 0.1 + 0.008));
        assert_eq!(s[4].points, [(8.0, 12.5), (16.0, 30.0)]);
        assert!(parse_osu("x", "not osu\n").is_none());
    }

    #[test]
    fn the_page_holds_both_plots_with_every_series_and_the_tables() {
        let page = html(&[("loggp".into(), loggp_doc())]).unwrap();
        assert_eq!(page.matches("<svg").count(), 2, "two figures");
        assert!(page.contains("volley shm") && page.contains("memcpy (floor)"));
        assert!(page.contains("Gap per byte G") && page.contains("0.05000"));
        assert!(page.contains("Machine: h (c, 2 CPUs"));
    }

    #[test]
    fn axis_labels_name_sizes_exactly() {
        assert_eq!(human_size(4096.0), "4K");
        assert_eq!(human_size(16.0 * 1048576.0), "16M");
        assert_eq!(human_size(10000.0), "10000");
        assert_eq!(human_size(1e6), "1000000");
    }

    #[test]
    fn a_png_plot_has_text_and_curves_drawn() {
        let dir = crate::mpi::TempDir::new("volley-png-test").unwrap();
        let path = dir.0.join("sweeps.png");
        write_sweep_plot(&[("a".into(), loggp_doc())], &path).unwrap();
        let file = std::fs::File::open(&path).expect("the PNG");
        let mut reader = png::Decoder::new(file).read_info().expect("a PNG");
        let mut buf = vec![0; reader.output_buffer_size()];
        let info = reader.next_frame(&mut buf).expect("a frame");
        assert_eq!((info.width, info.height), (1440, 440));
        let px = info.color_type.samples();
        let colours: std::collections::HashSet<&[u8]> =
            buf[..info.buffer_size()].chunks(px).collect();
        // Anti-aliased text in grey levels, and the curves' colours.
        assert!(colours.len() >= 32, "{} colours", colours.len());
    }

    #[test]
    fn peers_of_the_same_run_are_curves_of_their_own() {
        let mut doc = loggp_doc();
        doc["peers"] = serde_json::json!([
            {"name": "ucx ucp_am_bw", "latency": [],
             "bandwidth": [{"size": 8, "mb_per_s": 50.0}, {"size": 16, "mb_per_s": 90.0}]},
            {"name": "open mpi", "latency": [{"size": 8, "latency_us": 0.9}],
             "bandwidth": [{"size": 8, "mb_per_s": 40.0}]}
        ]);
        let s = series(&[("a".into(), doc.clone())]);
        let peers: Vec<_> = s[4..]
            .iter()
            .map(|s| (s.name.as_str(), s.quantity))
            .collect();
        assert_eq!(
            peers,
            [
                ("ucx ucp_am_bw", Quantity::Bandwidth),
                ("open mpi", Quantity::Latency),
                ("open mpi", Quantity::Bandwidth),
            ]
        );
        let svg = figure(Quantity::Bandwidth, &s).unwrap();
        assert!(
            svg.contains("ucx ucp_am_bw") && svg.contains("open mpi"),
            "{svg}"
        );
    }
}
