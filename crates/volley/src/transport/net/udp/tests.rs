//! The UDP transport's own tests (the contract both transports keep runs here too, through
//! [`contract_tests!`]): transports on 127.0.0.1 in one process, driven alternately from one
//! thread (except `close`, which blocks and so runs one thread per transport).

use std::mem::size_of;
use std::net::{Ipv4Addr, UdpSocket};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use super::addr::{from_raw, to_raw};
use super::*;
use crate::reliable::wire::{self, Header, Kind};
use crate::transport::net::contract_tests::{
    assert_message, connect_all, contract_tests, exchange, message, now, sizes_arrive_intact,
    Harness, Inbox, Setup, LOCAL,
};
use crate::transport::net::floor;

const KEY: u64 = 0x766f_6c6c_6579_0001;
const MS: u64 = 1_000_000;

/// A transport bound on loopback with `config`, of an incarnation no other transport of the
/// test process has.
fn bind(config: &UdpConfig) -> UdpTransport {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    let incarnation = NEXT.fetch_add(1, Ordering::Relaxed);
    UdpTransport::bind(LOCAL, KEY, incarnation, config.clone()).unwrap()
}

/// `n` connected transports, ranks `0..n`.
pub(super) fn cluster(n: usize, config: &UdpConfig) -> Vec<UdpTransport> {
    connect_all((0..n).map(|_| bind(config)).collect())
}

fn with_faults(config: UdpConfig, faults: &str, seed: u64) -> UdpConfig {
    let mut f = FaultConfig::parse(faults).unwrap();
    f.seed = Some(seed);
    UdpConfig {
        faults: Some(f),
        ..config
    }
}

/// 1472-byte datagrams on loopback too, so small tests fragment and fill windows.
fn lan() -> UdpConfig {
    UdpConfig {
        loopback_datagram_size: None,
        ..UdpConfig::default()
    }
}

/// [`lan`] where no retransmission may come due while a test runs, however slowly it is
/// scheduled.
pub(super) fn lan_without_retransmission() -> UdpConfig {
    without_retransmission(lan())
}

