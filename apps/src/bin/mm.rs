//! Blocked matrix multiply with split-phase block gets (seed 004's `mm`).
//!
//! C = A·B for n×n matrices of f64 cut into m×m blocks (m = BLOCK, the edge blocks padded
//! with zeros), nb = ⌈n/m⌉ blocks a side. The blocks of A and B live in spread arrays of
//! layout `BlockCyclic(m²)`: block t = bi·nb + bj, its m² elements contiguous, on rank
//! t mod P. Each rank computes the blocks of C it owns by the same rule, so any P works:
//!
//! ```text
//! for each of my blocks C(bi, bj):  for k in 0..nb:  C(bi, bj) += A(bi, k) · B(k, bj)
//! ```
//!
//! Every A and B block it needs is fetched through a global pointer with `bulk_get`, wherever
//! it lives (its own are copied the same way), and prefetched: the gets of the next pair of
//! blocks are started in a `phase` whose body multiplies the current pair, and the phase's
//! sync completes them (the sum over k starts at a different k for each block of C, so the
//! ranks spread their requests over the owners). Remote block reads that the owner must
//! serve while it computes: under `proc` a request waits until its owner next communicates,
//! under `np` its progress thread answers at once, under `hw` on one node the reader copies
//! the block itself. The seed saw mm gain from the NP (1.25× on the Meiko).
//!
//! The check is the identity C·x = A·(B·x) for a random vector x, each product computed
//! from the blocks as generated and summed with `all_reduce`, to a relative 1e-9.

use volley_apps::matrix::{block, block_times_vector, compare, element, multiply_add, vector};
use volley_apps::{must, run, Ctx, Outcome};
use volley_global::{Global, GlobalPtr, Layout, Op, SpreadArray};

/// Block order m: blocks of m² f64 (8 KiB) are what one get moves.
const BLOCK: usize = 32;

/// A block's position (block row, block column).
type At = (usize, usize);

/// The matrices' shape.
#[derive(Clone, Copy)]
struct Shape {
    /// Matrix order.
    n: usize,
    /// Blocks per side.
    nb: usize,
}

impl Shape {
    /// The blocks a rank owns (t ≡ rank mod P), as (bi, bj), in local order.
    fn owned(&self, rank: usize, p: usize) -> impl Iterator<Item = At> + '_ {
        (rank..self.nb * self.nb)
            .step_by(p)
            .map(|t| (t / self.nb, t % self.nb))
    }
}

fn a_elem(n: usize, r: usize, c: usize) -> f64 {
    element(31, n, r, c)
}

fn b_elem(n: usize, r: usize, c: usize) -> f64 {
    element(32, n, r, c)
}

/// A spread array of blocks, filled with this rank's blocks of the matrix `elem` gives.
fn distribute(
    g: &Global<'_>,
    shape: &Shape,
    elem: impl Fn(usize, usize) -> f64,
) -> SpreadArray<f64> {
    let me = g.my_proc();
    let len = shape.nb * shape.nb * BLOCK * BLOCK;
    let blocks = must(
        me,
        "alloc",
        g.all_spread_alloc::<f64>(len, Layout::BlockCyclic(BLOCK * BLOCK)),
    );
    // SAFETY: no rank accesses another's blocks before the barrier that starts the timed
    // phase; this is the only slice of this rank's part.
    let mine = unsafe { blocks.local_slice_mut() };
    for (dst, (bi, bj)) in mine
        .chunks_exact_mut(BLOCK * BLOCK)
        .zip(shape.owned(me, g.procs()))
    {
        dst.copy_from_slice(&block(shape.n, BLOCK, (bi, bj), &elem));
    }
    blocks
}

/// The global pointer to block (bi, bj) of a spread array of blocks.
fn block_ptr(blocks: &SpreadArray<f64>, shape: &Shape, (bi, bj): At) -> GlobalPtr<f64> {
    blocks.ptr((bi * shape.nb + bj) * BLOCK * BLOCK)
}

