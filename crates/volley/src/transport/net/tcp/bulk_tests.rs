//! Bulk transfers over TCP: a quantum per poll, short messages ahead of them, later parts of a
//! long message queued rather than written from the caller's bytes, and reused chunks.

use std::io::Read;
use std::net::TcpStream;
use std::os::fd::AsRawFd;
use std::thread;

use super::tests::{config, mesh, with_raw_peer_config};
use super::*;
use crate::transport::net::contract_tests::{
    assert_message, give_up_after, inboxes, message, now, Inbox,
};

/// The index of a connection to another peer, for a transport whose only connection is 0.
const OTHER_CONN: usize = 1;

/// A byte pattern that shows a misplaced or repeated chunk.
fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 7 + i / 4093) as u8).collect()
}

/// Reads one frame of `len` bytes (after its prefix) from `raw` on a thread of its own; the
/// socket comes back with the bytes, open (the transport must not see the peer leave).
fn read_frame(mut raw: TcpStream, len: usize) -> thread::JoinHandle<(Vec<u8>, TcpStream)> {
    thread::spawn(move || {
        let mut prefix = [0u8; PREFIX];
        raw.read_exact(&mut prefix).unwrap();
        assert_eq!(
            u32::from_le_bytes(prefix) as usize,
            len,
            "the frame's length"
        );
        let mut body = vec![0u8; len];
        raw.read_exact(&mut body).unwrap();
        (body, raw)
    })
}

/// Progresses `t` until nothing is queued.
fn drain(t: &mut TcpTransport) {
    let mut inbox: Inbox = Vec::new();
    let check = give_up_after(10);
    while !t.is_idle() {
        t.progress(now(), &mut inbox).unwrap();
        check("the queue to drain");
    }
}

#[test]
fn a_bulk_queue_moves_a_quantum_per_poll_and_flush_out_moves_more() {
    // Small enough that all of it fits even the smallest socket buffers Linux grants
    // (2 x 208 KiB per end) before anyone reads.
    let cfg = TcpConfig {
        write_quantum: 16 << 10,
        direct_write: 64 << 10,
        ..config()
    };
    let (mut t, raw) = with_raw_peer_config(&cfg);
    let body = pattern(8 << 20);
    // With traffic on another connection just now (a short message sent to another peer), a
    // later part is queued, not written from the caller's bytes, and the send's own flush
    // writes one quantum at most.
    let t0 = now();
    t.traffic.note(OTHER_CONN, t0);
    t.send_gather_part(1, b"head", &body, t0).unwrap();
    let sent = |t: &TcpTransport| t.stats().bytes_sent as usize;
    assert!(sent(&t) <= cfg.write_quantum, "the send wrote {}", sent(&t));
    // A poll then writes one more quantum at most; nothing reads yet.
    let poll = |t: &mut TcpTransport, at: u64| {
        let before = sent(t);
        t.progress(at, &mut Vec::new()).unwrap();
        sent(t) - before
    };
    let busy = poll(&mut t, t0 + 1);
    assert!(
        busy > 0 && busy <= cfg.write_quantum,
        "a poll in busy times wrote {busy} bytes"
    );
    // In quiet times a poll writes more, up to a direct write's worth.
    let quiet = poll(&mut t, t0 + QUIET_NS);
    assert!(
        quiet > cfg.write_quantum && quiet <= cfg.direct_write,
        "a poll in quiet times wrote {quiet} bytes"
    );
    // `flush` writes short queues only; `flush_out` as much as the kernel takes.
    let before = sent(&t);
    t.flush(t0).unwrap();
    assert_eq!(sent(&t), before, "flush leaves the bulk queue to the polls");
    t.flush_out(t0).unwrap();
    assert!(
        sent(&t) - before > cfg.direct_write,
        "flush_out wrote only {} bytes",
        sent(&t) - before
    );
    let reader = read_frame(raw, 4 + body.len());
    drain(&mut t);
    let (got, _raw) = reader.join().unwrap();
    assert_eq!(&got[..4], b"head");
    assert!(got[4..] == body[..], "the bytes arrive whole and in order");
}

