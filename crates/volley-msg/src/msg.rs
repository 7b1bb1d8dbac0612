//! The entry points: [`MsgSetup`] (registered in the runtime builder) and [`Msg`] (sends,
//! receives and probes of one built runtime).

use crate::config::{Limits, MsgConfig, DEFAULT_PULL_DEPTH, ENVELOPE_BYTES, WORDS_EAGER_BYTES};
use crate::error::{MsgError, Result};
use crate::handlers::{self, Handlers};
use crate::matching::{Source, TagSel};
use crate::request::{RecvRequest, SendRequest};
use crate::state::{
    Begun, Buf, Direct, DirectRead, Phase, Pull, RecvSlot, SendBytes, SendSlot, Shared, Taken,
    UserBuf,
};
use crate::MAX_TAG;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use volley::{Runtime, RuntimeBuilder};

/// The layer's part of a runtime under construction: [`Msg::register`] it in the builder
/// (every rank, at the same place), then [`MsgSetup::attach`] it to the built runtime.
#[derive(Debug)]
pub struct MsgSetup {
    shared: Shared,
    h: Handlers,
    config: MsgConfig,
}

/// A message's envelope: who sent it, its tag and its length.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    /// The sender.
    pub src: usize,
    /// The tag.
    pub tag: u64,
    /// Payload bytes.
    pub len: usize,
}

/// A received message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// The sender.
    pub src: usize,
    /// The tag.
    pub tag: u64,
    /// The payload.
    pub data: Vec<u8>,
}

/// Tag-matching send and receive over one runtime. Not `Sync`: the rank's thread drives it,
/// as it drives the runtime.
#[derive(Debug)]
pub struct Msg<'rt> {
    pub(crate) rt: &'rt Runtime,
    pub(crate) shared: Shared,
    h: Handlers,
    limits: Limits,
    /// [`crate::state::State::events`], read without the lock by waiting receives.
    events: Arc<AtomicU64>,
    /// Whether this rank offers its rendezvous sends to direct reads by receivers on its node.
    single_copy: bool,
}

impl Msg<'static> {
    /// Registers the layer in `b` with the settings of `VOLLEY_MSG_*` (defaults otherwise).
    pub fn register(b: &mut RuntimeBuilder) -> Result<MsgSetup> {
        Ok(Self::register_with(b, MsgConfig::from_env()?))
    }

    /// Registers the layer with explicit settings. Every rank must pass the same: they are
    /// part of the handler table, so ranks that differ fail at `build`.
    pub fn register_with(b: &mut RuntimeBuilder, config: MsgConfig) -> MsgSetup {
        b.settings(crate::config::SETTINGS);
        b.request_handler(
            &format!(
                "volley.msg.config:eager={},unexpected={}",
                config.eager_bytes, config.unexpected_bytes
            ),
            |_, _| {},
        );
        let shared = Shared::new();
        let h = handlers::register(b, &shared);
        MsgSetup { shared, h, config }
    }
}

impl MsgSetup {
    /// Binds the layer to the built runtime.
    pub fn attach(self, rt: &Runtime) -> Result<Msg<'_>> {
        let limits = self.config.limits(rt.size(), rt.max_medium())?;
        self.shared.one_thread(rt);
        {
            let mut st = self.shared.lock();
            st.limits = Some(limits);
            st.direct_reads = self.config.single_copy;
        }
        Ok(Msg {
            rt,
            events: self.shared.events(),
            shared: self.shared,
            h: self.h,
            limits,
            single_copy: self.config.single_copy,
        })
    }
}

/// Removes a blocking call's slot however the call ends (a panic in a handler it ran, say),
/// so that no handler touches the caller's buffer after the call returns.
struct SlotGuard<'a> {
    msg: &'a Msg<'a>,
    id: u64,
    send: bool,
    /// Cleared once the call has removed the slot itself.
    armed: Cell<bool>,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        if !self.armed.get() {
            return;
        }
        if self.send {
            // In a critical section: a handler reading a send's bytes outside the lock (on
            // the progress thread) has finished before the slot goes.
            self.msg.rt.critical(|| {
                self.msg.shared.lock().sends.remove(self.id);
            });
        } else {
            // Handlers write a receive's buffer under the lock only: removing the slot under
            // it is enough.
            let mut st = self.msg.shared.lock();
            if st.recvs.remove(self.id).is_some() {
                st.matcher.cancel(|&p| p == self.id);
            }
        }
    }
}

