//! `volley bench`: benchmarks as commands. Each prints a table, writes JSON with `--json`, and
//! reports every figure beside the machine floor measured in the same run.

mod am;
mod coll;
pub(crate) mod floor;
mod launchers;
pub mod loggp;
mod mpi_peer;
pub(crate) mod msg;
pub mod peers;
mod pipe;
mod progress;
mod rma;
mod splitc;
pub mod sweep;

use clap::Subcommand;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use std::io::Write;
use std::process::ExitCode;

/// The benchmarks.
#[derive(Debug, Subcommand)]
pub enum BenchCommand {
    /// Active Message latency, bandwidth and LogP overheads between two local ranks, with
    /// medium and long round trips swept by size.
    Am(AmArgs),
    /// One-sided put, get and atomics between two local ranks, on the direct and AM paths,
    /// with latency and bandwidth swept from 8 B to 16 MiB.
    Rma(RmaArgs),
    /// Progress engines: round trip per wait mode, wake-up of a sleeping rank, and seed 004's
    /// polling-granularity experiment.
    Progress(BenchArgs),
    /// Seed 004's Table 1 for the global layer: round trips, overheads, gaps, bulk bandwidth
    /// and polling granularity, per strategy (3 ranks).
    Splitc(SplitcArgs),
    /// The global layer's collectives on 2, 4 and 8 ranks beside Open MPI's (when installed),
    /// with the all-reduce, all-to-all and broadcast swept from 8 B to 1 MiB.
    Coll(CollArgs),
    /// Start-up time and short round trip of a job under each launcher that works here:
    /// `volley run`, Open MPI's `mpirun` and Slurm's `srun --mpi=pmix`.
    Launchers(LaunchersArgs),
    /// Seed 001's LogGP table for volley (L, o_s, o_r, g, G, half-power size) over shared
    /// memory, UDP and TCP, with latency and bandwidth sweeps from 8 B to 16 MiB.
    Loggp(LoggpArgs),
    /// The tag-matching layer (volley-msg) beside the Active Messages under it and Open
    /// MPI's send/receive: round trips, sender overheads, one-way signals, and latency and
    /// bandwidth swept from 8 B to 16 MiB.
    Msg(MsgArgs),
}

/// Options of `volley bench loggp`.
#[derive(Debug, clap::Args)]
pub struct LoggpArgs {
    /// Write the results as JSON to FILE (`-` for standard output; the tables then go to
    /// standard error).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Repetitions; every figure is the median over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    reps: u64,
    /// Scale every iteration count (0.01 for a quick smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Which transport to measure (default: shm, udp and tcp, one job each).
    #[arg(long, value_enum)]
    transport: Option<Transport>,
    #[command(flatten)]
    out: sweep::SweepOutputs,
    /// Also measure the peers installed here over shared memory, with the same sizes: UCX
    /// (`ucx_perftest`: ucp_am_lat, ucp_am_bw, ucp_put_bw) and Open MPI (an OSU-style
    /// ping-pong and windowed MPI_Isend stream); their curves join the table, the JSON
    /// (`peers`) and the plot. A peer not installed is one line on standard error.
    #[arg(long)]
    peers: bool,
}

/// Options of `volley bench am`.
#[derive(Debug, clap::Args)]
pub struct AmArgs {
    #[command(flatten)]
    common: BenchArgs,
    #[command(flatten)]
    out: sweep::SweepOutputs,
}

/// Options of `volley bench msg`.
#[derive(Debug, clap::Args)]
pub struct MsgArgs {
    #[command(flatten)]
    common: BenchArgs,
    #[command(flatten)]
    out: sweep::SweepOutputs,
}

/// Options of `volley bench rma`.
#[derive(Debug, clap::Args)]
pub struct RmaArgs {
    #[command(flatten)]
    common: BenchArgs,
    #[command(flatten)]
    out: sweep::SweepOutputs,
}

/// Options of `volley bench launchers`.
#[derive(Debug, clap::Args)]
pub struct LaunchersArgs {
    /// Write the results as JSON to FILE (`-` for standard output; the table then goes to
    /// standard error).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Repetitions; every figure is the median over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    reps: u64,
    /// Scale the round trips (0.01 for a quick smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Ranks of the start-up job.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u64).range(1..=256))]
    ranks: u64,
}

