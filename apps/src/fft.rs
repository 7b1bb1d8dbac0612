//! What `fft` and `fftb` share: the six-step (transpose) 1-D complex FFT for N = R·C points,
//! R and C powers of two, all but its remap. With n = n1·C + n2 and k = k1 + R·k2,
//!
//! ```text
//! X[k1 + R·k2] = Σ_n2 W_C^(n2·k2) · ( W_N^(n2·k1) · Σ_n1 x[n1·C + n2] · W_R^(n1·k1) )
//! ```
//!
//! so a pass ([`Plan`]) is R-point FFTs down the C columns of x viewed as an R×C matrix and a
//! twiddle by W_N^(n2·k1) ([`columns_and_twiddle`]), a transpose (the remap, each program's
//! own), and C-point FFTs along the R rows ([`row_ffts`]). Columns are dealt cyclically
//! (column n2 on rank n2 mod P, its R points contiguous), rows too (row k1 on rank k1 mod P).
//! The inverse, conj(FFT(conj X))/N ([`conjugate`]), is the same algorithm with R and C
//! exchanged. The input ([`input`], [`fill_input`]), the direct DFT at 16 sample bins and the
//! energy ([`sample_bins`], [`reference()`]), the bins found after the forward pass
//! ([`snapshot`]) and the check of both ([`verify`]) are here too.

use crate::{eprint_line, hash, must, Ctx};
use bytemuck::{Pod, Zeroable};
use std::ops::{Add, Mul, Sub};
use volley_global::{Global, Op};

/// The number of points `--size` asks for (2^15 for `test`, `default` by default), or exits
/// with status 2, rank 0 saying why (`program`: ...), when it is not a power of two of at
/// least 4.
pub fn points(ctx: &Ctx<'_, '_>, program: &str, default: u64) -> usize {
    let n = ctx.size.pick(1 << 15, default) as usize;
    if !n.is_power_of_two() || n < 4 {
        if ctx.me() == 0 {
            eprint_line(&format!(
                "{program}: the number of points must be a power of two, at least 4 (not {n})"
            ));
        }
        std::process::exit(2);
    }
    n
}

/// A complex number, plain data so that it travels in global operations.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
pub struct C64 {
    /// The real part.
    pub re: f64,
    /// The imaginary part.
    pub im: f64,
}

impl C64 {
    /// 0 + 0i.
    pub const ZERO: C64 = C64 { re: 0.0, im: 0.0 };

    /// e^(i·angle).
    pub fn cis(angle: f64) -> Self {
        let (im, re) = angle.sin_cos();
        C64 { re, im }
    }

    /// |z|².
    pub fn norm_sqr(self) -> f64 {
        self.re * self.re + self.im * self.im
    }
}

impl Add for C64 {
    type Output = C64;
    fn add(self, o: C64) -> C64 {
        C64 {
            re: self.re + o.re,
            im: self.im + o.im,
        }
    }
}

impl Sub for C64 {
    type Output = C64;
    fn sub(self, o: C64) -> C64 {
        C64 {
            re: self.re - o.re,
            im: self.im - o.im,
        }
    }
}

impl Mul for C64 {
    type Output = C64;
    fn mul(self, o: C64) -> C64 {
        C64 {
            re: self.re * o.re - self.im * o.im,
            im: self.re * o.im + self.im * o.re,
        }
    }
}

/// An iterative radix-2 FFT of one length (forward, e^(-2πi·jk/len)): a bit-reversal
/// permutation, then log2(len) stages of butterflies whose twiddles are computed once, each
/// stage's contiguous (stage with half-size h uses `twiddles[h-1..2h-1]`).
pub struct Fft {
    rev: Vec<u32>,
    twiddles: Vec<C64>,
}

impl Fft {
    /// The plan for `len` points, a power of two.
    pub fn new(len: usize) -> Self {
        let bits = len.trailing_zeros();
        let rev = (0..len as u32)
            .map(|i| {
                if bits == 0 {
                    0
                } else {
                    i.reverse_bits() >> (32 - bits)
                }
            })
            .collect();
        let mut twiddles = Vec::with_capacity(len.saturating_sub(1));
        let mut h = 1;
        while h < len {
            let step = -std::f64::consts::PI / h as f64;
            twiddles.extend((0..h).map(|k| C64::cis(step * k as f64)));
            h *= 2;
        }
        Fft { rev, twiddles }
    }

    /// Transforms `x` (of the planned length) in place.
    pub fn run(&self, x: &mut [C64]) {
        for (i, &j) in self.rev.iter().enumerate() {
            if i < j as usize {
                x.swap(i, j as usize);
            }
        }
        let mut h = 1;
        while h < x.len() {
            let tw = &self.twiddles[h - 1..2 * h - 1];
            for block in x.chunks_exact_mut(2 * h) {
                let (lo, hi) = block.split_at_mut(h);
                for ((a, b), &w) in lo.iter_mut().zip(hi.iter_mut()).zip(tw) {
                    let t = *b * w;
                    *b = *a - t;
                    *a = *a + t;
                }
            }
            h *= 2;
        }
    }
}

