//! AM-II endpoints (`volley-endpoint`) across processes. `endpoint_suite SECTION...`; every
//! section checks its own results and rank 0 prints `endpoint SECTION: ok (...)` once every
//! rank has passed it (a rank that finds a fault exits 1 with the reason).
//!
//! - `pingpong`: every rank opens three endpoints; endpoint 0's names go through files, the
//!   others' through an Active Message; endpoint `i` of each rank ping-pongs with endpoint `i`
//!   of its right neighbour (arguments and payloads of 0 to 64 KiB checked both ways). Each
//!   rank maps its neighbour's endpoint 0 twice: one attachment, two entries.
//! - `returned`: messages to the right neighbour come back to handler 0 with the reason and
//!   the original handler index, arguments, payload and translation index: a wrong tag, a
//!   closed endpoint (and its number reopened: the old name does not reach the new endpoint),
//!   an endpoint never opened, an index with no handler, a full queue (depth 4: the first 4
//!   queued, the rest back as full), the 4 still queued when their endpoint closes (back as
//!   closed), and a reply to a requester that changed its tag (back to the replier).
//! - `errors`: refusals at the sender: bad and unmapped indices, handler 0, too many
//!   arguments, too large a payload, a rank out of range, another job's name, a wrong node,
//!   an index in use.
//! - `local`: (2 ranks per node, and a rank on another node) a ping-pong with a rank of the
//!   same node leaves the network counters alone; one with a rank of another node moves them.
//! - `libraries`: two "libraries" each open two endpoints with the same handler indices (one
//!   adds, the other multiplies) and so does the program; interleaved traffic, every reply
//!   checked against its library's operation.

use std::collections::HashMap;
use std::process::exit;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use volley::{Runtime, RuntimeBuilder};
use volley_endpoint::{
    Endpoint, EndpointError, EndpointId, EndpointName, Endpoints, Kind, Reason, Route,
};

fn fail(what: String) -> ! {
    eprintln!("endpoint_suite: FAILED: {what}");
    exit(1)
}

fn ok<T>(r: volley_endpoint::Result<T>, what: &str) -> T {
    r.unwrap_or_else(|e| fail(format!("{what}: {e}")))
}

/// Errors found inside handlers, reported by the program thread.
#[derive(Clone, Default)]
struct Faults(Arc<Mutex<Vec<String>>>);

impl Faults {
    fn note(&self, s: String) {
        self.0.lock().unwrap().push(s);
    }
    fn check(&self, section: &str) {
        if let Some(f) = self.0.lock().unwrap().first() {
            fail(format!("{section}: {f}"));
        }
    }
}

/// Names (with tags) handed to every rank through a core Active Message, by slot.
#[derive(Clone, Default)]
struct Board(Arc<Mutex<Names>>);

/// (slot, rank) to that rank's name and tag.
type Names = HashMap<(u64, usize), (EndpointName, u64)>;

struct Exchange {
    board: Board,
    h: volley::RequestHandler,
}

impl Exchange {
    fn register(b: &mut RuntimeBuilder) -> Self {
        let board = Board::default();
        let bd = board.clone();
        let h = b.request_handler("test.endpoint.name", move |m, _| {
            let name = EndpointName::from_bytes(m.payload()).expect("a name");
            bd.0.lock()
                .unwrap()
                .insert((m.arg(0), m.src()), (name, m.arg(1)));
        });
        Self { board, h }
    }

    /// Every rank's name and tag for `slot`, by rank.
    fn all(
        &self,
        rt: &Runtime,
        slot: u64,
        name: EndpointName,
        tag: u64,
    ) -> Vec<(EndpointName, u64)> {
        for r in 0..rt.size() {
            rt.request_medium(r, self.h, &[slot, tag], &name.to_bytes())
                .unwrap_or_else(|e| fail(format!("sending a name: {e}")));
        }
        rt.wait_until(|| {
            let b = self.board.0.lock().unwrap();
            (0..rt.size()).all(|r| b.contains_key(&(slot, r)))
        });
        let b = self.board.0.lock().unwrap();
        (0..rt.size()).map(|r| b[&(slot, r)]).collect()
    }
}

