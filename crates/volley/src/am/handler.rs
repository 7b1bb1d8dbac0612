//! Handler identities, the message a handler sees, and the reply token.

use super::engine::Engine;
use crate::am::error::{Error, Result};
use crate::debug::allow_alloc;
use crate::transport::Channel;

/// Index of a request handler in the job-wide table (every rank registers the same table).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RequestHandler(pub(crate) u16);

/// Index of a reply handler in the job-wide table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ReplyHandler(pub(crate) u16);

impl RequestHandler {
    /// A handler named by raw index, for tables built elsewhere (C API, generated code).
    /// An index nobody registered is refused when used to send.
    pub fn from_index(index: u16) -> Self {
        Self(index)
    }

    /// The raw index.
    pub fn index(self) -> u16 {
        self.0
    }
}

impl ReplyHandler {
    /// A handler named by raw index; an index nobody registered is refused when used to send.
    pub fn from_index(index: u16) -> Self {
        Self(index)
    }

    /// The raw index.
    pub fn index(self) -> u16 {
        self.0
    }
}

/// The three message classes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MessageClass {
    /// Handler and up to 16 u64 arguments.
    Short = 0,
    /// Arguments and a payload of at most [`crate::Runtime::max_medium`] bytes, delivered in a
    /// buffer that is valid only while the handler runs.
    Medium = 1,
    /// Arguments and a payload already written into the receiver's segment.
    Long = 2,
}

/// What a handler receives. Everything it borrows is valid only while the handler runs: the
/// buffers are reused as soon as it returns, so copy out what you keep.
#[derive(Debug)]
pub struct Message<'a> {
    pub(crate) src: usize,
    pub(crate) args: &'a [u64],
    /// The class and what only medium and long messages carry: a short message is built with
    /// three words fewer to write than a class, a payload slice and an offset would take (one
    /// is built on each side's path of every round trip).
    body: Body<'a>,
}

/// The class of a [`Message`] with its payload and, for a long message, the segment offset.
#[derive(Debug, Clone, Copy)]
enum Body<'a> {
    Short,
    Medium(&'a [u8]),
    Long { payload: &'a [u8], offset: usize },
}

impl<'a> Message<'a> {
    /// A short message from `src` with `args`.
    #[inline(always)]
    pub(crate) fn short(src: usize, args: &'a [u64]) -> Self {
        Self {
            src,
            args,
            body: Body::Short,
        }
    }

    /// A message of class `class` from `src` with `args` and `payload`, which a long message
    /// wrote at segment offset `offset` (ignored for the other classes).
    #[inline(always)]
    pub(crate) fn new(
        src: usize,
        args: &'a [u64],
        class: MessageClass,
        payload: &'a [u8],
        offset: usize,
    ) -> Self {
        let body = match class {
            MessageClass::Short => Body::Short,
            MessageClass::Medium => Body::Medium(payload),
            MessageClass::Long => Body::Long { payload, offset },
        };
        Self { src, args, body }
    }

    /// The rank that sent the message.
    pub fn src(&self) -> usize {
        self.src
    }

    /// The arguments.
    pub fn args(&self) -> &'a [u64] {
        self.args
    }

    /// Argument `i`, or 0 if fewer were sent (the seed's unused words).
    pub fn arg(&self, i: usize) -> u64 {
        self.args.get(i).copied().unwrap_or(0)
    }

    /// The payload: empty for short messages, the medium buffer, or the bytes of the receiver's
    /// segment that a long message wrote.
    ///
    /// For a long message these bytes are segment memory that any rank may write at any time
    /// (a later long message to the same offset, for example): the program must not target a
    /// range while a handler may still be reading it, as with any remote write. This rank's
    /// own accesses (`Runtime::write_segment`, the one-sided layer's local and direct
    /// operations) wait for a handler running on the progress thread, so they never change
    /// the bytes under it.
    pub fn payload(&self) -> &'a [u8] {
        match self.body {
            Body::Short => &[],
            Body::Medium(payload) | Body::Long { payload, .. } => payload,
        }
    }

    /// The message class.
    pub fn class(&self) -> MessageClass {
        match self.body {
            Body::Short => MessageClass::Short,
            Body::Medium(_) => MessageClass::Medium,
            Body::Long { .. } => MessageClass::Long,
        }
    }

    /// For a long message, the segment offset its payload was written at.
    pub fn segment_offset(&self) -> Option<usize> {
        match self.body {
            Body::Long { offset, .. } => Some(offset),
            _ => None,
        }
    }
}

/// The right to reply once to the rank whose request is being handled. Every reply method takes
/// the token by value, so a second reply does not compile. Dropping it without replying is
/// allowed (a one-way request).
#[derive(Debug)]
pub struct ReplyToken<'a> {
    engine: &'a Engine,
    /// The requester's rank (high half) and how the reply reaches it (low half: its local
    /// index, or the network, `engine::REMOTE`). One word, so that the token, two words in
    /// all, is handed to the handler in registers.
    to: u64,
}

impl<'a> ReplyToken<'a> {
    /// The token for a reply to rank `dest` (below 2^32: `Engine::new` checks the job's size),
    /// reached through `route`.
    #[inline(always)]
    pub(crate) fn new(engine: &'a Engine, dest: usize, route: u32) -> Self {
        Self {
            engine,
            to: (dest as u64) << 32 | route as u64,
        }
    }