/// Options of `volley bench splitc`.
#[derive(Debug, clap::Args)]
pub struct SplitcArgs {
    #[command(flatten)]
    common: BenchArgs,
    /// Which strategies to measure, one job each.
    #[arg(long, value_enum, default_value_t = StrategyArg::All)]
    strategy: StrategyArg,
    #[command(flatten)]
    out: sweep::SweepOutputs,
}

/// Options of `volley bench coll`.
#[derive(Debug, clap::Args)]
pub struct CollArgs {
    #[command(flatten)]
    common: BenchArgs,
    #[command(flatten)]
    out: sweep::SweepOutputs,
    /// Rank counts to measure, each followed by Open MPI on as many (e.g. `--ranks 4,8`).
    #[arg(long, value_delimiter = ',', default_values_t = coll::RANKS, value_parser = rank_count)]
    ranks: Vec<usize>,
}

/// A rank count of `volley bench coll --ranks`: 1 to 64.
fn rank_count(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if (1..=64).contains(&n) => Ok(n),
        _ => Err(format!("{s:?}: expected a rank count from 1 to 64")),
    }
}

/// A strategy of the global layer, or all of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum StrategyArg {
    /// The program's thread does everything.
    Proc,
    /// A progress thread serves remote requests.
    Np,
    /// Direct copies on mapped memory within a node.
    Hw,
    /// proc, np and hw, one after another.
    All,
}

impl StrategyArg {
    fn strategies(self) -> Vec<volley_global::Strategy> {
        use volley_global::Strategy;
        match self {
            StrategyArg::Proc => vec![Strategy::Proc],
            StrategyArg::Np => vec![Strategy::Np],
            StrategyArg::Hw => vec![Strategy::Hw],
            StrategyArg::All => Strategy::ALL.to_vec(),
        }
    }
}

/// Options every benchmark takes.
#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// Write the results as JSON to FILE (`-` for standard output; the table then goes to
    /// standard error).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Repetitions; every figure is the median over them.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u64).range(1..=1000))]
    reps: u64,
    /// Scale every iteration count (0.01 for a quick smoke run).
    #[arg(long, default_value_t = 1.0)]
    scale: f64,
    /// Between the two ranks: shared memory (one node), or the network transport with each
    /// rank on its own emulated node (`am` only).
    #[arg(long, value_enum, default_value_t = Transport::Shm)]
    transport: Transport,
}

/// What carries the benchmark's messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Transport {
    /// Shared-memory rings (both ranks on one node).
    Shm,
    /// The reliable protocol over UDP (one rank per emulated node).
    Udp,
    /// TCP (one rank per emulated node).
    Tcp,
}

impl Transport {
    /// The transport's name as `VOLLEY_NET` and JSON spell it.
    pub fn name(self) -> &'static str {
        match self {
            Transport::Shm => "shm",
            Transport::Udp => "udp",
            Transport::Tcp => "tcp",
        }
    }
}

/// Network round trips cost ~50 times shared-memory ones: iteration counts shrink alike.
const NETWORK_SCALE: f64 = 0.05;

