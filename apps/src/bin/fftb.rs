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
//! N must be a power of two. All but the remap is `volley_apps::fft`, shared with `fft`.

use volley_apps::fft::{
    columns_and_twiddle, conjugate, fill_input, points, reference, row_ffts, sample_bins, snapshot,
    verify, Plan, C64, TILE,
};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

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

/// A vector whose pages are mapped now, not in the timed phase (the buffers of the remap,
/// allocated before it as the spread arrays of `fft` are).
fn touched(len: usize) -> Vec<C64> {
    let mut v = Vec::with_capacity(len);
    v.resize(len, C64 { re: 1.0, im: 0.0 });
    v
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let n = points(ctx, "fftb", 1 << 25);
    let (forward, inverse) = Plan::forward_and_inverse(n, p);
    let (r, c) = (forward.r, forward.c);
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
    let verified = verify(ctx, &forward, &got, want, &bins, &mut x);
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
