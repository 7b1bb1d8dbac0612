//! An endpoint's translation table (small indices to name, tag and route) and the process's
//! attachments (one per peer rank, however many entries name it).

use crate::error::{EndpointError, Result};
use crate::name::EndpointName;
use std::collections::HashMap;

/// How messages to a translation entry travel, chosen when it is mapped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The destination's rank is on this node: volley's shared-memory rings.
    SharedMemory,
    /// Another node: volley's network transport (UDP or TCP).
    Network,
}

/// One translation: where messages through an index go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Translation {
    /// The destination endpoint.
    pub name: EndpointName,
    /// The tag the destination chose, which every message through this entry carries.
    pub tag: u64,
    /// The transport to the destination's rank.
    pub route: Route,
}

/// The table: `len` indices, each empty or mapped.
#[derive(Debug)]
pub(crate) struct Table {
    entries: Vec<Option<Translation>>,
}

impl Table {
    pub(crate) fn new(len: usize) -> Self {
        Self {
            entries: vec![None; len],
        }
    }

    fn slot(&mut self, index: usize) -> Result<&mut Option<Translation>> {
        let len = self.entries.len();
        self.entries
            .get_mut(index)
            .ok_or(EndpointError::BadIndex { index, len })
    }

    /// Maps `index`, which must be in range and free.
    pub(crate) fn map(&mut self, index: usize, t: Translation) -> Result<()> {
        let slot = self.slot(index)?;
        if slot.is_some() {
            return Err(EndpointError::IndexInUse(index));
        }
        *slot = Some(t);
        Ok(())
    }

    /// Maps the lowest free index and returns it.
    pub(crate) fn map_any(&mut self, t: Translation) -> Result<usize> {
        let index = self
            .entries
            .iter()
            .position(Option::is_none)
            .ok_or(EndpointError::TableFull(self.entries.len()))?;
        self.entries[index] = Some(t);
        Ok(index)
    }

    /// Empties `index` and returns what it held.
    pub(crate) fn unmap(&mut self, index: usize) -> Result<Translation> {
        self.slot(index)?
            .take()
            .ok_or(EndpointError::Unmapped(index))
    }

    /// The translation at `index`.
    pub(crate) fn get(&self, index: usize) -> Result<Translation> {
        let len = self.entries.len();
        self.entries
            .get(index)
            .ok_or(EndpointError::BadIndex { index, len })?
            .ok_or(EndpointError::Unmapped(index))
    }

    /// Every mapped translation (for closing).
    pub(crate) fn drain(&mut self) -> impl Iterator<Item = Translation> + '_ {
        self.entries.iter_mut().filter_map(Option::take)
    }
}

/// The process's attachments: for each peer rank some entry of some endpoint maps, its route
/// and how many entries share it (the seed's per-process hash table that keeps a segment from
/// being mapped twice). volley itself attaches every rank of the node, and the network
/// addresses of the others, once at start-up; an attachment here is the layer's record of
/// that route, shared by every entry that names the rank.
#[derive(Debug, Default)]
pub(crate) struct Attachments {
    by_rank: HashMap<u32, (Route, usize)>,
}

impl Attachments {
    /// One more entry uses `rank`; `true` if it is the first (a new attachment).
    pub(crate) fn attach(&mut self, rank: u32, route: Route) -> bool {
        let e = self.by_rank.entry(rank).or_insert((route, 0));
        e.1 += 1;
        e.1 == 1
    }

    /// One entry fewer uses `rank`; the attachment goes with the last.
    pub(crate) fn detach(&mut self, rank: u32) {
        if let Some(e) = self.by_rank.get_mut(&rank) {
            e.1 -= 1;
            if e.1 == 0 {
                self.by_rank.remove(&rank);
            }
        }
    }

    /// Peer ranks attached.
    pub(crate) fn len(&self) -> usize {
        self.by_rank.len()
    }

    /// `rank`'s route and how many entries use it.
    pub(crate) fn get(&self, rank: u32) -> Option<(Route, usize)> {
        self.by_rank.get(&rank).copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::name::EndpointId;

    fn t(rank: u32, id: u32) -> Translation {
        Translation {
            name: EndpointName {
                job: 1,
                node: 0,
                rank,
                endpoint: EndpointId { id, generation: 1 },
            },
            tag: 9,
            route: Route::SharedMemory,
        }
    }

    #[test]
    fn map_get_unmap() {
        let mut tb = Table::new(4);
        tb.map(2, t(1, 0)).unwrap();
        assert_eq!(tb.get(2).unwrap(), t(1, 0));
        assert!(matches!(
            tb.map(2, t(1, 1)),
            Err(EndpointError::IndexInUse(2))
        ));
        assert!(matches!(tb.get(1), Err(EndpointError::Unmapped(1))));
        assert!(matches!(
            tb.get(4),
            Err(EndpointError::BadIndex { index: 4, len: 4 })
        ));
        assert!(matches!(
            tb.map(9, t(1, 1)),
            Err(EndpointError::BadIndex { index: 9, len: 4 })
        ));
        assert_eq!(tb.unmap(2).unwrap(), t(1, 0));
        assert!(matches!(tb.unmap(2), Err(EndpointError::Unmapped(2))));
        assert!(matches!(tb.get(2), Err(EndpointError::Unmapped(2))));
    }

    #[test]
    fn map_any_takes_the_lowest_free_index() {
        let mut tb = Table::new(3);
        tb.map(0, t(0, 0)).unwrap();
        assert_eq!(tb.map_any(t(1, 0)).unwrap(), 1);
        assert_eq!(tb.map_any(t(2, 0)).unwrap(), 2);
        assert!(matches!(
            tb.map_any(t(3, 0)),
            Err(EndpointError::TableFull(3))
        ));
        tb.unmap(1).unwrap();
        assert_eq!(tb.map_any(t(3, 0)).unwrap(), 1);
        assert_eq!(tb.drain().count(), 3);
        assert!(matches!(tb.get(0), Err(EndpointError::Unmapped(0))));
    }

    #[test]
    fn one_attachment_per_rank() {
        let mut a = Attachments::default();
        assert!(a.attach(3, Route::Network));
        assert!(!a.attach(3, Route::Network));
        assert!(a.attach(1, Route::SharedMemory));
        assert_eq!(a.len(), 2);
        assert_eq!(a.get(3), Some((Route::Network, 2)));
        a.detach(3);
        assert_eq!(a.get(3), Some((Route::Network, 1)));
        a.detach(3);
        assert_eq!(a.get(3), None);
        assert_eq!(a.len(), 1);
    }
}