/// `config` where no retransmission may come due while a test runs.
fn without_retransmission(mut config: UdpConfig) -> UdpConfig {
    config.reliable.min_rto = 5_000 * MS;
    config.reliable.initial_rto = 5_000 * MS;
    config.reliable.max_rto = 5_000 * MS;
    config
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Length of message `seq` of a stream: 10..=max_len, mostly short.
fn stream_len(seq: u64, max_len: usize) -> usize {
    10 + (splitmix(seq) % (max_len as u64 - 9)) as usize
}

/// The UDP transport under the contract tests.
struct Udp;

impl Harness for Udp {
    type T = UdpTransport;

    /// Around a LAN datagram and a loopback one.
    const BOUNDARY_SIZES: &'static [usize] = &[1471, 1472, 64999, 65000];

    fn bind(setup: Setup) -> UdpTransport {
        let mut config = UdpConfig::default();
        match setup {
            Setup::Default => {}
            Setup::SmallQueue => {
                config.reliable.max_message_size = 64 << 10;
                config.reliable.send_buffer = 256 << 10;
            }
            Setup::QuickFailure => config.reliable.peer_timeout = 200 * MS,
        }
        bind(&config)
    }

    fn after_stream(ts: &[UdpTransport], _count: u64) {
        for t in ts {
            // Larger datagrams on loopback (65000 when the socket buffers allow).
            assert!(t.datagram_size() > 1472, "{}", t.datagram_size());
            let s = t.stats();
            assert_eq!(s.faults_injected, 0);
            assert!(s.packets_sent > 0 && s.packets_received > 0);
            // Small messages travel packed: far fewer datagrams than messages.
            assert!(s.packets_sent < 20_000, "{s:?}");
        }
    }

    fn after_peer_failure(t: &mut UdpTransport, waited: Duration) {
        // Found by the peer timeout (200 ms), retransmitting meanwhile.
        let waited = waited.as_nanos() as u64;
        assert!((200 * MS..500 * MS).contains(&waited), "{waited} ns");
        assert!(t.stats().retransmissions > 0);
        // It stays reported.
        assert!(matches!(
            t.progress(now(), &mut Inbox::new()),
            Err(NetError::PeerFailed { peer: 1, .. })
        ));
    }
}

contract_tests!(Udp);

#[test]
fn streams_in_order_under_faults() {
    let config = with_faults(lan(), "drop=0.1,dup=0.05,reorder=0.1,delay_us=200", 17);
    let mut ts = cluster(2, &config);
    exchange(
        &mut ts,
        100_000,
        |seq| stream_len(seq, 100),
        2000,
        Duration::from_secs(20),
    );
    for t in &ts {
        let s = t.stats();
        assert!(s.faults_injected > 100, "{s:?}");
        assert!(s.retransmissions > 0, "{s:?}");
        // Duplicates reached the peers and were recognized.
        assert!(s.dropped > 0, "{s:?}");
    }
}

/// Fragments leave as a head plus a range of the retained message (two iovecs); duplicated,
/// delayed and retransmitted ones share that message. Every byte must still arrive.
#[test]
fn gathered_fragments_arrive_whole_under_loss_duplication_and_reordering() {
    let config = with_faults(lan(), "drop=0.05,dup=0.05,reorder=0.1,delay_us=100", 23);
    let mut ts = cluster(3, &config);
    exchange(
        &mut ts,
        60,
        |seq| stream_len(seq, 200_000),
        20,
        Duration::from_secs(30),
    );
    for t in &ts {
        let s = t.stats();
        assert!(s.retransmissions > 0 && s.dropped > 0, "{s:?}");
        // Counted with the gathered bytes: more than the messages themselves.
        assert!(s.bytes_sent > 60 * 10 * 2, "{s:?}");
    }
}

/// A short message that arrives in the same receive as acks opening a bulk sender's window is
/// handed over before that progress call sends the window's worth of bulk datagrams; the
/// next call sends them.
#[test]
fn a_message_arriving_beside_acks_is_delivered_before_more_bulk_leaves() {
    let config = lan_without_retransmission();
    let window = config.reliable.window as u64;
    let mut ts = cluster(3, &config);
    let mut inbox = Inbox::new();
    let bulk = message(1, 1 << 20);
    ts[0].send(1, &bulk, now()).unwrap();
    NetTransport::flush(&mut ts[0], now()).unwrap();
    assert_eq!(ts[0].backlog(1).unacked, window);
    // Rank 1 takes the window and acknowledges it; rank 2 sends a short message.
    ts[1].progress(now(), &mut inbox).unwrap();
    assert!(inbox.is_empty());
    ts[2].send(0, &message(2, 100), now()).unwrap();
    NetTransport::flush(&mut ts[2], now()).unwrap();
    let sent = ts[0].stats().packets_sent;
    ts[0].progress(now(), &mut inbox).unwrap();
    assert_eq!(inbox.len(), 1);
    assert_eq!(inbox[0].0, 2);
    assert_message(&inbox[0].1, 2, 100);
    assert_eq!(ts[0].stats().packets_sent, sent, "bulk left first");
    assert!(ts[0].backlog(1).unacked < window, "the acks were taken");
    inbox.clear();
    ts[0].progress(now(), &mut inbox).unwrap();
    assert!(ts[0].stats().packets_sent > sent, "the bulk goes on");
    let start = Instant::now();
    let mut got = Vec::new();
    while got.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20));
        for (r, t) in ts.iter_mut().enumerate() {
            t.progress(now(), &mut inbox).unwrap();
            got.extend(inbox.drain(..).filter(|_| r == 1));
        }
    }
    assert_eq!(got[0].0, 0);
    assert_message(&got[0].1, 1, 1 << 20);
}