/// W_N^m = e^(-2πi·m/N) for any m < N from two small tables (W_N^(hi·L) · W_N^lo), each
/// entry computed directly, so every power is accurate to a few ulps.
pub struct Powers {
    n: usize,
    bits: u32,
    hi: Vec<C64>,
    lo: Vec<C64>,
}

impl Powers {
    /// The tables for N = `n`, a power of two.
    pub fn new(n: usize) -> Self {
        let bits = n.trailing_zeros().div_ceil(2);
        let l = 1usize << bits;
        let angle = |m: usize| C64::cis(-2.0 * std::f64::consts::PI * m as f64 / n as f64);
        Powers {
            n,
            bits,
            hi: (0..n.div_ceil(l)).map(|h| angle(h * l)).collect(),
            lo: (0..l).map(angle).collect(),
        }
    }

    /// W_N^m, m taken mod N.
    pub fn get(&self, m: usize) -> C64 {
        let m = m & (self.n - 1);
        self.hi[m >> self.bits] * self.lo[m & ((1 << self.bits) - 1)]
    }
}

/// One pass of the six-step algorithm: N = R·C points as an R×C matrix, columns and rows
/// dealt cyclically over P ranks. The forward transform is the plan (R, C); the inverse the
/// plan (C, R), whose columns are the forward pass's rows and whose rows are its columns.
pub struct Plan {
    /// Points, N = R·C.
    pub n: usize,
    /// Rows (the length of the column FFTs).
    pub r: usize,
    /// Columns (the length of the row FFTs).
    pub c: usize,
    /// Ranks.
    pub p: usize,
    fft_r: Fft,
    fft_c: Fft,
    w: Powers,
}

impl Plan {
    /// The pass that views N = `n` points as an R×C matrix, `(r, c)`, on `p` ranks.
    pub fn new(n: usize, (r, c): (usize, usize), p: usize) -> Self {
        Plan {
            n,
            r,
            c,
            p,
            fft_r: Fft::new(r),
            fft_c: Fft::new(c),
            w: Powers::new(n),
        }
    }

    /// The shape of the forward pass for N: R ≥ C, both powers of two.
    pub fn forward_shape(n: usize) -> (usize, usize) {
        let k = n.trailing_zeros();
        (1 << k.div_ceil(2), 1 << (k / 2))
    }

    /// The forward pass for N points on `p` ranks, (R, C) = [`Plan::forward_shape`], and the
    /// inverse, (C, R).
    pub fn forward_and_inverse(n: usize, p: usize) -> (Plan, Plan) {
        let (r, c) = Plan::forward_shape(n);
        (Plan::new(n, (r, c), p), Plan::new(n, (c, r), p))
    }

    /// Columns rank `s` holds (n2 ≡ s mod P).
    pub fn cols_of(&self, s: usize) -> usize {
        (self.c + self.p - 1 - s) / self.p
    }

    /// Columns of the ranks before `s`: where `s`'s block starts in every inbox, in rows.
    pub fn cols_before(&self, s: usize) -> usize {
        (0..s).map(|t| self.cols_of(t)).sum()
    }

    /// Rows rank `d` holds after the transpose (k1 ≡ d mod P).
    pub fn rows_of(&self, d: usize) -> usize {
        (self.r + self.p - 1 - d) / self.p
    }

    /// Where bin k1 + R·k2 of this pass's output is: (rank, index in its rows).
    pub fn locate_output(&self, k: usize) -> (usize, usize) {
        let (k1, k2) = (k % self.r, k / self.r);
        (k1 % self.p, (k1 / self.p) * self.c + k2)
    }
}

