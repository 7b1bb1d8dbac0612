//! The datagrams waiting to leave, in two queues: small ones (acks, short messages,
//! retransmissions of them) and bulk ones (data datagrams larger than [`BULK_DATAGRAM`]).
//!
//! A flush sends every small datagram first, then at most [`BULK_PER_FLUSH`] bytes of bulk
//! ones, so a short message to one peer never waits behind a window of another peer's bulk
//! data in the same `sendmmsg`, and a progress call that sends bulk data comes back to read
//! the socket (an answer from a third rank, acks opening the window) after a bounded amount
//! of copying. Within one peer a small datagram may overtake that peer's bulk ones; the
//! reliable layer reorders them (it keeps out-of-order datagrams within the window).

use std::collections::VecDeque;

/// Datagrams longer than this go to the bulk queue. A LAN datagram (1472 bytes) is never
/// bulk, so on an Ethernet MTU both queues keep their old single order.
pub(super) const BULK_DATAGRAM: usize = 8 << 10;
/// Bulk bytes one flush sends at most (at least one datagram): on loopback a 64 KiB datagram
/// costs the sender about 10-20 µs of copying, so four of them keep a progress call within
/// a few short round trips.
pub(super) const BULK_PER_FLUSH: usize = 256 << 10;

/// A datagram ready to leave: the peer slot it goes to and its bytes.
#[derive(Debug, Clone)]
pub(super) struct Outgoing {
    pub(super) slot: usize,
    pub(super) buf: Vec<u8>,
}

/// Which of the two queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    /// Acks, short messages: all of them leave at every flush.
    Small,
    /// Full data datagrams: a budget of them per flush.
    Bulk,
}

/// The two queues of outgoing datagrams.
#[derive(Debug, Default)]
pub(super) struct OutQueue {
    small: VecDeque<Outgoing>,
    bulk: VecDeque<Outgoing>,
}

impl OutQueue {
    /// Queues `d` behind the datagrams of its lane.
    pub(super) fn push(&mut self, d: Outgoing) {
        if d.buf.len() > BULK_DATAGRAM {
            self.bulk.push_back(d);
        } else {
            self.small.push_back(d);
        }
    }

    /// Datagrams queued in both lanes.
    pub(super) fn len(&self) -> usize {
        self.small.len() + self.bulk.len()
    }

    /// Whether both lanes are empty.
    pub(super) fn is_empty(&self) -> bool {
        self.small.is_empty() && self.bulk.is_empty()
    }

    /// The queue of `lane`, front first.
    pub(super) fn lane(&mut self, lane: Lane) -> &mut VecDeque<Outgoing> {
        match lane {
            Lane::Small => &mut self.small,
            Lane::Bulk => &mut self.bulk,
        }
    }

    /// How many datagrams from the front of `lane` the next system call may take, at most
    /// `batch` and, for the bulk lane, within `budget` bytes (at least one datagram).
    pub(super) fn take(&self, lane: Lane, batch: usize, budget: usize) -> usize {
        match lane {
            Lane::Small => self.small.len().min(batch),
            Lane::Bulk => {
                let mut bytes = 0;
                let n = self
                    .bulk
                    .iter()
                    .take(batch)
                    .take_while(|d| {
                        bytes += d.buf.len();
                        bytes <= budget
                    })
                    .count();
                n.max(usize::from(!self.bulk.is_empty() && budget > 0))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(slot: usize, len: usize) -> Outgoing {
        Outgoing {
            slot,
            buf: vec![0; len],
        }
    }

    #[test]
    fn small_datagrams_leave_first_and_bulk_within_its_budget() {
        let mut q = OutQueue::default();
        for _ in 0..10 {
            q.push(d(1, 65000));
        }
        q.push(d(2, 100));
        assert_eq!(q.len(), 11);
        assert_eq!(q.lane(Lane::Bulk).len(), 10);
        assert_eq!(q.take(Lane::Small, 32, 0), 1);
        assert_eq!(
            q.lane(Lane::Small)[0].slot,
            2,
            "the short one is not behind the bulk"
        );
        // 256 KiB holds four 65000-byte datagrams.
        assert_eq!(q.take(Lane::Bulk, 32, BULK_PER_FLUSH), 4);
        assert_eq!(q.take(Lane::Bulk, 2, BULK_PER_FLUSH), 2);
        // A budget smaller than one datagram still sends one; none once it is spent.
        assert_eq!(q.take(Lane::Bulk, 32, 1000), 1);
        assert_eq!(q.take(Lane::Bulk, 32, 0), 0);
        q.lane(Lane::Bulk).clear();
        assert_eq!(q.take(Lane::Bulk, 32, BULK_PER_FLUSH), 0);
        q.lane(Lane::Small).clear();
        assert!(q.is_empty());
    }
}
