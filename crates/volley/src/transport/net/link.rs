//! The network side of the [`Transport`] contract: Active Messages to and from ranks on other
//! nodes, framed as one network message each ([`super::frame`]) and carried by a
//! [`NetTransport`] (UDP or TCP), with the flush and poll policy that keeps system calls off
//! the shared-memory path.
//!
//! What arrives waits in a per-channel inbox until a poll of that channel hands it on, so a
//! blocked reply send, which may run reply handlers only, leaves requests where they are.

use super::frame;
use super::poll_policy::{NetPollState, PollPolicy};
use super::{NetError, NetStats, NetTransport, Placer, MAX_MESSAGE};
use crate::counter::Counter;
use crate::transport::contract::{
    Body, Class, Inbound, LongGuard, OnBlocked, Outbound, SendRefused, Sink, Transport,
    BLOCKED_DONE, REMOTE,
};
use crate::transport::Channel;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::ops::ControlFlow;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Sends closer together than this share a flush (about the cost of one send system call).
const FLUSH_INTERVAL_NS: u64 = 2_000;

/// `NetLink::last_flush` before the first flush: the first message leaves at once, however
/// soon after the link was made (a clock that starts at the link's creation would otherwise
/// hold it as if a flush had just happened).
const NEVER_FLUSHED: u64 = u64::MAX;

/// Bytes a network message spends on more than its payload: the frame's words (header,
/// length, offset, 16 arguments) with room to spare.
const FRAME_OVERHEAD: usize = 256;

/// Bytes of each part of a long payload too large for one network message (see
/// [`frame`]): small enough that the parts of one transfer leave room between them for the
/// sender's other traffic and for the handlers it runs while it waits.
const LONG_PART: usize = 1 << 20;

/// How a network message goes to the transport.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum FrameKind {
    /// A message of its own, or the first part of a long one.
    First,
    /// A later part of a long message (see [`NetTransport::send_gather_part`]).
    Later,
    /// Outside the transport's sequencing (`body` empty).
    Unsequenced,
}

/// The largest payload of one network message.
const WHOLE_MAX: usize = MAX_MESSAGE - FRAME_OVERHEAD;

/// A message from the network: source rank and bytes.
type Delivered = (usize, Vec<u8>);

/// Where this rank's segment is, for the long payloads that arrive.
pub(crate) struct Placement {
    /// The segment's first byte.
    pub(crate) segment: *mut u8,
    /// Its length.
    pub(crate) len: usize,
    /// The region's upper bytes, for the guard.
    pub(crate) upper: *mut u8,
    /// What refuses a long message on a segment, if the layer above installed one.
    pub(crate) guard: Option<Arc<dyn LongGuard>>,
}

impl std::fmt::Debug for Placement {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Placement")
            .field("segment", &self.segment)
            .field("len", &self.len)
            .field("guarded", &self.guard.is_some())
            .finish()
    }
}

// SAFETY: the segment and upper bytes are this rank's own mapping, which lives as long as
// the runtime (and so the route and its transport); the transport writes through it only
// ranges `place` admitted, and the guard is `Send + Sync`.
unsafe impl Send for Placement {}
// SAFETY: as above; `&Placement` only reads the pointers.
unsafe impl Sync for Placement {}

impl Placement {
    /// Checks that `len` bytes at `offset` fit our segment and that the guard admits them.
    fn admit(&self, offset: usize, len: usize) -> Result<(), ()> {
        if offset.checked_add(len).is_none_or(|e| e > self.len) {
            return Err(());
        }
        if let Some(guard) = &self.guard {
            guard.admit(self.upper, offset, len).map_err(|_| ())?;
        }
        Ok(())
    }

    /// Copies `payload` to `offset` of our segment, a range [`Placement::admit`] admitted.
    fn copy_in(&self, offset: usize, payload: &[u8]) {
        assert!(offset + payload.len() <= self.len, "an admitted range");
        // SAFETY: bounds checked against our own segment, which stays mapped while the
        // runtime (and so this route) lives.
        unsafe {
            std::ptr::copy_nonoverlapping(payload.as_ptr(), self.segment.add(offset), payload.len())
        };
    }
}

