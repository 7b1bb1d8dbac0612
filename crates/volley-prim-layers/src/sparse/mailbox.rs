//! The procedure packets of the sparse layers and the one loop that drains the network
//! buffer for them.
//!
//! Every control message (a fetch request, an end-of-solve mark, a flow-control credit) is
//! a procedure packet chained to one 8-byte argument. Its handler runs where the progress
//! mode says (the program thread's receive, or the communication thread) and files
//! `(id, sender, argument)` in a queue the program thread reads after the receive returns.
//! Data packets (fetch answers, executor batches) go to the program thread as they are.

use super::error::{Result, SparseError};
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use volley_prim::{Dest, Info, InfoType, Prim, PrimConfig, PrimError, Probe, Recv, Source};

/// Handler id of a conditional fetch request (argument: unknown and epoch parity).
pub const FETCH_ID: u32 = 41;
/// Handler id of a rank's end of a fetch solve (argument: epoch parity).
pub const DONE_ID: u32 = 42;
/// Handler id of an executor's flow-control credit (argument: bytes freed, final flag).
pub const CREDIT_ID: u32 = 43;

/// A procedure packet as its handler filed it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Note {
    pub(crate) id: u32,
    pub(crate) from: usize,
    pub(crate) arg: u64,
}

type Queue = Arc<Mutex<VecDeque<Note>>>;

/// The handlers' queue, made with [`with_handlers`] before the runtime is built and handed
/// to [`crate::sparse::Fetcher`] and [`crate::sparse::Executor`].
#[derive(Debug, Clone)]
pub struct SparseSetup {
    pub(crate) queue: Queue,
}

/// `cfg` with the sparse layers' handlers registered (every rank registers them, with the
/// same ids: [`FETCH_ID`], [`DONE_ID`], [`CREDIT_ID`]).
pub fn with_handlers(cfg: PrimConfig) -> std::result::Result<(PrimConfig, SparseSetup), PrimError> {
    let queue: Queue = Arc::default();
    let mut cfg = cfg;
    for id in [FETCH_ID, DONE_ID, CREDIT_ID] {
        let q = queue.clone();
        cfg = cfg.handler(id, move |inv| {
            // An argument that cannot be read is filed as a note no layer accepts.
            let (from, arg) = match (inv.from(), inv.receive_u64()) {
                (Some(f), Ok(a)) => (f, a),
                _ => (usize::MAX, u64::MAX),
            };
            q.lock().expect("sparse queue").push_back(Note {
                id: inv.id(),
                from,
                arg,
            });
        })?;
    }
    Ok((cfg, SparseSetup { queue }))
}

/// What the network buffer gave.
#[derive(Debug)]
pub(crate) enum Incoming {
    /// A procedure packet's note.
    Note(Note),
    /// A data packet of `len` bytes from `from`, now in the caller's buffer.
    Data { from: usize, len: usize },
}

impl SparseSetup {
    /// Sends procedure `id` with its argument to `to` (16 bytes in the receiver's buffer).
    pub(crate) fn send_note(&self, prim: &Prim, to: usize, id: u32, arg: u64) -> Result<()> {
        prim.send(Dest::Rank(to), Info::Procedure(id), true)?;
        prim.send(Dest::PreviousChain, Info::Data(&arg.to_le_bytes()), false)?;
        Ok(())
    }

    /// Takes the next packet from the network buffer: waits for one (in the progress mode's
    /// way: a blocked receive) if `block`, else returns `None` when the buffer is empty.
    pub(crate) fn next(
        &self,
        prim: &Prim,
        block: bool,
        buf: &mut Vec<u8>,
    ) -> Result<Option<Incoming>> {
        if !block && prim.is_information(Source::Network, InfoType::Procedure)? == Probe::Empty {
            return Ok(None);
        }
        match prim.receive(Source::Network, Recv::Procedure) {
            Ok(_) => {
                let note = self
                    .queue
                    .lock()
                    .expect("sparse queue")
                    .pop_front()
                    .ok_or_else(|| SparseError::Protocol("a procedure filed no note".into()))?;
                if note.from == usize::MAX {
                    return Err(SparseError::Protocol(format!(
                        "procedure {} without its argument",
                        note.id
                    )));
                }
                Ok(Some(Incoming::Note(note)))
            }
            Err(PrimError::WrongType { .. }) => {
                let len = prim.pending_len(Source::Network)?.ok_or_else(|| {
                    SparseError::Protocol("chained bytes outside a sparse packet".into())
                })?;
                buf.resize(len, 0);
                let got = prim.receive(Source::Network, Recv::Data(buf))?;
                let from = got
                    .from
                    .ok_or_else(|| SparseError::Protocol("a data packet without sender".into()))?;
                Ok(Some(Incoming::Data { from, len }))
            }
            Err(e) => Err(e.into()),
        }
    }
}
