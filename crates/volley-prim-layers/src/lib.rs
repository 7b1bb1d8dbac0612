//! # volley-prim-layers
//!
//! Seed 003's layers (§5, §6.1, requirements 18-23 of its note), each written only on
//! [`volley_prim`]'s public primitives (`send`, `receive`, `is_information`, the pipe):
//!
//! - [`Typed`]: buffered **typed messages** (item 22). A send is two chained packets, a
//!   header (type, length) and the payload; receives demultiplex what arrives into a table
//!   keyed by type, so types may be received in any order; the unexpected memory is bounded.
//! - [`trisolve`]: the pipelined banded lower-triangular solve of the seed's test B, in the
//!   four versions B0 (typed), B1 (raw packets), B2 (open channel) and B3 (fetch requests
//!   served by a procedure packet's handler), for experiment E2 (`seed003-trisolve`).
//! - [`sparse`]: the sparse triangular solve with a run-time pattern (§5): conditional
//!   (deferred) remote fetch (item 21) and inspector/executor schedules with flow-control
//!   credits (item 23), and a level-scheduled solve with typed messages, for experiment E9
//!   (`seed003-sparse`).
//! - [`timing`]: the experiments' timing harness (item 25): computation and communication
//!   apart, the last rank to complete, per-message latencies (median, p99).

pub mod sparse;
pub mod timing;
pub mod trisolve;
mod typed;

pub use typed::{Typed, TypedError, DEFAULT_UNEXPECTED_LIMIT};
