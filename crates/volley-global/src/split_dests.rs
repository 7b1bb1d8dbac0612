//! Which ranks the split-phase gets and puts since the last `sync` went to: none, one, or
//! several. A sync whose operations all went to one rank waits for that rank as a round trip
//! to it does (spinning while it runs), not as a wait on nobody in particular.

use std::cell::Cell;

/// No operation since the last sync.
const NONE: usize = usize::MAX;
/// Operations to more than one rank.
const MANY: usize = usize::MAX - 1;

/// The destinations of one thread's split-phase operations since its last sync.
#[derive(Debug)]
pub(crate) struct SplitDests(Cell<usize>);

impl Default for SplitDests {
    fn default() -> Self {
        Self(Cell::new(NONE))
    }
}

impl SplitDests {
    /// Notes an operation to `rank`: one load and compare when it goes where the others went.
    #[inline(always)]
    pub(crate) fn note(&self, rank: usize) {
        let d = self.0.get();
        if d != rank {
            self.0.set(if d == NONE { rank } else { MANY });
        }
    }

    /// The one rank every operation since the last call went to, if there was exactly one;
    /// starts afresh.
    #[inline]
    pub(crate) fn take_single(&self) -> Option<usize> {
        let d = self.0.replace(NONE);
        (d != NONE && d != MANY).then_some(d)
    }
}

#[cfg(test)]
mod tests {
    use super::SplitDests;

    #[test]
    fn one_rank_is_named_and_two_or_none_are_not() {
        let d = SplitDests::default();
        assert_eq!(d.take_single(), None, "nothing issued names a rank");
        d.note(3);
        d.note(3);
        assert_eq!(d.take_single(), Some(3));
        assert_eq!(d.take_single(), None, "a sync did not start afresh");
        d.note(0);
        d.note(2);
        d.note(0);
        assert_eq!(d.take_single(), None, "two ranks named as one");
        d.note(2);
        assert_eq!(d.take_single(), Some(2), "many carried past a sync");
    }
}
