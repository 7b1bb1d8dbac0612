//! The AM path: handlers that check and apply one-sided operations at the target, and the
//! completion slots through which their replies reach the initiator.

use super::atomic::{self, AtomicOp};
use super::memops::{self, MemHandlers};
use super::segment::{Perms, Refusal};
use super::segment_table::Table;
use crate::am::{DirectMemory, ReplyHandler, RequestHandler, RuntimeBuilder};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

/// Completion slots: operations in flight at once (slot 0 collects implicit operations).
pub(crate) const SLOTS: usize = 4096;
/// The slot of implicit (`*_nbi`) operations.
pub(crate) const IMPLICIT_SLOT: u32 = 0;

/// This rank's own memory, as handlers need it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct LocalMem {
    pub(crate) segment: *mut u8,
    pub(crate) segment_len: usize,
    pub(crate) table: *mut u8,
}

// SAFETY: the pointers address this rank's shared region, mapped for the runtime's life, and
// are only dereferenced by the rank's own thread (handlers run on it) through atomics or
// bounds-checked copies.
unsafe impl Send for LocalMem {}
// SAFETY: as above.
unsafe impl Sync for LocalMem {}

/// Completion state of one operation.
#[derive(Debug, Default)]
struct Slot {
    /// Replies still expected.
    remaining: AtomicU64,
    /// 0, or the first refusal code.
    status: AtomicU64,
    /// An atomic's old value.
    value: AtomicU64,
    /// A get's data, as its fragments arrive. The slot owns it, not the caller's buffer, which
    /// it fills only when the get is waited for: an `Event` that is leaked (never dropped)
    /// leaves no pointer to memory that may be freed, and a late or forged reply can only
    /// write here.
    staging: Mutex<Vec<u8>>,
    /// Details of the first refusal: rank, offset, length, segment length.
    err: [AtomicU64; 4],
    /// The rank the operation went to last (for the hang report).
    target: AtomicU64,
}

/// What one rank made of a symmetric allocation: the segment id it got (`None`: no room),
/// the length and the permissions. Every rank must have made the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SymmetricOffer {
    pub(crate) id: Option<u16>,
    pub(crate) len: u64,
    pub(crate) perms: u64,
}

impl SymmetricOffer {
    /// As message arguments, after the allocation's sequence number.
    pub(crate) fn args(&self, seq: u64) -> [u64; 4] {
        let id = self.id.map_or(u64::MAX, u64::from);
        [seq, id, self.len, self.perms]
    }

    fn from_args(a: [u64; 3]) -> Self {
        Self {
            id: u16::try_from(a[0]).ok(),
            len: a[1],
            perms: a[2],
        }
    }
}

impl std::fmt::Display for SymmetricOffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.id {
            None => write!(f, "no room for a {}-byte segment", self.len),
            Some(id) => write!(
                f,
                "segment id {id} of {} bytes with permissions {:#b}",
                self.len, self.perms
            ),
        }
    }
}

/// The AM path's work at this rank on one segment-table entry (see [`super::TargetWork`]).
#[derive(Debug, Default)]
struct WorkCell {
    frames: AtomicU64,
    bytes: AtomicU64,
    largest: AtomicU64,
}

/// State shared between the `Rma` handle and its handlers.
#[derive(Debug)]
pub(crate) struct Shared {
    local: OnceLock<LocalMem>,
    slots: Box<[Slot]>,
    /// Other ranks' offers for symmetric allocations: sequence number, rank, offer. A fast
    /// rank's offer for the next allocation can arrive before this rank's current one ends.
    offers: Mutex<Vec<(u64, usize, SymmetricOffer)>>,
    /// Signal programs, the scheduler and this rank's signal structures.
    pub(crate) signals: super::signal::dispatch::Registry,
    /// Target-side work per segment-table entry.
    work: Box<[WorkCell]>,
    /// Command packets' reports and answers.
    pub(crate) cmds: super::command::Requester,
}

