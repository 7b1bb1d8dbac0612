//! Seed 002's memory-based operations on top of the one-sided layer: write with flag
//! (MBCF_WRITE_F), memory-based FIFOs (MBCF_FIFO, FIFOe_RETRY's ordered, lossless mode and
//! FIFOe_NORMAL's stop and restart), signals that run a handler at the target (MBCF_SIGNAL,
//! DSP_INVOKE with MEMW_OFFSET storage) and the conditional z-buffer write (MBCF_ZBUFFER).
//!
//! Every operation is checked against the target's segment table like a put: a refused
//! operation changes nothing at the target, is counted there ([`Rma::refused`]) and returns
//! [`Error::Refused`].
//!
//! How each one reaches the target:
//!
//! | operation | direct path | AM path |
//! |---|---|---|
//! | [`Rma::put_with_flag`] | `memcpy`, then a release store of the flag word | fragments to a handler; the last one stores the flag |
//! | [`Rma::fifo_enqueue`], [`Rma::fifo_enqueue_normal`] | lock-free enqueue on the mapped FIFO (many producer processes) | the same enqueue, run by a handler at the target |
//! | [`Rma::signal`] | `memcpy`, then a short request to the signal's handler | fragments to the signal's handler; the last one invokes it |
//! | [`Rma::conditional_write`] | a handler at the target | a handler at the target |
//! | [`Rma::conditional_write_packed`] | a handler at the target | a handler at the target |
//!
//! **Operations split into fragments.** Data larger than one medium message travels as several
//! requests on the same request ring, which is FIFO per sender, so the final action (flag store,
//! handler invocation) rides on the last fragment and runs after every byte is in. Every
//! fragment carries the whole operation's range and checks all of it (and the flag word), so
//! either every fragment writes or none does; only the first fragment counts a refusal.
//!
//! **Conditional writes run at the target on both paths.** Comparing the reference word, then
//! writing the data and the reference, must be one atomic step; handlers run one at a time, so
//! doing it in a handler makes it atomic with respect to every other conditional write to that
//! rank with no lock in shared memory. (It is not atomic with respect to plain puts to the same
//! bytes, which race by the program's choice, as with any remote write.)

use super::handlers::{Shared, IMPLICIT_SLOT};
use super::segment::{Perms, Refusal, SegmentRef};
use super::signal::{Signal, SignalHandler};
use super::{Rma, RmaSetup};
use crate::am::{Message, ReplyHandler, ReplyToken, RequestHandler, RuntimeBuilder};
use crate::rma::error::{Error, Result};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// The fragment is the operation's last: run its final action.
const LAST: u64 = 1;
/// The data is already in place (direct path): the message carries none.
const IN_PLACE: u64 = 2;
/// A FIFO enqueue's reply value: stored.
const STORED: u64 = 1;
/// A FIFO enqueue's reply value: full, cancelled.
const FULL: u64 = 2;
/// A FIFOe_NORMAL enqueue's reply value: full, and this enqueue stopped the FIFO.
const STOPPED_NOW: u64 = 3;
/// A FIFOe_NORMAL enqueue's reply value: the FIFO was already stopped.
const ALREADY_STOPPED: u64 = 4;
/// A FIFO enqueue's mode argument: MBCF_FIFO (also under RETRY).
const MODE_PLAIN: u64 = 0;
/// A FIFO enqueue's mode argument: FIFOe_NORMAL.
const MODE_NORMAL: u64 = 1;

/// The memory-based operations' request handlers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemHandlers {
    /// A plain put on the AM path: the same fragment machinery without a flag.
    pub(crate) put: RequestHandler,
    put_flag: RequestHandler,
    fifo: RequestHandler,
    zbuf: RequestHandler,
    zbuf_packed: RequestHandler,
}

