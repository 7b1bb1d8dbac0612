//! Active Messages: every message names a handler that runs on arrival.
//!
//! ```no_run
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use std::sync::Arc;
//!
//! let value = Arc::new(AtomicU64::new(u64::MAX));
//! let mut b = volley::Runtime::builder();
//! let got = {
//!     let value = value.clone();
//!     b.reply_handler("got", move |m| value.store(m.arg(0), Ordering::Release))
//! };
//! let double = b.request_handler("double", move |m, reply| {
//!     reply.reply_short(got, &[m.arg(0) * 2]).unwrap();
//! });
//! let rt = b.build().unwrap();
//! rt.request_short((rt.rank() + 1) % rt.size(), double, &[21]).unwrap();
//! rt.wait_until(|| value.load(Ordering::Acquire) != u64::MAX);
//! assert_eq!(value.load(Ordering::Relaxed), 42);
//! ```
//!
//! The builder assigns each handler a job-wide index ([`RequestHandler`], [`ReplyHandler`]);
//! the index, not an address, travels in the message, so ASLR and separate binaries are fine as
//! long as every rank registers the same table (checked at init).
//!
//! Seed 000's classification (Table 4-11) of this instance of Active Messages:
//!
//! | aspect | volley (shared-memory transport) |
//! |---|---|
//! | format | 64-bit header (handler index, argument count, kind, slots, sequence, check) + up to 16 u64 arguments; medium payload inline or in a sender buffer; long payload in the target segment |
//! | placement | sender writes straight into the receiver's per-sender ring; long payloads into the receiver's segment |
//! | send ops | `request_short/medium/long`; `reply_short/medium/long` on the token; `try_request_*` / `try_reply_*`, which never wait or poll (`Error::WouldBlock`) |
//! | receive ops | `poll`, `wait_until`, `barrier`, blocked sends |
//! | reception events | a published slot header with the expected sequence number |
//! | send completion | on return: the source buffer is reusable |
//! | synchronization | `wait_until` on flags set by handlers; `barrier` |

mod backoff;
mod config;
mod critical;
mod delivery;
mod engine;
pub mod error;
mod handler;
mod lease;
mod nap_cut;
mod progress;
pub mod report;
mod runtime;
mod stats;
mod watchdog;
mod wireup;

#[cfg(test)]
mod tests;

pub use config::{parse_size, DEFAULT_MEDIUM_BUFFERS, DEFAULT_RING_SLOTS, DEFAULT_SEGMENT_BYTES};
pub use handler::{
    Message, MessageClass, ReplyFn, ReplyHandler, ReplyNotSent, ReplyToken, RequestFn,
    RequestHandler,
};
pub(crate) use runtime::DirectMemory;
pub(crate) use wireup::reads_as_endpoint_info;

pub use delivery::Delivery;
pub use error::{Error, Result};
pub(crate) use runtime::Entered;
pub use runtime::{Runtime, RuntimeBuilder, MAX_HANDLERS};
pub use stats::{NetworkStats, ProgressStats, Stats};
