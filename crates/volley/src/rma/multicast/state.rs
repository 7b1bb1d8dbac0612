//! The multicast's per-rank state, shared by its handlers and the rank's own calls: the
//! pending-ack table of the tree nodes this rank is, the forwards and combined acks waiting to
//! be sent from the rank's own context, and the requester's outstanding updates.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, PoisonError};

/// The `to` position of an ack meant for the requester rather than a tree node.
pub(super) const TO_REQUESTER: u64 = u64::MAX;
/// No member refused: the `first_pos` of a clean ack.
pub(super) const NO_FAILURE: u64 = u64::MAX;

/// One (combined) ack: how many members of a subtree reported, how many refused, and the
/// refusal of the one at the lowest list position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Ack {
    pub members: u64,
    pub failures: u64,
    pub first_pos: u64,
    pub first_rank: u64,
    pub code: u64,
    pub seg_len: u64,
}

impl Ack {
    /// A member's own report.
    pub fn own(pos: u64, rank: u64, refusal: Option<(u64, u64)>) -> Self {
        match refusal {
            None => Ack {
                members: 1,
                failures: 0,
                first_pos: NO_FAILURE,
                first_rank: 0,
                code: 0,
                seg_len: 0,
            },
            Some((code, seg_len)) => Ack {
                members: 1,
                failures: 1,
                first_pos: pos,
                first_rank: rank,
                code,
                seg_len,
            },
        }
    }

    /// Folds a child's ack into this one.
    pub fn merge(&mut self, other: Ack) {
        self.members += other.members;
        self.failures += other.failures;
        if other.first_pos < self.first_pos {
            self.first_pos = other.first_pos;
            self.first_rank = other.first_rank;
            self.code = other.code;
            self.seg_len = other.seg_len;
        }
    }

    /// Message arguments: the multicast's key, the receiving position, then the ack.
    pub fn args(&self, origin: u64, id: u64, to: u64) -> [u64; 9] {
        [
            origin,
            id,
            to,
            self.members,
            self.failures,
            self.first_pos,
            self.first_rank,
            self.code,
            self.seg_len,
        ]
    }

    /// The ack of [`Ack::args`]: (origin, id, to, ack).
    pub fn parse(a: impl Fn(usize) -> u64) -> (u64, u64, u64, Ack) {
        (
            a(0),
            a(1),
            a(2),
            Ack {
                members: a(3),
                failures: a(4),
                first_pos: a(5),
                first_rank: a(6),
                code: a(7),
                seg_len: a(8),
            },
        )
    }
}

/// A tree node waiting for its children's acks.
#[derive(Debug)]
struct Pending {
    parent: usize,
    parent_pos: u64,
    remaining: usize,
    ack: Ack,
}

/// An update to send on to this node's children.
#[derive(Debug)]
pub(super) struct Forward {
    /// The update's arguments as received; the position is replaced per child.
    pub args: [u64; 9],
    /// Rank list and data, as received.
    pub payload: Vec<u8>,
    /// Children: (position, rank).
    pub children: Vec<(u64, usize)>,
}

/// A combined ack ready to go up: (parent rank, its args).
pub(super) type ReadyAck = (usize, [u64; 9]);

/// Counters of one rank's multicast traffic.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MulticastCounts {
    /// Updates delivered to this rank as a member (written or refused), each counted once.
    pub delivered: u64,
    /// Of those, the ones this rank's segment refused.
    pub refused: u64,
    /// Messages this rank forwarded to children.
    pub forwarded: u64,
    /// Combined acks this rank sent up from its own context (leaves ack in their handler).
    pub combined: u64,
    /// Acks this rank received as a requester: one per completed update.
    pub acks: u64,
    /// Acks that matched nothing outstanding (a forged or duplicated ack), ignored.
    pub stray: u64,
}

#[derive(Debug, Default)]
struct Inner {
    pending: HashMap<(u64, u64, u64), Pending>,
    forwards: VecDeque<Forward>,
    ready: VecDeque<ReadyAck>,
    /// This rank's own outstanding updates: id → the ack, once in.
    mine: HashMap<u64, Option<Ack>>,
    counts: MulticastCounts,
}

