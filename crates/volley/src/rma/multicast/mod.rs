//! Seed 002's multicast UPDATE (MBCF_UPDATE) with acknowledge combining: one write delivered
//! to a list of ranks along a k-ary tree, the requester getting one ack whatever the fan-out.
//!
//! The requester sends the update (rank list and data in one medium message) to the root, the
//! list's first rank. Each member writes the data into its own part of the segment (checked
//! like any remote write: a refusal changes nothing there and is counted), sends the update on
//! to its children in the tree (the children of list position `p` are `k·p + 1 ..= k·p + k`),
//! and once every child has acked sends one combined ack to its parent: the member count, the
//! refusal count and the refusal at the lowest list position. The root's ack reaches the
//! requester, which completes on it.
//!
//! **Where forwarding runs.** volley's handlers may only reply, so a member's handler writes
//! the data and replies at once only if it is a leaf; a member with children records the
//! update and its pending ack (keyed by requester, update id and position), and the forwards
//! and the combined ack leave from the member's own context: inside any [`Multicast`] call
//! ([`Multicast::progress`], [`Multicast::serve_until`], [`Multicast::update`]). A member with
//! children that computes without calling these delays its subtree; the leaves' writes and
//! acks need no call. The requester waits in [`Multicast::update`], which serves too.
//!
//! **Errors.** An empty list, a repeated rank, a rank out of range, an arity of 0 or a list and
//! data too large for one medium message are refused before anything is sent. A member whose
//! segment refuses the write (wrong key, out of bounds, no write permission) is not written;
//! the update still goes on to its children, every other member is written, and the call
//! returns [`Error::Refused`] naming the refusing member at the lowest list position (the
//! members written stay written: there is no rollback, as in the seed, where each node applies
//! the packet on its own). An ack that matches nothing outstanding is ignored and counted
//! ([`MulticastCounts::stray`]).

mod state;
pub mod tree;

pub use state::MulticastCounts;

use super::error::{Error, Result};
use super::segment::{Refusal, SegmentRef};
use super::{OwnSegments, RmaSetup};
use crate::am::{ReplyHandler, RequestHandler, Runtime, RuntimeBuilder};
use state::{Ack, Forward, State, TO_REQUESTER};
use std::cell::Cell;
use std::sync::Arc;

/// Bytes per rank in an update's rank list.
const RANK_BYTES: usize = 4;

/// The multicast's handlers, registered in a builder; [`MulticastSetup::attach`] it to the
/// runtime once built.
#[derive(Debug)]
pub struct MulticastSetup {
    state: Arc<State>,
    handlers: Handlers,
}

#[derive(Debug, Clone, Copy)]
struct Handlers {
    update: RequestHandler,
    ack: RequestHandler,
}

/// Multicast UPDATE of one runtime (see the [module](self) documentation).
#[derive(Debug)]
pub struct Multicast<'rt> {
    rt: &'rt Runtime,
    state: Arc<State>,
    handlers: Handlers,
    next_id: Cell<u64>,
}

impl MulticastSetup {
    /// Binds the setup to the built runtime.
    pub fn attach(self, rt: &Runtime) -> Multicast<'_> {
        self.state.set_rank(rt.rank());
        Multicast {
            rt,
            state: self.state,
            handlers: self.handlers,
            next_id: Cell::new(0),
        }
    }
}

/// The update's arguments: [origin, id, segment words 0..3, offset, arity, position, n].
type UpdateArgs = [u64; 9];

