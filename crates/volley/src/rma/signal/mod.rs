//! Seed 002's memory-based signals (MBCF_SIGNAL) with the whole subcommand matrix: a *signal
//! structure* lives in a segment of the target, created by its owner with a
//! [`SignalConfig`] (invocation type, parameter-storage type, invocation condition), and
//! any rank signals it with [`Rma::signal_to`].
//!
//! ```no_run
//! use volley::rma::{Condition, Invocation, Perms, Rma, SignalConfig, Storage};
//! let mut b = volley::Runtime::builder();
//! let setup = Rma::register(&mut b);
//! let program = setup.register_signal(&mut b, "work", |sig| {
//!     println!("{} bytes from {:?}", sig.len(), sig.requester());
//! });
//! let rt = b.build().unwrap();
//! let rma = setup.attach(&rt);
//! let seg = rma.alloc_symmetric(1 << 16, Perms::ALL).unwrap();
//! let config = SignalConfig {
//!     invocation: Invocation::Dsp(program),
//!     storage: Storage::Queue { entry_size: 64, capacity: 32 },
//!     condition: Condition::FirstOnlyNonblk,
//! };
//! let sref = rma.signal_create(seg.on(rt.rank()), 0, config).unwrap();
//! // Send sref.to_words() to the senders; each of them:
//! let status = rma.signal_to(sref, b"hello").unwrap();
//! # let _ = status;
//! ```
//!
//! **The engine's step and the invocation.** A signal is first *delivered*: the structure is
//! checked, the condition applied, the data and the requester stored, counters bumped
//! (`structure`). On the direct path the sender does this itself on the target's mapped
//! memory; a signal that must invoke a program then sends one short request to the target,
//! and one that only queues behind a running program sends nothing at all. On the AM path
//! (any rank of another node, or `VOLLEY_RMA=am`) a handler at the target delivers it and
//! replies with the status. Either way the program then runs at the target where its handlers
//! run (seed 002: "only during the target task's scheduling periods"): inside `poll` or a wait
//! in inline progress, on the progress thread with `VOLLEY_PROGRESS=thread`. Never in the
//! sender, never inside the delivery.
//!
//! **Invocation types** ([`Invocation`]): NONE (disabled: every signal is cancelled),
//! POLLING (stored only; the program takes entries with [`Rma::signal_next_or_clear`]),
//! ULS_INVOKE (the rank's user-level scheduler, [`RmaSetup::register_uls`]), DSP_BY_ULS (the
//! scheduler, which decides whether the structure's program runs), DSP_INVOKE (the program
//! the structure names), SSP_INVOKE (the program the sender names, which must be registered:
//! volley names programs by index, never by address) and MEMW_SSP (SSP over MEMW_OFFSET
//! storage, with no requester recorded).
//!
//! **Conditions** ([`Condition`]): EVERY_TIME_NONBLK invokes on every signal; FIRST_ONLY_NONBLK
//! invokes only when no program of the structure runs, and otherwise only stores: the running
//! program takes the later entries with the atomic "next entry or clear the flag" call
//! (`state`), which the dispatcher makes after every run, so no signal is lost or waits for
//! a next one. A program that wants to keep the flag calls [`Signal::hold`] and the rank
//! drains later with [`Rma::signal_next_or_clear`]. The blocking conditions cancel a signal
//! that arrives while the flag is up ([`SignalStatus::Busy`], nothing stored):
//! EVERY_TIME_BLK lowers the flag when the program returns; FIRST_ONLY_BLK keeps it up until
//! the rank resets it with [`Rma::signal_next_or_clear`] (the seed leaves the difference open;
//! this is volley's reading). Handlers run one at a time per rank, so a NONBLK program is never
//! interrupted by itself: "no atomicity" is allowed, never forced.
//!
//! **Storage** ([`Storage`]): NONW (nothing), QUEW (a memory-based FIFO of entries with their
//! requester; full: the signal is cancelled, [`SignalStatus::Full`]), MEMW (one buffer, each
//! signal overwrites it), MEMW_OFFSET (a window of the segment, the sender gives the offset).
//! The requester's rank (which names its node and task) is recorded except under MEMW_SSP.
//!
//! **Options** ([`options`]): [`Rma::signal_to_nbi`] sends without waiting, with seed 002's
//! status-reply option and an elastic-memory-barrier colour whose request and reply counters
//! the program reads ([`Rma::emb_counters`]) and waits on ([`Rma::emb_wait`]).
//!
//! **Refusals and cancellations.** A signal to no structure, with data larger than an entry,
//! outside MEMW_OFFSET's window or naming an unregistered program is refused with
//! [`Error::Refused`] and counted in the target's segment table ([`Rma::refused`]); full,
//! busy and disabled signals are cancelled with a status and counted in the structure
//! ([`Rma::signal_counts`]). Neither changes the target's memory beyond the counter.

