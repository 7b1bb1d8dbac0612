//! One endpoint: its handler table, translation table, tag, sends and poll.

use crate::error::{EndpointError, Result};
use crate::layer::{EndpointConfig, Endpoints};
use crate::message::{Message, Reason, Returned, Token};
use crate::name::{EndpointId, EndpointName};
use crate::registry::{EpShared, Queued};
use crate::table::{Route, Table, Translation};
use crate::wire::{Header, Kind};
use crate::HANDLERS;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::Ordering;
use std::sync::Arc;

type RequestFn = dyn Fn(&Message<'_>, Token<'_>);
type ReplyFn = dyn Fn(&Message<'_>);
type ReturnedFn = dyn Fn(&Returned<'_>);

/// A handler-table entry.
#[derive(Clone)]
enum Handler {
    Request(Rc<RequestFn>),
    Reply(Rc<ReplyFn>),
}

/// One of what a poll takes from the queues.
enum Next {
    Returned(crate::registry::Bounced),
    Reply(Queued),
    Request(Queued),
}

/// An endpoint (seed 001 §2.2, AM-II): its own handler table (indices 1..=255; index 0 is
/// the returned-message handler), request and reply queues, a 64-bit tag chosen here that
/// senders must hold, and a translation table of destinations. Open it with
/// [`Endpoints::open`]; it closes on [`Endpoint::close`] or drop.
///
/// Handlers run only inside this endpoint's [`Endpoint::poll`], [`Endpoint::handle_queued`]
/// and [`Endpoint::wait_until`], one at a time, on the thread that drives the runtime. They
/// are `Send + 'static`, so they cannot capture the runtime or an endpoint (neither is
/// `Send`): a request handler sends only through its [`Token`], a reply handler and handler 0
/// cannot send at all.
pub struct Endpoint<'a> {
    layer: &'a Endpoints<'a>,
    shared: Arc<EpShared>,
    handlers: RefCell<Vec<Option<Handler>>>,
    returned: RefCell<Option<Rc<ReturnedFn>>>,
    table: RefCell<Table>,
    closed: Cell<bool>,
}

impl std::fmt::Debug for Endpoint<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("name", &self.name())
            .field("tag", &self.tag())
            .finish()
    }
}

impl<'a> Endpoint<'a> {
    pub(crate) fn new(layer: &'a Endpoints<'a>, shared: Arc<EpShared>, c: EndpointConfig) -> Self {
        Self {
            layer,
            shared,
            handlers: RefCell::new(vec![None; HANDLERS]),
            returned: RefCell::new(None),
            table: RefCell::new(Table::new(c.translations)),
            closed: Cell::new(false),
        }
    }

    /// This endpoint within its rank.
    pub fn id(&self) -> EndpointId {
        self.shared.id
    }

    /// The endpoint's global name, to hand to other ranks (out of band: an Active Message, a
    /// file) so that they can map it.
    pub fn name(&self) -> EndpointName {
        EndpointName {
            job: self.layer.rt.job_id(),
            node: self.layer.node(),
            rank: self.layer.rt.rank() as u32,
            endpoint: self.shared.id,
        }
    }

    /// The tag senders must hold.
    pub fn tag(&self) -> u64 {
        self.shared.tag.load(Ordering::Acquire)
    }

    /// Changes the tag: from now on, messages that carry the old one are returned to their
    /// senders as [`Reason::BadTag`].
    pub fn set_tag(&self, tag: u64) {
        self.shared.tag.store(tag, Ordering::Release);
    }

    fn set(&self, index: u8, h: Handler, kind: Kind) -> Result<()> {
        if index == 0 {
            return Err(EndpointError::ReservedHandler);
        }
        self.handlers.borrow_mut()[index as usize] = Some(h);
        self.shared.set_handler(index, kind);
        Ok(())
    }

    /// Installs request handler `index` (1..=255). It runs with the request and a [`Token`]
    /// to reply once; it need not reply (see the crate's documentation).
    pub fn set_request_handler<F>(&self, index: u8, f: F) -> Result<()>
    where
        F: Fn(&Message<'_>, Token<'_>) + Send + 'static,
    {
        self.set(index, Handler::Request(Rc::new(f)), Kind::Request)
    }