impl Multicast<'_> {
    /// Registers the multicast's handlers in `b` (every rank, in the same place of its
    /// registrations, after the one-sided layer's `rma`).
    pub fn register(b: &mut RuntimeBuilder, rma: &RmaSetup) -> MulticastSetup {
        let state = Arc::new(State::default());
        let own = rma.own_segments();
        let s = state.clone();
        let ack_reply: ReplyHandler = b.reply_handler("volley.mcast.ack_reply", move |m| {
            let (origin, id, to, ack) = Ack::parse(|i| m.arg(i));
            s.on_ack(origin, id, to, ack);
        });
        let s = state.clone();
        let ack = b.request_handler("volley.mcast.ack", move |m, _| {
            let (origin, id, to, ack) = Ack::parse(|i| m.arg(i));
            s.on_ack(origin, id, to, ack);
        });
        let s = state.clone();
        let update = b.request_handler("volley.mcast.update", move |m, tok| {
            let args: UpdateArgs = std::array::from_fn(|i| m.arg(i));
            deliver(&s, &own, m.src(), args, m.payload(), |a| {
                let _ = tok.reply_short(ack_reply, &a);
            });
        });
        MulticastSetup {
            state,
            handlers: Handlers { update, ack },
        }
    }

    /// Writes `data` at `offset` of segment `seg` on every rank of `ranks` along a tree of
    /// `arity` children per member, and returns once the one combined ack is in. `seg` names
    /// the segment by id and key on every member (a [`super::SymmetricSegment`]'s handle for
    /// any rank; its rank is not looked at). The list and the data travel in one medium
    /// message: see [`Multicast::max_data`]. Serves this rank's own multicast work meanwhile.
    pub fn update(
        &self,
        ranks: &[usize],
        seg: SegmentRef,
        offset: usize,
        data: &[u8],
        arity: usize,
    ) -> Result<()> {
        let n = self.check(ranks, data.len(), arity)?;
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let me = self.rt.rank() as u64;
        let [w0, w1, w2] = seg.to_words();
        let args: UpdateArgs = [me, id, w0, w1, w2, offset as u64, arity as u64, 0, n as u64];
        let mut payload = Vec::with_capacity(n * RANK_BYTES + data.len());
        for &r in ranks {
            payload.extend_from_slice(&(r as u32).to_le_bytes());
        }
        payload.extend_from_slice(data);
        self.state.open(id);
        if let Err(e) = self
            .rt
            .request_medium(ranks[0], self.handlers.update, &args, &payload)
        {
            self.state.close(id);
            return Err(e.into());
        }
        let state = &self.state;
        let ack = loop {
            let seen = state.events();
            self.progress()?;
            if let Some(ack) = state.take_done(id) {
                break ack;
            }
            // The runtime's own wait (spin, then yield or sleep): it returns once a handler
            // left work for this context or completed the update.
            self.rt.wait_until(|| state.events() != seen);
        };
        debug_assert_eq!(ack.members, n as u64, "every member reports once");
        if ack.failures > 0 {
            let reason =
                Refusal::from_code(ack.code, offset as u64, data.len() as u64, ack.seg_len)
                    .unwrap_or(Refusal::NoSuchSegment);
            return Err(Error::Refused {
                rank: ack.first_rank as usize,
                reason,
            });
        }
        Ok(())
    }

    /// The largest data an update to `members` ranks carries.
    pub fn max_data(&self, members: usize) -> usize {
        self.rt
            .max_medium()
            .saturating_sub(members.saturating_mul(RANK_BYTES))
    }

    /// Checks an update's arguments; returns the member count.
    fn check(&self, ranks: &[usize], len: usize, arity: usize) -> Result<usize> {
        let bad = |name, value: String, why| Err(Error::InvalidConfig { name, value, why });
        if ranks.is_empty() {
            return bad("multicast ranks", "[]".into(), "expected at least one rank");
        }
        if arity == 0 {
            return bad(
                "multicast arity",
                "0".into(),
                "expected at least 1 child per member",
            );
        }
        let size = self.rt.size();
        if let Some(&rank) = ranks.iter().find(|&&r| r >= size) {
            return Err(crate::am::Error::InvalidRank { rank, size }.into());
        }
        let mut sorted = ranks.to_vec();
        sorted.sort_unstable();
        if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
            return bad(
                "multicast ranks",
                format!("rank {} listed twice", w[0]),
                "expected each rank at most once",
            );
        }
        if len > self.max_data(ranks.len()) {
            return Err(Error::PayloadTooLarge {
                len: len + ranks.len() * RANK_BYTES,
                max: self.rt.max_medium(),
            });
        }
        Ok(ranks.len())
    }

    /// Sends what this rank's handlers left to its own context: updates to forward to its
    /// children and combined acks to send up. Returns how many messages went.
    pub fn progress(&self) -> Result<usize> {
        let mut sent = 0;
        // One item at a time, the lock released while sending: a send that waits for room
        // polls, and the handlers it runs take the lock.
        while let Some(f) = self.state.next_forward() {
            for &(pos, rank) in &f.children {
                let mut args = f.args;
                args[7] = pos;
                self.rt
                    .request_medium(rank, self.handlers.update, &args, &f.payload)?;
                sent += 1;
            }
        }
        while let Some((parent, args)) = self.state.next_ready() {
            self.rt.request_short(parent, self.handlers.ack, &args)?;
            sent += 1;
        }
        Ok(sent)
    }

    /// Polls and serves this rank's multicast work until `cond()` holds: how a member waits
    /// while others multicast to it.
    pub fn serve_until(&self, mut cond: impl FnMut() -> bool) -> Result<()> {
        let state = &self.state;
        loop {
            let seen = state.events();
            self.progress()?;
            if cond() {
                return Ok(());
            }
            self.rt.wait_until(|| state.events() != seen || cond());
        }
    }

    /// Whether this rank still has forwards or combined acks to send, or acks to wait for.
    pub fn busy(&self) -> bool {
        self.state.busy()
    }

    /// This rank's counters.
    pub fn counts(&self) -> MulticastCounts {
        self.state.counts()
    }
}

/// An update's arrival at a member from `src`: write, then ack at once (a leaf, through
/// `reply`) or record the forward and the pending ack (a node with children).
fn deliver(
    s: &State,
    own: &OwnSegments,
    src: usize,
    args: UpdateArgs,
    payload: &[u8],
    reply: impl FnOnce([u64; 9]),
) {
    let [origin, id, w0, w1, w2, offset, arity, pos, n] = args;
    let list = (n as usize).checked_mul(RANK_BYTES);
    let Some(list) = list.filter(|&l| l <= payload.len() && pos < n && arity > 0) else {
        // Malformed (not sent by this module): no tree to ack along.
        s.count_stray();
        return;
    };
    let (ranks, data) = payload.split_at(list);
    let rank_at = |p: usize| {
        let b = &ranks[p * RANK_BYTES..(p + 1) * RANK_BYTES];
        u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize
    };
    let seg = SegmentRef::from_words([w0, w1, w2]);
    let refusal = own
        .write(seg, offset as usize, data)
        .err()
        .map(|r| (r.code(), segment_len(r)));
    let own_ack = Ack::own(pos, rank_at(pos as usize) as u64, refusal);
    let parent_pos = if pos == 0 {
        TO_REQUESTER
    } else {
        (pos - 1) / arity
    };
    let children: Vec<(u64, usize)> = tree::children(pos as usize, arity as usize, n as usize)
        .map(|c| (c as u64, rank_at(c)))
        .collect();
    if children.is_empty() {
        s.deliver_leaf(own_ack);
        reply(own_ack.args(origin, id, parent_pos));
        return;
    }
    let fwd = Forward {
        args,
        payload: payload.to_vec(),
        children,
    };
    s.deliver_inner((origin, id, pos), (src, parent_pos), own_ack, fwd);
}

fn segment_len(r: Refusal) -> u64 {
    match r {
        Refusal::OutOfBounds { segment_len, .. } => segment_len,
        _ => 0,
    }
}
