//! # volley-prim
//!
//! Seed 003's low-level interface (Rosing and Saltz, "Low Latency Messages on Distributed
//! Memory Multiprocessors", §6 and the requirements 2-17 and 24 of its note), written on
//! volley's public API: three primitives,
//!
//! - [`Prim::send`]`(destination, information, is_more)`,
//! - [`Prim::receive`]`(source, information)`,
//! - [`Prim::is_information`]`(source, information_type)` (three-state: [`Probe`]),
//!
//! over one **network input buffer** per rank: a ring of 8-byte words with a configurable
//! capacity (4 KiB by default, the iPSC/860's FIFO of 1024 four-byte words) in a volley
//! segment, plus a **link word** at each receiver. A sender takes the link (an atomic
//! compare-and-swap), writes `[header][payload]`, publishes the tail with a release store and
//! frees the link. Destinations: [`Dest::Internal`] (the communication thread), one rank, a
//! rank list (multicast: one copy to each listed rank, in the order every sender sees), or
//! [`Dest::PreviousChain`]. Information: raw bytes ([`Info::Data`]) or a procedure packet
//! ([`Info::Procedure`], a handler id checked against the table every rank registers — never
//! an address).
//!
//! **Channels.** `is_more = true` keeps the link: until the chain closes no other sender's
//! packet enters the receiver's buffer (they are held back, counted in
//! [`Stats::held_back`]), and packets sent with [`Dest::PreviousChain`] carry **no header**:
//! their bytes go into the ring as they are (rounded up to whole words). A one-word mark per
//! ring word, outside the ring, tells headers from payload (the FIFO's end-of-data sideband).
//! [`Pipe`] is the fast path inside a channel: an inlined store of one word.
//!
//! **Transports.** To a rank whose memory is mapped (shared memory, volley's one-sided direct
//! path) everything is loads, stores and CPU atomics. To a rank on another node (UDP, TCP)
//! the same steps are volley's one-sided operations (compare-and-swap, put, atomic store) on
//! the AM path: slower, same semantics.
//!
//! **Progress** ([`Progress`]): the program thread polls (`inline`), a communication thread
//! polls and forwards (`comm-thread`; its sends to other nodes are handed to the program
//! thread, which alone drives volley's runtime), a blocked receive sleeps on a futex until a
//! sender's notification (`interrupt`; with ranks on other nodes, in volley's wait on the
//! socket and eventfd, which their messages end), or probes in a loop (`probe`). **Notifications** ([`Notify`]):
//! never, at a packet's start, at its end, or when the buffer crosses half full.
//!
//! **Back-pressure.** A send waits while a destination's buffer is full (nothing is dropped
//! or overwritten; [`Stats::full_stalls`]) and while another chain holds the link. Two ranks
//! that each wait for room at the other while neither receives wait forever, as on the
//! seed's hardware: receivers must drain. A send to this rank's own full buffer fails
//! ([`PrimError::OwnBufferFull`]) instead.
//!
//! ```no_run
//! use volley_prim::{Dest, Info, Prim, PrimConfig, Recv, Source};
//! let mut b = volley::Runtime::builder();
//! let setup = Prim::register(&mut b, PrimConfig::from_env().unwrap());
//! let rt = b.build().unwrap();
//! let p = setup.attach(&rt).unwrap();
//! if p.rank() == 0 {
//!     let mut pipe = p.pipe_create(1).unwrap(); // send(1, (0, 0), 1)
//!     for i in 0..100 {
//!         pipe.put_f64(i as f64); // one store into rank 1's buffer
//!     }
//!     pipe.close().unwrap(); // send(previous_chain, (0, 0), 0)
//! } else if p.rank() == 1 {
//!     for i in 0..100 {
//!         assert_eq!(p.pipe_get_f64().unwrap(), i as f64);
//!     }
//! }
//! p.send(Dest::Rank((p.rank() + 1) % p.size()), Info::Data(b"hi"), false).unwrap();
//! let mut buf = [0u8; 2];
//! p.receive(Source::Network, Recv::Data(&mut buf)).unwrap();
//! ```

