//! # volley-endpoint
//!
//! AM-II's endpoints and virtual networks (seed 001 §2.2, requirements 2-5 and 8 of its note)
//! as a layer on volley's public API. volley's [`volley::Runtime`] is the one endpoint per rank
//! case; this crate lets a rank open any number of endpoints, each with:
//!
//! - **its own handler table**, indices 1..=255, so a library's endpoints never clash with the
//!   program's; **index 0 is the returned-message handler**;
//! - **its own request and reply queues**, bounded ([`EndpointConfig::queue_depth`]);
//! - **a 64-bit tag** it chooses (and may change, [`Endpoint::set_tag`]) that senders must hold;
//! - **a global name** ([`EndpointName`]: job, node, rank, endpoint number and generation) that
//!   serializes to bytes or text for exchange out of band;
//! - **a translation table**: [`Endpoint::map`] / [`Endpoint::map_any`] / [`Endpoint::unmap`]
//!   small indices to (name, tag); the route (shared memory or network) is chosen per entry at
//!   map time ([`Endpoint::route`]). A virtual network is a set of endpoints mapped this way.
//!
//! **Returned messages.** A request or reply whose tag does not match, aimed at a closed or
//! never-opened endpoint, at an index with no handler of its kind, or that finds the queue
//! full, is returned whole (handler index, arguments, payload) to the sender endpoint's
//! handler 0 with a [`Reason`]. Nothing is dropped or delivered twice: a message is either
//! queued at its destination or comes back, once. The check is made at the destination rank,
//! by the layer's volley handler (the seed checked the tag at the sender for local messages;
//! a layer on volley's public API cannot read another rank's memory, and one check for both
//! transports keeps them alike).
//!
//! **Requests and replies.** A request handler gets a [`Token`] that replies once (by value),
//! into the requester endpoint's reply queue. **Replying is not required**: a handler that
//! drops its token sends nothing, as in volley's core (AM-II says every request handler must
//! reply; here the bounded queues and returned messages do the flow control that rule was
//! for, so a one-way request costs one message, not two). Reply handlers and handler 0 get no
//! token and cannot capture the runtime or an endpoint (handlers are `Send + 'static`, the
//! runtime and endpoints are not `Send`): they cannot send, by type.
//!
//! **Threads (requirement 8).** volley's handlers of this layer (which only queue or return)
//! may run on volley's progress thread (`VOLLEY_PROGRESS=thread`) while the program thread
//! polls its endpoints: the queues are shared under a lock. An endpoint itself is driven by the
//! thread that drives the runtime: [`Endpoint`] and [`Endpoints`] are neither `Send` nor
//! `Sync`, so several threads cannot poll one endpoint, and handlers of an endpoint run one at
//! a time, on that thread. Refused because a request handler's reply is a volley send, and
//! volley's [`volley::Runtime`] is driven by one thread:
//!
//! ```compile_fail
//! let mut b = volley::Runtime::builder();
//! let setup = volley_endpoint::Endpoints::register(&mut b);
//! let rt = b.build().unwrap();
//! let eps = setup.attach(&rt);
//! let ep = eps.open(7);
//! std::thread::scope(|s| {
//!     s.spawn(|| ep.poll()); // `Endpoint` is not `Sync`
//! });
//! ```
//!
//! and a handler cannot take the runtime along to send from a reply:
//!
//! ```compile_fail
//! let mut b = volley::Runtime::builder();
//! let setup = volley_endpoint::Endpoints::register(&mut b);
//! let rt = b.build().unwrap();
//! let eps = setup.attach(&rt);
//! let ep = eps.open(7);
//! let rt2 = &rt;
//! ep.set_reply_handler(1, move |_m| {
//!     rt2.poll(); // `&Runtime` is not `Send`
//! });
//! ```
//!
//! A ping-pong between endpoint 0 of every rank and endpoint 0 of its right neighbour,
//! names exchanged through a file:
//!
//! ```no_run
//! use volley_endpoint::{EndpointName, Endpoints};
//! use std::sync::{Arc, atomic::{AtomicU64, Ordering}};
//! let mut b = volley::Runtime::builder();
//! let setup = Endpoints::register(&mut b);
//! let rt = b.build().unwrap();
//! let eps = setup.attach(&rt);
//! let ep = eps.open(0xfeed);
//! let served = Arc::new(AtomicU64::new(0));
//! let s = served.clone();
//! ep.set_request_handler(1, move |m, token| {
//!     token.reply(2, &[m.arg(0) + 1], &[]).unwrap();
//!     s.fetch_add(1, Ordering::Release);
//! }).unwrap();
//! let got = Arc::new(AtomicU64::new(0));
//! let g = got.clone();
//! ep.set_reply_handler(2, move |m| g.store(m.arg(0), Ordering::Release)).unwrap();
//! ep.set_returned_handler(|r| panic!("returned: {:?}", r.reason()));
//! std::fs::write(format!("name.{}", rt.rank()), ep.name().to_string()).unwrap();
//! rt.barrier();
//! let right = (rt.rank() + 1) % rt.size();
//! let name: EndpointName = std::fs::read_to_string(format!("name.{right}")).unwrap().parse().unwrap();
//! let i = ep.map_any(name, 0xfeed).unwrap();
//! ep.request(i, 1, &[41], &[]).unwrap();
//! // Our reply, and the left neighbour's request served (its handler runs in our polls).
//! ep.wait_until(|| got.load(Ordering::Acquire) == 42 && served.load(Ordering::Acquire) == 1);
//! ```

mod endpoint;
mod error;
mod layer;
mod message;
mod name;
mod registry;
mod table;
mod wire;

pub use endpoint::Endpoint;
pub use error::{EndpointError, NameError, Result};
pub use layer::{EndpointConfig, Endpoints, EndpointsSetup, LayerStats};
pub use message::{Message, Reason, Returned, Token};
pub use name::{EndpointId, EndpointName, NAME_BYTES};
pub use table::{Route, Translation};
pub use wire::Kind;

/// Most arguments an endpoint message carries (AM-II's short messages carry eight).
pub const MAX_ARGS: usize = 8;

/// Entries in an endpoint's handler table (index 0 is the returned-message handler).
pub const HANDLERS: usize = 256;

/// Default depth of each of an endpoint's request and reply queues.
pub const DEFAULT_QUEUE_DEPTH: usize = 1024;

/// Default entries in an endpoint's translation table.
pub const DEFAULT_TRANSLATIONS: usize = 256;
