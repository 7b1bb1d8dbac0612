//! Unsequenced datagrams (seed 002's "no flow control"): at most once, never retransmitted,
//! never held for order, and no disturbance of the sequenced stream beside them.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::tests::{sim_config, Rng, KEY, MS, US};
use super::wire::{self, Kind};
use super::*;

/// The kind of a datagram a peer wrote.
fn kind(datagram: &[u8]) -> Kind {
    wire::decode(datagram).expect("a valid datagram").0.kind
}

fn tagged(tag: u8, i: u64) -> Vec<u8> {
    let mut m = vec![tag];
    m.extend_from_slice(&i.to_le_bytes());
    m
}

fn untag(m: &[u8]) -> (u8, u64) {
    (m[0], u64::from_le_bytes(m[1..9].try_into().unwrap()))
}

/// Datagrams on the simulated wire: arrival time, tie-breaking order, receiver, bytes.
type Wire = BinaryHeap<Reverse<(u64, u64, usize, Vec<u8>)>>;

/// Side 0 sends `n` sequenced and `n` unsequenced messages, interleaved, over a network that
/// loses, duplicates and reorders `p` of the datagrams; returns both peers once every
/// sequenced message is delivered and acknowledged and the wire is empty, with the
/// unsequenced indices side 1 got.
fn mixed(seed: u64, p: f64, n: u64) -> ([Peer; 2], Vec<u64>) {
    let mut rng = Rng::new(seed);
    let mut peers = [11, 22].map(|inc| Peer::new(sim_config(), KEY, inc).unwrap());
    let mut wire_q: Wire = BinaryHeap::new();
    let (mut order, mut now, mut sent, mut next_seq) = (0u64, 0u64, 0u64, 0u64);
    // A few messages every 5 µs: a sender that writes thousands of datagrams in the same
    // instant would see them scrambled far beyond any real network's reordering.
    let mut next_send = 0u64;
    let mut unsequenced = Vec::new();
    let mut buf = Vec::new();
    let mut put = |rng: &mut Rng, q: &mut Wire, now: u64, to: usize, d: &[u8]| {
        if rng.chance(p) {
            return;
        }
        for _ in 0..if rng.chance(p) { 2 } else { 1 } {
            let mut at = now + 50 * US + rng.below(20 * US);
            if rng.chance(p) {
                at += rng.below(300 * US);
            }
            order += 1;
            q.push(Reverse((at, order, to, d.to_vec())));
        }
    };
    loop {
        let burst_end = (sent + 4).min(n);
        while now >= next_send
            && sent < burst_end
            && peers[0].send(&tagged(b'S', sent), now).is_ok()
        {
            let len = peers[0]
                .send_unsequenced(&tagged(b'U', sent), now, &mut buf)
                .unwrap();
            assert_eq!(kind(&buf[..len]), Kind::Unsequenced);
            put(&mut rng, &mut wire_q, now, 1, &buf[..len]);
            sent += 1;
        }
        if now >= next_send {
            next_send = now + 5 * US;
        }
        for (side, peer) in peers.iter_mut().enumerate() {
            while let Some(len) = peer.poll_transmit(now, &mut buf) {
                // The sequenced machinery never writes (so never retransmits) an
                // unsequenced datagram.
                assert_ne!(kind(&buf[..len]), Kind::Unsequenced);
                put(&mut rng, &mut wire_q, now, 1 - side, &buf[..len]);
            }
        }
        while let Some(m) = peers[1].poll_deliver() {
            match untag(&m) {
                (b'S', i) => {
                    assert_eq!(i, next_seq, "sequenced out of order or twice");
                    next_seq += 1;
                }
                (b'U', i) => {
                    assert!(!unsequenced.contains(&i), "unsequenced {i} delivered twice");
                    unsequenced.push(i);
                }
                other => panic!("unexpected {other:?}"),
            }
        }
        assert!(peers[0].poll_deliver().is_none());
        if next_seq == n && peers[0].is_idle() && wire_q.is_empty() {
            break;
        }
        let next = [
            (sent < n).then_some(next_send),
            wire_q.peek().map(|Reverse(e)| e.0),
            peers[0].poll_timeout(),
            peers[1].poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("deadlock: nothing in flight and no timer");
        now = now.max(next);
        assert!(now < 100_000 * MS, "no completion: {next_seq} of {n}");
        while wire_q.peek().is_some_and(|Reverse(e)| e.0 <= now) {
            let Some(Reverse((_, _, to, d))) = wire_q.pop() else {
                break;
            };
            peers[to].handle_datagram(&d, now).unwrap();
        }
        for peer in &mut peers {
            peer.handle_timeout(now);
            peer.check_invariants();
        }
    }
    (peers, unsequenced)
}

#[test]
fn unsequenced_messages_arrive_at_most_once_beside_an_exactly_once_stream() {
    let n = 20_000;
    let ([a, b], got) = mixed(41, 0.10, n);
    let (sa, sb) = (a.stats(), b.stats());
    assert_eq!(sa.unsequenced_sent, n);
    assert_eq!(sb.unsequenced_delivered, got.len() as u64);
    // Some were lost (about a tenth), most arrived, and duplicates were refused.
    assert!(
        got.len() as u64 > n * 8 / 10 && (got.len() as u64) < n,
        "{}",
        got.len()
    );
    assert!(sb.unsequenced_duplicates > 0, "{sb:?}");
    // The sequenced stream repaired its own losses and counted its own duplicates.
    assert!(
        sa.retransmissions > 0 && sb.duplicates_dropped > 0,
        "{sa:?} {sb:?}"
    );
    assert_eq!(sb.messages_delivered, n + got.len() as u64);
    // Over a clean network every one arrives.
    let (_, got) = mixed(42, 0.0, 5000);
    assert_eq!(got.len(), 5000);
}

#[test]
fn unsequenced_traffic_alone_owes_no_ack_arms_no_timer_and_is_never_resent() {
    let mut a = Peer::new(sim_config(), KEY, 1).unwrap();
    let mut b = Peer::new(sim_config(), KEY, 2).unwrap();
    let mut rng = Rng::new(5);
    let (mut buf, mut out) = (Vec::new(), Vec::new());
    let mut arrived = 0;
    for i in 0..2000u64 {
        let now = i * MS;
        let len = a.send_unsequenced(&tagged(b'U', i), now, &mut buf).unwrap();
        if !rng.chance(0.3) {
            b.handle_datagram(&buf[..len], now).unwrap();
            assert_eq!(untag(&b.poll_deliver().unwrap()), (b'U', i));
            arrived += 1;
        }
        for p in [&mut a, &mut b] {
            p.handle_timeout(now + 100 * MS);
            assert!(p.poll_transmit(now + 100 * MS, &mut out).is_none());
            assert_eq!(p.poll_timeout(), None);
            assert!(p.is_idle() && p.in_flight() == 0);
        }
    }
    assert!(arrived > 1000 && arrived < 2000);
    assert_eq!(a.stats().retransmissions, 0);
    assert_eq!(a.stats().datagrams_sent, 2000);
    assert_eq!(b.stats().acks_sent + b.stats().datagrams_sent, 0);
    assert_eq!(b.stats().unsequenced_delivered, arrived);
    assert_eq!(a.state(), State::Active);
}

#[test]
fn an_unsequenced_message_is_not_held_behind_a_lost_sequenced_one() {
    let mut a = Peer::new(sim_config(), KEY, 1).unwrap();
    let mut b = Peer::new(sim_config(), KEY, 2).unwrap();
    let mut buf = Vec::new();
    a.send(&[1; 1400], 0).unwrap();
    a.send(&[2; 1400], 0).unwrap();
    a.poll_transmit(0, &mut buf).unwrap(); // lost
    let len = a.poll_transmit(0, &mut buf).unwrap();
    b.handle_datagram(&buf[..len], 0).unwrap();
    assert!(b.poll_deliver().is_none(), "the second waits for the first");
    let owed = b.poll_timeout();
    let len = a.send_unsequenced(b"now", 0, &mut buf).unwrap();
    let datagram = buf[..len].to_vec();
    b.handle_datagram(&datagram, 0).unwrap();
    assert_eq!(b.poll_deliver().unwrap(), b"now");
    assert_eq!(b.poll_timeout(), owed, "no ack owed for it");
    // A copy of it is refused, and counted as such.
    b.handle_datagram(&datagram, 0).unwrap();
    assert!(b.poll_deliver().is_none());
    assert_eq!(b.stats().unsequenced_duplicates, 1);
    assert_eq!(b.stats().duplicates_dropped, 0);
    // The sequenced stream carries on: the first is retransmitted, both are delivered.
    let t = a.poll_timeout().unwrap();
    a.handle_timeout(t);
    let len = a.poll_transmit(t, &mut buf).unwrap();
    assert_eq!(kind(&buf[..len]), Kind::Data);
    b.handle_datagram(&buf[..len], t).unwrap();
    assert_eq!(b.poll_deliver().unwrap(), [1; 1400]);
    assert_eq!(b.poll_deliver().unwrap(), [2; 1400]);
    assert_eq!(a.stats().retransmissions, 1);
}

#[test]
fn unsequenced_sends_are_refused_when_too_large_or_failed_and_checked_on_arrival() {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config.clone(), KEY, 2).unwrap();
    let mut buf = Vec::new();
    let max = a.max_unsequenced();
    assert_eq!(max, config.max_datagram_size - wire::HEADER_LEN - 5);
    let len = a.send_unsequenced(&vec![7; max], 0, &mut buf).unwrap();
    assert_eq!(len, config.max_datagram_size);
    assert_eq!(
        a.send_unsequenced(&vec![7; max + 1], 0, &mut buf),
        Err(SendError::TooLarge { len: max + 1, max })
    );
    // Another job's, or a corrupt one, is refused like any datagram.
    let mut other = Peer::new(config.clone(), KEY ^ 1, 3).unwrap();
    let len = other.send_unsequenced(b"x", 0, &mut buf).unwrap();
    assert_eq!(
        b.handle_datagram(&buf[..len], 0),
        Err(DecodeError::ForeignJob)
    );
    let len = a.send_unsequenced(b"x", 0, &mut buf).unwrap();
    buf[len - 1] ^= 1;
    assert_eq!(
        b.handle_datagram(&buf[..len], 0),
        Err(DecodeError::BadChecksum)
    );
    // A restarted sender is detected through an unsequenced datagram too.
    let len = a.send_unsequenced(b"y", 0, &mut buf).unwrap();
    b.handle_datagram(&buf[..len], 0).unwrap();
    let mut reborn = Peer::new(config, KEY, 9).unwrap();
    let len = reborn.send_unsequenced(b"z", 0, &mut buf).unwrap();
    assert_eq!(
        b.handle_datagram(&buf[..len], 0),
        Err(DecodeError::PeerRestarted)
    );
    assert!(matches!(
        b.send_unsequenced(b"w", 0, &mut buf),
        Err(SendError::Failed(Failure::PeerRestarted { .. }))
    ));
}

#[test]
fn a_full_delivery_queue_drops_unsequenced_messages() {
    let config = Config {
        recv_buffer: 1000,
        ..sim_config()
    };
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config, KEY, 2).unwrap();
    let mut buf = Vec::new();
    for _ in 0..3 {
        let len = a.send_unsequenced(&[0; 600], 0, &mut buf).unwrap();
        b.handle_datagram(&buf[..len], 0).unwrap();
    }
    // The first fits, the second fills the queue past its bound, the third is dropped.
    assert_eq!(b.stats().unsequenced_delivered, 2);
    assert_eq!(b.stats().recv_full_dropped, 1);
    assert!(b.poll_deliver().is_some() && b.poll_deliver().is_some());
    assert!(b.poll_deliver().is_none());
}
