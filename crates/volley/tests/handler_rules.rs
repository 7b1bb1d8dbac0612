//! What a handler may do (seed 000 requirement 7), each rule broken once on purpose: a
//! handler that allocates (caught in debug builds by `volley::debug::HandlerAllocCheck`, which
//! this test binary installs), one that makes a blocking runtime call (refused in every
//! build) and one that runs too long (reported by the watchdog). A single-rank job: the
//! loopback path runs the same dispatch as traffic between ranks.
//!
//! `scripts/test` runs this file in a debug build too (`cargo test -p volley --test
//! handler_rules`), where the allocation check is on.

use std::any::Any;
use std::cell::RefCell;
use std::hint::black_box;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::process::Command;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use volley::debug::{allow_alloc, HandlerAllocCheck};
use volley::Runtime;

#[global_allocator]
static ALLOC: HandlerAllocCheck<std::alloc::System> = HandlerAllocCheck(std::alloc::System);

fn panic_text(p: Box<dyn Any + Send>) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// A handler that allocates, one that allocates inside `allow_alloc`, one that only replies,
/// a reply handler that allocates, and a layer's handler (named `volley.…`) that allocates;
/// returns what each poll that ran one of them did.
fn run_allocating_handlers() -> [Result<usize, String>; 5] {
    let replies = Arc::new(AtomicU64::new(0));
    let mut b = Runtime::builder();
    let r = replies.clone();
    let counted = b.reply_handler("counted", move |_| {
        r.fetch_add(1, Ordering::Relaxed);
    });
    let hoarding_reply = b.reply_handler("hoarding_reply", |m| {
        black_box(vec![m.arg(0); 8]);
    });
    let hoarder = b.request_handler("hoarder", |m, _| {
        black_box(vec![m.arg(0) as u8; 100]);
    });
    let allowed = b.request_handler("allowed", |m, _| {
        allow_alloc(|| black_box(format!("{}", m.arg(0))));
    });
    let replier = b.request_handler("replier", move |m, tok| {
        tok.reply_short(counted, &[m.arg(0)]).unwrap();
    });
    let asks_hoarding_reply = b.request_handler("asks_hoarding_reply", move |_, tok| {
        tok.reply_short(hoarding_reply, &[1]).unwrap();
    });
    let layers = b.request_handler("volley.test.layer_queue", |m, _| {
        black_box(vec![m.arg(0); 4]);
    });
    let rt = b.build().unwrap();
    let outcome = |h| {
        rt.request_short(0, h, &[7]).unwrap();
        // The poll runs the request handler and, on the loopback path, its reply's handler.
        catch_unwind(AssertUnwindSafe(|| rt.poll() + rt.poll())).map_err(panic_text)
    };
    let got = [
        outcome(hoarder),
        outcome(allowed),
        outcome(replier),
        outcome(asks_hoarding_reply),
        outcome(layers),
    ];
    // The rank goes on after the panics: a clean round trip.
    rt.request_short(0, replier, &[8]).unwrap();
    rt.wait_until(|| replies.load(Ordering::Relaxed) == 2);
    got
}

#[cfg(debug_assertions)]
#[test]
fn a_handler_that_allocates_panics_by_name_in_a_debug_build() {
    let [hoarder, allowed, replier, hoarding_reply, layers] = run_allocating_handlers();
    assert!(
        layers.is_ok(),
        "a layer's handler is not checked: {layers:?}"
    );
    let e = hoarder.unwrap_err();
    assert!(
        e.contains("request handler \"hoarder\" allocated 1 times"),
        "{e}"
    );
    assert!(allowed.is_ok(), "allow_alloc is not checked: {allowed:?}");
    assert!(
        replier.is_ok(),
        "a reply is the runtime's work: {replier:?}"
    );
    let e = hoarding_reply.unwrap_err();
    assert!(
        e.contains("reply handler \"hoarding_reply\" allocated"),
        "{e}"
    );
}

#[cfg(not(debug_assertions))]
#[test]
fn the_allocation_check_is_off_in_a_release_build() {
    for (i, r) in run_allocating_handlers().into_iter().enumerate() {
        assert!(r.is_ok(), "handler {i}: {r:?}");
    }
}

thread_local! {
    /// The rank's runtime, which a handler on this thread reaches only this way (it is
    /// neither `Send` nor `Sync`, so a handler cannot capture it).
    static RT: RefCell<Option<Rc<Runtime>>> = const { RefCell::new(None) };
}

#[test]
fn a_handler_that_makes_a_blocking_call_panics() {
    let mut b = Runtime::builder();
    let waits = b.request_handler("waits", |_, _| {
        let rt = RT.with(|r| r.borrow().clone()).expect("set below");
        rt.wait_until(|| true);
    });
    let polls = b.request_handler("polls", |_, _| {
        let rt = RT.with(|r| r.borrow().clone()).expect("set below");
        rt.poll();
    });
    let rt = Rc::new(b.build().unwrap());
    RT.with(|r| *r.borrow_mut() = Some(rt.clone()));
    for (h, what) in [(waits, "wait_until"), (polls, "poll")] {
        rt.request_short(0, h, &[]).unwrap();
        let e = catch_unwind(AssertUnwindSafe(|| rt.poll())).map_err(panic_text);
        let e = e.unwrap_err();
        assert!(
            e.contains(&format!("{what} called from inside a handler")),
            "{e}"
        );
    }
    RT.with(|r| r.borrow_mut().take());
}

/// The child's part of the watchdog test: a handler that sleeps past the limit.
#[test]
fn watchdog_child() {
    if std::env::var_os("HANDLER_RULES_CHILD").is_none() {
        return;
    }
    let mut b = Runtime::builder();
    let slow = b.request_handler("dawdler", |_, _| {
        std::thread::sleep(std::time::Duration::from_millis(400));
    });
    b.watchdog(std::time::Duration::from_millis(50));
    let rt = b.build().unwrap();
    rt.request_short(0, slow, &[]).unwrap();
    rt.poll();
}

#[test]
fn a_handler_that_runs_too_long_is_reported_by_the_watchdog() {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "watchdog_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("HANDLER_RULES_CHILD", "1")
        .env_remove("VOLLEY_WATCHDOG_MS")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("watchdog: request handler \"dawdler\" has been running for")
            && stderr.contains("(limit 50 ms)"),
        "{stderr}"
    );
}