/// Payload sizes the ping-pong cycles through (the last, the largest medium).
const SIZES: [usize; 8] = [0, 1, 7, 8, 100, 4096, 8192, 65536];
const ROUNDS: u64 = 40;
const EPS: usize = 3;

fn content(rank: usize, ep: usize, round: u64, len: usize) -> Vec<u8> {
    (0..len)
        .map(|j| (rank * 7 + ep * 13 + round as usize * 3 + j) as u8)
        .collect()
}

/// Names through files in `$TMPDIR` (a fresh directory per job in the tests).
fn via_files(rt: &Runtime, name: EndpointName) -> Vec<EndpointName> {
    let dir = std::env::temp_dir();
    let path = |r: usize| dir.join(format!("endpoint-name.{r}"));
    std::fs::write(path(rt.rank()), name.to_string()).unwrap_or_else(|e| fail(format!("{e}")));
    rt.barrier();
    let names = (0..rt.size())
        .map(|r| {
            let text = std::fs::read_to_string(path(r)).unwrap_or_else(|e| fail(format!("{e}")));
            text.parse::<EndpointName>()
                .unwrap_or_else(|e| fail(format!("{e}")))
        })
        .collect();
    rt.barrier();
    if rt.rank() == 0 {
        for r in 0..rt.size() {
            let _ = std::fs::remove_file(path(r));
        }
    }
    names
}

fn pingpong(rt: &Runtime, eps: &Endpoints<'_>, x: &Exchange) {
    let me = rt.rank();
    let size = rt.size();
    let right = (me + 1) % size;
    let faults = Faults::default();
    let served = Arc::new(AtomicU64::new(0));
    let replies: Vec<Arc<AtomicU64>> = (0..EPS).map(|_| Arc::new(AtomicU64::new(0))).collect();
    let tags: Vec<u64> = (0..EPS)
        .map(|i| 0x1000 * (me as u64 + 1) + i as u64)
        .collect();
    let ends: Vec<Endpoint<'_>> = tags.iter().map(|&t| eps.open(t)).collect();
    for (i, ep) in ends.iter().enumerate() {
        let (f, s) = (faults.clone(), served.clone());
        ok(
            ep.set_request_handler(1, move |m, token| {
                let round = m.arg(1);
                let len = SIZES[round as usize % SIZES.len()];
                let want = content(m.src_rank(), i, round, len);
                if m.arg(0) != i as u64 || m.payload() != want {
                    f.note(format!(
                        "endpoint {i}: request {round} from {} wrong",
                        m.src_rank()
                    ));
                }
                // The reply's payload is the request's, reversed.
                let back: Vec<u8> = m.payload().iter().rev().copied().collect();
                if let Err(e) = token.reply(2, &[i as u64, round, !round], &back) {
                    f.note(format!("reply: {e}"));
                }
                s.fetch_add(1, Ordering::Release);
            }),
            "set_request_handler",
        );
        let (f, got) = (faults.clone(), replies[i].clone());
        ok(
            ep.set_reply_handler(2, move |m| {
                let round = m.arg(1);
                let len = SIZES[round as usize % SIZES.len()];
                let mut want = content(me, i, round, len);
                want.reverse();
                let expect = got.load(Ordering::Relaxed);
                if m.args() != [i as u64, round, !round] || m.payload() != want || round != expect {
                    f.note(format!(
                        "endpoint {i}: reply {round} (expected {expect}) wrong"
                    ));
                }
                got.store(round + 1, Ordering::Release);
            }),
            "set_reply_handler",
        );
        let f = faults.clone();
        ep.set_returned_handler(move |r| f.note(format!("returned: {:?}", r.reason())));
    }
    // Endpoint 0 through files, the others through an Active Message.
    let names0 = via_files(rt, ends[0].name());
    let mut dest = vec![ok(
        ends[0].map_any(names0[right], 0x1000 * (right as u64 + 1)),
        "map",
    )];
    for (i, ep) in ends.iter().enumerate().skip(1) {
        let all = x.all(rt, 100 + i as u64, ep.name(), ep.tag());
        let (name, tag) = all[right];
        if name.rank as usize != right || name.endpoint.id != ep.id().id {
            fail(format!("endpoint {i}: right's name is {name}"));
        }
        dest.push(ok(ep.map_any(name, tag), "map_any"));
    }
    // The neighbour mapped twice from endpoint 0: one attachment, two entries.
    let twice = ok(ends[0].map_any(names0[right], 1), "map again");
    let route = if rt.is_local(right) {
        Route::SharedMemory
    } else {
        Route::Network
    };
    if ok(ends[0].route(twice), "route") != route {
        fail(format!("route to {right}: not {route:?}"));
    }
    match eps.attachment(right) {
        Some((r, n)) if r == route && n == EPS + 1 => {}
        other => fail(format!("attachment of {right}: {other:?}")),
    }
    ok(ends[0].unmap(twice), "unmap");
    if eps.stats().attachments != 1 {
        fail(format!("{} attachments, not 1", eps.stats().attachments));
    }
    for round in 0..ROUNDS {
        for (i, ep) in ends.iter().enumerate() {
            let len = SIZES[round as usize % SIZES.len()];
            ok(
                ep.request(dest[i], 1, &[i as u64, round], &content(me, i, round, len)),
                "request",
            );
        }
        ends[0].wait_until(|| {
            for ep in &ends[1..] {
                ep.handle_queued();
            }
            replies.iter().all(|g| g.load(Ordering::Acquire) > round)
        });
    }
    // Serve the left neighbour until it is done too.
    ends[0].wait_until(|| {
        for ep in &ends[1..] {
            ep.handle_queued();
        }
        served.load(Ordering::Acquire) == ROUNDS * EPS as u64
    });
    faults.check("pingpong");
    rt.barrier();
    if me == 0 {
        println!("endpoint pingpong: ok ({size} ranks, {EPS} endpoints each, {ROUNDS} rounds)");
    }
}