/// A send of a message that fills a datagram, finding its peer's window full, reads the acks
/// that have arrived and hands the datagrams they made room for to the kernel at once: a
/// stream of long messages does not run a send buffer ahead of its window while its sender
/// only sends. A small message does not read them.
#[test]
fn a_send_into_a_full_window_takes_the_acks_in_and_sends_at_once() {
    let config = lan_without_retransmission();
    let window = config.reliable.window as u64;
    let mut ts = cluster(2, &config);
    let mut inbox = Inbox::new();
    const LEN: usize = 200_000;
    ts[0].send(1, &message(1, LEN), now()).unwrap();
    assert_eq!(ts[0].backlog(1).unacked, window);
    assert_eq!(ts[0].stats().packets_sent, window);
    // Rank 1 takes the window and acknowledges it.
    let start = Instant::now();
    while ts[1].stats().packets_received < window {
        assert!(start.elapsed() < Duration::from_secs(20));
        ts[1].progress(now(), &mut inbox).unwrap();
    }
    // A preempted poll may have let a delayed ack leave early and left the last few datagrams
    // waiting for theirs: polled past the ack delay, every datagram is acknowledged.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_nanos(2 * config.reliable.ack_delay) {
        ts[1].progress(now(), &mut inbox).unwrap();
    }
    assert!(inbox.is_empty());
    // A small message leaves the acks for the next progress: a flood of them into a full
    // window would pay a system call per message.
    let before = ts[0].stats();
    ts[0].send(1, &message(2, 100), now()).unwrap();
    assert_eq!(ts[0].stats().packets_received, before.packets_received);
    let before = ts[0].stats();
    ts[0].send(1, &message(3, LEN), now()).unwrap();
    let after = ts[0].stats();
    assert!(
        after.packets_received > before.packets_received,
        "acks not read"
    );
    assert_eq!(
        after.packets_sent - before.packets_sent,
        window,
        "the emptied window was not refilled at once"
    );
    // All three arrive whole, in order.
    let mut got = Vec::new();
    while got.len() < 3 {
        assert!(start.elapsed() < Duration::from_secs(20));
        ts[0].progress(now(), &mut inbox).unwrap();
        assert!(inbox.is_empty());
        ts[1].progress(now(), &mut inbox).unwrap();
        got.append(&mut inbox);
    }
    for ((tag, len), (src, m)) in [(1, LEN), (2, 100), (3, LEN)].into_iter().zip(&got) {
        assert_eq!(*src, 0);
        assert_message(m, tag, len);
    }
}

/// A send that leaves a megabyte of full datagrams waiting hands them to the kernel before a
/// batch of them is ready.
#[test]
fn a_megabyte_of_datagrams_leaves_before_a_whole_batch() {
    let mut config = lan();
    config.batch = 1024;
    config.reliable.window = 1024;
    let mut ts = cluster(2, &config);
    let payload = ts[0].datagram_size() - HEADER_LEN;
    let full = FLUSH_BYTES.div_ceil(ts[0].datagram_size());
    assert!(full < config.batch, "a batch would flush first");
    let len = (full + 1) * payload;
    ts[0].send(1, &message(1, len), now()).unwrap();
    assert!(
        ts[0].stats().packets_sent > 0,
        "nothing left before a batch was ready"
    );
    let mut inbox = Inbox::new();
    let start = Instant::now();
    while inbox.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20));
        ts[0].progress(now(), &mut inbox).unwrap();
        ts[1].progress(now(), &mut inbox).unwrap();
    }
    assert_eq!(inbox[0].0, 0);
    assert_message(&inbox[0].1, 1, len);
}

/// Long messages leave from the caller's bytes, without the queued copy, and arrive as they
/// were when sent, though the caller rewrites its buffer after every send and nothing was
/// acknowledged when the sends returned: what the receiver's socket could not hold is
/// resent from the copies kept of the unacknowledged datagrams.
#[test]
fn long_messages_sent_from_the_callers_bytes_arrive_as_they_were_sent() {
    let mut ts = cluster(2, &UdpConfig::default());
    const LEN: usize = 600_000;
    const N: u64 = 10;
    let mut buf = vec![0u8; LEN];
    let mut sent = 0;
    let mut inbox = Inbox::new();
    // Rank 1 takes nothing in until rank 0's send buffer refuses.
    while sent < N {
        buf.copy_from_slice(&message(sent, LEN));
        match ts[0].send(1, &buf, now()) {
            Ok(()) => sent += 1,
            Err(NetError::WouldBlock) => break,
            Err(e) => panic!("send: {e}"),
        }
    }
    buf.fill(0xee);
    let early = ts[0].stats();
    assert!(early.lent_messages >= 2, "{early:?}");
    assert!(early.lent_bytes_kept > 0, "{early:?}");
    let mut got = Vec::new();
    let start = Instant::now();
    while got.len() < N as usize {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} of {N}",
            got.len()
        );
        if sent < N {
            buf.copy_from_slice(&message(sent, LEN));
            if ts[0].send(1, &buf, now()).is_ok() {
                sent += 1;
            }
            buf.fill(0xee);
        }
        ts[0].progress(now(), &mut inbox).unwrap();
        assert!(inbox.is_empty());
        ts[1].progress(now(), &mut inbox).unwrap();
        got.append(&mut inbox);
    }
    for (i, (src, m)) in got.iter().enumerate() {
        assert_eq!(*src, 0);
        assert_message(m, i as u64, LEN);
    }
}

