//! The inspector (seed 003 §5, [SCMB90], item 23): learns at run time who needs which values
//! from whom and turns it into a reusable [`Schedule`] for the executor.
//!
//! Each rank lists the remote unknowns its rows read, per owner, and sends each owner its
//! list (pairwise rounds, one partner at a time, in chunks of a quarter buffer, so no buffer
//! overflows). From the lists it receives, each rank knows which of its values go to whom.
//! Then it plans its executor run: its rows in order, and the batches that carry its values
//! to their consumers. Values bound for one rank are combined in one batch until the batch
//! is full or until this rank is about to wait for a value it has not received yet (it flushes
//! everything first, so no rank waits on values held back in another's batch).
//!
//! The flow control: each sender may have at most [`Schedule::allowance`] bytes in a
//! receiver's buffer that the receiver has not credited back; a batch is at most half of it,
//! and a receiver returns a credit each time it has consumed half the allowance from one
//! sender, plus a final one at the end of each solve. Allowances and credits of every
//! sender fit one buffer together, so the executor never finds a buffer full.

use super::error::{Result, SparseError};
use super::matrix::{Layout, Row};
use std::collections::HashSet;
use volley_prim::{Dest, Info, Prim, Recv, Source};

/// Bytes in a receiver's buffer set aside per sender for credits in flight (at most three
/// 16-byte credit packets: two half-allowance ones and the final).
pub const CREDIT_RESERVE: usize = 48;

/// Where a row's operand comes from in the executor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operand {
    /// This rank's own unknown at this slot (an earlier row of this rank).
    Local(usize),
    /// A received value: position `pos` of what `from` sends this rank per solve.
    Remote {
        /// The sending rank.
        from: usize,
        /// Its place in that rank's stream to this one.
        pos: usize,
    },
}

/// One step of the executor's run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Compute this rank's `k`-th row.
    Row(usize),
    /// Send the next `count` values of this rank's stream to `to` as one batch.
    Send {
        /// The consumer.
        to: usize,
        /// Values in the batch.
        count: usize,
    },
}

/// A rank's executor plan (see the module docs): reusable across solves of the same pattern.
#[derive(Debug, Clone, PartialEq)]
pub struct Schedule {
    /// The layout it was built for.
    pub layout: Layout,
    /// This rank.
    pub rank: usize,
    /// Per owner: the unknowns this rank receives from it each solve, ascending (the order
    /// they arrive in).
    pub needs: Vec<Vec<usize>>,
    /// Per consumer: this rank's unknowns it sends there each solve, ascending.
    pub sends: Vec<Vec<usize>>,
    /// Per own row: its operands, in the row's column order.
    pub operands: Vec<Vec<Operand>>,
    /// The run: rows and batches in order.
    pub steps: Vec<Step>,
    /// Most bytes a sender may have uncredited in one receiver's buffer.
    pub allowance: usize,
    /// Most values in one batch.
    pub max_batch: usize,
    /// Whether the executor uses credits (off only to show what happens without them).
    pub flow_control: bool,
}

/// How the inspector plans.
#[derive(Debug, Clone, Copy)]
pub struct InspectOptions {
    /// Cap on values per batch (the allowance caps it further); `None`: as large as allowed.
    pub max_batch: Option<usize>,
    /// Plan credits (the seed's flow-control messages). Without them batches may be half a
    /// buffer and senders wait on full buffers instead.
    pub flow_control: bool,
}

impl Default for InspectOptions {
    fn default() -> Self {
        Self {
            max_batch: None,
            flow_control: true,
        }
    }
}

impl Schedule {
    /// Batches per solve this rank sends.
    pub fn batches(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s, Step::Send { .. }))
            .count()
    }

    /// Values per solve this rank receives.
    pub fn values_in(&self) -> usize {
        self.needs.iter().map(Vec::len).sum()
    }

    /// Values per solve this rank sends.
    pub fn values_out(&self) -> usize {
        self.sends.iter().map(Vec::len).sum()
    }
}

/// The allowance and largest batch for a buffer of `cap` bytes shared by `size` ranks.
pub fn limits(cap: usize, size: usize, opts: InspectOptions) -> Result<(usize, usize)> {
    let others = size.saturating_sub(1).max(1);
    let allowance = (cap / others).saturating_sub(CREDIT_RESERVE) / 8 * 8;
    let batch_bytes = if opts.flow_control {
        allowance / 2
    } else {
        cap / 2
    };
    let most = batch_bytes.saturating_sub(8) / 8;
    if most == 0 {
        return Err(SparseError::Config(format!(
            "a {cap}-byte input buffer leaves no room for a batch from each of {others} ranks"
        )));
    }
    let max_batch = match opts.max_batch {
        Some(0) => return Err(SparseError::Config("a batch of 0 values".into())),
        Some(m) => m.min(most),
        None => most,
    };
    Ok((allowance, max_batch))
}

