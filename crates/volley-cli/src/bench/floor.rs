//! The machine's floor for a round trip between two processes: one cache line bounced between
//! two cores, measured exactly like `shared/peers/limits.c` (fork, pin to CPUs 0 and 1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

#[repr(C, align(64))]
struct Line {
    v: AtomicU64,
    _pad: [u64; 7],
}

/// Round-trip time of one cache line between two processes on the first two CPUs this process
/// may use, in ns (median of `reps` runs). Must be called before the process starts any thread
/// (it forks).
pub fn cacheline_rtt_ns(iters: u64, reps: usize) -> Result<f64, String> {
    let cpus = crate::affinity::allowed_cpus();
    if cpus.len() < 2 {
        return Err(format!(
            "the floor needs two CPUs to bounce a cache line between, this process may use {}",
            cpus.len()
        ));
    }
    let saved = crate::affinity::current();
    let mut samples = Vec::with_capacity(reps);
    for _ in 0..reps {
        // SAFETY: a fresh anonymous shared mapping of one page, unmapped below; fork shares it.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        assert_ne!(
            mem,
            libc::MAP_FAILED,
            "mmap for the floor measurement failed"
        );
        // SAFETY: the page is zeroed (valid atomics) and large enough for two lines.
        let lines = unsafe { std::slice::from_raw_parts(mem.cast::<Line>(), 2) };
        // SAFETY: called before any thread exists; the child only spins on atomics and exits.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0, "fork failed");
        if pid == 0 {
            crate::affinity::pin(cpus[1]);
            for i in 1..=iters {
                while lines[0].v.load(Ordering::Acquire) != i {
                    std::hint::spin_loop();
                }
                lines[1].v.store(i, Ordering::Release);
            }
            // SAFETY: leave the child without running the parent's atexit handlers.
            unsafe { libc::_exit(0) };
        }
        crate::affinity::pin(cpus[0]);
        let warm = (iters / 10).max(1);
        let mut t0 = Instant::now();
        for i in 1..=iters {
            if i == warm {
                t0 = Instant::now();
            }
            lines[0].v.store(i, Ordering::Release);
            while lines[1].v.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        }
        // Round trips warm..=iters were timed.
        let ns = t0.elapsed().as_nanos() as f64 / (iters - warm + 1) as f64;
        // SAFETY: reaping our own child; unmapping our own mapping after it exited.
        unsafe {
            libc::waitpid(pid, std::ptr::null_mut(), 0);
            libc::munmap(mem, 4096);
        }
        samples.push(ns);
    }
    crate::affinity::restore(&saved);
    Ok(super::median(&mut samples))
}
