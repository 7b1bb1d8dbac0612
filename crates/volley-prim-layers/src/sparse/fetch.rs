//! Conditional (deferred) remote fetch, seed 003 §5 / item 21: "fetch data from a processor
//! once a specific condition has been met on that processor".
//!
//! A rank asks the owner of an unknown for its value with a procedure packet. The owner's
//! handler files the request; if the value is produced it is answered at once, otherwise the
//! request is **parked** at the owner and answered by [`Fetcher::produce`] when the value is
//! made. The requester never polls the owner: it waits on its own buffer for the answer
//! (serving requests for its own values meanwhile).
//!
//! Each solve is an epoch ended by [`Fetcher::finish`] (collective): every rank says it is
//! done; requests still parked then are for values never produced, and are answered with
//! that news ([`SparseError::NeverProduced`] at the requester, [`SparseError::ParkedAtFinish`]
//! at the owner) instead of leaving anyone waiting.
//!
//! Flow: a rank keeps at most [`Fetcher::window`] requests outstanding, chosen so that
//! requests, answers and end marks from every rank fit one input buffer at once: no send
//! waits for room (so two ranks asking each other cannot block each other).

use super::error::{Result, SparseError};
use super::mailbox::{Incoming, SparseSetup, DONE_ID, FETCH_ID};
use super::matrix::{eval, Layout, Row};
use crate::timing::Latencies;
use std::collections::{HashMap, HashSet};
use std::time::Instant;
use volley_prim::{Dest, Info, Prim};

/// The request argument's epoch-parity bit (a request for the next solve may reach an owner
/// still ending this one).
const EPOCH_BIT: u64 = 1 << 63;
/// The answer's "never produced" bit.
const NEVER_BIT: u64 = 1 << 62;

/// Bytes a request takes in a buffer (procedure header and argument).
const REQUEST_BYTES: usize = 16;
/// Bytes an answer takes (header, unknown, value).
const ANSWER_BYTES: usize = 24;

/// Counts of one rank's fetch traffic.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FetchStats {
    /// Requests this rank sent.
    pub requests: u64,
    /// Requests this rank answered at once (the value was there).
    pub served_at_once: u64,
    /// Requests this rank parked and answered when it produced the value.
    pub parked: u64,
    /// Requests answered "never produced" at finish.
    pub never: u64,
}

/// One rank's side of the conditional fetch over a [`Layout`]'s unknowns.
pub struct Fetcher<'p, 'rt> {
    prim: &'p Prim<'rt>,
    setup: SparseSetup,
    layout: Layout,
    me: usize,
    own: Vec<Option<f64>>,
    /// Unknown -> requesters waiting for it (this epoch).
    parked: HashMap<usize, Vec<usize>>,
    /// Requests for the next epoch, met while ending this one.
    early: Vec<(usize, usize)>,
    got: HashMap<usize, f64>,
    never: HashSet<usize>,
    /// Requests outstanding, with when they were sent.
    asked: HashMap<usize, Instant>,
    window: usize,
    epoch: u64,
    dones: [usize; 2],
    closing: bool,
    unserved: Vec<(usize, usize)>,
    buf: Vec<u8>,
    stats: FetchStats,
    waits: Latencies,
}

impl std::fmt::Debug for Fetcher<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Fetcher")
            .field("me", &self.me)
            .field("layout", &self.layout)
            .field("window", &self.window)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}

impl<'p, 'rt> Fetcher<'p, 'rt> {
    /// The fetch layer on `prim` for `layout` (same on every rank); `setup` from
    /// [`super::with_handlers`]. Fails when the input buffer cannot hold one request from
    /// every rank.
    pub fn new(prim: &'p Prim<'rt>, setup: &SparseSetup, layout: Layout) -> Result<Self> {
        if layout.size != prim.size() {
            return Err(SparseError::Config(format!(
                "layout for {} ranks in a job of {}",
                layout.size,
                prim.size()
            )));
        }
        let others = prim.size() - 1;
        let cap = prim.capacity();
        // In one buffer at once: each other rank's outstanding requests, the answers to ours
        // and up to two end marks per rank.
        let fixed = 2 * REQUEST_BYTES * others;
        let per = REQUEST_BYTES * others + ANSWER_BYTES;
        let window = cap.saturating_sub(fixed) / per;
        if window == 0 {
            return Err(SparseError::Config(format!(
                "a {cap}-byte input buffer cannot hold a fetch request from each of {others} ranks"
            )));
        }
        Ok(Self {
            prim,
            setup: setup.clone(),
            layout,
            me: prim.rank(),
            own: vec![None; layout.owned(prim.rank())],
            parked: HashMap::new(),
            early: Vec::new(),
            got: HashMap::new(),
            never: HashSet::new(),
            asked: HashMap::new(),
            window,
            epoch: 0,
            dones: [0; 2],
            closing: false,
            unserved: Vec::new(),
            buf: Vec::new(),
            stats: FetchStats::default(),
            waits: Latencies::new(),
        })
    }

