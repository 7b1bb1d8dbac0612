//! Every `VOLLEY_*` environment variable, checked in one place.
//!
//! Each layer reads its own variables where it uses them, with the parsers this table's checks
//! call; this table says what each accepts. [`check`] looks at a whole environment at once:
//! a bad value is an error naming the variable, the value and what is accepted; a variable
//! that cannot matter in this job (a network setting on a one-node job) and an unknown
//! `VOLLEY_` name (a typo: the warning names the closest known one) are warnings. `volley run`
//! checks once, before it starts any rank, so a mistake prints one line, not one per rank; a
//! program started another way checks when it builds its runtime. Layers above this crate add
//! their own tables ([`crate::RuntimeBuilder::settings`]).

use crate::am::parse_size;
use crate::transport::net::faults::FaultConfig;
use crate::transport::net::poll_policy::PollPolicy;
use crate::transport::net::tcp::Congestion;
use crate::transport::shm::ring::{MAX_RING_SLOTS, MIN_RING_SLOTS};

/// When a setting matters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// In every job.
    Always,
    /// Only when the job spans several nodes (the network transport).
    Network,
    /// Only when a PMIx launcher (`mpirun`, `srun --mpi=pmix`) started the process, which
    /// the environment's `PMIX_NAMESPACE` tells.
    Pmix,
    /// Set by the launcher for its ranks, not by users; never checked.
    Launcher,
}

/// One `VOLLEY_*` variable.
#[derive(Debug, Clone, Copy)]
pub struct Setting {
    /// Its name.
    pub name: &'static str,
    /// What it accepts, as the error says it.
    pub accepts: &'static str,
    /// What it does.
    pub purpose: &'static str,
    /// When it matters.
    pub scope: Scope,
    /// Whether `value` is accepted (the empty value always is: it means unset).
    pub check: fn(&str) -> bool,
}

/// What [`check`] found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Checked {
    /// Values refused, one line each: `NAME=VALUE: expected ...`.
    pub errors: Vec<String>,
    /// Settings without effect and unknown names, one line each.
    pub warnings: Vec<String>,
}

/// Variable names with this prefix belong to test programs and are never checked.
pub const TEST_PREFIX: &str = "VOLLEY_TEST_";

fn one_of(v: &str, accepted: &[&str]) -> bool {
    accepted.contains(&v)
}