/// The state behind a mutex (handlers hold it for a few map operations only), and this
/// rank's number once attached.
#[derive(Debug)]
pub(super) struct State {
    inner: Mutex<Inner>,
    rank: AtomicU64,
    /// Bumped whenever a handler leaves work for the rank's context or completes one of its
    /// updates: what the rank's waits watch, without the lock.
    events: AtomicU64,
}

impl Default for State {
    fn default() -> Self {
        Self {
            inner: Mutex::default(),
            rank: AtomicU64::new(u64::MAX),
            events: AtomicU64::new(0),
        }
    }
}

impl State {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The event count (see the field).
    pub fn events(&self) -> u64 {
        self.events.load(Ordering::Acquire)
    }

    fn bump(&self) {
        self.events.fetch_add(1, Ordering::Release);
    }

    /// Records this rank's number (before it opens any update).
    pub fn set_rank(&self, rank: usize) {
        self.rank.store(rank as u64, Ordering::Relaxed);
    }

    /// Counts a message that matched nothing.
    pub fn count_stray(&self) {
        self.lock().counts.stray += 1;
    }

    /// Records a delivery at a node with children: its own report waits for theirs.
    pub fn deliver_inner(
        &self,
        key: (u64, u64, u64),
        parent: (usize, u64),
        own: Ack,
        fwd: Forward,
    ) {
        let mut s = self.lock();
        s.counts.delivered += 1;
        s.counts.refused += own.failures;
        s.pending.insert(
            key,
            Pending {
                parent: parent.0,
                parent_pos: parent.1,
                remaining: fwd.children.len(),
                ack: own,
            },
        );
        s.forwards.push_back(fwd);
        drop(s);
        self.bump();
    }

    /// Records a delivery at a leaf (which acks at once).
    pub fn deliver_leaf(&self, own: Ack) {
        let mut s = self.lock();
        s.counts.delivered += 1;
        s.counts.refused += own.failures;
    }

    /// An ack for (origin, id) meant for position `to` of this rank (or the requester).
    pub fn on_ack(&self, origin: u64, id: u64, to: u64, ack: Ack) {
        let me = self.rank.load(Ordering::Relaxed);
        let mut s = self.lock();
        if to == TO_REQUESTER {
            match s.mine.get_mut(&id) {
                Some(slot @ None) if origin == me => {
                    *slot = Some(ack);
                    s.counts.acks += 1;
                    drop(s);
                    self.bump();
                }
                _ => s.counts.stray += 1,
            }
            return;
        }
        let key = (origin, id, to);
        let Some(p) = s.pending.get_mut(&key) else {
            s.counts.stray += 1;
            return;
        };
        p.ack.merge(ack);
        p.remaining -= 1;
        if p.remaining == 0 {
            let p = s.pending.remove(&key).expect("just found");
            s.ready
                .push_back((p.parent, p.ack.args(origin, id, p.parent_pos)));
            drop(s);
            self.bump();
        }
    }

    /// Opens an update of this rank's.
    pub fn open(&self, id: u64) {
        self.lock().mine.insert(id, None);
    }

    /// The ack of this rank's update `id`, once in (which closes it).
    pub fn take_done(&self, id: u64) -> Option<Ack> {
        let mut s = self.lock();
        let done = s.mine.get(&id).copied().flatten();
        if done.is_some() {
            s.mine.remove(&id);
        }
        done
    }

    /// Forgets an update that could not be sent.
    pub fn close(&self, id: u64) {
        self.lock().mine.remove(&id);
    }

    pub fn next_forward(&self) -> Option<Forward> {
        let mut s = self.lock();
        let f = s.forwards.pop_front();
        if let Some(f) = &f {
            s.counts.forwarded += f.children.len() as u64;
        }
        f
    }

    pub fn next_ready(&self) -> Option<ReadyAck> {
        let mut s = self.lock();
        let r = s.ready.pop_front();
        s.counts.combined += r.is_some() as u64;
        r
    }

    pub fn counts(&self) -> MulticastCounts {
        self.lock().counts
    }

    /// Whether this rank has work only its own context can do, or acks still to come.
    pub fn busy(&self) -> bool {
        let s = self.lock();
        !s.forwards.is_empty() || !s.ready.is_empty() || !s.pending.is_empty()
    }
}