    /// Most requests this rank keeps outstanding.
    pub fn window(&self) -> usize {
        self.window
    }

    /// This rank's counts so far.
    pub fn stats(&self) -> FetchStats {
        self.stats
    }

    /// Each request's latency, from its send to its answer's arrival (parked time included),
    /// since the last call.
    pub fn take_latencies(&mut self) -> Latencies {
        std::mem::take(&mut self.waits)
    }

    /// Requests parked here now (waiting for values not produced yet).
    pub fn parked(&self) -> usize {
        self.parked.values().map(Vec::len).sum()
    }

    fn check(&self, i: usize) -> Result<()> {
        if i >= self.layout.n {
            return Err(SparseError::UnknownIndex {
                index: i,
                n: self.layout.n,
            });
        }
        Ok(())
    }

    /// Produces this rank's unknown `i` and answers the requests parked for it.
    pub fn produce(&mut self, i: usize, value: f64) -> Result<()> {
        self.check(i)?;
        let owner = self.layout.owner(i);
        if owner != self.me {
            return Err(SparseError::NotOwner {
                index: i,
                owner,
                rank: self.me,
            });
        }
        let slot = &mut self.own[self.layout.slot(i)];
        if slot.is_some() {
            return Err(SparseError::AlreadyProduced(i));
        }
        *slot = Some(value);
        if let Some(waiting) = self.parked.remove(&i) {
            for r in waiting {
                self.answer(r, i as u64, value)?;
            }
        }
        Ok(())
    }

    /// Asks `i`'s owner for it (nothing if it is this rank's, already here or asked for);
    /// waits only while [`Fetcher::window`] requests are outstanding.
    pub fn request(&mut self, i: usize) -> Result<()> {
        self.check(i)?;
        let owner = self.layout.owner(i);
        if owner == self.me || self.got.contains_key(&i) || self.asked.contains_key(&i) {
            return Ok(());
        }
        while self.asked.len() >= self.window {
            self.step(true)?;
        }
        let parity = if self.epoch % 2 == 1 { EPOCH_BIT } else { 0 };
        self.setup
            .send_note(self.prim, owner, FETCH_ID, i as u64 | parity)?;
        self.asked.insert(i, Instant::now());
        self.stats.requests += 1;
        Ok(())
    }

    /// Unknown `i`'s value: this rank's own (produced), or fetched from its owner once the
    /// owner has produced it.
    pub fn get(&mut self, i: usize) -> Result<f64> {
        self.check(i)?;
        if self.layout.owner(i) == self.me {
            return self.own[self.layout.slot(i)].ok_or(SparseError::NotProducedHere(i));
        }
        self.request(i)?;
        loop {
            if let Some(&v) = self.got.get(&i) {
                return Ok(v);
            }
            if self.never.contains(&i) {
                return Err(SparseError::NeverProduced {
                    index: i,
                    owner: self.layout.owner(i),
                });
            }
            self.step(true)?;
        }
    }

    /// Serves what has arrived (requests, answers), without waiting.
    pub fn poll(&mut self) -> Result<()> {
        while self.step(false)? {}
        Ok(())
    }

    /// Ends this solve (collective: every rank calls it). Waits for the answers to this
    /// rank's requests, tells requesters of values never produced, waits until every rank
    /// has ended, and starts the next solve (values forgotten). Another fetch solve may
    /// follow at once; another layer's packets only after a barrier (others may still be
    /// waiting for end marks). Fails with
    /// [`SparseError::ParkedAtFinish`] if requests were parked for values never produced.
    pub fn finish(&mut self) -> Result<()> {
        while !self.asked.is_empty() {
            self.step(true)?;
        }
        self.closing = true;
        let parked: Vec<(usize, Vec<usize>)> = self.parked.drain().collect();
        for (i, rs) in parked {
            for r in rs {
                self.unserved.push((i, r));
                self.answer_never(r, i as u64)?;
            }
        }
        let parity = (self.epoch % 2) as usize;
        for r in (0..self.prim.size()).filter(|&r| r != self.me) {
            self.setup.send_note(self.prim, r, DONE_ID, parity as u64)?;
        }
        while self.dones[parity] < self.prim.size() - 1 {
            self.step(true)?;
        }
        self.dones[parity] = 0;
        // The next solve.
        self.epoch += 1;
        self.closing = false;
        self.own.iter_mut().for_each(|v| *v = None);
        self.got.clear();
        self.never.clear();
        for (r, i) in std::mem::take(&mut self.early) {
            self.serve(r, i)?;
        }
        let mut unserved = std::mem::take(&mut self.unserved);
        if unserved.is_empty() {
            Ok(())
        } else {
            unserved.sort_unstable();
            Err(SparseError::ParkedAtFinish(unserved))
        }
    }

