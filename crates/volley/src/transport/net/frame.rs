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
}

const KIND_SHIFT: u32 = 21;

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
    debug_assert!(args.len() <= MAX_ARGS);
    out.clear();
    let ch_bit = if ch == Channel::Reply { CH_BIT } else { 0 };
    let w0 = handler as u64 | (args.len() as u64) << 16 | kind_of(class) << KIND_SHIFT | ch_bit;
    out.extend_from_slice(&w0.to_le_bytes());
    let extra = extra_words(class);
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

/// The bytes [`encode`] makes of a message of `class` with `nargs` arguments and a payload
/// of `payload_len` bytes.
pub(crate) fn encoded_len(class: Class, nargs: usize, payload_len: usize) -> usize {
    (1 + extra_words(class) + nargs) * 8 + payload_len
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
    let class = class_of((w0 >> KIND_SHIFT) & 7)?;
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
    if payload.len() as u64 != len || (extra == 0 && !payload.is_empty()) {
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
        encode(&mut buf, Channel::Request, Class::Short, 1, &[], b"", 0);
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