/// The variables of this crate's layers (the launcher's own included, so that they are not
/// taken for typos).
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "VOLLEY_RING_SLOTS",
        accepts: "a power of two from 8 to 16384, optionally with K",
        purpose: "slots per ring (each 64 bytes)",
        scope: Scope::Always,
        check: |v| {
            parse_size(v).is_some_and(|n| {
                n.is_power_of_two() && (MIN_RING_SLOTS..=MAX_RING_SLOTS).contains(&n)
            })
        },
    },
    Setting {
        name: "VOLLEY_MEDIUM_BUFFERS",
        accepts: "a number from 1 to 64",
        purpose: "medium buffers per channel",
        scope: Scope::Always,
        check: |v| parse_size(v).is_some_and(|n| (1..=64).contains(&n)),
    },
    Setting {
        name: "VOLLEY_SEGMENT_BYTES",
        accepts: "a size in bytes up to 1T, optionally with K, M or G",
        purpose: "each rank's segment area",
        scope: Scope::Always,
        check: |v| parse_size(v).is_some_and(|n| n <= 1 << 40),
    },
    Setting {
        name: "VOLLEY_WAIT",
        accepts: "spin or block",
        purpose: "whether waits sleep in the kernel once they have spun",
        scope: Scope::Always,
        check: |v| one_of(v, &["spin", "block"]),
    },
    Setting {
        name: "VOLLEY_PROGRESS",
        accepts: "inline or thread",
        purpose: "whether a progress thread runs handlers while the program computes",
        scope: Scope::Always,
        check: |v| one_of(v, &["inline", "thread"]),
    },
    Setting {
        name: "VOLLEY_POLITE",
        accepts: "0, 1 or auto",
        purpose: "whether waits yield the core early (auto: when ranks outnumber cores)",
        scope: Scope::Always,
        check: |v| one_of(v, &["0", "1", "auto", "yes", "no", "true", "false"]),
    },
    Setting {
        name: "VOLLEY_WATCHDOG_MS",
        accepts: "a number of milliseconds (0 = off)",
        purpose: "report handlers that run longer",
        scope: Scope::Always,
        check: |v| v.parse::<u64>().is_ok(),
    },
    Setting {
        name: "VOLLEY_STATS",
        accepts: "0 or 1",
        purpose: "print each rank's counters when it finalizes",
        scope: Scope::Always,
        check: |v| one_of(v, &["0", "1"]),
    },
    Setting {
        name: "VOLLEY_RMA",
        accepts: "direct or am",
        purpose: "how one-sided operations reach ranks of the same node",
        scope: Scope::Always,
        check: |v| one_of(v, &["direct", "am"]),
    },
    Setting {
        name: "VOLLEY_NET",
        accepts: "udp or tcp",
        purpose: "the transport between nodes",
        scope: Scope::Network,
        check: |v| one_of(v, &["udp", "tcp"]),
    },
    Setting {
        name: "VOLLEY_NET_ADDR",
        accepts: "an IP address",
        purpose: "the address the network transport binds",
        scope: Scope::Network,
        check: |v| v.parse::<std::net::IpAddr>().is_ok(),
    },
    Setting {
        name: "VOLLEY_PEER_TIMEOUT",
        accepts: "a positive number of seconds",
        purpose: "when a silent network peer is declared failed",
        scope: Scope::Network,
        check: |v| {
            v.parse::<f64>()
                .is_ok_and(|s| s.is_finite() && s > 0.0 && s < 1e6)
        },
    },
    Setting {
        name: "VOLLEY_TCP_CONGESTION",
        accepts: "system or an algorithm's name such as cubic, reno or bbr",
        purpose: "the congestion control of TCP connections (default cubic where available)",
        scope: Scope::Network,
        check: |v| Congestion::parse(v).is_ok(),
    },
    Setting {
        name: "VOLLEY_POLL",
        accepts: "adaptive, always or every:K (or adaptive:MIN:MAX:HISTORY)",
        purpose: "how often polls include the network",
        scope: Scope::Network,
        check: |v| PollPolicy::parse(v).is_ok(),
    },
    Setting {
        name: "VOLLEY_FAULTS",
        accepts: "drop=P,dup=P,reorder=P,delay_us=N,seed=N",
        purpose: "faults injected into outgoing UDP datagrams (testing)",
        scope: Scope::Network,
        check: |v| FaultConfig::parse(v).is_ok(),
    },
    Setting {
        name: "VOLLEY_PATH_MARKS",
        accepts: "responder, requester or empty",
        purpose: "which critical path scripts/count-instructions counts",
        scope: Scope::Always,
        check: |v| one_of(v, &["responder", "requester", "empty"]),
    },
    Setting {
        name: "VOLLEY_RANKS_PER_NODE",
        accepts: "a positive number of ranks",
        purpose: "emulated nodes under a PMIx launcher, like `volley run --ranks-per-node`",
        scope: Scope::Pmix,
        check: |v| v.parse::<usize>().is_ok_and(|n| n > 0),
    },
    Setting {
        name: "VOLLEY_PMIX_LIBRARY",
        accepts: "a library file name or path",
        purpose: "where libpmix is loaded from under a PMIx launcher",
        scope: Scope::Pmix,
        check: |v| !v.trim().is_empty(),
    },
    launcher("VOLLEY_RENDEZVOUS"),
    launcher("VOLLEY_RANK"),
    launcher("VOLLEY_SIZE"),
    launcher("VOLLEY_LOCAL_RANK"),
    launcher("VOLLEY_LOCAL_SIZE"),
    launcher("VOLLEY_NODE"),
    launcher("VOLLEY_JOB_ID"),
    launcher("VOLLEY_JOB_KEY"),
    launcher("VOLLEY_HOST_RANKS"),
    launcher("VOLLEY_HOST_CPUS"),
    launcher("VOLLEY_LAUNCHER"),
    launcher("VOLLEY_BENCH_FLOOR_FD"),
    launcher("VOLLEY_REPORT_FD"),
];

