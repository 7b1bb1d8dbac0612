//! Fragmented messages whose long payload goes straight into the segment as the fragments
//! are accepted (the network route's placer), over a network that loses, duplicates and
//! reorders datagrams.

use std::sync::Arc;

use super::tests::{sim_config, Rng, KEY, MS};
use super::*;
use crate::reliable::wire;
use crate::transport::contract::Class;
use crate::transport::net::frame;
use crate::transport::net::link::Placement;
use crate::transport::Channel;

const SEGMENT: usize = 1 << 20;
const LONG: usize = 20 << 10;
const ROUNDS: usize = 8;

/// What the receiver should see of round `r`'s messages, in order: `None` for a part (no
/// delivery), else the delivered bytes.
fn round(r: usize, payload: &[u8]) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let at = (r * 48) << 10;
    let mut out = Vec::new();
    let mut m = Vec::new();
    // A whole long, placed: its notice is a tail without bytes.
    frame::encode(
        &mut m,
        Channel::Request,
        Class::Long,
        1,
        &[r as u64],
        payload,
        at as u64,
    );
    let mut notice = Vec::new();
    frame::encode_tail(
        &mut notice,
        Channel::Request,
        1,
        &[r as u64],
        &[],
        at as u64,
        LONG as u64,
    );
    out.push((m.clone(), Some(notice)));
    // A part, placed: nothing delivered.
    frame::encode_part(&mut m, Channel::Request, payload, (at + (24 << 10)) as u64);
    out.push((m.clone(), None));
    // A medium, and a long out of the segment's bounds: reassembled and delivered whole.
    frame::encode(
        &mut m,
        Channel::Request,
        Class::Medium,
        2,
        &[],
        &payload[..3000],
        0,
    );
    out.push((m.clone(), Some(m.clone())));
    frame::encode(
        &mut m,
        Channel::Request,
        Class::Long,
        3,
        &[],
        payload,
        (SEGMENT - 100) as u64,
    );
    out.push((m.clone(), Some(m.clone())));
    out
}

/// How datagrams reach the receivers in a run; every datagram is also lost, duplicated and
/// reordered at random.
#[derive(Debug, Clone, Copy, Default)]
struct Wire {
    /// Read as the UDP socket reads them while a message is placed: the data after a
    /// datagram's head goes to the receiver's landing ([`Peer::landing`]), the rest to a
    /// buffer, and [`Peer::handle_scattered`] takes it.
    scattered: bool,
    /// Probability that a datagram to a receiver has one byte changed.
    corrupt: f64,
    /// Probability that a short copy of a datagram to a receiver arrives as well.
    short: f64,
}

/// Messages of the second sender, whose datagrams reach the same socket.
const NEIGHBOUR_MESSAGES: usize = 12;

/// What a run left: the segment, and the placing receiver's counters.
struct Ran {
    segment: &'static [u8],
    rx: Stats,
}

/// Hands the datagram `d` to `to` as the socket delivers it: whole, or, with a landing,
/// scattered as `recvmsg` scatters it (the bytes after [`wire::FRAGMENT_HEAD_LEN`] into the
/// landing up to its capacity, every other byte into `ring` at its own offset).
fn receive(to: &mut Peer, landing: Option<Landing>, d: &[u8], ring: &mut [u8], now: u64) {
    let Some(l) = landing else {
        let _ = to.handle_datagram(d, now);
        return;
    };
    let head = d.len().min(wire::FRAGMENT_HEAD_LEN);
    ring[..head].copy_from_slice(&d[..head]);
    let landed = (d.len() - head).min(l.cap());
    // SAFETY: the landing is `cap` bytes of the leaked segment (the kernel's write).
    unsafe { std::ptr::copy_nonoverlapping(d[head..].as_ptr(), l.dst(), landed) };
    let rest = &d[head + landed..];
    ring[wire::FRAGMENT_HEAD_LEN + l.cap()..][..rest.len()].copy_from_slice(rest);
    let _ = to.handle_scattered(ring, d.len(), l, now);
}

