//! Receives and sends in flight, by id. Most of the time a rank has one of each at most (a
//! blocking receive, the one rendezvous send it waits on), so the first lives inline, looked
//! up with one compare; the rest go to a hash map. A slot costs no hashing and no table
//! probe on the usual path, where a message otherwise paid for an insertion, a lookup in
//! its handler and a removal.

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes a slot id as itself: ids are handed out in sequence by this rank, so they spread
/// over the table's buckets without the cost of a keyed hash.
#[derive(Debug, Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = self.0.rotate_left(8) ^ b as u64;
        }
    }
    fn write_u64(&mut self, n: u64) {
        self.0 = n;
    }
}

/// Slots by id: one inline, the others in a map. Ids are never 0 (see `State::next_id`),
/// which marks the inline entry empty.
#[derive(Debug)]
pub(crate) struct Slots<T> {
    first_id: u64,
    first: Option<T>,
    more: HashMap<u64, T, BuildHasherDefault<IdHasher>>,
}

impl<T> Default for Slots<T> {
    fn default() -> Self {
        Self {
            first_id: 0,
            first: None,
            more: HashMap::default(),
        }
    }
}

impl<T> Slots<T> {
    /// Adds slot `id` (a fresh id: never one in the table).
    pub(crate) fn insert(&mut self, id: u64, slot: T) {
        debug_assert!(
            id != 0 && self.get(id).is_none(),
            "slot ids are fresh and non-zero"
        );
        if self.first.is_none() {
            self.first_id = id;
            self.first = Some(slot);
        } else {
            self.more.insert(id, slot);
        }
    }

    pub(crate) fn get(&self, id: u64) -> Option<&T> {
        if id == self.first_id {
            return self.first.as_ref();
        }
        self.more.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: u64) -> Option<&mut T> {
        if id == self.first_id {
            return self.first.as_mut();
        }
        self.more.get_mut(&id)
    }

    pub(crate) fn remove(&mut self, id: u64) -> Option<T> {
        if id == self.first_id {
            self.first_id = 0;
            return self.first.take();
        }
        self.more.remove(&id)
    }

    /// Slots in the table.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        usize::from(self.first.is_some()) + self.more.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// The table against a hash map, under random insertions and removals of fresh ids.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec((any::<bool>(), 0usize..8), 1..200)) {
            let mut table = Slots::default();
            let mut model = HashMap::new();
            let mut next = 1u64;
            for (add, pick) in ops {
                if add {
                    table.insert(next, next * 10);
                    model.insert(next, next * 10);
                    next += 1;
                } else {
                    let mut ids: Vec<u64> = model.keys().copied().collect();
                    ids.sort_unstable();
                    // Sometimes an id that is not there.
                    let id = ids.get(pick).copied().unwrap_or(next + 7);
                    prop_assert_eq!(table.remove(id), model.remove(&id));
                }
                prop_assert_eq!(table.len(), model.len());
                for (&id, &v) in &model {
                    prop_assert_eq!(table.get(id), Some(&v));
                }
                prop_assert_eq!(table.get(0), None);
                prop_assert_eq!(table.get(next), None);
            }
        }
    }
}
