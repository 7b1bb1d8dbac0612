//! `volley experiments`: the seeds' experiments as commands. Each experiment checks its own
//! results (`"verified"` in its JSON: the data came through intact, the measurements are
//! consistent) and prints a table beside the seed's figures; `--quick` runs the sizes CI uses.
//!
//! An experiment runs in the launching process and may start jobs of this binary's hidden
//! `__experiment-rank NAME OUT ARGS...` command ([`rank_job`]); rank 0 of such a job writes its
//! result to `OUT`.

mod agents;
mod am_vs_sendrecv;
mod combined;
mod contention;
mod hardware;
mod multicast;
mod seed003_bounce;
mod seed003_channels;
mod seed003_overlap;
mod seed003_progress;
mod seed003_sparse;
mod seed003_trisolve;
mod send_breakdown;
mod signal;
mod timing_rows;
mod xfer;

use crate::bench::{emit_report, JsonTarget};
use serde::de::DeserializeOwned;
use serde_json::Value;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// Options of `volley experiments`.
#[derive(Debug, clap::Args)]
pub struct ExperimentsArgs {
    /// List the experiments (name, seed, what it measures) and exit.
    #[arg(long, conflicts_with = "name")]
    list: bool,
    /// The experiment to run (see --list).
    #[arg(value_name = "NAME", required_unless_present = "list")]
    name: Option<String>,
    /// The small sizes CI runs: the shape of the results, not their precision.
    #[arg(long)]
    quick: bool,
    /// Write the results as JSON to FILE (`-` for standard output; the table then goes to
    /// standard error).
    #[arg(long, value_name = "FILE|-")]
    json: Option<String>,
    /// Repetitions; every figure is the median over them.
    #[arg(long, default_value_t = 3, value_parser = clap::value_parser!(u64).range(1..=1000))]
    reps: u64,
    /// Damage one datum on purpose: the experiment's self-check must then fail (the test of
    /// the check).
    #[arg(long, hide = true)]
    corrupt: bool,
}

/// How an experiment is asked to run.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// CI's small sizes.
    pub quick: bool,
    /// Repetitions (figures are medians over them).
    pub reps: usize,
    /// Damage one datum so that the self-check must fail (`--corrupt`).
    pub corrupt: bool,
}

/// What an experiment produced.
pub struct Outcome {
    /// The table for people: figures beside the seed's and the floor measured in the same run.
    pub table: String,
    /// The results; must carry `"verified": bool`.
    pub doc: Value,
}

/// One rank of an experiment's job.
pub type RankFn = fn(&RankArgs) -> Result<(), String>;

/// One experiment.
pub struct Experiment {
    /// Its name on the command line (`seedNNN-what`).
    pub name: &'static str,
    /// One line on what it measures.
    pub about: &'static str,
    /// Runs it in the launching process.
    pub run: fn(&Options) -> Result<Outcome, String>,
    /// One rank of its jobs (`__experiment-rank`), if it starts any.
    pub rank: Option<RankFn>,
}

/// What one rank of an experiment's job is given.
pub struct RankArgs {
    /// Where rank 0 writes its result (JSON).
    pub out: PathBuf,
    /// The experiment's own arguments.
    pub args: Vec<String>,
}

/// Every experiment, in the order `--list` prints them.
pub static EXPERIMENTS: &[Experiment] = &[
    hardware::EXPERIMENT,
    contention::EXPERIMENT,
    send_breakdown::EXPERIMENT,
    xfer::EXPERIMENT,
    am_vs_sendrecv::EXPERIMENT,
    signal::EXPERIMENT,
    agents::EXPERIMENT,
    combined::EXPERIMENT,
    multicast::EXPERIMENT,
    seed003_bounce::EXPERIMENT,
    seed003_channels::EXPERIMENT,
    seed003_trisolve::EXPERIMENT,
    seed003_progress::EXPERIMENT,
    seed003_sparse::EXPERIMENT,
];

fn find(name: &str) -> Option<&'static Experiment> {
    EXPERIMENTS.iter().find(|e| e.name == name)
}

