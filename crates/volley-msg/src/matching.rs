//! The matching engine: posted receives against arrived messages, by source and tag, with
//! wildcards, in MPI's order. No I/O and no runtime inside, so that it can be checked against a
//! reference model (see the property test below).
//!
//! The rules:
//! - an arriving message goes to the **earliest posted** receive whose selectors match it;
//!   if none does, it waits in the unexpected queue;
//! - a new receive takes the **earliest arrived** unexpected message it matches; if none does,
//!   it is posted.
//!
//! Messages of one sender arrive in the order they were sent (volley's channels are FIFO per
//! pair), so these two rules give MPI's non-overtaking guarantee, wildcards included.
//!
//! Unexpected messages are kept per source, each stamped with its arrival number, so that a
//! receive naming its source looks at that source's messages only and a wildcard receive
//! compares the first match of each source.

use std::collections::VecDeque;

/// Which senders a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// Only this rank.
    Rank(usize),
    /// Any rank (MPI's `MPI_ANY_SOURCE`).
    Any,
}

/// Which tags a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// Only this tag.
    Tag(u64),
    /// Any tag (MPI's `MPI_ANY_TAG`).
    Any,
}

/// Any sender.
pub const ANY_SOURCE: Source = Source::Any;
/// Any tag.
pub const ANY_TAG: TagSel = TagSel::Any;

impl From<usize> for Source {
    fn from(rank: usize) -> Self {
        Source::Rank(rank)
    }
}

impl From<u64> for TagSel {
    fn from(tag: u64) -> Self {
        TagSel::Tag(tag)
    }
}

impl Source {
    /// Whether a message from `src` is accepted.
    pub fn accepts(self, src: usize) -> bool {
        match self {
            Source::Rank(r) => r == src,
            Source::Any => true,
        }
    }
}

impl TagSel {
    /// Whether a message with `tag` is accepted.
    pub fn accepts(self, tag: u64) -> bool {
        match self {
            TagSel::Tag(t) => t == tag,
            TagSel::Any => true,
        }
    }
}

/// One unexpected message: its arrival number, tag and what the caller keeps for it.
#[derive(Debug)]
struct Waiting<U> {
    arrival: u64,
    tag: u64,
    item: U,
}

/// A posted receive: its selectors and what the caller keeps for it.
#[derive(Debug)]
struct Posted<P> {
    src: Source,
    tag: TagSel,
    item: P,
}

/// Where an unexpected message is ([`Matcher::locate`]): valid until the engine changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Found {
    s: usize,
    i: usize,
}

/// Posted receives (`P`, in posting order) and unexpected messages (`U`, per source in
/// arrival order).
#[derive(Debug)]
pub struct Matcher<U, P> {
    unexpected: Vec<VecDeque<Waiting<U>>>,
    posted: VecDeque<Posted<P>>,
    arrivals: u64,
    waiting: usize,
}

impl<U, P> Matcher<U, P> {
    /// An empty engine, with room for `ranks` senders to begin with (it grows for more).
    pub fn new(ranks: usize) -> Self {
        Self {
            unexpected: (0..ranks).map(|_| VecDeque::new()).collect(),
            posted: VecDeque::new(),
            arrivals: 0,
            waiting: 0,
        }
    }

    /// Removes and returns the earliest posted receive that accepts a message from `src` with
    /// `tag` (the message is then the caller's to deliver), or `None`: then the caller queues
    /// it with [`Matcher::push_unexpected`].
    pub fn match_arrival(&mut self, src: usize, tag: u64) -> Option<P> {
        let accepts = |p: &Posted<P>| p.src.accepts(src) && p.tag.accepts(tag);
        // The usual case (one receive posted, or the earliest matches) without the general
        // removal's shuffle.
        if accepts(self.posted.front()?) {
            return self.posted.pop_front().map(|p| p.item);
        }
        let i = self.posted.iter().position(accepts)?;
        self.posted.remove(i).map(|p| p.item)
    }

