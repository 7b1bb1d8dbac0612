//! What the hang reporter reads of the engine, from its own thread: only counters (atomics),
//! the rings in shared memory and fields that never change after construction (see the
//! `Sync` note on `SharedEngine`).

use super::super::report::PeerReport;
use super::Engine;
use crate::transport::Channel;

impl Engine {
    /// What this rank exchanged with each peer it exchanged anything with.
    pub(crate) fn peer_reports(&self) -> Vec<PeerReport> {
        let mut out = Vec::new();
        for (rank, &l) in self.local_of.iter().enumerate() {
            let report = match self.shm.ring_traffic(l as usize, Channel::Request) {
                Some(req) => {
                    let Some(rep) = self.shm.ring_traffic(l as usize, Channel::Reply) else {
                        continue;
                    };
                    PeerReport {
                        rank,
                        route: "shm".into(),
                        sent: [req.sent, rep.sent],
                        received: [req.received, rep.received],
                        ring_slots: req.slots,
                        ring_out_used: [req.out_in_use, rep.out_in_use],
                        ring_in_used: [req.in_in_use, rep.in_in_use],
                        unacked: 0,
                        queued_bytes: 0,
                    }
                }
                None => {
                    let Some(t) = self.net.as_ref().and_then(|n| n.peer_traffic(rank)) else {
                        continue;
                    };
                    PeerReport {
                        rank,
                        route: self.net_kind.into(),
                        sent: t.sent,
                        received: t.received,
                        ring_slots: 0,
                        ring_out_used: [0; 2],
                        ring_in_used: [0; 2],
                        unacked: t.unacked,
                        queued_bytes: t.queued_bytes,
                    }
                }
            };
            let idle = report.sent == [0; 2]
                && report.received == [0; 2]
                && report.ring_out_used == [0; 2]
                && report.ring_in_used == [0; 2]
                && report.unacked == 0
                && report.queued_bytes == 0;
            if !idle {
                out.push(report);
            }
        }
        out
    }

    /// Every message sent and received so far, by counters alone (the reporter's sampling:
    /// no ring is read, so no line another core writes is pulled over).
    pub(crate) fn traffic_total(&self) -> u64 {
        let mut total = 0;
        for (rank, &l) in self.local_of.iter().enumerate() {
            for ch in [Channel::Request, Channel::Reply] {
                if let Some(t) = self.shm.ring_counts(l as usize, ch) {
                    total += t.0 + t.1;
                }
            }
            if let Some(t) = self.net.as_ref().and_then(|n| n.peer_traffic(rank)) {
                total += t.sent.iter().chain(&t.received).sum::<u64>();
            }
        }
        total
    }

    /// Asks the network route to publish its backlogs at its next poll; false without one.
    pub(crate) fn want_backlog(&self) -> bool {
        self.net.as_ref().is_some_and(|n| {
            n.want_backlog();
            true
        })
    }

    /// Whether the backlogs asked for have been published.
    pub(crate) fn backlog_fresh(&self) -> bool {
        self.net.as_ref().is_none_or(|n| n.backlog_fresh())
    }
}