/// Median of the samples (NaN when there are none; written as JSON null).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Runs a benchmark command.
pub fn main(cmd: BenchCommand) -> ExitCode {
    // Two ranks on shared memory, beside a floor measured on the same two CPUs.
    const SHM_PAIR: Needs = Needs {
        any_transport: false,
        two_cpus: true,
    };
    match cmd {
        BenchCommand::Am(a) => run_bench(
            "am",
            a.common,
            Needs {
                any_transport: true,
                two_cpus: true,
            },
            am::bench,
            am::print_table,
            Some(Sweeps {
                out: &a.out,
                osu: am::print_osu,
                csv: am::csv,
            }),
        ),
        BenchCommand::Rma(a) => run_bench(
            "rma",
            a.common,
            SHM_PAIR,
            |reps, scale, _| rma::bench(reps, scale),
            rma::print_table,
            Some(Sweeps {
                out: &a.out,
                osu: rma::print_osu,
                csv: rma::csv,
            }),
        ),
        BenchCommand::Progress(a) => run_bench(
            "progress",
            a,
            SHM_PAIR,
            |reps, scale, _| progress::bench(reps, scale),
            progress::print_table,
            None,
        ),
        BenchCommand::Splitc(a) => {
            let strategies = a.strategy.strategies();
            run_bench(
                "splitc",
                a.common,
                Needs {
                    any_transport: true,
                    two_cpus: false,
                },
                |reps, scale, transport| splitc::bench(reps, scale, transport, &strategies),
                splitc::print_table,
                Some(Sweeps {
                    out: &a.out,
                    osu: splitc::print_osu,
                    csv: splitc::csv,
                }),
            )
        }
        BenchCommand::Launchers(a) => {
            if !(a.scale > 0.0 && a.scale <= 100.0) {
                eprintln!("volley bench launchers: --scale must be in (0, 100]");
                return ExitCode::from(2);
            }
            let json = match Json::open(a.json.as_deref()) {
                Ok(j) => j,
                Err(e) => {
                    eprintln!("volley bench launchers: {e}");
                    return ExitCode::from(2);
                }
            };
            let activity = crate::bar::activity("volley bench launchers");
            let measured = launchers::bench(a.reps as usize, a.scale, a.ranks as usize);
            drop(activity);
            match measured {
                Ok(report) => {
                    let mut text = Vec::new();
                    launchers::print_table(&report, &mut text);
                    let doc = serde_json::to_value(&report).expect("a report serializes");
                    emit_text(&text, &doc, json)
                }
                Err(e) => {
                    eprintln!("volley bench launchers: {e}");
                    ExitCode::FAILURE
                }
            }
        }
        BenchCommand::Loggp(a) => loggp_main(a),
        BenchCommand::Msg(a) => run_bench(
            "msg",
            a.common,
            Needs {
                any_transport: true,
                two_cpus: true,
            },
            msg::bench,
            msg::print_table,
            Some(Sweeps {
                out: &a.out,
                osu: msg::print_osu,
                csv: msg::csv,
            }),
        ),
        BenchCommand::Coll(a) => run_bench(
            "coll",
            a.common,
            Needs {
                any_transport: false,
                two_cpus: false,
            },
            |reps, scale, _| coll::bench(reps, scale, &a.ranks),
            coll::print_table,
            Some(Sweeps {
                out: &a.out,
                osu: coll::print_osu,
                csv: coll::csv,
            }),
        ),
    }
}

/// `volley bench loggp`: its own runner, for the transport list and the extra outputs.
fn loggp_main(a: LoggpArgs) -> ExitCode {
    if !(a.scale > 0.0 && a.scale <= 100.0) {
        eprintln!("volley bench loggp: --scale must be in (0, 100]");
        return ExitCode::from(2);
    }
    let cpus = crate::affinity::allowed_cpus().len();
    if cpus < 2 {
        eprintln!(
            "volley bench loggp: needs two CPUs (the ranks and the floor run on two), this process may use {cpus}"
        );
        return ExitCode::from(2);
    }
    let json = match Json::open(a.json.as_deref()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("volley bench loggp: {e}");
            return ExitCode::from(2);
        }
    };
    let transports = match a.transport {
        Some(t) => vec![t],
        None => vec![Transport::Shm, Transport::Udp, Transport::Tcp],
    };
    let report = match loggp::bench(a.reps as usize, a.scale, &transports, a.peers) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("volley bench loggp: {e}");
            return ExitCode::FAILURE;
        }
    };
    let mut text = Vec::new();
    loggp::print_table(&report, &mut text);
    if a.out.osu {
        loggp::print_osu(&report, &mut text);
    }
    let doc = serde_json::to_value(&report).expect("a report serializes");
    if let Err(e) = a.out.write("loggp", &doc, || loggp::csv(&report)) {
        eprintln!("volley bench loggp: {e}");
        return ExitCode::FAILURE;
    }
    emit_text(&text, &doc, json)
}

/// What a benchmark accepts and needs beyond the options every one checks.
#[derive(Debug, Clone, Copy)]
struct Needs {
    /// Runs over every transport (otherwise over shared memory only).
    any_transport: bool,
    /// Needs two CPUs: on one, its ranks and its floor would take turns and every figure
    /// would be meaningless.
    two_cpus: bool,
}

