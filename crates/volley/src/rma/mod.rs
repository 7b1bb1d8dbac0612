//! One-sided memory operations: put, get and atomics on protected segments (seed 002's MBCF,
//! seed 004's global memory access).
//!
//! A rank allocates [segments](segment) out of its shared segment area, each with a key and
//! read / write / atomic permissions. Any rank holding a [`SegmentRef`] can then write, read or
//! atomically update that memory without the owner's program taking part. Every access is
//! checked against the segment table at the target: the segment must be live, the key must
//! match, the range must fit and the permission must be granted. A refused access changes
//! nothing, is counted at the target ([`Rma::refused`]) and returns
//! [`Error::Refused`] naming the [`Refusal`].
//!
//! Long Active Messages (`Runtime::request_long`) write the segment area by offset, the same
//! area segments are carved from (first fit, from offset 0), but never a segment's memory: a
//! long message whose range touches a live segment is refused ([`Refusal::OnSegment`]) and
//! counted at the target like any refusal. A program that uses both keeps its long messages in
//! the area its segments leave free.
//!
//! Two paths, one per job ([`RmaPath`], `VOLLEY_RMA=direct|am`):
//! - **direct** (default between ranks of one host): the initiator checks the target's table in
//!   the mapped region and then uses `memcpy` and CPU atomics on the target's memory; no
//!   message, no target involvement;
//! - **am**: requests to handlers at the target, which check and apply them (puts and gets in
//!   64 KiB fragments, atomics one after another) and reply with the status, the data or the old
//!   value. This is the path for transports that cannot map the target. To a rank of this node
//!   a put or get still asks the target's handler, but moves its bytes with one copy between
//!   the caller's buffer and the mapped segment (`in_place`).
//!
//! On top of these, [seed 002's memory-based operations](memops): write with flag
//! ([`Rma::put_with_flag`]), memory-based FIFOs ([`Rma::fifo_create`], [`Rma::fifo_enqueue`],
//! [`Rma::fifo_enqueue_retry`], [`Rma::fifo_enqueue_normal`] with [`FifoSender`],
//! [`Rma::fifo_restart`], [`Rma::fifo_dequeue`]), [multicast UPDATE](multicast) with ack
//! combining, signals that run a handler at the target
//! ([`RmaSetup::register_signal`], [`Rma::signal`]), [signal structures](signal) with seed
//! 002's whole subcommand matrix ([`Rma::signal_create`], [`Rma::signal_to`]) and the
//! conditional z-buffer writes ([`Rma::conditional_write`], [`Rma::conditional_write_packed`]).
//!
//! ```no_run
//! use volley::rma::{Perms, Rma};
//! let mut b = volley::Runtime::builder();
//! let rma = Rma::register(&mut b);
//! let rt = b.build().unwrap();
//! let rma = rma.attach(&rt);
//! let seg = rma.alloc_symmetric(1 << 20, Perms::ALL).unwrap(); // collective
//! let right = (rt.rank() + 1) % rt.size();
//! rma.put(seg.on(right), 0, b"hello").unwrap();
//! let old = rma.fetch_add(seg.on(0), 64, 1).unwrap();
//! # let _ = old;
//! ```

pub mod agent;
mod allocate;
mod atomic;
pub mod command;
mod completion;
pub mod error;
mod handlers;
mod in_place;
pub mod memops;
pub mod multicast;
mod own;
pub mod segment;
pub(crate) mod segment_table;
pub mod signal;
mod work;

pub use agent::{Agent, AgentRef, Window};
pub use atomic::AtomicOp;
pub use command::{CmdOptions, CmdReport, CmdStatus, Combined, Command, Flow, Packet};
pub use completion::{Event, ImplicitScope};
pub use error::{Error, Result};
pub use memops::{FifoRef, FifoSender, FifoStatus, NormalStatus};
pub use own::OwnSegments;
pub use segment::{Perms, Refusal, SegmentRef, SymmetricSegment, MAX_SEGMENTS};
pub use signal::{
    Condition, Invocation, Signal, SignalConfig, SignalCounts, SignalHandler, SignalOptions,
    SignalRef, SignalReport, SignalStatus, StatusReply, Storage, TakenSignal, EMB_COLOURS,
};
pub use work::TargetWork;

