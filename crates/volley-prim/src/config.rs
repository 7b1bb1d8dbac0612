//! The layer's settings: progress mode, notification threshold, capacity, handler table.

use crate::error::{PrimError, Result};
use crate::invocation::Invocation;
use std::sync::Arc;

/// How a rank waits for and drains its network input buffer (seed 003 §5.1 item 4). The same
/// program gives the same results in every mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// The program thread polls the buffer itself (MX with interrupts off).
    InlinePoll,
    /// A communication thread polls the network buffer and the internal buffer, runs
    /// procedure packets and forwards data to the program thread (the seed's communication
    /// processor).
    CommThread,
    /// A blocked receive sleeps in the kernel (futex) until a sender's notification wakes it
    /// (the analogue of the i860's interrupts); a rank with peers on other nodes sleeps in
    /// volley's wait on its socket and eventfd instead, which a message ends.
    Interrupt,
    /// A blocked receive calls `is_information` in a loop (the seed's probe loop).
    ProbeLoop,
}

impl Progress {
    /// Every mode, in the order the experiments report them.
    pub const ALL: [Progress; 4] = [
        Progress::InlinePoll,
        Progress::CommThread,
        Progress::Interrupt,
        Progress::ProbeLoop,
    ];

    /// The mode's name: `inline`, `comm-thread`, `interrupt`, `probe`.
    pub fn name(self) -> &'static str {
        match self {
            Progress::InlinePoll => "inline",
            Progress::CommThread => "comm-thread",
            Progress::Interrupt => "interrupt",
            Progress::ProbeLoop => "probe",
        }
    }

    /// Parses a name of [`Progress::name`].
    pub fn parse(s: &str) -> Result<Self> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == s)
            .ok_or_else(|| {
                PrimError::Config(format!(
                    "progress mode {s:?}: expected inline, comm-thread, interrupt or probe"
                ))
            })
    }
}

/// When a sender raises a notification at the receiver's buffer (the iPSC/860 control
/// register's settings). A raised notification is counted at the receiver and wakes it if
/// it sleeps (`Progress::Interrupt`); chained payload words never notify by themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Notify {
    /// Never: a sleeping receiver wakes only on its timeout (1 ms).
    Never,
    /// When a packet with a header starts (a lone packet, or a chain's opening).
    Start,
    /// When a packet ends (a lone packet, or a chain's close).
    End,
    /// When the buffer's fill crosses half its capacity upwards (once per crossing).
    HalfFull,
}

impl Notify {
    /// The default for a progress mode: `End` for `Interrupt` (a sleeping receive needs a
    /// wake-up per packet), `Never` otherwise (nobody sleeps, so a notification would only
    /// cost the sender).
    pub fn default_for(p: Progress) -> Self {
        if p == Progress::Interrupt {
            Notify::End
        } else {
            Notify::Never
        }
    }

    /// The threshold's name: `never`, `start`, `end`, `half-full`.
    pub fn name(self) -> &'static str {
        match self {
            Notify::Never => "never",
            Notify::Start => "start",
            Notify::End => "end",
            Notify::HalfFull => "half-full",
        }
    }

    /// Parses a name of [`Notify::name`].
    pub fn parse(s: &str) -> Result<Self> {
        [Notify::Never, Notify::Start, Notify::End, Notify::HalfFull]
            .into_iter()
            .find(|n| n.name() == s)
            .ok_or_else(|| {
                PrimError::Config(format!(
                    "notification {s:?}: expected never, start, end or half-full"
                ))
            })
    }
}

/// A procedure packet's handler: runs on the receiving rank (program thread, or the
/// communication thread) and reads its own arguments from the chain.
pub type Handler = Arc<dyn Fn(&mut Invocation<'_>) + Send + Sync>;

/// Settings of the layer; every rank must use the same (capacity, notification, handlers).
#[derive(Clone)]
pub struct PrimConfig {
    pub(crate) capacity: usize,
    pub(crate) progress: Progress,
    pub(crate) notify: Notify,
    pub(crate) handlers: Vec<Option<Handler>>,
    pub(crate) remote: Option<Arc<crate::remote::RemoteMemory>>,
}

impl std::fmt::Debug for PrimConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PrimConfig")
            .field("capacity", &self.capacity)
            .field("progress", &self.progress)
            .field("notify", &self.notify)
            .finish_non_exhaustive()
    }
}

