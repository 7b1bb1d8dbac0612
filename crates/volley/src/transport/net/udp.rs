//! TEMP STUB
#![allow(missing_docs, dead_code, unused)]
use super::*;
#[derive(Debug)]
pub struct UdpConfig {
    pub reliable: crate::reliable::Config,
    pub faults: Option<super::faults::FaultConfig>,
}
impl Default for UdpConfig {
    fn default() -> Self {
        todo!()
    }
}
#[derive(Debug)]
pub struct UdpTransport;
impl UdpTransport {
    pub fn bind(a: std::net::IpAddr, k: u64, i: u64, c: UdpConfig) -> Result<Self, NetError> {
        todo!()
    }
}
impl NetTransport for UdpTransport {
    fn kind(&self) -> NetKind {
        todo!()
    }
    fn local_addr(&self) -> SocketAddr {
        todo!()
    }
    fn connect(&mut self, me: usize, peers: &[Option<SocketAddr>]) -> Result<(), NetError> {
        todo!()
    }
    fn send(&mut self, peer: usize, msg: &[u8], now: u64) -> Result<(), NetError> {
        todo!()
    }
    fn progress(&mut self, now: u64, inbox: &mut Vec<(usize, Vec<u8>)>) -> Result<usize, NetError> {
        todo!()
    }
    fn is_idle(&self) -> bool {
        todo!()
    }
    fn next_deadline(&self) -> Option<u64> {
        todo!()
    }
    fn readable_fd(&self) -> std::os::fd::RawFd {
        todo!()
    }
    fn close(&mut self, now: &mut dyn FnMut() -> u64, deadline: u64) -> Result<(), NetError> {
        todo!()
    }
    fn stats(&self) -> NetStats {
        todo!()
    }
}
