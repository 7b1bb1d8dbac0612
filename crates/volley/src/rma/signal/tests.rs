//! Single-rank tests of signal structures on both paths (a rank signals itself: the direct
//! path delivers on its own mapped memory and invokes through the loopback ring, the AM path
//! delivers in a handler), one per subcommand and per refusal.

use super::*;
use crate::rma::{Rma, RmaPath};
use crate::Runtime;
use std::sync::{Arc, Mutex};

const PATHS: [RmaPath; 2] = [RmaPath::Direct, RmaPath::ActiveMessages];

/// What the programs saw: (program, requester, offset, data).
type Seen = Arc<Mutex<Vec<(&'static str, Option<usize>, usize, Vec<u8>)>>>;

struct Fixture {
    rt: Runtime,
    setup: RmaSetup,
    dsp: SignalHandler,
    holder: SignalHandler,
    other: SignalHandler,
    seen: Seen,
}

/// Programs: `dsp` records, `holder` records and holds the flag, `other` records; the ULS
/// records and approves data that does not start with `!`.
fn fixture(path: RmaPath) -> Fixture {
    let mut b = Runtime::builder();
    let setup = Rma::register_with(&mut b, Ok(path));
    let seen: Seen = Arc::default();
    let rec = |name: &'static str, seen: &Seen| {
        let seen = seen.clone();
        move |s: &Signal<'_>| {
            seen.lock()
                .unwrap()
                .push((name, s.requester(), s.offset(), s.data().to_vec()));
        }
    };
    let dsp = setup.register_signal(&mut b, "dsp", rec("dsp", &seen));
    let r = rec("holder", &seen);
    let holder = setup.register_signal(&mut b, "holder", move |s| {
        r(s);
        assert!(s.hold());
    });
    let other = setup.register_signal(&mut b, "other", rec("other", &seen));
    let r = rec("uls", &seen);
    setup.register_uls(move |s| {
        r(s);
        !s.data().starts_with(b"!")
    });
    Fixture {
        rt: b.build().unwrap(),
        setup,
        dsp,
        holder,
        other,
        seen,
    }
}

fn queue(invocation: Invocation, condition: Condition) -> SignalConfig {
    SignalConfig {
        invocation,
        storage: Storage::Queue {
            entry_size: 32,
            capacity: 4,
        },
        condition,
    }
}

fn take(seen: &Seen) -> Vec<(&'static str, Option<usize>, usize, Vec<u8>)> {
    std::mem::take(&mut *seen.lock().unwrap())
}

fn drain(rt: &Runtime) {
    while rt.poll() > 0 {}
}

fn reason<T: std::fmt::Debug>(r: Result<T>) -> Refusal {
    match r {
        Err(Error::Refused { reason, .. }) => reason,
        other => panic!("expected a refusal, got {other:?}"),
    }
}

#[test]
fn first_only_nonblk_runs_every_entry_once_in_order() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(4096, Perms::ALL).unwrap().on(0);
        let s = rma
            .signal_create(
                seg,
                0,
                queue(Invocation::Dsp(f.dsp), Condition::FirstOnlyNonblk),
            )
            .unwrap();
        let mut statuses = Vec::new();
        for i in 0..3u8 {
            statuses.push(rma.signal_to(s, &[i; 5]).unwrap());
        }
        drain(&f.rt);
        assert_eq!(statuses[0], SignalStatus::Invoked, "{path:?}");
        assert!(
            statuses
                .iter()
                .all(|s| matches!(s, SignalStatus::Invoked | SignalStatus::Stored)),
            "{path:?}: {statuses:?}"
        );
        let got = take(&f.seen);
        let want: Vec<_> = (0..3u8).map(|i| ("dsp", Some(0), 0, vec![i; 5])).collect();
        assert_eq!(got, want, "{path:?}");
        let c = rma.signal_counts(s).unwrap();
        let invoked = statuses
            .iter()
            .filter(|s| **s == SignalStatus::Invoked)
            .count();
        assert_eq!((c.stored, c.invoked), (3, invoked as u64), "{path:?}");
        assert_eq!(rma.refused(), 0);
    }
}

