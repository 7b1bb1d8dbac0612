//! Placeholder: being written (branch h-udp).
//!
//! COMPILE STUB for branch h-hosts only: just enough for the crate to build while the real
//! fault injector is written elsewhere. Revert the commit that added it before merging the
//! network transports (or take their version of this file wholesale).

/// Faults to inject into outgoing datagrams (stub: parses nothing).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig;

impl FaultConfig {
    /// Refuses every setting: the fault injector is not in this branch.
    pub fn parse(_spec: &str) -> Result<Self, String> {
        Err("fault injection is not built into this branch".into())
    }
}
