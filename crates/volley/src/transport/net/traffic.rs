//! When a rank last had short traffic, per peer connection: a bulk transfer toward one peer
//! moves in small quanta while the rank talks with its *other* peers (their messages must not
//! wait behind it), and in large ones otherwise (fewer system calls). Traffic with the bulk
//! transfer's own peer does not count: it travels behind the transfer anyway. Both network
//! transports follow these rules.

/// How long after this rank's last short traffic with other peers (a short message sent to
/// one, or any message delivered from one) a bulk transfer keeps moving in small quanta.
pub const QUIET_NS: u64 = 250_000;

/// How long after this rank's last short traffic with other peers the later parts of a long
/// message are queued (copied) and left to the progress calls, rather than sent from the
/// caller's bytes within the send: a rank in a phase of talking with several peers gets its
/// send back early.
pub const PIPELINE_NS: u64 = 10_000_000;

/// Most `progress` calls in a row that leave a bulk transfer's quantum to the next one because
/// they moved short messages (delivered some, or followed the send of one): a transfer gets at
/// least every third poll's quantum.
pub(crate) const MAX_DEFERRED_POLLS: u32 = 2;

/// The latest short traffic on the two connections (or peer pairs) that had it last.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecentTraffic {
    /// `(time, connection)`, the latest first; the two connections differ.
    latest: [(u64, usize); 2],
}

/// A connection index no connection has.
const NONE: usize = usize::MAX;
/// The time of traffic that never was.
const NEVER: u64 = 0;

impl Default for RecentTraffic {
    fn default() -> Self {
        Self {
            latest: [(NEVER, NONE); 2],
        }
    }
}

impl RecentTraffic {
    /// Notes short traffic on connection `idx` at time `now` (a short message sent to its
    /// peer, or any message delivered from it).
    pub(crate) fn note(&mut self, idx: usize, now: u64) {
        if self.latest[0].1 != idx {
            self.latest[1] = self.latest[0];
        }
        self.latest[0] = (now, idx);
    }

    /// When a connection other than `idx` last had short traffic ([`NEVER`] if none had).
    fn latest_other_than(&self, idx: usize) -> u64 {
        if self.latest[0].1 != idx {
            self.latest[0].0
        } else {
            self.latest[1].0
        }
    }

    /// Whether a connection other than `idx` had short traffic within `window` ns before
    /// `now` (never, if none ever had).
    pub(crate) fn others_within(&self, idx: usize, now: u64, window: u64) -> bool {
        let last = self.latest_other_than(idx);
        last != NEVER && now.saturating_sub(last) < window
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn traffic_on_a_connection_does_not_count_for_itself() {
        let mut t = RecentTraffic::default();
        assert_eq!(t.latest_other_than(0), NEVER);
        t.note(0, 10);
        assert_eq!(t.latest_other_than(0), NEVER, "its own traffic");
        assert_eq!(t.latest_other_than(1), 10);
        t.note(1, 20);
        assert_eq!(t.latest_other_than(0), 20);
        assert_eq!(t.latest_other_than(1), 10);
        t.note(1, 30);
        assert_eq!(
            t.latest_other_than(1),
            10,
            "the other connection's, not its own"
        );
        assert_eq!(t.latest_other_than(0), 30);
        t.note(2, 40);
        assert_eq!(t.latest_other_than(2), 30);
        assert_eq!(t.latest_other_than(1), 40);
        assert_eq!(t.latest_other_than(0), 40);
    }

    #[test]
    fn others_within_a_window() {
        let mut t = RecentTraffic::default();
        assert!(!t.others_within(0, 5, 100), "no traffic ever");
        t.note(1, 10);
        assert!(t.others_within(0, 109, 100));
        assert!(!t.others_within(0, 110, 100), "the window has passed");
        assert!(
            !t.others_within(1, 20, 100),
            "its own traffic does not count"
        );
    }
}
