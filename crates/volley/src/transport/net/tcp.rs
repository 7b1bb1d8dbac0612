//! Placeholder: being written (branch h-tcp).
//!
//! COMPILE STUB for branch h-hosts only: just enough for the crate to build while the real
//! TCP transport is written elsewhere; binding always fails. Revert the commit that added it
//! before merging the network transports (or take their version of this file wholesale).

use super::{NetError, NetKind, NetStats, NetTransport};
use std::net::SocketAddr;

/// Settings of the TCP transport.
#[derive(Debug, Clone, Default)]
pub struct TcpConfig {
    _private: (),
}

/// The TCP transport (stub: cannot be created).
#[derive(Debug)]
pub enum TcpTransport {}

impl TcpTransport {
    /// Always fails: the TCP transport is not in this branch.
    pub fn bind(
        _addr: std::net::IpAddr,
        _job_key: u64,
        _config: TcpConfig,
    ) -> Result<Self, NetError> {
        Err(NetError::Io {
            what: "binding the TCP transport",
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the TCP transport is not built into this branch",
            ),
        })
    }
}

impl NetTransport for TcpTransport {
    fn kind(&self) -> NetKind {
        match *self {}
    }
    fn local_addr(&self) -> SocketAddr {
        match *self {}
    }
    fn connect(&mut self, _me: usize, _peers: &[Option<SocketAddr>]) -> Result<(), NetError> {
        match *self {}
    }
    fn send(&mut self, _peer: usize, _msg: &[u8], _now: u64) -> Result<(), NetError> {
        match *self {}
    }
    fn progress(
        &mut self,
        _now: u64,
        _inbox: &mut Vec<(usize, Vec<u8>)>,
    ) -> Result<usize, NetError> {
        match *self {}
    }
    fn is_idle(&self) -> bool {
        match *self {}
    }
    fn next_deadline(&self) -> Option<u64> {
        match *self {}
    }
    fn readable_fd(&self) -> std::os::fd::RawFd {
        match *self {}
    }
    fn close(&mut self, _now: &mut dyn FnMut() -> u64, _deadline: u64) -> Result<(), NetError> {
        match *self {}
    }
    fn stats(&self) -> NetStats {
        match *self {}
    }
}
