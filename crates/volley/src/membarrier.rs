//! `membarrier(2)`: a full memory barrier run on other CPUs on our behalf, so that the fast
//! side of a Dekker-style handshake needs only a compiler barrier and the rare side pays a
//! system call instead.
//!
//! Two scopes are used: *global* (every CPU running a thread of any registered process: the
//! shared-memory doorbell, whose senders are other processes) and *private* (every CPU running
//! a thread of this process: the engine lease between a rank thread and its progress thread).
//! Each must be registered once per process before use; registration fails where the kernel
//! or a seccomp filter does not offer it, and callers then fall back to fences on both sides.

use std::sync::OnceLock;

const CMD_QUERY: libc::c_int = 0;
const CMD_GLOBAL_EXPEDITED: libc::c_int = 1 << 1;
const CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_int = 1 << 2;
const CMD_PRIVATE_EXPEDITED: libc::c_int = 1 << 3;
const CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_int = 1 << 4;

fn membarrier(cmd: libc::c_int) -> libc::c_long {
    // SAFETY: membarrier takes a command and flags (0) and touches no memory of ours.
    unsafe {
        libc::syscall(
            libc::SYS_membarrier,
            cmd,
            0 as libc::c_uint,
            0 as libc::c_int,
        )
    }
}

/// Registers `register` once (cached per process) if the kernel offers `cmd`.
fn register(cell: &OnceLock<bool>, cmd: libc::c_int, register: libc::c_int) -> bool {
    *cell.get_or_init(|| {
        let want = cmd | register;
        let offered = membarrier(CMD_QUERY);
        offered >= 0 && offered as libc::c_int & want == want && membarrier(register) == 0
    })
}

/// Registers this process for [`global`] barriers; false where they are not offered.
pub(crate) fn register_global() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    register(
        &REGISTERED,
        CMD_GLOBAL_EXPEDITED,
        CMD_REGISTER_GLOBAL_EXPEDITED,
    )
}

/// Registers this process for [`private`] barriers; false where they are not offered.
pub(crate) fn register_private() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    register(
        &REGISTERED,
        CMD_PRIVATE_EXPEDITED,
        CMD_REGISTER_PRIVATE_EXPEDITED,
    )
}

/// A full barrier on every CPU running a thread of a process registered with
/// [`register_global`], and on this thread. Call only after a successful registration.
pub(crate) fn global() {
    let r = membarrier(CMD_GLOBAL_EXPEDITED);
    assert!(r == 0, "membarrier failed after a successful registration");
}

/// A full barrier on every CPU running a thread of this process, and on this thread. Call
/// only after [`register_private`] succeeded.
pub(crate) fn private() {
    let r = membarrier(CMD_PRIVATE_EXPEDITED);
    assert!(r == 0, "membarrier failed after a successful registration");
}
