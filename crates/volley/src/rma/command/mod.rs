//! Seed 002's command options on every one-sided command, and combined packets.
//!
//! [`CmdOptions`] is the seed's four option types (§4.2): the status reply (none, always, only
//! on failure), no flow control, an elastic memory barrier (EMB) colour, and the wake-up of a
//! blocked target. [`Rma::command`] sends one [`Command`] (put, put with flag, get, atomic,
//! FIFO enqueue, conditional write) with options; [`Rma::combined`] collects several commands
//! to one target into one packet ([`Combined`]), checked against the seed's four combining
//! rules when it is finished (an illegal packet is an error and nothing is sent), then sent as
//! one medium Active Message (one frame, one datagram) with [`Rma::submit`] or
//! [`Rma::execute`].
//!
//! **Where commands run.** A single command with the default options to a rank the direct path
//! reaches runs there, as the plain call would. Everything else (any option set, every combined
//! packet) takes the AM path: a handler at the target checks every command of the packet and
//! runs all of them or none, in one handler call, and replies once for the packet when a reply
//! is wanted. The direct path cannot honour a status reply, a colour or a wake-up (nothing
//! runs at the target), so those take the AM path on shared memory too, with the same results.
//!
//! **Replies and reports.** The requester keeps no state per packet: the options travel in the
//! request and come back in the reply. A reply is sent when the status option asks for one,
//! when the packet has a colour, or when a command returns data (a get's bytes, an atomic's old
//! value: the seed's READ and SWAP always reply). [`Rma::take_cmd_reports`] takes what came
//! back: every command's outcome with `StatusReply::Always`, the failures with `OnlyFailures`,
//! and the data-returning commands' results in any case.
//!
//! **Exactly once.** A packet is one message: the transports deliver it once (shared-memory
//! rings; the reliable UDP layer discards duplicates and retransmits losses; TCP), so an atomic
//! in it runs once even when datagrams are lost, duplicated or reordered.
//!
//! **No flow control** ([`Flow::Unreliable`]). Over UDP the packet and its reply travel as
//! unsequenced datagrams: the packet runs at most once (the receiver refuses a duplicated
//! datagram by its id) or not at all, and nobody waits for it: a colour is refused with it, and
//! [`Rma::execute`] always sends reliably. Over TCP and shared memory it is delivered as any
//! packet.

mod target;
mod wire;

use super::atomic::AtomicOp;
use super::handlers::Shared;
use super::memops::{FifoRef, FifoStatus};
use super::segment::SegmentRef;
use super::signal::{StatusReply, EMB_COLOURS};
use super::{Error, Result, Rma};
use crate::am::{ReplyHandler, RequestHandler, RuntimeBuilder};
use crate::refusal::Refusal;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use wire::Kind;

/// Whether a command travels under the reliable protocol (seed 002's "no flow control").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Flow {
    /// Guaranteed arrival, in order, exactly once.
    #[default]
    Reliable,
    /// No flow control, the seed's mode for peers that may be dead: over UDP the packet (and
    /// its reply, if any) is one unsequenced datagram, never acknowledged or retransmitted,
    /// run at most once or lost, in no order with other packets; it never waits for the
    /// target's acknowledgements. Over TCP and shared memory, which lose nothing, it is
    /// delivered as any packet. A lost request or reply gives no report, so a colour is
    /// refused with it (its counters might never agree), and request and reply must each
    /// fit one datagram ([`Error::UnreliableTooLarge`]).
    Unreliable,
}

/// Seed 002's options of one command (or of one combined packet).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CmdOptions {
    /// Which outcomes are reported ([`Rma::take_cmd_reports`]).
    pub status: StatusReply,
    /// The EMB colour (`0..EMB_COLOURS`): the colour's request counter counts each command at
    /// issue, its reply counter once the target's reply arrives ([`Rma::emb_counters`]).
    pub colour: Option<u8>,
    /// Reliable or not.
    pub flow: Flow,
    /// Wake the target if it sleeps in a wait (`VOLLEY_WAIT=block`): the command goes as a
    /// message, whose arrival rings the target's doorbell, even where the direct path could
    /// have written its memory silently.
    pub wake: bool,
}

/// Bytes a combined packet's request or reply may take (at most the medium maximum): one
/// frame on shared memory, and one datagram at the UDP transport's loopback datagram size.
pub const PACKET_MAX: usize = 60 * 1024;

