//! Seed 002's command options and combined packets across processes: `rma_cmd [packets]`.
//! Rank 0 is the target of everything; every other rank is a requester.
//!
//! 1. **EMB colours and status replies.** Each requester sends `packets` puts with its own
//!    colour and no status reply into its slot at rank 0, waits on the colour, then reads the
//!    slot back: the counters must be equal and the last value there. One put with
//!    `Always` reports `Done`; one with `OnlyFailures` reports nothing; one with a wrong key
//!    and `OnlyFailures` reports the refusal; a get with the default options reports its data;
//!    a colour of 16 is refused before sending.
//! 2. **Combined packets, exactly once.** Each requester sends `packets` combined packets of
//!    {FIFO entry (rank, seq), put of seq into its slot, put with flag} and `packets` single
//!    fetch-add packets, with a colour. Rank 0 then takes every FIFO entry: each requester's
//!    must be there exactly once, in order, and the counter must be exactly
//!    (size - 1) x packets, whose old values each requester saw reported, all distinct.
//! 3. **One lump.** A packet {put A, get} returns A, and so does the same packet with the
//!    put's data patched in its body by the program (a user-built packet); a packet {put, put with a wrong key,
//!    put} runs nothing (memory unchanged, `NotRun` and the refusal reported), and illegal
//!    combinations (an atomic with a put, two targets) are refused before sending.
//! 4. **Vector fetch-add and compare-swap at a reference** (requirement 12). Each requester
//!    adds [1, rank] to two shared words `packets` times (its old values of the first word
//!    must increase; rank 0 checks both sums), then swaps at a reference word: refused with a
//!    wrong compare value, taken with the right one, and refused (memory unchanged) for a
//!    misaligned reference and an empty vector.
//! 5. **Wake.** Rank 1 sets a flag at rank 0 with `wake`: rank 0, waiting for it, must have
//!    handled the command as a message (a direct write would not wake a sleeper).
//!
//! Rank 0 checks at the end that its table counted exactly the refusals sent to it.

use volley::rma::{
    AtomicOp, CmdOptions, CmdStatus, Command, Error, FifoRef, FifoStatus, Perms, Refusal, Rma,
    StatusReply,
};
use volley::Runtime;
use volley_tests::{arg_u64, fail, join, path_name, Gather};

const ENTRY: usize = 16;
const FIFO_AT: usize = 0;
/// Per-requester slots: [value, flag, scratch x 6].
const SLOTS_AT: usize = 1 << 20;
const COUNTER_AT: usize = SLOTS_AT - 64;

/// Two words that every requester adds to with vector fetch-adds.
const VECTOR_AT: usize = COUNTER_AT - 64;

fn slot(rank: usize) -> usize {
    SLOTS_AT + rank * 64
}

/// A requester's [swapped word, reference word], past the wake-up flag.
fn swap_at(rank: usize, size: usize) -> usize {
    SLOTS_AT + 64 * size + 64 + 16 * rank
}