impl<'rt> Msg<'rt> {
    /// The runtime underneath.
    pub fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// The largest payload sent eagerly in this job (larger ones go by rendezvous).
    pub fn eager_limit(&self) -> usize {
        self.limits.eager
    }

    /// Bytes of each receiver's unexpected queue this rank may fill.
    pub fn unexpected_share(&self) -> usize {
        self.limits.share
    }

    /// Bytes of `dest`'s unexpected queue this rank may still fill (each message counts its
    /// payload plus [`crate::ENVELOPE_BYTES`]; a rendezvous one the envelope alone).
    pub fn room(&self, dest: usize) -> usize {
        let used = self.shared.lock().used.get(dest).copied().unwrap_or(0);
        self.limits.share.saturating_sub(used)
    }

    /// Messages in this rank's unexpected queue, and the bytes they take.
    pub fn unexpected(&self) -> (usize, usize) {
        let st = self.shared.lock();
        (st.matcher.unexpected_len(), st.unexpected_bytes)
    }

    fn live(&self) -> Result<()> {
        if self.rt.is_finalized() {
            return Err(MsgError::Finalized);
        }
        Ok(())
    }

    fn check_dest(&self, dest: usize, tag: u64) -> Result<()> {
        self.live()?;
        if dest >= self.rt.size() {
            return Err(MsgError::InvalidRank {
                rank: dest,
                size: self.rt.size(),
            });
        }
        if tag > MAX_TAG {
            return Err(MsgError::TagOutOfRange { tag, max: MAX_TAG });
        }
        Ok(())
    }

    fn check_selectors(&self, src: Source, tag: TagSel) -> Result<()> {
        self.live()?;
        if let Source::Rank(r) = src {
            if r >= self.rt.size() {
                return Err(MsgError::InvalidRank {
                    rank: r,
                    size: self.rt.size(),
                });
            }
        }
        if let TagSel::Tag(t) = tag {
            if t > MAX_TAG {
                return Err(MsgError::TagOutOfRange {
                    tag: t,
                    max: MAX_TAG,
                });
            }
        }
        Ok(())
    }

    /// Whether a payload of `len` bytes goes eagerly (an empty one always does: there is
    /// nothing to pull).
    fn is_eager(&self, len: usize) -> bool {
        len <= self.limits.eager || len == 0
    }

    /// Takes `cost` bytes of `dest`'s share; `wait`: poll until the receiver frees room.
    fn reserve(&self, dest: usize, cost: usize, wait: bool) -> Result<()> {
        let share = self.limits.share;
        let refused = match self.shared.lock().reserve(dest, cost, share) {
            Ok(()) => return Ok(()),
            Err(in_use) => in_use,
        };
        if !wait {
            return Err(MsgError::UnexpectedFull {
                dest,
                share,
                in_use: refused,
                need: cost,
            });
        }
        self.rt
            .wait_until(|| self.shared.lock().reserve(dest, cost, share).is_ok());
        self.live()
    }

    fn send_eager(&self, dest: usize, tag: u64, data: &[u8], wait: bool) -> Result<()> {
        let cost = data.len() + ENVELOPE_BYTES;
        self.reserve(dest, cost, wait)?;
        let sent = if data.len() <= WORDS_EAGER_BYTES {
            let mut args = [0; volley::MAX_ARGS];
            let n = handlers::pack_words(tag, data, &mut args);
            self.rt.request_short(dest, self.h.eager_words, &args[..n])
        } else {
            self.rt.request_medium(dest, self.h.eager, &[tag], data)
        };
        sent.inspect_err(|_| self.shared.lock().release(dest, cost))?;
        Ok(())
    }

