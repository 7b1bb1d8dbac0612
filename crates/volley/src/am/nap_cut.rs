//! Cutting the progress thread's nap short after the rank thread's long wait: the request
//! and the nap it must cut, alone so that the loom model checks the same code.

use crate::sync;

/// The rank thread's request that the progress thread's next nap be the shortest, and the
/// nap under way that the request must cut: a Dekker pair (each side stores, fences, then
/// loads the other's word), so either the napper sees the request before it sleeps or the
/// requester sees the nap and kicks it. Plain loads and stores, no read-modify-write: a
/// request that lands between the progress thread's load and its clearing store asks for
/// what the one it consumes already gives (the shortest nap).
#[derive(Debug, Default)]
pub(crate) struct NapCut {
    /// The length in microseconds of the nap under way while the rank thread is inside (0:
    /// none); written by the progress thread.
    napping_us: sync::AtomicU32,
    /// The rank thread ended a long wait since the progress thread last looked. Set by the
    /// rank thread, cleared by the progress thread.
    requested: sync::AtomicBool,
}

impl NapCut {
    /// The rank thread asks for the shortest nap; true if a nap longer than `min_us` is under
    /// way and must be cut.
    pub(crate) fn request(&self, min_us: u32) -> bool {
        if !self.requested.load(sync::Ordering::Relaxed) {
            self.requested.store(true, sync::Ordering::Relaxed);
        }
        sync::fence(sync::Ordering::SeqCst);
        self.napping_us.load(sync::Ordering::Relaxed) > min_us
    }

    /// The progress thread is about to nap `us` microseconds: returns the nap to take (`min_us`
    /// if a request came in) and whether to sleep at all (not if a request came in after the
    /// nap was published).
    pub(crate) fn begin(&self, us: u32, min_us: u32) -> (u32, bool) {
        let us = if self.take() { min_us } else { us };
        self.napping_us.store(us, sync::Ordering::Relaxed);
        sync::fence(sync::Ordering::SeqCst);
        (us, !self.requested.load(sync::Ordering::Relaxed))
    }

    /// The nap is over: whether a request came in meanwhile (the next nap is the shortest).
    pub(crate) fn end(&self) -> bool {
        self.napping_us.store(0, sync::Ordering::Relaxed);
        self.take()
    }

    /// Whether a nap is under way.
    #[cfg(test)]
    pub(crate) fn is_napping(&self) -> bool {
        self.napping_us.load(sync::Ordering::Relaxed) != 0
    }

    /// Consumes a pending request.
    fn take(&self) -> bool {
        let asked = self.requested.load(sync::Ordering::Relaxed);
        if asked {
            self.requested.store(false, sync::Ordering::Relaxed);
        }
        asked
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    const MIN: u32 = 50;
    const LONG: u32 = 4000;

    /// A long nap is never slept through a request: either the napper sees the request
    /// before it sleeps, or the requester sees the nap under way and kicks it.
    #[test]
    fn loom_nap_cut_never_sleeps_through_a_request() {
        loom::model(|| {
            let cut = Arc::new(NapCut::default());
            let rank = {
                let cut = cut.clone();
                loom::thread::spawn(move || cut.request(MIN))
            };
            let (us, sleep) = cut.begin(LONG, MIN);
            let kicked = rank.join().unwrap();
            assert!(
                !(sleep && us > MIN && !kicked),
                "slept {us} µs through a request"
            );
        });
    }

    /// No request is lost across a whole nap: the napper took it (a short nap, or seen at the
    /// nap's end) or it waits for the next nap.
    #[test]
    fn loom_nap_cut_loses_no_request() {
        loom::model(|| {
            let cut = Arc::new(NapCut::default());
            let rank = {
                let cut = cut.clone();
                loom::thread::spawn(move || cut.request(MIN))
            };
            let (us, _) = cut.begin(LONG, MIN);
            let taken = cut.end();
            rank.join().unwrap();
            let pending = cut.requested.load(sync::Ordering::Relaxed);
            assert!(us == MIN || taken || pending, "a request was lost");
        });
    }
}