pub(crate) mod dispatch;
pub mod options;
pub(crate) mod state;
mod structure;
#[cfg(test)]
mod tests;

use super::segment::{Perms, Refusal, SegmentRef};
use super::{Rma, RmaSetup};
use crate::rma::error::{Error, Result};
pub use dispatch::Signal;
pub use options::{SignalOptions, SignalReport, StatusReply, EMB_COLOURS};
use std::sync::atomic::{fence, Ordering};
use structure::{Arrival, Counter, Shape, Structure, ENTRY_HEADER};

/// How a signal invokes a program at the target (seed 002's invocation type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Invocation {
    /// MB_SIGNAL_NONE: the structure is disabled; every signal is cancelled.
    None,
    /// MB_SIGNAL_POLLING: nothing is invoked; the owner takes entries with
    /// [`Rma::signal_next_or_clear`].
    Polling,
    /// MB_SIGNAL_ULS_INVOKE: the rank's user-level scheduler runs.
    Uls,
    /// MB_SIGNAL_DSP_BY_ULS: the scheduler runs and, if it returns `true`, the structure's
    /// program.
    DspByUls(SignalHandler),
    /// MB_SIGNAL_DSP_INVOKE: the structure's (destination-specified) program runs.
    Dsp(SignalHandler),
    /// MB_SIGNAL_SSP_INVOKE: the program the sender names runs.
    Ssp,
    /// MB_SIGNAL_MEMW_SSP: as SSP over [`Storage::MemoryOffset`], recording no requester.
    MemwSsp,
}

impl Invocation {
    fn code(self) -> u64 {
        let (code, program) = match self {
            Invocation::None => (0, 0),
            Invocation::Polling => (1, 0),
            Invocation::Uls => (2, 0),
            Invocation::DspByUls(h) => (3, h.program),
            Invocation::Dsp(h) => (4, h.program),
            Invocation::Ssp => (5, 0),
            Invocation::MemwSsp => (6, 0),
        };
        code | (program as u64) << 32
    }

    fn decode(config: u64) -> Option<Self> {
        let h = SignalHandler {
            am: crate::am::RequestHandler::from_index(u16::MAX),
            program: (config >> 32) as u16,
        };
        Some(match config & 0xff {
            0 => Invocation::None,
            1 => Invocation::Polling,
            2 => Invocation::Uls,
            3 => Invocation::DspByUls(h),
            4 => Invocation::Dsp(h),
            5 => Invocation::Ssp,
            6 => Invocation::MemwSsp,
            _ => return None,
        })
    }
}

/// Where a signal's data and requester are stored (seed 002's parameter-storage type).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Storage {
    /// MB_SIGNAL_NONW: nothing is stored (the program learns the requester from the
    /// invocation when it is invoked for this very signal).
    None,
    /// MB_SIGNAL_QUEW: a FIFO of `capacity` entries of up to `entry_size` bytes each, with the
    /// requester; a signal to a full queue is cancelled.
    Queue {
        /// Largest data of one signal.
        entry_size: usize,
        /// Entries the queue holds (at least 2).
        capacity: usize,
    },
    /// MB_SIGNAL_MEMW: one buffer of `size` bytes (data up to `size`); each signal overwrites it.
    Memory {
        /// The buffer's size.
        size: usize,
    },
    /// MB_SIGNAL_MEMW_OFFSET: the window of `len` bytes at `base` of the structure's segment;
    /// the sender gives the offset in the window ([`Rma::signal_to_at`]).
    MemoryOffset {
        /// The window's offset in the segment.
        base: usize,
        /// The window's length.
        len: usize,
    },
}

