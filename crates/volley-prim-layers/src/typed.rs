//! Buffered typed messages on the primitives (seed 003 §6.1, item 22): the NX/2-style
//! `csend`/`crecv` model as a layer, not a primitive.
//!
//! A message is a chain: a 16-byte header packet `[magic | type][length]` opened with
//! `is_more`, then the payload as chained bytes (no headers), then the close. The chain keeps
//! the link, so nothing else enters the receiver's buffer between header and payload. The
//! receiving side reads whatever arrives next and files messages of other types in a table
//! keyed by type (a `HashMap` of queues, arrival order kept per type); the bytes so held are
//! bounded.

use std::cell::{Cell, RefCell};
use std::collections::{HashMap, VecDeque};
use volley_prim::{Dest, Info, InfoType, Prim, PrimError, Probe, Recv, Source};

/// Default bound on the bytes of unexpected messages one rank holds (1 MiB).
pub const DEFAULT_UNEXPECTED_LIMIT: usize = 1 << 20;

/// Marks a typed header's first word, so a foreign packet is told apart from a typed one.
const MAGIC: u64 = 0x7479_7065; // "type"

/// What can go wrong in the typed layer.
#[derive(Debug, thiserror::Error)]
pub enum TypedError {
    /// A primitive failed (bad rank, finalized layer, ...).
    #[error(transparent)]
    Prim(#[from] PrimError),
    /// `recv_into` was given a buffer smaller than the message; the message stays queued.
    #[error("a message of type {ty} has {need} bytes; the buffer holds {have} (it stays queued)")]
    TooSmall {
        /// The message type.
        ty: u32,
        /// The message's length.
        need: usize,
        /// The buffer's length.
        have: usize,
    },
    /// The next message in the network buffer would take the unexpected memory over its
    /// bound. It stays in the network buffer (nothing is lost): receive its type to go on.
    #[error("unexpected memory full: a message of type {ty} ({bytes} bytes) would exceed {limit} bytes; receive type {ty} to drain it")]
    UnexpectedFull {
        /// The blocking message's type.
        ty: u32,
        /// Its length.
        bytes: usize,
        /// The bound.
        limit: usize,
    },
    /// The network buffer held something that is not a typed message (another layer's
    /// packet): the typed layer must own the buffer.
    #[error("the network buffer holds a packet that is not a typed message ({0})")]
    NotTyped(String),
}

/// Result of the typed layer.
pub type Result<T> = std::result::Result<T, TypedError>;

/// The typed layer on one rank's [`Prim`]; it owns the rank's network input buffer (other
/// packets there are reported as [`TypedError::NotTyped`]). Not `Sync`, like `Prim`.
#[derive(Debug)]
pub struct Typed<'p, 'rt> {
    prim: &'p Prim<'rt>,
    table: RefCell<HashMap<u32, VecDeque<Vec<u8>>>>,
    held: Cell<usize>,
    limit: usize,
    /// Payload bytes per chained packet: half the input buffer, whole words.
    chunk: usize,
    /// A header already read whose payload waits in the network buffer (the unexpected
    /// memory had no room for it).
    pending: Cell<Option<(u32, usize)>>,
}

impl<'p, 'rt> Typed<'p, 'rt> {
    /// The layer on `prim`, holding at most [`DEFAULT_UNEXPECTED_LIMIT`] unexpected bytes.
    pub fn new(prim: &'p Prim<'rt>) -> Self {
        Self::with_limit(prim, DEFAULT_UNEXPECTED_LIMIT)
    }

    /// The layer on `prim`, holding at most `limit` bytes of unexpected messages.
    pub fn with_limit(prim: &'p Prim<'rt>, limit: usize) -> Self {
        Self {
            prim,
            table: RefCell::new(HashMap::new()),
            held: Cell::new(0),
            limit,
            chunk: (prim.capacity() / 2) & !7,
            pending: Cell::new(None),
        }
    }

    /// The primitives the layer runs on.
    pub fn prim(&self) -> &'p Prim<'rt> {
        self.prim
    }

    /// Bytes of unexpected messages held now.
    pub fn unexpected_bytes(&self) -> usize {
        self.held.get()
    }

    /// Sends `bytes` to `rank` as a message of type `ty`: the header packet, then the payload
    /// chained behind it. Blocks while the destination's buffer is full.
    pub fn send(&self, rank: usize, ty: u32, bytes: &[u8]) -> Result<()> {
        let mut hdr = [0u8; 16];
        hdr[..8].copy_from_slice(&(MAGIC | (ty as u64) << 32).to_le_bytes());
        hdr[8..].copy_from_slice(&(bytes.len() as u64).to_le_bytes());
        let p = self.prim;
        p.send(Dest::Rank(rank), Info::Data(&hdr), !bytes.is_empty())?;
        let mut chunks = bytes.chunks(self.chunk).peekable();
        while let Some(c) = chunks.next() {
            p.send(Dest::PreviousChain, Info::Data(c), chunks.peek().is_some())?;
        }
        Ok(())
    }