/// A variable the launcher sets for its ranks.
const fn launcher(name: &'static str) -> Setting {
    Setting {
        name,
        accepts: "",
        purpose: "set by the launcher",
        scope: Scope::Launcher,
        check: |_| true,
    }
}

/// Checks the `VOLLEY_*` variables among `vars` against `tables`, for a job that spans
/// several nodes (`multi_node`) or one.
pub fn check(
    vars: impl IntoIterator<Item = (String, String)>,
    tables: &[&[Setting]],
    multi_node: bool,
) -> Checked {
    let known = || tables.iter().flat_map(|t| t.iter());
    let mut out = Checked::default();
    let mut vars: Vec<(String, String)> = vars.into_iter().collect();
    let pmix = vars
        .iter()
        .any(|(n, v)| n == crate::bootstrap::pmix::ENV_NAMESPACE && !v.is_empty());
    vars.retain(|(n, _)| n.starts_with("VOLLEY_") && !n.starts_with(TEST_PREFIX));
    vars.sort();
    for (name, value) in vars {
        let Some(setting) = known().find(|s| s.name == name) else {
            let hint = closest(&name, known().map(|s| s.name))
                .map(|c| format!("; did you mean {c}?"))
                .unwrap_or_default();
            out.warnings
                .push(format!("{name} is not a volley setting{hint}"));
            continue;
        };
        if setting.scope == Scope::Launcher || value.is_empty() {
            continue;
        }
        if !(setting.check)(value.trim()) {
            out.errors
                .push(format!("{name}={value}: expected {}", setting.accepts));
        } else if setting.scope == Scope::Pmix && !pmix {
            out.warnings.push(format!(
                "{name} has no effect: the job was not started by a PMIx launcher ({})",
                setting.purpose
            ));
        } else if setting.scope == Scope::Network && !multi_node {
            out.warnings.push(format!(
                "{name} has no effect: the job runs on one node ({})",
                setting.purpose
            ));
        }
    }
    out
}

/// The known name closest to `name` (at most a third of the letters after `VOLLEY_` apart),
/// if any.
fn closest<'a>(name: &str, known: impl Iterator<Item = &'a str>) -> Option<&'a str> {
    let tail = |n: &'a str| n.strip_prefix("VOLLEY_").unwrap_or(n);
    let mine = name.strip_prefix("VOLLEY_").unwrap_or(name);
    known
        .map(|k| (distance(mine, tail(k)), k))
        .filter(|(d, _)| *d <= mine.len().div_ceil(3))
        .min()
        .map(|(_, k)| k)
}

