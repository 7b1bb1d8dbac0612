//! The collated hang report: every rank's answer in one table, and a "likely cause" section
//! built from wait-for edges (rank A waits on B because its send to B is blocked, its barrier
//! round waits for B's notice, or it has requests or one-sided operations to B unanswered),
//! followed to the rank that does not wait: one that computes without polling, runs a long
//! handler, did not answer, or has exited.

use super::report::RankAnswer;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use volley::am::report::{RankReport, RankState};

/// One rank as the launcher knows it at report time.
#[derive(Debug)]
pub enum Seen {
    /// It answered.
    Report(Box<RankReport>),
    /// It did not (why: it exited, did not answer in time, has no runtime).
    Silent(String),
}

/// Every rank's answer (with the host it runs on, for a job on several), by rank.
pub fn collate(n: usize, answers: Vec<(RankAnswer, String)>) -> Vec<(Seen, String)> {
    let mut seen: Vec<(Seen, String)> = (0..n)
        .map(|_| (Seen::Silent("no answer".into()), String::new()))
        .collect();
    for (a, host) in answers {
        if a.rank >= n {
            continue;
        }
        let s = match a.answer {
            Ok(line) => match serde_json::from_str::<RankReport>(&line) {
                Ok(r) => Seen::Report(Box::new(r)),
                Err(e) => Seen::Silent(format!("answered something unreadable ({e})")),
            },
            Err(why) => Seen::Silent(why),
        };
        seen[a.rank] = (s, host);
    }
    seen
}

/// The whole report as printed (several lines, each ending in a newline).
pub fn render(seen: &[(Seen, String)], elapsed: std::time::Duration) -> String {
    let mut out = format!(
        "volley run: hang report, {:.1} s after the start, {} ranks\n",
        elapsed.as_secs_f64(),
        seen.len()
    );
    let _ = writeln!(
        out,
        "  {:>4}  {:<8}  {:<46}  {:>8}  {:>11}  {:>11}  notes",
        "rank", "pid", "state", "for", "sent req/rep", "recv req/rep"
    );
    for (rank, (s, host)) in seen.iter().enumerate() {
        let on = if host.is_empty() {
            String::new()
        } else {
            format!(" (host {host})")
        };
        match s {
            Seen::Report(r) => {
                let _ = writeln!(
                    out,
                    "  {rank:>4}  {:<8}  {:<46}  {:>8}  {:>11}  {:>11}  {}{on}",
                    r.pid,
                    describe_state(r),
                    format!("{:.1} s", r.secs),
                    format!("{}/{}", r.sent[0], r.sent[1]),
                    format!("{}/{}", r.received[0], r.received[1]),
                    notes(r)
                );
            }
            Seen::Silent(why) => {
                let _ = writeln!(out, "  {rank:>4}  {:<8}  {why}{on}", "-");
            }
        }
    }
    out.push_str("  likely cause:\n");
    let causes = likely_causes(seen);
    if causes.is_empty() {
        out.push_str("    no rank waits on another: the job looks busy, not stuck\n");
    }
    for c in causes {
        let _ = writeln!(out, "    - {c}");
    }
    out
}

/// "waiting in wait_until", "blocked sending a request to rank 3", ...
fn describe_state(r: &RankReport) -> String {
    let mut s = match &r.state {
        RankState::Computing if r.progress_thread => {
            "computing (its progress thread serves)".to_string()
        }
        RankState::Computing => "computing, not polling".to_string(),
        RankState::Polling => "polling (runtime calls, no long wait)".to_string(),
        RankState::Waiting => "waiting in wait_until".to_string(),
        RankState::Barrier { round, from } => {
            format!("in barrier (round {round}, waits for rank {from})")
        }
        RankState::Finalize => "in finalize".to_string(),
        RankState::SendBlocked { peer, channel } => {
            format!("blocked sending a {channel} to rank {peer}")
        }
    };
    if let Some(h) = &r.handler {
        let _ = write!(s, "; in {} handler \"{}\"", h.channel, h.name);
    }
    s
}

