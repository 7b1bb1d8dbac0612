//! # volley
//!
//! A communication runtime for SPMD parallel programs: Active Messages (seeds 000, 001, 003)
//! over transports chosen per peer, with memory-based one-sided operations. The Split-C global
//! address space on top is the `volley-global` crate, written on this crate's public API.
//!
//! Layers, bottom up (each uses only those below it):
//! - [`bootstrap`]: rank, size, job key, the rendezvous with `volley run`.
//! - [`reliable`]: ordering, acks, retransmission and duplicate suppression for datagram
//!   transports, as a deterministic state machine with no I/O inside (the UDP transport
//!   drives it).
//! - [`transport`]: moving frames between two ranks: [`transport::shm`] rings between the
//!   ranks of a node, [`transport::net`] (UDP, TCP) between nodes.
//! - [`am`]: handler table, request/reply channels and credits, short/medium/long messages,
//!   statistics. [`Runtime`] is the entry point.
//! - [`rma`]: one-sided put, get and atomics on protected segments, directly on mapped memory
//!   or through handlers at the target.
//! - [`xfer`]: seed 000's communication segments and `xfer` bulk transfers, written on the
//!   [`Runtime`]'s public Active Message API.
//!
//! Start a job with `volley run -n 4 ./my_program`; a program started bare is a job of one rank
//! whose messages to itself still go through the rings.

#[cfg(not(loom))]
pub mod am;
#[cfg(not(loom))]
pub mod bootstrap;
#[cfg(not(loom))]
pub mod copy;
#[cfg(not(loom))]
pub(crate) mod counter;
/// The critical-section word alone, for the loom model (the rest of `am` is not built then).
#[cfg(loom)]
#[path = "am/critical.rs"]
mod critical_model;
#[cfg(not(loom))]
pub mod debug;
#[cfg(not(loom))]
mod error;
pub(crate) mod futex;
#[cfg(not(loom))]
#[doc(hidden)]
pub mod fuzzing;
/// The engine lease alone, for the loom model.
#[cfg(loom)]
#[path = "am/lease.rs"]
mod lease_model;
pub(crate) mod membarrier;
/// The progress thread's nap cut alone, for the loom model.
#[cfg(loom)]
#[path = "am/nap_cut.rs"]
mod nap_cut_model;
#[cfg(not(loom))]
mod refusal;
#[cfg(not(loom))]
pub mod reliable;
#[cfg(not(loom))]
pub mod rma;
#[cfg(not(loom))]
pub mod settings;
/// The signal structure's state word alone, for the loom model.
#[cfg(loom)]
#[path = "rma/signal/state.rs"]
mod signal_state_model;
pub(crate) mod sync;
pub mod transport;
#[cfg(not(loom))]
pub mod xfer;

#[cfg(not(loom))]
pub use am::{
    Delivery, Message, MessageClass, NetworkStats, ProgressStats, ReplyHandler, ReplyNotSent,
    ReplyToken, RequestHandler, Runtime, RuntimeBuilder, Stats,
};
#[cfg(not(loom))]
pub use error::{Error, Result};
#[cfg(not(loom))]
pub use refusal::Refusal;
#[cfg(not(loom))]
pub use xfer::XferRefusal;

/// Most u64 arguments a message carries.
pub const MAX_ARGS: usize = 16;
