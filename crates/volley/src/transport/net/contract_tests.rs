//! The [`NetTransport`] contract (the [parent module](super)'s docs) as tests written once,
//! generic over a [`Harness`] that makes transports bound on 127.0.0.1, and run on every
//! transport by [`contract_tests!`] in its own tests module. The helpers are shared with the
//! transports' own tests.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::RawFd;
use std::sync::OnceLock;
use std::thread;
use std::time::{Duration, Instant};

use super::{NetError, NetTransport, MAX_MESSAGE};

/// Where every test transport lives.
pub(crate) const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

/// Messages a rank delivered: `(source rank, bytes)`.
pub(crate) type Inbox = Vec<(usize, Vec<u8>)>;

/// What a test needs its transports to be set up for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Setup {
    /// The transport's defaults (generous test timeouts aside).
    Default,
    /// A send queue toward a peer that fills at well under a megabyte, and messages up to
    /// 64 KiB at least.
    SmallQueue,
    /// A silent peer is declared failed within half a second.
    QuickFailure,
}

/// One transport as the contract tests drive it.
pub(crate) trait Harness {
    /// The transport.
    type T: NetTransport + 'static;

    /// Message sizes around which this transport changes how it carries a message (buffer,
    /// chunk or datagram sizes), sent on top of the common ones.
    const BOUNDARY_SIZES: &'static [usize];

    /// A transport bound on [`LOCAL`], not yet connected.
    fn bind(setup: Setup) -> Self::T;

    /// `n` transports connected as ranks `0..n`.
    fn mesh(n: usize, setup: Setup) -> Vec<Self::T> {
        connect_all((0..n).map(|_| Self::bind(setup)).collect())
    }

    /// Checks of the transport's own after [`two_ranks_stream_both_ways`] sent `count`
    /// messages each way.
    fn after_stream(_ts: &[Self::T], _count: u64) {}

    /// Checks of its own after [`all_to_all_among_four`].
    fn after_all_to_all(_ts: &[Self::T]) {}

    /// Checks of its own on the sender in [`flood_blocks_then_drains_in_order`], once its
    /// sends are refused.
    fn when_flooded(_sender: &Self::T) {}

    /// Checks of its own in [`failed_peer_is_reported_by_rank`], after rank 1's failure was
    /// reported to rank 0 (`t`), `waited` after rank 0's last send.
    fn after_peer_failure(_t: &mut Self::T, _waited: Duration) {}

    /// Checks of its own on each transport after [`simultaneous_close_after_all_to_all`].
    fn after_close(_t: &Self::T) {}
}

/// Runs the contract on the transport of a [`Harness`], as a `contract` module of tests.
macro_rules! contract_tests {
    ($harness:ty) => {
        /// The network transport contract, on this transport.
        mod contract {
            use super::*;
            use $crate::transport::net::contract_tests as c;

            #[test]
            fn refuses_what_is_not_a_peer() {
                c::refuses_what_is_not_a_peer::<$harness>();
            }

            #[test]
            fn flush_alone_sends_what_is_queued() {
                c::flush_alone_sends_what_is_queued::<$harness>();
            }

            #[test]
            fn two_ranks_stream_both_ways() {
                c::two_ranks_stream_both_ways::<$harness>();
            }

            #[test]
            fn all_to_all_among_four() {
                c::all_to_all_among_four::<$harness>();
            }

            #[test]
            fn sizes_arrive_intact_both_ways() {
                c::sizes_arrive_intact_both_ways::<$harness>();
            }

            #[test]
            fn flood_blocks_then_drains_in_order() {
                c::flood_blocks_then_drains_in_order::<$harness>();
            }

            #[test]
            fn failed_peer_is_reported_by_rank() {
                c::failed_peer_is_reported_by_rank::<$harness>();
            }

            #[test]
            fn close_right_after_sending_delivers_everything() {
                c::close_right_after_sending_delivers_everything::<$harness>();
            }

            #[test]
            fn simultaneous_close_after_all_to_all() {
                c::simultaneous_close_after_all_to_all::<$harness>();
            }
        }
    };
}
pub(crate) use contract_tests;

/// Nanoseconds since the first call: the clock the tests give the transports.
pub(crate) fn now() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

/// A check that fails, naming what was awaited, once `secs` have passed.
pub(crate) fn give_up_after(secs: u64) -> impl Fn(&str) {
    let end = Instant::now() + Duration::from_secs(secs);
    move |what: &str| assert!(Instant::now() < end, "timed out: {what}")
}

