//! The signal structure in memory, and the engine's step on it: what a sender does on the
//! direct path and a handler at the target does on the AM path (check the structure, apply the
//! condition, store the data, count) with the same code and the same atomics, so the two paths
//! mix safely on one structure and give the same statuses.
//!
//! Layout from the structure's offset (8-byte aligned), every line its own 64 bytes:
//!
//! | bytes | what |
//! |---|---|
//! | 0..40 | magic, configuration word, two storage parameters, the structure's id |
//! | 64 | the state word ([`super::state`]: running flag, held, announced count) |
//! | 128 | the consumer's taken count |
//! | 192..232 | counters: stored, invoked, cancelled full, cancelled busy, cancelled disabled |
//! | 256..280 | the latest record of MEMW / MEMW_OFFSET storage: requester + 1 and SSP, offset, length |
//! | 320.. | storage: a memory-based FIFO of {record, data} entries (QUEW) or a buffer (MEMW) |

use super::state;
use super::{Condition, Invocation, SignalStatus, Storage};
use crate::refusal::Refusal;
use crate::rma::memops::{fifo_bytes, fifo_dequeue_at, fifo_enqueue_at, fifo_init, word};
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};

const MAGIC: u64 = 0x766f_6c6c_6579_5347;
const CONFIG_AT: usize = 8;
const PARAM_A_AT: usize = 16;
const PARAM_B_AT: usize = 24;
const ID_AT: usize = 32;
pub(super) const STATE_AT: usize = 64;
const TAKEN_AT: usize = 128;
const COUNTERS_AT: usize = 192;
const RECORD_AT: usize = 256;
const STORAGE_AT: usize = 320;
/// Bytes of record before a queued entry's data: requester + 1 and SSP, length.
pub(super) const ENTRY_HEADER: usize = 16;

/// The counters, in their order in memory.
#[derive(Debug, Clone, Copy)]
pub(super) enum Counter {
    Stored = 0,
    Invoked = 1,
    Full = 2,
    Busy = 3,
    Disabled = 4,
}

/// A structure's identity and configuration as its handle carries it: what the memory must
/// match before anyone trusts it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(super) struct Shape {
    pub(super) id: u64,
    pub(super) config: u64,
    pub(super) a: u64,
    pub(super) b: u64,
}

impl Shape {
    pub(super) fn invocation(&self) -> Option<Invocation> {
        Invocation::decode(self.config)
    }

    pub(super) fn condition(&self) -> Option<Condition> {
        Condition::from_code((self.config >> 16) as u8)
    }

    pub(super) fn storage(&self) -> Option<Storage> {
        Storage::decode((self.config >> 8) as u8, self.a, self.b)
    }

    /// Bytes of segment from the structure's offset on.
    pub(super) fn bytes(&self) -> Option<u64> {
        let storage = match self.storage()? {
            Storage::Queue {
                entry_size,
                capacity,
            } => fifo_bytes(entry_size as u64 + ENTRY_HEADER as u64, capacity as u64)?,
            Storage::Memory { size } => size as u64,
            Storage::None | Storage::MemoryOffset { .. } => 0,
        };
        storage.checked_add(STORAGE_AT as u64)
    }
}

/// One structure in mapped memory (the target's own, or a node-mate's on the direct path).
#[derive(Debug, Clone, Copy)]
pub(super) struct Structure {
    base: *mut u8,
    /// MEMW_OFFSET's window (null for the other storage types).
    window: *mut u8,
    pub(super) shape: Shape,
}

/// What a sender hands the engine: its rank, data, the offset for MEMW_OFFSET, and the program
/// it names (SSP types).
#[derive(Debug, Clone, Copy)]
pub(super) struct Arrival<'a> {
    pub(super) src: usize,
    pub(super) data: &'a [u8],
    pub(super) offset: u64,
    pub(super) ssp: u16,
}

/// One taken entry's record: who sent it (when recorded), the program it names, its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Record {
    pub(super) requester: Option<usize>,
    pub(super) ssp: u16,
    pub(super) offset: u64,
    pub(super) len: usize,
}

fn record_word(requester: Option<usize>, ssp: u16) -> u64 {
    requester.map_or(0, |r| r as u64 + 1) & 0xffff_ffff | (ssp as u64) << 32
}

fn parse_record(w: u64, offset: u64, len: u64) -> Record {
    let r = w & 0xffff_ffff;
    Record {
        requester: (r != 0).then(|| (r - 1) as usize),
        ssp: (w >> 32) as u16,
        offset,
        len: len as usize,
    }
}