/// A benchmark's size sweeps in the extra layouts, when its options ask for them.
struct Sweeps<'a, R> {
    out: &'a sweep::SweepOutputs,
    osu: fn(&R, &mut dyn Write),
    csv: fn(&R) -> String,
}

/// Checks the common options, runs the benchmark, prints its table and writes its JSON
/// (serialized from its report), and its sweeps' extra outputs.
fn run_bench<R: Serialize>(
    name: &str,
    args: BenchArgs,
    needs: Needs,
    bench: impl FnOnce(usize, f64, Transport) -> Result<R, String>,
    table: fn(&R, &mut dyn Write),
    sweeps: Option<Sweeps<'_, R>>,
) -> ExitCode {
    if !(args.scale > 0.0 && args.scale <= 100.0) {
        eprintln!("volley bench {name}: --scale must be in (0, 100]");
        return ExitCode::from(2);
    }
    if !needs.any_transport && args.transport != Transport::Shm {
        eprintln!("volley bench {name}: only --transport shm is supported");
        return ExitCode::from(2);
    }
    if needs.two_cpus {
        let cpus = crate::affinity::allowed_cpus().len();
        if cpus < 2 {
            eprintln!(
                "volley bench {name}: needs two CPUs (the ranks and the floor run on two), this process may use {cpus}"
            );
            return ExitCode::from(2);
        }
    }
    let json = match Json::open(args.json.as_deref()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("volley bench {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let activity = crate::bar::activity(&format!("volley bench {name}"));
    let measured = bench(args.reps as usize, args.scale, args.transport);
    drop(activity);
    match measured {
        Ok(report) => {
            let mut text = Vec::new();
            table(&report, &mut text);
            let doc = serde_json::to_value(&report).expect("a report serializes");
            if let Some(s) = sweeps {
                if s.out.osu {
                    (s.osu)(&report, &mut text);
                }
                if let Err(e) = s.out.write(name, &doc, || (s.csv)(&report)) {
                    eprintln!("volley bench {name}: {e}");
                    return ExitCode::FAILURE;
                }
            }
            emit_text(&text, &doc, json)
        }
        Err(e) => {
            eprintln!("volley bench {name}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Entry point of one benchmark rank (`volley __bench-rank`).
pub fn rank_main(which: &str, out: &std::path::Path, scale: f64, reps: usize) -> ExitCode {
    let result = match which {
        "am" => am::run(out, scale, reps),
        "am-pipe" => pipe::run(out, scale, reps),
        "rma-direct" => rma::run(out, volley::rma::RmaPath::Direct, scale, reps),
        "rma-am" => rma::run(out, volley::rma::RmaPath::ActiveMessages, scale, reps),
        "progress-rtt" => progress::run(out, scale, reps, progress::Part::RoundTrip),
        "progress-wakeup" => progress::run(out, scale, reps, progress::Part::Wakeup),
        "progress-granularity" => progress::run(out, scale, reps, progress::Part::Granularity),
        "splitc" => splitc::run(out, scale, reps),
        "coll" => coll::run(out, scale, reps),
        "loggp" => loggp::run(out, scale, reps),
        "msg" => msg::run(out, scale, reps),
        "launch-probe" => launchers::probe_rank(),
        "launch-rtt" => launchers::rtt_rank(out, scale as u64),
        other => Err(format!("unknown benchmark {other:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volley bench rank: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What rank 0 of a benchmark job writes for the launching command: every repetition's
/// figures.
#[derive(Debug, Serialize, Deserialize)]
struct Reps<T> {
    reps: Vec<T>,
}

impl<T: Medians> Reps<T> {
    /// The medians over the repetitions (an error if rank 0 wrote none).
    fn medians(&self) -> Result<T, String> {
        if self.reps.is_empty() {
            return Err("rank 0 reported no repetitions".into());
        }
        Ok(T::medians(&self.reps))
    }
}

/// One repetition's figures, which merge into their medians over repetitions.
trait Medians: Sized {
    /// Every figure's median over `reps`; curves point by point ([`median_curve`]).
    fn medians(reps: &[Self]) -> Self;
}

/// Median of the figures there are: a NaN is a figure a repetition could not measure (JSON
/// null), left out. NaN when there is none.
pub(crate) fn median_present(xs: impl IntoIterator<Item = f64>) -> f64 {
    let mut v: Vec<f64> = xs.into_iter().filter(|x| !x.is_nan()).collect();
    median(&mut v)
}

/// [`median_present`] of a figure that repetitions may lack: None when none has it.
pub(crate) fn median_opt(xs: impl IntoIterator<Item = Option<f64>>) -> Option<f64> {
    Some(median_present(xs.into_iter().flatten())).filter(|m| !m.is_nan())
}

/// A point of a curve: where it lies (a size, say) and the figure measured there.
trait CurvePoint: Clone {
    /// The figure.
    fn figure(&self) -> f64;
    /// Replaces the figure.
    fn set_figure(&mut self, v: f64);
}

/// A curve's medians: the first repetition's points, each with the median of its figure over
/// the repetitions that have that point.
fn median_curve<T, P: CurvePoint>(reps: &[T], curve: impl Fn(&T) -> &[P]) -> Vec<P> {
    let Some(first) = reps.first() else {
        return Vec::new();
    };
    let mut points = curve(first).to_vec();
    for (i, p) in points.iter_mut().enumerate() {
        p.set_figure(median_present(
            reps.iter()
                .filter_map(|r| curve(r).get(i))
                .map(CurvePoint::figure),
        ));
    }
    points
}

/// Rank 0 of a benchmark job: writes every repetition's figures for the launching command.
fn write_reps<T: Serialize>(out: &std::path::Path, reps: Vec<T>) -> Result<(), String> {
    std::fs::write(
        out,
        serde_json::to_vec_pretty(&Reps { reps }).map_err(|e| e.to_string())?,
    )
    .map_err(|e| format!("writing {}: {e}", out.display()))
}

/// Launches `ranks` copies of this executable as benchmark ranks and returns rank 0's output.
fn run_ranks<T: DeserializeOwned>(
    which: &str,
    ranks: usize,
    scale: f64,
    reps: usize,
    transport: Transport,
    extra_env: &[(&str, &str)],
) -> Result<T, String> {
    // Over shared memory every rank is on one node; over the network each on a node of its own.
    let per_node = if transport == Transport::Shm {
        ranks
    } else {
        1
    };
    run_ranks_per_node(which, ranks, per_node, scale, reps, transport, extra_env)
}

/// [`run_ranks`] on emulated nodes of `per_node` ranks each.
fn run_ranks_per_node<T: DeserializeOwned>(
    which: &str,
    ranks: usize,
    per_node: usize,
    scale: f64,
    reps: usize,
    transport: Transport,
    extra_env: &[(&str, &str)],
) -> Result<T, String> {
    let env = extra_env
        .iter()
        .map(|(k, v)| (k.into(), v.into()))
        .chain(
            (transport != Transport::Shm).then(|| ("VOLLEY_NET".into(), transport.name().into())),
        )
        .collect();
    let job = crate::self_job::SelfJob {
        ranks,
        per_node,
        bind: true,
        label: false,
        env,
        what: "benchmark",
    };
    job.run(|out| {
        vec![
            "__bench-rank".into(),
            which.into(),
            out.as_os_str().to_owned(),
            scale.to_string().into(),
            reps.to_string().into(),
        ]
    })
}

/// Writes the table `text` (to stderr when the JSON goes to stdout) and the JSON `doc` to
/// `json` (`-`: stdout), reporting a failed write (a full disk, a closed pipe) instead of
/// losing it.
fn emit_text(text: &[u8], doc: &Value, json: Json) -> ExitCode {
    let pretty = serde_json::to_string_pretty(doc).expect("json") + "\n";
    let to_stdout = |bytes: &[u8]| {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes).and_then(|_| out.flush())
    };
    let table_written = match json {
        Json::Stdout => std::io::stderr().write_all(text),
        _ => to_stdout(text),
    };
    let written = table_written
        .map_err(|e| ("the table".to_string(), e))
        .and_then(|()| match json {
            Json::None => Ok(()),
            Json::Stdout => to_stdout(pretty.as_bytes()).map_err(|e| ("the results".into(), e)),
            Json::File(path) => std::fs::write(&path, &pretty).map_err(|e| (path, e)),
        });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err((what, e)) => {
            eprintln!("volley bench: writing {what}: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where a command's JSON goes (for commands outside `bench` that print reports too).
pub type JsonTarget = Json;

/// Prints a report's table and writes its JSON, as the benchmarks do.
pub fn emit_report(text: &[u8], doc: &Value, json: JsonTarget) -> ExitCode {
    emit_text(text, doc, json)
}

/// Where the JSON goes. A file is tried (created, then removed again) before the benchmark
/// runs, so that a bad path is refused at once rather than after minutes of measuring, and a
/// benchmark that fails or is interrupted leaves no empty file.
pub enum Json {
    /// No JSON.
    None,
    /// Standard output.
    Stdout,
    /// A file.
    File(String),
}

impl Json {
    /// `--json`'s argument: none, `-` or a path (checked writable now).
    pub fn open(arg: Option<&str>) -> Result<Self, String> {
        match arg {
            None => Ok(Json::None),
            Some("-") => Ok(Json::Stdout),
            Some(path) => {
                let existed = std::path::Path::new(path).exists();
                std::fs::OpenOptions::new()
                    .write(true)
                    .create(true)
                    .truncate(false)
                    .open(path)
                    .map_err(|e| format!("cannot write --json {path:?}: {e}"))?;
                if !existed {
                    let _ = std::fs::remove_file(path);
                }
                Ok(Json::File(path.to_string()))
            }
        }
    }
}

fn human(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parses `text` into `T` and writes it back: the same JSON (keys, nesting, value types
    /// and values) must come out, or the struct has drifted from the documents on record.
    fn round_trip<T: Serialize + DeserializeOwned>(what: &str, text: &str) {
        let doc: Value = serde_json::from_str(text).expect(what);
        let typed: T = serde_json::from_str(text).unwrap_or_else(|e| panic!("{what}: {e}"));
        let back = serde_json::to_value(&typed).expect(what);
        assert_eq!(back, doc, "{what}: written back differently");
    }

    #[test]
    fn checked_in_am_results_match_the_am_report() {
        round_trip::<am::AmReport>(
            "benchmarks/am.json",
            include_str!("../../../../benchmarks/am.json"),
        );
    }

    #[test]
    fn checked_in_msg_results_match_the_msg_report() {
        round_trip::<msg::MsgReport>(
            "benchmarks/msg.json",
            include_str!("../../../../benchmarks/msg.json"),
        );
    }

    #[test]
    fn checked_in_coll_results_match_the_coll_report() {
        round_trip::<coll::CollReport>(
            "benchmarks/coll.json",
            include_str!("../../../../benchmarks/coll.json"),
        );
    }

    // Quick runs (`--reps 2 --scale 0.01`): the figures mean nothing, the shapes are the point.
    #[test]
    fn recorded_documents_match_their_reports() {
        round_trip::<am::AmReport>("am over UDP", include_str!("testdata/am-udp.json"));
        round_trip::<am::AmReport>("am over TCP", include_str!("testdata/am-tcp.json"));
        round_trip::<rma::RmaReport>("rma", include_str!("testdata/rma.json"));
        round_trip::<progress::ProgressReport>("progress", include_str!("testdata/progress.json"));
    }

    #[derive(Debug, Clone, PartialEq)]
    struct P(u64, f64);

    impl CurvePoint for P {
        fn figure(&self) -> f64 {
            self.1
        }
        fn set_figure(&mut self, v: f64) {
            self.1 = v;
        }
    }

    #[test]
    fn medians_leave_out_what_a_repetition_could_not_measure() {
        assert_eq!(median_present([3.0, f64::NAN, 1.0, 2.0]), 2.0);
        assert!(median_present([f64::NAN]).is_nan());
        assert_eq!(median_opt([None, Some(4.0), Some(6.0)]), Some(5.0));
        assert_eq!(median_opt([None, Some(f64::NAN)]), None);
        // Point by point, where each lies taken from the first repetition; a repetition
        // without the point counts for nothing there.
        let reps = [
            vec![P(8, 1.0), P(64, 10.0)],
            vec![P(8, 3.0)],
            vec![P(8, 2.0), P(64, f64::NAN)],
        ];
        assert_eq!(
            median_curve(&reps, |r| r.as_slice()),
            [P(8, 2.0), P(64, 10.0)]
        );
    }
}
