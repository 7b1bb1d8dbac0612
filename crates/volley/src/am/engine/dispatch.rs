//! Running handlers: the nesting scope, the decoding of a frame or a network message into a
//! [`Message`], and its delivery.

use super::super::frame_kind::FrameKind;
use super::super::handler::{Message, MessageClass, ReplyToken};
use super::super::net_frame;
use super::super::stats::bump;
use super::{Engine, REMOTE};
use crate::error::Result;
use crate::transport::shm::frame::HeaderWord;
use crate::transport::shm::link::FrameSink;
use crate::transport::shm::ring::SLOT_BYTES;
use crate::transport::shm::{PoolFlags, MEDIUM_MAX};
use crate::transport::Channel;

/// A pooled medium buffer being read; dropping it (after the handler, or when the handler
/// unwinds) returns the buffer to its sender.
pub(super) struct PooledBuffer<'a> {
    pub(super) flags: PoolFlags<'a>,
    pub(super) ch: Channel,
    pub(super) idx: usize,
    pub(super) bufs: usize,
}

impl Drop for PooledBuffer<'_> {
    fn drop(&mut self) {
        self.flags.release(self.ch, self.idx, self.bufs);
    }
}

/// Handlers delivered as one batch (the frames of one drain, or one network message) run at
/// one nesting depth: the depth and its statistic are settled once per batch, not once per
/// handler. Dropping the scope (also on unwind) restores the depth.
pub(crate) struct HandlerScope<'a> {
    pub(super) engine: &'a Engine,
    pub(super) depth: u64,
}

impl<'a> HandlerScope<'a> {
    #[inline(always)]
    pub(super) fn enter(engine: &'a Engine) -> Self {
        let depth = engine.depth.get() + 1;
        engine.depth.set(depth);
        if depth > engine.stats.max_nesting.get() {
            engine.stats.max_nesting.set(depth);
        }
        Self { engine, depth }
    }

    /// Runs handler `index` of channel `ch` for `msg`, which came from local index `route`
    /// (or through the network: [`REMOTE`]), where a reply goes. `Err(())`: no such handler.
    /// (The watchdog, when on, is in the handlers themselves: see `Watchdog::watch_requests`.)
    #[inline(always)]
    pub(super) fn run(
        &self,
        ch: Channel,
        index: u16,
        msg: &Message<'_>,
        route: u32,
    ) -> Result<(), ()> {
        let engine = self.engine;
        let found = match ch {
            Channel::Request => engine
                .requests
                .get(index as usize)
                .map(|f| f(msg, ReplyToken::new(engine, msg.src, route))),
            Channel::Reply => engine.replies.get(index as usize).map(|f| f(msg)),
        };
        found.ok_or(())
    }
}

impl Drop for HandlerScope<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        self.engine.depth.set(self.depth - 1);
    }
}

/// Where a delivered message's payload is, once its route has decoded it.
enum Body<'a> {
    /// No payload (a short or system message).
    None,
    /// A medium payload, in the frame or message, or in a pooled buffer of the sender.
    Medium(&'a [u8]),
    /// A long payload, already in this rank's segment at `offset`.
    Long { offset: usize, len: usize },
}

impl Engine {
    /// Runs the handler of one network message from `src`; `Ok(true)` for a user handler,
    /// `Ok(false)` for a runtime message, `Err(())` when it was dropped.
    pub(super) fn deliver_net(&self, src: usize, ch: Channel, bytes: &[u8]) -> Result<bool, ()> {
        let f = net_frame::decode(bytes).ok_or(())?;
        if f.ch != ch {
            return Err(());
        }
        let body = match f.kind {
            FrameKind::MediumInline => Body::Medium(f.payload),
            FrameKind::Long => {
                // The sender could not see our segments: the payload is placed here, and
                // refused here (dropped and counted) if it would land on a segment.
                let offset = usize::try_from(f.offset).map_err(|_| ())?;
                self.place_long(offset, f.payload)?;
                Body::Long {
                    offset,
                    len: f.payload.len(),
                }
            }
            _ => Body::None,
        };
        let scope = HandlerScope::enter(self);
        let user = f.kind != FrameKind::System;
        let args = &f.args[..f.nargs];
        self.deliver(&scope, src, REMOTE, ch, f.kind, f.handler, args, body)
            .map(|()| user)
    }

    /// Copies a long payload that came through the network into this rank's segment at
    /// `offset`, as the sender does on the shared-memory route: before the handler runs.
    fn place_long(&self, offset: usize, payload: &[u8]) -> Result<(), ()> {
        let seg = self.own();
        if offset
            .checked_add(payload.len())
            .is_none_or(|e| e > seg.segment_len())
        {
            return Err(());
        }
        self.admit_long(seg, offset, payload.len())
            .map_err(|_| ())?;
        // SAFETY: bounds checked against our own segment, which stays mapped.
        unsafe {
            let dst = seg.segment_ptr().add(offset);
            std::ptr::copy_nonoverlapping(payload.as_ptr(), dst, payload.len());
        }
        Ok(())
    }

