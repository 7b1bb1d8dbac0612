//! The machine's floor for a round trip between two processes: one cache line bounced between
//! two cores, measured exactly like `shared/peers/limits.c` (fork, pin to CPUs 0 and 1); and
//! beside it the bare ring reference ([`bare_ping`]), the least any ring Active Message costs.
//! For the network transports, two processes forked and pinned the same way bounce a message
//! over raw loopback sockets ([`socket_rtt_ns`], on [`volley::transport::net::floor`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// The two cache lines a floor ping-pong bounces: `ping` written by the measuring side,
/// `pong` by the echoing side.
#[repr(C, align(64))]
pub struct Line {
    v: AtomicU64,
    _pad: [u64; 7],
}

/// Measuring side of the ping-pong: `iters` round trips numbered after `base` (both sides use
/// the same numbers, so consecutive ping-pongs on one pair of lines continue the count).
/// Returns ns per round trip, the first tenth excluded as warm-up.
pub fn ping(lines: &[Line; 2], base: u64, iters: u64) -> f64 {
    let warm = (iters / 10).max(1);
    let mut t0 = Instant::now();
    for i in base + 1..=base + iters {
        if i == base + warm {
            t0 = Instant::now();
        }
        lines[0].v.store(i, Ordering::Release);
        while lines[1].v.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
    }
    // Round trips warm..=iters were timed.
    t0.elapsed().as_nanos() as f64 / (iters - warm + 1) as f64
}

/// Echoing side of [`ping`] with the same `base` and `iters`.
pub fn echo(lines: &[Line; 2], base: u64, iters: u64) {
    for i in base + 1..=base + iters {
        while lines[0].v.load(Ordering::Acquire) != i {
            std::hint::spin_loop();
        }
        lines[1].v.store(i, Ordering::Release);
    }
}

/// A pair of lines in a memory file that the benchmark's ranks inherit (by descriptor number,
/// in [`SharedLines::ENV`]), so that the two rank processes can measure the floor between
/// themselves, on their own CPUs, interleaved with what they measure (a forked child shares
/// them too, as in [`cacheline_rtt_ns`]). A memory file leaves nothing behind however the job
/// ends. The bare ring reference's rings follow the two lines in the same file
/// ([`SharedLines::bare`]).
pub struct SharedLines {
    fd: libc::c_int,
    lines: *const [Line; 2],
}

impl SharedLines {
    /// The variable that names the descriptor in a rank's environment.
    pub const ENV: &'static str = "VOLLEY_BENCH_FLOOR_FD";
    /// The lines and the bare rings in the first page, then the copy ping-pong's two lines
    /// and its two buffers (pages are committed only where a copy touches them).
    const LEN: usize = COPY_BUFFERS_AT + 2 * COPY_BYTES;

    /// Creates the memory file, inheritable by the ranks (no close-on-exec).
    pub fn create() -> Result<Self, String> {
        // SAFETY: a NUL-terminated name and no flags; the result is checked.
        let fd = unsafe { libc::memfd_create(c"volley-bench-floor".as_ptr(), 0) };
        if fd < 0 {
            return Err(format!(
                "memfd_create for the floor's lines: {}",
                std::io::Error::last_os_error()
            ));
        }
        // SAFETY: sizing the file we just created.
        if unsafe { libc::ftruncate(fd, Self::LEN as libc::off_t) } != 0 {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing our own descriptor.
            unsafe { libc::close(fd) };
            return Err(format!("sizing the floor's lines: {e}"));
        }
        Self::map(fd)
    }

