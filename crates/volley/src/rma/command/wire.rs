//! The encoding of a command packet (the request's body) and of its reply (one entry per
//! command). All integers are little-endian 64-bit words; each command's data and each
//! reply's data are padded to 8 bytes, so every header stays aligned (the seed pads to 4).
//!
//! ```text
//! command: word0 = kind u8 | segment id u16 << 8 | data length u32 << 32
//!          word1 = segment key
//!          word2..5 = a, b, c, d (per kind, see `Kind`)
//!          data, padded to 8
//! reply:   word0 = tag u8 | data length u32 << 32
//!          word1 = value (an old value, a refusal code), word2 = offset, word3 = length
//!          data (a get's bytes), padded to 8
//! ```

use super::CmdStatus;
use crate::refusal::Refusal;
use crate::rma::FifoStatus;

/// Bytes of a command's header.
pub(super) const CMD_HEADER: usize = 48;
/// Bytes of a reply entry's header.
pub(super) const REPLY_HEADER: usize = 32;

/// What a command does, with the meaning of its words a..d.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    /// a = offset.
    Put = 1,
    /// a = offset, b = flag offset, c = flag value.
    PutFlag = 2,
    /// a = offset, b = length.
    Get = 3,
    /// a = offset, b = op, c = operand, d = compare.
    Atomic = 4,
    /// a = FIFO offset, b = entry size, c = capacity.
    Fifo = 5,
    /// a = reference offset, b = reference value, c = data offset.
    CondWrite = 6,
    /// a = offset of the first word; data = the addends (one little-endian word each).
    FetchAddVector = 7,
    /// a = target word's offset, b = reference word's offset, c = new value, d = compare.
    CompareSwapAt = 8,
}

impl Kind {
    fn from_u8(k: u8) -> Option<Self> {
        Some(match k {
            1 => Kind::Put,
            2 => Kind::PutFlag,
            3 => Kind::Get,
            4 => Kind::Atomic,
            5 => Kind::Fifo,
            6 => Kind::CondWrite,
            7 => Kind::FetchAddVector,
            8 => Kind::CompareSwapAt,
            _ => return None,
        })
    }
}

/// One decoded command, borrowing its data from the packet.
#[derive(Debug, Clone, Copy)]
pub(super) struct Cmd<'a> {
    pub(super) kind: Kind,
    pub(super) id: u64,
    pub(super) key: u64,
    pub(super) w: [u64; 4],
    pub(super) data: &'a [u8],
}

impl Cmd<'_> {
    /// Whether this is an atomic (alone in its packet, rule 4).
    pub(super) fn is_atomic(&self) -> bool {
        matches!(
            self.kind,
            Kind::Atomic | Kind::FetchAddVector | Kind::CompareSwapAt
        )
    }

    /// Bytes of this command's entry in the reply.
    pub(super) fn reply_len(&self) -> usize {
        let data = match self.kind {
            // A length no reply could hold saturates (and fails rule 3).
            Kind::Get => usize::try_from(self.w[1])
                .ok()
                .and_then(|n| n.checked_next_multiple_of(8))
                .unwrap_or(usize::MAX),
            Kind::FetchAddVector => self.data.len(),
            _ => 0,
        };
        REPLY_HEADER.saturating_add(data)
    }
}

pub(super) fn padded(n: usize) -> usize {
    n.div_ceil(8) * 8
}

fn word(b: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(b[at..at + 8].try_into().expect("8 bytes"))
}

/// The little-endian words in `b` (its length a multiple of 8).
pub(super) fn words(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().expect("8 bytes")))
        .collect()
}

// Words such as a vector atomic's addends travel in memory order (`bytemuck`), which is the
// wire's little-endian order only on little-endian targets.
#[cfg(not(target_endian = "little"))]
compile_error!("the command wire format writes words in memory order: little-endian only");

/// Appends one command to `out`.
pub(super) fn put_cmd(out: &mut Vec<u8>, kind: Kind, id: u16, key: u64, w: [u64; 4], data: &[u8]) {
    let w0 = kind as u64 | (id as u64) << 8 | (data.len() as u64) << 32;
    for x in [w0, key, w[0], w[1], w[2], w[3]] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(data);
    out.resize(padded(out.len()), 0);
}

/// Decodes exactly `count` commands filling `body`; `None` if it is malformed.
pub(super) fn decode(body: &[u8], count: u64) -> Option<Vec<Cmd<'_>>> {
    // Each command takes at least its header: a count the body cannot hold is refused before
    // anything is allocated for it.
    if count == 0 || count > (body.len() / CMD_HEADER) as u64 {
        return None;
    }
    let mut cmds = Vec::with_capacity(count as usize);
    let mut at = 0;
    for _ in 0..count {
        if body.len() - at < CMD_HEADER {
            return None;
        }
        let w0 = word(body, at);
        let kind = Kind::from_u8(w0 as u8)?;
        let len = (w0 >> 32) as usize;
        let start = at + CMD_HEADER;
        let end = start.checked_add(len).filter(|&e| e <= body.len())?;
        let w = [1, 2, 3, 4].map(|i| word(body, at + 8 + 8 * i));
        cmds.push(Cmd {
            kind,
            id: (w0 >> 8) & 0xffff,
            key: word(body, at + 8),
            w,
            data: &body[start..end],
        });
        at = padded(end).min(body.len());
    }
    (at == body.len()).then_some(cmds)
}

