//! Futex wait and wake on a 32-bit atomic: the kernel sleep behind doorbells and the
//! progress thread's naps.

use std::sync::atomic::AtomicU32;
use std::time::Duration;

/// Who can see the word: `Shared` for words in memory that several processes map (doorbells),
/// `Private` for words of this process only (cheaper in the kernel).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Scope {
    /// In a mapping shared between processes.
    Shared,
    /// In this process's own memory.
    Private,
}

impl Scope {
    fn flag(self) -> libc::c_int {
        match self {
            Scope::Shared => 0,
            Scope::Private => libc::FUTEX_PRIVATE_FLAG,
        }
    }
}

/// Sleeps while `word` holds `expected`, until woken or `timeout` passes. Returns at once if
/// the word already differs; spurious returns are possible, so callers recheck.
pub(crate) fn wait(word: &AtomicU32, expected: u32, timeout: Option<Duration>, scope: Scope) {
    let ts = timeout.map(|t| libc::timespec {
        tv_sec: t.as_secs().min(libc::time_t::MAX as u64) as libc::time_t,
        tv_nsec: t.subsec_nanos() as libc::c_long,
    });
    let ts_ptr = ts
        .as_ref()
        .map_or(std::ptr::null(), |t| t as *const libc::timespec);
    // SAFETY: `word` is a live, aligned 32-bit atomic that outlives the call; the timeout,
    // when given, points at a timespec on this stack frame. FUTEX_WAIT reads nothing else.
    // Its errors (EAGAIN: the word moved; EINTR; ETIMEDOUT) all mean "recheck".
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAIT | scope.flag(),
            expected,
            ts_ptr,
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}

/// Wakes every thread sleeping on `word`.
pub(crate) fn wake_all(word: &AtomicU32, scope: Scope) {
    // SAFETY: `word` is a live, aligned 32-bit atomic; FUTEX_WAKE only uses its address.
    unsafe {
        libc::syscall(
            libc::SYS_futex,
            word.as_ptr(),
            libc::FUTEX_WAKE | scope.flag(),
            i32::MAX,
            std::ptr::null::<libc::timespec>(),
            std::ptr::null::<u32>(),
            0u32,
        );
    }
}
