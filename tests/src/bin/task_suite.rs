//! The task layer (`volley-task`): `task_suite migrate [ADDS]` or `task_suite contact`, on 3
//! ranks or more.
//!
//! `migrate`: rank 0 makes task 5 (a counter) and task 6 (a pattern). Every rank but 0 and 1
//! adds 1 to task 5's counter ADDS times (`fetch_add`, by logical id) while ranks 0 and 1 move
//! task 5 between them four times, adding between moves. Every old value returned is kept;
//! rank 0 gathers them and checks they are exactly 0..total, each once: an add applied at an
//! old location after its copy, or lost, or applied twice, would break that. Task 6 is
//! located by every rank, then moved 0 -> 1 while no one touches it; each other rank's next
//! put to it is refused at the old location and retried at the new one (its retry count goes
//! up by exactly 1), and the pattern and every put are found at rank 1. Bad input: an
//! unknown task (an error, counted at its home), a segment index the task lacks, a move asked
//! of a third rank, a put past a segment's end (refused, not retried).
//!
//! `contact`: rank 0's first-contact queue holds 4. Rank 1 queues 3, rank 2 queues 1 and finds
//! the queue full; rank 0 refuses rank 1 (its 3 dropped), whose next message is refused while
//! rank 2's is queued; rank 0 reads rank 2's two, in order, with the issuer recorded; it
//! admits rank 1 again, whose next message is queued. The counts are checked, as are errors
//! for a rank outside the job and a message over the medium maximum.

use volley::rma::{Error as RmaError, Perms, Refusal, Rma};
use volley_task::{ContactCounts, ContactStatus, TaskError, Tasks};
use volley_tests::{
    arg_str, arg_u64, check_exactly_0_to, fail, fill_pattern, join, path_name, Gather,
};

const COUNTER: u64 = 5;
const PATTERN: u64 = 6;
const PATTERN_LEN: usize = 3000;
const MOVES: usize = 4;

fn main() {
    let mode = arg_str(0).unwrap_or_else(|| "migrate".into());
    let mut b = volley::Runtime::builder();
    let rma = Rma::register(&mut b);
    let tasks = Tasks::register_with_capacity(&mut b, 4);
    let gather = Gather::register(&mut b, "test.task.gather");
    let rt = join(b);
    let rma = rma.attach(&rt);
    let tasks = tasks.attach(&rt, &rma);
    if rt.size() < 3 {
        fail(rt.rank(), 2, "task_suite needs 3 ranks or more");
    }
    match mode.as_str() {
        "migrate" => migrate(&rt, &rma, &tasks, &gather),
        "contact" => contact(&rt, &rma, &tasks),
        other => fail(rt.rank(), 2, &format!("unknown mode {other:?}")),
    }
    rt.finalize();
}

fn migrate(rt: &volley::Runtime, rma: &Rma<'_>, tasks: &Tasks<'_, '_>, gather: &Gather) {
    let (me, size) = (rt.rank(), rt.size());
    let die = |msg: String| -> ! { fail(me, 1, &msg) };
    let adds = arg_u64(1, 300);
    let mut pattern = vec![0u8; PATTERN_LEN];
    fill_pattern(66, &mut pattern);
    if me == 0 {
        tasks
            .create(COUNTER, &[(4096, Perms::ALL)])
            .unwrap_or_else(|e| die(format!("create: {e}")));
        tasks
            .create(PATTERN, &[(64, Perms::READ), (PATTERN_LEN, Perms::ALL)])
            .unwrap_or_else(|e| die(format!("create: {e}")));
        tasks.put(PATTERN, 1, 0, &pattern).unwrap();
        if !matches!(
            tasks.create(COUNTER, &[(8, Perms::ALL)]),
            Err(TaskError::Exists { task: COUNTER })
        ) {
            die("a second task 5 was made".into());
        }
    }
    rt.barrier();
    tasks
        .locate(PATTERN)
        .unwrap_or_else(|e| die(format!("locate: {e}")));

    // Bad input.
    if me == size - 1 {
        match tasks.put(999, 0, 0, &[1]) {
            Err(TaskError::UnknownTask { task: 999 }) => {}
            other => die(format!("unknown task: {other:?}")),
        }
        match tasks.put(PATTERN, 2, 0, &[1]) {
            Err(TaskError::NoSuchSegment {
                index: 2, count: 2, ..
            }) => {}
            other => die(format!("segment index 2: {other:?}")),
        }
        match tasks.put(PATTERN, 1, PATTERN_LEN - 1, &[1, 2]) {
            Err(TaskError::Rma(RmaError::Refused {
                reason: Refusal::OutOfBounds { .. },
                ..
            })) => {}
            other => die(format!("put past the end: {other:?}")),
        }
        match tasks.migrate(COUNTER, 1) {
            Err(TaskError::BadMigration { .. }) => {}
            other => die(format!("a third rank's migrate: {other:?}")),
        }
        if tasks.stats().retried != 0 {
            die("a refusal that is not a move was retried".into());
        }
    }
    rt.barrier();
    if me == 999 % size && tasks.unknown_lookups() != 1 {
        die(format!(
            "{} unknown lookups counted at the home",
            tasks.unknown_lookups()
        ));
    }

    // Adds while task 5 moves between ranks 0 and 1.
    let mut got = Vec::new();
    let add = |got: &mut Vec<u64>| {
        let v = tasks
            .fetch_add(COUNTER, 0, 0, 1)
            .unwrap_or_else(|e| die(format!("fetch_add: {e}")));
        got.push(v);
    };
    let mut total = adds * (size as u64 - 2);
    if me >= 2 {
        for _ in 0..adds {
            add(&mut got);
        }
    } else {
        for m in 0..MOVES {
            let to = (m + 1) % 2;
            tasks
                .migrate(COUNTER, to)
                .unwrap_or_else(|e| die(format!("migrate {m}: {e}")));
            for _ in 0..10 {
                add(&mut got);
            }
        }
    }
    total += 2 * 10 * MOVES as u64;
    gather.send(rt, 0, &got);
    let retried_adds = tasks.stats().retried;
    rt.barrier();
    let mut counter = [0u8; 8];
    tasks.get(COUNTER, 0, 0, &mut counter).unwrap();
    if u64::from_le_bytes(counter) != total {
        die(format!(
            "counter {} after {total} adds",
            u64::from_le_bytes(counter)
        ));
    }
    if me == 0 {
        let values = gather.collect(rt, adds.min(10 * MOVES as u64) as usize);
        for (r, v) in values.iter().enumerate() {
            let want = if r >= 2 { adds } else { 10 * MOVES as u64 };
            if v.len() as u64 != want {
                die(format!("rank {r} sent {} values", v.len()));
            }
        }
        check_exactly_0_to(&values, total).unwrap_or_else(|e| die(e));
    }

    // Task 6 moves while every rank's location for it is stale.
    if me < 2 {
        tasks
            .migrate(PATTERN, 1)
            .unwrap_or_else(|e| die(format!("migrate task 6: {e}")));
    }
    rt.barrier();
    if me >= 2 {
        let before = tasks.stats().retried;
        tasks
            .put(PATTERN, 1, me * 8, &[me as u8; 8])
            .unwrap_or_else(|e| die(format!("put after the move: {e}")));
        if tasks.stats().retried != before + 1 {
            die(format!(
                "the put after the move was retried {} times, not once",
                tasks.stats().retried - before
            ));
        }
    }
    rt.barrier();
    if me == 1 {
        let segs = tasks
            .segments(PATTERN)
            .unwrap_or_else(|e| die(e.to_string()));
        let mut now = vec![0u8; PATTERN_LEN];
        rma.read_local(segs[1], 0, &mut now).unwrap();
        let mut want = pattern.clone();
        for r in 2..size {
            want[r * 8..r * 8 + 8].fill(r as u8);
        }
        if now != want {
            die("task 6's bytes at its new owner differ".into());
        }
        let w = tasks.work(PATTERN).unwrap();
        if w.frames < (size as u64 - 2) {
            die(format!("task 6's work at its new owner: {w:?}"));
        }
    }
    rt.barrier();
    let reclaimed = tasks.reclaim();
    if me == 0 {
        println!(
            "path={}: tasks: {total} adds exactly once across {MOVES} moves, stale puts retried \
             once each, bad input refused (rank 0 retried {retried_adds}, reclaimed {reclaimed})",
            path_name(rma.path())
        );
    }
}

