//! How an Active Message travels as one network message.
//!
//! ```text
//! word 0   bits 0..16 handler | 16..21 nargs | 21..24 kind | 24 channel | 25..64 zero
//! word 1   payload length           (medium and long only)
//! word 2   segment offset           (long only)
//! then     nargs u64 arguments, then the payload bytes
//! ```
//!
//! All words little-endian. Unlike the shared-memory frame there is no sequence or check byte:
//! the transport below already delivers whole messages, in order, from a known rank of this
//! job (UDP datagrams carry the job key and a checksum). A long message carries its payload,
//! which the receiver writes into its own segment before the handler runs.

use super::frame_kind::FrameKind;
use crate::transport::Channel;
use crate::MAX_ARGS;

/// A decoded network message, borrowing the received bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct NetFrame<'a> {
    pub(crate) ch: Channel,
    pub(crate) kind: FrameKind,
    pub(crate) handler: u16,
    pub(crate) args: [u64; MAX_ARGS],
    pub(crate) nargs: usize,
    pub(crate) payload: &'a [u8],
    /// Segment offset of a long message.
    pub(crate) offset: u64,
}

const KIND_SHIFT: u32 = 21;
const CH_BIT: u64 = 1 << 24;

/// Appends the encoding of one message to `out` (cleared first).
pub(crate) fn encode(
    out: &mut Vec<u8>,
    ch: Channel,
    kind: FrameKind,
    handler: u16,
    args: &[u64],
    payload: &[u8],
    offset: u64,
) {
    debug_assert!(args.len() <= MAX_ARGS);
    out.clear();
    let ch_bit = if ch == Channel::Reply { CH_BIT } else { 0 };
    let w0 =
        handler as u64 | (args.len() as u64) << 16 | (kind as u8 as u64) << KIND_SHIFT | ch_bit;
    out.extend_from_slice(&w0.to_le_bytes());
    let extra = kind.extra_words();
    if extra >= 1 {
        out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    }
    if extra >= 2 {
        out.extend_from_slice(&offset.to_le_bytes());
    }
    for a in args {
        out.extend_from_slice(&a.to_le_bytes());
    }
    out.extend_from_slice(payload);
}

/// Decodes one message; `None` if it is malformed (to be dropped and counted).
pub(crate) fn decode(bytes: &[u8]) -> Option<NetFrame<'_>> {
    let word = |i: usize| -> Option<u64> {
        let b = bytes.get(i * 8..i * 8 + 8)?;
        Some(u64::from_le_bytes(b.try_into().ok()?))
    };
    let w0 = word(0)?;
    if w0 >> 25 != 0 {
        return None;
    }
    // A pooled medium is a ring's way to carry a payload; on the network it travels inline.
    let kind = match FrameKind::from_bits(((w0 >> KIND_SHIFT) & 7) as u8)? {
        FrameKind::MediumPooled => return None,
        kind => kind,
    };
    let ch = if w0 & CH_BIT != 0 {
        Channel::Reply
    } else {
        Channel::Request
    };
    let nargs = ((w0 >> 16) & 0x1f) as usize;
    if nargs > MAX_ARGS {
        return None;
    }
    let extra = kind.extra_words();
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
    if payload.len() as u64 != len || (extra == 0 && !payload.is_empty()) {
        return None;
    }
    Some(NetFrame {
        ch,
        kind,
        handler: w0 as u16,
        args,
        nargs,
        payload,
        offset,
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
            (FrameKind::Short, &[][..], 0),
            (FrameKind::System, &[][..], 0),
            (FrameKind::MediumInline, &payload[..], 0),
            (FrameKind::MediumInline, &[][..], 0),
            (FrameKind::Long, &payload[..17], 4096),
        ] {
            for nargs in [0, 1, MAX_ARGS] {
                for ch in [Channel::Request, Channel::Reply] {
                    let args: Vec<u64> = (0..nargs as u64).map(|i| i * 0x1111 + 3).collect();
                    encode(&mut buf, ch, kind, 0xbeef, &args, p, off);
                    let f = decode(&buf).expect("decodes");
                    assert_eq!((f.ch, f.kind, f.handler), (ch, kind, 0xbeef));
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
            FrameKind::MediumInline,
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
        // Unknown kind, nonzero reserved bits, too many arguments.
        for w0 in [
            5u64 << KIND_SHIFT,
            3 << KIND_SHIFT,
            1 << 40,
            (1 << KIND_SHIFT) | (17 << 16),
        ] {
            let mut b = buf.clone();
            b[..8].copy_from_slice(&w0.to_le_bytes());
            assert!(decode(&b).is_none(), "{w0:#x}");
        }
        // A short message with trailing bytes.
        encode(&mut buf, Channel::Request, FrameKind::Short, 1, &[], b"", 0);
        buf.push(1);
        assert!(decode(&buf).is_none());
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
