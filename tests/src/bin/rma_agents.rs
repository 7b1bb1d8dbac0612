//! Agents and bounded target-side work: `rma_agents` on 2 or more ranks.
//!
//! Rank 0 owns two segments, A (read, write, atomics) and B (read and write), filled with
//! patterns, and an agent with two windows: 512 bytes inside A open for everything, 256 bytes
//! of B open for reading only. It sends every other rank the agent's handle and A's handle.
//!
//! Every other rank (an actor) writes 16 bytes into the first window, adds 1 to a word of it,
//! and reads the second window (checked against B's pattern); then it makes seven accesses
//! that must be refused with the right reason: a wrong agent key, a put past the window's end
//! (still inside A), a write to the read-only window, an atomic on it, a get past the first
//! window's end, a 200000-byte put through the window (several fragments), and A itself
//! under the agent's key. A window index the agent lacks is an error at the caller.
//!
//! Rank 0 then checks its refusal counter (7 per actor), that the actors' writes and adds
//! landed in the window, and that every byte of A outside the window and all of B are
//! unchanged. It revokes the agent; every actor's put through it is refused (counted) and
//! changes nothing. A window on a segment that is freed closes with it.
//!
//! Last, the highest rank puts and gets 1 MiB of a third segment of rank 0, which checks the
//! target-side work counted for it: on the AM path to another node, fragments of at most the
//! frame bound (`Rma::frame_bound`), each counted with its bytes; on the AM path within a
//! node, one frame of 0 bytes each way (the initiator copies); on the direct path, none.

use std::sync::{Arc, Mutex};
use volley::rma::{AgentRef, Error, Perms, Refusal, Rma, SegmentRef, Window};
use volley_tests::{fail, fill_pattern, join, path_name};

const A_LEN: usize = 8192;
const B_LEN: usize = 4096;
const W0_AT: usize = 1024;
const W0_LEN: usize = 512;
const W1_LEN: usize = 256;
/// The word of the first window the actors add to.
const COUNTER: usize = 256;
const REFUSALS_PER_ACTOR: u64 = 7;
const BIG: usize = 1 << 20;

