//! How an Active Message travels as one network message.
//!
//! ```text
//! word 0   bits 0..16 handler | 16..21 nargs | 21..24 kind | 24 channel | 25 tail | 26..64 zero
//! word 1   payload length           (medium and long only; a tail's whole length)
//! word 2   segment offset           (long and part only)
//! then     nargs u64 arguments, then the payload bytes
//! ```
//!
//! A long payload larger than one network message travels as parts (kind 5: offset and bytes,
//! no handler, no arguments), each written into the segment on arrival, then a tail: a long
//! message with the tail bit, whose length word is the whole payload's and whose bytes are its
//! last ones. The transport delivers a peer's messages in order, so when the tail's handler
//! runs every part is in place.
//!
//! All words little-endian. Unlike the shared-memory frame there is no sequence or check byte:
//! the transport below already delivers whole messages, in order, from a known rank of this
//! job (UDP datagrams carry the job key and a checksum); unsequenced messages (seed 002's "no
//! flow control") come whole but in no order, and are always medium messages, never parts. A long message carries its payload,
//! which the receiver writes into its own segment before the handler runs.

use crate::transport::contract::Class;
use crate::transport::Channel;
use crate::MAX_ARGS;

/// A decoded network message, borrowing the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetFrame<'a> {
    pub(crate) ch: Channel,
    pub(crate) class: Class,
    pub(crate) handler: u16,
    pub(crate) args: [u64; MAX_ARGS],
    pub(crate) nargs: usize,
    pub(crate) payload: &'a [u8],
    /// Segment offset of a long message.
    pub(crate) offset: u64,
    /// A long message's whole length: the payload's, or for a tail more (its parts came first).
    pub(crate) span: u64,
    /// A part of a long payload: placed, no handler runs.
    pub(crate) part: bool,
}

const KIND_SHIFT: u32 = 21;
/// The kind field of a part of a long payload.
const KIND_PART: u64 = 5;
/// A long message whose payload is the end of a longer one sent in parts before it.
const TAIL_BIT: u64 = 1 << 25;

/// The kind field of each class on the wire.
fn kind_of(class: Class) -> u64 {
    match class {
        Class::Short => 1,
        Class::Medium => 2,
        Class::Long => 4,
        Class::System => 6,
    }
}

/// The class a kind field names, if any.
fn class_of(kind: u64) -> Option<Class> {
    Some(match kind {
        1 => Class::Short,
        2 => Class::Medium,
        4 => Class::Long,
        6 => Class::System,
        _ => return None,
    })
}

/// Words between the header word and the arguments.
fn extra_words(class: Class) -> usize {
    match class {
        Class::Medium => 1,
        Class::Long => 2,
        Class::Short | Class::System => 0,
    }
}
const CH_BIT: u64 = 1 << 24;

/// Appends the encoding of one message to `out` (cleared first).
pub(crate) fn encode(
    out: &mut Vec<u8>,
    ch: Channel,
    class: Class,
    handler: u16,
    args: &[u64],
    payload: &[u8],
    offset: u64,
) {
    encode_head(out, ch, class, handler, args, payload.len(), offset);
    out.extend_from_slice(payload);
}