/// Datagrams of a lent message that the socket refused leave with the next flush, from the
/// copy kept when the send ended (not by a retransmission timeout: none comes due here).
#[test]
fn datagrams_of_a_lent_message_the_socket_refused_leave_from_its_copy() {
    let mut ts = cluster(2, &without_retransmission(UdpConfig::default()));
    let len = 6 * ts[0].datagram_size();
    let mut buf = message(1, len);
    ts[0].test_socket_room = Some(3);
    ts[0].send(1, &buf, now()).unwrap();
    buf.fill(0);
    let s = ts[0].stats();
    assert_eq!(s.packets_sent, 3);
    assert_eq!(s.lent_messages, 1);
    assert!(s.lent_bytes_kept > (len / 2) as u64, "{s:?}");
    assert!(!ts[0].out.is_empty(), "the refused datagrams are queued");
    ts[0].test_socket_room = None;
    let mut inbox = Inbox::new();
    let start = Instant::now();
    while inbox.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(20), "not delivered");
        ts[0].progress(now(), &mut inbox).unwrap();
        ts[1].progress(now(), &mut inbox).unwrap();
    }
    assert_message(&inbox[0].1, 1, len);
    assert_eq!(ts[0].stats().retransmissions, 0);
}

/// The same with the receiver on its own thread, so that acks arrive while a send is under
/// way and each send copies only what they left unacknowledged.
#[test]
fn long_messages_sent_from_the_callers_bytes_to_a_receiver_that_keeps_up() {
    let mut ts = cluster(2, &UdpConfig::default());
    const LEN: usize = 1 << 20;
    const N: u64 = 40;
    let mut receiver = ts.pop().unwrap();
    let mut sender = ts.pop().unwrap();
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let finished = done.clone();
    let rx = std::thread::spawn(move || {
        let mut inbox = Inbox::new();
        let mut got = 0;
        let start = Instant::now();
        while got < N {
            assert!(start.elapsed() < Duration::from_secs(60), "{got} of {N}");
            receiver.progress(now(), &mut inbox).unwrap();
            for (src, m) in inbox.drain(..) {
                assert_eq!(src, 0);
                assert_message(&m, got, LEN);
                got += 1;
            }
        }
        // Acks for the last datagrams, until the sender has them all.
        while !finished.load(Ordering::Relaxed) {
            receiver.progress(now(), &mut inbox).unwrap();
            std::thread::yield_now();
        }
    });
    let mut buf = vec![0u8; LEN];
    let mut inbox = Inbox::new();
    let start = Instant::now();
    for i in 0..N {
        buf.copy_from_slice(&message(i, LEN));
        loop {
            assert!(start.elapsed() < Duration::from_secs(60), "sending {i}");
            match sender.send(1, &buf, now()) {
                Ok(()) => break,
                Err(NetError::WouldBlock) => sender.progress(now(), &mut inbox).unwrap(),
                Err(e) => panic!("send: {e}"),
            };
        }
        buf.fill(0xee);
    }
    while !sender.is_idle() {
        assert!(start.elapsed() < Duration::from_secs(60), "acks");
        sender.progress(now(), &mut inbox).unwrap();
        std::thread::yield_now();
    }
    done.store(true, Ordering::Relaxed);
    rx.join().unwrap();
    let s = sender.stats();
    assert!(s.lent_messages > 0, "{s:?}");
    assert!(s.lent_bytes_kept <= s.lent_messages * LEN as u64, "{s:?}");
}

#[test]
fn three_ranks_all_to_all_demultiplexed_by_address() {
    let mut ts = cluster(3, &lan());
    // `exchange` checks each message's tag, which names its source and destination, against
    // the rank it was delivered from and to.
    exchange(
        &mut ts,
        5000,
        |seq| stream_len(seq, 300),
        500,
        Duration::from_secs(10),
    );
}

