//! Helpers shared by the rank programs in `src/bin/` (each is run on N ranks by `volley run`,
//! exits 0 when every check passes and panics, or exits non-zero, with a clear message when one
//! fails) and by the integration tests in `tests/` that launch them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// The `i`-th command-line argument (after the program name) parsed as a number, or `default`.
/// Underscores are allowed (`1_000_000`). Panics with a usage message on garbage.
pub fn arg_u64(i: usize, default: u64) -> u64 {
    match std::env::args().nth(i + 1) {
        None => default,
        Some(s) => s
            .replace('_', "")
            .parse()
            .unwrap_or_else(|_| panic!("argument {} must be a number, got {s:?}", i + 1)),
    }
}

/// The `i`-th command-line argument (after the program name), if any.
pub fn arg_str(i: usize) -> Option<String> {
    std::env::args().nth(i + 1)
}

/// A table of counters, one per rank, sized once the job size is known.
///
/// Handlers are registered before `build()` tells us the job size, but they only run inside
/// runtime calls made after `build()`, so `init` right after `build()` is early enough. Handlers
/// run on the rank's single thread, so relaxed atomics suffice; they are atomics only because
/// handlers must be `Sync`.
#[derive(Debug, Default)]
pub struct PerRank(OnceLock<Box<[AtomicU64]>>);

impl PerRank {
    /// Sizes the table (once).
    pub fn init(&self, n: usize) {
        self.0
            .set((0..n).map(|_| AtomicU64::new(0)).collect())
            .expect("PerRank::init called twice");
    }

    /// The counter of rank `r`.
    pub fn at(&self, r: usize) -> &AtomicU64 {
        &self.0.get().expect("PerRank used before init")[r]
    }

    /// Current value for rank `r`.
    pub fn get(&self, r: usize) -> u64 {
        self.at(r).load(Ordering::Relaxed)
    }

    /// Adds one to rank `r`'s counter and returns the value before.
    pub fn bump(&self, r: usize) -> u64 {
        self.at(r).fetch_add(1, Ordering::Relaxed)
    }

    /// All values.
    pub fn values(&self) -> Vec<u64> {
        self.0
            .get()
            .expect("PerRank used before init")
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect()
    }
}

/// A cheap, well-mixed 64-bit hash (splitmix64 finalizer).
pub fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Byte `pos` of the test pattern identified by `seed` (derive the seed from size, message
/// index and direction so that a payload delivered to the wrong place, truncated, shifted or
/// taken from another message does not verify).
#[inline]
pub fn pattern_byte(seed: u64, pos: usize) -> u8 {
    // Mix the position in two ways so no period divides a common size.
    let p = pos as u64;
    let s = mix(seed ^ (p >> 8).wrapping_mul(0xA24B_AED4_963E_E407));
    (s >> ((p & 7) * 8)) as u8 ^ (p as u8).wrapping_mul(31)
}

/// Fills `buf` with the pattern `seed`.
pub fn fill_pattern(seed: u64, buf: &mut [u8]) {
    for (pos, b) in buf.iter_mut().enumerate() {
        *b = pattern_byte(seed, pos);
    }
}

/// Returns the first position where `buf` differs from pattern `seed`.
pub fn check_pattern(seed: u64, buf: &[u8]) -> Option<usize> {
    buf.iter()
        .enumerate()
        .position(|(pos, &b)| b != pattern_byte(seed, pos))
}

/// An order-sensitive checksum of a byte string (FNV-1a, 64-bit, with the length mixed in).
pub fn checksum(buf: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in buf {
        h ^= b as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    mix(h ^ buf.len() as u64)
}

/// Writes `msg` and a newline to stderr in one `write` (`eprintln!` writes each formatted piece
/// separately, so the lines of ranks sharing the launcher's stderr would interleave mid-line).
pub fn eprint_line(msg: &str) {
    use std::io::Write;
    let line = format!("{msg}\n");
    let _ = std::io::stderr().write_all(line.as_bytes());
}

/// Prints `msg` to stderr prefixed with the program name and rank, then exits with `code`
/// (for checks whose failure should not look like a panic, or that must exit with a given code).
pub fn fail(rank: usize, code: i32, msg: &str) -> ! {
    let prog = std::env::args()
        .next()
        .and_then(|p| {
            std::path::Path::new(&p)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
        })
        .unwrap_or_default();
    eprint_line(&format!("{prog}: rank {rank}: {msg}"));
    std::process::exit(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_differ_by_seed_and_position() {
        let mut a = vec![0u8; 4099];
        let mut b = vec![0u8; 4099];
        fill_pattern(1, &mut a);
        fill_pattern(2, &mut b);
        assert_ne!(a, b);
        assert_eq!(check_pattern(1, &a), None);
        assert_eq!(check_pattern(2, &a).map(|p| p < 16), Some(true));
        a[4000] ^= 1;
        assert_eq!(check_pattern(1, &a), Some(4000));
        // Shifted by one is detected.
        assert!(check_pattern(2, &b[1..]).is_some());
    }

    #[test]
    fn checksum_sees_order_and_length() {
        assert_ne!(checksum(&[1, 2]), checksum(&[2, 1]));
        assert_ne!(checksum(&[]), checksum(&[0]));
    }
}
