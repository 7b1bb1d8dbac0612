//! The contract every transport keeps with the Active Message layer: shared memory
//! ([`Links`](crate::transport::shm::link::Links)) and the network
//! ([`NetLink`](crate::transport::net::link::NetLink), over UDP or TCP) implement
//! [`Transport`], and a new transport (UCX) implements it too.
//!
//! A transport carries Active Messages, not bytes: the AM layer hands it an [`Outbound`]
//! message of a [`Class`] (short, medium, long, or the runtime's own system messages) and the
//! transport frames it its own way (ring slots, a datagram's words). What it takes in, it
//! decodes into an [`Inbound`] message and hands to a [`Sink`], which runs the handler while
//! the message's bytes are still the transport's; afterwards the transport reclaims them.
//!
//! Promises a transport makes:
//! - Messages from one sender on one channel arrive in the order they were sent, each once.
//! - [`Transport::send`] returns once the message is on its way and `msg`'s buffers may be
//!   reused. While the transport cannot take it (no credit, a full window, no free buffer),
//!   it calls `blocked` with 0, 1, 2, ... (so the caller knows when a wait begins), which
//!   lets the receiver catch up (the AM layer polls and backs off), and tries again; once
//!   the message went through after such a wait, it calls `blocked(BLOCKED_DONE)`.
//!   `blocked` is an [`OnBlocked`] policy: a plain closure waits; [`GiveUp`] makes the send
//!   return [`SendRefused::WouldBlock`] at the first refusal instead, having changed nothing
//!   (no slot reserved, no buffer claimed, no payload written, nothing queued), so that a
//!   non-blocking send shares the blocking send's code without adding to it.
//! - A long payload lies in the target's segment at its offset before its handler runs, and
//!   never where the [`LongGuard`] refuses it.
//! - Direct memory access (mapped segments of peers, for one-sided operations without a
//!   message) is an optional capability: shared memory has it, the network does not.

use super::Channel;
use crate::refusal::Refusal;
use std::ops::ControlFlow;

/// `Inbound::route` of a message that came through the network: a reply goes back the same
/// way.
pub(crate) const REMOTE: u32 = u32::MAX;

/// The `attempt` a transport passes to a send's `blocked` callback once the send that waited
/// has gone through (never for a send that did not wait), so the caller knows the wait ended.
pub(crate) const BLOCKED_DONE: u32 = u32::MAX;

/// The class of an Active Message, as every transport carries it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Class {
    /// Handler and arguments.
    Short,
    /// Handler, arguments and a payload delivered in a buffer valid during the handler.
    Medium,
    /// Handler, arguments and a payload placed in the target's segment before the handler.
    Long,
    /// The runtime's own one-way message (barrier, finalize); its handler index is the
    /// operation.
    System,
}

/// An Active Message to send.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Outbound<'a> {
    /// The channel it travels on.
    pub(crate) ch: Channel,
    /// What it carries.
    pub(crate) class: Class,
    /// The handler index (or system operation).
    pub(crate) handler: u16,
    /// Its arguments (at most [`crate::MAX_ARGS`]).
    pub(crate) args: &'a [u64],
    /// A medium or long message's payload; empty otherwise.
    pub(crate) payload: &'a [u8],
    /// Where in the target's segment a long payload goes.
    pub(crate) offset: usize,
}

/// An Active Message taken in, valid while the sink runs its handler.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Inbound<'a> {
    /// The sender's global rank.
    pub(crate) src: usize,
    /// How an answer reaches the sender: its local index on this node, or [`REMOTE`].
    pub(crate) route: u32,
    /// The channel it came on.
    pub(crate) ch: Channel,
    /// What it carries.
    pub(crate) class: Class,
    /// The handler index (or system operation).
    pub(crate) handler: u16,
    /// Its arguments.
    pub(crate) args: &'a [u64],
    /// Its payload.
    pub(crate) body: Body<'a>,
}

/// Where an inbound message's payload is.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Body<'a> {
    /// None (a short or system message).
    None,
    /// A medium payload, in the transport's buffers.
    Medium(&'a [u8]),
    /// A long payload, already in this rank's segment at `offset`.
    Long {
        /// Its offset in the segment.
        offset: usize,
        /// Its length.
        len: usize,
    },
}

/// Why a transport refused to send a message; nothing was sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendRefused {
    /// The payload is larger than this transport carries in one message.
    TooLarge {
        /// The payload's length.
        len: usize,
        /// The largest this transport carries.
        max: usize,
    },
    /// The target's guard refused a long payload's range.
    Guarded(Refusal),
    /// The transport could not take the message at once and the send's [`OnBlocked`] policy
    /// gave up: nothing was sent, reserved or written.
    WouldBlock,
}

/// What a send does while its transport cannot take the message (see the module's
/// promises): wait (any `FnMut(u32)` closure, which polls and backs off), or give up
/// ([`GiveUp`]).
pub(crate) trait OnBlocked {
    /// Whether this policy gives up at the first refusal. Known at compile time, so that a
    /// transport checks, before it changes anything, what it could not undo (a long payload
    /// written into the target's segment before the frame that announces it) only for a send
    /// that may give up: the waiting sends' code is what it was.
    const GIVES_UP: bool;