#[test]
fn a_held_flag_queues_until_the_program_drains_then_cancels_when_full() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(4096, Perms::ALL).unwrap().on(0);
        let s = rma
            .signal_create(
                seg,
                64,
                queue(Invocation::Dsp(f.holder), Condition::FirstOnlyNonblk),
            )
            .unwrap();
        assert_eq!(rma.signal_to(s, b"a").unwrap(), SignalStatus::Invoked);
        drain(&f.rt);
        assert_eq!(take(&f.seen).len(), 1, "{path:?}: the first ran and held");
        for d in [b"b", b"c", b"d", b"e"] {
            assert_eq!(
                rma.signal_to(s, d).unwrap(),
                SignalStatus::Stored,
                "{path:?}"
            );
        }
        // Four entries: the queue is full; a fifth is cancelled and changes nothing.
        let mut before = vec![0u8; s.footprint()];
        rma.read_local(seg, 64, &mut before).unwrap();
        assert_eq!(rma.signal_to(s, b"f").unwrap(), SignalStatus::Full);
        let mut after = vec![0u8; s.footprint()];
        rma.read_local(seg, 64, &mut after).unwrap();
        // Only the counters' line (192..256) may differ.
        assert_eq!(before[..192], after[..192], "{path:?}");
        assert_eq!(before[256..], after[256..], "{path:?}");
        drain(&f.rt);
        assert!(take(&f.seen).is_empty(), "{path:?}: held: nothing invoked");
        let mut buf = [0u8; 32];
        let mut got = Vec::new();
        while let Some(t) = rma.signal_next_or_clear(s, &mut buf).unwrap() {
            assert_eq!(t.requester, Some(0));
            got.push(buf[..t.len].to_vec());
        }
        assert_eq!(
            got,
            [b"b", b"c", b"d", b"e"].map(|d| d.to_vec()),
            "{path:?}"
        );
        assert_eq!(rma.signal_to(s, b"g").unwrap(), SignalStatus::Invoked);
        drain(&f.rt);
        assert_eq!(
            take(&f.seen)[0].3,
            b"g",
            "{path:?}: invoked again once cleared"
        );
        let c = rma.signal_counts(s).unwrap();
        assert_eq!((c.stored, c.invoked, c.full), (6, 2, 1), "{path:?}");
    }
}

/// Sends `data` to `s` and checks that it was cancelled with `want`, with the structure's
/// bytes unchanged outside its counters' line.
fn cancelled(rma: &Rma<'_>, seg: SegmentRef, at: usize, s: SignalRef, want: SignalStatus) {
    let what = format!("{:?} at {at}", rma.path());
    let mut before = vec![0u8; s.footprint()];
    rma.read_local(seg, at, &mut before).unwrap();
    assert_eq!(rma.signal_to(s, b"late").unwrap(), want, "{what}");
    let mut after = vec![0u8; s.footprint()];
    rma.read_local(seg, at, &mut after).unwrap();
    // Only the counters' line (192..256) may differ.
    assert_eq!(before[..192], after[..192], "{what}");
    assert_eq!(before[256..], after[256..], "{what}");
}