/// The handler ids of the one-sided layer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Handlers {
    pub(crate) get: RequestHandler,
    pub(crate) atomic: RequestHandler,
    /// The reply handler that completes a slot with a status and a value.
    pub(crate) ack: ReplyHandler,
    /// The memory-based operations' handlers (WRITE_F, FIFO, conditional write).
    pub(crate) mem: MemHandlers,
    /// Takes another rank's [`SymmetricOffer`] (one-way).
    pub(crate) offer: RequestHandler,
    /// Signals to signal structures.
    pub(crate) signal: super::signal::dispatch::SignalHandlers,
    /// Command packets (options, combining).
    pub(crate) cmd: super::command::CmdHandlers,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self {
            local: OnceLock::new(),
            slots: (0..SLOTS).map(|_| Slot::default()).collect(),
            offers: Mutex::new(Vec::new()),
            signals: Default::default(),
            work: (0..super::MAX_SEGMENTS)
                .map(|_| WorkCell::default())
                .collect(),
            cmds: Default::default(),
        }
    }

    /// Counts one frame of `bytes` handled at this rank for entry `id` (an id out of range
    /// names no entry and is refused by the check that follows).
    pub(crate) fn count_work(&self, id: u64, bytes: usize) {
        if let Some(w) = self.work.get(id as usize) {
            w.frames.fetch_add(1, Ordering::Relaxed);
            w.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
            w.largest.fetch_max(bytes as u64, Ordering::Relaxed);
        }
    }

    /// The work counted for entry `id`: frames, bytes, largest frame.
    pub(crate) fn work(&self, id: u16) -> [u64; 3] {
        self.work.get(id as usize).map_or([0; 3], |w| {
            [&w.frames, &w.bytes, &w.largest].map(|a| a.load(Ordering::Relaxed))
        })
    }

    /// Zeroes entry `id`'s work (when the id is given to a new segment or window).
    pub(crate) fn reset_work(&self, id: u16) {
        if let Some(w) = self.work.get(id as usize) {
            for a in [&w.frames, &w.bytes, &w.largest] {
                a.store(0, Ordering::Relaxed);
            }
        }
    }

    /// How many other ranks' offers for symmetric allocation `seq` have arrived.
    pub(crate) fn offers_for(&self, seq: u64) -> usize {
        let offers = self.offers.lock().unwrap_or_else(PoisonError::into_inner);
        offers.iter().filter(|o| o.0 == seq).count()
    }

    /// Takes the offers for symmetric allocation `seq`, by rank.
    pub(crate) fn take_offers(&self, seq: u64) -> Vec<(usize, SymmetricOffer)> {
        let mut offers = self.offers.lock().unwrap_or_else(PoisonError::into_inner);
        let mut taken: Vec<(usize, SymmetricOffer)> = offers
            .iter()
            .filter(|o| o.0 == seq)
            .map(|o| (o.1, o.2))
            .collect();
        offers.retain(|o| o.0 != seq);
        taken.sort_by_key(|o| o.0);
        taken
    }

    pub(crate) fn attach(&self, mem: DirectMemory) {
        let _ = self.local.set(LocalMem {
            segment: mem.segment,
            segment_len: mem.segment_len,
            table: mem.table,
        });
    }

    pub(crate) fn local(&self) -> &LocalMem {
        self.local.get().expect("Rma attached")
    }

    fn slot(&self, i: u64) -> Option<&Slot> {
        self.slots.get(i as usize)
    }

    /// Prepares a slot: `remaining` replies, room for `data_len` bytes of a get's data.
    pub(crate) fn arm(&self, slot: u32, remaining: u64, data_len: usize) {
        let s = &self.slots[slot as usize];
        s.status.store(0, Ordering::Relaxed);
        s.value.store(0, Ordering::Relaxed);
        {
            // Bytes left from an earlier get are overwritten by this one's fragments before
            // they are copied out; only growth needs filling.
            let mut staging = s.staging.lock().unwrap_or_else(PoisonError::into_inner);
            staging.truncate(data_len);
            staging.resize(data_len, 0);
        }
        s.remaining.store(remaining, Ordering::Relaxed);
    }

    /// Copies a completed get's data out of its slot into `buf` (as long as the get). A
    /// large staging buffer is freed rather than kept for the slot's next use.
    pub(crate) fn take_data(&self, slot: u32, buf: &mut [u8]) {
        const KEEP: usize = 4 << 20;
        let s = &self.slots[slot as usize];
        let mut staging = s.staging.lock().unwrap_or_else(PoisonError::into_inner);
        let n = buf.len().min(staging.len());
        buf[..n].copy_from_slice(&staging[..n]);
        if staging.capacity() > KEEP {
            *staging = Vec::new();
        }
    }

    /// Expects `n` more replies on `slot`, from `target`.
    pub(crate) fn add_remaining(&self, slot: u32, n: u64, target: usize) {
        self.aim(slot, target);
        self.slots[slot as usize]
            .remaining
            .fetch_add(n, Ordering::Relaxed);
    }

    /// Notes that `slot`'s operation goes to `target` (for the hang report).
    pub(crate) fn aim(&self, slot: u32, target: usize) {
        self.slots[slot as usize]
            .target
            .store(target as u64, Ordering::Relaxed);
    }

    /// The operations in flight, for the hang report: for each slot that waits for replies,
    /// the rank it last went to and the replies it waits for.
    pub(crate) fn outstanding(&self, out: &mut Vec<crate::am::report::Outstanding>) {
        for (i, s) in self.slots.iter().enumerate() {
            let remaining = s.remaining.load(Ordering::Relaxed);
            if remaining == 0 {
                continue;
            }
            let what = if i as u32 == IMPLICIT_SLOT {
                "one-sided operations (implicit, to sync)"
            } else {
                "one-sided operation"
            };
            out.push(crate::am::report::Outstanding {
                what: what.into(),
                target: s.target.load(Ordering::Relaxed) as usize,
                remaining,
            });
        }
    }

    pub(crate) fn add_remaining_neg(&self, slot: u32, n: u64) {
        self.slots[slot as usize]
            .remaining
            .fetch_sub(n, Ordering::Relaxed);
    }

    pub(crate) fn remaining(&self, slot: u32) -> u64 {
        self.slots[slot as usize].remaining.load(Ordering::Acquire)
    }

    pub(crate) fn value(&self, slot: u32) -> &AtomicU64 {
        &self.slots[slot as usize].value
    }

    /// The first refusal recorded in a slot: (code, rank, offset, len, segment_len).
    pub(crate) fn error(&self, slot: u32) -> Option<(u64, usize, u64, u64, u64)> {
        let s = &self.slots[slot as usize];
        let code = s.status.load(Ordering::Relaxed);
        (code != 0).then(|| {
            let e = s.err.each_ref().map(|x| x.load(Ordering::Relaxed));
            (code, e[0] as usize, e[1], e[2], e[3])
        })
    }

    /// Takes (and clears) the implicit slot's first refusal.
    pub(crate) fn take_implicit_error(&self) -> Option<(u64, usize, u64, u64, u64)> {
        let e = self.error(IMPLICIT_SLOT);
        self.slots[IMPLICIT_SLOT as usize]
            .status
            .store(0, Ordering::Relaxed);
        e
    }

    /// Records one reply: its status, value and refusal details.
    fn complete(&self, slot: &Slot, src: usize, status: u64, value: u64, detail: [u64; 3]) {
        if status != 0
            && slot
                .status
                .compare_exchange(0, status, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            let vals = [src as u64, detail[0], detail[1], detail[2]];
            for (f, v) in slot.err.iter().zip(vals) {
                f.store(v, Ordering::Relaxed);
            }
        }
        slot.value.store(value, Ordering::Relaxed);
        // Release: pairs with the acquire in `remaining`, so the waiter sees data and status.
        slot.remaining.fetch_sub(1, Ordering::Release);
    }

    /// Checks an access at this rank; `Err` carries (code, segment_len).
    fn check(
        &self,
        id: u64,
        key: u64,
        off: u64,
        len: u64,
        need: Perms,
    ) -> Result<*mut u8, (u64, u64)> {
        self.check_with(id, key, off, len, need, true)
    }

    /// Counts one refusal against this rank.
    pub(crate) fn count_refusal(&self) {
        if let Some(mem) = self.local.get() {
            // SAFETY: our own region's table bytes live as long as the runtime.
            unsafe { Table::at(mem.table) }.count_refusal();
        }
    }

    /// Like `check`, counting a refusal only if `count` (operations split into several
    /// messages count one refusal, not one per message).
    pub(crate) fn check_with(
        &self,
        id: u64,
        key: u64,
        off: u64,
        len: u64,
        need: Perms,
        count: bool,
    ) -> Result<*mut u8, (u64, u64)> {
        let Some(mem) = self.local.get() else {
            return Err((Refusal::NoSuchSegment.code(), 0));
        };
        // SAFETY: our own region's table bytes live as long as the runtime.
        let table = unsafe { Table::at(mem.table) };
        let refuse = |r: Refusal| {
            if count {
                table.count_refusal();
            }
            let seg_len = match r {
                Refusal::OutOfBounds { segment_len, .. } => segment_len,
                _ => 0,
            };
            (r.code(), seg_len)
        };
        let id = u16::try_from(id).map_err(|_| refuse(Refusal::NoSuchSegment))?;
        let g = table.check(id, key, off, len, need).map_err(refuse)?;
        // The entry's offset comes from shared memory: never trust it to stay in range.
        if g.area_offset
            .checked_add(len as usize)
            .is_none_or(|end| end > mem.segment_len)
        {
            return Err(refuse(Refusal::NoSuchSegment));
        }
        // SAFETY: inside our own segment area (checked above).
        Ok(unsafe { mem.segment.add(g.area_offset) })
    }
}

