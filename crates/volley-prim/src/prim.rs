//! The three primitives: `send`, `receive`, `is_information`.

use crate::comm::{CommThread, Internal};
use crate::config::{Handler, Notify, PrimConfig, Progress};
use crate::counters::{Counters, Stats};
use crate::error::{PrimError, Result};
use crate::handoff::Handoff;
use crate::invocation::Invocation;
use crate::outbound::{ring_bell, CommSender, Outbound};
use crate::recv;
use crate::ring::{self, header, Header, Reader, RingPtr, CLOSE, DATA, NO_RANK, PROC, PROC_DONE};
use crate::{Dest, Info, InfoType, Probe, Received, Recv, Source};
use std::cell::{Cell, RefCell};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;
use volley::rma::{AtomicOp, Perms, Rma, RmaSetup, SegmentRef, SymmetricSegment};
use volley::{RequestHandler, Runtime, RuntimeBuilder};

/// How long a sleeping receive waits for a notification before it looks again (and serves
/// volley's own messages): the bound on a missed or never-raised notification.
const SLEEP: Duration = Duration::from_millis(1);

/// A sleeping word's value when the receive sleeps on this rank's futex (mapped peers only).
pub(crate) const ON_FUTEX: u32 = 1;

/// A sleeping word's value when the receive sleeps in volley's kernel wait (the socket, and
/// the eventfd node-mates write): a mapped sender wakes it with a message.
pub(crate) const IN_RUNTIME: u32 = 2;

/// Polls of a waiting loop before it starts yielding its core (about 0.1 ms).
pub(crate) const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// The same in `comm-thread` mode, where the program thread and its communication thread
/// may share a core (threads inherit the rank's pinning): they hand it over soon.
pub(crate) const COMM_SPINS_BEFORE_YIELD: u32 = 64;

/// The layer registered in a builder; [`PrimSetup::attach`] it once the runtime is built.
#[derive(Debug)]
pub struct PrimSetup {
    rma: RmaSetup,
    cfg: PrimConfig,
    wake: RequestHandler,
}

/// How this rank reaches one destination's network input buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Backend {
    /// Mapped: loads, stores and CPU atomics (shared memory, one-sided direct path).
    Mapped(RingPtr),
    /// volley's one-sided operations on the AM path (other nodes, UDP/TCP).
    Remote(SegmentRef),
}

/// This rank's view of one destination's link: valid while it holds it.
#[derive(Debug)]
pub(crate) struct Link {
    pub(crate) backend: Backend,
    /// Bytes published into the destination's buffer (while holding the link).
    pub(crate) tail: u64,
    /// The destination's consumed bytes as last read.
    pub(crate) head: u64,
}

/// Where an open chain goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Chain {
    Internal,
    Ranks(Vec<usize>),
}

/// Seed 003's primitives on one rank (see the crate docs). Not `Sync`: one thread drives it.
pub struct Prim<'rt> {
    pub(crate) rt: &'rt Runtime,
    rma: Rma<'rt>,
    seg: SymmetricSegment,
    pub(crate) me: usize,
    size: usize,
    pub(crate) cap: u64,
    progress: Progress,
    notify: Notify,
    handlers: Arc<Vec<Option<Handler>>>,
    pub(crate) links: RefCell<Vec<Link>>,
    pub(crate) chain: RefCell<Option<Chain>>,
    own: RingPtr,
    /// The network buffer as the program thread reads it: this rank's own ring, or the
    /// communication thread's forwarding ring.
    pub(crate) net: RefCell<Reader>,
    internal: Option<Internal>,
    comm: RefCell<Option<CommThread>>,
    pub(crate) counters: Arc<Counters>,
    scratch: RefCell<Vec<u64>>,
    finalized: Cell<bool>,
    pub(crate) remote: Option<Arc<crate::remote::RemoteMemory>>,
    /// Whether some rank is reached through volley's one-sided operations: a sleeping
    /// receive then sleeps in volley's kernel wait, where their messages wake it.
    sleeps_in_runtime: bool,
    /// The no-op handler whose message wakes a rank asleep in volley's kernel wait.
    wake: RequestHandler,
    /// The communication thread's sends to unmapped ranks, which this thread sends.
    handoff: Option<Arc<Handoff>>,
}

impl std::fmt::Debug for Prim<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Prim")
            .field("me", &self.me)
            .field("capacity", &self.cap)
            .field("progress", &self.progress)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

