//! Seed 002's FIFOe_NORMAL across processes: `rma_fifoe [entries]`.
//!
//! 1. **States** (rank 0, on its own FIFO, through the job's path): a FIFO of 4 takes 4 NORMAL
//!    entries; the 5th is returned with the FIFO entering the stopped state, the 6th returned
//!    as already stopped; after a dequeue (room again) a NORMAL entry is still returned; a
//!    plain enqueue ignores the stop; `fifo_restart` reports it was stopped and NORMAL entries
//!    go in again; a [`FifoSender`] holds a returned entry and sends a later one only after it;
//!    bad entry sizes and a wrong key are refused.
//! 2. **Bursts.** Every other rank sends `entries` entries (sender, sequence number) with a
//!    [`FifoSender`] as fast as it can, sending returned entries again first. Rank 0 does not
//!    dequeue until the FIFO has stopped once (so the stop is certain), then dequeues one entry
//!    per turn and restarts the FIFO whenever it is empty and stopped. Every sender's entries
//!    must arrive exactly once and in send order, and every sender ends holding nothing.

use volley::rma::{Error, FifoRef, FifoSender, NormalStatus, Perms, Rma};
use volley::Runtime;
use volley_tests::{arg_u64, fail, join, path_name};

const CAPACITY: usize = 4;
const ENTRY: usize = 16;
const MAILBOX_AT: usize = 4096;

fn entry(sender: usize, seq: u64) -> [u8; ENTRY] {
    let mut e = [0u8; ENTRY];
    e[..8].copy_from_slice(&(sender as u64).to_le_bytes());
    e[8..].copy_from_slice(&seq.to_le_bytes());
    e
}

