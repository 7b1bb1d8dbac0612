//! Asynchronous remote reads and writes with completion flags (seed 003 §3.3, Fig. 5), on
//! procedure packets: a request goes to the target's network buffer, whose handler (on the
//! communication thread, or on the program thread where the target's progress mode runs
//! procedures) copies the bytes and sends a completion back; the requester's completion
//! handler fills its memory (reads) and counts the flag up. Every rank has a remote memory
//! of the same size (the configuration is the same everywhere), so a request is checked at
//! the requester and a bad one is refused before anything is sent.

use crate::config::PrimConfig;
use crate::error::{PrimError, Result};
use crate::invocation::Invocation;
use crate::outbound::{image, Outbound};
use crate::prim::{Prim, ProgramOut};
use crate::ring::padded;
use crate::{Info, InfoType, Probe, Progress, Recv, Source};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

/// Handler id of a remote write request (taken by [`PrimConfig::remote_memory`]).
pub const REMOTE_WRITE_ID: u32 = crate::MAX_HANDLER_ID - 2;
/// Handler id of a remote read request.
pub const REMOTE_READ_ID: u32 = crate::MAX_HANDLER_ID - 1;
/// Handler id of a completion (a read's bytes, or a write's acknowledgement).
pub const REMOTE_DONE_ID: u32 = crate::MAX_HANDLER_ID;

/// One rank's remote memory and completion flags, shared by the program thread and the
/// handlers. Bytes are atomics: remote handlers and the program may touch them at once, and
/// the flags' release/acquire orders a completed transfer before the flag.
#[derive(Debug)]
pub struct RemoteMemory {
    bytes: Box<[AtomicU8]>,
    flags: Box<[AtomicU64]>,
    failures: AtomicU64,
}

impl RemoteMemory {
    fn new(len: usize, flags: usize) -> Self {
        Self {
            bytes: (0..len).map(|_| AtomicU8::new(0)).collect(),
            flags: (0..flags).map(|_| AtomicU64::new(0)).collect(),
            failures: AtomicU64::new(0),
        }
    }

    /// Bytes of remote memory.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Whether the memory has no bytes.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Completion flags.
    pub fn flags(&self) -> usize {
        self.flags.len()
    }

    fn range(&self, offset: usize, len: usize) -> Result<std::ops::Range<usize>> {
        match offset.checked_add(len) {
            Some(end) if end <= self.bytes.len() => Ok(offset..end),
            _ => Err(PrimError::OutOfRange {
                offset,
                len,
                size: self.bytes.len(),
            }),
        }
    }

    fn flag(&self, flag: usize) -> Result<&AtomicU64> {
        self.flags.get(flag).ok_or(PrimError::BadFlag {
            flag,
            flags: self.flags.len(),
        })
    }

    /// Copies `buf.len()` bytes from `offset` of this rank's remote memory.
    pub fn read(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let r = self.range(offset, buf.len())?;
        for (b, a) in buf.iter_mut().zip(&self.bytes[r]) {
            *b = a.load(Ordering::Relaxed);
        }
        Ok(())
    }

    /// Copies `data` to `offset` of this rank's remote memory.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        let r = self.range(offset, data.len())?;
        for (b, a) in data.iter().zip(&self.bytes[r]) {
            a.store(*b, Ordering::Relaxed);
        }
        Ok(())
    }

    /// Completions counted on `flag` so far (acquire: the bytes they bring are visible).
    pub fn flag_value(&self, flag: usize) -> Result<u64> {
        Ok(self.flag(flag)?.load(Ordering::Acquire))
    }

    /// Requests this rank's handlers could not serve (malformed or out of range); each was
    /// still completed, without data, so that no requester waits forever.
    pub fn failures(&self) -> u64 {
        self.failures.load(Ordering::Relaxed)
    }
}

fn arg(inv: &mut Invocation<'_>) -> Result<usize> {
    Ok(inv.receive_u64()? as usize)
}

/// Receives `len` argument bytes (none for 0: an empty receive would wait for a packet).
fn bytes(inv: &mut Invocation<'_>, len: usize) -> Result<Vec<u8>> {
    let mut data = vec![0u8; len];
    if len > 0 {
        inv.receive(&mut data)?;
    }
    Ok(data)
}

