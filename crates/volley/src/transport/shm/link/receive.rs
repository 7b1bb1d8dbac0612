//! Receiving: the poll over one channel's rings, a lone short served at once, a stream
//! drained in batches, frames retired with their credit (also when a handler unwinds), and
//! the decoding of frames into messages for the sink.

use super::super::frame::{
    FrameHeader, HeaderWord, KIND_LONG, KIND_MEDIUM_INLINE, KIND_MEDIUM_POOLED, KIND_SKIP,
    KIND_SYSTEM, KIND_WORDS,
};
use super::super::region::PAGE;
use super::super::ring::{Consumer, RingRef, CREDIT_HINT_WORD, SLOT_BYTES};
use super::super::{path_marks, PoolFlags, MEDIUM_MAX};
use super::{extra_words, pooled_fields, Links};
use crate::counter::Counter;
use crate::sync::{AtomicU64, Ordering};
use crate::transport::contract::{Body, Class, Inbound, Sink};
use crate::transport::Channel;
use std::cell::Cell;

/// Frames (skips and dropped ones included) one ring may retire in one poll before the poll
/// moves on (fairness).
pub(super) const DRAIN_BUDGET: usize = 32;
/// How many slots ahead of the head a drain prefetches. A line takes about half a floor round
/// trip (50-60 ns here) to cross, several frames' worth of handling: with 2 the one-way flood
/// waited on most lines; 8 and 12 measured alike and best (interleaved pairs of `volley bench
/// am`, BENCHMARKS.md), 4 and 6 in between.
pub(super) const PREFETCH_AHEAD: u64 = 8;
/// [`Links::deferred`] when no retirement waits.
pub(super) const NO_DEFERRED: u32 = u32::MAX;

/// A drain in progress: its consumer state, stored back into the ring when the drain ends, also
/// when a handler unwinds. The frame whose handler unwound is retired with the frames before
/// it: it was delivered, and running it again on the next poll would deliver it twice.
pub(super) struct Draining<'a> {
    pub(super) rx: &'a RxRing,
    pub(super) consumer: Consumer,
    /// The slots of the frame at the head while `deliver` runs its handler, otherwise 0 (a
    /// one-slot short is retired before its handler runs).
    pub(super) delivering: u64,
}

impl Drop for Draining<'_> {
    #[inline(always)]
    fn drop(&mut self) {
        if self.delivering != 0 {
            self.consumer.release(self.rx.ring, self.delivering);
        }
        self.rx.advance(self.consumer);
    }
}

/// The one-slot frame that [`Links::serve_short`] hands to its handler: if the handler
/// unwinds, dropping this moves the consumer past the frame, so that it does not run again.
/// After a handler that returns, the guard is forgotten and the frame is retired (with its
/// credit) by [`Links::retire_served`], now or, when the handler ended a wait, at the next
/// poll ([`Links::deferred`]). The consumer state is read only then, after the handler, so
/// that none of it lies on the path from the frame to the handler.
pub(super) struct Unwinding<'a> {
    pub(super) rx: &'a RxRing,
    /// The frame is padded ([`HeaderWord::padded`]).
    pub(super) padded: bool,
}

impl Drop for Unwinding<'_> {
    #[cold]
    fn drop(&mut self) {
        let mut consumer = self.rx.consumer.get();
        match self.padded {
            true => consumer.retire_padded(self.rx.ring),
            false => consumer.retire_one(),
        }
        self.rx.advance(consumer);
    }
}

/// One incoming ring and this rank's consumer state for it.
pub(super) struct RxRing {
    /// The frame at the consumer's head (its header word first) and the sequence the next
    /// frame carries: what the poll loop watches, kept ready so that checking a ring is three
    /// loads and a compare, and serving a one-slot frame needs no other address. The pointer
    /// is derived from the whole ring, so it covers the frame's slot (see `RingRef::frame_ptr`).
    pub(super) watch: Cell<(*mut u64, u64)>,
    /// Whether frames have been arriving in a stream: then each poll drains the ring in one
    /// batch instead of serving the head frame by itself first (see `poll_rings`).
    pub(super) streaming: Cell<bool>,
    /// The local index of the rank that sends into this ring.
    pub(super) src: u32,
    /// The global rank that sends into this ring (kept here: a drain reads it with the ring's
    /// state, not from a table with a bounds check).
    pub(super) src_rank: usize,
    pub(super) ring: RingRef<'static>,
    pub(super) consumer: Cell<Consumer>,
    /// Short messages from this ring whose handler ran (the statistics count them here, not
    /// in the engine), and other frames taken from it (readable by the hang reporter).
    pub(super) shorts: Counter,
    pub(super) others: Counter,
}