/// Per-peer details worth a look: full or busy rings, unacknowledged data, operations in
/// flight.
fn notes(r: &RankReport) -> String {
    let mut notes = Vec::new();
    for p in &r.peers {
        for (ch, name) in [(0, "request"), (1, "reply")] {
            let used = p.ring_out_used[ch];
            if p.ring_slots > 0 && used * 4 > p.ring_slots {
                notes.push(format!(
                    "{name} ring to {}: {used}/{} slots in use",
                    p.rank, p.ring_slots
                ));
            }
        }
        if p.unacked > 0 || p.queued_bytes > 0 {
            notes.push(format!(
                "{} to {}: {} unacked datagrams, {} bytes queued",
                p.route, p.rank, p.unacked, p.queued_bytes
            ));
        }
    }
    for o in &r.outstanding {
        notes.push(format!(
            "{} to rank {}: {} replies due",
            o.what, o.target, o.remaining
        ));
    }
    notes.join("; ")
}

/// Why rank `a` waits on rank `b`, or `None` if it does not.
fn edges(seen: &[(Seen, String)], a: usize) -> Vec<(usize, String)> {
    let Seen::Report(r) = &seen[a].0 else {
        return Vec::new();
    };
    match &r.state {
        RankState::SendBlocked { peer, channel } => {
            let full = r
                .peers
                .iter()
                .find(|p| p.rank == *peer && p.ring_slots > 0)
                .map(|p| {
                    let ch = usize::from(channel == "reply");
                    format!(
                        " (the {channel} ring to it has {}/{} slots in use)",
                        p.ring_out_used[ch], p.ring_slots
                    )
                })
                .unwrap_or_default();
            vec![(
                *peer,
                format!("is blocked sending a {channel} to rank {peer}{full}"),
            )]
        }
        RankState::Barrier { round, from } => vec![(
            *from,
            format!("waits in barrier (round {round}) for rank {from}'s arrival"),
        )],
        RankState::Waiting | RankState::Finalize => {
            let mut out = Vec::new();
            for p in &r.peers {
                let (asked, answered) = (p.sent[0], p.received[1]);
                if asked > answered && p.rank != a {
                    let theirs = match &seen.get(p.rank).map(|s| &s.0) {
                        Some(Seen::Report(b)) => b
                            .peers
                            .iter()
                            .find(|q| q.rank == a)
                            .map(|q| (q.received[0], q.sent[1])),
                        _ => None,
                    };
                    let detail = match theirs {
                        Some((taken, _)) if taken < asked => format!(
                            "rank {} has taken {taken} of the {asked} requests rank {a} sent it",
                            p.rank
                        ),
                        Some((taken, replied)) => format!(
                            "rank {} handled its {taken} requests but sent only {replied} \
                             replies: a request handler that does not reply?",
                            p.rank
                        ),
                        None => format!("{asked} requests sent, {answered} replies received"),
                    };
                    out.push((
                        p.rank,
                        format!("waits for a reply from rank {} ({detail})", p.rank),
                    ));
                }
            }
            for o in &r.outstanding {
                if o.target != a && !out.iter().any(|(b, _)| *b == o.target) {
                    out.push((
                        o.target,
                        format!(
                            "waits for {} to rank {} ({} replies due)",
                            o.what, o.target, o.remaining
                        ),
                    ));
                }
            }
            out
        }
        RankState::Computing | RankState::Polling => Vec::new(),
    }
}

