//! The target's side of signals: the registered programs and the user-level scheduler, the
//! owner's list of its structures, the two request handlers (`deliver` for the AM path,
//! `invoke` for the direct path's invocations) and the dispatcher that runs programs under
//! each condition.

use super::options::SignalOptions;
use super::state::{self, Next};
use super::structure::{Arrival, Record, Shape, Structure, ENTRY_HEADER};
use super::{Condition, Invocation, SignalRef, SignalStatus, Storage, TakenSignal};
use crate::am::{ReplyHandler, RequestHandler, RuntimeBuilder};
use crate::refusal::Refusal;
use crate::rma::error::{Error, Result};
use crate::rma::handlers::Shared;
use crate::rma::segment::Perms;
use std::cell::Cell;
use std::sync::{Arc, Mutex, PoisonError};

type ProgramFn = dyn Fn(&Signal<'_>) + Send + Sync + 'static;
type UlsFn = dyn Fn(&Signal<'_>) -> bool + Send + Sync + 'static;

/// What a signal program receives: who signalled, and the data.
#[derive(Debug)]
pub struct Signal<'a> {
    pub(crate) src: usize,
    pub(crate) requester: Option<usize>,
    pub(crate) offset: usize,
    pub(crate) data: &'a [u8],
    /// FIRST_ONLY_NONBLK: whether the program may keep the flag, and whether it did.
    pub(crate) can_hold: bool,
    pub(crate) held: Cell<bool>,
}

impl<'a> Signal<'a> {
    /// The rank whose message invoked the program (for a queued entry taken after the
    /// first, the rank whose signal invoked this run).
    pub fn src(&self) -> usize {
        self.src
    }

    /// The sender recorded with the data (seed 002's requester): `None` under MEMW_SSP, which
    /// records none.
    pub fn requester(&self) -> Option<usize> {
        self.requester
    }

    /// The offset at which the data was written: in the segment for [`crate::rma::Rma::signal`],
    /// in the window for MEMW_OFFSET, 0 otherwise.
    pub fn offset(&self) -> usize {
        self.offset
    }

    /// The number of bytes of data.
    pub fn len(&self) -> usize {
        self.data.len()
    }

    /// Whether the signal carried no data.
    pub fn is_empty(&self) -> bool {
        self.data.is_empty()
    }

    /// The data: in this rank's segment, or in a buffer valid while the program runs. Other
    /// ranks may write segment memory at any time (as with a long message's payload): copy
    /// out what you keep.
    pub fn data(&self) -> &'a [u8] {
        self.data
    }

    /// FIRST_ONLY_NONBLK: keeps the running flag up when this program returns, so later
    /// signals only queue until the rank takes them with
    /// [`crate::rma::Rma::signal_next_or_clear`]. Returns `false` (and does nothing) under
    /// the other conditions.
    pub fn hold(&self) -> bool {
        if self.can_hold {
            self.held.set(true);
        }
        self.can_hold
    }
}