impl RxRing {
    /// The ring `ring`, which local index `src` (global rank `src_rank`) sends into, read from
    /// `consumer`'s position on.
    pub(super) fn new(
        ring: RingRef<'static>,
        consumer: Consumer,
        src: usize,
        src_rank: usize,
    ) -> Self {
        Self {
            watch: Cell::new(Self::watch_of(ring, consumer)),
            streaming: Cell::new(false),
            src: src as u32,
            src_rank,
            ring,
            consumer: Cell::new(consumer),
            shorts: Counter::default(),
            others: Counter::default(),
        }
    }

    /// What to watch for the next frame of `ring` read by `consumer`.
    #[inline(always)]
    pub(super) fn watch_of(ring: RingRef<'static>, consumer: Consumer) -> (*mut u64, u64) {
        (ring.frame_ptr(consumer.head()).cast(), consumer.next_seq())
    }

    /// The header word at the head, if it starts the next frame.
    #[inline(always)]
    pub(super) fn ready_word(&self) -> Option<u64> {
        let word = self.head_word();
        Consumer::starts_next(word, self.watch.get().1).then_some(word)
    }

    /// Whether a frame is waiting at the head.
    #[inline(always)]
    pub(super) fn ready(&self) -> bool {
        self.ready_word().is_some()
    }

    /// The word in the header slot at the head, whatever it is (see [`RxRing::ready_word`]
    /// for whether it starts the next frame).
    #[inline(always)]
    pub(super) fn head_word(&self) -> u64 {
        let (frame, _) = self.watch.get();
        // SAFETY: `frame` points at the header word of a slot of this ring (8-aligned: slots
        // are 64-aligned), which lives in the region mapped for as long as the engine; every
        // access to that word, ours and the producer's, is atomic.
        let header = unsafe { AtomicU64::from_ptr(frame) };
        // Acquire: pairs with the producer's release in `RingRef::publish`, so the frame's
        // other words, read after this, are the ones written before it was published.
        header.load(Ordering::Acquire)
    }

    /// Stores the consumer state after frames were retired.
    #[inline(always)]
    pub(super) fn advance(&self, consumer: Consumer) {
        self.consumer.set(consumer);
        self.watch.set(Self::watch_of(self.ring, consumer));
    }
}

/// What [`Links::serve_short`] did with the frame at a ring's head.
pub(super) enum HeadFrame {
    /// It is not a one-slot short: nothing was done (the drain takes it).
    Other,
    /// The frame was served; its handler ran (1) or it named none and was dropped (0).
    Ran(usize),
    /// A reply handler ran and the poll's `stop` ended it; the frame's retirement waits for
    /// the next poll ([`Links::deferred`]).
    Left,
}

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

impl Links {
    /// Validates and delivers one frame from local index `src` that the drain does not
    /// handle itself (any kind but a one-slot words frame and a skip), to `sink` in `batch`.
    /// `Err(())`: dropped.
    #[inline(never)]
    pub(super) fn deliver_frame<S: Sink>(
        &self,
        sink: &S,
        batch: &S::Batch<'_>,
        src: usize,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) -> Result<(), ()> {
        let kind = h.kind();
        let nargs = h.nargs();
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
        let (class, body) = match kind {
            KIND_WORDS => (Class::Short, Body::None),
            KIND_SYSTEM => (Class::System, Body::None),
            KIND_MEDIUM_INLINE => {
                let len = w1 as usize;
                // `words * 8 <= frame_bytes` was checked above; no overflow here.
                if len > frame_bytes - words * 8 {
                    return Err(());
                }
                // SAFETY: checked above that the payload lies inside the frame's slots.
                let p = unsafe { std::slice::from_raw_parts(frame.add(words).cast::<u8>(), len) };
                (Class::Medium, Body::Medium(p))
            }
            KIND_MEDIUM_POOLED => {
                let (len, at, idx) = pooled_fields(w1);
                if idx >= self.pool_bufs {
                    return Err(());
                }
                let region = &self.regions[src];
                _pooled = Some(PooledBuffer {
                    flags: region.pool_flags(),
                    ch,
                    idx,
                    bufs: self.pool_bufs,
                });
                if len > MEDIUM_MAX || at >= PAGE {
                    return Err(());
                }
                // SAFETY: the sender filled buffer idx from byte `at` on before publishing the
                // frame and will not reuse it until `_pooled` releases its flag, when this
                // function returns (after the handler) or unwinds; MEDIUM_MAX bytes follow
                // byte `at` < 4096 in the buffer.
                let p = unsafe { std::slice::from_raw_parts(region.pool_buf(ch, idx, at), len) };
                (Class::Medium, Body::Medium(p))
            }
            KIND_LONG => (
                Class::Long,
                Body::Long {
                    offset: w2 as usize,
                    len: w1 as usize,
                },
            ),
            _ => return Err(()),
        };
        let msg = Inbound {
            src: self.ranks[src],
            route: src as u32,
            ch,
            class,
            handler: h.handler(),
            args,
            body,
        };
        sink.run(batch, msg)
    }

