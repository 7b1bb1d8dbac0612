//! Where the rank's thread is, published for the hang reporter at the slow-path transitions
//! only: a wait that has spun out (so it yields or sleeps from now on), a send that has waited
//! as long, and their ends. A wait that ends while it still spins publishes nothing, so the
//! message paths pay nothing for it; what is shorter than a spin-out (microseconds) is not a
//! hang anyway.
//!
//! The state is one word ([`Doing`], packed) and the time it began; the reporter reads the
//! word, the time, and the word again, and retries if the word changed meanwhile.

use crate::transport::Channel;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// What a long wait is waiting for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Doing {
    /// Nothing published: computing, or in a call that has not spun out.
    Nothing,
    /// In `wait_until` (or a layer's wait built on it).
    Wait,
    /// In `barrier`, round `round`, waiting for the arrival of `from`.
    Barrier { round: u32, from: u32 },
    /// In `finalize`, waiting for the other ranks.
    Finalize,
    /// In a send to `peer` on `ch` that found no room (its ring, buffers or window full).
    SendBlocked { peer: u32, ch: Channel },
}

const KIND_WAIT: u64 = 1;
const KIND_BARRIER: u64 = 2;
const KIND_FINALIZE: u64 = 3;
const KIND_SEND: u64 = 4;

impl Doing {
    /// Packed: kind in bits 0..8, channel 8..16, round 16..32, peer 32..64.
    pub(crate) fn pack(self) -> u64 {
        match self {
            Self::Nothing => 0,
            Self::Wait => KIND_WAIT,
            Self::Barrier { round, from } => {
                KIND_BARRIER | (u64::from(round) & 0xffff) << 16 | u64::from(from) << 32
            }
            Self::Finalize => KIND_FINALIZE,
            Self::SendBlocked { peer, ch } => KIND_SEND | (ch as u64) << 8 | u64::from(peer) << 32,
        }
    }

    /// The inverse of [`Doing::pack`].
    pub(crate) fn unpack(word: u64) -> Self {
        let peer = (word >> 32) as u32;
        match word & 0xff {
            KIND_WAIT => Self::Wait,
            KIND_BARRIER => Self::Barrier {
                round: ((word >> 16) & 0xffff) as u32,
                from: peer,
            },
            KIND_FINALIZE => Self::Finalize,
            KIND_SEND => Self::SendBlocked {
                peer,
                ch: if (word >> 8) & 0xff == Channel::Reply as u64 {
                    Channel::Reply
                } else {
                    Channel::Request
                },
            },
            _ => Self::Nothing,
        }
    }
}

/// The published state of the rank's thread (written by the engine's owner, read by the
/// reporter).
#[derive(Debug)]
pub(crate) struct Activity {
    word: AtomicU64,
    /// When `word` was published, ns since `epoch`.
    since: AtomicU64,
    epoch: Instant,
}

impl Activity {
    pub(crate) fn new() -> Self {
        Self {
            word: AtomicU64::new(0),
            since: AtomicU64::new(0),
            epoch: Instant::now(),
        }
    }

    /// Publishes `doing`, keeping the start time if it is already what is published (a wait
    /// that spins out again after some progress is still the same wait).
    #[cold]
    pub(crate) fn begin(&self, doing: Doing) {
        let word = doing.pack();
        if self.word.load(Ordering::Relaxed) == word {
            return;
        }
        // Cleared first, so a reader never pairs the new word with the old time.
        self.word.store(0, Ordering::Relaxed);
        self.since
            .store(self.epoch.elapsed().as_nanos() as u64, Ordering::Relaxed);
        // Release: the time above is visible to a reader that acquires this word.
        self.word.store(word, Ordering::Release);
    }

    /// The long wait is over.
    #[cold]
    pub(crate) fn end(&self) {
        // Only where something was published: a short wait leaves the line as it was.
        if self.word.load(Ordering::Relaxed) != 0 {
            self.word.store(0, Ordering::Release);
        }
    }

    /// What is published and for how long it has been, read consistently.
    pub(crate) fn read(&self) -> (Doing, std::time::Duration) {
        loop {
            // Acquire: pairs with the release in `begin`, so `since` is this word's.
            let word = self.word.load(Ordering::Acquire);
            let since = self.since.load(Ordering::Relaxed);
            if self.word.load(Ordering::Acquire) != word {
                continue;
            }
            let now = self.epoch.elapsed().as_nanos() as u64;
            let age = std::time::Duration::from_nanos(now.saturating_sub(since));
            return (Doing::unpack(word), age);
        }
    }
}

/// Ends a published long wait when dropped (also when a handler's panic unwinds through it).
pub(crate) struct LongWait<'a>(pub(crate) &'a Activity);

impl Drop for LongWait<'_> {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_survives_packing() {
        for d in [
            Doing::Nothing,
            Doing::Wait,
            Doing::Finalize,
            Doing::Barrier {
                round: 3,
                from: 70_000,
            },
            Doing::SendBlocked {
                peer: 5,
                ch: Channel::Reply,
            },
            Doing::SendBlocked {
                peer: u32::MAX - 1,
                ch: Channel::Request,
            },
        ] {
            assert_eq!(Doing::unpack(d.pack()), d);
        }
    }

    #[test]
    fn a_republished_wait_keeps_its_start() {
        let a = Activity::new();
        a.begin(Doing::Wait);
        std::thread::sleep(std::time::Duration::from_millis(20));
        a.begin(Doing::Wait);
        let (d, age) = a.read();
        assert_eq!(d, Doing::Wait);
        assert!(age >= std::time::Duration::from_millis(20));
        a.end();
        assert_eq!(a.read().0, Doing::Nothing);
    }
}
