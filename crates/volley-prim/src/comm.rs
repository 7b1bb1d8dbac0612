//! The communication thread (seed 003's communication processor): polls the network input
//! buffer and the internal buffer from the program thread. Procedure packets run here; data
//! goes on, word for word and in order, to the program thread's rings.

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
}

impl CommThread {
    pub(crate) fn stop(&mut self) {
        self.stop.store(true, Ordering::Release);
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
                counters,
                sender,
                scratch: (Vec::new(), Vec::new()),
            };
            let mut idle = 0u32;
            while !s.load(Ordering::Acquire) {
                if lp.step() {
                    idle = 0;
                } else {
                    idle = idle.saturating_add(1);
                    if idle >= crate::prim::COMM_SPINS_BEFORE_YIELD {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
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
