//! Seed 000's communication segments and `xfer` (CMAM §4.3.2.5, requirements 19-24 of its
//! note): a rank opens a segment on memory it owns, expecting a number of bytes; other ranks
//! `xfer` data into it by (segment, offset) in packets that may arrive in any order; each
//! packet's bytes land at base + offset and count down the segment's remaining bytes, and when
//! the count reaches zero the segment's end function runs, once, and either re-arms the
//! segment with a new count or closes it.
//!
//! ```no_run
//! use volley::xfer::Xfer;
//! let mut b = volley::Runtime::builder();
//! let xs = Xfer::register(&mut b);
//! let rt = b.build().unwrap();
//! let xfer = xs.attach(&rt);
//! // Every rank opens one segment of 4 KiB; the first open takes id 255 everywhere.
//! let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
//! let d = done.clone();
//! let seg = xfer
//!     .open_segment(vec![0; 4096].into(), 4096, move |_memory| {
//!         d.store(true, std::sync::atomic::Ordering::Release);
//!         0 // close
//!     })
//!     .unwrap();
//! rt.barrier();
//! let right = (rt.rank() + 1) % rt.size();
//! xfer.xfer(right, seg, 0, &[7u8; 4096]).unwrap();
//! rt.wait_until(|| done.load(std::sync::atomic::Ordering::Acquire));
//! xfer.check().unwrap(); // no packet of ours was refused
//! ```
//!
//! **Written on the public Active Message API** ([`Runtime`], [`ReplyToken`]): a 16-byte
//! `xfer_4i` is a short request (segment address and two data words), a block `xfer` a medium
//! request per fragment (the segment address, the bytes as payload), the reply versions the
//! same messages on the reply channel. So they follow the runtime's polling rules: a request
//! xfer that must wait for room polls requests and replies, a reply xfer replies only.
//!
//! **Segment ids** (requirement 19): a fixed table of [`SEGMENTS`] = 256 segments per rank, and
//! an open takes the **highest free** number, as the seed did. The seed's id also encoded the
//! base's alignment so that `id + offset` was the segment address with a 24-bit offset; the
//! modern encoding here is one 64-bit word, [`SegmentId::addr`]: the segment number in bits
//! 56..64, a 16-bit generation in bits 40..56 (bumped at every open of that number, so an id
//! kept past its segment's close is refused rather than landing in the next segment that
//! reuses the number) and the byte offset in bits 0..40 (1 TiB).
//!
//! **End functions** (requirements 20-21) run on the rank that owns the segment, in the
//! handler of the packet that made the count reach zero, or in `shorten_segment` when that
//! did; they get the segment's memory (and may keep it with `std::mem::take`) and return the
//! next count (re-arm) or 0 (close: the memory is freed and the number is free again).
//!
//! **Bad input changes nothing.** A packet to a segment that is not open (never opened,
//! closed, or an old generation), one that does not fit the segment's memory, and one with
//! more bytes than the segment still expects are refused whole by the owner: nothing is
//! written, the owner counts it ([`XferStats::refused`]) and, for request xfers, notices the
//! sender, whose [`Xfer::check`] then returns [`Error::Refused`] naming the rank and the
//! [`XferRefusal`]. Local calls (`shorten_segment` below zero, an unknown id, a 41-bit offset)
//! fail at once with the same error.
//!
//! **The fast path** (requirement 24): the owner keeps a copy of the last segment's
//! descriptor (see `table.rs`), so back-to-back packets to one segment skip the table, and the
//! transports hand a poll every frame that has arrived from one sender back to back (up to 32
//! per ring per poll on shared memory), so a stream of xfer packets is drained in one go.
//! `volley experiments seed000-xfer` measures one segment against two alternating ones.
//!
//! **Order independence** (requirement 23): [`Xfer::reorder_fragments`] makes a block xfer
//! send its fragments in a seeded random order (a test setting: messages between two ranks
//! otherwise arrive in the order sent); the tests check that the memory ends right and the
//! end function runs once.

mod error;
mod table;

pub use table::{EndFn, SEGMENTS};

use crate::am::{Message, ReplyHandler, ReplyToken, RequestHandler, Runtime, RuntimeBuilder};
pub use error::{Error, Result, XferRefusal};
use std::cell::Cell;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use table::Table;

/// Bits of the byte offset in a segment address.
pub const OFFSET_BITS: u32 = 40;

/// A segment of some rank: its number in the table (0..256) and the generation of that
/// number it was opened under. Pass it to the ranks that send into the segment (it is the
/// same on every rank that opened the same segments in the same order; otherwise send
/// [`SegmentId::to_bits`] in a message).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentId(u32);