/// The atomic word at `p`.
///
/// # Safety
/// `p` must be 8-byte aligned and point to 8 bytes that stay mapped for `'a` and are only
/// accessed atomically while shared.
pub(in crate::rma) unsafe fn word<'a>(p: *mut u8) -> &'a AtomicU64 {
    // SAFETY: guaranteed by the caller.
    unsafe { AtomicU64::from_ptr(p.cast()) }
}

// ---------------------------------------------------------------------------------------------
// Handlers at the target.
// ---------------------------------------------------------------------------------------------

/// A refusal at the target: code and the details the initiator reports.
#[derive(Debug, Clone, Copy)]
struct Fail {
    code: u64,
    off: u64,
    len: u64,
    seg_len: u64,
}

/// Checks `len` bytes at `off` of segment `id` at this rank.
fn check(
    s: &Shared,
    id: u64,
    key: u64,
    off: u64,
    len: u64,
    need: Perms,
    count: bool,
) -> Result<*mut u8, Fail> {
    s.check_with(id, key, off, len, need, count)
        .map_err(|(code, seg_len)| Fail {
            code,
            off,
            len,
            seg_len,
        })
}

/// Checks an 8-byte aligned word at `off` of segment `id` at this rank.
fn check_word(
    s: &Shared,
    id: u64,
    key: u64,
    off: u64,
    need: Perms,
    count: bool,
) -> Result<*mut u8, Fail> {
    let p = check(s, id, key, off, 8, need, count)?;
    if (p as usize) % 8 != 0 {
        if count {
            s.count_refusal();
        }
        return Err(Fail {
            code: Refusal::Misaligned.code(),
            off,
            len: 8,
            seg_len: 0,
        });
    }
    Ok(p)
}

fn reply(tok: ReplyToken<'_>, ack: ReplyHandler, slot: u64, r: Result<(u64, u64, u64), Fail>) {
    let args = match r {
        Ok((value, off, len)) => [slot, 0, value, off, len, 0],
        Err(f) => [slot, f.code, 0, f.off, f.len, f.seg_len],
    };
    // A reply that cannot be sent means the runtime is going away; nothing to report to.
    let _ = tok.reply_short(ack, &args);
}

/// One fragment of a fragmented write: [id, key, off, total, start, slot, flags, x0, x1].
#[derive(Debug, Clone, Copy)]
struct Frag {
    id: u64,
    key: u64,
    off: u64,
    total: u64,
    start: u64,
    slot: u64,
    flags: u64,
    extra: [u64; 2],
}

impl Frag {
    fn parse(m: &Message<'_>) -> Self {
        Self {
            id: m.arg(0),
            key: m.arg(1),
            off: m.arg(2),
            total: m.arg(3),
            start: m.arg(4),
            slot: m.arg(5),
            flags: m.arg(6),
            extra: [m.arg(7), m.arg(8)],
        }
    }

    fn args(&self) -> [u64; 9] {
        [
            self.id,
            self.key,
            self.off,
            self.total,
            self.start,
            self.slot,
            self.flags,
            self.extra[0],
            self.extra[1],
        ]
    }

    /// Checks the whole operation (its data range and, through `also`, anything else it
    /// touches), then writes this fragment's bytes. Returns the base of the data range and
    /// what `also` returned.
    fn apply<T>(
        &self,
        s: &Shared,
        payload: &[u8],
        also: impl FnOnce(bool) -> Result<T, Fail>,
    ) -> Result<(*mut u8, T), Fail> {
        s.count_work(self.id, payload.len());
        let count = self.start == 0;
        let base = check(
            s,
            self.id,
            self.key,
            self.off,
            self.total,
            Perms::WRITE,
            count,
        )?;
        let extra = also(count)?;
        if self.flags & IN_PLACE == 0 && !payload.is_empty() {
            if self
                .start
                .checked_add(payload.len() as u64)
                .is_none_or(|end| end > self.total)
            {
                // A malformed fragment: its bytes lie outside the operation it names.
                s.count_refusal();
                return Err(Fail {
                    code: Refusal::OutOfBounds {
                        offset: 0,
                        len: 0,
                        segment_len: 0,
                    }
                    .code(),
                    off: self.off + self.start,
                    len: payload.len() as u64,
                    seg_len: 0,
                });
            }
            // SAFETY: base..base+total lies in our segment (checked) and start+len <= total.
            unsafe {
                crate::copy::copy_nonoverlapping(
                    payload.as_ptr(),
                    base.add(self.start as usize),
                    payload.len(),
                )
            };
        }
        Ok((base, extra))
    }
}

