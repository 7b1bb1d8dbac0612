//! The per-pair state machine: sequencing, acks, retransmission, flow control, reassembly.

use std::collections::{BTreeMap, VecDeque};
use std::ops::Range;
use std::sync::Arc;

use super::pool::BufferPool;
use super::replay::ReplayWindow;
use super::wire::{
    self, Fragment, Header, Kind, Record, Records, FIRST_OVERHEAD, HEADER_LEN, RECORD_OVERHEAD,
};
use super::{Config, ConfigError, DecodeError, Failure, SendError, State, Stats};
use crate::transport::net::placing::Placing;
use crate::transport::net::Placer;

/// A message queued by [`Peer::send`] (or [`Peer::send_lent`]), `offset` bytes of it already
/// packed into datagrams.
#[derive(Debug)]
struct Pending {
    bytes: Queued,
    /// The message's length.
    total: usize,
    offset: usize,
}

/// Where a queued message's bytes are.
#[derive(Debug)]
enum Queued {
    /// The whole message, copied in by [`Peer::send`].
    Owned(Vec<u8>),
    /// Shared with the datagrams of its fragments sent so far (it moved there at its first
    /// fragment, or was lent), so they refer to it instead of holding copies.
    Shared(Source),
}

/// Where the bytes of a fragmented message are, for the datagrams that carry it.
#[derive(Debug, Clone)]
enum Source {
    /// A copy of the message from byte `base` on.
    Kept { msg: Arc<Vec<u8>>, base: usize },
    /// The sender's own, lent for the duration of one [`Peer::send_lent`]: never read by the
    /// peer itself, and replaced by a copy of what is still needed in
    /// [`Peer::retain_lent`].
    Lent,
}

/// A message lent by the caller for the duration of one send: `head` followed by `body`
/// (a transport's frame head and the payload, never joined).
#[derive(Debug, Clone, Copy)]
pub struct Lent<'a> {
    /// The first bytes.
    pub head: &'a [u8],
    /// The rest.
    pub body: &'a [u8],
}

impl<'a> Lent<'a> {
    /// Its length.
    pub fn len(&self) -> usize {
        self.head.len() + self.body.len()
    }

    /// Whether it has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The bytes at `range` of the message, a range within `head` or within `body`.
    pub fn slice(&self, range: Range<usize>) -> &'a [u8] {
        let h = self.head.len();
        if range.end <= h {
            &self.head[range]
        } else {
            &self.body[range.start - h..range.end - h]
        }
    }

    /// Splits bytes `start..end` of the message into what a datagram's head holds and the
    /// range gathered after it: the range itself when it lies within one piece, else (it
    /// spans both) the head's bytes and the body's range.
    fn split(&self, start: usize, end: usize) -> (&'a [u8], Range<usize>) {
        let h = self.head.len();
        if start < h && end > h {
            (&self.head[start..h], h..end)
        } else {
            (&[], start..end)
        }
    }

    /// The message from byte `from` on, as the part in `head` and the part in `body`.
    fn from(&self, from: usize) -> (&'a [u8], &'a [u8]) {
        let h = self.head.len();
        (&self.head[from.min(h)..], &self.body[from.max(h) - h..])
    }
}

/// A datagram of a lent message written by [`Peer::poll_transmit_lent`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LentDatagram {
    /// Its sequence number (see [`Peer::kept_tail`]).
    pub seq: u64,
    /// The range of the lent message that follows the datagram's head on the wire (within
    /// its head or its body: see [`Lent::slice`]).
    pub tail: Range<usize>,
}

/// What a data datagram carries after its header.
#[derive(Debug)]
enum Body {
    /// Whole messages packed into a body of their own.
    Packed(Vec<u8>),
    /// One fragment: bytes `start..end` of a message of `total` bytes larger than a datagram.
    Fragment {
        src: Source,
        start: usize,
        end: usize,
        total: usize,
    },
}

impl Body {
    /// Bytes of the body on the wire, record headers included.
    fn len(&self) -> usize {
        match self {
            Body::Packed(b) => b.len(),
            Body::Fragment { start, end, .. } if *start == 0 => end + FIRST_OVERHEAD,
            Body::Fragment { start, end, .. } => end - start + RECORD_OVERHEAD,
        }
    }

    /// Which fragment of its message a fragment body is.
    fn which(start: usize, end: usize, total: usize) -> Fragment {
        if start == 0 {
            // The peer limits messages to u32::MAX bytes.
            Fragment::First(total as u32)
        } else if end == total {
            Fragment::Last
        } else {
            Fragment::Middle
        }
    }

    /// Writes the datagram with `header` into `buf`, except a fragment's bytes: those are
    /// returned as the datagram's [`Tail`], to be gathered from the retained message. A
    /// fragment's checksum covers its bytes only if `whole`.
    ///
    /// # Panics
    /// On a fragment of a lent message: only [`Peer::poll_transmit_lent`] writes those.
    fn encode(&self, buf: &mut Vec<u8>, header: &Header, whole: bool) -> Option<Tail> {
        match self {
            Body::Packed(b) => {
                wire::encode(buf, header, b);
                None
            }
            Body::Fragment {
                src: Source::Kept { msg, base },
                start,
                end,
                total,
            } => {
                let (start, end) = (start - base, end - base);
                let which = Self::which(start + base, end + base, *total);
                wire::encode_fragment_head(buf, header, which, &msg[start..end], whole);
                Some(Tail {
                    msg: Arc::clone(msg),
                    start,
                    end,
                })
            }
            Body::Fragment {
                src: Source::Lent, ..
            } => unreachable!("a lent message's datagram outside its send"),
        }
    }
}

