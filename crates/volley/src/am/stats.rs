//! Per-rank counters that make the runtime's behaviour checkable.

use super::handler::MessageClass;
use crate::counter::{Counter, Tally};
use crate::transport::net::NetStats;
use crate::transport::Channel;
use std::fmt;

/// A snapshot of one rank's counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages sent, indexed `[channel][class]` (channel 0 = request, 1 = reply; class 0 =
    /// short, 1 = medium, 2 = long).
    pub sent: [[u64; 3]; 2],
    /// Messages handled, indexed like `sent`.
    pub handled: [[u64; 3]; 2],
    /// Calls to poll (explicit, in waits, and in blocked sends).
    pub polls: u64,
    /// Polls that found nothing.
    pub empty_polls: u64,
    /// Sends that could not inject at once and had to wait for credit or a buffer.
    pub blocked_sends: u64,
    /// Times a wait gave up the core with a yield (a polite wait, or one that spun out).
    pub yields: u64,
    /// Frames dropped at this rank because they were corrupt or named an unknown handler.
    pub dropped: u64,
    /// Deepest handler nesting reached (2 = reply handlers ran inside a request handler):
    /// counted per batch of frames delivered together, whether or not they all held a valid
    /// handler.
    pub max_nesting: u64,
    /// Runtime-internal messages (barrier, finalize) sent.
    pub system_sent: u64,
    /// Network route (all zero when every peer is on this node): messages sent and handled
    /// through it (the rest went through shared memory), network polls, network polls that
    /// found nothing, and the polling policy's current interval in polls.
    pub network: NetworkStats,
    /// The progress thread's counters (all zero in inline mode).
    pub progress: ProgressStats,
}

/// What the progress thread did (`VOLLEY_PROGRESS=thread`); all zero in inline mode.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProgressStats {
    /// Naps while the rank thread polled by itself (it was inside, or called meanwhile).
    pub naps: u64,
    /// Short looks again at a rank thread found outside, to tell polling from computing.
    pub confirmations: u64,
    /// Times it took the engine (the rank thread computed, or slept in a blocked wait).
    pub takes: u64,
    /// Polls it ran holding the engine, and how many of those ran handlers.
    pub polls: u64,
    /// Polls that ran handlers.
    pub handled_polls: u64,
    /// Sleeps on the doorbell after finding nothing for a while.
    pub sleeps: u64,
}

/// How much traffic took the network route, and the transport's own counters.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetworkStats {
    /// Transport name (`"udp"`, `"tcp"`), empty when the rank has no network peers.
    pub transport: &'static str,
    /// Messages sent through the network (runtime messages such as barrier notices are not
    /// counted, as in `Stats::sent`).
    pub sent: u64,
    /// Messages whose handler ran after arriving through the network (user handlers only).
    pub handled: u64,
    /// Network polls.
    pub polls: u64,
    /// Network polls that delivered nothing.
    pub empty_polls: u64,
    /// Polls between two network polls, as the policy currently sets it.
    pub interval: u64,
    /// The transport's counters.
    pub transport_stats: NetStats,
}

impl Stats {
    /// Total messages sent on a channel.
    pub fn sent_on(&self, ch: Channel) -> u64 {
        self.sent[ch as usize].iter().sum()
    }

    /// Total messages handled on a channel.
    pub fn handled_on(&self, ch: Channel) -> u64 {
        self.handled[ch as usize].iter().sum()
    }
}

impl fmt::Display for Stats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let [rq, rp] = self.sent;
        let [hq, hp] = self.handled;
        write!(
            f,
            "sent req s/m/l {}/{}/{} rep s/m/l {}/{}/{} | handled req s/m/l {}/{}/{} rep s/m/l \
             {}/{}/{} | polls {} empty {} | blocked sends {} | yields {} | dropped {} | max nesting {} | \
             system {}",
            rq[0],
            rq[1],
            rq[2],
            rp[0],
            rp[1],
            rp[2],
            hq[0],
            hq[1],
            hq[2],
            hp[0],
            hp[1],
            hp[2],
            self.polls,
            self.empty_polls,
            self.blocked_sends,
            self.yields,
            self.dropped,
            self.max_nesting,
            self.system_sent
        )?;
        let n = &self.network;
        if !n.transport.is_empty() {
            let t = &n.transport_stats;
            write!(
                f,
                " | {} sent {} handled {} polls {} empty {} interval {} | syscalls send {} recv \
                 {} | packets {}/{} | retransmits {} | dropped {} | unsequenced sent {} received \
                 {} duplicates {} | lent {} kept {} B | faults {}",
                n.transport,
                n.sent,
                n.handled,
                n.polls,
                n.empty_polls,
                n.interval,
                t.send_calls,
                t.recv_calls,
                t.packets_sent,
                t.packets_received,
                t.retransmissions,
                t.dropped,
                t.unsequenced_sent,
                t.unsequenced_received,
                t.unsequenced_duplicates,
                t.lent_messages,
                t.lent_bytes_kept,
                t.faults_injected
            )?;
        }
        let p = &self.progress;
        if *p != ProgressStats::default() {
            write!(
                f,
                " | progress thread naps {} confirmations {} takes {} polls {} handled {} sleeps {}",
                p.naps, p.confirmations, p.takes, p.polls, p.handled_polls, p.sleeps
            )?;
        }
        Ok(())
    }
}

/// The live counters: written by the engine's owner only, readable by the hang reporter
/// (see [`Counter`]).
#[derive(Debug, Default)]
pub(crate) struct StatCells {
    sent: [[Tally; 3]; 2],
    handled: [[Tally; 3]; 2],
    pub(crate) polls: Tally,
    pub(crate) empty_polls: Counter,
    pub(crate) blocked_sends: Tally,
    pub(crate) yields: Tally,
    pub(crate) dropped: Tally,
    pub(crate) max_nesting: Tally,
    pub(crate) system_sent: Tally,
}

pub(crate) fn bump(c: &impl Bump) {
    c.bump();
}

/// What `bump` adds one to.
pub(crate) trait Bump {
    fn bump(&self);
}

impl Bump for Counter {
    fn bump(&self) {
        Counter::bump(self);
    }
}

impl Bump for Tally {
    fn bump(&self) {
        Tally::bump(self);
    }
}

impl StatCells {
    pub(crate) fn sent(&self, ch: Channel, class: MessageClass) {
        bump(&self.sent[ch as usize][class as usize]);
    }

    pub(crate) fn handled(&self, ch: Channel, class: MessageClass) {
        bump(&self.handled[ch as usize][class as usize]);
    }

    pub(crate) fn snapshot(&self) -> Stats {
        let grid = |g: &[[Tally; 3]; 2]| g.each_ref().map(|row| row.each_ref().map(Tally::get));
        Stats {
            sent: grid(&self.sent),
            handled: grid(&self.handled),
            polls: self.polls.get(),
            empty_polls: self.empty_polls.get(),
            blocked_sends: self.blocked_sends.get(),
            yields: self.yields.get(),
            dropped: self.dropped.get(),
            max_nesting: self.max_nesting.get(),
            system_sent: self.system_sent.get(),
            network: NetworkStats::default(),
            progress: ProgressStats::default(),
        }
    }
}
