//! The CPUs this process may run on, for `--bind` and the benchmark's floor measurement.

use std::mem::{size_of, zeroed};

/// An affinity mask saved to be restored later.
pub struct SavedMask(libc::cpu_set_t);

/// The CPUs in this process's affinity mask, in increasing order.
pub fn allowed_cpus() -> Vec<usize> {
    let mask = current();
    // SAFETY: CPU_ISSET reads the set we own; the index is below CPU_SETSIZE.
    (0..libc::CPU_SETSIZE as usize)
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &mask.0) })
        .collect()
}

/// The current mask.
pub fn current() -> SavedMask {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; sched_getaffinity fills it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::sched_getaffinity(0, size_of::<libc::cpu_set_t>(), &mut set);
        SavedMask(set)
    }
}

/// Restores a saved mask.
pub fn restore(mask: &SavedMask) {
    // SAFETY: passing a valid set by reference.
    unsafe {
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &mask.0);
    }
}

/// Pins the calling thread's process to one CPU. Async-signal-safe (used between fork and
/// exec). Returns false if the kernel refused.
pub fn pin(cpu: usize) -> bool {
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes inside it.
    unsafe {
        let mut set: libc::cpu_set_t = zeroed();
        libc::CPU_SET(cpu, &mut set);
        libc::sched_setaffinity(0, size_of::<libc::cpu_set_t>(), &set) == 0
    }
}