    /// Announces a rendezvous send whose bytes, at `addr`, are in slot `id`; to a rank on
    /// this node, with this process's id, so that the receiver may read them directly.
    fn announce(&self, dest: usize, tag: u64, len: usize, id: u64, addr: *const u8) -> Result<()> {
        let pid = match self.single_copy && self.rt.is_local(dest) {
            true => u64::from(std::process::id()),
            false => 0,
        };
        let key = process_key();
        let key_addr = key as *const AtomicU64 as u64;
        let key = key.load(Ordering::Relaxed);
        self.rt
            .request_short(
                dest,
                self.h.rts,
                &[tag, len as u64, id, addr as u64, pid, key_addr, key],
            )
            .inspect_err(|_| {
                let mut st = self.shared.lock();
                st.release(dest, ENVELOPE_BYTES);
                st.sends.remove(id);
            })?;
        Ok(())
    }

    /// Sends `data` to `dest` with `tag` and returns once `data` may be reused: at once for
    /// an eager message, once the receiver has pulled it for a rendezvous one. When this
    /// rank's share of `dest`'s unexpected queue is full, it waits (polling) for `dest` to
    /// receive; that is the layer's back-pressure.
    pub fn send(&self, dest: usize, tag: u64, data: &[u8]) -> Result<()> {
        self.check_dest(dest, tag)?;
        if self.is_eager(data.len()) {
            return self.send_eager(dest, tag, data, true);
        }
        self.reserve(dest, ENVELOPE_BYTES, true)?;
        let id = {
            let mut st = self.shared.lock();
            let id = st.next_id();
            st.sends.insert(
                id,
                SendSlot {
                    bytes: Arc::new(SendBytes::borrowed(data)),
                    sent: 0,
                    detached: false,
                },
            );
            id
        };
        let _guard = SlotGuard {
            msg: self,
            id,
            send: true,
            armed: Cell::new(true),
        };
        self.announce(dest, tag, data.len(), id, data.as_ptr())?;
        self.wait_send(id);
        self.live()
    }

    pub(crate) fn wait_send(&self, id: u64) {
        // Pumping too: this rank's own rendezvous receives may be what the receiver of this
        // send waits for.
        self.rt.wait_until(|| {
            self.pump();
            self.shared.lock().sends.get(id).is_none_or(|s| s.done())
        });
    }