#[test]
fn a_full_structure_cancels_under_every_condition_and_loses_nothing_stored() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(32768, Perms::ALL).unwrap().on(0);
        // NONBLK conditions, and POLLING under any condition, queue up to the capacity (4), then cancel as Full.
        let nonblk = [
            (Invocation::Dsp(f.dsp), Condition::EveryTimeNonblk, 4),
            (Invocation::Dsp(f.holder), Condition::FirstOnlyNonblk, 1),
            (Invocation::Polling, Condition::EveryTimeNonblk, 0),
            (Invocation::Polling, Condition::FirstOnlyBlk, 0),
        ];
        for (i, (inv, cond, invoked)) in nonblk.into_iter().enumerate() {
            let at = i * 4096;
            let s = rma.signal_create(seg, at, queue(inv, cond)).unwrap();
            let mut sent = Vec::new();
            for d in 0..4u8 {
                let st = rma.signal_to(s, &[d]).unwrap();
                assert!(
                    matches!(st, SignalStatus::Invoked | SignalStatus::Stored),
                    "{path:?} {cond:?}: {st:?}"
                );
                sent.push(vec![d]);
                if inv == Invocation::Dsp(f.holder) && d == 0 {
                    // The first run takes its entry and keeps the flag.
                    drain(&f.rt);
                }
            }
            if inv == Invocation::Dsp(f.holder) {
                rma.signal_to(s, &[4]).unwrap();
                sent.push(vec![4]);
            }
            if cond == Condition::EveryTimeNonblk
                && inv == Invocation::Dsp(f.dsp)
                && path == RmaPath::ActiveMessages
            {
                // The AM path's handler stores and runs the program in one call, which takes
                // the entry: its queue never holds more than the running entry.
                assert_eq!(rma.signal_to(s, &[4]).unwrap(), SignalStatus::Invoked);
                drain(&f.rt);
                let got: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
                assert_eq!(got, (0..5u8).map(|d| vec![d]).collect::<Vec<_>>());
                continue;
            }
            cancelled(&rma, seg, at, s, SignalStatus::Full);
            drain(&f.rt);
            let mut got: Vec<Vec<u8>> = take(&f.seen).into_iter().map(|x| x.3).collect();
            let mut buf = [0u8; 32];
            while let Some(t) = rma.signal_next_or_clear(s, &mut buf).unwrap() {
                got.push(buf[..t.len].to_vec());
            }
            assert_eq!(
                got, sent,
                "{path:?} {inv:?} {cond:?}: every stored signal once"
            );
            let c = rma.signal_counts(s).unwrap();
            assert_eq!(
                (c.stored, c.full, c.invoked),
                (sent.len() as u64, 1, invoked),
                "{path:?} {inv:?} {cond:?}"
            );
        }
        // BLK conditions never queue behind a running program: the signal that finds the
        // flag up is cancelled as Busy, so their queue cannot overflow.
        for (i, cond) in [Condition::EveryTimeBlk, Condition::FirstOnlyBlk]
            .into_iter()
            .enumerate()
        {
            let at = (4 + i) * 4096;
            let s = rma
                .signal_create(seg, at, queue(Invocation::Dsp(f.dsp), cond))
                .unwrap();
            assert_eq!(rma.signal_to(s, b"1").unwrap(), SignalStatus::Invoked);
            if cond == Condition::EveryTimeBlk && path == RmaPath::ActiveMessages {
                // The program ran and lowered the flag inside the handler's call.
                drain(&f.rt);
                assert_eq!(rma.signal_to(s, b"2").unwrap(), SignalStatus::Invoked);
                drain(&f.rt);
                let got: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
                assert_eq!(got, [b"1".to_vec(), b"2".to_vec()]);
                continue;
            }
            cancelled(&rma, seg, at, s, SignalStatus::Busy);
            drain(&f.rt);
            let got: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
            assert_eq!(got, [b"1".to_vec()], "{path:?} {cond:?}");
            let c = rma.signal_counts(s).unwrap();
            assert_eq!((c.stored, c.busy, c.full), (1, 1, 0), "{path:?} {cond:?}");
        }
        assert_eq!(rma.refused(), 0, "{path:?}: cancellations are not refusals");
    }
}