/// The last bytes of a datagram written by [`Peer::poll_transmit_gather`]: a range of a
/// retained message, sent after the datagram's head with gather I/O instead of being copied
/// into it. Cheap to clone (the message is shared).
#[derive(Debug, Clone)]
pub struct Tail {
    msg: Arc<Vec<u8>>,
    start: usize,
    end: usize,
}

impl Tail {
    /// The bytes.
    pub fn bytes(&self) -> &[u8] {
        &self.msg[self.start..self.end]
    }
}

/// A fragmented message being received.
enum Reassembly {
    /// Its bytes so far, and its length.
    Buffer(Vec<u8>, usize),
    /// Its payload going straight into place.
    Placed(Placing),
}

impl std::fmt::Debug for Reassembly {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Reassembly::Buffer(m, total) => write!(f, "Buffer({} of {total})", m.len()),
            Reassembly::Placed(p) => write!(f, "Placed({} missing)", p.missing()),
        }
    }
}

/// A data datagram sent and not yet cumulatively acknowledged.
#[derive(Debug)]
struct Sent {
    seq: u64,
    body: Body,
    /// When it was last (re)transmitted.
    sent_at: u64,
    /// Its current retransmission timeout.
    rto: u64,
    retransmits: u32,
    /// Its timer was restarted without a retransmission (see [`Peer::defer_tail_timers`]):
    /// its ack gives no RTT sample.
    deferred: bool,
    /// Selectively acknowledged: the receiver holds it, do not retransmit.
    sacked: bool,
}

/// The reliable-delivery state of one peer pair, seen from this side. See the
/// [module docs](super) for the protocol.
///
/// Drive it like this: call [`send`](Self::send) to queue messages,
/// [`handle_datagram`](Self::handle_datagram) for each datagram from the peer,
/// [`handle_timeout`](Self::handle_timeout) when the deadline from
/// [`poll_timeout`](Self::poll_timeout) has passed, then [`poll_transmit`](Self::poll_transmit)
/// until it returns `None` and [`poll_deliver`](Self::poll_deliver) until it returns `None`.
#[derive(Debug)]
pub struct Peer {
    config: Config,
    job_key: u64,
    local_incarnation: u64,
    peer_incarnation: Option<u64>,
    state: State,
    stats: Stats,

    // Sending.
    pending: VecDeque<Pending>,
    /// Bytes charged for pending messages (length + record overhead each).
    pending_bytes: usize,
    next_seq: u64,
    inflight: VecDeque<Sent>,
    inflight_bytes: usize,
    /// Last time the ack state advanced (or the flight became non-empty).
    last_progress: u64,
    srtt: Option<(u64, u64)>,
    rto: u64,

    // Receiving.
    /// Highest sequence received in order.
    recv_ack: u64,
    out_of_order: BTreeMap<u64, Vec<u8>>,
    /// A message being reassembled.
    reassembly: Option<Reassembly>,
    /// Where long payloads of fragmented messages go as they arrive, and the peer's rank to
    /// name to it (see [`Peer::set_placer`]).
    placer: Option<(Arc<dyn Placer>, usize)>,
    /// Whether fragments' checksums cover their bytes (see [`Peer::checksum_payloads`]).
    checksum_payloads: bool,
    deliver: VecDeque<Vec<u8>>,
    deliver_bytes: usize,
    ack_deadline: Option<u64>,
    unacked_received: u32,
    /// Buffers of packed, acknowledged and delivered messages, for the next ones.
    pool: BufferPool,
    /// A message lent by [`Peer::send_lent`] may still be referred to: its send has not
    /// ended with [`Peer::retain_lent`].
    lent_open: bool,

    // Unsequenced datagrams.
    /// The id of the next one sent.
    next_unsequenced: u64,
    /// The ids received.
    replay: ReplayWindow,
}

