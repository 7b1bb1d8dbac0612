//! The communication thread (seed 003's communication processor): polls the network input
//! buffer and the internal buffer from the program thread. Procedure packets run here; data
//! goes on, word for word and in order, to the program thread's rings. Idle, it spins a
//! little, yields a little, then sleeps on its network buffer's doorbell (`idle`): senders
//! into that buffer and the program thread ring it, only when it sleeps.

use crate::config::Handler;
use crate::counters::Counters;
use crate::invocation::Invocation;
use crate::outbound::CommSender;
use crate::ring::{
    header, padded, Header, HeapRing, LocalWriter, Peek, Reader, RingPtr, CLOSE, DATA, PROC,
    PROC_DONE,
};
use std::cell::RefCell;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// The sleeping word's value while the communication thread sleeps on its buffer's doorbell.
pub(crate) const COMM_ASLEEP: u32 = 3;

/// Idle passes that yield the core, after the spins, before the thread sleeps.
const COMM_YIELDS_BEFORE_SLEEP: u32 = 64;

/// The longest sleep: the bound on a ring nobody sends (a one-sided operation from another
/// node lands in the buffer when the program thread polls volley, and only the program
/// thread's next call into the layer rings for it).
const COMM_SLEEP: Duration = Duration::from_millis(10);

/// Wakes `own`'s communication thread if it sleeps; called after publishing into `own` (or
/// into the internal buffer).
pub(crate) fn wake(own: RingPtr, counters: &Counters) {
    ring_if(own, counters, || true);
}

/// Wakes `own`'s communication thread if it sleeps while its buffer holds unread bytes:
/// the program thread's look after polling volley, which may have published there for a
/// peer on another node (an empty buffer needs no ring).
pub(crate) fn wake_if_waiting(own: RingPtr, counters: &Counters) {
    ring_if(own, counters, || {
        own.tail().load(Ordering::Acquire) != own.head().load(Ordering::Acquire)
    });
}

fn ring_if(own: RingPtr, counters: &Counters, waiting: impl FnOnce() -> bool) {
    if waiting()
        && crate::idle::wake_if_asleep(own.sleeping(), own.doorbell(), COMM_ASLEEP, || {
            crate::futex::wake(own.doorbell())
        })
    {
        Counters::add(&counters.syscalls, 1);
    }
}

/// Set in a forwarded PROC_DONE's id when no handler had that id.
pub(crate) const UNKNOWN_FLAG: u32 = 1 << 31;

/// The program thread's ends of the internal buffers.
#[derive(Debug)]
pub(crate) struct Internal {
    /// Program thread to communication thread.
    pub(crate) out: RefCell<LocalWriter>,
    /// Communication thread to program thread (replies and looped-back data).
    pub(crate) inp: RefCell<Reader>,
    _rings: Arc<[HeapRing; 3]>,
}

/// The running thread.
#[derive(Debug)]
pub(crate) struct CommThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    own: RingPtr,
    counters: Arc<Counters>,
}

impl CommThread {
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
        wake(self.own, &self.counters);
        if let Some(h) = self.handle.take() {
            let _ = h.join();
        }
    }
}

