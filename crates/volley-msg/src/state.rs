//! What a rank's sends and receives share with its handlers: the matching engine, the
//! receives and rendezvous sends in flight, and the flow-control accounts. Where a progress
//! thread runs handlers, a spin lock guards it: every hold is a few table operations, and a
//! spin lock is released with a plain store where a futex mutex's release is a locked
//! exchange. Where none does, only the program thread ever touches it, and it is taken with
//! plain stores ([`Shared::lock`]): a locked instruction waits for the stores before it, such
//! as the ring writes of a message just sent or taken, to reach the other core, and that wait
//! was most of what a tagged message cost beyond an Active Message.
//!
//! Lock discipline: nothing sends an Active Message while holding the lock. A send that finds
//! no room polls, and the handlers it runs take the lock: the caller collects what to send
//! under the lock and sends after releasing it.

use crate::config::{Limits, ENVELOPE_BYTES};
use crate::matching::{Found, Matcher, Source, TagSel};
use crate::slots::Slots;
use spin::mutex::{SpinMutex, SpinMutexGuard};
use spin::relax::Yield;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

/// Where a rendezvous sender's bytes can be read straight from, when it is a process on this
/// node that offered it: its process and the bytes' address there, and a word of that
/// process's (its address and value) that proves the process id names the sender in this
/// receiver's process namespace before anything is read from it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Direct {
    pub(crate) pid: i32,
    pub(crate) addr: u64,
    pub(crate) key_addr: u64,
    pub(crate) key: u64,
}

/// Bytes of a rendezvous message read by one direct read: a receive's wait polls between
/// pieces, so a long message does not hold back the rank's other traffic.
pub(crate) const DIRECT_PIECE: usize = 1 << 20;

/// An unexpected message: its payload (eager) or the sender's announcement (rendezvous).
#[derive(Debug)]
pub(crate) enum Item {
    Eager(Vec<u8>),
    Rendezvous {
        len: usize,
        remote: u64,
        direct: Option<Direct>,
    },
}

impl Item {
    pub(crate) fn len(&self) -> usize {
        match self {
            Item::Eager(v) => v.len(),
            Item::Rendezvous { len, .. } => *len,
        }
    }

    /// What it takes of its sender's share of the unexpected queue.
    pub(crate) fn cost(&self) -> usize {
        match self {
            Item::Eager(v) => v.len() + ENVELOPE_BYTES,
            Item::Rendezvous { .. } => ENVELOPE_BYTES,
        }
    }
}

/// A caller's buffer, written by handlers while its blocking receive waits.
#[derive(Debug)]
pub(crate) struct UserBuf {
    pub(crate) ptr: *mut u8,
    pub(crate) cap: usize,
}

// SAFETY: the pointer is only written under the state's lock, and the blocking receive that
// lent it removes it (under the same lock) before its borrow ends, even when unwinding.
unsafe impl Send for UserBuf {}

/// Where a receive's bytes go.
#[derive(Debug)]
pub(crate) enum Buf {
    /// A vector the layer allocates at the match, of the message's length.
    Owned(Vec<u8>),
    /// The caller's buffer.
    User(UserBuf),
}

impl Buf {
    fn fits(&self, len: usize) -> bool {
        match self {
            Buf::Owned(_) => true,
            Buf::User(u) => len <= u.cap,
        }
    }

    /// Makes room for `len` bytes (an owned buffer grows to exactly that).
    fn prepare(&mut self, len: usize) {
        if let Buf::Owned(v) = self {
            v.clear();
            v.resize(len, 0);
        }
    }

    /// Where byte `offset` goes, for a direct read of `len` bytes there (in bounds: the caller
    /// checked the message fits).
    fn ptr_at(&mut self, offset: usize, len: usize) -> *mut u8 {
        match self {
            Buf::Owned(v) => v[offset..offset + len].as_mut_ptr(),
            Buf::User(u) => {
                assert!(offset + len <= u.cap, "a receive overran its buffer");
                // SAFETY: in bounds (checked above) of the lent buffer.
                unsafe { u.ptr.add(offset) }
            }
        }
    }

    /// Writes `data` at `offset` (in bounds: the caller checked the message fits).
    fn write(&mut self, offset: usize, data: &[u8]) {
        match self {
            Buf::Owned(v) => v[offset..offset + data.len()].copy_from_slice(data),
            Buf::User(u) => {
                assert!(offset + data.len() <= u.cap, "a receive overran its buffer");
                // SAFETY: in bounds (checked above); the buffer is lent for as long as its
                // slot exists, and we hold the lock that its removal takes.
                unsafe {
                    std::ptr::copy_nonoverlapping(data.as_ptr(), u.ptr.add(offset), data.len())
                };
            }
        }
    }
}