impl Storage {
    fn code(self) -> (u8, u64, u64) {
        match self {
            Storage::None => (0, 0, 0),
            Storage::Queue {
                entry_size,
                capacity,
            } => (1, entry_size as u64, capacity as u64),
            Storage::Memory { size } => (2, (size + ENTRY_HEADER) as u64, 0),
            Storage::MemoryOffset { base, len } => (3, base as u64, len as u64),
        }
    }

    fn decode(code: u8, a: u64, b: u64) -> Option<Self> {
        Some(match code {
            0 => Storage::None,
            1 => Storage::Queue {
                entry_size: usize::try_from(a).ok()?,
                capacity: usize::try_from(b).ok()?,
            },
            2 => Storage::Memory {
                size: usize::try_from(a).ok()?,
            },
            3 => Storage::MemoryOffset {
                base: usize::try_from(a).ok()?,
                len: usize::try_from(b).ok()?,
            },
            _ => return None,
        })
    }
}

/// When a signal invokes, and whether invoked programs exclude later signals (seed 002's
/// invocation condition).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Condition {
    /// MB_SIGNAL_EVERY_TIME_BLK: a signal that arrives while the program runs is cancelled;
    /// the flag drops when the program returns.
    EveryTimeBlk,
    /// MB_SIGNAL_FIRST_ONLY_BLK: only the first signal invokes; later ones are cancelled until
    /// the owner resets the flag with [`Rma::signal_next_or_clear`].
    FirstOnlyBlk,
    /// MB_SIGNAL_EVERY_TIME_NONBLK: every signal invokes.
    EveryTimeNonblk,
    /// MB_SIGNAL_FIRST_ONLY_NONBLK: a signal invokes only when no program of the structure
    /// runs; otherwise it is stored and the running program takes it.
    FirstOnlyNonblk,
}

impl Condition {
    fn code(self) -> u8 {
        self as u8
    }

    fn from_code(c: u8) -> Option<Self> {
        [
            Condition::EveryTimeBlk,
            Condition::FirstOnlyBlk,
            Condition::EveryTimeNonblk,
            Condition::FirstOnlyNonblk,
        ]
        .get(c as usize)
        .copied()
    }

    /// Whether a signal that finds the flag up is cancelled.
    pub fn blocking(self) -> bool {
        matches!(self, Condition::EveryTimeBlk | Condition::FirstOnlyBlk)
    }
}

/// A signal structure's three subcommands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalConfig {
    /// What runs.
    pub invocation: Invocation,
    /// What is stored.
    pub storage: Storage,
    /// When it runs.
    pub condition: Condition,
}

impl SignalConfig {
    fn word(&self) -> u64 {
        self.invocation.code()
            | (self.storage.code().0 as u64) << 8
            | (self.condition.code() as u64) << 16
    }
}

/// A program registered with [`RmaSetup::register_signal`]: what [`Rma::signal`] invokes at
/// the target, and what a structure's DSP or a sender's SSP names. Every rank registers the
/// same programs in the same order, so it means the same program everywhere.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalHandler {
    pub(crate) am: crate::am::RequestHandler,
    pub(crate) program: u16,
}

impl SignalHandler {
    /// The request handler index [`Rma::signal`] uses.
    pub fn index(self) -> u16 {
        self.am.index()
    }

    /// The program's number among the signal programs (what an SSP signal carries).
    pub fn program(self) -> u16 {
        self.program
    }
}

/// What became of one signal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SignalStatus {
    /// Stored, and a program invoked for it.
    Invoked,
    /// Stored without a new invocation: POLLING, or FIRST_ONLY_NONBLK with a program running,
    /// which takes it.
    Stored,
    /// Cancelled: the queue was full (nothing stored).
    Full,
    /// Cancelled: a blocking condition found the flag up (nothing stored).
    Busy,
    /// Cancelled: the structure is disabled (NONE).
    Disabled,
}

impl SignalStatus {
    fn code(self) -> u64 {
        self as u64 + 1
    }

