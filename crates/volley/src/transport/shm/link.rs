//! The rings between this rank and each rank of its node (itself included: the loopback path),
//! and the protocol that keeps them safe, in one place: one producer and one consumer per
//! ring, credit, skips at the end of the ring, padded frames and credit hints, retirement
//! (also when a handler unwinds), the budget of a drain, and the doorbell of a receiver that
//! may sleep.
//!
//! The layer above sees the [`Transport`] contract. Sending frames a message (a short's words
//! in one slot, a medium's payload inline or in one of this rank's medium buffers, a long's
//! payload copied into the target's segment first), reserves room for it (waiting through a
//! callback while the ring is full) and publishes it. Polling takes in the frames at the
//! heads of one channel's rings and hands each to a [`Sink`], which runs its handler while
//! the frame is still in the ring; the frame is retired after that, whatever the handler did.
//!
//! Ring state is indexed by *local* index (position among the node's ranks). Everything here
//! is used by one thread at a time (the engine's owner), hence `Cell`s.

use super::doorbell::Ordering as BellOrder;
use super::frame::{
    FrameHeader, FrameKey, HeaderWord, KIND_LONG, KIND_MEDIUM_INLINE, KIND_MEDIUM_POOLED,
    KIND_SKIP, KIND_SYSTEM, KIND_WORDS, PADDED,
};
use super::path_marks;
use super::ring::{
    Consumer, Producer, RingRef, CREDIT_HINT_WORD, MAX_FRAME_SLOTS, MAX_HINTED_ARGS, SLOT_BYTES,
};
use super::wake_fd::WakeFd;
use super::{PoolFlags, Region, MEDIUM_MAX};
use crate::sync::{AtomicU64, Ordering};
use crate::transport::contract::{
    Body, Class, Inbound, LongGuard, Outbound, SendRefused, Sink, Transport,
};
use crate::transport::Channel;
use std::cell::Cell;
use std::sync::Arc;

/// Frames (skips and dropped ones included) one ring may retire in one poll before the poll
/// moves on (fairness).
const DRAIN_BUDGET: usize = 32;
/// How many slots ahead of the head a drain prefetches. A line takes about half a floor round
/// trip (50-60 ns here) to cross, several frames' worth of handling: with 2 the one-way flood
/// waited on most lines; 8 and 12 measured alike and best (interleaved pairs of `volley bench
/// am`, BENCHMARKS.md), 4 and 6 in between.
const PREFETCH_AHEAD: u64 = 8;
/// [`Links::deferred`] when no retirement waits.
const NO_DEFERRED: u32 = u32::MAX;

/// A frame to send, as its header will describe it (less its position in the ring). Kept in
/// full-width fields until the header is encoded, so that what the sender knows about them
/// (a short's slot count, say) carries through to the checks below.
#[derive(Debug, Clone, Copy)]
struct Outgoing {
    /// One of the `KIND_` constants.
    kind: u8,
    /// The handler index (or system operation).
    handler: u16,
    /// Argument words after the header (and its extra words).
    nargs: usize,
    /// Slots the frame occupies, 1 to [`MAX_FRAME_SLOTS`].
    nslots: u64,
}

impl Outgoing {
    #[inline(always)]
    fn header(self) -> FrameHeader {
        FrameHeader {
            handler: self.handler,
            nargs: self.nargs as u8,
            kind: self.kind,
            nslots: self.nslots as u8,
        }
    }
}

/// The words of a frame after its header, which the layer above writes into the slots
/// [`Links::send`] reserved for it.
trait FrameBody {
    /// Writes every word of the frame but the header (word 0) at `frame`, within the frame's
    /// `nslots` slots as its header says. The receiver reads nothing before the header is
    /// published.
    fn write(self, frame: *mut u64);
}

/// A rank on this node as a destination: the rings this rank sends into, by channel, and
/// whether its doorbell must be rung after a send (it may sleep: block mode or a progress
/// thread) with how to order the ring after the frame. One entry per local index, so a send
/// finds all of it with one bounds check.
pub(crate) struct TxPeer {
    rings: [TxRing; 2],
    bell: Option<BellOrder>,
}