/// A long payload placed by the transport as it arrives is admitted then, as the
/// shared-memory route admits it when the sender writes it: before a byte is written.
impl Placer for Placement {
    fn place(
        &self,
        _src: usize,
        head: &[u8],
        len: usize,
        notice: &mut Vec<u8>,
    ) -> Option<(NonNull<u8>, usize)> {
        let (offset, words) = frame::placed(head, len, notice)?;
        let offset = usize::try_from(offset).ok()?;
        if self.admit(offset, len - words).is_err() {
            notice.clear();
            return None;
        }
        // In bounds: admitted above.
        NonNull::new(self.segment.wrapping_add(offset)).map(|p| (p, words))
    }
}

/// What the network route counted, for the runtime's statistics.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LinkStats {
    /// Messages sent through the network (system messages not counted).
    pub(crate) sent: u64,
    /// Messages whose handler ran (system messages not counted).
    pub(crate) handled: u64,
    /// Polls of the network transport, and those that brought nothing.
    pub(crate) polls: u64,
    pub(crate) empty_polls: u64,
    /// The adaptive poll interval now.
    pub(crate) interval: u64,
}

/// One peer's counters (see [`NetLink::peer_traffic`]).
#[derive(Debug, Default)]
struct PeerCounters {
    sent: [Counter; 2],
    received: [Counter; 2],
    unacked: Counter,
    queued_bytes: Counter,
}

/// One peer's network traffic as [`NetLink::peer_traffic`] reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetTraffic {
    /// Messages sent to it, by channel.
    pub(crate) sent: [u64; 2],
    /// Messages from it handed to handlers, by channel.
    pub(crate) received: [u64; 2],
    /// What it has not acknowledged (see [`super::Backlog::unacked`]).
    pub(crate) unacked: u64,
    /// Bytes queued towards it that have not left this rank.
    pub(crate) queued_bytes: u64,
}

/// The network route of one rank: its transport and what arrived that no handler has run
/// for yet.
pub(crate) struct NetLink {
    transport: RefCell<Box<dyn NetTransport>>,
    /// Requests and replies received, in arrival order per source.
    inbox: [RefCell<VecDeque<Delivered>>; 2],
    /// Scratch for `progress`, kept to avoid an allocation per poll.
    scratch: Cell<Vec<Delivered>>,
    /// Encoding buffer for outgoing messages (taken while in use).
    encode_buf: Cell<Vec<u8>>,
    policy: RefCell<NetPollState>,
    epoch: Instant,
    /// When queued messages were last pushed out ([`NEVER_FLUSHED`] before the first time).
    last_flush: Cell<u64>,
    /// Whether a send since then left its message queued in the transport (a run of sends
    /// shares one flush; the poll that ran the handlers which sent them flushes at its end).
    unflushed: Cell<bool>,
    polls: Cell<u64>,
    empty_polls: Cell<u64>,
    sent: Cell<u64>,
    handled: Cell<u64>,
    /// Peers that left normally: a broken connection to them is no failure.
    departed: Vec<Cell<bool>>,
    /// Per peer, readable by the hang reporter: messages sent and delivered by channel, and
    /// the transport's backlog towards it (see [`NetLink::peer_traffic`]).
    traffic: Vec<PeerCounters>,
    /// The hang reporter asks for the backlogs: the next network poll publishes them.
    backlog_wanted: AtomicBool,
    placement: Arc<Placement>,
    /// Ends the rank on a failure it cannot recover from (the job's policy, not ours); it
    /// must not return.
    fail: Box<dyn Fn(NetError)>,
}

impl std::fmt::Debug for NetLink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NetLink")
            .field("transport", &self.transport)
            .finish_non_exhaustive()
    }
}

