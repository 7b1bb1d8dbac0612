//! 1-D complex FFT with the remap done by one bulk store per destination (seed 004's `fftb`).
//!
//! The same six-step (transpose) algorithm as `fft`, for N = R·C points, R and C powers of
//! two. With n = n1·C + n2 and k = k1 + R·k2,
//!
//! ```text
//! X[k1 + R·k2] = Σ_n2 W_C^(n2·k2) · ( W_N^(n2·k1) · Σ_n1 x[n1·C + n2] · W_R^(n1·k1) )
//! ```
//!
//! R-point FFTs down the C columns of x viewed as an R×C matrix, a twiddle by W_N^(n2·k1), a
//! transpose, and C-point FFTs along the R rows. Columns are dealt cyclically (column n2 on
//! rank n2 mod P, contiguous there) and so are the rows after the transpose (row k1 on rank
//! k1 mod P), exactly as in `fft`.
//!
//! Only the remap differs: each rank packs, for every destination d, the block of its
//! columns' elements that belong to d's rows (row-major, rows_d × cols_me) and sends it with
//! one `bulk_store` to its own place in d's inbox (a `Blocked` spread array, blocks ordered
//! by source rank); one `all_store_sync` ends the phase, each rank unpacks its inbox into its
//! rows, and a barrier frees the inboxes for the next remap. P messages of N/P² elements per
//! rank instead of N/P messages of one: the cost is now bandwidth and the local packing,
//! which the strategies share.
//!
//! The timed phase transforms forward and back: the inverse, conj(FFT(conj X))/N, is the same
//! algorithm with R and C exchanged, which reads X where the forward pass left it and leaves
//! x where it started. The check compares 16 bins of X, chosen by hash, with a direct DFT,
//! and every point of the round trip with the input, both to a relative 1e-9. Any P works;
//! N must be a power of two.

use bytemuck::{Pod, Zeroable};
use std::ops::{Add, Mul, Sub};
use volley_apps::{eprint_line, hash, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, Op, SpreadArray};

/// A complex number, plain data so that it travels in global operations.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
struct C64 {
    re: f64,
    im: f64,
}

impl C64 {
    const ZERO: C64 = C64 { re: 0.0, im: 0.0 };

    /// e^(i·angle).
    fn cis(angle: f64) -> Self {
        let (im, re) = angle.sin_cos();
        C64 { re, im }
    }

