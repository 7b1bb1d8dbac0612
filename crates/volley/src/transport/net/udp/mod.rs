//! The UDP transport: one datagram socket per rank, one [`reliable::Peer`] per network peer.
//!
//! The protocol lives in [`crate::reliable`]; this module is the I/O loop around it. Datagrams
//! carry no sender rank, so incoming ones are demultiplexed by source address (a datagram from
//! an address no rank was given in [`NetTransport::connect`] is dropped and counted). Outgoing
//! datagrams gather in one queue and leave with one `sendmmsg` per [`UdpConfig::batch`];
//! incoming ones are read with `recvmmsg` into preallocated buffers. In a ping-pong of small
//! messages a progress call thus costs one `sendmmsg` when something is due and one
//! `recvmmsg`, and nothing allocates in steady state: datagram buffers are kept here, and the
//! reliable layer copies messages in and out of buffers it recycles (delivered ones come back
//! through [`NetTransport::recycle`]).
//!
//! Unsequenced datagrams ([`NetTransport::send_unsequenced`], seed 002's "no flow control")
//! are written by the peer at once and join the same queue; nothing keeps them after they
//! leave.
//!
//! With [`UdpConfig::faults`] (users: `VOLLEY_FAULTS`), every outgoing datagram goes through a
//! [`FaultInjector`] first, unsequenced ones too.
//!
//! The system calls themselves, and the buffers they fill, are in `syscalls`; the conversions
//! between Rust's socket addresses and the kernel's in `addr`.

mod addr;
#[cfg(test)]
mod bulk_tests;
mod syscalls;
#[cfg(test)]
mod tests;

use std::collections::{HashMap, VecDeque};
use std::io;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use super::faults::{FaultConfig, FaultInjector};
use super::traffic::{RecentTraffic, MAX_DEFERRED_POLLS, PIPELINE_NS, QUIET_NS};
use super::{NetError, NetKind, NetStats, NetTransport, Placer, MAX_MESSAGE};
use crate::reliable::{
    self, wire::HEADER_LEN, wire::RECORD_OVERHEAD, Lent, LentDatagram, Peer, SendError, State, Tail,
};
use addr::{canonical, to_raw, RawAddr};
use syscalls::{send_batch, MsgVec, RecvRing, MAX_BATCH};

/// Socket buffer size asked for in each direction (the kernel may grant less).
const SOCKET_BUFFER: usize = 4 << 20;
/// Largest datagram used between loopback peers by default.
const LOOPBACK_DATAGRAM: usize = 65000;
/// Shortest silence after which a closing transport assumes its peers need nothing more.
/// It must outlast the peer's retransmission timeout after a few losses in a row (its
/// backoff, which this side cannot see: 1+2+4+8+16 ms after five), or a peer that lost our
/// last acks retransmits into a socket nobody reads. Measured with the close test at 5% loss:
/// 3 ms failed 2 runs in 60, 50 ms none in 60.
const QUIET_MIN: u64 = 50_000_000;
/// Longest such silence, whatever the retransmission timeouts.
const QUIET_MAX: u64 = 100_000_000;
/// Pause between polls while lingering in `close`.
const LINGER_POLL: Duration = Duration::from_micros(100);
/// Datagrams waiting for the socket beyond which an unsequenced send is refused (the
/// sequenced ones are bounded by their window; unsequenced ones only by this).
const UNSEQUENCED_BACKLOG: usize = 256;
/// Bytes of full datagrams waiting for the socket at which a send hands them to the kernel
/// without waiting for a whole batch: a long stream's bytes then leave while the copy just made
/// of them is still in this core's cache (a batch of 32 loopback datagrams is 2 MB).
const FLUSH_BYTES: usize = 1 << 20;

/// Most bytes of datagrams a peer writes per `transmit` while the rank has short traffic
/// with its other peers (one loopback datagram; 44 of 1472 bytes on a LAN); a peer with more
/// than this queued is a bulk transfer.
const BULK_QUANTUM: usize = 64 << 10;

/// Bytes a peer may hold queued and unacknowledged when later parts of long messages are
/// queued for the progress calls (see `send_gather_part`): a 16 MiB long's parts all fit.
const PIPELINE_SEND_BUFFER: usize = 64 << 20;
/// Messages up to this size are short traffic (see [`RecentTraffic`]).
const SHORT_MESSAGE: usize = 16 << 10;

/// Which peers a `transmit` serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pass {
    /// Those with no bulk transfer queued, all they have.
    Short,
    /// All, a bulk transfer one quantum while the rank talks with other peers.
    Bulk,
    /// All, all they have.
    All,
}

/// Tuning of a [`UdpTransport`].
#[derive(Debug, Clone)]
pub struct UdpConfig {
    /// The reliable protocol's settings, shared by every peer pair (all ranks must agree on
    /// `window`). `max_message_size` should stay [`MAX_MESSAGE`].
    pub reliable: reliable::Config,
    /// Faults to inject into outgoing datagrams; `None` (or all zero) sends them untouched.
    pub faults: Option<FaultConfig>,
    /// Most datagrams per `sendmmsg` and per `recvmmsg` (1..=1024).
    pub batch: usize,
    /// When every peer is on a loopback address, datagrams of up to this size are used
    /// instead of `reliable.max_datagram_size` (never smaller than it): loopback has no
    /// 1500-byte MTU, and fewer, larger datagrams cost fewer system calls and checksums. The
    /// size actually used is also capped so that a full window takes at most half the
    /// receive buffer the kernel granted (`SO_RCVBUF`), as loopback drops what overflows it.
    /// `None` keeps `reliable.max_datagram_size`. Ranks need not agree: every rank reads
    /// datagrams of any size.
    pub loopback_datagram_size: Option<usize>,
    /// When every peer is on a loopback address, the checksum of a datagram carrying a
    /// fragment of a long message covers its head only
    /// ([`Peer::checksum_payloads`](reliable::Peer::checksum_payloads)): loopback datagrams
    /// never leave this host's memory, and the check was a pass over every bulk byte on
    /// both sides. Peers on other hosts always get the full checksum.
    pub loopback_head_checksums: bool,
}