impl SegmentId {
    /// The id of segment `number` opened under `generation`. Ids are predictable: a rank's
    /// first open takes number 255 under generation 1, the next 254, and so on, and each
    /// reopening of a number takes its next generation.
    pub fn new(number: u8, generation: u16) -> Self {
        SegmentId((number as u32) << 16 | generation as u32)
    }

    /// The segment's number in its owner's table, 0..256.
    pub fn number(self) -> u8 {
        (self.0 >> 16) as u8
    }

    /// The generation of that number this segment was opened under.
    pub fn generation(self) -> u16 {
        self.0 as u16
    }

    /// The id as 24 bits, to carry in a message.
    pub fn to_bits(self) -> u32 {
        self.0
    }

    /// An id from [`SegmentId::to_bits`] (higher bits ignored).
    pub fn from_bits(bits: u32) -> Self {
        SegmentId(bits & 0xff_ffff)
    }

    /// The segment address of byte `offset`: the one word a packet carries (see the module's
    /// documentation). An offset beyond 40 bits is refused.
    pub fn addr(self, offset: u64) -> std::result::Result<u64, XferRefusal> {
        if offset >> OFFSET_BITS != 0 {
            return Err(XferRefusal::OffsetTooLarge { offset });
        }
        Ok((self.0 as u64) << OFFSET_BITS | offset)
    }

    /// [`SegmentId::addr`] of a segment of `rank`, for bytes up to `end`: the error names
    /// the rank.
    fn addr_at(self, rank: usize, offset: u64, end: u64) -> Result<u64> {
        let refused = |refusal| Error::Refused { rank, refusal };
        self.addr(end).map_err(refused)?;
        self.addr(offset).map_err(refused)
    }

    /// The segment and offset a segment address names.
    pub fn from_addr(addr: u64) -> (SegmentId, u64) {
        (
            SegmentId((addr >> OFFSET_BITS) as u32 & 0xff_ffff),
            addr & ((1 << OFFSET_BITS) - 1),
        )
    }
}

/// Counters of one rank's xfer layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct XferStats {
    /// Packets that landed in this rank's segments.
    pub packets: u64,
    /// End functions run.
    pub ends: u64,
    /// Packets for a segment other than the previous packet's (the descriptor was swapped).
    pub swaps: u64,
    /// Packets this rank refused (nothing written).
    pub refused: u64,
}

/// The state the handlers share with the rank's [`Xfer`].
struct Shared {
    table: Mutex<Table>,
    /// Refusals of our packets that targets reported, oldest first.
    notices: Mutex<VecDeque<(usize, XferRefusal)>>,
    refused: AtomicU64,
    /// This rank (known at attach).
    rank: AtomicUsize,
}

impl Shared {
    fn table(&self) -> MutexGuard<'_, Table> {
        // A panicking end function poisons nothing the table relies on: it was out of the
        // table while it ran.
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Lands a packet, running the segment's end function (outside the lock, so that it may
    /// open segments) when the count reaches zero.
    fn land(&self, addr: u64, bytes: &[u8]) -> std::result::Result<(), XferRefusal> {
        let (id, offset) = SegmentId::from_addr(addr);
        let mut t = self.table();
        let result = t.land(id, offset, bytes);
        match result {
            Ok(true) => {
                let mut ended = t.take_ended(id);
                drop(t);
                let next = ended.run();
                self.table().after_end(ended, next);
                Ok(())
            }
            Ok(false) => Ok(()),
            Err(refusal) => {
                self.refused.fetch_add(1, Ordering::Relaxed);
                Err(refusal)
            }
        }
    }

    fn error(&self, refusal: XferRefusal) -> Error {
        Error::Refused {
            rank: self.rank.load(Ordering::Relaxed),
            refusal,
        }
    }
}

/// The handlers of the xfer layer.
#[derive(Debug, Clone, Copy)]
struct Handlers {
    packet4: RequestHandler,
    block: RequestHandler,
}

/// What a request handler needs to xfer on the reply channel (seed 000's
/// `CMAM_reply_xfer_4i` / `CMAM_reply_xfer`): copy it into the handler before `build`.
/// Replies follow the runtime's request/reply discipline: one reply per request, so one
/// reply xfer per token.
#[derive(Debug, Clone, Copy)]
pub struct XferReplies {
    packet4: ReplyHandler,
    block: ReplyHandler,
}

/// Splits 16 bytes into the two words of an `xfer_4i` packet.
fn words_of(d: [u32; 4]) -> [u64; 2] {
    [
        d[0] as u64 | (d[1] as u64) << 32,
        d[2] as u64 | (d[3] as u64) << 32,
    ]
}

/// The 16 bytes of an `xfer_4i` packet's words (little-endian, as `d` lies in memory).
fn bytes_of(w0: u64, w1: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&w0.to_le_bytes());
    b[8..].copy_from_slice(&w1.to_le_bytes());
    b
}

