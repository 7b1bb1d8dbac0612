//! Reduction operators for collectives.

use bytemuck::Pod;

/// A built-in reduction.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// Sum (wrapping for integers).
    Sum,
    /// Minimum.
    Min,
    /// Maximum.
    Max,
}

impl Op {
    pub(crate) fn code(self) -> u8 {
        match self {
            Op::Sum => 1,
            Op::Min => 2,
            Op::Max => 3,
        }
    }
}

/// Element types the built-in reductions apply to.
pub trait Reducible: Pod {
    /// `a op b`.
    fn combine(op: Op, a: Self, b: Self) -> Self;
}

macro_rules! int_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a.wrapping_add(b),
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                }
            }
        }
    )*};
}
int_reducible!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize);

macro_rules! float_reducible {
    ($($t:ty),*) => {$(
        impl Reducible for $t {
            fn combine(op: Op, a: Self, b: Self) -> Self {
                match op {
                    Op::Sum => a + b,
                    Op::Min => a.min(b),
                    Op::Max => a.max(b),
                }
            }
        }
    )*};
}
float_reducible!(f32, f64);