#[test]
fn all_sizes_intact_in_lan_datagrams() {
    sizes_arrive_intact(&mut cluster(2, &lan()), Udp::BOUNDARY_SIZES);
}

#[test]
fn all_sizes_intact_under_loss() {
    let lossy = |config, seed| with_faults(config, "drop=0.05", seed);
    sizes_arrive_intact(&mut cluster(2, &lossy(lan(), 5)), Udp::BOUNDARY_SIZES);
    sizes_arrive_intact(
        &mut cluster(2, &lossy(UdpConfig::default(), 6)),
        Udp::BOUNDARY_SIZES,
    );
}

/// A valid data datagram of this protocol carrying one small message.
fn datagram(job_key: u64, seq: u64) -> Vec<u8> {
    let mut body = Vec::new();
    wire::put_complete(&mut body, b"intruder");
    let h = Header {
        kind: Kind::Data,
        job_key,
        src_incarnation: 99,
        dst_incarnation: 0,
        seq,
        ack: 0,
        sack: 0,
    };
    let mut buf = Vec::new();
    wire::encode(&mut buf, &h, &body);
    buf
}

#[test]
fn single_peer_socket_ignores_strangers() {
    let raw = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stranger = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut t = UdpTransport::bind(LOCAL, KEY, 1, UdpConfig::default()).unwrap();
    t.connect(0, &[None, Some(raw.local_addr().unwrap())])
        .unwrap();
    let to = t.local_addr();
    let mut inbox = Inbox::new();
    for _ in 0..100 {
        stranger.send_to(&datagram(KEY, 1), to).unwrap();
    }
    // The peer's own datagram comes after the strangers' and is the only one received.
    raw.send_to(&datagram(KEY, 1), to).unwrap();
    let start = Instant::now();
    while t.stats().packets_received == 0 {
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "the peer's datagram was lost"
        );
        t.progress(now(), &mut inbox).unwrap();
    }
    for _ in 0..10 {
        t.progress(now(), &mut inbox).unwrap();
    }
    assert_eq!(t.stats().packets_received, 1, "{:?}", t.stats());
}

#[test]
fn garbage_is_dropped_and_counted() {
    // Rank 1 is a raw socket, so its datagrams reach the reliable layer; a second raw socket
    // is no rank at all.
    // A silent rank 2 keeps the socket unconnected (with one peer the kernel itself drops
    // strangers' datagrams, which `single_peer_socket_ignores_strangers` checks).
    let raw = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let silent = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let stranger = UdpSocket::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let mut t = UdpTransport::bind(LOCAL, KEY, 1, UdpConfig::default()).unwrap();
    t.connect(
        0,
        &[
            None,
            Some(raw.local_addr().unwrap()),
            Some(silent.local_addr().unwrap()),
        ],
    )
    .unwrap();
    let to = t.local_addr();
    let mut inbox = Inbox::new();
    let mut sent = 0u64;
    let mut rng = 12345u64;
    let valid = datagram(KEY, 1);
    // Rounds small enough for an unprivileged socket's default receive buffer.
    for round in 0..125 {
        for i in 0..100u64 {
            rng = splitmix(rng);
            let d = match i % 5 {
                // Random bytes of random length, now and then as long as a datagram.
                0 | 1 => {
                    let len = if rng & 7 == 0 {
                        rng >> 8 & 2047
                    } else {
                        rng >> 8 & 127
                    };
                    (0..len).map(|k| splitmix(rng ^ k) as u8).collect()
                }
                // A valid datagram cut short (checksum fails) or with one byte flipped.
                2 => valid[..(rng as usize % valid.len())].to_vec(),
                3 => {
                    let mut d = valid.clone();
                    let at = (rng >> 8) as usize % d.len();
                    d[at] ^= 1 << (rng & 7);
                    d
                }
                // Well-formed, but another job's.
                _ => datagram(KEY ^ (rng | 1), 1 + i),
            };
            let from = if round % 10 == 0 { &stranger } else { &raw };
            from.send_to(&d, to).unwrap();
            sent += 1;
        }
        // Drain between rounds so the socket buffer never overflows.
        let start = Instant::now();
        while t.stats().packets_received < sent {
            assert!(start.elapsed() < Duration::from_secs(5), "datagrams lost");
            t.progress(now(), &mut inbox).unwrap();
        }
    }
    t.progress(now(), &mut inbox).unwrap();
    assert!(inbox.is_empty());
    let s = t.stats();
    assert_eq!(s.packets_received, 12_500);
    assert_eq!(s.dropped, 12_500, "{s:?}");
    assert_eq!(s.packets_sent, 0, "answered garbage: {s:?}");
    assert!(t.is_idle());
    // And the pair still works: a valid datagram from rank 1's address is delivered.
    raw.send_to(&valid, to).unwrap();
    let start = Instant::now();
    while inbox.is_empty() {
        assert!(start.elapsed() < Duration::from_secs(5));
        t.progress(now(), &mut inbox).unwrap();
    }
    assert_eq!(inbox, [(1, b"intruder".to_vec())]);
}