/// Where a receive is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Posted, waiting for a message.
    Posted,
    /// Matched a rendezvous announcement: chunks are being pulled from the sender, or read
    /// straight from its memory (`direct`).
    Pulling {
        src: usize,
        tag: u64,
        len: usize,
        remote: u64,
        direct: Option<Direct>,
        /// The next offset to ask for.
        next: usize,
        received: usize,
        inflight: usize,
    },
    /// Every byte is in.
    Done { src: usize, tag: u64, len: usize },
    /// The matched message did not fit the caller's buffer; it went on to other receives or
    /// the unexpected queue.
    TooSmall { src: usize, tag: u64, len: usize },
}

/// What a rendezvous receive asks for next ([`State::pulls`]).
#[derive(Debug)]
pub(crate) enum Pull {
    /// A chunk pulled by an Active Message: source, the send's id, offset, length, the
    /// receive's id.
    Ask([u64; 5]),
    /// A piece read straight from the sender's memory into the receive's buffer.
    Read(DirectRead),
}

/// A piece of a rendezvous message to read from its sender's memory.
#[derive(Debug)]
pub(crate) struct DirectRead {
    pub(crate) id: u64,
    pub(crate) src: usize,
    /// The send's id at the sender.
    pub(crate) remote: u64,
    pub(crate) from: Direct,
    pub(crate) offset: usize,
    pub(crate) len: usize,
    /// Where the piece goes: the receive's buffer at `offset`. Written only by the receive's
    /// own thread (the program's, which drives `Msg`) while its slot is in this read, which
    /// nothing else writes.
    pub(crate) into: *mut u8,
}

/// An eager message taken straight from the unexpected queue, and the credit to give back
/// for it now.
#[derive(Debug)]
pub(crate) struct Taken {
    pub(crate) src: usize,
    pub(crate) tag: u64,
    pub(crate) data: Vec<u8>,
    pub(crate) credit: Option<(usize, u64)>,
}

/// How [`State::begin_into`] started a blocking receive.
#[derive(Debug)]
pub(crate) enum Begun {
    /// A queued eager message is in the caller's buffer.
    Done {
        src: usize,
        tag: u64,
        len: usize,
        credit: Option<(usize, u64)>,
    },
    /// Slot `id` waits for its message, or pulls it.
    Posted {
        id: u64,
        credit: Option<(usize, u64)>,
    },
}

/// A receive in flight.
#[derive(Debug)]
pub(crate) struct RecvSlot {
    pub(crate) buf: Buf,
    pub(crate) phase: Phase,
}

/// The bytes of a rendezvous send, read by the handler that answers the receiver's pulls.
#[derive(Debug)]
pub(crate) struct SendBytes {
    ptr: *const u8,
    len: usize,
    /// The vector `ptr` points into, for a non-blocking send (which owns its data).
    _owned: Option<Vec<u8>>,
}

// SAFETY: read-only bytes; a borrowed buffer's blocking send removes them (in a critical
// section, so no handler is reading) before its borrow ends.
unsafe impl Send for SendBytes {}
// SAFETY: as above; only shared reads.
unsafe impl Sync for SendBytes {}

impl SendBytes {
    pub(crate) fn owned(v: Vec<u8>) -> Self {
        Self {
            ptr: v.as_ptr(),
            len: v.len(),
            _owned: Some(v),
        }
    }

    /// The caller's bytes, which must outlive the slot holding them.
    pub(crate) fn borrowed(data: &[u8]) -> Self {
        Self {
            ptr: data.as_ptr(),
            len: data.len(),
            _owned: None,
        }
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: see the type's Send impl: the bytes live as long as the slot.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// The owned vector back, if this holds one.
    pub(crate) fn into_vec(self) -> Option<Vec<u8>> {
        self._owned
    }
}

/// A rendezvous send in flight.
#[derive(Debug)]
pub(crate) struct SendSlot {
    pub(crate) bytes: Arc<SendBytes>,
    /// Bytes handed to the receiver so far.
    pub(crate) sent: usize,
    /// Its request was dropped: remove the slot once done.
    pub(crate) detached: bool,
}

impl SendSlot {
    pub(crate) fn done(&self) -> bool {
        self.sent == self.bytes.len
    }
}

/// The state itself.
#[derive(Debug)]
pub(crate) struct State {
    pub(crate) matcher: Matcher<Item, u64>,
    pub(crate) recvs: Slots<RecvSlot>,
    /// Receives in [`Phase::Pulling`] with chunks left to ask for.
    pub(crate) pulling: Vec<u64>,
    pub(crate) sends: Slots<SendSlot>,
    next_id: u64,
    /// Sender side: bytes of each destination's unexpected queue this rank may have filled.
    pub(crate) used: Vec<usize>,
    /// Receiver side: bytes freed for each sender and not yet returned to it.
    pub(crate) owed: Vec<usize>,
    /// Bytes in the unexpected queue.
    pub(crate) unexpected_bytes: usize,
    /// Whether rendezvous messages from this node's processes may be read straight from their
    /// memory: set at attach from the configuration, cleared for good when a read is refused.
    pub(crate) direct_reads: bool,
    /// Bytes received by direct reads.
    pub(crate) direct_bytes: u64,
    /// By sender rank, the process whose key a direct read has already checked (0: none).
    pub(crate) checked_pids: Vec<i32>,
    /// Set once the layer is attached (before then no receive is posted).
    pub(crate) limits: Option<Limits>,
    /// Counts what a waiting receive must look at (a completion, a refusal, a chunk, a
    /// match that starts pulling): its wait reads this word and takes the lock only when it
    /// moved.
    pub(crate) events: Arc<AtomicU64>,
}

/// A handle on the state.
#[derive(Debug, Clone)]
pub(crate) struct Shared(Arc<Guarded>);

/// The state and what guards it.
#[derive(Debug)]
struct Guarded {
    mutex: SpinMutex<State, Yield>,
    /// Set at attach when no progress thread serves the rank: handlers then run only inside
    /// the program thread's own runtime calls, never while it holds the state (nothing polls
    /// under the lock), so one thread alone touches the state and the lock's atomic exchange,
    /// which waits for the stores before it (the ring writes of a message just sent or
    /// taken) to reach the other core, is left out. Never cleared.
    one_thread: AtomicBool,
    /// In one-thread mode, whether a guard is alive (plain loads and stores: only that thread
    /// reads it); taking the state again while it is would be a bug, caught here.
    held: AtomicBool,
}

impl Shared {
    pub(crate) fn new() -> Self {
        Self(Arc::new(Guarded {
            mutex: SpinMutex::new(State {
                matcher: Matcher::new(0),
                recvs: Slots::default(),
                pulling: Vec::new(),
                sends: Slots::default(),
                next_id: 1,
                used: Vec::new(),
                owed: Vec::new(),
                unexpected_bytes: 0,
                direct_reads: false,
                direct_bytes: 0,
                checked_pids: Vec::new(),
                limits: None,
                events: Arc::new(AtomicU64::new(0)),
            }),
            one_thread: AtomicBool::new(false),
            held: AtomicBool::new(false),
        }))
    }