    /// Queues a message that matched no posted receive.
    pub fn push_unexpected(&mut self, src: usize, tag: u64, item: U) {
        if src >= self.unexpected.len() {
            self.unexpected.resize_with(src + 1, VecDeque::new);
        }
        let arrival = self.arrivals;
        self.arrivals += 1;
        self.waiting += 1;
        self.unexpected[src].push_back(Waiting { arrival, tag, item });
    }

    /// Where the earliest unexpected message that a receive with these selectors accepts is:
    /// its source and index in that source's queue.
    fn find(&self, src: Source, tag: TagSel) -> Option<(usize, usize)> {
        let first_in = |s: usize| {
            self.unexpected
                .get(s)?
                .iter()
                .position(|w| tag.accepts(w.tag))
                .map(|i| (s, i))
        };
        match src {
            Source::Rank(s) => first_in(s),
            Source::Any => (0..self.unexpected.len())
                .filter_map(first_in)
                .min_by_key(|&(s, i)| self.unexpected[s][i].arrival),
        }
    }

    /// The earliest unexpected message these selectors accept, left in the queue: its source,
    /// tag and item.
    pub fn probe(&self, src: Source, tag: TagSel) -> Option<(usize, u64, &U)> {
        self.locate(src, tag).map(|at| self.peek(at))
    }

    /// Where the earliest unexpected message these selectors accept is, to [`Matcher::peek`]
    /// at and [`Matcher::take_at`] without searching again.
    pub fn locate(&self, src: Source, tag: TagSel) -> Option<Found> {
        self.find(src, tag).map(|(s, i)| Found { s, i })
    }

    /// The message `at` names: its source, tag and item.
    pub fn peek(&self, at: Found) -> (usize, u64, &U) {
        let w = &self.unexpected[at.s][at.i];
        (at.s, w.tag, &w.item)
    }

    /// Removes and returns the earliest unexpected message these selectors accept.
    pub fn take(&mut self, src: Source, tag: TagSel) -> Option<(usize, u64, U)> {
        let at = self.locate(src, tag)?;
        Some(self.take_at(at))
    }

    /// Removes and returns the message `at` names (found since the last change).
    pub fn take_at(&mut self, at: Found) -> (usize, u64, U) {
        let Found { s, i } = at;
        let queue = &mut self.unexpected[s];
        let w = match i {
            0 => queue.pop_front(),
            _ => queue.remove(i),
        }
        .expect("a message found since the last change");
        self.waiting -= 1;
        (s, w.tag, w.item)
    }

    /// Posts a receive (after the caller found no unexpected message for it with
    /// [`Matcher::take`]).
    pub fn post(&mut self, src: Source, tag: TagSel, item: P) {
        self.posted.push_back(Posted { src, tag, item });
    }

    /// Removes the first posted receive for which `is` holds (a cancelled receive).
    pub fn cancel(&mut self, is: impl Fn(&P) -> bool) -> Option<P> {
        let i = self.posted.iter().position(|p| is(&p.item))?;
        self.posted.remove(i).map(|p| p.item)
    }

    /// Unexpected messages waiting.
    pub fn unexpected_len(&self) -> usize {
        self.waiting
    }