    /// Maps the lines a rank inherited, if the benchmark passed them.
    pub fn inherited() -> Result<Option<Self>, String> {
        let Some(v) = std::env::var_os(Self::ENV) else {
            return Ok(None);
        };
        let fd: libc::c_int = v
            .to_str()
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("{} is not a descriptor number: {v:?}", Self::ENV))?;
        Self::map(fd).map(Some)
    }

    fn map(fd: libc::c_int) -> Result<Self, String> {
        // SAFETY: a fresh shared mapping of the file's whole length; unmapped in Drop.
        let mem = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                Self::LEN,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            )
        };
        if mem == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            // SAFETY: closing the descriptor we were given and will not use again.
            unsafe { libc::close(fd) };
            return Err(format!("mapping the floor's lines: {e}"));
        }
        Ok(Self {
            fd,
            lines: mem.cast(),
        })
    }

    /// The descriptor, for the ranks' environment.
    pub fn fd(&self) -> libc::c_int {
        self.fd
    }

    /// The two lines.
    pub fn lines(&self) -> &[Line; 2] {
        // SAFETY: the mapping is page-aligned, 4096 bytes (two lines fit), zero-filled (valid
        // atomics) and lives as long as `self`.
        unsafe { &*self.lines }
    }

    /// The rings of the bare Active Message reference, after the two lines.
    pub fn bare(&self) -> &BareRings {
        const _: () = assert!(2 * 64 + std::mem::size_of::<BareRings>() <= SharedLines::LEN);
        // SAFETY: the rings start at byte 128 of the mapping (64-byte aligned) and end inside
        // it (checked above); zero-filled memory is valid atomics; the mapping lives as long
        // as `self`.
        unsafe { &*self.lines.cast::<u8>().add(2 * 64).cast::<BareRings>() }
    }
}

/// Slots per direction of the bare reference's rings.
const BARE_SLOTS: usize = 16;

/// One slot of a bare ring: a header word (the message's number and handler) and one argument.
#[repr(C, align(64))]
pub struct BareSlot {
    header: AtomicU64,
    arg: AtomicU64,
}

/// The two rings of the bare reference: requests from the measuring side, replies back.
#[repr(C)]
pub struct BareRings {
    requests: [BareSlot; BARE_SLOTS],
    replies: [BareSlot; BARE_SLOTS],
}

/// A bare ring's handlers: boxed closures by index, as a runtime's table holds them.
type BareTable<'a> = [Box<dyn Fn(u64, u64) + 'a>];

impl BareRings {
    /// Publishes message `n` (numbered from 0, never reused) for handler `handler` with `arg`.
    #[inline(always)]
    fn send(ring: &[BareSlot; BARE_SLOTS], n: u64, handler: u64, arg: u64) {
        let slot = &ring[n as usize % BARE_SLOTS];
        slot.arg.store(arg, Ordering::Relaxed);
        // Release: the argument is visible to whoever acquires the header.
        slot.header.store((n + 1) << 8 | handler, Ordering::Release);
    }

    /// Waits for message `n` of `ring` and runs its handler from `table` (through the table,
    /// so that the call is indirect like a runtime's) with the message's number and argument.
    #[inline(always)]
    fn receive(ring: &[BareSlot; BARE_SLOTS], n: u64, table: &BareTable<'_>) {
        let slot = &ring[n as usize % BARE_SLOTS];
        loop {
            let h = slot.header.load(Ordering::Acquire);
            if h >> 8 == n + 1 {
                let handler = table
                    .get((h & 0xff) as usize)
                    .expect("bare ring: handler index out of range");
                handler(n, slot.arg.load(Ordering::Relaxed));
                return;
            }
            std::hint::spin_loop();
        }
    }
}

/// Measuring side of the bare Active Message reference: `iters` short requests, each answered
/// by a short reply, through one-line slots of two rings, each message's handler called through
/// a table of boxed closures. The least an Active Message round trip over shared-memory rings
/// can cost on this machine: no runtime around it (no checks, no statistics, no credit, one
/// ring per direction). Messages are numbered after `base`, as in [`ping`]. Returns ns per
/// round trip, the first tenth excluded as warm-up.
pub fn bare_ping(rings: &BareRings, base: u64, iters: u64) -> f64 {
    let replies = std::cell::Cell::new(0u64);
    let table: Vec<Box<dyn Fn(u64, u64) + '_>> =
        vec![Box::new(|_, arg| replies.set(replies.get() + arg))];
    let table = std::hint::black_box(&table[..]);
    let warm = (iters / 10).max(1);
    let mut t0 = Instant::now();
    for n in base..base + iters {
        if n == base + warm {
            t0 = Instant::now();
        }
        BareRings::send(&rings.requests, n, 0, 1);
        BareRings::receive(&rings.replies, n, table);
    }
    let ns = t0.elapsed().as_nanos() as f64 / (iters - warm) as f64;
    assert_eq!(replies.get(), iters, "bare ring: a reply was lost");
    ns
}