#[test]
fn blocking_conditions_cancel_while_the_flag_is_up() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(8192, Perms::ALL).unwrap().on(0);
        let first = rma
            .signal_create(
                seg,
                0,
                queue(Invocation::Dsp(f.dsp), Condition::FirstOnlyBlk),
            )
            .unwrap();
        assert_eq!(rma.signal_to(first, b"1").unwrap(), SignalStatus::Invoked);
        assert_eq!(rma.signal_to(first, b"2").unwrap(), SignalStatus::Busy);
        drain(&f.rt);
        assert_eq!(rma.signal_to(first, b"3").unwrap(), SignalStatus::Busy);
        assert_eq!(rma.signal_next_or_clear(first, &mut [0; 32]).unwrap(), None);
        assert_eq!(rma.signal_to(first, b"4").unwrap(), SignalStatus::Invoked);
        drain(&f.rt);
        let data: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
        assert_eq!(data, [b"1".to_vec(), b"4".to_vec()], "{path:?}");
        let c = rma.signal_counts(first).unwrap();
        assert_eq!((c.invoked, c.busy, c.stored), (2, 2, 2), "{path:?}");

        let every = rma
            .signal_create(
                seg,
                4096,
                queue(Invocation::Dsp(f.dsp), Condition::EveryTimeBlk),
            )
            .unwrap();
        let mut invoked = 0;
        for i in 0..6u8 {
            match rma.signal_to(every, &[i]).unwrap() {
                SignalStatus::Invoked => invoked += 1,
                SignalStatus::Busy => {}
                other => panic!("{path:?}: {other:?}"),
            }
            if i % 2 == 1 {
                drain(&f.rt);
            }
        }
        drain(&f.rt);
        assert_eq!(take(&f.seen).len(), invoked, "{path:?}");
        let c = rma.signal_counts(every).unwrap();
        assert_eq!(c.invoked + c.busy, 6, "{path:?}");
        assert_eq!(c.invoked, invoked as u64, "{path:?}");
    }
}

#[test]
fn every_time_nonblk_invokes_for_each_signal() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(4096, Perms::ALL).unwrap().on(0);
        let s = rma
            .signal_create(
                seg,
                0,
                queue(Invocation::Dsp(f.dsp), Condition::EveryTimeNonblk),
            )
            .unwrap();
        for i in 0..3u8 {
            assert_eq!(rma.signal_to(s, &[i]).unwrap(), SignalStatus::Invoked);
        }
        drain(&f.rt);
        let data: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
        assert_eq!(data, [[0u8], [1], [2]].map(|d| d.to_vec()), "{path:?}");
    }
}

#[test]
fn invocation_types() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(16384, Perms::ALL).unwrap().on(0);
        let nb = Condition::EveryTimeNonblk;
        let mut at = 0;
        let mut make = |inv, storage| {
            let s = rma
                .signal_create(
                    seg,
                    at,
                    SignalConfig {
                        invocation: inv,
                        storage,
                        condition: nb,
                    },
                )
                .unwrap();
            at += s.footprint().next_multiple_of(64);
            s
        };
        let q = Storage::Queue {
            entry_size: 16,
            capacity: 4,
        };
        let none = make(Invocation::None, q);
        let polling = make(Invocation::Polling, q);
        let uls = make(Invocation::Uls, q);
        let by_uls = make(Invocation::DspByUls(f.dsp), q);
        let ssp = make(Invocation::Ssp, q);
        let window = Storage::MemoryOffset {
            base: 12288,
            len: 1024,
        };
        let memw_ssp = make(Invocation::MemwSsp, window);

        assert_eq!(rma.signal_to(none, b"x").unwrap(), SignalStatus::Disabled);
        assert_eq!(rma.signal_counts(none).unwrap().disabled, 1);

        assert_eq!(rma.signal_to(polling, b"p1").unwrap(), SignalStatus::Stored);
        assert_eq!(rma.signal_to(polling, b"p2").unwrap(), SignalStatus::Stored);
        drain(&f.rt);
        assert!(
            take(&f.seen).is_empty(),
            "{path:?}: polling invokes nothing"
        );
        let mut buf = [0u8; 16];
        let t = rma
            .signal_next_or_clear(polling, &mut buf)
            .unwrap()
            .unwrap();
        assert_eq!((t.requester, &buf[..t.len]), (Some(0), &b"p1"[..]));
        rma.signal_next_or_clear(polling, &mut buf)
            .unwrap()
            .unwrap();
        assert_eq!(rma.signal_next_or_clear(polling, &mut buf).unwrap(), None);

        rma.signal_to(uls, b"u").unwrap();
        rma.signal_to(by_uls, b"ok").unwrap();
        rma.signal_to(by_uls, b"!no").unwrap();
        drain(&f.rt);
        let names: Vec<_> = take(&f.seen).into_iter().map(|x| (x.0, x.3)).collect();
        assert_eq!(
            names,
            [
                ("uls", b"u".to_vec()),
                ("uls", b"ok".to_vec()),
                ("dsp", b"ok".to_vec()),
                ("uls", b"!no".to_vec())
            ],
            "{path:?}: the ULS decides for DSP_BY_ULS"
        );

        rma.signal_to_at(ssp, 0, b"s", Some(f.other)).unwrap();
        rma.signal_to_at(memw_ssp, 100, b"window", Some(f.dsp))
            .unwrap();
        drain(&f.rt);
        assert_eq!(
            take(&f.seen),
            [
                ("other", Some(0), 0, b"s".to_vec()),
                ("dsp", None, 100, b"window".to_vec())
            ],
            "{path:?}: SSP runs the sender's program; MEMW_SSP records no requester"
        );
        let mut w = [0u8; 6];
        rma.read_local(seg, 12288 + 100, &mut w).unwrap();
        assert_eq!(&w, b"window");
        assert_eq!(rma.refused(), 0, "{path:?}");
    }
}

