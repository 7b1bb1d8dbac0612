//! Placeholder: being written (branch h-udp).
//!
//! COMPILE STUB for branch h-hosts only: just enough for the crate to build while the real
//! UDP transport is written elsewhere; binding always fails. Revert the commit that added it
//! before merging the network transports (or take their version of this file wholesale).

use super::faults::FaultConfig;
use super::{NetError, NetKind, NetStats, NetTransport};
use std::net::SocketAddr;

/// Settings of the UDP transport.
#[derive(Debug, Clone, Default)]
pub struct UdpConfig {
    /// The reliable protocol's settings.
    pub reliable: crate::reliable::Config,
    /// Faults to inject, if any.
    pub faults: Option<FaultConfig>,
}

/// The UDP transport (stub: cannot be created).
#[derive(Debug)]
pub enum UdpTransport {}

impl UdpTransport {
    /// Always fails: the UDP transport is not in this branch.
    pub fn bind(
        _addr: std::net::IpAddr,
        _job_key: u64,
        _incarnation: u64,
        _config: UdpConfig,
    ) -> Result<Self, NetError> {
        Err(NetError::Io {
            what: "binding the UDP transport",
            source: std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "the UDP transport is not built into this branch",
            ),
        })
    }
}

impl NetTransport for UdpTransport {
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
