//! # volley-global
//!
//! Split-C's global address space (seed 004) on volley: typed global pointers, spread arrays
//! allocated collectively, blocking `read`/`write`, split-phase `get`/`put` completed by
//! `sync`, one-way `store` counted at the target (`store_sync`, `all_store_sync`), bulk
//! variants of each, atomic procedures run at the owner, remote pushes onto per-rank buckets,
//! and collectives.
//!
//! This crate uses only volley's public API: Active Message handlers registered in a
//! [`volley::RuntimeBuilder`], and the one-sided layer ([`volley::rma`]). Who carries an
//! operation out is the [`Strategy`] (`proc`, `np` or `hw`, `VOLLEY_STRATEGY`); the result is
//! the same under each, over every transport.
//!
//! ```no_run
//! use volley_global::{Global, Layout, Op};
//! # fn main() -> volley_global::Result<()> {
//! let mut b = volley::Runtime::builder();
//! let mut setup = Global::register(&mut b)?;
//! let bump = setup.atomic_proc(&mut b, "bump", |x: &mut u64, a: &[u64]| {
//!     let old = *x;
//!     *x += a[0];
//!     old
//! });
//! let rt = b.build()?;
//! let g = setup.attach(&rt)?;                          // collective
//! let a = g.all_spread_alloc::<f64>(1000, Layout::Cyclic)?; // collective
//! let me = g.my_proc();
//! g.write(a.ptr(me), 1.5)?;                           // blocking, acknowledged
//! let x = g.read(a.ptr((me + 1) % g.procs()))?;        // blocking
//! let mut y = 0.0;
//! g.phase(|s| {
//!     s.get(&mut y, a.ptr(2))?;                        // split-phase: y := *p
//!     s.put(a.ptr(3), &x)                              // *q := x
//! })?;                                                 // sync at the end of the phase
//! g.store(a.ptr(4), &y)?;                              // one-way, counted at the owner
//! g.all_store_sync()?;                                 // every store is in
//! let old = g.atomic(bump, a.ptr(0).cast()?, &[1])?;   // runs at the owner
//! let total = g.all_reduce_one(x, Op::Sum)?;
//! # let _ = (old, total);
//! # Ok(()) }
//! ```

#[cfg(not(loom))]
mod atomics;
#[cfg(not(loom))]
mod coll;
#[cfg(not(loom))]
mod completion;
pub mod counter;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod global;
#[cfg(not(loom))]
mod handlers;
mod hub_rows;
#[cfg(all(test, loom))]
mod loom_ranks;
#[cfg(not(loom))]
mod ops;
#[cfg(not(loom))]
mod ptr;
#[cfg(not(loom))]
mod reduce;
#[cfg(not(loom))]
pub mod settings;
mod slot;
#[cfg(not(loom))]
mod split_dests;
#[cfg(not(loom))]
mod spread;
#[cfg(not(loom))]
mod strategy;
mod words;

#[cfg(not(loom))]
pub use atomics::{AtomicProc, Bucket};
#[cfg(not(loom))]
pub use error::{GlobalError, Result};
#[cfg(not(loom))]
pub use global::{Global, GlobalSetup};
#[cfg(not(loom))]
pub use ops::{Pending, Phase};
#[cfg(not(loom))]
pub use ptr::GlobalPtr;
#[cfg(not(loom))]
pub use reduce::{Op, Reducible};
#[cfg(not(loom))]
pub use spread::{Layout, SpreadArray};
#[cfg(not(loom))]
pub use strategy::Strategy;