impl Default for PrimConfig {
    fn default() -> Self {
        Self {
            capacity: crate::DEFAULT_CAPACITY,
            progress: Progress::InlinePoll,
            notify: Notify::Never,
            handlers: Vec::new(),
            remote: None,
        }
    }
}

impl PrimConfig {
    /// The defaults, then `VOLLEY_PRIM_PROGRESS`, `VOLLEY_PRIM_NOTIFY` and
    /// `VOLLEY_PRIM_CAPACITY` when set.
    pub fn from_env() -> Result<Self> {
        let mut c = Self::default();
        if let Ok(v) = std::env::var("VOLLEY_PRIM_PROGRESS") {
            c.progress = Progress::parse(&v)?;
        }
        c.notify = match std::env::var("VOLLEY_PRIM_NOTIFY") {
            Ok(v) => Notify::parse(&v)?,
            Err(_) => Notify::default_for(c.progress),
        };
        if let Ok(v) = std::env::var("VOLLEY_PRIM_CAPACITY") {
            let n = v.parse().map_err(|_| {
                PrimError::Config(format!("VOLLEY_PRIM_CAPACITY={v:?} is not a byte count"))
            })?;
            c = c.capacity(n)?;
        }
        Ok(c)
    }

    /// The network input buffer's capacity in bytes: a power of two from 64 to 1 GiB
    /// (default 4 KiB, the iPSC/860's FIFO of 1024 four-byte words).
    pub fn capacity(mut self, bytes: usize) -> Result<Self> {
        if !bytes.is_power_of_two() || !(64..=1 << 30).contains(&bytes) {
            return Err(PrimError::Config(format!(
                "capacity {bytes}: expected a power of two from 64 to 1 GiB"
            )));
        }
        self.capacity = bytes;
        Ok(self)
    }

    /// The progress mode (the notification threshold follows it unless set: see
    /// [`Notify::default_for`]).
    pub fn progress(mut self, p: Progress) -> Self {
        if self.notify == Notify::default_for(self.progress) {
            self.notify = Notify::default_for(p);
        }
        self.progress = p;
        self
    }

    /// The notification threshold.
    pub fn notify(mut self, n: Notify) -> Self {
        self.notify = n;
        self
    }

    /// Registers `f` under `id` (1..=[`crate::MAX_HANDLER_ID`]); every rank registers the
    /// same ids. Procedure packets name handlers by id, never by address.
    pub fn handler(
        mut self,
        id: u32,
        f: impl Fn(&mut Invocation<'_>) + Send + Sync + 'static,
    ) -> Result<Self> {
        if id == 0 || id > crate::MAX_HANDLER_ID {
            return Err(PrimError::BadHandlerId(id));
        }
        let i = id as usize;
        if self.handlers.len() <= i {
            self.handlers.resize(i + 1, None);
        }
        self.handlers[i] = Some(Arc::new(f));
        Ok(self)
    }

    /// The configured progress mode.
    pub fn progress_mode(&self) -> Progress {
        self.progress
    }
}

/// The variables this layer reads, for `volley run`'s settings check.
pub const SETTINGS: &[volley::settings::Setting] = &[
    volley::settings::Setting {
        name: "VOLLEY_PRIM_PROGRESS",
        accepts: "inline, comm-thread, interrupt or probe",
        purpose: "how seed 003's primitives wait for and drain the network input buffer",
        scope: volley::settings::Scope::Always,
        check: |v| Progress::parse(v).is_ok(),
    },
    volley::settings::Setting {
        name: "VOLLEY_PRIM_NOTIFY",
        accepts: "never, start, end or half-full",
        purpose: "when a sender notifies the receiver's buffer (seed 003's interrupt settings)",
        scope: volley::settings::Scope::Always,
        check: |v| Notify::parse(v).is_ok(),
    },
    volley::settings::Setting {
        name: "VOLLEY_PRIM_CAPACITY",
        accepts: "a power of two from 64 to 1073741824 (bytes)",
        purpose: "each rank's network input buffer in seed 003's primitives",
        scope: volley::settings::Scope::Always,
        check: |v| {
            v.parse::<usize>()
                .is_ok_and(|n| n.is_power_of_two() && (64..=1 << 30).contains(&n))
        },
    },
];
