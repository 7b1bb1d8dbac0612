//! Fuzz target: `volley::fuzzing::ring_slots` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| volley::fuzzing::ring_slots(data));