impl Peer {
    /// A fresh pair for `job_key`, this side being `local_incarnation` (nonzero, different
    /// on every restart, e.g. random or a start timestamp).
    pub fn new(config: Config, job_key: u64, local_incarnation: u64) -> Result<Self, ConfigError> {
        config.validate()?;
        if local_incarnation == 0 {
            return Err(ConfigError("local_incarnation must be nonzero"));
        }
        let rto = config.initial_rto;
        Ok(Self {
            config,
            job_key,
            local_incarnation,
            peer_incarnation: None,
            state: State::Active,
            stats: Stats::default(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            next_seq: 1,
            inflight: VecDeque::new(),
            inflight_bytes: 0,
            last_progress: 0,
            srtt: None,
            rto,
            recv_ack: 0,
            out_of_order: BTreeMap::new(),
            reassembly: None,
            placer: None,
            checksum_payloads: true,
            deliver: VecDeque::new(),
            deliver_bytes: 0,
            ack_deadline: None,
            unacked_received: 0,
            pool: BufferPool::default(),
            lent_open: false,
            next_unsequenced: 1,
            replay: ReplayWindow::default(),
        })
    }

    /// Whether the pair works.
    pub fn state(&self) -> State {
        self.state
    }

    /// The counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The peer's incarnation, once a datagram from it has arrived.
    pub fn peer_incarnation(&self) -> Option<u64> {
        self.peer_incarnation
    }

    /// Data datagrams sent and not yet acknowledged.
    pub fn in_flight(&self) -> usize {
        self.inflight.len()
    }

    /// Messages queued by [`send`](Self::send) and not yet completely packed into datagrams.
    pub fn queued(&self) -> usize {
        self.pending.len()
    }

    /// Bytes queued by [`send`](Self::send) and not yet packed into datagrams, counting each
    /// message's record overhead: a transport compares it with a datagram's payload to send
    /// full datagrams before its next poll.
    pub fn queued_bytes(&self) -> usize {
        self.pending_bytes
    }

    /// Makes an ack that is waiting for [`Config::ack_delay`] due at `now`, so the next
    /// [`poll_transmit`](Self::poll_transmit) writes it. A transport that is about to leave
    /// uses it so that a peer retransmitting into its lingering gets answered at once.
    pub(crate) fn ack_now(&mut self, now: u64) {
        if let Some(t) = self.ack_deadline {
            self.ack_deadline = Some(t.min(now));
        }
    }

    /// Whether everything sent has been acknowledged.
    pub fn is_idle(&self) -> bool {
        self.pending.is_empty() && self.inflight.is_empty()
    }

    /// The current retransmission timeout (before backoff).
    pub fn rto(&self) -> u64 {
        self.rto
    }

    /// Queues a copy of `msg` for delivery to the peer, after everything queued before.
    ///
    /// The message leaves with the next [`poll_transmit`](Self::poll_transmit) calls (no
    /// timer is armed for it). Returns [`SendError::WouldBlock`] when the send buffer is full: call
    /// [`poll_transmit`](Self::poll_transmit), handle incoming acks, and retry.
    pub fn send(&mut self, msg: &[u8], now: u64) -> Result<(), SendError> {
        self.send_gather(msg, &[], now)
    }

    /// [`send`](Self::send) of the message `head` followed by `body`: the queued copy is
    /// the only one made of either.
    pub fn send_gather(&mut self, head: &[u8], body: &[u8], now: u64) -> Result<(), SendError> {
        self.send_gather_within(head, body, now, self.config.send_buffer)
    }

    /// [`send_gather`](Self::send_gather) with `send_buffer` bytes (at least the configured
    /// send buffer) allowed queued and unacknowledged, for a caller that queues a large
    /// message to let it leave later, piece by piece.
    pub fn send_gather_within(
        &mut self,
        head: &[u8],
        body: &[u8],
        now: u64,
        send_buffer: usize,
    ) -> Result<(), SendError> {
        let len = head.len() + body.len();
        let limit = send_buffer.max(self.config.send_buffer);
        self.enqueue(len, now, limit, |pool| {
            let mut data = pool.take_for(len);
            data.extend_from_slice(head);
            data.extend_from_slice(body);
            Queued::Owned(data)
        })
    }

    /// Queues a message of `len` bytes after the checks every send makes (a failed pair, a
    /// message too large, a full send buffer); `bytes` gives where its bytes are, once it is
    /// accepted.
    fn enqueue(
        &mut self,
        len: usize,
        now: u64,
        send_buffer: usize,
        bytes: impl FnOnce(&mut BufferPool) -> Queued,
    ) -> Result<(), SendError> {
        self.check_peer_timeout(now);
        if let State::Failed(f) = self.state {
            return Err(SendError::Failed(f));
        }
        if len > self.config.max_message_size {
            return Err(SendError::TooLarge {
                len,
                max: self.config.max_message_size,
            });
        }
        let charge = len + RECORD_OVERHEAD;
        if self.pending_bytes + self.inflight_bytes + charge > send_buffer {
            self.stats.would_block += 1;
            return Err(SendError::WouldBlock);
        }
        self.pending_bytes += charge;
        self.pending.push_back(Pending {
            bytes: bytes(&mut self.pool),
            total: len,
            offset: 0,
        });
        self.stats.messages_sent += 1;
        Ok(())
    }

    /// [`send_gather`](Self::send_gather) without the queued copy, for a caller that sends
    /// the message's datagrams at once: the peer keeps no bytes of `msg` and refers to it
    /// until [`retain_lent`](Self::retain_lent), which copies only what is then still
    /// unacknowledged or unsent. In between, write its datagrams with
    /// [`poll_transmit_lent`](Self::poll_transmit_lent) and take datagrams in with
    /// [`handle_datagram`](Self::handle_datagram); nothing else may transmit, and
    /// `retain_lent` must come before `msg`'s bytes change or the send returns. A message
    /// that fits one datagram is copied at once, as by `send_gather`.
    pub fn send_lent(&mut self, msg: Lent<'_>, now: u64) -> Result<(), SendError> {
        let len = msg.len();
        if RECORD_OVERHEAD + len <= self.config.max_datagram_size - HEADER_LEN {
            return self.send_gather(msg.head, msg.body, now);
        }
        assert!(!self.lent_open, "a lent message's send has not ended");
        self.enqueue(len, now, self.config.send_buffer, |_| {
            Queued::Shared(Source::Lent)
        })?;
        self.lent_open = true;
        self.stats.lent_messages += 1;
        Ok(())
    }

    /// Writes into `buf` (cleared first) the head of the next datagram of the lent message,
    /// while it is the next to send and the window has room; the datagram is `buf` followed
    /// by the returned range of `msg.body`. `None` when no such datagram can go now (then
    /// the rest goes after [`retain_lent`](Self::retain_lent), from its copy).
    pub fn poll_transmit_lent(
        &mut self,
        now: u64,
        buf: &mut Vec<u8>,
        msg: Lent<'_>,
    ) -> Option<LentDatagram> {
        self.check_peer_timeout(now);
        if self.state != State::Active
            || self.inflight.len() >= self.config.window
            || !matches!(
                self.pending.front(),
                Some(Pending {
                    bytes: Queued::Shared(Source::Lent),
                    ..
                })
            )
        {
            return None;
        }
        let body = self.pack_fragment(self.config.max_datagram_size - HEADER_LEN);
        let Body::Fragment {
            start, end, total, ..
        } = body
        else {
            unreachable!("a lent message is larger than a datagram")
        };
        debug_assert_eq!(total, msg.len());
        let seq = self.next_seq;
        self.next_seq += 1;
        let h = self.header(Kind::Data, seq);
        let (inline, tail) = msg.split(start, end);
        let which = Body::which(start, end, total);
        let bytes = msg.slice(tail.clone());
        wire::encode_fragment_head_inline(buf, &h, which, inline, bytes, self.checksum_payloads);
        self.push_sent(seq, body, now);
        self.count_sent(buf.len() + tail.len());
        Some(LentDatagram { seq, tail })
    }

    /// Ends the send of the lent message: what of it is unacknowledged or not yet sent is
    /// copied (one copy, from its first such byte to its end), and its datagrams refer to
    /// the copy from now on. Does nothing when no lent message is open.
    pub fn retain_lent(&mut self, msg: Lent<'_>) {
        if !std::mem::take(&mut self.lent_open) {
            return;
        }
        let sent = self.inflight.iter().find_map(|s| match &s.body {
            Body::Fragment {
                src: Source::Lent,
                start,
                ..
            } => Some(*start),
            _ => None,
        });
        let queued = self.pending.iter().find_map(|p| match p.bytes {
            Queued::Shared(Source::Lent) => Some(p.offset),
            _ => None,
        });
        let Some(from) = sent.or(queued) else {
            return;
        };
        let (a, b) = msg.from(from);
        let mut copy = self.pool.take_for(a.len() + b.len());
        copy.extend_from_slice(a);
        copy.extend_from_slice(b);
        self.stats.lent_bytes_kept += copy.len() as u64;
        let kept = Source::Kept {
            msg: Arc::new(copy),
            base: from,
        };
        for s in &mut self.inflight {
            if let Body::Fragment { src, .. } = &mut s.body {
                if matches!(src, Source::Lent) {
                    *src = kept.clone();
                }
            }
        }
        for p in &mut self.pending {
            if matches!(p.bytes, Queued::Shared(Source::Lent)) {
                p.bytes = Queued::Shared(kept.clone());
            }
        }
    }

    /// The tail of lent datagram `d` from the message's retained bytes, for a datagram
    /// written but unable to leave before [`retain_lent`](Self::retain_lent) (its head,
    /// already written, stays valid). `None` if `d` is no longer in flight.
    pub fn kept_tail(&self, d: &LentDatagram) -> Option<Tail> {
        let first = self.inflight.front()?.seq;
        let s = self
            .inflight
            .get(usize::try_from(d.seq.checked_sub(first)?).ok()?)?;
        match &s.body {
            Body::Fragment {
                src: Source::Kept { msg, base },
                start,
                end,
                ..
            } if *start <= d.tail.start && d.tail.end <= *end => Some(Tail {
                msg: Arc::clone(msg),
                start: d.tail.start - base,
                end: d.tail.end - base,
            }),
            _ => None,
        }
    }

    /// Whether [`Peer::send`] of a message of `len` bytes would be accepted now rather than
    /// refused with [`SendError::WouldBlock`] (a failed peer or a message too large answer
    /// true: their `send` fails for another reason).
    pub fn would_accept(&self, len: usize) -> bool {
        let charge = len + RECORD_OVERHEAD;
        matches!(self.state, State::Failed(_))
            || len > self.config.max_message_size
            || self.pending_bytes + self.inflight_bytes + charge <= self.config.send_buffer
    }

    /// The largest message [`send_unsequenced`](Self::send_unsequenced) takes: what one
    /// datagram carries (unsequenced messages are never fragmented, since a lost fragment
    /// could not be recovered).
    pub fn max_unsequenced(&self) -> usize {
        self.config.max_datagram_size - HEADER_LEN - RECORD_OVERHEAD
    }

    /// Writes an unsequenced datagram carrying `msg` into `buf` (cleared first) and returns
    /// its length: seed 002's "no flow control". The caller sends it once; it takes no
    /// sequence number and no window room, is never acknowledged or retransmitted, and the
    /// peer delivers it on arrival, at most once, possibly before messages sent earlier. Lost
    /// on the way, it is lost. Fails for a message over
    /// [`max_unsequenced`](Self::max_unsequenced) or a failed pair; never blocks.
    pub fn send_unsequenced(
        &mut self,
        msg: &[u8],
        now: u64,
        buf: &mut Vec<u8>,
    ) -> Result<usize, SendError> {
        self.check_peer_timeout(now);
        if let State::Failed(f) = self.state {
            return Err(SendError::Failed(f));
        }
        let max = self.max_unsequenced();
        if msg.len() > max {
            return Err(SendError::TooLarge {
                len: msg.len(),
                max,
            });
        }
        let h = Header {
            kind: Kind::Unsequenced,
            job_key: self.job_key,
            src_incarnation: self.local_incarnation,
            dst_incarnation: self.peer_incarnation.unwrap_or(0),
            seq: self.next_unsequenced,
            ack: 0,
            sack: 0,
        };
        self.next_unsequenced += 1;
        wire::encode_unsequenced(buf, &h, msg);
        self.stats.unsequenced_sent += 1;
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += buf.len() as u64;
        Ok(buf.len())
    }

    /// Lets fragmented messages whose long payload the placer takes (naming this peer as
    /// the rank given with it) go straight into place as their fragments arrive in order,
    /// instead of being reassembled and delivered whole; their notice is delivered in their
    /// stead. `None` stops placing (a message already being placed is finished).
    pub fn set_placer(&mut self, placer: Option<(Arc<dyn Placer>, usize)>) {
        self.placer = placer;
    }

    /// Whether the checksum of a datagram carrying a fragment of a message larger than a
    /// datagram covers the fragment's bytes (the default) or only the header, the record's
    /// words and the length (see [`wire`]). Sending only: a receiver checks what each datagram
    /// says. Meant for a peer on loopback, where datagrams never leave this host's memory (the
    /// kernel neither computes nor checks a UDP checksum there), so a second pass over every
    /// bulk byte on each side buys nothing; whole messages keep the full checksum.
    pub fn checksum_payloads(&mut self, on: bool) {
        self.checksum_payloads = on;
    }

    /// Takes the next message delivered in order, if any. Give the buffer back with
    /// [`recycle`](Self::recycle) once done with it, so the next message does not allocate.
    pub fn poll_deliver(&mut self) -> Option<Vec<u8>> {
        let m = self.deliver.pop_front()?;
        self.deliver_bytes -= m.len();
        Some(m)
    }

    /// Returns a buffer (from [`poll_deliver`](Self::poll_deliver), or any other) for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.give(buf);
    }

