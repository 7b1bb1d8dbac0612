//! Single-rank tests of the AM layer: the loopback path runs through the same rings and
//! dispatch as traffic between ranks.

use super::*;
use crate::am::error::Error;
use crate::transport::shm::frame::{FrameHeader, KIND_WORDS};
use crate::transport::shm::ring::MAX_HINTED_ARGS;
use crate::transport::Channel;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[test]
fn loopback_request_reply_runs_both_handlers() {
    let got = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let g = got.clone();
    let done = b.reply_handler("done", move |m| {
        g.store(m.arg(0) + m.arg(1), Ordering::Relaxed)
    });
    let add = b.request_handler("add", move |m, tok| {
        assert_eq!(tok.requester(), 0);
        tok.reply_short(done, &[m.arg(0), m.arg(1)]).unwrap();
    });
    let rt = b.build().unwrap();
    assert_eq!((rt.rank(), rt.size()), (0, 1));
    rt.request_short(0, add, &[40, 2]).unwrap();
    rt.wait_until(|| got.load(Ordering::Relaxed) != 0);
    assert_eq!(got.load(Ordering::Relaxed), 42);
    let s = rt.stats();
    assert_eq!(s.sent_on(Channel::Request), 1);
    assert_eq!(s.handled_on(Channel::Reply), 1);
    assert!(s.max_nesting <= 2);
}

#[test]
fn sender_refuses_bad_input_and_sends_nothing() {
    let mut b = Runtime::builder();
    let rep = b.reply_handler("r", |_| {});
    let req = b.request_handler("q", |_, _| {});
    let rt = b.build().unwrap();
    let bad_req = RequestHandler::from_index(1);
    assert!(matches!(
        rt.request_short(0, bad_req, &[]),
        Err(Error::UnknownHandler {
            index: 1,
            registered: 1,
            ..
        })
    ));
    assert!(matches!(
        rt.request_short(1, req, &[]),
        Err(Error::InvalidRank { rank: 1, size: 1 })
    ));
    assert!(matches!(
        rt.request_short(0, req, &[0; 17]),
        Err(Error::TooManyArgs { given: 17, max: 16 })
    ));
    let big = vec![0u8; rt.max_medium() + 1];
    assert!(matches!(
        rt.request_medium(0, req, &[], &big),
        Err(Error::PayloadTooLarge { .. })
    ));
    let seg = rt.segment_len();
    assert!(matches!(
        rt.request_long(0, req, &[], &[1, 2, 3], seg - 2),
        Err(Error::OutOfBounds { .. })
    ));
    assert!(matches!(
        rt.request_long(0, req, &[], &[1], usize::MAX),
        Err(Error::OutOfBounds { .. })
    ));
    let _ = rep;
    assert_eq!(rt.stats().sent_on(Channel::Request), 0);
    assert_eq!(rt.poll(), 0);
}

#[test]
fn duplicate_handler_name_is_refused() {
    let mut b = Runtime::builder();
    b.request_handler("x", |_, _| {});
    b.reply_handler("x", |_| {});
    assert!(matches!(b.build(), Err(Error::DuplicateHandler(n)) if n == "x"));
}

