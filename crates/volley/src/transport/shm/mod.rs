//! Shared-memory transport between ranks on one host.
//!
//! Each rank owns one region: an anonymous `memfd` mapping that holds
//! - its *incoming* rings, one per (local sender, channel), including one from itself (loopback);
//! - its outgoing medium buffers (payloads too large to travel inline in a ring);
//! - its segment, the memory long messages are written into.
//!
//! Regions are exchanged as file descriptors at the rendezvous and mapped by every local rank,
//! so a sender writes straight into the receiver's ring (no send queue) and a receiver reads a
//! pooled medium payload straight out of the sender's buffer (no second copy). A memfd has no
//! name, so nothing can be left behind in `/dev/shm` whatever happens to the job.
//!
//! Trust model (seed 001 §3.3): ranks of one job on one host trust each other; the job key in
//! every frame header guards against misdirected frames, not against a malicious peer.
//!
//! `link` owns the ring protocol for the ranks of a node (one producer and one consumer per
//! ring, credit, padding and hints, retirement); the layer above sends and receives frames
//! through it and never touches a ring itself. Rings, frames and regions are the runtime's
//! own, so they are not public; what a program or tool may read, the layout's sizes, is.

#[cfg(not(loom))]
pub(crate) mod doorbell;
pub(crate) mod frame;
#[cfg(not(loom))]
pub(crate) mod link;
#[cfg(not(loom))]
pub(crate) mod path_marks;
#[cfg(not(loom))]
pub(crate) mod presence;
#[cfg(not(loom))]
mod region;
pub(crate) mod ring;
#[cfg(not(loom))]
pub(crate) mod wake_fd;

#[cfg(not(loom))]
pub(crate) use region::{pool_offset_for, PoolFlags, Region, UPPER_BYTES};
#[cfg(not(loom))]
pub use region::{Layout, MEDIUM_MAX, POOL_BUF_BYTES};