impl Drop for CommThread {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Starts the thread on `own` (this rank's network buffer); returns the program thread's
/// internal ends, the thread, and the ring it forwards network data into.
/// `sender` is built on the thread's stop flag (`start` hands it over).
pub(crate) fn start(
    own: RingPtr,
    cap: usize,
    handlers: Arc<Vec<Option<Handler>>>,
    counters: Arc<Counters>,
    sender: impl FnOnce(Arc<AtomicBool>) -> CommSender,
) -> (Internal, CommThread, RingPtr) {
    // [forwarded network data, program -> comm, comm -> program]
    let rings = Arc::new([HeapRing::new(cap), HeapRing::new(cap), HeapRing::new(cap)]);
    let (fwd, out, inp) = (rings[0].ptr(), rings[1].ptr(), rings[2].ptr());
    let stop = Arc::new(AtomicBool::new(false));
    let keep = rings.clone();
    let s = stop.clone();
    let sender = sender(stop.clone());
    let thread_counters = counters.clone();
    let handle = std::thread::Builder::new()
        .name("volley-prim-comm".into())
        .spawn(move || {
            let _keep = keep;
            let mut lp = Loop {
                net: Reader::new(own),
                fwd: LocalWriter::new(fwd),
                requests: Reader::new(out),
                replies: LocalWriter::new(inp),
                handlers,
                counters: thread_counters,
                sender,
                scratch: (Vec::new(), Vec::new()),
            };
            let mut idle = 0u32;
            while !s.load(Ordering::Acquire) {
                if lp.step() {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                    let spins = crate::prim::COMM_SPINS_BEFORE_YIELD;
                    if idle < spins {
                        std::hint::spin_loop();
                    } else if idle < spins + COMM_YIELDS_BEFORE_SLEEP {
                        std::thread::yield_now();
                    } else {
                        lp.sleep(&s);
                        idle = 0;
                    }
                }
            }
        })
        .expect("spawning the communication thread");
    let internal = Internal {
        out: RefCell::new(LocalWriter::new(out)),
        inp: RefCell::new(Reader::new(inp)),
        _rings: rings,
    };
    (
        internal,
        CommThread {
            stop,
            handle: Some(handle),
            own,
            counters,
        },
        fwd,
    )
}

struct Loop {
    net: Reader,
    fwd: LocalWriter,
    requests: Reader,
    replies: LocalWriter,
    handlers: Arc<Vec<Option<Handler>>>,
    counters: Arc<Counters>,
    sender: CommSender,
    /// Forwarded words and their header indices.
    scratch: (Vec<u64>, Vec<usize>),
}

impl Loop {
    /// Sleeps on the network buffer's doorbell unless there is something to read, a sender
    /// holds the buffer's link (a chain's bare words publish without a ring), or the layer
    /// stops.
    fn sleep(&mut self, stop: &AtomicBool) {
        let own = self.net.ring;
        let (net_head, req) = (self.net.head, &self.requests);
        let mut rung = false;
        let slept = crate::idle::sleep_unless(
            own.sleeping(),
            own.doorbell(),
            COMM_ASLEEP,
            || {
                stop.load(Ordering::Acquire)
                    || own.owner().load(Ordering::Acquire) != 0
                    || own.tail().load(Ordering::Acquire) != net_head
                    || req.ring.tail().load(Ordering::Acquire) != req.head
            },
            |bell| rung = crate::futex::wait(own.doorbell(), bell, COMM_SLEEP),
        );
        if slept {
            Counters::add(&self.counters.comm_sleeps, 1);
        }
        if rung {
            Counters::add(&self.counters.comm_woken, 1);
        }
    }

    /// One pass over both buffers; whether it did anything.
    fn step(&mut self) -> bool {
        let a = Self::serve(
            &mut self.net,
            &mut self.fwd,
            Some(&mut self.replies),
            &self.handlers,
            &self.counters,
            &mut self.sender,
            &mut self.scratch,
        );
        let b = Self::serve(
            &mut self.requests,
            &mut self.replies,
            None,
            &self.handlers,
            &self.counters,
            &mut self.sender,
            &mut self.scratch,
        );
        a || b
    }

    /// Serves what waits in `src`: runs a procedure (its replies go to `replies`, or to `to`
    /// when `None`; then a PROC_DONE goes to `to`), or moves data words on to `to` as far as it has room.
    fn serve(
        src: &mut Reader,
        to: &mut LocalWriter,
        replies: Option<&mut LocalWriter>,
        handlers: &[Option<Handler>],
        counters: &Counters,
        sender: &mut CommSender,
        scratch: &mut (Vec<u64>, Vec<usize>),
    ) -> bool {
        match src.peek() {
            Peek::Empty => false,
            Peek::Header(w) if Header::decode(w).kind == PROC => {
                let h = Header::decode(w);
                src.take_header();
                let id = match handlers.get(h.value as usize).and_then(|f| f.clone()) {
                    Some(f) => {
                        let mut wait = std::thread::yield_now;
                        let mut inv = Invocation {
                            from: h.from,
                            id: h.value,
                            args: src,
                            wait: &mut wait,
                            reply: Some(match replies {
                                Some(r) => r,
                                None => &mut *to,
                            }),
                            out: sender,
                            report: true,
                        };
                        f(&mut inv);
                        Counters::add(&counters.handler_invocations, 1);
                        let report = inv.report;
                        // The close of the procedure's argument chain ends here: forwarded,
                        // it would pile up before a program thread that never receives.
                        if let Peek::Header(w) = src.peek() {
                            if Header::decode(w).kind == CLOSE {
                                src.take_header();
                            }
                        }
                        if !report {
                            return true;
                        }
                        h.value
                    }
                    None => h.value | UNKNOWN_FLAG,
                };
                let from = h.from.map_or(crate::ring::NO_RANK, |r| r as u64);
                to.emit(&[header(PROC_DONE, from, false, id)], &[0], &mut |_| {
                    std::thread::yield_now()
                });
                true
            }
            Peek::Header(w) => {
                // A whole packet, so the program thread never sees half of one.
                let h = Header::decode(w);
                let n = if h.kind == DATA {
                    8 + padded(h.value as usize) as u64
                } else {
                    8
                };
                if to.room() < n {
                    return false;
                }
                Self::forward(src, to, n, scratch);
                true
            }
            Peek::Bare(n) => {
                let n = n.min(to.room());
                if n == 0 {
                    return false;
                }
                Self::forward(src, to, n, scratch);
                true
            }
        }
    }

    fn forward(
        src: &mut Reader,
        to: &mut LocalWriter,
        n: u64,
        (words, marks): &mut (Vec<u64>, Vec<usize>),
    ) {
        words.clear();
        marks.clear();
        src.take_words(n, words, marks);
        to.emit(words, marks, &mut |_| std::thread::yield_now());
    }
}