#[test]
fn storage_types() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(8192, Perms::ALL).unwrap().on(0);
        let mk = |at, storage| {
            rma.signal_create(
                seg,
                at,
                SignalConfig {
                    invocation: Invocation::Dsp(f.dsp),
                    storage,
                    condition: Condition::EveryTimeNonblk,
                },
            )
            .unwrap()
        };
        let nonw = mk(0, Storage::None);
        let memw = mk(1024, Storage::Memory { size: 64 });
        let off = mk(
            2048,
            Storage::MemoryOffset {
                base: 4096,
                len: 256,
            },
        );
        rma.signal_to(nonw, b"ignored").unwrap();
        drain(&f.rt);
        assert_eq!(take(&f.seen), [("dsp", Some(0), 0, vec![])], "{path:?}");
        rma.signal_to(memw, b"one").unwrap();
        drain(&f.rt);
        rma.signal_to(memw, b"two!").unwrap();
        drain(&f.rt);
        let data: Vec<_> = take(&f.seen).into_iter().map(|x| x.3).collect();
        assert_eq!(data, [b"one".to_vec(), b"two!".to_vec()], "{path:?}");
        rma.signal_to_at(off, 200, b"at 200", None).unwrap();
        drain(&f.rt);
        assert_eq!(
            take(&f.seen),
            [("dsp", Some(0), 200, b"at 200".to_vec())],
            "{path:?}"
        );
        let mut w = [0u8; 6];
        rma.read_local(seg, 4096 + 200, &mut w).unwrap();
        assert_eq!(&w, b"at 200");
    }
}

#[test]
fn bad_signals_are_refused_and_counted_memory_unchanged() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(8192, Perms::ALL).unwrap().on(0);
        let q = rma
            .signal_create(
                seg,
                0,
                queue(Invocation::Dsp(f.dsp), Condition::FirstOnlyNonblk),
            )
            .unwrap();
        let ssp = rma
            .signal_create(
                seg,
                1024,
                queue(Invocation::Ssp, Condition::EveryTimeNonblk),
            )
            .unwrap();
        let off = rma
            .signal_create(
                seg,
                2048,
                SignalConfig {
                    invocation: Invocation::Dsp(f.dsp),
                    storage: Storage::MemoryOffset {
                        base: 4096,
                        len: 100,
                    },
                    condition: Condition::EveryTimeNonblk,
                },
            )
            .unwrap();
        let mut before = vec![0u8; 8192];
        rma.read_local(seg, 0, &mut before).unwrap();
        let cases: Vec<(Result<SignalStatus>, Refusal)> = vec![
            (rma.signal_to(q.with_offset(8), b"x"), Refusal::NotASignal),
            (rma.signal_to(q, &[0; 33]), Refusal::EntrySize),
            (rma.signal_to(ssp, b"x"), Refusal::UnknownSignal),
            (
                rma.signal_to_at(off, 99, b"xy", None),
                Refusal::OutOfBounds {
                    offset: 99,
                    len: 2,
                    segment_len: 100,
                },
            ),
            (
                rma.signal_to_at(off, u64::MAX as usize, b"x", None),
                Refusal::OutOfBounds {
                    offset: u64::MAX,
                    len: 1,
                    segment_len: 100,
                },
            ),
        ];
        for (i, (r, want)) in cases.into_iter().enumerate() {
            assert_eq!(reason(r), want, "{path:?}: case {i}");
        }
        assert_eq!(rma.refused(), 5, "{path:?}");
        drain(&f.rt);
        let mut after = vec![0u8; 8192];
        rma.read_local(seg, 0, &mut after).unwrap();
        assert!(before == after, "{path:?}: a refused signal changed memory");
        assert!(take(&f.seen).is_empty());
        // A program that is not registered: refused at the sender (every rank has the same
        // table), counted at the target.
        let forged = SignalHandler {
            am: f.dsp.am,
            program: 99,
        };
        assert_eq!(
            reason(rma.signal_to_at(ssp, 0, b"x", Some(forged))),
            Refusal::UnknownSignal
        );
        assert_eq!(rma.refused(), 6, "{path:?}");
    }
}