/// Adds one to a counter.
#[inline(always)]
fn bump(c: &Cell<u64>) {
    c.set(c.get() + 1);
}

impl NetLink {
    /// The route over `transport` (connected) for a job of `size` ranks, polled as `policy`
    /// says, placing long payloads as `placement` says and ending the rank through `fail`.
    pub(crate) fn new(
        transport: Box<dyn NetTransport>,
        size: usize,
        policy: PollPolicy,
        placement: Placement,
        fail: Box<dyn Fn(NetError)>,
    ) -> Self {
        let placement = Arc::new(placement);
        let mut transport = transport;
        transport.set_placer(placement.clone());
        Self {
            transport: RefCell::new(transport),
            inbox: Default::default(),
            scratch: Cell::new(Vec::new()),
            encode_buf: Cell::new(Vec::new()),
            policy: RefCell::new(NetPollState::new(policy)),
            epoch: Instant::now(),
            last_flush: Cell::new(NEVER_FLUSHED),
            unflushed: Cell::new(false),
            polls: Cell::new(0),
            empty_polls: Cell::new(0),
            sent: Cell::new(0),
            handled: Cell::new(0),
            departed: (0..size).map(|_| Cell::new(false)).collect(),
            traffic: (0..size).map(|_| PeerCounters::default()).collect(),
            backlog_wanted: AtomicBool::new(false),
            placement,
            fail,
        }
    }

    /// Nanoseconds since this route was made (the transports' clock).
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Whether the poll policy says the network is due (counting this look).
    pub(crate) fn due(&self) -> bool {
        self.policy.borrow_mut().tick()
    }

    /// Takes in what the transport has received (and transmits, runs timers), into the
    /// inboxes. Does not run handlers.
    pub(crate) fn take_in(&self) {
        let mut scratch = self.scratch.take();
        let now = self.now();
        self.last_flush.set(now);
        self.unflushed.set(false);
        let result = self.transport.borrow_mut().progress(now, &mut scratch);
        if self.backlog_wanted.load(Ordering::Relaxed) {
            self.publish_backlog();
        }
        bump(&self.polls);
        if scratch.is_empty() {
            bump(&self.empty_polls);
        }
        self.policy.borrow_mut().record(scratch.len());
        for (src, msg) in scratch.drain(..) {
            // The channel bit is in the first word; a message too short for it is dropped by
            // the decoder later, so any channel will do.
            let reply = msg.get(3).is_some_and(|b| b & 1 != 0);
            self.inbox[reply as usize]
                .borrow_mut()
                .push_back((src, msg));
        }
        self.scratch.set(scratch);
        if let Err(e) = result {
            self.peer_failed(e);
        }
    }

    /// Publishes every peer's backlog for the hang reporter.
    #[cold]
    fn publish_backlog(&self) {
        let t = self.transport.borrow();
        for (peer, c) in self.traffic.iter().enumerate() {
            let b = t.backlog(peer);
            c.unacked.set(b.unacked);
            c.queued_bytes.set(b.queued_bytes);
        }
        // Release: the values above are visible to the reporter that sees the flag clear.
        self.backlog_wanted.store(false, Ordering::Release);
    }

    /// Asks the next network poll to publish the backlogs (see [`NetLink::backlog_fresh`]).
    pub(crate) fn want_backlog(&self) {
        self.backlog_wanted.store(true, Ordering::Relaxed);
    }

    /// Whether the backlogs were published since [`NetLink::want_backlog`] (otherwise they
    /// are as of an earlier poll: this rank has not polled the network since).
    pub(crate) fn backlog_fresh(&self) -> bool {
        // Acquire: pairs with the release in `publish_backlog`.
        !self.backlog_wanted.load(Ordering::Acquire)
    }

    /// What this rank exchanged with `peer` through the network, read from any thread.
    pub(crate) fn peer_traffic(&self, peer: usize) -> Option<NetTraffic> {
        let c = self.traffic.get(peer)?;
        Some(NetTraffic {
            sent: c.sent.each_ref().map(Counter::get),
            received: c.received.each_ref().map(Counter::get),
            unacked: c.unacked.get(),
            queued_bytes: c.queued_bytes.get(),
        })
    }