/// One outgoing ring and this rank's producer state for it.
struct TxRing {
    ring: RingRef<'static>,
    producer: Cell<Producer>,
}

impl TxRing {
    /// The common case of [`TxRing::reserve`], inline: `None` when the cached credit runs
    /// out or a skip is needed (the caller then calls [`TxRing::reserve`]).
    #[inline(always)]
    fn reserve_within(&self, nslots: u64) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_within(nslots)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// A one-slot reservation padded to its quarter (see [`Producer::reserve_padded`]).
    #[inline(always)]
    fn reserve_padded(&self) -> Option<u64> {
        let mut producer = self.producer.get();
        let pos = producer.reserve_padded(self.ring)?;
        self.producer.set(producer);
        Some(pos)
    }

    /// Reserves `nslots` slots (see [`Producer::reserve`]); `None` while the ring is full.
    #[inline(always)]
    fn reserve(&self, nslots: u64, key: FrameKey) -> Option<u64> {
        let mut producer = self.producer.get();
        let reserved = producer.reserve(self.ring, nslots, key);
        self.producer.set(producer);
        reserved
    }
}

/// A drain in progress: its consumer state, stored back into the ring when the drain ends, also
/// when a handler unwinds. The frame whose handler unwound is retired with the frames before
/// it: it was delivered, and running it again on the next poll would deliver it twice.
struct Draining<'a> {
    rx: &'a RxRing,
    consumer: Consumer,
    /// The slots of the frame at the head while `deliver` runs its handler, otherwise 0 (a
    /// one-slot short is retired before its handler runs).
    delivering: u64,
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
struct Unwinding<'a> {
    rx: &'a RxRing,
    /// The frame is padded ([`HeaderWord::padded`]).
    padded: bool,
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
struct RxRing {
    /// The frame at the consumer's head (its header word first) and the sequence the next
    /// frame carries: what the poll loop watches, kept ready so that checking a ring is three
    /// loads and a compare, and serving a one-slot frame needs no other address. The pointer
    /// is derived from the whole ring, so it covers the frame's slot (see `RingRef::frame_ptr`).
    watch: Cell<(*mut u64, u64)>,
    /// Whether frames have been arriving in a stream: then each poll drains the ring in one
    /// batch instead of serving the head frame by itself first (see `poll_rings`).
    streaming: Cell<bool>,
    /// The local index of the rank that sends into this ring.
    src: u32,
    /// The global rank that sends into this ring (kept here: a drain reads it with the ring's
    /// state, not from a table with a bounds check).
    src_rank: usize,
    ring: RingRef<'static>,
    consumer: Cell<Consumer>,
}

impl RxRing {
    /// The ring `ring`, which local index `src` (global rank `src_rank`) sends into, read from
    /// `consumer`'s position on.
    fn new(ring: RingRef<'static>, consumer: Consumer, src: usize, src_rank: usize) -> Self {
        Self {
            watch: Cell::new(Self::watch_of(ring, consumer)),
            streaming: Cell::new(false),
            src: src as u32,
            src_rank,
            ring,
            consumer: Cell::new(consumer),
        }
    }

    /// What to watch for the next frame of `ring` read by `consumer`.
    #[inline(always)]
    fn watch_of(ring: RingRef<'static>, consumer: Consumer) -> (*mut u64, u64) {
        (ring.frame_ptr(consumer.head()).cast(), consumer.next_seq())
    }

    /// The header word at the head, if it starts the next frame.
    #[inline(always)]
    fn ready_word(&self) -> Option<u64> {
        let word = self.head_word();
        Consumer::starts_next(word, self.watch.get().1).then_some(word)
    }

    /// Whether a frame is waiting at the head.
    #[inline(always)]
    fn ready(&self) -> bool {
        self.ready_word().is_some()
    }

