//! Fuzz target: `volley::fuzzing::net_message` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| volley::fuzzing::net_message(data));