/// A message of `len` bytes whose content depends on `tag`; its first 8 bytes (or fewer) are
/// `tag` itself.
pub(crate) fn message(tag: u64, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|i| (tag as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect();
    let n = len.min(8);
    m[..n].copy_from_slice(&tag.to_le_bytes()[..n]);
    m
}

/// The tag of a [`message`] of at least 8 bytes.
pub(crate) fn tag_of(m: &[u8]) -> u64 {
    u64::from_le_bytes(m[..8].try_into().unwrap())
}

/// Checks that `m` is exactly `message(tag, len)`.
pub(crate) fn assert_message(m: &[u8], tag: u64, len: usize) {
    assert_eq!(m.len(), len, "length of message {tag}");
    assert!(m == message(tag, len), "content of message {tag}");
}

/// The tag of message `seq` from `src` to `dst`, so that a message delivered to the wrong
/// rank or attributed to the wrong source is caught.
pub(crate) fn pair_tag(src: usize, dst: usize, seq: u64) -> u64 {
    ((src as u64) << 40) | ((dst as u64) << 32) | seq
}

/// One empty inbox per rank.
pub(crate) fn inboxes(n: usize) -> Vec<Inbox> {
    (0..n).map(|_| Vec::new()).collect()
}

/// One progress call on every transport.
pub(crate) fn pump<T: NetTransport>(ts: &mut [T], inboxes: &mut [Inbox]) {
    for (t, inbox) in ts.iter_mut().zip(inboxes.iter_mut()) {
        t.progress(now(), inbox).expect("progress");
    }
}

/// Sends, progressing everyone while the queue is full.
pub(crate) fn send_retry<T: NetTransport>(
    ts: &mut [T],
    ins: &mut [Inbox],
    from: usize,
    to: usize,
    m: &[u8],
) {
    let check = give_up_after(10);
    loop {
        match ts[from].send(to, m, now()) {
            Ok(()) => return,
            Err(NetError::WouldBlock) => pump(ts, ins),
            Err(e) => panic!("send {from}->{to}: {e}"),
        }
        check("send_retry");
    }
}

/// Connects bound transports as ranks `0..`, every one reachable by every other.
pub(crate) fn connect_all<T: NetTransport + 'static>(ts: Vec<T>) -> Vec<T> {
    let addrs: Vec<Option<SocketAddr>> = ts.iter().map(|t| Some(t.local_addr())).collect();
    connect_job(ts, &addrs)
}

/// Connects bound transports as ranks `0..`, of a job whose address table is `addrs`, each
/// in its own thread (a TCP connect blocks until the higher ranks have arrived).
pub(crate) fn connect_job<T: NetTransport + 'static>(
    ts: Vec<T>,
    addrs: &[Option<SocketAddr>],
) -> Vec<T> {
    let handles: Vec<_> = ts
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            let mut peers = addrs.to_vec();
            peers[me] = None;
            thread::spawn(move || t.connect(me, &peers).map(|()| t))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("connect thread").expect("connect"))
        .collect()
}

/// Whether `fd` becomes readable within `ms` milliseconds.
fn readable_within(fd: RawFd, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, alive for the duration of the call.
    unsafe { libc::poll(&mut p, 1, ms) > 0 }
}