/// What a rank that others wait on is doing, said as the end of a cause.
fn end_of_chain(seen: &[(Seen, String)], b: usize) -> String {
    match &seen[b].0 {
        Seen::Silent(why) => format!("rank {b} {why}"),
        Seen::Report(r) => {
            if let Some(h) = &r.handler {
                return format!(
                    "rank {b} has been running its {} handler \"{}\" for {:.1} s",
                    h.channel, h.name, h.secs
                );
            }
            match &r.state {
                RankState::Computing if r.progress_thread => format!(
                    "rank {b} has been computing for {:.1} s (its progress thread should \
                     serve it: is a handler or a critical section holding it?)",
                    r.secs
                ),
                RankState::Computing => format!(
                    "rank {b} has been computing for {:.1} s without polling",
                    r.secs
                ),
                RankState::Polling => format!("rank {b} is polling (no long wait)"),
                _ => format!("rank {b} is {}", describe_state(r)),
            }
        }
    }
}

/// The likely causes: for every waiting rank, its wait-for chain to a rank that does not
/// wait (or around a cycle); ranks that share an end are said together.
pub fn likely_causes(seen: &[(Seen, String)]) -> Vec<String> {
    let n = seen.len();
    let mut causes = Vec::new();
    let in_barrier: Vec<usize> = (0..n)
        .filter(|&r| matches!(&seen[r].0, Seen::Report(x) if matches!(x.state, RankState::Barrier { .. })))
        .collect();
    let barrier_said = !in_barrier.is_empty() && in_barrier.len() < n;
    if barrier_said {
        let absent: Vec<usize> = (0..n).filter(|r| !in_barrier.contains(r)).collect();
        let states: Vec<String> = absent.iter().map(|&b| end_of_chain(seen, b)).collect();
        causes.push(format!(
            "ranks {} wait in barrier; {} never reached it: {}",
            list(&in_barrier),
            list(&absent),
            states.join("; ")
        ));
    }
    let mut explained: BTreeSet<usize> = BTreeSet::new();
    for a in 0..n {
        if (barrier_said && in_barrier.contains(&a)) || explained.contains(&a) {
            continue;
        }
        let Some((b, why)) = edges(seen, a).into_iter().next().filter(|(b, _)| *b < n) else {
            continue;
        };
        let mut text = format!("rank {a} {why}");
        let mut path = vec![a, b];
        let mut cur = b;
        loop {
            let next = edges(seen, cur).into_iter().next();
            match next {
                Some((c, why)) if path.contains(&c) => {
                    let _ = write!(
                        text,
                        "; rank {cur} {why}: a cycle ({}), nobody can go on",
                        path.iter()
                            .chain(std::iter::once(&c))
                            .map(|r| r.to_string())
                            .collect::<Vec<_>>()
                            .join(" -> ")
                    );
                    break;
                }
                Some((c, why)) if c < n => {
                    let _ = write!(text, "; rank {cur} {why}");
                    path.push(c);
                    cur = c;
                }
                _ => {
                    let _ = write!(text, "; {}", end_of_chain(seen, cur));
                    break;
                }
            }
        }
        explained.extend(path.iter().copied().filter(|&r| r != cur));
        causes.push(text);
    }
    for (r, (s, _)) in seen.iter().enumerate() {
        if let Seen::Silent(why) = s {
            if !causes.iter().any(|c| c.contains(&format!("rank {r} "))) {
                causes.push(format!("rank {r} {why}"));
            }
        }
    }
    causes
}

