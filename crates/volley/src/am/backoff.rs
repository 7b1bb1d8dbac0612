//! What a rank does while it waits: spin briefly, then yield the core.
//!
//! With more ranks than cores a spinning rank steals the core from the rank it waits for, so a
//! rank that knows it is oversubscribed ("polite") yields almost at once; otherwise it spins for
//! about a millisecond of empty polls first, which keeps round trips at cache-line speed, and
//! then yields anyway so that an undetected oversubscription still makes progress.

/// Empty polls before a dedicated-core rank starts yielding.
const SPIN_POLLS: u32 = 1 << 14;
/// Empty polls before a polite rank starts yielding.
const POLITE_SPIN_POLLS: u32 = 8;

/// Wait state of one waiting loop.
#[derive(Debug)]
pub(crate) struct Backoff {
    empty: u32,
    limit: u32,
}

impl Backoff {
    pub(crate) fn new(polite: bool) -> Self {
        Self {
            empty: 0,
            limit: if polite {
                POLITE_SPIN_POLLS
            } else {
                SPIN_POLLS
            },
        }
    }

    /// Called after a poll that found nothing.
    #[inline(always)]
    pub(crate) fn snooze(&mut self) {
        if self.empty < self.limit {
            // No `pause` here: on current AMD and Intel cores it costs 40-150 cycles, which
            // would add directly to the time until the next poll sees an arriving message.
            self.empty += 1;
        } else {
            std::thread::yield_now();
        }
    }

    /// Called after a poll that made progress.
    #[inline(always)]
    pub(crate) fn reset(&mut self) {
        self.empty = 0;
    }
}
