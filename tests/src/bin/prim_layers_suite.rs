//! Seed 003's layers (`volley-prim-layers`) across processes. `prim_layers_suite SECTION...`;
//! each section checks its own results and rank 0 prints `layers SECTION: ok (...)`. The
//! progress mode and capacity come from `VOLLEY_PRIM_*`.
//!
//! - `typed-order`: every rank sends each other rank messages of several types, in an order
//!   the receiver does not follow; each type arrives whole and in per-type send order, long
//!   payloads (several times the input buffer) included (item 22).
//! - `typed-bounds`: a too-small receive buffer and a full unexpected memory are clear
//!   errors, and the message is still delivered afterwards (nothing lost); probe sees
//!   arrived types and not absent ones.
//! - `trisolve`: the banded solve in each version matches the serial solve (items 19, 22;
//!   `fetch` needs 2 ranks and the handler).

use std::process::exit;
use volley::Runtime;
use volley_prim::{Prim, PrimConfig};
use volley_prim_layers::trisolve::{self, Version};
use volley_prim_layers::{Typed, TypedError};

fn fail(msg: String) -> ! {
    eprintln!("layers: FAILED: {msg}");
    exit(1)
}

/// The payload of message `k` of type `ty` from `from`: its length varies up to 3 buffers.
fn payload(from: usize, ty: u32, k: usize, cap: usize) -> Vec<u8> {
    let len = (k * 37 + ty as usize * 11) % (3 * cap + 5);
    (0..len)
        .map(|j| (from * 31 + ty as usize * 7 + k * 3 + j) as u8)
        .collect()
}

fn typed_order(p: &Prim, rt: &Runtime) {
    let t = Typed::new(p);
    let (me, n) = (p.rank(), p.size());
    const TYPES: [u32; 3] = [5, 9, 1000];
    const PER: usize = 4;
    // Long messages pair by pair, in one global order (a sender waits for room only while
    // its receiver works through earlier pairs); the receiver asks for the types in reverse.
    // `recv` does not select a sender, so each sender has its own types.
    for a in 0..n {
        for b in 0..n {
            if a == b {
                continue;
            }
            if me == a {
                send_all(&t, b, me, &TYPES, PER, p.capacity());
            } else if me == b {
                recv_all(&t, a, &TYPES, PER, p.capacity());
            }
        }
    }
    // Short messages from every rank at once (they fit the buffer), a type per sender and
    // kind, received in an order unrelated to arrival.
    rt.barrier();
    for to in (0..n).filter(|&r| r != me) {
        for k in 0..2u32 {
            for kind in 0..3u32 {
                let ty = 100 + 10 * me as u32 + kind;
                t.send(to, ty, &[me as u8, kind as u8, k as u8]).unwrap();
            }
        }
    }
    for kind in (0..3u32).rev() {
        for from in (0..n).rev().filter(|&r| r != me) {
            for k in 0..2u8 {
                let ty = 100 + 10 * from as u32 + kind;
                let got = t
                    .recv(ty)
                    .unwrap_or_else(|e| fail(format!("recv {ty}: {e}")));
                if got != [from as u8, kind as u8, k] {
                    fail(format!("type {ty}: {got:?} out of order"));
                }
            }
        }
    }
    if t.unexpected_bytes() != 0 {
        fail(format!("{} unexpected bytes left", t.unexpected_bytes()));
    }
    rt.barrier();
    if me == 0 {
        println!(
            "layers typed-order: ok ({} types x {PER} messages per pair up to {} bytes, then all to all)",
            TYPES.len(),
            3 * p.capacity() + 4
        );
    }
}

fn send_all(t: &Typed, to: usize, me: usize, types: &[u32], per: usize, cap: usize) {
    for k in 0..per {
        for &ty in types {
            t.send(to, ty + 10_000 * me as u32, &payload(me, ty, k, cap))
                .unwrap_or_else(|e| fail(format!("send: {e}")));
        }
    }
}

fn recv_all(t: &Typed, from: usize, types: &[u32], per: usize, cap: usize) {
    for &ty in types.iter().rev() {
        for k in 0..per {
            let got = t
                .recv(ty + 10_000 * from as u32)
                .unwrap_or_else(|e| fail(format!("recv {ty}: {e}")));
            if got != payload(from, ty, k, cap) {
                fail(format!(
                    "type {ty} message {k} from {from}: {} bytes, not as sent",
                    got.len()
                ));
            }
        }
    }
}

