//! The sparse solve with typed messages, level-scheduled (seed 003 §5, E9's variant (a)):
//! the conventional way, with the typed layer ([`crate::Typed`]) standing in for NX/2.
//!
//! The solve runs in rounds, all ranks in step. In round `t` each rank computes every row
//! of its own whose operands were all known when the round began: the rows of level `t`
//! (a row's level is one more than its operands' highest). It then sends every other rank
//! one typed message with the values it computed (the pattern is known only row by row, so
//! a rank does not know who reads its values: each goes to every rank), and receives one
//! message from every other rank. Each message also says whether its sender has computed
//! all its rows; all ranks stop after the same round, the first in which every rank has.
//!
//! Flow: a message holds at most [`round_limit`] values (a wider level spreads over more
//! rounds), so that two rounds of messages from every other rank fit one input buffer at
//! once; sends then never wait for room, and two ranks sending to each other cannot block
//! each other.

use super::error::{Result, SparseError};
use super::matrix::{eval, Layout, Row};
use crate::timing::Latencies;
use crate::typed::Typed;
use std::collections::{HashMap, VecDeque};
use std::time::Instant;

/// Typed-message types of this layer: this plus the sender's rank.
const TY_BASE: u32 = 0x5e00_0000;

/// Bytes of a round message besides its values: the typed header packet, the chained
/// payload's and the close's words, and the done word.
const MESSAGE_OVERHEAD: usize = 48;

/// Counts of one rank's level-scheduled solves.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LevelStats {
    /// Rounds (all ranks run the same number).
    pub rounds: u64,
    /// Typed messages this rank sent.
    pub messages: u64,
    /// Values this rank sent (each to every other rank).
    pub values_sent: u64,
}

/// Most values a rank sends in one round message, for `size` ranks sharing `capacity`-byte
/// input buffers: a quarter buffer per sender, so two rounds from each fit. 0 when the
/// buffer is too small.
pub fn round_limit(capacity: usize, size: usize) -> usize {
    let share = capacity / (4 * size.saturating_sub(1).max(1));
    share.saturating_sub(MESSAGE_OVERHEAD) / 16
}

/// Solves this rank's `rows` (its own rows of the system under `layout`, ascending) with
/// level-scheduled typed messages (collective: every rank calls it with its rows). The
/// typed layer must own the network buffer meanwhile. Records in `waits`, per message
/// received, how long the rank waited for it. Returns the rows' values in order.
pub fn solve_levels(
    t: &Typed,
    layout: Layout,
    rows: &[Row],
    waits: &mut Latencies,
    stats: &mut LevelStats,
) -> Result<Vec<f64>> {
    let prim = t.prim();
    let (me, size) = (prim.rank(), prim.size());
    if layout.size != size {
        return Err(SparseError::Config(format!(
            "layout for {} ranks in a job of {size}",
            layout.size
        )));
    }
    let limit = round_limit(prim.capacity(), size);
    if limit == 0 {
        return Err(SparseError::Config(format!(
            "a {}-byte input buffer cannot hold a round message from each of {} ranks",
            prim.capacity(),
            size - 1
        )));
    }
    // Operand -> own rows reading it; per row, operands not known yet.
    let mut readers: HashMap<usize, Vec<usize>> = HashMap::new();
    let mut missing = vec![0usize; rows.len()];
    let mut ready = VecDeque::new();
    for (k, r) in rows.iter().enumerate() {
        for &(c, _) in &r.entries {
            if c >= layout.n || c >= r.index {
                return Err(SparseError::UnknownIndex {
                    index: c,
                    n: layout.n,
                });
            }
            readers.entry(c).or_default().push(k);
        }
        missing[k] = r.entries.len();
        if missing[k] == 0 {
            ready.push_back(k);
        }
    }
    let mut known = vec![f64::NAN; layout.n];
    let mut y = vec![0.0f64; rows.len()];
    let mut computed = 0usize;
    let mut msg = Vec::new();
    let mut fresh: Vec<(usize, f64)> = Vec::new();
    loop {
        // This round's rows: those ready when it began (at most `limit`).
        fresh.clear();
        let take = ready.len().min(limit);
        for k in ready.drain(..take) {
            let v = eval(&rows[k], |c| known[c]);
            y[k] = v;
            fresh.push((rows[k].index, v));
        }
        computed += fresh.len();
        let done = computed == rows.len();
        msg.clear();
        msg.extend_from_slice(&u64::from(done).to_le_bytes());
        for &(i, v) in &fresh {
            msg.extend_from_slice(&(i as u64).to_le_bytes());
            msg.extend_from_slice(&v.to_le_bytes());
        }
        for r in (0..size).filter(|&r| r != me) {
            t.send(r, TY_BASE + me as u32, &msg)?;
            stats.messages += 1;
        }
        stats.values_sent += fresh.len() as u64;
        stats.rounds += 1;
        let mut all_done = done;
        for r in (0..size).filter(|&r| r != me) {
            let start = Instant::now();
            let m = t.recv(TY_BASE + r as u32)?;
            waits.record_since(start);
            if m.len() < 8 || (m.len() - 8) % 16 != 0 {
                return Err(SparseError::Protocol(format!(
                    "a level message of {} bytes from rank {r}",
                    m.len()
                )));
            }
            all_done &= m[..8] != [0; 8];
            for p in m[8..].chunks_exact(16) {
                let i = u64::from_le_bytes(p[..8].try_into().expect("8 bytes")) as usize;
                let v = f64::from_le_bytes(p[8..].try_into().expect("8 bytes"));
                if i >= layout.n || layout.owner(i) != r {
                    return Err(SparseError::Protocol(format!(
                        "rank {r} sent unknown {i}, which it does not own"
                    )));
                }
                fresh.push((i, v));
            }
        }
        if all_done {
            return Ok(y);
        }
        // Values known from now on: the rows waiting only for them are next round's.
        for &(i, v) in &fresh {
            known[i] = v;
            for k in readers.remove(&i).unwrap_or_default() {
                missing[k] -= 1;
                if missing[k] == 0 {
                    ready.push_back(k);
                }
            }
        }
    }
}