    fn norm_sqr(self) -> f64 {
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
struct Fft {
    rev: Vec<u32>,
    twiddles: Vec<C64>,
}

impl Fft {
    fn new(len: usize) -> Self {
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
    fn run(&self, x: &mut [C64]) {
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
struct Powers {
    n: usize,
    bits: u32,
    hi: Vec<C64>,
    lo: Vec<C64>,
}

impl Powers {
    fn new(n: usize) -> Self {
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
    fn get(&self, m: usize) -> C64 {
        let m = m & (self.n - 1);
        self.hi[m >> self.bits] * self.lo[m & ((1 << self.bits) - 1)]
    }
}

/// One pass of the six-step algorithm: N = R·C points as an R×C matrix, columns and rows
/// dealt cyclically over P ranks. The forward transform is the plan (R, C); the inverse the
/// plan (C, R), whose columns are the forward pass's rows and whose rows are its columns.
struct Plan {
    n: usize,
    /// Rows (the length of the column FFTs).
    r: usize,
    /// Columns (the length of the row FFTs).
    c: usize,
    p: usize,
    fft_r: Fft,
    fft_c: Fft,
    w: Powers,
}

impl Plan {
    fn new(n: usize, (r, c): (usize, usize), p: usize) -> Self {
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
    fn forward_shape(n: usize) -> (usize, usize) {
        let k = n.trailing_zeros();
        (1 << k.div_ceil(2), 1 << (k / 2))
    }

    /// Columns rank `s` holds (n2 ≡ s mod P).
    fn cols_of(&self, s: usize) -> usize {
        (self.c + self.p - 1 - s) / self.p
    }

    /// Columns of the ranks before `s`: where `s`'s block starts in every inbox, in rows.
    fn cols_before(&self, s: usize) -> usize {
        (0..s).map(|t| self.cols_of(t)).sum()
    }

    /// Rows rank `d` holds after the transpose (k1 ≡ d mod P).
    fn rows_of(&self, d: usize) -> usize {
        (self.r + self.p - 1 - d) / self.p
    }

    /// Where bin k1 + R·k2 of this pass's output is: (rank, index in its rows).
    fn locate_output(&self, k: usize) -> (usize, usize) {
        let (k1, k2) = (k % self.r, k / self.r);
        (k1 % self.p, (k1 / self.p) * self.c + k2)
    }
}

/// The input point x[n], components in [-0.5, 0.5).
fn input(n: usize) -> C64 {
    let unit = |h: u64| (h >> 11) as f64 / (1u64 << 53) as f64 - 0.5;
    C64 {
        re: unit(hash(11, 2 * n as u64)),
        im: unit(hash(11, 2 * n as u64 + 1)),
    }
}

/// Fills this rank's columns of the input: column j (n2 = j·P + me) at `[j·R, (j+1)·R)`.
fn fill_input(plan: &Plan, me: usize, cols: &mut [C64]) {
    for (j, col) in cols.chunks_exact_mut(plan.r).enumerate() {
        let n2 = j * plan.p + me;
        for (n1, v) in col.iter_mut().enumerate() {
            *v = input(n1 * plan.c + n2);
        }
    }
}

/// Steps 1–2: R-point FFTs of the local columns, then the twiddle W_N^(n2·k1).
fn columns_and_twiddle(plan: &Plan, me: usize, cols: &mut [C64]) {
    for (j, col) in cols.chunks_exact_mut(plan.r).enumerate() {
        plan.fft_r.run(col);
        let n2 = j * plan.p + me;
        for (k1, v) in col.iter_mut().enumerate() {
            *v = *v * plan.w.get(n2 * k1);
        }
    }
}

/// Step 3, the transpose: one block per destination d, rows k1 ≡ d (mod P) by this rank's
/// columns, packed in `block` and stored in bulk at d's inbox after the blocks of lower
/// ranks; `all_store_sync` ends the phase, this rank's rows are unpacked from its inbox into
/// `rows`, and a barrier lets the next remap write the inboxes again.
fn remap(
    g: &Global<'_>,
    plan: &Plan,
    cols: &[C64],
    inbox: &SpreadArray<C64>,
    block: &mut [C64],
    rows: &mut [C64],
) {
    let (me, p) = (g.my_proc(), plan.p);
    for d in (1..=p).map(|o| (me + o) % p) {
        let packed = pack(plan, cols, d, block);
        let at = plan.rows_of(d) * plan.cols_before(me);
        must(me, "bulk_store", g.bulk_store(inbox.ptr_on(d, at), packed));
    }
    must(me, "all_store_sync", g.all_store_sync());
    // SAFETY: all_store_sync returned, so every block is in, and no rank writes the inbox
    // again before the barrier below.
    unpack(plan, me, unsafe { inbox.local_slice() }, rows);
    must(me, "barrier", g.barrier());
}

/// Side of the tiles packing walks (TILE columns × TILE rows), so that both the columns read
/// and the block written stay within a few pages.
const TILE: usize = 32;

/// The elements of `cols` in destination d's rows, row-major (rows_d × this rank's columns),
/// in the front of `buf`.
fn pack<'b>(plan: &Plan, cols: &[C64], d: usize, buf: &'b mut [C64]) -> &'b [C64] {
    let (mine, nrows) = (cols.len() / plan.r, plan.rows_of(d));
    let block = &mut buf[..nrows * mine];
    for j0 in (0..mine).step_by(TILE) {
        for i0 in (0..nrows).step_by(TILE) {
            for j in j0..(j0 + TILE).min(mine) {
                let col = &cols[j * plan.r..(j + 1) * plan.r];
                for i in i0..(i0 + TILE).min(nrows) {
                    block[i * mine + j] = col[i * plan.p + d];
                }
            }
        }
    }
    block
}

/// This rank's rows (row i is k1 = i·P + me, C elements) from its inbox, where source s's
/// block (rows × s's columns, row-major) starts at rows·cols_before(s) and its column j is
/// n2 = j·P + s.
fn unpack(plan: &Plan, me: usize, inbox: &[C64], rows: &mut [C64]) {
    let (p, c) = (plan.p, plan.c);
    let nrows = plan.rows_of(me);
    let blocks: Vec<(usize, usize)> = (0..p)
        .map(|s| (nrows * plan.cols_before(s), plan.cols_of(s)))
        .collect();
    for (i, row) in rows.chunks_exact_mut(c).enumerate() {
        for (s, &(start, ncols)) in blocks.iter().enumerate() {
            let src = &inbox[start + i * ncols..start + (i + 1) * ncols];
            for (j, &v) in src.iter().enumerate() {
                row[j * p + s] = v;
            }
        }
    }
}

/// Step 4: C-point FFTs of the local rows; X[k1 + R·k2] is then at `rows[i·C + k2]` for
/// k1 = i·P + me.
fn row_ffts(plan: &Plan, rows: &mut [C64]) {
    for row in rows.chunks_exact_mut(plan.c) {
        plan.fft_c.run(row);
    }
}

/// A vector whose pages are mapped now, not in the timed phase (the buffers of the remap,
/// allocated before it as the spread arrays of `fft` are).
fn touched(len: usize) -> Vec<C64> {
    let mut v = Vec::with_capacity(len);
    v.resize(len, C64 { re: 1.0, im: 0.0 });
    v
}

/// `v := conj(v)·scale` for every element.
fn conjugate(xs: &mut [C64], scale: f64) {
    for v in xs {
        *v = C64 {
            re: v.re * scale,
            im: -v.im * scale,
        };
    }
}

/// The output bins the check compares with a direct DFT.
fn sample_bins(n: usize) -> Vec<usize> {
    (0..16).map(|t| (hash(13, t) % n as u64) as usize).collect()
}

/// What the check needs from the input, summed over every rank: the direct DFT at each
/// sample bin (Σ_n x[n]·W_N^(n·k)) and the energy Σ|x|².
fn reference(g: &Global<'_>, plan: &Plan, cols: &[C64], bins: &[usize]) -> (Vec<C64>, f64) {
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
fn snapshot(plan: &Plan, me: usize, rows: &[C64], bins: &[usize]) -> Vec<(usize, C64)> {
    bins.iter()
        .map(|&k| plan.locate_output(k))
        .enumerate()
        .filter(|&(_, (owner, _))| owner == me)
        .map(|(t, (_, at))| (t, rows[at]))
        .collect()
}

/// Compares this rank's sample bins of X with the direct DFT (relative to the RMS of X,
/// ‖x‖₂), and every point of the round trip with the input (relative to the RMS of x).
fn check(
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

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let n = ctx.size.pick(1 << 15, 1 << 25) as usize;
    if !n.is_power_of_two() || n < 4 {
        if me == 0 {
            eprint_line(&format!(
                "fftb: the number of points must be a power of two, at least 4 (not {n})"
            ));
        }
        std::process::exit(2);
    }
    let (r, c) = Plan::forward_shape(n);
    let (forward, inverse) = (Plan::new(n, (r, c), p), Plan::new(n, (c, r), p));
    let mut x = vec![C64::ZERO; forward.cols_of(me) * r];
    fill_input(&forward, me, &mut x);
    let bins = sample_bins(n);
    let want = reference(g, &forward, &x, &bins);
    let per_rank = (forward.rows_of(0) * c).max(inverse.rows_of(0) * r);
    let inbox = must(
        me,
        "alloc",
        g.all_spread_alloc::<C64>(p * per_rank, Layout::Blocked),
    );
    let mut block = touched(
        (forward.rows_of(0) * forward.cols_of(me)).max(inverse.rows_of(0) * inverse.cols_of(me)),
    );
    let mut xs = touched(forward.rows_of(me) * c);
    let (got, seconds) = ctx.timed(|| {
        // Forward: x in `x` (this rank's columns) → X in `xs` (its rows).
        columns_and_twiddle(&forward, me, &mut x);
        remap(g, &forward, &x, &inbox, &mut block, &mut xs);
        row_ffts(&forward, &mut xs);
        let got = snapshot(&forward, me, &xs, &bins);
        // Inverse, conj(FFT(conj X))/N: X in `xs` → x back in `x`.
        conjugate(&mut xs, 1.0);
        columns_and_twiddle(&inverse, me, &mut xs);
        remap(g, &inverse, &xs, &inbox, &mut block, &mut x);
        row_ffts(&inverse, &mut x);
        conjugate(&mut x, 1.0 / n as f64);
        got
    });
    let back = &mut x;
    if ctx.corrupt && me == 0 && !back.is_empty() {
        back[0].re += 1.0;
    }
    let checked = must(me, "all_reduce", g.all_reduce_one(got.len(), Op::Sum));
    let verified = if checked == bins.len() {
        check(&forward, me, &got, want, &bins, back)
    } else {
        Err(format!(
            "{checked} sample bins were found, not {}",
            bins.len()
        ))
    };
    g.free(inbox);
    Outcome {
        problem: format!("{n} points"),
        seconds,
        verified,
    }
}

fn main() {
    run("fftb", |_, _| (), body);
}