impl Default for UdpConfig {
    /// LAN values: 1472-byte datagrams (65000 on loopback), messages up to [`MAX_MESSAGE`],
    /// room for two such messages in the send buffer, batches of 32, no faults.
    fn default() -> Self {
        Self {
            reliable: reliable::Config {
                max_message_size: MAX_MESSAGE,
                send_buffer: 2 * MAX_MESSAGE,
                recv_buffer: 2 * MAX_MESSAGE,
                ..reliable::Config::default()
            },
            faults: None,
            batch: 32,
            loopback_datagram_size: Some(LOOPBACK_DATAGRAM),
            loopback_head_checksums: true,
        }
    }
}

impl UdpConfig {
    /// The defaults, with faults from `VOLLEY_FAULTS` if it is set.
    pub fn from_env() -> Result<Self, String> {
        Ok(Self {
            faults: FaultConfig::from_env()?,
            ..Self::default()
        })
    }
}

/// A datagram ready to leave: the peer slot it goes to and its bytes, `buf` followed by the
/// tail's (a fragment's bytes, gathered from the retained message when sent). The fault
/// injector holds and duplicates it as it is: a duplicate shares the message.
#[derive(Debug, Clone)]
struct Outgoing {
    slot: usize,
    buf: Vec<u8>,
    tail: Option<Tail>,
}

impl Outgoing {
    fn tail(&self) -> &[u8] {
        self.tail.as_ref().map_or(&[], Tail::bytes)
    }

    fn len(&self) -> usize {
        self.buf.len() + self.tail().len()
    }
}

/// One network peer.
struct Link {
    rank: usize,
    addr: SocketAddr,
    raw: RawAddr,
    peer: Peer,
    /// Sent to or received from since the peer was last polled for datagrams.
    dirty: bool,
    /// The peer's `poll_timeout` when it was last polled (`u64::MAX` for none); valid while
    /// not `dirty`, because only sends and datagrams change it between polls.
    wake: u64,
}

/// One rank's UDP endpoint: see the [module docs](self).
pub struct UdpTransport {
    socket: UdpSocket,
    local: SocketAddr,
    job_key: u64,
    incarnation: u64,
    config: UdpConfig,
    batch: usize,
    /// The receive buffer the kernel granted (as `SO_RCVBUF` reports it).
    rcvbuf: usize,
    connected: bool,
    /// Connected to its only peer: sends carry no address.
    single: bool,
    /// The datagram size in effect (see [`UdpConfig::loopback_datagram_size`]).
    datagram_size: usize,
    /// Rank → index into `links`.
    slots: Vec<Option<usize>>,
    links: Vec<Link>,
    by_addr: HashMap<SocketAddr, usize>,
    /// The last address looked up and its slot: consecutive datagrams mostly share a source.
    last_from: Option<(SocketAddr, usize)>,
    /// Datagrams to send, in order; what `sendmmsg` refused stays at the front.
    out: VecDeque<Outgoing>,
    /// Scratch for `transmit`: the slots still writing datagrams.
    due: Vec<usize>,
    /// Scratch for `transmit`: bytes written per slot.
    written: Vec<usize>,
    /// Scratch for `send_lent`: datagram heads of a lent message and their tails.
    lent_batch: Vec<(Vec<u8>, LentDatagram)>,
    /// Spare datagram buffers, so steady traffic allocates none.
    pool: Vec<Vec<u8>>,
    faults: Option<FaultInjector<Outgoing>>,
    send_msgs: MsgVec,
    recv: RecvRing,
    /// Counters kept here; [`NetTransport::stats`] adds those of the peers.
    counters: NetStats,
    /// Where fragmented long payloads go as they arrive (given to every peer), if set.
    placer: Option<Arc<dyn Placer>>,
    /// When each peer (by slot) last had short traffic (see [`QUIET_NS`]).
    traffic: RecentTraffic,
    /// How many `progress` calls in a row have left the bulk quanta to the next one.
    deferred_polls: u32,
    /// Whether a short message was sent since the last `progress`.
    short_sent: bool,
    /// Datagrams of lent messages the socket takes before it is full, in tests.
    #[cfg(test)]
    test_socket_room: Option<usize>,
}

impl std::fmt::Debug for UdpTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpTransport")
            .field("local", &self.local)
            .field(
                "peers",
                &self
                    .links
                    .iter()
                    .map(|l| (l.rank, l.addr))
                    .collect::<Vec<_>>(),
            )
            .field("datagram_size", &self.datagram_size)
            .field("queued_datagrams", &self.out.len())
            .field("stats", &self.stats())
            .finish_non_exhaustive()
    }
}

fn invalid(what: &'static str, why: impl ToString) -> NetError {
    NetError::Io {
        what,
        source: io::Error::new(io::ErrorKind::InvalidInput, why.to_string()),
    }
}

