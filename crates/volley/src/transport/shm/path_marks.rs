//! Marks at the ends of the two critical paths of a short round trip, for
//! `scripts/count-instructions`.
//!
//! A round trip's latency is the two cache-line transfers plus what each side executes between
//! seeing a frame and publishing its answer: the responder from a request's header to its
//! reply's publish, the requester from the reply's header to the next request's publish.
//! Everything else (retiring slots, statistics, the rest of a poll) overlaps the transfers.
//! With the `path-marks` feature, [`mark`] switches valgrind's
//! instruction counting (callgrind's collection) on and off at those ends, for the side named
//! by `VOLLEY_PATH_MARKS` (`responder` or `requester`; `empty` counts the marks' own cost).
//! Outside valgrind the marks are a few register rotations; without the feature they are
//! nothing.

use crate::transport::Channel;

/// The points a path runs between.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Point {
    /// A poll saw a frame's header at the head of a ring (first point of a path): what the
    /// drain does before it reads the frame is on the path.
    Seen,
    /// A short frame was published (last point of a path).
    Published,
}

/// Marks `point` on channel `ch`.
#[inline(always)]
pub(crate) fn mark(ch: Channel, point: Point) {
    #[cfg(all(feature = "path-marks", target_arch = "x86_64"))]
    marks::mark(ch, point);
    #[cfg(not(all(feature = "path-marks", target_arch = "x86_64")))]
    let _ = (ch, point);
}

#[cfg(all(feature = "path-marks", target_arch = "x86_64"))]
mod marks {
    use super::Point;
    use crate::transport::Channel;
    use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};

    /// Which path is counted: 0 not yet read, 1 none, otherwise 2 + the channel its first
    /// frame arrives on (2: the responder's or the empty one, 3: the requester's).
    static FIRST: AtomicU8 = AtomicU8::new(0);
    /// Counting an empty path (the marks' own cost): a request seen ends its path at once.
    static EMPTY: AtomicBool = AtomicBool::new(false);
    /// Whether collection is on (marks come from the thread that runs handlers).
    static COUNTING: AtomicBool = AtomicBool::new(false);

    #[cold]
    #[inline(never)]
    fn read_setting() {
        let first = match std::env::var("VOLLEY_PATH_MARKS").as_deref() {
            Ok("responder") => 2 + Channel::Request as u8,
            Ok("requester") => 2 + Channel::Reply as u8,
            Ok("empty") => {
                EMPTY.store(true, Ordering::Relaxed);
                2 + Channel::Request as u8
            }
            Ok(other) => panic!(
                "VOLLEY_PATH_MARKS must be \"responder\", \"requester\" or \"empty\", \
                 not {other:?}"
            ),
            Err(_) => 1,
        };
        FIRST.store(first, Ordering::Relaxed);
    }

    /// Inlined, so that a mark disturbs the code around it as little as possible.
    #[inline(always)]
    pub(super) fn mark(ch: Channel, point: Point) {
        let first = FIRST.load(Ordering::Relaxed);
        if first <= 1 {
            if first == 0 {
                read_setting();
            }
            return;
        }
        // The path starts with a frame seen on the first channel and ends with a publish on
        // the other: a request seen, its reply published; a reply seen, the next request
        // published.
        let on_first = 2 + ch as u8 == first;
        let start = point == Point::Seen && on_first;
        let end = point == Point::Published && !on_first;
        let counting = COUNTING.load(Ordering::Relaxed);
        if (start && !counting) || (end && counting) {
            COUNTING.store(!counting, Ordering::Relaxed);
            toggle_collection();
            if start && EMPTY.load(Ordering::Relaxed) {
                COUNTING.store(false, Ordering::Relaxed);
                toggle_collection();
            }
        }
    }

    /// valgrind's client request CALLGRIND_TOGGLE_COLLECT: a no-op sequence of rotations
    /// (3 + 13 + 61 + 51 = 128 bits) that valgrind recognises and acts on.
    #[inline(always)]
    fn toggle_collection() {
        const TOGGLE_COLLECT: u64 = (b'C' as u64) << 24 | (b'T' as u64) << 16 | 2;
        let request: [u64; 6] = [TOGGLE_COLLECT, 0, 0, 0, 0, 0];
        // SAFETY: the rotations leave rdi as it was and `xchg rbx, rbx` changes nothing, so
        // natively this is a no-op; under valgrind it reads the six words at rax (alive for
        // the whole block) and writes its answer to rdx, which is declared clobbered.
        unsafe {
            std::arch::asm!(
                "rol rdi, 3", "rol rdi, 13", "rol rdi, 61", "rol rdi, 51", "xchg rbx, rbx",
                inout("rdx") 0u64 => _,
                in("rax") request.as_ptr(),
                inout("rdi") 0u64 => _,
                options(nostack),
            );
        }
    }
}