    fn from_code(c: u64) -> Option<Self> {
        [
            SignalStatus::Invoked,
            SignalStatus::Stored,
            SignalStatus::Full,
            SignalStatus::Busy,
            SignalStatus::Disabled,
        ]
        .get(c.checked_sub(1)? as usize)
        .copied()
    }

    /// Whether the signal was cancelled (seed 002's "signal stopped" / "conditions do not
    /// match"; what REPLY_ONLY_FAILURES reports).
    pub fn cancelled(self) -> bool {
        matches!(
            self,
            SignalStatus::Full | SignalStatus::Busy | SignalStatus::Disabled
        )
    }
}

/// A structure's counters, kept in the structure at the target.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SignalCounts {
    /// Signals stored.
    pub stored: u64,
    /// Signals that invoked a program.
    pub invoked: u64,
    /// Cancelled: queue full.
    pub full: u64,
    /// Cancelled: flag up under a blocking condition.
    pub busy: u64,
    /// Cancelled: structure disabled.
    pub disabled: u64,
}

/// One entry taken by [`Rma::signal_next_or_clear`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TakenSignal {
    /// The sender, if recorded.
    pub requester: Option<usize>,
    /// Bytes of data copied into the caller's buffer.
    pub len: usize,
    /// For MEMW_OFFSET, where in the window the data lies.
    pub offset: usize,
}

/// A handle to a signal structure: plain data, sent to senders with
/// [`SignalRef::to_words`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SignalRef {
    seg: SegmentRef,
    offset: u64,
    shape: Shape,
}

impl SignalRef {
    /// The rank that owns the structure.
    pub fn rank(&self) -> usize {
        self.seg.rank
    }

    /// The configuration.
    pub fn config(&self) -> Option<SignalConfig> {
        Some(SignalConfig {
            invocation: self.shape.invocation()?,
            storage: self.shape.storage()?,
            condition: self.shape.condition()?,
        })
    }

    /// Bytes of the segment the structure occupies from its offset on.
    pub fn footprint(&self) -> usize {
        self.shape.bytes().unwrap_or(u64::MAX) as usize
    }

    /// Eight words for message arguments.
    pub fn to_words(&self) -> [u64; 8] {
        let [a, b, c] = self.seg.to_words();
        let s = &self.shape;
        [a, b, c, self.offset, s.id, s.config, s.a, s.b]
    }

    /// The handle back from [`SignalRef::to_words`]; a forged one is refused at the target.
    pub fn from_words(w: [u64; 8]) -> Self {
        Self {
            seg: SegmentRef::from_words([w[0], w[1], w[2]]),
            offset: w[3],
            shape: Shape {
                id: w[4],
                config: w[5],
                a: w[6],
                b: w[7],
            },
        }
    }

    /// A copy naming another structure offset (to test refusals).
    #[doc(hidden)]
    pub fn with_offset(mut self, offset: usize) -> Self {
        self.offset = offset as u64;
        self
    }
}

