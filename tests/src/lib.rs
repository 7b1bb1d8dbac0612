//! Helpers shared by the rank programs in `src/bin/` (each is run on N ranks by `volley run`,
//! exits 0 when every check passes and panics, or exits non-zero, with a clear message when one
//! fails) and by the integration tests in `tests/` that launch them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use volley::rma::RmaPath;
use volley::{RequestHandler, Runtime, RuntimeBuilder};

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

/// Joins the job, or exits with status 2 and the reason (every rank program starts so).
pub fn join(b: RuntimeBuilder) -> Runtime {
    b.build()
        .unwrap_or_else(|e| fail(0, 2, &format!("build: {e}")))
}

/// This rank's place in the job, read before `build()`: with a progress thread, handlers may
/// run as soon as `build()` returns, so state they need must be ready before it.
pub fn job() -> volley::bootstrap::JobInfo {
    volley::bootstrap::JobInfo::from_env()
        .unwrap_or_else(|e| fail(0, 2, &format!("job environment: {e}")))
}

/// The `i`-th command-line argument (after the program name), if any.
pub fn arg_str(i: usize) -> Option<String> {
    std::env::args().nth(i + 1)
}

/// A table of counters, one per rank.
///
/// Handlers are registered before `build()` tells us the job size, and with a progress thread
/// (`VOLLEY_PROGRESS=thread`) they may run as soon as `build()` returns, even before the
/// program's next line; so the table sizes itself at first use from the job's size (1 for a
/// bare run). Relaxed atomics suffice: what a handler did is visible to the program
/// after the runtime call that ran it (or, with a progress thread, after any later runtime
/// call); they are atomics because handlers must be `Sync`.
#[derive(Debug, Default)]
pub struct PerRank(OnceLock<Box<[AtomicU64]>>);

impl PerRank {
    fn table(&self) -> &[AtomicU64] {
        self.0.get_or_init(|| {
            let n = volley::bootstrap::JobInfo::from_env().map_or(1, |j| j.size);
            (0..n).map(|_| AtomicU64::new(0)).collect()
        })
    }

    /// Checks that the table has one counter per rank of a job of `n` ranks.
    pub fn init(&self, n: usize) {
        assert_eq!(self.table().len(), n, "PerRank sized for another job");
    }

    /// The counter of rank `r`.
    pub fn at(&self, r: usize) -> &AtomicU64 {
        &self.table()[r]
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
        self.table()
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

/// The name of a one-sided path as `VOLLEY_RMA` spells it (`direct` or `am`); the rank programs
/// print it so that the tests can check the path they asked for is the one that ran.
pub fn path_name(path: RmaPath) -> &'static str {
    match path {
        RmaPath::Direct => "direct",
        RmaPath::ActiveMessages => "am",
    }
}

/// u64 values sent by every rank to one root rank in medium requests (chunked to
/// `max_medium()`), collected per sender. Register it in the builder like any handler (every
/// rank, same place), then [`Gather::send`] on every rank and [`Gather::collect`] on the root.
#[derive(Debug)]
pub struct Gather {
    /// Values received so far, indexed by sender.
    received: Arc<Mutex<Vec<Vec<u64>>>>,
    handler: RequestHandler,
}

impl Gather {
    /// Registers the gather's request handler under `name`.
    pub fn register(b: &mut RuntimeBuilder, name: &str) -> Self {
        let received = Arc::new(Mutex::new(Vec::<Vec<u64>>::new()));
        let r = received.clone();
        let handler = b.request_handler(name, move |m, _token| {
            let payload = m.payload();
            assert_eq!(
                payload.len() as u64,
                m.arg(0) * 8,
                "gather: payload length disagrees with its count"
            );
            let mut r = r.lock().unwrap();
            if r.len() <= m.src() {
                r.resize(m.src() + 1, Vec::new());
            }
            r[m.src()].extend(
                payload
                    .chunks_exact(8)
                    .map(|c| u64::from_le_bytes(c.try_into().unwrap())),
            );
        });
        Self { received, handler }
    }

    /// Sends `values` to `root` (which may be this rank).
    pub fn send(&self, rt: &Runtime, root: usize, values: &[u64]) {
        let mut bytes = Vec::with_capacity(rt.max_medium());
        for chunk in values.chunks(rt.max_medium() / 8) {
            bytes.clear();
            for v in chunk {
                bytes.extend_from_slice(&v.to_le_bytes());
            }
            rt.request_medium(root, self.handler, &[chunk.len() as u64], &bytes)
                .unwrap_or_else(|e| fail(rt.rank(), 1, &format!("gather: request_medium: {e}")));
        }
    }

    /// At the root: waits until every rank has sent `per_rank` values and returns them, indexed
    /// by sender (a rank that sends more than `per_rank` values shows up with more).
    pub fn collect(&self, rt: &Runtime, per_rank: usize) -> Vec<Vec<u64>> {
        let size = rt.size();
        rt.wait_until(|| {
            let r = self.received.lock().unwrap();
            r.len() == size && r.iter().all(|v| v.len() >= per_rank)
        });
        std::mem::take(&mut *self.received.lock().unwrap())
    }
}

/// Checks that `values` (all ranks' together) are exactly `0..n`, each once; on failure, says
/// which value is missing or repeated and which rank reported it.
pub fn check_exactly_0_to(values: &[Vec<u64>], n: u64) -> Result<(), String> {
    let mut seen: Vec<Option<usize>> = vec![None; n as usize];
    let mut count = 0u64;
    for (rank, vs) in values.iter().enumerate() {
        for &v in vs {
            count += 1;
            match seen.get_mut(v as usize) {
                None => return Err(format!("rank {rank} got value {v}, outside 0..{n}")),
                Some(Some(first)) => {
                    return Err(format!(
                        "value {v} was returned twice (to ranks {first} and {rank})"
                    ))
                }
                Some(s) => *s = Some(rank),
            }
        }
    }
    if count != n {
        return Err(format!("{count} values reported, expected {n}"));
    }
    match seen.iter().position(Option::is_none) {
        Some(v) => Err(format!("value {v} was never returned")),
        None => Ok(()),
    }
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
    fn exactly_0_to_n_sees_duplicates_gaps_and_strays() {
        assert_eq!(check_exactly_0_to(&[vec![2, 0], vec![1, 3]], 4), Ok(()));
        assert!(check_exactly_0_to(&[vec![0, 1], vec![1, 3]], 4)
            .unwrap_err()
            .contains("value 1 was returned twice (to ranks 0 and 1)"));
        assert!(check_exactly_0_to(&[vec![0, 1], vec![3]], 4)
            .unwrap_err()
            .contains("3 values reported"));
        assert!(check_exactly_0_to(&[vec![0, 1], vec![4, 3]], 4)
            .unwrap_err()
            .contains("rank 1 got value 4"));
        assert_eq!(
            check_exactly_0_to(&[vec![0, 1, 3], vec![]], 3),
            Err("rank 0 got value 3, outside 0..3".to_string())
        );
    }

    #[test]
    fn checksum_sees_order_and_length() {
        assert_ne!(checksum(&[1, 2]), checksum(&[2, 1]));
        assert_ne!(checksum(&[]), checksum(&[0]));
    }
}