fn contact(rt: &volley::Runtime, rma: &Rma<'_>, tasks: &Tasks<'_, '_>) {
    let (me, size) = (rt.rank(), rt.size());
    let die = |msg: String| -> ! { fail(me, 1, &msg) };
    let send = |data: &[u8], want: ContactStatus| {
        let got = tasks
            .contact(0, data)
            .unwrap_or_else(|e| die(format!("contact: {e}")));
        if got != want {
            die(format!("contact {data:?}: {got:?}, expected {want:?}"));
        }
    };
    if me == 1 {
        for i in 0..3u8 {
            send(&[1, i], ContactStatus::Queued);
        }
        if !matches!(
            tasks.contact(size, b"x"),
            Err(TaskError::InvalidRank { .. })
        ) {
            die("a contact to a rank outside the job".into());
        }
        let big = vec![0u8; rt.max_medium() + 1];
        if !matches!(tasks.contact(0, &big), Err(TaskError::TooLarge { .. })) {
            die("an oversized contact".into());
        }
    }
    rt.barrier();
    if me == 2 {
        send(&[2, 0], ContactStatus::Queued);
        send(&[2, 1], ContactStatus::Full);
    }
    rt.barrier();
    if me == 0 {
        let dropped = tasks.contact_refuse(1).unwrap();
        if dropped != 3 {
            die(format!("refusing rank 1 dropped {dropped}"));
        }
        if tasks.contact_refuse(size).is_ok() {
            die("refused a rank outside the job".into());
        }
    }
    rt.barrier();
    if me == 1 {
        send(&[1, 9], ContactStatus::Refused);
    }
    if me == 2 {
        send(&[2, 2], ContactStatus::Queued);
    }
    rt.barrier();
    if me == 0 {
        for want in [[2u8, 0], [2, 2]] {
            match tasks.contact_poll() {
                Some(c) if c.issuer == 2 && c.data == want => {}
                other => die(format!("polled {other:?}, expected {want:?} from rank 2")),
            }
        }
        if let Some(c) = tasks.contact_poll() {
            die(format!("an extra message: {c:?}"));
        }
        tasks.contact_admit(1).unwrap();
    }
    rt.barrier();
    if me == 1 {
        send(&[1, 10], ContactStatus::Queued);
    }
    rt.barrier();
    if me == 0 {
        match tasks.contact_poll() {
            Some(c) if c.issuer == 1 && c.data == [1, 10] => {}
            other => die(format!("polled {other:?} after the admit")),
        }
        let counts = tasks.contact_counts();
        let want = ContactCounts {
            queued: 6,
            full: 1,
            refused: 1,
            cancelled: 3,
        };
        if counts != want {
            die(format!("counts {counts:?}, expected {want:?}"));
        }
        println!(
            "path={}: contact: queued, full, refused, cancelled and admitted as asked, issuers \
             recorded, counts {counts:?}",
            path_name(rma.path())
        );
    }
}
