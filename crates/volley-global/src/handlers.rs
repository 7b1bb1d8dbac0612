//! The global layer's Active Message protocol: what each request carries, what its handler
//! does at the owner, and how the reply completes the operation at the initiator. Written on
//! volley's public AM API ([`volley::RuntimeBuilder`] handlers) and its checked access to a
//! rank's own segments ([`volley::rma::OwnSegments`]).
//!
//! | request | arguments | at the owner | reply |
//! |---|---|---|---|
//! | get | segment, key, offset·length, destination, completion | checked copy out | `data`: destination·length, completion, the bytes (inline words or medium payload); `data_refused` on a refusal |
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

/// Data words a fast-lane collective message carries (16 arguments less 4 header words).
pub(crate) const FAST_WORDS: usize = 12;
/// Steps of a fast lane (a collective of 2^62 ranks would need more).
pub(crate) const FAST_STEPS: usize = 64;

/// One step's message of a latency-bound collective (barrier, small all-reduce, small
/// all-to-all): written by the handler, or by the sender straight into the receiver's mapped
/// memory, then published by its sequence number.
#[repr(C, align(64))]
#[derive(Debug, Default)]
pub(crate) struct FastSlot {
    /// The lane's call number + 1 of the message in the slot (0: none yet).
    pub(crate) seq: AtomicU64,
    pub(crate) epoch: AtomicU64,
    pub(crate) what: AtomicU64,
    pub(crate) len: AtomicU64,
    /// The sender.
    pub(crate) src: AtomicU64,
    pub(crate) words: [AtomicU64; FAST_WORDS],
}

impl FastSlot {
    /// Writes one message: `h` = (call number, epoch, what, length, sender), then `words`;
    /// the number last, with release, so that a reader that sees it sees the rest.
    pub(crate) fn fill(&self, h: [u64; 5], words: &[u64]) {
        let [seq, epoch, what, len, src] = h;
        for (w, v) in self.words.iter().zip(words) {
            w.store(*v, Ordering::Relaxed);
        }
        self.epoch.store(epoch, Ordering::Relaxed);
        self.what.store(what, Ordering::Relaxed);
        self.len.store(len, Ordering::Relaxed);
        self.src.store(src, Ordering::Relaxed);
        self.seq.store(seq + 1, Ordering::Release);
    }
}

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
    /// A buffer for copying a get's bytes out of the segment before they are sent.
    scratch: Mutex<Vec<u8>>,
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
            scratch: Mutex::new(Vec::new()),
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

/// Packs bytes into little-endian words (the last one zero-padded).
pub(crate) fn to_words(bytes: &[u8], out: &mut [u64]) -> usize {
    let n = bytes.len().div_ceil(8);
    for (i, w) in out.iter_mut().take(n).enumerate() {
        let chunk = &bytes[i * 8..bytes.len().min(i * 8 + 8)];
        let mut b = [0u8; 8];
        b[..chunk.len()].copy_from_slice(chunk);
        *w = u64::from_le_bytes(b);
    }
    n
}

/// Unpacks `dst.len()` bytes from little-endian words.
pub(crate) fn from_words(words: &[u64], dst: &mut [u8]) {
    for (i, chunk) in dst.chunks_mut(8).enumerate() {
        chunk.copy_from_slice(&words[i].to_le_bytes()[..chunk.len()]);
    }
}

