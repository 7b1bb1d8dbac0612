//! The TCP transport's own tests (the contract both transports keep runs here too, through
//! [`contract_tests!`]): transports on 127.0.0.1 in one process, meshes connected one thread
//! per rank (connect blocks), then driven from the test thread or one thread per transport.

use std::io::{self, Read, Write};
use std::net::Shutdown;
use std::thread;
use std::time::Instant;

use super::receive::{BIG_FRAME, RECV_BUF};
use super::send_queue::SMALL_MESSAGE;
use super::setup::handshake;
use super::*;
use crate::transport::net::contract_tests::{
    assert_message, connect_all, contract_tests, give_up_after, inboxes, message, now, pump,
    send_retry, tag_of, Harness, Inbox, Setup, LOCAL,
};
use crate::transport::net::floor;

const KEY: u64 = 0x0123_4567_89ab_cdef;

pub(super) fn config() -> TcpConfig {
    TcpConfig {
        connect_timeout: Duration::from_secs(10),
        ..TcpConfig::default()
    }
}

pub(super) fn bind_with(config: &TcpConfig) -> TcpTransport {
    TcpTransport::bind(LOCAL, KEY, config.clone()).expect("bind")
}

pub(super) fn mesh(n: usize) -> Vec<TcpTransport> {
    Tcp::mesh(n, Setup::Default)
}

/// The TCP transport under the contract tests.
struct Tcp;

impl Harness for Tcp {
    type T = TcpTransport;

    const BOUNDARY_SIZES: &'static [usize] = &[
        SMALL_MESSAGE,
        SMALL_MESSAGE + 1,
        BIG_FRAME,
        BIG_FRAME + 1,
        RECV_BUF + 3,
    ];

    fn bind(setup: Setup) -> TcpTransport {
        bind_with(&match setup {
            Setup::Default | Setup::QuickFailure => config(),
            Setup::SmallQueue => TcpConfig {
                socket_buffer: 64 << 10,
                max_queued: 1 << 20,
                ..config()
            },
        })
    }

    fn after_stream(ts: &[TcpTransport], count: u64) {
        for t in ts {
            let s = t.stats();
            assert_eq!((s.packets_sent, s.packets_received), (count, count));
            assert!(s.send_calls < count / 10, "writes were not batched: {s:?}");
        }
    }

    fn after_all_to_all(ts: &[TcpTransport]) {
        for t in ts {
            assert!(t.epoll.is_some() && t.readable_fd() == t.epoll.as_ref().unwrap().as_raw_fd());
        }
    }

    fn when_flooded(sender: &TcpTransport) {
        // Kernel buffers full, writes partial, the queue grown to its bound.
        assert!(sender.conns[0].tx.queued() > (1 << 20) / 2);
    }

    fn after_peer_failure(t: &mut TcpTransport, _waited: Duration) {
        // The broken connection's output was dropped.
        assert!(t.is_idle());
    }

    fn after_close(t: &TcpTransport) {
        assert!(t.conns.iter().all(|c| c.state == State::Finished));
    }
}

contract_tests!(Tcp);

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
    with_raw_peer_config(&config())
}

/// [`with_raw_peer`] with settings of the test's own.
pub(super) fn with_raw_peer_config(config: &TcpConfig) -> (TcpTransport, TcpStream) {
    let mut t = bind_with(config);
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