    /// Starts sending `data` to `dest` with `tag`; the request gives the vector back when the
    /// send completes. It never waits: when this rank's share of `dest`'s unexpected queue
    /// has no room for the message, it fails with [`MsgError::UnexpectedFull`] and nothing is
    /// sent.
    pub fn isend(&self, dest: usize, tag: u64, data: Vec<u8>) -> Result<SendRequest<'_>> {
        self.check_dest(dest, tag)?;
        if self.is_eager(data.len()) {
            self.send_eager(dest, tag, &data, false)?;
            return Ok(SendRequest::done(self, data));
        }
        self.reserve(dest, ENVELOPE_BYTES, false)?;
        let (len, addr) = (data.len(), data.as_ptr());
        let id = {
            let mut st = self.shared.lock();
            let id = st.next_id();
            st.sends.insert(
                id,
                SendSlot {
                    bytes: Arc::new(SendBytes::owned(data)),
                    sent: 0,
                    detached: false,
                },
            );
            id
        };
        self.announce(dest, tag, len, id, addr)?;
        Ok(SendRequest::pending(self, id))
    }

    /// Receives the earliest message (per sender, in send order) from `src` with `tag`,
    /// either of which may be a wildcard ([`crate::ANY_SOURCE`], [`crate::ANY_TAG`]).
    pub fn recv(&self, src: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Received> {
        let (src, tag) = (src.into(), tag.into());
        self.check_selectors(src, tag)?;
        if let Some(t) = self.take_queued(src, tag, usize::MAX)? {
            return Ok(Received {
                src: t.src,
                tag: t.tag,
                data: t.data,
            });
        }
        self.irecv(src, tag)?.wait()
    }

    /// A queued eager message for a blocking receive, if there is one: no slot, no wait.
    fn take_queued(&self, src: Source, tag: TagSel, cap: usize) -> Result<Option<Taken>> {
        let taken = self.shared.lock().take_eager(src, tag, cap);
        match taken {
            Err((src, tag, len)) => Err(MsgError::BufferTooSmall {
                src,
                tag,
                len,
                capacity: cap,
            }),
            Ok(Some(t)) => {
                if let Some((to, n)) = t.credit {
                    self.rt.request_short(to, self.h.credit, &[n])?;
                }
                Ok(Some(t))
            }
            Ok(None) => Ok(None),
        }
    }

    /// Receives into `buf` (see [`Msg::recv`]); returns the envelope. A message longer than
    /// `buf` is refused with [`MsgError::BufferTooSmall`] and stays queued, whole.
    pub fn recv_into(
        &self,
        src: impl Into<Source>,
        tag: impl Into<TagSel>,
        buf: &mut [u8],
    ) -> Result<Status> {
        let (src, tag) = (src.into(), tag.into());
        self.check_selectors(src, tag)?;
        let user = UserBuf {
            ptr: buf.as_mut_ptr(),
            cap: buf.len(),
        };
        // One hold of the state takes a queued message or posts the receive.
        let begun = self.shared.lock().begin_into(src, tag, user);
        let (id, credit) = match begun {
            Err((src, tag, len)) => {
                return Err(MsgError::BufferTooSmall {
                    src,
                    tag,
                    len,
                    capacity: buf.len(),
                })
            }
            Ok(Begun::Done {
                src,
                tag,
                len,
                credit,
            }) => {
                self.give_credit(credit)?;
                return Ok(Status { src, tag, len });
            }
            Ok(Begun::Posted { id, credit }) => (id, credit),
        };
        let guard = SlotGuard {
            msg: self,
            id,
            send: false,
            armed: Cell::new(true),
        };
        self.give_credit(credit)?;
        let slot = self.wait_take(id);
        if slot.is_some() {
            // Taken out by the wait: the guard has nothing left to do.
            guard.armed.set(false);
        }
        match slot.map(|s| s.phase) {
            Some(Phase::Done { src, tag, len }) => Ok(Status { src, tag, len }),
            Some(Phase::TooSmall { src, tag, len }) => Err(MsgError::BufferTooSmall {
                src,
                tag,
                len,
                capacity: buf.len(),
            }),
            _ => Err(MsgError::Finalized),
        }
    }

    /// Returns the credit a receive freed, if a batch has gathered.
    fn give_credit(&self, credit: Option<(usize, u64)>) -> Result<()> {
        if let Some((to, n)) = credit {
            self.rt.request_short(to, self.h.credit, &[n])?;
        }
        Ok(())
    }

    /// Posts a receive: `Ok(id)` of its slot, which may already be complete.
    fn post(&self, src: Source, tag: TagSel, buf: Buf) -> Result<u64> {
        let cap = match &buf {
            Buf::User(u) => u.cap,
            Buf::Owned(_) => usize::MAX,
        };
        let (id, taken) = {
            let mut st = self.shared.lock();
            let id = st.post_slot(buf);
            let taken = st.take_or_post(id, src, tag);
            if taken.is_err() {
                st.recvs.remove(id);
            }
            (id, taken)
        };
        match taken {
            Err((src, tag, len)) => Err(MsgError::BufferTooSmall {
                src,
                tag,
                len,
                capacity: cap,
            }),
            Ok(credit) => {
                if let Some((to, n)) = credit {
                    self.rt.request_short(to, self.h.credit, &[n])?;
                }
                Ok(id)
            }
        }
    }

    /// Starts a receive (see [`Msg::recv`]); the request returns the message.
    pub fn irecv(&self, src: impl Into<Source>, tag: impl Into<TagSel>) -> Result<RecvRequest<'_>> {
        let (src, tag) = (src.into(), tag.into());
        self.check_selectors(src, tag)?;
        let id = self.post(src, tag, Buf::Owned(Vec::new()))?;
        Ok(RecvRequest::new(self, id))
    }

    /// Sends the pulls rendezvous receives are due (a receive's chunks are asked for here,
    /// from the program's thread, since handlers cannot send requests), and makes the direct
    /// reads they are due.
    pub(crate) fn pump(&self) {
        let pulls = self
            .shared
            .lock()
            .pulls(DEFAULT_PULL_DEPTH, self.rt.max_medium());
        for pull in pulls {
            // The sends fail only once the job is going down (finalized or a peer gone),
            // which the waits report.
            match pull {
                Pull::Ask([src, remote, offset, len, id]) => {
                    let _ = self.rt.request_short(
                        src as usize,
                        self.h.pull,
                        &[remote, offset, len, id],
                    );
                }
                Pull::Read(read) => {
                    let known = self.shared.lock().pid_checked(read.src, read.from.pid);
                    let ok = (known || key_matches(&read.from)) && read_direct(&read).is_ok();
                    self.shared.lock().read_done(&read, ok);
                    if ok {
                        let _ = self.rt.request_short(
                            read.src,
                            self.h.pulled,
                            &[read.remote, read.len as u64],
                        );
                    }
                }
            }
        }
    }

    /// Bytes this rank has received by reading rendezvous messages straight from their
    /// senders' memory (between processes of one node; see `VOLLEY_MSG_SINGLE_COPY`).
    pub fn single_copy_bytes(&self) -> u64 {
        self.shared.lock().direct_bytes
    }

    /// Whether receive `id` has finished (complete, or refused as too small).
    pub(crate) fn recv_finished(&self, id: u64) -> bool {
        let has_pulls = {
            let st = self.shared.lock();
            match st.recvs.get(id).map(|s| s.phase) {
                Some(Phase::Done { .. } | Phase::TooSmall { .. }) | None => return true,
                _ => !st.pulling.is_empty(),
            }
        };
        if has_pulls {
            self.pump();
        }
        false
    }

    /// Waits until receive `id` has finished and takes its slot out, in the same hold of the
    /// lock that sees it finished; `None` if the runtime was finalized first (or the slot is
    /// gone).
    pub(crate) fn wait_take(&self, id: u64) -> Option<RecvSlot> {
        let check = |taken: &mut Option<RecvSlot>| -> bool {
            let pump = {
                let mut st = self.shared.lock();
                match st.recvs.get(id).map(|s| s.phase) {
                    Some(Phase::Done { .. } | Phase::TooSmall { .. }) => {
                        *taken = st.recvs.remove(id);
                        return true;
                    }
                    None => return true,
                    _ => !st.pulling.is_empty(),
                }
            };
            if pump {
                self.pump();
            }
            false
        };
        let mut taken = None;
        let mut seen = self.events.load(Ordering::Acquire);
        if check(&mut taken) {
            return taken;
        }
        self.rt.wait_until(|| {
            // The lock only when a handler noted something: polling is then a load.
            let now = self.events.load(Ordering::Acquire);
            if now == seen {
                return self.rt.is_finalized();
            }
            seen = now;
            check(&mut taken) || self.rt.is_finalized()
        });
        taken
    }

    pub(crate) fn wait_recv(&self, id: u64) {
        let mut seen = self.events.load(Ordering::Acquire);
        if self.recv_finished(id) {
            return;
        }
        self.rt.wait_until(|| {
            // The lock only when a handler noted something: polling is then a load.
            let now = self.events.load(Ordering::Acquire);
            if now == seen {
                return self.rt.is_finalized();
            }
            seen = now;
            self.rt.is_finalized() || self.recv_finished(id)
        });
    }

    /// The envelope of the earliest queued message from `src` with `tag`, left queued; `None`
    /// if there is none yet (after one poll).
    pub fn iprobe(&self, src: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Option<Status>> {
        let (src, tag) = (src.into(), tag.into());
        self.check_selectors(src, tag)?;
        self.rt.poll();
        Ok(self.peek(src, tag))
    }

    fn peek(&self, src: Source, tag: TagSel) -> Option<Status> {
        self.shared
            .lock()
            .matcher
            .probe(src, tag)
            .map(|(src, tag, item)| Status {
                src,
                tag,
                len: item.len(),
            })
    }

    /// Waits until a message from `src` with `tag` is queued and returns its envelope,
    /// leaving it queued (size a buffer with it, then receive it).
    pub fn probe(&self, src: impl Into<Source>, tag: impl Into<TagSel>) -> Result<Status> {
        let (src, tag) = (src.into(), tag.into());
        self.check_selectors(src, tag)?;
        let mut found = None;
        self.rt.wait_until(|| {
            self.pump();
            found = self.peek(src, tag);
            found.is_some()
        });
        found.ok_or(MsgError::Finalized)
    }
}