/// Appends one reply entry to `out`.
pub(super) fn put_outcome(out: &mut Vec<u8>, outcome: &Result<CmdStatus, (Refusal, u64, u64)>) {
    let (tag, value, off, len, data): (u8, u64, u64, u64, &[u8]) = match outcome {
        Ok(CmdStatus::Done) => (0, 0, 0, 0, &[]),
        Ok(CmdStatus::Value(v)) => (1, *v, 0, 0, &[]),
        Ok(CmdStatus::Data(d)) => (2, 0, 0, 0, d),
        Ok(CmdStatus::Fifo(FifoStatus::Stored)) => (3, 0, 0, 0, &[]),
        Ok(CmdStatus::Fifo(FifoStatus::Full)) => (4, 0, 0, 0, &[]),
        Ok(CmdStatus::Written(true)) => (5, 0, 0, 0, &[]),
        Ok(CmdStatus::Written(false)) => (6, 0, 0, 0, &[]),
        Ok(CmdStatus::NotRun) => (7, 0, 0, 0, &[]),
        Err((r, off, len)) => (8, r.code(), *off, *len, &[]),
        Ok(CmdStatus::Values(v)) => (9, 0, 0, 0, bytemuck::cast_slice(v)),
        Ok(CmdStatus::Compared { swapped, old }) => (10, *old, u64::from(*swapped), 0, &[]),
    };
    let w0 = tag as u64 | (data.len() as u64) << 32;
    for x in [w0, value, off, len] {
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.extend_from_slice(data);
    out.resize(padded(out.len()), 0);
}

/// Decodes the reply entries in `body` (at most `count`); stops at the first malformed one.
pub(super) fn decode_outcomes(body: &[u8], count: u64) -> Vec<Result<CmdStatus, Refusal>> {
    let mut out = Vec::new();
    let mut at = 0;
    while (out.len() as u64) < count && body.len() - at >= REPLY_HEADER {
        let w0 = word(body, at);
        let len = (w0 >> 32) as usize;
        let start = at + REPLY_HEADER;
        let Some(end) = start.checked_add(len).filter(|&e| e <= body.len()) else {
            break;
        };
        let (value, off, l) = (word(body, at + 8), word(body, at + 16), word(body, at + 24));
        out.push(match w0 as u8 {
            0 => Ok(CmdStatus::Done),
            1 => Ok(CmdStatus::Value(value)),
            2 => Ok(CmdStatus::Data(body[start..end].to_vec())),
            3 => Ok(CmdStatus::Fifo(FifoStatus::Stored)),
            4 => Ok(CmdStatus::Fifo(FifoStatus::Full)),
            5 => Ok(CmdStatus::Written(true)),
            6 => Ok(CmdStatus::Written(false)),
            7 => Ok(CmdStatus::NotRun),
            9 => Ok(CmdStatus::Values(words(&body[start..end]))),
            10 => Ok(CmdStatus::Compared {
                swapped: off != 0,
                old: value,
            }),
            _ => Err(Refusal::from_code(value, off, l, 0).unwrap_or(Refusal::NoSuchSegment)),
        });
        at = padded(end).min(body.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_round_trip_and_malformed_bodies_are_refused() {
        let mut body = Vec::new();
        put_cmd(&mut body, Kind::Put, 7, 99, [16, 0, 0, 0], b"abc");
        put_cmd(&mut body, Kind::Get, 8, 5, [0, 32, 0, 0], &[]);
        assert_eq!(body.len(), 2 * CMD_HEADER + 8);
        let cmds = decode(&body, 2).expect("decodes");
        assert_eq!(cmds[0].kind, Kind::Put);
        assert_eq!((cmds[0].id, cmds[0].key, cmds[0].w[0]), (7, 99, 16));
        assert_eq!(cmds[0].data, b"abc");
        assert_eq!((cmds[1].kind, cmds[1].w[1]), (Kind::Get, 32));
        assert!(decode(&body, 1).is_none(), "bytes left over");
        assert!(decode(&body, 3).is_none(), "too few bytes");
        assert!(decode(&body, 0).is_none());
        assert!(decode(&body[..body.len() - 8], 2).is_none(), "truncated");
        let mut bad = body.clone();
        bad[0] = 42;
        assert!(decode(&bad, 2).is_none(), "unknown kind");
        let mut long = body.clone();
        long[4] = 200; // the first command claims 200 bytes of data
        assert!(decode(&long, 2).is_none());
    }

    #[test]
    fn outcomes_round_trip() {
        let outcomes = [
            Ok(CmdStatus::Done),
            Ok(CmdStatus::Value(u64::MAX)),
            Ok(CmdStatus::Data(vec![1, 2, 3])),
            Ok(CmdStatus::Fifo(FifoStatus::Full)),
            Ok(CmdStatus::Written(false)),
            Ok(CmdStatus::NotRun),
            Err((Refusal::WrongKey, 8, 16)),
            Ok(CmdStatus::Values(vec![0, 7, u64::MAX])),
            Ok(CmdStatus::Compared {
                swapped: true,
                old: 5,
            }),
            Ok(CmdStatus::Compared {
                swapped: false,
                old: u64::MAX,
            }),
        ];
        let mut body = Vec::new();
        for o in &outcomes {
            put_outcome(&mut body, o);
        }
        let back = decode_outcomes(&body, outcomes.len() as u64);
        let want: Vec<_> = outcomes
            .iter()
            .map(|o| o.clone().map_err(|e| e.0))
            .collect();
        assert_eq!(back, want);
    }
}