    /// Receives posted and not yet matched.
    pub fn posted_len(&self) -> usize {
        self.posted.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The reference: one list of unexpected messages in arrival order, one of posted
    /// receives in posting order, each searched from the front.
    #[derive(Default)]
    struct Model {
        unexpected: Vec<(usize, u64, u32)>,
        posted: Vec<(Source, TagSel, u32)>,
    }

    impl Model {
        fn arrive(&mut self, src: usize, tag: u64, id: u32) -> Option<u32> {
            match self
                .posted
                .iter()
                .position(|p| p.0.accepts(src) && p.1.accepts(tag))
            {
                Some(i) => Some(self.posted.remove(i).2),
                None => {
                    self.unexpected.push((src, tag, id));
                    None
                }
            }
        }

        fn find(&self, src: Source, tag: TagSel) -> Option<usize> {
            self.unexpected
                .iter()
                .position(|u| src.accepts(u.0) && tag.accepts(u.1))
        }

        fn recv(&mut self, src: Source, tag: TagSel, id: u32) -> Option<u32> {
            match self.find(src, tag) {
                Some(i) => Some(self.unexpected.remove(i).2),
                None => {
                    self.posted.push((src, tag, id));
                    None
                }
            }
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Arrive(usize, u64),
        Recv(Source, TagSel),
        Probe(Source, TagSel),
        Cancel(u32),
    }

    const RANKS: usize = 4;

    fn op() -> impl Strategy<Value = Op> {
        // Few tags and ranks, so that matches and wildcards collide often.
        let src = prop_oneof![
            3 => (0..RANKS).prop_map(Source::Rank),
            1 => Just(Source::Any)
        ];
        let tag = prop_oneof![3 => (0u64..3).prop_map(TagSel::Tag), 1 => Just(TagSel::Any)];
        prop_oneof![
            4 => (0..RANKS, 0u64..3).prop_map(|(s, t)| Op::Arrive(s, t)),
            3 => (src.clone(), tag.clone()).prop_map(|(s, t)| Op::Recv(s, t)),
            1 => (src, tag).prop_map(|(s, t)| Op::Probe(s, t)),
            1 => (0u32..40).prop_map(Op::Cancel),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Every arrival, receive, probe and cancellation gives what the reference gives, and
        /// per sender the messages a receive gets come in arrival (= send) order.
        #[test]
        fn matches_like_the_reference(ops in prop::collection::vec(op(), 0..120)) {
            let mut m: Matcher<u32, u32> = Matcher::new(RANKS);
            let mut model = Model::default();
            let mut next = 0u32;
            for op in ops {
                match op {
                    Op::Arrive(s, t) => {
                        let id = next;
                        next += 1;
                        let got = m.match_arrival(s, t);
                        if got.is_none() {
                            m.push_unexpected(s, t, id);
                        }
                        prop_assert_eq!(got, model.arrive(s, t, id));
                    }
                    Op::Recv(s, t) => {
                        let id = next;
                        next += 1;
                        let got = match m.take(s, t) {
                            Some((src, tag, item)) => {
                                prop_assert!(s.accepts(src) && t.accepts(tag));
                                Some(item)
                            }
                            None => {
                                m.post(s, t, id);
                                None
                            }
                        };
                        prop_assert_eq!(got, model.recv(s, t, id));
                    }
                    Op::Probe(s, t) => {
                        let got = m.probe(s, t).map(|(_, _, &item)| item);
                        prop_assert_eq!(got, model.find(s, t).map(|i| model.unexpected[i].2));
                    }
                    Op::Cancel(id) => {
                        let got = m.cancel(|&p| p == id);
                        let want = model.posted.iter().position(|p| p.2 == id)
                            .map(|i| model.posted.remove(i).2);
                        prop_assert_eq!(got, want);
                    }
                }
                prop_assert_eq!(m.unexpected_len(), model.unexpected.len());
                prop_assert_eq!(m.posted_len(), model.posted.len());
            }
        }
    }

    #[test]
    fn a_wildcard_receive_takes_the_earliest_arrival_across_senders() {
        let mut m: Matcher<&str, ()> = Matcher::new(3);
        m.push_unexpected(2, 5, "a");
        m.push_unexpected(1, 5, "b");
        m.push_unexpected(2, 6, "c");
        assert_eq!(m.take(Source::Any, TagSel::Any).map(|x| x.2), Some("a"));
        assert_eq!(m.take(Source::Any, TagSel::Tag(6)).map(|x| x.2), Some("c"));
        assert_eq!(m.take(Source::Rank(1), TagSel::Any).map(|x| x.2), Some("b"));
        assert!(m.take(Source::Any, TagSel::Any).is_none());
    }
}
