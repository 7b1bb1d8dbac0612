//! Messages sent from the caller's bytes ([`Peer::send_lent`]): what is copied when the send
//! ends, and that everything resent afterwards comes from that copy, not from the caller's
//! reused buffer.

use super::tests::{sim_config, KEY, MS};
use super::*;

const HEAD: [u8; 10] = [7; 10];

fn pair() -> (Peer, Peer) {
    (
        Peer::new(sim_config(), KEY, 1).unwrap(),
        Peer::new(sim_config(), KEY, 2).unwrap(),
    )
}

/// A body whose every byte depends on its position and on `tag`.
fn body(len: usize, tag: u8) -> Vec<u8> {
    (0..len).map(|i| (i * 31 + i / 251) as u8 ^ tag).collect()
}

fn joined(head: &[u8], body: &[u8]) -> Vec<u8> {
    [head, body].concat()
}

/// Lends [`HEAD`] followed by `payload` to `a` at time 0.
fn lend<'a>(a: &mut Peer, payload: &'a [u8]) -> Lent<'a> {
    let lent = Lent {
        head: &HEAD,
        body: payload,
    };
    a.send_lent(lent, 0).unwrap();
    lent
}

/// Writes every datagram the lent message can send now, each whole (head and tail joined).
fn transmit_lent(a: &mut Peer, lent: Lent<'_>, now: u64) -> Vec<(Vec<u8>, LentDatagram)> {
    let mut out = Vec::new();
    let mut buf = Vec::new();
    while let Some(d) = a.poll_transmit_lent(now, &mut buf, lent) {
        let mut whole = buf.clone();
        whole.extend_from_slice(lent.slice(d.tail.clone()));
        out.push((whole, d));
    }
    out
}

/// Sends `b`'s owed ack to `a` (after the ack delay).
fn ack(a: &mut Peer, b: &mut Peer, now: u64) {
    let mut buf = Vec::new();
    let later = now + sim_config().ack_delay;
    let len = b.poll_transmit(later, &mut buf).expect("an ack is owed");
    a.handle_datagram(&buf[..len], later).unwrap();
}

/// Runs both sides over a lossless network, advancing time to each timer, until `a` has
/// nothing unacknowledged; returns what `b` delivered.
fn settle(a: &mut Peer, b: &mut Peer, mut now: u64) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let mut buf = Vec::new();
    for _ in 0..10_000 {
        let mut moved = false;
        while let Some(len) = a.poll_transmit(now, &mut buf) {
            b.handle_datagram(&buf[..len], now).unwrap();
            moved = true;
        }
        while let Some(len) = b.poll_transmit(now, &mut buf) {
            a.handle_datagram(&buf[..len], now).unwrap();
            moved = true;
        }
        while let Some(m) = b.poll_deliver() {
            got.push(m);
        }
        a.check_invariants();
        if a.is_idle() && !moved {
            return got;
        }
        if !moved {
            now = [a.poll_timeout(), b.poll_timeout()]
                .into_iter()
                .flatten()
                .min()
                .expect("a timer runs while data is unacknowledged");
            a.handle_timeout(now);
            b.handle_timeout(now);
        }
    }
    panic!("no end: {a:?}");
}

#[test]
fn a_lent_message_acknowledged_before_its_send_ends_is_never_copied() {
    let (mut a, mut b) = pair();
    let payload = body(20_000, 1);
    let lent = lend(&mut a, &payload);
    let sent = transmit_lent(&mut a, lent, 0);
    assert!(sent.len() > 10, "{} datagrams", sent.len());
    for (d, _) in &sent {
        b.handle_datagram(d, 0).unwrap();
    }
    ack(&mut a, &mut b, 0);
    a.retain_lent(lent);
    assert_eq!(a.stats().lent_messages, 1);
    assert_eq!(a.stats().lent_bytes_kept, 0);
    assert!(a.is_idle());
    assert_eq!(b.poll_deliver().unwrap(), joined(&HEAD, &payload));
    a.check_invariants();
}

#[test]
fn only_what_is_unacknowledged_when_a_lent_send_ends_is_copied_and_resent_from_the_copy() {
    let (mut a, mut b) = pair();
    let mut payload = body(20_000, 2);
    let original = joined(&HEAD, &payload);
    let lent = lend(&mut a, &payload);
    let sent = transmit_lent(&mut a, lent, 0);
    assert!(sent.len() > 8);
    // Datagram 2 is lost and 6.. are still on the way: the ack covers 0 and 1, and 3..=5
    // selectively.
    for (d, _) in [&sent[0], &sent[1], &sent[3], &sent[4], &sent[5]] {
        b.handle_datagram(d, 0).unwrap();
    }
    ack(&mut a, &mut b, 0);
    a.retain_lent(lent);
    // Kept from datagram 2's first byte, the first one unacknowledged, to the end.
    let from = sent[2].1.tail.start;
    assert_eq!(a.stats().lent_bytes_kept, (original.len() - from) as u64);
    // The caller reuses its buffer at once; everything after this comes from the copy.
    payload.fill(0xee);
    let got = settle(&mut a, &mut b, 0);
    assert_eq!(got, [original]);
    assert!(a.stats().retransmissions > 0);
}