    /// Called with 0, 1, 2, ... while the message cannot be taken, and with
    /// [`BLOCKED_DONE`] once it went through after a wait. `Break`: give up (the transport
    /// returns [`SendRefused::WouldBlock`]).
    fn blocked(&mut self, attempt: u32) -> ControlFlow<()>;
}

impl<F: FnMut(u32)> OnBlocked for F {
    const GIVES_UP: bool = false;

    #[inline(always)]
    fn blocked(&mut self, attempt: u32) -> ControlFlow<()> {
        self(attempt);
        ControlFlow::Continue(())
    }
}

/// The policy of a non-blocking send: give up at once.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GiveUp;

impl OnBlocked for GiveUp {
    const GIVES_UP: bool = true;

    #[inline(always)]
    fn blocked(&mut self, _attempt: u32) -> ControlFlow<()> {
        ControlFlow::Break(())
    }
}

/// Decides whether a long message may write a range of a rank's segment area. The layer that
/// carves segments out of that area (the one-sided layer) installs one that refuses a range
/// touching a live segment; without a guard the whole area is the long messages'.
pub(crate) trait LongGuard: Send + Sync {
    /// `Err` with the reason (counted by the guard) when a long message may not write `len`
    /// bytes at `offset` into the segment area of the rank whose region's upper bytes (see
    /// `Region::upper_ptr`) are at `upper`.
    fn admit(&self, upper: *mut u8, offset: usize, len: usize) -> Result<(), Refusal>;
}

/// What a transport hands the messages it takes in to: the AM layer, which runs handlers.
/// Every method runs while the message is still in the transport's buffers.
pub(crate) trait Sink {
    /// What lasts while a batch of messages from one sender is handled (the handlers'
    /// nesting depth, what their messages share).
    type Batch<'s>
    where
        Self: 's;

    /// A batch of messages from global rank `src_rank` begins.
    fn begin_batch(&self, src_rank: usize) -> Self::Batch<'_>;

    /// Runs a short message whose arguments are `args`, from local index `route`, to handler
    /// `handler` of channel `ch`: the fast path of a stream of shorts. Returns whether a
    /// handler ran (otherwise the transport counts it through [`Sink::dropped`]).
    fn run_short<'s>(
        &'s self,
        batch: &mut Self::Batch<'s>,
        ch: Channel,
        route: u32,
        handler: u16,
        args: &'s [u64],
    ) -> bool;

    /// [`Sink::run_short`] for a short that comes alone (a batch of its own).
    fn run_lone_short(
        &self,
        ch: Channel,
        route: u32,
        src_rank: usize,
        handler: u16,
        args: &[u64],
    ) -> bool;

    /// Runs any message. `Err(())`: dropped (no such handler, a system message on the reply
    /// channel); the transport counts it through [`Sink::dropped`].
    fn run(&self, batch: &Self::Batch<'_>, msg: Inbound<'_>) -> Result<(), ()>;

    /// A message was dropped without running a handler.
    fn dropped(&self);

    /// The transport's stream from local index `src` on `ch` is out of step (its framing
    /// word `word` cannot be right): nothing after it can be trusted. Must not return.
    fn corrupt(&self, src: usize, ch: Channel, word: u64) -> !;
}

/// The contract of a transport (see the module's documentation).
pub(crate) trait Transport {
    /// A peer resolved once, for sends to it (a pair of rings, a rank on another node).
    type Peer<'a>: Copy
    where
        Self: 'a;

    /// The peer numbered `dest` in this transport's numbering, if this transport reaches it.
    fn peer(&self, dest: usize) -> Option<Self::Peer<'_>>;

    /// Sends `msg` to `peer` (see the module's promises). Refused messages were not sent.
    fn send<B: OnBlocked>(
        &self,
        peer: Self::Peer<'_>,
        msg: Outbound<'_>,
        blocked: B,
    ) -> Result<(), SendRefused>;

    /// Whether a message on `ch` of `class` with `nargs` arguments and a payload of
    /// `payload_len` bytes would be taken at once by [`Transport::send`] to `peer`: once
    /// true, it stays true until this rank sends to `peer` again (only the receiver's and
    /// the network's progress change it, and only towards more room).
    fn sendable(
        &self,
        peer: Self::Peer<'_>,
        ch: Channel,
        class: Class,
        nargs: usize,
        payload_len: usize,
    ) -> bool;

    /// Hands what has arrived on channel `ch` to `sink`, one sender's messages at a time;
    /// returns how many handlers ran. After each sender whose messages ran handlers, `stop`
    /// may end the poll there (`None`).
    fn poll<S: Sink>(&self, ch: Channel, sink: &S, stop: impl FnMut() -> bool) -> Option<usize>;

    /// Whether something has arrived that no poll has handed on yet.
    fn pending(&self) -> bool;

    /// Pushes out what sends left queued (a transport may gather a quick run of sends into
    /// one system call): the AM layer calls it before it waits, and after its handlers ran.
    fn flush(&self) {}

    /// The largest payload of `class` one message carries.
    fn max_payload(&self, class: Class) -> usize;
}
