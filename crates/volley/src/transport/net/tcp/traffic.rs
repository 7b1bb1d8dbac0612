//! When a rank last had short traffic, per connection: a bulk transfer toward one peer writes
//! small quanta while the rank talks with its *other* peers (their messages must not wait
//! behind it), and large ones otherwise (fewer system calls). Traffic with the bulk transfer's
//! own peer does not count: it travels behind the transfer on the same stream anyway.

/// The latest short traffic on the two connections that had it last.
#[derive(Debug, Clone, Copy)]
pub(super) struct RecentTraffic {
    /// `(time, connection)`, the latest first; the two connections differ.
    latest: [(u64, usize); 2],
}

/// A connection index no connection has.
const NONE: usize = usize::MAX;
/// The time of traffic that never was.
pub(super) const NEVER: u64 = 0;

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
    pub(super) fn note(&mut self, idx: usize, now: u64) {
        if self.latest[0].1 != idx {
            self.latest[1] = self.latest[0];
        }
        self.latest[0] = (now, idx);
    }

    /// When a connection other than `idx` last had short traffic ([`NEVER`] if none had).
    pub(super) fn latest_other_than(&self, idx: usize) -> u64 {
        if self.latest[0].1 != idx {
            self.latest[0].0
        } else {
            self.latest[1].0
        }
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
}