/// The inspector (collective): learns the communication pattern of `rows` (this rank's rows,
/// ascending) and plans the executor.
pub fn inspect(
    prim: &Prim,
    layout: Layout,
    rows: &[Row],
    opts: InspectOptions,
) -> Result<Schedule> {
    let (me, size) = (prim.rank(), prim.size());
    if layout.size != size {
        return Err(SparseError::Config(format!(
            "layout for {} ranks in a job of {size}",
            layout.size
        )));
    }
    let mut needs: Vec<Vec<usize>> = vec![Vec::new(); size];
    for (k, r) in rows.iter().enumerate() {
        if r.index >= layout.n {
            return Err(SparseError::UnknownIndex {
                index: r.index,
                n: layout.n,
            });
        }
        if layout.owner(r.index) != me || layout.slot(r.index) != k {
            return Err(SparseError::NotOwner {
                index: r.index,
                owner: layout.owner(r.index),
                rank: me,
            });
        }
        for &(c, _) in &r.entries {
            if c >= r.index {
                return Err(SparseError::Config(format!(
                    "row {} reads column {c}: not lower triangular",
                    r.index
                )));
            }
            if layout.owner(c) != me {
                needs[layout.owner(c)].push(c);
            }
        }
    }
    for v in &mut needs {
        v.sort_unstable();
        v.dedup();
    }
    let sends = exchange(prim, &needs)?;
    for (to, list) in sends.iter().enumerate() {
        if let Some(&bad) = list
            .iter()
            .find(|&&i| i >= layout.n || layout.owner(i) != me)
        {
            return Err(SparseError::Protocol(format!(
                "rank {to} asked rank {me} for unknown {bad}, which it does not own"
            )));
        }
    }
    plan(layout, me, rows, needs, sends, prim.capacity(), opts)
}

/// Builds the plan from the lists (the part of the inspector that needs no communication:
/// the serial reference of the tests calls it with lists it computes itself).
pub fn plan(
    layout: Layout,
    me: usize,
    rows: &[Row],
    needs: Vec<Vec<usize>>,
    sends: Vec<Vec<usize>>,
    cap: usize,
    opts: InspectOptions,
) -> Result<Schedule> {
    let size = layout.size;
    let (allowance, max_batch) = limits(cap, size, opts)?;
    let operands = rows
        .iter()
        .map(|r| {
            r.entries
                .iter()
                .map(|&(c, _)| {
                    let o = layout.owner(c);
                    if o == me {
                        Operand::Local(layout.slot(c))
                    } else {
                        let pos = needs[o].binary_search(&c).expect("listed in needs");
                        Operand::Remote { from: o, pos }
                    }
                })
                .collect()
        })
        .collect::<Vec<Vec<Operand>>>();
    // Consumers of each own value, by slot.
    let mut consumers: Vec<Vec<usize>> = vec![Vec::new(); layout.owned(me)];
    for (to, list) in sends.iter().enumerate() {
        for &i in list {
            consumers[layout.slot(i)].push(to);
        }
    }
    let mut steps = Vec::new();
    let mut pending = vec![0usize; size];
    let flush = |steps: &mut Vec<Step>, pending: &mut Vec<usize>| {
        for (to, p) in pending.iter_mut().enumerate() {
            if *p > 0 {
                steps.push(Step::Send { to, count: *p });
                *p = 0;
            }
        }
    };
    let mut seen: HashSet<usize> = HashSet::new();
    for (k, ops) in operands.iter().enumerate() {
        let mut fresh = false;
        for o in ops {
            if let Operand::Remote { from, pos } = *o {
                fresh |= seen.insert(needs[from][pos]);
            }
        }
        if fresh {
            flush(&mut steps, &mut pending);
        }
        steps.push(Step::Row(k));
        for &to in &consumers[k] {
            pending[to] += 1;
            if pending[to] == max_batch {
                steps.push(Step::Send {
                    to,
                    count: max_batch,
                });
                pending[to] = 0;
            }
        }
    }
    flush(&mut steps, &mut pending);
    Ok(Schedule {
        layout,
        rank: me,
        needs,
        sends,
        operands,
        steps,
        allowance,
        max_batch,
        flow_control: opts.flow_control,
    })
}

/// Sends each rank `lists[r]` and returns what each rank sent here: pairwise rounds (in
/// round `k`, to `me + k` and from `me - k`), each list as a count then chunks of at most a
/// quarter buffer, alternating one chunk out and one in, so a partner's buffer never holds
/// more than two of this rank's chunks.
fn exchange(prim: &Prim, lists: &[Vec<usize>]) -> Result<Vec<Vec<usize>>> {
    let (me, size) = (prim.rank(), prim.size());
    let chunk = (prim.capacity() / 4 - 8) / 8;
    let mut got = vec![Vec::new(); size];
    let words =
        |v: &[usize]| -> Vec<u8> { v.iter().flat_map(|&i| (i as u64).to_le_bytes()).collect() };
    for k in 1..size {
        // Only this round's partner sends here until everyone has finished the round.
        prim.runtime().barrier();
        let (to, from) = ((me + k) % size, (me + size - k) % size);
        let out = words(&lists[to]);
        prim.send(
            Dest::Rank(to),
            Info::Data(&(lists[to].len() as u64).to_le_bytes()),
            false,
        )?;
        let mut b = [0u8; 8];
        let got_from = prim.receive(Source::Network, Recv::Data(&mut b))?;
        if got_from.from != Some(from) {
            return Err(SparseError::Protocol(format!(
                "inspector round {k}: a list from {:?}, expected rank {from}",
                got_from.from
            )));
        }
        let n_in = u64::from_le_bytes(b) as usize;
        let chunks_out = lists[to].len().div_ceil(chunk);
        let chunks_in = n_in.div_ceil(chunk);
        let mut inbuf = vec![0u8; n_in * 8];
        for s in 0..chunks_out.max(chunks_in) {
            if s < chunks_out {
                let lo = s * chunk * 8;
                let hi = out.len().min(lo + chunk * 8);
                prim.send(Dest::Rank(to), Info::Data(&out[lo..hi]), false)?;
            }
            if s < chunks_in {
                let lo = s * chunk * 8;
                let hi = inbuf.len().min(lo + chunk * 8);
                prim.receive(Source::Network, Recv::Data(&mut inbuf[lo..hi]))?;
            }
        }
        got[from] = inbuf
            .chunks_exact(8)
            .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")) as usize)
            .collect();
    }
    prim.runtime().barrier();
    Ok(got)
}
