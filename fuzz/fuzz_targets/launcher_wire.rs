//! Fuzz target: what an agent (or anyone who reaches the launcher's port) sends the launcher,
//! and what the launcher sends an agent: length-prefixed JSON frames, and the encoding of the
//! agent's command-line words. The launcher's own modules, compiled here as they are.
#![no_main]

/// The launcher's one-line message macro, which its status module uses.
macro_rules! say {
    ($($arg:tt)*) => {{
        let _ = format!($($arg)*);
    }};
}

#[allow(dead_code, missing_docs)]
#[path = "../../crates/volley-cli/src/launch/status.rs"]
mod status;
#[allow(dead_code, missing_docs)]
#[path = "../../crates/volley-cli/src/launch/wire.rs"]
mod wire;

libfuzzer_sys::fuzz_target!(|data: &[u8]| wire::decode_anything(data));
