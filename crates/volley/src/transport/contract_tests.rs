//! The [`Transport`] contract (see [`super::contract`]) as tests written once, generic over a
//! [`Harness`] that makes a connected sender and receiver, and run on every transport: shared
//! memory (a rank's loopback rings) and the network route over UDP and over TCP. A new
//! transport adds a harness and one line.

use super::contract::{
    Body, Class, GiveUp, Inbound, LongGuard, Outbound, SendRefused, Sink, Transport, BLOCKED_DONE,
};
use super::net::contract_tests::{connect_all, LOCAL};
use super::net::link::{NetLink, Placement};
use super::net::poll_policy::PollPolicy;
use super::net::tcp::{TcpConfig, TcpTransport};
use super::net::udp::{UdpConfig, UdpTransport};
use super::net::NetTransport;
use super::shm::link::Links;
use super::shm::wake_fd::WakeFd;
use super::shm::{Layout, Region};
use super::Channel;
use crate::refusal::Refusal;
use std::cell::{Cell, RefCell};
use std::sync::Arc;
use std::time::{Duration, Instant};

const KEY: u64 = 0x5eed_0fc0_de00;
/// The receiver's segment length in every harness.
const SEGMENT: usize = 1 << 16;

/// A sender and a receiver of one transport (the same value for a loopback).
pub(crate) struct Pair<T> {
    sender: T,
    receiver: Option<T>,
    /// The receiver's number at the sender.
    dest: usize,
}

impl<T> Pair<T> {
    fn receiver(&self) -> &T {
        self.receiver.as_ref().unwrap_or(&self.sender)
    }
}

/// One transport as the contract tests drive it.
pub(crate) trait Harness {
    /// The transport.
    type T: Transport;

    /// A connected pair whose receiver places long payloads under `guard`.
    fn pair(guard: Option<Arc<dyn LongGuard>>) -> Pair<Self::T>;

    /// Lets the receiver take in what arrived (before a poll hands it on).
    fn take_in(_t: &Self::T) {}

    /// The receiver's segment.
    fn segment(t: &Self::T) -> &[u8];
}

/// A message as the recording sink saw it.
#[derive(Debug, Clone, PartialEq)]
struct Seen {
    ch: Channel,
    class: Class,
    handler: u16,
    args: Vec<u64>,
    payload: Vec<u8>,
    long: Option<(usize, usize)>,
}

/// Records what it is handed; refuses handler 999 (as a sink refuses an unknown handler).
#[derive(Default)]
struct Recorder {
    seen: RefCell<Vec<Seen>>,
    dropped: Cell<usize>,
}

impl Sink for Recorder {
    type Batch<'s> = ();

    fn begin_batch(&self, _src_rank: usize) {}

    fn run_short<'s>(
        &'s self,
        _batch: &mut (),
        ch: Channel,
        _route: u32,
        handler: u16,
        args: &'s [u64],
    ) -> bool {
        self.record(ch, Class::Short, handler, args, Body::None)
    }

    fn run_lone_short(
        &self,
        ch: Channel,
        _route: u32,
        _src_rank: usize,
        handler: u16,
        args: &[u64],
    ) -> bool {
        self.record(ch, Class::Short, handler, args, Body::None)
    }

    fn run(&self, _batch: &(), msg: Inbound<'_>) -> Result<(), ()> {
        match self.record(msg.ch, msg.class, msg.handler, msg.args, msg.body) {
            true => Ok(()),
            false => Err(()),
        }
    }

    fn dropped(&self) {
        self.dropped.set(self.dropped.get() + 1);
    }

    fn corrupt(&self, src: usize, ch: Channel, word: u64) -> ! {
        panic!("corrupt stream from {src} on {ch:?}: {word:#x}")
    }
}

impl Recorder {
    fn record(&self, ch: Channel, class: Class, handler: u16, args: &[u64], body: Body) -> bool {
        if handler == 999 {
            return false;
        }
        let (payload, long) = match body {
            Body::None => (Vec::new(), None),
            Body::Medium(p) => (p.to_vec(), None),
            Body::Long { offset, len } => (Vec::new(), Some((offset, len))),
        };
        self.seen.borrow_mut().push(Seen {
            ch,
            class,
            handler,
            args: args.to_vec(),
            payload,
            long,
        });
        true
    }
}

