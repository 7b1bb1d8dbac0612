//! Deterministic tests: two peers over a seeded simulated network in virtual time, plus
//! flow control, peer timeout, restart detection and a decoder fuzz.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use super::wire::{self, HEADER_LEN};
use super::*;

pub(super) const KEY: u64 = 0x5eed_f00d_70b5_0001;
const INC: [u64; 2] = [11, 22];
pub(super) const MS: u64 = 1_000_000;
pub(super) const US: u64 = 1_000;

/// xorshift64* — small, seeded, reproducible.
pub(super) struct Rng(u64);

impl Rng {
    pub(super) fn new(seed: u64) -> Self {
        Self(splitmix(seed) | 1)
    }
    pub(super) fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub(super) fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    pub(super) fn chance(&mut self, p: f64) -> bool {
        ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }
}

fn splitmix(x: u64) -> u64 {
    let mut z = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Message `i` from side `from`: its length is drawn from `0..=max_len` by a hash of the
/// index, its bytes are the index followed by a pattern, so the receiver can regenerate it.
fn message(from: usize, i: u64, max_len: usize) -> Vec<u8> {
    let h = splitmix(i ^ ((from as u64) << 62));
    // Mostly small messages, one in 16 up to max_len.
    let len = if h & 15 == 0 {
        (h >> 8) % (max_len as u64 + 1)
    } else {
        (h >> 8) % (max_len.min(200) as u64 + 1)
    } as usize;
    let mut m: Vec<u8> = (0..len)
        .map(|k| (h >> (k % 7 * 8)) as u8 ^ k as u8)
        .collect();
    let tag = i.to_le_bytes();
    let n = len.min(8);
    m[..n].copy_from_slice(&tag[..n]);
    m
}

/// Impairments of the simulated network, applied to each datagram independently.
#[derive(Clone, Copy)]
struct Net {
    loss: f64,
    dup: f64,
    reorder: f64,
    /// One-way delay, plus uniform jitter in `0..=jitter`.
    delay: u64,
    jitter: u64,
    /// Extra delay, in `0..=reorder_delay`, of a reordered datagram.
    reorder_delay: u64,
}

impl Net {
    fn impaired(p: f64) -> Self {
        Self {
            loss: p,
            dup: p,
            reorder: p,
            delay: 50 * US,
            jitter: 20 * US,
            reorder_delay: 300 * US,
        }
    }
}

pub(super) fn sim_config() -> Config {
    Config {
        max_datagram_size: 1472,
        max_message_size: 64 << 10,
        window: 32,
        send_buffer: 128 << 10,
        recv_buffer: 256 << 10,
        ack_delay: 20 * US,
        ack_every: 8,
        initial_rto: MS,
        min_rto: 200 * US,
        max_rto: 50 * MS,
        peer_timeout: 10_000 * MS,
    }
}

/// A datagram on the simulated wire: arrival time, tie-breaking order, receiver, bytes.
type InTransit = (u64, u64, usize, Vec<u8>);

/// What a simulation run produced; equal for equal seeds.
#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    stats: [Stats; 2],
    /// Final retransmission timeouts.
    rto: [u64; 2],
    /// FNV-1a over every datagram sent (with time and direction) and every delivery.
    transcript: u64,
    end_time: u64,
}