/// Every transport sends `count` messages of [`pair_tag`]s, `len(seq)` bytes (at least 8), to
/// every other one, up to `chunk` per peer per round (fewer when a send is refused with
/// `WouldBlock`), and progresses once a round; checks each delivery is the next one expected
/// from its source, then that nothing more arrives while every transport goes idle.
pub(crate) fn exchange<T: NetTransport>(
    ts: &mut [T],
    count: u64,
    len: impl Fn(u64) -> usize,
    chunk: u64,
    limit: Duration,
) {
    let n = ts.len();
    let start = Instant::now();
    let mut sent = vec![vec![0u64; n]; n];
    let mut got = vec![vec![0u64; n]; n];
    let mut inbox = Inbox::new();
    let done = |got: &Vec<Vec<u64>>| (0..n).all(|d| (0..n).all(|s| s == d || got[d][s] == count));
    let check = |d: usize, inbox: &mut Inbox, got: &mut Vec<Vec<u64>>| {
        for (s, m) in inbox.drain(..) {
            assert_ne!(s, d);
            let seq = got[d][s];
            assert_eq!(
                tag_of(&m),
                pair_tag(s, d, seq),
                "rank {d} from {s}: out of order, duplicate or misattributed"
            );
            assert_message(&m, pair_tag(s, d, seq), len(seq));
            got[d][s] += 1;
        }
    };
    while !done(&got) {
        assert!(
            start.elapsed() < limit,
            "stalled: got {got:?}, stats {:?}",
            ts.iter().map(|t| t.stats()).collect::<Vec<_>>()
        );
        for a in 0..n {
            for b in (0..n).filter(|&b| b != a) {
                let stop = (sent[a][b] + chunk).min(count);
                while sent[a][b] < stop {
                    let seq = sent[a][b];
                    assert!(len(seq) >= 8, "a message carries its 8-byte tag");
                    match ts[a].send(b, &message(pair_tag(a, b, seq), len(seq)), now()) {
                        Ok(()) => sent[a][b] += 1,
                        Err(NetError::WouldBlock) => break,
                        Err(e) => panic!("{e}"),
                    }
                }
            }
        }
        for (d, t) in ts.iter_mut().enumerate() {
            t.progress(now(), &mut inbox).unwrap();
            check(d, &mut inbox, &mut got);
        }
    }
    // Let the last acks and any stray retransmissions settle; nothing more may be delivered.
    let settle = Instant::now();
    while !ts.iter().all(|t| t.is_idle()) || settle.elapsed() < Duration::from_millis(20) {
        assert!(start.elapsed() < limit, "not idle");
        for (d, t) in ts.iter_mut().enumerate() {
            t.progress(now(), &mut inbox).unwrap();
            assert!(inbox.is_empty(), "rank {d}: extra delivery");
        }
    }
    for (i, t) in ts.iter().enumerate() {
        let s = t.stats();
        assert_eq!(s.messages_sent, count * (n as u64 - 1), "rank {i}");
        assert_eq!(s.messages_received, count * (n as u64 - 1), "rank {i}");
    }
}

/// Two connected transports send each other a message of every size in a common list and
/// `extra`, after a message one byte over [`MAX_MESSAGE`] was refused; each side receives
/// exactly those, intact and in order.
pub(crate) fn sizes_arrive_intact<T: NetTransport>(ts: &mut [T], extra: &[usize]) {
    assert_eq!(ts.len(), 2);
    let mut sizes = vec![
        0,
        1,
        5,
        9,
        4095,
        65536,
        1 << 20,
        MAX_MESSAGE,
        0,
        MAX_MESSAGE - 1,
        3,
    ];
    sizes.extend_from_slice(extra);
    assert!(matches!(
        ts[0].send(1, &vec![0; MAX_MESSAGE + 1], now()),
        Err(NetError::TooLarge { len, max }) if len == MAX_MESSAGE + 1 && max == MAX_MESSAGE
    ));
    let mut ins = inboxes(2);
    for (i, &len) in sizes.iter().enumerate() {
        send_retry(ts, &mut ins, 0, 1, &message(i as u64, len));
        send_retry(ts, &mut ins, 1, 0, &message(i as u64, len));
    }
    let check = give_up_after(20);
    while ins.iter().map(Vec::len).sum::<usize>() < 2 * sizes.len() {
        pump(ts, &mut ins);
        check("sizes");
    }
    for _ in 0..20 {
        pump(ts, &mut ins);
    }
    for (r, inbox) in ins.iter().enumerate() {
        assert_eq!(inbox.len(), sizes.len(), "rank {r}: extra deliveries");
        for (i, ((src, m), &len)) in inbox.iter().zip(&sizes).enumerate() {
            assert_eq!(*src, 1 - r);
            assert_message(m, i as u64, len);
        }
    }
}

/// Sends to itself, to a rank without an address and to a rank past the end of the table are
/// refused as not a peer, and queue nothing. Each rank is reached at a loopback address with
/// a port of its own.
pub(crate) fn refuses_what_is_not_a_peer<H: Harness>() {
    let ts: Vec<H::T> = (0..2).map(|_| H::bind(Setup::Default)).collect();
    let addrs = [Some(ts[0].local_addr()), Some(ts[1].local_addr()), None];
    for a in addrs.iter().flatten() {
        assert_eq!(a.ip(), LOCAL);
        assert_ne!(a.port(), 0);
    }
    assert_ne!(addrs[0], addrs[1]);
    let mut ts = connect_job(ts, &addrs);
    for (me, t) in ts.iter_mut().enumerate() {
        for peer in [me, 2, 7] {
            match t.send(peer, b"x", now()) {
                Err(NetError::NotAPeer { peer: p }) => assert_eq!(p, peer),
                other => panic!("rank {me} sending to {peer}: {other:?}"),
            }
        }
        assert!(t.is_idle(), "rank {me}: a refused send queued something");
        assert_eq!(t.stats().messages_sent, 0);
    }
}