    /// Receives the next message of type `ty` (waits for it), in arrival order per type.
    pub fn recv(&self, ty: u32) -> Result<Vec<u8>> {
        if let Some(v) = self.pop(ty) {
            return Ok(v);
        }
        loop {
            let (t, len) = self.next_header()?;
            if t == ty {
                let mut v = vec![0u8; len];
                self.payload(&mut v)?;
                return Ok(v);
            }
            self.stash(t, len)?;
        }
    }

    /// Receives the next message of type `ty` into `buf`; returns its length. A buffer
    /// smaller than the message is [`TypedError::TooSmall`] and the message stays queued.
    pub fn recv_into(&self, ty: u32, buf: &mut [u8]) -> Result<usize> {
        if let Some(n) = self.queued_len(ty) {
            if n > buf.len() {
                return Err(TypedError::TooSmall {
                    ty,
                    need: n,
                    have: buf.len(),
                });
            }
            let v = self.pop(ty).expect("queued");
            buf[..n].copy_from_slice(&v);
            return Ok(n);
        }
        loop {
            let (t, len) = self.next_header()?;
            if t == ty && len <= buf.len() {
                self.payload(&mut buf[..len])?;
                return Ok(len);
            }
            self.stash(t, len)?;
            if t == ty {
                return Err(TypedError::TooSmall {
                    ty,
                    need: len,
                    have: buf.len(),
                });
            }
        }
    }

    /// Whether a message of type `ty` can be received now. Never waits for one: files what
    /// has arrived (a message whose header is there is read whole: its sender holds the link
    /// until the payload is in).
    pub fn probe(&self, ty: u32) -> Result<bool> {
        loop {
            if self.queued_len(ty).is_some() {
                return Ok(true);
            }
            if let Some((t, _)) = self.pending.get() {
                return Ok(t == ty);
            }
            match self.prim.is_information(Source::Network, InfoType::Data)? {
                Probe::Empty => return Ok(false),
                Probe::WrongType => {
                    return Err(TypedError::NotTyped("a procedure packet".into()));
                }
                Probe::Match => {
                    let (t, len) = self.next_header()?;
                    if let Err(e) = self.stash(t, len) {
                        return match e {
                            TypedError::UnexpectedFull { ty: t, .. } if t == ty => Ok(true),
                            TypedError::UnexpectedFull { .. } => Ok(false),
                            e => Err(e),
                        };
                    }
                }
            }
        }
    }

    fn queued_len(&self, ty: u32) -> Option<usize> {
        self.table
            .borrow()
            .get(&ty)
            .and_then(|q| q.front())
            .map(Vec::len)
    }

    fn pop(&self, ty: u32) -> Option<Vec<u8>> {
        let mut t = self.table.borrow_mut();
        let q = t.get_mut(&ty)?;
        let v = q.pop_front()?;
        if q.is_empty() {
            t.remove(&ty);
        }
        self.held.set(self.held.get() - v.len());
        Some(v)
    }

    /// The next message's (type, length): the pending one, or the next header (waits).
    fn next_header(&self) -> Result<(u32, usize)> {
        if let Some(h) = self.pending.take() {
            return Ok(h);
        }
        let p = self.prim;
        if p.is_information(Source::Network, InfoType::Data)? == Probe::WrongType {
            return Err(TypedError::NotTyped("a procedure packet".into()));
        }
        let mut hdr = [0u8; 16];
        p.receive(Source::Network, Recv::Data(&mut hdr))
            .map_err(|e| match e {
                PrimError::SizeMismatch { have, .. } => {
                    TypedError::NotTyped(format!("a data packet of {have} bytes"))
                }
                e => e.into(),
            })?;
        let w = u64::from_le_bytes(hdr[..8].try_into().expect("8 bytes"));
        if w & 0xffff_ffff != MAGIC {
            return Err(TypedError::NotTyped(
                "16 bytes without the typed mark".into(),
            ));
        }
        let len = u64::from_le_bytes(hdr[8..].try_into().expect("8 bytes"));
        Ok(((w >> 32) as u32, len as usize))
    }

    /// Reads the payload of the header just read into `buf` (its length).
    fn payload(&self, buf: &mut [u8]) -> Result<()> {
        for c in buf.chunks_mut(self.chunk) {
            self.prim.receive(Source::Network, Recv::Data(c))?;
        }
        Ok(())
    }

    /// Files the message whose header was just read as unexpected, or leaves it in the
    /// network buffer (pending) when the bound forbids.
    fn stash(&self, ty: u32, len: usize) -> Result<()> {
        if self.held.get() + len > self.limit {
            self.pending.set(Some((ty, len)));
            return Err(TypedError::UnexpectedFull {
                ty,
                bytes: len,
                limit: self.limit,
            });
        }
        let mut v = vec![0u8; len];
        self.payload(&mut v)?;
        self.held.set(self.held.get() + len);
        self.table.borrow_mut().entry(ty).or_default().push_back(v);
        Ok(())
    }
}
