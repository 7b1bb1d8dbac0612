//! Bulk transfers over UDP beside short traffic: later parts of long messages queued while
//! the rank talks with other peers, a quantum per poll, and polls that move short messages
//! leaving their quantum to the next one.

use super::tests::{cluster, lan_without_retransmission};
use super::*;
use crate::transport::net::contract_tests::{assert_message, give_up_after, message, now, Inbox};

/// The one time these tests give every call: the rules depend on how recent traffic is, and
/// a test preempted between two calls must not see it age.
fn t() -> u64 {
    thread_local! {
        /// Each test runs on a thread of its own: a time of its own.
        static T: u64 = now() + 1;
    }
    T.with(|t| *t)
}

/// Data datagrams to `peer` sent and not yet acknowledged.
fn unacked(t: &UdpTransport, peer: usize) -> u64 {
    t.backlog(peer).unacked
}

/// Makes rank 0 of `ts` talk with rank 2: one short message sent.
fn talk(ts: &mut [UdpTransport]) {
    ts[0].send(2, &message(9, 64), t()).unwrap();
}

/// Rank 2 sends rank 0 a short message; returns once it is readable at rank 0.
fn arrive(ts: &mut [UdpTransport], tag: u64) {
    ts[2].send(0, &message(tag, 64), t()).unwrap();
    NetTransport::flush(&mut ts[2], t()).unwrap();
    let check = give_up_after(5);
    let mut pfd = libc::pollfd {
        fd: ts[0].readable_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd for a descriptor rank 0 owns.
    while unsafe { libc::poll(&mut pfd, 1, 10) } == 0 {
        check("the short message");
    }
}

#[test]
fn a_later_part_is_queued_past_the_send_buffer_only_while_the_rank_talks_with_others() {
    let config = lan_without_retransmission();
    let part = vec![5u8; 1 << 20];
    let parts = config.reliable.send_buffer / part.len() + 4;
    // Nobody else to serve: parts leave within the sends, and the send buffer (nothing is
    // acknowledged, rank 1 never polls) refuses one at last.
    let mut quiet = cluster(3, &config);
    quiet[0].send_gather_part(1, &[], &part, t()).unwrap();
    assert!(unacked(&quiet[0], 1) > 0, "the part left within its send");
    let refused = (1..parts).any(|_| {
        matches!(
            quiet[0].send_gather_part(1, &[], &part, t()),
            Err(NetError::WouldBlock)
        )
    });
    assert!(refused, "the send buffer took {parts} MiB");
    // Talking with rank 2: every part is queued, none leaves within its send.
    let mut busy = cluster(3, &config);
    talk(&mut busy);
    for i in 0..parts {
        busy[0]
            .send_gather_part(1, &[], &part, t())
            .unwrap_or_else(|e| panic!("part {i}: {e}"));
    }
    assert_eq!(unacked(&busy[0], 1), 0, "a part left within its send");
    assert!(busy[0].backlog(1).queued_bytes as usize >= parts * part.len());
}

/// LAN datagrams and a window of 256, so that several quanta fit before any ack.
fn wide() -> UdpConfig {
    let mut config = lan_without_retransmission();
    config.reliable.window = 256;
    config
}

/// Rank 0 of a fresh three-rank cluster with a 1 MiB part queued to rank 1 while it talks with
/// rank 2, after the polls that leave the bulk alone (one after each short send) and the one
/// that sends its first quantum; `quantum` is datagrams per quantum.
fn pipelining() -> (Vec<UdpTransport>, Inbox, u64) {
    let mut ts = cluster(3, &wide());
    let mut inbox = Inbox::new();
    talk(&mut ts);
    ts[0]
        .send_gather_part(1, &[], &vec![5u8; 1 << 20], t())
        .unwrap();
    // The polls after a short send send it and leave the bulk for the next.
    for _ in 0..2 {
        ts[0].progress(t(), &mut inbox).unwrap();
        assert_eq!(unacked(&ts[0], 1), 0, "bulk left after a short send");
        talk(&mut ts);
    }
    ts[0].progress(t(), &mut inbox).unwrap();
    let quantum = (BULK_QUANTUM / ts[0].datagram_size()) as u64;
    assert_eq!(
        unacked(&ts[0], 1),
        quantum,
        "one quantum of whole datagrams"
    );
    (ts, inbox, quantum)
}

#[test]
fn a_bulk_transfer_moves_a_quantum_per_poll_while_the_rank_talks_and_flush_out_moves_more() {
    let (mut ts, _inbox, quantum) = pipelining();
    // `flush` sends short messages only; `flush_out` what the window takes.
    NetTransport::flush(&mut ts[0], t()).unwrap();
    assert_eq!(unacked(&ts[0], 1), quantum);
    ts[0].flush_out(t()).unwrap();
    assert!(
        unacked(&ts[0], 1) > 2 * quantum,
        "flush_out sent one quantum only"
    );
}

#[test]
fn a_poll_that_moves_short_messages_defers_the_bulk_quantum_twice_in_a_row_at_most() {
    let (mut ts, mut inbox, quantum) = pipelining();
    // Two polls that deliver send no bulk; the third does, though it delivers too.
    for tag in [2, 3] {
        arrive(&mut ts, tag);
        assert_eq!(ts[0].progress(t(), &mut inbox).unwrap(), 1);
        assert_eq!(
            unacked(&ts[0], 1),
            quantum,
            "poll delivering {tag} sent bulk"
        );
    }
    arrive(&mut ts, 4);
    assert_eq!(ts[0].progress(t(), &mut inbox).unwrap(), 1);
    assert_eq!(unacked(&ts[0], 1), 2 * quantum, "the third poll in a row");
    for (i, tag) in [2, 3, 4].into_iter().enumerate() {
        assert_eq!(inbox[i].0, 2);
        assert_message(&inbox[i].1, tag, 64);
    }
    // A short message sent: the next poll sends it and no bulk; a quiet one sends bulk.
    talk(&mut ts);
    ts[0].progress(t(), &mut inbox).unwrap();
    assert_eq!(
        unacked(&ts[0], 1),
        2 * quantum,
        "the poll after a short send"
    );
    ts[0].progress(t(), &mut inbox).unwrap();
    assert!(
        unacked(&ts[0], 1) > 2 * quantum,
        "the quiet poll sent no bulk"
    );
}