/// Polls the receiver until `n` messages were handed on, dropped ones included (or panics
/// after a while).
fn receive<H: Harness>(pair: &Pair<H::T>, sink: &Recorder, n: usize) {
    receive_until::<H>(pair, sink, n, || {
        sink.seen.borrow().len() + sink.dropped.get() >= n
    });
}

/// Polls the receiver until `done` (or panics after a while, saying how many of `n`
/// messages arrived).
fn receive_until<H: Harness>(
    pair: &Pair<H::T>,
    sink: &Recorder,
    n: usize,
    done: impl Fn() -> bool,
) {
    let start = Instant::now();
    while !done() {
        // Both ends make progress, as both ranks of a job poll: the sender takes in acks and
        // retransmits what was lost.
        pair.sender.flush();
        H::take_in(&pair.sender);
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "{} of {n} messages arrived",
            sink.seen.borrow().len()
        );
        H::take_in(pair.receiver());
        for ch in [Channel::Reply, Channel::Request] {
            pair.receiver().poll(ch, sink, || false);
        }
    }
}

/// What a sender does while the transport cannot take its message: lets the receiver catch up
/// into `sink`.
fn drain<'a, H: Harness>(pair: &'a Pair<H::T>, sink: &'a Recorder) -> impl FnMut(u32) + 'a {
    move |_| {
        H::take_in(pair.receiver());
        for ch in [Channel::Reply, Channel::Request] {
            pair.receiver().poll(ch, sink, || false);
        }
    }
}

fn msg<'a>(
    ch: Channel,
    class: Class,
    handler: u16,
    args: &'a [u64],
    payload: &'a [u8],
) -> Outbound<'a> {
    Outbound {
        ch,
        class,
        handler,
        args,
        payload,
        offset: 0,
    }
}

/// Every class, on both channels, with every argument count and payloads around the sizes
/// where a transport changes how it carries them, arrives once, intact and in order.
pub(crate) fn every_class_arrives_intact_and_in_order<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).expect("the receiver is a peer");
    let sink = Recorder::default();
    let mut sent = Vec::new();
    let bytes: Vec<u8> = (0..8192u32).map(|i| (i * 13 + i / 7) as u8).collect();
    let mut handler = 0u16;
    for ch in [Channel::Request, Channel::Reply] {
        for nargs in [0usize, 1, 6, 7, 8, 16] {
            let args: Vec<u64> = (0..nargs as u64)
                .map(|i| i << 40 | handler as u64)
                .collect();
            handler += 1;
            a.send(
                peer,
                msg(ch, Class::Short, handler, &args, &[]),
                drain::<H>(&pair, &sink),
            )
            .unwrap();
            sent.push((ch, Class::Short, handler, args, 0usize));
        }
        for len in [0usize, 1, 63, 400, 1000, 4096, 8192] {
            let args = [len as u64, 7];
            handler += 1;
            a.send(
                peer,
                msg(ch, Class::Medium, handler, &args, &bytes[..len]),
                drain::<H>(&pair, &sink),
            )
            .unwrap();
            sent.push((ch, Class::Medium, handler, args.to_vec(), len));
        }
    }
    let system_args = [3u64, 4];
    a.send(
        peer,
        msg(Channel::Request, Class::System, 2, &system_args, &[]),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    sent.push((Channel::Request, Class::System, 2, system_args.to_vec(), 0));
    receive::<H>(&pair, &sink, sent.len());
    let seen = sink.seen.borrow();
    for ch in [Channel::Request, Channel::Reply] {
        let want: Vec<_> = sent.iter().filter(|s| s.0 == ch).collect();
        let got: Vec<_> = seen.iter().filter(|s| s.ch == ch).collect();
        assert_eq!(got.len(), want.len(), "{ch:?}: messages lost or doubled");
        for (g, (_, class, handler, args, len)) in got.iter().zip(want) {
            assert_eq!(
                (g.class, g.handler),
                (*class, *handler),
                "{ch:?}: out of order"
            );
            assert_eq!(&g.args, args, "{ch:?}: handler {handler}'s arguments");
            assert!(
                g.payload == bytes[..*len],
                "{ch:?}: handler {handler}'s payload"
            );
        }
    }
    assert_eq!(sink.dropped.get(), 0);
}