impl UdpTransport {
    /// Opens this rank's socket on `addr` (a concrete address peers can reach, not the
    /// unspecified one: incoming datagrams are matched by source address) with a port the
    /// system picks. `incarnation` must be nonzero and differ between restarts of a rank.
    pub fn bind(
        addr: IpAddr,
        job_key: u64,
        incarnation: u64,
        config: UdpConfig,
    ) -> Result<Self, NetError> {
        config
            .reliable
            .validate()
            .map_err(|e| invalid("UDP config", e))?;
        if incarnation == 0 {
            return Err(invalid("UDP config", "incarnation must be nonzero"));
        }
        if config.faults.as_ref().is_some_and(|f| {
            !(0.0..=1.0).contains(&f.drop)
                || !(0.0..=1.0).contains(&f.dup)
                || !(0.0..=1.0).contains(&f.reorder)
        }) {
            return Err(invalid(
                "UDP config",
                "fault probabilities must be in 0..=1",
            ));
        }
        let batch = config.batch.clamp(1, MAX_BATCH);
        // std opens sockets with SOCK_CLOEXEC, so children of this rank do not inherit it.
        let socket = UdpSocket::bind((addr, 0)).map_err(|source| NetError::Io {
            what: "binding the UDP socket",
            source,
        })?;
        socket
            .set_nonblocking(true)
            .map_err(|source| NetError::Io {
                what: "making the UDP socket non-blocking",
                source,
            })?;
        let rcvbuf = enlarge_buffers(&socket);
        let local = socket.local_addr().map_err(|source| NetError::Io {
            what: "reading the UDP socket's address",
            source,
        })?;
        let faults = config
            .faults
            .as_ref()
            .filter(|f| f.is_active())
            .map(FaultInjector::new);
        Ok(Self {
            socket,
            local,
            job_key,
            incarnation,
            datagram_size: config.reliable.max_datagram_size,
            config,
            batch,
            rcvbuf,
            connected: false,
            single: false,
            slots: Vec::new(),
            links: Vec::new(),
            by_addr: HashMap::new(),
            last_from: None,
            out: VecDeque::new(),
            due: Vec::new(),
            written: Vec::new(),
            lent_batch: Vec::new(),
            pool: Vec::new(),
            faults,
            send_msgs: MsgVec::new(batch),
            recv: RecvRing::new(batch),
            counters: NetStats::default(),
            placer: None,
            traffic: RecentTraffic::default(),
            deferred_polls: 0,
            short_sent: false,
            #[cfg(test)]
            test_socket_room: None,
        })
    }

    /// The largest datagram in use, header included (known after `connect`).
    pub fn datagram_size(&self) -> usize {
        self.datagram_size
    }

    /// The fault injector's seed, when faults are injected (to replay a run with `seed=N`).
    pub fn fault_seed(&self) -> Option<u64> {
        self.faults.as_ref().map(FaultInjector::seed)
    }

    fn slot(&self, peer: usize) -> Result<usize, NetError> {
        self.slots
            .get(peer)
            .copied()
            .flatten()
            .ok_or(NetError::NotAPeer { peer })
    }

    /// The datagram size for a job whose peers are all on loopback.
    fn loopback_size(&self, configured: usize, wanted: usize, window: usize) -> usize {
        let fits = self.rcvbuf / (2 * window.max(1));
        wanted.min(fits).min(65507).max(configured)
    }

    /// Polls every peer that may have a datagram due (sent or received to since its last poll,
    /// or a timer expired) and queues what it writes, one datagram per peer in turn, so a
    /// peer with a window of bulk data to send does not queue it all ahead of a short message
    /// to another peer. `pass` says which peers and how much of each (see [`Pass`]).
    fn transmit(&mut self, now: u64, pass: Pass) {
        let mut due = std::mem::take(&mut self.due);
        due.clear();
        for (slot, link) in self.links.iter_mut().enumerate() {
            let bulk = link.peer.queued_bytes() > BULK_QUANTUM;
            if (link.dirty || link.wake <= now) && !(bulk && pass == Pass::Short) {
                link.peer.handle_timeout(now);
                due.push(slot);
            }
        }
        let quantum = match pass {
            Pass::Short | Pass::All => usize::MAX,
            Pass::Bulk => BULK_QUANTUM,
        };
        let (traffic, size) = (self.traffic, self.datagram_size);
        let mut written = std::mem::take(&mut self.written);
        written.clear();
        written.resize(self.links.len(), 0);
        while !due.is_empty() {
            due.retain(|&slot| {
                let link = &mut self.links[slot];
                // Whole datagrams, at least one.
                let over = written[slot] > 0 && written[slot] + size > quantum;
                if over && traffic.others_within(slot, now, QUIET_NS) {
                    // Still dirty: the next call goes on.
                    return false;
                }
                let mut buf = self.pool.pop().unwrap_or_default();
                let Some(tail) = link.peer.poll_transmit_gather(now, &mut buf) else {
                    self.pool.push(buf);
                    link.dirty = false;
                    link.wake = link.peer.poll_timeout().unwrap_or(u64::MAX);
                    return false;
                };
                let d = Outgoing { slot, buf, tail };
                written[slot] += d.len();
                enqueue(&mut self.faults, &mut self.out, d, now);
                true
            });
        }
        self.due = due;
        self.written = written;
    }

    /// Queues the full datagrams `slot`'s peer can send now, leaving a partly filled last one
    /// for the next progress (where more messages may have joined it).
    fn transmit_full(&mut self, slot: usize, now: u64) {
        let payload = self.datagram_size - HEADER_LEN;
        let link = &mut self.links[slot];
        let window = link.peer.config().window;
        while link.peer.queued_bytes() >= payload && link.peer.in_flight() < window {
            let mut buf = self.pool.pop().unwrap_or_default();
            let Some(tail) = link.peer.poll_transmit_gather(now, &mut buf) else {
                self.pool.push(buf);
                break;
            };
            let d = Outgoing { slot, buf, tail };
            enqueue(&mut self.faults, &mut self.out, d, now);
        }
    }

