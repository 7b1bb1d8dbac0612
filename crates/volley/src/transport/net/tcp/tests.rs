//! Transports on 127.0.0.1 in one process: meshes connected one thread per rank (connect
//! blocks), then driven from the test thread or one thread per transport.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, Shutdown};
use std::sync::OnceLock;
use std::thread;
use std::time::Instant;

use super::receive::{BIG_FRAME, RECV_BUF};
use super::send_queue::SMALL_MESSAGE;
use super::setup::handshake;
use super::*;
use crate::transport::net::floor;

const KEY: u64 = 0x0123_4567_89ab_cdef;
const LOCAL: IpAddr = IpAddr::V4(Ipv4Addr::LOCALHOST);

type Inbox = Vec<(usize, Vec<u8>)>;

fn now() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64
}

fn config() -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        ..TcpConfig::default()
    }
}

fn bind_with(config: &TcpConfig) -> TcpTransport {
    TcpTransport::bind(LOCAL, KEY, config.clone()).expect("bind")
}

/// Connects bound transports as ranks 0..n, each in its own thread (connect blocks until
/// the higher ranks have arrived).
fn connect_all(ts: Vec<TcpTransport>) -> Vec<TcpTransport> {
    let addrs: Vec<Option<SocketAddr>> = ts.iter().map(|t| Some(t.local_addr())).collect();
    let handles: Vec<_> = ts
        .into_iter()
        .enumerate()
        .map(|(me, mut t)| {
            let mut peers = addrs.clone();
            peers[me] = None;
            thread::spawn(move || t.connect(me, &peers).map(|()| t))
        })
        .collect();
    handles
        .into_iter()
        .map(|h| h.join().expect("connect thread").expect("connect"))
        .collect()
}

fn mesh_with(n: usize, config: &TcpConfig) -> Vec<TcpTransport> {
    connect_all((0..n).map(|_| bind_with(config)).collect())
}

fn mesh(n: usize) -> Vec<TcpTransport> {
    mesh_with(n, &config())
}

fn inboxes(n: usize) -> Vec<Inbox> {
    (0..n).map(|_| Vec::new()).collect()
}

/// One progress call on every transport.
fn pump(ts: &mut [TcpTransport], inboxes: &mut [Inbox]) {
    for (t, inbox) in ts.iter_mut().zip(inboxes.iter_mut()) {
        t.progress(now(), inbox).expect("progress");
    }
}

/// A message of `len` bytes whose content depends on `tag`; its first 8 bytes (or fewer)
/// are `tag` itself.
fn message(tag: u64, len: usize) -> Vec<u8> {
    let mut m: Vec<u8> = (0..len)
        .map(|i| (tag as usize).wrapping_mul(31).wrapping_add(i) as u8)
        .collect();
    let n = len.min(8);
    m[..n].copy_from_slice(&tag.to_le_bytes()[..n]);
    m
}

fn tag_of(m: &[u8]) -> u64 {
    u64::from_le_bytes(m[..8].try_into().unwrap())
}

fn assert_message(m: &[u8], tag: u64, len: usize) {
    assert_eq!(m.len(), len, "length of message {tag}");
    assert!(m == message(tag, len), "content of message {tag}");
}

fn give_up_after(secs: u64) -> impl Fn(&str) {
    let end = Instant::now() + Duration::from_secs(secs);
    move |what: &str| assert!(Instant::now() < end, "timed out: {what}")
}