impl RmaSetup {
    /// Registers the rank's user-level scheduler (ULS), at most one (a second replaces the
    /// first): what [`Invocation::Uls`] runs, and what decides for [`Invocation::DspByUls`]
    /// (return `true` to run the structure's program). Without one, ULS_INVOKE runs nothing
    /// and DSP_BY_ULS runs the program unchecked.
    pub fn register_uls<F>(&self, f: F)
    where
        F: Fn(&Signal<'_>) -> bool + Send + Sync + 'static,
    {
        self.shared.signals.set_uls(Box::new(f));
    }
}

impl Rma<'_> {
    /// Creates a signal structure at `offset` (8-byte aligned) of `seg`, a segment of this
    /// rank, and returns the handle senders use. It occupies [`SignalRef::footprint`] bytes;
    /// MEMW_OFFSET's window must lie in the same segment. Senders need write and atomic
    /// permission on the segment.
    pub fn signal_create(
        &self,
        seg: SegmentRef,
        offset: usize,
        config: SignalConfig,
    ) -> Result<SignalRef> {
        let _e = self.rt.enter();
        let bad = |why| Error::InvalidConfig {
            name: "signal structure",
            value: format!("{config:?}"),
            why,
        };
        match config.storage {
            Storage::Queue {
                entry_size,
                capacity,
            } if entry_size > self.rt.max_medium()
                || !(2..=u32::MAX as usize).contains(&capacity) =>
            {
                return Err(bad(
                    "a queue needs entries of at most max_medium bytes and 2..=u32::MAX of them",
                ))
            }
            Storage::Memory { size } if size > self.rt.max_medium() => {
                return Err(bad("a MEMW buffer holds at most max_medium bytes"))
            }
            Storage::MemoryOffset { .. } => {}
            _ if config.invocation == Invocation::MemwSsp => {
                return Err(bad(
                    "MEMW_SSP stores at an offset: use Storage::MemoryOffset",
                ))
            }
            _ => {}
        }
        let (code, a, b) = config.storage.code();
        let shape = Shape {
            id: crate::bootstrap::random_u64() | 1,
            config: config.word() | (code as u64) << 8,
            a,
            b,
        };
        let bytes = shape.bytes().ok_or_else(|| bad("too large"))? as usize;
        let at = self.owned_range(seg, offset, bytes)?;
        let window = match config.storage {
            Storage::MemoryOffset { base, len } => self.owned_range(seg, base, len)?,
            _ => 0,
        };
        let local = self.shared.local();
        // SAFETY: both ranges lie in our own segment area (checked).
        let (base, window) = unsafe { (local.segment.add(at), local.segment.add(window)) };
        if (base as usize) % 8 != 0 {
            return Err(Error::Refused {
                rank: self.rt.rank(),
                reason: Refusal::Misaligned,
            });
        }
        // SAFETY: 8-aligned, `bytes` bytes of our own mapped segment, and the window (checked).
        let s = unsafe { Structure::at(base, window, shape) };
        s.init();
        self.shared.signals.add_structure(shape);
        Ok(SignalRef {
            seg,
            offset: offset as u64,
            shape,
        })
    }

    /// MBCF_SIGNAL: signals structure `s` with `data` (at most one medium message, the seed's
    /// one packet) and returns what became of it once it is stored or cancelled at the
    /// target (the program may still be running, or about to). For MEMW_OFFSET use
    /// [`Rma::signal_to_at`]; for SSP types, name the program there too.
    pub fn signal_to(&self, s: SignalRef, data: &[u8]) -> Result<SignalStatus> {
        self.signal_to_at(s, 0, data, None)
    }

    /// [`Rma::signal_to`] with MEMW_OFFSET's `offset` in the window and, for SSP types, the
    /// program to run (`None` there is refused as [`Refusal::UnknownSignal`]).
    pub fn signal_to_at(
        &self,
        s: SignalRef,
        offset: usize,
        data: &[u8],
        ssp: Option<SignalHandler>,
    ) -> Result<SignalStatus> {
        let target = s.seg;
        self.check_rank(target.rank)?;
        if data.len() > self.rt.max_medium() {
            return Err(Error::PayloadTooLarge {
                len: data.len(),
                max: self.rt.max_medium(),
            });
        }
        let (_e, direct) = self.enter_for(target.rank);
        if direct {
            let ssp = self.check_ssp(&s, ssp)?;
            return self.signal_direct(s, offset as u64, data, ssp);
        }
        // The target checks the program (and counts a refusal) itself.
        let ssp = ssp.map_or(u16::MAX, |h| h.program);
        let slot = self.take_slot()?;
        self.shared.add_remaining(slot, 1, target.rank);
        let args = dispatch::deliver_args(&s, offset as u64, ssp, slot, 0);
        if let Err(e) =
            self.rt
                .request_medium(target.rank, self.handlers.signal.deliver, &args, data)
        {
            self.shared.add_remaining_neg(slot, 1);
            return Err(self.abandon_slot(slot, target, s.offset, 0, e.into()));
        }
        let code = self.finish_slot(slot, target, s.offset, 0)?;
        SignalStatus::from_code(code).ok_or(Error::Refused {
            rank: target.rank,
            reason: Refusal::NotASignal,
        })
    }

