//! Runtime settings: builder values, else `VOLLEY_*` environment variables, else defaults.

use crate::error::{Error, Result};

/// Default slots per ring (64 × 64 B = 4 KiB per sender and channel).
pub const DEFAULT_RING_SLOTS: usize = 64;
/// Default medium buffers per channel.
pub const DEFAULT_MEDIUM_BUFFERS: usize = 4;
/// Default segment size: 4 MiB (address space; pages are committed on first touch).
pub const DEFAULT_SEGMENT_BYTES: usize = 4 << 20;

/// Settings of one runtime.
#[derive(Debug, Clone, Default)]
pub(crate) struct Config {
    pub(crate) ring_slots: Option<usize>,
    pub(crate) medium_buffers: Option<usize>,
    pub(crate) segment_bytes: Option<usize>,
    pub(crate) polite: Option<bool>,
}

fn env_usize(name: &'static str) -> Result<Option<usize>> {
    match std::env::var(name) {
        Err(_) => Ok(None),
        Ok(v) => parse_size(&v).map(Some).ok_or(Error::InvalidConfig {
            name,
            value: v,
            why: "expected a number, optionally with K, M or G",
        }),
    }
}

/// Parses `123`, `4K`, `16M`, `1G` (binary multiples).
pub fn parse_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, mul) = match s.char_indices().last()? {
        (i, 'k' | 'K') => (&s[..i], 1 << 10),
        (i, 'm' | 'M') => (&s[..i], 1 << 20),
        (i, 'g' | 'G') => (&s[..i], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

impl Config {
    pub(crate) fn ring_slots(&self) -> Result<usize> {
        Ok(match self.ring_slots {
            Some(v) => v,
            None => env_usize("VOLLEY_RING_SLOTS")?.unwrap_or(DEFAULT_RING_SLOTS),
        })
    }

    pub(crate) fn medium_buffers(&self) -> Result<usize> {
        Ok(match self.medium_buffers {
            Some(v) => v,
            None => env_usize("VOLLEY_MEDIUM_BUFFERS")?.unwrap_or(DEFAULT_MEDIUM_BUFFERS),
        })
    }

    pub(crate) fn segment_bytes(&self) -> Result<usize> {
        Ok(match self.segment_bytes {
            Some(v) => v,
            None => env_usize("VOLLEY_SEGMENT_BYTES")?.unwrap_or(DEFAULT_SEGMENT_BYTES),
        })
    }

    /// Whether to yield early while waiting: explicit setting, else `VOLLEY_POLITE`, else
    /// automatic (more ranks on this host than cores this process may run on).
    pub(crate) fn polite(&self, local_ranks: usize) -> Result<bool> {
        if let Some(p) = self.polite {
            return Ok(p);
        }
        match std::env::var("VOLLEY_POLITE").as_deref() {
            Ok("1") | Ok("yes") | Ok("true") => Ok(true),
            Ok("0") | Ok("no") | Ok("false") => Ok(false),
            Ok("auto") | Err(_) => {
                let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
                Ok(local_ranks > cores)
            }
            Ok(other) => Err(Error::InvalidConfig {
                name: "VOLLEY_POLITE",
                value: other.to_string(),
                why: "expected 0, 1 or auto",
            }),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::parse_size;

    #[test]
    fn sizes_parse_with_suffixes() {
        assert_eq!(parse_size("64"), Some(64));
        assert_eq!(parse_size("4K"), Some(4096));
        assert_eq!(parse_size("16m"), Some(16 << 20));
        assert_eq!(parse_size("1G"), Some(1 << 30));
        assert_eq!(parse_size("x"), None);
        assert_eq!(parse_size(""), None);
        assert_eq!(parse_size("-1"), None);
    }
}