    /// When `slot`'s window is full, reads what has arrived: the acks open it. Without this, a
    /// sender that only sends takes acks in when its send buffer refuses a message, so a
    /// stream of long messages runs a send buffer ahead of the window, and the kernel copies
    /// each message out of memory the cache lost since the copy into it (measured: a tenth to
    /// a sixth of the sender's time per MiB). Every waiting ack is read, not only the first (a
    /// later one acknowledges more), up to a window's worth of reads, so that traffic arriving
    /// without end cannot hold the send. Messages that came with the acks wait for the next
    /// progress; an error stays with the socket for the next progress.
    fn take_acks(&mut self, slot: usize, now: u64) {
        let p = &self.links[slot].peer;
        if p.in_flight() >= p.config().window {
            self.take_acks_now(slot, now);
        }
    }

    /// Writes the full datagrams `slot`'s window has room for and sends them once a batch or
    /// [`FLUSH_BYTES`] of them waits. The message is queued whatever happens here; an error
    /// stays with the queued datagrams and is reported by the next progress.
    fn send_full(&mut self, slot: usize, now: u64) {
        self.transmit_full(slot, now);
        if self.out.len() >= self.batch || self.out.len() * self.datagram_size >= FLUSH_BYTES {
            let _ = self.flush();
        }
    }

    /// Queues a copy of `head` followed by `body` for `peer` (at `slot`), with up to
    /// `send_buffer` bytes queued and unacknowledged toward it.
    fn queue_copy(
        &mut self,
        peer: usize,
        slot: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
        send_buffer: usize,
    ) -> Result<(), NetError> {
        let link = &mut self.links[slot];
        if let Err(e) = link.peer.send_gather_within(head, body, now, send_buffer) {
            self.counters.would_block += u64::from(e == SendError::WouldBlock);
            return Err(send_error(peer, e));
        }
        self.counters.messages_sent += 1;
        link.dirty = true;
        Ok(())
    }

    /// Whether a message of `len` bytes to `slot` can leave from the caller's bytes: it is
    /// larger than a datagram, no faults are injected (the injector holds datagrams past the
    /// send), and, once the acks waiting and the datagrams queued have been taken care of,
    /// nothing waits before it and the window has room.
    fn may_lend(&mut self, slot: usize, len: usize, now: u64) -> bool {
        let payload = self.datagram_size - HEADER_LEN;
        if self.faults.is_some()
            || len + RECORD_OVERHEAD <= payload
            || self.links[slot].peer.queued() > 0
        {
            return false;
        }
        self.take_acks(slot, now);
        if !self.out.is_empty() {
            // An error stays with the queued datagrams for the next progress.
            let _ = self.flush();
        }
        let p = &self.links[slot].peer;
        self.out.is_empty() && p.in_flight() < p.config().window
    }

    /// Sends `msg`, larger than a datagram, without the queued copy: its datagrams are
    /// written and handed to the kernel (which copies them) while the window has room, the
    /// window reopened by acks that came meanwhile, and only then does the peer copy what is
    /// still unacknowledged or unsent ([`Peer::retain_lent`]), where it used to copy the
    /// whole message before any of it left. That copy was a quarter of a loopback stream's
    /// sender time. Datagrams the socket refused leave with the next flush, from the copy.
    fn send_lent(&mut self, slot: usize, msg: Lent<'_>, now: u64) -> Result<(), NetError> {
        let rank = self.links[slot].rank;
        if let Err(e) = self.links[slot].peer.send_lent(msg, now) {
            self.counters.would_block += u64::from(e == SendError::WouldBlock);
            return Err(send_error(rank, e));
        }
        self.counters.messages_sent += 1;
        self.links[slot].dirty = true;
        let mut batch = std::mem::take(&mut self.lent_batch);
        let mut unsent = 0;
        loop {
            while batch.len() < self.batch {
                let mut buf = self.pool.pop().unwrap_or_default();
                match self.links[slot].peer.poll_transmit_lent(now, &mut buf, msg) {
                    Some(d) => batch.push((buf, d)),
                    None => {
                        self.pool.push(buf);
                        break;
                    }
                }
            }
            if batch.is_empty() {
                // The window is full, the message written, or the pair failed. Acks that came
                // while it left may reopen the window.
                let p = &self.links[slot].peer;
                if p.queued() == 0 || p.state() != State::Active || !self.take_acks_now(slot, now) {
                    break;
                }
                continue;
            }
            let (sent, stopped) = self.send_lent_batch(slot, &batch, msg);
            for (buf, _) in batch.drain(..sent) {
                self.pool.push(buf);
            }
            if stopped {
                unsent = batch.len();
                break;
            }
        }
        self.take_acks_now(slot, now);
        let link = &mut self.links[slot];
        link.peer.retain_lent(msg);
        for (buf, d) in batch.drain(..unsent) {
            let tail = link.peer.kept_tail(&d);
            debug_assert!(
                tail.is_some(),
                "an unsent datagram of a lent message is kept"
            );
            self.out.push_back(Outgoing { slot, buf, tail });
        }
        self.lent_batch = batch;
        if self.links[slot].peer.queued_bytes() >= self.datagram_size - HEADER_LEN {
            self.send_full(slot, now);
        }
        Ok(())
    }