#[test]
fn a_lent_message_larger_than_the_window_keeps_its_unsent_rest() {
    let (mut a, mut b) = pair();
    let window = sim_config().window;
    let mut payload = body(60_000, 3);
    let original = joined(&HEAD, &payload);
    let lent = lend(&mut a, &payload);
    let sent = transmit_lent(&mut a, lent, 0);
    assert_eq!(sent.len(), window, "a full window, then nothing");
    assert_eq!(a.in_flight(), window);
    a.retain_lent(lent);
    // Nothing was acknowledged: the whole message is kept, the sent part for resending and
    // the rest for sending.
    assert_eq!(a.stats().lent_bytes_kept, original.len() as u64);
    payload.fill(0);
    for (d, _) in &sent {
        b.handle_datagram(d, 0).unwrap();
    }
    let got = settle(&mut a, &mut b, 0);
    assert_eq!(got, [original]);
}

#[test]
fn a_lent_head_longer_than_a_datagram_goes_whole_and_joined_to_its_body() {
    let (mut a, mut b) = pair();
    let mut head = body(3000, 8);
    let mut payload = body(10_000, 9);
    let original = joined(&head, &payload);
    let lent = Lent {
        head: &head,
        body: &payload,
    };
    a.send_lent(lent, 0).unwrap();
    let sent = transmit_lent(&mut a, lent, 0);
    // One datagram holds the head's end and the body's start: its tail is the body's part.
    assert!(sent.iter().any(|(_, d)| d.tail.start == head.len()));
    for (d, _) in &sent[..2] {
        b.handle_datagram(d, 0).unwrap();
    }
    ack(&mut a, &mut b, 0);
    a.retain_lent(lent);
    head.fill(0);
    payload.fill(0);
    assert_eq!(settle(&mut a, &mut b, 0), [original]);
}

#[test]
fn a_lent_message_behind_a_queued_one_is_kept_whole_and_delivered_after_it() {
    let (mut a, mut b) = pair();
    let first = body(5000, 4);
    a.send(&first, 0).unwrap();
    let mut payload = body(9000, 5);
    let original = joined(&HEAD, &payload);
    let lent = lend(&mut a, &payload);
    assert!(
        transmit_lent(&mut a, lent, 0).is_empty(),
        "the lent message went before the one queued ahead of it"
    );
    a.retain_lent(lent);
    assert_eq!(a.stats().lent_bytes_kept, original.len() as u64);
    payload.fill(1);
    let got = settle(&mut a, &mut b, 0);
    assert_eq!(got, [first, original]);
}

#[test]
fn a_lent_message_that_fits_a_datagram_is_copied_at_once() {
    let (mut a, mut b) = pair();
    let mut payload = body(500, 6);
    let original = joined(&HEAD, &payload);
    let lent = lend(&mut a, &payload);
    assert!(transmit_lent(&mut a, lent, 0).is_empty());
    a.retain_lent(lent);
    assert_eq!(a.stats().lent_messages, 0);
    payload.fill(2);
    assert_eq!(settle(&mut a, &mut b, 0), [original]);
}

#[test]
fn a_lent_message_is_refused_like_a_copied_one() {
    let (mut a, _) = pair();
    let config = sim_config();
    let too_large = vec![0u8; config.max_message_size + 1];
    let lent = Lent {
        head: &[],
        body: &too_large,
    };
    assert!(matches!(
        a.send_lent(lent, 0),
        Err(SendError::TooLarge { .. })
    ));
    // A send buffer's worth in flight and queued: the next is refused, nothing changes.
    let big = vec![3u8; 60_000];
    a.send(&big, 0).unwrap();
    a.send(&big, 0).unwrap();
    let lent = Lent {
        head: &HEAD,
        body: &big,
    };
    assert_eq!(a.send_lent(lent, 0), Err(SendError::WouldBlock));
    assert_eq!(a.stats().lent_messages, 0);
    assert_eq!(a.queued(), 2);
    a.check_invariants();
    // A failed pair refuses it too.
    let mut c = Peer::new(sim_config(), KEY, 3).unwrap();
    c.send(b"x", 0).unwrap();
    let mut buf = Vec::new();
    c.poll_transmit(0, &mut buf).unwrap();
    c.handle_timeout(20_000 * MS);
    assert!(matches!(
        c.send_lent(lent, 20_000 * MS),
        Err(SendError::Failed(_))
    ));
}