#[test]
fn corrupted_and_unknown_frames_are_dropped_and_counted() {
    let ran = Arc::new(AtomicUsize::new(0));
    let mut b = Runtime::builder();
    let r = ran.clone();
    let h = b.request_handler("h", move |_, _| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let rt = b.build().unwrap();
    let e = rt.engine();
    let key = e.shm().key();
    let valid = |handler: u16| {
        move |pos| {
            FrameHeader {
                handler,
                nargs: 1,
                kind: KIND_WORDS,
                nslots: 1,
            }
            .encode(pos, key)
        }
    };
    // A flipped check byte (corruption or another job's key).
    e.shm()
        .inject_raw(Channel::Request, |pos| valid(0)(pos) ^ (1 << 60), &[7]);
    // A well-formed frame naming a handler nobody registered.
    e.shm().inject_raw(Channel::Request, valid(9), &[7]);
    // A well-formed frame to an unknown reply handler.
    e.shm().inject_raw(Channel::Reply, valid(0), &[7]);
    // And a good one, which must still get through after the bad ones.
    e.shm().inject_raw(Channel::Request, valid(0), &[7]);
    rt.poll();
    assert_eq!(ran.load(Ordering::Relaxed), 1);
    assert_eq!(rt.stats().dropped, 3);
    // The runtime keeps working.
    rt.request_short(0, h, &[1]).unwrap();
    rt.wait_until(|| ran.load(Ordering::Relaxed) == 2);
}

#[test]
fn medium_and_long_payloads_arrive_intact_at_every_size() {
    let seen = Arc::new(Mutex::new(Vec::<(usize, u64, bool)>::new()));
    let mut b = Runtime::builder();
    let s = seen.clone();
    let check = move |m: &Message<'_>| {
        let p = m.payload();
        let ok = p.len() == m.arg(0) as usize
            && p.iter()
                .enumerate()
                .all(|(i, &x)| x == pattern(m.arg(1), i));
        s.lock().unwrap().push((p.len(), m.arg(1), ok));
    };
    let c1 = check.clone();
    let medium = b.request_handler("medium", move |m, _| c1(m));
    let long = b.request_handler("long", move |m, _| {
        assert_eq!(m.class(), MessageClass::Long);
        check(m)
    });
    let rt = b.build().unwrap();
    let mut sizes: Vec<usize> = (0..=8192).collect();
    sizes.push(rt.max_medium() - 1);
    sizes.push(rt.max_medium());
    for (n, &len) in sizes.iter().enumerate() {
        let data: Vec<u8> = (0..len).map(|i| pattern(n as u64, i)).collect();
        rt.request_medium(0, medium, &[len as u64, n as u64], &data)
            .unwrap();
        rt.request_long(0, long, &[len as u64, n as u64], &data, 3 + n % 61)
            .unwrap();
        // Long payloads share segment bytes: let each land before the next overwrites it.
        rt.wait_until(|| seen.lock().unwrap().len() == 2 * (n + 1));
    }
    rt.wait_until(|| seen.lock().unwrap().len() == 2 * sizes.len());
    let seen = seen.lock().unwrap();
    assert!(seen.iter().all(|&(_, _, ok)| ok), "a payload was corrupted");
    assert_eq!(rt.stats().dropped, 0);
}

fn pattern(seed: u64, i: usize) -> u8 {
    (seed as usize * 31 + i * 7 + (i >> 8)) as u8
}

#[test]
fn replies_nest_at_most_two_deep_and_medium_replies_work() {
    let sum = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let s = sum.clone();
    let echo_back = b.reply_handler("echo_back", move |m| {
        s.fetch_add(
            m.payload().iter().map(|&x| x as u64).sum::<u64>(),
            Ordering::Relaxed,
        );
    });
    let echo = b.request_handler("echo", move |m, tok| {
        tok.reply_medium(echo_back, &[], m.payload()).unwrap();
    });
    // Tiny rings force blocked sends and nested polling.
    let rt = {
        let mut b = b;
        b.ring_slots(8);
        b.build().unwrap()
    };
    let payload = vec![1u8; 300];
    for _ in 0..1000 {
        rt.request_medium(0, echo, &[], &payload).unwrap();
    }
    rt.wait_until(|| sum.load(Ordering::Relaxed) == 300_000);
    let st = rt.stats();
    assert!(st.max_nesting <= 2, "nesting {}", st.max_nesting);
    assert!(
        st.blocked_sends > 0,
        "tiny rings should have blocked some sends"
    );
}

#[test]
fn segment_access_is_bounds_checked() {
    let rt = Runtime::builder().build().unwrap();
    rt.write_segment(10, b"hello").unwrap();
    let mut buf = [0u8; 5];
    rt.read_segment(10, &mut buf).unwrap();
    assert_eq!(&buf, b"hello");
    let len = rt.segment_len();
    assert!(rt.read_segment(len - 4, &mut buf).is_err());
    assert!(rt.write_segment(usize::MAX, b"x").is_err());
}