    /// Like [`Rma::signal_to_at`] without waiting for the status: seed 002's non-blocking
    /// request with its options. The status comes back as `opts.status` asks (take the
    /// reports with [`Rma::take_signal_reports`]); with an EMB colour the colour's request
    /// counter counts the signal now and its reply counter once the target has delivered it
    /// ([`Rma::emb_counters`], [`Rma::emb_wait`]). A refusal is reported the same way (and
    /// counted at the target), not returned: only what fails before sending is.
    pub fn signal_to_nbi(
        &self,
        s: SignalRef,
        offset: usize,
        data: &[u8],
        ssp: Option<SignalHandler>,
        opts: SignalOptions,
    ) -> Result<()> {
        let target = s.seg;
        self.check_rank(target.rank)?;
        if opts.colour.is_some_and(|c| c as usize >= EMB_COLOURS) {
            return Err(Error::InvalidConfig {
                name: "EMB colour",
                value: format!("{:?}", opts.colour),
                why: "expected 0..16",
            });
        }
        if data.len() > self.rt.max_medium() {
            return Err(Error::PayloadTooLarge {
                len: data.len(),
                max: self.rt.max_medium(),
            });
        }
        let requester = &self.shared.signals.requester;
        let (_e, direct) = self.enter_for(target.rank);
        if direct {
            requester.issued(opts.colour);
            let outcome = match self.check_ssp(&s, ssp) {
                Ok(ssp) => self.signal_direct(s, offset as u64, data, ssp),
                Err(e) => Err(e),
            };
            let outcome = match outcome {
                Ok(status) => Ok(status),
                Err(Error::Refused { reason, .. }) => Err(reason),
                Err(e) => return Err(e),
            };
            requester.replied(opts, target.rank, outcome);
            return Ok(());
        }
        let ssp = ssp.map_or(u16::MAX, |h| h.program);
        let args = dispatch::deliver_args(&s, offset as u64, ssp, 0, opts.word());
        self.rt
            .request_medium(target.rank, self.handlers.signal.deliver, &args, data)?;
        requester.issued(opts.colour);
        Ok(())
    }

    /// EMB colour `colour`'s counters: (signals and commands issued, signals and commands
    /// whose reply has arrived). Equal: every earlier signal and command of the colour
    /// ([`Rma::signal_to_nbi`], [`Rma::command`], [`Rma::submit`]) has been done.
    /// A colour outside `0..EMB_COLOURS` is an [`Error::InvalidConfig`].
    pub fn emb_counters(&self, colour: u8) -> Result<(u64, u64)> {
        if colour as usize >= EMB_COLOURS {
            return Err(Error::InvalidConfig {
                name: "EMB colour",
                value: colour.to_string(),
                why: "expected 0..16",
            });
        }
        Ok(self.shared.signals.requester.counters(colour as usize))
    }

    /// Waits (polling) until every signal and command issued so far with EMB colour `colour`
    /// has been done. A colour outside `0..EMB_COLOURS` is an [`Error::InvalidConfig`].
    pub fn emb_wait(&self, colour: u8) -> Result<()> {
        let (issued, _) = self.emb_counters(colour)?;
        let counters = &self.shared.signals.requester;
        self.rt
            .wait_until(|| counters.counters(colour as usize).1 >= issued);
        Ok(())
    }

    /// Takes the status reports of non-blocking signals received so far.
    pub fn take_signal_reports(&self) -> Vec<SignalReport> {
        self.shared.signals.requester.take_reports()
    }

    /// The direct path: the program an SSP signal names, checked against this rank's table
    /// (every rank registers the same programs) and counted in the target's; 0 for the other
    /// types.
    fn check_ssp(&self, s: &SignalRef, ssp: Option<SignalHandler>) -> Result<u16> {
        let takes = matches!(
            s.shape.invocation(),
            Some(Invocation::Ssp | Invocation::MemwSsp)
        );
        match (takes, ssp) {
            (false, _) => Ok(0),
            (true, Some(h)) if self.shared.signals.has_program(h.program) => Ok(h.program),
            (true, _) => Err(self.refuse_at(s.seg.rank, Refusal::UnknownSignal)),
        }
    }

    /// Counts a refusal in `rank`'s table when it is mapped here (a refusal the target would
    /// count, decided here from the same registrations).
    fn refuse_at(&self, rank: usize, reason: Refusal) -> Error {
        if let Some(mem) = self.rt.direct_memory(rank) {
            // SAFETY: the table bytes of a mapped region live as long as the runtime.
            unsafe { super::segment_table::Table::at(mem.table) }.count_refusal();
        }
        Error::Refused { rank, reason }
    }

