//! The layer's entry points: [`EndpointsSetup`] (its volley handlers, registered in the
//! builder) and [`Endpoints`] (a built runtime's endpoints: open them, send through them).
//!
//! | volley message | kind | at the target rank | if the endpoint cannot take it |
//! |---|---|---|---|
//! | `volley.endpoint.request` | request (short, or medium with a payload) | into the endpoint's request queue | volley reply `returned` |
//! | `volley.endpoint.reply` | request, sent from the replier's poll | into the requester endpoint's reply queue | volley reply `returned` |
//! | `volley.endpoint.returned` | reply | into the sender endpoint's returned queue (handler 0) | counted lost (the sender closed) |
//! | `volley.endpoint.bounce` | request, sent by `close` for what was still queued | as `returned` | as `returned` |
//!
//! An endpoint reply travels as a volley *request*: the endpoint's request handler runs in
//! the endpoint's poll, after volley's handler (which only queues) has returned, so volley's
//! reply token is gone by then. volley's handlers never wait: they queue or return, so
//! endpoint traffic cannot block volley's progress.

use crate::endpoint::Endpoint;
use crate::error::{EndpointError, Result};
use crate::message::Reason;
use crate::name::EndpointName;
use crate::registry::{Bounced, Queued, Registry};
use crate::table::{Attachments, Route};
use crate::wire::{Header, Kind, HEADER_WORDS};
use crate::{DEFAULT_QUEUE_DEPTH, DEFAULT_TRANSLATIONS, MAX_ARGS};
use std::cell::RefCell;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use volley::{Message as AmMessage, ReplyHandler, ReplyToken, RequestHandler, Runtime};
use volley::{RuntimeBuilder, MAX_ARGS as AM_MAX_ARGS};

const _: () = assert!(HEADER_WORDS + MAX_ARGS <= AM_MAX_ARGS);

/// The layer's volley handlers.
#[derive(Debug, Clone, Copy)]
struct Handlers {
    request: RequestHandler,
    reply: RequestHandler,
    bounce: RequestHandler,
}

/// The layer registered in a runtime under construction: [`Endpoints::register`] it (every
/// rank, at the same place), then [`EndpointsSetup::attach`] it to the built runtime.
#[derive(Debug)]
pub struct EndpointsSetup {
    registry: Arc<Registry>,
    h: Handlers,
}

/// Settings of one endpoint.
#[derive(Debug, Clone, Copy)]
pub struct EndpointConfig {
    /// Most messages waiting in each of its request and reply queues; one more is returned
    /// to its sender as [`Reason::Full`].
    pub queue_depth: usize,
    /// Entries in its translation table.
    pub translations: usize,
}

impl Default for EndpointConfig {
    fn default() -> Self {
        Self {
            queue_depth: DEFAULT_QUEUE_DEPTH,
            translations: DEFAULT_TRANSLATIONS,
        }
    }
}

/// Counters of a rank's endpoint layer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// Messages this rank returned to their senders (any reason).
    pub returned: u64,
    /// Messages returned to an endpoint of this rank that had closed meanwhile: nowhere left
    /// to deliver them.
    pub lost: u64,
    /// Peer ranks some translation entry names (see [`Endpoints::attachment`]).
    pub attachments: usize,
}

/// The endpoints of one built runtime: open them here, any number, by the program and by
/// libraries alike (each endpoint has its own handler table). Not `Sync`: the runtime's
/// thread drives it, as it drives the runtime.
#[derive(Debug)]
pub struct Endpoints<'rt> {
    pub(crate) rt: &'rt Runtime,
    pub(crate) registry: Arc<Registry>,
    h: Handlers,
    /// This rank's node: its lowest rank.
    node: u32,
    pub(crate) attachments: RefCell<Attachments>,
}

/// Returns `msg` to its sender through volley's reply token.
fn send_back(token: ReplyToken<'_>, returned: ReplyHandler, kind: Kind, why: Reason, q: &Queued) {
    let mut w = [0u64; AM_MAX_ARGS];
    let n = HEADER_WORDS + q.args().len();
    w[..HEADER_WORDS].copy_from_slice(&q.header.returned_words(kind, why as u8));
    w[HEADER_WORDS..n].copy_from_slice(q.args());
    // Replies have reserved room; an error means the job is going down.
    let _ = if q.payload.is_empty() {
        token.reply_short(returned, &w[..n])
    } else {
        token.reply_medium(returned, &w[..n], &q.payload)
    };
}

/// Queues a returned message (volley's `returned` reply and `bounce` request).
fn arrive_returned(registry: &Registry, m: &AmMessage<'_>) {
    let Some((header, kind, reason)) = Header::from_returned_words(m.args()) else {
        return;
    };
    let Some(reason) = Reason::from_u8(reason) else {
        return;
    };
    let msg = Queued::new(m.src(), header, &m.args()[HEADER_WORDS..], m.payload());
    registry.bounced(Bounced {
        by_rank: m.src(),
        kind,
        reason,
        msg,
    });
}

/// Queues an arriving request or reply at its endpoint, or returns it.
fn arrive(
    registry: &Registry,
    returned: ReplyHandler,
    kind: Kind,
    m: &AmMessage<'_>,
    token: ReplyToken<'_>,
) {
    // Our own peers build these words: a malformed one is a bug, dropped.
    let Some(header) = Header::from_words(m.args()) else {
        return;
    };
    let q = Queued::new(m.src(), header, &m.args()[HEADER_WORDS..], m.payload());
    let refused = match registry.find(header.dest) {
        Ok(ep) => ep.accept(kind, q),
        Err(why) => Some((why, q)),
    };
    if let Some((why, q)) = refused {
        registry.returned.fetch_add(1, Ordering::Relaxed);
        send_back(token, returned, kind, why, &q);
    }
}