fn fnv(mut h: u64, bytes: &[u8]) -> u64 {
    for &b in bytes {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    h
}

/// Runs `n` messages each way at once between two peers until all are delivered and
/// acknowledged; asserts exactly-once in-order delivery as it goes.
fn simulate(seed: u64, net: Net, config: Config, n: u64, max_len: usize) -> Outcome {
    simulate_lending(seed, net, config, n, max_len, false)
}

/// [`simulate`], where a message larger than a datagram is lent, once nothing is queued
/// before it, when `lend` ([`Peer::send_lent`]): its datagrams go on the wire during its send, and
/// its bytes are overwritten once the send has ended, so that whatever is resent must come
/// from the copy the peer kept.
fn simulate_lending(
    seed: u64,
    net: Net,
    config: Config,
    n: u64,
    max_len: usize,
    lend: bool,
) -> Outcome {
    let mut rng = Rng::new(seed);
    let mut peers = [0, 1].map(|i| Peer::new(config.clone(), KEY, INC[i]).unwrap());
    let mut queue: BinaryHeap<Reverse<InTransit>> = BinaryHeap::new();
    let mut order = 0u64;
    let (mut sent, mut received) = ([0u64; 2], [0u64; 2]);
    let mut now = 0u64;
    let mut transcript = 0xcbf2_9ce4_8422_2325u64;
    let mut buf = Vec::new();
    let deadline = 1_000_000 * MS;
    loop {
        for p in 0..2 {
            let mut emit = |d: &[u8], transcript: &mut u64| {
                assert!(d.len() <= config.max_datagram_size);
                *transcript = fnv(*transcript, &now.to_le_bytes());
                *transcript = fnv(*transcript, &[p as u8]);
                *transcript = fnv(*transcript, d);
                if rng.chance(net.loss) {
                    return;
                }
                let copies = if rng.chance(net.dup) { 2 } else { 1 };
                for _ in 0..copies {
                    let mut at = now + net.delay + rng.below(net.jitter + 1);
                    if rng.chance(net.reorder) {
                        at += rng.below(net.reorder_delay + 1);
                    }
                    order += 1;
                    queue.push(Reverse((at, order, 1 - p, d.to_vec())));
                }
            };
            while sent[p] < n {
                let mut m = message(p, sent[p], max_len);
                let fits = m.len() + wire::RECORD_OVERHEAD <= config.max_datagram_size - HEADER_LEN;
                if lend && !fits {
                    if peers[p].queued() > 0 {
                        // Lent once what is queued before it has left.
                        break;
                    }
                    let (head, body) = m.split_at(m.len().min(8));
                    let lent = Lent { head, body };
                    match peers[p].send_lent(lent, now) {
                        Ok(()) => sent[p] += 1,
                        Err(SendError::WouldBlock) => break,
                        Err(e) => panic!("peer {p} send: {e}"),
                    }
                    while let Some(d) = peers[p].poll_transmit_lent(now, &mut buf, lent) {
                        buf.extend_from_slice(lent.slice(d.tail));
                        emit(&buf, &mut transcript);
                    }
                    peers[p].retain_lent(lent);
                    m.fill(0xa5);
                    continue;
                }
                match peers[p].send(&m, now) {
                    Ok(()) => sent[p] += 1,
                    Err(SendError::WouldBlock) => break,
                    Err(e) => panic!("peer {p} send: {e}"),
                }
            }
            while let Some(len) = peers[p].poll_transmit(now, &mut buf) {
                emit(&buf[..len], &mut transcript);
            }
            while let Some(m) = peers[p].poll_deliver() {
                let i = received[p];
                assert!(i < n, "peer {p} got an extra message");
                assert_eq!(m, message(1 - p, i, max_len), "peer {p} message {i}");
                transcript = fnv(transcript, &i.to_le_bytes());
                received[p] += 1;
                // Reused buffers must never leak old bytes into later messages.
                peers[p].recycle(m);
            }
            assert_eq!(peers[p].state(), State::Active, "peer {p} at {now}");
            peers[p].check_invariants();
        }
        if received == [n, n] && peers.iter().all(Peer::is_idle) {
            break;
        }
        let next = [
            queue.peek().map(|Reverse(e)| e.0),
            peers[0].poll_timeout(),
            peers[1].poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min()
        .expect("deadlock: no datagram in flight and no timer");
        now = now.max(next);
        assert!(now < deadline, "no completion by {now} ns: {received:?}");
        while queue.peek().is_some_and(|Reverse(e)| e.0 <= now) {
            let Some(Reverse((_, _, to, d))) = queue.pop() else {
                break;
            };
            peers[to].handle_datagram(&d, now).unwrap();
        }
        for peer in &mut peers {
            peer.handle_timeout(now);
        }
    }
    for (p, peer) in peers.iter().enumerate() {
        let s = peer.stats();
        assert_eq!(s.messages_sent, n);
        assert_eq!(s.messages_delivered, n, "peer {p}");
        assert_eq!(s.malformed_dropped + s.foreign_dropped + s.stale_dropped, 0);
    }
    Outcome {
        stats: [peers[0].stats().clone(), peers[1].stats().clone()],
        rto: [peers[0].rto(), peers[1].rto()],
        transcript,
        end_time: now,
    }
}

fn check_level(p: f64, seed: u64) {
    let n = 100_000;
    let a = simulate(seed, Net::impaired(p), sim_config(), n, 200);
    let b = simulate(seed, Net::impaired(p), sim_config(), n, 200);
    assert_eq!(a, b, "same seed, different run");
    for s in &a.stats {
        // Impairments happened and were repaired.
        assert!(s.retransmissions > 0, "{s:?}");
        assert!(s.duplicates_dropped > 0, "{s:?}");
        assert!(s.acks_sent > 0, "{s:?}");
        // Packing: far fewer datagrams than messages.
        assert!(s.datagrams_sent < n / 4, "{s:?}");
    }
    let c = simulate(seed + 1, Net::impaired(p), sim_config(), 1000, 200);
    assert_ne!(a.transcript, c.transcript);
    eprintln!(
        "p={p}: end {} us, rto {:?} {:?}",
        a.end_time / US,
        a.rto,
        a.stats
    );
}

#[test]
fn exactly_once_in_order_at_0_1_percent() {
    check_level(0.001, 1);
}

#[test]
fn exactly_once_in_order_at_1_percent() {
    check_level(0.01, 2);
}

#[test]
fn exactly_once_in_order_at_10_percent() {
    check_level(0.10, 3);
}

#[test]
fn clean_network_needs_no_retransmission() {
    let net = Net::impaired(0.0);
    let o = simulate(9, net, sim_config(), 10_000, 200);
    for s in &o.stats {
        assert_eq!(s.retransmissions + s.duplicates_dropped, 0, "{s:?}");
    }
}

#[test]
fn large_messages_fragment_and_reassemble_under_loss() {
    let o = simulate(4, Net::impaired(0.05), sim_config(), 2000, 60_000);
    assert!(o.stats[0].retransmissions > 0);
    // Jumbo datagrams, messages much larger still.
    let config = Config {
        max_datagram_size: 65507,
        max_message_size: 300_000,
        send_buffer: 1 << 20,
        recv_buffer: 1 << 20,
        window: 8,
        ..sim_config()
    };
    simulate(5, Net::impaired(0.02), config, 300, 300_000);
}

#[test]
fn lent_messages_arrive_whole_from_their_kept_copies_under_loss() {
    let o = simulate_lending(6, Net::impaired(0.05), sim_config(), 2000, 60_000, true);
    for s in &o.stats {
        assert!(s.lent_messages > 10, "{s:?}");
        assert!(s.lent_bytes_kept > 0, "{s:?}");
        assert!(s.retransmissions > 0, "{s:?}");
    }
    let a = simulate_lending(7, Net::impaired(0.02), sim_config(), 500, 60_000, true);
    let b = simulate_lending(7, Net::impaired(0.02), sim_config(), 500, 60_000, true);
    assert_eq!(a, b, "same seed, different run");
}

#[test]
fn messages_queued_together_share_a_datagram() {
    let mut a = Peer::new(sim_config(), KEY, 1).unwrap();
    let mut b = Peer::new(sim_config(), KEY, 2).unwrap();
    for i in 0..20u8 {
        a.send(&[i; 50], 0).unwrap();
    }
    let mut buf = Vec::new();
    let len = a.poll_transmit(0, &mut buf).unwrap();
    assert!(a.poll_transmit(0, &mut buf[..0].to_vec()).is_none());
    assert_eq!(len, HEADER_LEN + 20 * 55);
    b.handle_datagram(&buf, 0).unwrap();
    for i in 0..20u8 {
        assert_eq!(b.poll_deliver().unwrap(), [i; 50]);
    }
    assert!(b.poll_deliver().is_none());
}

#[test]
fn full_window_blocks_and_loses_nothing() {
    let config = Config {
        max_message_size: 1000,
        send_buffer: 10_000,
        window: 4,
        ..sim_config()
    };
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config, KEY, 2).unwrap();
    let msg = |i: u64| message(0, i, 100);
    let mut buf = Vec::new();
    let (mut sent, mut got, mut now) = (0u64, 0u64, 0u64);
    // Fill: send until refused, then nothing more fits.
    while a.send(&msg(sent), now).is_ok() {
        sent += 1;
    }
    assert!(sent > 10);
    assert_eq!(a.send(&msg(sent), now), Err(SendError::WouldBlock));
    // Only `window` datagrams leave before an ack.
    let mut wire_a = Vec::new();
    while let Some(len) = a.poll_transmit(now, &mut buf) {
        wire_a.push(buf[..len].to_vec());
    }
    assert_eq!(wire_a.len(), 4);
    assert_eq!(a.in_flight(), 4);
    assert!(a.queued() > 0);
    assert_eq!(a.send(&msg(sent), now), Err(SendError::WouldBlock));
    // Run a lossless exchange to completion, retrying refused sends.
    let total = 2000;
    loop {
        now += 10 * US;
        for d in wire_a.drain(..) {
            b.handle_datagram(&d, now).unwrap();
        }
        while let Some(m) = b.poll_deliver() {
            assert_eq!(m, msg(got));
            got += 1;
        }
        while let Some(len) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(&buf[..len], now).unwrap();
        }
        while sent < total && a.send(&msg(sent), now).is_ok() {
            sent += 1;
        }
        while let Some(len) = a.poll_transmit(now, &mut buf) {
            wire_a.push(buf[..len].to_vec());
        }
        if got == total && a.is_idle() {
            break;
        }
        assert!(now < 1000 * MS, "stuck: sent {sent}, got {got}");
    }
    assert!(a.stats().would_block > 1);
    assert_eq!(a.stats().retransmissions, 0);
    assert_eq!(b.stats().messages_delivered, total);
}