/// The signal programs and the scheduler (registered before `build`), and the structures this
/// rank created.
#[derive(Default)]
pub(crate) struct Registry {
    programs: Mutex<Vec<Arc<ProgramFn>>>,
    uls: Mutex<Option<Arc<UlsFn>>>,
    structures: Mutex<Vec<Shape>>,
    /// The entry a program is given (queued storage): one dispatch at a time per rank.
    scratch: Mutex<Vec<u8>>,
    /// This rank as a requester of non-blocking signals: EMB counters, reports.
    pub(crate) requester: super::options::Requester,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry").finish_non_exhaustive()
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Registry {
    pub(crate) fn add_program(&self, f: Arc<ProgramFn>) -> u16 {
        let mut p = lock(&self.programs);
        p.push(f);
        (p.len() - 1) as u16
    }

    pub(crate) fn has_program(&self, i: u16) -> bool {
        (i as usize) < lock(&self.programs).len()
    }

    fn program(&self, i: u16) -> Option<Arc<ProgramFn>> {
        lock(&self.programs).get(i as usize).cloned()
    }

    pub(crate) fn set_uls(&self, f: Box<UlsFn>) {
        *lock(&self.uls) = Some(Arc::from(f));
    }

    pub(super) fn add_structure(&self, s: Shape) {
        lock(&self.structures).push(s);
    }

    pub(super) fn owns(&self, s: &Shape) -> bool {
        lock(&self.structures).contains(s)
    }

    /// The structure of this id that this rank created.
    fn structure(&self, id: u64) -> Option<Shape> {
        lock(&self.structures).iter().find(|s| s.id == id).copied()
    }
}

/// The handlers of signals to structures.
#[derive(Debug, Clone, Copy)]
pub(crate) struct SignalHandlers {
    pub(crate) deliver: RequestHandler,
    pub(crate) invoke: RequestHandler,
}

/// `deliver`'s arguments: the handle, the offset, the SSP program, the slot and the options of
/// a non-blocking signal (0: a blocking one, which replies to the slot).
pub(super) fn deliver_args(
    s: &SignalRef,
    offset: u64,
    ssp: u16,
    slot: u32,
    opts: u64,
) -> [u64; 12] {
    let w = s.to_words();
    [
        w[0],
        w[1],
        w[2],
        w[3],
        w[4],
        w[5],
        w[6],
        w[7],
        offset,
        ssp as u64,
        slot as u64,
        opts,
    ]
}

/// `invoke`'s arguments: segment id and key, structure offset and id, and the signal's record.
pub(super) fn invoke_args(
    s: &SignalRef,
    src: usize,
    offset: u64,
    len: usize,
    ssp: u16,
) -> [u64; 7] {
    let w = s.to_words();
    [
        w[0],
        w[1],
        w[3],
        w[4],
        src as u64,
        offset,
        len as u64 | (ssp as u64) << 48,
    ]
}

/// Maps the structure `shape` at `off` of segment (`id`, `key`) of this rank, checking the
/// segment table as for any remote access (counted if refused).
fn map_local(s: &Shared, id: u64, key: u64, off: u64, shape: Shape) -> Result<Structure, Refusal> {
    let refuse = |(code, _)| Refusal::from_code(code, off, 0, 0).unwrap_or(Refusal::NotASignal);
    let bytes = shape.bytes().ok_or(Refusal::NotASignal)?;
    let base = s
        .check_with(id, key, off, bytes, Perms::WRITE | Perms::ATOMIC, true)
        .map_err(refuse)?;
    if (base as usize) % 8 != 0 {
        s.count_refusal();
        return Err(Refusal::Misaligned);
    }
    let window = match shape.storage() {
        Some(Storage::MemoryOffset { base, len }) => s
            .check_with(id, key, base as u64, len as u64, Perms::WRITE, true)
            .map_err(refuse)?,
        _ => std::ptr::null_mut(),
    };
    // SAFETY: the structure's bytes and the window lie in our own segment (checked).
    Ok(unsafe { Structure::at(base, window, shape) })
}

/// Registers the two request handlers.
pub(crate) fn register(
    b: &mut RuntimeBuilder,
    shared: &Arc<Shared>,
    ack: ReplyHandler,
) -> SignalHandlers {
    let s = shared.clone();
    let report = b.reply_handler("volley.rma.signal.report", move |m| {
        let opts = SignalOptions::from_word(m.arg(0));
        let outcome = match m.arg(2) {
            0 => SignalStatus::from_code(m.arg(1)).ok_or(Refusal::NotASignal),
            code => Err(Refusal::from_code(code, m.arg(3), m.arg(4), m.arg(5))
                .unwrap_or(Refusal::NotASignal)),
        };
        s.signals.requester.replied(opts, m.src(), outcome);
    });
    let s = shared.clone();
    let deliver = b.request_handler("volley.rma.signal.deliver", move |m, tok| {
        let w: [u64; 8] = std::array::from_fn(|i| m.arg(i));
        let sref = SignalRef::from_words(w);
        let (offset, ssp, slot) = (m.arg(8), m.arg(9) as u16, m.arg(10));
        let src = m.src();
        let st = map_local(&s, w[0] >> 32, w[1], w[3], sref.shape);
        let ssp_ok = |inv| {
            !matches!(inv, Some(Invocation::Ssp | Invocation::MemwSsp))
                || s.signals.has_program(ssp)
        };
        let result = st.and_then(|st| {
            if !ssp_ok(sref.shape.invocation()) {
                s.count_refusal();
                return Err(Refusal::UnknownSignal);
            }
            let status = st
                .deliver(Arrival {
                    src,
                    data: m.payload(),
                    offset,
                    ssp,
                })
                .inspect_err(|_| s.count_refusal())?;
            Ok((st, status))
        });
        let opts = m.arg(11);
        let details = |r: &Refusal| match *r {
            Refusal::OutOfBounds {
                offset,
                len,
                segment_len,
            } => [offset, len, segment_len],
            _ => [sref.offset, 0, 0],
        };
        if opts != 0 {
            let o = SignalOptions::from_word(opts);
            let outcome = result.as_ref().map(|&(_, st)| st).map_err(|r| *r);
            if o.replies(&outcome) {
                let args = match &outcome {
                    Ok(st) => [opts, st.code(), 0, sref.offset, 0, 0],
                    Err(r) => {
                        let [a, b, c] = details(r);
                        [opts, 0, r.code(), a, b, c]
                    }
                };
                let _ = tok.reply_short(report, &args);
            }
        } else {
            reply_status(tok, ack, slot, &result, details);
        }

        if let Ok((st, SignalStatus::Invoked)) = result {
            // Only structures this rank created run programs (the handle came from a sender).
            if s.signals.structure(sref.shape.id) == Some(sref.shape) {
                let rec = Record {
                    requester: Some(src),
                    ssp,
                    offset,
                    len: m.payload().len(),
                };
                invoke(&s.signals, &st, src, rec);
            }
        }
    });
    let s = shared.clone();
    let invoke_h = b.request_handler("volley.rma.signal.invoke", move |m, _| {
        let (id, key, off, sid) = (m.arg(0) >> 32, m.arg(1), m.arg(2), m.arg(3));
        let (src, offset, lw) = (m.arg(4) as usize, m.arg(5), m.arg(6));
        // The configuration comes from this rank's own list, never from the message.
        let Some(shape) = s.signals.structure(sid) else {
            s.count_refusal();
            return;
        };
        let Ok(st) = map_local(&s, id, key, off, shape) else {
            return;
        };
        if !st.matches() {
            s.count_refusal();
            return;
        }
        let rec = Record {
            requester: Some(src),
            ssp: (lw >> 48) as u16,
            offset,
            len: (lw & 0xffff_ffff) as usize,
        };
        invoke(&s.signals, &st, src, rec);
    });
    SignalHandlers {
        deliver,
        invoke: invoke_h,
    }
}

/// Replies to a blocking signal's slot with its status or refusal.
fn reply_status(
    tok: crate::am::ReplyToken<'_>,
    ack: ReplyHandler,
    slot: u64,
    result: &Result<(Structure, SignalStatus), Refusal>,
    details: impl Fn(&Refusal) -> [u64; 3],
) {
    let args = match result {
        Ok((_, status)) => [slot, 0, status.code(), 0, 0, 0],
        Err(r) => {
            let [a, b, c] = details(r);
            [slot, r.code(), 0, a, b, c]
        }
    };
    // A reply that cannot be sent means the runtime is going away.
    let _ = tok.reply_short(ack, &args);
}

/// Runs the structure's program (or the scheduler, or the sender's) for one entry; returns
/// whether it held the flag.
fn run(
    reg: &Registry,
    st: &Structure,
    src: usize,
    rec: &Record,
    data: &[u8],
    can_hold: bool,
) -> bool {
    let inv = st.shape.invocation();
    let requester = match inv {
        Some(Invocation::MemwSsp) => None,
        _ => rec.requester,
    };
    let sig = Signal {
        src,
        requester,
        offset: rec.offset as usize,
        data,
        can_hold,
        held: Cell::new(false),
    };
    let uls = || lock(&reg.uls).clone();
    let program = match inv {
        Some(Invocation::Uls) => {
            if let Some(u) = uls() {
                u(&sig);
            }
            None
        }
        Some(Invocation::DspByUls(h)) => match uls() {
            Some(u) if !u(&sig) => None,
            _ => Some(h.program),
        },
        Some(Invocation::Dsp(h)) => Some(h.program),
        Some(Invocation::Ssp | Invocation::MemwSsp) => Some(rec.ssp),
        _ => None,
    };
    if let Some(p) = program.and_then(|p| reg.program(p)) {
        p(&sig);
    }
    sig.held.get()
}

/// Invokes for one signal that said [`SignalStatus::Invoked`]; `carried` is that signal's
/// record (used where the storage keeps none of its own: NONW, and the exact offset of
/// MEMW_OFFSET under EVERY_TIME).
fn invoke(reg: &Registry, st: &Structure, src: usize, carried: Record) {
    let (Some(cond), Some(storage)) = (st.shape.condition(), st.shape.storage()) else {
        return;
    };
    let queued = matches!(storage, Storage::Queue { .. });
    let mut scratch = lock(&reg.scratch);
    if cond == Condition::FirstOnlyNonblk {
        loop {
            let mut rec = None;
            let next = state::next_or_clear(st.state(), st.taken(), queued, || {
                rec = st.pop(&mut scratch);
                rec.is_some()
            });
            if next == Next::Cleared {
                return;
            }
            let rec = rec.unwrap_or_else(|| match storage {
                Storage::None => carried,
                _ => st.record(),
            });
            let data = entry_data(st, &scratch, &rec, queued);
            if run(reg, st, src, &rec, data, true) {
                state::hold(st.state());
                return;
            }
        }
    }
    let rec = if queued {
        // This signal's entry was stored before it invoked, but the queue's head may be the
        // entry of a sender still between reserving and publishing it: wait for it (a few
        // instructions of the sender's), within a bound against a corrupted structure.
        let mut tries = 0u32;
        loop {
            if let Some(r) = st.pop(&mut scratch) {
                break r;
            }
            tries += 1;
            if tries > 1 << 20 {
                return;
            }
            if tries < 64 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
    } else {
        carried
    };
    let data = entry_data(st, &scratch, &rec, queued);
    run(reg, st, src, &rec, data, false);
    if cond == Condition::EveryTimeBlk {
        state::lower(st.state());
    }
}

/// The data of a taken entry: in the scratch buffer (queued) or in the structure's storage.
fn entry_data<'a>(st: &'a Structure, scratch: &'a [u8], rec: &Record, queued: bool) -> &'a [u8] {
    if queued {
        scratch
            .get(ENTRY_HEADER..ENTRY_HEADER + rec.len)
            .unwrap_or_default()
    } else {
        st.stored_data(rec)
    }
}

/// [`crate::rma::Rma::signal_next_or_clear`] on a structure of this rank.
pub(super) fn next_for_program(
    reg: &Registry,
    st: &Structure,
    buf: &mut [u8],
) -> Result<Option<TakenSignal>> {
    let (Some(inv), Some(cond), Some(storage)) = (
        st.shape.invocation(),
        st.shape.condition(),
        st.shape.storage(),
    ) else {
        return Err(Error::Refused {
            rank: usize::MAX,
            reason: Refusal::NotASignal,
        });
    };
    let queued = matches!(storage, Storage::Queue { .. });
    if let Storage::Queue { entry_size, .. } = storage {
        if buf.len() < entry_size {
            return Err(Error::PayloadTooLarge {
                len: entry_size,
                max: buf.len(),
            });
        }
    }
    let mut scratch = lock(&reg.scratch);
    let taken = |rec: Record, scratch: &[u8], buf: &mut [u8]| {
        let data = entry_data(st, scratch, &rec, queued);
        let n = data.len().min(buf.len());
        buf[..n].copy_from_slice(&data[..n]);
        Some(TakenSignal {
            requester: rec.requester,
            len: n,
            offset: rec.offset as usize,
        })
    };
    if inv == Invocation::Polling {
        if queued {
            return Ok(st.pop(&mut scratch).and_then(|r| taken(r, &scratch, buf)));
        }
        let s = st.state().load(std::sync::atomic::Ordering::Acquire) & state::COUNT;
        let t = st.taken().load(std::sync::atomic::Ordering::Relaxed);
        if s == t {
            return Ok(None);
        }
        st.taken().store(s, std::sync::atomic::Ordering::Relaxed);
        return Ok(taken(st.record(), &scratch, buf));
    }
    match cond {
        Condition::FirstOnlyBlk => {
            state::lower(st.state());
            Ok(None)
        }
        Condition::FirstOnlyNonblk if state::is_held(st.state()) => {
            let mut rec = None;
            let next = state::next_or_clear(st.state(), st.taken(), queued, || {
                rec = st.pop(&mut scratch);
                rec.is_some()
            });
            if next == Next::Cleared {
                return Ok(None);
            }
            let rec = rec.unwrap_or_else(|| st.record());
            Ok(taken(rec, &scratch, buf))
        }
        _ => Ok(None),
    }
}
