//! The target's side of a command packet: one handler checks every command of the packet,
//! then, only if all pass, executes them one after another, and replies once for the packet.
//!
//! A handler runs to the end before the next message is taken, so the packet is one lump
//! with respect to every other operation served by handlers at this rank. Checking everything
//! first means a packet with a refused command changes nothing (the seed's "handling
//! violation": the refused command reports its reason, the others [`CmdStatus::NotRun`]).

use super::wire::{self, Cmd, Kind};
use super::{CmdOptions, CmdStatus, Flow};
use crate::am::{Message, ReplyHandler, ReplyToken};
use crate::refusal::Refusal;
use crate::rma::atomic::{self, AtomicOp};
use crate::rma::handlers::Shared;
use crate::rma::memops::{fifo_bytes, fifo_enqueue_at, fifo_header_ok, word};
use crate::rma::segment::Perms;
use std::sync::atomic::{fence, Ordering};

/// A refusal with the access it refused: reason, offset, length.
type Refused = (Refusal, u64, u64);

/// Where a checked command acts: its data range and, for some kinds, a second word.
#[derive(Debug, Clone, Copy)]
struct Checked {
    at: *mut u8,
    second: *mut u8,
}

/// Serves one packet: `args` = [packet id, options word, command count].
pub(super) fn serve(s: &Shared, reply: ReplyHandler, m: &Message<'_>, tok: ReplyToken<'_>) {
    let (packet, word, count) = (m.arg(0), m.arg(1), m.arg(2));
    let opts = CmdOptions::from_word(word);
    let outcomes = match wire::decode(m.payload(), count) {
        Some(cmds) => run(s, &cmds),
        None => {
            // A malformed packet is refused whole; one refusal is counted.
            s.count_refusal();
            let n = count.min((m.payload().len() / wire::CMD_HEADER) as u64 + 1);
            (0..n)
                .map(|_| Err((Refusal::NoSuchSegment, 0, 0)))
                .collect()
        }
    };
    let returns_data = outcomes
        .iter()
        .any(|o| o.as_ref().is_ok_and(CmdStatus::returns_data));
    let failed = outcomes
        .iter()
        .any(|o| o.as_ref().map_or(true, |s| s.failed()));
    let wanted = CmdOptions::blocking(word)
        || opts.colour.is_some()
        || returns_data
        || match opts.status {
            crate::rma::StatusReply::None => false,
            crate::rma::StatusReply::Always => true,
            crate::rma::StatusReply::OnlyFailures => failed,
        };
    if !wanted {
        return;
    }
    let mut body = Vec::new();
    for o in &outcomes {
        wire::put_outcome(&mut body, o);
    }
    // A reply that cannot be sent means the runtime is going away (or, unreliable, that it
    // does not fit one datagram, which the requester checked for); nobody to report to.
    let args = [packet, word, outcomes.len() as u64];
    let _ = match opts.flow {
        Flow::Reliable => tok.reply_medium(reply, &args, &body),
        Flow::Unreliable => tok.reply_medium_unsequenced(reply, &args, &body),
    };
}