fn main() {
    let mut b = volley::Runtime::builder();
    let setup = Rma::register(&mut b);
    let got: Arc<Mutex<Option<Vec<u64>>>> = Arc::default();
    let g = got.clone();
    let handles = b.request_handler("test.agents.handles", move |m, _| {
        let words = m
            .payload()
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect();
        *g.lock().unwrap() = Some(words);
    });
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (me, size) = (rt.rank(), rt.size());
    if size < 2 {
        fail(me, 2, "rma_agents needs 2 ranks or more");
    }
    let die = |msg: String| -> ! { fail(me, 1, &msg) };
    let ok = |r: volley::rma::Result<()>, what: &str| {
        r.unwrap_or_else(|e| die(format!("{what}: {e}")));
    };
    let mut a_pat = vec![0u8; A_LEN];
    fill_pattern(0xa, &mut a_pat);
    let mut b_pat = vec![0u8; B_LEN];
    fill_pattern(0xb, &mut b_pat);

    let big = rma
        .alloc(BIG, Perms::ALL)
        .unwrap_or_else(|e| die(format!("alloc: {e}")));
    let mut owned = None;
    if me == 0 {
        let a = rma.alloc(A_LEN, Perms::ALL).unwrap();
        let b = rma.alloc(B_LEN, Perms::READ | Perms::WRITE).unwrap();
        ok(rma.write_local(a.handle(), 0, &a_pat), "fill A");
        ok(rma.write_local(b.handle(), 0, &b_pat), "fill B");
        // Bad windows are refused before any is made.
        let bad = [
            (a.handle(), A_LEN - 8, 16, Perms::READ, "past the segment"),
            (
                b.handle(),
                0,
                8,
                Perms::ATOMIC,
                "more than the segment grants",
            ),
            (a.handle().with_key(1), 0, 8, Perms::READ, "a wrong key"),
        ];
        for (segment, offset, len, perms, why) in bad {
            let w = Window {
                segment,
                offset,
                len,
                perms,
            };
            if !matches!(rma.agent_create(&[w]), Err(Error::InvalidConfig { .. })) {
                die(format!("a window {why} was accepted"));
            }
        }
        let agent = rma
            .agent_create(&[
                Window {
                    segment: a.handle(),
                    offset: W0_AT,
                    len: W0_LEN,
                    perms: Perms::ALL,
                },
                Window {
                    segment: b.handle(),
                    offset: 0,
                    len: W1_LEN,
                    perms: Perms::READ,
                },
            ])
            .unwrap_or_else(|e| die(format!("agent_create: {e}")));
        let mut words = agent.handle().to_words();
        words.extend(a.handle().to_words());
        words.extend(big.handle().to_words());
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        for r in 1..size {
            rt.request_medium(r, handles, &[], &bytes)
                .unwrap_or_else(|e| die(format!("send handles: {e}")));
        }
        owned = Some((a, b, agent));
    }
    let (agent, a_ref, big_ref) = if me == 0 {
        (None, None, big.handle())
    } else {
        rt.wait_until(|| got.lock().unwrap().is_some());
        let words = got.lock().unwrap().take().unwrap();
        let n = words.len();
        let agent = AgentRef::from_words(&words[..n - 6])
            .unwrap_or_else(|| die("the agent's words do not parse".into()));
        let a = SegmentRef::from_words(words[n - 6..n - 3].try_into().unwrap());
        let big = SegmentRef::from_words(words[n - 3..].try_into().unwrap());
        (Some(agent), Some(a), big)
    };

    if let (Some(agent), Some(a)) = (&agent, a_ref) {
        act(&rma, me, agent, a, &b_pat);
    }
    rt.barrier();
    if let Some((a, b, agent)) = &owned {
        let actors = (size - 1) as u64;
        let refused = rma.refused();
        if refused != REFUSALS_PER_ACTOR * actors {
            die(format!(
                "{refused} refusals counted, expected {}",
                REFUSALS_PER_ACTOR * actors
            ));
        }
        let mut now = vec![0u8; A_LEN];
        ok(rma.read_local(a.handle(), 0, &mut now), "read A");
        let mut want = a_pat.clone();
        for r in 1..size {
            let at = W0_AT + (r - 1) * 16;
            want[at..at + 16].fill(r as u8);
        }
        let c = W0_AT + COUNTER;
        let before = u64::from_le_bytes(a_pat[c..c + 8].try_into().unwrap());
        want[c..c + 8].copy_from_slice(&before.wrapping_add(actors).to_le_bytes());
        if let Some(i) = (0..A_LEN).find(|&i| now[i] != want[i]) {
            die(format!("A differs at byte {i}: {} != {}", now[i], want[i]));
        }
        let mut nb = vec![0u8; B_LEN];
        ok(rma.read_local(b.handle(), 0, &mut nb), "read B");
        if nb != b_pat {
            die("B changed".into());
        }
        if !rma.agent_revoke(agent) || rma.agent_revoke(agent) {
            die("revoke should succeed once".into());
        }
        // Freeing a segment closes the windows on it.
        let c = rma.alloc(256, Perms::ALL).unwrap();
        let on_c = rma
            .agent_create(&[Window {
                segment: c.handle(),
                offset: 0,
                len: 64,
                perms: Perms::READ,
            }])
            .unwrap_or_else(|e| die(format!("agent on C: {e}")));
        let w = on_c.handle().window(0).unwrap();
        rma.free(c);
        if rma.read_local(w, 0, &mut [0u8; 8]).is_ok() || rma.agent_revoke(&on_c) {
            die("a window outlived its segment".into());
        }
    }
    rt.barrier();
    if let Some(agent) = &agent {
        let w0 = agent.window(0).unwrap();
        match rma.put(w0, 0, &[0xee; 8]) {
            Err(Error::Refused {
                reason: Refusal::NoSuchSegment,
                ..
            }) => {}
            other => die(format!("put through a revoked agent: {other:?}")),
        }
    }
    rt.barrier();
    if let Some((a, _, _)) = &owned {
        let actors = (size - 1) as u64;
        if rma.refused() != (REFUSALS_PER_ACTOR + 1) * actors {
            die(format!("{} refusals after the revoke", rma.refused()));
        }
        let mut now = [0u8; 8];
        ok(rma.read_local(a.handle(), W0_AT, &mut now), "read A");
        if now == [0xee; 8] {
            die("a put through a revoked agent landed".into());
        }
    }

    // Bounded target-side work: a large put and get split into frames.
    let last = size - 1;
    if me == last {
        let data = vec![0x5au8; BIG];
        ok(rma.put(big_ref, 0, &data), "big put");
        let mut back = vec![0u8; BIG];
        ok(rma.get(big_ref, 0, &mut back), "big get");
        if back != data {
            die("big get read other bytes".into());
        }
    }
    rt.barrier();
    let mut frames_line = String::new();
    if me == 0 {
        let w = rma
            .target_work(big.handle())
            .unwrap_or_else(|e| die(format!("target_work: {e}")));
        let bound = rma.frame_bound() as u64;
        let (frames, bytes) = match (rma.path(), rt.is_local(last)) {
            (volley::rma::RmaPath::Direct, true) => (0, 0),
            (_, true) => (2, 0),
            (_, false) => (2 * (BIG as u64).div_ceil(bound), 2 * BIG as u64),
        };
        if w.frames != frames || w.bytes != bytes || w.largest_frame > bound {
            die(format!(
                "target work {w:?}, expected {frames} frames of {bytes} bytes in all, none above {bound}"
            ));
        }
        frames_line = format!(
            "; 1 MiB put+get: {} frames, largest {} <= bound {bound}",
            w.frames, w.largest_frame
        );
    }
    rt.barrier();
    if me == 0 {
        println!(
            "path={}: agents: {} actors, {REFUSALS_PER_ACTOR} refusals each counted, windows written, \
             memory outside them unchanged, revoked agent refused{frames_line}",
            path_name(rma.path()),
            size - 1
        );
    }
    rt.finalize();
}