/// Answering side of [`bare_ping`] with the same `base` and `iters`.
pub fn bare_echo(rings: &BareRings, base: u64, iters: u64) {
    let table: Vec<Box<dyn Fn(u64, u64) + '_>> = vec![Box::new(|n, arg| {
        BareRings::send(&rings.replies, n, 0, arg);
    })];
    let table = std::hint::black_box(&table[..]);
    for n in base..base + iters {
        BareRings::receive(&rings.requests, n, table);
    }
}

/// Bytes each copy of the memcpy ping-pong moves (the long round trip's size).
pub const COPY_BYTES: usize = 1 << 20;
/// Where the copy ping-pong's two lines lie in the memory file.
const COPY_LINES_AT: usize = 4096;
/// Where its two buffers start.
const COPY_BUFFERS_AT: usize = 8192;

impl SharedLines {
    /// The copy ping-pong's lines and its two buffers (`a`: written by the measuring side,
    /// `b`: by the answering side).
    fn copy_parts(&self) -> (&[Line; 2], *mut u8, *mut u8) {
        let base = self.lines.cast::<u8>().cast_mut();
        // SAFETY: both lines and both buffers lie inside the mapping (LEN covers them), the
        // lines 64-byte aligned and zero-filled at creation (valid atomics); the mapping
        // lives as long as `self`.
        unsafe {
            let lines = &*base.add(COPY_LINES_AT).cast::<[Line; 2]>();
            let a = base.add(COPY_BUFFERS_AT);
            (lines, a, a.add(COPY_BYTES))
        }
    }

    /// Measuring side of the memcpy ping-pong, the data movement of a long Active Message
    /// round trip with no runtime around it: this side copies `src` (`COPY_BYTES`, a buffer of
    /// its own) into buffer `a` and publishes the round's number; the other side
    /// ([`SharedLines::copy_echo`]) copies `a` into `b` and answers. Rounds are numbered after
    /// `base`, as in [`ping`]. Returns ns per round trip (two copies of `COPY_BYTES` between
    /// the two CPUs), the first tenth excluded as warm-up.
    pub fn copy_ping(&self, src: &[u8], base: u64, iters: u64) -> f64 {
        assert_eq!(
            src.len(),
            COPY_BYTES,
            "copy_ping: the source is one copy's size"
        );
        let (lines, a, _) = self.copy_parts();
        let warm = (iters / 10).max(1);
        let mut t0 = Instant::now();
        for i in base + 1..=base + iters {
            if i == base + warm {
                t0 = Instant::now();
            }
            // SAFETY: `a` holds COPY_BYTES bytes of the mapping; the answering side reads it
            // only between our release of round i and its answer, while we wait.
            unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), a, COPY_BYTES) };
            lines[0].v.store(i, Ordering::Release);
            while lines[1].v.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
        }
        t0.elapsed().as_nanos() as f64 / (iters - warm + 1) as f64
    }

    /// Answering side of [`SharedLines::copy_ping`] with the same `base` and `iters`.
    pub fn copy_echo(&self, base: u64, iters: u64) {
        let (lines, a, b) = self.copy_parts();
        for i in base + 1..=base + iters {
            while lines[0].v.load(Ordering::Acquire) != i {
                std::hint::spin_loop();
            }
            // SAFETY: both buffers hold COPY_BYTES bytes of the mapping and do not overlap;
            // the measuring side does not write `a` until we answer, and only we write `b`.
            unsafe { std::ptr::copy_nonoverlapping(a, b, COPY_BYTES) };
            lines[1].v.store(i, Ordering::Release);
        }
    }
}

/// One process copying `COPY_BYTES` between two buffers of its own, `iters` times after a
/// tenth as warm-up: GB/s.
pub fn memcpy_gbps(iters: u64) -> f64 {
    COPY_BYTES as f64 / memcpy_ns(COPY_BYTES, iters)
}

