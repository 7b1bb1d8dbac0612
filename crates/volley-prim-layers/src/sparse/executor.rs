//! The executor (item 23): runs a [`Schedule`] — rows in order, batches pushed to their
//! consumers with no request — under the schedule's flow control (credits), so that no
//! sender ever finds a receiver's buffer full. Reused for any number of solves.
//!
//! A batch is a data packet of values only (the receiver knows from the schedule which
//! unknowns come from whom, in which order). A credit is a procedure packet
//! ([`super::CREDIT_ID`]) naming the bytes consumed; the last one of a solve is marked final,
//! and a sender starts its next solve only once every consumer's final credit is in (so a
//! batch of the next solve never meets a receiver still using this one's values).

use super::error::{Result, SparseError};
use super::mailbox::{Incoming, SparseSetup, CREDIT_ID};
use super::matrix::{eval, Row};
use super::schedule::{Operand, Schedule, Step};
use crate::timing::Latencies;
use std::time::Instant;
use volley_prim::{Dest, Info, Prim};

/// The credit argument's "final for this solve" bit.
const FINAL_BIT: u64 = 1 << 63;

/// Counts of one rank's executor traffic.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ExecStats {
    /// Solves run.
    pub solves: u64,
    /// Batches sent.
    pub batches: u64,
    /// Values sent in them.
    pub values: u64,
    /// Credits (flow-control messages) sent.
    pub credits: u64,
    /// Times a batch waited for a credit before it could go.
    pub credit_waits: u64,
    /// Most bytes this rank had uncredited in any one receiver's buffer.
    pub most_outstanding: u64,
}

/// One rank's executor for a schedule.
pub struct Executor<'p, 'rt> {
    prim: &'p Prim<'rt>,
    setup: SparseSetup,
    sched: Schedule,
    /// Received values per source for this solve, in the schedule's order.
    remote: Vec<Vec<f64>>,
    /// Values received per source over all solves.
    arrived: Vec<u64>,
    /// Bytes sent to and credited by each consumer, over all solves.
    sent: Vec<u64>,
    granted: Vec<u64>,
    /// Final credits received per consumer.
    finals: Vec<u64>,
    /// Bytes consumed from each source and not credited yet.
    unreported: Vec<u64>,
    solves: u64,
    buf: Vec<u8>,
    stats: ExecStats,
    waits: Latencies,
}

impl std::fmt::Debug for Executor<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Executor")
            .field("rank", &self.sched.rank)
            .field("solves", &self.solves)
            .finish_non_exhaustive()
    }
}

fn batch_bytes(count: usize) -> u64 {
    8 + 8 * count as u64
}

impl<'p, 'rt> Executor<'p, 'rt> {
    /// The executor of `sched` (this rank's, from [`super::inspect`]) on `prim`.
    pub fn new(prim: &'p Prim<'rt>, setup: &SparseSetup, sched: Schedule) -> Result<Self> {
        let size = prim.size();
        if sched.rank != prim.rank() || sched.layout.size != size {
            return Err(SparseError::Config(format!(
                "a schedule of rank {} of {} used on rank {} of {size}",
                sched.rank,
                sched.layout.size,
                prim.rank()
            )));
        }
        Ok(Self {
            prim,
            setup: setup.clone(),
            remote: sched.needs.iter().map(|v| vec![0.0; v.len()]).collect(),
            sched,
            arrived: vec![0; size],
            sent: vec![0; size],
            granted: vec![0; size],
            finals: vec![0; size],
            unreported: vec![0; size],
            solves: 0,
            buf: Vec::new(),
            stats: ExecStats::default(),
            waits: Latencies::new(),
        })
    }

    /// The schedule it runs.
    pub fn schedule(&self) -> &Schedule {
        &self.sched
    }

    /// This rank's counts so far.
    pub fn stats(&self) -> ExecStats {
        self.stats
    }

    /// How long a row waited for each remote operand (0 when its batch was already here),
    /// since the last call.
    pub fn take_waits(&mut self) -> Latencies {
        std::mem::take(&mut self.waits)
    }

    /// One solve (collective: every rank runs its executor): computes this rank's `rows`
    /// (the ones the schedule was built from) and returns their values in order. It returns
    /// when this rank's part is done and its consumers have credited everything, while
    /// other ranks may still be executing: another executor solve may follow at once, but
    /// before packets of another layer (a fetch, typed messages) go out, the job must pass a
    /// barrier (`Runtime::barrier`).
    pub fn solve(&mut self, rows: &[Row]) -> Result<Vec<f64>> {
        if rows.len() != self.sched.operands.len() {
            return Err(SparseError::Config(format!(
                "{} rows for a schedule of {}",
                rows.len(),
                self.sched.operands.len()
            )));
        }
        let size = self.prim.size();
        let mut y = vec![0.0f64; rows.len()];
        let mut cursor = vec![0usize; size];
        let base: Vec<u64> = (0..size)
            .map(|q| self.solves * self.sched.needs[q].len() as u64)
            .collect();
        let steps = std::mem::take(&mut self.sched.steps);
        let mut result = Ok(());
        for &s in &steps {
            result = match s {
                Step::Row(k) => self.row(k, &rows[k], &mut y, &base),
                Step::Send { to, count } => {
                    let lo = cursor[to];
                    cursor[to] += count;
                    self.push(to, lo, count, &y)
                }
            };
            if result.is_err() {
                break;
            }
        }
        self.sched.steps = steps;
        result?;
        // Final credits to every source (after the last row: its values are used up), then
        // wait for every consumer's.
        for q in 0..size {
            if !self.sched.needs[q].is_empty() {
                let bytes = std::mem::take(&mut self.unreported[q]);
                self.credit(q, bytes | FINAL_BIT)?;
            }
        }
        self.solves += 1;
        self.stats.solves += 1;
        for d in 0..size {
            while !self.sched.sends[d].is_empty() && self.finals[d] < self.solves {
                self.step()?;
            }
        }
        Ok(y)
    }

