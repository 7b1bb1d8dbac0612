//! Fuzz target: `volley::fuzzing::rendezvous` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| volley::fuzzing::rendezvous(data));
