//! The `volley` command: `run` launches a job, `bench` measures, `report` draws the results,
//! `info` describes the build.

mod affinity;
mod apps;
mod apps_mpi;
mod bar;
mod bench;
mod experiments;
mod info;
mod launch;
mod mpi;
mod report;
mod self_job;
mod soak;

use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

/// volley: Active Messages and one-sided communication for parallel programs.
#[derive(Debug, Parser)]
#[command(name = "volley", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start N ranks of PROGRAM on this host (or on several, with --hosts) and supervise them.
    Run {
        /// Number of ranks.
        #[arg(
            short = 'n',
            long = "ranks",
            value_name = "N",
            allow_negative_numbers = true,
            value_parser = parse_ranks
        )]
        ranks: usize,
        /// Prefix every output line with the rank, as `[R] `.
        #[arg(long)]
        label: bool,
        /// Pin rank r to CPU r modulo the number of CPUs.
        #[arg(long)]
        bind: bool,
        /// Emulate nodes of K ranks each on this host: rank r is on node r / K, ranks of one
        /// node talk through shared memory, ranks of different nodes through the network
        /// transport (VOLLEY_NET=udp|tcp). Default: all ranks on one node.
        #[arg(long, value_name = "K")]
        ranks_per_node: Option<usize>,
        /// Run on these hosts (node i = the i-th host), in blocks of consecutive ranks, through
        /// one agent per host started with the remote shell (--rsh). Needs the same file
        /// system (volley, the program, the working directory) on every host.
        #[arg(long, value_name = "H1,H2,...", conflicts_with = "hostfile")]
        hosts: Option<String>,
        /// Like --hosts, from a file: one `HOST [slots=K]` per line, `#` comments.
        #[arg(long, value_name = "FILE")]
        hostfile: Option<std::path::PathBuf>,
        /// Remote shell that runs a command on a host: `RSH HOST COMMAND...` (split on
        /// whitespace; for example `ip netns exec` to use network namespaces as hosts).
        #[arg(long, value_name = "CMD", default_value = "ssh")]
        rsh: String,
        /// Address the agents connect back to (default: this host's first non-loopback
        /// address, or 127.0.0.1 when every host is a local name).
        #[arg(long, value_name = "IP")]
        launcher_addr: Option<std::net::IpAddr>,
        /// Seconds between SIGTERM and SIGKILL when stopping a failed job.
        #[arg(
            long,
            value_name = "SECS",
            default_value_t = 2.0,
            allow_negative_numbers = true
        )]
        grace: f64,
        /// Print a hang report (where every rank is, what it waits for, the likely cause) if
        /// the job still runs this many seconds after the start; SIGUSR1 to the launcher
        /// prints one at any time. The job goes on either way.
        #[arg(long, value_name = "SECONDS", allow_negative_numbers = true)]
        hang_report_after: Option<f64>,
        /// The program and its arguments.
        #[arg(
            required = true,
            trailing_var_arg = true,
            value_name = "PROGRAM [ARGS]..."
        )]
        command: Vec<OsString>,
    },
    /// Measure volley against this machine's floors.
    Bench {
        #[command(subcommand)]
        which: bench::BenchCommand,
    },
    /// Run seed 004's Split-C application suite under each strategy and print Table 2.
    Apps(apps::AppsArgs),
    /// Run one of the seeds' experiments (--list shows them) and check its results.
    Experiments(experiments::ExperimentsArgs),
    /// Print the build's limits, defaults and per-rank memory footprint.
    Info,
    /// Make one self-contained HTML page (plots as inline SVG, tables, machine and date) from
    /// benchmark results.
    Report(report::ReportArgs),
    /// Random mixed traffic over every configuration for a while, checked end to end.
    Soak(soak::SoakArgs),
    /// Internal: one host's share of a multi-host job (started by `volley run --hosts`).
    #[command(hide = true, name = "__agent")]
    Agent(launch::agent::AgentArgs),
    /// Internal: one rank of a soak (started by `volley soak`).
    #[command(hide = true, name = "__soak-rank")]
    SoakRank {
        /// Seconds to run.
        seconds: f64,
        /// Seed of the random choices.
        seed: u64,
        /// File for rank 0's result.
        out: std::path::PathBuf,
        /// `corrupt`: damage one payload; `corrupt-collective`: one wrong contribution to a
        /// collective (the self-tests of the checks).
        corrupt: Option<String>,
    },
    /// Internal: one rank of an experiment (started by `volley experiments`).
    #[command(hide = true, name = "__experiment-rank")]
    ExperimentRank {
        /// Which experiment.
        name: String,
        /// File for rank 0's result.
        out: std::path::PathBuf,
        /// The experiment's own arguments.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Internal: one rank of a benchmark (started by `volley bench`).
    #[command(hide = true, name = "__bench-rank")]
    BenchRank {
        /// Which benchmark.
        which: String,
        /// File for rank 0's results.
        out: std::path::PathBuf,
        /// Scale factor for iteration counts.
        scale: f64,
        /// Repetitions.
        reps: usize,
    },
}