    fn row(&mut self, k: usize, r: &Row, y: &mut [f64], base: &[u64]) -> Result<()> {
        // Wait for the remote operands first (each arrives in its source's order).
        for i in 0..self.sched.operands[k].len() {
            if let Operand::Remote { from, pos } = self.sched.operands[k][i] {
                if self.arrived[from] > base[from] + pos as u64 {
                    self.waits.record(0);
                    continue;
                }
                let start = Instant::now();
                while self.arrived[from] <= base[from] + pos as u64 {
                    self.step()?;
                }
                self.waits.record_since(start);
            }
        }
        let ops = &self.sched.operands[k];
        let remote = &self.remote;
        let mut n = 0;
        let v = eval(r, |_| {
            let x = match ops[n] {
                Operand::Local(s) => y[s],
                Operand::Remote { from, pos } => remote[from][pos],
            };
            n += 1;
            x
        });
        y[k] = v;
        Ok(())
    }

    /// Sends values `lo..lo + count` of this rank's stream to `to` as one batch, waiting
    /// for credits first when flow control is on.
    fn push(&mut self, to: usize, lo: usize, count: usize, y: &[f64]) -> Result<()> {
        let bytes = batch_bytes(count);
        if self.sched.flow_control {
            let mut waited = false;
            while self.sent[to] - self.granted[to] + bytes > self.sched.allowance as u64 {
                if !waited {
                    self.stats.credit_waits += 1;
                    waited = true;
                }
                self.step()?;
            }
        }
        let layout = self.sched.layout;
        let mut b = std::mem::take(&mut self.buf);
        b.clear();
        for &i in &self.sched.sends[to][lo..lo + count] {
            b.extend_from_slice(&y[layout.slot(i)].to_le_bytes());
        }
        let r = self.prim.send(Dest::Rank(to), Info::Data(&b), false);
        self.buf = b;
        r?;
        self.sent[to] += bytes;
        self.stats.batches += 1;
        self.stats.values += count as u64;
        self.stats.most_outstanding = self
            .stats
            .most_outstanding
            .max(self.sent[to] - self.granted[to]);
        Ok(())
    }

    fn credit(&mut self, to: usize, arg: u64) -> Result<()> {
        self.stats.credits += 1;
        self.setup.send_note(self.prim, to, CREDIT_ID, arg)
    }

    /// Waits for and handles one packet: a batch (stored, credited when half an allowance
    /// is consumed) or a credit.
    fn step(&mut self) -> Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        let got = self.setup.next(self.prim, true, &mut buf);
        let r = match got {
            Ok(Some(Incoming::Data { from, len })) => self.batch(from, &buf[..len]),
            Ok(Some(Incoming::Note(n))) if n.id == CREDIT_ID => {
                self.granted[n.from] += n.arg & !FINAL_BIT;
                if n.arg & FINAL_BIT != 0 {
                    self.finals[n.from] += 1;
                }
                if self.granted[n.from] > self.sent[n.from] {
                    Err(SparseError::Protocol(format!(
                        "rank {} credited more bytes than this rank sent it",
                        n.from
                    )))
                } else {
                    Ok(())
                }
            }
            Ok(Some(other)) => Err(SparseError::Protocol(format!(
                "{other:?} during the executor"
            ))),
            Ok(None) => Ok(()),
            Err(e) => Err(e),
        };
        self.buf = buf;
        r
    }

    fn batch(&mut self, from: usize, data: &[u8]) -> Result<()> {
        let len = self.sched.needs[from].len();
        let count = data.len() / 8;
        if len == 0 || data.len() % 8 != 0 || count > len {
            return Err(SparseError::Protocol(format!(
                "a batch of {} bytes from rank {from}, which sends {len} values per solve",
                data.len()
            )));
        }
        for w in data.chunks_exact(8) {
            let pos = (self.arrived[from] % len as u64) as usize;
            self.remote[from][pos] = f64::from_le_bytes(w.try_into().expect("8 bytes"));
            self.arrived[from] += 1;
        }
        if self.sched.flow_control {
            self.unreported[from] += batch_bytes(count);
            if self.unreported[from] >= self.sched.allowance as u64 / 2 {
                let bytes = std::mem::take(&mut self.unreported[from]);
                self.credit(from, bytes)?;
            }
        }
        Ok(())
    }
}