/// A yield of one's own counts as the polite wait's do, and the rank is not marked away
/// after it.
#[test]
fn a_yield_of_the_core_is_counted_and_leaves_the_rank_running() {
    let rt = Runtime::builder().build().unwrap();
    let before = rt.stats().yields;
    for _ in 0..3 {
        rt.yield_core();
    }
    assert_eq!(rt.stats().yields - before, 3);
    assert!(rt.is_running(0), "still marked away after the yields");
}

#[test]
fn bad_ring_size_is_a_clear_error() {
    let mut b = Runtime::builder();
    b.ring_slots(100);
    let err = b.build().unwrap_err();
    assert!(err.to_string().contains("power of two"), "{err}");
}

#[test]
fn sends_after_finalize_are_refused() {
    let mut b = Runtime::builder();
    let h = b.request_handler("h", |_, _| {});
    let rt = b.build().unwrap();
    rt.finalize();
    assert!(matches!(rt.request_short(0, h, &[]), Err(Error::Finalized)));
    assert!(matches!(
        rt.request_medium(0, h, &[], b"x"),
        Err(Error::Finalized)
    ));
    rt.finalize(); // idempotent
}

/// Sends into a critical section, and checks that no handler ran inside it and that everything
/// ran in send order once it ended.
fn critical_section_defers_handlers(progress_thread: bool) {
    let inside = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Runtime::builder();
    b.progress_thread(progress_thread);
    let (i, s) = (inside.clone(), seen.clone());
    let note = b.request_handler("note", move |m, _| {
        assert!(
            !i.load(Ordering::Relaxed),
            "a handler ran inside a critical section"
        );
        s.lock().unwrap().push(m.arg(0));
    });
    let rt = b.build().unwrap();
    assert_eq!(rt.has_progress_thread(), progress_thread);
    let handled_before = rt.stats().handled_on(Channel::Request);
    let inner = rt.critical(|| {
        inside.store(true, Ordering::Relaxed);
        assert!(rt.in_critical());
        for k in 0..40 {
            // More than one ring drain and more than a few slots: sends poll for room.
            rt.request_short(0, note, &[k]).unwrap();
            assert_eq!(rt.poll(), 0, "poll ran handlers inside the section");
        }
        // Nested sections do not end the outer one.
        rt.critical(|| rt.request_short(0, note, &[40]).unwrap());
        // Time for a progress thread to try (and be held back).
        let t = Instant::now();
        while t.elapsed() < Duration::from_millis(20) {
            std::hint::spin_loop();
        }
        assert!(seen.lock().unwrap().is_empty());
        inside.store(false, Ordering::Relaxed);
        7
    });
    assert_eq!(inner, 7);
    assert!(!rt.in_critical());
    // Everything that arrived meanwhile ran when the section ended, in send order.
    assert_eq!(*seen.lock().unwrap(), (0..=40).collect::<Vec<u64>>());
    assert_eq!(rt.stats().handled_on(Channel::Request) - handled_before, 41);
}

#[test]
fn critical_section_defers_handlers_and_delivers_them_in_order_after() {
    critical_section_defers_handlers(false);
}

#[test]
fn critical_section_holds_back_the_progress_thread_too() {
    critical_section_defers_handlers(true);
}