    /// Takes the state: in one-thread mode at the cost of two plain stores, otherwise under
    /// the spin lock, yielding the core while another thread holds it. (A panic elsewhere
    /// leaves the state consistent: every change made while holding it is made whole before
    /// anything can panic, and the guard lets go as the panic unwinds.)
    pub(crate) fn lock(&self) -> StateGuard<'_> {
        let g = &*self.0;
        if g.one_thread.load(Ordering::Relaxed) {
            assert!(
                !g.held.load(Ordering::Relaxed),
                "volley-msg: the layer's state taken twice by one thread (a poll while holding it)"
            );
            g.held.store(true, Ordering::Relaxed);
            // SAFETY: in one-thread mode only the program thread touches the state (no
            // progress thread runs handlers; `Msg` is neither `Send` nor `Sync`, and handlers
            // run inside that thread's runtime calls), and `held` shows no other guard of
            // that thread is alive, so this is the only reference to it until the guard drops.
            let state = unsafe { &mut *g.mutex.as_mut_ptr() };
            return StateGuard::Alone {
                state,
                held: &g.held,
            };
        }
        StateGuard::Locked(g.mutex.lock())
    }

    /// Leaves out the lock from now on if no progress thread serves `rt`'s rank. Called once,
    /// by the program thread at attach, while it holds no guard.
    pub(crate) fn one_thread(&self, rt: &volley::Runtime) {
        if !rt.has_progress_thread() {
            self.set_one_thread();
        }
    }

    fn set_one_thread(&self) {
        self.0.one_thread.store(true, Ordering::Relaxed);
    }

    /// The event count of [`State::events`].
    pub(crate) fn events(&self) -> Arc<AtomicU64> {
        self.lock().events.clone()
    }
}

/// The state, taken (see [`Shared::lock`]).
pub(crate) enum StateGuard<'a> {
    /// One-thread mode: the state, and the flag to clear when done.
    Alone {
        state: &'a mut State,
        held: &'a AtomicBool,
    },
    /// Under the spin lock.
    Locked(SpinMutexGuard<'a, State, Yield>),
}

impl std::ops::Deref for StateGuard<'_> {
    type Target = State;
    fn deref(&self) -> &State {
        match self {
            StateGuard::Alone { state, .. } => state,
            StateGuard::Locked(g) => g,
        }
    }
}

impl std::ops::DerefMut for StateGuard<'_> {
    fn deref_mut(&mut self) -> &mut State {
        match self {
            StateGuard::Alone { state, .. } => state,
            StateGuard::Locked(g) => g,
        }
    }
}

impl Drop for StateGuard<'_> {
    fn drop(&mut self) {
        if let StateGuard::Alone { held, .. } = self {
            held.store(false, Ordering::Relaxed);
        }
    }
}

fn slot_of<T: Default>(v: &mut Vec<T>, i: usize) -> &mut T {
    if i >= v.len() {
        v.resize_with(i + 1, T::default);
    }
    &mut v[i]
}

impl State {
    /// Something a waiting receive must look at happened.
    fn note(&self) {
        // Only holders of the lock write the count, so a load and a store count without a
        // locked add. Release: a wait that reads the new count and then takes the lock sees
        // the change (the lock orders it anyway; this keeps the word itself meaningful).
        let n = self.events.load(Ordering::Relaxed);
        self.events.store(n + 1, Ordering::Release);
    }

