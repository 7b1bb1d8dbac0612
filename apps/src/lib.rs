//! What every program of the Split-C suite shares: joining the job with the global layer,
//! the `--size` and `--corrupt` arguments, timing the parallel phase between barriers, a
//! deterministic random number generator, and the one line of results the `volley apps`
//! runner reads.
//!
//! A program is a `main` that calls [`run`] with its name, a registration step (atomic
//! procedures it needs) and its body. The body builds its input from the size, runs the
//! timed phase inside [`Ctx::timed`], checks its own result and returns an [`Outcome`].
//! What only some programs share is in the modules: [`fft`] (`fft`, `fftb`), [`sort`] (the
//! sorts) and [`matrix`] (`cannon`, `mm`).
//!
//! ```text
//! volley run -n 4 target/release/radix --size test
//! app radix [hw] on 4 ranks, 16384 keys: 0.012 s, verified
//! volley-app {"program":"radix","strategy":"hw","ranks":4,"problem":"16384 keys","seconds":0.012,"verified":true}
//! ```

use std::time::Instant;
use volley::{Runtime, RuntimeBuilder};
use volley_global::{Global, GlobalSetup, Op};

pub mod fft;
pub mod matrix;
pub mod sort;

/// The problem size a run asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    /// `--size test`: well under a second on 4 ranks, for CI.
    Test,
    /// The default: 1–10 s on 4 ranks of a 2-core machine.
    Default,
    /// `--size N`: the program's own unit (keys, points, matrix order, ...).
    Custom(u64),
}

impl Size {
    /// The size in the program's unit: `test` for [`Size::Test`], `default` for
    /// [`Size::Default`], or the number given.
    pub fn pick(self, test: u64, default: u64) -> u64 {
        match self {
            Size::Test => test,
            Size::Default => default,
            Size::Custom(n) => n,
        }
    }
}

/// What a program reports: its problem in words, the timed phase's seconds (the slowest
/// rank's), and whether its result checked out (an error says what was wrong).
#[derive(Debug)]
pub struct Outcome {
    /// For example "1048576 keys" or "512x512 matrices".
    pub problem: String,
    /// Seconds of the timed phase ([`Ctx::timed`]).
    pub seconds: f64,
    /// `Ok` when the result verified on this rank.
    pub verified: Result<(), String>,
}

/// A program's view of the job.
pub struct Ctx<'g, 'rt> {
    /// The global address space.
    pub g: &'g Global<'rt>,
    /// The size asked for.
    pub size: Size,
    /// `--corrupt`: damage the result just before the check (to show the check fails).
    pub corrupt: bool,
}

impl Ctx<'_, '_> {
    /// This rank.
    pub fn me(&self) -> usize {
        self.g.my_proc()
    }

    /// Ranks in the job.
    pub fn procs(&self) -> usize {
        self.g.procs()
    }

    /// Runs `f` between two barriers and returns its value and the slowest rank's seconds.
    pub fn timed<R>(&self, f: impl FnOnce() -> R) -> (R, f64) {
        self.g
            .barrier()
            .unwrap_or_else(|e| die(self.me(), &format!("barrier: {e}")));
        let t0 = Instant::now();
        let r = f();
        let mine = t0.elapsed().as_secs_f64();
        self.g
            .barrier()
            .unwrap_or_else(|e| die(self.me(), &format!("barrier: {e}")));
        let slowest = self
            .g
            .all_reduce_one(mine, Op::Max)
            .unwrap_or_else(|e| die(self.me(), &format!("all_reduce: {e}")));
        (r, slowest)
    }
}

/// Exits this rank with `msg` on standard error (status 1).
pub fn die(rank: usize, msg: &str) -> ! {
    eprint_line(&format!("rank {rank}: {msg}"));
    std::process::exit(1)
}

/// Writes one line to standard error in one write, so lines of ranks sharing the launcher's
/// stderr never interleave mid-line.
pub fn eprint_line(msg: &str) {
    use std::io::Write;
    let _ = std::io::stderr().write_all(format!("{msg}\n").as_bytes());
}

/// Unwraps a global-layer result or exits naming what failed.
pub fn must<T>(rank: usize, what: &str, r: volley_global::Result<T>) -> T {
    r.unwrap_or_else(|e| die(rank, &format!("{what}: {e}")))
}

