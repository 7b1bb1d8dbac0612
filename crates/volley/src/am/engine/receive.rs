//! Polls: which rings and routes a poll serves, in what order, and when it stops early.

use super::super::stats::bump;
use super::Engine;
use crate::transport::contract::Transport;
use crate::transport::Channel;

/// Waits in a row that may end right after the reply rings, leaving the request rings for
/// later (see [`Engine::poll_waiting`]); then one full poll comes first.
const EARLY_EXITS: u32 = 16;

impl Engine {
    /// Polls this rank's rings: replies always, requests if `requests`. Returns frames handled.
    #[inline]
    pub(crate) fn poll(&self, requests: bool) -> usize {
        match self.poll_replies(requests) {
            None => 0,
            Some(replies) => self.poll_after_replies(requests, replies),
        }
    }

    /// A poll for a wait on `cond`. After a reply handler ran it checks `cond` at once,
    /// before the rest of the reply rings and the request rings: a requester whose reply just
    /// came sends its next request that much sooner. `None`: `cond` holds and the rest of the
    /// poll was left (or handlers are held). At most [`EARLY_EXITS`] waits in a row end that
    /// way, so no ring is left for long (each wait that does not end at its first poll serves
    /// them all).
    #[inline(always)]
    pub(super) fn poll_waiting(&self, cond: &mut impl FnMut() -> bool) -> Option<usize> {
        bump(&self.stats.polls);
        if self.handlers_held() {
            self.poll_held(true);
            return None;
        }
        let early = self.early_exits.get();
        let Some(replies) = self
            .shm
            .poll(Channel::Reply, self, || early < EARLY_EXITS && cond())
        else {
            self.early_exits.set(early + 1);
            return None;
        };
        self.early_exits.set(0);
        Some(self.poll_after_replies(true, replies))
    }

    /// The first part of a poll: the reply rings. `None` when handlers are held (the poll is
    /// then over; the network was polled for requests too if `requests`).
    #[inline(always)]
    pub(super) fn poll_replies(&self, requests: bool) -> Option<usize> {
        bump(&self.stats.polls);
        if self.handlers_held() {
            self.poll_held(requests);
            return None;
        }
        // Every ring with a frame is served up to its budget in each poll, so no source can
        // starve another; replies first, as a blocked reply send needs them.
        self.shm.poll(Channel::Reply, self, || false)
    }

    /// A poll while handlers are held: they wait for the section to end, but the network
    /// still takes in what arrives (and acknowledges it) so that peers do not time out.
    #[cold]
    #[inline(never)]
    pub(super) fn poll_held(&self, requests: bool) {
        self.critical.defer(self.thread.is_some());
        self.poll_net(requests, false);
    }

    /// The rest of a poll after the reply rings, which handled `replies` frames.
    #[inline(always)]
    pub(super) fn poll_after_replies(&self, requests: bool, replies: usize) -> usize {
        let mut handled = replies;
        if requests {
            handled += self.shm.poll(Channel::Request, self, || false).unwrap_or(0);
        }
        if let Some(net) = &self.net {
            handled += self.poll_net(requests, false);
            // What the handlers just sent (replies, above all) leaves now, together, instead
            // of waiting for the next network poll: the peer is waiting for it.
            if handled > 0 && net.unflushed() {
                self.flush_net();
            }
        }
        if handled == 0 {
            bump(&self.stats.empty_polls);
        }
        handled
    }

    /// Polls the network route (when `force` or its policy says so) and runs the handlers of
    /// what it delivered: replies always, requests if `requests`. Returns handlers run.
    #[inline(never)]
    pub(super) fn poll_net(&self, requests: bool, force: bool) -> usize {
        let Some(net) = &self.net else {
            return 0;
        };
        if force || net.due() {
            net.take_in();
        }
        if self.handlers_held() {
            return 0;
        }
        let mut handled = net.poll(Channel::Reply, self, || false).unwrap_or(0);
        if requests {
            handled += net.poll(Channel::Request, self, || false).unwrap_or(0);
        }
        handled
    }
}