fn main() {
    let entries = arg_u64(0, 1000);
    let mut b = Runtime::builder();
    let setup = Rma::register(&mut b);
    let rt = join(b);
    let rma = setup.attach(&rt);
    let (rank, size) = (rt.rank(), rt.size());
    let path = path_name(rma.path());
    let die = |msg: String| -> ! { fail(rank, 1, &format!("path {path}: {msg}")) };
    if size < 2 {
        fail(rank, 2, "needs at least 2 ranks");
    }
    let seg = rma
        .alloc_symmetric(8192, Perms::ALL)
        .unwrap_or_else(|e| fail(rank, 2, &format!("alloc_symmetric: {e}")));
    let mine = seg.on(rank);
    let mut buf = [0u8; ENTRY];

    // ---- 1. States ----------------------------------------------------------------------------
    if rank == 0 {
        let fifo = rma
            .fifo_create(mine, 0, ENTRY, CAPACITY)
            .unwrap_or_else(|e| die(format!("fifo_create: {e}")));
        let normal = |seq: u64| {
            rma.fifo_enqueue_normal(fifo, &entry(0, seq))
                .unwrap_or_else(|e| die(format!("enqueue_normal: {e}")))
        };
        for i in 0..CAPACITY as u64 {
            if normal(i) != NormalStatus::Stored {
                die(format!(
                    "entry {i} of an empty FIFO of {CAPACITY} not stored"
                ));
            }
        }
        let returned = |seq, stop| NormalStatus::Returned {
            entry: entry(0, seq).to_vec(),
            entered_stop: stop,
        };
        if normal(100) != returned(100, true) {
            die("a full FIFO did not stop and return the entry (status 2)".into());
        }
        if normal(101) != returned(101, false) || !rma.fifo_stopped(fifo).unwrap() {
            die("a stopped FIFO did not return the entry as already stopped (status 3)".into());
        }
        rma.fifo_dequeue(fifo, &mut buf).unwrap();
        if normal(102) != returned(102, false) {
            die("a stopped FIFO with room took a NORMAL entry".into());
        }
        if rma.fifo_enqueue(fifo, &entry(0, CAPACITY as u64)).unwrap()
            != volley::rma::FifoStatus::Stored
        {
            die("a plain enqueue into room did not ignore the stop".into());
        }
        if !rma.fifo_restart(fifo).unwrap() || rma.fifo_restart(fifo).unwrap() {
            die("fifo_restart did not report the stop once".into());
        }
        rma.fifo_dequeue(fifo, &mut buf).unwrap();
        if normal(CAPACITY as u64 + 1) != NormalStatus::Stored {
            die("a restarted FIFO with room refused a NORMAL entry".into());
        }
        for i in 2..=CAPACITY as u64 + 1 {
            if !rma.fifo_dequeue(fifo, &mut buf).unwrap() || buf != entry(0, i) {
                die(format!("after the restart, entry {i} is not next"));
            }
        }
        if rma.fifo_dequeue(fifo, &mut buf).unwrap() {
            die("a returned entry was stored".into());
        }
        // The sender's side: an entry sent after a restart waits behind the one returned
        // before it.
        let mut tx = FifoSender::new(fifo);
        for i in 0..CAPACITY as u64 {
            if !tx.send(&rma, &entry(0, 10 + i)).unwrap() {
                die(format!("FifoSender: entry {i} of an empty FIFO held"));
            }
        }
        if tx.send(&rma, &entry(0, 20)).unwrap() || tx.held() != 1 || tx.stops() != 1 {
            die("FifoSender: the entry a full FIFO returned is not held".into());
        }
        while rma.fifo_dequeue(fifo, &mut buf).unwrap() {}
        rma.fifo_restart(fifo).unwrap();
        if tx.send(&rma, &entry(0, 21)).unwrap() || tx.held() != 2 {
            die("FifoSender: a new entry overtook a held one".into());
        }
        if tx.resend(&rma).unwrap() != 2 || tx.held() != 0 || tx.stored() != 6 {
            die("FifoSender: resend did not store the held entries".into());
        }
        for want in [20, 21] {
            if !rma.fifo_dequeue(fifo, &mut buf).unwrap() || buf != entry(0, want) {
                die(format!("FifoSender: entry {want} not next"));
            }
        }
        match rma.fifo_enqueue_normal(fifo, &[0u8; 3]) {
            Err(Error::Refused { .. }) => {}
            other => die(format!("a bad entry size: {other:?}")),
        }
        match rma.fifo_enqueue_normal(fifo.with_key(12345), &entry(0, 0)) {
            Err(Error::Refused { .. }) => {}
            other => die(format!("a wrong key: {other:?}")),
        }
        // The handle for the bursts, in every rank's mailbox.
        let words: Vec<u8> = fifo
            .to_words()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect();
        for r in 0..size {
            rma.put(seg.on(r), MAILBOX_AT, &words).unwrap();
        }
    }
    rt.barrier();
    let mut words = [0u8; 40];
    rma.read_local(mine, MAILBOX_AT, &mut words).unwrap();
    let fifo = FifoRef::from_words(std::array::from_fn(|i| {
        u64::from_le_bytes(words[i * 8..i * 8 + 8].try_into().unwrap())
    }));

    // ---- 2. Bursts ----------------------------------------------------------------------------
    if rank == 0 {
        let total = entries * (size as u64 - 1);
        let mut next = vec![0u64; size];
        let (mut got, mut restarts, mut stopped_once) = (0u64, 0u64, false);
        while got < total {
            rt.poll();
            if !stopped_once {
                stopped_once = rma.fifo_stopped(fifo).unwrap();
                continue;
            }
            if rma.fifo_dequeue(fifo, &mut buf).unwrap() {
                let s = u64::from_le_bytes(buf[..8].try_into().unwrap()) as usize;
                let q = u64::from_le_bytes(buf[8..].try_into().unwrap());
                if s == 0 || s >= size || q != next[s] {
                    die(format!(
                        "entry {q} of sender {s} arrived when {} was due",
                        next.get(s).copied().unwrap_or(0)
                    ));
                }
                next[s] += 1;
                got += 1;
            } else if rma.fifo_restart(fifo).unwrap() {
                restarts += 1;
            }
        }
        if rma.fifo_dequeue(fifo, &mut buf).unwrap() {
            die("an entry beyond the senders' was stored".into());
        }
        rt.barrier();
        println!(
            "path={path}: {} senders x {entries} NORMAL entries into a FIFO of {CAPACITY}: \
             exactly once, in each sender's order, {}",
            size - 1,
            if restarts > 0 {
                "across stops and restarts"
            } else {
                "across one stop"
            }
        );
    } else {
        let mut tx = FifoSender::new(fifo);
        let mut seq = 0u64;
        while seq < entries || tx.held() > 0 {
            tx.resend(&rma)
                .unwrap_or_else(|e| die(format!("resend: {e}")));
            if seq < entries {
                tx.send(&rma, &entry(rank, seq))
                    .unwrap_or_else(|e| die(format!("send: {e}")));
                seq += 1;
            } else {
                rt.poll();
                std::thread::yield_now();
            }
        }
        if tx.stored() != entries {
            die(format!("stored {} of {entries}", tx.stored()));
        }
        rt.barrier();
    }
}