/// Set in the options word of [`Rma::execute`]'s packets: reply always, to the waiting caller.
const BLOCKING: u64 = 1 << 63;

impl CmdOptions {
    fn word(self) -> u64 {
        let status = match self.status {
            StatusReply::None => 0,
            StatusReply::Always => 1,
            StatusReply::OnlyFailures => 2,
        };
        let unreliable = u64::from(self.flow == Flow::Unreliable) << 2;
        let wake = u64::from(self.wake) << 3;
        status | unreliable | wake | (self.colour.map_or(0, |c| c as u64 + 1) << 8)
    }

    fn from_word(w: u64) -> Self {
        let status = match w & 3 {
            1 => StatusReply::Always,
            2 => StatusReply::OnlyFailures,
            _ => StatusReply::None,
        };
        let c = (w >> 8) & 0xff;
        Self {
            status,
            colour: (c != 0).then(|| (c - 1) as u8),
            flow: if w & 4 != 0 {
                Flow::Unreliable
            } else {
                Flow::Reliable
            },
            wake: w & 8 != 0,
        }
    }

    fn blocking(w: u64) -> bool {
        w & BLOCKING != 0
    }

    fn check(self) -> Result<()> {
        match self.colour {
            Some(c) if c as usize >= EMB_COLOURS => Err(Error::InvalidConfig {
                name: "EMB colour",
                value: c.to_string(),
                why: "expected 0..16",
            }),
            Some(c) if self.flow == Flow::Unreliable => Err(Error::InvalidConfig {
                name: "EMB colour",
                value: c.to_string(),
                why: "not with Flow::Unreliable: a lost command or reply would leave the \
                      colour's counters unequal for ever",
            }),
            _ => Ok(()),
        }
    }

    /// Whether the requester logs `outcome` (data-returning results always).
    fn reports(self, outcome: &Result<CmdStatus, Refusal>) -> bool {
        outcome.as_ref().is_ok_and(CmdStatus::returns_data)
            || match self.status {
                StatusReply::None => false,
                StatusReply::Always => true,
                StatusReply::OnlyFailures => outcome.as_ref().map_or(true, CmdStatus::failed),
            }
    }
}

/// One one-sided command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command<'a> {
    /// MBCF_WRITE: `data` at `offset` of `target`.
    Put {
        /// The segment.
        target: SegmentRef,
        /// Where in it.
        offset: usize,
        /// The bytes.
        data: &'a [u8],
    },
    /// MBCF_WRITE_F: a put, then `flag_value` stored (release) in the word at `flag_offset`.
    PutWithFlag {
        /// The segment.
        target: SegmentRef,
        /// Where in it.
        offset: usize,
        /// The bytes.
        data: &'a [u8],
        /// The flag word (8-byte aligned).
        flag_offset: usize,
        /// The value stored in it.
        flag_value: u64,
    },
    /// MBCF_READ: `len` bytes at `offset` (reported as [`CmdStatus::Data`]).
    Get {
        /// The segment.
        target: SegmentRef,
        /// Where in it.
        offset: usize,
        /// How many bytes.
        len: usize,
    },
    /// SWAP, FETCH_ADD, COMP_SWAP, ...: see [`Rma::atomic`] (the old value is reported as
    /// [`CmdStatus::Value`]).
    Atomic {
        /// The segment.
        target: SegmentRef,
        /// The word (8-byte aligned).
        offset: usize,
        /// The operation.
        op: AtomicOp,
        /// Its operand.
        operand: u64,
        /// The expected value of a compare-and-swap.
        compare: u64,
    },
    /// MBCF_FIFO: one entry into a FIFO (reported as [`CmdStatus::Fifo`]).
    Fifo {
        /// The FIFO.
        fifo: FifoRef,
        /// The entry (exactly its entry size).
        data: &'a [u8],
    },
    /// FETCH_ADD's vector form: adds `addends[i]` to the `i`-th word from `offset` (the old
    /// values are reported as [`CmdStatus::Values`]). Each word is added with a CPU atomic, and
    /// the target's handler runs the whole vector as one step with respect to every other
    /// command it serves.
    FetchAddVector {
        /// The segment.
        target: SegmentRef,
        /// The first word (8-byte aligned).
        offset: usize,
        /// One addend per word, at least one.
        addends: &'a [u64],
    },
    /// COMP_SWAP with a reference word apart from the swapped one: if the word at
    /// `reference` equals `compare`, `new` is swapped into the word at `offset` (reported as
    /// [`CmdStatus::Compared`]: whether it was, and the word's old value). The target's
    /// handler runs the compare and the swap as one step with respect to every other command
    /// it serves; a direct-path write to the reference word by a rank of the target's node
    /// is not ordered with it (see the guide).
    CompareSwapAt {
        /// The segment holding both words.
        target: SegmentRef,
        /// The swapped word (8-byte aligned).
        offset: usize,
        /// The reference word (8-byte aligned).
        reference: usize,
        /// The value the reference word must hold.
        compare: u64,
        /// The value swapped in.
        new: u64,
    },
    /// MBCF_ZBUFFER: see [`Rma::conditional_write`] (reported as [`CmdStatus::Written`]).
    ConditionalWrite {
        /// The segment holding the reference word and the data.
        target: SegmentRef,
        /// The reference word (8-byte aligned).
        ref_offset: usize,
        /// The packet's reference value.
        ref_value: u64,
        /// Where the data goes.
        data_offset: usize,
        /// The data.
        data: &'a [u8],
    },
}

