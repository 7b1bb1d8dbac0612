//! The global layer's Active Message protocol: what each request carries, what its handler
//! does at the owner, and how the reply completes the operation at the initiator. Written on
//! volley's public AM API ([`volley::RuntimeBuilder`] handlers) and its checked access to a
//! rank's own segments ([`volley::rma::OwnSegments`]).
//!
//! | request | arguments | at the owner | reply |
//! |---|---|---|---|
//! | get | segment, key, offset·length, destination, completion | checked copy out | `data`: destination·length, completion, the bytes (inline words or medium payload); `data_refused` on a refusal |
//! | get_word (a blocking read of at most 8 bytes) | segment, key, offset·length, completion | checked load | `word`: completion, the bytes as one word; `data_refused` on a refusal |
//! | put | segment, key, offset·length, completion, inline words | checked copy in | `ack`: completion; `refused` on a refusal |
//! | store | segment, key, offset·length, inline words | checked copy in, then the byte counter | none (one-way) |
//! | atomic | segment, key, offset, procedure, completion, arguments | the procedure, serialized with every handler | `ack`: completion, result |
//! | push | bucket, key, capacity | slot by fetch-add, copy, byte counter | none (one-way) |
//! | coll | epoch, what, total, fragment offset, step | into the mailbox | none |
//!
//! "offset·length" is one word: the offset in the low 40 bits, the length above; a success
//! reply carries no status words, so a short round trip's frames stay small.
//!
//! The completion word is 0 for the rank's split counter (completed by `sync`), or the address
//! of a [`Completion`] the initiator keeps alive until the reply is in. A destination is an
//! address in the initiator's memory that stays borrowed until then. Both only come back in
//! replies to this rank's own requests, within one job (frames carry the job's key).

use crate::coll::Mailbox;
use crate::completion::{Completion, RefusalWords};
use crate::counter::SplitCounter;
use crate::words::{padded_word, store_word};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError, RwLock};
use volley::rma::{AtomicOp, OwnSegments, Perms, Refusal, SegmentRef};

use volley::{Message, ReplyHandler, ReplyToken, RequestHandler, RuntimeBuilder};

/// Inline data words of a get's reply (16 arguments less 2 header words).
pub(crate) const GET_INLINE_WORDS: usize = 14;
/// Inline data words of a put (16 less 4 header words).
pub(crate) const PUT_INLINE_WORDS: usize = 12;
/// Inline data words of a store (16 less 3 header words).
pub(crate) const STORE_INLINE_WORDS: usize = 13;
/// Bits of an offset in an offset·length word.
const OFFSET_BITS: u32 = 40;
/// Largest offset an offset·length word carries.
pub(crate) const MAX_WIRE_OFFSET: usize = (1 << OFFSET_BITS) - 1;

/// Packs an offset (below 2^40) and a length (below 2^24) into one word.
pub(crate) fn offset_len(off: usize, len: usize) -> u64 {
    debug_assert!(off <= MAX_WIRE_OFFSET && len < 1 << 24);
    off as u64 | (len as u64) << OFFSET_BITS
}

fn split_offset_len(w: u64) -> (u64, u64) {
    (w & MAX_WIRE_OFFSET as u64, w >> OFFSET_BITS)
}

/// Packs an address (below 2^48, as user-space addresses are) and a length below 2^16.
fn addr_len(addr: u64, len: u64) -> u64 {
    addr | len << 48
}

fn split_addr_len(w: u64) -> (u64, u64) {
    (w & ((1 << 48) - 1), w >> 48)
}
/// Arguments of an atomic procedure (16 less 5 header words).
pub(crate) const PROC_ARGS: usize = 11;
/// Where a bucket's items start (its first line holds the count).
pub(crate) const BUCKET_HEADER: usize = 64;

/// The code of an atomic procedure, on the pointee's bytes and the call's arguments.
pub(crate) type ProcedureFn = dyn Fn(&mut [u8], &[u64]) -> u64 + Send + Sync;