/// Edit distance (insertions, deletions, substitutions) between two names.
fn distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let here = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb))
                .min(row[j] + 1)
                .min(here + 1);
            prev = here;
        }
    }
    row[b.len()]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(list: &[(&str, &str)]) -> Vec<(String, String)> {
        list.iter()
            .map(|(n, v)| (n.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn good_values_pass_silently() {
        let env = vars(&[
            ("VOLLEY_RING_SLOTS", "256"),
            ("VOLLEY_SEGMENT_BYTES", "64M"),
            ("VOLLEY_WAIT", "block"),
            ("VOLLEY_NET", "tcp"),
            ("VOLLEY_FAULTS", "drop=0.1,seed=3"),
            ("VOLLEY_POLL", "every:8"),
            ("VOLLEY_TCP_CONGESTION", "reno"),
            ("VOLLEY_STATS", "1"),
            ("VOLLEY_RANK", "whatever the launcher says"),
            ("VOLLEY_TEST_ANYTHING", "x"),
            ("PATH", "/bin"),
        ]);
        assert_eq!(check(env, &[SETTINGS], true), Checked::default());
    }

    #[test]
    fn bad_values_are_errors_naming_variable_value_and_what_is_accepted() {
        let env = vars(&[
            ("VOLLEY_NET", "ib"),
            ("VOLLEY_FAULTS", "garbage"),
            ("VOLLEY_STATS", "banana"),
            ("VOLLEY_WAIT", "sleepy"),
            ("VOLLEY_RING_SLOTS", "lots"),
            ("VOLLEY_PEER_TIMEOUT", "-1"),
            ("VOLLEY_TCP_CONGESTION", "a/b"),
        ]);
        let c = check(env, &[SETTINGS], true);
        assert_eq!(
            c.errors,
            [
                "VOLLEY_FAULTS=garbage: expected drop=P,dup=P,reorder=P,delay_us=N,seed=N",
                "VOLLEY_NET=ib: expected udp or tcp",
                "VOLLEY_PEER_TIMEOUT=-1: expected a positive number of seconds",
                "VOLLEY_RING_SLOTS=lots: expected a power of two from 8 to 16384, optionally with K",
                "VOLLEY_STATS=banana: expected 0 or 1",
                "VOLLEY_TCP_CONGESTION=a/b: expected system or an algorithm's name such as cubic, reno or bbr",
                "VOLLEY_WAIT=sleepy: expected spin or block",
            ]
        );
        assert!(c.warnings.is_empty());
    }

    #[test]
    fn a_bad_network_setting_is_refused_even_on_one_node_and_a_good_one_warned() {
        let c = check(vars(&[("VOLLEY_NET", "ib")]), &[SETTINGS], false);
        assert_eq!(c.errors.len(), 1, "{c:?}");
        let c = check(vars(&[("VOLLEY_NET", "tcp")]), &[SETTINGS], false);
        assert_eq!(
            c.warnings,
            ["VOLLEY_NET has no effect: the job runs on one node (the transport between nodes)"]
        );
        assert!(c.errors.is_empty());
        assert_eq!(
            check(vars(&[("VOLLEY_NET", "tcp")]), &[SETTINGS], true),
            Checked::default()
        );
    }

    #[test]
    fn pmix_settings_matter_only_under_a_pmix_launcher() {
        let c = check(vars(&[("VOLLEY_RANKS_PER_NODE", "2")]), &[SETTINGS], false);
        assert_eq!(
            c.warnings,
            [
                "VOLLEY_RANKS_PER_NODE has no effect: the job was not started by a PMIx launcher \
              (emulated nodes under a PMIx launcher, like `volley run --ranks-per-node`)"
            ]
        );
        let under_pmix = vars(&[("VOLLEY_RANKS_PER_NODE", "2"), ("PMIX_NAMESPACE", "ns")]);
        assert_eq!(check(under_pmix, &[SETTINGS], true), Checked::default());
        let c = check(vars(&[("VOLLEY_RANKS_PER_NODE", "0")]), &[SETTINGS], false);
        assert_eq!(
            c.errors,
            ["VOLLEY_RANKS_PER_NODE=0: expected a positive number of ranks"]
        );
    }

    #[test]
    fn unknown_names_are_warned_with_the_closest_known_one() {
        let c = check(
            vars(&[("VOLLEY_RING_SLOT", "64"), ("VOLLEY_XYZZY", "1")]),
            &[SETTINGS],
            false,
        );
        assert_eq!(
            c.warnings,
            [
                "VOLLEY_RING_SLOT is not a volley setting; did you mean VOLLEY_RING_SLOTS?",
                "VOLLEY_XYZZY is not a volley setting",
            ]
        );
        // A name another layer's table knows is no typo.
        const ABOVE: &[Setting] = &[Setting {
            name: "VOLLEY_XYZZY",
            accepts: "1",
            purpose: "a test",
            scope: Scope::Always,
            check: |v| v == "1",
        }];
        let c = check(vars(&[("VOLLEY_XYZZY", "1")]), &[SETTINGS, ABOVE], false);
        assert_eq!(c, Checked::default());
        let c = check(vars(&[("VOLLEY_XYZZY", "2")]), &[SETTINGS, ABOVE], false);
        assert_eq!(c.errors, ["VOLLEY_XYZZY=2: expected 1"]);
    }

    #[test]
    fn every_name_is_listed_once() {
        let mut names: Vec<_> = SETTINGS.iter().map(|s| s.name).collect();
        names.sort_unstable();
        let n = names.len();
        names.dedup();
        assert_eq!(names.len(), n);
        assert!(names.iter().all(|n| n.starts_with("VOLLEY_")));
    }

    #[test]
    fn edit_distance() {
        assert_eq!(distance("kitten", "sitting"), 3);
        assert_eq!(distance("", "abc"), 3);
        assert_eq!(distance("same", "same"), 0);
    }
}
