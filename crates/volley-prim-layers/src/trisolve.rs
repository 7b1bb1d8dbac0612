//! The pipelined banded lower-triangular solve of seed 003's test B (§4), on the primitives.
//!
//! The factor of a five-point stencil on a grid of `n` rows and `p` columns (one column per
//! rank, the seed's `M = P`): unit diagonal, a first subdiagonal `a1` (zero at each row's
//! start: the grid's border) and a subdiagonal `p` below the main one, `an`. Unknown
//! `i = r * p + c` lives on rank `c` (cyclic), with `y_i = rhs_i - y_{i-1} a1_{i-1} -
//! y_{i-p} an_{i-p}`: the last term is local, the product `y_{i-1} a1_{i-1}` is computed on
//! the left neighbour and sent over, one float per message, four flops between messages.
//! Every rank but the first and last receives and sends `n` messages.
//!
//! Versions (the seed's B0-B3): [`Version::Typed`] ([`crate::Typed`] send and receive),
//! [`Version::Raw`] (one data packet per value, the receiver polls), [`Version::Pipe`] (a
//! channel opened once, `pipe_put`/`pipe_get`), [`Version::Fetch`] (the receiver asks the
//! owner for each value with a procedure packet; the owner's handler files the request and
//! the owner answers it); B3' [`Version::FetchComm`] (the same request, answered by the
//! owner's communication thread as soon as the value is computed, while the owner's program
//! thread goes on computing: seed 003's asynchronous Active Message). [`Version::Local`] is the computation alone, on the values the
//! solve would receive: the floor that splits a run into computation and communication.

use crate::timing::Latencies;
use crate::typed::{Typed, TypedError};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Instant;
use volley_prim::{Dest, Info, Prim, PrimConfig, PrimError, Progress, Recv, Source};

/// The handler id of a fetch request (register it with [`with_handlers`]).
pub const FETCH_ID: u32 = 31;

/// The handler id of a B3' fetch request, answered on the communication thread.
pub const FETCH_COMM_ID: u32 = 32;

/// B3' solves this rank has started: requests carry it, so a request is only answered from
/// the owner's table of the same solve.
static EPOCH: AtomicU64 = AtomicU64::new(0);

/// The owner's products as it computes them, for its communication thread: the solve they
/// belong to, how many rows are ready, and the values (f64 bits).
struct Published {
    epoch: AtomicU64,
    ready: AtomicU64,
    values: Mutex<Vec<u64>>,
}

static PUBLISHED: Published = Published {
    epoch: AtomicU64::new(0),
    ready: AtomicU64::new(0),
    values: Mutex::new(Vec::new()),
};

/// The typed layer's message type carrying the products.
const TY: u32 = 3;

/// Fetch requests filed by the handler and not yet answered: (requester, row).
static REQUESTS: Mutex<VecDeque<(usize, u64)>> = Mutex::new(VecDeque::new());

/// One way of moving the products between neighbours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// B0: the typed layer's send and receive.
    Typed,
    /// B1: one data packet per value, the receiver polls its buffer.
    Raw,
    /// B2: a channel opened before the loop, one `pipe_put` and one `pipe_get` per value.
    Pipe,
    /// B3: a fetch request (procedure packet) per value, answered by the owner.
    Fetch,
    /// B3': a fetch request per value, answered by the owner's communication thread while
    /// its program thread computes (`comm-thread` mode, 2 ranks).
    FetchComm,
    /// No communication: the computation on the values a solve receives.
    Local,
}

/// The inputs at unknown `i` of a grid with `p` columns: `(rhs_i, a1_i, an_i)`; `a1_i` is
/// zero where `i + 1` starts a row.
pub fn coefficients(i: usize, p: usize) -> (f64, f64, f64) {
    let h = (i.wrapping_mul(2_654_435_761) % 1000) as f64 / 1000.0;
    let a1 = if (i + 1) % p == 0 {
        0.0
    } else {
        0.25 + h / 8.0
    };
    (1.0 + h, a1, 0.5 - h / 8.0)
}

/// The serial solve of the whole grid (`n * p` unknowns), in row-major order.
pub fn serial(n: usize, p: usize) -> Vec<f64> {
    let mut y = vec![0.0; n * p];
    for i in 0..n * p {
        let (rhs, _, _) = coefficients(i, p);
        let left = if i % p > 0 {
            y[i - 1] * coefficients(i - 1, p).1
        } else {
            0.0
        };
        let up = if i >= p {
            y[i - p] * coefficients(i - p, p).2
        } else {
            0.0
        };
        y[i] = rhs - left - up;
    }
    y
}