/// Writes into `out` (cleared first) what [`encode`] writes before a payload of `len` bytes:
/// the message is `out` followed by the payload, which the transport gathers from where it
/// lies (a long payload from the segment) instead of from a copy.
pub(crate) fn encode_head(
    out: &mut Vec<u8>,
    ch: Channel,
    class: Class,
    handler: u16,
    args: &[u64],
    len: usize,
    offset: u64,
) {
    debug_assert!(args.len() <= MAX_ARGS);
    out.clear();
    let ch_bit = if ch == Channel::Reply { CH_BIT } else { 0 };
    let w0 = handler as u64 | (args.len() as u64) << 16 | kind_of(class) << KIND_SHIFT | ch_bit;
    out.extend_from_slice(&w0.to_le_bytes());
    let extra = extra_words(class);
    if extra >= 1 {
        out.extend_from_slice(&(len as u64).to_le_bytes());
    }
    if extra >= 2 {
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for a in args {
        out.extend_from_slice(&a.to_le_bytes());
    }
}

/// [`encode`] of a medium message whose `len` payload bytes `fill` writes in place, at the
/// end of `out`.
pub(crate) fn encode_medium_with(
    out: &mut Vec<u8>,
    ch: Channel,
    handler: u16,
    args: &[u64],
    len: usize,
    fill: impl FnOnce(&mut [u8]),
) {
    encode(out, ch, Class::Medium, handler, args, &[], 0);
    out[8..16].copy_from_slice(&(len as u64).to_le_bytes());
    let start = out.len();
    out.resize(start + len, 0);
    fill(&mut out[start..]);
}

/// Encodes (into `out`, cleared first) a part of a long payload: `payload` goes to `offset`
/// of the target's segment, and no handler runs.
#[cfg(test)]
pub(crate) fn encode_part(out: &mut Vec<u8>, ch: Channel, payload: &[u8], offset: u64) {
    encode_part_head(out, ch, payload.len(), offset);
    out.extend_from_slice(payload);
}

/// What [`encode_part`] writes before a part's `len` payload bytes (see [`encode_head`]).
pub(crate) fn encode_part_head(out: &mut Vec<u8>, ch: Channel, len: usize, offset: u64) {
    out.clear();
    let ch_bit = if ch == Channel::Reply { CH_BIT } else { 0 };
    out.extend_from_slice(&(KIND_PART << KIND_SHIFT | ch_bit).to_le_bytes());
    out.extend_from_slice(&(len as u64).to_le_bytes());
    out.extend_from_slice(&offset.to_le_bytes());
}

/// Encodes (into `out`, cleared first) the tail of a long message of `span` bytes at `offset`
/// whose other bytes went as parts before it: `tail` is its last `tail.len()` bytes.
#[cfg(test)]
pub(crate) fn encode_tail(
    out: &mut Vec<u8>,
    ch: Channel,
    handler: u16,
    args: &[u64],
    tail: &[u8],
    offset: u64,
    span: u64,
) {
    debug_assert!(tail.len() as u64 <= span);
    encode_tail_head(out, ch, handler, args, offset, span);
    out.extend_from_slice(tail);
}

/// What [`encode_tail`] writes before the tail's bytes (see [`encode_head`]).
pub(crate) fn encode_tail_head(
    out: &mut Vec<u8>,
    ch: Channel,
    handler: u16,
    args: &[u64],
    offset: u64,
    span: u64,
) {
    encode_head(out, ch, Class::Long, handler, args, 0, offset);
    let w0 = u64::from_le_bytes(out[..8].try_into().expect("8 bytes")) | TAIL_BIT;
    out[..8].copy_from_slice(&w0.to_le_bytes());
    out[8..16].copy_from_slice(&span.to_le_bytes());
}

/// The bytes [`encode`] makes of a message of `class` with `nargs` arguments and a payload
/// of `payload_len` bytes.
pub(crate) fn encoded_len(class: Class, nargs: usize, payload_len: usize) -> usize {
    (1 + extra_words(class) + nargs) * 8 + payload_len
}

/// For a network message of `len` bytes that begins with `head` and carries a long payload
/// (whole, tail or part) whose frame words are all in `head`: the segment offset its payload
/// bytes (the message's last ones) go to, and the words' length. Writes into `notice`
/// (cleared first) the message to deliver once the payload is in place: a tail with no
/// bytes of its own, whose handler then finds the whole payload placed (for a part, which
/// runs no handler, nothing). `None` for anything else, or anything [`decode`] would refuse.
pub(crate) fn placed(head: &[u8], len: usize, notice: &mut Vec<u8>) -> Option<(u64, usize)> {
    let w0 = u64::from_le_bytes(head.get(..8)?.try_into().ok()?);
    let kind = (w0 >> KIND_SHIFT) & 7;
    let part = kind == KIND_PART;
    if !part && kind != kind_of(Class::Long) {
        return None;
    }
    let words = (1 + extra_words(Class::Long) + ((w0 >> 16) & 0x1f) as usize) * 8;
    let payload = len.checked_sub(words)? as u64;
    notice.clear();
    notice.extend_from_slice(head.get(..words)?);
    let span = u64::from_le_bytes(notice[8..16].try_into().ok()?);
    // The words are checked as `decode` checks them, on a message with no payload: a part
    // whose length word is zero, a long as a tail.
    if part {
        notice[8..16].fill(0);
    } else {
        notice[..8].copy_from_slice(&(w0 | TAIL_BIT).to_le_bytes());
    }
    let offset = decode(notice)?.offset;
    let tail = w0 & TAIL_BIT != 0;
    if payload > span || (!tail && payload != span) {
        return None;
    }
    if part {
        notice.clear();
    }
    Some((offset.checked_add(span - payload)?, words))
}

/// Decodes one message; `None` if it is malformed (to be dropped and counted).
pub(crate) fn decode(bytes: &[u8]) -> Option<NetFrame<'_>> {
    let word = |i: usize| -> Option<u64> {
        let b = bytes.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    };
    let w0 = word(0)?;
    if w0 >> 26 != 0 {
        return None;
    }
    let kind = (w0 >> KIND_SHIFT) & 7;
    let part = kind == KIND_PART;
    let class = if part { Class::Long } else { class_of(kind)? };
    let tail = w0 & TAIL_BIT != 0;
    if (tail && class != Class::Long) || (part && (tail || w0 as u32 & 0x1f_ffff != 0)) {
        return None;
    }
    let ch = if w0 & CH_BIT != 0 {
        Channel::Reply
    } else {
        Channel::Request
    };
    let nargs = ((w0 >> 16) & 0x1f) as usize;
    if nargs > MAX_ARGS {
        return None;
    }
    let extra = extra_words(class);
    let (len, offset) = match extra {
        0 => (0, 0),
        1 => (word(1)?, 0),
        _ => (word(1)?, word(2)?),
    };
    let mut args = [0u64; MAX_ARGS];
    for (i, a) in args.iter_mut().take(nargs).enumerate() {
        *a = word(1 + extra + i)?;
    }
    let start = (1 + extra + nargs) * 8;
    let payload = &bytes[start.min(bytes.len())..];
    let fits = if tail {
        payload.len() as u64 <= len
    } else {
        payload.len() as u64 == len
    };
    if !fits || (extra == 0 && !payload.is_empty()) {
        return None;
    }
    Some(NetFrame {
        ch,
        class,
        handler: w0 as u16,
        args,
        nargs,
        payload,
        offset,
        span: len,
        part,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kind_round_trips() {
        let mut buf = Vec::new();
        let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
        for (kind, p, off) in [
            (Class::Short, &[][..], 0),
            (Class::System, &[][..], 0),
            (Class::Medium, &payload[..], 0),
            (Class::Medium, &[][..], 0),
            (Class::Long, &payload[..17], 4096),
        ] {
            for nargs in [0, 1, MAX_ARGS] {
                for ch in [Channel::Request, Channel::Reply] {
                    let args: Vec<u64> = (0..nargs as u64).map(|i| i * 0x1111 + 3).collect();
                    encode(&mut buf, ch, kind, 0xbeef, &args, p, off);
                    let f = decode(&buf).expect("decodes");
                    assert_eq!((f.ch, f.class, f.handler), (ch, kind, 0xbeef));
                    assert_eq!(&f.args[..f.nargs], &args[..]);
                    assert_eq!(f.payload, p);
                    assert_eq!(f.offset, off);
                }
            }
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        let mut buf = Vec::new();
        encode(
            &mut buf,
            Channel::Request,
            Class::Medium,
            1,
            &[5],
            b"abc",
            0,
        );
        assert!(decode(&buf).is_some());
        // Truncated anywhere, or one byte too many.
        for cut in 0..buf.len() {
            assert!(decode(&buf[..cut]).is_none(), "cut at {cut}");
        }
        let mut longer = buf.clone();
        longer.push(0);
        assert!(decode(&longer).is_none());
        // Unknown kind, nonzero reserved bits, a tail bit on a medium, too many arguments.
        for w0 in [
            7u64 << KIND_SHIFT,
            3 << KIND_SHIFT,
            1 << 40,
            (2 << KIND_SHIFT) | TAIL_BIT,
            (1 << KIND_SHIFT) | (17 << 16),
        ] {
            let mut b = buf.clone();
            b[..8].copy_from_slice(&w0.to_le_bytes());
            assert!(decode(&b).is_none(), "{w0:#x}");
        }
        // A short message with trailing bytes.
        encode(&mut buf, Channel::Request, Class::Short, 1, &[], b"", 0);
        buf.push(1);
        assert!(decode(&buf).is_none());
    }

    #[test]
    fn parts_and_tails_round_trip() {
        let mut buf = Vec::new();
        encode_part(&mut buf, Channel::Reply, b"abcdef", 1 << 33);
        let f = decode(&buf).expect("part decodes");
        assert!(f.part);
        assert_eq!((f.ch, f.class, f.nargs), (Channel::Reply, Class::Long, 0));
        assert_eq!((f.payload, f.offset, f.span), (&b"abcdef"[..], 1 << 33, 6));
        // A part with a handler or arguments is malformed.
        let mut b = buf.clone();
        b[0] = 1;
        assert!(decode(&b).is_none());

        encode_tail(
            &mut buf,
            Channel::Request,
            7,
            &[1, 2],
            b"xyz",
            4096,
            1 << 24,
        );
        let f = decode(&buf).expect("tail decodes");
        assert!(!f.part);
        assert_eq!(
            (f.class, f.handler, &f.args[..f.nargs]),
            (Class::Long, 7, &[1, 2][..])
        );
        assert_eq!((f.payload, f.offset, f.span), (&b"xyz"[..], 4096, 1 << 24));
        // A tail longer than its span is malformed.
        encode_tail(&mut buf, Channel::Request, 7, &[], b"xyz", 0, 2);
        assert!(decode(&buf).is_none());
        // Whole longs keep their length as span.
        encode(&mut buf, Channel::Request, Class::Long, 1, &[], b"ab", 8);
        assert_eq!(decode(&buf).map(|f| (f.span, f.part)), Some((2, false)));
    }

    #[test]
    fn placed_payloads_leave_a_notice_that_runs_the_handler() {
        let (mut buf, mut notice) = (Vec::new(), Vec::new());
        let payload = [9u8; 40];
        // A whole long: its payload at its offset, and a tail without bytes to deliver.
        encode(&mut buf, Channel::Reply, Class::Long, 3, &[7], &payload, 64);
        let (at, words) = placed(&buf[..35], buf.len(), &mut notice).expect("placed");
        assert_eq!((at, words, &buf[words..]), (64, 32, &payload[..]));
        let f = decode(&notice).expect("the notice decodes");
        assert_eq!(
            (f.ch, f.handler, &f.args[..1]),
            (Channel::Reply, 3, &[7][..])
        );
        assert_eq!((f.offset, f.span, f.payload), (64, 40, &[][..]));
        // A tail: its bytes end the span.
        encode_tail(&mut buf, Channel::Request, 3, &[], &payload[..8], 64, 1000);
        let (at, words) = placed(&buf, buf.len(), &mut notice).expect("placed");
        assert_eq!((at, words), (64 + 1000 - 8, 24));
        assert_eq!(
            decode(&notice).map(|f| (f.offset, f.span)),
            Some((64, 1000))
        );
        // A part: placed, nothing to deliver.
        encode_part(&mut buf, Channel::Request, &payload, 4096);
        assert_eq!(placed(&buf, buf.len(), &mut notice), Some((4096, 24)));
        assert!(notice.is_empty());
        // Not placed: other kinds, words not all received, a length that disagrees.
        encode(
            &mut buf,
            Channel::Request,
            Class::Medium,
            3,
            &[],
            &payload,
            0,
        );
        assert_eq!(placed(&buf, buf.len(), &mut notice), None);
        encode(
            &mut buf,
            Channel::Request,
            Class::Long,
            3,
            &[1, 2],
            &payload,
            0,
        );
        assert_eq!(placed(&buf[..39], buf.len(), &mut notice), None);
        assert_eq!(placed(&buf, buf.len() + 1, &mut notice), None);
        assert_eq!(placed(&buf, 39, &mut notice), None);
        let mut bad = buf.clone();
        bad[7] = 0x80;
        assert_eq!(placed(&bad, bad.len(), &mut notice), None);
    }

    #[test]
    fn random_bytes_never_panic() {
        let mut x = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 64) as usize;
            let bytes: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            let _ = decode(&bytes);
        }
    }
}