    /// Whether a send left something queued since the last flush.
    pub(crate) fn unflushed(&self) -> bool {
        self.unflushed.get()
    }

    /// Hands the transport everything queued, bulk transfers included, as far as the network
    /// takes it now (a rank about to compute for long; see [`NetTransport::flush_out`]).
    pub(crate) fn flush_out(&self) {
        let result = self.transport.borrow_mut().flush_out(self.now());
        self.flushed(result);
    }

    fn flush_at(&self, now: u64) {
        let result = self.transport.borrow_mut().flush(now);
        self.flushed(result);
    }

    /// Records a flush that just ended with `result`.
    fn flushed(&self, result: Result<(), NetError>) {
        // From the flush's end: a flush that takes longer than the interval must not make
        // every following send flush again.
        self.last_flush.set(self.now());
        self.unflushed.set(false);
        if let Err(e) = result {
            self.peer_failed(e);
        }
    }

    /// A failed pair: harmless when the peer had finished (see [`NetLink::departed`]), fatal
    /// otherwise.
    fn peer_failed(&self, e: NetError) {
        if let NetError::PeerFailed { peer, .. } = &e {
            if self.departed.get(*peer).is_some_and(Cell::get) {
                return;
            }
        }
        self.failed(e)
    }

    /// Ends the rank through the failure handler.
    #[cold]
    fn failed(&self, e: NetError) -> ! {
        (self.fail)(e);
        unreachable!("the network failure handler returned")
    }

    /// `rank` has left normally (it needs nothing more from us, and we expect nothing more
    /// from it): a broken pair with it is no failure.
    pub(crate) fn departed(&self, rank: usize) {
        if let Some(d) = self.departed.get(rank) {
            d.set(true);
        }
    }

    /// Makes the next look at the policy poll the network (after a sleep).
    pub(crate) fn make_due(&self) {
        self.policy.borrow_mut().make_due();
    }

    /// What a sleeper waits on: the transport's readable descriptor, and the time its timers
    /// next need a poll (nanoseconds from now), if any.
    pub(crate) fn sleep_on(&self) -> (std::os::fd::RawFd, Option<u64>) {
        let t = self.transport.borrow();
        let until = t.next_deadline().map(|d| d.saturating_sub(self.now()));
        (t.readable_fd(), until)
    }

    /// Leaves the network after the two-phase finalize: lingers until our last messages are
    /// acknowledged and the peers no longer need our acks (bounded).
    pub(crate) fn close(&self) -> Result<(), NetError> {
        let deadline = self.now() + 10_000_000_000;
        let mut now = || self.now();
        self.transport.borrow_mut().close(&mut now, deadline)
    }

    /// The route's counters, and the transport's name and counters.
    pub(crate) fn stats(&self) -> (LinkStats, &'static str, NetStats) {
        let t = self.transport.borrow();
        let ours = LinkStats {
            sent: self.sent.get(),
            handled: self.handled.get(),
            polls: self.polls.get(),
            empty_polls: self.empty_polls.get(),
            interval: self.policy.borrow().interval() as u64,
        };
        (ours, t.kind().name(), t.stats())
    }

    /// Test hook: the segment long payloads are placed in.
    #[cfg(test)]
    pub(crate) fn placed_segment(&self) -> &[u8] {
        // SAFETY: the placement's segment is `len` bytes that live as long as this route.
        unsafe { std::slice::from_raw_parts(self.placement.segment, self.placement.len) }
    }