/// A registered atomic procedure: the pointee's size and the code run at the owner.
pub(crate) struct Procedure {
    pub(crate) size: usize,
    pub(crate) run: Box<ProcedureFn>,
}

pub(crate) use crate::slot::{FastSlot, FAST_WORDS};
/// Steps of a fast lane (a collective of 2^62 ranks would need more).
pub(crate) const FAST_STEPS: usize = 64;

/// The slots of one kind of latency-bound collective: at each step a rank hears from exactly
/// one rank, and a rank can be at most one call ahead of another there (each such collective
/// needs every rank to have entered it before any leaves), so two slots per step, by the
/// parity of the call number, never hold a message not yet read. Atomics only, all zero when
/// empty: it may live in mapped shared memory.
#[repr(C)]
#[derive(Debug)]
pub(crate) struct FastLane {
    slots: [FastSlot; 2 * FAST_STEPS],
}

impl FastLane {
    /// The slot of call `seq` at `step`.
    pub(crate) fn slot(&self, step: u64, seq: u64) -> &FastSlot {
        &self.slots[(step as usize).min(FAST_STEPS - 1) * 2 + (seq & 1) as usize]
    }

    /// What collective a message of call `epoch` in this lane belongs to and who sent it, if
    /// one is here (for mismatch diagnosis).
    pub(crate) fn what_of(&self, epoch: u64) -> Option<(u64, usize)> {
        self.slots
            .iter()
            .find(|s| {
                s.seq.load(Ordering::Acquire) != 0 && s.epoch.load(Ordering::Relaxed) == epoch
            })
            .map(|s| {
                (
                    s.what.load(Ordering::Relaxed),
                    s.src.load(Ordering::Relaxed) as usize,
                )
            })
    }
}

/// Fast lanes: 0 for barriers, 1 for small all-reduces, 2 for small all-to-alls.
pub(crate) const LANES: usize = 3;

/// A rank's fast lanes (in its heap for Active Messages, or in a mapped segment).
#[repr(C)]
#[derive(Debug)]
pub(crate) struct Lanes(pub(crate) [FastLane; LANES]);

impl Lanes {
    fn new() -> Box<Self> {
        Box::new(Self(std::array::from_fn(|_| FastLane {
            slots: std::array::from_fn(|_| FastSlot::default()),
        })))
    }
}

/// State shared by a rank's [`crate::Global`] and its handlers.
pub(crate) struct Shared {
    pub(crate) own: OwnSegments,
    /// Split-phase operations of this rank.
    pub(crate) counter: SplitCounter,
    /// The first refusal among split-phase operations since the last `sync`.
    pub(crate) split_error: Mutex<Option<RefusalWords>>,
    /// Bytes stored into this rank by its handlers (stores from peers that write this
    /// rank's memory directly count in the counter segment's word instead).
    pub(crate) stored: AtomicU64,
    /// Stores and pushes refused here: how many, and the first (code, offset, len, seg len).
    pub(crate) store_refused: AtomicU64,
    pub(crate) store_first_refusal: Mutex<Option<RefusalWords>>,
    pub(crate) procs: RwLock<Vec<Procedure>>,
    pub(crate) mailbox: Mailbox,
    /// The fast lanes that Active Messages fill.
    pub(crate) lanes: Box<Lanes>,
}

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shared")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl Shared {
    pub(crate) fn new(own: OwnSegments) -> Self {
        Self {
            own,
            counter: SplitCounter::new(),
            split_error: Mutex::new(None),
            stored: AtomicU64::new(0),
            store_refused: AtomicU64::new(0),
            store_first_refusal: Mutex::new(None),
            procs: RwLock::new(Vec::new()),
            mailbox: Mailbox::default(),
            lanes: Lanes::new(),
        }
    }

    /// Completes one successful reply that carries no value (a get's data, a put's ack): the
    /// common case, without the refusal and value bookkeeping of [`Shared::complete`].
    #[inline]
    fn arrive(&self, kind: u64) {
        if kind == 0 {
            self.counter.complete();
        } else {
            // SAFETY: as in `complete`.
            let c = unsafe { &*(kind as *const Completion) };
            c.arrive();
        }
    }

    /// Completes one reply: into a [`Completion`] or the split counter.
    fn complete(&self, kind: u64, status: u64, value: u64, detail: [u64; 4]) {
        if kind == 0 {
            if status != 0 {
                let mut e = self
                    .split_error
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner);
                e.get_or_insert((status, detail[0] as usize, detail[1], detail[2], detail[3]));
            }
            self.counter.complete();
        } else {
            // SAFETY: `kind` is the address of a Completion that the initiator (this rank)
            // keeps alive until every reply to it is recorded (see the module docs).
            let c = unsafe { &*(kind as *const Completion) };
            c.record(status, value, detail);
        }
    }

    fn note_store_refusal(&self, r: Refusal, me_off: u64, len: u64) {
        self.store_refused.fetch_add(1, Ordering::Relaxed);
        let seg_len = match r {
            Refusal::OutOfBounds { segment_len, .. } => segment_len,
            _ => 0,
        };
        let mut first = self
            .store_first_refusal
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        first.get_or_insert((r.code(), 0, me_off, len, seg_len));
    }

    /// Adds `n` bytes to this rank's store counter.
    fn count_stored(&self, n: u64) {
        // Release: whoever sees the count sees the data written before it.
        self.stored.fetch_add(n, Ordering::Release);
    }
}