impl XferReplies {
    /// Sends 16 bytes into `seg` of the requester at `offset`, on the reply channel.
    pub fn reply_xfer_4i(
        self,
        token: ReplyToken<'_>,
        seg: SegmentId,
        offset: u64,
        d: [u32; 4],
    ) -> Result<()> {
        let [w0, w1] = words_of(d);
        let addr = seg.addr_at(token.requester(), offset, offset + 16)?;
        token.reply_short(self.packet4, &[addr, w0, w1])?;
        Ok(())
    }

    /// Sends `buf` (at most `max_medium` bytes: one reply) into `seg` of the requester at
    /// `offset`, on the reply channel.
    pub fn reply_xfer(
        self,
        token: ReplyToken<'_>,
        seg: SegmentId,
        offset: u64,
        buf: &[u8],
    ) -> Result<()> {
        let addr = seg.addr_at(token.requester(), offset, offset + buf.len() as u64)?;
        token.reply_medium(self.block, &[addr], buf)?;
        Ok(())
    }
}

/// The xfer layer registered with a builder, to [`XferSetup::attach`] once built.
pub struct XferSetup {
    shared: Arc<Shared>,
    handlers: Handlers,
    replies: XferReplies,
}

impl XferSetup {
    /// What request handlers use to xfer on the reply channel.
    pub fn replies(&self) -> XferReplies {
        self.replies
    }

    /// The xfer layer of the built runtime `rt`.
    pub fn attach(self, rt: &Runtime) -> Xfer<'_> {
        self.shared.rank.store(rt.rank(), Ordering::Relaxed);
        Xfer {
            rt,
            shared: self.shared,
            h: self.handlers,
            fragment: Cell::new(rt.max_medium()),
            reorder: Cell::new(None),
        }
    }
}

/// One rank's communication segments and xfer sends (see the module's documentation).
pub struct Xfer<'rt> {
    rt: &'rt Runtime,
    shared: Arc<Shared>,
    h: Handlers,
    fragment: Cell<usize>,
    reorder: Cell<Option<u64>>,
}

impl std::fmt::Debug for Xfer<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Xfer")
            .field("fragment", &self.fragment.get())
            .field("reorder", &self.reorder.get())
            .finish_non_exhaustive()
    }
}