    /// The earliest time at which [`handle_timeout`](Self::handle_timeout) (and then
    /// [`poll_transmit`](Self::poll_transmit)) has work to do; `None` if no timer runs.
    pub fn poll_timeout(&self) -> Option<u64> {
        if self.state != State::Active {
            return None;
        }
        let mut t = self.ack_deadline;
        let mut earliest = |d: u64| t = Some(t.map_or(d, |t| t.min(d)));
        for s in self.inflight.iter().filter(|s| !s.sacked) {
            earliest(s.sent_at.saturating_add(s.rto));
        }
        if !self.inflight.is_empty() {
            earliest(self.last_progress.saturating_add(self.config.peer_timeout));
        }
        t
    }

    /// Advances the timers to `now`: detects a silent peer. Retransmissions and acks that
    /// have come due are written by the following [`poll_transmit`](Self::poll_transmit) calls.
    pub fn handle_timeout(&mut self, now: u64) {
        self.check_peer_timeout(now);
    }

    fn check_peer_timeout(&mut self, now: u64) {
        if self.state == State::Active
            && !self.inflight.is_empty()
            && now >= self.last_progress.saturating_add(self.config.peer_timeout)
        {
            self.state = State::Failed(Failure::PeerTimeout);
        }
    }

    fn fail(&mut self, f: Failure) {
        if self.state == State::Active {
            self.state = State::Failed(f);
        }
    }

