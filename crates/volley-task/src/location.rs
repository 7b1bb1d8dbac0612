//! Where a logical task lives: its rank, its epoch (one more per migration) and its segments,
//! and how that travels in message payloads.

use volley::rma::{Perms, SegmentRef};

/// A logical task's location as of one epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// The rank that owns the task's segments.
    pub rank: usize,
    /// 0 when created, one more after each migration.
    pub epoch: u64,
    /// The task's segments at that rank, with their permissions.
    pub segments: Vec<(SegmentRef, Perms)>,
}

fn perms_bits(p: Perms) -> u64 {
    [Perms::READ, Perms::WRITE, Perms::ATOMIC]
        .iter()
        .enumerate()
        .filter(|(_, &q)| p.contains(q))
        .map(|(i, _)| 1 << i)
        .sum()
}

fn perms_from(bits: u64) -> Perms {
    [Perms::READ, Perms::WRITE, Perms::ATOMIC]
        .iter()
        .enumerate()
        .filter(|(i, _)| bits >> i & 1 == 1)
        .fold(Perms::NONE, |acc, (_, &q)| acc | q)
}

impl Location {
    /// As words: rank, epoch, count, then four words per segment.
    pub(crate) fn to_words(&self) -> Vec<u64> {
        let mut w = vec![self.rank as u64, self.epoch, self.segments.len() as u64];
        for (s, p) in &self.segments {
            w.extend(s.to_words());
            w.push(perms_bits(*p));
        }
        w
    }

    /// The location from [`Location::to_words`]; `None` if the words are not one.
    pub(crate) fn from_words(w: &[u64]) -> Option<Self> {
        let (&[rank, epoch, n], rest) = w.split_first_chunk::<3>()?;
        if Some(rest.len()) != usize::try_from(n).ok()?.checked_mul(4) {
            return None;
        }
        let segments = rest
            .chunks_exact(4)
            .map(|c| (SegmentRef::from_words([c[0], c[1], c[2]]), perms_from(c[3])))
            .collect();
        Some(Self {
            rank: usize::try_from(rank).ok()?,
            epoch,
            segments,
        })
    }
}

/// Words as a little-endian payload.
pub(crate) fn to_bytes(words: &[u64]) -> Vec<u8> {
    words.iter().flat_map(|w| w.to_le_bytes()).collect()
}

/// A payload as words (a trailing partial word is dropped).
pub(crate) fn from_bytes(b: &[u8]) -> Vec<u64> {
    b.chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_round_trip_through_words() {
        let seg = SegmentRef::from_words([3 | 5 << 32, 77, 4096]);
        let l = Location {
            rank: 3,
            epoch: 9,
            segments: vec![(seg, Perms::READ | Perms::ATOMIC), (seg, Perms::NONE)],
        };
        assert_eq!(Location::from_words(&l.to_words()), Some(l.clone()));
        let mut w = l.to_words();
        w.pop();
        assert_eq!(Location::from_words(&w), None, "a short location");
        assert_eq!(Location::from_words(&[1, 2]), None);
    }
}
