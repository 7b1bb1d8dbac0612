//! Entry points for the fuzz targets (`fuzz/` at the top of the repository) and their replay
//! in the tests: every decoder of bytes that another process can write. Each takes whatever
//! bytes and must not panic, hang or touch memory it should not; a crash the fuzzer finds is
//! kept under `fuzz/regressions/` and replayed by the tests ever after.
//!
//! Not part of volley's API: hidden from the documentation, and its functions may change with
//! the decoders they drive.

use crate::bootstrap::rendezvous::{Hello, Notice};
use crate::reliable::wire::{self, Header, Kind};
use crate::reliable::{Config, Peer};
use crate::transport::contract::{Body, Class, Inbound, Sink, Transport};
use crate::transport::shm::link::Links;
use crate::transport::shm::wake_fd::WakeFd;
use crate::transport::shm::{Layout, Region};
use crate::transport::Channel;

/// The job key the fuzzed peers belong to.
const KEY: u64 = 0x0f0f_1234_5678_9abc;

/// Splits `data` into pieces, each announced by a length byte.
fn pieces(mut data: &[u8]) -> impl Iterator<Item = &[u8]> {
    std::iter::from_fn(move || {
        let (&n, rest) = data.split_first()?;
        let n = (n as usize).min(rest.len());
        let (piece, rest) = rest.split_at(n);
        data = rest;
        Some(piece)
    })
}

/// Datagrams from a UDP peer, as its reliable state machine takes them. Each piece of `data`
/// is sent either as it is (almost always refused: wrong checksum or job) or, when its first
/// byte is odd, as the body of a datagram with a valid header built from its next bytes, so
/// that records, reassembly, acknowledgements, the window and unsequenced datagrams' replay
/// window are reached too.
pub fn udp_datagrams(data: &[u8]) {
    let config = Config {
        max_message_size: 1 << 16,
        ..Config::default()
    };
    let mut peer = Peer::new(config, KEY, 7).expect("a valid configuration");
    let (mut now, mut buf, mut datagram) = (0u64, Vec::new(), Vec::new());
    for piece in pieces(data) {
        now += 1_000_000;
        match piece.split_first() {
            Some((&b, rest)) if b & 1 == 1 && rest.len() >= 3 => {
                let kind = match (b & 8 != 0, b & 2 != 0) {
                    (true, _) => Kind::Unsequenced,
                    (false, false) => Kind::Data,
                    (false, true) => Kind::Ack,
                };
                let header = Header {
                    kind,
                    job_key: KEY,
                    src_incarnation: 9,
                    dst_incarnation: if b & 4 == 0 { 7 } else { 0 },
                    seq: u64::from(rest[0]),
                    ack: u64::from(rest[1]),
                    sack: u64::from(rest[2]) << (b >> 4),
                };
                let body = if header.kind != Kind::Ack {
                    &rest[3..]
                } else {
                    &[][..]
                };
                wire::encode(&mut datagram, &header, body);
                let _ = peer.handle_datagram(&datagram, now);
            }
            _ => {
                let _ = peer.handle_datagram(piece, now);
            }
        }
        while let Some(msg) = peer.poll_deliver() {
            assert!(
                msg.len() <= 1 << 16,
                "a message over the configured maximum"
            );
            peer.recycle(msg);
        }
        peer.handle_timeout(now);
        while peer.poll_transmit(now, &mut buf).is_some() {}
    }
}

/// A TCP connection's byte stream, cut into frames by its receiver.
pub fn tcp_stream(data: &[u8]) {
    crate::transport::net::tcp::receive::fuzz_stream(data);
}

/// One network message of the Active Message layer (the words after the transport's framing).
pub fn net_message(data: &[u8]) {
    if let Some(f) = crate::transport::net::frame::decode(data) {
        assert!(f.nargs <= crate::MAX_ARGS);
        assert!(f.payload.len() <= data.len());
        // A tail's bytes are the end of its span; a part runs no handler and has no arguments.
        assert!(f.payload.len() as u64 <= f.span);
        assert!(!f.part || (f.nargs == 0 && f.handler == 0));
    }
}

/// What the rendezvous carries: a rank's hello (with the endpoint information inside it) and
/// the launcher's notices.
pub fn rendezvous(data: &[u8]) {
    if let Ok(hello) = serde_json::from_slice::<Hello>(data) {
        let _ = crate::am::reads_as_endpoint_info(&hello.blob);
    }
    let _ = serde_json::from_slice::<Notice>(data);
}

/// Ring slots written by a peer of the node that is broken or hostile: `data` is written over
/// this rank's loopback request ring as raw words, frame headers and all (each 64-byte piece
/// becomes a slot), then the ring is polled. The receiver must drop what is malformed and stop
/// at a frame whose length it cannot trust, never reading outside the ring or a segment.
pub fn ring_slots(data: &[u8]) {
    let layout = Layout {
        ranks: 1,
        ring_slots: 16,
        pool_bufs: 1,
        segment_len: 4096,
    };
    let region = Region::create(layout, 0, KEY).expect("a region");
    let links = Links::new(
        0,
        KEY,
        vec![region],
        &[0],
        vec![None],
        vec![WakeFd::new().expect("an eventfd")],
        None,
    );
    let sink = Accepting::default();
    for chunk in data.chunks(16 * 64) {
        if links.fuzz_fill(Channel::Request, chunk) {
            // A frame whose length cannot be right: the sink ends the poll (the runtime ends
            // the rank); nothing more may be read from this ring.
            if std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                links.poll(Channel::Request, &sink, || false)
            }))
            .is_err()
            {
                return;
            }
        }
    }
}

/// A sink that runs every handler (and reads every payload byte) but the odd-numbered ones.
#[derive(Default)]
struct Accepting {
    bytes: std::cell::Cell<u64>,
}

/// The panic that stands for the runtime ending a rank on a corrupt ring.
struct Corrupt;

impl Sink for Accepting {
    type Batch<'s> = ();

    fn begin_batch(&self, _src_rank: usize) {}

    fn run_short<'s>(
        &'s self,
        _: &mut (),
        _: Channel,
        _: u32,
        handler: u16,
        args: &'s [u64],
    ) -> bool {
        let sum = args.iter().fold(0u64, |a, &w| a.wrapping_add(w));
        self.bytes.set(self.bytes.get().wrapping_add(sum));
        handler % 2 == 0
    }

    fn run_lone_short(
        &self,
        ch: Channel,
        route: u32,
        _: usize,
        handler: u16,
        args: &[u64],
    ) -> bool {
        self.run_short(&mut (), ch, route, handler, args)
    }

    fn run(&self, _: &(), msg: Inbound<'_>) -> Result<(), ()> {
        let sum = match msg.body {
            Body::Medium(p) => p.iter().fold(0u64, |a, &b| a.wrapping_add(u64::from(b))),
            Body::Long { .. } | Body::None => 0,
        };
        self.bytes.set(self.bytes.get().wrapping_add(sum));
        match (msg.class, msg.handler % 2) {
            (Class::System, _) | (_, 1) => Err(()),
            _ => Ok(()),
        }
    }

    fn dropped(&self) {}

    fn corrupt(&self, _: usize, _: Channel, _: u64) -> ! {
        // Unwinds without the panic hook, which a fuzzer turns into a crash report.
        std::panic::resume_unwind(Box::new(Corrupt))
    }
}