/// What handler 0 saw, in order.
#[derive(Debug, Clone, PartialEq)]
struct Back {
    reason: Reason,
    kind: Kind,
    handler: u8,
    args: Vec<u64>,
    payload: Vec<u8>,
    index: Option<usize>,
    dest_rank: usize,
}

type Log = Arc<Mutex<Vec<Back>>>;

fn logging(ep: &Endpoint<'_>) -> Log {
    let log: Log = Arc::default();
    let l = log.clone();
    ep.set_returned_handler(move |r| {
        l.lock().unwrap().push(Back {
            reason: r.reason(),
            kind: r.kind(),
            handler: r.handler(),
            args: r.args().to_vec(),
            payload: r.payload().to_vec(),
            index: r.index(),
            dest_rank: r.dest_rank(),
        })
    });
    log
}

fn expect_back(ep: &Endpoint<'_>, log: &Log, want: &[Back], what: &str) {
    ep.wait_until(|| log.lock().unwrap().len() >= want.len());
    let got = std::mem::take(&mut *log.lock().unwrap());
    if got != want {
        fail(format!("{what}: handler 0 saw {got:?}, expected {want:?}"));
    }
}

/// Marks the request sent with a wrong tag (its handler fails the job if it ever runs).
const BAD: u64 = 0xbad;