impl Command<'_> {
    fn rank(&self) -> usize {
        self.segment().rank
    }

    fn segment(&self) -> SegmentRef {
        match *self {
            Command::Put { target, .. }
            | Command::PutWithFlag { target, .. }
            | Command::Get { target, .. }
            | Command::Atomic { target, .. }
            | Command::FetchAddVector { target, .. }
            | Command::CompareSwapAt { target, .. }
            | Command::ConditionalWrite { target, .. } => target,
            Command::Fifo { fifo, .. } => fifo.seg,
        }
    }

    /// Whether a plain call runs this command on the direct path (the others always go to
    /// the target's handler).
    fn has_direct_call(&self) -> bool {
        !matches!(
            self,
            Command::FetchAddVector { .. } | Command::CompareSwapAt { .. }
        )
    }

    fn encode(&self, out: &mut Vec<u8>) {
        let seg = self.segment();
        let (kind, w, data): (Kind, [u64; 4], &[u8]) = match *self {
            Command::Put { offset, data, .. } => (Kind::Put, [offset as u64, 0, 0, 0], data),
            Command::PutWithFlag {
                offset,
                data,
                flag_offset,
                flag_value,
                ..
            } => (
                Kind::PutFlag,
                [offset as u64, flag_offset as u64, flag_value, 0],
                data,
            ),
            Command::Get { offset, len, .. } => {
                (Kind::Get, [offset as u64, len as u64, 0, 0], &[][..])
            }
            Command::Atomic {
                offset,
                op,
                operand,
                compare,
                ..
            } => (
                Kind::Atomic,
                [offset as u64, op as u64, operand, compare],
                &[][..],
            ),
            Command::FetchAddVector {
                offset, addends, ..
            } => (
                Kind::FetchAddVector,
                [offset as u64, 0, 0, 0],
                bytemuck::cast_slice(addends),
            ),
            Command::CompareSwapAt {
                offset,
                reference,
                compare,
                new,
                ..
            } => (
                Kind::CompareSwapAt,
                [offset as u64, reference as u64, new, compare],
                &[][..],
            ),
            Command::Fifo { fifo, data } => (
                Kind::Fifo,
                [fifo.offset, fifo.entry_size as u64, fifo.capacity as u64, 0],
                data,
            ),
            Command::ConditionalWrite {
                ref_offset,
                ref_value,
                data_offset,
                data,
                ..
            } => (
                Kind::CondWrite,
                [ref_offset as u64, ref_value, data_offset as u64, 0],
                data,
            ),
        };
        wire::put_cmd(out, kind, seg.id, seg.key, w, data);
    }
}

/// What became of one command.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CmdStatus {
    /// Done (a put, a put with flag).
    Done,
    /// An atomic's old value.
    Value(u64),
    /// A get's bytes.
    Data(Vec<u8>),
    /// A FIFO enqueue: stored, or cancelled because the FIFO was full.
    Fifo(FifoStatus),
    /// A conditional write: whether it wrote.
    Written(bool),
    /// Not run: another command of its packet was refused, so the packet changed nothing
    /// (the seed's "handling violation").
    NotRun,
    /// A vector fetch-add's old values, one per word.
    Values(Vec<u64>),
    /// A compare-and-swap at a reference: whether it swapped, and the swapped word's old
    /// value.
    Compared {
        /// Whether the reference word held the compared value (and the new one went in).
        swapped: bool,
        /// The swapped word's value before the command.
        old: u64,
    },
}

