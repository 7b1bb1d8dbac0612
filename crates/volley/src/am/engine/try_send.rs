//! Non-blocking sends: a message goes at once or not at all. The transports' own send code
//! runs with the [`GiveUp`] policy, so a message that cannot be taken at once (a full ring or
//! no free medium buffer, a full reliable window, a full TCP send queue) returns
//! [`Error::WouldBlock`] having sent, reserved, written and queued nothing, and without a
//! poll: no handler runs inside a try-send. [`Engine::sendable`] says whether a message would
//! go; [`Engine::wait_sendable`] polls until it would.

use super::super::handler::MessageClass;
use super::Engine;
use crate::am::error::{Error, Result};
use crate::transport::contract::{Class, GiveUp, Outbound, Transport};
use crate::transport::shm::MEDIUM_MAX;
use crate::transport::Channel;
use crate::MAX_ARGS;

impl Engine {
    /// Sends a short message on `ch` to `dest` if it can go at once.
    pub(crate) fn try_send_short(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        let Some(&route) = self.local_of.get(dest) else {
            return Err(self.invalid_rank(dest));
        };
        self.try_reply_short(dest, route, ch, handler, args)
    }

    /// Sends a short message on `ch` to `dest`, reached through `route`, if it can go at once.
    pub(crate) fn try_reply_short(
        &self,
        dest: usize,
        route: u32,
        ch: Channel,
        handler: u16,
        args: &[u64],
    ) -> Result<()> {
        self.check_handler(ch, handler)?;
        Self::check_args(args)?;
        let msg = Outbound {
            ch,
            class: Class::Short,
            handler,
            args,
            payload: &[],
            offset: 0,
        };
        // Through shared memory the ring counts it, as for a blocking send.
        self.try_routed(dest, route, msg, None)
    }

    /// Sends a medium message if it can go at once.
    pub(crate) fn try_send_medium(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        let msg = self.medium_msg(dest, ch, handler, args, payload)?;
        let route = self.local_of[dest];
        self.try_routed(dest, route, msg, Some(MessageClass::Medium))
    }

    /// Sends a long message if it can go at once: when it cannot, not a byte of the payload
    /// was written into the target's segment.
    pub(crate) fn try_send_long(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        let msg = self.long_msg(dest, ch, handler, args, payload, offset)?;
        let route = self.local_of[dest];
        self.try_routed(dest, route, msg, Some(MessageClass::Long))
    }

    /// Hands `msg` to the transport of `route` with the give-up policy; counts it as sent
    /// (as `counted`, when the engine counts it) once it went.
    fn try_routed(
        &self,
        dest: usize,
        route: u32,
        msg: Outbound<'_>,
        counted: Option<MessageClass>,
    ) -> Result<()> {
        let sent = match self.shm.peer(route as usize) {
            Some(peer) => self.shm.send(peer, msg, GiveUp),
            None => {
                let net = self
                    .net
                    .as_ref()
                    .expect("a rank off this node implies a network route");
                let sent = net.send(dest, msg, GiveUp);
                if sent.is_ok() && msg.class == Class::Short {
                    self.stats.sent(msg.ch, MessageClass::Short);
                }
                sent
            }
        };
        sent.map_err(|refused| Self::refusal(dest, msg, refused))?;
        if let Some(class) = counted {
            self.stats.sent(msg.ch, class);
        }
        Ok(())
    }

    /// Whether a message on `ch` of `class` with up to [`MAX_ARGS`] arguments and a payload
    /// of `payload_len` bytes would go to `dest` at once. A payload no message of `class`
    /// carries is an error (it would never go).
    pub(crate) fn sendable(
        &self,
        dest: usize,
        ch: Channel,
        class: MessageClass,
        payload_len: usize,
    ) -> Result<bool> {
        self.check_dest(dest)?;
        let route = self.local_of[dest];
        let class = match class {
            MessageClass::Short => Class::Short,
            MessageClass::Medium => Class::Medium,
            MessageClass::Long => Class::Long,
        };
        let payload_len = match class {
            Class::Short => 0,
            _ => payload_len,
        };
        let max = match self.shm.peer(route as usize) {
            Some(_) => self.shm.max_payload(class),
            None => self
                .net
                .as_ref()
                .map_or(0, |net| net.max_payload(class))
                .min(if class == Class::Medium {
                    MEDIUM_MAX
                } else {
                    usize::MAX
                }),
        };
        if payload_len > max {
            return Err(match class {
                Class::Long => Error::LongTooLarge {
                    len: payload_len,
                    max,
                },
                _ => Error::PayloadTooLarge {
                    len: payload_len,
                    max,
                },
            });
        }
        Ok(match self.shm.peer(route as usize) {
            Some(peer) => self.shm.sendable(peer, ch, class, MAX_ARGS, payload_len),
            None => self
                .net
                .as_ref()
                .is_some_and(|net| net.sendable(dest, ch, class, MAX_ARGS, payload_len)),
        })
    }

    /// Polls (requests and replies, as a blocked request send does) until
    /// [`Engine::sendable`] holds.
    pub(crate) fn wait_sendable(
        &self,
        dest: usize,
        ch: Channel,
        class: MessageClass,
        payload_len: usize,
    ) -> Result<()> {
        if self.sendable(dest, ch, class, payload_len)? {
            return Ok(());
        }
        self.wait_until(|| self.sendable(dest, ch, class, payload_len).unwrap_or(true));
        Ok(())
    }
}