    /// Processes one datagram from the peer. `Err` says why it was dropped (and counted);
    /// duplicates and datagrams beyond the window are valid and return `Ok` (see [`Stats`]).
    pub fn handle_datagram(&mut self, bytes: &[u8], now: u64) -> Result<(), DecodeError> {
        let (h, body) = match wire::decode(bytes) {
            Ok(d) => d,
            Err(e) => {
                self.stats.malformed_dropped += 1;
                return Err(e);
            }
        };
        if h.job_key != self.job_key {
            self.stats.foreign_dropped += 1;
            return Err(DecodeError::ForeignJob);
        }
        if self.state != State::Active {
            self.stats.failed_dropped += 1;
            return Err(DecodeError::PairFailed);
        }
        if h.dst_incarnation != 0 && h.dst_incarnation != self.local_incarnation {
            self.stats.stale_dropped += 1;
            return Err(DecodeError::StaleIncarnation);
        }
        if h.ack >= self.next_seq {
            self.stats.malformed_dropped += 1;
            return Err(DecodeError::AckOutOfRange);
        }
        match self.peer_incarnation {
            None => self.peer_incarnation = Some(h.src_incarnation),
            Some(old) if old != h.src_incarnation => {
                self.stats.failed_dropped += 1;
                self.fail(Failure::PeerRestarted {
                    old,
                    new: h.src_incarnation,
                });
                return Err(DecodeError::PeerRestarted);
            }
            Some(_) => {}
        }
        self.stats.datagrams_received += 1;
        if h.kind == Kind::Unsequenced {
            self.on_unsequenced(h.seq, body);
            return Ok(());
        }
        self.on_ack(h.ack, h.sack, now);
        if h.kind == Kind::Data {
            self.on_data(h.seq, body, now);
        }
        Ok(())
    }

