//! Blocking reads and writes through the whole Active Message protocol in a one-rank job: the
//! layer is told to reach its own memory through Active Messages to itself
//! (`Global::set_loopback_am`), so every value below goes out in a request, is served by the
//! owner's handler and comes back in its answer, as between ranks. Values of up to one word
//! take the `get_word` request, larger ones the general get.

use bytemuck::{Pod, Zeroable};
use volley::rma::Refusal;
use volley::Runtime;
use volley_global::{Global, GlobalError, GlobalPtr, Layout, Strategy};

/// Odd sizes, so that a word's padding and the bytes' order are checked.
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Three([u8; 3]);

#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Five([u8; 5]);

#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
#[repr(C)]
struct Wide([u64; 4]);

/// Writes `v` at element 1 of a fresh array of `T` (its neighbours stay distinct), reads it
/// back, and checks that the neighbours are untouched.
fn round_trip<T: Pod + PartialEq + std::fmt::Debug>(g: &Global<'_>, v: T, other: T) {
    let a = g.all_spread_alloc::<T>(3, Layout::Blocked).unwrap();
    g.write(a.ptr(0), other).unwrap();
    g.write(a.ptr(2), other).unwrap();
    g.write(a.ptr(1), v).unwrap();
    assert_eq!(
        g.read(a.ptr(1)).unwrap(),
        v,
        "{}",
        std::any::type_name::<T>()
    );
    assert_eq!(g.read(a.ptr(0)).unwrap(), other);
    assert_eq!(g.read(a.ptr(2)).unwrap(), other);
    g.free(a);
}

#[test]
fn reads_and_writes_of_every_small_size_and_their_refusals_through_messages_to_itself() {
    let mut b = Runtime::builder();
    let setup = Global::register_with(&mut b, Strategy::Proc);
    let rt = b.build().unwrap();
    let g = setup.attach(&rt).unwrap();
    assert_eq!(g.procs(), 1);
    g.set_loopback_am(true);
    let served = rt.stats();

    round_trip(&g, 0xa5u8, 0x11);
    round_trip(&g, 0xbeefu16, 0x2222);
    round_trip(&g, 0xdead_beefu32, 0x3333_3333);
    round_trip(&g, 0x0123_4567_89ab_cdefu64, u64::MAX);
    round_trip(&g, -2.5f64, 1e300);
    round_trip(&g, Three([1, 2, 3]), Three([9; 3]));
    round_trip(&g, Five([5, 4, 3, 2, 1]), Five([7; 5]));
    round_trip(&g, Wide([1, 2, 3, u64::MAX]), Wide([6; 4]));
    // Every access above (six per size) was answered by a reply: none was a local copy.
    let replies = rt.stats().handled[1][0] - served.handled[1][0];
    assert_eq!(replies, 8 * 6, "short replies handled");

    let a = g.all_spread_alloc::<u64>(4, Layout::Blocked).unwrap();
    g.write(a.ptr(3), 77).unwrap();
    // Refused at the owner, by name: a forged key.
    let seg = a.ptr(0).segment();
    let forged = GlobalPtr::<u64>::new(seg.with_key(seg.to_words()[1] ^ 1), 8).unwrap();
    match g.read(forged) {
        Err(GlobalError::Refused {
            rank: 0,
            reason: Refusal::WrongKey,
        }) => {}
        other => panic!("a read with a forged key gave {other:?}"),
    }
    // Past the end: refused before anything is sent.
    assert!(matches!(
        g.read(a.ptr_on(0, 4)),
        Err(GlobalError::OutOfBounds { .. })
    ));
    // A freed array: refused at the owner.
    let stale = a.ptr(3);
    g.free(a);
    match g.read(stale) {
        Err(GlobalError::Refused { rank: 0, reason }) => {
            assert_eq!(reason, Refusal::NoSuchSegment, "{reason:?}")
        }
        other => panic!("a read of a freed array gave {other:?}"),
    }
    g.barrier().unwrap();
}