    /// The word in the header slot at the head, whatever it is (see [`RxRing::ready_word`]
    /// for whether it starts the next frame).
    #[inline(always)]
    fn head_word(&self) -> u64 {
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
    fn advance(&self, consumer: Consumer) {
        self.consumer.set(consumer);
        self.watch.set(Self::watch_of(self.ring, consumer));
    }
}

/// What [`Links::serve_short`] did with the frame at a ring's head.
enum HeadFrame {
    /// It is not a one-slot short: nothing was done (the drain takes it).
    Other,
    /// The frame was served; its handler ran (1) or it named none and was dropped (0).
    Ran(usize),
    /// A reply handler ran and the poll's `stop` ended it; the frame's retirement waits for
    /// the next poll ([`Links::deferred`]).
    Left,
}

/// The rings between this rank and the ranks of its node, with this rank's producer and
/// consumer state for each.
pub(crate) struct Links {
    /// The job key as frame headers are checked with it.
    key: FrameKey,
    /// This rank's local index.
    me: usize,
    /// What this rank sends through to each rank on this node, by local index.
    tx: Vec<TxPeer>,
    /// This rank's incoming rings with their consumer state, `[channel][src local]`: the poll
    /// loop walks one channel's rings in order.
    rx: [Vec<RxRing>; 2],
    /// Regions by local index. Declared after the ring views that point into them.
    regions: Vec<Region>,
    /// Eventfds by local index, written by a ring that finds that rank asleep in `poll`. Not
    /// in `tx`, whose entries every send indexes, so that those stay small.
    wakes: Vec<WakeFd>,
    /// The last frame this rank handled came alone ([`Links::serve_short`], not a drain), and
    /// no one-slot frame has been sent since: the next one may be padded (see `ring`,
    /// "Padded frames"). A round trip's request and reply are such sends; a stream's are not.
    lone: Cell<bool>,
    /// The reply ring (by local index of its sender) whose head frame ran its handler and
    /// ended a wait, but whose consumer has not yet moved past it: the wait left first, so
    /// that the requester's next request goes out sooner, and the next look at the reply
    /// rings finishes the retirement (see [`Links::retire_deferred`]). [`NO_DEFERRED`]: none.
    deferred: Cell<u32>,
    /// Medium buffers per channel in each region.
    pool_bufs: usize,
    /// Where the search for a free medium buffer of each channel starts.
    pool_next: [Cell<usize>; 2],
    /// The global rank of each local index.
    ranks: Vec<usize>,
    /// What refuses a long message on a segment, if the layer above installed one.
    guard: Option<Arc<dyn LongGuard>>,
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links")
            .field("me", &self.me)
            .field("ranks", &self.regions.len())
            .finish_non_exhaustive()
    }
}

