//! The send side: checks a message and hands it to the transport of its route (this node's
//! rings, or the network), polling while the transport cannot take it.

use super::super::backoff::Backoff;
use super::super::handler::MessageClass;
use super::super::report::Doing;
use super::super::stats::bump;
use super::{Engine, SystemOp};
use crate::am::error::{Error, Result};
use crate::transport::contract::{Class, Outbound, SendRefused, Transport, BLOCKED_DONE, REMOTE};
use crate::transport::shm::MEDIUM_MAX;
use crate::transport::Channel;
use crate::MAX_ARGS;

impl Engine {
    pub(crate) fn check_dest(&self, dest: usize) -> Result<()> {
        if dest >= self.size {
            return Err(self.invalid_rank(dest));
        }
        Ok(())
    }

    #[cold]
    pub(super) fn invalid_rank(&self, dest: usize) -> Error {
        Error::InvalidRank {
            rank: dest,
            size: self.size,
        }
    }

    pub(super) fn check_handler(&self, ch: Channel, index: u16) -> Result<()> {
        let (registered, kind) = match ch {
            Channel::Request => (self.requests.len(), "request"),
            Channel::Reply => (self.replies.len(), "reply"),
        };
        if index as usize >= registered {
            return Err(Error::UnknownHandler {
                index,
                registered,
                kind,
            });
        }
        Ok(())
    }