/// The handler ids of the global layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) get: RequestHandler,
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
        let (dest, len) = split_addr_len(m.arg(0));
        let kind = m.arg(1);
        let payload = m.payload();
        let n = if payload.is_empty() {
            len as usize
        } else {
            payload.len()
        };
        // SAFETY: `dest` is the address of `n` bytes the initiator (this rank) keeps borrowed
        // until this reply is recorded (module docs); `n` is what it asked for.
        let dst = unsafe { std::slice::from_raw_parts_mut(dest as *mut u8, n) };
        if payload.is_empty() {
            from_words(&m.args()[2..], dst);
        } else {
            dst.copy_from_slice(payload);
        }
        s.complete(kind, 0, 0, [0; 4]);
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
        let value = m.args().get(1).copied().unwrap_or(0);
        s.complete(m.arg(0), 0, value, [0; 4]);
    });
    let refused = data_refused;

    let s = shared.clone();
    let get = b.request_handler("volley.global.get", move |m, tok| {
        serve_get(&s, m, tok, data, refused)
    });
    let s = shared.clone();
    let put = b.request_handler("volley.global.put", move |m, tok| {
        // args: segment, key, offset·length, completion, inline words.
        let seg = seg_of(m.arg(0), m.arg(1));
        let (off, len) = split_offset_len(m.arg(2));
        let kind = m.arg(3);
        let mut inline = [0u8; PUT_INLINE_WORDS * 8];
        let written = write_carried(&s.own, m, 4, seg, off, len, &mut inline);
        let _ = match written {
            Ok(()) => tok.reply_short(ack, &[kind]),
            Err(r) => {
                let (code, seg_len) = refusal_detail(r);
                tok.reply_short(refused, &[kind, code, off, len, seg_len])
            }
        };
    });
    let s = shared.clone();
    let store = b.request_handler("volley.global.store", move |m, _| {
        // args: segment, key, offset·length, inline words.
        let seg = seg_of(m.arg(0), m.arg(1));
        let (off, len) = split_offset_len(m.arg(2));
        let mut inline = [0u8; STORE_INLINE_WORDS * 8];
        if let Err(r) = write_carried(&s.own, m, 3, seg, off, len, &mut inline) {
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
            Err(r) => {
                let (code, seg_len) = refusal_detail(r);
                tok.reply_short(refused, &[kind, code, off, 0, seg_len])
            }
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
        put,
        store,
        atomic,
        push,
        coll,
        coll_fast,
    }
}

/// Writes the `len` bytes a put or store carries (as its payload, or inline in its arguments
/// after `header` words, unpacked into `inline`) at `off` of this rank's `seg`. A message whose
/// length does not match what it carries is refused rather than written.
fn write_carried(
    own: &OwnSegments,
    m: &Message<'_>,
    header: usize,
    seg: SegmentRef,
    off: u64,
    len: u64,
    inline: &mut [u8],
) -> Result<(), Refusal> {
    let n = len as usize;
    let bytes: &[u8] = if m.payload().len() == n {
        m.payload()
    } else if n <= inline.len() && m.args().len() >= header + n.div_ceil(8) {
        from_words(&m.args()[header..], &mut inline[..n]);
        &inline[..n]
    } else {
        return Err(Refusal::NoSuchSegment);
    };
    own.write(seg, off as usize, bytes)
}

fn serve_get(
    s: &Shared,
    m: &Message<'_>,
    tok: ReplyToken<'_>,
    data: ReplyHandler,
    refused: ReplyHandler,
) {
    // args: segment, key, offset·length, destination, completion.
    let seg = seg_of(m.arg(0), m.arg(1));
    let (off, len) = split_offset_len(m.arg(2));
    let (dest, kind) = (m.arg(3), m.arg(4));
    let n = len as usize;
    let refuse = |tok: ReplyToken<'_>, r: Refusal| {
        let (code, seg_len) = refusal_detail(r);
        tok.reply_short(refused, &[kind, code, off, len, seg_len])
    };
    if n <= GET_INLINE_WORDS * 8 {
        let mut bytes = [0u8; GET_INLINE_WORDS * 8];
        let _ = match s.own.read(seg, off as usize, &mut bytes[..n]) {
            Ok(()) => {
                let mut args = [0u64; 2 + GET_INLINE_WORDS];
                args[0] = addr_len(dest, len);
                args[1] = kind;
                let words = to_words(&bytes[..n], &mut args[2..]);
                tok.reply_short(data, &args[..2 + words])
            }
            Err(r) => refuse(tok, r),
        };
        return;
    }
    let mut scratch = s.scratch.lock().unwrap_or_else(PoisonError::into_inner);
    scratch.resize(n, 0);
    let _ = match s.own.read(seg, off as usize, &mut scratch[..n]) {
        Ok(()) => tok.reply_medium(data, &[addr_len(dest, 0), kind], &scratch[..n]),
        Err(r) => refuse(tok, r),
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
