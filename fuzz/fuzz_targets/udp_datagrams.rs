//! Fuzz target: `volley::fuzzing::udp_datagrams` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| volley::fuzzing::udp_datagrams(data));