    /// Hands the lent datagrams `batch` (heads here, tails in `msg`) to the kernel; returns
    /// how many are done with (sent, or lost on a refused path) and whether the socket
    /// stopped taking them (full, or an error that the next flush reports).
    fn send_lent_batch(
        &mut self,
        slot: usize,
        batch: &[(Vec<u8>, LentDatagram)],
        msg: Lent<'_>,
    ) -> (usize, bool) {
        let fd = self.socket.as_raw_fd();
        let raw = self.links[slot].raw;
        let mut done = 0;
        while done < batch.len() {
            let room = self.socket_room(batch.len() - done);
            if room == 0 {
                return (done, true);
            }
            let r = send_batch(
                self.single,
                &mut self.send_msgs,
                fd,
                batch[done..done + room]
                    .iter()
                    .map(|(h, d)| (&raw, h.as_slice(), msg.slice(d.tail.clone()))),
            );
            self.counters.send_calls += 1;
            match r {
                Ok(k) => {
                    for (h, d) in &batch[done..done + k] {
                        self.counters.packets_sent += 1;
                        self.counters.bytes_sent += (h.len() + d.tail.len()) as u64;
                    }
                    done += k;
                }
                Err(e) => match refusal(&e) {
                    Refused::Interrupted => {}
                    Refused::Lost => {
                        self.counters.dropped += 1;
                        done += 1;
                    }
                    Refused::Full | Refused::Failed => return (done, true),
                },
            }
        }
        (done, false)
    }

    /// How many of `n` lent datagrams to offer the socket: all of them, unless a test
    /// makes the socket full sooner (loopback hardly ever refuses a datagram).
    fn socket_room(&mut self, n: usize) -> usize {
        #[cfg(test)]
        if let Some(room) = &mut self.test_socket_room {
            let k = n.min(*room);
            *room -= k;
            return k;
        }
        n
    }

    /// Reads the datagrams waiting, at most a window's worth; returns whether `slot`'s
    /// window has room afterwards. An error stays with the socket for the next progress.
    fn take_acks_now(&mut self, slot: usize, now: u64) -> bool {
        let window = self.links[slot].peer.config().window;
        for _ in 0..window {
            if !matches!(self.receive(now), Ok(true)) {
                break;
            }
        }
        self.links[slot].peer.in_flight() < window
    }

    /// Sends the queued datagrams, `batch` per system call, until the queue is empty or the
    /// socket's buffer is full (the rest stays queued for the next call). On an unexpected
    /// error the datagrams stay queued too, so the error comes back on the next call.
    fn flush(&mut self) -> Result<(), NetError> {
        let fd = self.socket.as_raw_fd();
        while !self.out.is_empty() {
            let n = self.out.len().min(self.batch);
            let links = &self.links;
            let single = self.single;
            let r = if single && n == 1 && self.out[0].tail.is_none() {
                // One datagram on a connected socket: `send` copies no message header.
                let d = &self.out[0].buf;
                // SAFETY: `d` is a live byte slice for the duration of the call.
                let r = unsafe { libc::send(fd, d.as_ptr().cast(), d.len(), libc::MSG_DONTWAIT) };
                if r < 0 {
                    Err(io::Error::last_os_error())
                } else {
                    Ok(1)
                }
            } else {
                send_batch(
                    single,
                    &mut self.send_msgs,
                    fd,
                    self.out
                        .iter()
                        .take(n)
                        .map(|d| (&links[d.slot].raw, d.buf.as_slice(), d.tail())),
                )
            };
            self.counters.send_calls += 1;
            match r {
                Ok(sent) => {
                    for d in self.out.drain(..sent) {
                        self.counters.packets_sent += 1;
                        self.counters.bytes_sent += d.len() as u64;
                        self.pool.push(d.buf);
                    }
                }
                Err(e) => match refusal(&e) {
                    Refused::Interrupted => {}
                    Refused::Full => return Ok(()),
                    Refused::Lost => {
                        if let Some(d) = self.out.pop_front() {
                            self.counters.dropped += 1;
                            self.pool.push(d.buf);
                        }
                    }
                    Refused::Failed => {
                        return Err(NetError::Io {
                            what: "sendmmsg",
                            source: e,
                        })
                    }
                },
            }
        }
        Ok(())
    }

    /// Reads every datagram waiting on the socket and hands each to its peer. Returns whether
    /// any reached a peer.
    fn receive(&mut self, now: u64) -> Result<bool, NetError> {
        let fd = self.socket.as_raw_fd();
        let mut any = false;
        loop {
            let r = if self.single {
                self.recv.recv_one(fd, &self.links[0].raw)
            } else {
                self.recv.recv(fd, self.batch)
            };
            self.counters.recv_calls += 1;
            let n = match r {
                Ok(n) => n,
                Err(e) => match e.raw_os_error().unwrap_or(0) {
                    libc::EAGAIN => return Ok(any),
                    // An ICMP error reported on the socket: it says nothing about the
                    // datagrams waiting behind it.
                    libc::EINTR | libc::ECONNREFUSED | libc::EHOSTUNREACH | libc::ENETUNREACH => {
                        continue
                    }
                    _ => {
                        return Err(NetError::Io {
                            what: "recvmmsg",
                            source: e,
                        })
                    }
                },
            };
            for i in 0..n {
                self.counters.packets_received += 1;
                let (addr, bytes, truncated) = self.recv.datagram(i);
                let slot = match (addr, self.last_from) {
                    (Some(a), Some((b, slot))) if a == b => Some(slot),
                    (Some(a), _) => self.by_addr.get(&a).map(|&slot| {
                        self.last_from = Some((a, slot));
                        slot
                    }),
                    (None, _) => None,
                };
                let slot = match slot {
                    Some(slot) if !truncated => slot,
                    _ => {
                        self.counters.dropped += 1;
                        continue;
                    }
                };
                let link = &mut self.links[slot];
                // A refused datagram is counted in the peer's statistics.
                let _ = link.peer.handle_datagram(bytes, now);
                link.dirty = true;
                any = true;
            }
            if n < self.batch || self.single {
                return Ok(any);
            }
        }
    }

