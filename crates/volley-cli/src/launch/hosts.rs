//! Host lists (`--hosts a,b,c` or `--hostfile FILE`) and the block placement of ranks on them.

use std::ops::Range;
use std::path::Path;

/// One host of a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// The name handed to the remote shell.
    pub name: String,
    /// At most this many ranks (`slots=K` in a hostfile).
    pub slots: Option<usize>,
}

/// `--hosts a,b,c`: one host per entry, in order (a name given twice is two nodes).
pub fn parse_list(list: &str) -> Result<Vec<Host>, String> {
    list.split(',')
        .enumerate()
        .map(|(i, name)| {
            let name = name.trim();
            if name.is_empty() {
                Err(format!(
                    "--hosts {list:?}: entry {} is empty (expected names separated by commas)",
                    i + 1
                ))
            } else {
                Ok(Host {
                    name: name.to_string(),
                    slots: None,
                })
            }
        })
        .collect()
}

/// `--hostfile FILE`: one host per line as `NAME [slots=K]`; `#` starts a comment, blank
/// lines are skipped.
pub fn read_file(path: &Path) -> Result<Vec<Host>, String> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| format!("cannot read hostfile {}: {e}", path.display()))?;
    let hosts = parse_file(&text).map_err(|e| format!("hostfile {}: {e}", path.display()))?;
    if hosts.is_empty() {
        return Err(format!("hostfile {} names no host", path.display()));
    }
    Ok(hosts)
}

fn parse_file(text: &str) -> Result<Vec<Host>, String> {
    let mut hosts = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("").trim();
        if line.is_empty() {
            continue;
        }
        let bad = || {
            format!(
                "line {}: expected `HOST [slots=K]` with K >= 1, got {:?}",
                i + 1,
                raw.trim()
            )
        };
        let mut words = line.split_whitespace();
        let name = words.next().ok_or_else(bad)?;
        if name.contains('=') || name.contains(',') {
            return Err(bad());
        }
        let slots = match words.next() {
            None => None,
            Some(w) => Some(
                w.strip_prefix("slots=")
                    .and_then(|k| k.parse::<usize>().ok())
                    .filter(|k| *k >= 1)
                    .ok_or_else(bad)?,
            ),
        };
        if words.next().is_some() {
            return Err(bad());
        }
        hosts.push(Host {
            name: name.to_string(),
            slots,
        });
    }
    Ok(hosts)
}

/// The ranks of each host, in host order, as consecutive blocks (host i is node i).
///
/// Without slots the ranks are split evenly: the first `n mod H` hosts get one more. With
/// slots (a host without `slots=` counts as one slot), hosts are filled in order up to their
/// slots and `n` may not exceed their sum. Hosts beyond the last rank get an empty range.
pub fn place(n: usize, hosts: &[Host]) -> Result<Vec<Range<usize>>, String> {
    let h = hosts.len();
    if h == 0 {
        return Err("no host".into());
    }
    let counts: Vec<usize> = if hosts.iter().all(|x| x.slots.is_none()) {
        (0..h).map(|i| n / h + usize::from(i < n % h)).collect()
    } else {
        let total: usize = hosts.iter().map(|x| x.slots.unwrap_or(1)).sum();
        if n > total {
            return Err(format!("{n} ranks but the hosts have only {total} slots"));
        }
        let mut left = n;
        hosts
            .iter()
            .map(|x| {
                let c = x.slots.unwrap_or(1).min(left);
                left -= c;
                c
            })
            .collect()
    };
    let mut start = 0;
    Ok(counts
        .into_iter()
        .map(|c| {
            start += c;
            start - c..start
        })
        .collect())
}

/// Whether `name` surely means this machine (then the launcher may listen on loopback).
pub fn is_local_name(name: &str) -> bool {
    matches!(
        name,
        "localhost" | "localhost.localdomain" | "ip6-localhost" | "::1"
    ) || name.starts_with("127.")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn named(names: &[&str]) -> Vec<Host> {
        names
            .iter()
            .map(|n| Host {
                name: n.to_string(),
                slots: None,
            })
            .collect()
    }

    #[test]
    fn list_splits_on_commas_and_refuses_empty_entries() {
        assert_eq!(parse_list("a, b").unwrap(), named(&["a", "b"]));
        for bad in ["", "a,,b", "a,", ",a", " , "] {
            assert!(parse_list(bad).unwrap_err().contains("empty"), "{bad:?}");
        }
    }

    #[test]
    fn hostfile_lines_comments_and_slots() {
        let hosts =
            parse_file("# cluster\n\nnode1 slots=2\n  node2   # spare\nnode3 slots=1\n").unwrap();
        assert_eq!(
            hosts,
            vec![
                Host {
                    name: "node1".into(),
                    slots: Some(2)
                },
                Host {
                    name: "node2".into(),
                    slots: None
                },
                Host {
                    name: "node3".into(),
                    slots: Some(1)
                },
            ]
        );
        for (bad, line) in [
            ("a\nb slots=0\n", "line 2"),
            ("a slots=x\n", "line 1"),
            ("a slots=2 extra\n", "line 1"),
            ("a\n\nb cpus=2\n", "line 3"),
            ("slots=2\n", "line 1"),
        ] {
            let e = parse_file(bad).unwrap_err();
            assert!(e.contains(line), "{bad:?}: {e}");
        }
    }

    #[test]
    fn even_blocks_without_slots() {
        let p = |n, h| place(n, &named(&vec!["x"; h])).unwrap();
        assert_eq!(p(4, 2), vec![0..2, 2..4]);
        assert_eq!(p(5, 2), vec![0..3, 3..5]);
        assert_eq!(p(7, 3), vec![0..3, 3..5, 5..7]);
        assert_eq!(p(1, 3), vec![0..1, 1..1, 1..1]);
    }

    #[test]
    fn slots_fill_hosts_in_order() {
        let hosts = parse_file("a slots=2\nb\nc slots=3\n").unwrap();
        assert_eq!(place(4, &hosts).unwrap(), vec![0..2, 2..3, 3..4]);
        assert_eq!(place(6, &hosts).unwrap(), vec![0..2, 2..3, 3..6]);
        assert!(place(7, &hosts).unwrap_err().contains("6 slots"));
    }
}