    /// Decodes one message from `src` that came on channel `ch` and hands it to `sink`;
    /// `Ok(Some(true))` when a user handler ran, `Ok(None)` for a part of a long payload
    /// (placed, no handler).
    fn deliver<S: Sink>(
        &self,
        sink: &S,
        src: usize,
        ch: Channel,
        bytes: &[u8],
    ) -> Result<Option<bool>, ()> {
        let f = frame::decode(bytes).ok_or(())?;
        if f.ch != ch {
            return Err(());
        }
        let body = match f.class {
            Class::Medium => Body::Medium(f.payload),
            Class::Long => {
                let offset = usize::try_from(f.offset).map_err(|_| ())?;
                let span = usize::try_from(f.span).map_err(|_| ())?;
                let tail_at = offset.checked_add(span - f.payload.len()).ok_or(())?;
                if f.part {
                    self.place_long(offset, f.payload)?;
                    return Ok(None);
                }
                // A tail's parts were admitted one by one; the handler's range is admitted
                // whole, so a range a segment took meanwhile is refused here too.
                self.admit_long(offset, span)?;
                self.copy_in(tail_at, f.payload);
                Body::Long { offset, len: span }
            }
            Class::Short | Class::System => Body::None,
        };
        let msg = Inbound {
            src,
            route: REMOTE,
            ch,
            class: f.class,
            handler: f.handler,
            args: &f.args[..f.nargs],
            body,
        };
        let batch = sink.begin_batch(src);
        sink.run(&batch, msg)
            .map(|()| Some(f.class != Class::System))
    }

    /// Checks that `len` bytes at `offset` fit our segment and that the guard admits them.
    fn admit_long(&self, offset: usize, len: usize) -> Result<(), ()> {
        self.placement.admit(offset, len)
    }

    /// Copies a long payload into this rank's segment at `offset` before its handler runs, as
    /// the sender does on the shared-memory route: the sender could not see our segments, so
    /// the guard is asked here (a refused one is dropped and counted).
    fn place_long(&self, offset: usize, payload: &[u8]) -> Result<(), ()> {
        self.admit_long(offset, payload.len())?;
        self.copy_in(offset, payload);
        Ok(())
    }

    /// Copies `payload` to `offset` of our segment, a range [`NetLink::admit_long`] admitted.
    fn copy_in(&self, offset: usize, payload: &[u8]) {
        self.placement.copy_in(offset, payload)
    }
}