    /// Whether a frame waits at the head of any ring.
    pub(super) fn has_frames(&self) -> bool {
        // A frame whose retirement a wait left for later is not waiting.
        self.retire_deferred();
        self.rx.iter().flatten().any(RxRing::ready)
    }

    /// Serves the rings of channel `ch` that have a frame at their head, handing each frame to
    /// `sink`; returns how many handlers ran. The readiness check is inlined and cheap; the
    /// delivery path is called only for a ring that has a frame, so an empty poll is a handful
    /// of loads. After each ring whose frames ran handlers, `stop` may end the scan there
    /// (`None`): a wait whose condition a reply handler just made true leaves at once; other
    /// polls pass `|| false`.
    #[inline(always)]
    pub(crate) fn poll_rings<S: Sink>(
        &self,
        ch: Channel,
        sink: &S,
        mut stop: impl FnMut() -> bool,
    ) -> Option<usize> {
        if ch == Channel::Reply {
            self.retire_deferred();
        }
        let mut rings = self.rx[ch as usize].iter();
        let mut handled = 0;
        // The scan is a loop of its own, so that the delivery path's state does not crowd
        // the registers of the loop that every empty poll runs; it goes on from the ring
        // after the one it found.
        while let Some((rx, word)) = rings.find_map(|rx| Some((rx, rx.ready_word()?))) {
            // A path starts here, where the frame was seen: what the poll does before it
            // reads the frame is on the path too.
            path_marks::mark(ch, path_marks::Point::Seen);
            // A lone short frame (a round trip's) is served at once; a stream goes to the
            // drain, whose set-up is paid once per batch.
            let first = match rx.streaming.get() {
                false => self.serve_short(sink, rx, word, ch, &mut stop),
                true => HeadFrame::Other,
            };
            // One call site for the drain, so that it is compiled once.
            let drain = match first {
                HeadFrame::Ran(n) => {
                    handled += n;
                    // A frame right behind the first: a stream has begun.
                    rx.ready()
                }
                HeadFrame::Left => return None,
                HeadFrame::Other => true,
            };
            if drain {
                let n = self.drain(sink, rx, ch);
                // The stream goes on while drains find more than one frame.
                rx.streaming
                    .set(matches!(first, HeadFrame::Ran(_)) || n > 1);
                handled += n;
                if n > 0 && stop() {
                    return None;
                }
            }
        }
        Some(handled)
    }

    /// After the handler of a padded frame `h` at `frame` that came through `rx` on channel
    /// `ch` (before the frame is retired): fresh credit for the ring this rank answers
    /// through, the one it sends into on the other channel to the same rank, so that its next
    /// frame there can be padded too. From the frame's credit hint if it carries one (see
    /// `ring`, "Credit hints"), otherwise from that ring's control line: either way off the
    /// path from a frame to its answer.
    #[inline(always)]
    pub(super) fn credit_after_padded(
        &self,
        rx: &RxRing,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) {
        let tx = &self.tx[rx.src as usize].rings[ch.other() as usize];
        let mut producer = tx.producer.get();
        if h.carries_hint() {
            // SAFETY: the frame's slot is published to us and not yet retired, so its sender
            // leaves it untouched; its last word is the hint (`carries_hint`).
            producer.take_hint(tx.ring, unsafe { frame.add(CREDIT_HINT_WORD).read() });
        } else {
            producer.refresh(tx.ring);
        }
        tx.producer.set(producer);
    }