/// The input point `x[n]`, components in [-0.5, 0.5).
pub fn input(n: usize) -> C64 {
    let unit = |h: u64| (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
    C64 {
        re: unit(hash(11, 2 * n as u64)),
        im: unit(hash(11, 2 * n as u64 + 1)),
    }
}

/// Fills this rank's columns of the input: column j (n2 = j·P + me) at `[j·R, (j+1)·R)`.
pub fn fill_input(plan: &Plan, me: usize, cols: &mut [C64]) {
    for (j, col) in cols.chunks_exact_mut(plan.r).enumerate() {
        let n2 = j * plan.p + me;
        for (n1, v) in col.iter_mut().enumerate() {
            *v = input(n1 * plan.c + n2);
        }
    }
}

/// Side of the tiles the remaps walk: TILE columns × TILE rows at a time keeps both the local
/// columns read and what is written (the destination rows, on `hw` directly, or the packed
/// block) within a few pages.
pub const TILE: usize = 32;

/// Steps 1–2: R-point FFTs of the local columns, then the twiddle W_N^(n2·k1).
pub fn columns_and_twiddle(plan: &Plan, me: usize, cols: &mut [C64]) {
    for (j, col) in cols.chunks_exact_mut(plan.r).enumerate() {
        plan.fft_r.run(col);
        let n2 = j * plan.p + me;
        for (k1, v) in col.iter_mut().enumerate() {
            *v = *v * plan.w.get(n2 * k1);
        }
    }
}

/// Step 4: C-point FFTs of the local rows; X[k1 + R·k2] is then at `rows[i·C + k2]` for
/// k1 = i·P + me.
pub fn row_ffts(plan: &Plan, rows: &mut [C64]) {
    for row in rows.chunks_exact_mut(plan.c) {
        plan.fft_c.run(row);
    }
}

/// `v := conj(v)·scale` for every element.
pub fn conjugate(xs: &mut [C64], scale: f64) {
    for v in xs {
        *v = C64 {
            re: v.re * scale,
            im: -v.im * scale,
        };
    }
}

/// The output bins the check compares with a direct DFT.
pub fn sample_bins(n: usize) -> Vec<usize> {
    (0..16).map(|t| (hash(13, t) % n as u64) as usize).collect()
}

/// What the check needs from the input, summed over every rank: the direct DFT at each
/// sample bin (Σ_n `x[n]`·W_N^(n·k)) and the energy Σ|x|².
pub fn reference(g: &Global<'_>, plan: &Plan, cols: &[C64], bins: &[usize]) -> (Vec<C64>, f64) {
    let me = g.my_proc();
    let mut sums = vec![C64::ZERO; bins.len()];
    let mut energy = 0.0;
    for (j, col) in cols.chunks_exact(plan.r).enumerate() {
        let n2 = j * plan.p + me;
        for (n1, &x) in col.iter().enumerate() {
            let n = n1 * plan.c + n2;
            energy += x.norm_sqr();
            for (s, &k) in sums.iter_mut().zip(bins) {
                *s = *s + x * plan.w.get(n.wrapping_mul(k));
            }
        }
    }
    must(
        me,
        "all_reduce",
        g.all_reduce(bytemuck::cast_slice_mut::<C64, f64>(&mut sums), Op::Sum),
    );
    (
        sums,
        must(me, "all_reduce", g.all_reduce_one(energy, Op::Sum)),
    )
}

/// The sample bins of X this rank holds (`rows`, its part of X), as (sample, value).
pub fn snapshot(plan: &Plan, me: usize, rows: &[C64], bins: &[usize]) -> Vec<(usize, C64)> {
    bins.iter()
        .map(|&k| plan.locate_output(k))
        .enumerate()
        .filter(|&(_, (owner, _))| owner == me)
        .map(|(t, (_, at))| (t, rows[at]))
        .collect()
}

/// The check after the timed phase (collective): damages the round trip's first point on rank
/// 0 under `--corrupt`, makes sure every sample bin was found on some rank (`got`, this
/// rank's [`snapshot`]), then [`check`]s this rank's bins against the direct DFT `want`
/// ([`reference()`]) and its points of the round trip `back` against the input.
pub fn verify(
    ctx: &Ctx<'_, '_>,
    plan: &Plan,
    got: &[(usize, C64)],
    want: (Vec<C64>, f64),
    bins: &[usize],
    back: &mut [C64],
) -> Result<(), String> {
    let (g, me) = (ctx.g, ctx.me());
    if ctx.corrupt && me == 0 && !back.is_empty() {
        back[0].re += 1.0;
    }
    let checked = must(me, "all_reduce", g.all_reduce_one(got.len(), Op::Sum));
    if checked == bins.len() {
        check(plan, me, got, want, bins, back)
    } else {
        Err(format!(
            "{checked} sample bins were found, not {}",
            bins.len()
        ))
    }
}

/// Compares this rank's sample bins of X with the direct DFT (relative to the RMS of X,
/// ‖x‖₂), and every point of the round trip with the input (relative to the RMS of x).
pub fn check(
    plan: &Plan,
    me: usize,
    got: &[(usize, C64)],
    (dft, energy): (Vec<C64>, f64),
    bins: &[usize],
    back: &[C64],
) -> Result<(), String> {
    let scale = energy.sqrt();
    for &(t, v) in got {
        let (k, want) = (bins[t], dft[t]);
        let err = (v - want).norm_sqr().sqrt() / scale;
        if err >= 1e-9 || err.is_nan() {
            return Err(format!(
                "bin {k}: the FFT gives {v:?}, the direct DFT {want:?} (relative error {err:.2e})"
            ));
        }
    }
    let rms = (energy / plan.n as f64).sqrt();
    for (j, col) in back.chunks_exact(plan.r).enumerate() {
        let n2 = j * plan.p + me;
        for (n1, &v) in col.iter().enumerate() {
            let n = n1 * plan.c + n2;
            let err = (v - input(n)).norm_sqr().sqrt() / rms;
            if err >= 1e-9 || err.is_nan() {
                return Err(format!(
                    "point {n} comes back from the inverse as {v:?}, not {:?} (relative error {err:.2e})",
                    input(n)
                ));
            }
        }
    }
    Ok(())
}