#[test]
fn full_receive_queue_refuses_then_recovers() {
    let config = Config {
        recv_buffer: 1000,
        ..sim_config()
    };
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config, KEY, 2).unwrap();
    let mut buf = Vec::new();
    for i in 0..50u8 {
        a.send(&[i; 1000], 0).unwrap();
    }
    let mut now = 0;
    let mut got = 0u8;
    while got < 50 {
        while let Some(len) = a.poll_transmit(now, &mut buf) {
            b.handle_datagram(&buf[..len], now).unwrap();
        }
        while let Some(len) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(&buf[..len], now).unwrap();
        }
        // Take one message per step, so the queue stays full.
        if let Some(m) = b.poll_deliver() {
            assert_eq!(m, [got; 1000]);
            got += 1;
        }
        now += 100 * US;
        assert!(now < 10_000 * MS);
    }
    assert!(b.stats().recv_full_dropped > 0);
    assert_eq!(a.state(), State::Active);
}

#[test]
fn silent_peer_times_out_after_bounded_backoff() {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    a.send(b"hello", 0).unwrap();
    let mut buf = Vec::new();
    let mut sends = Vec::new();
    let mut now = 0;
    while a.state() == State::Active {
        while a.poll_transmit(now, &mut buf).is_some() {
            sends.push(now);
        }
        now = a
            .poll_timeout()
            .expect("a timer runs while data is unacked");
        a.handle_timeout(now);
    }
    assert_eq!(a.state(), State::Failed(Failure::PeerTimeout));
    assert_eq!(now, config.peer_timeout);
    let gaps: Vec<u64> = sends.windows(2).map(|w| w[1] - w[0]).collect();
    assert_eq!(gaps[0], config.initial_rto);
    assert!(gaps
        .windows(2)
        .all(|g| g[1] == (g[0] * 2).min(config.max_rto)));
    assert_eq!(*gaps.last().unwrap(), config.max_rto);
    assert_eq!(
        a.send(b"x", now),
        Err(SendError::Failed(Failure::PeerTimeout))
    );
    assert!(a.poll_transmit(now, &mut buf).is_none());
    assert!(a.poll_timeout().is_none());
}

