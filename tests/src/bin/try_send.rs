//! Non-blocking sends: `try_send [short|medium|long]`, on two ranks (ranks 2.. only take part
//! in the barriers).
//!
//! Phase 1, nothing half-sent: rank 1 stays out of the runtime (it waits for a file that
//! rank 0 creates, so it neither polls nor acknowledges) while rank 0 try-sends numbered
//! messages to it until one comes back [`Error::WouldBlock`] (a full ring or no free medium
//! buffer, a full UDP window, a full TCP send queue); then rank 1 polls, and rank 0 goes on
//! for `EXTRA` more messages, after each would-block waiting with `wait_sendable`, after
//! which the same send must go at once. Rank 1 checks that it handled exactly the messages
//! that went, once each and in order, with intact payloads. A long message first tried at
//! offset A(k) and refused is retried at B(k) (and vice versa is never needed): at the end the
//! place no delivered message named must still be zero, so a refused long wrote nothing.
//!
//! Phase 2, no handler inside a try-send: rank 1 floods rank 0 with blocking requests while
//! rank 0 alternates try-sends to rank 1 with polls; rank 0's handler sets a flag if it ever
//! runs while a try-send is in progress. At the end the flag is unset, rank 0 handled the whole
//! flood and rank 1 handled exactly the try-sends that went.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use volley::am::Error;
use volley::{MessageClass, Runtime};
use volley_tests::{arg_str, check_pattern, fail, fill_pattern, join, mix};

/// Messages after the first would-block.
const EXTRA: u64 = 300;
/// Most messages in phase 1 before a would-block (a long message's places must stay within
/// half the segment: see `max_phase1`). TCP takes tens of megabytes (the kernel's socket
/// buffers) before it refuses.
const MAX_PHASE1: u64 = 10_000_000;
/// A long message's payload, and its place's stride.
const LONG_LEN: usize = 4096;
/// Requests rank 1 floods rank 0 with in phase 2.
const FLOOD: u64 = 20_000;

/// Payload length of medium message `k`: inline in the ring, or through a medium buffer.
fn medium_len(k: u64) -> usize {
    match k % 3 {
        0 => 40,
        1 => 3000,
        _ => 9000,
    }
}

fn payload_len(class: MessageClass, k: u64) -> usize {
    match class {
        MessageClass::Short => 0,
        MessageClass::Medium => medium_len(k),
        MessageClass::Long => LONG_LEN,
    }
}

fn payload(class: MessageClass, k: u64) -> Vec<u8> {
    let mut v = vec![0u8; payload_len(class, k)];
    fill_pattern(mix(k), &mut v);
    v
}

/// Where long message `k` lands when first tried (`retried` false) or retried.
fn long_offset(k: u64, retried: bool, segment_len: usize) -> usize {
    let half = segment_len / 2;
    k as usize * LONG_LEN + if retried { half } else { 0 }
}

/// The file rank 0 creates once it has seen a would-block (rank 1 polls only then).
fn signal_path(job: u64) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("volley-try-send-{job:016x}"))
}

#[derive(Default)]
struct State {
    /// Rank 1: phase-1 messages handled (the next one expected).
    received: AtomicU64,
    /// Rank 1: per phase-1 message, 1 + whether it came at its retry place (long only).
    landed: std::sync::Mutex<Vec<u8>>,
    /// Rank 1: the phase-1 total rank 0 announced (u64::MAX: not yet).
    total: AtomicU64,
    /// Rank 1: phase-2 try-sends handled; rank 0: flood requests handled.
    handled2: AtomicU64,
    /// Rank 1: phase-2 total announced (u64::MAX: not yet).
    total2: AtomicU64,
    /// Rank 0: a try-send is in progress.
    in_try: AtomicBool,
    /// Rank 0: a handler ran while a try-send was in progress.
    ran_inside: AtomicBool,
}