impl Endpoints<'static> {
    /// Registers the layer's handlers in `b`. Once per runtime: libraries that want
    /// endpoints take the program's [`Endpoints`] and open their own.
    pub fn register(b: &mut RuntimeBuilder) -> EndpointsSetup {
        let registry = Arc::new(Registry::default());
        let r = registry.clone();
        let returned = b.reply_handler("volley.endpoint.returned", move |m| arrive_returned(&r, m));
        let r = registry.clone();
        let request = b.request_handler("volley.endpoint.request", move |m, t| {
            arrive(&r, returned, Kind::Request, m, t)
        });
        let r = registry.clone();
        let reply = b.request_handler("volley.endpoint.reply", move |m, t| {
            arrive(&r, returned, Kind::Reply, m, t)
        });
        let r = registry.clone();
        let bounce =
            b.request_handler("volley.endpoint.bounce", move |m, _| arrive_returned(&r, m));
        EndpointsSetup {
            registry,
            h: Handlers {
                request,
                reply,
                bounce,
            },
        }
    }
}

impl EndpointsSetup {
    /// Binds the layer to the built runtime.
    pub fn attach(self, rt: &Runtime) -> Endpoints<'_> {
        let node = (0..rt.size())
            .find(|&r| rt.is_local(r))
            .unwrap_or(rt.rank()) as u32;
        Endpoints {
            rt,
            registry: self.registry,
            h: self.h,
            node,
            attachments: RefCell::new(Attachments::default()),
        }
    }
}

impl<'rt> Endpoints<'rt> {
    /// The runtime underneath.
    pub fn runtime(&self) -> &'rt Runtime {
        self.rt
    }

    /// This rank's node as names carry it (its lowest rank).
    pub fn node(&self) -> u32 {
        self.node
    }

    /// Opens an endpoint with `tag` (the tag senders must hold) and default settings.
    pub fn open(&self, tag: u64) -> Endpoint<'_> {
        self.open_with(tag, EndpointConfig::default())
    }

    /// Opens an endpoint with `tag` and `config`.
    pub fn open_with(&self, tag: u64, config: EndpointConfig) -> Endpoint<'_> {
        let shared = self.registry.open(tag, config.queue_depth.max(1));
        Endpoint::new(self, shared, config)
    }

    /// The route to `rank` and how many translation entries (of every endpoint of this rank)
    /// share it; `None` if no entry names it.
    pub fn attachment(&self, rank: usize) -> Option<(Route, usize)> {
        self.attachments.borrow().get(rank as u32)
    }

    /// The layer's counters on this rank.
    pub fn stats(&self) -> LayerStats {
        LayerStats {
            returned: self.registry.returned.load(Ordering::Relaxed),
            lost: self.registry.lost.load(Ordering::Relaxed),
            attachments: self.attachments.borrow().len(),
        }
    }

    /// Checks that `name` can be mapped here and chooses its route.
    pub(crate) fn route_to(&self, name: &EndpointName) -> Result<Route> {
        if name.job != self.rt.job_id() {
            return Err(EndpointError::WrongJob {
                name: *name,
                job: self.rt.job_id(),
            });
        }
        let rank = name.rank as usize;
        if rank >= self.rt.size() {
            return Err(EndpointError::RankOutOfRange {
                name: *name,
                size: self.rt.size(),
            });
        }
        let local = self.rt.is_local(rank);
        if local != (name.node == self.node) {
            return Err(EndpointError::WrongNode { name: *name, local });
        }
        Ok(if local {
            Route::SharedMemory
        } else {
            Route::Network
        })
    }

    /// Sends an endpoint request or reply to `rank` (checked first: nothing is sent on error).
    pub(crate) fn send(
        &self,
        kind: Kind,
        rank: usize,
        header: Header,
        args: &[u64],
        payload: &[u8],
    ) -> Result<()> {
        if header.handler == 0 {
            return Err(EndpointError::ReservedHandler);
        }
        if args.len() > MAX_ARGS {
            return Err(EndpointError::TooManyArgs {
                given: args.len(),
                max: MAX_ARGS,
            });
        }
        if payload.len() > self.rt.max_medium() {
            return Err(EndpointError::PayloadTooLarge {
                len: payload.len(),
                max: self.rt.max_medium(),
            });
        }
        let mut w = [0u64; AM_MAX_ARGS];
        let n = HEADER_WORDS + args.len();
        w[..HEADER_WORDS].copy_from_slice(&header.words());
        w[HEADER_WORDS..n].copy_from_slice(args);
        let h = match kind {
            Kind::Request => self.h.request,
            Kind::Reply => self.h.reply,
        };
        if payload.is_empty() {
            self.rt.request_short(rank, h, &w[..n])?;
        } else {
            self.rt.request_medium(rank, h, &w[..n], payload)?;
        }
        Ok(())
    }

    /// Returns `msg`, which sat in a closing endpoint's queue, to its sender.
    pub(crate) fn bounce(&self, kind: Kind, why: Reason, q: &Queued) -> Result<()> {
        let mut w = [0u64; AM_MAX_ARGS];
        let n = HEADER_WORDS + q.args().len();
        w[..HEADER_WORDS].copy_from_slice(&q.header.returned_words(kind, why as u8));
        w[HEADER_WORDS..n].copy_from_slice(q.args());
        self.registry.returned.fetch_add(1, Ordering::Relaxed);
        if q.payload.is_empty() {
            self.rt.request_short(q.src_rank, self.h.bounce, &w[..n])?;
        } else {
            self.rt
                .request_medium(q.src_rank, self.h.bounce, &w[..n], &q.payload)?;
        }
        Ok(())
    }
}
