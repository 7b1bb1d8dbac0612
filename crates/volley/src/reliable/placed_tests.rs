//! Fragmented messages whose long payload goes straight into the segment as the fragments
//! are accepted (the network route's placer), over a network that loses, duplicates and
//! reorders datagrams.

use std::sync::Arc;

use super::tests::{sim_config, Rng, KEY, MS};
use super::*;
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

#[test]
fn long_payloads_land_in_place_under_loss_duplication_and_reordering() {
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
    let mut rx = Peer::new(config, KEY, 2).unwrap();
    rx.set_placer(Some((placer, 0)));
    let payload: Vec<u8> = (0..LONG).map(|i| (i * 37 + 11) as u8).collect();
    let mut script: Vec<_> = (0..ROUNDS).flat_map(|r| round(r, &payload)).collect();
    let expected: Vec<Vec<u8>> = script.iter().filter_map(|(_, d)| d.clone()).collect();
    script.reverse();
    let (mut rng, mut now, mut buf) = (Rng::new(7), 0u64, Vec::new());
    let mut delivered = Vec::new();
    let mut flight: Vec<(bool, Vec<u8>)> = Vec::new();
    while delivered.len() < expected.len() || !tx.is_idle() {
        assert!(now < 100_000 * MS, "stuck: {} delivered", delivered.len());
        while let Some((m, _)) = script.last() {
            match tx.send(m, now) {
                Ok(()) => drop(script.pop()),
                Err(SendError::WouldBlock) => break,
                Err(e) => panic!("send: {e}"),
            }
        }
        for (to_rx, p) in [(true, &mut tx), (false, &mut rx)] {
            while let Some(len) = p.poll_transmit(now, &mut buf) {
                if rng.chance(0.05) {
                    continue;
                }
                flight.push((to_rx, buf[..len].to_vec()));
                if rng.chance(0.05) {
                    flight.push((to_rx, buf[..len].to_vec()));
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
        for (to_rx, d) in flight.drain(..) {
            let p = if to_rx { &mut rx } else { &mut tx };
            p.handle_datagram(&d, now).unwrap();
        }
        tx.handle_timeout(now);
        rx.handle_timeout(now);
        while let Some(m) = rx.poll_deliver() {
            delivered.push(m);
        }
    }
    assert_eq!(rx.state(), State::Active);
    assert!(tx.stats().retransmissions > 0 && rx.stats().duplicates_dropped > 0);
    assert_eq!(delivered.len(), expected.len());
    for (i, (got, want)) in delivered.iter().zip(&expected).enumerate() {
        assert!(got == want, "delivery {i} differs");
    }
    // SAFETY: leaked above; the receiver no longer writes it.
    let seg = unsafe { std::slice::from_raw_parts(seg_ptr, SEGMENT) };
    for r in 0..ROUNDS {
        let at = (r * 48) << 10;
        assert!(seg[at..at + LONG] == payload[..], "round {r}: the long");
        let at = at + (24 << 10);
        assert!(seg[at..at + LONG] == payload[..], "round {r}: the part");
    }
    assert!(
        seg[SEGMENT - 100..].iter().all(|&b| b == 0),
        "the refused long wrote"
    );
}