#[test]
fn a_progress_thread_runs_handlers_while_the_program_computes() {
    let got = Arc::new(AtomicU64::new(0));
    let ran_on = Arc::new(Mutex::new(None));
    let mut b = Runtime::builder();
    b.progress_thread(true);
    let g = got.clone();
    let done = b.reply_handler("done", move |m| g.store(m.arg(0), Ordering::Release));
    let r = ran_on.clone();
    let ask = b.request_handler("ask", move |m, tok| {
        *r.lock().unwrap() = Some(std::thread::current().id());
        tok.reply_short(done, &[m.arg(0) + 1]).unwrap();
    });
    let rt = b.build().unwrap();
    for round in 1..=100u64 {
        rt.request_short(0, ask, &[round * 10]).unwrap();
        // No runtime call from here on: only the progress thread can run both handlers.
        let t = Instant::now();
        while got.load(Ordering::Acquire) != round * 10 + 1 {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "round {round}: nobody ran the handlers"
            );
            std::hint::spin_loop();
        }
        let on = ran_on.lock().unwrap().take();
        assert!(on.is_some_and(|id| id != std::thread::current().id()));
        if round % 10 == 0 {
            // Now and then long enough for the progress thread to fall asleep.
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    assert_eq!(rt.stats().handled_on(Channel::Reply), 100);
}

#[test]
fn waiting_inside_a_critical_section_is_refused() {
    let rt = Runtime::builder().build().unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        rt.critical(|| rt.wait_until(|| true));
    }));
    let msg = r.unwrap_err();
    let msg = msg.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(msg.contains("critical section"), "{msg}");
    // The section ended with the unwind.
    assert!(!rt.in_critical());
    rt.wait_until(|| true);
}

#[test]
fn watchdog_names_a_handler_that_runs_too_long_while_it_runs() {
    let mut b = Runtime::builder();
    let quick = b.request_handler("quick", |_, _| {});
    let slow = b.request_handler("dawdler", |_, _| {
        std::thread::sleep(std::time::Duration::from_millis(300));
    });
    b.watchdog(std::time::Duration::from_millis(50));
    let rt = b.build().unwrap();
    for _ in 0..1000 {
        rt.request_short(0, quick, &[]).unwrap();
        rt.poll();
    }
    assert!(rt.engine().watchdog_reports().is_empty());
    rt.request_short(0, slow, &[]).unwrap();
    rt.poll();
    let reports = rt.engine().watchdog_reports();
    assert_eq!(
        reports.len(),
        1,
        "one report per slow invocation: {reports:?}"
    );
    assert!(
        reports[0].contains("request handler \"dawdler\"") && reports[0].contains("limit 50 ms"),
        "{reports:?}"
    );
}

#[test]
fn watchdog_stops_timing_a_handler_that_unwinds_and_times_the_next_one() {
    let mut b = Runtime::builder();
    // An unwind without the panic hook, whose backtrace could take longer than the limit.
    let boom = b.request_handler("boom", |_, _| std::panic::resume_unwind(Box::new("boom")));
    let slow = b.request_handler("dawdler", |_, _| {
        std::thread::sleep(Duration::from_millis(300));
    });
    b.watchdog(Duration::from_millis(50));
    let rt = b.build().unwrap();
    rt.request_short(0, boom, &[]).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.poll()));
    assert!(r.is_err(), "the handler's panic reaches the poll's caller");
    // No handler runs now: a watchdog still timing the one that unwound would report it.
    std::thread::sleep(Duration::from_millis(300));
    let reports = rt.engine().watchdog_reports();
    assert!(reports.is_empty(), "{reports:?}");
    // The next handler is outermost again, so it is timed and reported.
    rt.request_short(0, slow, &[]).unwrap();
    rt.poll();
    let reports = rt.engine().watchdog_reports();
    assert!(
        reports.len() == 1 && reports[0].contains("request handler \"dawdler\""),
        "{reports:?}"
    );
}

#[test]
fn a_handler_that_unwinds_leaves_the_rank_outside_any_handler() {
    let mut b = Runtime::builder();
    let boom = b.request_handler("boom", |_, _| panic!("handler boom"));
    let rt = b.build().unwrap();
    rt.request_short(0, boom, &[]).unwrap();
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.poll()));
    assert!(r.is_err(), "the handler's panic reaches the poll's caller");
    // The nesting depth came back with the unwind: waiting (refused inside handlers) is
    // allowed again.
    rt.wait_until(|| true);
    assert_eq!(rt.stats().max_nesting, 1);
    // The frame was retired with the unwind: polling again does not run it a second time.
    rt.poll();
}

