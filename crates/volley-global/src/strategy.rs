//! Who executes a global operation (seed 004 §4): the program's thread, a progress thread, or
//! the memory system itself. The strategy changes who does the work, never the result.

use crate::error::{GlobalError, Result};

/// How global operations are carried out. Chosen per job (every rank the same), at run time:
/// [`Strategy::from_env`] reads `VOLLEY_STRATEGY`.
///
/// | strategy | read / write / get / put | store | atomics | progress |
/// |---|---|---|---|---|
/// | `proc` | AM handlers at the target | AM handler | AM handler | the program's thread polls |
/// | `np` | AM handlers, run by the target's progress thread | AM handler (progress thread) | AM handler (progress thread, serialized with every handler) | a progress thread |
/// | `hw` | `memcpy` on the mapped segment for peers on this node; AM handlers for other nodes | direct copy plus a CPU atomic on the target's byte counter (this node); AM handler (other nodes) | CPU atomics (this node) for the built-ins; procedures always at the owner | the program's thread polls |
///
/// Every strategy combines with every transport: `hw` is `proc` for peers on other nodes
/// (shared memory is the only transport that maps a peer's segment today).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// The program's thread injects, polls and runs every handler (CM-5 style).
    Proc,
    /// A progress thread (the "network processor") runs the handlers that serve remote
    /// requests and completes this rank's operations while the program computes.
    Np,
    /// Reads, writes, gets and puts are plain copies on the peer's mapped memory where the
    /// peer shares this node (T3D style); the rest as `proc`.
    Hw,
}

impl Strategy {
    /// Every strategy, in the order benchmarks report them.
    pub const ALL: [Strategy; 3] = [Strategy::Proc, Strategy::Np, Strategy::Hw];

    /// The strategy's name: `proc`, `np` or `hw`.
    pub fn name(self) -> &'static str {
        match self {
            Strategy::Proc => "proc",
            Strategy::Np => "np",
            Strategy::Hw => "hw",
        }
    }

    /// `VOLLEY_STRATEGY=proc|np|hw`; `hw` when unset (the fastest on one node).
    pub fn from_env() -> Result<Self> {
        match std::env::var("VOLLEY_STRATEGY") {
            Err(_) => Ok(Strategy::Hw),
            Ok(v) => v.parse(),
        }
    }
}

impl std::str::FromStr for Strategy {
    type Err = GlobalError;

    fn from_str(s: &str) -> Result<Self> {
        match s {
            "proc" => Ok(Strategy::Proc),
            "np" => Ok(Strategy::Np),
            "hw" | "" => Ok(Strategy::Hw),
            other => Err(GlobalError::InvalidStrategy(other.to_string())),
        }
    }
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back_and_unknown_names_are_refused() {
        for s in Strategy::ALL {
            assert_eq!(s.name().parse::<Strategy>().unwrap(), s);
        }
        let e = "fast".parse::<Strategy>().unwrap_err();
        assert!(e.to_string().contains("fast"), "{e}");
    }
}