/// A packet image: `hdr` then `payload`, padded to whole words.
pub(crate) fn data_image(hdr: u64, payload: &[u8]) -> Vec<u64> {
    let mut v = vec![hdr];
    push_bytes(&mut v, payload);
    v
}

/// Appends `bytes` to `v` as whole little-endian words (zero padded).
fn push_bytes(v: &mut Vec<u64>, bytes: &[u8]) {
    let mut chunks = bytes.chunks_exact(8);
    for c in &mut chunks {
        v.push(u64::from_le_bytes(c.try_into().expect("8 bytes")));
    }
    let rest = chunks.remainder();
    if !rest.is_empty() {
        let mut w = [0u8; 8];
        w[..rest.len()].copy_from_slice(rest);
        v.push(u64::from_le_bytes(w));
    }
}

/// A payload given as pieces: one slice, several, or a strided gather.
pub(crate) enum Payload<'a> {
    Pieces(&'a [&'a [u8]]),
    Strided {
        base: &'a [u8],
        elem: usize,
        stride: usize,
        count: usize,
    },
}

impl Payload<'_> {
    fn len(&self) -> usize {
        match self {
            Payload::Pieces(p) => p.iter().map(|s| s.len()).sum(),
            Payload::Strided { elem, count, .. } => elem * count,
        }
    }

    fn push(&self, v: &mut Vec<u64>) {
        match self {
            Payload::Pieces([one]) => push_bytes(v, one),
            Payload::Pieces(p) => push_bytes(v, &p.concat()),
            Payload::Strided {
                base,
                elem,
                stride,
                count,
            } => {
                let mut all = Vec::with_capacity(elem * count);
                for i in 0..*count {
                    all.extend_from_slice(&base[i * stride..i * stride + elem]);
                }
                push_bytes(v, &all);
            }
        }
    }
}

impl PrimSetup {
    /// Builds the layer on the runtime (collective: every rank calls it, in the same place
    /// of its collective calls): allocates every rank's network input buffer, maps the
    /// peers' buffers it can, and starts the communication thread in that mode.
    pub fn attach(self, rt: &Runtime) -> Result<Prim<'_>> {
        let rma = self.rma.attach(rt);
        let cap = self.cfg.capacity;
        let len = ring::total_len(cap);
        let seg = rma.alloc_symmetric(len, Perms::ALL)?;
        let me = rt.rank();
        let own = rma
            .own_segments()
            .range(seg.on(me), 0, len, Perms::NONE)
            .map_err(|reason| volley::rma::Error::Refused { rank: me, reason })?;
        if own.as_ptr() as usize % 8 != 0 {
            return Err(PrimError::Config(
                "the segment area is not 8-byte aligned".into(),
            ));
        }
        // SAFETY: our own segment part, `len` bytes (checked just above), alive until the
        // runtime finalizes, which the borrow of `rt` outlasts; zeroed here, before the
        // barrier after which peers may write.
        let own = unsafe {
            std::ptr::write_bytes(own.as_ptr(), 0, len);
            RingPtr::new(own.as_ptr(), cap)
        };
        rt.barrier();
        let mut links = Vec::with_capacity(rt.size());
        for r in 0..rt.size() {
            let backend = match rma.mapped(seg.on(r), 0, len, Perms::ALL)? {
                // SAFETY: `r`'s buffer as mapped here, `len` bytes, checked by `mapped`;
                // alive while `r` keeps the segment, that is until the job finalizes.
                Some(p) => Backend::Mapped(unsafe { RingPtr::new(p.as_ptr(), cap) }),
                None => Backend::Remote(seg.on(r)),
            };
            links.push(Link {
                backend,
                tail: 0,
                head: 0,
            });
        }
        let sleeps_in_runtime = links
            .iter()
            .any(|l| matches!(l.backend, Backend::Remote(_)));
        let counters = Arc::new(Counters::default());
        let handlers = Arc::new(self.cfg.handlers);
        let progress = self.cfg.progress;
        let handoff = (progress == Progress::CommThread)
            .then(|| Arc::new(Handoff::new(rt.size(), cap as u64)));
        let (net, internal, comm) = if let Some(handoff) = &handoff {
            let mapped = links
                .iter()
                .map(|l| match l.backend {
                    Backend::Mapped(p) => Some(p),
                    Backend::Remote(_) => None,
                })
                .collect();
            let (notify, hs, cs, ho) = (
                self.cfg.notify,
                handlers.clone(),
                counters.clone(),
                handoff.clone(),
            );
            let sender = move |stop| CommSender::new(me, mapped, notify, hs, cs, stop, ho);
            let (internal, comm, fwd) =
                crate::comm::start(own, cap, handlers.clone(), counters.clone(), sender);
            (Reader::new(fwd), Some(internal), Some(comm))
        } else {
            (Reader::new(own), None, None)
        };
        Ok(Prim {
            rt,
            rma,
            seg,
            me,
            size: rt.size(),
            cap: cap as u64,
            progress,
            notify: self.cfg.notify,
            handlers,
            links: RefCell::new(links),
            chain: RefCell::new(None),
            own,
            net: RefCell::new(net),
            internal,
            comm: RefCell::new(comm),
            counters,
            scratch: RefCell::new(Vec::new()),
            finalized: Cell::new(false),
            remote: self.cfg.remote,
            sleeps_in_runtime,
            wake: self.wake,
            handoff,
        })
    }
}