#[test]
fn non_blocking_signals_report_as_asked_and_count_emb_colours() {
    for path in PATHS {
        let f = fixture(path);
        let rma = f.setup.attach(&f.rt);
        let seg = rma.alloc_symmetric(8192, Perms::ALL).unwrap().on(0);
        let polling = rma
            .signal_create(
                seg,
                0,
                SignalConfig {
                    invocation: Invocation::Polling,
                    storage: Storage::Queue {
                        entry_size: 8,
                        capacity: 2,
                    },
                    condition: Condition::EveryTimeNonblk,
                },
            )
            .unwrap();
        let dsp = rma
            .signal_create(
                seg,
                4096,
                queue(Invocation::Dsp(f.dsp), Condition::EveryTimeNonblk),
            )
            .unwrap();
        let failures = SignalOptions {
            status: StatusReply::OnlyFailures,
            colour: Some(1),
        };
        for d in [b"1", b"2", b"3"] {
            rma.signal_to_nbi(polling, 0, d, None, failures).unwrap();
        }
        rma.signal_to_nbi(polling.with_offset(8), 0, b"x", None, failures)
            .unwrap();
        rma.emb_wait(1).unwrap();
        assert_eq!(rma.emb_counters(1).unwrap(), (4, 4), "{path:?}");
        assert_eq!(
            rma.take_signal_reports(),
            [
                SignalReport {
                    rank: 0,
                    outcome: Ok(SignalStatus::Full)
                },
                SignalReport {
                    rank: 0,
                    outcome: Err(Refusal::NotASignal)
                }
            ],
            "{path:?}: only the failures"
        );
        assert_eq!(rma.refused(), 1, "{path:?}");
        let always = SignalOptions {
            status: StatusReply::Always,
            colour: None,
        };
        rma.signal_to_nbi(dsp, 0, b"a", None, always).unwrap();
        rma.signal_to_nbi(dsp, 0, b"b", None, SignalOptions::default())
            .unwrap();
        drain(&f.rt);
        f.rt.wait_until(|| f.seen.lock().unwrap().len() == 2);
        assert_eq!(
            rma.take_signal_reports(),
            [SignalReport {
                rank: 0,
                outcome: Ok(SignalStatus::Invoked)
            }],
            "{path:?}: a report for the signal that asked, none for the one that did not"
        );
        assert_eq!(rma.emb_counters(0).unwrap(), (0, 0));
        // A colour out of range is refused, not folded onto another colour.
        assert!(matches!(
            rma.emb_counters(16),
            Err(Error::InvalidConfig { .. })
        ));
        assert!(rma.emb_wait(255).is_err());
        assert!(matches!(
            rma.signal_to_nbi(
                dsp,
                0,
                b"x",
                None,
                SignalOptions {
                    status: StatusReply::None,
                    colour: Some(16)
                }
            ),
            Err(Error::InvalidConfig { .. })
        ));
    }
}
