//! Futex wait and wake on a 32-bit word in memory shared between processes: the kernel
//! wake-up behind the `interrupt` progress mode.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Sleeps while `word` holds `expected`, at most `timeout`. Spurious returns happen; callers
/// recheck. Returns whether the word had changed or a wake ended the sleep (not the timeout
/// or a signal).
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Duration) -> bool {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs() as libc::time_t,
        tv_nsec: timeout.subsec_nanos() as libc::c_long,
    };
    // SAFETY: `word` is a live aligned 32-bit atomic for the call; `ts` is on this frame.
    // Every error (EAGAIN, EINTR, ETIMEDOUT) means "recheck", which the caller does.
    let r = unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT,
            expected,
            &ts as *const libc::timespec,
            std::ptr::null::<u32>(),
            0u32,
        )
    };
    r == 0 || std::io::Error::last_os_error().raw_os_error() == Some(libc::EAGAIN)
}

/// Wakes every process sleeping on `word`.
pub(crate) fn wake(word: &AtomicU32) {
    // SAFETY: `word` is a live aligned 32-bit atomic; FUTEX_WAKE only uses its address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE,
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