/// Nanoseconds per copy of `bytes` between two buffers of this process (hot in its caches
/// after the warm-up), over `iters` copies.
///
/// The buffers are placed half a page apart modulo 4 KiB: on this machine's CPUs glibc's
/// `rep movsb` copy runs about 15 times slower when the destination lies just above the
/// source modulo 4 KiB (64 KiB: 34 µs instead of 2.2 µs), which two equal heap allocations
/// often do; the floor is memcpy's ordinary speed.
pub fn memcpy_ns(bytes: usize, iters: u64) -> f64 {
    let src_buf = vec![5u8; bytes + 4096];
    let mut dst_buf = vec![0u8; bytes + 8192];
    let src_at = src_buf.as_ptr().align_offset(4096);
    let dst_at = dst_buf.as_ptr().align_offset(4096) + 2048;
    let src = &src_buf[src_at..src_at + bytes];
    let dst = &mut dst_buf[dst_at..dst_at + bytes];
    for _ in 0..(iters / 10).max(1) {
        dst.copy_from_slice(std::hint::black_box(src));
    }
    let t0 = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(std::hint::black_box(src));
        std::hint::black_box(&mut *dst);
    }
    t0.elapsed().as_nanos() as f64 / iters.max(1) as f64
}

impl Drop for SharedLines {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping (no reference outlives `self`) and closing our
        // descriptor.
        unsafe {
            libc::munmap(self.lines as *mut libc::c_void, Self::LEN);
            libc::close(self.fd);
        }
    }
}

/// Round-trip time of one cache line between two processes on the first two CPUs this process
/// may use, in ns (median of `reps` runs). It forks; the child only pins itself, spins on
/// atomics and `_exit`s (no allocation, no lock), so threads left by an earlier job are no
/// hazard.
pub fn cacheline_rtt_ns(iters: u64, reps: usize) -> Result<f64, String> {
    let cpus = crate::affinity::allowed_cpus();
    if cpus.len() < 2 {
        return Err(format!(
            "the floor needs two CPUs to bounce a cache line between, this process may use {}",
            cpus.len()
        ));
    }
    forked_median(
        "the cache-line floor",
        reps,
        (Some(cpus[0]), Some(cpus[1])),
        // Fresh lines for each run; the child shares the mapping across fork.
        SharedLines::create,
        |shared| echo(shared.lines(), 0, iters),
        |shared| Ok(ping(shared.lines(), 0, iters)),
    )
}

/// One hand-off of a core between two processes pinned to the same CPU (the first this process
/// may use), in ns (median of `reps` runs): they pass a counter through a cache line, each
/// yielding its core (`sched_yield`) until the other has answered, so every step is one
/// switch from one process to the other. The least a rank sharing its core gives up each time
/// it must let its core-mate run, whatever the runtime. Forks, like [`cacheline_rtt_ns`].
pub fn handoff_ns(iters: u64, reps: usize) -> Result<f64, String> {
    let Some(&cpu) = crate::affinity::allowed_cpus().first() else {
        return Err("the hand-off floor needs a CPU this process may use".into());
    };
    let iters = iters.max(10);
    forked_median(
        "the hand-off floor",
        reps,
        (Some(cpu), Some(cpu)),
        SharedLines::create,
        |shared| {
            let lines = shared.lines();
            for i in 1..=iters {
                while lines[0].v.load(Ordering::Acquire) != i {
                    std::thread::yield_now();
                }
                lines[1].v.store(i, Ordering::Release);
            }
        },
        |shared| {
            let lines = shared.lines();
            let warm = iters / 10;
            let mut t0 = Instant::now();
            for i in 1..=iters {
                if i == warm + 1 {
                    t0 = Instant::now();
                }
                lines[0].v.store(i, Ordering::Release);
                while lines[1].v.load(Ordering::Acquire) != i {
                    std::thread::yield_now();
                }
            }
            // Each timed round trip is two hand-offs: to the child and back.
            Ok(t0.elapsed().as_nanos() as f64 / (2 * (iters - warm)) as f64)
        },
    )
}

