//! A rank's report as it travels to the launcher: one line of JSON.

use serde::{Deserialize, Serialize};

/// What one rank reports.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RankReport {
    /// The rank.
    pub rank: usize,
    /// Its process id.
    pub pid: u32,
    /// What its thread is doing.
    pub state: RankState,
    /// For how long (at least), in seconds.
    pub secs: f64,
    /// The handler running now, if any (on the rank's thread or its progress thread).
    pub handler: Option<RunningHandler>,
    /// Whether a progress thread serves this rank while its thread computes.
    pub progress_thread: bool,
    /// Polls so far that found nothing (its progress thread's included).
    pub empty_polls: u64,
    /// Messages sent, by channel (0 = request, 1 = reply): the sum over `peers`.
    pub sent: [u64; 2],
    /// Messages received, by channel: the sum over `peers`.
    pub received: [u64; 2],
    /// The peers this rank has exchanged anything with.
    pub peers: Vec<PeerReport>,
    /// Operations in flight of the layers above (one-sided operations).
    pub outstanding: Vec<Outstanding>,
}

/// Where a rank's thread is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum RankState {
    /// Outside the runtime: no runtime call, no poll.
    Computing,
    /// Making runtime calls that do not wait long (polling, sending, short waits).
    Polling,
    /// In `wait_until` (or a wait built on it) that has spun out.
    Waiting,
    /// In `barrier`, waiting for the arrival of rank `from` in round `round`.
    Barrier {
        /// The dissemination round.
        round: u32,
        /// The rank whose notice it waits for.
        from: usize,
    },
    /// In `finalize`, waiting for the other ranks to finalize.
    Finalize,
    /// In a send to `peer` that finds no room (ring, buffers or window full).
    SendBlocked {
        /// The destination.
        peer: usize,
        /// `"request"` or `"reply"`.
        channel: String,
    },
}

/// A handler that is running.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunningHandler {
    /// Its registered name.
    pub name: String,
    /// `"request"` or `"reply"`.
    pub channel: String,
    /// Seconds it has been running, at least (0 when it just started or is not timed yet).
    pub secs: f64,
}

/// What a rank exchanged with one peer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PeerReport {
    /// The peer.
    pub rank: usize,
    /// `"shm"`, `"udp"` or `"tcp"`.
    pub route: String,
    /// Messages sent to it, by channel (shared memory: frames, the runtime's own included).
    pub sent: [u64; 2],
    /// Messages received from it, by channel.
    pub received: [u64; 2],
    /// Shared memory: slots per ring (0 for the network).
    pub ring_slots: u64,
    /// Shared memory: slots of the rings towards it not yet credited back, by channel
    /// (`ring_slots` means full: a send there waits).
    pub ring_out_used: [u64; 2],
    /// Shared memory: the same for the rings from it.
    pub ring_in_used: [u64; 2],
    /// Network: datagrams sent and not acknowledged (UDP).
    pub unacked: u64,
    /// Network: bytes queued towards it that have not left this rank.
    pub queued_bytes: u64,
}

/// Operations of a layer above in flight towards one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Outstanding {
    /// What they are (`"one-sided get"`, say).
    pub what: String,
    /// The target rank.
    pub target: usize,
    /// Replies still expected.
    pub remaining: u64,
}