fn main() {
    let packets = arg_u64(0, 200) as usize;
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let gather = Gather::register(&mut b, "rma-cmd-gather");
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let check = |ok: bool, what: &str| {
        if !ok {
            fail(rank, 1, what);
        }
    };
    let capacity = (packets * size).max(4);
    let seg = rma
        .alloc_symmetric(SLOTS_AT + 64 * size + 4096, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    if rank == 0 {
        rma.fifo_create(seg.on(0), FIFO_AT, ENTRY, capacity)
            .unwrap_or_else(|e| fail(rank, 2, &format!("fifo_create: {e}")));
    }
    let [a, b, c] = seg.on(0).to_words();
    let fifo = FifoRef::from_words([
        a,
        b,
        c,
        FIFO_AT as u64,
        (ENTRY as u64) << 32 | capacity as u64,
    ]);
    let target = seg.on(0);
    rt.barrier();
    let mut refusals_sent = 0u64;

    if rank != 0 {
        // 1. Colours and status replies.
        let colour = (rank % 16) as u8;
        let emb = CmdOptions {
            colour: Some(colour),
            ..Default::default()
        };
        for i in 1..=packets as u64 {
            rma.put_with(target, slot(rank), &i.to_le_bytes(), emb)
                .unwrap_or_else(|e| fail(rank, 1, &format!("put_with: {e}")));
        }
        rma.emb_wait(colour).unwrap();
        let (issued, replied) = rma.emb_counters(colour).unwrap();
        check(
            issued == packets as u64 && replied == issued,
            &format!("colour {colour}: {issued} issued, {replied} replied"),
        );
        let mut back = [0u8; 8];
        rma.get(target, slot(rank), &mut back).unwrap();
        check(
            u64::from_le_bytes(back) == packets as u64,
            "last colour put not in place",
        );
        check(
            rma.take_cmd_reports().is_empty(),
            "reports without a status option",
        );
        let status = |status| CmdOptions {
            status,
            colour: Some(colour),
            ..Default::default()
        };
        let p = rma
            .put_with(
                target,
                slot(rank) + 16,
                &[1; 8],
                status(StatusReply::Always),
            )
            .unwrap();
        rma.put_with(
            target,
            slot(rank) + 16,
            &[2; 8],
            status(StatusReply::OnlyFailures),
        )
        .unwrap();
        let bad = target.with_key(0x5eed_0bad);
        let q = rma
            .put_with(
                bad,
                slot(rank) + 16,
                &[3; 8],
                status(StatusReply::OnlyFailures),
            )
            .unwrap();
        refusals_sent += 1;
        rma.emb_wait(colour).unwrap();
        let reports = rma.take_cmd_reports();
        check(
            reports.len() == 2
                && reports[0].packet == p
                && reports[0].outcome == Ok(CmdStatus::Done)
                && reports[1].packet == q
                && reports[1].outcome == Err(Refusal::WrongKey),
            &format!("status reports: {reports:?}"),
        );
        rma.get(target, slot(rank) + 16, &mut back).unwrap();
        check(back == [2; 8], "the refused put changed memory");
        // Default options: the plain call's path (direct on one host), the data reported.
        let g = rma
            .get_with(target, slot(rank) + 16, 8, CmdOptions::default())
            .unwrap();
        // The seed's completion by polling: on the AM path the reply comes later.
        let mut reports = Vec::new();
        rt.wait_until(|| {
            reports.extend(rma.take_cmd_reports());
            !reports.is_empty()
        });
        check(
            reports.len() == 1
                && reports[0].packet == g
                && reports[0].outcome == Ok(CmdStatus::Data(vec![2; 8])),
            &format!("get_with default options: {reports:?}"),
        );
        let out_of_range = CmdOptions {
            colour: Some(16),
            ..Default::default()
        };
        check(
            matches!(
                rma.put_with(target, slot(rank), &[0; 8], out_of_range),
                Err(Error::InvalidConfig { .. })
            ),
            "colour 16 accepted",
        );

        // 2. Combined packets and single atomics, exactly once.
        let mut olds = Vec::new();
        for seq in 0..packets as u64 {
            let mut entry = [0u8; ENTRY];
            entry[..8].copy_from_slice(&(rank as u64).to_le_bytes());
            entry[8..].copy_from_slice(&seq.to_le_bytes());
            let seq_bytes = seq.to_le_bytes();
            let mut c = rma.combined(0);
            c.push(Command::Fifo { fifo, data: &entry })
                .push(Command::Put {
                    target,
                    offset: slot(rank),
                    data: &seq_bytes,
                })
                .push(Command::PutWithFlag {
                    target,
                    offset: slot(rank) + 24,
                    data: &seq_bytes,
                    flag_offset: slot(rank) + 8,
                    flag_value: seq + 1,
                });
            let packet = c
                .finish()
                .unwrap_or_else(|e| fail(rank, 1, &format!("finish: {e}")));
            check(packet.len() == 3, "packet length");
            rma.submit(&packet, status(StatusReply::OnlyFailures))
                .unwrap();
            rma.atomic_with(target, COUNTER_AT, AtomicOp::FetchAdd, 1, 0, emb)
                .unwrap();
        }
        rma.emb_wait(colour).unwrap();
        for r in rma.take_cmd_reports() {
            match r.outcome {
                Ok(CmdStatus::Value(v)) => olds.push(v),
                other => fail(rank, 1, &format!("unexpected report {other:?}")),
            }
        }
        olds.sort_unstable();
        olds.dedup();
        check(
            olds.len() == packets,
            &format!("{} distinct old values", olds.len()),
        );
        let mut flag = [0u8; 8];
        rma.get(target, slot(rank) + 8, &mut flag).unwrap();
        check(u64::from_le_bytes(flag) == packets as u64, "last flag");

        // 3. One lump.
        let a = [0xa5u8; 24];
        let mut c = rma.combined(0);
        c.push(Command::Put {
            target,
            offset: slot(rank) + 32,
            data: &a,
        })
        .push(Command::Get {
            target,
            offset: slot(rank) + 32,
            len: 24,
        });
        let put_get = c.finish().unwrap();
        // The program's own body (requirement 20): the same packet with the put's data,
        // which follows its 48-byte header, patched in place.
        let mut body = put_get.body().to_vec();
        body[48..72].fill(0x5a);
        let own = rma.packet_from_body(0, 2, body).unwrap();
        let out = rma.execute(&own).unwrap();
        check(
            out == [Ok(CmdStatus::Done), Ok(CmdStatus::Data(vec![0x5a; 24]))],
            &format!("a user-built packet: {out:?}"),
        );
        let out = rma.execute(&put_get).unwrap();
        check(
            out == [Ok(CmdStatus::Done), Ok(CmdStatus::Data(a.to_vec()))],
            &format!("put then get in one packet: {out:?}"),
        );
        let mut c = rma.combined(0);
        let z = [0u8; 24];
        c.push(Command::Put {
            target,
            offset: slot(rank) + 32,
            data: &z,
        })
        .push(Command::Put {
            target: bad,
            offset: slot(rank) + 32,
            data: &z,
        })
        .push(Command::Fifo {
            fifo,
            data: &[0; ENTRY],
        });
        let out = rma.execute(&c.finish().unwrap()).unwrap();
        refusals_sent += 1;
        check(
            out == [
                Ok(CmdStatus::NotRun),
                Err(Refusal::WrongKey),
                Ok(CmdStatus::NotRun),
            ],
            &format!("a packet with a refused command: {out:?}"),
        );
        let mut now = [0u8; 24];
        rma.get(target, slot(rank) + 32, &mut now).unwrap();
        check(now == a, "a refused packet changed memory");
        let mut c = rma.combined(0);
        c.push(Command::Put {
            target,
            offset: slot(rank),
            data: &z,
        })
        .push(Command::Atomic {
            target,
            offset: COUNTER_AT,
            op: AtomicOp::FetchAdd,
            operand: 1,
            compare: 0,
        });
        check(
            matches!(c.finish(), Err(Error::IllegalCombination { rule: 4, .. })),
            "atomic combined",
        );
        let mut c = rma.combined(0);
        c.push(Command::Put {
            target: seg.on(rank),
            offset: 0,
            data: &z,
        });
        check(
            matches!(c.finish(), Err(Error::IllegalCombination { rule: 1, .. })),
            "two targets",
        );

        // 4. Vector fetch-add and compare-swap at a reference.
        let addends = [1, rank as u64];
        let mut olds = [0u64; 2];
        let mut firsts = Vec::with_capacity(packets);
        for _ in 0..packets {
            rma.fetch_add_vector(target, VECTOR_AT, &addends, &mut olds)
                .unwrap_or_else(|e| fail(rank, 1, &format!("fetch_add_vector: {e}")));
            firsts.push(olds[0]);
        }
        check(
            firsts.windows(2).all(|w| w[0] < w[1]),
            "a vector fetch-add's old values did not increase",
        );
        let (word_at, reference) = (swap_at(rank, size), swap_at(rank, size) + 8);
        let swap = |compare, new| {
            rma.compare_swap_at(target, word_at, reference, compare, new)
                .unwrap_or_else(|e| fail(rank, 1, &format!("compare_swap_at: {e}")))
        };
        check(
            swap(7, 99) == (false, 0),
            "swapped on a wrong compare value",
        );
        check(
            swap(0, 99) == (true, 0),
            "not swapped on the reference's value",
        );
        check(swap(0, 5) == (true, 99), "second swap");
        let refused = |r: Result<_, Error>, want: Refusal, what: &str| {
            check(
                matches!(r, Err(Error::Refused { reason, .. }) if reason == want),
                what,
            );
        };
        refused(
            rma.compare_swap_at(target, word_at, reference + 4, 0, 1)
                .map(|_| ()),
            Refusal::Misaligned,
            "a misaligned reference was not refused",
        );
        refused(
            rma.fetch_add_vector(target, VECTOR_AT, &[], &mut []),
            Refusal::EntrySize,
            "an empty vector was not refused",
        );
        refusals_sent += 2;
        let mut w = [0u8; 8];
        rma.get(target, word_at, &mut w).unwrap();
        check(u64::from_le_bytes(w) == 5, "a refused swap changed memory");
    }
    gather.send(&rt, 0, &[refusals_sent]);
    let refusals: u64 = if rank == 0 {
        gather.collect(&rt, 1).iter().map(|v| v[0]).sum()
    } else {
        0
    };
    // 5. Wake: rank 1 sets a flag at rank 0 with `wake`. Medium requests handled are
    // counted from before the barrier: the command may arrive while rank 0 is still in it.
    let before = rt.stats().handled[0][1];
    rt.barrier();
    let wake_at = SLOTS_AT + 64 * size;
    if rank == 0 {
        rt.wait_until(|| {
            let mut f = [0u8; 8];
            rma.read_local(target, wake_at, &mut f).unwrap();
            u64::from_le_bytes(f) == 1
        });
        let handled = rt.stats().handled[0][1] - before;
        check(
            handled >= 1,
            "the wake-up command was not handled as a message",
        );
    } else if rank == 1 {
        let wake = CmdOptions {
            wake: true,
            ..Default::default()
        };
        rma.put_with(target, wake_at, &1u64.to_le_bytes(), wake)
            .unwrap();
    }
    rt.barrier();

    if rank == 0 {
        let mut next = vec![0u64; size];
        let mut e = [0u8; ENTRY];
        while rma.fifo_dequeue(fifo, &mut e).unwrap() {
            let r = u64::from_le_bytes(e[..8].try_into().unwrap()) as usize;
            let seq = u64::from_le_bytes(e[8..].try_into().unwrap());
            check(r > 0 && r < size, &format!("FIFO entry from rank {r}"));
            check(
                seq == next[r],
                &format!("rank {r}: entry {seq}, expected {}", next[r]),
            );
            next[r] += 1;
        }
        check(
            next[1..].iter().all(|&n| n == packets as u64),
            &format!("FIFO entries per rank: {next:?}"),
        );
        let mut c = [0u8; 8];
        rma.read_local(target, COUNTER_AT, &mut c).unwrap();
        let want = (size as u64 - 1) * packets as u64;
        check(u64::from_le_bytes(c) == want, "counter");
        let mut v = [0u8; 16];
        rma.read_local(target, VECTOR_AT, &mut v).unwrap();
        let ranks_sum: u64 = (1..size as u64).sum();
        check(
            v[..8] == want.to_le_bytes() && v[8..] == (ranks_sum * packets as u64).to_le_bytes(),
            "vector fetch-add sums",
        );
        check(
            rma.refused() == refusals,
            &format!("{} refusals counted, {refusals} sent", rma.refused()),
        );
        println!(
            "path={path}: {size} ranks: {packets} coloured puts, combined packets and fetch-adds \
             per requester, each executed once; status options, one-lump refusal, illegal \
             combinations, vector fetch-add, compare-swap at a reference and wake checked"
        );
    }
    rt.barrier();
    let _ = FifoStatus::Stored;
}