/// `reps` runs of a measurement between this process and a forked child, named `what` in
/// errors: each run makes a fresh `state`, forks a child that pins itself to the second CPU
/// of `cpus` (if any), runs `child` on the state and exits, pins this process to the first
/// (if any) and measures with `parent`; the child is reaped and this process's affinity mask
/// restored however the run ends. Returns the median. `child` must neither allocate nor take
/// a lock: this process may have threads.
fn forked_median<S>(
    what: &str,
    reps: usize,
    cpus: (Option<usize>, Option<usize>),
    mut state: impl FnMut() -> Result<S, String>,
    child: impl Fn(&mut S),
    mut parent: impl FnMut(&mut S) -> Result<f64, String>,
) -> Result<f64, String> {
    let saved = crate::affinity::current();
    let mut samples = Vec::with_capacity(reps);
    let mut run = || -> Result<(), String> {
        for _ in 0..reps {
            let mut s = state()?;
            let pid = std::process::id();
            // SAFETY: the child only pins itself, runs `child` (no allocation, no lock) and
            // exits, so threads of this process are no hazard.
            let child_pid = unsafe { libc::fork() };
            if child_pid < 0 {
                return Err(format!("{what}: fork failed"));
            }
            if child_pid == 0 {
                die_with_parent(pid);
                if let Some(c) = cpus.1 {
                    crate::affinity::pin(c);
                }
                child(&mut s);
                // SAFETY: leave the child without running the parent's atexit handlers.
                unsafe { libc::_exit(0) };
            }
            if let Some(c) = cpus.0 {
                crate::affinity::pin(c);
            }
            let measured = parent(&mut s);
            // Dropped before the reaping: a child still reading its end sees this side close.
            drop(s);
            // SAFETY: reaping our own child.
            unsafe { libc::waitpid(child_pid, std::ptr::null_mut(), 0) };
            samples.push(measured?);
        }
        Ok(())
    };
    let result = run();
    crate::affinity::restore(&saved);
    result.map(|()| super::median(&mut samples))
}

/// In a forked floor child: dies with the bench process (whose pid was `parent` before the
/// fork), so that a bench killed mid-measurement leaves no child spinning on a CPU.
fn die_with_parent(parent: u32) {
    // SAFETY: prctl with an integer signal number has no memory effects; getppid and _exit
    // are async-signal-safe, as a forked child of a possibly threaded process needs.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
        // The parent may have died before the prctl took effect.
        if libc::getppid() as u32 != parent {
            libc::_exit(1);
        }
    }
}

pub use volley::transport::net::floor::SocketFloor;

/// Round-trip time of a `size`-byte message bounced over loopback sockets
/// ([`volley::transport::net::floor`]) between two processes pinned like the ranks, in ns
/// (median of `reps` runs). Must be called before the process starts any thread (it forks).
pub fn socket_rtt_ns(
    kind: SocketFloor,
    size: usize,
    iters: u64,
    reps: usize,
) -> Result<f64, String> {
    use volley::transport::net::floor;
    let cpus = crate::affinity::allowed_cpus();
    forked_median(
        "network floor",
        reps,
        (cpus.first().copied(), cpus.get(1).copied()),
        // Both ends exist before the fork; each process drives one.
        || floor::pair(kind, size).map_err(|e| format!("network floor: sockets: {e}")),
        // An error means the measuring side went away: nothing left to answer.
        |(_, b)| {
            let _ = b.echo(iters);
        },
        |(a, _)| {
            a.ping(iters).map_err(|e| match e.kind() {
                std::io::ErrorKind::UnexpectedEof => {
                    "network floor: the echoing process went away".to_string()
                }
                _ => format!("network floor: round trip: {e}"),
            })
        },
    )
}

/// GB/s of a stream of 1 MiB messages over raw loopback sockets
/// ([`volley::transport::net::stream_floor`]) from one process to another, pinned like the
/// ranks (median of `reps` runs of `count` messages). Must be called before the process starts
/// any thread (it forks).
pub fn socket_stream_gbps(kind: SocketFloor, count: u64, reps: usize) -> Result<f64, String> {
    use volley::transport::net::stream_floor;
    let cpus = crate::affinity::allowed_cpus();
    forked_median(
        "network stream floor",
        reps,
        (cpus.first().copied(), cpus.get(1).copied()),
        || {
            stream_floor::stream_pair(kind)
                .map(|(a, b)| (a, Some(b)))
                .map_err(|e| format!("network stream floor: sockets: {e}"))
        },
        // An error means the sending side went away: nothing left to take.
        |(_, b)| {
            if let Some(b) = b {
                let _ = b.sink(count);
            }
        },
        |(a, b)| {
            // This process's copy of the receiving end goes before the stream starts.
            drop(b.take());
            a.stream(count)
                .map_err(|e| format!("network stream floor: {e}"))
        },
    )
}
