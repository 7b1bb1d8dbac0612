//! Per-rank counters (seed 003 §5.1 item 24), shared with the communication thread.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        /// The live counters.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// A snapshot of one rank's counters.
        #[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
        pub struct Stats {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> Stats {
                Stats { $($name: self.$name.load(Relaxed),)* }
            }
        }
    };
}

counters! {
    /// `send` calls that delivered a packet or chained data (each destination counts).
    messages_sent,
    /// Payload bytes sent (each destination counts).
    bytes_sent,
    /// Bytes written into input buffers, headers and padding included (each destination
    /// counts): inside an open channel this equals the payload rounded up to whole words.
    ring_bytes_sent,
    /// Data receives completed (written by the program thread only).
    messages_received,
    /// Payload bytes received (written by the program thread only).
    bytes_received,
    /// Chains opened.
    chain_opens,
    /// Chains closed.
    chain_closes,
    /// Sends that found a destination buffer full and waited (back-pressure).
    full_stalls,
    /// Sends held back because another sender's chain held the link.
    held_back,
    /// Overflows to memory: always 0, a full buffer holds the sender back instead.
    spills,
    /// Notifications this rank raised at other buffers.
    notifications_raised,
    /// Kernel sleeps of this rank's receives (`interrupt` mode).
    sleeps,
    /// System calls on the send and receive paths (futex wait and wake).
    syscalls,
    /// Procedure packets whose handler ran on this rank.
    handler_invocations,
    /// Times this rank's communication thread, idle, slept on its buffer's doorbell.
    comm_sleeps,
    /// Those sleeps a ring ended (an arrival, a hand-off, the layer stopping), not the
    /// timeout.
    comm_woken,
}

impl Counters {
    pub(crate) fn add(c: &AtomicU64, n: u64) {
        c.fetch_add(n, Relaxed);
    }

    /// Adds `n` to a counter with one writer, the program thread (a `Prim` is not `Sync`):
    /// a load and a store. A locked read-modify-write would wait on every receive for the
    /// store buffer to drain, including the HEAD store whose cache line the sender reads.
    #[inline]
    pub(crate) fn add_own(c: &AtomicU64, n: u64) {
        c.store(c.load(Relaxed) + n, Relaxed);
    }
}