fn typed_bounds(p: &Prim, rt: &Runtime) {
    let me = p.rank();
    if p.size() < 2 {
        fail("typed-bounds needs 2 ranks".into());
    }
    // Room for one 100-byte message, not two.
    let t = Typed::with_limit(p, 150);
    if me == 0 {
        t.send(1, 1, &[1; 100]).unwrap();
        t.send(1, 2, &[2; 100]).unwrap();
        t.send(1, 3, &[3; 40]).unwrap();
        t.send(1, 4, b"done").unwrap();
    } else if me == 1 {
        // Waits for type 4: type 1 is filed, type 2 does not fit.
        match t.recv(4) {
            Err(TypedError::UnexpectedFull {
                ty: 2,
                bytes: 100,
                limit: 150,
            }) => {}
            other => fail(format!("expected UnexpectedFull for type 2, got {other:?}")),
        }
        if !t.probe(2).unwrap() || !t.probe(1).unwrap() || t.probe(4).unwrap() {
            fail("probe after UnexpectedFull".into());
        }
        let mut small = [0u8; 10];
        match t.recv_into(1, &mut small) {
            Err(TypedError::TooSmall {
                ty: 1,
                need: 100,
                have: 10,
            }) => {}
            other => fail(format!("expected TooSmall, got {other:?}")),
        }
        let mut b = [0u8; 100];
        if t.recv_into(2, &mut b).unwrap() != 100 || b != [2; 100] {
            fail("type 2 after the bound".into());
        }
        if t.recv(1).unwrap() != [1; 100] || t.recv(4).unwrap() != b"done" {
            fail("types 1 and 4".into());
        }
        if t.recv(3).unwrap() != [3; 40] || t.unexpected_bytes() != 0 {
            fail("type 3".into());
        }
        if t.probe(3).unwrap() {
            fail("probe of a type never sent again".into());
        }
        match t.send(p.size(), 1, b"x") {
            Err(TypedError::Prim(_)) => {}
            other => fail(format!("send to a wrong rank: {other:?}")),
        }
    }
    rt.barrier();
    if me == 0 {
        println!("layers typed-bounds: ok (too small, unexpected full, probe, wrong rank)");
    }
}

fn trisolve_section(p: &Prim, rt: &Runtime) {
    // More rows than a 4 KiB buffer has words: B3' once hung past 512 requests.
    let n = 700;
    let (me, size) = (p.rank(), p.size());
    let t = Typed::new(p);
    let want = trisolve::serial(n, size);
    let mut versions = vec![Version::Typed, Version::Raw, Version::Pipe];
    if size == 2 {
        versions.push(Version::Fetch);
        if p.progress() == volley_prim::Progress::CommThread {
            versions.push(Version::FetchComm);
        }
    }
    for v in versions {
        rt.barrier();
        let col = trisolve::solve(p, &t, n, v, &[])
            .unwrap_or_else(|e| fail(format!("{v:?}: {e}")))
            .y;
        for (r, y) in col.iter().enumerate() {
            if *y != want[r * size + me] {
                fail(format!(
                    "{v:?}: row {r} on rank {me}: {y} != {}",
                    want[r * size + me]
                ));
            }
        }
    }
    rt.barrier();
    if me == 0 {
        println!("layers trisolve: ok ({n} rows on {size} ranks equal the serial solve)");
    }
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let cfg = trisolve::with_handlers(PrimConfig::from_env().unwrap()).unwrap();
    let mut b = Runtime::builder();
    let setup = Prim::register(&mut b, cfg);
    let rt = b.build().unwrap();
    let p = setup.attach(&rt).unwrap();
    for s in &sections {
        match s.as_str() {
            "typed-order" => typed_order(&p, &rt),
            "typed-bounds" => typed_bounds(&p, &rt),
            "trisolve" => trisolve_section(&p, &rt),
            other => fail(format!("unknown section {other}")),
        }
    }
    drop(p);
    rt.finalize();
}