/// The segment named by two message words (this rank's, whatever rank the words say).
pub(crate) fn seg_of(w0: u64, key: u64) -> SegmentRef {
    SegmentRef::from_words([w0, key, 0])
}

/// Packs bytes into little-endian words (the last one zero-padded); returns how many words
/// they take. Whole words go as single loads, so a scalar packs in a few instructions.
#[inline]
pub(crate) fn to_words(bytes: &[u8], out: &mut [u64]) -> usize {
    let whole = bytes.chunks_exact(8);
    let rest = whole.remainder();
    let mut words = out.iter_mut();
    // The chunks first: a zip stops on its first iterator without taking from the second.
    for (c, w) in whole.zip(words.by_ref()) {
        let mut b = [0u8; 8];
        b.copy_from_slice(c);
        *w = u64::from_le_bytes(b);
    }
    if !rest.is_empty() {
        if let Some(w) = words.next() {
            *w = u64::from_le_bytes(padded_word(rest));
        }
    }
    bytes.len().div_ceil(8)
}

/// Unpacks `dst.len()` bytes from little-endian words.
#[inline]
pub(crate) fn from_words(words: &[u64], dst: &mut [u8]) {
    for (chunk, w) in dst.chunks_mut(8).zip(words) {
        store_word(chunk, w.to_le_bytes());
    }
}

/// The bytes that [`to_words`] packed into `words`, borrowed where the host is little-endian
/// (the words' memory is those bytes), else unpacked into `buf`.
fn packed_bytes<'a>(words: &'a [u64], buf: &'a mut [u64]) -> &'a [u8] {
    if cfg!(target_endian = "little") {
        bytemuck::cast_slice(words)
    } else {
        let k = words.len().min(buf.len());
        let buf = &mut buf[..k];
        for (b, w) in buf.iter_mut().zip(words) {
            *b = w.to_le();
        }
        bytemuck::cast_slice(buf)
    }
}

/// Copies `n` bytes from `src` to `dst`: the one-word case (a scalar's read or write) as one
/// load and store, the rest by `memcpy`.
///
/// # Safety
/// `src` must be valid for reading and `dst` for writing `n` bytes, and they must not overlap.
#[inline]
pub(crate) unsafe fn copy_small(src: *const u8, dst: *mut u8, n: usize) {
    if n == 8 {
        // SAFETY: 8 valid bytes each (the caller's contract); unaligned accesses.
        unsafe {
            dst.cast::<u64>()
                .write_unaligned(src.cast::<u64>().read_unaligned())
        };
    } else {
        // SAFETY: the caller's contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, n) };
    }
}

