//! `interrupt` mode between nodes (`volley-prim`, seed 003 item 4): a blocked receive sleeps
//! in the kernel until a packet arrives, not on a timeout. Rank 0 receives `ROUNDS` one-packet
//! messages from every other rank and acknowledges each; a sender sends its next message only
//! once it has seen rank 0's program thread blocked in `poll(2)`/`ppoll(2)` (read from
//! `/proc/PID/task/TID/syscall`: the socket and eventfd wait, not a futex with a timeout).
//! Checks every message arrives once, in per-sender order, and that rank 0's thread slept
//! (its voluntary context switches grew by at least `ROUNDS`). Rank 0 prints
//! `prim-wake: ok (...)`.

use std::process::exit;
use volley::Runtime;
use volley_prim::{Dest, Info, Prim, PrimConfig, Progress, Recv, Source};

const ROUNDS: u64 = 40;
/// Looks at rank 0's thread finding it blocked elsewhere before a sender gives up.
const BLOCKED_ELSEWHERE_LIMIT: u32 = 5000;

fn fail(what: String) -> ! {
    eprintln!("prim_wake: {what}");
    exit(1)
}

fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[8 * i..8 * i + 8].try_into().unwrap())
}

fn words(w: &[u64]) -> Vec<u8> {
    w.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// This thread's voluntary context switches (it blocked in the kernel).
fn own_voluntary_switches() -> u64 {
    std::fs::read_to_string("/proc/thread-self/status")
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap()
}

/// The system call thread `tid` of `pid` is blocked in, or `None` while it runs.
fn blocked_in(pid: u64, tid: u64) -> Option<i64> {
    let path = format!("/proc/{pid}/task/{tid}/syscall");
    let s = std::fs::read_to_string(&path).unwrap_or_else(|e| fail(format!("{path}: {e}")));
    s.split_whitespace().next()?.parse().ok()
}

fn is_poll(nr: i64) -> bool {
    #[cfg(target_arch = "x86_64")]
    if nr == libc::SYS_poll {
        return true;
    }
    nr == libc::SYS_ppoll
}

/// Waits until rank 0's program thread is blocked in `poll`/`ppoll`, serving this rank's
/// runtime meanwhile.
fn await_sleeper(p: &Prim, pid: u64, tid: u64) {
    let mut elsewhere = 0;
    loop {
        match blocked_in(pid, tid) {
            Some(nr) if is_poll(nr) => return,
            Some(nr) => {
                elsewhere += 1;
                if elsewhere >= BLOCKED_ELSEWHERE_LIMIT {
                    fail(format!(
                        "rank 0's receive was blocked in system call {nr}, never seen in \
                         poll or ppoll ({elsewhere} looks)"
                    ));
                }
            }
            None => {}
        }
        p.runtime().poll();
        std::thread::yield_now();
    }
}

fn receiver(p: &Prim) {
    // SAFETY: gettid has no preconditions.
    let tid = unsafe { libc::gettid() } as u64;
    let me = words(&[std::process::id() as u64, tid]);
    for r in 1..p.size() {
        p.send(Dest::Rank(r), Info::Data(&me), false).unwrap();
    }
    let before = own_voluntary_switches();
    let mut next = vec![0u64; p.size()];
    let mut buf = [0u8; 16];
    for _ in 0..ROUNDS * (p.size() as u64 - 1) {
        let got = p.receive(Source::Network, Recv::Data(&mut buf)).unwrap();
        let from = got
            .from
            .unwrap_or_else(|| fail("a packet without a sender".into()));
        let (origin, seq) = (u64_at(&buf, 0), u64_at(&buf, 1));
        if origin != from as u64 || seq != next[from] {
            fail(format!(
                "from rank {from}: origin {origin} seq {seq}, expected seq {}",
                next[from]
            ));
        }
        next[from] += 1;
        p.send(Dest::Rank(from), Info::Data(&seq.to_le_bytes()), false)
            .unwrap();
    }
    let slept = own_voluntary_switches() - before;
    if slept < ROUNDS {
        fail(format!("slept {slept} times for {ROUNDS} rounds"));
    }
    p.runtime().barrier();
    let mapped = (1..p.size()).filter(|&r| p.is_mapped(r)).count();
    println!(
        "prim-wake: ok ({} senders, {mapped} mapped, {ROUNDS} rounds each, {slept} voluntary \
         switches, {} sleeps)",
        p.size() - 1,
        p.stats().sleeps
    );
}

fn sender(p: &Prim) {
    let mut buf = [0u8; 16];
    p.receive(Source::Network, Recv::Data(&mut buf)).unwrap();
    let (pid, tid) = (u64_at(&buf, 0), u64_at(&buf, 1));
    let me = p.rank() as u64;
    for seq in 0..ROUNDS {
        await_sleeper(p, pid, tid);
        p.send(Dest::Rank(0), Info::Data(&words(&[me, seq])), false)
            .unwrap();
        let mut ack = [0u8; 8];
        p.receive(Source::Network, Recv::Data(&mut ack)).unwrap();
        if u64::from_le_bytes(ack) != seq {
            fail(format!("rank {me}: ack {ack:?} for {seq}"));
        }
    }
    p.runtime().barrier();
}

fn main() {
    let mut b = Runtime::builder();
    let setup = Prim::register(
        &mut b,
        PrimConfig::from_env()
            .unwrap()
            .progress(Progress::Interrupt),
    );
    let rt = b.build().unwrap();
    let p = setup.attach(&rt).unwrap();
    if p.size() < 2 {
        fail("needs 2 ranks or more".into());
    }
    if p.rank() == 0 {
        receiver(&p);
    } else {
        sender(&p);
    }
    drop(p);
    rt.finalize();
}