/// Medium payloads of the largest size and around it, read from every alignment within a
/// page (where shared memory places them in its buffers), arrive intact, also while all the
/// medium buffers are in flight at once. Shared memory only: the network harnesses carry
/// smaller messages.
#[test]
fn shm_medium_payloads_from_any_alignment_arrive_intact() {
    medium_payloads_from_any_alignment_arrive_intact::<Shm>();
}

fn medium_payloads_from_any_alignment_arrive_intact<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).expect("the receiver is a peer");
    let sink = Recorder::default();
    let max = a.max_payload(Class::Medium);
    let page = 4096;
    let source: Vec<u8> = (0..max + 2 * page)
        .map(|i| (i * 7 + i / 251) as u8)
        .collect();
    let base = source.as_ptr().align_offset(page);
    let mut sent = Vec::new();
    for at in [0usize, 1, 8, 16, 31, 64, 2048, 4032, 4080, 4095] {
        for len in [max, max - 1, max / 2 + 3, 4096, 1000] {
            let start = base + at;
            let handler = sent.len() as u16 + 1;
            let payload = &source[start..start + len];
            a.send(
                peer,
                msg(Channel::Request, Class::Medium, handler, &[], payload),
                drain::<H>(&pair, &sink),
            )
            .unwrap();
            sent.push((handler, payload));
        }
    }
    receive::<H>(&pair, &sink, sent.len());
    let seen = sink.seen.borrow();
    assert_eq!(seen.len(), sent.len(), "messages lost or doubled");
    for (g, (handler, payload)) in seen.iter().zip(&sent) {
        assert_eq!(g.handler, *handler, "out of order");
        assert!(
            g.payload == *payload,
            "handler {handler}'s payload of {} bytes",
            payload.len()
        );
    }
    assert_eq!(sink.dropped.get(), 0);
}

/// A long payload lands at its offset in the receiver's segment before its handler runs.
pub(crate) fn long_payloads_land_before_their_handler<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    let bytes: Vec<u8> = (0..4096u32).map(|i| (i * 31 + 5) as u8).collect();
    for (i, (offset, len)) in [(0usize, 8usize), (100, 1), (8192, 4096)]
        .into_iter()
        .enumerate()
    {
        let args = [i as u64];
        let out = Outbound {
            offset,
            ..msg(
                Channel::Request,
                Class::Long,
                i as u16,
                &args,
                &bytes[..len],
            )
        };
        a.send(peer, out, drain::<H>(&pair, &sink)).unwrap();
    }
    receive::<H>(&pair, &sink, 3);
    let seen = sink.seen.borrow();
    let seg = H::segment(pair.receiver());
    for (i, (offset, len)) in [(0usize, 8usize), (100, 1), (8192, 4096)]
        .into_iter()
        .enumerate()
    {
        assert_eq!(seen[i].long, Some((offset, len)));
        assert_eq!(seen[i].class, Class::Long);
        assert!(
            seg[offset..offset + len] == bytes[..len],
            "long {i} did not land"
        );
    }
}

/// Refuses every long payload that touches `[lo, hi)`, counting refusals.
struct Fence {
    lo: usize,
    hi: usize,
    refused: std::sync::atomic::AtomicUsize,
}

impl LongGuard for Fence {
    fn admit(&self, _upper: *mut u8, offset: usize, len: usize) -> Result<(), Refusal> {
        if offset < self.hi && offset + len > self.lo {
            self.refused
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            return Err(Refusal::OnSegment);
        }
        Ok(())
    }
}

