//! Sends from a procedure's handler to any rank (seed 003's asynchronous Active Messages,
//! Fig. 3): one whole packet image per send, written under the destination's link, from the
//! program thread (which has every backend) or from the communication thread (mapped
//! destinations directly; others through the program thread, `handoff`: volley's one-sided
//! operations belong to the thread that drives the runtime).
//!
//! The link word is the one mutual exclusion every sender uses, so the program thread and
//! the communication thread of one rank never interleave inside a packet or a channel: the
//! communication thread takes the link with the same compare-and-swap as any other rank and
//! waits while a chain (this rank's own included) holds it.

use crate::config::{Handler, Notify};
use crate::counters::Counters;
use crate::error::{PrimError, Result};
use crate::handoff::{Handoff, Parcel};
use crate::ring::{header, RingPtr, CLOSE, DATA, PROC};
use crate::Info;
use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::Arc;

/// Marks a link word taken by a communication thread (the low bits hold the rank + 1), so a
/// dump of a buffer tells the two senders of one rank apart.
const COMM_OWNER: u64 = 1 << 32;

/// The thread running a handler, as a sender.
pub(crate) trait Outbound {
    /// Sends one whole packet image to `rank`; `payload` bytes count as sent.
    fn send_image(
        &mut self,
        rank: usize,
        words: &[u64],
        headers: &[usize],
        payload: usize,
    ) -> Result<()>;

    /// The handler table, to refuse unknown procedure ids at the sender.
    fn handlers(&self) -> &[Option<Handler>];

    /// This rank.
    fn me(&self) -> usize;
}

/// The image of one packet from `from`: a data packet, or a procedure packet whose `args`
/// follow it as a closed chain (the handler receives them), with its header indices.
pub(crate) fn image(
    from: usize,
    info: Info<'_>,
    args: &[u8],
    handlers: &[Option<Handler>],
) -> Result<(Vec<u64>, Vec<usize>, usize)> {
    let from = from as u64;
    match info {
        Info::Data(d) => {
            if !args.is_empty() {
                return Err(PrimError::Config(
                    "a data packet takes no procedure arguments".into(),
                ));
            }
            let len = u32::try_from(d.len()).map_err(|_| PrimError::TooLarge {
                bytes: d.len(),
                capacity: u32::MAX as usize,
            })?;
            Ok((
                crate::prim::data_image(header(DATA, from, false, len), d),
                vec![0],
                d.len(),
            ))
        }
        Info::Procedure(id) => {
            if id == 0 || id > crate::MAX_HANDLER_ID {
                return Err(PrimError::BadHandlerId(id));
            }
            if handlers.get(id as usize).is_none_or(|h| h.is_none()) {
                return Err(PrimError::UnknownHandler { id, from: None });
            }
            if args.is_empty() {
                return Ok((vec![header(PROC, from, false, id)], vec![0], 0));
            }
            let mut words = crate::prim::data_image(header(PROC, from, true, id), args);
            let last = words.len();
            words.push(header(CLOSE, from, false, 0));
            Ok((words, vec![0, last], args.len()))
        }
    }
}

/// The communication thread's sending side: its own view of every mapped buffer.
pub(crate) struct CommSender {
    me: usize,
    /// Every buffer's capacity (the same everywhere).
    cap: u64,
    /// Per rank: its mapped buffer and the head last read there (a lower bound: heads only
    /// grow), or `None` for a rank reached through volley's one-sided operations.
    links: Vec<Option<(RingPtr, u64)>>,
    notify: Notify,
    handlers: Arc<Vec<Option<Handler>>>,
    counters: Arc<Counters>,
    stop: Arc<AtomicBool>,
    /// Where sends to unmapped ranks wait for the program thread.
    handoff: Arc<Handoff>,
}

impl CommSender {
    pub(crate) fn new(
        me: usize,
        mapped: Vec<Option<RingPtr>>,
        notify: Notify,
        handlers: Arc<Vec<Option<Handler>>>,
        counters: Arc<Counters>,
        stop: Arc<AtomicBool>,
        handoff: Arc<Handoff>,
    ) -> Self {
        Self {
            me,
            cap: handoff.cap(),
            links: mapped.into_iter().map(|m| m.map(|p| (p, 0))).collect(),
            notify,
            handlers,
            counters,
            stop,
            handoff,
        }
    }

    /// Queues a packet for a rank on another node, for the program thread to send; waits
    /// while a buffer's worth for that rank already waits there.
    fn hand_off(
        &self,
        rank: usize,
        words: &[u64],
        headers: &[usize],
        payload: usize,
    ) -> Result<()> {
        let bytes = words.len() as u64 * 8;
        let mut spins = 0;
        while !self.handoff.has_room(rank, bytes) {
            if spins == 0 {
                Counters::add(&self.counters.full_stalls, 1);
            }
            self.pause(&mut spins)?;
        }
        self.handoff.push(Parcel {
            rank,
            words: words.to_vec(),
            headers: headers.to_vec(),
            payload,
        });
        Ok(())
    }

