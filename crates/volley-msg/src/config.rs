//! The layer's settings: the eager limit and the unexpected queue's size, from the code or
//! from `VOLLEY_MSG_*`, and the `VOLLEY_*` table volley's settings check reads.

use crate::error::{MsgError, Result};
use volley::settings::{Scope, Setting};

/// Bytes an unexpected message costs beyond its payload (its envelope and bookkeeping); a
/// rendezvous announcement costs this alone.
pub const ENVELOPE_BYTES: usize = 64;

/// Default largest payload sent eagerly.
pub const DEFAULT_EAGER_BYTES: usize = 16 << 10;
/// Default size of each rank's unexpected queue.
pub const DEFAULT_UNEXPECTED_BYTES: usize = 8 << 20;
/// The largest payload that travels in a short Active Message's arguments (packed eight
/// bytes to a word after a word of tag and length) rather than as a medium one's payload: a
/// short frame takes the transports' quickest path.
pub const WORDS_EAGER_BYTES: usize = 8 * (volley::MAX_ARGS - 1);

/// Chunk requests a rendezvous receive keeps in flight.
pub const DEFAULT_PULL_DEPTH: usize = 4;

/// The variables this layer reads.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "VOLLEY_MSG_EAGER_BYTES",
        accepts: "a size (bytes, or with k or m) up to 64k",
        purpose:
            "the largest message the tag-matching layer sends eagerly (larger ones use rendezvous)",
        scope: Scope::Always,
        check: |v| volley::am::parse_size(v).is_some_and(|n| n <= 64 << 10),
    },
    Setting {
        name: "VOLLEY_MSG_UNEXPECTED_BYTES",
        accepts: "a size (bytes, or with k, m or g) of at least 64k",
        purpose: "memory of each rank's unexpected-message queue in the tag-matching layer",
        scope: Scope::Always,
        check: |v| volley::am::parse_size(v).is_some_and(|n| n >= 64 << 10),
    },
    Setting {
        name: "VOLLEY_MSG_SINGLE_COPY",
        accepts: "on or off",
        purpose: "whether a rendezvous message between processes of one node is read straight from the sender's memory (one copy) rather than pulled in chunks",
        scope: Scope::Always,
        check: |v| matches!(v, "on" | "off"),
    },
];

/// How the layer runs. Every rank must use the same (checked when the runtime is built).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MsgConfig {
    /// Payloads up to this many bytes go eagerly (one medium Active Message); larger ones by
    /// rendezvous. At most the runtime's medium maximum (64 KiB).
    pub eager_bytes: usize,
    /// Memory of this rank's unexpected queue: each of the job's ranks may fill an equal
    /// share of it with messages not yet received.
    pub unexpected_bytes: usize,
    /// Whether a rendezvous message between processes of one node is read straight from the
    /// sender's memory (`process_vm_readv`, one copy) rather than pulled in medium-message
    /// chunks; where the kernel refuses such reads, the receiver pulls. Ranks may differ.
    pub single_copy: bool,
}

impl Default for MsgConfig {
    fn default() -> Self {
        Self {
            eager_bytes: DEFAULT_EAGER_BYTES,
            unexpected_bytes: DEFAULT_UNEXPECTED_BYTES,
            single_copy: true,
        }
    }
}

impl MsgConfig {
    /// The defaults, overridden by `VOLLEY_MSG_EAGER_BYTES`, `VOLLEY_MSG_UNEXPECTED_BYTES` and
    /// `VOLLEY_MSG_SINGLE_COPY`.
    pub fn from_env() -> Result<Self> {
        let mut c = Self::default();
        match std::env::var("VOLLEY_MSG_SINGLE_COPY")
            .as_deref()
            .map(str::trim)
        {
            Ok("on") | Ok("") | Err(_) => {}
            Ok("off") => c.single_copy = false,
            Ok(v) => {
                return Err(MsgError::InvalidConfig {
                    name: "VOLLEY_MSG_SINGLE_COPY",
                    value: v.to_string(),
                    why: "expected on or off".into(),
                })
            }
        }
        for (name, field) in [
            ("VOLLEY_MSG_EAGER_BYTES", &mut c.eager_bytes),
            ("VOLLEY_MSG_UNEXPECTED_BYTES", &mut c.unexpected_bytes),
        ] {
            match std::env::var(name) {
                Ok(v) if !v.trim().is_empty() => {
                    *field = volley::am::parse_size(&v).ok_or_else(|| MsgError::InvalidConfig {
                        name,
                        value: v.clone(),
                        why: "expected a size: bytes, or a number with k, m or g".into(),
                    })?;
                }
                _ => {}
            }
        }
        Ok(c)
    }

    /// The sizes this job runs with, or why they cannot work for `ranks` ranks.
    pub(crate) fn limits(&self, ranks: usize, max_medium: usize) -> Result<Limits> {
        if self.eager_bytes > max_medium {
            return Err(MsgError::InvalidConfig {
                name: "eager_bytes",
                value: self.eager_bytes.to_string(),
                why: format!("at most the medium maximum, {max_medium} bytes"),
            });
        }
        let share = self.unexpected_bytes / ranks.max(1);
        if share < 4 * ENVELOPE_BYTES {
            return Err(MsgError::InvalidConfig {
                name: "unexpected_bytes",
                value: self.unexpected_bytes.to_string(),
                why: format!(
                    "each of the {ranks} ranks' share ({share} bytes) must hold 4 envelopes of {ENVELOPE_BYTES} bytes"
                ),
            });
        }
        // A sender waiting for room needs at most one eager message's cost; holding eager
        // messages to half a share keeps the return threshold (a quarter) reachable, so credit
        // always comes back once the receiver has received what it holds (see `flow`).
        let eager = self.eager_bytes.min(share / 2 - ENVELOPE_BYTES);
        Ok(Limits {
            eager,
            share,
            return_at: share / 4,
        })
    }
}

/// The sizes a job runs with, derived from [`MsgConfig`] and the job's size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    /// Largest eager payload.
    pub(crate) eager: usize,
    /// Bytes of a receiver's unexpected queue each sender may fill.
    pub(crate) share: usize,
    /// Freed bytes a receiver returns to the sender at once.
    pub(crate) return_at: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eager_messages_fit_half_a_share() {
        let c = MsgConfig {
            eager_bytes: 16 << 10,
            unexpected_bytes: 64 << 10,
            ..MsgConfig::default()
        };
        let l = c.limits(8, 64 << 10).unwrap();
        assert_eq!(l.share, 8 << 10);
        assert_eq!(l.eager, (4 << 10) - ENVELOPE_BYTES);
        assert!(l.eager + ENVELOPE_BYTES <= l.share - l.return_at);
        assert!(c.limits(1 << 12, 64 << 10).is_err());
        assert!(MsgConfig {
            eager_bytes: 1 << 20,
            ..c
        }
        .limits(2, 64 << 10)
        .is_err());
    }
}