/// A long payload the guard refuses never lands and runs no handler; a payload larger than
/// the transport carries is refused at the sender; what follows still arrives.
pub(crate) fn refused_messages_change_nothing<H: Harness>() {
    let fence = Arc::new(Fence {
        lo: 4096,
        hi: 8192,
        refused: Default::default(),
    });
    let pair = H::pair(Some(fence.clone()));
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    let bytes = vec![0xa5u8; 64];
    let on_fence = Outbound {
        offset: 4096 - 32,
        ..msg(Channel::Request, Class::Long, 1, &[], &bytes)
    };
    match a.send(peer, on_fence, drain::<H>(&pair, &sink)) {
        // Refused where the payload would be written: at the sender (shared memory) ...
        Err(SendRefused::Guarded(Refusal::OnSegment)) | Ok(()) => {}
        other => panic!("a long onto a guarded range: {other:?}"),
    }
    let max = a.max_payload(Class::Medium);
    let huge = vec![0u8; max + 1];
    assert_eq!(
        a.send(
            peer,
            msg(Channel::Request, Class::Medium, 2, &[], &huge),
            drain::<H>(&pair, &sink)
        ),
        Err(SendRefused::TooLarge { len: max + 1, max })
    );
    a.send(
        peer,
        msg(Channel::Request, Class::Short, 3, &[33], &[]),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    // ... or at the receiver (the network), dropped there: wait until the short behind it
    // has arrived, so the refused one has too.
    receive_until::<H>(&pair, &sink, 1, || !sink.seen.borrow().is_empty());
    let seen = sink.seen.borrow();
    assert_eq!(seen.len(), 1, "only the short arrives: {seen:?}");
    assert_eq!((seen[0].handler, &seen[0].args[..]), (3, &[33u64][..]));
    assert_eq!(fence.refused.load(std::sync::atomic::Ordering::Relaxed), 1);
    let seg = H::segment(pair.receiver());
    assert!(
        seg[4096 - 32..4096 + 32].iter().all(|&b| b == 0),
        "a refused long landed"
    );
}

/// A message whose handler the sink refuses is counted as dropped; the stream goes on.
pub(crate) fn a_refused_handler_is_dropped_and_counted<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    let payload = [1u8; 100];
    a.send(
        peer,
        msg(Channel::Request, Class::Short, 999, &[1], &[]),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    a.send(
        peer,
        msg(Channel::Request, Class::Medium, 999, &[1], &payload),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    a.send(
        peer,
        msg(Channel::Request, Class::Short, 5, &[2], &[]),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    receive::<H>(&pair, &sink, 3);
    assert_eq!(sink.dropped.get(), 2);
    assert_eq!(sink.seen.borrow()[0].args, [2]);
}

/// A sender that outruns its receiver is told through `blocked`, counting up from 0 in each
/// wait and then `BLOCKED_DONE` once the message went through; once the receiver catches up
/// everything arrives, in order, once.
pub(crate) fn a_full_transport_blocks_until_the_receiver_catches_up<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    let payload = vec![7u8; 3000];
    let (n, mut waits) = (3_000u64, 0u64);
    for i in 0..n {
        let m = msg(
            Channel::Request,
            Class::Medium,
            1,
            std::slice::from_ref(&i),
            &payload,
        );
        let (mut next, mut done) = (0, 0);
        a.send(peer, m, |attempt| {
            if attempt == BLOCKED_DONE {
                assert!(
                    next > 0,
                    "a send that did not wait said it was done waiting"
                );
                done += 1;
                return;
            }
            assert_eq!(done, 0, "an attempt after the wait was done");
            assert_eq!(attempt, next, "attempts count up from 0");
            next += 1;
            waits += u64::from(attempt == 0);
            H::take_in(pair.receiver());
            pair.receiver().poll(Channel::Request, &sink, || false);
        })
        .unwrap();
        assert_eq!(
            done,
            u32::from(next > 0),
            "a wait ends with one BLOCKED_DONE"
        );
    }
    a.flush();
    assert!(
        waits > 0,
        "{n} messages of 3000 bytes never filled the transport"
    );
    receive::<H>(&pair, &sink, n as usize);
    let seen = sink.seen.borrow();
    assert!(
        seen.iter().map(|s| s.args[0]).eq(0..n),
        "lost, doubled or reordered"
    );
}

/// A send under the give-up policy to a receiver that does not poll goes while
/// [`Transport::sendable`] says so and is refused with [`SendRefused::WouldBlock`] exactly
/// when it does not, leaving nothing behind: a refused long wrote nothing into the segment,
/// and once the receiver catches up exactly the messages that went arrive, once and in order.
pub(crate) fn a_send_that_gives_up_changes_nothing<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    // Refused longs aim here, where no long that goes ever writes.
    let canary = SEGMENT / 2;
    let small = [1u8; 40];
    let big = [2u8; 3000];
    let long = [3u8; 256];
    let (mut went, mut refusals, mut tries) = (0u64, 0, 0u64);
    while refusals < 3 {
        tries += 1;
        assert!(tries < 1_000_000, "the transport never refused");
        let (class, payload) = match tries % 4 {
            0 => (Class::Short, &[][..]),
            1 => (Class::Medium, &small[..]),
            2 => (Class::Medium, &big[..]),
            _ => (Class::Long, &long[..]),
        };
        let args = [went];
        let predicted = a.sendable(peer, Channel::Request, class, 1, payload.len());
        let offset = match predicted {
            true => (went as usize % 120) * long.len(),
            false => canary,
        };
        let m = Outbound {
            offset,
            ..msg(Channel::Request, class, 1, &args, payload)
        };
        match a.send(peer, m, GiveUp) {
            Ok(()) => {
                assert!(predicted, "{class:?} went though not sendable");
                went += 1;
            }
            Err(SendRefused::WouldBlock) => {
                assert!(!predicted, "{class:?} refused though sendable");
                refusals += 1;
                let segment = H::segment(pair.receiver());
                assert!(
                    segment[canary..canary + long.len()].iter().all(|&b| b == 0),
                    "a refused long wrote into the segment"
                );
                a.flush();
                receive::<H>(&pair, &sink, went as usize);
                let seen = sink.seen.borrow();
                assert!(
                    seen.iter().map(|s| s.args[0]).eq(0..went),
                    "lost, doubled or reordered"
                );
            }
            Err(e) => panic!("refused: {e:?}"),
        }
    }
}

/// Something taken in and not yet handed on is pending; after the poll it is not.
pub(crate) fn pending_until_polled<H: Harness>() {
    let pair = H::pair(None);
    let a = &pair.sender;
    let peer = a.peer(pair.dest).unwrap();
    let sink = Recorder::default();
    assert!(!pair.receiver().pending());
    a.send(
        peer,
        msg(Channel::Reply, Class::Short, 1, &[], &[]),
        drain::<H>(&pair, &sink),
    )
    .unwrap();
    let start = Instant::now();
    while !pair.receiver().pending() {
        assert!(start.elapsed() < Duration::from_secs(10), "never pending");
        H::take_in(pair.receiver());
    }
    pair.receiver().poll(Channel::Reply, &sink, || false);
    assert_eq!(sink.seen.borrow().len(), 1);
    assert!(!pair.receiver().pending());
}

/// Runs the contract on the transport of a [`Harness`], as a module of tests.
macro_rules! transport_contract {
    ($name:ident, $harness:ty) => {
        mod $name {
            use super::*;

            #[test]
            fn every_class_arrives_intact_and_in_order() {
                super::every_class_arrives_intact_and_in_order::<$harness>();
            }

            #[test]
            fn long_payloads_land_before_their_handler() {
                super::long_payloads_land_before_their_handler::<$harness>();
            }

            #[test]
            fn refused_messages_change_nothing() {
                super::refused_messages_change_nothing::<$harness>();
            }

            #[test]
            fn a_refused_handler_is_dropped_and_counted() {
                super::a_refused_handler_is_dropped_and_counted::<$harness>();
            }

            #[test]
            fn a_full_transport_blocks_until_the_receiver_catches_up() {
                super::a_full_transport_blocks_until_the_receiver_catches_up::<$harness>();
            }

            #[test]
            fn a_send_that_gives_up_changes_nothing() {
                super::a_send_that_gives_up_changes_nothing::<$harness>();
            }

            #[test]
            fn pending_until_polled() {
                super::pending_until_polled::<$harness>();
            }
        }
    };
}

/// Shared memory: a rank of one sending into its own rings (small ones, and few medium
/// buffers, so that both fill).
struct Shm;

impl Harness for Shm {
    type T = Links;

    fn pair(guard: Option<Arc<dyn LongGuard>>) -> Pair<Links> {
        let layout = Layout {
            ranks: 1,
            ring_slots: 64,
            pool_bufs: 2,
            segment_len: SEGMENT,
        };
        let region = Region::create(layout, 0, KEY).expect("a region");
        let wake = WakeFd::new().expect("an eventfd");
        let links = Links::new(0, KEY, vec![region], &[0], vec![None], vec![wake], guard);
        Pair {
            sender: links,
            receiver: None,
            dest: 0,
        }
    }

    fn segment(t: &Links) -> &[u8] {
        let region = t.region(0);
        // SAFETY: the segment is mapped for as long as the links live; the test reads it
        // while no message is in flight.
        unsafe { std::slice::from_raw_parts(region.segment_ptr(), region.segment_len()) }
    }
}

/// The network route: two ranks, each with its own segment, over a network transport.
struct NetPair;

/// A rank's segment for the network harnesses, kept alive by a leak (tests only).
fn net_link(t: Box<dyn NetTransport>, guard: Option<Arc<dyn LongGuard>>) -> NetLink {
    let segment: &'static mut [u8] = Box::leak(vec![0u8; SEGMENT].into_boxed_slice());
    let upper: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    let placement = Placement {
        segment: segment.as_mut_ptr(),
        len: SEGMENT,
        upper: upper.as_mut_ptr(),
        guard,
    };
    let fail = Box::new(|e| panic!("the network failed: {e}"));
    NetLink::new(t, 2, PollPolicy::Always, placement, fail)
}

impl NetPair {
    fn pair<T: NetTransport + 'static>(
        ts: Vec<T>,
        guard: Option<Arc<dyn LongGuard>>,
    ) -> Pair<NetLink> {
        let mut ts = connect_all(ts).into_iter();
        let a = ts.next().unwrap();
        let b = ts.next().unwrap();
        Pair {
            sender: net_link(Box::new(a), None),
            receiver: Some(net_link(Box::new(b), guard)),
            dest: 1,
        }
    }

    fn segment(t: &NetLink) -> &[u8] {
        t.placed_segment()
    }
}