#[test]
fn full_send_buffer_would_block_then_resumes() {
    let mut config = lan();
    config.reliable.max_message_size = 16 << 10;
    config.reliable.send_buffer = 64 << 10;
    let mut ts = cluster(2, &config);
    let mut accepted = 0u64;
    while ts[0].send(1, &message(accepted, 1000), now()).is_ok() {
        accepted += 1;
        assert!(accepted < 100, "never blocked");
    }
    assert!(accepted >= 60, "{accepted}");
    assert!(matches!(
        ts[0].send(1, &message(accepted, 1000), now()),
        Err(NetError::WouldBlock)
    ));
    assert_eq!(ts[0].stats().would_block, 2);
    // Progress drains the buffer and sends resume; everything arrives once, in order.
    let total = 1000u64;
    let mut got = 0u64;
    let mut inbox = Inbox::new();
    let start = Instant::now();
    while got < total {
        assert!(start.elapsed() < Duration::from_secs(10));
        while accepted < total {
            match ts[0].send(1, &message(accepted, 1000), now()) {
                Ok(()) => accepted += 1,
                Err(NetError::WouldBlock) => break,
                Err(e) => panic!("{e}"),
            }
        }
        ts[0].progress(now(), &mut inbox).unwrap();
        assert!(inbox.is_empty());
        ts[1].progress(now(), &mut inbox).unwrap();
        for (src, m) in inbox.drain(..) {
            assert_eq!(src, 0);
            assert_message(&m, got, 1000);
            got += 1;
        }
    }
    assert!(ts[0].stats().would_block > 2);
}

/// Sends `count` messages each way and pumps until both sides have them all.
fn deliver_both_ways(ts: &mut [UdpTransport], count: u64) {
    for i in 0..count {
        for (a, t) in ts.iter_mut().enumerate() {
            t.send(1 - a, &message(i, 200), now()).unwrap();
        }
    }
    let mut got = [0u64; 2];
    let mut inbox = Inbox::new();
    let start = Instant::now();
    while got != [count; 2] {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "stalled at {got:?}"
        );
        for (d, t) in ts.iter_mut().enumerate() {
            t.progress(now(), &mut inbox).unwrap();
            got[d] += inbox.drain(..).count() as u64;
        }
    }
}

