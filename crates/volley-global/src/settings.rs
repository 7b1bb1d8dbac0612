//! The `VOLLEY_*` variables this layer reads, for volley's one settings check
//! ([`volley::settings`]).

use volley::settings::{Scope, Setting};

/// The global layer's variables.
pub const SETTINGS: &[Setting] = &[
    Setting {
        name: "VOLLEY_STRATEGY",
        accepts: "proc, np or hw",
        purpose: "how the global layer reaches memory of other ranks (seed 004's strategies)",
        scope: Scope::Always,
        check: |v| matches!(v, "proc" | "np" | "hw"),
    },
    Setting {
        name: "VOLLEY_HANG_WARN_SECS",
        accepts: "a positive number of seconds",
        purpose: "how long a wait lasts before it says what it waits for",
        scope: Scope::Always,
        check: |v| v.parse::<f64>().is_ok_and(|s| s.is_finite() && s > 0.0),
    },
    Setting {
        name: "VOLLEY_COLL_CMA",
        accepts: "auto or off",
        purpose: "whether large collectives on one node copy between processes directly (process_vm_readv/writev) or through mapped scratch",
        scope: Scope::Always,
        check: |v| matches!(v, "auto" | "off"),
    },
];