/// This process's key: a random nonzero word that receivers on this node read from here
/// before their first direct read, to check that the process id they were given names this
/// process.
fn process_key() -> &'static AtomicU64 {
    static KEY: AtomicU64 = AtomicU64::new(0);
    if KEY.load(Ordering::Relaxed) == 0 {
        use std::hash::{BuildHasher, Hasher};
        let mut h = std::collections::hash_map::RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        // Any nonzero value serves: the first store wins, and a thread that loses the race
        // loads the winner's value after this.
        let _ = KEY.compare_exchange(0, h.finish() | 1, Ordering::Relaxed, Ordering::Relaxed);
    }
    &KEY
}

/// Whether the key word `from` names holds its key in the process `from` names.
fn key_matches(from: &Direct) -> bool {
    let mut word = [0u8; 8];
    let read = DirectRead {
        id: 0,
        src: 0,
        remote: 0,
        from: Direct {
            addr: from.key_addr,
            ..*from
        },
        offset: 0,
        len: 8,
        into: word.as_mut_ptr(),
    };
    read_direct(&read).is_ok() && u64::from_ne_bytes(word) == from.key
}

/// Copies a direct read's bytes from the sender's process into the receive's buffer.
fn read_direct(read: &DirectRead) -> std::result::Result<(), nix::errno::Errno> {
    use nix::sys::uio::{process_vm_readv, RemoteIoVec};
    use std::io::IoSliceMut;
    let mut done = 0;
    while done < read.len {
        // SAFETY: `read.into` names `read.len` bytes of the receive's buffer, which only this
        // thread writes while the read is in flight and which outlives it (see `DirectRead`).
        let into = unsafe { std::slice::from_raw_parts_mut(read.into.add(done), read.len - done) };
        let remote = [RemoteIoVec {
            base: read.from.addr as usize + read.offset + done,
            len: read.len - done,
        }];
        let pid = nix::unistd::Pid::from_raw(read.from.pid);
        match process_vm_readv(pid, &mut [IoSliceMut::new(into)], &remote)? {
            0 => return Err(nix::errno::Errno::EFAULT),
            n => done += n,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_of(pid: i32, src: &[u8], offset: usize, into: &mut [u8]) -> DirectRead {
        DirectRead {
            id: 1,
            src: 0,
            remote: 1,
            from: Direct {
                pid,
                addr: src.as_ptr() as u64,
                key_addr: 0,
                key: 0,
            },
            offset,
            len: into.len(),
            into: into.as_mut_ptr(),
        }
    }

    #[test]
    fn a_direct_read_copies_from_the_named_process_or_fails() {
        let src: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut into = vec![0u8; 100_000];
        let me = std::process::id() as i32;
        read_direct(&read_of(me, &src, 12_345, &mut into)).expect("a read of this process");
        assert_eq!(into, src[12_345..112_345]);
        // No such process: refused, not a crash (pid_max is at most 2^22).
        let gone = read_of(1 << 22, &src, 0, &mut into);
        assert!(read_direct(&gone).is_err());
        // An address that is not mapped there: refused.
        let mut bad = read_of(me, &src, 0, &mut into);
        bad.from.addr = 8;
        assert!(read_direct(&bad).is_err());
    }

    #[test]
    fn the_key_proves_the_process_before_a_direct_read() {
        let key = process_key();
        let value = key.load(Ordering::Relaxed);
        assert_ne!(value, 0);
        assert_eq!(
            process_key().load(Ordering::Relaxed),
            value,
            "the key stays"
        );
        let me = Direct {
            pid: std::process::id() as i32,
            addr: 0,
            key_addr: key as *const AtomicU64 as u64,
            key: value,
        };
        assert!(key_matches(&me));
        // Another value there, another process, or an address with no key: refused.
        assert!(!key_matches(&Direct {
            key: value ^ 1,
            ..me
        }));
        assert!(!key_matches(&Direct { pid: 1 << 22, ..me }));
        assert!(!key_matches(&Direct { key_addr: 8, ..me }));
    }
}