    /// Delivers an unsequenced datagram's message unless its id was seen (or the delivery
    /// queue is full: then it is dropped, as the receiver never blocks). Touches nothing of
    /// the sequenced stream: no ack is owed for it.
    fn on_unsequenced(&mut self, id: u64, body: &[u8]) {
        if self.deliver_bytes >= self.config.recv_buffer {
            self.stats.recv_full_dropped += 1;
            return;
        }
        if !self.replay.accept(id) {
            self.stats.unsequenced_duplicates += 1;
            return;
        }
        // `decode` checked the body is one whole message.
        if let Ok(msg) = wire::unsequenced_message(body) {
            let m = self.pool.copy_of(msg);
            self.stats.unsequenced_delivered += 1;
            self.push_delivery(m);
        }
    }

    fn on_ack(&mut self, ack: u64, sack: u64, now: u64) {
        let mut progress = false;
        let mut sample = None;
        while self.inflight.front().is_some_and(|s| s.seq <= ack) {
            let Some(s) = self.inflight.pop_front() else {
                break;
            };
            self.inflight_bytes -= s.body.len();
            progress = true;
            // Karn: only datagrams sent once give an unambiguous sample, and only when
            // first acknowledged (a selective ack may have come long before).
            if s.retransmits == 0 && !s.deferred && !s.sacked {
                sample = Some(now.saturating_sub(s.sent_at));
            }
            self.release(s.body);
        }
        if let Some(base) = self.inflight.front().map(|s| s.seq) {
            let mut bits = sack;
            while bits != 0 {
                let i = bits.trailing_zeros() as u64;
                bits &= bits - 1;
                let seq = ack.saturating_add(2 + i);
                if seq < base {
                    continue;
                }
                if let Some(s) = self.inflight.get_mut((seq - base) as usize) {
                    if !s.sacked {
                        s.sacked = true;
                        progress = true;
                        if s.retransmits == 0 && !s.deferred {
                            sample = Some(now.saturating_sub(s.sent_at));
                        }
                    }
                }
            }
        }
        if let Some(r) = sample {
            self.update_rtt(r);
        }
        if progress {
            self.last_progress = now;
        }
    }

    fn update_rtt(&mut self, r: u64) {
        let (srtt, var) = match self.srtt {
            None => (r, r / 2),
            Some((srtt, var)) => ((7 * srtt + r) / 8, (3 * var + srtt.abs_diff(r)) / 4),
        };
        self.srtt = Some((srtt, var));
        self.rto = (srtt + (4 * var).max(1)).clamp(self.config.min_rto, self.config.max_rto);
    }

    fn on_data(&mut self, seq: u64, body: &[u8], now: u64) {
        if seq <= self.recv_ack || self.out_of_order.contains_key(&seq) {
            self.stats.duplicates_dropped += 1;
        } else if seq - self.recv_ack > self.config.window as u64 {
            self.stats.out_of_window_dropped += 1;
        } else if seq == self.recv_ack + 1 {
            if self.deliver_bytes >= self.config.recv_buffer {
                // Refuse without acking; the sender retransmits once the queue drains.
                self.stats.recv_full_dropped += 1;
                return;
            }
            self.accept(body);
            self.recv_ack = seq;
            while let Some(b) = self.out_of_order.remove(&(self.recv_ack + 1)) {
                self.accept(&b);
                self.recv_ack += 1;
                self.pool.give(b);
            }
        } else {
            let held = self.pool.copy_of(body);
            self.out_of_order.insert(seq, held);
        }
        self.unacked_received += 1;
        if self.unacked_received >= self.config.ack_every {
            self.ack_deadline = Some(now);
        } else if self.ack_deadline.is_none() {
            self.ack_deadline = Some(now.saturating_add(self.config.ack_delay));
        }
    }