/// A small deterministic generator (SplitMix64): the same seed gives the same input on
/// every rank count, so results can be checked against a sequential reference.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator for `seed` (mix in the rank or the element index for independent streams).
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A float in [0, 1).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The `i`-th value of the stream `seed` (random access: element i of an input).
pub fn hash(seed: u64, i: u64) -> u64 {
    Rng::new(seed ^ i.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

/// An order-independent checksum of keys (sum and xor of a mix of each): equal for two
/// permutations of one multiset, different (with high probability) otherwise.
pub fn multiset_checksum(keys: impl IntoIterator<Item = u64>) -> [u64; 2] {
    let mut s = [0u64; 2];
    for k in keys {
        let h = hash(0x5eed, k);
        s[0] = s[0].wrapping_add(h);
        s[1] ^= h.rotate_left(17);
    }
    s
}

/// Checks a distributed sort: every rank's keys ascending, each rank's last key ≤ the next
/// rank's first, and the multiset the same as the input's (`input_sum`, the sum over ranks of
/// [`multiset_checksum`] words, combined with wrapping add and xor).
pub fn check_sorted(g: &Global<'_>, keys: &[u64], input: [u64; 2]) -> Result<(), String> {
    let me = g.my_proc();
    // Every rank takes part in every collective below, whatever it finds locally, so that a
    // check that fails on some ranks only never leaves the others waiting.
    let local = keys
        .windows(2)
        .position(|w| w[0] > w[1])
        .map(|i| format!("keys {i} and {} on rank {me} are out of order", i + 1));
    // Boundaries: (has keys, first, last) of every rank.
    let mine = [
        u64::from(!keys.is_empty()),
        keys.first().copied().unwrap_or(0),
        keys.last().copied().unwrap_or(0),
    ];
    let mut all = vec![0u64; 3 * g.procs()];
    g.all_gather(&mine, &mut all).map_err(|e| e.to_string())?;
    let permutation = input_checksum(g, keys)? == input;
    if let Some(e) = local {
        return Err(e);
    }
    let mut last: Option<(usize, u64)> = None;
    for r in 0..g.procs() {
        if all[3 * r] == 0 {
            continue;
        }
        if let Some((lr, lv)) = last {
            if lv > all[3 * r + 1] {
                return Err(format!(
                    "rank {lr} ends with {lv} but rank {r} starts with {}",
                    all[3 * r + 1]
                ));
            }
        }
        last = Some((r, all[3 * r + 2]));
    }
    if !permutation {
        return Err("the sorted keys are not a permutation of the input (checksums differ)".into());
    }
    Ok(())
}

/// The combined checksum of every rank's input keys (call on every rank with its keys).
pub fn input_checksum(g: &Global<'_>, keys: &[u64]) -> Result<[u64; 2], String> {
    let c = multiset_checksum(keys.iter().copied());
    let sum = g.all_reduce_one(c[0], Op::Sum).map_err(|e| e.to_string())?;
    let mut xor = [c[1]];
    g.all_reduce_with(&mut xor, |a, b| a ^ b)
        .map_err(|e| e.to_string())?;
    Ok([sum, xor[0]])
}

fn parse_args(name: &str) -> (Size, bool) {
    let mut size = Size::Default;
    let mut corrupt = false;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--size" => {
                let v = args.next().unwrap_or_default();
                size = match v.as_str() {
                    "test" => Size::Test,
                    "default" => Size::Default,
                    n => Size::Custom(n.replace('_', "").parse().unwrap_or_else(|_| {
                        eprintln!("{name}: --size takes test, default or a number, not {n:?}");
                        std::process::exit(2)
                    })),
                };
            }
            "--corrupt" => corrupt = true,
            "--help" | "-h" => {
                println!("usage: volley run -n P {name} [--size test|default|N] [--corrupt]");
                std::process::exit(0)
            }
            other => {
                eprintln!("{name}: unknown argument {other:?} (try --help)");
                std::process::exit(2)
            }
        }
    }
    (size, corrupt)
}

/// Runs program `name`: parses the arguments, joins the job with the global layer (strategy
/// from `VOLLEY_STRATEGY`), lets `register` add atomic procedures, runs `body`, and reports.
/// Exits 1 on every rank if any rank's check failed.
pub fn run<S>(
    name: &str,
    register: impl FnOnce(&mut RuntimeBuilder, &mut GlobalSetup) -> S,
    body: impl FnOnce(&Ctx<'_, '_>, S) -> Outcome,
) {
    let (size, corrupt) = parse_args(name);
    let mut b = Runtime::builder();
    // Room for the largest default problems' arrays (several copies of the data per rank).
    b.segment_bytes(
        std::env::var("VOLLEY_SEGMENT_BYTES")
            .ok()
            .and_then(|s| volley::am::parse_size(&s))
            .unwrap_or(1 << 30),
    );
    let mut setup = Global::register(&mut b).unwrap_or_else(|e| die(0, &e.to_string()));
    let state = register(&mut b, &mut setup);
    let rt = b
        .build()
        .unwrap_or_else(|e| die(0, &format!("joining the job: {e}")));
    let g = setup
        .attach(&rt)
        .unwrap_or_else(|e| die(rt.rank(), &format!("global layer: {e}")));
    let ctx = Ctx {
        g: &g,
        size,
        corrupt,
    };
    let out = body(&ctx, state);
    let me = g.my_proc();
    let bad = must(
        me,
        "all_reduce",
        g.all_reduce_one(u64::from(out.verified.is_err()), Op::Max),
    );
    if let Err(e) = &out.verified {
        eprint_line(&format!("{name}: rank {me}: verification failed: {e}"));
    }
    if me == 0 {
        let verified = bad == 0;
        println!(
            "app {name} [{}] on {} ranks, {}: {:.3} s, {}",
            g.strategy(),
            g.procs(),
            out.problem,
            out.seconds,
            if verified { "verified" } else { "NOT VERIFIED" }
        );
        let line = serde_json::json!({
            "program": name,
            "strategy": g.strategy().name(),
            "ranks": g.procs(),
            "problem": out.problem,
            "seconds": out.seconds,
            "verified": verified,
        });
        println!("volley-app {line}");
    }
    drop(g);
    drop(rt);
    if bad != 0 {
        std::process::exit(1);
    }
}
