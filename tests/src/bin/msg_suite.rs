//! The tag-matching layer (`volley-msg`) across processes. `msg_suite SECTION...`; every
//! section checks its own results and rank 0 prints `msg SECTION: ok (...)`.
//!
//! - `stream`: every rank sends every other rank random-size messages (16 B to 200 KiB, so
//!   eager and rendezvous, one and several chunks) with random tags, in rounds; receivers use
//!   `ANY_SOURCE`, a named source with `ANY_TAG`, or named source and tag in a shuffled tag
//!   order. Every message's content, length, source and tag are checked, and per sender the
//!   messages must come in send order.
//! - `pingpong`: ranks 0 and 1 bounce messages of the sizes at the protocol's edges
//!   through `recv_into`.
//! - `errors`: bad ranks and tags, a receive buffer too small (the message stays queued and
//!   is received whole afterwards), an empty message, probes.
//! - `unexpected`: (2 ranks, a 64 KiB queue) rank 1 fills its share of rank 0's queue with
//!   eager `isend`s until one is refused with `UnexpectedFull`, at exactly the count the share
//!   holds; then the same with rendezvous announcements; rank 0 receives everything in order,
//!   and rank 1's blocking sends go on once it does.
//! - `finalize`: after finalize, every call fails with `Finalized`.

use std::process::exit;
use volley::Runtime;
use volley_msg::{Msg, MsgConfig, MsgError, RecvRequest, ANY_SOURCE, ANY_TAG};

/// A small deterministic generator (xorshift), seeded per pair and round.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const ROUNDS: u64 = 9;
const PER_PAIR: usize = 12;
const TAGS: u64 = 3;

/// The size and tag of message `i` from `src` to `dst` in `round`.
fn shape(src: usize, dst: usize, round: u64, i: usize) -> (usize, u64) {
    let mut r = Rng::new((src as u64) << 40 | (dst as u64) << 20 | round << 8 | i as u64);
    let size = match r.below(20) {
        0..=11 => 16 + r.below(240),
        12..=16 => 256 + r.below(16 << 10),
        _ => (16 << 10) + r.below(184 << 10),
    } as usize;
    (size, r.below(TAGS))
}

/// The content of message `i` from `src` to `dst` in `round`: its index and sender first.
fn content(src: usize, dst: usize, round: u64, i: usize) -> Vec<u8> {
    let (size, _) = shape(src, dst, round, i);
    let mut v = vec![0u8; size];
    v[..8].copy_from_slice(&(i as u64).to_le_bytes());
    v[8..16].copy_from_slice(&(src as u64).to_le_bytes());
    let seed = (src * 31 + dst * 17 + round as usize * 7 + i) as u8;
    for (j, b) in v[16..].iter_mut().enumerate() {
        *b = seed.wrapping_add((j as u8).wrapping_mul(13));
    }
    v
}

fn fail(what: String) -> ! {
    eprintln!("msg_suite: FAILED: {what}");
    exit(1)
}

fn ok<T>(r: volley_msg::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| fail(format!("{what}: {e}")))
}

/// Checks a received message: it must be the next one expected from its sender.
fn check(me: usize, round: u64, next: &mut [usize], src: usize, tag: u64, data: &[u8]) {
    let i = next[src];
    if i >= PER_PAIR {
        fail(format!("round {round}: an extra message from {src}"));
    }
    let (size, want_tag) = shape(src, me, round, i);
    if data.len() != size || tag != want_tag || data != content(src, me, round, i).as_slice() {
        let got_i = data
            .get(..8)
            .map(|b| u64::from_le_bytes(b.try_into().unwrap()));
        fail(format!(
            "round {round}: from {src} expected message {i} (tag {want_tag}, {size} B), got tag {tag}, {} B, index {got_i:?}",
            data.len()
        ));
    }
    next[src] += 1;
}