/// A small send only queues; `flush` alone then puts it on its way with one system call (and
/// makes none with nothing queued), and the receiver's descriptor becomes readable: with one
/// peer and with several.
pub(crate) fn flush_alone_sends_what_is_queued<H: Harness>() {
    let mut ts = H::mesh(2, Setup::Default);
    let calls = |t: &H::T| t.stats().send_calls;
    assert!(
        !readable_within(ts[1].readable_fd(), 0),
        "readable at start"
    );
    ts[0].flush(now()).unwrap();
    assert_eq!(
        calls(&ts[0]),
        0,
        "flush with nothing queued made a system call"
    );
    ts[0].send(1, &message(1, 100), now()).unwrap();
    assert_eq!(calls(&ts[0]), 0, "a small send wrote at once");
    ts[0].flush(now()).unwrap();
    assert_eq!(calls(&ts[0]), 1, "flush of one queued message");
    assert!(
        readable_within(ts[1].readable_fd(), 5000),
        "nothing arrived"
    );
    // Only the receiver progresses: what the flush wrote needs nothing more of the sender.
    let mut inbox = Inbox::new();
    let check = give_up_after(5);
    while inbox.is_empty() {
        ts[1].progress(now(), &mut inbox).unwrap();
        check("delivery after flush");
    }
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].0, 0);
    assert_message(&inbox[0].1, 1, 100);

    let mut ts = H::mesh(3, Setup::Default);
    assert!(
        !readable_within(ts[0].readable_fd(), 0),
        "readable at start"
    );
    ts[2].send(0, &message(2, 100), now()).unwrap();
    ts[2].flush(now()).unwrap();
    assert!(
        readable_within(ts[0].readable_fd(), 5000),
        "nothing arrived"
    );
    let mut inbox = Inbox::new();
    let check = give_up_after(5);
    while inbox.is_empty() {
        ts[0].progress(now(), &mut inbox).unwrap();
        check("delivery after flush");
    }
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].0, 2);
    assert_message(&inbox[0].1, 2, 100);
}

/// 100 000 small messages each way between two ranks, sent 4000 per round: every one
/// arrives once, in order.
pub(crate) fn two_ranks_stream_both_ways<H: Harness>() {
    const N: u64 = 100_000;
    let mut ts = H::mesh(2, Setup::Default);
    exchange(
        &mut ts,
        N,
        |seq| 8 + (seq % 57) as usize,
        4000,
        Duration::from_secs(20),
    );
    H::after_stream(&ts, N);
}

/// Four ranks send each other 2000 messages per pair, some of them 100 000 bytes: each is
/// delivered in order and attributed to its source.
pub(crate) fn all_to_all_among_four<H: Harness>() {
    let len = |seq: u64| {
        if seq % 97 == 0 {
            100_000
        } else {
            8 + (seq % 200) as usize
        }
    };
    let mut ts = H::mesh(4, Setup::Default);
    exchange(&mut ts, 2000, len, 1, Duration::from_secs(20));
    H::after_all_to_all(&ts);
}

/// Message sizes from empty to [`MAX_MESSAGE`], with the transport's own boundaries.
pub(crate) fn sizes_arrive_intact_both_ways<H: Harness>() {
    let mut ts = H::mesh(2, Setup::Default);
    sizes_arrive_intact(&mut ts, H::BOUNDARY_SIZES);
}

/// A sender whose peer does not progress is refused with `WouldBlock` once its queue is full;
/// once the peer progresses, every message arrives once and in order (so the refused sends,
/// retried, had queued nothing).
pub(crate) fn flood_blocks_then_drains_in_order<H: Harness>() {
    const N: u64 = 800;
    let len = |seq: u64| 100 + (seq * 7919 % 60_000) as usize;
    let mut ts = H::mesh(2, Setup::SmallQueue);
    let mut ins = inboxes(2);
    let mut sent = 0;
    let check = give_up_after(5);
    loop {
        match ts[0].send(1, &message(sent, len(sent)), now()) {
            Ok(()) => sent += 1,
            Err(NetError::WouldBlock) => {
                ts[0].progress(now(), &mut ins[0]).unwrap();
                if !ts[0].is_idle() && ts[0].stats().would_block >= 3 {
                    break;
                }
            }
            Err(e) => panic!("{e}"),
        }
        assert!(sent < N, "the queue never filled");
        check("flood");
    }
    H::when_flooded(&ts[0]);
    // Now rank 1 progresses.
    let mut next = 0;
    let check = give_up_after(10);
    while next < N {
        if sent < N {
            match ts[0].send(1, &message(sent, len(sent)), now()) {
                Ok(()) => sent += 1,
                Err(NetError::WouldBlock) => {}
                Err(e) => panic!("{e}"),
            }
        }
        pump(&mut ts, &mut ins);
        for (src, m) in ins[1].drain(..) {
            assert_eq!(src, 0);
            assert_eq!(tag_of(&m), next, "out of order");
            assert_message(&m, next, len(next));
            next += 1;
        }
        check("drain");
    }
    assert!(ts[0].stats().would_block >= 3);
}

