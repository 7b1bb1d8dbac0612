//! The receiver's memory of unsequenced datagram ids, so that a duplicated datagram does not
//! deliver its message twice.
//!
//! Ids are per peer pair and rise by one per datagram. The window remembers which of the
//! [`SPAN`] ids up to the highest seen have arrived, one bit each (as IPsec's and DTLS's
//! anti-replay windows do). An id more than [`SPAN`] - 1 behind the highest cannot be told
//! apart from a duplicate and is refused too: delivery at most once wins over delivery.

/// Ids remembered below the highest seen, the highest included.
pub const SPAN: u64 = 1024;

const WORDS: usize = (SPAN / 64) as usize;

/// Which recent unsequenced ids have arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplayWindow {
    /// The highest id accepted; 0 before the first.
    highest: u64,
    /// Bit `id % SPAN` is set when `id` (within the window) has arrived.
    bits: [u64; WORDS],
}

impl Default for ReplayWindow {
    fn default() -> Self {
        Self {
            highest: 0,
            bits: [0; WORDS],
        }
    }
}

impl ReplayWindow {
    /// Records `id` (nonzero) and returns whether it is new: false for an id seen before or
    /// older than the window.
    pub fn accept(&mut self, id: u64) -> bool {
        if id > self.highest {
            if id - self.highest >= SPAN {
                self.bits = [0; WORDS];
            } else {
                // The slots of the ids skipped over still hold the bits of ids SPAN older.
                for skipped in self.highest + 1..id {
                    self.set(skipped, false);
                }
            }
            self.highest = id;
            self.set(id, true);
            true
        } else if self.highest - id >= SPAN || self.get(id) {
            false
        } else {
            self.set(id, true);
            true
        }
    }

    /// The highest id accepted so far (0 before the first).
    pub fn highest(&self) -> u64 {
        self.highest
    }

    fn get(&self, id: u64) -> bool {
        let i = id % SPAN;
        self.bits[(i / 64) as usize] & (1 << (i % 64)) != 0
    }

    fn set(&mut self, id: u64, on: bool) {
        let i = id % SPAN;
        let word = &mut self.bits[(i / 64) as usize];
        if on {
            *word |= 1 << (i % 64);
        } else {
            *word &= !(1 << (i % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_id_is_accepted_once_in_any_order_within_the_window() {
        let mut w = ReplayWindow::default();
        // Ids 1..=3000 in a scrambled order that never lags the highest by SPAN or more.
        let mut ids: Vec<u64> = (1..=3000).collect();
        for chunk in ids.chunks_mut(500) {
            chunk.reverse();
        }
        for &id in &ids {
            assert!(w.accept(id), "{id} refused the first time");
            assert!(!w.accept(id), "{id} accepted twice");
        }
        for id in 2000..=3000 {
            assert!(!w.accept(id), "{id} accepted again later");
        }
        assert_eq!(w.highest(), 3000);
    }

    #[test]
    fn ids_older_than_the_window_are_refused_and_gaps_stay_open() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(5));
        assert!(w.accept(SPAN + 3));
        assert!(!w.accept(5), "seen, still inside the window");
        assert!(w.accept(6), "skipped, still inside the window");
        assert!(w.accept(SPAN + 5));
        assert!(!w.accept(4), "too old to tell");
        assert!(!w.accept(5), "seen, and too old now");
        assert!(w.accept(7), "skipped, at the window's oldest end");
        // A jump of a window or more forgets everything below it.
        assert!(w.accept(10 * SPAN));
        assert!(!w.accept(9 * SPAN));
        assert!(w.accept(10 * SPAN - 1));
    }

    #[test]
    fn a_slot_freed_by_skipping_ahead_holds_no_stale_bit() {
        let mut w = ReplayWindow::default();
        assert!(w.accept(7));
        assert!(w.accept(SPAN + 1));
        // Skips SPAN + 2 ..= SPAN + 9, whose slots include 7's.
        assert!(w.accept(SPAN + 10));
        assert!(w.accept(SPAN + 7), "a skipped id must not inherit 7's bit");
        assert!(!w.accept(SPAN + 7));
    }
}