fn returned(rt: &Runtime, eps: &Endpoints<'_>, x: &Exchange) {
    let me = rt.rank();
    let size = rt.size();
    let right = (me + 1) % size;
    let left = (me + size - 1) % size;
    let faults = Faults::default();
    let ep = eps.open(77);
    let log = logging(&ep);
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    ok(
        ep.set_request_handler(3, move |m, _| {
            if m.arg(1) == BAD {
                fail("a request with a wrong tag was delivered".into());
            }
            h.fetch_add(1, Ordering::Relaxed);
        }),
        "handler",
    );
    // A request handler that replies, and a reply handler for it.
    ok(
        ep.set_request_handler(5, |m, t| {
            let _ = t.reply(6, &[m.arg(0) * 2], b"reply");
        }),
        "handler",
    );
    ok(ep.set_reply_handler(6, |_| {}), "handler");
    let all = x.all(rt, 1, ep.name(), ep.tag());
    let (rname, rtag) = all[right];
    let back = |reason, handler, args: &[u64], payload: &[u8], index| Back {
        reason,
        kind: Kind::Request,
        handler,
        args: args.to_vec(),
        payload: payload.to_vec(),
        index,
        dest_rank: right,
    };

    // A wrong tag, then the right one.
    let bad = ok(ep.map_any(rname, rtag + 1), "map");
    ok(
        ep.request(bad, 3, &[me as u64, BAD, 2, 3], b"bad tag"),
        "request",
    );
    expect_back(
        &ep,
        &log,
        &[back(
            Reason::BadTag,
            3,
            &[me as u64, BAD, 2, 3],
            b"bad tag",
            Some(bad),
        )],
        "wrong tag",
    );
    let good = ok(ep.map_any(rname, rtag), "map");
    ok(ep.request(good, 3, &[9], &[]), "request");
    // An index holding no handler, and one holding a reply handler.
    ok(ep.request(good, 4, &[8, 7], b"x"), "request");
    ok(ep.request(good, 6, &[], &[]), "request");
    expect_back(
        &ep,
        &log,
        &[
            back(Reason::NoHandler, 4, &[8, 7], b"x", Some(good)),
            back(Reason::NoHandler, 6, &[], &[], Some(good)),
        ],
        "no handler",
    );
    ep.wait_until(|| handled.load(Ordering::Relaxed) == 1);
    rt.barrier();

    // A closed endpoint: the right neighbour opens one, hands out its name, closes it and
    // opens another on the same number.
    let tmp = eps.open(5);
    let tmp_id = tmp.id();
    let tn = x.all(rt, 2, tmp.name(), 5)[right].0;
    ok(tmp.close(), "close");
    let reopened = eps.open(5);
    if reopened.id().id != tmp_id.id || reopened.id().generation == tmp_id.generation {
        fail(format!("reopened {:?} after {:?}", reopened.id(), tmp_id));
    }
    let got_new = Arc::new(AtomicUsize::new(0));
    let g = got_new.clone();
    ok(
        reopened.set_request_handler(3, move |_, _| {
            g.fetch_add(1, Ordering::Relaxed);
        }),
        "handler",
    );
    rt.barrier();
    let closed = ok(ep.map_any(tn, 5), "map");
    ok(ep.request(closed, 3, &[42], b"closed"), "request");
    // An endpoint never opened.
    let ghost = EndpointName {
        endpoint: EndpointId {
            id: 999,
            generation: 1,
        },
        ..rname
    };
    let ghost = ok(ep.map_any(ghost, 0), "map");
    ok(ep.request(ghost, 3, &[43], &[]), "request");
    expect_back(
        &ep,
        &log,
        &[
            back(Reason::Closed, 3, &[42], b"closed", Some(closed)),
            back(Reason::Unreachable, 3, &[43], &[], Some(ghost)),
        ],
        "closed and unreachable",
    );
    rt.barrier();
    reopened.handle_queued();
    if got_new.load(Ordering::Relaxed) != 0 {
        fail("a message to a closed endpoint reached the endpoint that reuses its number".into());
    }
    drop(reopened);

    // A full queue: depth 4, nobody handling it until everyone is done sending.
    let full = eps.open_with(
        6,
        volley_endpoint::EndpointConfig {
            queue_depth: 4,
            ..Default::default()
        },
    );
    let fh = Arc::new(Mutex::new(Vec::new()));
    let f2 = fh.clone();
    ok(
        full.set_request_handler(3, move |m, _| f2.lock().unwrap().push(m.arg(0))),
        "handler",
    );
    let fname = x.all(rt, 3, full.name(), 6)[right].0;
    let fi = ok(ep.map_any(fname, 6), "map");
    for i in 0..10u64 {
        ok(
            ep.request(fi, 3, &[i, me as u64], &i.to_le_bytes()),
            "request",
        );
    }
    let want: Vec<Back> = (4..10u64)
        .map(|i| back(Reason::Full, 3, &[i, me as u64], &i.to_le_bytes(), Some(fi)))
        .collect();
    expect_back(&ep, &log, &want, "full queue");
    rt.barrier();
    if full.queued() != (0, 0, 4) {
        fail(format!("the full endpoint holds {:?}", full.queued()));
    }
    // Closed with 4 still queued: they go back, as closed.
    if ok(full.close(), "close") != 4 {
        fail("close returned another number than 4".into());
    }
    if !fh.lock().unwrap().is_empty() {
        fail("a closed endpoint's handler ran".into());
    }
    let want: Vec<Back> = (0..4u64)
        .map(|i| {
            back(
                Reason::Closed,
                3,
                &[i, me as u64],
                &i.to_le_bytes(),
                Some(fi),
            )
        })
        .collect();
    expect_back(&ep, &log, &want, "closed with messages queued");
    rt.barrier();

    // A reply to a requester that changed its tag comes back to the replier.
    // (From an endpoint of its own: the neighbour's `ep` keeps its tag, so the request
    // itself is taken whenever it arrives.)
    let asker = eps.open(50);
    let ai = ok(asker.map_any(rname, rtag), "map");
    ok(asker.request(ai, 5, &[21], &[]), "request");
    asker.set_tag(51);
    rt.barrier();
    let want = [Back {
        reason: Reason::BadTag,
        kind: Kind::Reply,
        handler: 6,
        args: vec![42],
        payload: b"reply".to_vec(),
        index: None,
        dest_rank: left,
    }];
    expect_back(&ep, &log, &want, "reply to a changed tag");
    faults.check("returned");
    rt.barrier();
    if asker.queued() != (0, 0, 0) {
        fail(format!("the asker holds {:?}", asker.queued()));
    }
    if me == 0 {
        println!(
            "endpoint returned: ok (bad tag, no handler, closed, unreachable, full, closed with \
             queued, reply; {} returned by rank 0)",
            eps.stats().returned
        );
    }
}

