//! Agents (seed 002's agent / alias secure mode): an identity with its own key whose
//! addressable memory is only a set of windows aliased onto its owner's segments.
//!
//! Each window is an entry of the owner's segment table like a segment's, with the agent's key,
//! the window's place in the aliased segment's space as its bounds, and the window's own
//! permissions (at most the segment's). So an access through an agent is checked where every
//! access is, by the same code: by the initiator in the mapped table on the direct path, by the
//! target's handler on the AM path. The agent's key matches only its windows, so its holder can
//! touch nothing else; a window's bounds keep it inside the window; the segment's own key does
//! not open a window. Refusals are counted at the target like any ([`super::Rma::refused`]).

use super::segment::{Perms, SegmentRef};
use super::{Error, OwnedSegment, Result, Rma};

/// Most windows one agent can have (each takes a segment-table entry).
pub const MAX_WINDOWS: usize = 16;

/// One window of an agent: `len` bytes at `offset` of `segment` (a live segment of this rank),
/// open to the agent for `perms`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The aliased segment, owned by this rank.
    pub segment: SegmentRef,
    /// Where the window starts in the segment.
    pub offset: usize,
    /// The window's length in bytes.
    pub len: usize,
    /// What the agent may do there (at most what the segment grants).
    pub perms: Perms,
}

/// An agent this rank owns; [`Agent::handle`] is what other ranks use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Agent {
    handle: AgentRef,
}

impl Agent {
    /// The handle to send to the ranks that may act as the agent.
    pub fn handle(&self) -> AgentRef {
        self.handle.clone()
    }
}

/// A handle to an agent: its owner, key and windows. Plain data ([`AgentRef::to_words`]); a
/// forged or stale one is refused at the target, never trusted.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct AgentRef {
    /// The rank that owns the agent.
    pub rank: usize,
    key: u64,
    /// Each window's table id and length.
    windows: Vec<(u16, u64)>,
}

impl AgentRef {
    /// How many windows the agent has.
    pub fn windows(&self) -> usize {
        self.windows.len()
    }

    /// Window `i` as a segment handle: offsets given with it are the window's own (0 is its
    /// first byte), and every one-sided operation takes it.
    pub fn window(&self, i: usize) -> Result<SegmentRef> {
        let &(id, len) = self.windows.get(i).ok_or_else(|| Error::InvalidConfig {
            name: "agent window",
            value: i.to_string(),
            why: "the agent has no window of this index",
        })?;
        Ok(SegmentRef {
            rank: self.rank,
            id,
            key: self.key,
            len,
        })
    }

    /// A copy of this handle with another key (to test protection).
    #[doc(hidden)]
    pub fn with_key(mut self, key: u64) -> Self {
        self.key = key;
        self
    }

    /// As words for message arguments or payloads: rank, key, count, then id and length per
    /// window.
    pub fn to_words(&self) -> Vec<u64> {
        let mut w = vec![self.rank as u64, self.key, self.windows.len() as u64];
        for &(id, len) in &self.windows {
            w.extend([u64::from(id), len]);
        }
        w
    }

    /// The handle from [`AgentRef::to_words`]; `None` if the words are not one.
    pub fn from_words(w: &[u64]) -> Option<Self> {
        let (&[rank, key, n], rest) = w.split_first_chunk::<3>()?;
        let n = usize::try_from(n).ok().filter(|&n| n <= MAX_WINDOWS)?;
        if rest.len() != 2 * n {
            return None;
        }
        let windows = rest
            .chunks_exact(2)
            .map(|c| Some((u16::try_from(c[0]).ok()?, c[1])))
            .collect::<Option<Vec<_>>>()?;
        Some(Self {
            rank: usize::try_from(rank).ok()?,
            key,
            windows,
        })
    }
}

impl Rma<'_> {
    /// Creates an agent with a fresh key whose memory is `windows` of this rank's own live
    /// segments. Each window must lie inside its segment and ask for no permission the
    /// segment lacks. Freeing a segment closes the windows on it.
    pub fn agent_create(&self, windows: &[Window]) -> Result<Agent> {
        let bad = |value: String, why| Error::InvalidConfig {
            name: "agent window",
            value,
            why,
        };
        if windows.is_empty() || windows.len() > MAX_WINDOWS {
            return Err(bad(
                windows.len().to_string(),
                "an agent has 1 to 16 windows",
            ));
        }
        let me = self.rt.rank();
        // Check every window before making any, so a bad one leaves nothing behind.
        let mut placed = Vec::with_capacity(windows.len());
        for (i, w) in windows.iter().enumerate() {
            let at = |why| bad(format!("{i}: {w:?}"), why);
            if w.segment.rank != me {
                return Err(at("the segment is not this rank's"));
            }
            let seg = self
                .owned
                .borrow()
                .iter()
                .find(|o| o.id == w.segment.id && o.key == w.segment.key && o.alias_of.is_none())
                .copied()
                .ok_or_else(|| at("no such live segment (or a window, which cannot be aliased)"))?;
            if w.offset.checked_add(w.len).is_none_or(|end| end > seg.len) {
                return Err(at("the window does not lie inside the segment"));
            }
            let granted = self.own_table().perms(seg.id).unwrap_or(Perms::NONE);
            if !granted.contains(w.perms) {
                return Err(at("the window asks for a permission the segment lacks"));
            }
            placed.push((seg, w));
        }
        let key = crate::bootstrap::random_u64();
        let mut ids = Vec::with_capacity(placed.len());
        for (seg, w) in placed {
            let Some(id) = self.alloc.borrow_mut().alloc_id() else {
                for &(id, _) in &ids {
                    self.retire(id, key);
                }
                return Err(Error::SegmentSpace {
                    len: w.len,
                    area: self.shared.local().segment_len,
                });
            };
            let area_offset = seg.area_offset + w.offset;
            self.shared.reset_work(id);
            self.own_table()
                .publish(id, key, area_offset, w.len, w.perms);
            self.owned.borrow_mut().push(OwnedSegment {
                id,
                key,
                area_offset,
                len: w.len,
                alias_of: Some((seg.id, seg.key)),
            });
            ids.push((id, w.len as u64));
        }
        Ok(Agent {
            handle: AgentRef {
                rank: me,
                key,
                windows: ids,
            },
        })
    }

    /// Closes every window of `agent`: later accesses through it are refused. `false` if none
    /// was open (revoked already, or its segments freed).
    pub fn agent_revoke(&self, agent: &Agent) -> bool {
        let h = &agent.handle;
        let mut any = false;
        for &(id, _) in &h.windows {
            any |= self.retire(id, h.key);
        }
        any
    }
}