fn stream(rt: &Runtime, msg: &Msg<'_>) -> String {
    let (me, p) = (rt.rank(), rt.size());
    let peers: Vec<usize> = (0..p).filter(|&r| r != me).collect();
    let mut bytes = 0usize;
    let mut rdv = 0usize;
    for round in 0..ROUNDS {
        let mode = round % 3;
        let mut next = vec![0usize; p];
        // Receives of modes 0 and 1 are posted before anything is sent (so that some
        // messages find them posted, others arrive unexpected at slower ranks).
        let mut posted: Vec<RecvRequest<'_>> = Vec::new();
        match mode {
            0 => {
                for _ in 0..peers.len() * PER_PAIR {
                    posted.push(ok(msg.irecv(ANY_SOURCE, ANY_TAG), "irecv"));
                }
            }
            1 => {
                for &s in &peers {
                    for _ in 0..PER_PAIR {
                        posted.push(ok(msg.irecv(s, ANY_TAG), "irecv"));
                    }
                }
            }
            _ => {}
        }
        let mut sends = Vec::new();
        for i in 0..PER_PAIR {
            for &d in &peers {
                let (size, tag) = shape(me, d, round, i);
                if size > msg.eager_limit() {
                    rdv += 1;
                }
                bytes += size;
                sends.push(ok(msg.isend(d, tag, content(me, d, round, i)), "isend"));
            }
        }
        if mode == 2 {
            // Named source and tag, tags in a shuffled order: a receive for tag t takes the
            // earliest message with tag t, whatever came before it with other tags.
            let mut rng = Rng::new(round << 4 | me as u64);
            let first = rng.below(TAGS);
            for &s in &peers {
                let mut by_tag: Vec<Vec<usize>> = vec![Vec::new(); TAGS as usize];
                for i in 0..PER_PAIR {
                    by_tag[shape(s, me, round, i).1 as usize].push(i);
                }
                for k in 0..TAGS {
                    let t = (first + k) % TAGS;
                    for &i in &by_tag[t as usize] {
                        let (size, _) = shape(s, me, round, i);
                        let mut buf = vec![0u8; size + (i % 2) * 100];
                        let st = ok(msg.recv_into(s, t, &mut buf), "recv_into");
                        if st.src != s || st.tag != t || st.len != size {
                            fail(format!("round {round}: {st:?} for message {i} of {s}"));
                        }
                        if buf[..size] != content(s, me, round, i) {
                            fail(format!(
                                "round {round}: message {i} of {s}: content differs"
                            ));
                        }
                    }
                }
                next[s] = PER_PAIR;
            }
        } else {
            for r in posted {
                let m = ok(r.wait(), "wait");
                check(me, round, &mut next, m.src, m.tag, &m.data);
            }
        }
        for (k, s) in sends.into_iter().enumerate() {
            let back = ok(s.wait(), "send wait");
            let (i, d) = (k / peers.len(), peers[k % peers.len()]);
            if back != content(me, d, round, i) {
                fail(format!(
                    "round {round}: send {i} to {d} gave back other bytes"
                ));
            }
        }
        for &s in &peers {
            if next[s] != PER_PAIR {
                fail(format!("round {round}: {} messages from {s}", next[s]));
            }
        }
        rt.barrier();
    }
    let (n, b) = msg.unexpected();
    if n != 0 || b != 0 {
        let first = msg.iprobe(ANY_SOURCE, ANY_TAG);
        fail(format!(
            "{n} messages ({b} B) left in the unexpected queue, the first {first:?}"
        ));
    }
    // Before the next section's messages can arrive.
    rt.barrier();
    format!(
        "{p} ranks, {ROUNDS} rounds x {PER_PAIR} messages per pair, {bytes} B sent by rank 0, {rdv} by rendezvous"
    )
}

fn pingpong(rt: &Runtime, msg: &Msg<'_>) -> String {
    let me = rt.rank();
    let eager = msg.eager_limit();
    let words = volley_msg::WORDS_EAGER_BYTES;
    let sizes = [
        0,
        1,
        8,
        words,
        words + 1,
        eager,
        eager + 1,
        64 << 10,
        (64 << 10) + 1,
        1 << 20,
        (3 << 20) + 5,
    ];
    if me < 2 {
        let peer = 1 - me;
        let mut buf = vec![0u8; (3 << 20) + 5];
        for (k, &size) in sizes.iter().enumerate() {
            let data: Vec<u8> = (0..size).map(|j| (j * 7 + k) as u8).collect();
            for round in 0..20u64 {
                if me == 0 {
                    ok(msg.send(peer, round, &data), "send");
                    let st = ok(msg.recv_into(peer, round, &mut buf), "recv_into");
                    if st.len != size || buf[..size] != data[..] {
                        fail(format!("pingpong {size} B: the reply differs"));
                    }
                } else {
                    let st = ok(msg.recv_into(peer, round, &mut buf), "recv_into");
                    if st.len != size || buf[..size] != data[..] {
                        fail(format!("pingpong {size} B: the ping differs"));
                    }
                    ok(msg.send(peer, round, &buf[..size]), "send");
                }
            }
        }
    }
    // How rank 0 took rank 1's rendezvous answers: read straight from rank 1's memory
    // (between processes of one node, where the kernel lets it) or pulled.
    let path = match msg.single_copy_bytes() {
        0 => "rendezvous pulled",
        _ => "rendezvous by single copy",
    };
    rt.barrier();
    format!("sizes {sizes:?}, eager limit {eager}, {path}")
}