fn errors(rt: &Runtime, eps: &Endpoints<'_>) {
    let ep = eps.open_with(
        1,
        volley_endpoint::EndpointConfig {
            translations: 4,
            ..Default::default()
        },
    );
    let me = ep.name();
    let expect =
        |r: volley_endpoint::Result<()>, what: &str, ok: fn(&EndpointError) -> bool| match r {
            Err(e) if ok(&e) => {}
            other => fail(format!("{what}: {other:?}")),
        };
    expect(ep.request(1, 1, &[], &[]), "unmapped", |e| {
        matches!(e, EndpointError::Unmapped(1))
    });
    expect(ep.request(4, 1, &[], &[]), "bad index", |e| {
        matches!(e, EndpointError::BadIndex { index: 4, len: 4 })
    });
    ok(ep.map(0, me, 1), "map this endpoint itself");
    expect(ep.request(0, 0, &[], &[]), "handler 0", |e| {
        matches!(e, EndpointError::ReservedHandler)
    });
    expect(ep.request(0, 1, &[0; 9], &[]), "9 args", |e| {
        matches!(e, EndpointError::TooManyArgs { given: 9, max: 8 })
    });
    let big = vec![0u8; rt.max_medium() + 1];
    expect(ep.request(0, 1, &[], &big), "large payload", |e| {
        matches!(e, EndpointError::PayloadTooLarge { .. })
    });
    expect(ep.map(0, me, 1), "index in use", |e| {
        matches!(e, EndpointError::IndexInUse(0))
    });
    let far = EndpointName {
        rank: rt.size() as u32,
        ..me
    };
    expect(ep.map(1, far, 1), "rank out of range", |e| {
        matches!(e, EndpointError::RankOutOfRange { .. })
    });
    let other_job = EndpointName {
        job: me.job ^ 1,
        ..me
    };
    expect(ep.map(1, other_job, 1), "another job", |e| {
        matches!(e, EndpointError::WrongJob { .. })
    });
    let wrong_node = EndpointName {
        node: me.node + 1,
        ..me
    };
    expect(ep.map(1, wrong_node, 1), "wrong node", |e| {
        matches!(e, EndpointError::WrongNode { local: true, .. })
    });
    expect(ep.set_request_handler(0, |_, _| {}), "set handler 0", |e| {
        matches!(e, EndpointError::ReservedHandler)
    });
    if ep.map_any(me, 1).ok() != Some(1) {
        fail("map_any did not take index 1".into());
    }
    if "ep:nonsense".parse::<EndpointName>().is_ok() {
        fail("a bad name parsed".into());
    }
    rt.barrier();
    if rt.rank() == 0 {
        println!("endpoint errors: ok");
    }
}