impl CmdStatus {
    /// Whether this is a failure in the sense of `REPLY_ONLY_FAILURES` (a cancelled FIFO
    /// entry, a command not run).
    pub fn failed(&self) -> bool {
        matches!(self, CmdStatus::Fifo(FifoStatus::Full) | CmdStatus::NotRun)
    }

    /// Whether this carries data back (a get's bytes, atomics' old values): the seed's READ
    /// and SWAP always reply.
    pub fn returns_data(&self) -> bool {
        matches!(
            self,
            CmdStatus::Value(_)
                | CmdStatus::Data(_)
                | CmdStatus::Values(_)
                | CmdStatus::Compared { .. }
        )
    }
}

/// One reported outcome.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CmdReport {
    /// The target rank.
    pub rank: usize,
    /// The packet ([`Rma::submit`]'s return value).
    pub packet: u64,
    /// The command's place in its packet.
    pub index: usize,
    /// What became of it, or why it was refused.
    pub outcome: Result<CmdStatus, Refusal>,
}

/// Commands to one target collected into one packet; [`Combined::finish`] checks the
/// combining rules.
#[derive(Debug, Clone)]
pub struct Combined<'a> {
    rank: usize,
    size: usize,
    max: usize,
    cmds: Vec<Command<'a>>,
}

impl<'a> Combined<'a> {
    /// Adds a command (checked at [`Combined::finish`]).
    pub fn push(&mut self, c: Command<'a>) -> &mut Self {
        self.cmds.push(c);
        self
    }

    /// Bytes the request (and the reply) may take.
    pub fn max_bytes(&self) -> usize {
        self.max
    }

    /// Commands collected so far.
    pub fn len(&self) -> usize {
        self.cmds.len()
    }

    /// Whether none was collected.
    pub fn is_empty(&self) -> bool {
        self.cmds.is_empty()
    }

    /// Checks the packet against seed 002's rules and encodes it:
    /// 1. one target: every command's rank is the packet's;
    /// 2. one multicast pattern: volley has no multicast commands, so this always holds;
    /// 3. one reply packet: the reply (an entry per command and every get's data) fits one
    ///    medium message, and so does the request;
    /// 4. atomics are not combined with other commands (their words are 8-byte aligned, so
    ///    they never cross a page).
    pub fn finish(&self) -> Result<Packet> {
        let illegal = |rule, why: String| Error::IllegalCombination { rule, why };
        if self.rank >= self.size {
            return Err(crate::am::Error::InvalidRank {
                rank: self.rank,
                size: self.size,
            }
            .into());
        }
        if self.cmds.is_empty() {
            return Err(illegal(0, "a packet needs at least one command".into()));
        }
        if let Some((i, c)) = self
            .cmds
            .iter()
            .enumerate()
            .find(|(_, c)| c.rank() != self.rank)
        {
            return Err(illegal(
                1,
                format!(
                    "command {i} targets rank {}, the packet rank {}",
                    c.rank(),
                    self.rank
                ),
            ));
        }
        let mut body = Vec::new();
        for c in &self.cmds {
            c.encode(&mut body);
        }
        Packet::checked(self.rank, self.cmds.len(), body, self.max)
    }
}

/// A checked, encoded packet of commands to one rank; send it with [`Rma::submit`] or
/// [`Rma::execute`], as often as wanted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packet {
    rank: usize,
    count: usize,
    /// Bytes of the reply, if one is sent.
    reply: usize,
    body: Vec<u8>,
}