fn expect_err(r: volley_msg::Result<impl std::fmt::Debug>, what: &str, is: fn(&MsgError) -> bool) {
    match r {
        Err(e) if is(&e) => {}
        other => fail(format!("{what}: expected an error, got {other:?}")),
    }
}

fn errors(rt: &Runtime, msg: &Msg<'_>) -> String {
    let (me, p) = (rt.rank(), rt.size());
    let bad_rank = |e: &MsgError| matches!(e, MsgError::InvalidRank { .. });
    let bad_tag = |e: &MsgError| matches!(e, MsgError::TagOutOfRange { .. });
    expect_err(msg.send(p, 0, b"x"), "send to rank size", bad_rank);
    expect_err(
        msg.isend(usize::MAX, 0, vec![1]),
        "isend to usize::MAX",
        bad_rank,
    );
    expect_err(msg.recv(p + 3, 0), "recv from a rank outside", bad_rank);
    expect_err(
        msg.send(0, volley_msg::MAX_TAG + 1, b"x"),
        "tag too large",
        bad_tag,
    );
    expect_err(
        msg.irecv(ANY_SOURCE, u64::MAX),
        "recv tag too large",
        bad_tag,
    );
    expect_err(msg.iprobe(p, ANY_TAG), "probe rank", bad_rank);
    let right = (me + 1) % p;
    let left = (me + p - 1) % p;
    // Eager and rendezvous messages, each first refused by a small buffer (posted before
    // the message arrives, and after), then received whole.
    let big = msg.eager_limit() + 5000;
    for (tag, size) in [(1u64, 100usize), (2, big)] {
        let data: Vec<u8> = (0..size).map(|j| (j % 251) as u8).collect();
        let mut small = vec![0u8; size - 1];
        let mut send = ok(msg.isend(right, tag, data.clone()), "isend");
        // Maybe before it arrives: the posted receive is refused when it does.
        match msg.recv_into(left, tag, &mut small) {
            Err(MsgError::BufferTooSmall {
                len,
                capacity,
                src,
                tag: t,
            }) if len == size && capacity == size - 1 && src == left && t == tag => {}
            other => fail(format!("a {size} B message into {} B: {other:?}", size - 1)),
        }
        // Now it is queued: refused at once, still queued.
        let st = ok(msg.probe(left, tag), "probe");
        if st.len != size || st.src != left {
            fail(format!("probe after the refusal: {st:?}"));
        }
        expect_err(
            msg.recv_into(left, tag, &mut small),
            "too small again",
            |e| matches!(e, MsgError::BufferTooSmall { .. }),
        );
        let m = ok(msg.recv(left, tag), "recv after refusals");
        if m.data != data {
            fail(format!("the {size} B message came through changed"));
        }
        while !send.test() {}
        ok(send.wait(), "send wait");
    }
    // An empty message, and a probe that finds nothing.
    ok(msg.send(right, 3, &[]), "empty send");
    let m = ok(msg.recv(left, 3), "empty recv");
    if !m.data.is_empty() || m.src != left {
        fail(format!("empty message: {m:?}"));
    }
    rt.barrier();
    if let Some(st) = ok(msg.iprobe(ANY_SOURCE, ANY_TAG), "iprobe") {
        fail(format!("a message left over: {st:?}"));
    }
    rt.barrier();
    "bad ranks and tags refused, small buffers refused with the message kept, empty messages".into()
}

