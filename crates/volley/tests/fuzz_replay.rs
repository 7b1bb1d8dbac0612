//! Replays the fuzz corpus (`fuzz/corpus/`) and every input the fuzzer ever crashed on
//! (`fuzz/regressions/`) through the decoders, on the stable compiler and in every test run.
//! `scripts/fuzz` grows the corpus with libFuzzer.

use std::path::Path;

/// Runs `decode` on every input kept for `target`.
fn replay(target: &str, decode: fn(&[u8])) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz");
    let mut inputs = 0;
    for dir in ["corpus", "regressions"] {
        let Ok(entries) = std::fs::read_dir(root.join(dir).join(target)) else {
            continue;
        };
        for entry in entries {
            let path = entry.expect("a corpus entry").path();
            let bytes = std::fs::read(&path).expect("a corpus file");
            decode(&bytes);
            inputs += 1;
        }
    }
    assert!(
        inputs > 0,
        "no fuzz corpus for {target} under {}",
        root.display()
    );
}

#[test]
fn udp_datagrams() {
    replay("udp_datagrams", volley::fuzzing::udp_datagrams);
}

#[test]
fn tcp_stream() {
    replay("tcp_stream", volley::fuzzing::tcp_stream);
}

#[test]
fn net_message() {
    replay("net_message", volley::fuzzing::net_message);
}

#[test]
fn rendezvous() {
    replay("rendezvous", volley::fuzzing::rendezvous);
}

#[test]
fn ring_slots() {
    replay("ring_slots", volley::fuzzing::ring_slots);
}