/// A rank that goes away after some traffic is reported as `PeerFailed` naming it, to
/// `progress` and then to `send`.
pub(crate) fn failed_peer_is_reported_by_rank<H: Harness>() {
    let mut ts = H::mesh(2, Setup::QuickFailure);
    let mut ins = inboxes(2);
    for i in 0..100 {
        send_retry(&mut ts, &mut ins, 0, 1, &message(i, 64));
    }
    let check = give_up_after(5);
    while ins[1].len() < 100 || !ts.iter().all(|t| t.is_idle()) {
        pump(&mut ts, &mut ins);
        check("delivery before the failure");
    }
    drop(ts.pop());
    // Something to answer for: a transport waiting for acks notices silence only then.
    let start = Instant::now();
    ts[0].send(1, b"anyone there?", now()).unwrap();
    let err = loop {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "no failure reported"
        );
        match ts[0].progress(now(), &mut ins[0]) {
            Ok(_) => thread::sleep(Duration::from_micros(200)),
            Err(e) => break e,
        }
    };
    let waited = start.elapsed();
    assert!(
        matches!(&err, NetError::PeerFailed { peer: 1, .. }),
        "{err}"
    );
    assert!(matches!(
        ts[0].send(1, b"x", now()),
        Err(NetError::PeerFailed { peer: 1, .. })
    ));
    H::after_peer_failure(&mut ts[0], waited);
}

/// A rank that closes straight after its last send, with most of it still queued, still
/// delivers all of it; the receiver sees no failure and closes cleanly after.
pub(crate) fn close_right_after_sending_delivers_everything<H: Harness>() {
    const N: u64 = 3000;
    fn len(seq: u64) -> usize {
        if seq % 100 == 0 {
            300_000
        } else {
            8 + (seq % 300) as usize
        }
    }
    let mut ts = H::mesh(2, Setup::Default);
    let mut b = ts.pop().unwrap();
    let mut a = ts.pop().unwrap();
    let sender = thread::spawn(move || {
        let mut inbox = Vec::new();
        for seq in 0..N {
            let m = message(seq, len(seq));
            loop {
                match a.send(1, &m, now()) {
                    Ok(()) => break,
                    Err(NetError::WouldBlock) => {
                        a.progress(now(), &mut inbox).unwrap();
                    }
                    Err(e) => panic!("{e}"),
                }
            }
        }
        let r = a.close(&mut now, now() + 10_000_000_000);
        (r, a.stats())
    });
    let mut inbox = Vec::new();
    let mut next = 0;
    let check = give_up_after(10);
    while next < N {
        b.progress(now(), &mut inbox)
            .expect("the sender's close is no failure");
        for (src, m) in inbox.drain(..) {
            assert_eq!(src, 0);
            assert_message(&m, next, len(next));
            next += 1;
        }
        check("delivery");
    }
    for _ in 0..100 {
        b.progress(now(), &mut inbox)
            .expect("the sender's close is no failure");
    }
    assert!(inbox.is_empty(), "extra delivery");
    b.close(&mut now, now() + 10_000_000_000)
        .expect("receiver close");
    let (r, stats) = sender.join().unwrap();
    r.expect("sender close");
    assert_eq!(stats.messages_sent, N);
    assert_eq!(b.stats().messages_received, N);
}

/// Three ranks exchange messages, then all close at once, each with one last message just
/// sent (which the closing peers discard): every close succeeds and leaves nothing pending.
pub(crate) fn simultaneous_close_after_all_to_all<H: Harness>() {
    const N: usize = 3;
    let mut ts = H::mesh(N, Setup::Default);
    exchange(&mut ts, 500, |_| 40, 500, Duration::from_secs(10));
    let closers: Vec<_> = ts
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            thread::spawn(move || {
                t.send((me + 1) % N, b"late", now()).unwrap();
                t.close(&mut now, now() + 10_000_000_000).map(|()| t)
            })
        })
        .collect();
    for c in closers {
        let t = c.join().unwrap().expect("close");
        assert!(t.is_idle());
        H::after_close(&t);
    }
}
