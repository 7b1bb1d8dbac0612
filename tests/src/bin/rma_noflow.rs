//! Seed 002's "no flow control" across processes: `rma_noflow <n> <expect>`, where `expect`
//! is `lossy` (UDP with injected loss and duplication: some unreliable commands must be lost,
//! duplicates refused), `clean` (UDP without faults: every one arrives) or `stream` (TCP or
//! shared memory: every one arrives; no unsequenced datagrams). Rank 0 is the target; every
//! other rank a requester with slots of its own.
//!
//! 1. **Beside the reliable stream.** Each requester sends, for i in 0..n: an unreliable
//!    fetch-add of 1 on its word U[i], a reliable one on R[i], and an unreliable combined
//!    packet {put P[i] = i + 1, put Q[i] = i + 1}. Every 64 it waits for the reliable
//!    fetch-adds' old values (never for the unreliable ones). At rank 0 afterwards: every
//!    R[i] is 1 (exactly once); every U[i] is 0 or 1 (at most once, never twice even with
//!    duplicated datagrams); P[i] = Q[i] (a packet runs whole or not at all); reported old
//!    values of unreliable fetch-adds are all 0.
//! 2. **No retransmission.** Each requester sends `n` unreliable puts (no reply) and, every
//!    256, one reliable get to pace them; its retransmission counter may grow only by what
//!    that sequenced traffic needs (a few), far less than the unreliable datagrams lost
//!    (`lossy`).
//! 3. **Bad input.** A colour with `Flow::Unreliable` is refused before sending.
//!
//! The requester's transport counters must show exactly one unsequenced datagram per
//! unreliable command over UDP (none over TCP); rank 0's show the duplicates refused.

use volley::rma::{AtomicOp, CmdOptions, CmdStatus, Command, Error, Flow, Perms, Rma, StatusReply};
use volley::Runtime;
use volley_tests::{arg_str, arg_u64, fail, join, Gather};

/// Words per requester region: U, R, P, Q and the phase-2 slots, `n` each.
const REGIONS: usize = 5;