/// Registers the handlers of the AM path.
pub(crate) fn register(b: &mut RuntimeBuilder, shared: &Arc<Shared>) -> Handlers {
    let s = shared.clone();
    let ack: ReplyHandler = b.reply_handler("volley.rma.ack", move |m| {
        if let Some(slot) = s.slot(m.arg(0)) {
            s.complete(
                slot,
                m.src(),
                m.arg(1),
                m.arg(2),
                [m.arg(3), m.arg(4), m.arg(5)],
            );
        }
    });
    let s = shared.clone();
    let data: ReplyHandler = b.reply_handler("volley.rma.data", move |m| {
        let Some(slot) = s.slot(m.arg(0)) else { return };
        let (status, start, p) = (m.arg(1), m.arg(2), m.payload());
        if status == 0 {
            let mut staging = slot.staging.lock().unwrap_or_else(PoisonError::into_inner);
            // A reply that does not fit the slot's get is ignored rather than written
            // anywhere else.
            let range = usize::try_from(start)
                .ok()
                .and_then(|start| Some(start..start.checked_add(p.len())?));
            if let Some(dest) = range.and_then(|r| staging.get_mut(r)) {
                dest.copy_from_slice(p);
            }
        }
        s.complete(slot, m.src(), status, 0, [m.arg(3), m.arg(4), m.arg(5)]);
    });
    let s = shared.clone();
    let get = b.request_handler("volley.rma.get", move |m, tok| {
        // args: segment id, key, this fragment's offset and length, slot, the fragment's start
        // in the destination buffer, the whole get's offset and length. As for puts, every
        // fragment checks the whole range first (counted by the first fragment only), so a
        // refused get is refused in every fragment and reported with the whole access.
        let (id, key, off, n, slot, start) =
            (m.arg(0), m.arg(1), m.arg(2), m.arg(3), m.arg(4), m.arg(5));
        let (get_off, get_len) = (m.arg(6), m.arg(7));
        let n = n.min(crate::transport::shm::MEDIUM_MAX as u64);
        s.count_work(id, n as usize);
        let args = |status, seg_len| [slot, status, start, get_off, get_len, seg_len];
        let first = start == 0;
        let within = off.wrapping_sub(get_off) == start
            && start.checked_add(n).is_some_and(|end| end <= get_len);
        let checked = s
            .check_with(id, key, get_off, get_len, Perms::READ, first)
            .and_then(|_| {
                if within {
                    s.check_with(id, key, off, n, Perms::READ, false)
                } else {
                    Err((Refusal::NoSuchSegment.code(), 0))
                }
            });
        let _ = match checked {
            Ok(src) => {
                // SAFETY: checked to lie inside our segment; valid while this handler runs.
                let bytes = unsafe { std::slice::from_raw_parts(src, n as usize) };
                tok.reply_medium(data, &args(0, 0), bytes)
            }
            Err((status, seg_len)) => tok.reply_medium(data, &args(status, seg_len), &[]),
        };
    });
    let s = shared.clone();
    let atomic = b.request_handler("volley.rma.atomic", move |m, tok| {
        let (id, key, off, op, a, c, slot) = (
            m.arg(0),
            m.arg(1),
            m.arg(2),
            m.arg(3),
            m.arg(4),
            m.arg(5),
            m.arg(6),
        );
        s.count_work(id, 8);
        let result = s.check(id, key, off, 8, Perms::ATOMIC).and_then(|p| {
            let op = AtomicOp::from_code(op).ok_or((Refusal::NoAtomics.code(), 0))?;
            if (p as usize) % 8 != 0 {
                if let Some(mem) = s.local.get() {
                    // SAFETY: our own table, alive for the runtime's life.
                    unsafe { Table::at(mem.table) }.count_refusal();
                }
                return Err((Refusal::Misaligned.code(), 0));
            }
            // SAFETY: 8-aligned, inside our segment, accessed only atomically in this job.
            let word = unsafe { AtomicU64::from_ptr(p.cast()) };
            Ok(atomic::apply(word, op, a, c))
        });
        let reply = match result {
            Ok(old) => [slot, 0, old, off, 8, 0],
            Err((status, seg_len)) => [slot, status, 0, off, 8, seg_len],
        };
        let _ = tok.reply_short(ack, &reply);
    });
    let mem = memops::register(b, shared, ack);
    let signal = super::signal::dispatch::register(b, shared, ack);
    let cmd = super::command::register(b, shared);
    let s = shared.clone();
    let offer = b.request_handler("volley.rma.symmetric_offer", move |m, _| {
        let offer = SymmetricOffer::from_args([m.arg(1), m.arg(2), m.arg(3)]);
        s.offers
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push((m.arg(0), m.src(), offer));
    });
    Handlers {
        get,
        atomic,
        ack,
        mem,
        offer,
        signal,
        cmd,
    }
}
