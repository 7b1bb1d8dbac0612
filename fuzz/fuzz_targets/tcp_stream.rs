//! Fuzz target: `volley::fuzzing::tcp_stream` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| volley::fuzzing::tcp_stream(data));