/// Checks every command, then runs them all or none.
fn run(s: &Shared, cmds: &[Cmd<'_>]) -> Vec<Result<CmdStatus, Refused>> {
    let checked: Vec<Result<Checked, Refused>> = cmds.iter().map(|c| check(s, c)).collect();
    if checked.iter().any(Result::is_err) {
        return checked
            .into_iter()
            .map(|c| c.and(Ok(CmdStatus::NotRun)))
            .collect();
    }
    let out = cmds
        .iter()
        .zip(checked)
        .map(|(c, at)| execute(c, at.expect("all checked")))
        .collect();
    // Release: whoever learns of the packet's completion (a flag, a reply) sees its writes.
    fence(Ordering::Release);
    out
}

/// Checks one command against this rank's table (a refusal is counted there).
fn check(s: &Shared, c: &Cmd<'_>) -> Result<Checked, Refused> {
    let range = |off: u64, len: u64, need: Perms| {
        s.check_with(c.id, c.key, off, len, need, true)
            .map_err(|(code, seg_len)| {
                let r =
                    Refusal::from_code(code, off, len, seg_len).unwrap_or(Refusal::NoSuchSegment);
                (r, off, len)
            })
    };
    let aligned = |p: *mut u8, off: u64| {
        if (p as usize) % 8 == 0 {
            Ok(p)
        } else {
            s.count_refusal();
            Err((Refusal::Misaligned, off, 8))
        }
    };
    let len = c.data.len() as u64;
    let [a, b, _, _] = c.w;
    let null = std::ptr::null_mut();
    Ok(match c.kind {
        Kind::Put => Checked {
            at: range(a, len, Perms::WRITE)?,
            second: null,
        },
        Kind::PutFlag => Checked {
            at: range(a, len, Perms::WRITE)?,
            second: aligned(range(b, 8, Perms::WRITE)?, b)?,
        },
        Kind::Get => Checked {
            at: range(a, b, Perms::READ)?,
            second: null,
        },
        Kind::Atomic => {
            if AtomicOp::from_code(b).is_none() {
                s.count_refusal();
                return Err((Refusal::NoAtomics, a, 8));
            }
            Checked {
                at: aligned(range(a, 8, Perms::ATOMIC)?, a)?,
                second: null,
            }
        }
        Kind::Fifo => {
            let (ent, cap) = (c.w[1], c.w[2]);
            let bytes = fifo_bytes(ent, cap).unwrap_or(u64::MAX);
            let p = aligned(range(a, bytes, Perms::WRITE | Perms::ATOMIC)?, a)?;
            // SAFETY: 8-aligned, and the FIFO's bytes lie in our segment (checked).
            if cap < 2 || !unsafe { fifo_header_ok(p, ent, cap) } {
                s.count_refusal();
                return Err((Refusal::NotAFifo, a, bytes));
            }
            if len != ent {
                s.count_refusal();
                return Err((Refusal::EntrySize, a, len));
            }
            Checked {
                at: p,
                second: null,
            }
        }
        Kind::CondWrite => Checked {
            second: aligned(range(a, 8, Perms::WRITE)?, a)?,
            at: range(c.w[2], len, Perms::WRITE)?,
        },
        Kind::FetchAddVector => {
            if len == 0 || len % 8 != 0 {
                s.count_refusal();
                return Err((Refusal::EntrySize, a, len));
            }
            Checked {
                at: aligned(range(a, len, Perms::ATOMIC)?, a)?,
                second: null,
            }
        }
        Kind::CompareSwapAt => Checked {
            at: aligned(range(a, 8, Perms::ATOMIC)?, a)?,
            second: aligned(range(b, 8, Perms::READ)?, b)?,
        },
    })
}

/// Executes one checked command.
fn execute(c: &Cmd<'_>, at: Checked) -> Result<CmdStatus, Refused> {
    let data = c.data;
    Ok(match c.kind {
        Kind::Put => {
            // SAFETY: at..at+len lies in our segment (checked).
            unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), at.at, data.len()) };
            CmdStatus::Done
        }
        Kind::PutFlag => {
            // SAFETY: as for a put; the flag word is 8-aligned inside our segment (checked).
            unsafe {
                crate::copy::copy_nonoverlapping(data.as_ptr(), at.at, data.len());
                // Release: whoever acquires the flag sees the data.
                word(at.second).store(c.w[2], Ordering::Release);
            }
            CmdStatus::Done
        }
        Kind::Get => {
            // Acquire: pairs with the writers' release before we read.
            fence(Ordering::Acquire);
            // SAFETY: at..at+len lies in our segment (checked); valid while we run.
            CmdStatus::Data(unsafe { std::slice::from_raw_parts(at.at, c.w[1] as usize) }.to_vec())
        }
        Kind::Atomic => {
            let op = AtomicOp::from_code(c.w[1]).expect("checked");
            // SAFETY: 8-aligned inside our segment, accessed only atomically (checked).
            CmdStatus::Value(atomic::apply(unsafe { word(at.at) }, op, c.w[2], c.w[3]))
        }
        Kind::Fifo => {
            // SAFETY: 8-aligned, and the FIFO's bytes lie in our segment (checked).
            match unsafe { fifo_enqueue_at(at.at, c.w[1], c.w[2], data) } {
                Ok(st) => CmdStatus::Fifo(st),
                Err(r) => return Err((r, c.w[0], data.len() as u64)),
            }
        }
        Kind::FetchAddVector => {
            let olds = wire::words(data)
                .into_iter()
                .enumerate()
                .map(|(i, addend)| {
                    // SAFETY: the words at..at+len are 8-aligned inside our segment and
                    // accessed only atomically (checked).
                    let w = unsafe { word(at.at.add(8 * i)) };
                    atomic::apply(w, AtomicOp::FetchAdd, addend, 0)
                })
                .collect();
            CmdStatus::Values(olds)
        }
        Kind::CompareSwapAt => {
            // SAFETY: both words are 8-aligned inside our segment (checked). Handlers run one
            // at a time, so the compare and the swap are one step with respect to every other
            // command served here.
            let (target, reference) = unsafe { (word(at.at), word(at.second)) };
            let (new, compare) = (c.w[2], c.w[3]);
            if reference.load(Ordering::Acquire) == compare {
                CmdStatus::Compared {
                    swapped: true,
                    old: atomic::apply(target, AtomicOp::Swap, new, 0),
                }
            } else {
                CmdStatus::Compared {
                    swapped: false,
                    old: target.load(Ordering::Acquire),
                }
            }
        }
        Kind::CondWrite => {
            // SAFETY: the reference word is 8-aligned inside our segment and the data range
            // lies in it (checked). Handlers run one at a time, so the compare, the write and
            // the reference store are one step with respect to every other conditional write.
            let r = unsafe { word(at.second) };
            if r.load(Ordering::Acquire) > c.w[1] {
                // SAFETY: as above.
                unsafe { crate::copy::copy_nonoverlapping(data.as_ptr(), at.at, data.len()) };
                r.store(c.w[1], Ordering::Release);
                CmdStatus::Written(true)
            } else {
                CmdStatus::Written(false)
            }
        }
    })
}