/// `-n N`: a whole number of ranks, at least 1 (the launcher says how many are possible).
fn parse_ranks(s: &str) -> Result<usize, String> {
    let digits = |t: &str| !t.is_empty() && t.bytes().all(|b| b.is_ascii_digit());
    if digits(s) {
        // Beyond usize: as many as possible, which the launcher then refuses by its limit.
        let n = s.parse::<usize>().unwrap_or(usize::MAX);
        return match n {
            0 => Err("0 ranks: a job needs at least 1".into()),
            n => Ok(n),
        };
    }
    match s.strip_prefix('-') {
        Some(t) if digits(t) => Err(format!("{s} ranks: a job needs at least 1")),
        _ => Err(format!("{s:?} is not a whole number of ranks")),
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                // `volley` or `volley bench` alone: the help (of that command) says what to add.
                let _ = e.print();
                return ExitCode::from(2);
            }
            if code == 2 {
                // One line: clap's message up to its usage block, joined.
                let msg = e.to_string();
                let line: Vec<&str> = msg
                    .lines()
                    .take_while(|l| !l.starts_with("Usage:"))
                    .map(str::trim)
                    .filter(|l| {
                        !l.is_empty()
                            && !l.starts_with("tip:")
                            && !l.starts_with("For more information")
                    })
                    .collect();
                eprintln!(
                    "volley: {} (see `volley --help`)",
                    line.join(" ").trim_start_matches("error: ")
                );
            } else {
                let _ = e.print();
            }
            return ExitCode::from(code);
        }
    };
    match cli.command {
        Command::Run {
            ranks,
            label,
            bind,
            ranks_per_node,
            hosts,
            hostfile,
            rsh,
            launcher_addr,
            grace,
            hang_report_after,
            mut command,
        } => {
            if hang_report_after.is_some_and(|s| !(0.0..=1e6).contains(&s)) {
                eprintln!("volley run: --hang-report-after must be between 0 and 1000000 seconds");
                return ExitCode::from(2);
            }
            if ranks_per_node == Some(0) {
                eprintln!("volley run: --ranks-per-node must be at least 1");
                return ExitCode::from(2);
            }
            if !(0.0..=3600.0).contains(&grace) {
                eprintln!("volley run: --grace must be between 0 and 3600 seconds");
                return ExitCode::from(2);
            }
            let multi = hosts.is_some() || hostfile.is_some();
            if !multi && (launcher_addr.is_some() || rsh != "ssh") {
                eprintln!("volley run: --rsh and --launcher-addr need --hosts or --hostfile");
                return ExitCode::from(2);
            }
            if multi && ranks_per_node.is_some() {
                eprintln!(
                    "volley run: --ranks-per-node cannot be combined with --hosts or --hostfile"
                );
                return ExitCode::from(2);
            }
            let host_list = match (&hosts, &hostfile) {
                (Some(list), _) => Some(launch::hosts::parse_list(list)),
                (None, Some(file)) => Some(launch::hosts::read_file(file)),
                (None, None) => None,
            };
            let host_opts = match host_list {
                None => None,
                Some(Err(e)) => {
                    eprintln!("volley run: {e}");
                    return ExitCode::from(2);
                }
                Some(Ok(hosts)) => Some(launch::remote::HostOptions {
                    hosts,
                    rsh,
                    launcher_addr,
                }),
            };
            // The environment the ranks inherit, checked once here: a bad value is one line,
            // not one per rank.
            let multi_node = host_opts.is_some() || ranks_per_node.is_some_and(|k| k < ranks);
            let checked = volley::settings::check(
                std::env::vars(),
                &[
                    volley::settings::SETTINGS,
                    volley_global::settings::SETTINGS,
                    volley_msg::SETTINGS,
                    volley_prim::SETTINGS,
                ],
                multi_node,
            );
            for w in &checked.warnings {
                eprintln!("volley run: warning: {w}");
            }
            if !checked.errors.is_empty() {
                for e in &checked.errors {
                    eprintln!("volley run: {e}");
                }
                return ExitCode::from(2);
            }
            let program = command.remove(0);
            let opts = launch::LaunchOptions {
                ranks,
                label,
                bind,
                ranks_per_node: ranks_per_node.unwrap_or(ranks).max(1),
                env: Vec::new(),
                grace: Duration::from_secs_f64(grace),
                hang_report_after: hang_report_after.map(Duration::from_secs_f64),
                program,
                args: command,
            };
            let result = match &host_opts {
                Some(h) => launch::remote::launch_hosts(&opts, h),
                None => launch::launch(&opts),
            };
            match result {
                Ok(code) => ExitCode::from(code.clamp(0, 255) as u8),
                Err(e) => {
                    eprintln!("volley run: {e}");
                    ExitCode::from(2)
                }
            }
        }
        Command::Agent(args) => ExitCode::from(launch::agent::main(args)),
        Command::Bench { which } => bench::main(which),
        Command::Apps(a) => apps::main(a),
        Command::Info => info::print(),
        Command::Experiments(a) => experiments::main(a),
        Command::ExperimentRank { name, out, args } => experiments::rank_main(&name, out, args),
        Command::Report(a) => report::main(a),
        Command::Soak(a) => soak::main(a),
        Command::SoakRank {
            seconds,
            seed,
            out,
            corrupt,
        } => match soak::rank::main(seconds, seed, &out, corrupt.as_deref()) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("volley soak rank: {e}");
                ExitCode::from(1)
            }
        },
        Command::BenchRank {
            which,
            out,
            scale,
            reps,
        } => bench::rank_main(&which, &out, scale, reps),
    }
}