use crate::am::Entered;
use crate::am::{Runtime, RuntimeBuilder};
use crate::transport::contract::LongGuard;
use handlers::{Handlers, Shared, SymmetricOffer};
use segment::AreaAllocator;
use segment_table::Table;
use std::cell::{Cell, RefCell};
use std::sync::atomic::{fence, AtomicU64, Ordering};
use std::sync::Arc;

/// How one-sided operations reach the target's memory (the same on every rank of a job).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RmaPath {
    /// Loads, stores, `memcpy` and CPU atomics on the mapped target memory.
    Direct,
    /// Requests to handlers at the target.
    ActiveMessages,
}

impl RmaPath {
    /// `VOLLEY_RMA=direct|am`, default direct.
    pub fn from_env() -> Result<Self> {
        match std::env::var("VOLLEY_RMA").as_deref() {
            Err(_) | Ok("direct") | Ok("") => Ok(RmaPath::Direct),
            Ok("am") => Ok(RmaPath::ActiveMessages),
            Ok(other) => Err(Error::InvalidConfig {
                name: "VOLLEY_RMA",
                value: other.to_string(),
                why: "expected direct or am",
            }),
        }
    }
}

/// The one-sided layer's handlers, registered in a builder; [`RmaSetup::attach`] it to the
/// runtime once built.
#[derive(Debug)]
pub struct RmaSetup {
    shared: Arc<Shared>,
    handlers: Handlers,
    path: RmaPath,
}

/// A segment this rank owns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LocalSegment {
    handle: SegmentRef,
    area_offset: usize,
}

impl LocalSegment {
    /// The handle other ranks use to reach it.
    pub fn handle(&self) -> SegmentRef {
        self.handle
    }
}

/// One-sided operations of one runtime.
#[derive(Debug)]
pub struct Rma<'rt> {
    rt: &'rt Runtime,
    shared: Arc<Shared>,
    handlers: Handlers,
    path: RmaPath,
    alloc: RefCell<AreaAllocator>,
    free_slots: RefCell<Vec<u32>>,
    symmetric_seq: Cell<u64>,
    /// Set by [`Rma::through_handlers`]: operations take the AM path even where the direct
    /// path could serve them.
    handlers_only: Cell<bool>,
    /// Segments owned by this rank, for local access and freeing: id, key, area offset and
    /// length. The key tells a live segment from an earlier one whose id it reuses.
    owned: RefCell<Vec<OwnedSegment>>,
}

/// A segment of this rank's table, as this rank's own accesses find it.
#[derive(Debug, Clone, Copy)]
struct OwnedSegment {
    id: u16,
    key: u64,
    area_offset: usize,
    len: usize,
    /// For an agent's window: the segment (id, key) it aliases, retired with it.
    alias_of: Option<(u16, u64)>,
}

impl RmaSetup {
    /// Checked access to this rank's own segments, for handlers of layers above (usable as
    /// soon as the runtime is built, from any thread that runs this rank's handlers).
    pub fn own_segments(&self) -> OwnSegments {
        OwnSegments::new(self.shared.clone())
    }

    /// Binds the setup to the built runtime (the handlers were already bound to this rank's
    /// memory by `build()`).
    pub fn attach(self, rt: &Runtime) -> Rma<'_> {
        let path = self.path;
        let mem = rt
            .direct_memory(rt.rank())
            .expect("a rank can always address its own region");
        self.shared.attach(mem);
        Rma {
            rt,
            shared: self.shared,
            handlers: self.handlers,
            path,
            alloc: RefCell::new(AreaAllocator::new(mem.segment_len)),
            free_slots: RefCell::new((1..handlers::SLOTS as u32).rev().collect()),
            symmetric_seq: Cell::new(0),
            handlers_only: Cell::new(false),
            owned: RefCell::new(Vec::new()),
        }
    }
}