#[test]
fn idle_pair_does_not_time_out() {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config.clone(), KEY, 2).unwrap();
    let mut buf = Vec::new();
    a.send(b"hello", 0).unwrap();
    let len = a.poll_transmit(0, &mut buf).unwrap();
    b.handle_datagram(&buf[..len], 0).unwrap();
    let t = b.poll_timeout().unwrap();
    let len = b.poll_transmit(t, &mut buf).unwrap();
    a.handle_datagram(&buf[..len], t).unwrap();
    assert!(a.is_idle());
    assert_eq!(a.poll_timeout(), None);
    let later = 10 * config.peer_timeout;
    a.handle_timeout(later);
    assert_eq!(a.state(), State::Active);
    assert!(a.send(b"again", later).is_ok());
}

/// Exchanges one message each way so that both sides know each other.
fn handshake(a: &mut Peer, b: &mut Peer, now: u64) {
    let mut buf = Vec::new();
    a.send(b"ping", now).unwrap();
    b.send(b"pong", now).unwrap();
    let la = a.poll_transmit(now, &mut buf).unwrap();
    let da = buf[..la].to_vec();
    let lb = b.poll_transmit(now, &mut buf).unwrap();
    a.handle_datagram(&buf[..lb], now).unwrap();
    b.handle_datagram(&da, now).unwrap();
    assert_eq!(a.poll_deliver().unwrap(), b"pong");
    assert_eq!(b.poll_deliver().unwrap(), b"ping");
}