/// Round trips from `ep` through `index` to a peer that replies, counted by `got`.
fn round_trips(ep: &Endpoint<'_>, index: usize, got: &AtomicU64, n: u64) {
    for i in 0..n {
        ok(ep.request(index, 1, &[i], b"ping"), "request");
        ep.wait_until(|| got.load(Ordering::Acquire) > i);
    }
}

fn local(rt: &Runtime, eps: &Endpoints<'_>, x: &Exchange) {
    let me = rt.rank();
    let mate = (0..rt.size()).find(|&r| r != me && rt.is_local(r));
    let far = (0..rt.size()).find(|&r| !rt.is_local(r));
    let (Some(mate), Some(far)) = (mate, far) else {
        fail("`local` needs a node of 2 ranks and another node".into())
    };
    let ep = eps.open(9);
    let got = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let (g, s) = (got.clone(), served.clone());
    ok(
        ep.set_request_handler(1, move |m, t| {
            let _ = t.reply(2, &[m.arg(0)], b"pong");
            s.fetch_add(1, Ordering::Release);
        }),
        "handler",
    );
    ok(
        ep.set_reply_handler(2, move |m| g.store(m.arg(0) + 1, Ordering::Release)),
        "handler",
    );
    ep.set_returned_handler(|r| fail(format!("returned: {:?}", r.reason())));
    // Rank 0 says which rank it will ping on another node (in the tag word).
    let all = x.all(rt, 4, ep.name(), far as u64);
    let target = all[0].1 as usize;
    let li = ok(ep.map_any(all[mate].0, 9), "map");
    let fi = ok(ep.map_any(all[far].0, 9), "map");
    if ok(ep.route(li), "route") != Route::SharedMemory
        || ok(ep.route(fi), "route") != Route::Network
    {
        fail("routes".into());
    }
    // Phase 1: every rank pings its node mate, and serves it.
    let n = 200;
    rt.barrier();
    let before = rt.stats().network;
    let off_network = |when: &str| {
        let now = rt.stats().network;
        if now.sent != before.sent || now.handled != before.handled {
            fail(format!(
                "round trips with a node mate touched the network ({when}): sent {} -> {}, \
                 handled {} -> {}",
                before.sent, now.sent, before.handled, now.handled
            ));
        }
        now
    };
    round_trips(&ep, li, &got, n);
    off_network("our requests done");
    ep.wait_until(|| served.load(Ordering::Acquire) == n);
    let after = off_network("the mate's requests served too");
    // Phase 2: rank 0 pings a rank of another node: the counters move.
    rt.barrier();
    got.store(0, Ordering::Release);
    if me == 0 {
        round_trips(&ep, fi, &got, n);
        let after2 = rt.stats().network;
        if after2.sent < after.sent + n || after2.handled < after.handled + n {
            fail(format!(
                "network round trips not counted: {after:?} -> {after2:?}"
            ));
        }
    } else if me == target {
        ep.wait_until(|| served.load(Ordering::Acquire) == 2 * n);
    }
    rt.barrier();
    if me == 0 {
        println!(
            "endpoint local: ok ({n} round trips with the node mate: 0 network messages; {n} with \
             rank {far}: counted)"
        );
    }
}