impl Rma<'_> {
    /// Registers the one-sided layer's handlers in `b` (every rank must do this, in the same
    /// place of its registrations). The path comes from `VOLLEY_RMA`.
    pub fn register(b: &mut RuntimeBuilder) -> RmaSetup {
        let path = RmaPath::from_env();
        Self::register_with(b, path)
    }

    /// Like [`Rma::register`] with an explicit path. An `Err` (a bad `VOLLEY_RMA`, say) makes
    /// the builder's `build` fail with it.
    pub fn register_with(b: &mut RuntimeBuilder, path: Result<RmaPath>) -> RmaSetup {
        let path = path.unwrap_or_else(|e| {
            b.refuse_build(match e {
                Error::InvalidConfig { name, value, why } => {
                    crate::am::Error::InvalidConfig { name, value, why }
                }
                Error::Am(e) => e,
                other => crate::am::Error::Settings(other.to_string()),
            });
            RmaPath::Direct
        });
        let shared = Arc::new(Shared::new());
        // The path is part of the handler table, so ranks that disagree fail at init with a
        // handler-table mismatch naming it.
        let marker = match path {
            RmaPath::ActiveMessages => "volley.rma.path=am",
            RmaPath::Direct => "volley.rma.path=direct",
        };
        b.request_handler(marker, |_, _| {});
        let handlers = handlers::register(b, &shared);
        // Attached as the runtime is built, before a progress thread can run the handlers.
        let s = shared.clone();
        b.after_build(move |mem| s.attach(mem));
        let s = shared.clone();
        b.report_outstanding(Box::new(move |out| s.outstanding(out)));
        b.guard_long_messages(Arc::new(SegmentGuard));
        RmaSetup {
            shared,
            handlers,
            path,
        }
    }
}

/// Refuses a long message whose range touches a live segment of the target (see
/// [`Table::admit_long`]), counting the refusal in the target's table.
struct SegmentGuard;

impl LongGuard for SegmentGuard {
    fn admit(&self, upper: *mut u8, offset: usize, len: usize) -> std::result::Result<(), Refusal> {
        // SAFETY: `upper` is a mapped region's upper bytes, which hold its segment table and
        // live as long as the runtime that asks.
        unsafe { Table::at(upper) }.admit_long(offset, len)
    }
}

impl<'rt> Rma<'rt> {
    /// The path this job uses.
    pub fn path(&self) -> RmaPath {
        self.path
    }

    /// Checked access to this rank's own segments (see [`OwnSegments`]).
    pub fn own_segments(&self) -> OwnSegments {
        OwnSegments::new(self.shared.clone())
    }

    /// Remote accesses refused against this rank's segments so far.
    pub fn refused(&self) -> u64 {
        self.own_table().refused.load(Ordering::Relaxed)
    }

    fn own_table(&self) -> &Table {
        let mem = self.shared.local();
        // SAFETY: the table bytes of our own region live as long as the runtime.
        unsafe { Table::at(mem.table) }
    }

