//! # volley-task
//!
//! Seed 002's task layer over volley's one-sided operations (`volley::rma`), written on their
//! public API as `volley-global` is:
//!
//! - **Logical task addressing** (requirements 1 and 2): a task is named by a logical id; its
//!   home rank (`id % size`) keeps its [`Location`] (rank, epoch, segments), which every
//!   rank caches. [`Tasks::put`], [`Tasks::get`] and [`Tasks::fetch_add`] name the task and
//!   one of its segments, never a rank.
//! - **Migration**: [`Tasks::migrate`] (called by the owner and by the new owner) copies the
//!   task's segments to the new owner and moves it to the next epoch. The old owner seals its
//!   segments first, so that an access still aimed at them is either applied before the seal
//!   (and copied) or refused; the caller then asks the old owner, which answers with the new
//!   location (`Moved`, and its epoch) or "moving" (ask again), and retries there
//!   ([`TaskStats::retried`]). Nothing is lost. The task layer's accesses always go through
//!   the target's handlers ([`volley::rma::Rma::through_handlers`]): on the direct path the
//!   initiator checks and then copies, two steps a seal cannot come between.
//! - **First contact** (requirement 6): [`Tasks::contact`] puts a message in a rank's
//!   bounded queue without any segment key; the runtime records the issuer. The owner reads
//!   it with [`Tasks::contact_poll`], and can [`Tasks::contact_cancel`] an issuer's queued
//!   messages or [`Tasks::contact_refuse`] it (its queued messages dropped, new ones refused
//!   with [`ContactStatus::Refused`]). Every drop and refusal is counted.
//! - **Bounded work** (requirement 9): [`Tasks::work`] sums the target-side work
//!   ([`volley::rma::TargetWork`]) of a task's segments at its owner.
//!
//! ```no_run
//! use volley::rma::{Perms, Rma};
//! use volley_task::Tasks;
//! # fn main() -> volley_task::Result<()> {
//! let mut b = volley::Runtime::builder();
//! let rma = Rma::register(&mut b);
//! let tasks = Tasks::register(&mut b);
//! let rt = b.build()?;
//! let rma = rma.attach(&rt);
//! let tasks = tasks.attach(&rt, &rma);
//! if rt.rank() == 0 {
//!     tasks.create(7, &[(4096, Perms::ALL)])?;
//! }
//! rt.barrier();
//! tasks.fetch_add(7, 0, 0, 1)?; // wherever task 7 lives
//! # Ok(()) }
//! ```

mod contact;
mod error;
mod location;
mod state;
mod tasks;

pub use contact::{Contact, ContactCounts, ContactStatus, CONTACT_CAPACITY};
pub use error::{Result, TaskError};
pub use location::Location;
pub use tasks::{TaskStats, Tasks, TasksSetup};