impl Packet {
    /// Checks an encoded body of `count` commands against rules 3 and 4 (rule 1 holds by
    /// construction: the body names no rank) and its size.
    fn checked(rank: usize, count: usize, body: Vec<u8>, max: usize) -> Result<Packet> {
        let illegal = |rule, why: String| Error::IllegalCombination { rule, why };
        let Some(cmds) = wire::decode(&body, count as u64) else {
            return Err(illegal(
                0,
                format!("the body is not {count} well-formed commands"),
            ));
        };
        if cmds.len() > 1 && cmds.iter().any(wire::Cmd::is_atomic) {
            return Err(illegal(
                4,
                "an atomic command cannot be combined with other commands".into(),
            ));
        }
        let reply = cmds
            .iter()
            .fold(0usize, |sum, c| sum.saturating_add(c.reply_len()));
        if reply > max {
            return Err(illegal(
                3,
                format!("the reply would take {reply} bytes, more than one packet's {max}"),
            ));
        }
        if body.len() > max {
            return Err(Error::PayloadTooLarge {
                len: body.len(),
                max,
            });
        }
        Ok(Packet {
            rank,
            count,
            reply,
            body,
        })
    }

    /// The encoded commands: the layout a program may write itself
    /// ([`Rma::packet_from_body`]).
    pub fn body(&self) -> &[u8] {
        &self.body
    }

    /// The target rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// Commands in it.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Always false: a packet has at least one command.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Bytes of the request's payload.
    pub fn wire_len(&self) -> usize {
        self.body.len()
    }
}

/// Every command's outcome, in packet order.
type Outcomes = Vec<Result<CmdStatus, Refusal>>;

/// The requester's side: packet numbers, reports, and the answers blocked callers wait for.
#[derive(Debug, Default)]
pub(crate) struct Requester {
    next: AtomicU64,
    reports: Mutex<Vec<CmdReport>>,
    answers: Mutex<Vec<(u64, Outcomes)>>,
}

/// The handlers of commands.
#[derive(Debug, Clone, Copy)]
pub(crate) struct CmdHandlers {
    run: RequestHandler,
}

/// Registers the packet handler and its reply handler.
pub(crate) fn register(b: &mut RuntimeBuilder, shared: &Arc<Shared>) -> CmdHandlers {
    let s = shared.clone();
    let reply: ReplyHandler = b.reply_handler("volley.rma.cmd_reply", move |m| {
        let (packet, word, count) = (m.arg(0), m.arg(1), m.arg(2));
        let outcomes = wire::decode_outcomes(m.payload(), count);
        s.cmds.replied(&s, m.src(), packet, word, count, outcomes);
    });
    let s = shared.clone();
    let run = b.request_handler("volley.rma.cmd", move |m, tok| {
        target::serve(&s, reply, m, tok);
    });
    CmdHandlers { run }
}

impl Requester {
    fn replied(
        &self,
        s: &Shared,
        rank: usize,
        packet: u64,
        word: u64,
        count: u64,
        outcomes: Vec<Result<CmdStatus, Refusal>>,
    ) {
        let opts = CmdOptions::from_word(word);
        if CmdOptions::blocking(word) {
            self.answers
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .push((packet, outcomes));
        } else {
            self.record(opts, rank, packet, outcomes);
        }
        // Release (in `replied_n`): the reports are logged before the counter says done.
        s.signals.requester.replied_n(opts.colour, count);
    }

    fn record(
        &self,
        opts: CmdOptions,
        rank: usize,
        packet: u64,
        outcomes: Vec<Result<CmdStatus, Refusal>>,
    ) {
        let mut reports = self.reports.lock().unwrap_or_else(PoisonError::into_inner);
        for (index, outcome) in outcomes.into_iter().enumerate() {
            if opts.reports(&outcome) {
                reports.push(CmdReport {
                    rank,
                    packet,
                    index,
                    outcome,
                });
            }
        }
    }
}

impl<'rt> Rma<'rt> {
    /// Starts collecting commands to `rank` into one packet.
    pub fn combined<'a>(&self, rank: usize) -> Combined<'a> {
        Combined {
            rank,
            size: self.rt.size(),
            max: self.rt.max_medium().min(PACKET_MAX),
            cmds: Vec::new(),
        }
    }

    /// Seed 002's user-built packet: `body` holds `count` commands in the wire layout that
    /// [`Packet::body`] shows (the guide gives it word by word), written by the program, for
    /// example by patching the data of a packet it keeps. Checked as [`Combined::finish`]
    /// checks (a malformed body is rule 0); the target checks every command again, as for any
    /// packet.
    pub fn packet_from_body(&self, rank: usize, count: usize, body: Vec<u8>) -> Result<Packet> {
        self.check_rank(rank)?;
        Packet::checked(rank, count, body, self.rt.max_medium().min(PACKET_MAX))
    }

