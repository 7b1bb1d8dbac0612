//! A tagged ping-pong: `tagged_loop [ROUNDS]` (default 1,000,000) has rank 0 send 8 bytes to
//! rank 1 with `Msg::send` and take the answer with `recv_into`, and rank 1 echo each message
//! back, then prints the mean round trip. Started bare (one rank), rank 0 sends to itself
//! through its loopback rings: one send and one receive per round, the layer's own path with
//! no cache line moving between cores, which `scripts/count-msg-instructions` counts.

use std::time::Instant;
use volley::Runtime;
use volley_msg::Msg;

fn main() {
    let rounds: u64 = match std::env::args().nth(1) {
        None => 1_000_000,
        Some(a) => a.parse().unwrap_or_else(|_| {
            eprintln!("tagged_loop: ROUNDS must be a whole number, not {a:?}");
            std::process::exit(2)
        }),
    };
    let fail = |what: &str, e: &dyn std::fmt::Display| -> ! {
        eprintln!("tagged_loop: {what}: {e}");
        std::process::exit(1)
    };
    let mut b = Runtime::builder();
    let setup = Msg::register(&mut b).unwrap_or_else(|e| fail("register", &e));
    let rt = b.build().unwrap_or_else(|e| fail("joining the job", &e));
    let msg = setup.attach(&rt).unwrap_or_else(|e| fail("attach", &e));
    let me = rt.rank();
    let peer = if rt.size() > 1 { 1 - me.min(1) } else { 0 };
    let mut buf = [0u8; 8];
    let t0 = Instant::now();
    for i in 0..rounds {
        if me == 0 {
            msg.send(peer, 7, &i.to_le_bytes())
                .unwrap_or_else(|e| fail("send", &e));
            let st = msg
                .recv_into(peer, 7, &mut buf)
                .unwrap_or_else(|e| fail("recv_into", &e));
            if st.len != 8 || u64::from_le_bytes(buf) != i {
                fail("round trip", &format!("message {i} came back as {buf:?}"));
            }
        } else if me == 1 {
            msg.recv_into(peer, 7, &mut buf)
                .unwrap_or_else(|e| fail("recv_into", &e));
            msg.send(peer, 7, &buf).unwrap_or_else(|e| fail("send", &e));
        }
    }
    if me == 0 {
        let ns = t0.elapsed().as_nanos() as f64 / rounds.max(1) as f64;
        println!("tagged_loop: {rounds} round trips between ranks 0 and {peer}: {ns:.1} ns each");
    }
    rt.barrier();
}
