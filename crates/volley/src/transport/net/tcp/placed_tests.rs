//! Large frames whose long payload the receiver reads straight into the segment, through the
//! network route's own placer: what lands, what is delivered, and what is refused.

use std::io::{self, Write};
use std::os::unix::net::UnixStream;

use super::receive::{Read1, Receiver, BIG_FRAME};
use super::State;
use crate::refusal::Refusal;
use crate::reliable::BufferPool;
use crate::transport::contract::{Class, LongGuard};
use crate::transport::net::link::Placement;
use crate::transport::net::{frame, NetStats, Placer};
use crate::transport::Channel;
use std::sync::Arc;

const SEGMENT: usize = 1 << 20;

/// A fresh segment of `SEGMENT` zero bytes (leaked: tests only) and its placer, without a
/// guard.
fn segment() -> (&'static [u8], Placement) {
    guarded(None)
}

/// [`segment`] with `guard`.
fn guarded(guard: Option<Arc<dyn LongGuard>>) -> (&'static [u8], Placement) {
    let seg: &'static mut [u8] = Box::leak(vec![0u8; SEGMENT].into_boxed_slice());
    let upper: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    let placement = Placement {
        segment: seg.as_mut_ptr(),
        len: SEGMENT,
        upper: upper.as_mut_ptr(),
        guard,
    };
    // SAFETY: leaked, so it lives for the test; the test reads it only between parses,
    // while nothing writes it.
    let seg = unsafe { std::slice::from_raw_parts(seg.as_ptr(), SEGMENT) };
    (seg, placement)
}

/// Writes `frame` (prefix added) into a socket pair in pieces of `piece` bytes, reading and
/// parsing after each, and returns what was delivered.
fn receive_in_pieces(placer: &dyn Placer, frame: &[u8], piece: usize) -> Vec<Vec<u8>> {
    let (mut tx, rx) = UnixStream::pair().expect("a socket pair");
    rx.set_nonblocking(true).expect("nonblocking");
    let mut wire = (frame.len() as u32).to_le_bytes().to_vec();
    wire.extend_from_slice(frame);
    let mut receiver = Receiver::new();
    let (mut state, mut inbox) = (State::Open, Vec::new());
    let (mut stats, mut pool) = (NetStats::default(), BufferPool::default());
    for chunk in wire.chunks(piece) {
        tx.write_all(chunk).expect("the pair takes the piece");
        loop {
            match receiver.read_once(&rx) {
                Ok(Read1::Data { .. }) => {}
                Ok(Read1::Eof) => panic!("end of stream"),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => panic!("reading the pair: {e}"),
            }
            receiver
                .parse(
                    1,
                    &mut state,
                    &mut inbox,
                    &mut stats,
                    &mut pool,
                    Some(placer),
                )
                .expect("well-formed frames");
        }
    }
    assert!(receiver.is_empty(), "the whole frame was taken in");
    inbox
        .into_iter()
        .map(|(src, m)| (src == 1).then_some(m).expect("from rank 1"))
        .collect()
}

fn payload(len: usize) -> Vec<u8> {
    (0..len).map(|i| (i * 131 + 7) as u8).collect()
}

#[test]
fn a_large_long_lands_in_place_and_only_its_notice_is_delivered() {
    let bytes = payload(3 * BIG_FRAME + 5);
    let mut msg = Vec::new();
    frame::encode(
        &mut msg,
        Channel::Request,
        Class::Long,
        9,
        &[4, 5],
        &bytes,
        4096,
    );
    for piece in [100, 4099, 1 << 16] {
        let (seg, placer) = segment();
        let got = receive_in_pieces(&placer, &msg, piece);
        assert!(
            seg[4096..4096 + bytes.len()] == bytes[..],
            "piece {piece}: landed"
        );
        assert_eq!(got.len(), 1, "piece {piece}: one notice");
        let f = frame::decode(&got[0]).expect("the notice decodes");
        assert_eq!((f.handler, &f.args[..f.nargs]), (9, &[4, 5][..]));
        assert_eq!(
            (f.offset, f.span, f.payload.len()),
            (4096, bytes.len() as u64, 0)
        );
    }
    // A part lands and delivers nothing.
    let (seg, placer) = segment();
    frame::encode_part(&mut msg, Channel::Reply, &bytes, 8);
    assert!(receive_in_pieces(&placer, &msg, 1000).is_empty());
    assert!(seg[8..8 + bytes.len()] == bytes[..]);
}

#[test]
fn a_long_out_of_bounds_is_not_placed_and_writes_nothing() {
    let (seg, placer) = segment();
    let bytes = payload(2 * BIG_FRAME);
    let mut msg = Vec::new();
    for offset in [SEGMENT - BIG_FRAME, u64::MAX as usize - 8] {
        frame::encode(
            &mut msg,
            Channel::Request,
            Class::Long,
            9,
            &[],
            &bytes,
            offset as u64,
        );
        let got = receive_in_pieces(&placer, &msg, 1000);
        // Delivered whole, for the route to refuse and count as it refuses any bad long.
        assert_eq!(got, vec![msg.clone()], "offset {offset:#x}");
        assert!(
            seg.iter().all(|&b| b == 0),
            "offset {offset:#x}: the segment changed"
        );
    }
    // A medium is delivered whole, never placed.
    frame::encode(&mut msg, Channel::Request, Class::Medium, 1, &[], &bytes, 0);
    assert_eq!(receive_in_pieces(&placer, &msg, 1000), vec![msg.clone()]);
    assert!(seg.iter().all(|&b| b == 0));
}

/// Refuses every long payload from the second KiB of the segment on.
struct Fence;

impl LongGuard for Fence {
    fn admit(&self, _upper: *mut u8, offset: usize, len: usize) -> Result<(), Refusal> {
        if offset + len > 1024 {
            return Err(Refusal::OnSegment);
        }
        Ok(())
    }
}

#[test]
fn a_long_the_guard_refuses_is_not_placed_and_writes_nothing() {
    let (seg, placer) = guarded(Some(Arc::new(Fence)));
    let bytes = payload(2 * BIG_FRAME);
    let mut msg = Vec::new();
    frame::encode(&mut msg, Channel::Request, Class::Long, 9, &[], &bytes, 0);
    assert_eq!(receive_in_pieces(&placer, &msg, 1000), vec![msg.clone()]);
    assert!(seg.iter().all(|&b| b == 0), "the segment changed");
}