#[test]
fn restarted_peer_is_detected_not_merged() {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config.clone(), KEY, 2).unwrap();
    handshake(&mut a, &mut b, 0);
    assert_eq!(a.peer_incarnation(), Some(2));
    // a sends something more, addressed to incarnation 2.
    let mut buf = Vec::new();
    a.send(b"for the old b", 0).unwrap();
    let len = a.poll_transmit(0, &mut buf).unwrap();
    let old = buf[..len].to_vec();
    // b restarts as incarnation 3 and talks first.
    let mut b2 = Peer::new(config, KEY, 3).unwrap();
    assert_eq!(
        b2.handle_datagram(&old, 1),
        Err(DecodeError::StaleIncarnation)
    );
    assert_eq!(b2.stats().stale_dropped, 1);
    assert!(b2.poll_deliver().is_none());
    b2.send(b"hello again", 1).unwrap();
    let len = b2.poll_transmit(1, &mut buf).unwrap();
    assert_eq!(
        a.handle_datagram(&buf[..len], 1),
        Err(DecodeError::PeerRestarted)
    );
    assert_eq!(
        a.state(),
        State::Failed(Failure::PeerRestarted { old: 2, new: 3 })
    );
    assert!(
        a.poll_deliver().is_none(),
        "nothing merged from the new peer"
    );
    assert!(matches!(a.send(b"x", 2), Err(SendError::Failed(_))));
    assert_eq!(
        a.handle_datagram(&buf[..len], 2),
        Err(DecodeError::PairFailed)
    );
}

#[test]
fn invalid_configs_are_refused() {
    let ok = sim_config();
    assert!(Peer::new(ok.clone(), KEY, 1).is_ok());
    assert!(Peer::new(ok.clone(), KEY, 0).is_err());
    for bad in [
        Config {
            max_datagram_size: 100,
            ..ok.clone()
        },
        Config {
            max_datagram_size: 65508,
            ..ok.clone()
        },
        Config {
            window: 0,
            ..ok.clone()
        },
        Config {
            send_buffer: ok.max_message_size,
            ..ok.clone()
        },
        Config {
            min_rto: ok.max_rto + 1,
            ..ok.clone()
        },
    ] {
        assert!(bad.validate().is_err(), "{bad:?}");
    }
    let mut a = Peer::new(ok.clone(), KEY, 1).unwrap();
    assert!(matches!(
        a.send(&vec![0; ok.max_message_size + 1], 0),
        Err(SendError::TooLarge { .. })
    ));
}