#[test]
fn close_of_both_after_delivery_returns_ok_with_everything_acknowledged() {
    // As after the runtime's finalize: every message delivered, some acks still owed (and
    // some of them lost).
    let mut ts = cluster(2, &with_faults(lan(), "drop=0.05", 9));
    deliver_both_ways(&mut ts, 2000);
    let deadline = now() + 5000 * MS;
    let results: Vec<_> = std::thread::scope(|s| {
        let handles: Vec<_> = ts
            .iter_mut()
            .map(|t| s.spawn(move || t.close(&mut now, deadline)))
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for r in results {
        r.unwrap();
    }
    assert!(now() < deadline);
    for t in &ts {
        assert!(t.is_idle());
        assert_eq!(t.stats().messages_received, 2000, "{:?}", t.stats());
    }
}

#[test]
fn close_flushes_and_lingers_until_acknowledged() {
    // Rank 0 closes with everything still queued while rank 1 keeps running.
    let mut ts = cluster(2, &with_faults(lan(), "drop=0.05", 10));
    for i in 0..2000 {
        ts[0].send(1, &message(i, 200), now()).unwrap();
    }
    let (a, b) = ts.split_at_mut(1);
    let (a, b) = (&mut a[0], &mut b[0]);
    let deadline = now() + 5000 * MS;
    let mut got = 0u64;
    let r = std::thread::scope(|s| {
        let closing = s.spawn(move || a.close(&mut now, deadline));
        let mut inbox = Inbox::new();
        while !closing.is_finished() {
            b.progress(now(), &mut inbox).unwrap();
            for (src, m) in inbox.drain(..) {
                assert_eq!(src, 0);
                assert_message(&m, got, 200);
                got += 1;
            }
        }
        closing.join().unwrap()
    });
    r.unwrap();
    assert_eq!(got, 2000);
    assert!(ts[0].is_idle());
    // The survivor owes nothing either, so its own close is quick.
    let t = now();
    ts[1].close(&mut now, t + 5000 * MS).unwrap();
    assert!(now() - t < 200 * MS);
}

#[test]
fn close_with_unacknowledged_data_fails_at_the_deadline() {
    let mut ts = cluster(2, &UdpConfig::default());
    drop(ts.pop());
    ts[0].send(1, b"lost", now()).unwrap();
    let deadline = now() + 100 * MS;
    let r = ts[0].close(&mut now, deadline);
    assert!(
        matches!(r, Err(NetError::PeerFailed { peer: 1, .. })),
        "{r:?}"
    );
    assert!(now() >= deadline);
}

#[test]
fn socket_setup_and_peer_addressing() {
    let mut t = UdpTransport::bind(LOCAL, KEY, 1, UdpConfig::default()).unwrap();
    assert_eq!(t.local_addr().ip(), LOCAL);
    assert_ne!(t.local_addr().port(), 0);
    let fd = t.readable_fd();
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).unwrap();
    assert_ne!(flags & libc::FD_CLOEXEC, 0);
    let flags = nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFL).unwrap();
    assert_ne!(flags & libc::O_NONBLOCK, 0);
    assert_eq!(t.kind(), NetKind::Udp);
    assert!(UdpTransport::bind(LOCAL, KEY, 0, UdpConfig::default()).is_err());

    let a = SocketAddr::from((Ipv4Addr::LOCALHOST, 4000));
    let b = SocketAddr::from((Ipv4Addr::new(10, 0, 0, 2), 4000));
    t.connect(1, &[Some(a), Some(t.local_addr()), None, Some(b)])
        .unwrap();
    // A non-loopback peer keeps LAN datagrams.
    assert_eq!(t.datagram_size(), 1472);
    // Its own address in the table does not make it a peer of itself.
    assert!(matches!(
        t.send(1, b"", 0),
        Err(NetError::NotAPeer { peer: 1 })
    ));
    t.send(0, b"x", 0).unwrap();
    assert!(!t.is_idle());
    assert_eq!(t.next_deadline(), Some(0));
    assert!(t.connect(1, &[]).is_err());

    let mut u = UdpTransport::bind(LOCAL, KEY, 1, UdpConfig::default()).unwrap();
    assert!(u.connect(0, &[None, Some(a), Some(a)]).is_err());
}

#[test]
fn addresses_convert_both_ways() {
    let v4 = SocketAddr::from((Ipv4Addr::new(192, 168, 1, 7), 12345));
    let v6: SocketAddr = "[fe80::1%3]:999".parse().unwrap();
    let mapped: SocketAddr = "[::ffff:10.1.2.3]:80".parse().unwrap();
    let local4 = SocketAddr::from((Ipv4Addr::LOCALHOST, 1));
    let local6: SocketAddr = "[::1]:1".parse().unwrap();
    for a in [v4, v6] {
        let r = to_raw(a, local4);
        assert_eq!(from_raw(&r.storage, r.len), Some(a));
    }
    let r = to_raw(mapped, local4);
    assert_eq!(
        from_raw(&r.storage, r.len),
        Some("10.1.2.3:80".parse().unwrap())
    );
    // An IPv4 peer of an IPv6 socket is addressed IPv4-mapped and read back as IPv4.
    let r = to_raw(v4, local6);
    assert_eq!(r.len as usize, size_of::<libc::sockaddr_in6>());
    assert_eq!(from_raw(&r.storage, r.len), Some(v4));
    let r = to_raw(v4, local4);
    assert_eq!(from_raw(&r.storage, 4), None);
}