/// Rank 1 fills its share of rank 0's unexpected queue.
fn unexpected(rt: &Runtime, msg: &Msg<'_>) -> String {
    if rt.size() != 2 {
        fail("the unexpected section needs 2 ranks".into());
    }
    let me = rt.rank();
    let share = msg.unexpected_share();
    let size = 1000usize;
    let cost = size + volley_msg::ENVELOPE_BYTES;
    let fits = share / cost;
    let data = |i: usize| -> Vec<u8> { (0..size).map(|j| (i * 3 + j) as u8).collect() };
    let mut summary = String::new();
    // Eager: exactly `fits` go, the next is refused (and not sent).
    if me == 1 {
        if msg.room(0) != share {
            fail(format!("room {} at the start, share {share}", msg.room(0)));
        }
        let mut n = 0;
        loop {
            match msg.isend(0, 5, data(n)) {
                Ok(r) => {
                    ok(r.wait(), "eager isend");
                    n += 1;
                }
                Err(MsgError::UnexpectedFull { need, share: s, .. }) => {
                    if n != fits || need != cost || s != share || msg.room(0) >= cost {
                        fail(format!(
                            "refused after {n} (expected {fits}), need {need}, share {s}"
                        ));
                    }
                    break;
                }
                Err(e) => fail(format!("isend: {e}")),
            }
            if n > fits {
                fail(format!(
                    "{n} eager messages went into a share that holds {fits}"
                ));
            }
        }
    }
    rt.barrier();
    if me == 0 {
        let (_, bytes) = msg.unexpected();
        if bytes > share {
            fail(format!(
                "the unexpected queue holds {bytes} B, more than the {share} B share"
            ));
        }
    }
    rt.barrier();
    // Rank 0 receives them all and then as many again, which rank 1 sends blocking: they
    // wait for room as rank 0 frees it.
    let total = 2 * fits + 7;
    if me == 0 {
        for i in 0..total {
            let m = ok(msg.recv(1, 5), "recv");
            if m.data != data(i) {
                fail(format!("eager message {i} of {total} differs"));
            }
        }
    } else {
        for i in fits..total {
            ok(msg.send(0, 5, &data(i)), "blocking send");
        }
    }
    rt.barrier();
    summary.push_str(&format!(
        "{fits} eager messages of {size} B filled the {share} B share, the next was refused; {total} received in order"
    ));
    // Rendezvous: each announcement takes an envelope of the share. Rank 0 may still owe
    // rank 1 less than a return batch (a quarter of the share) of what it freed above.
    let big = msg.eager_limit() + 1;
    let envelopes = share / volley_msg::ENVELOPE_BYTES;
    let at_least = (share - share / 4) / volley_msg::ENVELOPE_BYTES;
    if me == 1 {
        let mut reqs = Vec::new();
        loop {
            match msg.isend(0, 6, vec![reqs.len() as u8; big]) {
                Ok(r) => reqs.push(r),
                Err(MsgError::UnexpectedFull { .. }) => break,
                Err(e) => fail(format!("rendezvous isend: {e}")),
            }
            if reqs.len() > envelopes {
                fail(format!(
                    "{} announcements in a share of {envelopes}",
                    reqs.len()
                ));
            }
        }
        if reqs.len() < at_least {
            fail(format!(
                "only {} announcements fit, expected {at_least} or more",
                reqs.len()
            ));
        }
        rt.barrier();
        for r in reqs {
            ok(r.wait(), "rendezvous wait");
        }
    } else {
        rt.barrier();
        // Every announcement came before rank 1's barrier message (one channel, in order).
        let (n, bytes) = msg.unexpected();
        if n < at_least || n > envelopes || bytes != n * volley_msg::ENVELOPE_BYTES {
            fail(format!(
                "{n} announcements ({bytes} B) queued, expected {at_least}..={envelopes}"
            ));
        }
        for i in 0..n {
            let m = ok(msg.recv(ANY_SOURCE, 6), "rendezvous recv");
            if m.data != vec![i as u8; big] || m.src != 1 {
                fail(format!("rendezvous message {i} differs"));
            }
        }
    }
    rt.barrier();
    if me == 0 && msg.unexpected() != (0, 0) {
        fail(format!("left in the queue: {:?}", msg.unexpected()));
    }
    summary.push_str("; rendezvous announcements until refused, all received");
    summary
}

fn finalize(rt: &Runtime, msg: &Msg<'_>) -> String {
    rt.barrier();
    rt.finalize();
    let fin = |e: &MsgError| matches!(e, MsgError::Finalized);
    expect_err(msg.send(0, 0, b"x"), "send after finalize", fin);
    expect_err(msg.isend(0, 0, vec![]), "isend after finalize", fin);
    expect_err(msg.recv(ANY_SOURCE, ANY_TAG), "recv after finalize", fin);
    expect_err(msg.irecv(0, 1), "irecv after finalize", fin);
    expect_err(msg.iprobe(0, 1), "iprobe after finalize", fin);
    "send, isend, recv, irecv and iprobe refused".into()
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let mut b = Runtime::builder();
    // `unexpected` runs with a small queue, which the other sections would overflow.
    let small = sections.iter().any(|s| s == "unexpected");
    if small && sections.len() > 1 {
        fail("run the unexpected section in a job of its own".into());
    }
    let config = if small {
        MsgConfig {
            unexpected_bytes: 64 << 10,
            ..MsgConfig::default()
        }
    } else {
        ok(MsgConfig::from_env(), "settings")
    };
    let setup = Msg::register_with(&mut b, config);
    let rt = b.build().unwrap_or_else(|e| fail(format!("build: {e}")));
    let msg = ok(setup.attach(&rt), "attach");
    for s in &sections {
        let what = match s.as_str() {
            "stream" => stream(&rt, &msg),
            "pingpong" => pingpong(&rt, &msg),
            "errors" => errors(&rt, &msg),
            "unexpected" => unexpected(&rt, &msg),
            "finalize" => finalize(&rt, &msg),
            other => fail(format!("unknown section {other}")),
        };
        if rt.rank() == 0 {
            println!("msg {s}: ok ({what})");
        }
    }
}