    /// [`Links::credit_after_padded`] out of line, for the drain: a padded frame (a round
    /// trip's) rarely meets a drain, and the drain's loop keeps its registers for streams.
    #[cold]
    #[inline(never)]
    pub(super) fn credit_after_padded_in_drain(
        &self,
        rx: &RxRing,
        ch: Channel,
        h: HeaderWord,
        frame: *const u64,
    ) {
        self.credit_after_padded(rx, ch, h, frame);
    }

    /// Finishes the retirement that a wait left for later (see [`Links::deferred`]): before
    /// anything reads the reply rings' consumer state again.
    #[inline(always)]
    pub(super) fn retire_deferred(&self) {
        let deferred = self.deferred.replace(NO_DEFERRED);
        if deferred != NO_DEFERRED {
            let rx = &self.rx[Channel::Reply as usize][deferred as usize];
            self.retire_served(
                rx,
                Channel::Reply,
                HeaderWord::checked_before(rx.head_word()),
            );
        }
    }

    /// Moves the consumer of `rx` (of channel `ch`) past the one-slot short frame at its head,
    /// whose handler has run and whose header is `h` (and past its padding if it is padded),
    /// takes the credit hint it carries, and returns credit if a batch has accumulated.
    #[inline(always)]
    pub(super) fn retire_served(&self, rx: &RxRing, ch: Channel, h: HeaderWord) {
        let ring = rx.ring;
        let mut consumer = rx.consumer.get();
        if h.padded() {
            self.credit_after_padded(rx, ch, h, rx.watch.get().0);
            consumer.retire_padded(ring);
        } else {
            consumer.retire_one();
            // A receiver that keeps up with a stream takes most frames here, one per poll:
            // fetching a later slot now keeps several cache misses in flight, as the drain
            // does.
            ring.prefetch(consumer.head() + PREFETCH_AHEAD - 1);
        }
        consumer.settle(ring);
        rx.advance(consumer);
    }

    /// The common case of a ring with a frame at its head: a short frame in one slot, served
    /// without the drain's set-up, which would otherwise lie on a round trip's path. `word`
    /// is the frame's header, read by the poll. After a reply handler ran, `stop` may end the
    /// poll at once ([`HeadFrame::Left`]), before the frame is retired (see [`Links::deferred`]).
    #[inline(always)]
    pub(super) fn serve_short<S: Sink>(
        &self,
        sink: &S,
        rx: &RxRing,
        word: u64,
        ch: Channel,
        stop: &mut impl FnMut() -> bool,
    ) -> HeadFrame {
        let Some(h) = HeaderWord::one_slot_short(word, self.key) else {
            return HeadFrame::Other;
        };
        let (frame, _) = rx.watch.get();
        // If the handler unwinds, the guard moves the consumer past its frame. Otherwise the
        // consumer moves after the handler, off the path from this frame to the answer its
        // handler sends (nothing the handler runs touches this ring's consumer: see `drain`).
        let unwinding = Unwinding {
            rx,
            padded: h.padded(),
        };
        // SAFETY: `frame` points at the frame's slot (see `RxRing::watch`), published to us,
        // which the sender leaves untouched until its credit returns; that happens only after
        // the handler (when the frame is retired, or in a later drain if the handler unwinds).
        // A one-slot short's arguments fit in its slot.
        let args = unsafe { std::slice::from_raw_parts(frame.add(1).cast_const(), h.nargs()) };
        #[cfg(debug_assertions)]
        let entry = rx.consumer.get().head();
        self.lone.set(true);
        let ran = sink.run_lone_short(ch, rx.src, rx.src_rank, h.handler(), args);
        #[cfg(debug_assertions)]
        assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
        std::mem::forget(unwinding);
        if !ran {
            sink.dropped();
            self.retire_served(rx, ch, h);
            return HeadFrame::Ran(0);
        }
        rx.shorts.bump();
        if ch == Channel::Reply {
            // Marked for retirement before `stop` runs: a condition that polls retires it
            // there, instead of running its handler again.
            self.deferred.set(rx.src);
            if stop() {
                return HeadFrame::Left;
            }
            // Ours, or one that a poll inside `stop` left (ours was retired by that poll).
            self.retire_deferred();
        } else {
            self.retire_served(rx, ch, h);
        }
        HeadFrame::Ran(1)
    }

