use super::*;
use crate::rma::Perms;

fn seg(rank: usize) -> SegmentRef {
    SegmentRef {
        rank,
        id: 1,
        key: 7,
        len: 1 << 20,
    }
}

fn combined<'a>(rank: usize) -> Combined<'a> {
    Combined {
        rank,
        size: 4,
        max: 4096,
        cmds: Vec::new(),
    }
}

#[test]
fn options_round_trip() {
    for status in [
        StatusReply::None,
        StatusReply::Always,
        StatusReply::OnlyFailures,
    ] {
        for colour in [None, Some(0), Some(15)] {
            for flow in [Flow::Reliable, Flow::Unreliable] {
                for wake in [false, true] {
                    let o = CmdOptions {
                        status,
                        colour,
                        flow,
                        wake,
                    };
                    assert_eq!(CmdOptions::from_word(o.word()), o);
                    assert!(!CmdOptions::blocking(o.word()));
                }
            }
        }
    }
    let bad = CmdOptions {
        colour: Some(16),
        ..Default::default()
    };
    assert!(matches!(bad.check(), Err(Error::InvalidConfig { .. })));
}

#[test]
fn reports_follow_the_status_option_and_data_always_comes_back() {
    let full = Ok(CmdStatus::Fifo(FifoStatus::Full));
    let done = Ok(CmdStatus::Done);
    let refused = Err(Refusal::WrongKey);
    let value = Ok(CmdStatus::Value(3));
    let o = |status| CmdOptions {
        status,
        ..Default::default()
    };
    assert!(!o(StatusReply::None).reports(&done));
    assert!(!o(StatusReply::None).reports(&refused));
    assert!(o(StatusReply::None).reports(&value));
    assert!(o(StatusReply::Always).reports(&done));
    assert!(!o(StatusReply::OnlyFailures).reports(&done));
    assert!(o(StatusReply::OnlyFailures).reports(&full));
    assert!(o(StatusReply::OnlyFailures).reports(&refused));
    assert!(o(StatusReply::OnlyFailures).reports(&Ok(CmdStatus::NotRun)));
}

#[test]
fn the_four_rules_are_checked_at_finish() {
    let data = [1u8; 8];
    let put = |rank| Command::Put {
        target: seg(rank),
        offset: 0,
        data: &data,
    };
    let atomic = Command::Atomic {
        target: seg(2),
        offset: 8,
        op: AtomicOp::FetchAdd,
        operand: 1,
        compare: 0,
    };
    // Legal: several puts to one rank; one atomic alone.
    let mut c = combined(2);
    c.push(put(2)).push(put(2)).push(put(2));
    let p = c.finish().expect("legal");
    assert_eq!((p.rank(), p.len()), (2, 3));
    assert_eq!(p.wire_len(), 3 * (wire::CMD_HEADER + 8));
    let mut c = combined(2);
    c.push(atomic);
    c.finish().expect("an atomic alone is legal");
    // Rule 1: one target.
    let mut c = combined(2);
    c.push(put(2)).push(put(3));
    assert!(matches!(
        c.finish(),
        Err(Error::IllegalCombination { rule: 1, .. })
    ));
    // Rule 4: no atomic with anything else.
    let mut c = combined(2);
    c.push(put(2)).push(atomic);
    assert!(matches!(
        c.finish(),
        Err(Error::IllegalCombination { rule: 4, .. })
    ));
    // The vector fetch-add and the compare-swap at a reference are atomics too.
    let addends = [1u64; 4];
    let vector = Command::FetchAddVector {
        target: seg(2),
        offset: 64,
        addends: &addends,
    };
    let at = Command::CompareSwapAt {
        target: seg(2),
        offset: 8,
        reference: 16,
        compare: 0,
        new: 1,
    };
    for a in [vector, at] {
        let mut c = combined(2);
        c.push(a);
        c.finish().expect("alone is legal");
        assert!(!a.has_direct_call(), "{a:?} runs at the target's handler");
        c.push(put(2));
        assert!(matches!(
            c.finish(),
            Err(Error::IllegalCombination { rule: 4, .. })
        ));
    }
    // A vector's old values must fit one reply.
    let many = [1u64; 512];
    let mut c = combined(2);
    c.push(Command::FetchAddVector {
        target: seg(2),
        offset: 0,
        addends: &many,
    });
    assert!(matches!(
        c.finish(),
        Err(Error::IllegalCombination { rule: 3, .. })
    ));
    // Rule 3: the reply must fit one packet (two 2 KiB gets do not, one does).
    let get = Command::Get {
        target: seg(2),
        offset: 0,
        len: 2048,
    };
    let mut c = combined(2);
    c.push(get);
    c.finish().expect("one get fits");
    c.push(get);
    assert!(matches!(
        c.finish(),
        Err(Error::IllegalCombination { rule: 3, .. })
    ));
    // The request must fit one packet too.
    let big = [0u8; 4000];
    let mut c = combined(2);
    c.push(Command::Put {
        target: seg(2),
        offset: 0,
        data: &big,
    })
    .push(Command::Put {
        target: seg(2),
        offset: 0,
        data: &big,
    });
    assert!(matches!(c.finish(), Err(Error::PayloadTooLarge { .. })));
    // Empty, and a rank out of range.
    assert!(matches!(
        combined(2).finish(),
        Err(Error::IllegalCombination { rule: 0, .. })
    ));
    let mut c = combined(9);
    c.push(put(9));
    assert!(matches!(c.finish(), Err(Error::Am(_))));
    let _ = Perms::ALL;
}

#[test]
fn user_built_bodies_are_checked_as_combined_ones() {
    let data = [7u8; 16];
    let mut c = combined(1);
    c.push(Command::Put {
        target: seg(1),
        offset: 0,
        data: &data,
    })
    .push(Command::Get {
        target: seg(1),
        offset: 0,
        len: 16,
    });
    let p = c.finish().unwrap();
    // The same bytes, given as a body, make the same packet.
    let again = Packet::checked(1, 2, p.body().to_vec(), 4096).unwrap();
    assert_eq!(again, p);
    // A program patching a put's data in place (the first command's data starts after its
    // 48-byte header) makes another legal packet.
    let mut patched = p.body().to_vec();
    patched[wire::CMD_HEADER..wire::CMD_HEADER + 16].fill(9);
    Packet::checked(1, 2, patched, 4096).expect("patched data");
    // Malformed: a wrong count, a truncated body, an unknown kind.
    for (count, body) in [
        (3, p.body().to_vec()),
        (2, p.body()[..p.body().len() - 8].to_vec()),
        (2, {
            let mut b = p.body().to_vec();
            b[0] = 99;
            b
        }),
    ] {
        assert!(matches!(
            Packet::checked(1, count, body, 4096),
            Err(Error::IllegalCombination { rule: 0, .. })
        ));
    }
    // Rule 4 and rule 3 on hand-written bodies.
    let mut two_atomics = Vec::new();
    for _ in 0..2 {
        wire::put_cmd(
            &mut two_atomics,
            wire::Kind::Atomic,
            1,
            7,
            [8, 4, 1, 0],
            &[],
        );
    }
    assert!(matches!(
        Packet::checked(1, 2, two_atomics, 4096),
        Err(Error::IllegalCombination { rule: 4, .. })
    ));
    let mut huge_get = Vec::new();
    wire::put_cmd(
        &mut huge_get,
        wire::Kind::Get,
        1,
        7,
        [0, u64::MAX, 0, 0],
        &[],
    );
    assert!(matches!(
        Packet::checked(1, 1, huge_get, 4096),
        Err(Error::IllegalCombination { rule: 3, .. })
    ));
}