    /// The rank the reply goes to.
    pub fn requester(&self) -> usize {
        (self.to >> 32) as usize
    }

    #[inline(always)]
    fn route(&self) -> u32 {
        self.to as u32
    }

    /// Replies with a short message.
    #[inline]
    pub fn reply_short(self, handler: ReplyHandler, args: &[u64]) -> Result<()> {
        // The runtime's own work (a network reply may grow its encoding buffer) is not the
        // handler's allocation (see `crate::debug`); in release builds this is the call.
        allow_alloc(|| {
            self.engine
                .reply_short(self.requester(), self.route(), handler.0, args)
        })
    }

    /// Replies with a medium message (payload copied; at most `max_medium` bytes).
    pub fn reply_medium(self, handler: ReplyHandler, args: &[u64], payload: &[u8]) -> Result<()> {
        allow_alloc(|| {
            self.engine
                .send_medium(self.requester(), Channel::Reply, handler.0, args, payload)
        })
    }

    /// [`ReplyToken::reply_medium`] outside the network's sequencing, as
    /// `Runtime::request_medium_unsequenced` sends a request: over UDP it may be lost.
    pub(crate) fn reply_medium_unsequenced(
        self,
        handler: ReplyHandler,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        allow_alloc(|| {
            self.engine.send_medium_unsequenced(
                self.requester(),
                Channel::Reply,
                handler.0,
                args,
                payload,
            )
        })
    }

    /// Replies with a medium message of `len` bytes whose payload `fill` writes in place, in
    /// the runtime's own buffer (see [`crate::Runtime::request_medium_with`]).
    pub fn reply_medium_with(
        self,
        handler: ReplyHandler,
        args: &[u64],
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<()> {
        let (engine, requester) = (self.engine, self.requester());
        // `fill` is the handler's code, checked as the handler is; the rest is the runtime's.
        let fill = |buf: &mut [u8]| crate::debug::checked_again(|| fill(buf));
        allow_alloc(|| {
            engine.send_medium_with(requester, Channel::Reply, handler.0, args, len, fill)
        })
    }

    /// Replies with a long message: `payload` is written into the requester's segment at
    /// `offset` before its reply handler runs. As with [`crate::Runtime::request_long`], the
    /// range must not touch a segment of the one-sided layer.
    pub fn reply_long(
        self,
        handler: ReplyHandler,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> Result<()> {
        allow_alloc(|| {
            self.engine.send_long(
                self.requester(),
                Channel::Reply,
                handler.0,
                args,
                payload,
                offset,
            )
        })
    }

    /// [`ReplyToken::reply_short`] if the reply can go at once. It never polls: no handler
    /// runs inside it. When the reply cannot go ([`Error::WouldBlock`], or any other refusal),
    /// nothing was sent and the token comes back in [`ReplyNotSent`] to try again or to
    /// reply blocking.
    pub fn try_reply_short(
        self,
        handler: ReplyHandler,
        args: &[u64],
    ) -> std::result::Result<(), ReplyNotSent<'a>> {
        allow_alloc(|| {
            self.engine.try_reply_short(
                self.requester(),
                self.route(),
                Channel::Reply,
                handler.0,
                args,
            )
        })
        .map_err(|error| ReplyNotSent { error, token: self })
    }

    /// [`ReplyToken::reply_medium`] if the reply can go at once (see
    /// [`ReplyToken::try_reply_short`]).
    pub fn try_reply_medium(
        self,
        handler: ReplyHandler,
        args: &[u64],
        payload: &[u8],
    ) -> std::result::Result<(), ReplyNotSent<'a>> {
        allow_alloc(|| {
            self.engine
                .try_send_medium(self.requester(), Channel::Reply, handler.0, args, payload)
        })
        .map_err(|error| ReplyNotSent { error, token: self })
    }

    /// [`ReplyToken::reply_long`] if the reply can go at once (see
    /// [`ReplyToken::try_reply_short`]); a refused reply wrote nothing into the requester's
    /// segment.
    pub fn try_reply_long(
        self,
        handler: ReplyHandler,
        args: &[u64],
        payload: &[u8],
        offset: usize,
    ) -> std::result::Result<(), ReplyNotSent<'a>> {
        allow_alloc(|| {
            self.engine.try_send_long(
                self.requester(),
                Channel::Reply,
                handler.0,
                args,
                payload,
                offset,
            )
        })
        .map_err(|error| ReplyNotSent { error, token: self })
    }
}

/// A `try_reply_*` that sent nothing: why, and the token, still unused.
#[derive(Debug)]
pub struct ReplyNotSent<'a> {
    /// Why ([`Error::WouldBlock`] when there was no room at once).
    pub error: Error,
    /// The token, to reply with again.
    pub token: ReplyToken<'a>,
}

impl std::fmt::Display for ReplyNotSent<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "reply not sent: {}", self.error)
    }
}

impl std::error::Error for ReplyNotSent<'_> {}

/// A request handler: runs at the target, may reply once through the token.
pub type RequestFn = dyn Fn(&Message<'_>, ReplyToken<'_>) + Send + Sync + 'static;
/// A reply handler: runs at the requester and has no way to send.
pub type ReplyFn = dyn Fn(&Message<'_>) + Send + Sync + 'static;