/// Valid datagrams from a short exchange, from a (incarnation 1) to b (incarnation 2).
fn sample_datagrams() -> Vec<Vec<u8>> {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config, KEY, 2).unwrap();
    let mut out = Vec::new();
    let mut buf = Vec::new();
    // The handshake by hand, keeping a's first datagram.
    a.send(b"ping", 0).unwrap();
    b.send(b"pong", 0).unwrap();
    let len = a.poll_transmit(0, &mut buf).unwrap();
    out.push(buf[..len].to_vec());
    let len = b.poll_transmit(0, &mut buf).unwrap();
    a.handle_datagram(&buf[..len], 0).unwrap();
    b.handle_datagram(&out[0], 0).unwrap();
    for i in 0..40u64 {
        a.send(&message(0, i, if i % 5 == 0 { 5000 } else { 300 }), 0)
            .unwrap();
    }
    while let Some(len) = a.poll_transmit(0, &mut buf) {
        out.push(buf[..len].to_vec());
    }
    // An ack-only datagram too.
    b.handle_datagram(&out[1], 0).unwrap();
    let t = b.poll_timeout().unwrap();
    let len = b.poll_transmit(t, &mut buf).unwrap();
    out.push(buf[..len].to_vec());
    out
}

#[test]
fn decoder_fuzz_never_panics_and_counts_drops() {
    let samples = sample_datagrams();
    let config = sim_config();
    let mut victim = Peer::new(config.clone(), KEY, 2).unwrap();
    // As in `sample_datagrams`, b has sent one datagram, which they acknowledge.
    victim.send(b"pong", 0).unwrap();
    victim.poll_transmit(0, &mut Vec::new()).unwrap();
    let mut rng = Rng::new(77);
    let mut foreign = 0u64;
    let n = 120_000u64;
    for i in 0..n {
        let s = &samples[rng.below(samples.len() as u64) as usize];
        let input = match i % 4 {
            // Random bytes, sometimes behind a valid magic and version.
            0 => {
                let len = rng.below(2 * HEADER_LEN as u64 + 64) as usize;
                let mut v: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
                if i % 8 == 0 && len >= 3 {
                    v[..3].copy_from_slice(&s[..3]);
                }
                v
            }
            // Truncated.
            1 => s[..rng.below(s.len() as u64) as usize].to_vec(),
            // One to three bits flipped.
            2 => {
                let mut v = s.clone();
                for _ in 0..1 + rng.below(3) {
                    let bit = rng.below(v.len() as u64 * 8);
                    v[(bit / 8) as usize] ^= 1 << (bit % 8);
                }
                if v == *s {
                    // Two flips of the same bit cancel; flip one more.
                    v[0] ^= 1;
                }
                v
            }
            // Another job's key, correctly checksummed.
            _ => {
                let mut v = s.clone();
                v[8..16].copy_from_slice(&(KEY ^ (1 + rng.below(u64::MAX))).to_le_bytes());
                wire::seal(&mut v);
                foreign += 1;
                v
            }
        };
        assert!(
            victim.handle_datagram(&input, 0).is_err(),
            "input {i} accepted"
        );
    }
    let s = victim.stats().clone();
    assert_eq!(s.foreign_dropped, foreign);
    assert_eq!(s.malformed_dropped + s.foreign_dropped, n);
    assert_eq!(s.datagrams_received, 0);
    assert_eq!(victim.state(), State::Active);

    // Valid checksums over random bodies reach the record parser.
    let mut ok = 0;
    for _ in 0..20_000 {
        let mut v = samples[0][..HEADER_LEN].to_vec();
        for _ in 0..rng.below(5) {
            v.push(rng.below(6) as u8);
            let len = if rng.chance(0.1) {
                rng.next() as u32
            } else {
                rng.below(12) as u32
            };
            v.extend_from_slice(&len.to_le_bytes());
            if rng.chance(0.5) {
                v.extend_from_slice(&(rng.below(30) as u32).to_le_bytes());
            }
            let data = ((len as u64).min(12) + rng.below(3)).saturating_sub(1);
            v.extend((0..data).map(|_| rng.next() as u8));
        }
        wire::seal(&mut v);
        ok += wire::decode(&v).is_ok() as u32;
    }
    assert!(ok > 0 && ok < 20_000);

    // The victim still works: the genuine datagrams deliver everything, in order.
    for d in &samples[..samples.len() - 1] {
        victim.handle_datagram(d, 1).unwrap();
    }
    let mut i = 0;
    assert_eq!(victim.poll_deliver().unwrap(), b"ping");
    while let Some(m) = victim.poll_deliver() {
        assert_eq!(m, message(0, i, if i % 5 == 0 { 5000 } else { 300 }));
        i += 1;
    }
    assert_eq!(i, 40);
}

