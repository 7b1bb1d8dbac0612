//! # volley-msg
//!
//! Tag-matching send and receive on volley, the conventional message-passing model (MPI's
//! `Send`/`Recv`, NX/2's `csend`/`crecv`) as a layer over Active Messages: the baseline seed
//! 000 compares Active Messages with (requirement 37), and useful on its own.
//!
//! - [`Msg::send`], [`Msg::recv`], [`Msg::recv_into`]; non-blocking [`Msg::isend`] and
//!   [`Msg::irecv`] with [`SendRequest`] / [`RecvRequest`] (`test`, `wait`); [`Msg::probe`]
//!   and [`Msg::iprobe`].
//! - Receives select a source or [`ANY_SOURCE`] and a tag or [`ANY_TAG`]. Messages of one
//!   sender match in the order they were sent (MPI's non-overtaking rule), wildcards
//!   included ([`matching`]).
//! - **Eager** up to [`Msg::eager_limit`] (16 KiB by default): one Active Message (a short
//!   one with the payload in its arguments up to [`WORDS_EAGER_BYTES`], a medium one above);
//!   the handler copies it into the posted receive's buffer or queues it. **Rendezvous** above:
//!   the sender announces the message, and the matched receiver pulls it in 64 KiB chunks,
//!   answered by a handler straight from the sender's buffer (see `handlers` for why pull);
//!   between processes of one node it reads the sender's buffer directly instead (one copy,
//!   `process_vm_readv`, [`MsgConfig::single_copy`]), pulling where the kernel refuses.
//! - **Bounded unexpected queue**: each rank's queue holds `unexpected_bytes` (8 MiB by
//!   default, `VOLLEY_MSG_UNEXPECTED_BYTES`), an equal share per sender, counted by the
//!   senders (credits) so it can never overflow. A full share makes [`Msg::isend`] fail with
//!   [`MsgError::UnexpectedFull`] (nothing sent) and [`Msg::send`] wait until the receiver
//!   receives: that is the back-pressure. Nothing is dropped or duplicated.
//!
//! Written only on volley's public API, as `volley-global` is.
//!
//! ```no_run
//! use volley_msg::{Msg, ANY_SOURCE, ANY_TAG};
//! # fn main() -> volley_msg::Result<()> {
//! let mut b = volley::Runtime::builder();
//! let setup = Msg::register(&mut b)?;
//! let rt = b.build()?;
//! let msg = setup.attach(&rt)?;
//! let right = (rt.rank() + 1) % rt.size();
//! msg.send(right, 7, b"hello")?;
//! let m = msg.recv(ANY_SOURCE, 7)?;
//! assert_eq!(m.data, b"hello");
//! let r = msg.irecv(ANY_SOURCE, ANY_TAG)?;
//! msg.send(right, 8, &[1, 2, 3])?;
//! let m = r.wait()?;
//! # let _ = m;
//! # Ok(()) }
//! ```

mod config;
mod error;
mod handlers;
pub mod matching;
mod msg;
mod request;
mod slots;
mod state;

pub use config::{
    MsgConfig, DEFAULT_EAGER_BYTES, DEFAULT_UNEXPECTED_BYTES, ENVELOPE_BYTES, SETTINGS,
    WORDS_EAGER_BYTES,
};
pub use error::{MsgError, Result};
pub use matching::{Source, TagSel, ANY_SOURCE, ANY_TAG};
pub use msg::{Msg, MsgSetup, Received, Status};
pub use request::{RecvRequest, SendRequest};

/// The largest tag (tags are 0..=`MAX_TAG`, as MPI's are non-negative `int`s).
pub const MAX_TAG: u64 = i32::MAX as u64;