impl Links {
    /// The links of the rank at local index `me` to the ranks whose `regions` (by local
    /// index, this rank's own included) are mapped here. `ranks[l]` is the global rank of
    /// local index `l`, `bells[l]` whether and how that rank's doorbell is rung after a send,
    /// `wakes[l]` its eventfd; `key` the job key.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        me: usize,
        key: u64,
        regions: Vec<Region>,
        ranks: &[usize],
        bells: Vec<Option<BellOrder>>,
        wakes: Vec<WakeFd>,
        guard: Option<Arc<dyn LongGuard>>,
    ) -> Self {
        let n = regions.len();
        assert!(me < n && ranks.len() == n && bells.len() == n && wakes.len() == n);
        let slots = regions[me].layout().ring_slots;
        let pool_bufs = regions[me].layout().pool_bufs;
        let view = |r: RingRef<'_>| -> RingRef<'static> {
            // SAFETY: a RingRef points into a region's mapping, whose address never changes
            // while the Region is alive (moving the Region value does not move the mapping).
            // The regions live in this value next to the views and are unmapped only when it
            // is dropped, after which no view is used.
            unsafe { std::mem::transmute::<RingRef<'_>, RingRef<'static>>(r) }
        };
        let tx = regions
            .iter()
            .zip(bells)
            .map(|(region, bell)| TxPeer {
                rings: [Channel::Request, Channel::Reply].map(|ch| TxRing {
                    ring: view(region.ring(me, ch)),
                    producer: Cell::new(Producer::new(slots)),
                }),
                bell,
            })
            .collect();
        let rx = [Channel::Request, Channel::Reply].map(|ch| {
            (0..n)
                .map(|s| {
                    let ring = view(regions[me].ring(s, ch));
                    RxRing::new(ring, Consumer::new(slots), s, ranks[s])
                })
                .collect()
        });
        Self {
            key: FrameKey::new(key),
            me,
            tx,
            rx,
            regions,
            wakes,
            lone: Cell::new(false),
            deferred: Cell::new(NO_DEFERRED),
            pool_bufs,
            pool_next: Default::default(),
            ranks: ranks.to_vec(),
            guard,
        }
    }

    /// How many ranks the links reach (this one included).
    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.regions.len()
    }

    /// The region of the rank at local index `l`.
    #[inline(always)]
    pub(crate) fn region(&self, l: usize) -> &Region {
        &self.regions[l]
    }

    /// The region of the rank at local index `l`, if there is one.
    #[inline(always)]
    pub(crate) fn get_region(&self, l: usize) -> Option<&Region> {
        self.regions.get(l)
    }

    /// This rank's eventfd, which its senders write when it sleeps in `poll`.
    pub(crate) fn own_wake(&self) -> &WakeFd {
        &self.wakes[self.me]
    }

    /// The job key frames are sealed with.
    #[cfg(test)]
    pub(crate) fn key(&self) -> FrameKey {
        self.key
    }

    /// Sends the frame `out` with `body` on channel `ch` to `peer`: reserves its slots, has
    /// `body` write the words after the header, publishes the header and rings the receiver's
    /// doorbell if it may sleep. While the ring has no room, calls `blocked` (see
    /// [`Transport::send`]).
    #[inline(always)]
    fn send_frame(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        out: Outgoing,
        body: impl FrameBody,
        blocked: impl FnMut(u32),
    ) {
        let dest = peer.index;
        let peer = peer.tx;
        let nslots = out.nslots;
        debug_assert!((1..=MAX_FRAME_SLOTS).contains(&nslots));
        let tx = &peer.rings[ch as usize];
        let ring = tx.ring;
        // The first one-slot frame after a frame that came alone (a round trip's turn) is
        // padded if its receiver has caught up: see `ring`, "Padded frames".
        let padded = nslots == 1 && self.lone.get();
        let padded_at = match padded {
            true => {
                self.lone.set(false);
                tx.reserve_padded()
            }
            false => None,
        };
        // Two ways to publish, so that a stream's sends carry no padding flag to merge.
        match padded_at {
            Some(pos) => {
                let frame = ring.frame_ptr(pos).cast::<u64>();
                body.write(frame);
                // A padded words frame hands back the credit of the ring its answer will come
                // through (see `ring`, "Credit hints"), so that the answer can be padded too.
                if out.kind == KIND_WORDS && out.nargs <= MAX_HINTED_ARGS {
                    let rings = &self.rx[ch.other() as usize];
                    debug_assert!(dest < rings.len());
                    // SAFETY: `dest` is a local index (it found `peer` in `tx`), and there is
                    // a ring from every local index on each channel.
                    let consumed = unsafe { rings.get_unchecked(dest) }.consumer.get().head();
                    // SAFETY: the frame's one reserved slot holds the header and at most
                    // MAX_HINTED_ARGS arguments, so its last word is ours and unused; the
                    // receiver reads it only after acquiring the header published below.
                    unsafe { frame.add(CREDIT_HINT_WORD).write(consumed) };
                }
                ring.publish(pos, out.header().encode_with(pos, self.key, PADDED));
            }
            None => {
                let pos = match tx.reserve_within(nslots) {
                    Some(pos) => pos,
                    None => self.reserve_blocked(dest, ch, nslots, blocked),
                };
                body.write(ring.frame_ptr(pos).cast::<u64>());
                ring.publish(pos, out.header().encode(pos, self.key));
            }
        }
        if out.kind == KIND_WORDS {
            path_marks::mark(ch, path_marks::Point::Published);
        }
        if let Some(order) = peer.bell {
            self.regions[dest]
                .doorbell()
                .ring_if_asleep(order, &self.wakes[dest]);
        }
    }

    /// The rest of a reservation whose common case (in [`Links::send_frame`]) failed: a skip
    /// at the end of the ring, or fresh credit read from the receiver; while there is none,
    /// `blocked` lets the receiver catch up. Out of line, so a send's common case is two
    /// compares.
    #[cold]
    #[inline(never)]
    fn reserve_blocked(
        &self,
        dest: usize,
        ch: Channel,
        nslots: u64,
        mut blocked: impl FnMut(u32),
    ) -> u64 {
        let tx = &self.tx[dest].rings[ch as usize];
        let mut attempt = 0;
        loop {
            // The state is re-read each time: nothing depends on what ran meanwhile.
            if let Some(pos) = tx.reserve(nslots, self.key) {
                return pos;
            }
            blocked(attempt);
            attempt += 1;
        }
    }

    /// Claims one of this rank's medium buffers of channel `ch`; while all are in use (their
    /// receivers still run the handlers), `blocked` lets them catch up.
    fn claim_medium_buffer(&self, ch: Channel, mut blocked: impl FnMut(u32)) -> usize {
        let flags = self.regions[self.me].pool_flags();
        let mut attempt = 0;
        loop {
            let start = self.pool_next[ch as usize].get();
            if let Some(idx) = flags.claim(ch, start, self.pool_bufs) {
                self.pool_next[ch as usize].set(idx + 1);
                return idx;
            }
            blocked(attempt);
            attempt += 1;
        }
    }

    /// Validates and delivers one frame from local index `src` that the drain does not
    /// handle itself (any kind but a one-slot words frame and a skip), to `sink` in `batch`.
    /// `Err(())`: dropped.
    #[inline(never)]
    fn deliver_frame<S: Sink>(
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
                let len = (w1 & 0xffff_ffff) as usize;
                let idx = (w1 >> 32) as usize;
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
                if len > MEDIUM_MAX {
                    return Err(());
                }
                // SAFETY: the sender filled buffer idx before publishing the frame and will not
                // reuse it until `_pooled` releases its flag, when this function returns (after
                // the handler) or unwinds.
                let p = unsafe { std::slice::from_raw_parts(region.pool_buf(ch, idx), len) };
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
    fn has_frames(&self) -> bool {
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
    fn credit_after_padded(&self, rx: &RxRing, ch: Channel, h: HeaderWord, frame: *const u64) {
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
    fn credit_after_padded_in_drain(
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
    fn retire_deferred(&self) {
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
    fn retire_served(&self, rx: &RxRing, ch: Channel, h: HeaderWord) {
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
    fn serve_short<S: Sink>(
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
    fn drain<S: Sink>(&self, sink: &S, rx: &RxRing, ch: Channel) -> usize {
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

    /// Test hook: publishes a raw frame header (and words) into our own loopback ring.
    #[cfg(test)]
    pub(crate) fn inject_raw(&self, ch: Channel, header: impl FnOnce(u64) -> u64, words: &[u64]) {
        let tx = &self.tx[self.me].rings[ch as usize];
        let ring = tx.ring;
        let pos = tx.reserve(1, self.key).expect("room in the loopback ring");
        for (i, w) in words.iter().enumerate() {
            ring.write_word(pos, i + 1, *w);
        }
        ring.publish(pos, header(pos));
    }

    /// Test hook: where this rank's next frame into its own loopback ring of channel `ch`
    /// would start.
    #[cfg(test)]
    pub(crate) fn loopback_tail(&self, ch: Channel) -> u64 {
        self.tx[self.me].rings[ch as usize].producer.get().tail()
    }
}

/// A rank of this node as a destination: its local index and its entry.
#[derive(Clone, Copy)]
pub(crate) struct ShmPeer<'a> {
    index: usize,
    tx: &'a TxPeer,
}

impl Transport for Links {
    type Peer<'a> = ShmPeer<'a>;

    /// Peers are numbered by local index.
    #[inline(always)]
    fn peer(&self, dest: usize) -> Option<ShmPeer<'_>> {
        self.tx.get(dest).map(|tx| ShmPeer { index: dest, tx })
    }

    #[inline(always)]
    fn send(
        &self,
        peer: ShmPeer<'_>,
        msg: Outbound<'_>,
        blocked: impl FnMut(u32),
    ) -> Result<(), SendRefused> {
        let Outbound {
            ch,
            class,
            handler,
            args,
            payload,
            offset,
        } = msg;
        let (kind, extra, inline): (u8, [u64; 2], &[u8]) = match class {
            Class::Short => (KIND_WORDS, [0, 0], &[]),
            Class::System => (KIND_SYSTEM, [0, 0], &[]),
            Class::Medium => {
                if payload.len() > MEDIUM_MAX {
                    return Err(SendRefused::TooLarge {
                        len: payload.len(),
                        max: MEDIUM_MAX,
                    });
                }
                // Inline when it fits in a few slots, otherwise through one of this rank's
                // medium buffers.
                let inline_bytes = (2 + args.len()) * 8 + payload.len();
                if inline_bytes <= MAX_FRAME_SLOTS as usize * SLOT_BYTES {
                    (KIND_MEDIUM_INLINE, [payload.len() as u64, 0], payload)
                } else {
                    return self.send_pooled(peer, msg, blocked);
                }
            }
            Class::Long => {
                self.place_long(peer.index, payload, offset)?;
                (KIND_LONG, [payload.len() as u64, offset as u64], &[])
            }
        };
        self.send_encoded(peer, ch, kind, handler, extra, args, inline, blocked);
        Ok(())
    }

    #[inline(always)]
    fn poll<S: Sink>(&self, ch: Channel, sink: &S, stop: impl FnMut() -> bool) -> Option<usize> {
        self.poll_rings(ch, sink, stop)
    }

    fn pending(&self) -> bool {
        self.has_frames()
    }

    fn max_payload(&self, class: Class) -> usize {
        match class {
            Class::Medium => MEDIUM_MAX,
            Class::Long => self.regions[self.me].segment_len(),
            Class::Short | Class::System => 0,
        }
    }
}

impl Links {
    /// Frames and sends a message of frame kind `kind` whose words after the header are
    /// `extra` (as many as the kind has), `args`, then `inline` bytes.
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    fn send_encoded(
        &self,
        peer: ShmPeer<'_>,
        ch: Channel,
        kind: u8,
        handler: u16,
        extra: [u64; 2],
        args: &[u64],
        inline: &[u8],
        blocked: impl FnMut(u32),
    ) {
        let nextra = extra_words(kind);
        let words = 1 + nextra + args.len();
        // Without a payload inline (known when this is inlined), whole words: a shift.
        let nslots = match inline.is_empty() {
            true => words.div_ceil(SLOT_BYTES / 8),
            false => (words * 8 + inline.len()).div_ceil(SLOT_BYTES),
        } as u64;
        debug_assert!(nslots <= MAX_FRAME_SLOTS);
        let out = Outgoing {
            kind,
            handler,
            nargs: args.len(),
            nslots,
        };
        let body = Words {
            extra,
            nextra,
            args,
            inline,
        };
        self.send_frame(peer, ch, out, body, blocked);
    }

    /// A medium message whose payload travels in one of this rank's medium buffers.
    #[cold]
    #[inline(never)]
    fn send_pooled(
        &self,
        peer: ShmPeer<'_>,
        msg: Outbound<'_>,
        mut blocked: impl FnMut(u32),
    ) -> Result<(), SendRefused> {
        let (ch, payload) = (msg.ch, msg.payload);
        let idx = self.claim_medium_buffer(ch, &mut blocked);
        // SAFETY: `idx` is a buffer we just claimed, so no receiver reads it until the frame
        // naming it is published; it holds MEDIUM_MAX >= payload.len() bytes.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                self.regions[self.me].pool_buf(ch, idx),
                payload.len(),
            );
        }
        let extra = [payload.len() as u64 | (idx as u64) << 32, 0];
        let kind = KIND_MEDIUM_POOLED;
        self.send_encoded(peer, ch, kind, msg.handler, extra, msg.args, &[], blocked);
        Ok(())
    }

    /// Copies a long payload into the segment of the rank at local index `dest` at `offset`
    /// (the caller checked that it fits the segment), unless the guard refuses the range: the
    /// sender writes the payload, so the sender asks.
    fn place_long(&self, dest: usize, payload: &[u8], offset: usize) -> Result<(), SendRefused> {
        let target = &self.regions[dest];
        debug_assert!(offset + payload.len() <= target.segment_len());
        if let Some(guard) = &self.guard {
            guard
                .admit(target.upper_ptr(), offset, payload.len())
                .map_err(SendRefused::Guarded)?;
        }
        // SAFETY: the range lies in the target's segment (the caller checked), which is mapped
        // for the life of the links. Concurrent writes to overlapping ranges are the program's
        // race to avoid, as with any remote write; they cannot touch memory outside the
        // segment.
        unsafe {
            std::ptr::copy_nonoverlapping(
                payload.as_ptr(),
                target.segment_ptr().add(offset),
                payload.len(),
            );
        }
        Ok(())
    }
}

/// Words between a frame's header and its arguments, by frame kind.
#[inline(always)]
fn extra_words(kind: u8) -> usize {
    match kind {
        KIND_MEDIUM_INLINE | KIND_MEDIUM_POOLED => 1,
        KIND_LONG => 2,
        _ => 0,
    }
}

/// A pooled medium buffer being read; dropping it (after the handler, or when the handler
/// unwinds) returns the buffer to its sender.
struct PooledBuffer<'a> {
    flags: PoolFlags<'a>,
    ch: Channel,
    idx: usize,
    bufs: usize,
}

impl Drop for PooledBuffer<'_> {
    fn drop(&mut self) {
        self.flags.release(self.ch, self.idx, self.bufs);
    }
}

/// A frame's words after its header: the payload's length (and offset), the arguments, an
/// inline payload.
struct Words<'a> {
    extra: [u64; 2],
    nextra: usize,
    args: &'a [u64],
    inline: &'a [u8],
}