/// Serves a write request `[offset][len][flag][bytes]`.
fn on_write(mem: &RemoteMemory, inv: &mut Invocation<'_>) -> Result<()> {
    let (offset, len, flag) = (arg(inv)?, arg(inv)?, arg(inv)?);
    let data = bytes(inv, len)?;
    if mem.write(offset, &data).is_err() {
        mem.failures.fetch_add(1, Ordering::Relaxed);
    }
    done(inv, flag, 0, &[])
}

/// Serves a read request `[offset][len][local offset][flag]`.
fn on_read(mem: &RemoteMemory, inv: &mut Invocation<'_>) -> Result<()> {
    let (offset, len, local, flag) = (arg(inv)?, arg(inv)?, arg(inv)?, arg(inv)?);
    let mut data = vec![0u8; len];
    if mem.read(offset, &mut data).is_err() {
        mem.failures.fetch_add(1, Ordering::Relaxed);
        return done(inv, flag, 0, &[]);
    }
    done(inv, flag, local, &data)
}

/// Sends the completion `[flag][local offset][len][bytes]` to the requester.
fn done(inv: &mut Invocation<'_>, flag: usize, local: usize, data: &[u8]) -> Result<()> {
    let to = inv.from().ok_or(PrimError::NoOpenChain)?;
    let mut args = Vec::with_capacity(24 + data.len());
    for w in [flag, local, data.len()] {
        args.extend_from_slice(&(w as u64).to_le_bytes());
    }
    args.extend_from_slice(data);
    inv.send(to, Info::Procedure(REMOTE_DONE_ID), &args)
}