#[test]
fn selective_ack_retransmits_only_the_lost_datagram() {
    let config = sim_config();
    let mut a = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut b = Peer::new(config.clone(), KEY, 2).unwrap();
    let mut buf = Vec::new();
    for i in 0..10u8 {
        a.send(&[i; 1000], 0).unwrap();
    }
    let mut sent = Vec::new();
    while let Some(len) = a.poll_transmit(0, &mut buf) {
        sent.push(buf[..len].to_vec());
    }
    assert_eq!(sent.len(), 10);
    // The first datagram is lost; the rest arrive, are held, and nothing is delivered.
    for d in &sent[1..] {
        b.handle_datagram(d, 10 * US).unwrap();
    }
    assert!(b.poll_deliver().is_none());
    let t = b.poll_timeout().unwrap();
    assert!(t <= 10 * US + config.ack_delay);
    let len = b.poll_transmit(t, &mut buf).unwrap();
    a.handle_datagram(&buf[..len], t).unwrap();
    assert_eq!(
        a.in_flight(),
        10,
        "a selective ack does not free the window base"
    );
    // Only the lost datagram is retransmitted.
    let rt = a.poll_timeout().unwrap();
    assert_eq!(rt, config.initial_rto);
    let len = a.poll_transmit(rt, &mut buf).unwrap();
    let (again, body) = wire::decode(&buf[..len]).unwrap();
    let (first, first_body) = wire::decode(&sent[0]).unwrap();
    assert_eq!(
        (again.seq, body),
        (first.seq, first_body),
        "same data again"
    );
    assert_eq!(again.dst_incarnation, 2, "header restamped");
    assert!(a.poll_transmit(rt, &mut buf).is_none());
    assert_eq!(a.stats().retransmissions, 1);
    b.handle_datagram(&sent[0], rt).unwrap();
    for i in 0..10u8 {
        assert_eq!(b.poll_deliver().unwrap(), [i; 1000]);
    }
    let t = b.poll_timeout().unwrap();
    let len = b.poll_transmit(t, &mut buf).unwrap();
    a.handle_datagram(&buf[..len], t).unwrap();
    assert!(a.is_idle());
}

#[test]
fn a_timeout_resends_the_oldest_datagram_not_the_whole_flight() {
    // One 90-byte message per datagram.
    let config = Config {
        max_datagram_size: HEADER_LEN + 100,
        ..Config::default()
    };
    let mut a = Peer::new(config, KEY, INC[0]).unwrap();
    let mut buf = Vec::new();
    for i in 0..10u8 {
        a.send(&[i; 90], 0).unwrap();
    }
    let mut sent = 0;
    while a.poll_transmit(0, &mut buf).is_some() {
        sent += 1;
    }
    assert_eq!(sent, 10);
    // The peer says nothing (asleep, or everything lost): at the timeout only the oldest
    // goes again, then one more per timeout, not the flight of ten each time.
    let mut t = 0;
    for round in 1..=3 {
        t = a.poll_timeout().unwrap();
        let mut again = 0;
        while a.poll_transmit(t, &mut buf).is_some() {
            again += 1;
        }
        assert_eq!(again, 1, "round {round}");
        a.check_invariants();
    }
    assert_eq!(a.stats().retransmissions, 3);
    assert!(t > 0);
}