/// Runs `volley experiments`.
pub fn main(a: ExperimentsArgs) -> ExitCode {
    if a.list {
        let width = EXPERIMENTS.iter().map(|e| e.name.len()).max().unwrap_or(0);
        for e in EXPERIMENTS {
            println!("{:width$}  {}", e.name, e.about);
        }
        return ExitCode::SUCCESS;
    }
    let name = a.name.as_deref().unwrap_or_default();
    let Some(exp) = find(name) else {
        let names: Vec<&str> = EXPERIMENTS.iter().map(|e| e.name).collect();
        eprintln!(
            "volley experiments: no experiment {name:?}; there are: {}",
            names.join(", ")
        );
        return ExitCode::from(2);
    };
    let json = match JsonTarget::open(a.json.as_deref()) {
        Ok(j) => j,
        Err(e) => {
            eprintln!("volley experiments {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let opts = Options {
        quick: a.quick,
        reps: a.reps as usize,
        corrupt: a.corrupt,
    };
    let activity = crate::bar::activity(&format!("volley experiments {name}"));
    let outcome = (exp.run)(&opts);
    drop(activity);
    let outcome = match outcome {
        Ok(o) => o,
        Err(e) => {
            eprintln!("volley experiments {name}: {e}");
            return ExitCode::FAILURE;
        }
    };
    let verified = outcome.doc.get("verified").and_then(Value::as_bool);
    let mut doc = outcome.doc;
    if let Value::Object(map) = &mut doc {
        map.insert("experiment".into(), name.into());
        map.insert("quick".into(), opts.quick.into());
        map.insert("reps".into(), opts.reps.into());
    }
    let code = emit_report(outcome.table.as_bytes(), &doc, json);
    match verified {
        Some(true) => code,
        Some(false) => {
            eprintln!(
                "volley experiments {name}: NOT VERIFIED: its self-checks failed (see above)"
            );
            ExitCode::FAILURE
        }
        None => {
            eprintln!("volley experiments {name}: its results carry no \"verified\" (a bug)");
            ExitCode::FAILURE
        }
    }
}

/// Entry point of one rank of an experiment's job (`volley __experiment-rank`).
pub fn rank_main(name: &str, out: PathBuf, args: Vec<String>) -> ExitCode {
    let result = match find(name).map(|e| e.rank) {
        Some(Some(rank)) => rank(&RankArgs { out, args }),
        Some(None) => Err(format!("experiment {name:?} has no ranks")),
        None => Err(format!("unknown experiment {name:?}")),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("volley experiments {name} (rank): {e}");
            ExitCode::FAILURE
        }
    }
}

/// A job of this binary's `__experiment-rank NAME OUT ARGS...` on `ranks` ranks, on
/// emulated nodes of `per_node` ranks each, with `env` for every rank; returns what rank 0
/// wrote to OUT.
pub fn rank_job<T: DeserializeOwned>(
    name: &str,
    ranks: usize,
    per_node: usize,
    env: &[(&str, &str)],
    args: &[String],
) -> Result<T, String> {
    let job = crate::self_job::SelfJob {
        ranks,
        per_node,
        bind: true,
        label: false,
        env: env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        what: "experiment",
    };
    job.run(|out: &Path| {
        let mut v: Vec<OsString> = vec![
            "__experiment-rank".into(),
            name.into(),
            out.as_os_str().to_owned(),
        ];
        v.extend(args.iter().map(OsString::from));
        v
    })
}

/// The table's last line: "verified: yes" (with `what` was checked, if given) or the
/// failures.
pub fn verdict(verified: bool, what: &str, failures: &[String]) -> String {
    match (verified, what) {
        (true, "") => "verified: yes\n".into(),
        (true, what) => format!("verified: yes ({what})\n"),
        (false, _) => format!("verified: NO: {}\n", failures.join("; ")),
    }
}

/// Records a failure for every figure that was not measured (not a positive finite number).
pub fn require_figures(failures: &mut Vec<String>, figures: &[(&str, f64)]) {
    for &(name, v) in figures {
        if !(v.is_finite() && v > 0.0) {
            failures.push(format!("{name}: no figure ({v})"));
        }
    }
}

/// Rank 0's result, written for [`rank_job`].
pub fn write_result<T: serde::Serialize>(out: &Path, result: &T) -> Result<(), String> {
    let text = serde_json::to_vec_pretty(result).map_err(|e| e.to_string())?;
    std::fs::write(out, text).map_err(|e| format!("writing {}: {e}", out.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_follow_the_seed_pattern() {
        let mut seen = std::collections::HashSet::new();
        for e in EXPERIMENTS {
            assert!(seen.insert(e.name), "{} twice", e.name);
            let (seed, what) = e.name.split_once('-').expect(e.name);
            assert!(
                seed.len() == 7
                    && seed.starts_with("seed")
                    && seed[4..].bytes().all(|b| b.is_ascii_digit()),
                "{}",
                e.name
            );
            assert!(!what.is_empty() && !e.about.is_empty(), "{}", e.name);
        }
    }
}