    /// Installs reply handler `index` (1..=255). It cannot send.
    pub fn set_reply_handler<F>(&self, index: u8, f: F) -> Result<()>
    where
        F: Fn(&Message<'_>) + Send + 'static,
    {
        self.set(index, Handler::Reply(Rc::new(f)), Kind::Reply)
    }

    /// Installs handler 0, which receives this endpoint's returned messages. It cannot send.
    /// Without one, a returned message panics the poll that finds it (AM-II's default
    /// handler ends the program too).
    pub fn set_returned_handler<F>(&self, f: F)
    where
        F: Fn(&Returned<'_>) + Send + 'static,
    {
        *self.returned.borrow_mut() = Some(Rc::new(f));
    }

    fn translation(&self, name: EndpointName, tag: u64) -> Result<Translation> {
        let route = self.layer.route_to(&name)?;
        Ok(Translation { name, tag, route })
    }

    /// Maps translation index `index` to endpoint `name` with `tag` (the tag that endpoint
    /// chose). The route (shared memory or network) is chosen here, once.
    pub fn map(&self, index: usize, name: EndpointName, tag: u64) -> Result<()> {
        let t = self.translation(name, tag)?;
        self.table.borrow_mut().map(index, t)?;
        self.layer
            .attachments
            .borrow_mut()
            .attach(name.rank, t.route);
        Ok(())
    }

    /// Maps the lowest free translation index to `name` with `tag` and returns it.
    pub fn map_any(&self, name: EndpointName, tag: u64) -> Result<usize> {
        let t = self.translation(name, tag)?;
        let index = self.table.borrow_mut().map_any(t)?;
        self.layer
            .attachments
            .borrow_mut()
            .attach(name.rank, t.route);
        Ok(index)
    }

    /// Unmaps `index`.
    pub fn unmap(&self, index: usize) -> Result<()> {
        let t = self.table.borrow_mut().unmap(index)?;
        self.layer.attachments.borrow_mut().detach(t.name.rank);
        Ok(())
    }

    /// What `index` maps.
    pub fn translation_at(&self, index: usize) -> Result<Translation> {
        self.table.borrow().get(index)
    }

    /// The route chosen for `index` when it was mapped.
    pub fn route(&self, index: usize) -> Result<Route> {
        Ok(self.table.borrow().get(index)?.route)
    }

    /// Sends a request through translation index `index`: request handler `handler` (not 0)
    /// of the endpoint it maps runs with `args` (at most [`crate::MAX_ARGS`]) and `payload`
    /// (at most the runtime's medium size; empty: a short message). Returns once the message
    /// is in the destination rank's ring; a message the destination endpoint refuses comes
    /// back to this endpoint's handler 0 instead. An unmapped or out-of-range index, a bad
    /// handler, too many arguments or too large a payload fail here and send nothing.
    pub fn request(&self, index: usize, handler: u8, args: &[u64], payload: &[u8]) -> Result<()> {
        let t = self.table.borrow().get(index)?;
        let header = Header {
            dest: t.name.endpoint,
            dest_tag: t.tag,
            src: self.shared.id,
            src_tag: self.tag(),
            handler,
            nargs: args.len().min(u8::MAX as usize) as u8,
            index: index as u32,
        };
        self.layer
            .send(Kind::Request, t.name.rank as usize, header, args, payload)
    }

    /// Polls the runtime, then runs this endpoint's queued handlers; returns how many ran.
    pub fn poll(&self) -> usize {
        self.layer.rt.poll();
        self.handle_queued()
    }

    /// Runs the handlers of what is queued at this endpoint now (returned messages, replies,
    /// then requests), without polling the runtime; returns how many ran. A program waiting
    /// on several endpoints calls this for the others inside one's [`Endpoint::wait_until`].
    pub fn handle_queued(&self) -> usize {
        let budget = {
            let q = self.shared.lock();
            q.returned.len() + q.replies.len() + q.requests.len()
        };
        let mut ran = 0;
        while ran < budget {
            let next = {
                let mut q = self.shared.lock();
                if let Some(b) = q.returned.pop_front() {
                    Next::Returned(b)
                } else if let Some(m) = q.replies.pop_front() {
                    Next::Reply(m)
                } else if let Some(m) = q.requests.pop_front() {
                    Next::Request(m)
                } else {
                    break;
                }
            };
            self.run(next);
            ran += 1;
        }
        ran
    }

    fn run(&self, next: Next) {
        let (kind, q) = match next {
            Next::Returned(b) => {
                let h = self.returned.borrow().clone();
                let r = Returned {
                    reason: b.reason,
                    kind: b.kind,
                    by_rank: b.by_rank,
                    header: b.msg.header,
                    args: b.msg.args(),
                    payload: &b.msg.payload,
                };
                match h {
                    Some(h) => h(&r),
                    None => panic!(
                        "volley-endpoint: a {:?} to {} on rank {} came back to endpoint {} \
                         ({:?}) and it has no handler 0: set one with set_returned_handler",
                        r.kind,
                        r.dest().id,
                        r.dest_rank(),
                        self.shared.id.id,
                        r.reason
                    ),
                }
                return;
            }
            Next::Reply(q) => (Kind::Reply, q),
            Next::Request(q) => (Kind::Request, q),
        };
        let h = self.handlers.borrow()[q.header.handler as usize].clone();
        let m = Message {
            src_rank: q.src_rank,
            src: q.header.src,
            args: q.args(),
            payload: &q.payload,
        };
        match (kind, h) {
            (Kind::Request, Some(Handler::Request(f))) => f(
                &m,
                Token {
                    layer: self.layer,
                    to_rank: q.src_rank,
                    to: q.header.src,
                    to_tag: q.header.src_tag,
                    from: self.shared.id,
                    from_tag: self.tag(),
                },
            ),
            (Kind::Reply, Some(Handler::Reply(f))) => f(&m),
            // The index changed kind after the message was queued: it goes back. Fails
            // only when the job is going down.
            _ => {
                let _ = self.layer.bounce(kind, Reason::NoHandler, &q);
            }
        }
    }

    /// Polls (the runtime, and this endpoint's handlers) until `cond()` is true.
    pub fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        self.handle_queued();
        if cond() {
            return;
        }
        self.layer.rt.wait_until(|| {
            self.handle_queued();
            cond()
        });
    }

    /// Messages waiting: (returned, replies, requests).
    pub fn queued(&self) -> (usize, usize, usize) {
        let q = self.shared.lock();
        (q.returned.len(), q.replies.len(), q.requests.len())
    }

    /// Closes the endpoint: its number is free for a later open (in a new generation, so its
    /// name does not reach the new endpoint), its translations go, requests and replies still
    /// queued go back to their senders as [`Reason::Closed`], and later arrivals are returned
    /// the same way. Returned messages still queued here are discarded (they were this
    /// endpoint's own, counted in [`crate::LayerStats::lost`]). Returns how many queued
    /// messages went back.
    pub fn close(self) -> Result<usize> {
        self.close_now()
    }

    fn close_now(&self) -> Result<usize> {
        if self.closed.replace(true) {
            return Ok(0);
        }
        let left = self.layer.registry.close(&self.shared);
        {
            let mut a = self.layer.attachments.borrow_mut();
            for t in self.table.borrow_mut().drain() {
                a.detach(t.name.rank);
            }
        }
        self.layer
            .registry
            .lost
            .fetch_add(left.returned.len() as u64, Ordering::Relaxed);
        let mut sent = 0;
        let mut first_err = None;
        let queued = (left.requests.iter().map(|q| (Kind::Request, q)))
            .chain(left.replies.iter().map(|q| (Kind::Reply, q)));
        for (kind, q) in queued {
            match self.layer.bounce(kind, Reason::Closed, q) {
                Ok(()) => sent += 1,
                Err(e) => {
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(sent),
        }
    }
}

impl Drop for Endpoint<'_> {
    fn drop(&mut self) {
        // Errors mean the job is going down: nobody is left to return messages to.
        let _ = self.close_now();
    }
}
