//! Running handlers: the nesting scope, the decoding of a frame or a network message into a
//! [`Message`], and its delivery.

use super::super::handler::{Message, MessageClass, ReplyToken};
use super::super::net_frame;
use super::{Engine, REMOTE};
use crate::error::Result;
use crate::transport::shm::frame::{FrameKind, HeaderWord};
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
pub(super) struct HandlerScope<'a> {
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

/// Words between the header and the arguments.
#[inline(always)]
pub(super) fn extra_words(kind: FrameKind) -> usize {
    match kind {
        FrameKind::Short | FrameKind::System | FrameKind::Skip => 0,
        FrameKind::MediumInline | FrameKind::MediumPooled => 1,
        FrameKind::Long => 2,
    }
}

impl Engine {
    /// Runs the handler of one network message; `Ok(true)` for a user handler, `Ok(false)`
    /// for a runtime message.
    pub(super) fn deliver_net(&self, src: usize, ch: Channel, bytes: &[u8]) -> Result<bool, ()> {
        let f = net_frame::decode(bytes).ok_or(())?;
        if f.ch != ch {
            return Err(());
        }
        let args = &f.args[..f.nargs];
        let (class, payload, offset): (MessageClass, &[u8], usize) = match f.kind {
            FrameKind::System if ch == Channel::Request => {
                return self.deliver_system(src, f.handler, args).map(|()| false)
            }
            FrameKind::Short => (MessageClass::Short, &[], 0),
            FrameKind::MediumInline => (MessageClass::Medium, f.payload, 0),
            FrameKind::Long => {
                let seg = self.own();
                let offset = usize::try_from(f.offset).map_err(|_| ())?;
                if offset
                    .checked_add(f.payload.len())
                    .is_none_or(|e| e > seg.segment_len())
                {
                    return Err(());
                }
                // The sender could not see our segments: refused here, dropped and counted.
                seg.segment_table()
                    .admit_long(offset, f.payload.len())
                    .map_err(|_| ())?;
                // SAFETY: bounds checked against our own segment, which stays mapped. Writing
                // before the handler runs is the long message's contract; the handler then
                // sees the segment's copy, as on the shared-memory path.
                let placed = unsafe {
                    let dst = seg.segment_ptr().add(offset);
                    std::ptr::copy_nonoverlapping(f.payload.as_ptr(), dst, f.payload.len());
                    std::slice::from_raw_parts(dst, f.payload.len())
                };
                (MessageClass::Long, placed, offset)
            }
            _ => return Err(()),
        };
        let msg = Message::new(src, args, class, payload, offset);
        let result = HandlerScope::enter(self).run(ch, f.handler, &msg, REMOTE);
        if result.is_ok() {
            self.stats.handled(ch, class);
        }
        result.map(|()| true)
    }

    /// Validates and runs one frame from local index `src` that the drain does not handle
    /// itself (any kind but a one-slot short and a skip), its handler in `scope`. `Err(())`
    /// means it was dropped.
    #[inline(never)]
    pub(super) fn deliver(
        &self,
        scope: &HandlerScope<'_>,
        src: usize,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) -> Result<(), ()> {
        let src_rank = self.local_ranks[src];
        let nargs = h.nargs();
        let kind = h.kind();
        let frame_bytes = h.nslots() as usize * SLOT_BYTES;
        let nextra = extra_words(kind);
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
        let (class, payload, offset): (MessageClass, &[u8], usize) = match kind {
            // A short frame of more than one slot (8 or more arguments).
            FrameKind::Short => (MessageClass::Short, &[][..], 0),
            FrameKind::Skip => unreachable!("the drain retires skips itself"),
            FrameKind::System if ch == Channel::Request => {
                return self.deliver_system(src_rank, h.handler(), args)
            }
            FrameKind::System => return Err(()),
            FrameKind::MediumInline => {
                let len = w1 as usize;
                // `words * 8 <= frame_bytes` was checked above; no overflow here.
                if len > frame_bytes - words * 8 {
                    return Err(());
                }
                // SAFETY: checked above that the payload lies inside the frame's slots.
                let p = unsafe { std::slice::from_raw_parts(frame.add(words).cast::<u8>(), len) };
                (MessageClass::Medium, p, 0)
            }
            FrameKind::MediumPooled => {
                let len = (w1 & 0xffff_ffff) as usize;
                let idx = (w1 >> 32) as usize;
                if idx >= self.pool_bufs {
                    return Err(());
                }
                _pooled = Some(PooledBuffer {
                    flags: self.regions[src].pool_flags(),
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
                let p =
                    unsafe { std::slice::from_raw_parts(self.regions[src].pool_buf(ch, idx), len) };
                (MessageClass::Medium, p, 0)
            }
            FrameKind::Long => {
                let len = w1 as usize;
                let offset = w2 as usize;
                let seg = self.own();
                if offset
                    .checked_add(len)
                    .is_none_or(|e| e > seg.segment_len())
                {
                    return Err(());
                }
                // SAFETY: bounds checked against our own segment.
                let p = unsafe { std::slice::from_raw_parts(seg.segment_ptr().add(offset), len) };
                (MessageClass::Long, p, offset)
            }
        };
        let msg = Message::new(src_rank, args, class, payload, offset);
        let result = scope.run(ch, h.handler(), &msg, src as u32);
        if result.is_ok() {
            self.stats.handled(ch, class);
        }
        result
    }
}