    /// Unpacks the records of an in-order datagram into the delivery queue.
    fn accept(&mut self, body: &[u8]) {
        for r in Records::new(body) {
            let ok = match r {
                Ok(Record::Complete(d)) if self.reassembly.is_none() => {
                    let m = self.pool.copy_of(d);
                    self.push_delivery(m);
                    true
                }
                Ok(Record::First { total, data })
                    if self.reassembly.is_none()
                        && total as usize <= self.config.max_message_size =>
                {
                    let total = total as usize;
                    let placed = self.placer.as_ref().and_then(|(p, rank)| {
                        Placing::start(&**p, *rank, data, total, &mut self.pool)
                    });
                    self.reassembly = Some(match placed {
                        Some(p) => Reassembly::Placed(p),
                        None => {
                            let mut m = self.pool.take_for(total);
                            m.extend_from_slice(data);
                            Reassembly::Buffer(m, total)
                        }
                    });
                    true
                }
                Ok(Record::Middle(d)) => match &mut self.reassembly {
                    Some(Reassembly::Buffer(m, total)) if m.len() + d.len() < *total => {
                        m.extend_from_slice(d);
                        true
                    }
                    Some(Reassembly::Placed(p)) if d.len() < p.missing() => {
                        p.write(d);
                        true
                    }
                    _ => false,
                },
                Ok(Record::Last(d)) => match self.reassembly.take() {
                    Some(Reassembly::Buffer(mut m, total)) if m.len() + d.len() == total => {
                        m.extend_from_slice(d);
                        self.push_delivery(m);
                        true
                    }
                    Some(Reassembly::Placed(mut p)) if d.len() == p.missing() => {
                        p.write(d);
                        let notice = p.into_notice();
                        if notice.is_empty() {
                            // In place, and nothing to run.
                            self.stats.messages_delivered += 1;
                            self.pool.give(notice);
                        } else {
                            self.push_delivery(notice);
                        }
                        true
                    }
                    _ => false,
                },
                _ => false,
            };
            if !ok {
                self.fail(Failure::Protocol);
                return;
            }
        }
    }

    fn push_delivery(&mut self, m: Vec<u8>) {
        self.deliver_bytes += m.len();
        self.stats.messages_delivered += 1;
        self.deliver.push_back(m);
    }

    /// Selective-ack bits for the datagrams held out of order.
    fn sack_bits(&self) -> u64 {
        let lo = self.recv_ack + 2;
        self.out_of_order
            .range(lo..lo + 64)
            .fold(0, |bits, (&seq, _)| bits | 1 << (seq - lo))
    }

    fn header(&self, kind: Kind, seq: u64) -> Header {
        Header {
            kind,
            job_key: self.job_key,
            src_incarnation: self.local_incarnation,
            dst_incarnation: self.peer_incarnation.unwrap_or(0),
            seq,
            ack: self.recv_ack,
            sack: self.sack_bits(),
        }
    }