fn main() {
    let n = arg_u64(0, 1000) as usize;
    let expect = arg_str(1).unwrap_or_else(|| "stream".into());
    if !["lossy", "clean", "stream"].contains(&expect.as_str()) {
        fail(
            0,
            2,
            &format!("expect must be lossy, clean or stream, not {expect}"),
        );
    }
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let gather = Gather::register(&mut b, "rma-noflow-gather");
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let check = |ok: bool, what: &str| {
        if !ok {
            fail(rank, 1, what);
        }
    };
    let region = |r: usize, k: usize| ((r * REGIONS + k) * n) * 8;
    let seg = rma
        .alloc_symmetric(size * REGIONS * n * 8 + 64, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    let target = seg.on(0);
    let unreliable = CmdOptions {
        flow: Flow::Unreliable,
        ..Default::default()
    };
    rt.barrier();

    let mut sent_unsequenced = 0u64;
    let mut retransmits = 0u64;
    if rank != 0 {
        // 1. Unreliable commands beside reliable ones.
        let (mut reliable_olds, mut unreliable_olds) = (Vec::new(), Vec::new());
        let mut reliable_ids = Vec::new();
        let take = |reliable_ids: &[u64], reliable: &mut Vec<u64>, unrel: &mut Vec<u64>| {
            for r in rma.take_cmd_reports() {
                let Ok(CmdStatus::Value(v)) = r.outcome else {
                    fail(rank, 1, &format!("unexpected report {r:?}"));
                };
                if reliable_ids.contains(&r.packet) {
                    reliable.push(v);
                } else {
                    unrel.push(v);
                }
            }
        };
        for i in 0..n {
            let word = |k| region(rank, k) + 8 * i;
            rma.atomic_with(target, word(0), AtomicOp::FetchAdd, 1, 0, unreliable)
                .unwrap_or_else(|e| fail(rank, 1, &format!("unreliable fetch-add: {e}")));
            let id = rma
                .atomic_with(
                    target,
                    word(1),
                    AtomicOp::FetchAdd,
                    1,
                    0,
                    CmdOptions {
                        status: StatusReply::Always,
                        ..Default::default()
                    },
                )
                .unwrap_or_else(|e| fail(rank, 1, &format!("reliable fetch-add: {e}")));
            reliable_ids.push(id);
            let v = (i as u64 + 1).to_le_bytes();
            let mut c = rma.combined(0);
            c.push(Command::Put {
                target,
                offset: word(2),
                data: &v,
            })
            .push(Command::Put {
                target,
                offset: word(3),
                data: &v,
            });
            rma.submit(&c.finish().unwrap(), unreliable)
                .unwrap_or_else(|e| fail(rank, 1, &format!("unreliable packet: {e}")));
            sent_unsequenced += 2;
            if i % 64 == 63 || i + 1 == n {
                // The reliable ones' old values all come back; nobody waits for the others.
                rt.wait_until(|| {
                    take(&reliable_ids, &mut reliable_olds, &mut unreliable_olds);
                    reliable_olds.len() == i + 1
                });
            }
        }
        check(
            reliable_olds.iter().all(|&v| v == 0),
            "a reliable fetch-add ran twice",
        );
        // Old values of unreliable fetch-adds that came back: each ran once, onto a zero.
        rt.poll();
        take(&reliable_ids, &mut reliable_olds, &mut unreliable_olds);
        check(
            unreliable_olds.iter().all(|&v| v == 0) && unreliable_olds.len() <= n,
            &format!("unreliable old values: {unreliable_olds:?}"),
        );

        // 3. Bad input.
        let coloured = CmdOptions {
            colour: Some(1),
            ..unreliable
        };
        check(
            matches!(
                rma.put_with(target, region(rank, 4), &[0; 8], coloured),
                Err(Error::InvalidConfig { .. })
            ),
            "a colour with Flow::Unreliable was accepted",
        );
    }
    // The barrier orders phase 1 before rank 0's look; unreliable stragglers may still come.
    rt.barrier();

    // 2. Unreliable traffic alone.
    if rank != 0 {
        let before = rt.stats().network.transport_stats.retransmissions;
        let mut back = [0u8; 8];
        for i in 0..n {
            let at = region(rank, 4) + 8 * i;
            rma.put_with(target, at, &(i as u64 + 1).to_le_bytes(), unreliable)
                .unwrap_or_else(|e| fail(rank, 1, &format!("unreliable put: {e}")));
            sent_unsequenced += 1;
            if i % 256 == 255 {
                // A reliable round trip now and then keeps the burst within the target's
                // socket buffer (nothing else paces unreliable sends).
                rma.get(target, at, &mut back).unwrap();
            }
        }
        rt.flush();
        retransmits = rt.stats().network.transport_stats.retransmissions - before;
        let t = rt.stats().network.transport_stats;
        let want = if expect == "stream" {
            0
        } else {
            sent_unsequenced
        };
        check(
            t.unsequenced_sent == want,
            &format!(
                "{} unsequenced datagrams sent for {sent_unsequenced} unreliable commands \
                 (expected {want})",
                t.unsequenced_sent
            ),
        );
    }
    gather.send(&rt, 0, &[retransmits]);
    rt.barrier();

    if rank == 0 {
        let word = |r: usize, k: usize, i: usize| {
            let mut w = [0u8; 8];
            rma.read_local(target, region(r, k) + 8 * i, &mut w)
                .unwrap();
            u64::from_le_bytes(w)
        };
        let retransmits = gather.collect(&rt, 1);
        let t = rt.stats().network.transport_stats;
        let (mut ran, mut packets, mut puts) = (0usize, 0usize, 0usize);
        for r in 1..size {
            for i in 0..n {
                check(
                    word(r, 1, i) == 1,
                    &format!("rank {r}: reliable R[{i}] ran {} times", word(r, 1, i)),
                );
                let u = word(r, 0, i);
                check(
                    u <= 1,
                    &format!("rank {r}: unreliable U[{i}] ran {u} times"),
                );
                ran += u as usize;
                let (p, q) = (word(r, 2, i), word(r, 3, i));
                check(
                    p == q && (p == 0 || p == i as u64 + 1),
                    &format!("rank {r}: packet {i} ran in part: {p} {q}"),
                );
                packets += (p != 0) as usize;
                let put = word(r, 4, i);
                check(put == 0 || put == i as u64 + 1, "a stray unreliable put");
                puts += (put != 0) as usize;
            }
        }
        let total = (size - 1) * n;
        let resent: u64 = retransmits[1..].iter().map(|v| v[0]).sum();
        let lost = 3 * total - ran - packets - puts;
        match expect.as_str() {
            "lossy" => {
                check(
                    lost > 0,
                    "no unreliable command was lost under injected loss",
                );
                check(
                    ran + packets + puts > 0,
                    "every unreliable command was lost",
                );
                check(
                    t.unsequenced_duplicates > 0,
                    "no duplicated unsequenced datagram was refused",
                );
                // Lost unsequenced datagrams are not resent: the only retransmissions while
                // unreliable traffic alone flowed are of sequenced datagrams then in flight.
                let phase2_lost = total - puts;
                check(
                    2 * resent < phase2_lost as u64,
                    &format!(
                        "{resent} retransmissions while {phase2_lost} unreliable puts were lost"
                    ),
                );
            }
            _ => check(
                lost == 0,
                &format!(
                    "{lost} of {} unreliable commands lost without faults",
                    3 * total
                ),
            ),
        }
        println!(
            "rma_noflow {expect}: {total} reliable fetch-adds ran once each; unreliable: \
             {ran}/{total} fetch-adds, {packets}/{total} packets, {puts}/{total} puts ran, none \
             twice; unsequenced received {} duplicates refused {}; retransmissions during \
             unreliable-only traffic {resent}",
            t.unsequenced_received, t.unsequenced_duplicates
        );
    }
    rt.barrier();
}