impl FrameBody for Words<'_> {
    #[inline(always)]
    fn write(self, frame: *mut u64) {
        let Words {
            extra,
            nextra,
            args,
            inline,
        } = self;
        // SAFETY: the frame's nslots slots are reserved for us and contiguous (frames never
        // wrap); the header, words and payload take at most nslots * 64 bytes (the header
        // was sized from this body), so every write stays inside the reservation.
        unsafe {
            if nextra > 0 {
                frame.add(1).write(extra[0]);
                if nextra > 1 {
                    frame.add(2).write(extra[1]);
                }
            }
            let at = frame.add(1 + nextra);
            copy_args(args, at);
            if !inline.is_empty() {
                std::ptr::copy_nonoverlapping(
                    inline.as_ptr(),
                    frame.cast::<u8>().add((1 + nextra + args.len()) * 8),
                    inline.len(),
                );
            }
        }
    }
}

/// Writes `args` to `at`. A short's few arguments (the common case: at most a slot's worth)
/// are copied by an unrolled loop that stops after the last, a few instructions each; the
/// general loop's set-up alone cost more than that.
///
/// # Safety
/// `at` must be valid for writing `args.len()` words.
#[inline(always)]
unsafe fn copy_args(args: &[u64], at: *mut u64) {
    const FEW: usize = 7;
    if args.len() <= FEW {
        for i in 0..FEW {
            if i == args.len() {
                break;
            }
            // SAFETY: i < args.len(), for which the caller vouches.
            unsafe { at.add(i).write(args[i]) };
        }
    } else {
        for (i, w) in args.iter().enumerate() {
            // SAFETY: as above.
            unsafe { at.add(i).write(*w) };
        }
    }
}