/// Streams [`ROUNDS`] rounds of placed and unplaced messages from one sender to a receiver
/// that places longs into a segment, beside a second pair whose receiver shares the socket
/// (its longs are reassembled, not placed), over a wire that loses, duplicates and reorders
/// datagrams and does what `wire` says; checks every message arrives intact and in order.
fn stream(wire: Wire, seed: u64) -> Ran {
    let segment: &'static mut [u8] = Box::leak(vec![0u8; SEGMENT].into_boxed_slice());
    let upper: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    let seg_ptr = segment.as_mut_ptr();
    let placer = Arc::new(Placement {
        segment: seg_ptr,
        len: SEGMENT,
        upper: upper.as_mut_ptr(),
        guard: None,
    });
    let config = Config {
        max_message_size: 64 << 10,
        ..sim_config()
    };
    let mut tx = Peer::new(config.clone(), KEY, 1).unwrap();
    let mut rx = Peer::new(config.clone(), KEY, 2).unwrap();
    let mut tx2 = Peer::new(config.clone(), KEY, 3).unwrap();
    let mut rx2 = Peer::new(config, KEY, 4).unwrap();
    rx.set_placer(Some((placer, 0)));
    let payload: Vec<u8> = (0..LONG).map(|i| (i * 37 + 11) as u8).collect();
    let mut script: Vec<_> = (0..ROUNDS).flat_map(|r| round(r, &payload)).collect();
    let expected: Vec<Vec<u8>> = script.iter().filter_map(|(_, d)| d.clone()).collect();
    script.reverse();
    let mut script2: Vec<Vec<u8>> = (0..NEIGHBOUR_MESSAGES)
        .map(|k| (0..5000 + k).map(|i| (i * 13 + k) as u8).collect())
        .collect();
    let expected2 = script2.clone();
    script2.reverse();
    let (mut rng, mut now, mut buf) = (Rng::new(seed), 0u64, Vec::new());
    let mut ring = vec![0u8; 1 << 16];
    let (mut delivered, mut delivered2) = (Vec::new(), Vec::new());
    // Datagrams in flight: to which peer (0 tx, 1 rx, 2 tx2, 3 rx2), and the bytes.
    let mut flight: Vec<(usize, Vec<u8>)> = Vec::new();
    while delivered.len() < expected.len()
        || delivered2.len() < expected2.len()
        || !tx.is_idle()
        || !tx2.is_idle()
    {
        assert!(now < 100_000 * MS, "stuck: {} delivered", delivered.len());
        while let Some((m, _)) = script.last() {
            match tx.send(m, now) {
                Ok(()) => drop(script.pop()),
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        while let Some(m) = script2.last() {
            match tx2.send(m, now) {
                Ok(()) => drop(script2.pop()),
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        for (to, p) in [(1, &mut tx), (0, &mut rx), (3, &mut tx2), (2, &mut rx2)] {
            while let Some(len) = p.poll_transmit(now, &mut buf) {
                if rng.chance(0.05) {
                    continue;
                }
                flight.push((to, buf[..len].to_vec()));
                if rng.chance(0.05) {
                    flight.push((to, buf[..len].to_vec()));
                }
                if to % 2 == 1 && rng.chance(wire.short) {
                    let cut = rng.below(len as u64) as usize;
                    flight.push((to, buf[..cut].to_vec()));
                }
            }
        }
        // Reordered: a few swaps among what is in flight.
        for _ in 0..flight.len() / 4 {
            let (i, j) = (
                rng.below(flight.len() as u64),
                rng.below(flight.len() as u64),
            );
            flight.swap(i as usize, j as usize);
        }
        now += MS / 4;
        for (to, mut d) in flight.drain(..) {
            if to % 2 == 1 && !d.is_empty() && rng.chance(wire.corrupt) {
                let i = rng.below(d.len() as u64) as usize;
                d[i] ^= 1 << rng.below(8);
            }
            // One socket receives for both receivers: the landing is the placing one's.
            let landing = rx.landing().filter(|_| wire.scattered);
            match to {
                0 => tx.handle_datagram(&d, now).unwrap(),
                1 => receive(&mut rx, landing, &d, &mut ring, now),
                2 => tx2.handle_datagram(&d, now).unwrap(),
                _ => receive(&mut rx2, landing, &d, &mut ring, now),
            }
        }
        for p in [&mut tx, &mut rx, &mut tx2, &mut rx2] {
            p.handle_timeout(now);
        }
        while let Some(m) = rx.poll_deliver() {
            delivered.push(m);
        }
        while let Some(m) = rx2.poll_deliver() {
            delivered2.push(m);
        }
    }
    assert_eq!(rx.state(), State::Active);
    assert_eq!(rx2.state(), State::Active);
    assert!(tx.stats().retransmissions > 0 && rx.stats().duplicates_dropped > 0);
    assert_eq!(delivered.len(), expected.len());
    for (i, (got, want)) in delivered.iter().zip(&expected).enumerate() {
        assert!(got == want, "delivery {i} differs");
    }
    assert!(delivered2 == expected2, "the second pair's messages differ");
    // SAFETY: leaked above; the receiver no longer writes it.
    let seg = unsafe { std::slice::from_raw_parts(seg_ptr, SEGMENT) };
    let mut placed = vec![false; SEGMENT];
    for r in 0..ROUNDS {
        let at = (r * 48) << 10;
        assert!(seg[at..at + LONG] == payload[..], "round {r}: the long");
        placed[at..at + LONG].fill(true);
        let at = at + (24 << 10);
        assert!(seg[at..at + LONG] == payload[..], "round {r}: the part");
        placed[at..at + LONG].fill(true);
    }
    // Nothing was written outside the placed messages' ranges, the refused long's included.
    let stray = (0..SEGMENT).find(|&i| !placed[i] && seg[i] != 0);
    assert_eq!(
        stray, None,
        "a byte outside every placed message was written"
    );
    Ran {
        segment: seg,
        rx: rx.stats().clone(),
    }
}

#[test]
fn long_payloads_land_in_place_under_loss_duplication_and_reordering() {
    let ran = stream(Wire::default(), 7);
    assert_eq!(ran.rx.fragments_landed, 0);
    assert!(
        ran.segment[SEGMENT - 100..].iter().all(|&b| b == 0),
        "the refused long wrote"
    );
}

/// The socket read puts the next in-order fragment of a placed message straight into
/// place; whatever else it reads while one is placed (another peer's datagram, a duplicate,
/// a fragment out of order or of another message, a short or corrupt datagram) writes only
/// inside that message's range not yet received, and is copied back and handled as usual.
#[test]
fn fragments_read_into_place_under_loss_duplication_reordering_corruption_and_short_reads() {
    let wire = Wire {
        scattered: true,
        corrupt: 0.05,
        short: 0.03,
    };
    for seed in 1..=4 {
        let ran = stream(wire, seed);
        assert!(ran.rx.fragments_landed > 0, "seed {seed}: nothing landed");
        assert!(
            ran.rx.malformed_dropped > 0,
            "seed {seed}: no corrupt datagram"
        );
    }
    // Without faults beyond loss, duplication and reordering, most fragments land.
    let ran = stream(
        Wire {
            scattered: true,
            ..Wire::default()
        },
        9,
    );
    assert!(ran.rx.fragments_landed > 0);
}