    fn answer(&mut self, to: usize, word: u64, v: f64) -> Result<()> {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&word.to_le_bytes());
        b[8..].copy_from_slice(&v.to_le_bytes());
        self.prim.send(Dest::Rank(to), Info::Data(&b), false)?;
        Ok(())
    }

    fn answer_never(&mut self, to: usize, i: u64) -> Result<()> {
        self.stats.never += 1;
        self.answer(to, i | NEVER_BIT, 0.0)
    }

    /// A request from `from` for unknown `i` of this epoch.
    fn serve(&mut self, from: usize, i: usize) -> Result<()> {
        if i >= self.layout.n || self.layout.owner(i) != self.me {
            // The requester checks before sending: this is not a request of ours.
            return Err(SparseError::Protocol(format!(
                "rank {from} asked rank {} for unknown {i}, which it does not own",
                self.me
            )));
        }
        match self.own[self.layout.slot(i)] {
            Some(v) => {
                self.stats.served_at_once += 1;
                self.answer(from, i as u64, v)
            }
            None if self.closing => {
                self.unserved.push((i, from));
                self.answer_never(from, i as u64)
            }
            None => {
                self.stats.parked += 1;
                self.parked.entry(i).or_default().push(from);
                Ok(())
            }
        }
    }

    /// Handles one packet; `false` when `block` is off and nothing was there.
    fn step(&mut self, block: bool) -> Result<bool> {
        let mut buf = std::mem::take(&mut self.buf);
        let got = self.setup.next(self.prim, block, &mut buf);
        let r = match got {
            Ok(Some(inc)) => self.handle(inc, &buf).map(|_| true),
            Ok(None) => Ok(false),
            Err(e) => Err(e),
        };
        self.buf = buf;
        r
    }

    fn handle(&mut self, inc: Incoming, buf: &[u8]) -> Result<()> {
        match inc {
            Incoming::Note(n) if n.id == FETCH_ID => {
                let i = (n.arg & !EPOCH_BIT) as usize;
                let theirs = n.arg & EPOCH_BIT != 0;
                if theirs == (self.epoch % 2 == 1) {
                    self.serve(n.from, i)
                } else {
                    self.early.push((n.from, i));
                    Ok(())
                }
            }
            Incoming::Note(n) if n.id == DONE_ID && n.arg < 2 => {
                self.dones[n.arg as usize] += 1;
                Ok(())
            }
            Incoming::Data { from, len: 16 } => {
                let word = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
                let v = f64::from_le_bytes(buf[8..16].try_into().expect("8 bytes"));
                let i = (word & !NEVER_BIT) as usize;
                let sent = match self.asked.remove(&i) {
                    Some(t) if self.layout.owner(i) == from => t,
                    _ => {
                        return Err(SparseError::Protocol(format!(
                            "rank {from} answered unknown {i}, which this rank did not ask it for"
                        )))
                    }
                };
                self.waits.record_since(sent);
                if word & NEVER_BIT != 0 {
                    self.never.insert(i);
                } else {
                    self.got.insert(i, v);
                }
                Ok(())
            }
            other => Err(SparseError::Protocol(format!(
                "{other:?} during a conditional fetch"
            ))),
        }
    }
}

/// Solves this rank's `rows` (its own rows of the system, ascending) with conditional
/// fetches: each remote operand is asked of its owner, who answers once it has computed it.
/// Requests run ahead of the computation, for the operands of later rows as far as the
/// window allows: those of values not computed yet are parked at their owners, which is
/// what the conditional fetch is for. Ends with [`Fetcher::finish`] (collective). Returns
/// the rows' values in order.
pub fn solve(f: &mut Fetcher, rows: &[Row]) -> Result<Vec<f64>> {
    let mut y = Vec::with_capacity(rows.len());
    // The next (row, entry) whose operand is not requested yet.
    let (mut ahead_row, mut ahead_entry) = (0usize, 0usize);
    for (k, r) in rows.iter().enumerate() {
        if ahead_row <= k {
            (ahead_row, ahead_entry) = (k, 0);
        }
        // Ask ahead while the window has room (never waits).
        while ahead_row < rows.len() && f.asked.len() < f.window {
            let entries = &rows[ahead_row].entries;
            match entries.get(ahead_entry) {
                Some(&(c, _)) => {
                    f.request(c)?;
                    ahead_entry += 1;
                }
                None => (ahead_row, ahead_entry) = (ahead_row + 1, 0),
            }
        }
        let mut err = None;
        let v = eval(r, |c| match f.get(c) {
            Ok(v) => v,
            Err(e) => {
                err.get_or_insert(e);
                f64::NAN
            }
        });
        if let Some(e) = err {
            return Err(e);
        }
        f.produce(r.index, v)?;
        y.push(v);
        f.poll()?;
    }
    f.finish()?;
    Ok(y)
}