/// An access that must be refused: what it was, what it returned, whether the reason is right.
type Expected = (&'static str, volley::rma::Result<()>, fn(&Refusal) -> bool);

/// An actor's accesses through the agent: valid ones, then seven that must be refused.
fn act(rma: &Rma<'_>, me: usize, agent: &AgentRef, a: SegmentRef, b_pat: &[u8]) {
    let die = |msg: String| -> ! { fail(me, 1, &msg) };
    let w0 = agent.window(0).unwrap_or_else(|e| die(e.to_string()));
    let w1 = agent.window(1).unwrap_or_else(|e| die(e.to_string()));
    rma.put(w0, (me - 1) * 16, &[me as u8; 16])
        .unwrap_or_else(|e| die(format!("put through the window: {e}")));
    rma.fetch_add(w0, COUNTER, 1)
        .unwrap_or_else(|e| die(format!("fetch_add through the window: {e}")));
    let mut buf = vec![0u8; W1_LEN];
    rma.get(w1, 0, &mut buf)
        .unwrap_or_else(|e| die(format!("get through the window: {e}")));
    if buf != b_pat[..W1_LEN] {
        die("the read-only window reads other bytes than B's".into());
    }
    if !matches!(agent.window(2), Err(Error::InvalidConfig { .. })) {
        die("window 2 of a 2-window agent".into());
    }
    let agent_key = agent.to_words()[1];
    let refusals: [Expected; 7] = [
        (
            "wrong agent key",
            rma.put(
                agent.clone().with_key(agent_key ^ 1).window(0).unwrap(),
                0,
                &[1; 8],
            ),
            |r| *r == Refusal::WrongKey,
        ),
        (
            "put past the window",
            rma.put(w0, W0_LEN - 8, &[1; 16]),
            |r| matches!(r, Refusal::OutOfBounds { .. }),
        ),
        (
            "write to the read-only window",
            rma.put(w1, 0, &[1; 8]),
            |r| *r == Refusal::NotWritable,
        ),
        (
            "atomic on the read-only window",
            rma.fetch_add(w1, 0, 1).map(|_| ()),
            |r| *r == Refusal::NoAtomics,
        ),
        (
            "get past the window",
            rma.get(w0, W0_LEN, &mut [0u8; 1]),
            |r| matches!(r, Refusal::OutOfBounds { .. }),
        ),
        (
            "large put through the window",
            rma.put(w0, 0, &vec![1u8; 200_000]),
            |r| matches!(r, Refusal::OutOfBounds { .. }),
        ),
        (
            "the segment under the agent's key",
            rma.put(a.with_key(agent_key), 0, &[1; 8]),
            |r| *r == Refusal::WrongKey,
        ),
    ];
    for (what, r, want) in refusals {
        match r {
            Err(Error::Refused { rank: 0, reason }) if want(&reason) => {}
            other => die(format!("{what}: expected a refusal, got {other:?}")),
        }
    }
}