    pub(crate) fn next_id(&mut self) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        id
    }

    /// Records `cost` bytes freed in `src`'s share; returns what to give back to it now, if
    /// enough has gathered (returning in batches keeps the credit traffic small).
    pub(crate) fn owe(&mut self, src: usize, cost: usize) -> Option<u64> {
        let owed = slot_of(&mut self.owed, src);
        *owed += cost;
        let at = self.limits.map_or(usize::MAX, |l| l.return_at);
        (*owed >= at).then(|| std::mem::take(owed) as u64)
    }

    /// Takes `cost` bytes of `dest`'s share, or says how much is in use.
    pub(crate) fn reserve(&mut self, dest: usize, cost: usize, share: usize) -> Result<(), usize> {
        let used = slot_of(&mut self.used, dest);
        if *used + cost > share {
            return Err(*used);
        }
        *used += cost;
        Ok(())
    }

    /// Gives back `n` bytes of `dest`'s share (returned credit, or a send that failed).
    pub(crate) fn release(&mut self, dest: usize, n: usize) {
        let used = slot_of(&mut self.used, dest);
        *used = used.saturating_sub(n);
    }

    /// An eager message from `src` arrived: into the earliest matching receive whose buffer
    /// holds it, or the unexpected queue. Returns credit to give back now.
    pub(crate) fn arrive_eager(&mut self, src: usize, tag: u64, payload: &[u8]) -> Option<u64> {
        let len = payload.len();
        while let Some(id) = self.matcher.match_arrival(src, tag) {
            let Some(slot) = self.recvs.get_mut(id) else {
                continue;
            };
            if !slot.buf.fits(len) {
                slot.phase = Phase::TooSmall { src, tag, len };
                self.note();
                continue;
            }
            slot.buf.prepare(len);
            slot.buf.write(0, payload);
            slot.phase = Phase::Done { src, tag, len };
            self.note();
            return self.owe(src, len + ENVELOPE_BYTES);
        }
        self.unexpected_bytes += len + ENVELOPE_BYTES;
        self.matcher
            .push_unexpected(src, tag, Item::Eager(payload.to_vec()));
        None
    }

    /// A rendezvous announcement from `src` arrived: the earliest matching receive whose
    /// buffer holds it starts pulling, or it waits in the unexpected queue. Returns credit to
    /// give back now.
    pub(crate) fn arrive_rendezvous(
        &mut self,
        src: usize,
        tag: u64,
        len: usize,
        remote: u64,
        direct: Option<Direct>,
    ) -> Option<u64> {
        while let Some(id) = self.matcher.match_arrival(src, tag) {
            let Some(slot) = self.recvs.get_mut(id) else {
                continue;
            };
            if !slot.buf.fits(len) {
                slot.phase = Phase::TooSmall { src, tag, len };
                self.note();
                continue;
            }
            self.start_pull(id, src, tag, len, remote, direct);
            self.note();
            return self.owe(src, ENVELOPE_BYTES);
        }
        self.unexpected_bytes += ENVELOPE_BYTES;
        self.matcher.push_unexpected(
            src,
            tag,
            Item::Rendezvous {
                len,
                remote,
                direct,
            },
        );
        None
    }

    /// Receive `id` matched a rendezvous message: prepare its buffer and queue its pulls (or
    /// direct reads, where the sender offered them and this rank takes them). An empty
    /// message is still pulled (once, for nothing): the sender waits to be asked.
    pub(crate) fn start_pull(
        &mut self,
        id: u64,
        src: usize,
        tag: u64,
        len: usize,
        remote: u64,
        direct: Option<Direct>,
    ) {
        let direct = direct.filter(|_| self.direct_reads && len > 0);
        let slot = self.recvs.get_mut(id).expect("the receive's slot");
        slot.buf.prepare(len);
        slot.phase = Phase::Pulling {
            src,
            tag,
            len,
            remote,
            direct,
            next: 0,
            received: 0,
            inflight: 0,
        };
        self.pulling.push(id);
    }

    /// Takes the earliest unexpected message for a receive with these selectors into slot
    /// `id` (already in `recvs`), or posts the receive. `Err` (nothing taken) when the
    /// message does not fit the slot's buffer. Returns credit to give back now.
    pub(crate) fn take_or_post(
        &mut self,
        id: u64,
        src: Source,
        tag: TagSel,
    ) -> Result<Option<(usize, u64)>, (usize, u64, usize)> {
        let found = self.matcher.locate(src, tag);
        self.take_or_post_found(id, src, tag, found)
    }

    /// [`State::take_or_post`] with the earliest matching message already located (`None`:
    /// there is none). Inlined: a blocking receive's path posts through it, and a call there
    /// cost about 40 instructions per message (`scripts/count-msg-instructions`).
    #[inline(always)]
    fn take_or_post_found(
        &mut self,
        id: u64,
        src: Source,
        tag: TagSel,
        found: Option<Found>,
    ) -> Result<Option<(usize, u64)>, (usize, u64, usize)> {
        let Some(at) = found else {
            self.matcher.post(src, tag, id);
            return Ok(None);
        };
        let (s, t, item) = self.matcher.peek(at);
        let slot = self.recvs.get(id).expect("the receive's slot");
        if !slot.buf.fits(item.len()) {
            return Err((s, t, item.len()));
        }
        let (s, t, item, credit) = self.take_found(at);
        match item {
            Item::Eager(v) => {
                let slot = self.recvs.get_mut(id).expect("the receive's slot");
                let len = v.len();
                match &mut slot.buf {
                    // The queued vector becomes the result: no copy.
                    Buf::Owned(o) => *o = v,
                    user => user.write(0, &v),
                }
                slot.phase = Phase::Done {
                    src: s,
                    tag: t,
                    len,
                };
            }
            Item::Rendezvous {
                len,
                remote,
                direct,
            } => self.start_pull(id, s, t, len, remote, direct),
        }
        Ok(credit)
    }

    /// Takes the unexpected message `at` names out of the queue: its source, tag and item, and
    /// the credit to give back for it now.
    fn take_found(&mut self, at: Found) -> (usize, u64, Item, Option<(usize, u64)>) {
        let (s, t, item) = self.matcher.take_at(at);
        let cost = item.cost();
        self.unexpected_bytes -= cost;
        let credit = self.owe(s, cost).map(|c| (s, c));
        (s, t, item, credit)
    }

    /// A blocking receive into the caller's buffer `buf`: copies the earliest queued message
    /// these selectors accept into `buf` at once if it is eager, needing no slot; otherwise
    /// posts a slot, which takes a queued rendezvous message (and starts pulling) or waits.
    /// `Err` (nothing taken) when the message is longer than `buf`.
    pub(crate) fn begin_into(
        &mut self,
        src: Source,
        tag: TagSel,
        buf: UserBuf,
    ) -> Result<Begun, (usize, u64, usize)> {
        let found = self.matcher.locate(src, tag);
        if let Some(at) = found {
            match self.matcher.peek(at) {
                (s, t, item) if item.len() > buf.cap => return Err((s, t, item.len())),
                (_, _, Item::Eager(_)) => {
                    let (src, tag, Item::Eager(v), credit) = self.take_found(at) else {
                        unreachable!("the message peeked at above");
                    };
                    Buf::User(buf).write(0, &v);
                    return Ok(Begun::Done {
                        src,
                        tag,
                        len: v.len(),
                        credit,
                    });
                }
                _ => {}
            }
        }
        let id = self.post_slot(Buf::User(buf));
        match self.take_or_post_found(id, src, tag, found) {
            Ok(credit) => Ok(Begun::Posted { id, credit }),
            Err(refused) => {
                self.recvs.remove(id);
                Err(refused)
            }
        }
    }

    /// A new receive slot for `buf`, posted and waiting; returns its id.
    pub(crate) fn post_slot(&mut self, buf: Buf) -> u64 {
        let id = self.next_id();
        self.recvs.insert(
            id,
            RecvSlot {
                buf,
                phase: Phase::Posted,
            },
        );
        id
    }

    /// The fast path of a blocking receive: takes the earliest queued message these
    /// selectors accept if it is eager and at most `cap` bytes long. `Err` (nothing taken)
    /// when it is longer; `Ok(None)` when there is none, or it is a rendezvous message (the
    /// caller posts a receive then).
    pub(crate) fn take_eager(
        &mut self,
        src: Source,
        tag: TagSel,
        cap: usize,
    ) -> Result<Option<Taken>, (usize, u64, usize)> {
        let Some(at) = self.matcher.locate(src, tag) else {
            return Ok(None);
        };
        match self.matcher.peek(at) {
            (s, t, Item::Eager(v)) if v.len() > cap => return Err((s, t, v.len())),
            (_, _, Item::Eager(_)) => {}
            _ => return Ok(None),
        }
        let (s, t, Item::Eager(data), credit) = self.take_found(at) else {
            unreachable!("the message peeked at above");
        };
        Ok(Some(Taken {
            src: s,
            tag: t,
            data,
            credit,
        }))
    }

    /// What the receives pulling a rendezvous message ask for now: up to `depth` chunks of
    /// `chunk` bytes each in flight, or one direct read of at most [`DIRECT_PIECE`] bytes at a
    /// time.
    pub(crate) fn pulls(&mut self, depth: usize, chunk: usize) -> Vec<Pull> {
        let mut out = Vec::new();
        let recvs = &mut self.recvs;
        self.pulling.retain(|&id| {
            let Some(slot) = recvs.get_mut(id) else {
                return false;
            };
            let Phase::Pulling {
                src,
                len,
                remote,
                direct,
                next,
                inflight,
                ..
            } = &mut slot.phase
            else {
                return false;
            };
            if *len == 0 {
                out.push(Pull::Ask([*src as u64, *remote, 0, 0, id]));
                *inflight += 1;
                return false;
            }
            if let Some(from) = *direct {
                if *inflight == 0 && *next < *len {
                    let n = DIRECT_PIECE.min(*len - *next);
                    out.push(Pull::Read(DirectRead {
                        id,
                        src: *src,
                        remote: *remote,
                        from,
                        offset: *next,
                        len: n,
                        into: slot.buf.ptr_at(*next, n),
                    }));
                    *next += n;
                    *inflight = 1;
                }
                return *next < *len;
            }
            while *next < *len && *inflight < depth {
                let n = chunk.min(*len - *next);
                out.push(Pull::Ask([
                    *src as u64,
                    *remote,
                    *next as u64,
                    n as u64,
                    id,
                ]));
                *next += n;
                *inflight += 1;
            }
            *next < *len
        });
        out
    }

    /// A direct read of `read` ended: its bytes are in (`ok`), or the read was refused, and
    /// the receive pulls the rest of the message by Active Messages from the piece's offset
    /// on; so does every later rendezvous message (direct reads stay off for this rank).
    pub(crate) fn read_done(&mut self, read: &DirectRead, ok: bool) {
        if !ok {
            self.direct_reads = false;
        }
        let Some(slot) = self.recvs.get_mut(read.id) else {
            return;
        };
        let Phase::Pulling {
            src,
            tag,
            len,
            direct,
            next,
            received,
            inflight,
            ..
        } = &mut slot.phase
        else {
            return;
        };
        *inflight -= 1;
        if ok {
            if self.checked_pids.len() <= read.src {
                self.checked_pids.resize(read.src + 1, 0);
            }
            self.checked_pids[read.src] = read.from.pid;
            *received += read.len;
            self.direct_bytes += read.len as u64;
            if *received == *len {
                slot.phase = Phase::Done {
                    src: *src,
                    tag: *tag,
                    len: *len,
                };
            }
        } else {
            *direct = None;
            *next = read.offset;
            if !self.pulling.contains(&read.id) {
                self.pulling.push(read.id);
            }
        }
        self.note();
    }

    /// Whether a direct read from `src` has already found `pid` to be that rank's process.
    pub(crate) fn pid_checked(&self, src: usize, pid: i32) -> bool {
        self.checked_pids.get(src) == Some(&pid)
    }

    /// The receiver has `n` more bytes of send `id` (pulled, or read directly): once it has
    /// all, the send is done, and its slot goes if its request was dropped.
    pub(crate) fn sent_to_receiver(&mut self, id: u64, n: usize) {
        if let Some(slot) = self.sends.get_mut(id) {
            slot.sent += n;
            if slot.done() && slot.detached {
                self.sends.remove(id);
            }
        }
    }

    /// A pulled chunk arrived for receive `id`.
    pub(crate) fn chunk_arrived(&mut self, id: u64, offset: usize, data: &[u8]) {
        let Some(slot) = self.recvs.get_mut(id) else {
            return;
        };
        let Phase::Pulling {
            src,
            tag,
            len,
            received,
            inflight,
            ..
        } = &mut slot.phase
        else {
            return;
        };
        let (src, tag, len) = (*src, *tag, *len);
        *received += data.len();
        *inflight -= 1;
        let done = *received == len && *inflight == 0;
        slot.buf.write(offset, data);
        if done {
            slot.phase = Phase::Done { src, tag, len };
        }
        self.note();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_thread_mode_refuses_a_second_hold_and_allows_the_next() {
        let shared = Shared::new();
        shared.set_one_thread();
        let first = shared.lock();
        let again = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            drop(shared.lock());
        }));
        assert!(
            again.is_err(),
            "a second hold by the one thread must be refused"
        );
        drop(first);
        let mut st = shared.lock();
        assert_eq!(st.next_id(), 1);
        drop(st);
        assert_eq!(shared.lock().next_id(), 2);
    }

    #[test]
    fn the_lock_serializes_a_handler_thread_and_the_program_thread() {
        let shared = Shared::new();
        let n = 100_000;
        let other = {
            let shared = shared.clone();
            std::thread::spawn(move || {
                for _ in 0..n {
                    shared.lock().next_id();
                }
            })
        };
        for _ in 0..n {
            shared.lock().next_id();
        }
        other.join().unwrap();
        // Ids start at 1: after 2n taken, the next is 2n + 1 (none lost to a race).
        assert_eq!(shared.lock().next_id(), 2 * n + 1);
    }

    fn state(share: usize) -> State {
        let shared = Shared::new();
        let mut st = std::sync::Arc::try_unwrap(shared.0)
            .expect("one handle")
            .mutex
            .into_inner();
        st.limits = Some(Limits {
            eager: share / 2 - ENVELOPE_BYTES,
            share,
            return_at: share / 4,
        });
        st
    }

    fn post_user(st: &mut State, buf: &mut [u8], src: Source, tag: TagSel) -> u64 {
        let id = st.next_id();
        let user = Buf::User(UserBuf {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
        });
        st.recvs.insert(
            id,
            RecvSlot {
                buf: user,
                phase: Phase::Posted,
            },
        );
        assert!(st.take_or_post(id, src, tag).unwrap().is_none());
        id
    }

    #[test]
    fn a_message_too_long_for_the_posted_buffer_goes_on_whole() {
        let mut st = state(4096);
        let mut small = [0u8; 4];
        let mut big = [0u8; 16];
        let a = post_user(&mut st, &mut small, Source::Rank(1), TagSel::Any);
        let b = post_user(&mut st, &mut big, Source::Any, TagSel::Tag(7));
        // 10 bytes: refused by the first receive, taken by the second.
        st.arrive_eager(1, 7, &[9; 10]);
        assert_eq!(
            st.recvs.get(a).unwrap().phase,
            Phase::TooSmall {
                src: 1,
                tag: 7,
                len: 10
            }
        );
        assert_eq!(
            st.recvs.get(b).unwrap().phase,
            Phase::Done {
                src: 1,
                tag: 7,
                len: 10
            }
        );
        st.recvs.remove(a);
        st.recvs.remove(b);
        assert_eq!(&big[..10], &[9; 10]);
        // No receive left: the next one is queued, and a small buffer is refused without
        // taking it.
        st.arrive_eager(1, 7, &[5; 10]);
        let c = st.next_id();
        st.recvs.insert(
            c,
            RecvSlot {
                buf: Buf::User(UserBuf {
                    ptr: small.as_mut_ptr(),
                    cap: small.len(),
                }),
                phase: Phase::Posted,
            },
        );
        assert_eq!(
            st.take_or_post(c, Source::Any, TagSel::Any),
            Err((1, 7, 10))
        );
        assert_eq!(st.matcher.unexpected_len(), 1);
        assert_eq!(st.unexpected_bytes, 10 + ENVELOPE_BYTES);
    }

    #[test]
    fn a_blocking_receive_copies_a_queued_message_refuses_a_long_one_or_posts() {
        let mut st = state(4096);
        let mut buf = [0u8; 8];
        let user = |b: &mut [u8]| UserBuf {
            ptr: b.as_mut_ptr(),
            cap: b.len(),
        };
        st.arrive_eager(2, 5, &[3; 6]);
        st.arrive_eager(2, 5, &[4; 9]);
        match st.begin_into(Source::Any, TagSel::Tag(5), user(&mut buf)) {
            Ok(Begun::Done {
                src: 2,
                tag: 5,
                len: 6,
                ..
            }) => {}
            other => panic!("the first queued message, copied: got {other:?}"),
        }
        assert_eq!(buf[..6], [3; 6]);
        // 9 bytes do not fit 8: refused, still queued.
        assert_eq!(
            st.begin_into(Source::Rank(2), TagSel::Any, user(&mut buf))
                .unwrap_err(),
            (2, 5, 9)
        );
        assert_eq!(st.matcher.unexpected_len(), 1);
        // Nothing from rank 1: posted; the next arrival from it lands in the buffer.
        let Ok(Begun::Posted { id, credit: None }) =
            st.begin_into(Source::Rank(1), TagSel::Any, user(&mut buf))
        else {
            panic!("a receive with nothing queued is posted");
        };
        st.arrive_eager(1, 9, &[7; 8]);
        assert_eq!(
            st.recvs.remove(id).unwrap().phase,
            Phase::Done {
                src: 1,
                tag: 9,
                len: 8
            }
        );
        assert_eq!(buf, [7; 8]);
    }

    #[test]
    fn credit_comes_back_in_batches_and_never_past_the_share() {
        let share = 1024;
        let mut st = state(share);
        // Sender side: reservations stop at the share.
        let cost = 100 + ENVELOPE_BYTES;
        let fits = share / cost;
        for _ in 0..fits {
            st.reserve(3, cost, share).unwrap();
        }
        assert_eq!(st.reserve(3, cost, share), Err(fits * cost));
        st.release(3, cost);
        assert!(st.reserve(3, cost, share).is_ok());
        // Receiver side: freed bytes gather until a quarter of the share.
        let mut returned = 0;
        for _ in 0..fits {
            st.arrive_eager(2, 0, &[0; 100]);
        }
        for _ in 0..fits {
            let got = st.take_eager(Source::Rank(2), TagSel::Any, 100).unwrap();
            if let Some((to, n)) = got.and_then(|t| t.credit) {
                assert_eq!(to, 2);
                assert!(n as usize >= share / 4);
                returned += n as usize;
            }
        }
        let owed = st.owed[2];
        assert!(owed < share / 4);
        assert_eq!(returned + owed, fits * cost);
        assert_eq!(st.unexpected_bytes, 0);
    }

    const KEYED: Direct = Direct {
        pid: 1,
        addr: 64,
        key_addr: 8,
        key: 1,
    };

    /// (offset, length) of each direct read and of each pull, in that order.
    type Asked = (Vec<(usize, usize)>, Vec<(u64, u64)>);

    /// The pieces a receive asks for: direct reads one at a time, or pulls `depth` deep.
    fn asked(st: &mut State) -> Asked {
        let (mut reads, mut asks) = (Vec::new(), Vec::new());
        for p in st.pulls(4, 1000) {
            match p {
                Pull::Read(r) => reads.push((r.offset, r.len)),
                Pull::Ask([_, _, offset, len, _]) => asks.push((offset, len)),
            }
        }
        (reads, asks)
    }

    #[test]
    fn a_rendezvous_offered_for_direct_reads_is_read_a_piece_at_a_time() {
        let mut st = state(4096);
        st.direct_reads = true;
        let len = 2 * DIRECT_PIECE + 5;
        let mut buf = vec![0u8; len];
        let id = post_user(&mut st, &mut buf, Source::Rank(1), TagSel::Tag(3));
        let from = Direct {
            pid: 42,
            addr: 0x1000,
            key_addr: 8,
            key: 1,
        };
        st.arrive_rendezvous(1, 3, len, 77, Some(from));
        for (k, n) in [DIRECT_PIECE, DIRECT_PIECE, 5].into_iter().enumerate() {
            let pulls = st.pulls(4, 1000);
            let [Pull::Read(r)] = &pulls[..] else {
                panic!("piece {k}: one direct read, got {pulls:?}");
            };
            assert_eq!(
                (r.offset, r.len, r.remote, r.from),
                (k * DIRECT_PIECE, n, 77, from)
            );
            assert_eq!(r.into, buf[k * DIRECT_PIECE..].as_mut_ptr());
            // Nothing more until this piece is in.
            assert_eq!(asked(&mut st), (vec![], vec![]), "piece {k} in flight");
            st.read_done(r, true);
        }
        assert_eq!(
            st.recvs.get(id).unwrap().phase,
            Phase::Done {
                src: 1,
                tag: 3,
                len
            }
        );
        assert_eq!(st.direct_bytes, len as u64);
        assert!(st.pid_checked(1, 42) && !st.pid_checked(1, 43) && !st.pid_checked(2, 42));
    }

    #[test]
    fn a_refused_direct_read_pulls_the_rest_and_turns_direct_reads_off() {
        let mut st = state(4096);
        st.direct_reads = true;
        let len = DIRECT_PIECE + 2500;
        let mut buf = vec![0u8; len];
        let id = post_user(&mut st, &mut buf, Source::Any, TagSel::Any);
        st.arrive_rendezvous(2, 9, len, 5, Some(KEYED));
        let pulls = st.pulls(4, 1000);
        let [Pull::Read(first)] = &pulls[..] else {
            panic!("a direct read first, got {pulls:?}");
        };
        st.read_done(first, true);
        let pulls = st.pulls(4, 1000);
        let [Pull::Read(second)] = &pulls[..] else {
            panic!("then the second piece, got {pulls:?}");
        };
        st.read_done(second, false);
        assert!(!st.direct_reads);
        // The rest is pulled from the refused piece's offset, in 1000-byte chunks.
        let d = DIRECT_PIECE as u64;
        assert_eq!(
            asked(&mut st),
            (vec![], vec![(d, 1000), (d + 1000, 1000), (d + 2000, 500)])
        );
        for (offset, n) in [(d, 1000), (d + 1000, 1000), (d + 2000, 500)] {
            st.chunk_arrived(id, offset as usize, &vec![1; n]);
        }
        assert_eq!(
            st.recvs.get(id).unwrap().phase,
            Phase::Done {
                src: 2,
                tag: 9,
                len
            }
        );
        // A later message offered for direct reads is pulled.
        let mut other = vec![0u8; 1500];
        post_user(&mut st, &mut other, Source::Any, TagSel::Any);
        st.arrive_rendezvous(2, 9, 1500, 6, Some(KEYED));
        assert_eq!(asked(&mut st), (vec![], vec![(0, 1000), (1000, 500)]));
    }

    #[test]
    fn without_direct_reads_or_an_offer_a_rendezvous_is_pulled() {
        for (on, offer) in [(false, true), (true, false)] {
            let mut st = state(4096);
            st.direct_reads = on;
            let mut buf = vec![0u8; 2000];
            post_user(&mut st, &mut buf, Source::Any, TagSel::Any);
            let direct = offer.then_some(KEYED);
            st.arrive_rendezvous(1, 0, 2000, 1, direct);
            assert_eq!(asked(&mut st), (vec![], vec![(0, 1000), (1000, 1000)]));
        }
    }

    #[test]
    fn a_send_is_done_once_the_receiver_has_every_byte() {
        let mut st = state(4096);
        let data = vec![5u8; 300];
        let id = st.next_id();
        st.sends.insert(
            id,
            SendSlot {
                bytes: Arc::new(SendBytes::borrowed(&data)),
                sent: 0,
                detached: true,
            },
        );
        st.sent_to_receiver(id, 200);
        assert!(st.sends.get(id).is_some_and(|s| !s.done()));
        // Detached and done: the slot goes.
        st.sent_to_receiver(id, 100);
        assert!(st.sends.get(id).is_none());
    }
}