/// Not a test: one thread bounces a message between two transports (`cargo test --release
/// -p volley --lib ping_pong_cost -- --ignored --nocapture`), for profiling the transport's own
/// cost per round trip (both sides' work plus the system calls, no scheduling). Blocks of
/// volley and of the raw UDP floor ([`floor::bounce`]) alternate, so both see the same machine state; the
/// median of the per-block ratios is printed.
#[test]
#[ignore = "a profiling aid, not a check"]
fn ping_pong_cost() {
    let mut a = UdpTransport::bind(LOCAL, KEY, 1, UdpConfig::default()).unwrap();
    let mut b = UdpTransport::bind(LOCAL, KEY, 2, UdpConfig::default()).unwrap();
    let (aa, ba) = (a.local_addr(), b.local_addr());
    a.connect(0, &[None, Some(ba)]).unwrap();
    b.connect(1, &[Some(aa), None]).unwrap();
    let (mut x, mut y) = floor::pair(floor::SocketFloor::Udp, 16).unwrap();
    let mut inbox = Inbox::new();
    let msg = [7u8; 16];
    let rounds = 20_000;
    let (mut ours, mut raws, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..11 {
        let t0 = Instant::now();
        for _ in 0..rounds {
            a.send(1, &msg, now()).unwrap();
            NetTransport::flush(&mut a, now()).unwrap();
            while inbox.is_empty() {
                b.progress(now(), &mut inbox).unwrap();
            }
            for (from, m) in inbox.drain(..) {
                b.recycle(from, m);
            }
            b.send(0, &msg, now()).unwrap();
            NetTransport::flush(&mut b, now()).unwrap();
            while inbox.is_empty() {
                a.progress(now(), &mut inbox).unwrap();
            }
            for (from, m) in inbox.drain(..) {
                a.recycle(from, m);
            }
        }
        let per = t0.elapsed().as_nanos() as f64 / rounds as f64;
        let t0 = Instant::now();
        for _ in 0..rounds {
            floor::bounce(&mut x, &mut y).unwrap();
        }
        let raw = t0.elapsed().as_nanos() as f64 / rounds as f64;
        ours.push(per);
        raws.push(raw);
        ratios.push(per / raw);
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let (sa, sb) = (a.stats(), b.stats());
    println!(
        "volley udp: {:.0} ns per round trip; raw: {:.0} ns; median ratio {:.3}; \
         syscalls a send {} recv {}, b send {} recv {}",
        median(&mut ours),
        median(&mut raws),
        median(&mut ratios),
        sa.send_calls,
        sa.recv_calls,
        sb.send_calls,
        sb.recv_calls
    );
}

#[test]
fn unsequenced_messages_arrive_once_need_no_ack_and_must_fit_a_datagram() {
    let mut ts = cluster(2, &lan());
    let max = ts[0].max_unsequenced();
    assert_eq!(max, 1472 - HEADER_LEN - RECORD_OVERHEAD);
    let mut inbox = Inbox::new();
    let give_up = crate::transport::net::contract_tests::give_up_after(10);
    let n = 200u64;
    let mut got = 0u64;
    for i in 0..n {
        ts[0].send_unsequenced(1, &message(i, max), now()).unwrap();
        NetTransport::flush(&mut ts[0], now()).unwrap();
        // Sent once and done: nothing waits for an acknowledgement.
        assert!(ts[0].is_idle(), "{:?}", ts[0]);
        assert_eq!(ts[0].next_deadline(), None);
        while got <= i {
            give_up("unsequenced messages on a clean loopback");
            ts[1].progress(now(), &mut inbox).unwrap();
            for (src, m) in inbox.drain(..) {
                assert_eq!(src, 0);
                assert_message(&m, got, max);
                got += 1;
            }
        }
    }
    let (s0, s1) = (ts[0].stats(), ts[1].stats());
    assert_eq!((s0.unsequenced_sent, s1.unsequenced_received), (n, n));
    assert_eq!(s0.retransmissions + s1.packets_sent, 0, "{s0:?} {s1:?}");
    assert!(matches!(
        ts[0].send_unsequenced(1, &vec![0; max + 1], now()),
        Err(NetError::TooLarge { len, max: m }) if len == max + 1 && m == max
    ));
    assert!(matches!(
        ts[0].send_unsequenced(5, b"x", now()),
        Err(NetError::NotAPeer { peer: 5 })
    ));
}
