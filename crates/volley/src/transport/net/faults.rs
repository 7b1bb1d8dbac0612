//! TEMP STUB
#![allow(missing_docs)]
#[derive(Debug)]
pub struct FaultConfig;
impl FaultConfig {
    pub fn parse(s: &str) -> Result<Self, String> {
        Err(s.into())
    }
}