    pub(super) fn check_args(args: &[u64]) -> Result<()> {
        if args.len() > MAX_ARGS {
            return Err(Error::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        Ok(())
    }

    /// Sends a short message.
    #[inline]
    pub(crate) fn send_short(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        // One bounds check for the rank and its route.
        let Some(&route) = self.local_of.get(dest) else {
            return Err(self.invalid_rank(dest));
        };
        self.send_short_by(dest, route, ch, handler, args)
    }

    /// Sends a short reply to `dest`, reached through local index `route` (or the network:
    /// [`REMOTE`]): the requester, whose rank needs no check.
    #[inline]
    pub(crate) fn reply_short(
        &self,
        dest: usize,
        route: u32,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.send_short_by(dest, route, Channel::Reply, handler, args)
    }

    /// Sends a short message to the valid rank `dest`, reached through local index `route` or
    /// the network ([`REMOTE`]).
    #[inline(always)]
    pub(super) fn send_short_by(
        &self,
        dest: usize,
        route: u32,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // Made in each branch, so that the shared-memory path keeps its fields in registers
        // (the network path passes it to a call).
        let msg = || Outbound {
            ch,
            class: Class::Short,
            handler,
            args,
            payload: &[],
            offset: 0,
        };
        // A local index has its rings; REMOTE (u32::MAX) has none: one compare tells the
        // route and bounds the index.
        // Through shared memory the ring counts it (see `Links::short_counts`).
        let sent = match self.shm.peer(route as usize) {
            Some(peer) => self.shm.send(peer, msg(), self.blocked(route as usize, ch)),
            None => {
                self.stats.sent(ch, MessageClass::Short);
                self.send_net(dest, msg())
            }
        };
        debug_assert!(sent.is_ok(), "a short message is never refused");
        Ok(())
    }

    /// Sends a medium message (the transport decides how its payload travels).
    pub(crate) fn send_medium(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let msg = self.medium_msg(dest, ch, handler, args, payload)?;
        self.send_routed(dest, msg)?;
        self.stats.sent(ch, MessageClass::Medium);
        Ok(())
    }

    /// Sends a medium message that needs no sequencing (seed 002's "no flow control"): to a
    /// rank on another node outside the network transport's sequencing
    /// ([`NetLink::send_unsequenced`](crate::transport::net::link::NetLink::send_unsequenced):
    /// over UDP at most once, never retransmitted, possibly lost); through this node's rings,
    /// which lose nothing, as any medium message. The payload must fit
    /// [`Engine::max_unsequenced`].
    pub(crate) fn send_medium_unsequenced(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let msg = self.medium_msg(dest, ch, handler, args, payload)?;
        let route = self.local_of[dest];
        let sent = match self.shm.peer(route as usize) {
            Some(peer) => self.shm.send(peer, msg, self.blocked(route as usize, ch)),
            None => {
                let net = self
                    .net
                    .as_ref()
                    .expect("a rank off this node implies a network route");
                self.net_dest.set(dest);
                net.send_unsequenced(dest, msg, self.net_blocked(ch))
            }
        };
        sent.map_err(|refused| Self::refusal(dest, msg, refused))?;
        self.stats.sent(ch, MessageClass::Medium);
        Ok(())
    }

    /// The largest payload [`Engine::send_medium_unsequenced`] takes to `dest` (a valid rank)
    /// with `nargs` arguments: a medium message's through the rings, one datagram's worth
    /// over UDP.
    pub(crate) fn max_unsequenced(&self, dest: usize, nargs: usize) -> usize {
        let route = self.local_of[dest];
        match (self.shm.peer(route as usize), &self.net) {
            (None, Some(net)) => net.max_unsequenced_payload(nargs).min(MEDIUM_MAX),
            _ => MEDIUM_MAX,
        }
    }

    /// A checked medium message.
    pub(super) fn medium_msg<'a>(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &'a [u64],
        payload: &'a [u8],
    ) -> Result<Outbound<'a>> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        if payload.len() > MEDIUM_MAX {
            return Err(Error::PayloadTooLarge {
                len: payload.len(),
                max: MEDIUM_MAX,
            });
        }
        Ok(Outbound {
            ch,
            class: Class::Medium,
            handler,
            args,
            payload,
            offset: 0,
        })
    }

    /// Sends a long message: its payload lands in `dest`'s segment at `offset` before its
    /// handler runs.
    pub(crate) fn send_long(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        let msg = self.long_msg(dest, ch, handler, args, payload, offset)?;
        self.send_routed(dest, msg)?;
        self.stats.sent(ch, MessageClass::Long);
        Ok(())
    }

    /// A checked long message.
    pub(super) fn long_msg<'a>(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &'a [u64],
        payload: &'a [u8],
        offset: usize,
    ) -> Result<Outbound<'a>> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        // Every rank's segment has the same length (checked at init).
        let segment_len = self.own().segment_len();
        if offset
            .checked_add(payload.len())
            .is_none_or(|end| end > segment_len)
        {
            return Err(Error::OutOfBounds {
                offset,
                len: payload.len(),
                segment_len,
            });
        }
        Ok(Outbound {
            ch,
            class: Class::Long,
            handler,
            args,
            payload,
            offset,
        })
    }

    /// Sends a runtime-internal one-way message on the request channel.
    pub(crate) fn send_system(&self, dest: usize, op: SystemOp, args: &[u64]) {
        let msg = Outbound {
            ch: Channel::Request,
            class: Class::System,
            handler: op as u16,
            args,
            payload: &[],
            offset: 0,
        };
        let sent = self.send_routed(dest, msg);
        debug_assert!(sent.is_ok(), "a system message is never refused");
        bump(&self.stats.system_sent);
    }

    /// Sends `msg` to the valid rank `dest` through its route; a refusal becomes the error
    /// that names it.
    fn send_routed(&self, dest: usize, msg: Outbound<'_>) -> Result<()> {
        let route = self.local_of[dest];
        let sent = match self.shm.peer(route as usize) {
            Some(peer) => self
                .shm
                .send(peer, msg, self.blocked(route as usize, msg.ch)),
            None => self.send_net(dest, msg),
        };
        sent.map_err(|refused| Self::refusal(dest, msg, refused))
    }

    /// The error that names why a transport refused `msg` to `dest`.
    #[cold]
    pub(super) fn refusal(dest: usize, msg: Outbound<'_>, refused: SendRefused) -> Error {
        match refused {
            SendRefused::TooLarge { len, max } if msg.class == Class::Long => {
                Error::LongTooLarge { len, max }
            }
            SendRefused::TooLarge { len, max } => Error::PayloadTooLarge { len, max },
            SendRefused::Guarded(reason) => Error::Refused { rank: dest, reason },
            SendRefused::WouldBlock => Error::WouldBlock {
                rank: dest,
                channel: msg.ch.name(),
            },
        }
    }

    /// Sends `msg` to `dest`, a rank on another node, through the network route.
    #[inline(never)]
    pub(super) fn send_net(
        &self,
        dest: usize,
        msg: Outbound<'_>,
    ) -> std::result::Result<(), SendRefused> {
        let net = self
            .net
            .as_ref()
            .expect("a rank off this node implies a network route");
        self.net_dest.set(dest);
        net.send(dest, msg, self.net_blocked(msg.ch))
    }

    /// What the network transport calls while it cannot take a message on `ch`.
    #[inline(always)]
    fn net_blocked(&self, ch: Channel) -> impl FnMut(u32) + '_ {
        let requests = ch == Channel::Request;
        move |attempt| {
            if attempt == BLOCKED_DONE {
                return self.wait_blocked(REMOTE as usize, ch, attempt);
            }
            // The transport took in what arrived; run it, then wait as any blocked send does.
            self.poll_net(requests, false);
            self.wait_blocked(REMOTE as usize, ch, attempt);
        }
    }

    /// Sends a medium message of `len` bytes whose payload `fill` writes in place, in the
    /// transport's own buffer (see `Links::send_medium_with`, `NetLink::send_medium_with`):
    /// checked as [`Engine::send_medium`] checks, and `fill` runs once the checks passed.
    pub(crate) fn send_medium_with(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<()> {
        self.check_dest(dest)?;
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        if len > MEDIUM_MAX {
            return Err(Error::PayloadTooLarge {
                len,
                max: MEDIUM_MAX,
            });
        }
        let route = self.local_of[dest];
        let sent = match self.shm.peer(route as usize) {
            Some(peer) => {
                let blocked = self.blocked(route as usize, ch);
                self.shm
                    .send_medium_with(peer, ch, handler, args, len, fill, blocked)
            }
            None => {
                let net = self
                    .net
                    .as_ref()
                    .expect("a rank off this node implies a network route");
                self.net_dest.set(dest);
                net.send_medium_with(dest, ch, handler, args, len, fill, self.net_blocked(ch))
            }
        };
        sent.map_err(|refused| {
            let msg = Outbound {
                ch,
                class: Class::Medium,
                handler,
                args,
                payload: &[],
                offset: 0,
            };
            Self::refusal(dest, msg, refused)
        })?;
        self.stats.sent(ch, MessageClass::Medium);
        Ok(())
    }

    /// What a transport calls while it cannot take a message for `route` on `ch`.
    #[inline(always)]
    fn blocked(&self, route: usize, ch: Channel) -> impl FnMut(u32) + '_ {
        move |attempt| self.wait_blocked(route, ch, attempt)
    }

    /// One step of a blocked send to `route` on channel `ch`, the `attempt`th: polls
    /// (requests too only for a blocked request, so that replies always drain) and backs off.
    /// Handlers that run meanwhile never send on the blocked channel to the same rank (a
    /// request handler can only reply, on the other channel; a reply handler cannot send).
    #[cold]
    #[inline(never)]
    fn wait_blocked(&self, route: usize, ch: Channel, attempt: u32) {
        if attempt == BLOCKED_DONE {
            self.activity.end();
            return;
        }
        if route == self.me_local && self.handlers_held() {
            self.self_deadlock();
        }
        let state = &self.blocked_waits[ch as usize];
        let mut backoff = match attempt {
            0 => {
                bump(&self.stats.blocked_sends);
                Backoff::new(self.polite)
            }
            _ => state.get(),
        };
        if backoff.spun_out() {
            self.activity.begin(Doing::SendBlocked {
                peer: self.blocked_peer(route) as u32,
                ch,
            });
        }
        self.wait_step(ch, &mut backoff);
        state.set(backoff);
    }

    /// The rank a blocked send to `route` waits for: the rank of that local index, or, for
    /// the network, the destination of the send that blocked (kept by `send_net`).
    fn blocked_peer(&self, route: usize) -> usize {
        match self.shm.rank_of(route) {
            Some(rank) => rank,
            None => self.net_dest.get(),
        }
    }

    /// One step of a blocked send: a blocked request polls everything, a blocked reply polls
    /// replies only.
    pub(super) fn wait_step(&self, ch: Channel, backoff: &mut Backoff) {
        if self.poll(ch == Channel::Request) == 0 {
            self.idle(backoff);
        } else {
            backoff.reset();
        }
    }
}