#[test]
fn a_frame_whose_handler_unwinds_is_delivered_once_and_the_ring_stays_in_step() {
    let calls = Arc::new(AtomicU64::new(0));
    let sum = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let (c, s) = (calls.clone(), sum.clone());
    // Its first argument says whether to panic; the others are summed, with the payload's
    // length, so that the frame after the unwound one is checked whole.
    let h = b.request_handler("maybe_boom", move |m, _| {
        c.fetch_add(1, Ordering::Relaxed);
        if m.args()[0] == 1 {
            panic!("handler boom");
        }
        let total: u64 = m.args()[1..].iter().sum::<u64>() + m.payload().len() as u64;
        s.fetch_add(total, Ordering::Relaxed);
    });
    let rt = b.build().unwrap();
    // One-slot shorts (retired before the handler), a three-slot short and mediums, inline
    // and in a pooled buffer (retired around `deliver`), so both ways of retiring a frame meet
    // an unwind.
    let payload = vec![7u8; 5000];
    let forms: [(usize, usize); 5] = [(1, 0), (7, 0), (16, 0), (3, 300), (3, 5000)];
    for round in 0..3u64 {
        for &(nargs, len) in &forms {
            let send = |first: u64| {
                let mut args = vec![round + 2; nargs];
                args[0] = first;
                if len == 0 {
                    rt.request_short(0, h, &args).unwrap();
                } else {
                    rt.request_medium(0, h, &args, &payload[..len]).unwrap();
                }
            };
            let before = (calls.load(Ordering::Relaxed), sum.load(Ordering::Relaxed));
            send(1);
            send(0);
            let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| rt.poll()));
            assert!(
                r.is_err(),
                "the first frame's handler panics ({nargs} args, {len} bytes)"
            );
            // The second frame runs at the next poll; the first does not run again.
            rt.poll();
            rt.poll();
            let after = (calls.load(Ordering::Relaxed), sum.load(Ordering::Relaxed));
            assert_eq!(after.0 - before.0, 2, "{nargs} args, {len} bytes");
            let expected = (nargs as u64 - 1) * (round + 2) + len as u64;
            assert_eq!(after.1 - before.1, expected, "{nargs} args, {len} bytes");
        }
    }
    assert_eq!(rt.stats().dropped, 0);
}

#[test]
#[should_panic(expected = "barrier called after finalize")]
fn barrier_after_finalize_panics_instead_of_hanging() {
    let rt = Runtime::builder().build().unwrap();
    rt.finalize();
    assert!(rt.is_finalized());
    rt.barrier();
}

#[test]
fn segment_writes_wait_for_a_handler_that_views_the_segment() {
    // A long message's payload is a view of the segment. With a progress thread running the
    // handler, a `write_segment` by the program must not change those bytes under it.
    let entered = Arc::new(std::sync::atomic::AtomicBool::new(false));
    // 0: running; 1: the payload stayed; 2: it changed under the handler.
    let verdict = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    b.progress_thread(true);
    let (e, v) = (entered.clone(), verdict.clone());
    let view = b.request_handler("view", move |m, _| {
        let before = m.payload().to_vec();
        e.store(true, Ordering::Release);
        // Long enough for the program's write to come in if it did not wait.
        std::thread::sleep(Duration::from_millis(50));
        // (Read as the optimiser cannot assume unchanged.)
        let after = std::hint::black_box(m.payload()).to_vec();
        v.store(if after == before { 1 } else { 2 }, Ordering::Release);
    });
    let rt = b.build().unwrap();
    assert!(rt.has_progress_thread());
    rt.request_long(0, view, &[], &[1u8; 64], 128).unwrap();
    let t = Instant::now();
    while !entered.load(Ordering::Acquire) {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the handler never ran"
        );
        std::thread::yield_now();
    }
    rt.write_segment(128, &[2u8; 64]).unwrap();
    while verdict.load(Ordering::Acquire) == 0 {
        std::thread::yield_now();
    }
    assert_eq!(
        verdict.load(Ordering::Acquire),
        1,
        "write_segment changed a running handler's payload"
    );
    let mut back = [0u8; 64];
    rt.read_segment(128, &mut back).unwrap();
    assert_eq!(back, [2u8; 64]);
}

