//! The socket options of a connection in the steady state, shared with the raw stream floor so
//! that the floor differs from volley's stream only by the protocol.

use std::ffi::OsString;
use std::net::TcpStream;

use nix::sys::socket::{self as sock, sockopt};

use super::{io_err, TcpConfig};
use crate::transport::net::NetError;

/// Which TCP congestion control a connection asks the kernel for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Congestion {
    /// Whatever the system's default is (`net.ipv4.tcp_congestion_control`).
    System,
    /// This algorithm where the kernel has and allows it, else the system's default.
    Preferred(String),
    /// This algorithm, or setting up the connection fails.
    Required(String),
}

impl Default for Congestion {
    /// CUBIC where available. BBR, the default of many cloud images, paces its sending at its
    /// estimate of the path's bandwidth; on a fast path with microsecond round trips (loopback,
    /// a cluster's network) that estimate runs low and varies, and a stream of 1 MiB messages
    /// measured half of what it reaches under CUBIC (4.0-4.4 against 8.2-8.9 GB/s on loopback,
    /// same sitting), with the raw socket stream beside it showing the same.
    fn default() -> Self {
        Congestion::Preferred("cubic".into())
    }
}

impl Congestion {
    /// The environment variable that chooses the congestion control.
    pub const ENV: &'static str = "VOLLEY_TCP_CONGESTION";

    /// From [`Congestion::ENV`] when set and not empty (see [`Congestion::parse`]), else the
    /// default; an unusable value is returned as `Err` with the reason.
    pub fn from_env() -> Result<Self, (String, &'static str)> {
        match std::env::var(Self::ENV) {
            Ok(v) if !v.is_empty() => Self::parse(&v).map_err(|why| (v, why)),
            _ => Ok(Self::default()),
        }
    }

    /// Parses a value of [`Congestion::ENV`]: `system`, or an algorithm's name (required).
    pub fn parse(value: &str) -> Result<Self, &'static str> {
        let value = value.trim();
        if value == "system" {
            return Ok(Congestion::System);
        }
        // The kernel's names are at most 15 bytes (TCP_CA_NAME_MAX, with the NUL).
        let plain = |c: char| c.is_ascii_alphanumeric() || c == '_' || c == '-';
        if value.is_empty() || value.len() > 15 || !value.chars().all(plain) {
            return Err("expected `system` or an algorithm's name such as cubic, reno or bbr");
        }
        Ok(Congestion::Required(value.into()))
    }
}

/// Applies `config`'s options to an established connection: non-blocking, `TCP_NODELAY`, the
/// socket buffers and the congestion control.
pub(crate) fn apply(s: &TcpStream, config: &TcpConfig) -> Result<(), NetError> {
    s.set_nonblocking(true).map_err(io_err("tcp nonblocking"))?;
    s.set_nodelay(true).map_err(io_err("tcp nodelay"))?;
    if config.socket_buffer > 0 {
        // Best effort: the kernel silently caps these, and a refusal only costs bandwidth.
        let _ = sock::setsockopt(s, sockopt::SndBuf, &config.socket_buffer);
        let _ = sock::setsockopt(s, sockopt::RcvBuf, &config.socket_buffer);
    }
    match &config.congestion {
        Congestion::System => {}
        Congestion::Preferred(name) => {
            // Best effort: an algorithm the kernel lacks or does not allow this process leaves
            // the system's default, which works, only slower on some paths.
            let _ = sock::setsockopt(s, sockopt::TcpCongestion, &OsString::from(name));
        }
        Congestion::Required(name) => {
            sock::setsockopt(s, sockopt::TcpCongestion, &OsString::from(name)).map_err(|e| {
                NetError::Io {
                    what: "tcp congestion control (VOLLEY_TCP_CONGESTION)",
                    source: std::io::Error::other(format!(
                        "the kernel refused `{name}` ({e}); it has {}",
                        available().unwrap_or_else(|| "an unknown set".into())
                    )),
                }
            })?;
        }
    }
    Ok(())
}

/// The congestion control `s` uses.
pub fn congestion_in_use(s: &TcpStream) -> Option<String> {
    let name = sock::getsockopt(s, sockopt::TcpCongestion).ok()?;
    Some(name.to_string_lossy().trim_end_matches('\0').to_string())
}

/// The algorithms the kernel has, as it lists them.
fn available() -> Option<String> {
    let list = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_available_congestion_control");
    list.ok().map(|l| l.trim().to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, TcpListener};

    fn pair() -> (TcpStream, TcpStream) {
        let l = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        (a, b)
    }

    fn with(congestion: Congestion) -> TcpConfig {
        TcpConfig {
            congestion,
            ..TcpConfig::default()
        }
    }

    #[test]
    fn parse_takes_system_and_plain_names_only() {
        assert_eq!(Congestion::parse("system"), Ok(Congestion::System));
        assert_eq!(
            Congestion::parse(" reno "),
            Ok(Congestion::Required("reno".into()))
        );
        for bad in ["", "cu bic", "a/b", "sixteen_letters_"] {
            assert!(Congestion::parse(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_required_algorithm_is_used() {
        // Reno is built into every Linux kernel and always allowed.
        let (a, _b) = pair();
        apply(&a, &with(Congestion::Required("reno".into()))).unwrap();
        assert_eq!(congestion_in_use(&a).as_deref(), Some("reno"));
    }

    #[test]
    fn a_missing_required_algorithm_fails_naming_it() {
        let (a, _b) = pair();
        let err = apply(&a, &with(Congestion::Required("nosuchcc".into()))).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("nosuchcc"), "{text}");
        assert!(text.contains("VOLLEY_TCP_CONGESTION"), "{text}");
    }

    #[test]
    fn a_missing_preferred_algorithm_leaves_the_system_default() {
        let (a, _b) = pair();
        let before = congestion_in_use(&a);
        apply(&a, &with(Congestion::Preferred("nosuchcc".into()))).unwrap();
        assert_eq!(congestion_in_use(&a), before);
    }

    #[test]
    fn the_default_asks_for_cubic_where_the_kernel_has_it() {
        let has_cubic = available().is_some_and(|l| l.split_whitespace().any(|a| a == "cubic"));
        let (a, _b) = pair();
        apply(&a, &TcpConfig::default()).unwrap();
        if has_cubic {
            assert_eq!(congestion_in_use(&a).as_deref(), Some("cubic"));
        }
    }
}