impl<'rt> Prim<'rt> {
    /// Registers the layer (and the one-sided layer it uses) in `b`; every rank does this in
    /// the same place of its registrations, with the same configuration.
    pub fn register(b: &mut RuntimeBuilder, cfg: PrimConfig) -> PrimSetup {
        PrimSetup {
            rma: Rma::register(b),
            cfg,
            // Its arrival is the wake-up; nothing to do.
            wake: b.request_handler("volley-prim-wake", |_, _| {}),
        }
    }

    /// This rank.
    pub fn rank(&self) -> usize {
        self.me
    }

    /// Ranks in the job.
    pub fn size(&self) -> usize {
        self.size
    }

    /// The runtime underneath.
    pub fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// The one-sided layer this layer registered (for programs that also want segments of
    /// their own).
    pub fn rma(&self) -> &Rma<'rt> {
        &self.rma
    }

    /// The progress mode.
    pub fn progress(&self) -> Progress {
        self.progress
    }

    /// The network input buffer's capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.cap as usize
    }

    /// Whether sends to `rank` go through mapped memory (else volley's one-sided operations).
    pub fn is_mapped(&self, rank: usize) -> bool {
        self.links
            .borrow()
            .get(rank)
            .is_some_and(|l| matches!(l.backend, Backend::Mapped(_)))
    }

    /// This rank's counters.
    pub fn stats(&self) -> Stats {
        self.counters.snapshot()
    }

    /// Notifications raised at this rank's network input buffer so far.
    pub fn notifications(&self) -> u64 {
        self.own.notified().load(Ordering::Acquire)
    }

    /// Bytes published into this rank's network input buffer and not yet consumed (by this
    /// thread, or by the communication thread in that mode): never above the capacity.
    pub fn buffered(&self) -> usize {
        let p = self.own;
        // A head read before the tail may be far behind it (the communication thread
        // consumes meanwhile): take the tail between two equal reads of the head.
        loop {
            let head = p.head().load(Ordering::Acquire);
            let tail = p.tail().load(Ordering::Acquire);
            if p.head().load(Ordering::Acquire) == head {
                return (tail - head) as usize;
            }
        }
    }

    pub(crate) fn check_live(&self) -> Result<()> {
        if self.finalized.get() {
            return Err(PrimError::Finalized);
        }
        Ok(())
    }

    pub(crate) fn check_rank(&self, rank: usize) -> Result<()> {
        if rank >= self.size {
            return Err(PrimError::InvalidRank {
                rank,
                size: self.size,
            });
        }
        Ok(())
    }

    fn check_handler(&self, id: u32) -> Result<()> {
        if id == 0 || id > crate::MAX_HANDLER_ID {
            return Err(PrimError::BadHandlerId(id));
        }
        if self.handlers.get(id as usize).is_none_or(|h| h.is_none()) {
            return Err(PrimError::UnknownHandler { id, from: None });
        }
        Ok(())
    }

    /// Seed 003's `send(destination, information, is_more)`: sends `info` to `dest`;
    /// `is_more` opens (or keeps open) a chain, whose later packets go with
    /// [`Dest::PreviousChain`] and carry no header. Blocks only while a destination's
    /// buffer is full or its link is held by another sender's chain.
    pub fn send(&self, dest: Dest<'_>, info: Info<'_>, is_more: bool) -> Result<()> {
        match info {
            Info::Data(d) => self.send_payload(dest, None, &Payload::Pieces(&[d]), is_more),
            Info::Procedure(id) => {
                self.check_handler(id)?;
                self.send_payload(dest, Some(id), &Payload::Pieces(&[]), is_more)
            }
        }
    }

    /// Sends several contiguous blocks as one data packet (seed 003 §6.2's vectored send).
    pub fn send_vectored(&self, dest: Dest<'_>, blocks: &[&[u8]], is_more: bool) -> Result<()> {
        self.send_payload(dest, None, &Payload::Pieces(blocks), is_more)
    }

    /// Sends `count` elements of `elem` bytes, `stride` bytes apart in `base`, as one data
    /// packet of `count * elem` bytes (seed 003 §6.2's strided send).
    pub fn send_strided(
        &self,
        dest: Dest<'_>,
        base: &[u8],
        elem: usize,
        stride: usize,
        count: usize,
        is_more: bool,
    ) -> Result<()> {
        let need = if count == 0 {
            0
        } else {
            (count - 1)
                .checked_mul(stride)
                .and_then(|x| x.checked_add(elem))
                .ok_or_else(|| PrimError::Config("strided send overflows".into()))?
        };
        if need > base.len() || (count > 1 && stride < elem) {
            return Err(PrimError::Config(format!(
                "strided send of {count} x {elem} bytes every {stride} needs {need} bytes \
                 (and stride >= elem); the buffer has {}",
                base.len()
            )));
        }
        let p = Payload::Strided {
            base,
            elem,
            stride,
            count,
        };
        self.send_payload(dest, None, &p, is_more)
    }

    /// The destinations of `dest` for a new packet, checked.
    fn targets(&self, dest: &Dest<'_>) -> Result<Chain> {
        Ok(match *dest {
            Dest::Internal => {
                if self.internal.is_none() {
                    return Err(PrimError::NoCommThread);
                }
                Chain::Internal
            }
            Dest::Rank(r) => {
                self.check_rank(r)?;
                Chain::Ranks(vec![r])
            }
            Dest::Ranks(list) => {
                if list.is_empty() {
                    return Err(PrimError::EmptyList);
                }
                let mut v = list.to_vec();
                for &r in &v {
                    self.check_rank(r)?;
                }
                v.sort_unstable();
                if let Some(w) = v.windows(2).find(|w| w[0] == w[1]) {
                    return Err(PrimError::DuplicateRank(w[0]));
                }
                Chain::Ranks(v)
            }
            Dest::PreviousChain => unreachable!("handled by the caller"),
        })
    }

    pub(crate) fn send_payload(
        &self,
        dest: Dest<'_>,
        proc_id: Option<u32>,
        payload: &Payload<'_>,
        is_more: bool,
    ) -> Result<()> {
        self.check_live()?;
        self.send_handed_off()?;
        let len = payload.len();
        let from = if matches!(dest, Dest::Internal) {
            NO_RANK
        } else {
            self.me as u64
        };
        let mut words = self.scratch.borrow_mut();
        words.clear();
        let mut headers = Vec::new();
        let continuing = matches!(dest, Dest::PreviousChain);
        let targets = if continuing {
            self.chain.borrow().clone().ok_or(PrimError::NoOpenChain)?
        } else {
            if let Some(c) = &*self.chain.borrow() {
                return Err(PrimError::ChainOpen(format!("{c:?}")));
            }
            self.targets(&dest)?
        };
        let from = if targets == Chain::Internal {
            NO_RANK
        } else {
            from
        };
        match proc_id {
            Some(id) => {
                headers.push(0);
                words.push(header(PROC, from, is_more && !continuing, id));
            }
            None if !continuing => {
                headers.push(0);
                words.push(header(DATA, from, is_more, len as u32));
            }
            None => {}
        }
        payload.push(&mut words);
        if continuing && !is_more {
            headers.push(words.len());
            words.push(header(CLOSE, from, false, 0));
        }
        let bytes = words.len() * 8;
        if bytes as u64 > self.cap || len > u32::MAX as usize {
            return Err(PrimError::TooLarge {
                bytes,
                capacity: self.cap as usize,
            });
        }
        let start = !continuing;
        let end = !is_more;
        match &targets {
            Chain::Internal => {
                let internal = self.internal.as_ref().ok_or(PrimError::NoCommThread)?;
                let c = &self.counters;
                internal
                    .out
                    .borrow_mut()
                    .emit(&words, &headers, &mut |first| {
                        if first {
                            Counters::add(&c.full_stalls, 1);
                        }
                        std::thread::yield_now();
                    });
                // The communication thread sleeps on the network buffer's doorbell.
                crate::comm::wake(self.own, c);
                self.count_sent(len, bytes, 1);
            }
            Chain::Ranks(ranks) => {
                if !continuing {
                    for &r in ranks {
                        self.take_link(r)?;
                    }
                }
                for &r in ranks {
                    if let Err(e) = self.emit(r, &words, &headers, start, end) {
                        // A new packet that could not go: free the links it took (a chain
                        // already open stays open, for the caller to close).
                        if !continuing {
                            for &r in ranks {
                                let _ = self.release_link(r);
                            }
                        }
                        return Err(e);
                    }
                }
                self.count_sent(len, bytes, ranks.len() as u64);
                if end {
                    for &r in ranks {
                        self.release_link(r)?;
                    }
                }
            }
        }
        drop(words);
        if start && is_more {
            Counters::add(&self.counters.chain_opens, 1);
            *self.chain.borrow_mut() = Some(targets);
        } else if continuing && end {
            Counters::add(&self.counters.chain_closes, 1);
            *self.chain.borrow_mut() = None;
        }
        Ok(())
    }

    fn count_sent(&self, len: usize, bytes: usize, n: u64) {
        let c = &self.counters;
        if len > 0 {
            Counters::add(&c.messages_sent, n);
        }
        Counters::add(&c.bytes_sent, len as u64 * n);
        Counters::add(&c.ring_bytes_sent, bytes as u64 * n);
    }

    /// Waits a little for another rank (a held link, a full buffer), serving volley's own
    /// messages meanwhile (the one-sided operations of ranks on other nodes land that way).
    pub(crate) fn back_off(&self, spins: &mut u32) {
        *spins = spins.wrapping_add(1);
        if *spins % 64 == 0 {
            self.rt.poll();
            self.wake_comm_thread();
        }
        // Spin first (an answer is usually a cache-line transfer away); give the core up
        // only after a long wait, for the ranks and threads that share it.
        // With a communication thread, the thread that would answer may share this core.
        let limit = if self.progress == Progress::CommThread {
            COMM_SPINS_BEFORE_YIELD
        } else {
            SPINS_BEFORE_YIELD
        };
        if *spins >= limit {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }

    /// Takes `r`'s link (waits while another sender's chain holds it) and reads where its
    /// buffer stands.
    pub(crate) fn take_link(&self, r: usize) -> Result<()> {
        let backend = self.links.borrow()[r].backend;
        let me = self.me as u64 + 1;
        let mut spins = 0;
        loop {
            let got = match backend {
                Backend::Mapped(p) => p
                    .owner()
                    .compare_exchange(0, me, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok(),
                Backend::Remote(s) => self.rma.compare_swap(s, ring::OWNER, 0, me)? == 0,
            };
            if got {
                break;
            }
            if spins == 0 {
                Counters::add(&self.counters.held_back, 1);
            }
            self.back_off(&mut spins);
        }
        // The head only grows, so the last one read stays a safe bound on the room; it is
        // read again when that bound runs out (`wait_room`).
        let tail = match backend {
            Backend::Mapped(p) => p.tail().load(Ordering::Acquire),
            Backend::Remote(s) => self.rma.atomic(s, ring::TAIL, AtomicOp::Load, 0, 0)?,
        };
        self.links.borrow_mut()[r].tail = tail;
        Ok(())
    }

    pub(crate) fn release_link(&self, r: usize) -> Result<()> {
        match self.links.borrow()[r].backend {
            Backend::Mapped(p) => p.owner().store(0, Ordering::Release),
            Backend::Remote(s) => {
                self.rma.atomic(s, ring::OWNER, AtomicOp::Store, 0, 0)?;
            }
        }
        Ok(())
    }

    fn load_head(&self, backend: Backend) -> Result<u64> {
        Ok(match backend {
            Backend::Mapped(p) => p.head().load(Ordering::Acquire),
            Backend::Remote(s) => self.rma.atomic(s, ring::HEAD, AtomicOp::Load, 0, 0)?,
        })
    }

    /// Waits until `r`'s buffer has room for `bytes` more (the link is held).
    pub(crate) fn wait_room(&self, r: usize, bytes: u64) -> Result<()> {
        let backend = self.links.borrow()[r].backend;
        let mut spins = 0;
        loop {
            let (tail, head) = {
                let l = &self.links.borrow()[r];
                (l.tail, l.head)
            };
            if self.cap.saturating_sub(tail - head) >= bytes {
                return Ok(());
            }
            let head = self.load_head(backend)?;
            self.links.borrow_mut()[r].head = head;
            if self.cap.saturating_sub(tail - head) >= bytes {
                return Ok(());
            }
            if r == self.me {
                return Err(PrimError::OwnBufferFull);
            }
            if spins == 0 {
                Counters::add(&self.counters.full_stalls, 1);
            }
            self.back_off(&mut spins);
        }
    }

    /// Writes a packet image into `r`'s buffer (link held) and publishes it.
    fn emit(
        &self,
        r: usize,
        words: &[u64],
        headers: &[usize],
        start: bool,
        end: bool,
    ) -> Result<()> {
        let bytes = words.len() as u64 * 8;
        if bytes == 0 {
            return Ok(());
        }
        self.wait_room(r, bytes)?;
        let (backend, old) = {
            let l = &self.links.borrow()[r];
            (l.backend, l.tail)
        };
        let new = old + bytes;
        match backend {
            Backend::Mapped(p) => {
                p.write_words(old, words, headers);
                p.tail().store(new, Ordering::Release);
                // Every rank runs one progress mode: a communication thread reads `p`.
                if self.progress == Progress::CommThread {
                    crate::comm::wake(p, &self.counters);
                }
            }
            Backend::Remote(s) => {
                let mask = self.cap - 1;
                let data = ring::RING;
                // SAFETY: viewing initialized u64s as bytes.
                let raw = unsafe {
                    std::slice::from_raw_parts(words.as_ptr() as *const u8, words.len() * 8)
                };
                let start_at = (old & mask) as usize;
                let first = raw.len().min(self.cap as usize - start_at);
                self.rma.put(s, data + start_at, &raw[..first])?;
                if first < raw.len() {
                    self.rma.put(s, data, &raw[first..])?;
                }
                for &h in headers {
                    let word = ((old + 8 * h as u64) & mask) / 8;
                    self.rma.put(
                        s,
                        ring::marks_offset(self.cap as usize) + word as usize,
                        &[1],
                    )?;
                }
                self.rma.atomic(s, ring::TAIL, AtomicOp::Store, new, 0)?;
            }
        }
        self.links.borrow_mut()[r].tail = new;
        self.notify_after(r, old, new, start, end)
    }

    /// Raises a notification at `r`'s buffer if the threshold says so.
    pub(crate) fn notify_after(
        &self,
        r: usize,
        old: u64,
        new: u64,
        start: bool,
        end: bool,
    ) -> Result<()> {
        let raise = match self.notify {
            Notify::Never => false,
            Notify::Start => start,
            Notify::End => end,
            Notify::HalfFull => {
                let backend = self.links.borrow()[r].backend;
                let head = self.load_head(backend)?;
                let half = self.cap / 2;
                old.saturating_sub(head) < half && new - head >= half
            }
        };
        if !raise {
            return Ok(());
        }
        let backend = self.links.borrow()[r].backend;
        match backend {
            Backend::Mapped(p) => {
                if ring_bell(p, &self.counters) {
                    self.rt
                        .request_short(r, self.wake, &[])
                        .map_err(volley::rma::Error::from)?;
                }
            }
            Backend::Remote(s) => {
                Counters::add(&self.counters.notifications_raised, 1);
                // A message: it wakes the receiver's kernel wait by itself.
                self.rma.fetch_add(s, ring::NOTIFIED, 1)?;
            }
        }
        Ok(())
    }

    fn reader(&self, src: Source) -> Result<&RefCell<Reader>> {
        match src {
            Source::Network => Ok(&self.net),
            Source::Internal => self
                .internal
                .as_ref()
                .map(|i| &i.inp)
                .ok_or(PrimError::NoCommThread),
        }
    }

    /// Wakes this rank's sleeping communication thread, in that mode, if its network buffer
    /// holds something: after volley polled, a peer on another node may have published
    /// there (its one-sided operations land in this thread's poll, and nobody else rings
    /// for them; mapped senders ring themselves).
    fn wake_comm_thread(&self) {
        if self.progress == Progress::CommThread {
            crate::comm::wake_if_waiting(self.own, &self.counters);
        }
    }

    /// Seed 003's `is_information(source, information_type)`: whether the next thing in the
    /// buffer is of type `ty`, not there, or of the other type. Never blocks; drops empty
    /// packets (chain opens and closes without payload) on the way.
    #[inline(never)]
    pub fn is_information(&self, src: Source, ty: InfoType) -> Result<Probe> {
        self.check_live()?;
        self.wake_comm_thread();
        let reader = self.reader(src)?;
        let kind = recv::next_kind(&mut reader.borrow_mut());
        Ok(match kind {
            None => Probe::Empty,
            Some(is_proc) if is_proc == (ty == InfoType::Procedure) => Probe::Match,
            Some(_) => Probe::WrongType,
        })
    }

    /// The size of the data packet waiting next in `src`, if a data packet (with its header)
    /// is next: for layers that receive packets of sizes they learn from the packet (a
    /// typed layer). `None` for nothing, chained bytes, or a procedure. Never blocks.
    pub fn pending_len(&self, src: Source) -> Result<Option<usize>> {
        self.check_live()?;
        self.wake_comm_thread();
        let mut r = self.reader(src)?.borrow_mut();
        Ok(match recv::skip_empty(&mut r) {
            ring::Peek::Header(w) if Header::decode(w).kind == DATA => {
                Some(Header::decode(w).value as usize)
            }
            _ => None,
        })
    }

    /// Sends what the communication thread handed over for ranks on other nodes (in its
    /// order; what goes to this thread's open chain waits for the chain's close). An error
    /// is that of a handler's send.
    pub(crate) fn send_handed_off(&self) -> Result<()> {
        let Some(h) = &self.handoff else {
            return Ok(());
        };
        h.drain(
            |r| matches!(&*self.chain.borrow(), Some(Chain::Ranks(open)) if open.contains(&r)),
            |p| ProgramOut(self).send_image(p.rank, &p.words, &p.headers, p.payload),
        )
    }

    /// Waits once for `src` in this rank's progress mode.
    fn wait(&self, src: Source, ty: InfoType, spins: &mut u32) -> Result<()> {
        self.send_handed_off()?;
        match (self.progress, src) {
            (Progress::ProbeLoop, _) => {
                // The seed's probe loop: call the probe until it says yes.
                while self.is_information(src, ty)? == Probe::Empty {
                    self.back_off(spins);
                }
            }
            (Progress::Interrupt, Source::Network) => self.sleep(),
            _ => self.back_off(spins),
        }
        Ok(())
    }

    /// Sleeps in the kernel until a sender's notification (or the timeout). With ranks on
    /// other nodes, in volley's wait on the socket and the eventfd: their one-sided operations
    /// arrive as messages and wake it at once, and a mapped sender's notification sends one.
    fn sleep(&self) {
        let p = self.own;
        let how = if self.sleeps_in_runtime {
            IN_RUNTIME
        } else {
            ON_FUTEX
        };
        let head = self.net.borrow().head;
        let slept = crate::idle::sleep_unless(
            p.sleeping(),
            p.doorbell(),
            how,
            || p.tail().load(Ordering::Acquire) != head,
            |bell| {
                if self.sleeps_in_runtime {
                    self.rt.sleep_until_message(SLEEP);
                } else {
                    crate::futex::wait(p.doorbell(), bell, SLEEP);
                }
            },
        );
        if slept {
            Counters::add(&self.counters.sleeps, 1);
            Counters::add(&self.counters.syscalls, 1);
        }
        self.rt.poll();
    }

    /// Seed 003's `receive(source, information)`: blocks until the next thing in `src` is
    /// there. Data form: copies exactly `buf.len()` bytes (a data packet of that size, or
    /// that many chained bytes). Procedure form: returns after a procedure packet's handler
    /// has run (on this thread, or on the communication thread in that mode).
    pub fn receive(&self, src: Source, info: Recv<'_>) -> Result<Received> {
        self.check_live()?;
        let reader = self.reader(src)?;
        let mut spins = 0;
        match info {
            Recv::Data(buf) => loop {
                if let Some(from) = recv::try_data(&mut reader.borrow_mut(), buf)? {
                    Counters::add_own(&self.counters.messages_received, 1);
                    Counters::add_own(&self.counters.bytes_received, buf.len() as u64);
                    return Ok(Received {
                        from,
                        procedure: None,
                    });
                }
                self.wait(src, InfoType::Data, &mut spins)?;
            },
            Recv::Procedure => loop {
                let got = recv::try_procedure(&mut reader.borrow_mut())?;
                if let Some(h) = got {
                    return self.run_procedure(h, reader);
                }
                self.wait(src, InfoType::Procedure, &mut spins)?;
            },
        }
    }

    /// Runs a procedure packet's handler here, or reports one the communication thread ran.
    fn run_procedure(&self, h: Header, reader: &RefCell<Reader>) -> Result<Received> {
        let id = h.value & !crate::comm::UNKNOWN_FLAG;
        if h.kind == PROC_DONE {
            // The handler's sends to other nodes leave before its report returns.
            self.send_handed_off()?;
            if h.value & crate::comm::UNKNOWN_FLAG != 0 {
                return Err(PrimError::UnknownHandler { id, from: h.from });
            }
            return Ok(Received {
                from: h.from,
                procedure: Some(id),
            });
        }
        let f = self
            .handlers
            .get(id as usize)
            .and_then(|f| f.clone())
            .ok_or(PrimError::UnknownHandler { id, from: h.from })?;
        let rt = self.rt;
        let mut wait = || {
            rt.poll();
            std::thread::yield_now();
        };
        let mut r = reader.borrow_mut();
        let mut inv = Invocation {
            from: h.from,
            id,
            args: &mut r,
            wait: &mut wait,
            reply: None,
            out: &mut ProgramOut(self),
            report: true,
        };
        f(&mut inv);
        Counters::add(&self.counters.handler_invocations, 1);
        Ok(Received {
            from: h.from,
            procedure: Some(id),
        })
    }

    /// Ends the layer on this rank: stops the communication thread and, if a chain is still
    /// open, closes it (so no receiver waits on it) and says so with
    /// [`PrimError::ChannelOpenAtFinalize`]. Later calls fail with [`PrimError::Finalized`].
    /// Not collective; the runtime's own finalize (after every rank is done) follows.
    pub fn finalize(&self) -> Result<()> {
        if self.finalized.get() {
            return Ok(());
        }
        let open = self.chain.borrow().clone();
        let result = match open {
            Some(c) => {
                let _ = self.send(Dest::PreviousChain, Info::Data(&[]), false);
                Err(PrimError::ChannelOpenAtFinalize(format!("{c:?}")))
            }
            None => Ok(()),
        };
        if let Some(mut comm) = self.comm.borrow_mut().take() {
            comm.stop();
        }
        // What the stopped thread handed over still goes.
        let handed = self.send_handed_off();
        self.finalized.set(true);
        result.and(handed)
    }

    /// The segment holding every rank's network input buffer.
    pub fn segment(&self) -> SymmetricSegment {
        self.seg
    }
}

/// The program thread as a handler's sender: every backend, through the links.
pub(crate) struct ProgramOut<'p, 'rt>(pub(crate) &'p Prim<'rt>);

impl Outbound for ProgramOut<'_, '_> {
    fn send_image(
        &mut self,
        rank: usize,
        words: &[u64],
        headers: &[usize],
        payload: usize,
    ) -> Result<()> {
        let p = self.0;
        p.check_live()?;
        p.check_rank(rank)?;
        if let Some(Chain::Ranks(open)) = &*p.chain.borrow() {
            if open.contains(&rank) {
                // This thread holds that link: taking it again would wait for itself.
                return Err(PrimError::ChainOpen(format!("{open:?}")));
            }
        }
        let bytes = words.len() * 8;
        if bytes as u64 > p.cap {
            return Err(PrimError::TooLarge {
                bytes,
                capacity: p.cap as usize,
            });
        }
        p.take_link(rank)?;
        let sent = p.emit(rank, words, headers, true, true);
        let freed = p.release_link(rank);
        sent?;
        freed?;
        p.count_sent(payload, bytes, 1);
        Ok(())
    }

    fn handlers(&self) -> &[Option<Handler>] {
        &self.0.handlers
    }

    fn me(&self) -> usize {
        self.0.me
    }
}

impl Drop for Prim<'_> {
    fn drop(&mut self) {
        let _ = self.finalize();
    }
}