/// Takes a completion: fills the local bytes, then counts the flag up (release).
fn on_done(mem: &RemoteMemory, inv: &mut Invocation<'_>) -> Result<()> {
    let (flag, local, len) = (arg(inv)?, arg(inv)?, arg(inv)?);
    let data = bytes(inv, len)?;
    if mem.write(local, &data).is_err() {
        mem.failures.fetch_add(1, Ordering::Relaxed);
    }
    match mem.flag(flag) {
        Ok(f) => {
            f.fetch_add(1, Ordering::Release);
        }
        Err(_) => {
            mem.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(())
}

/// Runs a handler body; a failure is counted (a handler has no caller to return it to).
fn guarded(
    mem: &Arc<RemoteMemory>,
    f: fn(&RemoteMemory, &mut Invocation<'_>) -> Result<()>,
) -> impl Fn(&mut Invocation<'_>) + Send + Sync + 'static {
    let mem = mem.clone();
    move |inv| {
        // Served here entirely: the program thread never receives these procedures.
        inv.quiet();
        if f(&mem, inv).is_err() {
            mem.failures.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl PrimConfig {
    /// Gives every rank `len` bytes of remote memory and `flags` completion flags, served
    /// through handlers [`REMOTE_WRITE_ID`], [`REMOTE_READ_ID`] and [`REMOTE_DONE_ID`]
    /// (which it registers: they must be free).
    pub fn remote_memory(self, len: usize, flags: usize) -> Result<Self> {
        for id in [REMOTE_WRITE_ID, REMOTE_READ_ID, REMOTE_DONE_ID] {
            if self.handlers.get(id as usize).is_some_and(|h| h.is_some()) {
                return Err(PrimError::Config(format!(
                    "handler id {id} is taken; remote memory needs ids {REMOTE_WRITE_ID}..={REMOTE_DONE_ID}"
                )));
            }
        }
        if flags == 0 {
            return Err(PrimError::Config(
                "remote memory needs at least one flag".into(),
            ));
        }
        let mem = Arc::new(RemoteMemory::new(len, flags));
        let mut c = self
            .handler(REMOTE_WRITE_ID, guarded(&mem, on_write))?
            .handler(REMOTE_READ_ID, guarded(&mem, on_read))?
            .handler(REMOTE_DONE_ID, guarded(&mem, on_done))?;
        c.remote = Some(mem);
        Ok(c)
    }
}

impl Prim<'_> {
    /// This rank's remote memory (what other ranks read and write).
    pub fn remote_memory(&self) -> Result<&RemoteMemory> {
        self.remote.as_deref().ok_or(PrimError::NoRemoteMemory)
    }

    /// Checks a request and that it and its completion fit the buffers.
    fn check_request(&self, rank: usize, offset: usize, len: usize, flag: usize) -> Result<()> {
        let mem = self.remote_memory()?;
        if rank >= self.size() {
            return Err(PrimError::InvalidRank {
                rank,
                size: self.size(),
            });
        }
        mem.range(offset, len)?;
        mem.flag(flag)?;
        // Header, three or four argument words, the bytes, the chain's close.
        let bytes = 8 + 32 + padded(len) + 8;
        if bytes > self.capacity() {
            return Err(PrimError::TooLarge {
                bytes,
                capacity: self.capacity(),
            });
        }
        Ok(())
    }

    fn request(&self, rank: usize, id: u32, words: &[usize], data: &[u8]) -> Result<()> {
        let mut args = Vec::with_capacity(8 * words.len() + data.len());
        for w in words {
            args.extend_from_slice(&(*w as u64).to_le_bytes());
        }
        args.extend_from_slice(data);
        let mut out = ProgramOut(self);
        let (w, h, _) = image(self.rank(), Info::Procedure(id), &args, out.handlers())?;
        out.send_image(rank, &w, &h, args.len())
    }

    /// Starts writing `data` to `offset` of `rank`'s remote memory; `flag` counts up by one
    /// here once the bytes are there. Returns at once.
    pub fn remote_write(&self, rank: usize, offset: usize, data: &[u8], flag: usize) -> Result<()> {
        self.check_request(rank, offset, data.len(), flag)?;
        self.request(rank, REMOTE_WRITE_ID, &[offset, data.len(), flag], data)
    }

    /// Starts reading `len` bytes at `offset` of `rank`'s remote memory into `local` of this
    /// rank's; `flag` counts up by one here once they are there. Returns at once.
    pub fn remote_read(
        &self,
        rank: usize,
        offset: usize,
        len: usize,
        local: usize,
        flag: usize,
    ) -> Result<()> {
        self.check_request(rank, offset, len, flag)?;
        self.remote_memory()?.range(local, len)?;
        self.request(rank, REMOTE_READ_ID, &[offset, len, local, flag], &[])
    }

    /// Completions counted on `flag` so far (the flag test of Fig. 5).
    pub fn flag(&self, flag: usize) -> Result<u64> {
        self.remote_memory()?.flag_value(flag)
    }

    /// Runs the procedure packets waiting at the head of the network buffer (this is how a
    /// rank whose progress mode has no communication thread serves requests); stops at
    /// data or an empty buffer. Returns how many ran.
    pub fn serve_procedures(&self) -> Result<usize> {
        self.send_handed_off()?;
        let mut n = 0;
        while self.is_information(Source::Network, InfoType::Procedure)? == Probe::Match {
            self.receive(Source::Network, Recv::Procedure)?;
            n += 1;
        }
        Ok(n)
    }

    /// Waits until `flag` has counted `count` completions. Without a communication thread
    /// it runs the procedure packets that arrive meanwhile (completions and requests); a
    /// data packet ahead of them is an error ([`PrimError::WrongType`]): receive it first.
    pub fn wait_flag(&self, flag: usize, count: u64) -> Result<()> {
        let mut spins = 0;
        loop {
            if self.flag(flag)? >= count {
                return Ok(());
            }
            if self.progress() != Progress::CommThread {
                match self.is_information(Source::Network, InfoType::Procedure)? {
                    Probe::Match => {
                        self.receive(Source::Network, Recv::Procedure)?;
                        continue;
                    }
                    Probe::WrongType => {
                        return Err(PrimError::WrongType {
                            found: "data",
                            want: "procedure (a completion)",
                        })
                    }
                    Probe::Empty => {}
                }
            }
            self.send_handed_off()?;
            self.back_off(&mut spins);
        }
    }
}
