//! Runtime settings: builder values, else `VOLLEY_*` environment variables, else defaults.

use crate::am::error::{Error, Result};
use crate::transport::net::faults::FaultConfig;
use crate::transport::net::poll_policy::PollPolicy;
use crate::transport::net::tcp::Congestion;
use crate::transport::net::{NetError, NetKind};
use std::net::IpAddr;

/// Default time after which a silent network peer is declared failed.
pub const DEFAULT_PEER_TIMEOUT_SECS: f64 = 10.0;

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
    pub(crate) block: Option<bool>,
    pub(crate) progress_thread: Option<bool>,
    pub(crate) watchdog: Option<std::time::Duration>,
}

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// A two-way setting: unset or `off` is false, `on` is true, anything else is refused.
fn env_switch(name: &'static str, [off, on]: [&str; 2], why: &'static str) -> Result<bool> {
    match env_nonempty(name) {
        None => Ok(false),
        Some(v) if v == off => Ok(false),
        Some(v) if v == on => Ok(true),
        Some(v) => Err(Error::InvalidConfig {
            name,
            value: v,
            why,
        }),
    }
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

    /// `VOLLEY_NET=udp|tcp` (default udp): the transport to ranks on other nodes.
    pub(crate) fn net_kind(&self) -> Result<NetKind> {
        match env_nonempty("VOLLEY_NET").as_deref() {
            None | Some("udp") => Ok(NetKind::Udp),
            Some("tcp") => Ok(NetKind::Tcp),
            Some(other) => Err(Error::InvalidConfig {
                name: "VOLLEY_NET",
                value: other.to_string(),
                why: "expected udp or tcp",
            }),
        }
    }

    /// `VOLLEY_NET_ADDR`: the local address to bind the network transport to (default
    /// 127.0.0.1; a multi-host launch sets the host's address).
    pub(crate) fn net_addr(&self) -> Result<IpAddr> {
        match env_nonempty("VOLLEY_NET_ADDR") {
            None => Ok(IpAddr::from([127, 0, 0, 1])),
            Some(v) => v.parse().map_err(|_| Error::InvalidConfig {
                name: "VOLLEY_NET_ADDR",
                value: v,
                why: "expected an IP address",
            }),
        }
    }

    /// `VOLLEY_PEER_TIMEOUT` in seconds (default 10): a network peer that acknowledges
    /// nothing for this long is declared failed.
    pub(crate) fn peer_timeout_ns(&self) -> Result<u64> {
        let secs = match env_nonempty("VOLLEY_PEER_TIMEOUT") {
            None => DEFAULT_PEER_TIMEOUT_SECS,
            Some(v) => v
                .parse::<f64>()
                .ok()
                .filter(|s| s.is_finite() && *s > 0.0 && *s < 1e6)
                .ok_or(Error::InvalidConfig {
                    name: "VOLLEY_PEER_TIMEOUT",
                    value: v,
                    why: "expected a positive number of seconds",
                })?,
        };
        Ok((secs * 1e9) as u64)
    }

    /// `VOLLEY_TCP_CONGESTION=system|NAME` (default: CUBIC where the kernel has it): the
    /// congestion control of the TCP transport's connections.
    pub(crate) fn tcp_congestion(&self) -> Result<Congestion> {
        Congestion::from_env().map_err(|(value, why)| Error::InvalidConfig {
            name: Congestion::ENV,
            value,
            why,
        })
    }

    /// `VOLLEY_FAULTS`: faults injected into outgoing UDP datagrams (testing).
    pub(crate) fn faults(&self) -> Result<Option<FaultConfig>> {
        match env_nonempty("VOLLEY_FAULTS") {
            None => Ok(None),
            Some(v) => FaultConfig::parse(&v)
                .map(Some)
                .map_err(|why| Error::InvalidConfig {
                    name: "VOLLEY_FAULTS",
                    value: format!("{v} ({why})"),
                    why: "expected drop=P,dup=P,reorder=P,delay_us=N,seed=N",
                }),
        }
    }

    /// `VOLLEY_WAIT=spin|block` (default spin): whether waits sleep in the kernel once they
    /// have spun for a while.
    pub(crate) fn block(&self) -> Result<bool> {
        match self.block {
            Some(b) => Ok(b),
            None => env_switch("VOLLEY_WAIT", ["spin", "block"], "expected spin or block"),
        }
    }

    /// `VOLLEY_PROGRESS=inline|thread` (default inline): whether a progress thread polls and
    /// runs handlers while the program computes.
    pub(crate) fn progress_thread(&self) -> Result<bool> {
        match self.progress_thread {
            Some(t) => Ok(t),
            None => env_switch(
                "VOLLEY_PROGRESS",
                ["inline", "thread"],
                "expected inline or thread",
            ),
        }
    }

    /// `VOLLEY_WATCHDOG_MS=N`: report handlers running longer than N ms (default: off).
    pub(crate) fn watchdog(&self) -> Result<Option<std::time::Duration>> {
        if let Some(d) = self.watchdog {
            return Ok(Some(d));
        }
        match env_nonempty("VOLLEY_WATCHDOG_MS") {
            None => Ok(None),
            Some(v) => match v.parse::<u64>() {
                Ok(0) => Ok(None),
                Ok(ms) => Ok(Some(std::time::Duration::from_millis(ms))),
                Err(_) => Err(Error::InvalidConfig {
                    name: "VOLLEY_WATCHDOG_MS",
                    value: v,
                    why: "expected a number of milliseconds (0 = off)",
                }),
            },
        }
    }

    /// `VOLLEY_POLL`: when polls include the network.
    pub(crate) fn poll_policy(&self) -> Result<PollPolicy> {
        PollPolicy::from_env().map_err(|e| match e {
            NetError::InvalidSetting { name, value, why } => {
                Error::InvalidConfig { name, value, why }
            }
            other => Error::Network(other.to_string()),
        })
    }

    /// Whether to yield early while waiting: explicit setting, else `VOLLEY_POLITE`, else
    /// automatic (more ranks on this host than cores this process may run on).
    ///
    /// The cores are those the launcher's job may use (`VOLLEY_HOST_CPUS`), not this process's
    /// own affinity mask: a rank pinned to one CPU by `--bind` is not oversubscribed.
    pub(crate) fn polite(&self, local_ranks: usize, host_cpus: Option<usize>) -> Result<bool> {
        if let Some(p) = self.polite {
            return Ok(p);
        }
        match std::env::var("VOLLEY_POLITE").as_deref() {
            Ok("1") | Ok("yes") | Ok("true") => Ok(true),
            Ok("0") | Ok("no") | Ok("false") => Ok(false),
            Ok("auto") | Err(_) => {
                let cores = host_cpus
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
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