thread_local! {
    /// A queued entry as it is built (record, then data): reused, so a steady stream of
    /// signals allocates nothing.
    static ENTRY: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Structure {
    /// The structure at `base`, with MEMW_OFFSET's window at `window`.
    ///
    /// # Safety
    /// `base` must be 8-byte aligned with `shape.bytes()` bytes mapped from it, and, for
    /// MEMW_OFFSET, `window` must have the window's `shape.b` bytes mapped, for as long as the
    /// value is used.
    pub(super) unsafe fn at(base: *mut u8, window: *mut u8, shape: Shape) -> Self {
        Self {
            base,
            window,
            shape,
        }
    }

    fn word(&self, at: usize) -> &AtomicU64 {
        // SAFETY: every offset used lies in the header lines, inside the structure's bytes
        // (`Structure::at`), and is a multiple of 8 from an 8-aligned base.
        unsafe { word(self.base.add(at)) }
    }

    pub(super) fn state(&self) -> &AtomicU64 {
        self.word(STATE_AT)
    }

    pub(super) fn taken(&self) -> &AtomicU64 {
        self.word(TAKEN_AT)
    }

    pub(super) fn count(&self, c: Counter) {
        self.word(COUNTERS_AT + 8 * c as usize)
            .fetch_add(1, Ordering::Relaxed);
    }

    pub(super) fn counter(&self, c: Counter) -> u64 {
        self.word(COUNTERS_AT + 8 * c as usize)
            .load(Ordering::Relaxed)
    }

    /// Writes an empty structure (the owner, before publishing the handle).
    pub(super) fn init(&self) {
        for at in (8..STORAGE_AT).step_by(8) {
            self.word(at).store(0, Ordering::Relaxed);
        }
        if let Some(Storage::Queue {
            entry_size,
            capacity,
        }) = self.shape.storage()
        {
            // SAFETY: the FIFO's bytes follow the header inside the structure (`bytes`).
            unsafe {
                fifo_init(
                    self.base.add(STORAGE_AT),
                    (entry_size + ENTRY_HEADER) as u64,
                    capacity as u64,
                )
            };
        }
        let s = &self.shape;
        self.word(CONFIG_AT).store(s.config, Ordering::Relaxed);
        self.word(PARAM_A_AT).store(s.a, Ordering::Relaxed);
        self.word(PARAM_B_AT).store(s.b, Ordering::Relaxed);
        self.word(ID_AT).store(s.id, Ordering::Relaxed);
        // Release: whoever sees the magic sees the rest initialized.
        self.word(0).store(MAGIC, Ordering::Release);
    }

    /// Whether the memory holds the structure the handle names.
    pub(super) fn matches(&self) -> bool {
        let s = &self.shape;
        self.word(0).load(Ordering::Acquire) == MAGIC
            && self.word(CONFIG_AT).load(Ordering::Relaxed) == s.config
            && self.word(PARAM_A_AT).load(Ordering::Relaxed) == s.a
            && self.word(PARAM_B_AT).load(Ordering::Relaxed) == s.b
            && self.word(ID_AT).load(Ordering::Relaxed) == s.id
    }

    /// The engine's step for one signal (see the module notes). `Err`: refused, nothing
    /// written, not counted here (the caller counts refusals in the segment table).
    pub(super) fn deliver(&self, a: Arrival<'_>) -> Result<SignalStatus, Refusal> {
        let (Some(inv), Some(cond), Some(storage)) = (
            self.shape.invocation(),
            self.shape.condition(),
            self.shape.storage(),
        ) else {
            return Err(Refusal::NotASignal);
        };
        if !self.matches() {
            return Err(Refusal::NotASignal);
        }
        // Refusals first: a refused signal changes nothing.
        let fits = match storage {
            Storage::None => true,
            Storage::Queue { entry_size, .. } => a.data.len() <= entry_size,
            Storage::Memory { size } => a.data.len() <= size.saturating_sub(ENTRY_HEADER),
            Storage::MemoryOffset { .. } => true,
        };
        if !fits {
            return Err(Refusal::EntrySize);
        }
        if let Storage::MemoryOffset { len, .. } = storage {
            if a.offset
                .checked_add(a.data.len() as u64)
                .is_none_or(|end| end > len as u64)
            {
                return Err(Refusal::OutOfBounds {
                    offset: a.offset,
                    len: a.data.len() as u64,
                    segment_len: len as u64,
                });
            }
        }
        if inv == Invocation::None {
            self.count(Counter::Disabled);
            return Ok(SignalStatus::Disabled);
        }
        let requester = (!matches!(inv, Invocation::MemwSsp)).then_some(a.src);
        let st = self.state();
        let blocking = inv != Invocation::Polling && cond.blocking();
        if blocking && !state::try_raise(st) {
            self.count(Counter::Busy);
            return Ok(SignalStatus::Busy);
        }
        if !self.store(storage, requester, a) {
            if blocking {
                state::lower(st);
            }
            self.count(Counter::Full);
            return Ok(SignalStatus::Full);
        }
        self.count(Counter::Stored);
        let invoke = match (inv, cond) {
            (Invocation::Polling, _) => {
                state::announce(st);
                false
            }
            (_, Condition::FirstOnlyNonblk) => state::announce_first_only(st),
            (_, Condition::EveryTimeNonblk) => {
                state::announce(st);
                true
            }
            (_, Condition::EveryTimeBlk | Condition::FirstOnlyBlk) => true,
        };
        if invoke {
            self.count(Counter::Invoked);
            Ok(SignalStatus::Invoked)
        } else {
            Ok(SignalStatus::Stored)
        }
    }

    /// Stores one signal's data and record; `false` if a queue is full (nothing written).
    fn store(&self, storage: Storage, requester: Option<usize>, a: Arrival<'_>) -> bool {
        let rec = record_word(requester, a.ssp);
        match storage {
            Storage::None => true,
            Storage::Queue {
                entry_size,
                capacity,
            } => ENTRY.with(|e| {
                let mut e = e.borrow_mut();
                e.clear();
                e.extend_from_slice(&rec.to_le_bytes());
                e.extend_from_slice(&(a.data.len() as u64).to_le_bytes());
                e.extend_from_slice(a.data);
                e.resize(ENTRY_HEADER + entry_size, 0);
                // SAFETY: the FIFO lies inside the structure's bytes (`Structure::at`),
                // 8-aligned; any number of producers may enqueue at once.
                let r = unsafe {
                    fifo_enqueue_at(
                        self.base.add(STORAGE_AT),
                        (ENTRY_HEADER + entry_size) as u64,
                        capacity as u64,
                        &e,
                    )
                };
                matches!(r, Ok(crate::rma::FifoStatus::Stored))
            }),
            Storage::Memory { .. } => {
                // SAFETY: the buffer follows the header inside the structure's bytes and the
                // data fits it (checked in `deliver`). Overwriting is MEMW's meaning.
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        a.data.as_ptr(),
                        self.base.add(STORAGE_AT),
                        a.data.len(),
                    )
                };
                self.set_record(rec, 0, a.data.len());
                true
            }
            Storage::MemoryOffset { .. } => {
                // SAFETY: the window is mapped (`Structure::at`) and the data fits it
                // (checked in `deliver`).
                unsafe {
                    std::ptr::copy_nonoverlapping(
                        a.data.as_ptr(),
                        self.window.add(a.offset as usize),
                        a.data.len(),
                    )
                };
                self.set_record(rec, a.offset, a.data.len());
                true
            }
        }
    }

    fn set_record(&self, rec: u64, offset: u64, len: usize) {
        self.word(RECORD_AT).store(rec, Ordering::Relaxed);
        self.word(RECORD_AT + 8).store(offset, Ordering::Relaxed);
        // Release: the data and the other record words before the length.
        self.word(RECORD_AT + 16)
            .store(len as u64, Ordering::Release);
    }

    /// The latest MEMW / MEMW_OFFSET record.
    pub(super) fn record(&self) -> Record {
        let len = self.word(RECORD_AT + 16).load(Ordering::Acquire);
        parse_record(
            self.word(RECORD_AT).load(Ordering::Relaxed),
            self.word(RECORD_AT + 8).load(Ordering::Relaxed),
            len,
        )
    }

    /// Where `rec`'s data lies: in the structure's buffer (MEMW) or the window (MEMW_OFFSET).
    pub(super) fn stored_data(&self, rec: &Record) -> &[u8] {
        let p = match self.shape.storage() {
            Some(Storage::Memory { size }) if rec.len <= size => {
                // SAFETY: the buffer lies inside the structure's bytes.
                unsafe { self.base.add(STORAGE_AT) }
            }
            Some(Storage::MemoryOffset { len, .. })
                if rec.offset.saturating_add(rec.len as u64) <= len as u64 =>
            {
                // SAFETY: inside the window, which is mapped.
                unsafe { self.window.add(rec.offset as usize) }
            }
            _ => return &[],
        };
        // SAFETY: `p..p+len` lies in mapped memory (above). Senders may overwrite it at any
        // time, as with any remote write (seed 002: MEMW's risk of overwriting).
        unsafe { std::slice::from_raw_parts(p, rec.len) }
    }

    /// Takes the queue's oldest entry into `buf` (record, then data; at least the entry's
    /// size): its record, or `None` if the queue shows nothing. One consumer at a time.
    pub(super) fn pop(&self, buf: &mut Vec<u8>) -> Option<Record> {
        let Some(Storage::Queue {
            entry_size,
            capacity,
        }) = self.shape.storage()
        else {
            return None;
        };
        let size = ENTRY_HEADER + entry_size;
        buf.resize(size, 0);
        // SAFETY: the FIFO lies inside the structure's bytes, 8-aligned; the caller is the
        // only consumer (the holder of the running flag, or the program in POLLING).
        let got = unsafe {
            fifo_dequeue_at(self.base.add(STORAGE_AT), size as u64, capacity as u64, buf)
        };
        if got != Ok(true) {
            return None;
        }
        let w = |i: usize| u64::from_le_bytes(buf[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
        let len = w(1).min(entry_size as u64);
        Some(parse_record(w(0), 0, len))
    }
}