#[cfg(not(loom))]
mod comm;
#[cfg(not(loom))]
mod config;
#[cfg(not(loom))]
mod counters;
#[cfg(not(loom))]
mod error;
#[cfg(not(loom))]
mod futex;
#[cfg(not(loom))]
mod handoff;
mod idle;
#[cfg(not(loom))]
mod invocation;
#[cfg(not(loom))]
mod outbound;
#[cfg(not(loom))]
mod pipe;
#[cfg(not(loom))]
mod prim;
#[cfg(not(loom))]
mod recv;
#[cfg(not(loom))]
mod remote;
#[cfg(not(loom))]
mod ring;

#[cfg(not(loom))]
pub use config::{Handler, Notify, PrimConfig, Progress, SETTINGS};
#[cfg(not(loom))]
pub use counters::Stats;
#[cfg(not(loom))]
pub use error::{PrimError, Result};
#[cfg(not(loom))]
pub use invocation::Invocation;
#[cfg(not(loom))]
pub use pipe::Pipe;
#[cfg(not(loom))]
pub use prim::{Prim, PrimSetup};
#[cfg(not(loom))]
pub use remote::{RemoteMemory, REMOTE_DONE_ID, REMOTE_READ_ID, REMOTE_WRITE_ID};

// Under `--cfg loom` only the idle protocol's model builds (volley itself is its models then).

/// Default network input buffer capacity: the iPSC/860's FIFO, "1024 4 byte words".
pub const DEFAULT_CAPACITY: usize = 4096;

/// Largest procedure (handler) id.
pub const MAX_HANDLER_ID: u32 = 4095;

/// Where a [`Prim::send`] goes (seed 003 Fig. 2's `destination`).
#[derive(Debug, Clone, Copy)]
pub enum Dest<'a> {
    /// The internal buffer to this rank's communication thread (`comm-thread` mode only).
    Internal,
    /// One rank's network input buffer.
    Rank(usize),
    /// Each listed rank's buffer once (multicast); not empty, no rank twice.
    Ranks(&'a [usize]),
    /// Where the open chain goes (its packets carry no header).
    PreviousChain,
}

/// What a [`Prim::send`] carries (seed 003 Fig. 2's `information`).
#[derive(Debug, Clone, Copy)]
pub enum Info<'a> {
    /// Raw bytes; `Data(&[])` is the seed's `(0, 0)` packet, which opens or closes a chain
    /// and delivers nothing.
    Data(&'a [u8]),
    /// A procedure packet: the receiver runs the handler registered under this id, which
    /// reads its own arguments from the chain.
    Procedure(u32),
}

/// Which buffer a receive or probe reads (seed 003 Fig. 2's `source`): never a sender or tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// Replies and data from the communication thread (`comm-thread` mode only).
    Internal,
    /// This rank's network input buffer.
    Network,
}

/// The information type `is_information` asks about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InfoType {
    /// Raw bytes (a data packet or chained payload).
    Data,
    /// A procedure packet.
    Procedure,
}

/// `is_information`'s three answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Probe {
    /// Information of the asked type is next.
    Match,
    /// Nothing is there.
    Empty,
    /// Information is there, of the other type.
    WrongType,
}

/// What a receive takes.
#[derive(Debug)]
pub enum Recv<'a> {
    /// Exactly `buf.len()` bytes: a data packet of that size or as many chained bytes.
    Data(&'a mut [u8]),
    /// A procedure packet, whose handler runs before the receive returns.
    Procedure,
}

/// What a receive got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received {
    /// The sender, when the information had a header (chained bytes have none).
    pub from: Option<usize>,
    /// The handler id, for a procedure.
    pub procedure: Option<u32>,
}