/// The first `N` arguments of `m`, 0 for those not sent (the seed's unused words), with one
/// length check in the common case.
#[inline]
fn args_of<const N: usize>(m: &Message<'_>) -> [u64; N] {
    match m.args().first_chunk::<N>() {
        Some(a) => *a,
        None => std::array::from_fn(|i| m.arg(i)),
    }
}

/// Answers a request that was refused: completion `kind`, the refusal, and what was asked.
#[cold]
fn refuse_access(
    tok: ReplyToken<'_>,
    refused: ReplyHandler,
    kind: u64,
    r: Refusal,
    off: u64,
    len: u64,
) -> Result<(), volley::am::Error> {
    let (code, seg_len) = refusal_detail(r);
    tok.reply_short(refused, &[kind, code, off, len, seg_len])
}

/// The handler ids of the global layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) get: RequestHandler,
    pub(crate) get_word: RequestHandler,
    pub(crate) put: RequestHandler,
    pub(crate) store: RequestHandler,
    pub(crate) atomic: RequestHandler,
    pub(crate) push: RequestHandler,
    pub(crate) coll: RequestHandler,
    pub(crate) coll_fast: RequestHandler,
}

/// A refusal's code and, for out-of-bounds accesses, the segment's length.
fn refusal_detail(r: Refusal) -> (u64, u64) {
    match r {
        Refusal::OutOfBounds { segment_len, .. } => (r.code(), segment_len),
        _ => (r.code(), 0),
    }
}

