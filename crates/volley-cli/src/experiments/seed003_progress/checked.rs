//! E4: the unchecked fast path against a "checked" send that makes one system call per
//! send, the cost the seed's operating-system trap puts on every message.
//!
//! The system call is an 8-byte `write` to an `eventfd` this rank owns, made before the
//! packet goes into the buffer. It is the smallest honest kernel check: the kernel validates
//! the descriptor (the right to send) and copies the word from a user address it validates
//! (the seed's "outgoing messages are checked for valid addresses"), then returns. A futex
//! wake with no sleeper would enter the kernel too but checks nothing of the message. The
//! strided rows send 16 elements per packet (seed 003 §6.2's answer to the trap: amortise
//! it over a block), so the checked one pays one call per 16 elements.

use super::{Words, DONE};
use serde::{Deserialize, Serialize};
use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::time::Instant;
use volley_prim::{Dest, Info, Prim, Recv, Source};

/// Elements per strided packet.
const BLOCK: usize = 16;

/// E4's figures (ns per element sent).
#[derive(Debug, Default, Clone, Serialize, Deserialize)]
pub(super) struct Figures {
    /// One 8-byte packet per send, no system call.
    pub fast_ns: f64,
    /// The same with an `eventfd` write per send.
    pub checked_ns: f64,
    /// The `eventfd` write alone, in a loop (the trap's price here).
    pub syscall_ns: f64,
    /// Strided packets of 16 elements, per element, no system call.
    pub strided_fast_ns: f64,
    /// The same with one `eventfd` write per packet.
    pub strided_checked_ns: f64,
    /// checked / fast.
    pub checked_over_fast: f64,
}

impl Figures {
    pub(super) fn named(&self) -> Vec<(&'static str, f64)> {
        vec![
            ("E4 fast", self.fast_ns),
            ("E4 checked", self.checked_ns),
            ("E4 syscall", self.syscall_ns),
            ("E4 strided fast", self.strided_fast_ns),
            ("E4 strided checked", self.strided_checked_ns),
        ]
    }
}

pub(super) fn medians(reps: &[Figures]) -> Figures {
    let m = |f: fn(&Figures) -> f64| crate::bench::median_present(reps.iter().map(f));
    let mut out = Figures {
        fast_ns: m(|f| f.fast_ns),
        checked_ns: m(|f| f.checked_ns),
        syscall_ns: m(|f| f.syscall_ns),
        strided_fast_ns: m(|f| f.strided_fast_ns),
        strided_checked_ns: m(|f| f.strided_checked_ns),
        checked_over_fast: 0.0,
    };
    out.checked_over_fast = out.checked_ns / out.fast_ns;
    out
}

/// An eventfd of this process, closed when dropped.
struct EventFd(libc::c_int);

impl EventFd {
    fn new() -> Result<Self, String> {
        // SAFETY: plain system call; the result is checked.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(format!("eventfd: {}", std::io::Error::last_os_error()));
        }
        Ok(Self(fd))
    }

    /// The per-send kernel check: one 8-byte write. Adds 1 to the counter, which cannot
    /// overflow in any run (it would take 2^64 sends).
    #[inline(never)]
    fn trap(&self) -> bool {
        let one = 1u64;
        // SAFETY: `one` is 8 readable bytes on this frame; the fd is open while `self` is.
        let n = unsafe { libc::write(self.0, &one as *const u64 as *const libc::c_void, 8) };
        n == 8
    }
}

impl Drop for EventFd {
    fn drop(&mut self) {
        // SAFETY: our own descriptor, closed once.
        unsafe { libc::close(self.0) };
    }
}

/// How the sender sends in one phase.
#[derive(Clone, Copy, PartialEq)]
enum Phase {
    Fast,
    Checked,
    StridedFast,
    StridedChecked,
}

