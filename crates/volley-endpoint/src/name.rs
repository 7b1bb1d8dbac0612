//! Global endpoint names and their encodings (bytes and text), for exchange out of band.

use crate::error::NameError;
use std::fmt;
use std::str::FromStr;

/// An endpoint within its rank: its number and the generation of that number (bumped at every
/// open, so a name kept past its endpoint's close never reaches a later endpoint that reuses
/// the number).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EndpointId {
    /// The endpoint's number on its rank.
    pub id: u32,
    /// The generation of that number.
    pub generation: u32,
}

impl EndpointId {
    /// Both halves in one word (as messages carry it).
    pub(crate) fn word(self) -> u64 {
        (self.id as u64) << 32 | self.generation as u64
    }

    /// The inverse of [`EndpointId::word`].
    pub(crate) fn from_word(w: u64) -> Self {
        Self {
            id: (w >> 32) as u32,
            generation: w as u32,
        }
    }
}

/// An endpoint's global name (seed 001 §2.2 and requirement 2): the job (which stands for the
/// shared segment: volley maps every rank of a node at start-up, under the job's key), the
/// node, the rank, and the endpoint's number and generation.
///
/// The node is the lowest rank of the node (volley's public API tells which ranks share
/// memory, not a node number), so it is the same on every rank that computes it.
///
/// Names travel out of band as [`EndpointName::to_bytes`] (28 bytes) or as text
/// (`Display` / `FromStr`: `ep:<job, 16 hex digits>:<node>:<rank>:<id>.<generation>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EndpointName {
    /// The job's id ([`volley::Runtime::job_id`]).
    pub job: u64,
    /// The node: its lowest rank.
    pub node: u32,
    /// The rank that owns the endpoint.
    pub rank: u32,
    /// The endpoint on that rank.
    pub endpoint: EndpointId,
}

/// Bytes in an encoded name.
pub const NAME_BYTES: usize = 28;

/// The first bytes of an encoded name: what it is, and the encoding's version.
const MAGIC: [u8; 4] = *b"VEP1";

impl EndpointName {
    /// The name as [`NAME_BYTES`] bytes: `VEP1`, then job, node, rank, id and generation,
    /// little-endian.
    pub fn to_bytes(&self) -> [u8; NAME_BYTES] {
        let mut b = [0u8; NAME_BYTES];
        b[..4].copy_from_slice(&MAGIC);
        b[4..12].copy_from_slice(&self.job.to_le_bytes());
        b[12..16].copy_from_slice(&self.node.to_le_bytes());
        b[16..20].copy_from_slice(&self.rank.to_le_bytes());
        b[20..24].copy_from_slice(&self.endpoint.id.to_le_bytes());
        b[24..28].copy_from_slice(&self.endpoint.generation.to_le_bytes());
        b
    }

    /// A name from [`EndpointName::to_bytes`]'s encoding (exactly [`NAME_BYTES`] bytes).
    pub fn from_bytes(b: &[u8]) -> Result<Self, NameError> {
        if b.len() != NAME_BYTES {
            return Err(NameError::Length(b.len()));
        }
        if b[..4] != MAGIC {
            return Err(NameError::Magic);
        }
        let u32_at = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"));
        Ok(Self {
            job: u64::from_le_bytes(b[4..12].try_into().expect("8 bytes")),
            node: u32_at(12),
            rank: u32_at(16),
            endpoint: EndpointId {
                id: u32_at(20),
                generation: u32_at(24),
            },
        })
    }
}

impl fmt::Display for EndpointName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ep:{:016x}:{}:{}:{}.{}",
            self.job, self.node, self.rank, self.endpoint.id, self.endpoint.generation
        )
    }
}

impl FromStr for EndpointName {
    type Err = NameError;

    fn from_str(s: &str) -> Result<Self, NameError> {
        let bad = || NameError::Text(s.to_string());
        let rest = s.strip_prefix("ep:").ok_or_else(bad)?;
        let mut parts = rest.split(':');
        let (Some(job), Some(node), Some(rank), Some(ep), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return Err(bad());
        };
        let (id, generation) = ep.split_once('.').ok_or_else(bad)?;
        let dec = |t: &str| -> Result<u32, NameError> {
            // Digits only: `u32::from_str` would also take a leading '+'.
            if t.is_empty() || !t.bytes().all(|c| c.is_ascii_digit()) {
                return Err(bad());
            }
            t.parse().map_err(|_| bad())
        };
        if job.len() != 16 || !job.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(bad());
        }
        Ok(Self {
            job: u64::from_str_radix(job, 16).map_err(|_| bad())?,
            node: dec(node)?,
            rank: dec(rank)?,
            endpoint: EndpointId {
                id: dec(id)?,
                generation: dec(generation)?,
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name() -> EndpointName {
        EndpointName {
            job: 0x0123_4567_89ab_cdef,
            node: 4,
            rank: 5,
            endpoint: EndpointId {
                id: 7,
                generation: u32::MAX,
            },
        }
    }

    #[test]
    fn bytes_round_trip() {
        let n = name();
        let b = n.to_bytes();
        assert_eq!(&b[..4], b"VEP1");
        assert_eq!(EndpointName::from_bytes(&b).unwrap(), n);
        // Every field lands somewhere distinct: changing one changes the bytes.
        let mut m = n;
        m.endpoint.generation = 0;
        assert_ne!(m.to_bytes(), b);
    }

    #[test]
    fn bad_bytes_are_refused() {
        let b = name().to_bytes();
        assert!(matches!(
            EndpointName::from_bytes(&b[..27]),
            Err(NameError::Length(27))
        ));
        let mut c = b;
        c[0] = b'X';
        assert!(matches!(
            EndpointName::from_bytes(&c),
            Err(NameError::Magic)
        ));
    }

    #[test]
    fn text_round_trip() {
        let n = name();
        let s = n.to_string();
        assert_eq!(s, "ep:0123456789abcdef:4:5:7.4294967295");
        assert_eq!(s.parse::<EndpointName>().unwrap(), n);
    }

    #[test]
    fn bad_text_is_refused() {
        for s in [
            "",
            "ep:",
            "ep:0123456789abcdef:4:5:7",
            "ep:0123456789abcdef:4:5:7.1:9",
            "ep:123456789abcdef:4:5:7.1",
            "ep:0123456789abcdeg:4:5:7.1",
            "ep:0123456789abcdef:+4:5:7.1",
            "ep:0123456789abcdef:4:5:7.4294967296",
            "xp:0123456789abcdef:4:5:7.1",
        ] {
            assert!(s.parse::<EndpointName>().is_err(), "{s:?} was accepted");
        }
    }

    #[test]
    fn id_word_round_trip() {
        let id = EndpointId {
            id: 3,
            generation: 9,
        };
        assert_eq!(EndpointId::from_word(id.word()), id);
    }
}