/// Registers the protocol's handlers.
pub(crate) fn register(b: &mut RuntimeBuilder, shared: &std::sync::Arc<Shared>) -> Handlers {
    // Replies first: the request handlers name them.
    let s = shared.clone();
    let data: ReplyHandler = b.reply_handler("volley.global.data", move |m| {
        // args: destination·length, completion, inline words (or the payload).
        let [dest_len, kind] = args_of(m);
        let (dest, len) = split_addr_len(dest_len);
        let payload = m.payload();
        let mut buf = [0u64; GET_INLINE_WORDS];
        if payload.is_empty() {
            let words = m.args().get(2..).unwrap_or(&[]);
            let bytes = packed_bytes(words, &mut buf);
            // A reply that carries fewer bytes than it names writes none.
            let src = bytes.get(..len as usize).unwrap_or(&[]);
            // SAFETY: `dest` is the address of the bytes the initiator (this rank) asked for
            // and keeps borrowed until this reply is recorded (module docs); `src` is what it
            // asked for.
            unsafe { copy_small(src.as_ptr(), dest as *mut u8, src.len()) };
        } else {
            // SAFETY: as above; a bulk piece, copied clear of `rep movsb`'s slow distance.
            unsafe {
                volley::copy::copy_nonoverlapping(payload.as_ptr(), dest as *mut u8, payload.len())
            };
        }
        s.arrive(kind);
    });
    let s = shared.clone();
    let data_refused: ReplyHandler = b.reply_handler("volley.global.data_refused", move |m| {
        // args: completion, status, offset, length, segment length.
        s.complete(
            m.arg(0),
            m.arg(1),
            0,
            [m.src() as u64, m.arg(2), m.arg(3), m.arg(4)],
        );
    });
    let s = shared.clone();
    let ack: ReplyHandler = b.reply_handler("volley.global.ack", move |m| {
        // args: completion[, value].
        match m.args().get(1) {
            None => s.arrive(m.arg(0)),
            Some(&value) => s.complete(m.arg(0), 0, value, [0; 4]),
        }
    });
    let refused = data_refused;
    let word: ReplyHandler = b.reply_handler("volley.global.word", move |m| {
        // args: completion, value.
        let [kind, value] = args_of(m);
        if kind != 0 {
            // SAFETY: as in `Shared::complete` (a `get_word` always names a Completion).
            let c = unsafe { &*(kind as *const Completion) };
            c.deliver(value);
        }
    });

    let s = shared.clone();
    let get = b.request_handler("volley.global.get", move |m, tok| {
        serve_get(&s, m, tok, data, refused)
    });
    let s = shared.clone();
    let get_word = b.request_handler("volley.global.get_word", move |m, tok| {
        serve_get_word(&s, m, tok, word, refused)
    });
    let s = shared.clone();
    let put = b.request_handler("volley.global.put", move |m, tok| {
        // args: segment, key, offset·length, completion, inline words.
        let [w0, key, off_len, kind] = args_of(m);
        let (off, len) = split_offset_len(off_len);
        let mut buf = [0u64; PUT_INLINE_WORDS];
        let written = write_carried(&s.own, m, 4, seg_of(w0, key), off, len, &mut buf);
        let _ = match written {
            Ok(()) => tok.reply_short(ack, &[kind]),
            Err(r) => refuse_access(tok, refused, kind, r, off, len),
        };
    });
    let s = shared.clone();
    let store = b.request_handler("volley.global.store", move |m, _| {
        // args: segment, key, offset·length, inline words.
        let [w0, key, off_len] = args_of(m);
        let (off, len) = split_offset_len(off_len);
        let mut buf = [0u64; STORE_INLINE_WORDS];
        if let Err(r) = write_carried(&s.own, m, 3, seg_of(w0, key), off, len, &mut buf) {
            s.note_store_refusal(r, off, len);
        }
        // Counted even when refused, so that a receiver waiting for these bytes is told
        // (`store_sync` and `all_store_sync` report the refusal) instead of waiting forever.
        s.count_stored(len);
    });
    let s = shared.clone();
    let atomic = b.request_handler("volley.global.atomic", move |m, tok| {
        // args: segment, key, offset, procedure, completion, procedure arguments.
        let (seg, off, index, kind) = (seg_of(m.arg(0), m.arg(1)), m.arg(2), m.arg(3), m.arg(4));
        let args = m.args().get(5..).unwrap_or(&[]);
        let _ = match run_procedure(&s, seg, off as usize, index, args) {
            Ok(v) => tok.reply_short(ack, &[kind, v]),
            Err(r) => refuse_access(tok, refused, kind, r, off, 0),
        };
    });
    let s = shared.clone();
    let push = b.request_handler("volley.global.push", move |m, _| {
        // args: bucket, key, capacity; the item is the payload.
        let (bucket, cap) = (seg_of(m.arg(0), m.arg(1)), m.arg(2));
        let item = m.payload();
        if let Err(r) = push_local(&s.own, bucket, cap, item) {
            s.note_store_refusal(r, 0, item.len() as u64);
        }
        s.count_stored(item.len() as u64);
    });
    let s = shared.clone();
    let coll = b.request_handler("volley.global.coll", move |m, _| {
        // args: epoch, what, total length, fragment offset, step.
        s.mailbox.deliver(
            m.src(),
            [m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4)],
            m.payload(),
        );
    });
    let s = shared.clone();
    let coll_fast = b.request_handler("volley.global.coll_fast", move |m, _| {
        // args: lane·step·length, call number, epoch, what, data words.
        let h = m.arg(0);
        let (lane, step, len) = (h & 0xff, (h >> 8) & 0xff, h >> 16);
        let Some(lane) = s.lanes.0.get(lane as usize) else {
            return;
        };
        let h = [m.arg(1), m.arg(2), m.arg(3), len, m.src() as u64];
        lane.slot(step, m.arg(1))
            .fill(h, m.args().get(4..).unwrap_or(&[]));
    });
    Handlers {
        get,
        get_word,
        put,
        store,
        atomic,
        push,
        coll,
        coll_fast,
    }
}

