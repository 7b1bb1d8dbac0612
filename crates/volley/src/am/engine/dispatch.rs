//! Running handlers: the nesting scope, and the delivery of what every transport hands the
//! engine (the engine is their [`Sink`]).

use super::super::handler::{Message, MessageClass, ReplyToken};
use super::super::stats::bump;
use super::Engine;
use crate::am::error::Result;
use crate::transport::contract::{Body, Class, Inbound, Sink};
use crate::transport::Channel;

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
    /// (or through the network: [`REMOTE`](crate::transport::contract::REMOTE)), where a
    /// reply goes. `Err(())`: no such handler. (The watchdog, when on, is in the handlers themselves: see `Watchdog::watch_requests`.)
    #[inline(always)]
    pub(super) fn run(
        &self,
        ch: Channel,
        index: u16,
        msg: &Message<'_>,
        route: u32,
    ) -> Result<(), ()> {
        let engine = self.engine;
        // Request handlers only (a reply handler cannot send or wait, so it stalls a rank
        // only by computing): relaxed, read by the hang reporter as which handler runs.
        if ch == Channel::Request {
            engine
                .running
                .store(u32::from(index), std::sync::atomic::Ordering::Relaxed);
        }
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

impl Engine {
    /// Runs the handler of `msg`, from any transport, in `scope`: the system messages, the
    /// long payload's bounds, the handler call and its statistics. `Err(())`: dropped.
    #[inline(always)]
    fn deliver(&self, scope: &HandlerScope<'_>, msg: Inbound<'_>) -> Result<(), ()> {
        let Inbound {
            src,
            route,
            ch,
            class,
            handler,
            args,
            body,
        } = msg;
        let (class, payload, offset): (MessageClass, &[u8], usize) = match (class, body) {
            (Class::System, _) => {
                return match ch {
                    Channel::Request => self.deliver_system(src, handler, args),
                    Channel::Reply => Err(()),
                };
            }
            (_, Body::None) => (MessageClass::Short, &[], 0),
            (_, Body::Medium(p)) => (MessageClass::Medium, p, 0),
            (_, Body::Long { offset, len }) => {
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

/// A batch of messages from one sender: the handlers' scope, and the message of a short,
/// of which only the arguments change from message to message.
pub(crate) struct Batch<'a> {
    scope: HandlerScope<'a>,
    short: Message<'a>,
}

/// Every transport hands the engine what it takes in; the engine runs the handlers.
impl Sink for Engine {
    type Batch<'s> = Batch<'s>;

    #[inline(always)]
    fn begin_batch(&self, src_rank: usize) -> Batch<'_> {
        Batch {
            scope: HandlerScope::enter(self),
            short: Message::short(src_rank, &[]),
        }
    }

    #[inline(always)]
    fn run_short<'s>(
        &'s self,
        batch: &mut Batch<'s>,
        ch: Channel,
        src: u32,
        handler: u16,
        args: &'s [u64],
    ) -> bool {
        batch.short.args = args;
        // Counted by the ring (see `Links::short_counts`).
        batch.scope.run(ch, handler, &batch.short, src).is_ok()
    }

    #[inline(always)]
    fn run_lone_short(
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
        // Counted by the ring (see `Links::short_counts`).
        ran
    }

    #[inline(always)]
    fn run(&self, batch: &Batch<'_>, msg: Inbound<'_>) -> Result<(), ()> {
        self.deliver(&batch.scope, msg)
    }

    #[inline(always)]
    fn dropped(&self) {
        bump(&self.stats.dropped);
    }

    fn corrupt(&self, src: usize, ch: Channel, word: u64) -> ! {
        self.corrupt_ring(src, ch, word)
    }
}