/// `cfg` with the fetch handler registered (every rank registers it).
pub fn with_handlers(cfg: PrimConfig) -> Result<PrimConfig, PrimError> {
    cfg.handler(FETCH_ID, |inv| {
        let row = inv.receive_u64().expect("a fetch request carries its row");
        let from = inv.from().expect("fetch requests come from ranks");
        REQUESTS.lock().expect("requests").push_back((from, row));
    })?
    .handler(FETCH_COMM_ID, answer_fetch)
}

/// B3' on the owner's communication thread: waits until the asked row of the asked solve is
/// computed, then sends the product straight to the requester.
fn answer_fetch(inv: &mut volley_prim::Invocation<'_>) {
    inv.quiet();
    let (Ok(epoch), Ok(row), Some(from)) = (inv.receive_u64(), inv.receive_u64(), inv.from())
    else {
        return;
    };
    let mut spins = 0u32;
    while PUBLISHED.epoch.load(Ordering::Acquire) != epoch
        || PUBLISHED.ready.load(Ordering::Acquire) <= row
    {
        spins = spins.saturating_add(1);
        if spins > 64 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    let bits = PUBLISHED.values.lock().expect("published values")[row as usize];
    // The requester waits for this packet; a failure here is a broken job, said loudly.
    if let Err(e) = inv.send(from, Info::Data(&bits.to_le_bytes()), &[]) {
        eprintln!("trisolve B3': answering row {row} for rank {from}: {e}");
    }
}

/// One rank's column of the solve: its `n` unknowns, in row order.
pub struct Column {
    /// The solved values.
    pub y: Vec<f64>,
}

/// Solves rank `prim.rank()`'s column of an `n`-row grid over all ranks with `v`. For
/// [`Version::Local`], `incoming` gives the products the left neighbour would send.
pub fn solve(
    prim: &Prim,
    typed: &Typed,
    n: usize,
    v: Version,
    incoming: &[f64],
) -> Result<Column, TypedError> {
    solve_timed(prim, typed, n, v, incoming, None)
}

/// Runs `f`, recording its time in `lat` if there is one.
#[inline(always)]
fn timed<T>(lat: Option<&mut Latencies>, f: impl FnOnce() -> T) -> T {
    match lat {
        Some(l) => {
            let start = Instant::now();
            let r = f();
            l.record_since(start);
            r
        }
        None => f(),
    }
}

/// [`solve`], recording in `lat` (if given) each incoming value's latency: the receive's
/// wait for it, or for the fetch versions the request's round trip. The clock reads cost
/// tens of ns per message, so timed runs pass `None`.
pub fn solve_timed(
    prim: &Prim,
    typed: &Typed,
    n: usize,
    v: Version,
    incoming: &[f64],
    mut lat: Option<&mut Latencies>,
) -> Result<Column, TypedError> {
    let (c, p) = (prim.rank(), prim.size());
    let (rhs, a1, an): (Vec<f64>, Vec<f64>, Vec<f64>) = (0..n)
        .map(|r| coefficients(r * p + c, p))
        .fold((vec![], vec![], vec![]), |mut acc, (x, y, z)| {
            acc.0.push(x);
            acc.1.push(y);
            acc.2.push(z);
            acc
        });
    let left = c > 0;
    let right = c + 1 < p;
    let mut y = vec![0.0f64; n];
    let mut prev = 0.0f64;
    let mut prev_an = 0.0f64;
    match v {
        Version::Local => {
            for r in 0..n {
                let inc = if left { incoming[r] } else { 0.0 };
                let yi = rhs[r] - inc - prev * prev_an;
                if right {
                    std::hint::black_box(yi * a1[r]);
                }
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
        }
        Version::Typed => {
            let mut b = [0u8; 8];
            for r in 0..n {
                let inc = if left {
                    timed(lat.as_deref_mut(), || typed.recv_into(TY, &mut b))?;
                    f64::from_le_bytes(b)
                } else {
                    0.0
                };
                let yi = rhs[r] - inc - prev * prev_an;
                if right {
                    typed.send(c + 1, TY, &(yi * a1[r]).to_le_bytes())?;
                }
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
        }
        Version::Raw => {
            let mut b = [0u8; 8];
            for r in 0..n {
                let inc = if left {
                    timed(lat.as_deref_mut(), || {
                        prim.receive(Source::Network, Recv::Data(&mut b))
                    })?;
                    f64::from_le_bytes(b)
                } else {
                    0.0
                };
                let yi = rhs[r] - inc - prev * prev_an;
                if right {
                    let out = (yi * a1[r]).to_le_bytes();
                    prim.send(Dest::Rank(c + 1), Info::Data(&out), false)?;
                }
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
        }
        Version::Pipe => {
            let mut pipe = if right {
                Some(prim.pipe_create(c + 1)?)
            } else {
                None
            };
            for r in 0..n {
                let inc = if left {
                    timed(lat.as_deref_mut(), || prim.pipe_get_f64())?
                } else {
                    0.0
                };
                let yi = rhs[r] - inc - prev * prev_an;
                if let Some(pp) = pipe.as_mut() {
                    pp.put_f64(yi * a1[r]);
                }
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
            if let Some(pp) = pipe {
                pp.close()?;
            }
        }
        Version::Fetch => {
            if p != 2 {
                return Err(PrimError::Config(format!(
                    "the fetch version runs on 2 ranks (an owner and a requester), not {p}"
                ))
                .into());
            }
            let mut out = vec![0.0f64; n];
            let mut b = [0u8; 8];
            for r in 0..n {
                let inc = if left {
                    timed(lat.as_deref_mut(), || {
                        prim.send(Dest::Rank(c - 1), Info::Procedure(FETCH_ID), true)?;
                        prim.send(
                            Dest::PreviousChain,
                            Info::Data(&(r as u64).to_le_bytes()),
                            false,
                        )?;
                        prim.receive(Source::Network, Recv::Data(&mut b))
                    })?;
                    f64::from_le_bytes(b)
                } else {
                    0.0
                };
                let yi = rhs[r] - inc - prev * prev_an;
                out[r] = yi * a1[r];
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
            if right {
                serve(prim, &out)?;
            }
        }
        Version::FetchComm => {
            if p != 2 || prim.progress() != Progress::CommThread {
                return Err(PrimError::Config(format!(
                    "B3' runs on 2 ranks in comm-thread mode, not {p} in {}",
                    prim.progress().name()
                ))
                .into());
            }
            let epoch = EPOCH.fetch_add(1, Ordering::Relaxed) + 1;
            if right {
                *PUBLISHED.values.lock().expect("published values") = vec![0; n];
                PUBLISHED.ready.store(0, Ordering::Relaxed);
                PUBLISHED.epoch.store(epoch, Ordering::Release);
            }
            let mut b = [0u8; 8];
            for r in 0..n {
                let inc = if left {
                    let mut args = [0u8; 16];
                    args[..8].copy_from_slice(&epoch.to_le_bytes());
                    args[8..].copy_from_slice(&(r as u64).to_le_bytes());
                    timed(lat.as_deref_mut(), || {
                        prim.send(Dest::Rank(c - 1), Info::Procedure(FETCH_COMM_ID), true)?;
                        prim.send(Dest::PreviousChain, Info::Data(&args), false)?;
                        prim.receive(Source::Network, Recv::Data(&mut b))
                    })?;
                    f64::from_le_bytes(b)
                } else {
                    0.0
                };
                let yi = rhs[r] - inc - prev * prev_an;
                if right {
                    PUBLISHED.values.lock().expect("published values")[r] = (yi * a1[r]).to_bits();
                    PUBLISHED.ready.store(r as u64 + 1, Ordering::Release);
                }
                y[r] = yi;
                (prev, prev_an) = (yi, an[r]);
            }
        }
    }
    Ok(Column { y })
}

/// The owner's side of the fetch version: runs one fetch handler per row and answers it
/// with the product that row asks for.
fn serve(prim: &Prim, out: &[f64]) -> Result<(), TypedError> {
    for _ in 0..out.len() {
        prim.receive(Source::Network, Recv::Procedure)?;
        let (from, row) = REQUESTS
            .lock()
            .expect("requests")
            .pop_front()
            .expect("the handler filed the request");
        let x = out.get(row as usize).ok_or_else(|| {
            PrimError::Config(format!("a fetch asked for row {row} of {}", out.len()))
        })?;
        prim.send(Dest::Rank(from), Info::Data(&x.to_le_bytes()), false)?;
    }
    Ok(())
}

/// The products rank `c`'s left neighbour sends it, from the serial solve `y`.
pub fn incoming(y: &[f64], n: usize, p: usize, c: usize) -> Vec<f64> {
    (0..n)
        .map(|r| {
            let i = r * p + c;
            if c == 0 {
                0.0
            } else {
                y[i - 1] * coefficients(i - 1, p).1
            }
        })
        .collect()
}