    /// Retires up to DRAIN_BUDGET frames from the ring `rx`, running their handlers; returns
    /// how many handlers ran.
    #[inline(always)]
    pub(super) fn drain<S: Sink>(&self, sink: &S, rx: &RxRing, ch: Channel) -> usize {
        let ring = rx.ring;
        let src = rx.src as usize;
        // Nothing that runs below touches this ring's consumer: a request handler's nested
        // polls serve reply rings only, reply handlers cannot poll at all, and no handler can
        // wait or sleep (which returns credit). So the state is stored back once, at the end.
        let mut draining = Draining {
            rx,
            consumer: rx.consumer.get(),
            delivering: 0,
        };
        #[cfg(debug_assertions)]
        let entry = draining.consumer.head();
        let (key, src_rank) = (self.key, rx.src_rank);
        let mut batch = sink.begin_batch(src_rank);
        // Frames that come in a batch are a stream's: what their handlers send is not padded.
        self.lone.set(false);
        let mut handled = 0;
        for _ in 0..DRAIN_BUDGET {
            let Some(word) = draining.consumer.peek(ring) else {
                break;
            };
            let head = draining.consumer.head();
            // Start fetching a later slot now, so a stream of frames arrives with several
            // cache misses in flight instead of one at a time.
            ring.prefetch(head + PREFETCH_AHEAD);
            if let Some(h) = HeaderWord::one_slot_unpadded_short(word, key) {
                // The common case, kept short: a stream's frame (a padded one, a round
                // trip's, takes the general path below). A slot always lies within the ring,
                // and the header and up to 7 arguments fit in it.
                let frame = ring.frame_ptr(head).cast::<u64>().cast_const();
                // SAFETY: the frame's slot is published to us and stays untouched by the
                // sender until its credit returns, which happens only after the handler (at
                // `settle`, or in a later drain if the handler unwinds); the arguments fit.
                let args = unsafe { std::slice::from_raw_parts(frame.add(1), h.nargs()) };
                // Retired now, so that it stays retired if its handler unwinds; the slot
                // returns to the sender only at `settle`, after the handler.
                draining.consumer.retire_one();
                if sink.run_short(&mut batch, ch, src as u32, h.handler(), args) {
                    handled += 1;
                    rx.shorts.bump();
                } else {
                    sink.dropped();
                }
                #[cfg(debug_assertions)]
                assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
                draining.consumer.settle(ring);
                continue;
            }
            // The length decides what we read and what we zero: it must be a legal frame
            // length that does not run past the end of the ring, whatever else is wrong.
            let mut claimed = FrameHeader::claimed_slots(word);
            if !ring.fits(head, claimed) {
                sink.corrupt(src, ch, word);
            }
            match HeaderWord::check(word, key) {
                Ok(h) if h.is(KIND_SKIP) => {
                    if claimed != ring.slots_to_end(head) || h.padded() {
                        sink.corrupt(src, ch, word);
                    }
                }
                Ok(h) => {
                    let frame = ring.frame_ptr(head).cast::<u64>().cast_const();
                    // Its padding too (trusted only from a header whose check passed).
                    if h.padded() {
                        claimed = ring.quarter_end(head + claimed - 1) - head;
                    }
                    draining.delivering = claimed;
                    if !h.is(KIND_SYSTEM) {
                        rx.others.bump();
                    }
                    let delivered = self.deliver_frame(sink, &batch, src, ch, h, frame);
                    draining.delivering = 0;
                    if h.padded() {
                        self.credit_after_padded_in_drain(rx, ch, h, frame);
                    }
                    if delivered.is_err() {
                        sink.dropped();
                    } else {
                        handled += 1;
                    }
                }
                Err(_) => {
                    // A bad check byte: corrupt, or not from this job. Drop it; its length
                    // was checked above, so the ring stays in step if only other bits are
                    // damaged.
                    sink.dropped();
                }
            }
            #[cfg(debug_assertions)]
            assert_eq!(rx.consumer.get().head(), entry, "a handler moved this ring");
            draining.consumer.release(ring, claimed);
        }
        handled
    }

    /// Flushes the credit of every incoming ring (before sleeping or exiting).
    pub(crate) fn flush_credit(&self) {
        self.retire_deferred();
        for src in 0..self.len() {
            for ch in [Channel::Request, Channel::Reply] {
                let rx = &self.rx[ch as usize][src];
                let mut c = rx.consumer.get();
                c.flush(rx.ring);
                rx.consumer.set(c);
            }
        }
    }
}