    /// Sends one command with `opts`; returns its packet number (as in its reports). A
    /// refusal at the target is reported as `opts.status` asks, not returned (and counted
    /// there); only what fails before sending is returned.
    pub fn command(&self, c: Command<'_>, opts: CmdOptions) -> Result<u64> {
        opts.check()?;
        self.check_rank(c.rank())?;
        if opts == CmdOptions::default() && c.has_direct_call() && self.direct(c.rank()) {
            return self.command_direct(c, opts);
        }
        let mut p = self.combined(c.rank());
        p.push(c);
        self.submit(&p.finish()?, opts)
    }

    /// The direct path of a command with default options: the plain call, its outcome
    /// recorded as a reply's would be.
    fn command_direct(&self, c: Command<'_>, opts: CmdOptions) -> Result<u64> {
        let outcome = match c {
            Command::Put {
                target,
                offset,
                data,
            } => self.put(target, offset, data).map(|_| CmdStatus::Done),
            Command::PutWithFlag {
                target,
                offset,
                data,
                flag_offset,
                flag_value,
            } => self
                .put_with_flag(target, offset, data, flag_offset, flag_value)
                .map(|_| CmdStatus::Done),
            Command::Get {
                target,
                offset,
                len,
            } => {
                let mut buf = vec![0; len];
                self.get(target, offset, &mut buf)
                    .map(|_| CmdStatus::Data(buf))
            }
            Command::Atomic {
                target,
                offset,
                op,
                operand,
                compare,
            } => self
                .atomic(target, offset, op, operand, compare)
                .map(CmdStatus::Value),
            Command::Fifo { fifo, data } => self.fifo_enqueue(fifo, data).map(CmdStatus::Fifo),
            Command::ConditionalWrite {
                target,
                ref_offset,
                ref_value,
                data_offset,
                data,
            } => self
                .conditional_write(target, ref_offset, ref_value, data_offset, data)
                .map(CmdStatus::Written),
            Command::FetchAddVector { .. } | Command::CompareSwapAt { .. } => {
                unreachable!("sent to the target's handler (`has_direct_call`)")
            }
        };
        let outcome = match outcome {
            Ok(s) => Ok(s),
            Err(Error::Refused { reason, .. }) => Err(reason),
            Err(e) => return Err(e),
        };
        let packet = self.shared.cmds.next.fetch_add(1, Ordering::Relaxed);
        self.shared
            .cmds
            .record(opts, c.rank(), packet, vec![outcome]);
        Ok(packet)
    }

    /// Sends a packet with `opts` (the options apply to each of its commands); returns its
    /// number. Reports and EMB counters as for [`Rma::command`], one per command.
    pub fn submit(&self, p: &Packet, opts: CmdOptions) -> Result<u64> {
        opts.check()?;
        self.send_packet(p, opts.word())
    }

    /// Refuses an unreliable packet whose request or reply would not fit one unsequenced
    /// datagram between here and its target.
    fn check_unreliable(&self, p: &Packet) -> Result<()> {
        let max = self.rt.max_unsequenced(p.rank, 3)?;
        for (what, len) in [("request", p.body.len()), ("reply", p.reply)] {
            if len > max {
                return Err(Error::UnreliableTooLarge {
                    rank: p.rank,
                    what,
                    len,
                    max,
                });
            }
        }
        Ok(())
    }

    fn send_packet(&self, p: &Packet, word: u64) -> Result<u64> {
        self.check_rank(p.rank)?;
        let unreliable = CmdOptions::from_word(word).flow == Flow::Unreliable;
        if unreliable {
            self.check_unreliable(p)?;
        }
        let _e = self.rt.enter();
        let packet = self.shared.cmds.next.fetch_add(1, Ordering::Relaxed);
        let args = [packet, word, p.count as u64];
        let cmd = self.handlers.cmd.run;
        if unreliable {
            self.rt
                .request_medium_unsequenced(p.rank, cmd, &args, &p.body)?;
        } else {
            self.rt.request_medium(p.rank, cmd, &args, &p.body)?;
        }
        let colour = CmdOptions::from_word(word).colour;
        self.shared
            .signals
            .requester
            .issued_n(colour, p.count as u64);
        Ok(packet)
    }

