//! Remote atomic operations on 64-bit words, applied with CPU atomics wherever they execute
//! (on the mapped word by the initiator, or at the target by a handler).

use std::sync::atomic::{AtomicU64, Ordering};

/// An atomic operation on a 64-bit word. Signed variants treat the word as `i64`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum AtomicOp {
    /// Returns the word.
    Load = 0,
    /// Stores the operand; returns the old word.
    Store = 1,
    /// Stores the operand; returns the old word.
    Swap = 2,
    /// Stores the operand if the word equals `compare`; returns the old word.
    CompareSwap = 3,
    /// Adds (wrapping); returns the old word.
    FetchAdd = 4,
    /// Bitwise and; returns the old word.
    FetchAnd = 5,
    /// Bitwise or; returns the old word.
    FetchOr = 6,
    /// Bitwise xor; returns the old word.
    FetchXor = 7,
    /// Unsigned minimum; returns the old word.
    MinU64 = 8,
    /// Unsigned maximum; returns the old word.
    MaxU64 = 9,
    /// Signed minimum; returns the old word.
    MinI64 = 10,
    /// Signed maximum; returns the old word.
    MaxI64 = 11,
}

impl AtomicOp {
    pub(crate) fn from_code(c: u64) -> Option<Self> {
        use AtomicOp::*;
        Some(match c {
            0 => Load,
            1 => Store,
            2 => Swap,
            3 => CompareSwap,
            4 => FetchAdd,
            5 => FetchAnd,
            6 => FetchOr,
            7 => FetchXor,
            8 => MinU64,
            9 => MaxU64,
            10 => MinI64,
            11 => MaxI64,
            _ => return None,
        })
    }

    /// Whether the operation writes (and so needs nothing more than the atomic permission).
    pub fn writes(self) -> bool {
        self != AtomicOp::Load
    }
}

/// Applies `op` to `word` and returns the previous value. Sequentially consistent, like the
/// seed's target-side atomics executed one after another.
pub(crate) fn apply(word: &AtomicU64, op: AtomicOp, operand: u64, compare: u64) -> u64 {
    let o = Ordering::SeqCst;
    match op {
        AtomicOp::Load => word.load(o),
        AtomicOp::Store | AtomicOp::Swap => word.swap(operand, o),
        AtomicOp::CompareSwap => match word.compare_exchange(compare, operand, o, o) {
            Ok(v) | Err(v) => v,
        },
        AtomicOp::FetchAdd => word.fetch_add(operand, o),
        AtomicOp::FetchAnd => word.fetch_and(operand, o),
        AtomicOp::FetchOr => word.fetch_or(operand, o),
        AtomicOp::FetchXor => word.fetch_xor(operand, o),
        AtomicOp::MinU64 => word.fetch_min(operand, o),
        AtomicOp::MaxU64 => word.fetch_max(operand, o),
        AtomicOp::MinI64 => word
            .fetch_update(o, o, |v| Some((v as i64).min(operand as i64) as u64))
            .unwrap_or_else(|v| v),
        AtomicOp::MaxI64 => word
            .fetch_update(o, o, |v| Some((v as i64).max(operand as i64) as u64))
            .unwrap_or_else(|v| v),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_returns_the_old_value_and_updates() {
        let w = AtomicU64::new(10);
        let cases: [(AtomicOp, u64, u64, u64); 12] = [
            (AtomicOp::Load, 0, 0, 10),
            (AtomicOp::FetchAdd, 5, 0, 15),
            (AtomicOp::Swap, 7, 0, 7),
            (AtomicOp::CompareSwap, 9, 6, 7),
            (AtomicOp::CompareSwap, 9, 7, 9),
            (AtomicOp::FetchAnd, 0b1100, 0, 9 & 0b1100),
            (AtomicOp::FetchOr, 1, 0, 9),
            (AtomicOp::FetchXor, 1, 0, 8),
            (AtomicOp::MaxU64, 20, 0, 20),
            (AtomicOp::MinU64, 3, 0, 3),
            (AtomicOp::MinI64, (-4i64) as u64, 0, (-4i64) as u64),
            (AtomicOp::MaxI64, 2, 0, 2),
        ];
        for (op, a, b, after) in cases {
            let before = w.load(Ordering::Relaxed);
            assert_eq!(apply(&w, op, a, b), before, "{op:?} returns the old value");
            assert_eq!(w.load(Ordering::Relaxed), after, "{op:?}");
            assert_eq!(AtomicOp::from_code(op as u64), Some(op));
        }
        assert_eq!(AtomicOp::from_code(12), None);
    }
}