#[test]
fn frames_run_once_and_in_order_whether_served_alone_or_drained_in_a_batch() {
    // A poll serves a lone one-slot short by itself, and a ring whose frames come in a stream
    // through the drain; runs of frames of different lengths switch between the two. Every
    // frame must run exactly once, in the order sent, with its arguments and payload whole.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let mut b = Runtime::builder();
    let s = seen.clone();
    let h = b.request_handler("record", move |m, _| {
        let n = m.arg(0);
        // Every argument after the first and every payload byte repeats the frame's number.
        assert!(m.args()[1..].iter().all(|&a| a == n), "frame {n}: {m:?}");
        assert!(m.payload().iter().all(|&b| b == n as u8), "frame {n}");
        s.lock().unwrap().push(n);
    });
    let rt = b.build().unwrap();
    let mut sent = 0u64;
    for run in [1usize, 5, 1, 1, 40, 1, 3, 1, 17, 2, 1] {
        for i in 0..run {
            let n = sent;
            sent += 1;
            match (i + run) % 4 {
                // Mostly one-slot shorts, with longer shorts and a medium among them.
                0 => rt.request_short(0, h, &[n; 9]).unwrap(),
                1 => rt.request_medium(0, h, &[n], &[n as u8; 100]).unwrap(),
                _ => rt.request_short(0, h, &[n; 2]).unwrap(),
            }
        }
        rt.wait_until(|| seen.lock().unwrap().len() as u64 >= sent);
    }
    let seen = seen.lock().unwrap();
    assert_eq!(*seen, (0..sent).collect::<Vec<_>>());
    let stats = rt.stats();
    assert_eq!(stats.handled_on(Channel::Request), sent);
    assert_eq!(stats.dropped, 0);
}

#[test]
fn a_wait_left_at_its_reply_retires_the_reply_before_any_later_look_at_the_ring() {
    // Each wait below ends at the reply that makes its condition true, before the reply's
    // frame is retired (see `Engine::deferred`). The next poll must retire it first: a reply
    // handler that ran twice, or a ring whose head fell behind, would show in the count or
    // stall a later round trip. The condition itself polls on some rounds (a poll inside the
    // wait, while the frame is marked but not yet retired), and every few rounds the rank
    // returns its credit as it would before sleeping.
    let pongs = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let p = pongs.clone();
    let pong = b.reply_handler("pong", move |m| {
        assert_eq!(
            m.arg(0),
            p.load(Ordering::Relaxed),
            "a reply ran twice or out of order"
        );
        p.fetch_add(1, Ordering::Relaxed);
    });
    let ping = b.request_handler("ping", move |m, tok| {
        tok.reply_short(pong, m.args()).unwrap();
    });
    b.ring_slots(8);
    let rt = b.build().unwrap();
    for i in 0..5_000u64 {
        rt.request_short(0, ping, &[i]).unwrap();
        if i % 3 == 0 {
            rt.wait_until(|| {
                rt.poll();
                pongs.load(Ordering::Relaxed) > i
            });
        } else {
            rt.wait_until(|| pongs.load(Ordering::Relaxed) > i);
        }
        if i % 7 == 0 {
            rt.engine().flush_credit();
        }
    }
    assert_eq!(pongs.load(Ordering::Relaxed), 5_000);
    assert_eq!(rt.stats().handled_on(Channel::Reply), 5_000);
}