fn main() {
    let class = match arg_str(0).as_deref() {
        None | Some("short") => MessageClass::Short,
        Some("medium") => MessageClass::Medium,
        Some("long") => MessageClass::Long,
        Some(other) => fail(0, 2, &format!("unknown class {other:?}")),
    };
    let st = Arc::new(State {
        total: AtomicU64::new(u64::MAX),
        total2: AtomicU64::new(u64::MAX),
        ..State::default()
    });
    let mut b = Runtime::builder();
    let data = {
        let st = st.clone();
        b.request_handler("try-data", move |m, _| {
            let k = m.arg(0);
            let expect = st.received.load(Ordering::Relaxed);
            assert_eq!(
                k, expect,
                "try_send: message {k} arrived when {expect} was expected"
            );
            if let Some(pos) = check_pattern(mix(k), m.payload()) {
                panic!("try_send: message {k}: payload byte {pos} is corrupt");
            }
            assert_eq!(m.payload().len(), payload_len(m.class(), k));
            st.landed.lock().unwrap().push(1 + m.arg(1) as u8);
            st.received.store(k + 1, Ordering::Relaxed);
        })
    };
    let total = {
        let st = st.clone();
        b.request_handler("try-total", move |m, _| {
            st.total.store(m.arg(0), Ordering::Relaxed);
            st.total2.store(m.arg(1), Ordering::Relaxed);
        })
    };
    let noop = {
        let st = st.clone();
        b.request_handler("try-noop", move |m, _| {
            let k = m.arg(0);
            let expect = st.handled2.load(Ordering::Relaxed);
            assert_eq!(
                k, expect,
                "try_send: try-send {k} arrived when {expect} was expected"
            );
            st.handled2.store(k + 1, Ordering::Relaxed);
        })
    };
    let flood = {
        let st = st.clone();
        b.request_handler("try-flood", move |_, _| {
            if st.in_try.load(Ordering::Relaxed) {
                st.ran_inside.store(true, Ordering::Relaxed);
            }
            st.handled2.fetch_add(1, Ordering::Relaxed);
        })
    };
    let rt = join(b);
    let rank = rt.rank();
    if rt.size() < 2 {
        fail(rank, 2, "try_send needs at least 2 ranks");
    }
    let signal = signal_path(rt.job_id());
    let segment_len = rt.segment_len();
    let max_phase1 = match class {
        MessageClass::Long => (segment_len / 2 / LONG_LEN) as u64 - EXTRA,
        _ => MAX_PHASE1,
    };

    // Phase 1.
    rt.barrier();
    if rank == 0 {
        let mut k = 0u64;
        let mut blocked = 0u64;
        let mut first_block = None;
        while first_block.is_none_or(|f| k < f + EXTRA) {
            if first_block.is_none() && k >= max_phase1 {
                fail(
                    rank,
                    1,
                    &format!("try_send: {k} messages went without a would-block"),
                );
            }
            let p = payload(class, k);
            let args = [k, 0];
            let sent = match class {
                MessageClass::Short => rt.try_request_short(1, data, &args),
                MessageClass::Medium => rt.try_request_medium(1, data, &args, &p),
                MessageClass::Long => {
                    let offset = long_offset(k, false, segment_len);
                    rt.try_request_long(1, data, &args, &p, offset)
                }
            };
            match sent {
                Ok(()) => k += 1,
                Err(Error::WouldBlock { rank: 1, channel }) => {
                    assert_eq!(channel, "request");
                    blocked += 1;
                    if first_block.is_none() {
                        first_block = Some(k);
                        std::fs::write(&signal, b"go").expect("try_send: writing the signal");
                    }
                    rt.wait_sendable(1, class, p.len()).expect("wait_sendable");
                    assert!(
                        rt.sendable(1, class, p.len()).unwrap(),
                        "try_send: not sendable after wait_sendable"
                    );
                    // Nothing ran in between, so the same send must go now.
                    let again = match class {
                        MessageClass::Short => rt.try_request_short(1, data, &[k, 1]),
                        MessageClass::Medium => rt.try_request_medium(1, data, &[k, 1], &p),
                        MessageClass::Long => {
                            let offset = long_offset(k, true, segment_len);
                            rt.try_request_long(1, data, &[k, 1], &p, offset)
                        }
                    };
                    if let Err(e) = again {
                        fail(rank, 1, &format!("try_send: {k} after wait_sendable: {e}"));
                    }
                    k += 1;
                }
                Err(e) => fail(rank, 1, &format!("try_send: message {k}: {e}")),
            }
        }
        eprintln!(
            "try_send {class:?}: {k} messages, first would-block after {}, {blocked} would-blocks",
            first_block.unwrap()
        );
        // Phase 2: rank 1 floods; try-send between polls, never running a handler inside.
        rt.barrier();
        let mut went = 0u64;
        let mut refused = 0u64;
        while st.handled2.load(Ordering::Relaxed) < FLOOD {
            for _ in 0..4 {
                st.in_try.store(true, Ordering::Relaxed);
                let sent = rt.try_request_short(1, noop, &[went]);
                st.in_try.store(false, Ordering::Relaxed);
                match sent {
                    Ok(()) => went += 1,
                    Err(Error::WouldBlock { .. }) => refused += 1,
                    Err(e) => fail(rank, 1, &format!("try_send phase 2: {e}")),
                }
            }
            rt.poll();
        }
        if st.ran_inside.load(Ordering::Relaxed) {
            fail(rank, 1, "try_send: a handler ran inside a try-send");
        }
        eprintln!("try_send phase 2: {went} try-sends went, {refused} would-block");
        rt.request_short(1, total, &[k, went]).unwrap();
        rt.barrier();
        let _ = std::fs::remove_file(&signal);
    } else if rank == 1 {
        // Out of the runtime until rank 0 has seen a would-block.
        while !signal.exists() {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        // Rank 0's phase-1 messages all come before its barrier notice (one FIFO channel).
        rt.barrier();
        for k in 0..FLOOD {
            rt.request_short(0, flood, &[k]).unwrap();
        }
        rt.wait_until(|| st.total.load(Ordering::Relaxed) != u64::MAX);
        let (n1, n2) = (
            st.total.load(Ordering::Relaxed),
            st.total2.load(Ordering::Relaxed),
        );
        rt.wait_until(|| st.handled2.load(Ordering::Relaxed) >= n2);
        let received = st.received.load(Ordering::Relaxed);
        assert_eq!(
            received, n1,
            "try_send: rank 1 handled {received} of {n1} messages"
        );
        assert_eq!(st.handled2.load(Ordering::Relaxed), n2);
        if class == MessageClass::Long {
            let landed = st.landed.lock().unwrap();
            let mut buf = vec![0u8; LONG_LEN];
            for (k, &how) in landed.iter().enumerate() {
                // The place the delivered message did not name: never written.
                let other = long_offset(k as u64, how == 1, segment_len);
                rt.read_segment(other, &mut buf).unwrap();
                if let Some(pos) = buf.iter().position(|&b| b != 0) {
                    fail(
                        1,
                        1,
                        &format!("try_send: a refused long {k} wrote byte {pos} at {other}"),
                    );
                }
            }
        }
        eprintln!("try_send: rank 1 handled {received} + {n2} messages, exactly");
        rt.barrier();
    } else {
        rt.barrier();
        rt.barrier();
    }
}