/// Registers the memory-based operations' handlers (after the one-sided layer's own).
pub(crate) fn register(
    b: &mut RuntimeBuilder,
    shared: &Arc<Shared>,
    ack: ReplyHandler,
) -> MemHandlers {
    let s = shared.clone();
    let put = b.request_handler("volley.rma.put", move |m, tok| {
        let f = Frag::parse(m);
        let r = f
            .apply(&s, m.payload(), |_| Ok(()))
            .map(|_| (0, f.off, f.total));
        reply(tok, ack, f.slot, r);
    });
    let s = shared.clone();
    let put_flag = b.request_handler("volley.rma.put_flag", move |m, tok| {
        let f = Frag::parse(m);
        let [flag_off, flag_val] = f.extra;
        let r = f
            .apply(&s, m.payload(), |count| {
                check_word(&s, f.id, f.key, flag_off, Perms::WRITE, count)
            })
            .map(|(_, flag)| {
                if f.flags & LAST != 0 {
                    // SAFETY: checked: 8-aligned, inside our segment. Release: whoever
                    // acquires the flag sees every fragment's data (earlier fragments ran
                    // before this one: the request ring is FIFO).
                    unsafe { word(flag) }.store(flag_val, Ordering::Release);
                }
                (0, f.off, f.total)
            });
        reply(tok, ack, f.slot, r);
    });
    let s = shared.clone();
    let fifo = b.request_handler("volley.rma.fifo", move |m, tok| {
        let (id, key, off, entry_size, capacity, slot) =
            (m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4), m.arg(5));
        let mode = m.arg(6);
        let len = fifo_bytes(entry_size, capacity).unwrap_or(u64::MAX);
        let r = check(&s, id, key, off, len, Perms::WRITE | Perms::ATOMIC, true).and_then(|p| {
            let refuse = |r: Refusal| {
                s.count_refusal();
                Fail {
                    code: r.code(),
                    off,
                    len,
                    seg_len: 0,
                }
            };
            if (p as usize) % 8 != 0 {
                return Err(refuse(Refusal::Misaligned));
            }
            // SAFETY: p is 8-aligned and the FIFO's bytes lie in our segment (checked).
            match unsafe { enqueue_at_in_mode(p, entry_size, capacity, m.payload(), mode) } {
                Ok(code) => Ok((code, off, len)),
                Err(r) => Err(refuse(r)),
            }
        });
        reply(tok, ack, slot, r);
    });
    let s = shared.clone();
    let zbuf = b.request_handler("volley.rma.zbuffer", move |m, tok| {
        let (id, key, ref_off, ref_val, data_off, slot) =
            (m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4), m.arg(5));
        let data = m.payload();
        let r = check_word(&s, id, key, ref_off, Perms::WRITE, true).and_then(|rp| {
            let dp = check(&s, id, key, data_off, data.len() as u64, Perms::WRITE, true)?;
            // SAFETY: checked: 8-aligned, inside our segment. Handlers run one at a time, so
            // the compare, the data write and the reference store are one atomic step with
            // respect to every other conditional write to this rank.
            let r = unsafe { word(rp) };
            if r.load(Ordering::Acquire) > ref_val {
                // SAFETY: dp..dp+len lies in our segment (checked).
                unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), dp, data.len()) };
                r.store(ref_val, Ordering::Release);
                Ok((1, data_off, data.len() as u64))
            } else {
                Ok((0, data_off, data.len() as u64))
            }
        });
        reply(tok, ack, slot, r);
    });
    let zbuf_packed = zbuf_packed::register(b, shared, ack);
    MemHandlers {
        put,
        put_flag,
        fifo,
        zbuf,
        zbuf_packed,
    }
}