/// The network route over UDP.
struct Udp;

impl Harness for Udp {
    type T = NetLink;

    fn pair(guard: Option<Arc<dyn LongGuard>>) -> Pair<NetLink> {
        let bind = || {
            let incarnation = crate::bootstrap::random_u64() | 1;
            // A small send buffer, so that a flood fills it.
            let mut config = UdpConfig::default();
            config.reliable.max_message_size = 64 << 10;
            config.reliable.send_buffer = 256 << 10;
            UdpTransport::bind(LOCAL, KEY, incarnation, config).expect("a UDP socket")
        };
        NetPair::pair(vec![bind(), bind()], guard)
    }

    fn take_in(t: &NetLink) {
        t.take_in();
    }

    fn segment(t: &NetLink) -> &[u8] {
        NetPair::segment(t)
    }
}

/// The network route over TCP.
struct Tcp;

impl Harness for Tcp {
    type T = NetLink;

    fn pair(guard: Option<Arc<dyn LongGuard>>) -> Pair<NetLink> {
        // Small queues and socket buffers, so that a flood fills them.
        let config = TcpConfig {
            socket_buffer: 64 << 10,
            max_queued: 1 << 20,
            ..TcpConfig::default()
        };
        let bind = || TcpTransport::bind(LOCAL, KEY, config.clone()).expect("a TCP listener");
        NetPair::pair(vec![bind(), bind()], guard)
    }

    fn take_in(t: &NetLink) {
        t.take_in();
    }

    fn segment(t: &NetLink) -> &[u8] {
        NetPair::segment(t)
    }
}

transport_contract!(shm, Shm);
transport_contract!(udp, Udp);
transport_contract!(tcp, Tcp);