    /// Waits a little; fails once the layer is stopping, so a handler stuck on a rank that
    /// is gone does not hold up finalize.
    fn pause(&self, spins: &mut u32) -> Result<()> {
        if self.stop.load(Ordering::Acquire) {
            return Err(PrimError::Finalized);
        }
        *spins = spins.saturating_add(1);
        if *spins >= crate::prim::COMM_SPINS_BEFORE_YIELD {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
        Ok(())
    }
}

impl Outbound for CommSender {
    fn send_image(
        &mut self,
        rank: usize,
        words: &[u64],
        headers: &[usize],
        payload: usize,
    ) -> Result<()> {
        let size = self.links.len();
        let link = self
            .links
            .get(rank)
            .ok_or(PrimError::InvalidRank { rank, size })?;
        let bytes = words.len() as u64 * 8;
        if bytes > self.cap {
            return Err(PrimError::TooLarge {
                bytes: bytes as usize,
                capacity: self.cap as usize,
            });
        }
        let Some((p, mut head)) = *link else {
            return self.hand_off(rank, words, headers, payload);
        };
        let mut spins = 0;
        let owner = COMM_OWNER | (self.me as u64 + 1);
        while p
            .owner()
            .compare_exchange(0, owner, Ordering::Acquire, Ordering::Relaxed)
            .is_err()
        {
            if spins == 0 {
                Counters::add(&self.counters.held_back, 1);
            }
            self.pause(&mut spins)?;
        }
        let tail = p.tail().load(Ordering::Acquire);
        let mut spins = 0;
        // The cached head may be far behind (another sender moved the tail on meanwhile):
        // saturate, never wrap.
        let room = loop {
            if p.cap().saturating_sub(tail - head) >= bytes {
                break Ok(());
            }
            head = p.head().load(Ordering::Acquire);
            if p.cap().saturating_sub(tail - head) >= bytes {
                break Ok(());
            }
            if rank == self.me {
                // This thread drains that buffer: waiting would wait for itself.
                break Err(PrimError::OwnBufferFull);
            }
            if spins == 0 {
                Counters::add(&self.counters.full_stalls, 1);
            }
            if let Err(e) = self.pause(&mut spins) {
                break Err(e);
            }
        };
        if let Err(e) = room {
            p.owner().store(0, Ordering::Release);
            return Err(e);
        }
        self.links[rank] = Some((p, head));
        p.write_words(tail, words, headers);
        let new = tail + bytes;
        p.tail().store(new, Ordering::Release);
        crate::comm::wake(p, &self.counters);
        let raise = match self.notify {
            Notify::Never => false,
            Notify::Start | Notify::End => true,
            Notify::HalfFull => {
                let head = p.head().load(Ordering::Acquire);
                let half = p.cap() / 2;
                tail.saturating_sub(head) < half && new - head >= half
            }
        };
        if raise {
            // No program thread sleeps in `comm-thread` mode, the one mode with this thread,
            // so none asks for a message wake-up (a sleeping communication thread was rung
            // above).
            let _ = ring_bell(p, &self.counters);
        }
        p.owner().store(0, Ordering::Release);
        let c = &self.counters;
        if payload > 0 {
            Counters::add(&c.messages_sent, 1);
        }
        Counters::add(&c.bytes_sent, payload as u64);
        Counters::add(&c.ring_bytes_sent, bytes);
        Ok(())
    }

    fn handlers(&self) -> &[Option<Handler>] {
        &self.handlers
    }

    fn me(&self) -> usize {
        self.me
    }
}

/// Raises a notification at a mapped buffer: counts it and wakes a reader asleep on its
/// futex. Returns true if the reader sleeps in volley's kernel wait instead, which only a
/// message wakes: the caller sends one (the program thread can; no communication thread
/// runs in `interrupt` mode, the one mode that sleeps).
#[must_use]
pub(crate) fn ring_bell(p: RingPtr, counters: &Counters) -> bool {
    Counters::add(&counters.notifications_raised, 1);
    p.notified().fetch_add(1, Ordering::AcqRel);
    // Pairs with the sleeper's fence: either it sees our tail or we see it asleep.
    fence(Ordering::SeqCst);
    match p.sleeping().load(Ordering::Relaxed) {
        crate::prim::ON_FUTEX => {
            p.doorbell().fetch_add(1, Ordering::Release);
            crate::futex::wake(p.doorbell());
            Counters::add(&counters.syscalls, 1);
            false
        }
        crate::prim::IN_RUNTIME => true,
        _ => false,
    }
}