    /// The direct path: deliver on the mapped structure, then ask the target to invoke.
    fn signal_direct(
        &self,
        s: SignalRef,
        offset: u64,
        data: &[u8],
        ssp: u16,
    ) -> Result<SignalStatus> {
        let rank = s.seg.rank;
        let st = self.map_structure(&s)?;
        let status = st
            .deliver(Arrival {
                src: self.rt.rank(),
                data,
                offset,
                ssp,
            })
            .map_err(|r| self.refuse_at(rank, r))?;
        if status == SignalStatus::Invoked {
            // Release: the stored data before the request that invokes its program.
            fence(Ordering::Release);
            let args = dispatch::invoke_args(&s, self.rt.rank(), offset, data.len(), ssp);
            let _e = self.rt.enter();
            self.rt
                .request_short(rank, self.handlers.signal.invoke, &args)?;
        }
        Ok(status)
    }

    /// The structure `s` names in its owner's mapped memory (checked against the owner's
    /// table: bounds, write and atomic permission, alignment).
    fn map_structure(&self, s: &SignalRef) -> Result<Structure> {
        let bytes = s.shape.bytes().ok_or(Error::Refused {
            rank: s.seg.rank,
            reason: Refusal::NotASignal,
        })?;
        let base = self.check_direct(s.seg, s.offset, bytes, Perms::WRITE | Perms::ATOMIC)?;
        if (base as usize) % 8 != 0 {
            return Err(self.refuse_at(s.seg.rank, Refusal::Misaligned));
        }
        let window = match s.shape.storage() {
            Some(Storage::MemoryOffset { base, len }) => {
                self.check_direct(s.seg, base as u64, len as u64, Perms::WRITE)?
            }
            _ => std::ptr::null_mut(),
        };
        // SAFETY: the structure's bytes and the window lie in the mapped segment (checked).
        Ok(unsafe { Structure::at(base, window, s.shape) })
    }

    /// The owner takes the next entry of a POLLING structure, or of a FIRST_ONLY_NONBLK one
    /// whose program called [`Signal::hold`], into `buf` (at least the entry size), or clears
    /// the flag when there is none (seed 002's light-weight "next entry or clear" call).
    /// For FIRST_ONLY_BLK it resets the flag. `Ok(None)`: nothing taken.
    pub fn signal_next_or_clear(
        &self,
        s: SignalRef,
        buf: &mut [u8],
    ) -> Result<Option<TakenSignal>> {
        let _e = self.rt.enter_local();
        let me = self.rt.rank();
        if s.seg.rank != me || !self.shared.signals.owns(&s.shape) {
            return Err(Error::Refused {
                rank: me,
                reason: Refusal::NotASignal,
            });
        }
        let st = self.map_own_structure(&s)?;
        dispatch::next_for_program(&self.shared.signals, &st, buf)
    }

    fn map_own_structure(&self, s: &SignalRef) -> Result<Structure> {
        let bytes = s.shape.bytes().unwrap_or(u64::MAX) as usize;
        let at = self.owned_range(s.seg, s.offset as usize, bytes)?;
        let window = match s.shape.storage() {
            Some(Storage::MemoryOffset { base, len }) => self.owned_range(s.seg, base, len)?,
            _ => 0,
        };
        let local = self.shared.local();
        // SAFETY: inside our own segment area (checked); alignment was checked at creation.
        Ok(unsafe { Structure::at(local.segment.add(at), local.segment.add(window), s.shape) })
    }

    /// The counters of a structure this rank owns.
    pub fn signal_counts(&self, s: SignalRef) -> Result<SignalCounts> {
        let _e = self.rt.enter_local();
        let st = self.map_own_structure(&s)?;
        Ok(SignalCounts {
            stored: st.counter(Counter::Stored),
            invoked: st.counter(Counter::Invoked),
            full: st.counter(Counter::Full),
            busy: st.counter(Counter::Busy),
            disabled: st.counter(Counter::Disabled),
        })
    }
}