/// "0, 1 and 3".
fn list(ranks: &[usize]) -> String {
    let words: Vec<String> = ranks.iter().map(|r| r.to_string()).collect();
    match words.split_last() {
        None => String::new(),
        Some((last, [])) => last.clone(),
        Some((last, rest)) => format!("{} and {last}", rest.join(", ")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use volley::am::report::{PeerReport, RunningHandler};

    fn rank(rank: usize, state: RankState, secs: f64) -> RankReport {
        RankReport {
            rank,
            pid: 100 + rank as u32,
            state,
            secs,
            handler: None,
            progress_thread: false,
            empty_polls: 0,
            sent: [0; 2],
            received: [0; 2],
            peers: Vec::new(),
            outstanding: Vec::new(),
        }
    }

    fn peer(rank: usize, sent: [u64; 2], received: [u64; 2]) -> PeerReport {
        PeerReport {
            rank,
            route: "shm".into(),
            sent,
            received,
            ring_slots: 64,
            ring_out_used: [0; 2],
            ring_in_used: [0; 2],
            unacked: 0,
            queued_bytes: 0,
        }
    }

    fn seen(reports: Vec<RankReport>) -> Vec<(Seen, String)> {
        reports
            .into_iter()
            .map(|r| (Seen::Report(Box::new(r)), String::new()))
            .collect()
    }

    #[test]
    fn a_waiter_points_at_the_rank_that_computes() {
        let mut a = rank(0, RankState::Waiting, 11.0);
        a.peers.push(peer(1, [1, 0], [0, 0]));
        let b = rank(1, RankState::Computing, 12.0);
        let causes = likely_causes(&seen(vec![a, b]));
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert!(causes[0].starts_with("rank 0 waits for a reply from rank 1"));
        assert!(causes[0].contains("rank 1 has been computing for 12.0 s without polling"));
    }

    #[test]
    fn a_missing_reply_is_named() {
        let mut a = rank(0, RankState::Waiting, 5.0);
        a.peers.push(peer(1, [1, 0], [0, 0]));
        let mut b = rank(1, RankState::Waiting, 5.0);
        b.peers.push(peer(0, [0, 0], [1, 0]));
        let causes = likely_causes(&seen(vec![a, b]));
        assert!(
            causes[0].contains("handled its 1 requests but sent only 0 replies"),
            "{causes:?}"
        );
    }

    #[test]
    fn a_long_handler_ends_the_chain() {
        let mut a = rank(
            0,
            RankState::SendBlocked {
                peer: 1,
                channel: "request".into(),
            },
            3.0,
        );
        a.peers.push(peer(1, [64, 0], [0, 0]));
        let mut b = rank(1, RankState::Polling, 0.0);
        b.handler = Some(RunningHandler {
            name: "slow".into(),
            channel: "request".into(),
            secs: 4.0,
        });
        let causes = likely_causes(&seen(vec![a, b]));
        assert!(causes[0].contains("blocked"), "{causes:?}");
        assert!(
            causes[0].contains("handler \"slow\" for 4.0 s"),
            "{causes:?}"
        );
    }

    #[test]
    fn a_barrier_names_who_never_came() {
        let b = |r, from| rank(r, RankState::Barrier { round: 0, from }, 2.0);
        let causes = likely_causes(&seen(vec![
            b(0, 2),
            b(1, 0),
            rank(2, RankState::Computing, 3.0),
        ]));
        assert!(
            causes[0].starts_with("ranks 0 and 1 wait in barrier; 2 never reached it"),
            "{causes:?}"
        );
    }

    #[test]
    fn a_silent_rank_is_reported() {
        let mut a = rank(0, RankState::Waiting, 1.0);
        a.peers.push(peer(1, [1, 0], [0, 0]));
        let mut s = seen(vec![a]);
        s.push((
            Seen::Silent("did not answer within 2 s".into()),
            String::new(),
        ));
        let causes = likely_causes(&s);
        assert!(causes[0].contains("rank 1 did not answer"), "{causes:?}");
        assert!(render(&s, std::time::Duration::from_secs(3)).contains("likely cause"));
    }

    #[test]
    fn a_cycle_is_called_one() {
        let blocked = |r, peer| {
            let mut x = rank(
                r,
                RankState::SendBlocked {
                    peer,
                    channel: "request".into(),
                },
                1.0,
            );
            x.peers.push(peer_of(peer));
            x
        };
        fn peer_of(p: usize) -> PeerReport {
            peer(p, [64, 0], [0, 0])
        }
        let causes = likely_causes(&seen(vec![blocked(0, 1), blocked(1, 0)]));
        assert!(causes[0].contains("a cycle (0 -> 1 -> 0)"), "{causes:?}");
    }
}