impl RmaSetup {
    /// Registers a signal handler under `name` (every rank registers the same signals, in the
    /// same order, before `build`). [`Rma::signal`] writes data into a segment of a target rank
    /// and then runs `handler` there with the source rank, the offset and the data, on the
    /// target's thread, one handler at a time like any request handler.
    pub fn register_signal<F>(
        &self,
        b: &mut RuntimeBuilder,
        name: &str,
        handler: F,
    ) -> SignalHandler
    where
        F: Fn(&Signal<'_>) + Send + Sync + 'static,
    {
        let handler: Arc<dyn Fn(&Signal<'_>) + Send + Sync> = Arc::new(handler);
        let program = self.shared.signals.add_program(handler.clone());
        let s = self.shared.clone();
        let ack = self.handlers.ack;
        let id = b.request_handler(&format!("volley.rma.signal:{name}"), move |m, tok| {
            let f = Frag::parse(m);
            let r = f.apply(&s, m.payload(), |_| Ok(())).map(|(base, ())| {
                if f.flags & LAST != 0 {
                    // SAFETY: base..base+total lies in our segment (checked by `apply`); the
                    // slice lives only while the handler runs.
                    let data = unsafe { std::slice::from_raw_parts(base, f.total as usize) };
                    handler(&Signal {
                        src: m.src(),
                        requester: Some(m.src()),
                        offset: f.off as usize,
                        data,
                        can_hold: false,
                        held: std::cell::Cell::new(false),
                    });
                }
                (0, f.off, f.total)
            });
            reply(tok, ack, f.slot, r);
        });
        SignalHandler { am: id, program }
    }
}

// ---------------------------------------------------------------------------------------------
// The initiator's side.
// ---------------------------------------------------------------------------------------------

impl<'rt> Rma<'rt> {
    /// Counts a refusal in `rank`'s table (for checks made after `check_direct` passed).
    fn refuse_direct(&self, rank: usize, reason: Refusal) -> Error {
        if let Some(mem) = self.rt.direct_memory(rank) {
            // SAFETY: the table bytes of a mapped region live as long as the runtime.
            unsafe { super::segment_table::Table::at(mem.table) }.count_refusal();
        }
        Error::Refused { rank, reason }
    }

    /// Checks an 8-aligned word on the direct path.
    fn check_direct_word(&self, target: SegmentRef, offset: u64, need: Perms) -> Result<*mut u8> {
        let p = self.check_direct(target, offset, 8, need)?;
        if (p as usize) % 8 != 0 {
            return Err(self.refuse_direct(target.rank, Refusal::Misaligned));
        }
        Ok(p)
    }

    /// Sends a fragmented write to `handler` at the target: `data` in pieces of at most one
    /// medium payload (or, if `in_place`, one message naming `data.len()` bytes already
    /// written). Each piece is acknowledged on `slot`.
    pub(super) fn send_fragments(
        &self,
        (target, handler): (SegmentRef, RequestHandler),
        off: u64,
        data: &[u8],
        in_place: bool,
        slot: u32,
        extra: [u64; 2],
    ) -> Result<()> {
        let frag = self.rt.max_medium();
        let pieces = if in_place {
            1
        } else {
            data.len().div_ceil(frag).max(1)
        };
        self.shared.add_remaining(slot, pieces as u64, target.rank);
        for i in 0..pieces {
            let mut f = Frag {
                id: target.id as u64,
                key: target.key,
                off,
                total: data.len() as u64,
                start: (i * frag) as u64,
                slot: slot as u64,
                flags: if i + 1 == pieces { LAST } else { 0 },
                extra,
            };
            let sent = if in_place {
                f.flags |= IN_PLACE;
                self.rt.request_short(target.rank, handler, &f.args())
            } else {
                let chunk = &data[(i * frag).min(data.len())..((i + 1) * frag).min(data.len())];
                self.rt
                    .request_medium(target.rank, handler, &f.args(), chunk)
            };
            if let Err(e) = sent {
                // Pieces not sent will never be acknowledged.
                self.shared.add_remaining_neg(slot, (pieces - i) as u64);
                return Err(e.into());
            }
        }
        Ok(())
    }

    /// Waits for an operation on `slot` and returns the value of its last reply.
    pub(super) fn finish_slot(
        &self,
        slot: u32,
        target: SegmentRef,
        off: u64,
        len: u64,
    ) -> Result<u64> {
        let ev = self.pending(slot, target, off, len);
        let value = self.shared.value(slot);
        ev.wait().map(|()| value.load(Ordering::Relaxed))
    }

    /// Releases a slot whose operation could not be sent at all.
    pub(super) fn abandon_slot(
        &self,
        slot: u32,
        target: SegmentRef,
        off: u64,
        len: u64,
        e: Error,
    ) -> Error {
        // Wait for any piece already sent before reusing the slot.
        let _ = self.pending(slot, target, off, len).wait();
        e
    }

    /// MBCF_WRITE_F: writes `data` at `offset` of `target`, then stores `flag_value` in the
    /// 8-byte aligned word at `flag_offset` of the same segment, so that whoever sees the flag
    /// (with an acquire load) sees all the data. Both ranges need write permission and are
    /// checked before anything is written. Returns once data and flag are in.
    ///
    /// Direct path: `memcpy`, then a release store of the flag. AM path: the data in
    /// fragments and the flag stored by the handler of the last fragment (the request ring is
    /// FIFO per sender).
    pub fn put_with_flag(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        flag_offset: usize,
        flag_value: u64,
    ) -> Result<()> {
        self.put_with_flag_on(target, offset, data, flag_offset, flag_value, false)
    }

    /// Like [`Rma::put_with_flag`], completed (and its refusal reported) by the next
    /// [`Rma::sync`]; `data` may be reused as soon as this returns.
    pub fn put_with_flag_nbi(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        flag_offset: usize,
        flag_value: u64,
    ) -> Result<()> {
        self.put_with_flag_on(target, offset, data, flag_offset, flag_value, true)
    }

    fn put_with_flag_on(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        flag_offset: usize,
        flag_value: u64,
        implicit: bool,
    ) -> Result<()> {
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        let (off, len, foff) = (offset as u64, data.len() as u64, flag_offset as u64);
        if direct {
            let dst = self.check_direct(target, off, len, Perms::WRITE)?;
            let flag = self.check_direct_word(target, foff, Perms::WRITE)?;
            // SAFETY: `dst..dst+len` and the 8-aligned flag word lie in the target's segment
            // (checked). The release store orders the copy before the flag.
            unsafe {
                crate::copy::copy_nonoverlapping(data.as_ptr(), dst, data.len());
                word(flag).store(flag_value, Ordering::Release);
            }
            return Ok(());
        }
        let h = self.handlers.mem.put_flag;
        let extra = [foff, flag_value];
        let in_place = self.put_in_place(target, off, data, Some(foff));
        if implicit {
            return self.send_fragments((target, h), off, data, in_place, IMPLICIT_SLOT, extra);
        }
        let slot = self.take_slot()?;
        if let Err(e) = self.send_fragments((target, h), off, data, in_place, slot, extra) {
            return Err(self.abandon_slot(slot, target, off, len, e));
        }
        self.finish_slot(slot, target, off, len).map(drop)
    }

    /// MBCF_SIGNAL: writes `data` at `offset` of `target` (write permission), then runs
    /// `handler` at the target with this rank, the offset and the data. Returns once the
    /// handler has run.
    ///
    /// Direct path: `memcpy`, then a short request to the handler. AM path: the data in
    /// fragments, the last of which invokes the handler. Either way the request ring is FIFO
    /// per sender, so the handler runs after all the data is in.
    pub fn signal(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        handler: SignalHandler,
    ) -> Result<()> {
        self.check_rank(target.rank)?;
        let (off, len) = (offset as u64, data.len() as u64);
        let slot = self.take_slot()?;
        if let Err(e) = self.send_signal(target, off, data, handler, slot) {
            return Err(self.abandon_slot(slot, target, off, len, e));
        }
        self.finish_slot(slot, target, off, len).map(drop)
    }

    /// Like [`Rma::signal`] without waiting for the handler: completed (and its refusal
    /// reported) by the next [`Rma::sync`]; `data` may be reused as soon as this returns.
    pub fn signal_nbi(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        handler: SignalHandler,
    ) -> Result<()> {
        self.check_rank(target.rank)?;
        self.send_signal(target, offset as u64, data, handler, IMPLICIT_SLOT)
    }

    fn send_signal(
        &self,
        target: SegmentRef,
        off: u64,
        data: &[u8],
        handler: SignalHandler,
        slot: u32,
    ) -> Result<()> {
        let in_place = if self.direct(target.rank) {
            let _e = self.rt.enter_local();
            let dst = self.check_direct(target, off, data.len() as u64, Perms::WRITE)?;
            // SAFETY: `dst..dst+len` lies in the target's segment (checked).
            unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
            // Release: the request published next makes the data visible to the handler.
            fence(Ordering::Release);
            true
        } else {
            let _e = self.rt.enter();
            self.put_in_place(target, off, data, None)
        };
        self.send_fragments((target, handler.am), off, data, in_place, slot, [0, 0])
    }

    /// MBCF_ZBUFFER: if the 64-bit word at `ref_offset` (8-byte aligned) of `target` is
    /// greater (unsigned) than `ref_value`, writes `data` at `data_offset` and stores
    /// `ref_value` in the word, atomically; otherwise changes nothing. Returns whether it
    /// wrote. Both ranges need write permission; `data` is at most one medium message
    /// ([`crate::Runtime::max_medium`]), the seed's one packet.
    ///
    /// Runs in a handler at the target on both paths (see the module notes), so it is atomic
    /// with respect to every other conditional write to that rank, and a set of conditional
    /// writes leaves the same image whatever order they arrive in.
    pub fn conditional_write(
        &self,
        target: SegmentRef,
        ref_offset: usize,
        ref_value: u64,
        data_offset: usize,
        data: &[u8],
    ) -> Result<bool> {
        // Always through a handler at the target (the check and the write are one step there),
        // so it is a call that waits, polling.
        let _e = self.rt.enter();
        self.check_rank(target.rank)?;
        if data.len() > self.rt.max_medium() {
            return Err(Error::PayloadTooLarge {
                len: data.len(),
                max: self.rt.max_medium(),
            });
        }
        let (off, len) = (data_offset as u64, data.len() as u64);
        let slot = self.take_slot()?;
        self.shared.add_remaining(slot, 1, target.rank);
        let args = [
            target.id as u64,
            target.key,
            ref_offset as u64,
            ref_value,
            off,
            slot as u64,
        ];
        if let Err(e) = self
            .rt
            .request_medium(target.rank, self.handlers.mem.zbuf, &args, data)
        {
            self.shared.add_remaining_neg(slot, 1);
            return Err(self.abandon_slot(slot, target, off, len, e.into()));
        }
        self.finish_slot(slot, target, off, len).map(|v| v == 1)
    }
}

mod fifo;
#[cfg(test)]
mod tests;
mod zbuf_packed;

mod fifo_sender;

pub(in crate::rma) use fifo::{
    enqueue_at_in_mode, fifo_bytes, fifo_dequeue_at, fifo_enqueue_at, fifo_header_ok, fifo_init,
};
pub use fifo::{FifoRef, FifoStatus, NormalStatus};
pub use fifo_sender::FifoSender;