    /// Everything `progress` does but report failed peers.
    fn pump(&mut self, now: u64, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<usize, NetError> {
        if let Some(f) = &mut self.faults {
            let out = &mut self.out;
            f.release(now, &mut |d| out.push_back(d));
        }
        // Short messages and acks leave first, what arrived is read next (acks open windows),
        // and bulk transfers' quanta come last, so that neither waits behind them.
        self.transmit(now, Pass::Short);
        self.flush()?;
        self.receive(now)?;
        let n = self.deliver(inbox, now);
        // A poll that delivered lets the handlers run before the next quantum (an answer
        // waited for ends the wait sooner), and one after a short message was sent returns at
        // once, so that a rank sharing this CPU can answer it sooner; but at most
        // MAX_DEFERRED_POLLS in a row, so that a steady stream of small messages cannot starve
        // a transfer. Peers with nothing to send cost no system call here.
        let short = n > 0 || std::mem::take(&mut self.short_sent);
        if !short || self.deferred_polls >= MAX_DEFERRED_POLLS {
            self.deferred_polls = 0;
            self.transmit(now, Pass::Bulk);
            self.flush()?;
        } else if self.links.iter().any(|l| l.dirty) {
            self.deferred_polls += 1;
        }
        Ok(n)
    }

    /// Moves every message the peers have delivered to `inbox`, noting their traffic at
    /// `now`; returns how many.
    fn deliver(&mut self, inbox: &mut Vec<(usize, Vec<u8>)>, now: u64) -> usize {
        let mut n = 0;
        for (slot, link) in self.links.iter_mut().enumerate() {
            let before = n;
            while let Some(m) = link.peer.poll_deliver() {
                inbox.push((link.rank, m));
                n += 1;
            }
            if n > before {
                self.traffic.note(slot, now);
            }
        }
        self.counters.messages_received += n as u64;
        n
    }

    fn first_failure(&self) -> Option<NetError> {
        self.links.iter().find_map(|l| match l.peer.state() {
            State::Failed(f) => Some(NetError::PeerFailed {
                peer: l.rank,
                why: f.to_string(),
            }),
            State::Active => None,
        })
    }
}

/// A peer's refusal of a message, as the transport reports it.
fn send_error(peer: usize, e: SendError) -> NetError {
    match e {
        SendError::WouldBlock => NetError::WouldBlock,
        SendError::TooLarge { len, max } => NetError::TooLarge { len, max },
        SendError::Failed(f) => NetError::PeerFailed {
            peer,
            why: f.to_string(),
        },
    }
}

/// Why the socket refused datagrams.
enum Refused {
    /// A signal came first: try again.
    Interrupted,
    /// Its buffer is full: the datagrams wait for the next flush.
    Full,
    /// The path to the first datagram's destination is refused or down: that datagram is
    /// lost as if on the wire, and the reliable layer retransmits it.
    Lost,
    /// Anything else: reported.
    Failed,
}

fn refusal(e: &io::Error) -> Refused {
    match e.raw_os_error().unwrap_or(0) {
        libc::EINTR => Refused::Interrupted,
        libc::EAGAIN | libc::ENOBUFS => Refused::Full,
        libc::ECONNREFUSED
        | libc::EHOSTUNREACH
        | libc::ENETUNREACH
        | libc::EHOSTDOWN
        | libc::ENETDOWN
        | libc::EMSGSIZE
        | libc::EPERM
        | libc::EACCES
        | libc::EADDRNOTAVAIL => Refused::Lost,
        _ => Refused::Failed,
    }
}

/// Hands a datagram to the fault injector, if any, or queues it.
fn enqueue(
    faults: &mut Option<FaultInjector<Outgoing>>,
    out: &mut VecDeque<Outgoing>,
    d: Outgoing,
    now: u64,
) {
    match faults {
        Some(f) => f.submit(d, now, &mut |d| out.push_back(d)),
        None => out.push_back(d),
    }
}

/// Asks for large socket buffers, beyond `net.core.*mem_max` when privileged; returns the
/// receive buffer granted. Small buffers only cost throughput, so failures are ignored.
fn enlarge_buffers(socket: &UdpSocket) -> usize {
    use nix::sys::socket::{getsockopt, setsockopt, sockopt};
    if setsockopt(socket, sockopt::SndBufForce, &SOCKET_BUFFER).is_err() {
        let _ = setsockopt(socket, sockopt::SndBuf, &SOCKET_BUFFER);
    }
    if setsockopt(socket, sockopt::RcvBufForce, &SOCKET_BUFFER).is_err() {
        let _ = setsockopt(socket, sockopt::RcvBuf, &SOCKET_BUFFER);
    }
    getsockopt(socket, sockopt::RcvBuf).unwrap_or(212_992)
}

impl NetTransport for UdpTransport {
    fn kind(&self) -> NetKind {
        NetKind::Udp
    }

    fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Records the peers' addresses and creates one reliable pair per peer. When every peer
    /// is on loopback, the datagram size is raised as [`UdpConfig::loopback_datagram_size`]
    /// says. May be called once.
    fn connect(&mut self, me: usize, peers: &[Option<SocketAddr>]) -> Result<(), NetError> {
        if self.connected {
            return Err(invalid("UDP connect", "connect may be called only once"));
        }
        let net: Vec<(usize, SocketAddr)> = peers
            .iter()
            .enumerate()
            .filter(|&(r, _)| r != me)
            .filter_map(|(r, a)| a.map(|a| (r, canonical(a))))
            .collect();
        let mut rc = self.config.reliable.clone();
        let loopback = !net.is_empty() && net.iter().all(|(_, a)| a.ip().is_loopback());
        if let Some(wanted) = self.config.loopback_datagram_size.filter(|_| loopback) {
            rc.max_datagram_size = self.loopback_size(rc.max_datagram_size, wanted, rc.window);
        }
        let checksum_payloads = !(loopback && self.config.loopback_head_checksums);
        let mut slots = vec![None; peers.len()];
        let mut links = Vec::with_capacity(net.len());
        let mut by_addr = HashMap::with_capacity(net.len());
        for (rank, addr) in net {
            if by_addr.insert(addr, links.len()).is_some() {
                return Err(invalid("UDP connect", format!("two ranks share {addr}")));
            }
            slots[rank] = Some(links.len());
            links.push(Link {
                rank,
                addr,
                raw: to_raw(addr, self.local),
                peer: {
                    let mut p = Peer::new(rc.clone(), self.job_key, self.incarnation)
                        .map_err(|e| invalid("UDP config", e))?;
                    p.checksum_payloads(checksum_payloads);
                    p
                },
                dirty: false,
                wake: u64::MAX,
            });
        }
        // With one peer the socket can be connected: the kernel then skips the route lookup
        // on every send and the socket lookup on every receive (measured: round trip 1.5 to
        // 1.3 x the raw floor), and datagrams from anyone else are dropped before they reach
        // us. With several peers one socket cannot be connected.
        if links.len() == 1 {
            self.socket
                .connect(links[0].addr)
                .map_err(|e| NetError::Io {
                    what: "connecting the UDP socket to its one peer",
                    source: e,
                })?;
            self.single = true;
        }
        if let Some(p) = &self.placer {
            for link in &mut links {
                link.peer.set_placer(Some((p.clone(), link.rank)));
            }
        }
        self.datagram_size = rc.max_datagram_size;
        self.slots = slots;
        self.links = links;
        self.by_addr = by_addr;
        self.connected = true;
        Ok(())
    }

    /// Writes the unsequenced datagram at once and queues it behind what is queued; it leaves
    /// with the next flush (at once when a batch is ready).
    fn send_unsequenced(&mut self, peer: usize, msg: &[u8], now: u64) -> Result<(), NetError> {
        let slot = self.slot(peer)?;
        if self.out.len() >= UNSEQUENCED_BACKLOG {
            // The socket was full; an error stays with the queue for the next progress.
            let _ = UdpTransport::flush(self);
            if self.out.len() >= UNSEQUENCED_BACKLOG {
                self.counters.would_block += 1;
                return Err(NetError::WouldBlock);
            }
        }
        let mut buf = self.pool.pop().unwrap_or_default();
        let link = &mut self.links[slot];
        if let Err(e) = link.peer.send_unsequenced(msg, now, &mut buf) {
            self.pool.push(buf);
            return Err(send_error(peer, e));
        }
        self.counters.messages_sent += 1;
        let d = Outgoing {
            slot,
            buf,
            tail: None,
        };
        enqueue(&mut self.faults, &mut self.out, d, now);
        if self.out.len() >= self.batch {
            let _ = UdpTransport::flush(self);
        }
        Ok(())
    }

    /// One datagram's body: unsequenced messages are not fragmented.
    fn max_unsequenced(&self) -> usize {
        self.datagram_size - HEADER_LEN - RECORD_OVERHEAD
    }

    fn would_accept(&self, peer: usize, len: usize) -> bool {
        match self.slot(peer) {
            Ok(slot) => self.links[slot].peer.would_accept(len),
            Err(_) => true,
        }
    }