impl Xfer<'_> {
    /// Registers the xfer layer's handlers (every rank must, in the same place among its
    /// handlers).
    pub fn register(b: &mut RuntimeBuilder) -> XferSetup {
        let shared = Arc::new(Shared {
            table: Mutex::new(Table::new()),
            notices: Mutex::new(VecDeque::new()),
            refused: AtomicU64::new(0),
            rank: AtomicUsize::new(0),
        });
        let notice = {
            let s = shared.clone();
            b.reply_handler("volley.xfer.refused", move |m: &Message<'_>| {
                if let Some(r) = XferRefusal::decode([m.arg(0), m.arg(1), m.arg(2)]) {
                    let mut q = s.notices.lock().unwrap_or_else(|e| e.into_inner());
                    q.push_back((m.src(), r));
                }
            })
        };
        // A request packet that is refused says so to its sender.
        let request = |name: &str, b: &mut RuntimeBuilder, four: bool| {
            let s = shared.clone();
            b.request_handler(name, move |m, token| {
                let landed = match four {
                    true => s.land(m.arg(0), &bytes_of(m.arg(1), m.arg(2))),
                    false => s.land(m.arg(0), m.payload()),
                };
                if let Err(refusal) = landed {
                    // Best effort: the refusal is counted here in any case.
                    let _ = token.reply_short(notice, &refusal.encode());
                }
            })
        };
        let packet4 = request("volley.xfer.4i", b, true);
        let block = request("volley.xfer.block", b, false);
        // A reply packet cannot answer: a refusal is only counted.
        let reply = |name: &str, b: &mut RuntimeBuilder, four: bool| {
            let s = shared.clone();
            b.reply_handler(name, move |m| {
                let _ = match four {
                    true => s.land(m.arg(0), &bytes_of(m.arg(1), m.arg(2))),
                    false => s.land(m.arg(0), m.payload()),
                };
            })
        };
        let replies = XferReplies {
            packet4: reply("volley.xfer.reply_4i", b, true),
            block: reply("volley.xfer.reply_block", b, false),
        };
        XferSetup {
            shared,
            handlers: Handlers { packet4, block },
            replies,
        }
    }

    /// Opens a segment on `memory` that expects `nbytes` bytes (seed 000's
    /// `am_open_segment(base, nbytes, end_fn, info)`; `info` is whatever `end_fn` captures).
    /// Returns the highest free id, or [`XferRefusal::NoFreeSegment`] when all 256 are open.
    /// `end_fn` runs once each time the count reaches zero, with the memory; it returns the
    /// next count, or 0 to close the segment (freeing the memory unless it took it).
    pub fn open_segment(
        &self,
        memory: Box<[u8]>,
        nbytes: usize,
        end_fn: impl FnMut(&mut Box<[u8]>) -> usize + Send + 'static,
    ) -> Result<SegmentId> {
        self.shared
            .table()
            .open(memory, nbytes, Box::new(end_fn))
            .map_err(|r| self.shared.error(r))
    }

    /// Reduces the bytes segment `id` still expects by `n` (seed 000's
    /// `am_shorten_segment`, for a sender that cannot supply all it promised); when that makes
    /// the count zero the end function runs, here. Below zero is refused and changes nothing.
    pub fn shorten_segment(&self, id: SegmentId, n: usize) -> Result<()> {
        let mut t = self.shared.table();
        let ended = t.shorten(id, n as u64).map_err(|r| self.shared.error(r))?;
        if ended {
            let mut ended = t.take_ended(id);
            drop(t);
            let next = ended.run();
            self.shared.table().after_end(ended, next);
        }
        Ok(())
    }

    /// The bytes segment `id` still expects.
    pub fn remaining(&self, id: SegmentId) -> Result<usize> {
        self.shared
            .table()
            .remaining(id)
            .map(|n| n as usize)
            .map_err(|r| self.shared.error(r))
    }

    /// Sends the 16 bytes `d` into segment `seg` of `node` at `offset` (seed 000's
    /// `am_xfer_4i`): one short request.
    pub fn xfer_4i(&self, node: usize, seg: SegmentId, offset: u64, d: [u32; 4]) -> Result<()> {
        let [w0, w1] = words_of(d);
        let addr = seg.addr_at(node, offset, offset + 16)?;
        self.rt
            .request_short(node, self.h.packet4, &[addr, w0, w1])?;
        Ok(())
    }

    /// Sends `buf` into segment `seg` of `node` from `offset` on (seed 000's `am_xfer`): a
    /// medium request per fragment of at most [`Xfer::set_fragment_bytes`] bytes (default
    /// the largest medium), in order, or in a seeded random order after
    /// [`Xfer::reorder_fragments`].
    pub fn xfer(&self, node: usize, seg: SegmentId, offset: u64, buf: &[u8]) -> Result<()> {
        seg.addr_at(node, offset, offset + buf.len() as u64)?;
        let frag = self.fragment.get();
        let n = buf.len().div_ceil(frag);
        let send = |i: usize| {
            let start = i * frag;
            let end = (start + frag).min(buf.len());
            // Checked above for the whole range.
            let addr = (seg.0 as u64) << OFFSET_BITS | (offset + start as u64);
            self.rt
                .request_medium(node, self.h.block, &[addr], &buf[start..end])
        };
        match self.reorder.get() {
            None => (0..n).try_for_each(send).map_err(Error::from),
            Some(seed) => permutation(n, seed)
                .into_iter()
                .try_for_each(send)
                .map_err(Error::from),
        }
    }

    /// Fragments of block xfers carry at most `n` bytes (1 to `max_medium`).
    pub fn set_fragment_bytes(&self, n: usize) {
        self.fragment.set(n.clamp(1, self.rt.max_medium()));
    }

    /// Test setting: block xfers send their fragments in a random order drawn from `seed`
    /// (`None`: in order), so that they arrive out of order (seed 000's network reordered
    /// xfer packets; between two ranks volley delivers in order).
    pub fn reorder_fragments(&self, seed: Option<u64>) {
        self.reorder.set(seed);
    }

    /// `Err` with the oldest refusal a target reported for this rank's request packets since
    /// the last call (the others stay queued), `Ok` if none. Refusals arrive as replies, so
    /// they are seen after the polls that ran them.
    pub fn check(&self) -> Result<()> {
        let next = self
            .shared
            .notices
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .pop_front();
        match next {
            None => Ok(()),
            Some((rank, refusal)) => Err(Error::Refused { rank, refusal }),
        }
    }

    /// This rank's counters.
    pub fn stats(&self) -> XferStats {
        let t = self.shared.table();
        XferStats {
            packets: t.packets,
            ends: t.ends,
            swaps: t.swaps,
            refused: self.shared.refused.load(Ordering::Relaxed),
        }
    }
}

/// A permutation of `0..n` drawn from `seed` (Fisher-Yates with a 64-bit mixer).
fn permutation(n: usize, seed: u64) -> Vec<usize> {
    let mut v: Vec<usize> = (0..n).collect();
    let mut x = seed;
    for i in (1..n).rev() {
        x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = x;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        v.swap(i, (z % (i as u64 + 1)) as usize);
    }
    v
}

#[cfg(test)]
mod tests;