/// Sends, progressing everyone while the queue is full.
fn send_retry(ts: &mut [TcpTransport], ins: &mut [Inbox], from: usize, to: usize, m: &[u8]) {
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

#[test]
fn transport_is_send() {
    fn is_send<T: Send>() {}
    is_send::<TcpTransport>();
}

#[test]
fn small_messages_arrive_once_and_in_order_both_ways() {
    const N: u64 = 100_000;
    let len = |seq: u64| 8 + (seq % 57) as usize;
    let mut ts = mesh(2);
    let mut ins = inboxes(2);
    let mut sent = [0u64; 2];
    let mut next = [0u64; 2];
    let check = give_up_after(15);
    while next != [N, N] {
        for from in 0..2 {
            for _ in 0..100 {
                if sent[from] == N {
                    break;
                }
                let m = message(sent[from], len(sent[from]));
                match ts[from].send(1 - from, &m, now()) {
                    Ok(()) => sent[from] += 1,
                    Err(NetError::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
            }
        }
        pump(&mut ts, &mut ins);
        for (r, inbox) in ins.iter_mut().enumerate() {
            for (src, m) in inbox.drain(..) {
                assert_eq!(src, 1 - r);
                assert_eq!(tag_of(&m), next[r], "rank {r} got a message out of order");
                assert_message(&m, next[r], len(next[r]));
                next[r] += 1;
            }
        }
        check(&format!("delivered {next:?}"));
    }
    for _ in 0..20 {
        pump(&mut ts, &mut ins);
    }
    assert!(ins.iter().all(|i| i.is_empty()), "extra messages");
    for t in &ts {
        let s = t.stats();
        assert_eq!((s.messages_sent, s.messages_received), (N, N));
        assert_eq!((s.packets_sent, s.packets_received), (N, N));
        assert!(s.send_calls < N / 10, "writes were not batched: {s:?}");
        assert!(t.is_idle());
    }
}

#[test]
fn message_sizes_arrive_intact() {
    let sizes = [
        0,
        1,
        4095,
        SMALL_MESSAGE,
        SMALL_MESSAGE + 1,
        BIG_FRAME,
        BIG_FRAME + 1,
        65536,
        RECV_BUF + 3,
        1 << 20,
        MAX_MESSAGE,
        5,
        0,
        MAX_MESSAGE - 1,
        9,
    ];
    let mut ts = mesh(2);
    let mut ins = inboxes(2);
    for (i, &len) in sizes.iter().enumerate() {
        send_retry(&mut ts, &mut ins, 0, 1, &message(i as u64, len));
        send_retry(&mut ts, &mut ins, 1, 0, &message(i as u64, len));
    }
    let check = give_up_after(15);
    while ins.iter().map(|i| i.len()).sum::<usize>() < 2 * sizes.len() {
        pump(&mut ts, &mut ins);
        check("sizes");
    }
    for (r, inbox) in ins.iter().enumerate() {
        assert_eq!(inbox.len(), sizes.len());
        for (i, ((src, m), &len)) in inbox.iter().zip(&sizes).enumerate() {
            assert_eq!(*src, 1 - r);
            assert_eq!(m.len(), len);
            if len >= 8 {
                assert_message(m, i as u64, len);
            }
        }
    }
    assert!(matches!(
        ts[0].send(1, &vec![0; MAX_MESSAGE + 1], now()),
        Err(NetError::TooLarge { len, max }) if len == MAX_MESSAGE + 1 && max == MAX_MESSAGE
    ));
    assert!(matches!(
        ts[0].send(0, b"me", now()),
        Err(NetError::NotAPeer { peer: 0 })
    ));
    assert!(matches!(
        ts[0].send(7, b"x", now()),
        Err(NetError::NotAPeer { peer: 7 })
    ));
}

#[test]
fn all_to_all_among_four_is_attributed_to_sources() {
    const N: usize = 4;
    const M: u64 = 2000;
    let len = |seq: u64| {
        if seq % 97 == 0 {
            100_000
        } else {
            8 + (seq % 200) as usize
        }
    };
    let tag = |src: usize, dst: usize, seq: u64| ((src as u64) << 40) | ((dst as u64) << 32) | seq;
    let mut ts = mesh(N);
    let mut ins = inboxes(N);
    for seq in 0..M {
        for src in 0..N {
            for dst in (0..N).filter(|&d| d != src) {
                send_retry(
                    &mut ts,
                    &mut ins,
                    src,
                    dst,
                    &message(tag(src, dst, seq), len(seq)),
                );
            }
        }
        pump(&mut ts, &mut ins);
    }
    let mut next = [[0u64; N]; N];
    let mut done = 0;
    let check = give_up_after(15);
    while done < N * (N - 1) * M as usize {
        for (dst, inbox) in ins.iter_mut().enumerate() {
            for (src, m) in inbox.drain(..) {
                let seq = next[dst][src];
                assert_eq!(tag_of(&m), tag(src, dst, seq), "rank {dst} from {src}");
                assert_message(&m, tag(src, dst, seq), len(seq));
                next[dst][src] += 1;
                done += 1;
            }
        }
        pump(&mut ts, &mut ins);
        check("all to all");
    }
    for t in &ts {
        assert_eq!(t.stats().messages_received, (N as u64 - 1) * M);
        assert!(t.epoll.is_some() && t.readable_fd() == t.epoll.as_ref().unwrap().as_raw_fd());
    }
}

#[test]
fn strangers_during_setup_are_dropped_and_counted() {
    let ts: Vec<_> = (0..3).map(|_| bind_with(&config())).collect();
    let target = ts[0].local_addr();
    let connect = || TcpStream::connect(target).expect("stranger connect");
    let mut garbage = connect();
    garbage.write_all(&[0xab; 40]).unwrap();
    let mut foreign = connect();
    foreign.write_all(&handshake(KEY ^ 1, 1)).unwrap();
    let mut old = connect();
    let mut h = handshake(KEY, 2);
    h[4] = 99; // another protocol version
    old.write_all(&h).unwrap();
    let mut impostor = connect();
    impostor.write_all(&handshake(KEY, 0)).unwrap(); // rank 0 never connects to itself
    let mut partial = connect();
    partial.write_all(&handshake(KEY, 2)[..10]).unwrap();
    drop(partial);
    let mut silent = connect();

    let mut ts = connect_all(ts);
    assert_eq!(ts[0].stats().dropped, 6);
    assert_eq!(ts[1].stats().dropped, 0);

    // The silent stranger has been hung up on.
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut buf = [0; 8];
    match silent.read(&mut buf) {
        Ok(0) => {}
        Err(e) if e.kind() == io::ErrorKind::ConnectionReset => {}
        other => panic!("stranger still connected: {other:?}"),
    }

    let mut ins = inboxes(3);
    for (from, to) in [(0, 1), (0, 2), (1, 0), (2, 0)] {
        send_retry(&mut ts, &mut ins, from, to, &message(from as u64, 16));
    }
    let check = give_up_after(5);
    while ins.iter().map(|i| i.len()).sum::<usize>() < 4 {
        pump(&mut ts, &mut ins);
        check("traffic after strangers");
    }
    let mut got0: Vec<usize> = ins[0].iter().map(|(s, _)| *s).collect();
    got0.sort();
    assert_eq!(got0, [1, 2]);
    assert_eq!(ins[1][0].0, 0);
    assert_eq!(ins[2][0].0, 0);
}

#[test]
fn connect_times_out_naming_missing_ranks() {
    let cfg = TcpConfig {
        connect_timeout: Duration::from_millis(300),
        ..config()
    };
    let mut ts: Vec<_> = (0..3).map(|_| bind_with(&cfg)).collect();
    let peers = [None, Some(ts[1].local_addr()), Some(ts[2].local_addr())];
    let start = Instant::now();
    match ts[0].connect(0, &peers) {
        Err(NetError::PeerFailed { peer: 1, why }) => assert!(why.contains("[1, 2]"), "{why}"),
        other => panic!("expected a timeout, got {other:?}"),
    }
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn dropped_peer_is_reported_by_rank() {
    // Orderly end of stream but no goodbye: the peer process went away.
    let mut ts = mesh(2);
    let mut ins = inboxes(2);
    for i in 0..100 {
        send_retry(&mut ts, &mut ins, 0, 1, &message(i, 64));
    }
    let check = give_up_after(5);
    while ins[1].len() < 100 {
        pump(&mut ts, &mut ins);
        check("delivery before the drop");
    }
    drop(ts.pop());
    let check = give_up_after(5);
    loop {
        match ts[0].progress(now(), &mut ins[0]) {
            Ok(_) => check("failure report"),
            Err(NetError::PeerFailed { peer, .. }) => {
                assert_eq!(peer, 1);
                break;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert!(matches!(
        ts[0].send(1, b"x", now()),
        Err(NetError::PeerFailed { peer: 1, .. })
    ));
    assert!(ts[0].is_idle());
}

#[test]
fn reset_peer_is_reported_and_the_others_carry_on() {
    // Rank 2 dies with unread data, so its kernel resets the connection.
    let mut ts = mesh(3);
    let mut ins = inboxes(3);
    ts[0].send(2, &message(1, 1 << 20), now()).unwrap();
    ts[0].progress(now(), &mut ins[0]).unwrap();
    thread::sleep(Duration::from_millis(50));
    drop(ts.pop());
    for r in 0..2 {
        let check = give_up_after(5);
        loop {
            match ts[r].progress(now(), &mut ins[r]) {
                Ok(_) => check("failure report"),
                Err(NetError::PeerFailed { peer, why }) => {
                    assert_eq!(peer, 2, "{why}");
                    break;
                }
                Err(e) => panic!("{e}"),
            }
        }
    }
    send_retry(&mut ts, &mut ins, 0, 1, &message(5, 100));
    send_retry(&mut ts, &mut ins, 1, 0, &message(6, 100));
    let check = give_up_after(5);
    while ins[0].is_empty() || ins[1].is_empty() {
        pump(&mut ts, &mut ins);
        check("survivors");
    }
    assert_message(&ins[1][0].1, 5, 100);
    assert_message(&ins[0][0].1, 6, 100);
}

/// A transport as rank 0 whose rank 1 is a raw socket in the test's hands.
fn with_raw_peer() -> (TcpTransport, TcpStream) {
    let mut t = bind_with(&config());
    let mut raw = TcpStream::connect(t.local_addr()).unwrap();
    raw.write_all(&handshake(KEY, 1)).unwrap();
    // Rank 0 accepts from rank 1 and never dials it, so its address is not used.
    let unused = SocketAddr::new(LOCAL, 9);
    t.connect(0, &[None, Some(unused)]).unwrap();
    (t, raw)
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut f = (body.len() as u32).to_le_bytes().to_vec();
    f.extend_from_slice(body);
    f
}

/// Progresses until an error, returning it with what was delivered before.
fn progress_until_error(t: &mut TcpTransport) -> (NetError, Inbox) {
    let mut inbox = Vec::new();
    let check = give_up_after(5);
    loop {
        if let Err(e) = t.progress(now(), &mut inbox) {
            return (e, inbox);
        }
        check("an error");
    }
}

#[test]
fn oversized_length_prefix_is_a_protocol_violation() {
    let (mut t, mut raw) = with_raw_peer();
    raw.write_all(&frame(b"fine")).unwrap();
    raw.write_all(&(MAX_MESSAGE as u32 + 1).to_le_bytes())
        .unwrap();
    let (e, inbox) = progress_until_error(&mut t);
    assert_eq!(inbox, [(1, b"fine".to_vec())]);
    match e {
        NetError::PeerFailed { peer: 1, why } => assert!(why.contains("protocol violation")),
        other => panic!("{other:?}"),
    }
}

#[test]
fn end_of_stream_after_goodbye_is_orderly() {
    let (mut t, mut raw) = with_raw_peer();
    raw.write_all(&frame(b"last words")).unwrap();
    raw.write_all(&GOODBYE.to_le_bytes()).unwrap();
    raw.shutdown(Shutdown::Write).unwrap();
    let mut inbox = Vec::new();
    let start = Instant::now();
    while start.elapsed() < Duration::from_millis(100) {
        t.progress(now(), &mut inbox)
            .expect("an announced close is no failure");
    }
    assert_eq!(inbox, [(1, b"last words".to_vec())]);
    assert!(matches!(
        t.send(1, b"x", now()),
        Err(NetError::PeerFailed { peer: 1, .. })
    ));
    assert_eq!(t.conns[0].state, State::Finished);
}

#[test]
fn data_after_goodbye_is_a_protocol_violation() {
    let (mut t, mut raw) = with_raw_peer();
    raw.write_all(&GOODBYE.to_le_bytes()).unwrap();
    raw.write_all(&frame(b"zombie")).unwrap();
    let (e, inbox) = progress_until_error(&mut t);
    assert!(inbox.is_empty());
    assert!(matches!(e, NetError::PeerFailed { peer: 1, why } if why.contains("after goodbye")));
}

#[test]
fn flood_without_reader_blocks_then_drains_in_order() {
    const N: u64 = 800;
    let len = |seq: u64| 100 + (seq * 7919 % 60_000) as usize;
    let cfg = TcpConfig {
        socket_buffer: 64 << 10,
        max_queued: 1 << 20,
        ..config()
    };
    let mut ts = mesh_with(2, &cfg);
    let mut ins = inboxes(2);
    // Rank 1 does not read: kernel buffers fill, writes become partial, the queue grows
    // to its bound.
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
    assert!(ts[0].conns[0].tx.queued() > (1 << 20) / 2);
    // Now it reads.
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

#[test]
fn ping_pong_costs_one_write_per_message_per_side() {
    const ROUNDS: u64 = 2000;
    let mut ts = mesh(2);
    let mut ins = inboxes(2);
    let check = give_up_after(10);
    for round in 0..ROUNDS {
        for (from, to) in [(0, 1), (1, 0)] {
            ts[from].send(to, &round.to_le_bytes(), now()).unwrap();
            ts[from].progress(now(), &mut ins[from]).unwrap();
            while ins[to].is_empty() {
                ts[to].progress(now(), &mut ins[to]).unwrap();
                check("ping-pong");
            }
            let (src, m) = ins[to].pop().unwrap();
            assert_eq!((src, tag_of(&m)), (from, round));
        }
    }
    for t in &ts {
        let s = t.stats();
        assert_eq!(s.send_calls, ROUNDS, "{s:?}");
        assert_eq!(s.packets_sent, ROUNDS);
        assert_eq!(s.bytes_sent, ROUNDS * 12);
        assert!(s.recv_calls >= ROUNDS);
    }
}

#[test]
fn close_after_sending_delivers_everything() {
    const N: u64 = 3000;
    let len = |seq: u64| {
        if seq % 100 == 0 {
            300_000
        } else {
            8 + (seq % 300) as usize
        }
    };
    let mut ts = mesh(2);
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
        // Close at once: most of the data is still queued or in flight.
        let r = a.close(&mut now, now() + 10_000_000_000);
        (r, a.stats())
    });
    let mut inbox = Vec::new();
    let mut next = 0;
    let check = give_up_after(10);
    while next < N {
        b.progress(now(), &mut inbox)
            .expect("the sender's goodbye is no failure");
        for (src, m) in inbox.drain(..) {
            assert_eq!(src, 0);
            assert_message(&m, next, len(next));
            next += 1;
        }
        check("delivery");
    }
    for _ in 0..100 {
        b.progress(now(), &mut inbox)
            .expect("the sender's goodbye is no failure");
    }
    b.close(&mut now, now() + 10_000_000_000)
        .expect("receiver close");
    let (r, stats) = sender.join().unwrap();
    r.expect("sender close");
    assert_eq!(stats.messages_sent, N);
    assert_eq!(b.stats().messages_received, N);
}

#[test]
fn simultaneous_close_after_all_to_all() {
    const N: usize = 3;
    const M: u64 = 500;
    let mut ts = mesh(N);
    let mut ins = inboxes(N);
    for seq in 0..M {
        for src in 0..N {
            for dst in (0..N).filter(|&d| d != src) {
                send_retry(&mut ts, &mut ins, src, dst, &message(seq, 40));
            }
        }
    }
    let check = give_up_after(10);
    while ins.iter().any(|i| i.len() < (N - 1) * M as usize) {
        pump(&mut ts, &mut ins);
        check("all to all");
    }
    let closers: Vec<_> = ts
        .into_iter()
        .map(|mut t| {
            thread::spawn(move || {
                // Something sent just before close still goes out; the peers discard it.
                let me = t.me.unwrap();
                t.send((me + 1) % N, b"late", now()).unwrap();
                t.close(&mut now, now() + 10_000_000_000).map(|()| t)
            })
        })
        .collect();
    for c in closers {
        let t = c.join().unwrap().expect("close");
        assert!(t.is_idle());
        assert!(t.conns.iter().all(|c| c.state == State::Finished));
    }
}

/// Round-trip time of the transport against the raw TCP floor ([`floor`]) with the same
/// 8-byte payload, each side on its own thread. `cargo test --release -p volley --lib
/// bench_ping_pong -- --ignored --nocapture`.
#[test]
#[ignore = "benchmark"]
fn bench_ping_pong_against_raw_tcp() {
    const ROUNDS: u64 = 20_000;
    /// ns per round trip, the first tenth excluded as warm-up (as the floor counts).
    fn raw() -> f64 {
        let (mut a, mut b) = floor::pair(floor::SocketFloor::Tcp, 8).unwrap();
        let echo = thread::spawn(move || b.echo(ROUNDS).unwrap());
        let ns = a.ping(ROUNDS).unwrap();
        echo.join().unwrap();
        ns
    }
    fn volley() -> f64 {
        let mut ts = mesh(2);
        let mut b = ts.pop().unwrap();
        let mut a = ts.pop().unwrap();
        let echo = thread::spawn(move || {
            let mut inbox = Vec::new();
            for _ in 0..ROUNDS {
                while inbox.is_empty() {
                    b.progress(0, &mut inbox).unwrap();
                }
                let (_, m) = inbox.pop().unwrap();
                b.send(0, &m, 0).unwrap();
                b.progress(0, &mut inbox).unwrap();
            }
            b
        });
        let mut inbox = Vec::new();
        let warm = ROUNDS / 10;
        let mut start = Instant::now();
        for i in 0..ROUNDS {
            if i == warm {
                start = Instant::now();
            }
            a.send(1, &i.to_le_bytes(), 0).unwrap();
            while inbox.is_empty() {
                a.progress(0, &mut inbox).unwrap();
            }
            inbox.clear();
        }
        let ns = start.elapsed().as_nanos() as f64 / (ROUNDS - warm) as f64;
        let b = echo.join().unwrap();
        println!(
            "volley stats a: {:?}\nvolley stats b: {:?}",
            a.stats(),
            b.stats()
        );
        ns
    }
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..3 {
        best.0 = best.0.min(raw());
        best.1 = best.1.min(volley());
    }
    println!(
        "round trip: raw {:.2} us, volley {:.2} us, ratio {:.3}",
        best.0 / 1000.0,
        best.1 / 1000.0,
        best.1 / best.0
    );
}
