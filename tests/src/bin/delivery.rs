//! Switching delivery phase by phase: `delivery [thread|no-thread]`.
//!
//! `thread` (every rank has a progress thread; at least 2 ranks): four phases, polling,
//! asynchronous, polling, asynchronous. In each, rank 1 tells rank 0 it starts computing (one
//! way), then computes without a runtime call; rank 0, told, pokes rank 1 (the poke carries
//! the monotonic clock at its sending) and waits for the answer. Rank 1 computes for a second in a polling phase, where no handler may run meanwhile (and the
//! poke must have been sent before the second ended, or the phase proves nothing), and until
//! the handler has run in an asynchronous one (failing after 30 s). Then rank 1 polls and the
//! poke is served. Prints `delivery: rank R ok`.
//!
//! `no-thread`: without a progress thread a rank polls; asking for asynchronous delivery is
//! an error and changes nothing.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::am::Error;
use volley::{Delivery, Runtime};
use volley_tests::{arg_str, fail, join};

fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes the timespec we pass; CLOCK_MONOTONIC is system-wide, so
    // two processes of one host compare their readings.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn main() {
    let mode = arg_str(0).unwrap_or_else(|| "thread".into());
    let handled = Arc::new(AtomicU64::new(0));
    let sent_at = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let told = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let t = told.clone();
    let go = b.request_handler("delivery-go", move |_, _| {
        t.fetch_add(1, Ordering::Release);
    });
    b.progress_thread(mode == "thread");
    let a = acked.clone();
    let ack = b.reply_handler("delivery-ack", move |_| {
        a.fetch_add(1, Ordering::Release);
    });
    let (h, s) = (handled.clone(), sent_at.clone());
    let poke = b.request_handler("delivery-poke", move |m, token| {
        s.store(m.args()[0], Ordering::Relaxed);
        h.fetch_add(1, Ordering::Release);
        token.reply_short(ack, &[]).expect("answer the poke");
    });
    let rt = join(b);
    let me = rt.rank();
    match mode.as_str() {
        "thread" => phases(&rt, [go, poke], &handled, &sent_at, [&told, &acked]),
        "no-thread" => {
            if rt.delivery() != Delivery::Polling {
                fail(me, 1, "delivery: a rank without a thread does not poll");
            }
            rt.set_delivery(Delivery::Polling)
                .expect("polling without a thread");
            match rt.set_delivery(Delivery::Asynchronous) {
                Err(Error::InvalidConfig {
                    name: "delivery", ..
                }) => {}
                other => fail(
                    me,
                    1,
                    &format!("delivery: asynchronous without a thread gave {other:?}"),
                ),
            }
            if rt.delivery() != Delivery::Polling {
                fail(me, 1, "delivery: a refused switch changed the delivery");
            }
            rt.barrier();
        }
        other => fail(me, 2, &format!("delivery: unknown mode {other:?}")),
    }
    println!("delivery: rank {me} ok");
}

fn phases(
    rt: &Runtime,
    [go, poke]: [volley::RequestHandler; 2],
    handled: &AtomicU64,
    sent_at: &AtomicU64,
    [told, acked]: [&AtomicU64; 2],
) {
    let me = rt.rank();
    if rt.size() < 2 {
        fail(me, 2, "delivery: needs at least 2 ranks");
    }
    if rt.delivery() != Delivery::Asynchronous {
        fail(
            me,
            1,
            "delivery: a rank with a progress thread starts asynchronous",
        );
    }
    let phases = [
        Delivery::Polling,
        Delivery::Asynchronous,
        Delivery::Polling,
        Delivery::Asynchronous,
    ];
    for (round, phase) in phases.into_iter().enumerate() {
        rt.set_delivery(phase).expect("switch delivery");
        if rt.delivery() != phase {
            fail(
                me,
                1,
                &format!("delivery: asked for {phase:?}, got {:?}", rt.delivery()),
            );
        }
        rt.barrier();
        match me {
            0 => {
                rt.wait_until(|| told.load(Ordering::Acquire) > round as u64);
                rt.request_short(1, poke, &[monotonic_ns()])
                    .expect("poke rank 1");
                rt.wait_until(|| acked.load(Ordering::Acquire) > round as u64);
            }
            1 => {
                let before = handled.load(Ordering::Acquire);
                // The last runtime call before computing: the poke is sent after it.
                rt.request_short(0, go, &[]).expect("tell rank 0");
                // Over the network the message may wait for the next call: send it now.
                rt.flush();
                let t = Instant::now();
                let limit = match phase {
                    Delivery::Polling => Duration::from_secs(1),
                    Delivery::Asynchronous => Duration::from_secs(30),
                };
                // Computing: no runtime call in this loop.
                let mut ran = false;
                while t.elapsed() < limit {
                    if handled.load(Ordering::Acquire) != before {
                        ran = true;
                        break;
                    }
                    std::hint::spin_loop();
                }
                let compute_end = monotonic_ns();
                match phase {
                    Delivery::Polling if ran => fail(
                        me,
                        1,
                        &format!("delivery: a handler ran while rank 1 computed in polling phase {round}"),
                    ),
                    Delivery::Asynchronous if !ran => fail(
                        me,
                        1,
                        &format!("delivery: no handler ran in 30 s of computing in asynchronous phase {round}"),
                    ),
                    _ => {}
                }
                rt.wait_until(|| handled.load(Ordering::Acquire) > before);
                if phase == Delivery::Polling && sent_at.load(Ordering::Relaxed) >= compute_end {
                    fail(
                        me,
                        1,
                        &format!("delivery: the poke of polling phase {round} left only after the computing ended (the machine is too loaded for this check)"),
                    );
                }
            }
            _ => {}
        }
        rt.barrier();
    }
}
