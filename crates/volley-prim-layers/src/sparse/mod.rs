//! Seed 003's sparse lower-triangular solve with a pattern known only at run time (§5), on
//! the primitives, in the ways the seed names:
//!
//! - [`Fetcher`] (item 21): **conditional remote fetch**. A rank asks an owner for a value
//!   that may not be computed yet; the request is parked at the owner and answered when the
//!   value is produced. No preprocessing; a round trip per remote value.
//! - [`inspect`] + [`Executor`] (item 23): **inspector/executor**. The inspector learns who
//!   needs which values from whom and plans batches per pair of ranks; the executor pushes
//!   values to their consumers in the planned order, with the flow-control credits that keep
//!   every input buffer from overflowing. The inspector costs once; the schedule is reused.
//!
//! - [`solve_levels`]: **typed messages, level-scheduled**, the conventional baseline: rounds
//!   of the rows whose operands are known, each round's values sent to every rank.
//!
//! The problem: [`Pattern`] (a reproducible random system), rows dealt by [`Layout`]
//! (cyclic). Every solver evaluates each row in the same order of operations as
//! [`Pattern::serial`], so all give the serial solution bit for bit.
//!
//! Every layer here shares the rank's network input buffer with nothing else while it runs.
//! A solve leaves nothing of itself in this rank's buffer when it returns, but other ranks
//! may still be in it ([`Fetcher::finish`] returns once this rank has every end mark, while
//! another may still wait for one; an executor solve returns once this rank's consumers are
//! done), so a barrier (`Runtime::barrier`) must separate a solve from the next layer's
//! packets. So separated, the two may alternate on one [`volley_prim::Prim`].

mod error;
mod executor;
mod fetch;
mod levels;
mod mailbox;
mod matrix;
mod schedule;

pub use error::{Result, SparseError};
pub use executor::{ExecStats, Executor};
pub use fetch::{solve as solve_fetch, FetchStats, Fetcher};
pub use levels::{round_limit, solve_levels, LevelStats};
pub use mailbox::{with_handlers, SparseSetup, CREDIT_ID, DONE_ID, FETCH_ID};
pub use matrix::{eval, serial_solve, Layout, Pattern, Row};
pub use schedule::{
    inspect, limits, plan, InspectOptions, Operand, Schedule, Step, CREDIT_RESERVE,
};