    /// Writes the next datagram to send into `buf` (cleared first) and returns its length,
    /// or `None` when nothing is due at `now`. Call until `None`.
    ///
    /// Order: retransmissions that are due, then new data while the window has room, then an
    /// ack if one is due. Every datagram carries the current ack.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut Vec<u8>) -> Option<usize> {
        if let Some(tail) = self.poll_transmit_gather(now, buf)? {
            buf.extend_from_slice(tail.bytes());
        }
        Some(buf.len())
    }

    /// [`poll_transmit`](Self::poll_transmit) without copying a fragment's bytes: `None`
    /// when nothing is due, else the datagram is `buf` followed by the returned tail's bytes
    /// (if any), to be sent with gather I/O. Holding the tail keeps the message alive.
    pub fn poll_transmit_gather(&mut self, now: u64, buf: &mut Vec<u8>) -> Option<Option<Tail>> {
        debug_assert!(
            !self.lent_open,
            "transmitting while a lent message's send is open"
        );
        self.check_peer_timeout(now);
        if self.state != State::Active {
            return None;
        }
        let due = self
            .inflight
            .iter()
            .position(|s| !s.sacked && s.sent_at.saturating_add(s.rto) <= now);
        let tail = if let Some(i) = due {
            let h = self.header(Kind::Data, self.inflight[i].seq);
            let max_rto = self.config.max_rto;
            let s = &mut self.inflight[i];
            s.sent_at = now;
            s.rto = s.rto.saturating_mul(2).min(max_rto);
            s.retransmits += 1;
            let tail = s.body.encode(buf, &h, self.checksum_payloads);
            self.stats.retransmissions += 1;
            self.defer_tail_timers(i, now);
            tail
        } else if self.inflight.len() < self.config.window && !self.pending.is_empty() {
            let body = self.pack();
            let seq = self.next_seq;
            self.next_seq += 1;
            let h = self.header(Kind::Data, seq);
            let tail = body.encode(buf, &h, self.checksum_payloads);
            self.push_sent(seq, body, now);
            tail
        } else if self.ack_deadline.is_some_and(|t| t <= now) {
            let h = self.header(Kind::Ack, 0);
            wire::encode(buf, &h, &[]);
            self.stats.acks_sent += 1;
            None
        } else {
            return None;
        };
        let tail_len = tail.as_ref().map_or(0, |t| t.end - t.start);
        self.count_sent(buf.len() + tail_len);
        Some(tail)
    }

    /// Puts a new data datagram in flight.
    fn push_sent(&mut self, seq: u64, body: Body, now: u64) {
        if self.inflight.is_empty() {
            self.last_progress = now;
        }
        self.inflight_bytes += body.len();
        self.inflight.push_back(Sent {
            seq,
            body,
            sent_at: now,
            rto: self.rto,
            retransmits: 0,
            deferred: false,
            sacked: false,
        });
    }

    /// Counts a datagram of `len` bytes written; it carries the current ack.
    fn count_sent(&mut self, len: usize) {
        self.ack_deadline = None;
        self.unacked_received = 0;
        self.stats.datagrams_sent += 1;
        self.stats.bytes_sent += len as u64;
    }

    /// Panics if the internal bookkeeping is inconsistent; for tests.
    #[cfg(test)]
    pub(crate) fn check_invariants(&self) {
        let w = self.config.window as u64;
        assert!(self.inflight.len() <= self.config.window);
        for (i, s) in self.inflight.iter().enumerate() {
            assert_eq!(s.seq + (self.inflight.len() - i) as u64, self.next_seq);
            assert!(s.rto <= self.config.max_rto);
        }
        let sum: usize = self.inflight.iter().map(|s| s.body.len()).sum();
        assert_eq!(sum, self.inflight_bytes);
        let sum: usize = self.pending.iter().map(|p| p.total + RECORD_OVERHEAD).sum();
        assert_eq!(sum, self.pending_bytes);
        let sum: usize = self.deliver.iter().map(Vec::len).sum();
        assert_eq!(sum, self.deliver_bytes);
        for &seq in self.out_of_order.keys() {
            assert!(seq > self.recv_ack + 1 && seq <= self.recv_ack + w, "{seq}");
        }
        assert!(self.pending.iter().skip(1).all(|p| p.offset == 0));
    }

    /// Packs queued messages into one datagram body: whole messages while they fit. A
    /// message too large for a datagram goes in fragments, each in a datagram of its own that
    /// refers to the message (see [`Peer::pack_fragment`]).
    fn pack(&mut self) -> Body {
        let cap = self.config.max_datagram_size - HEADER_LEN;
        if self
            .pending
            .front()
            .is_some_and(|p| p.offset > 0 || RECORD_OVERHEAD + p.total > cap)
        {
            return self.pack_fragment(cap);
        }
        let mut body = self.pool.take();
        body.reserve(cap.min(self.pending_bytes));
        // Only the front message can be partly sent, and it is not: every one here is whole,
        // and only messages larger than a datagram are shared.
        while let Some(Pending {
            bytes: Queued::Owned(data),
            ..
        }) = self.pending.front()
        {
            if RECORD_OVERHEAD + data.len() > cap - body.len() {
                break;
            }
            wire::put_complete(&mut body, data);
            if let Some(done) = self.pending.pop_front() {
                self.pending_bytes -= done.total + RECORD_OVERHEAD;
                if let Queued::Owned(data) = done.bytes {
                    self.pool.give(data);
                }
            }
        }
        Body::Packed(body)
    }

    /// The next fragment of the front message, as much as a datagram of `cap` body bytes
    /// holds. The message moves behind an [`Arc`] at its first fragment; the datagrams keep
    /// it alive for retransmission and give it back to the pool when the last is acknowledged.
    fn pack_fragment(&mut self, cap: usize) -> Body {
        let Some(front) = self.pending.front_mut() else {
            return Body::Packed(self.pool.take());
        };
        let src = match &mut front.bytes {
            Queued::Shared(src) => src.clone(),
            Queued::Owned(data) => {
                let src = Source::Kept {
                    msg: Arc::new(std::mem::take(data)),
                    base: 0,
                };
                front.bytes = Queued::Shared(src.clone());
                src
            }
        };
        let (start, total) = (front.offset, front.total);
        let overhead = if start == 0 {
            FIRST_OVERHEAD
        } else {
            RECORD_OVERHEAD
        };
        let end = (start + cap - overhead).min(total);
        front.offset = end;
        if end == total {
            self.pending_bytes -= total + RECORD_OVERHEAD;
            self.pending.pop_front();
        }
        Body::Fragment {
            src,
            start,
            end,
            total,
        }
    }

    /// After datagram `i` timed out and was sent again: restarts, without sending them, the
    /// expired timers of the datagrams after it and after the last selectively acknowledged
    /// one. Nothing after them has arrived, so they may be late rather than lost (a receiver
    /// off its CPU for longer than the timeout): sending the whole flight again would put a
    /// second window into its socket buffer, which overflows and drops, and the drops time
    /// out again. They go one per timeout instead, unless acks come first. Datagrams before a
    /// selectively acknowledged one (holes) keep their timers and are resent as they expire.
    fn defer_tail_timers(&mut self, i: usize, now: u64) {
        let last_sacked = self.inflight.iter().rposition(|s| s.sacked);
        let from = last_sacked.map_or(i + 1, |k| (k + 1).max(i + 1));
        for s in self.inflight.iter_mut().skip(from) {
            if !s.sacked && s.sent_at.saturating_add(s.rto) <= now {
                s.sent_at = now;
                s.deferred = true;
            }
        }
    }

    /// Takes back an acknowledged datagram's buffers.
    fn release(&mut self, body: Body) {
        match body {
            Body::Packed(b) => self.pool.give(b),
            Body::Fragment {
                src: Source::Kept { msg, .. },
                ..
            } => {
                // The last datagram of the message to go gives its buffer back.
                if let Ok(m) = Arc::try_unwrap(msg) {
                    self.pool.give(m);
                }
            }
            Body::Fragment {
                src: Source::Lent, ..
            } => {}
        }
    }
}