#[test]
fn a_first_frame_is_written_from_the_callers_bytes_up_to_the_direct_limit() {
    let cfg = TcpConfig {
        direct_write: 100_000,
        ..config()
    };
    let (mut t, raw) = with_raw_peer_config(&cfg);
    let mut body = pattern(1 << 20);
    // Traffic with another peer just now: the send's own flush of the rest writes one quantum
    // at most.
    let t0 = now();
    t.traffic.note(OTHER_CONN, t0);
    t.send_gather(1, b"h", &body, t0).unwrap();
    let sent = t.stats().bytes_sent as usize;
    assert!(
        sent > 0 && sent <= cfg.direct_write + cfg.write_quantum,
        "wrote {sent} bytes"
    );
    assert!(t.conns[0].tx.queued() > 0, "the rest is queued");
    // The rest was copied: the caller may reuse its buffer at once.
    let expected = body.clone();
    body.fill(0);
    let reader = read_frame(raw, 1 + expected.len());
    drain(&mut t);
    let (got, _raw) = reader.join().unwrap();
    assert!(got[1..] == expected[..], "the queued rest is a copy");
}

#[test]
fn a_short_message_leaves_ahead_of_a_bulk_transfer() {
    let mut ts = mesh(3);
    let mut ins = inboxes(3);
    let bulk = message(1, 4 << 20);
    ts[0].send_gather_part(1, &bulk, &[], now()).unwrap();
    let bulk_queued = ts[0].conns[ts[0].slot[1]].tx.queued();
    ts[0].send(2, &message(2, 100), now()).unwrap();
    ts[0].flush(now()).unwrap();
    let check = give_up_after(5);
    while ins[2].is_empty() {
        ts[2].progress(now(), &mut ins[2]).unwrap();
        check("the short message");
    }
    assert_message(&ins[2][0].1, 2, 100);
    assert_eq!(
        ts[0].conns[ts[0].slot[1]].tx.queued(),
        bulk_queued,
        "the short message's send and flush wrote none of the bulk transfer"
    );
    // And it arrives whole once rank 0 polls.
    while ins[1].is_empty() {
        ts[0].progress(now(), &mut ins[0]).unwrap();
        ts[1].progress(now(), &mut ins[1]).unwrap();
        check("the bulk transfer");
    }
    assert_message(&ins[1][0].1, 1, 4 << 20);
}

#[test]
fn chunks_are_reused_from_one_transfer_to_the_next() {
    const LEN: usize = 2 << 20;
    let (mut t, mut raw) = with_raw_peer_config(&config());
    let body = pattern(LEN);
    let reader = thread::spawn(move || {
        let mut sink = vec![0u8; 1 << 20];
        let mut left = 2 * (PREFIX + LEN);
        while left > 0 {
            left -= raw.read(&mut sink[..left.min(1 << 20)]).unwrap();
        }
        raw
    });
    // Traffic with another peer: the parts are queued, in chunks.
    t.traffic.note(OTHER_CONN, now());
    t.send_gather_part(1, &[], &body, now()).unwrap();
    drain(&mut t);
    let kept = t.chunks.len();
    assert!(kept > LEN / send_queue::CHUNK, "kept {kept} chunks");
    // Noted again: draining may take longer than the pipelining window on a slow host.
    t.traffic.note(OTHER_CONN, now());
    t.send_gather_part(1, &[], &body, now()).unwrap();
    assert!(
        t.chunks.len() < kept,
        "the second transfer takes the kept chunks"
    );
    t.traffic.note(OTHER_CONN, now());
    drain(&mut t);
    assert_eq!(t.chunks.len(), kept, "and gives them back, no more");
    let _raw = reader.join().unwrap();
}