/// A "library": its own endpoints, with handler indices 1 and 2 like everyone's.
struct Library<'a> {
    ends: Vec<Endpoint<'a>>,
    dest: Vec<usize>,
    got: Arc<AtomicU64>,
    served: Arc<AtomicU64>,
}

fn library<'a>(
    rt: &Runtime,
    eps: &'a Endpoints<'a>,
    x: &Exchange,
    slot: u64,
    op: fn(u64) -> u64,
    faults: &Faults,
) -> Library<'a> {
    let right = (rt.rank() + 1) % rt.size();
    let got = Arc::new(AtomicU64::new(0));
    let served = Arc::new(AtomicU64::new(0));
    let mut ends = Vec::new();
    let mut dest = Vec::new();
    for k in 0..2u64 {
        let ep = eps.open(slot * 10 + k);
        let s = served.clone();
        ok(
            ep.set_request_handler(1, move |m, t| {
                s.fetch_add(1, Ordering::Relaxed);
                let _ = t.reply(2, &[m.arg(0), op(m.arg(0))], &[]);
            }),
            "handler",
        );
        let (g, f) = (got.clone(), faults.clone());
        ok(
            ep.set_reply_handler(2, move |m| {
                if m.arg(1) != op(m.arg(0)) {
                    f.note(format!(
                        "library {slot}: reply {:?} is another library's",
                        m.args()
                    ));
                }
                g.fetch_add(1, Ordering::Relaxed);
            }),
            "handler",
        );
        let f = faults.clone();
        ep.set_returned_handler(move |r| f.note(format!("returned {:?}", r.reason())));
        let (name, tag) = x.all(rt, slot * 10 + k, ep.name(), ep.tag())[right];
        dest.push(ok(ep.map_any(name, tag), "map"));
        ends.push(ep);
    }
    Library {
        ends,
        dest,
        got,
        served,
    }
}

fn libraries(rt: &Runtime, eps: &Endpoints<'_>, x: &Exchange) {
    let faults = Faults::default();
    let libs = [
        library(rt, eps, x, 20, |v| v + 1000, &faults),
        library(rt, eps, x, 30, |v| v * 3, &faults),
        library(rt, eps, x, 40, |v| v ^ 0xff, &faults),
    ];
    let per = 50u64;
    let poll_all = || {
        for l in &libs {
            for e in &l.ends {
                e.poll();
            }
        }
    };
    for i in 0..per {
        for l in &libs {
            for (e, &d) in l.ends.iter().zip(&l.dest) {
                ok(e.request(d, 1, &[i + 1], &[]), "request");
            }
        }
        poll_all();
    }
    let want = per * 2;
    rt.wait_until(|| {
        poll_all();
        libs.iter().all(|l| {
            l.got.load(Ordering::Relaxed) == want && l.served.load(Ordering::Relaxed) == want
        })
    });
    faults.check("libraries");
    rt.barrier();
    if rt.rank() == 0 {
        println!(
            "endpoint libraries: ok (3 libraries x 2 endpoints, handler indices 1 and 2 each)"
        );
    }
}

fn main() {
    let sections: Vec<String> = std::env::args().skip(1).collect();
    let mut b = Runtime::builder();
    let x = Exchange::register(&mut b);
    let setup = Endpoints::register(&mut b);
    let rt = b.build().unwrap_or_else(|e| fail(format!("starting: {e}")));
    let eps = setup.attach(&rt);
    for s in &sections {
        match s.as_str() {
            "pingpong" => pingpong(&rt, &eps, &x),
            "returned" => returned(&rt, &eps, &x),
            "errors" => errors(&rt, &eps),
            "local" => local(&rt, &eps, &x),
            "libraries" => libraries(&rt, &eps, &x),
            other => fail(format!("unknown section {other}")),
        }
    }
    let lost = eps.stats().lost;
    if lost != 0 {
        fail(format!("{lost} returned messages lost"));
    }
}
