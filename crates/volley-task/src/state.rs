//! The task layer's state at one rank and the handlers that serve it. Handlers run on the
//! rank's thread or its progress thread, so the state sits behind one mutex; every handler
//! answers at once (none waits), so a call that waits for an answer always gets one.

use crate::location::{from_bytes, to_bytes, Location};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use volley::{ReplyHandler, RequestHandler, RuntimeBuilder};

/// Operations of the `volley.task.call` request (its first argument).
pub(crate) mod op {
    /// At a task's home: its location. `[task]`.
    pub const LOOKUP: u64 = 1;
    /// At a task's home: a new task (`create` = 1) or a newer location. `[task, create, loc..]`.
    pub const REGISTER: u64 = 2;
    /// At a rank that owns or owned a task: where it is now. `[task]`.
    pub const WHERE: u64 = 3;
    /// At a migrating task's owner: the new owner's segments. `[task, loc..]`.
    pub const LANDING: u64 = 4;
    /// At a migrating task's new owner: the copy is done. `[task]`.
    pub const MOVED: u64 = 5;
    /// At a migrating task's old owner: the new location is published. `[task, loc..]`.
    pub const FINISH: u64 = 6;
}

/// Answer codes (the first word of an answer).
pub(crate) mod answer {
    pub const OK: u64 = 0;
    pub const UNKNOWN: u64 = 1;
    pub const EXISTS: u64 = 2;
    /// Followed by the location.
    pub const FOUND: u64 = 3;
    /// Followed by the epoch.
    pub const HERE: u64 = 4;
    pub const MOVING: u64 = 5;
    /// Followed by the new location.
    pub const MOVED: u64 = 6;
    pub const BAD: u64 = 7;
}

/// A task this rank owns or owned.
#[derive(Debug, Clone)]
pub(crate) enum Owned {
    /// Here, at this epoch.
    Here(u64),
    /// Being copied to another rank: accesses are refused until it is done.
    Moving,
    /// Moved away (the forwarding record the old owner keeps).
    Moved(Location),
}

/// First contact at this rank.
#[derive(Debug, Default)]
pub(crate) struct Contact {
    pub(crate) queue: VecDeque<(usize, Vec<u8>)>,
    pub(crate) capacity: usize,
    pub(crate) refused_issuers: HashSet<usize>,
    pub(crate) counts: crate::ContactCounts,
}

/// Everything handlers and the program share.
#[derive(Debug, Default)]
pub(crate) struct State {
    /// The tasks whose home is this rank: their latest location.
    pub(crate) directory: HashMap<u64, Location>,
    /// Tasks this rank owns or owned.
    pub(crate) owned: HashMap<u64, Owned>,
    /// New owners' segments for tasks this rank is moving out.
    pub(crate) landings: HashMap<u64, Location>,
    /// Tasks whose move to this rank is done.
    pub(crate) arrived: HashSet<u64>,
    /// Answers to this rank's calls, by sequence number.
    pub(crate) answers: HashMap<u64, Vec<u64>>,
    /// Lookups of tasks this rank does not know, as their home.
    pub(crate) unknown_lookups: u64,
    pub(crate) contact: Contact,
}

/// Status codes of a first-contact message.
pub(crate) mod contact {
    pub const QUEUED: u64 = 0;
    pub const FULL: u64 = 1;
    pub const REFUSED: u64 = 2;
}

impl State {
    /// Serves one call from `src`.
    fn serve(&mut self, op: u64, w: &[u64]) -> Vec<u64> {
        let Some((&task, rest)) = w.split_first() else {
            return vec![answer::BAD];
        };
        match op {
            op::LOOKUP => match self.directory.get(&task) {
                Some(l) => [vec![answer::FOUND], l.to_words()].concat(),
                None => {
                    self.unknown_lookups += 1;
                    vec![answer::UNKNOWN]
                }
            },
            op::REGISTER => {
                let Some((&create, loc)) = rest.split_first() else {
                    return vec![answer::BAD];
                };
                let Some(loc) = Location::from_words(loc) else {
                    return vec![answer::BAD];
                };
                match self.directory.get(&task) {
                    Some(_) if create == 1 => vec![answer::EXISTS],
                    Some(old) if old.epoch >= loc.epoch => vec![answer::BAD],
                    None if create != 1 => vec![answer::UNKNOWN],
                    _ => {
                        self.directory.insert(task, loc);
                        vec![answer::OK]
                    }
                }
            }
            op::WHERE => match self.owned.get(&task) {
                Some(Owned::Here(e)) => vec![answer::HERE, *e],
                Some(Owned::Moving) => vec![answer::MOVING],
                Some(Owned::Moved(l)) => [vec![answer::MOVED], l.to_words()].concat(),
                None => vec![answer::UNKNOWN],
            },
            op::LANDING => match Location::from_words(rest) {
                Some(l) => {
                    self.landings.insert(task, l);
                    vec![answer::OK]
                }
                None => vec![answer::BAD],
            },
            op::MOVED => {
                self.arrived.insert(task);
                vec![answer::OK]
            }
            op::FINISH => match Location::from_words(rest) {
                Some(l) => {
                    self.owned.insert(task, Owned::Moved(l));
                    vec![answer::OK]
                }
                None => vec![answer::BAD],
            },
            _ => vec![answer::BAD],
        }
    }

    /// Takes a first-contact message from `src`; returns its status.
    fn contact(&mut self, src: usize, data: &[u8]) -> u64 {
        let c = &mut self.contact;
        if c.refused_issuers.contains(&src) {
            c.counts.refused += 1;
            contact::REFUSED
        } else if c.queue.len() >= c.capacity {
            c.counts.full += 1;
            contact::FULL
        } else {
            c.counts.queued += 1;
            c.queue.push_back((src, data.to_vec()));
            contact::QUEUED
        }
    }
}

/// The shared state and the handler ids.
#[derive(Debug, Clone)]
pub(crate) struct Shared {
    state: Arc<Mutex<State>>,
    pub(crate) call: RequestHandler,
    pub(crate) contact: RequestHandler,
}

impl Shared {
    /// Registers the layer's handlers in `b`.
    pub(crate) fn register(b: &mut RuntimeBuilder, capacity: usize) -> Self {
        let state = Arc::new(Mutex::new(State::default()));
        state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .contact
            .capacity = capacity;
        let s = state.clone();
        let answer: ReplyHandler = b.reply_handler("volley.task.answer", move |m| {
            let words = from_bytes(m.payload());
            let mut st = s.lock().unwrap_or_else(PoisonError::into_inner);
            st.answers.insert(m.arg(0), words);
        });
        let s = state.clone();
        let call = b.request_handler("volley.task.call", move |m, tok| {
            let (op, seq) = (m.arg(0), m.arg(1));
            let out = s
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .serve(op, &from_bytes(m.payload()));
            let _ = tok.reply_medium(answer, &[seq], &to_bytes(&out));
        });
        let s = state.clone();
        let contact = b.request_handler("volley.task.contact", move |m, tok| {
            let status = s
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contact(m.src(), m.payload());
            let _ = tok.reply_medium(answer, &[m.arg(0)], &to_bytes(&[status]));
        });
        Self {
            state,
            call,
            contact,
        }
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