/// Writes the `len` bytes a put or store carries (as its payload, or inline in its arguments
/// after `header` words; `buf` has room for the most inline words) at `off` of this rank's
/// `seg`. A message whose length does not match what it carries is refused rather than
/// written.
fn write_carried(
    own: &OwnSegments,
    m: &Message<'_>,
    header: usize,
    seg: SegmentRef,
    off: u64,
    len: u64,
    buf: &mut [u64],
) -> Result<(), Refusal> {
    let n = len as usize;
    let words = n.div_ceil(8);
    let bytes: &[u8] = if m.payload().len() == n {
        m.payload()
    } else if words <= buf.len() && m.args().len() >= header + words {
        &packed_bytes(&m.args()[header..header + words], buf)[..n]
    } else {
        return Err(Refusal::NoSuchSegment);
    };
    let dst = own.range(seg, off as usize, n, Perms::WRITE)?;
    // SAFETY: `dst` is `n` bytes checked to lie in this rank's segment area; `bytes` is the
    // message's, which cannot overlap it. Concurrent writers of one range race by the
    // program's choice, as with any remote write.
    unsafe { copy_small(bytes.as_ptr(), dst.as_ptr(), n) };
    // Release: the counter or acknowledgement that follows makes the data visible.
    std::sync::atomic::fence(Ordering::Release);
    Ok(())
}

fn serve_get(
    s: &Shared,
    m: &Message<'_>,
    tok: ReplyToken<'_>,
    data: ReplyHandler,
    refused: ReplyHandler,
) {
    // args: segment, key, offset·length, destination, completion.
    let [w0, key, off_len, dest, kind] = args_of(m);
    let seg = seg_of(w0, key);
    let (off, len) = split_offset_len(off_len);
    let n = len as usize;
    let refuse = |tok: ReplyToken<'_>, r: Refusal| refuse_access(tok, refused, kind, r, off, len);
    if n <= GET_INLINE_WORDS * 8 {
        let _ = match s.own.range(seg, off as usize, n, Perms::READ) {
            Ok(src) => {
                let words = n.div_ceil(8);
                let mut args = [0u64; 2 + GET_INLINE_WORDS];
                args[0] = addr_len(dest, len);
                args[1] = kind;
                // Acquire: pairs with the release of whoever wrote the data.
                std::sync::atomic::fence(Ordering::Acquire);
                // SAFETY: `src` is `n` bytes checked to lie in this rank's segment area; the
                // words after the header have room for `n` bytes.
                unsafe { copy_small(src.as_ptr(), args[2..].as_mut_ptr().cast(), n) };
                // Packed as `to_words` packs: little-endian, the last word zero-padded.
                for w in &mut args[2..2 + words] {
                    *w = u64::from_le(*w);
                }
                tok.reply_short(data, &args[..2 + words])
            }
            Err(r) => refuse(tok, r),
        };
        return;
    }
    // Checked before the reply starts; the bytes then go from the segment straight into the
    // reply's buffer, one copy on this side.
    let _ = match s.own.range(seg, off as usize, n, Perms::READ) {
        Ok(src) => tok.reply_medium_with(data, &[addr_len(dest, 0), kind], n, |buf| {
            // Acquire: pairs with the release of whoever wrote the data.
            std::sync::atomic::fence(Ordering::Acquire);
            // SAFETY: `src` is `n` bytes checked to lie in this rank's segment area, mapped
            // for the runtime's life; `buf` is the reply's own `n` bytes, not a segment's.
            unsafe { volley::copy::copy_nonoverlapping(src.as_ptr(), buf.as_mut_ptr(), n) };
        }),
        Err(r) => refuse(tok, r),
    };
}

/// Answers a blocking read of at most 8 bytes with the bytes as one little-endian word.
#[inline(always)]
fn serve_get_word(
    s: &Shared,
    m: &Message<'_>,
    tok: ReplyToken<'_>,
    word: ReplyHandler,
    refused: ReplyHandler,
) {
    // args: segment, key, offset·length, completion.
    let [w0, key, off_len, kind] = args_of(m);
    let (off, len) = split_offset_len(off_len);
    let n = len as usize;
    let checked = if n <= 8 {
        s.own.range(seg_of(w0, key), off as usize, n, Perms::READ)
    } else {
        // Not what a read sends: refused rather than read past a word.
        Err(Refusal::NoSuchSegment)
    };
    let _ = match checked {
        Ok(src) => {
            let mut b = [0u8; 8];
            // Acquire: pairs with the release of whoever wrote the data.
            std::sync::atomic::fence(Ordering::Acquire);
            // SAFETY: `src` is `n` bytes (at most 8) checked to lie in this rank's segment
            // area; `b` has 8.
            unsafe { copy_small(src.as_ptr(), b.as_mut_ptr(), n) };
            tok.reply_short(word, &[kind, u64::from_le_bytes(b)])
        }
        Err(r) => refuse_access(tok, refused, kind, r, off, len),
    };
}

