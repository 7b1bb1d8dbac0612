//! The split completion counter (seed 004 §4.2.2, requirement D13): the issuing thread counts
//! what it starts, the agent that completes operations (a reply handler, run by the program's
//! thread or by the progress thread) counts what finished. Each half has one writer and its
//! own cache line, so neither writer ever waits for the other's line; the number outstanding
//! is their difference, computed wrapping.

#[cfg(loom)]
use loom::sync::atomic::{AtomicU64, Ordering};
#[cfg(not(loom))]
use std::sync::atomic::{AtomicU64, Ordering};

/// One 64-byte line per half.
#[repr(align(64))]
#[derive(Debug, Default)]
struct Line(AtomicU64);

/// Issue and completion counts of one rank's split-phase operations.
#[derive(Debug, Default)]
pub struct SplitCounter {
    issued: Line,
    completed: Line,
}

impl SplitCounter {
    /// A counter with nothing outstanding.
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts `n` operations started. Only the issuing thread calls this.
    #[inline]
    pub fn issue(&self, n: u64) {
        // One writer: a load and a store, no locked instruction.
        let v = self.issued.0.load(Ordering::Relaxed);
        self.issued.0.store(v.wrapping_add(n), Ordering::Relaxed);
    }

    /// Takes back `n` operations counted by [`SplitCounter::issue`] that were never started
    /// (their send failed). Only the issuing thread calls this.
    pub fn unissue(&self, n: u64) {
        let v = self.issued.0.load(Ordering::Relaxed);
        self.issued.0.store(v.wrapping_sub(n), Ordering::Relaxed);
    }

    /// Counts one operation finished, after its effects (a get's data) are written. Called
    /// by the completing agent: the handlers of one rank never run two at a time, so this half
    /// has one writer at any moment, but that writer may be either thread, so it is a
    /// read-modify-write.
    #[inline]
    pub fn complete(&self) {
        // Release: the data written before it is visible to whoever sees the count.
        self.completed.0.fetch_add(1, Ordering::Release);
    }

    /// Operations started and not finished (wrap-around safe).
    #[inline]
    pub fn outstanding(&self) -> u64 {
        // Acquire: pairs with `complete`, so a zero here means every completed operation's
        // data is visible.
        let done = self.completed.0.load(Ordering::Acquire);
        self.issued.0.load(Ordering::Relaxed).wrapping_sub(done)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn the_difference_survives_wrap_around() {
        let c = SplitCounter::new();
        c.issued.0.store(u64::MAX - 1, Ordering::Relaxed);
        c.completed.0.store(u64::MAX - 1, Ordering::Relaxed);
        c.issue(3);
        assert_eq!(c.outstanding(), 3);
        c.complete();
        c.complete();
        assert_eq!(c.outstanding(), 1);
        c.unissue(1);
        assert_eq!(c.outstanding(), 0);
    }

    #[test]
    fn halves_sit_on_separate_lines() {
        let c = SplitCounter::new();
        let a = &c.issued as *const Line as usize;
        let b = &c.completed as *const Line as usize;
        assert!(a.abs_diff(b) >= 64 && a % 64 == 0 && b % 64 == 0);
    }

    /// ~10^7 operations: this thread issues, another completes (as the progress thread
    /// does), each completion publishing a value the issuer then checks; nothing is lost.
    #[test]
    fn ten_million_operations_with_a_completing_thread_lose_nothing() {
        use std::sync::atomic::AtomicU64 as Data;
        use std::sync::Arc;
        const N: u64 = 10_000_000;
        let c = Arc::new(SplitCounter::new());
        let data = Arc::new(Data::new(0));
        let requests = Arc::new(Data::new(0));
        let agent = {
            let (c, data, requests) = (c.clone(), data.clone(), requests.clone());
            std::thread::spawn(move || {
                let mut served = 0;
                while served < N {
                    let want = requests.load(Ordering::Acquire);
                    while served < want {
                        served += 1;
                        data.store(served, Ordering::Relaxed);
                        c.complete();
                    }
                    std::hint::spin_loop();
                }
            })
        };
        let mut issued = 0;
        while issued < N {
            // Bursts of up to 64 outstanding, then sync.
            let burst = 64.min(N - issued);
            c.issue(burst);
            issued += burst;
            requests.store(issued, Ordering::Release);
            while c.outstanding() != 0 {
                std::hint::spin_loop();
            }
            assert_eq!(data.load(Ordering::Relaxed), issued, "sync saw stale data");
        }
        agent.join().unwrap();
        assert_eq!(c.outstanding(), 0);
    }
}

#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    /// The issuer starts two operations; an agent completes them, writing a result first.
    /// Whenever the issuer sees nothing outstanding, it sees both results.
    #[test]
    fn loom_split_counter_zero_outstanding_means_every_result_is_visible() {
        loom::model(|| {
            let c = Arc::new(SplitCounter::new());
            let results = Arc::new([AtomicU64::new(0), AtomicU64::new(0)]);
            c.issue(2);
            let agent = {
                let (c, results) = (c.clone(), results.clone());
                loom::thread::spawn(move || {
                    for r in results.iter() {
                        r.store(1, Ordering::Relaxed);
                        c.complete();
                    }
                })
            };
            if c.outstanding() == 0 {
                assert!(results.iter().all(|r| r.load(Ordering::Relaxed) == 1));
            }
            agent.join().unwrap();
            assert_eq!(c.outstanding(), 0);
            assert!(results.iter().all(|r| r.load(Ordering::Relaxed) == 1));
        });
    }
}