    /// Checks an access against `target`'s table in mapped memory; counts a refusal there.
    /// Every operation of the direct path passes here first, so it is also where a finalized
    /// runtime refuses them.
    fn check_direct(
        &self,
        target: SegmentRef,
        offset: u64,
        len: u64,
        need: Perms,
    ) -> Result<*mut u8> {
        // The target may have exited after the finalize: its memory is no one's to touch, and
        // the direct path must refuse what the AM path refuses.
        if self.rt.is_finalized() {
            return Err(crate::am::Error::Finalized.into());
        }
        let mem = self.rt.direct_memory(target.rank).ok_or(Error::from(
            crate::am::Error::InvalidRank {
                rank: target.rank,
                size: self.rt.size(),
            },
        ))?;
        // SAFETY: the table bytes of a mapped region live as long as the runtime.
        let table = unsafe { Table::at(mem.table) };
        match table.check(target.id, target.key, offset, len, need) {
            Ok(g)
                if g.area_offset
                    .checked_add(len as usize)
                    .is_some_and(|end| end <= mem.segment_len) =>
            {
                // SAFETY: inside the target's mapped segment area (checked just above).
                Ok(unsafe { mem.segment.add(g.area_offset) })
            }
            Ok(_) => Err(Error::Refused {
                rank: target.rank,
                reason: Refusal::NoSuchSegment,
            }),
            Err(reason) => {
                table.count_refusal();
                Err(Error::Refused {
                    rank: target.rank,
                    reason,
                })
            }
        }
    }

    /// Whether an access to `rank` goes straight to its mapped memory: on the direct path, for
    /// ranks of this node. Ranks on other nodes are always served by handlers at the target,
    /// which use the same atomic instructions, so the two paths mix safely on one segment.
    fn direct(&self, rank: usize) -> bool {
        self.path == RmaPath::Direct && !self.handlers_only.get() && self.rt.is_local(rank)
    }

    /// Runs `f` with this rank's one-sided operations sent to the target's handlers (the AM
    /// path, in place within a node) even on the direct path. A layer that must order its
    /// accesses with something the target does, such as sealing a segment, needs the check
    /// made by the target: on the direct path the initiator's check and its copy are two
    /// steps that the target cannot see between.
    pub fn through_handlers<R>(&self, f: impl FnOnce() -> R) -> R {
        let before = self.handlers_only.replace(true);
        let r = f();
        self.handlers_only.set(before);
        r
    }

    /// Takes the engine for an operation on `rank`'s memory (`rank` checked), and says
    /// whether it goes the direct path: there the operation copies and returns, serving
    /// nobody, so it enters as a local operation; otherwise it sends and may wait, polling,
    /// so it enters as a call.
    pub(crate) fn enter_for(&self, rank: usize) -> (Entered<'_>, bool) {
        let direct = self.direct(rank);
        let entered = if direct {
            self.rt.enter_local()
        } else {
            self.rt.enter()
        };
        (entered, direct)
    }

    fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.rt.size() {
            return Err(Error::from(crate::am::Error::InvalidRank {
                rank,
                size: self.rt.size(),
            }));
        }
        Ok(())
    }

    fn take_slot(&self) -> Result<u32> {
        let slot = self
            .free_slots
            .borrow_mut()
            .pop()
            .ok_or(Error::TooManyOutstanding {
                max: handlers::SLOTS - 1,
            })?;
        self.shared.arm(slot, 0, 0);
        Ok(slot)
    }

    /// Writes `data` into `target` at `offset`; returns once it is in the target's memory.
    pub fn put(&self, target: SegmentRef, offset: usize, data: &[u8]) -> Result<()> {
        self.check_rank(target.rank)?;
        if self.direct(target.rank) {
            // The direct path completes at once: no event to make and wait for.
            let _e = self.rt.enter_local();
            return self.put_direct(target, offset as u64, data);
        }
        self.put_nb(target, offset, data)?.wait()
    }

    /// Starts a put; `data` may be reused as soon as this returns.
    pub fn put_nb(&self, target: SegmentRef, offset: usize, data: &[u8]) -> Result<Event<'_>> {
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        let (off, len) = (offset as u64, data.len() as u64);
        if direct {
            self.put_direct(target, off, data)?;
            return Ok(self.done(None));
        }
        let slot = self.take_slot()?;
        let put = (target, self.handlers.mem.put);
        let in_place = self.put_in_place(target, off, data, None);
        if let Err(e) = self.send_fragments(put, off, data, in_place, slot, [0, 0]) {
            return Err(self.abandon_slot(slot, target, off, len, e));
        }
        Ok(self.pending(slot, target, off, len))
    }

    /// Starts a put completed by the next [`Rma::sync`].
    pub fn put_nbi(&self, target: SegmentRef, offset: usize, data: &[u8]) -> Result<()> {
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        if direct {
            return self.put_direct(target, offset as u64, data);
        }
        let put = (target, self.handlers.mem.put);
        let in_place = self.put_in_place(target, offset as u64, data, None);
        self.send_fragments(
            put,
            offset as u64,
            data,
            in_place,
            handlers::IMPLICIT_SLOT,
            [0, 0],
        )
    }

    /// The direct path's put: check the target's table, copy, release.
    fn put_direct(&self, target: SegmentRef, off: u64, data: &[u8]) -> Result<()> {
        let dst = self.check_direct(target, off, data.len() as u64, Perms::WRITE)?;
        // SAFETY: `dst..dst+len` was checked to lie in the target's segment. Concurrent
        // writers to one range race by the program's choice, as with any remote write.
        unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        // Release: a flag or message published after this makes the data visible.
        fence(Ordering::Release);
        Ok(())
    }

    /// Reads `buf.len()` bytes of `target` at `offset` into `buf`.
    pub fn get(&self, target: SegmentRef, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.check_rank(target.rank)?;
        if self.direct(target.rank) {
            // The direct path completes at once: no event to make and wait for.
            let _e = self.rt.enter_local();
            return self.get_direct(target, offset as u64, buf);
        }
        self.get_nb(target, offset, buf)?.wait()
    }

    /// The direct path's get: check the target's table, acquire, copy.
    fn get_direct(&self, target: SegmentRef, off: u64, buf: &mut [u8]) -> Result<()> {
        let src = self.check_direct(target, off, buf.len() as u64, Perms::READ)?;
        // Acquire: pairs with the writer's release (fence or flag) before our reads.
        fence(Ordering::Acquire);
        // SAFETY: `src..src+len` lies in the target's segment (checked); `buf` is ours.
        unsafe { crate::copy::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Starts a get into `buf`, which stays borrowed until the event completes.
    pub fn get_nb<'a>(
        &'a self,
        target: SegmentRef,
        offset: usize,
        buf: &'a mut [u8],
    ) -> Result<Event<'a>> {
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        let (off, len) = (offset as u64, buf.len() as u64);
        if direct {
            self.get_direct(target, off, buf)?;
            return Ok(self.done(None));
        }
        let slot = self.take_slot()?;
        // In place: one empty fragment that asks the target to check the whole range; the
        // bytes are copied from its mapped segment when the get completes.
        let src = self.admit_in_place(target, off, len, Perms::READ);
        let frag = self.rt.max_medium();
        let pieces = match src {
            Some(_) => 1,
            None => buf.len().div_ceil(frag).max(1),
        };
        let staged = if src.is_some() { 0 } else { buf.len() };
        self.shared.arm(slot, pieces as u64, staged);
        self.shared.aim(slot, target.rank);
        for i in 0..pieces {
            let start = (i * frag).min(buf.len());
            let n = match src {
                Some(_) => 0,
                None => (buf.len() - start).min(frag),
            };
            let args = [
                target.id as u64,
                target.key,
                off.wrapping_add(start as u64),
                n as u64,
                slot as u64,
                start as u64,
                off,
                len,
            ];
            if let Err(e) = self.rt.request_short(target.rank, self.handlers.get, &args) {
                self.shared.add_remaining_neg(slot, (pieces - i) as u64);
                // Wait for the pieces already requested before giving the buffer back.
                let _ = self.pending(slot, target, off, len).wait();
                return Err(e.into());
            }
        }
        let mut ev = self.pending(slot, target, off, len);
        ev.dest = Some(buf);
        ev.src = src;
        Ok(ev)
    }

    /// Where `len` bytes at `offset` of `target` lie in this process's mapping of the target's
    /// memory, after the checks for `need` (a refusal is counted at the target, as for any
    /// access): for layers that keep loads and stores of their own (a ring in a peer's
    /// segment). `Ok(None)` when the access would not go the direct path (another node, or
    /// `VOLLEY_RMA=am`): use the operations above then.
    ///
    /// Dereferencing the pointer is the caller's business: it stays valid while the target
    /// keeps the segment (until it frees it or finalizes), and the memory is shared, so it is
    /// accessed with copies and atomics only, never through references held across other
    /// ranks' writes.
    pub fn mapped(
        &self,
        target: SegmentRef,
        offset: usize,
        len: usize,
        need: Perms,
    ) -> Result<Option<std::ptr::NonNull<u8>>> {
        self.check_rank(target.rank)?;
        if !self.direct(target.rank) {
            return Ok(None);
        }
        let p = self.check_direct(target, offset as u64, len as u64, need)?;
        Ok(std::ptr::NonNull::new(p))
    }

    /// Applies `op` to the 64-bit word of `target` at `offset` (8-byte aligned) and returns
    /// the previous value. `operand` is the value to store, add, and with, ...; `compare` is
    /// used by `CompareSwap` only.
    pub fn atomic(
        &self,
        target: SegmentRef,
        offset: usize,
        op: AtomicOp,
        operand: u64,
        compare: u64,
    ) -> Result<u64> {
        self.check_rank(target.rank)?;
        let (_e, direct) = self.enter_for(target.rank);
        let off = offset as u64;
        if direct {
            let p = self.check_direct(target, off, 8, Perms::ATOMIC)?;
            if (p as usize) % 8 != 0 {
                // SAFETY: as in check_direct; the table outlives the call.
                let mem = self.rt.direct_memory(target.rank).expect("checked");
                unsafe { Table::at(mem.table) }.count_refusal();
                return Err(Error::Refused {
                    rank: target.rank,
                    reason: Refusal::Misaligned,
                });
            }
            // SAFETY: `p` is 8-aligned, inside the target's mapped segment, and every access
            // to this word in this job goes through atomics (one path per job).
            let word = unsafe { AtomicU64::from_ptr(p.cast()) };
            return Ok(atomic::apply(word, op, operand, compare));
        }
        let slot = self.take_slot()?;
        self.shared.add_remaining(slot, 1, target.rank);
        let args = [
            target.id as u64,
            target.key,
            off,
            op as u64,
            operand,
            compare,
            slot as u64,
        ];
        if let Err(e) = self
            .rt
            .request_short(target.rank, self.handlers.atomic, &args)
        {
            self.shared.add_remaining_neg(slot, 1);
            self.free_slots.borrow_mut().push(slot);
            return Err(e.into());
        }
        self.finish_slot(slot, target, off, 8)
    }

    /// Atomic fetch-and-add; returns the old value.
    pub fn fetch_add(&self, target: SegmentRef, offset: usize, v: u64) -> Result<u64> {
        self.atomic(target, offset, AtomicOp::FetchAdd, v, 0)
    }

    /// Atomic compare-and-swap; returns the old value (equal to `expect` on success).
    pub fn compare_swap(
        &self,
        target: SegmentRef,
        offset: usize,
        expect: u64,
        new: u64,
    ) -> Result<u64> {
        self.atomic(target, offset, AtomicOp::CompareSwap, new, expect)
    }
}

/// The error for a refusal reported by a target: (code, rank, offset, len, segment_len).
fn refusal_error((code, rank, offset, len, segment_len): (u64, usize, u64, u64, u64)) -> Error {
    Error::Refused {
        rank,
        reason: Refusal::from_code(code, offset, len, segment_len)
            .unwrap_or(Refusal::NoSuchSegment),
    }
}

fn mix(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

#[cfg(test)]
mod tests;
