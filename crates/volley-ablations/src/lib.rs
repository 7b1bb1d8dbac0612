//! The designs the seeds' ablations put beside volley's. Seed 001 sends short messages through
//! one shared queue per receiver whose senders reserve a slot with compare-and-swap, and asks
//! (requirements 15 and 23) how that compares with a lock-based enqueue; volley instead gives
//! every sender a ring of its own per receiver. `volley experiments seed001-contention` floods
//! all four queues below.
//!
//! The queues share everything but the reservation, so that a flood measures exactly
//! that difference: the same 64-byte slots, each with a sequence word that says whose turn it
//! is (a slot holds message `t` when its sequence is `t + 1`, and is free for message `t` when
//! it is `t`), and the same consumer.
//!
//! - [`Ring`]: one producer; its tail is its own, so it reserves nothing.
//! - [`CasQueue`]: any number of producers; a producer claims the next message number with a
//!   compare-and-swap on the shared tail.
//! - [`LockQueue`]: any number of producers; a producer takes a ticket lock, claims the next
//!   number, fills the slot and publishes it, then releases the lock.
//! - [`PrewriteQueue`]: [`CasQueue`] whose producer first writes an unused word of the slot
//!   and fences (the "prewrite plus barrier" of seed 001's footnote 2).

mod queues;
mod slots;
mod sync;

pub use queues::{CasQueue, LockQueue, PrewriteQueue, Ring};
pub use slots::{Message, Slots, SPARE, WORDS};

/// A queue producers push messages into. `push` returns false when the queue is full.
pub trait Enqueue: Sync {
    /// Tries to enqueue `msg`; false when the queue is full (nothing written).
    fn try_push(&self, msg: &Message) -> bool;
    /// The consuming side (one consumer).
    fn slots(&self) -> &Slots;
}

#[cfg(all(test, loom))]
mod loom_models;