#[test]
fn every_frame_of_a_round_trip_is_padded_with_credit_from_the_answer_alone() {
    // A ping-pong's request and reply are padded (a quarter of the ring each) only while the
    // sender knows the receiver has caught up. The answer's credit hint says so (see `ring`,
    // "Credit hints"); without it, the sender's credit runs stale and its frames go out
    // unpadded. The arguments run from none to the most a hinted frame carries, and then one
    // more (no hint, so the control line).
    let slots = 64u64;
    let pongs = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let p = pongs.clone();
    let pong = b.reply_handler("pong", move |_| {
        p.fetch_add(1, Ordering::Relaxed);
    });
    let ping = b.request_handler("ping", move |m, tok| {
        tok.reply_short(pong, m.args()).unwrap();
    });
    b.ring_slots(slots as usize);
    let rt = b.build().unwrap();
    let round = |i: u64, nargs: usize| {
        let args: Vec<u64> = (0..nargs as u64).map(|a| a + i).collect();
        rt.request_short(0, ping, &args).unwrap();
        rt.wait_until(|| pongs.load(Ordering::Relaxed) > i);
    };
    let tails = || {
        let e = rt.engine();
        (
            e.shm().loopback_tail(Channel::Request),
            e.shm().loopback_tail(Channel::Reply),
        )
    };
    // A padded frame ends at a quarter boundary, an unpadded one (after a padded one) does not.
    let quarter = slots / 4;
    let mut i = 0;
    // With seven arguments no hint fits: the control line's credit, which the receiver reads
    // where it would have taken the hint, must keep the padding going then.
    for nargs in 0..=MAX_HINTED_ARGS + 1 {
        // The first round trip of a kind may find its credit stale (the very first frame, or
        // the first after hinted frames, for the control line's credit).
        round(i, nargs);
        i += 1;
        for _ in 0..100 {
            let before = tails();
            round(i, nargs);
            i += 1;
            let (req, rep) = tails();
            assert!(
                req % quarter == 0 && rep % quarter == 0 && req > before.0 && rep > before.1,
                "a round trip with {nargs} arguments was not padded: {before:?} -> {:?}",
                (req, rep)
            );
        }
    }
}

/// Try-sends to this rank's own ring go until it is full, then return `WouldBlock` without
/// running a handler; after a poll exactly the messages that went have run. A try-reply that
/// cannot go hands its token back, and the blocking reply with it goes.
#[test]
fn try_sends_go_at_once_or_not_at_all_and_run_no_handler() {
    let handled = Arc::new(AtomicU64::new(0));
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    b.ring_slots(8);
    let r = replies.clone();
    let got = b.reply_handler("got", move |_| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let h = handled.clone();
    let count = b.request_handler("count", move |m, tok| {
        assert_eq!(m.arg(0), h.fetch_add(1, Ordering::Relaxed), "out of order");
        // The reply ring is as small: some try-replies find it full and fall back.
        match tok.try_reply_short(got, &[]) {
            Ok(()) => {}
            Err(not_sent) => {
                assert!(matches!(not_sent.error, Error::WouldBlock { rank: 0, .. }));
                not_sent.token.reply_short(got, &[]).unwrap();
            }
        }
    });
    let rt = b.build().unwrap();
    let mut went = 0u64;
    for _round in 0..3 {
        loop {
            match rt.try_request_short(0, count, &[went]) {
                Ok(()) => went += 1,
                Err(Error::WouldBlock {
                    rank: 0,
                    channel: "request",
                }) => break,
                Err(e) => panic!("{e}"),
            }
            assert_eq!(
                handled.load(Ordering::Relaxed),
                0,
                "a handler ran in a try-send"
            );
        }
        assert!(!rt.sendable(0, MessageClass::Short, 0).unwrap());
        assert!(went > 0);
        rt.wait_sendable(0, MessageClass::Short, 0).unwrap();
        rt.wait_until(|| handled.load(Ordering::Relaxed) == went);
        assert_eq!(handled.swap(0, Ordering::Relaxed), went);
        went = 0;
    }
    rt.wait_until(|| replies.load(Ordering::Relaxed) > 0);
    // A full ring refuses a long before its payload touches the segment.
    let mut sent = 0u64;
    while rt.try_request_short(0, count, &[sent]).is_ok() {
        sent += 1;
    }
    assert!(matches!(
        rt.try_request_long(0, count, &[sent], &[9u8; 64], 4096),
        Err(Error::WouldBlock { .. })
    ));
    let mut buf = [0u8; 64];
    rt.read_segment(4096, &mut buf).unwrap();
    assert_eq!(buf, [0u8; 64], "a refused long wrote its payload");
    rt.wait_until(|| handled.load(Ordering::Relaxed) == sent);
}