impl NetLink {
    /// Sends a medium message of `len` bytes (at most [`Transport::max_payload`]) whose
    /// payload `fill` writes in place, into the network message's encoding (which the
    /// transport then queues or sends as it does every message). `fill` runs exactly once.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn send_medium_with<B: OnBlocked>(
        &self,
        dest: usize,
        ch: Channel,
        handler: u16,
        args: &[u64],
        len: usize,
        fill: impl FnOnce(&mut [u8]),
        mut blocked: B,
    ) -> Result<(), SendRefused> {
        let max = self.max_payload(Class::Medium);
        if len > max {
            return Err(SendRefused::TooLarge { len, max });
        }
        let mut buf = self.encode_buf.take();
        frame::encode_medium_with(&mut buf, ch, handler, args, len, fill);
        let mut attempt = 0;
        let sent = self.send_frame(
            dest,
            &buf,
            &[],
            &mut blocked,
            &mut attempt,
            FrameKind::First,
        );
        self.encode_buf.set(buf);
        sent?;
        self.sent_one(dest, ch, Class::Medium, attempt, &mut blocked);
        Ok(())
    }

    /// The bookkeeping of a message of `class` sent to `dest` on `ch` after `attempt`
    /// refusals.
    fn sent_one<B: OnBlocked>(
        &self,
        dest: usize,
        ch: Channel,
        class: Class,
        attempt: u32,
        blocked: &mut B,
    ) {
        if attempt > 0 {
            let _ = blocked.blocked(BLOCKED_DONE);
        }
        if let (Some(c), false) = (self.traffic.get(dest), class == Class::System) {
            c.sent[ch as usize].bump();
        }
        if class != Class::System {
            bump(&self.sent);
        }
    }

    /// Sends a medium message outside the transport's sequencing (seed 002's "no flow
    /// control", see [`NetTransport::send_unsequenced`]): over UDP one unsequenced datagram,
    /// at most once, never retransmitted; over TCP the stream as usual. Its payload must fit
    /// one datagram ([`NetLink::max_unsequenced_payload`]).
    pub(crate) fn send_unsequenced<B: OnBlocked>(
        &self,
        dest: usize,
        msg: Outbound<'_>,
        mut blocked: B,
    ) -> Result<(), SendRefused> {
        debug_assert_eq!(
            msg.class,
            Class::Medium,
            "only medium messages go unsequenced"
        );
        let max = self.max_unsequenced_payload(msg.args.len());
        if msg.payload.len() > max {
            return Err(SendRefused::TooLarge {
                len: msg.payload.len(),
                max,
            });
        }
        let mut buf = self.encode_buf.take();
        frame::encode(
            &mut buf,
            msg.ch,
            msg.class,
            msg.handler,
            msg.args,
            msg.payload,
            0,
        );
        let mut attempt = 0;
        let sent = self.send_frame(
            dest,
            &buf,
            &[],
            &mut blocked,
            &mut attempt,
            FrameKind::Unsequenced,
        );
        self.encode_buf.set(buf);
        sent?;
        self.sent_one(dest, msg.ch, msg.class, attempt, &mut blocked);
        Ok(())
    }

    /// The largest payload of a medium message with `nargs` arguments that
    /// [`NetLink::send_unsequenced`] takes.
    pub(crate) fn max_unsequenced_payload(&self, nargs: usize) -> usize {
        let whole = self.transport.borrow().max_unsequenced();
        whole
            .saturating_sub(frame::encoded_len(Class::Medium, nargs, 0))
            .min(WHOLE_MAX)
    }

    /// Hands one network message, `head` followed by `body`, to the transport as `kind`
    /// says, waiting as `blocked` says while the transport cannot take it.
    fn send_frame<B: OnBlocked>(
        &self,
        dest: usize,
        head: &[u8],
        body: &[u8],
        blocked: &mut B,
        attempt: &mut u32,
        kind: FrameKind,
    ) -> Result<(), SendRefused> {
        loop {
            let now = self.now();
            let mut transport = self.transport.borrow_mut();
            let sent = match kind {
                FrameKind::First => transport.send_gather(dest, head, body, now),
                FrameKind::Later => transport.send_gather_part(dest, head, body, now),
                FrameKind::Unsequenced => {
                    debug_assert!(body.is_empty());
                    transport.send_unsequenced(dest, head, now)
                }
            };
            drop(transport);
            match sent {
                Ok(()) => {
                    // A message alone leaves at once; messages sent in a quick run share the
                    // system calls of a flush every FLUSH_INTERVAL_NS (and a poll flushes too).
                    let last = self.last_flush.get();
                    if last == NEVER_FLUSHED || now.saturating_sub(last) >= FLUSH_INTERVAL_NS {
                        self.flush_at(now);
                    } else {
                        self.unflushed.set(true);
                    }
                    return Ok(());
                }
                Err(NetError::WouldBlock) => {
                    // The transport queued nothing. A send that gives up returns before it
                    // takes anything in: it neither polls nor makes handlers due.
                    if B::GIVES_UP {
                        return Err(SendRefused::WouldBlock);
                    }
                    // The window opens only when acks arrive: take them in now, not just
                    // when the policy's turn comes, and let the caller wait.
                    self.take_in();
                    if let ControlFlow::Break(()) = blocked.blocked(*attempt) {
                        return Err(SendRefused::WouldBlock);
                    }
                    *attempt += 1;
                }
                Err(e) => self.failed(e),
            }
        }
    }
}

impl Transport for NetLink {
    type Peer<'a> = usize;

    /// Peers are numbered by global rank; the caller routes here only the ranks on other
    /// nodes.
    #[inline]
    fn peer(&self, dest: usize) -> Option<usize> {
        (dest < self.departed.len()).then_some(dest)
    }