    /// Validates and runs one ring frame from local index `src` that the drain does not handle
    /// itself (any kind but a one-slot short and a skip), its handler in `scope`. `Err(())`
    /// means it was dropped.
    #[inline(never)]
    pub(super) fn deliver_frame(
        &self,
        scope: &HandlerScope<'_>,
        src: usize,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) -> Result<(), ()> {
        let kind = FrameKind::from_bits(h.kind()).ok_or(())?;
        let nargs = h.nargs();
        let frame_bytes = h.nslots() as usize * SLOT_BYTES;
        let nextra = kind.extra_words();
        let words = 1 + nextra + nargs;
        if words * 8 > frame_bytes {
            return Err(());
        }
        // SAFETY: the frame's nslots slots are published to us and stay untouched by the sender
        // until we release them after the handler returns; `words` fits inside them.
        let (w1, w2, args) = unsafe {
            (
                if nextra > 0 { *frame.add(1) } else { 0 },
                if nextra > 1 { *frame.add(2) } else { 0 },
                std::slice::from_raw_parts(frame.add(1 + nextra), nargs),
            )
        };
        // A pooled buffer goes back to its sender after the handler, also if it unwinds.
        let mut _pooled = None;
        let body = match kind {
            FrameKind::Short | FrameKind::System => Body::None,
            FrameKind::MediumInline => {
                let len = w1 as usize;
                // `words * 8 <= frame_bytes` was checked above; no overflow here.
                if len > frame_bytes - words * 8 {
                    return Err(());
                }
                // SAFETY: checked above that the payload lies inside the frame's slots.
                Body::Medium(unsafe {
                    std::slice::from_raw_parts(frame.add(words).cast::<u8>(), len)
                })
            }
            FrameKind::MediumPooled => {
                let len = (w1 & 0xffff_ffff) as usize;
                let idx = (w1 >> 32) as usize;
                if idx >= self.pool_bufs {
                    return Err(());
                }
                let region = self.shm.region(src);
                _pooled = Some(PooledBuffer {
                    flags: region.pool_flags(),
                    ch,
                    idx,
                    bufs: self.pool_bufs,
                });
                if len > MEDIUM_MAX {
                    return Err(());
                }
                // SAFETY: the sender filled buffer idx before publishing the frame and will not
                // reuse it until `_pooled` releases its flag, when this function returns (after
                // the handler) or unwinds.
                Body::Medium(unsafe { std::slice::from_raw_parts(region.pool_buf(ch, idx), len) })
            }
            FrameKind::Long => Body::Long {
                offset: w2 as usize,
                len: w1 as usize,
            },
        };
        let src_rank = self.local_ranks[src];
        self.deliver(
            scope,
            src_rank,
            src as u32,
            ch,
            kind,
            h.handler(),
            args,
            body,
        )
    }

    /// Runs the handler of a message decoded by its route (a ring frame, a network message)
    /// from rank `src`, reached back through `route` (a local index, or [`REMOTE`]), in
    /// `scope`. One place for what every route shares: the system messages, the long
    /// payload's bounds, the handler call and its statistics. `Err(())`: dropped.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn deliver(
        &self,
        scope: &HandlerScope<'_>,
        src: usize,
        route: u32,
        ch: Channel,
        kind: FrameKind,
        handler: u16,
        args: &[u64],
        body: Body<'_>,
    ) -> Result<(), ()> {
        let (class, payload, offset): (MessageClass, &[u8], usize) = match body {
            Body::None if kind == FrameKind::System => {
                return match ch {
                    Channel::Request => self.deliver_system(src, handler, args),
                    Channel::Reply => Err(()),
                };
            }
            Body::None => (MessageClass::Short, &[], 0),
            Body::Medium(p) => (MessageClass::Medium, p, 0),
            Body::Long { offset, len } => {
                let seg = self.own();
                if offset
                    .checked_add(len)
                    .is_none_or(|e| e > seg.segment_len())
                {
                    return Err(());
                }
                // SAFETY: bounds checked against our own segment, which stays mapped.
                let p = unsafe { std::slice::from_raw_parts(seg.segment_ptr().add(offset), len) };
                (MessageClass::Long, p, offset)
            }
        };
        let msg = Message::new(src, args, class, payload, offset);
        let result = scope.run(ch, handler, &msg, route);
        if result.is_ok() {
            self.stats.handled(ch, class);
        }
        result
    }
}

/// A batch of frames from one sender: the handlers' scope, and the message of a one-slot
/// short frame, of which only the arguments change from frame to frame.
pub(crate) struct Batch<'a> {
    scope: HandlerScope<'a>,
    short: Message<'a>,
}

/// The rings hand their frames to the engine, which runs their handlers.
impl FrameSink for Engine {
    type Batch<'s> = Batch<'s>;

    #[inline(always)]
    fn begin_batch(&self, src_rank: usize) -> Batch<'_> {
        Batch {
            scope: HandlerScope::enter(self),
            short: Message::short(src_rank, &[]),
        }
    }

    #[inline(always)]
    fn run_words<'s>(
        &'s self,
        batch: &mut Batch<'s>,
        ch: Channel,
        src: u32,
        handler: u16,
        args: &'s [u64],
    ) -> bool {
        batch.short.args = args;
        let ran = batch.scope.run(ch, handler, &batch.short, src).is_ok();
        if ran {
            self.stats.handled(ch, MessageClass::Short);
        }
        ran
    }

    #[inline(always)]
    fn run_lone_words(
        &self,
        ch: Channel,
        src: u32,
        src_rank: usize,
        handler: u16,
        args: &[u64],
    ) -> bool {
        let msg = Message::short(src_rank, args);
        let scope = HandlerScope::enter(self);
        let ran = scope.run(ch, handler, &msg, src).is_ok();
        drop(scope);
        if ran {
            self.stats.handled(ch, MessageClass::Short);
        }
        ran
    }

    #[inline(always)]
    fn run_frame(
        &self,
        batch: &Batch<'_>,
        ch: Channel,
        src: usize,
        h: HeaderWord,
        frame: *const u64,
    ) -> Result<(), ()> {
        self.deliver_frame(&batch.scope, src, ch, h, frame)
    }

    #[inline(always)]
    fn dropped(&self) {
        bump(&self.stats.dropped);
    }

    fn corrupt(&self, src: usize, ch: Channel, word: u64) -> ! {
        self.corrupt_ring(src, ch, word)
    }
}