    /// Sends a packet and waits for every command's outcome (in the packet's order).
    pub fn execute(&self, p: &Packet) -> Result<Vec<Result<CmdStatus, Refusal>>> {
        let packet = self.send_packet(p, BLOCKING)?;
        let answers = &self.shared.cmds.answers;
        let take = || {
            let mut a = answers.lock().unwrap_or_else(PoisonError::into_inner);
            let i = a.iter().position(|x| x.0 == packet)?;
            Some(a.swap_remove(i).1)
        };
        let mut got = None;
        self.rt.wait_until(|| {
            got = take();
            got.is_some()
        });
        Ok(got.expect("waited for"))
    }

    /// Takes the commands' reports received so far.
    pub fn take_cmd_reports(&self) -> Vec<CmdReport> {
        std::mem::take(
            &mut *self
                .shared
                .cmds
                .reports
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        )
    }

    /// [`Command::Put`] with options.
    pub fn put_with(
        &self,
        target: SegmentRef,
        offset: usize,
        data: &[u8],
        opts: CmdOptions,
    ) -> Result<u64> {
        self.command(
            Command::Put {
                target,
                offset,
                data,
            },
            opts,
        )
    }

    /// [`Command::Get`] with options (the data comes back as a report).
    pub fn get_with(
        &self,
        target: SegmentRef,
        offset: usize,
        len: usize,
        opts: CmdOptions,
    ) -> Result<u64> {
        self.command(
            Command::Get {
                target,
                offset,
                len,
            },
            opts,
        )
    }

    /// [`Command::Atomic`] with options (the old value comes back as a report).
    pub fn atomic_with(
        &self,
        target: SegmentRef,
        offset: usize,
        op: AtomicOp,
        operand: u64,
        compare: u64,
        opts: CmdOptions,
    ) -> Result<u64> {
        self.command(
            Command::Atomic {
                target,
                offset,
                op,
                operand,
                compare,
            },
            opts,
        )
    }

    /// FETCH_ADD's vector form ([`Command::FetchAddVector`]), waiting for the old values,
    /// which it writes to `olds` (as long as `addends`). A refusal is returned as
    /// [`Error::Refused`], with memory unchanged.
    pub fn fetch_add_vector(
        &self,
        target: SegmentRef,
        offset: usize,
        addends: &[u64],
        olds: &mut [u64],
    ) -> Result<()> {
        if olds.len() != addends.len() {
            return Err(Error::InvalidConfig {
                name: "olds",
                value: olds.len().to_string(),
                why: "needs one word per addend",
            });
        }
        let c = Command::FetchAddVector {
            target,
            offset,
            addends,
        };
        match self.execute_one(c)? {
            CmdStatus::Values(v) if v.len() == olds.len() => {
                olds.copy_from_slice(&v);
                Ok(())
            }
            other => unreachable!("a vector fetch-add answered {other:?}"),
        }
    }

    /// COMP_SWAP with a reference word ([`Command::CompareSwapAt`]), waiting for the answer:
    /// whether `new` went into the word at `offset`, and that word's old value.
    pub fn compare_swap_at(
        &self,
        target: SegmentRef,
        offset: usize,
        reference: usize,
        compare: u64,
        new: u64,
    ) -> Result<(bool, u64)> {
        let c = Command::CompareSwapAt {
            target,
            offset,
            reference,
            compare,
            new,
        };
        match self.execute_one(c)? {
            CmdStatus::Compared { swapped, old } => Ok((swapped, old)),
            other => unreachable!("a compare-swap answered {other:?}"),
        }
    }

    /// Runs one command at its target's handler and returns its outcome; a refusal as
    /// [`Error::Refused`].
    fn execute_one(&self, c: Command<'_>) -> Result<CmdStatus> {
        let rank = c.rank();
        let mut p = self.combined(rank);
        p.push(c);
        match self.execute(&p.finish()?)?.pop() {
            Some(Ok(st)) => Ok(st),
            Some(Err(reason)) => Err(Error::Refused { rank, reason }),
            None => unreachable!("one command, one outcome"),
        }
    }

    /// [`Command::Fifo`] with options.
    pub fn fifo_enqueue_with(&self, fifo: FifoRef, data: &[u8], opts: CmdOptions) -> Result<u64> {
        self.command(Command::Fifo { fifo, data }, opts)
    }
}

#[cfg(test)]
mod tests;