#[test]
fn a_poll_that_moves_short_messages_defers_the_bulk_quantum_twice_in_a_row_at_most() {
    let mut ts = mesh(3);
    let mut ins = inboxes(3);
    ts[0]
        .send_gather_part(1, &message(1, 4 << 20), &[], now())
        .unwrap();
    let sent = |t: &TcpTransport| t.stats().bytes_sent;
    let arrive = |ts: &mut Vec<TcpTransport>, tag: u64| {
        ts[2].send(0, &message(tag, 64), now()).unwrap();
        ts[2].flush(now()).unwrap();
        let check = give_up_after(5);
        // Wait until the message is readable at rank 0 without polling rank 0.
        let fd = ts[0].conns[ts[0].slot[2]].stream.as_raw_fd();
        let mut pfd = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd for a descriptor rank 0 owns.
        while unsafe { libc::poll(&mut pfd, 1, 10) } == 0 {
            check("the small message");
        }
    };
    // Two polls that deliver write no bulk; the third does, though it delivers too.
    for tag in [2, 3] {
        arrive(&mut ts, tag);
        let before = sent(&ts[0]);
        assert_eq!(ts[0].progress(now(), &mut ins[0]).unwrap(), 1);
        assert_eq!(sent(&ts[0]), before, "poll delivering {tag} wrote bulk");
    }
    arrive(&mut ts, 4);
    let before = sent(&ts[0]);
    assert_eq!(ts[0].progress(now(), &mut ins[0]).unwrap(), 1);
    assert!(
        sent(&ts[0]) > before,
        "the third poll in a row wrote no bulk"
    );
    for (i, tag) in [2, 3, 4].into_iter().enumerate() {
        assert_message(&ins[0][i].1, tag, 64);
    }
    // A short message sent: the next poll writes it and no bulk; the one after, bulk again.
    ts[0].send(2, &message(5, 64), now()).unwrap();
    let before = sent(&ts[0]);
    ts[0].progress(now(), &mut ins[0]).unwrap();
    assert_eq!(
        sent(&ts[0]) - before,
        (PREFIX + 64) as u64,
        "the poll after a short send wrote only the short message"
    );
    let before = sent(&ts[0]);
    ts[0].progress(now(), &mut ins[0]).unwrap();
    assert!(sent(&ts[0]) > before, "the next quiet poll wrote no bulk");
}

#[test]
fn a_later_part_is_copied_only_while_the_rank_talks_with_other_peers() {
    let cfg = config();
    let (mut t, raw) = with_raw_peer_config(&cfg);
    let body = pattern(1 << 20);
    let reader = read_frame(raw, body.len());
    // Nobody else to serve: the part leaves from the caller's bytes, past one quantum.
    let t0 = now();
    t.send_gather_part(1, &[], &body, t0).unwrap();
    let direct = t.stats().bytes_sent as usize;
    assert!(direct > cfg.write_quantum, "wrote only {direct} bytes");
    drain(&mut t);
    let (got, raw) = reader.join().unwrap();
    assert!(got == body);
    // A short message to another peer just now: the part is queued, one quantum written.
    let reader = read_frame(raw, body.len());
    t.traffic.note(OTHER_CONN, t0);
    let before = t.stats().bytes_sent as usize;
    t.send_gather_part(1, &[], &body, t0 + PIPELINE_NS - 1)
        .unwrap();
    let queued = t.stats().bytes_sent as usize - before;
    assert!(queued <= cfg.write_quantum, "wrote {queued} bytes");
    drain(&mut t);
    let (got, _raw) = reader.join().unwrap();
    assert!(got == body);
    // Once that traffic is older than the window, straight from the caller's bytes again.
    let before = t.stats().bytes_sent as usize;
    t.send_gather_part(1, &[], &body, t0 + PIPELINE_NS).unwrap();
    assert!(t.stats().bytes_sent as usize - before > cfg.write_quantum);
}

#[test]
fn a_rank_with_output_queued_has_a_deadline_to_write_more() {
    // A rank that sleeps until traffic arrives must still wake to write a queued transfer.
    let (mut t, _raw) = with_raw_peer_config(&config());
    assert_eq!(t.next_deadline(), None, "nothing queued, no deadline");
    let t0 = now();
    t.traffic.note(OTHER_CONN, t0);
    t.send_gather_part(1, &[], &pattern(4 << 20), t0).unwrap();
    assert_eq!(t.next_deadline(), Some(t0 + RETRY_WRITE_NS));
}