/// Runs procedure `index` on the `T` at `off` of `seg` (this rank's), with `args`.
pub(crate) fn run_procedure(
    s: &Shared,
    seg: SegmentRef,
    off: usize,
    index: u64,
    args: &[u64],
) -> Result<u64, Refusal> {
    let procs = s.procs.read().unwrap_or_else(PoisonError::into_inner);
    let Some(p) = procs.get(index as usize) else {
        return Err(Refusal::NoSuchSegment);
    };
    let at = s.own.range(seg, off, p.size, Perms::ATOMIC)?;
    // The pointee is copied out, updated, and copied back: the procedure never holds a
    // reference into shared memory, and runs serialized with every handler of this rank.
    let mut v = vec![0u8; p.size];
    // SAFETY: `at..at+size` was checked to lie in this rank's segment.
    unsafe { std::ptr::copy_nonoverlapping(at.as_ptr(), v.as_mut_ptr(), p.size) };
    let r = (p.run)(&mut v, args);
    // SAFETY: as above.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), at.as_ptr(), p.size) };
    Ok(r)
}

/// Appends `item` to this rank's bucket (count word, then items): the slot is taken with a
/// fetch-add, so pushes from handlers and from direct peers never take the same one. Returns
/// the slot; one at or past `cap` was not stored (the count word keeps the overflow for the
/// owner's `take` to report).
pub(crate) fn push_local(
    own: &OwnSegments,
    bucket: SegmentRef,
    cap: u64,
    item: &[u8],
) -> Result<u64, Refusal> {
    let idx = own.atomic(bucket, 0, AtomicOp::FetchAdd, 1, 0)?;
    if idx < cap {
        own.write(bucket, BUCKET_HEADER + idx as usize * item.len(), item)?;
    }
    Ok(idx)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every length up to two words and a bit, at every alignment: packing then unpacking
    /// gives the bytes back, the padding is zero, and the word count is the rounded-up length.
    #[test]
    fn words_pack_and_unpack_every_length_and_alignment() {
        let source: Vec<u8> = (1..=40).collect();
        for start in 0..8 {
            for len in 0..=20 {
                let bytes = &source[start..start + len];
                let mut words = [u64::MAX; 4];
                let n = to_words(bytes, &mut words);
                assert_eq!(n, len.div_ceil(8), "{len} bytes");
                let mut back = vec![0u8; len];
                from_words(&words, &mut back);
                assert_eq!(back, bytes, "{len} bytes from {start}");
                let mut buf = [0u64; 4];
                assert_eq!(&packed_bytes(&words[..n], &mut buf)[..len], bytes);
                if len % 8 != 0 {
                    let last = words[n - 1].to_le_bytes();
                    assert!(last[len % 8..].iter().all(|&b| b == 0), "padding of {len}");
                }
                assert!(words[n..].iter().all(|&w| w == u64::MAX), "wrote past {n}");
            }
        }
    }

    #[test]
    fn small_copies_copy_exactly_the_bytes_asked() {
        for n in 0..=16 {
            let src: Vec<u8> = (1..=16).collect();
            let mut dst = [0u8; 24];
            // SAFETY: `src` has 16 bytes and `dst` 24, separate buffers.
            unsafe { copy_small(src.as_ptr(), dst.as_mut_ptr().add(3), n) };
            assert_eq!(&dst[3..3 + n], &src[..n]);
            assert!(dst[..3].iter().chain(&dst[3 + n..]).all(|&b| b == 0));
        }
    }
}
