//! 1-D complex FFT with the remap done by one signaling store per element (seed 004's `fft`).
//!
//! The six-step (transpose) algorithm for N = R·C points, R and C powers of two. With
//! n = n1·C + n2 and k = k1 + R·k2,
//!
//! ```text
//! X[k1 + R·k2] = Σ_n2 W_C^(n2·k2) · ( W_N^(n2·k1) · Σ_n1 x[n1·C + n2] · W_R^(n1·k1) )
//! ```
//!
//! so the transform is R-point FFTs down the C columns of x viewed as an R×C matrix, a twiddle
//! by W_N^(n2·k1), a transpose, and C-point FFTs along the R rows. Columns are dealt
//! cyclically (column n2 on rank n2 mod P, its R points contiguous: a `BlockCyclic(R)` spread
//! array), rows too (row k1 on rank k1 mod P: `BlockCyclic(C)`), so every local FFT runs on
//! contiguous local data and the transpose is the only communication. When P divides R and
//! C this is the classic Split-C layout: x[n] and X[k] both live on rank `index mod P`.
//!
//! The remap is fine-grained: every element is `store`d to its place in the destination's
//! row (16 bytes per one-way message), and one `all_store_sync` ends the phase. Stores
//! rather than puts because nothing needs to come back to the sender: the owner counts
//! the bytes in. This is the small-transfer pattern whose cost follows the per-message
//! overhead of each strategy; `fftb` does the same with one bulk store per destination.
//!
//! The timed phase transforms forward and back: the inverse, conj(FFT(conj X))/N, is the same
//! algorithm with R and C exchanged, which reads X where the forward pass left it (row k1 is
//! a column of the inverse) and leaves x where it started, after a second remap. The check
//! compares 16 bins of X, chosen by hash, with a direct DFT (each rank sums its own points'
//! terms, one `all_reduce`), and every point of the round trip with the input, both to a
//! relative 1e-9. Any P works (ranks hold unequal numbers of rows and columns when P does not
//! divide them); N must be a power of two. All but the remap is `volley_apps::fft`, shared
//! with `fftb`.

use volley_apps::fft::{
    columns_and_twiddle, conjugate, fill_input, points, reference, row_ffts, sample_bins, snapshot,
    verify, Plan, C64, TILE,
};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

/// Step 3, the transpose: element (k1, n2) is stored, one message each, to index k1·C + n2
/// of `rows` (row k1 on rank k1 mod P); `all_store_sync` ends the phase.
fn remap(g: &Global<'_>, plan: &Plan, cols: &[C64], rows: &SpreadArray<C64>) {
    let me = g.my_proc();
    let ncols = cols.len() / plan.r;
    for j0 in (0..ncols).step_by(TILE) {
        for k0 in (0..plan.r).step_by(TILE) {
            for j in j0..(j0 + TILE).min(ncols) {
                let n2 = j * plan.p + me;
                for k1 in k0..(k0 + TILE).min(plan.r) {
                    let v = &cols[j * plan.r + k1];
                    must(me, "store", g.store(rows.ptr(k1 * plan.c + n2), v));
                }
            }
        }
    }
    must(me, "all_store_sync", g.all_store_sync());
}

/// Steps 1–3 of a pass: column FFTs and twiddle on this rank's columns `cols`, then the
/// transpose into `rows` (collective).
fn columns_and_remap(g: &Global<'_>, plan: &Plan, cols: &mut [C64], rows: &SpreadArray<C64>) {
    columns_and_twiddle(plan, g.my_proc(), cols);
    remap(g, plan, cols, rows);
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let n = points(ctx, "fft", 1 << 24);
    let (forward, inverse) = Plan::forward_and_inverse(n, p);
    let alloc = |block| {
        must(
            me,
            "alloc",
            g.all_spread_alloc::<C64>(n, Layout::BlockCyclic(block)),
        )
    };
    let (cols, rows) = (alloc(forward.r), alloc(forward.c));
    // SAFETY: no rank accesses `cols` before the barrier that starts the timed phase.
    let x = unsafe { cols.local_slice_mut() };
    fill_input(&forward, me, x);
    let bins = sample_bins(n);
    let want = reference(g, &forward, x, &bins);
    let (got, seconds) = ctx.timed(|| {
        // Forward: x in `cols` → X in `rows`.
        // SAFETY: no rank writes `cols` before the inverse remap, which starts only after
        // every rank's forward all_store_sync, when this slice is no longer used.
        columns_and_remap(g, &forward, unsafe { cols.local_slice_mut() }, &rows);
        // SAFETY: every store into `rows` is in (the forward all_store_sync) and no rank
        // writes it again; the inverse remap writes `cols`.
        let xs = unsafe { rows.local_slice_mut() };
        row_ffts(&forward, xs);
        let got = snapshot(&forward, me, xs, &bins);
        // Inverse, conj(FFT(conj X))/N: X in `rows` → x in `cols`.
        conjugate(xs, 1.0);
        columns_and_remap(g, &inverse, xs, &cols);
        // SAFETY: the inverse all_store_sync returned; no rank writes `cols` any more.
        let back = unsafe { cols.local_slice_mut() };
        row_ffts(&inverse, back);
        conjugate(back, 1.0 / n as f64);
        got
    });
    // SAFETY: no rank writes `cols` any more; this is the only slice of it.
    let back = unsafe { cols.local_slice_mut() };
    let verified = verify(ctx, &forward, &got, want, &bins, back);
    g.free(cols);
    g.free(rows);
    Outcome {
        problem: format!("{n} points"),
        seconds,
        verified,
    }
}

fn main() {
    run("fft", |_, _| (), body);
}