/// One phase: `elems` values 0.. from rank 0 to rank 1, which checks each; ns per element,
/// from the first send to rank 1's flag.
fn phase(
    p: &Prim,
    w: &Words,
    efd: &EventFd,
    how: Phase,
    elems: u64,
    failures: &mut Vec<String>,
) -> Result<f64, String> {
    let e = |e: volley_prim::PrimError| e.to_string();
    let strided = matches!(how, Phase::StridedFast | Phase::StridedChecked);
    let per = if strided { BLOCK as u64 } else { 1 };
    let packets = elems / per;
    let done = w.at(0, DONE);
    if p.rank() == 0 {
        done.store(0, Ordering::Release);
    }
    p.runtime().barrier();
    let start = Instant::now();
    if p.rank() == 0 {
        let mut traps_ok = true;
        let mut base = [0u64; 2 * BLOCK];
        for k in 0..packets {
            if matches!(how, Phase::Checked | Phase::StridedChecked) {
                traps_ok &= efd.trap();
            }
            if strided {
                for j in 0..BLOCK {
                    base[2 * j] = k * per + j as u64;
                    base[2 * j + 1] = u64::MAX;
                }
                // SAFETY: viewing initialized u64s as bytes.
                let bytes = unsafe {
                    std::slice::from_raw_parts(base.as_ptr() as *const u8, base.len() * 8)
                };
                p.send_strided(Dest::Rank(1), bytes, 8, 16, BLOCK, false)
                    .map_err(e)?;
            } else {
                p.send(Dest::Rank(1), Info::Data(&k.to_le_bytes()), false)
                    .map_err(e)?;
            }
        }
        if !traps_ok {
            failures.push("E4: an eventfd write failed".into());
        }
        while done.load(Ordering::Acquire) == 0 {
            std::hint::spin_loop();
        }
    } else {
        let mut buf = [0u8; 8 * BLOCK];
        let len = 8 * per as usize;
        let mut next = 0u64;
        for _ in 0..packets {
            p.receive(Source::Network, Recv::Data(&mut buf[..len]))
                .map_err(e)?;
            for c in buf[..len].chunks_exact(8) {
                let v = u64::from_le_bytes(c.try_into().expect("8 bytes"));
                if v != next && failures.len() < 4 {
                    failures.push(format!("E4: element {next} came as {v}"));
                }
                next += 1;
            }
        }
        done.store(1, Ordering::Release);
    }
    let ns = start.elapsed().as_nanos() as f64 / (packets * per) as f64;
    p.runtime().barrier();
    Ok(ns)
}

/// E4 on both ranks (rank 0's figures count).
pub(super) fn measure(
    p: &Prim,
    w: &Words,
    iters: u64,
    failures: &mut Vec<String>,
) -> Result<Figures, String> {
    let efd = EventFd::new()?;
    let elems = iters.next_multiple_of(BLOCK as u64);
    let mut f = Figures {
        fast_ns: phase(p, w, &efd, Phase::Fast, elems, failures)?,
        checked_ns: phase(p, w, &efd, Phase::Checked, elems, failures)?,
        strided_fast_ns: phase(p, w, &efd, Phase::StridedFast, elems, failures)?,
        strided_checked_ns: phase(p, w, &efd, Phase::StridedChecked, elems, failures)?,
        ..Figures::default()
    };
    let start = Instant::now();
    for _ in 0..iters {
        efd.trap();
    }
    f.syscall_ns = start.elapsed().as_nanos() as f64 / iters as f64;
    f.checked_over_fast = f.checked_ns / f.fast_ns;
    Ok(f)
}

pub(super) fn table(t: &mut String, f: &Figures) {
    let _ = writeln!(
        t,
        "E4 checked (one eventfd write per send) against the fast path; ns per element, stream"
    );
    for (name, v) in [
        ("fast: 8-byte packet, no system call", f.fast_ns),
        ("checked: 8-byte packet + eventfd write", f.checked_ns),
        ("the eventfd write alone", f.syscall_ns),
        ("strided x16, fast", f.strided_fast_ns),
        ("strided x16, checked (1 call / 16)", f.strided_checked_ns),
    ] {
        let _ = writeln!(t, "  {name:<42} {v:>8.0}");
    }
    let _ = writeln!(t, "  checked / fast {:.2}", f.checked_over_fast);
}
