//! What a parcel says of the collective that sent it (kind, root, element size, operator), so
//! that ranks calling different collectives get an error instead of wrong data.

/// Which collective a parcel belongs to: kind, root, element size and operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct What {
    kind: Kind,
    root: u32,
    elem: u16,
    op: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(super) enum Kind {
    Barrier = 1,
    Broadcast = 2,
    Reduce = 3,
    AllReduce = 4,
    Scan = 5,
    Gather = 6,
    AllGather = 7,
    AllToAll = 8,
    AllToAllV = 9,
}

impl What {
    pub(super) fn new(kind: Kind) -> Self {
        Self {
            kind,
            root: 0,
            elem: 0,
            op: 0,
        }
    }

    pub(super) fn of<T>(kind: Kind) -> Self {
        Self {
            elem: std::mem::size_of::<T>() as u16,
            ..Self::new(kind)
        }
    }

    pub(super) fn root(mut self, root: usize) -> Self {
        self.root = root as u32;
        self
    }

    pub(super) fn op(mut self, op: u8) -> Self {
        self.op = op;
        self
    }

    pub(super) fn code(self) -> u64 {
        self.kind as u64
            | (self.op as u64) << 8
            | (self.elem as u64) << 16
            | (self.root as u64) << 32
    }

    pub(super) fn describe(code: u64) -> String {
        if code == u64::MAX {
            return "a parcel that does not fit its announced size".into();
        }
        let kind = match code & 0xff {
            1 => "barrier",
            2 => "broadcast",
            3 => "reduce",
            4 => "all_reduce",
            5 => "scan",
            6 => "gather",
            7 => "all_gather",
            8 => "all_to_all",
            9 => "all_to_all_v",
            _ => "an unknown collective",
        };
        let (op, elem, root) = ((code >> 8) & 0xff, (code >> 16) & 0xffff, code >> 32);
        let mut s = kind.to_string();
        if elem != 0 {
            s += &format!(" of {elem}-byte elements");
        }
        if op != 0 {
            s += &format!(" with operator #{op}");
        }
        if matches!(code & 0xff, 2 | 3 | 6) {
            s += &format!(" rooted at {root}");
        }
        s
    }
}