/// The timed part: every block product of this rank's blocks of C, the next pair of blocks
/// always on its way while the current pair is multiplied. Returns this rank's C blocks.
fn multiply(g: &Global<'_>, shape: &Shape, a: &SpreadArray<f64>, b: &SpreadArray<f64>) -> Vec<f64> {
    let me = g.my_proc();
    let mm = BLOCK * BLOCK;
    // (index of the C block here, A block, B block) in the order they are multiplied; the
    // sum over k starts at k = bi + bj (mod nb), so that the ranks do not all ask the same
    // owners for the same blocks at once.
    let nb = shape.nb;
    let products: Vec<(usize, At, At)> = shape
        .owned(me, g.procs())
        .enumerate()
        .flat_map(|(l, (bi, bj))| {
            (0..nb)
                .map(move |s| (bi + bj + s) % nb)
                .map(move |k| (l, (bi, k), (k, bj)))
        })
        .collect();
    let mut c = vec![0.0; shape.owned(me, g.procs()).count() * mm];
    let (mut cur_a, mut cur_b) = (vec![0.0; mm], vec![0.0; mm]);
    let (mut next_a, mut next_b) = (vec![0.0; mm], vec![0.0; mm]);
    if let Some(&(_, ab, bb)) = products.first() {
        let first = g.phase(|s| {
            s.bulk_get(&mut cur_a, block_ptr(a, shape, ab))?;
            s.bulk_get(&mut cur_b, block_ptr(b, shape, bb))
        });
        must(me, "get", first);
    }
    for (t, &(l, _, _)) in products.iter().enumerate() {
        let step = g.phase(|s| {
            if let Some(&(_, ab, bb)) = products.get(t + 1) {
                s.bulk_get(&mut next_a, block_ptr(a, shape, ab))?;
                s.bulk_get(&mut next_b, block_ptr(b, shape, bb))?;
            }
            multiply_add(&cur_a, &cur_b, &mut c[l * mm..(l + 1) * mm], BLOCK);
            Ok(())
        });
        must(me, "get", step);
        std::mem::swap(&mut cur_a, &mut next_a);
        std::mem::swap(&mut cur_b, &mut next_b);
    }
    c
}

/// Checks C·x = A·(B·x) for a random x, each product from the blocks as generated, to a
/// relative 1e-9 (rank 0 reports: every rank has the same vectors).
fn check(g: &Global<'_>, shape: &Shape, c: &[f64]) -> Result<(), String> {
    let (me, p, n) = (g.my_proc(), g.procs(), shape.n);
    let len = shape.nb * BLOCK;
    let x = vector(33, n, len);
    // y = M·v, M's blocks those this rank owns given by `blk` (summed over ranks).
    let times = |blk: &dyn Fn(usize, At) -> Vec<f64>, v: &[f64]| {
        let mut y = vec![0.0; len];
        for (l, at) in shape.owned(me, p).enumerate() {
            block_times_vector(&blk(l, at), BLOCK, at, v, &mut y);
        }
        must(me, "all_reduce", g.all_reduce(&mut y, Op::Sum));
        y
    };
    let mm = BLOCK * BLOCK;
    let cx = times(&|l, _| c[l * mm..(l + 1) * mm].to_vec(), &x);
    let bx = times(&|_, at| block(n, BLOCK, at, |r, c| b_elem(n, r, c)), &x);
    let abx = times(&|_, at| block(n, BLOCK, at, |r, c| a_elem(n, r, c)), &bx);
    compare(me, &cx, &abx)
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me) = (ctx.g, ctx.me());
    let n = ctx.size.pick(200, 2560) as usize;
    let shape = Shape {
        n,
        nb: n.div_ceil(BLOCK),
    };
    let a = distribute(g, &shape, |r, c| a_elem(n, r, c));
    let b = distribute(g, &shape, |r, c| b_elem(n, r, c));
    let (mut c, seconds) = ctx.timed(|| multiply(g, &shape, &a, &b));
    if ctx.corrupt && me == 0 && !c.is_empty() {
        c[0] += 1.0;
    }
    let verified = check(g, &shape, &c);
    g.free(a);
    g.free(b);
    Outcome {
        problem: format!("{n}x{n} matrices"),
        seconds,
        verified,
    }
}

fn main() {
    run("mm", |_, _| (), body);
}