    /// Sends a message larger than a datagram from the caller's bytes when nothing waits
    /// before it (see [`UdpTransport::send_lent`]). Otherwise queues a copy of it; when the
    /// peer's queue fills a datagram, the acks that have arrived are read if the window is full
    /// and `msg` fills a datagram itself, the full datagrams the window has room for are
    /// written at once, and sent once a batch or [`FLUSH_BYTES`] of them is ready, so a long
    /// run of sends without progress still leaves in full datagrams.
    fn send_gather(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError> {
        let slot = self.slot(peer)?;
        let len = head.len() + body.len();
        if len > MAX_MESSAGE {
            return Err(NetError::TooLarge {
                len,
                max: MAX_MESSAGE,
            });
        }
        if len <= SHORT_MESSAGE {
            self.traffic.note(slot, now);
            self.short_sent = true;
        }
        if self.may_lend(slot, len, now) {
            return self.send_lent(slot, Lent { head, body }, now);
        }
        self.queue_copy(
            peer,
            slot,
            head,
            body,
            now,
            self.config.reliable.send_buffer,
        )?;
        let link = &self.links[slot];
        let payload = self.datagram_size - HEADER_LEN;
        if link.peer.queued_bytes() >= payload {
            if len >= payload {
                // Only for a message that fills a datagram itself: a flood of small ones into
                // a full window would pay a system call per message for it.
                self.take_acks(slot, now);
            }
            self.send_full(slot, now);
        }
        Ok(())
    }

    /// A later part of a long message: while the rank talks with other peers (within the
    /// last [`PIPELINE_NS`]) it is queued, copied, and left to the progress calls, which move
    /// it a quantum at a time between those peers' messages, so that the send returns before
    /// the message has gone; otherwise it is sent like any message.
    fn send_gather_part(
        &mut self,
        peer: usize,
        head: &[u8],
        body: &[u8],
        now: u64,
    ) -> Result<(), NetError> {
        let slot = self.slot(peer)?;
        let len = head.len() + body.len();
        if len > MAX_MESSAGE || !self.traffic.others_within(slot, now, PIPELINE_NS) {
            return self.send_gather(peer, head, body, now);
        }
        self.queue_copy(peer, slot, head, body, now, PIPELINE_SEND_BUFFER)
    }

    /// Sends what is due, receives what arrived, sends the acks that came due, and appends
    /// the delivered messages. A failed pair is reported as [`NetError::PeerFailed`] (the
    /// lowest such rank) on every call from then on, after the call's other work is done:
    /// messages appended to `inbox` before the error stay there.
    fn progress(&mut self, now: u64, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<usize, NetError> {
        let n = self.pump(now, inbox)?;
        match self.first_failure() {
            Some(e) => Err(e),
            None => Ok(n),
        }
    }

    /// A message larger than a datagram whose long payload the placer takes goes into place
    /// fragment by fragment, as each is accepted in order.
    fn set_placer(&mut self, placer: Arc<dyn Placer>) {
        for link in &mut self.links {
            link.peer.set_placer(Some((placer.clone(), link.rank)));
        }
        self.placer = Some(placer);
    }

    fn recycle(&mut self, peer: usize, buf: Vec<u8>) {
        if let Ok(slot) = self.slot(peer) {
            self.links[slot].peer.recycle(buf);
        }
    }

    /// Sends the short messages and acks; bulk transfers move in `progress`.
    fn flush(&mut self, now: u64) -> Result<(), NetError> {
        self.transmit(now, Pass::Short);
        UdpTransport::flush(self)
    }

    /// Everything the windows take, bulk transfers included.
    fn flush_out(&mut self, now: u64) -> Result<(), NetError> {
        self.transmit(now, Pass::All);
        UdpTransport::flush(self)
    }

    fn is_idle(&self) -> bool {
        self.links.iter().all(|l| l.peer.is_idle())
            && self.out.is_empty()
            && self.faults.as_ref().is_none_or(FaultInjector::is_empty)
    }

    /// `Some(0)` (at once) while sends or datagrams wait for a progress call.
    fn next_deadline(&self) -> Option<u64> {
        if !self.out.is_empty() || self.links.iter().any(|l| l.dirty) {
            return Some(0);
        }
        self.links
            .iter()
            .filter_map(|l| l.peer.poll_timeout())
            .chain(self.faults.as_ref().and_then(FaultInjector::next_release))
            .min()
    }

    fn readable_fd(&self) -> RawFd {
        self.socket.as_raw_fd()
    }

    /// Flushes, then polls (pausing 100 µs between polls) until every pair is
    /// idle with no ack owed and nothing has arrived for a quiet time (twice the largest
    /// retransmission timeout, within 50..=100 ms), so a peer that lost our last ack and
    /// retransmits is answered. Fails with [`NetError::PeerFailed`] if a pair fails with our
    /// data unacknowledged, or if data is still unacknowledged at `deadline`; a pair that
    /// fails after everything we sent was acknowledged is not an error.
    fn close(&mut self, now: &mut dyn FnMut() -> u64, deadline: u64) -> Result<(), NetError> {
        let quiet = self
            .links
            .iter()
            .map(|l| l.peer.rto().saturating_mul(2))
            .max()
            .unwrap_or(0)
            .clamp(QUIET_MIN, QUIET_MAX);
        // What arrives from now on is discarded: nothing more goes into the segment.
        self.placer = None;
        for link in &mut self.links {
            link.peer.set_placer(None);
        }
        let mut discard = Vec::new();
        let mut last_heard = now();
        loop {
            let t = now();
            for link in &mut self.links {
                link.peer.ack_now(t);
                link.dirty = true;
            }
            let heard = self.counters.packets_received;
            self.pump(t, &mut discard)?;
            discard.clear();
            if self.counters.packets_received != heard {
                last_heard = t;
            }
            let lost = self.links.iter().find_map(|l| match l.peer.state() {
                State::Failed(f) if !l.peer.is_idle() => Some((l.rank, f)),
                _ => None,
            });
            if let Some((peer, f)) = lost {
                return Err(NetError::PeerFailed {
                    peer,
                    why: format!("{f} before acknowledging our last data"),
                });
            }
            let settled =
                self.is_idle() && self.links.iter().all(|l| l.peer.poll_timeout().is_none());
            if settled && t.saturating_sub(last_heard) >= quiet {
                return Ok(());
            }
            if t >= deadline {
                return match self.links.iter().find(|l| !l.peer.is_idle()) {
                    Some(l) => Err(NetError::PeerFailed {
                        peer: l.rank,
                        why: "data still unacknowledged when closing timed out".into(),
                    }),
                    None => Ok(()),
                };
            }
            std::thread::sleep(LINGER_POLL);
        }
    }

    fn backlog(&self, peer: usize) -> super::Backlog {
        let Some(link) = self
            .slots
            .get(peer)
            .copied()
            .flatten()
            .map(|i| &self.links[i])
        else {
            return super::Backlog::default();
        };
        super::Backlog {
            unacked: link.peer.in_flight() as u64,
            queued_bytes: link.peer.queued_bytes() as u64,
        }
    }

    fn stats(&self) -> NetStats {
        let mut s = self.counters;
        for l in &self.links {
            let p = l.peer.stats();
            s.retransmissions += p.retransmissions;
            s.unsequenced_sent += p.unsequenced_sent;
            s.unsequenced_received += p.unsequenced_delivered;
            s.unsequenced_duplicates += p.unsequenced_duplicates;
            s.lent_messages += p.lent_messages;
            s.lent_bytes_kept += p.lent_bytes_kept;
            s.dropped += p.malformed_dropped
                + p.unsequenced_duplicates
                + p.foreign_dropped
                + p.stale_dropped
                + p.failed_dropped
                + p.duplicates_dropped
                + p.out_of_window_dropped
                + p.recv_full_dropped;
        }
        s.faults_injected = self.faults.as_ref().map_or(0, FaultInjector::injected);
        s
    }
}
