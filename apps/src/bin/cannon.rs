//! Cannon's matrix multiply with bulk block shifts (seed 004's `cannon`).
//!
//! C = A·B for n×n matrices of f64 on a q×q grid of ranks (P = q², rank r at row r / q,
//! column r mod q), each rank holding one b×b block of A, B and C (b = ⌈n/q⌉, the edge blocks
//! padded with zeros). Cannon's schedule makes every block product a local one:
//!
//! 1. skew: rank (i, j) sends its A(i, j) to (i, j−i) and its B(i, j) to (i−j, j), so that
//!    it then holds A(i, i+j) and B(i+j, j) (indices mod q);
//! 2. q steps of C(i, j) += A·B of the blocks held, then every A block moves one rank left
//!    and every B block one rank up (after the last product there is nothing to move).
//!
//! Every move is one `bulk_put` of a whole block into the neighbour's spread array, into the
//! other of two buffers: a step's puts are started first and the block product runs while
//! they travel (the `phase` syncs after it), then a barrier ends the step, after which
//! every rank's next blocks are in and nobody reads the buffer the following puts
//! overwrite. Bulk, phase-structured communication: the seed expects it to cost about the
//! same under each strategy.
//!
//! P must be a perfect square (1, 4, 9, ...); other counts exit with status 2. The check is
//! the identity C·x = A·(B·x) for a random vector x, each product computed from the blocks
//! as they were generated (not as they travelled) and summed with `all_reduce`, to a relative
//! 1e-9.

use volley_apps::matrix::{block, block_times_vector, compare, element, multiply_add, vector};
use volley_apps::{eprint_line, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, Op, SpreadArray};

/// The grid and the blocks.
#[derive(Clone, Copy)]
struct Grid {
    /// Matrix order.
    n: usize,
    /// Ranks per grid row and column.
    q: usize,
    /// Block order.
    b: usize,
}

impl Grid {
    /// The rank at grid position (i, j), indices taken mod q.
    fn rank(&self, i: usize, j: usize) -> usize {
        (i % self.q) * self.q + j % self.q
    }
}

fn a_elem(n: usize, r: usize, c: usize) -> f64 {
    element(21, n, r, c)
}

fn b_elem(n: usize, r: usize, c: usize) -> f64 {
    element(22, n, r, c)
}

/// Two buffers of one block per rank, for A or B.
struct Buffers([SpreadArray<f64>; 2]);

impl Buffers {
    fn new(g: &Global<'_>, grid: &Grid) -> Self {
        let me = g.my_proc();
        let len = g.procs() * grid.b * grid.b;
        let alloc = || must(me, "alloc", g.all_spread_alloc::<f64>(len, Layout::Blocked));
        Buffers([alloc(), alloc()])
    }

    fn free(self, g: &Global<'_>) {
        let [x, y] = self.0;
        g.free(x);
        g.free(y);
    }
}

/// The timed part: the skew, then q steps of block product and shift. Returns C(i, j).
fn cannon(
    g: &Global<'_>,
    grid: &Grid,
    a0: &[f64],
    b0: &[f64],
    a: &Buffers,
    b: &Buffers,
) -> Vec<f64> {
    let me = g.my_proc();
    let (i, j, q) = (me / grid.q, me % grid.q, grid.q);
    must(
        me,
        "skew",
        g.phase(|s| {
            s.bulk_put(a.0[0].ptr_on(grid.rank(i, j + q - i), 0), a0)?;
            s.bulk_put(b.0[0].ptr_on(grid.rank(i + q - j, j), 0), b0)
        }),
    );
    must(me, "barrier", g.barrier());
    let (left, up) = (grid.rank(i, j + q - 1), grid.rank(i + q - 1, j));
    let mut c = vec![0.0; grid.b * grid.b];
    for step in 0..q {
        let (cur, next) = (step % 2, (step + 1) % 2);
        // SAFETY: the `cur` buffers were written in the previous step (or the skew), which a
        // barrier ended; this step's puts go to the `next` buffers, and the next writes to
        // `cur` come only after this step's barrier.
        let (my_a, my_b) = unsafe { (a.0[cur].local_slice(), b.0[cur].local_slice()) };
        let shifted = g.phase(|s| {
            if step + 1 < q {
                s.bulk_put(a.0[next].ptr_on(left, 0), my_a)?;
                s.bulk_put(b.0[next].ptr_on(up, 0), my_b)?;
            }
            multiply_add(my_a, my_b, &mut c, grid.b);
            Ok(())
        });
        must(me, "shift", shifted);
        must(me, "barrier", g.barrier());
    }
    c
}

/// Checks C·x = A·(B·x) for a random x, each product from the generated blocks, to a
/// relative 1e-9 (rank 0 reports: every rank has the same vectors).
fn check(g: &Global<'_>, grid: &Grid, a0: &[f64], b0: &[f64], c: &[f64]) -> Result<(), String> {
    let me = g.my_proc();
    let (i, j, m) = (me / grid.q, me % grid.q, grid.b);
    let len = grid.q * m;
    let x = vector(23, grid.n, len);
    let times = |blk: &[f64], v: &[f64]| {
        let mut y = vec![0.0; len];
        block_times_vector(blk, m, (i, j), v, &mut y);
        must(me, "all_reduce", g.all_reduce(&mut y, Op::Sum));
        y
    };
    let cx = times(c, &x);
    let abx = times(a0, &times(b0, &x));
    compare(me, &cx, &abx)
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me, p) = (ctx.g, ctx.me(), ctx.procs());
    let q = (1..=p).take_while(|q| q * q <= p).last().unwrap_or(1);
    if q * q != p {
        if me == 0 {
            eprint_line(&format!(
                "cannon: the number of ranks must be a perfect square (1, 4, 9, 16, ...) for a \
                 square grid, not {p}"
            ));
        }
        std::process::exit(2);
    }
    let n = ctx.size.pick(100, 2560) as usize;
    let grid = Grid {
        n,
        q,
        b: n.div_ceil(q),
    };
    let (i, j) = (me / q, me % q);
    let a0 = block(n, grid.b, (i, j), |r, c| a_elem(n, r, c));
    let b0 = block(n, grid.b, (i, j), |r, c| b_elem(n, r, c));
    let (a, b) = (Buffers::new(g, &grid), Buffers::new(g, &grid));
    let (mut c, seconds) = ctx.timed(|| cannon(g, &grid, &a0, &b0, &a, &b));
    if ctx.corrupt && me == 0 {
        c[0] += 1.0;
    }
    let verified = check(g, &grid, &a0, &b0, &c);
    a.free(g);
    b.free(g);
    Outcome {
        problem: format!("{n}x{n} matrices"),
        seconds,
        verified,
    }
}

fn main() {
    run("cannon", |_, _| (), body);
}