    #[inline(never)]
    fn send<B: OnBlocked>(
        &self,
        dest: usize,
        msg: Outbound<'_>,
        mut blocked: B,
    ) -> Result<(), SendRefused> {
        let max = self.max_payload(msg.class);
        let whole = msg.class != Class::Long || msg.payload.len() <= WHOLE_MAX;
        if msg.payload.len() > max || (B::GIVES_UP && !whole) {
            // A send that gives up must send all or nothing: one network message.
            return Err(SendRefused::TooLarge {
                len: msg.payload.len(),
                max: if B::GIVES_UP { WHOLE_MAX } else { max },
            });
        }
        let mut buf = self.encode_buf.take();
        let (ch, class) = (msg.ch, msg.class);
        let mut attempt = 0;
        // Only the frame's words are encoded here; the transport gathers the payload from
        // where it lies.
        let body = if whole {
            frame::encode_head(
                &mut buf,
                ch,
                class,
                msg.handler,
                msg.args,
                msg.payload.len(),
                msg.offset as u64,
            );
            msg.payload
        } else {
            // Parts first, then the tail that runs the handler; once the first part is
            // queued the send cannot give up (it does not: `GIVES_UP` sends come whole).
            let parts = msg.payload.len().div_ceil(LONG_PART) - 1;
            for (i, part) in msg.payload.chunks(LONG_PART).take(parts).enumerate() {
                let offset = (msg.offset + i * LONG_PART) as u64;
                frame::encode_part_head(&mut buf, ch, part.len(), offset);
                let kind = if i == 0 {
                    FrameKind::First
                } else {
                    FrameKind::Later
                };
                let sent = self.send_frame(dest, &buf, part, &mut blocked, &mut attempt, kind);
                if let Err(e) = sent {
                    self.encode_buf.set(buf);
                    return Err(e);
                }
            }
            frame::encode_tail_head(
                &mut buf,
                ch,
                msg.handler,
                msg.args,
                msg.offset as u64,
                msg.payload.len() as u64,
            );
            &msg.payload[parts * LONG_PART..]
        };
        let kind = if whole {
            FrameKind::First
        } else {
            FrameKind::Later
        };
        let sent = self.send_frame(dest, &buf, body, &mut blocked, &mut attempt, kind);
        self.encode_buf.set(buf);
        sent?;
        self.sent_one(dest, ch, class, attempt, &mut blocked);
        Ok(())
    }

    /// Hands on what waits in `ch`'s inbox, one message at a time (handlers may poll again
    /// and append to it). Never stops early.
    fn poll<S: Sink>(&self, ch: Channel, sink: &S, _stop: impl FnMut() -> bool) -> Option<usize> {
        let mut handled = 0;
        loop {
            let next = self.inbox[ch as usize].borrow_mut().pop_front();
            let Some((src, msg)) = next else { break };
            match self.deliver(sink, src, ch, &msg) {
                Ok(None) => {}
                Ok(Some(user)) => {
                    handled += 1;
                    if user {
                        bump(&self.handled);
                        if let Some(c) = self.traffic.get(src) {
                            c.received[ch as usize].bump();
                        }
                    }
                }
                Err(()) => sink.dropped(),
            }
            self.transport.borrow_mut().recycle(src, msg);
        }
        Some(handled)
    }

    fn sendable(
        &self,
        dest: usize,
        _ch: Channel,
        class: Class,
        nargs: usize,
        payload_len: usize,
    ) -> bool {
        let len = frame::encoded_len(class, nargs, payload_len);
        self.transport.borrow().would_accept(dest, len)
    }

    fn pending(&self) -> bool {
        self.inbox.iter().any(|q| !q.borrow().is_empty())
    }

    fn flush(&self) {
        self.flush_at(self.now());
    }

    fn max_payload(&self, class: Class) -> usize {
        match class {
            Class::Medium => WHOLE_MAX,
            // Larger longs travel in parts (the segment bounds them).
            Class::Long => usize::MAX,
            Class::Short | Class::System => 0,
        }
    }
}
