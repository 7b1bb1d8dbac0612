//! N-body simulation of fish, one blocking remote read per fish (seed 004's `wator`).
//!
//! A school of fish (position, velocity, mass) in a plane, every pair attracting at long range
//! and repelling at short range. The fish live in a blocked spread array; each rank owns a
//! block and computes the forces on its own fish. A step has two phases separated by barriers:
//!
//! 1. **Forces.** The rank walks over *every* fish `j` in index order, reads it with one
//!    blocking `g.read` (its own fish are a local copy, the others a request to the owner),
//!    and then computes the force of fish `j` on each of its own fish. The force of a pair is
//!    averaged over the time step at `SUB` points of the pair's relative motion (about 20
//!    thousand flops, some 5 microseconds, per pair), so each read is followed by a long
//!    stretch of computation: half a millisecond with 400 fish on 4 ranks.
//! 2. **Update.** After a barrier, each rank advances its own fish (semi-implicit Euler) and
//!    writes them into its part of the array; a second barrier ends the step.
//!
//! **The pattern: remote reads served by busy ranks.** Nothing in the compute loop polls (the
//! seed's wator used the X library, where polls could not easily be inserted). Under `proc` a
//! rank serves other ranks' requests only when it communicates itself, so a read addressed to
//! a rank in the middle of its computation waits until that rank next reads, and a rank that
//! walks over its own block (local reads, no communication at all) leaves every reader of that
//! block waiting until it is through: since every rank walks the fish in the same order, the
//! owners' blocks are served one after the other. Under `np` the owner's progress thread
//! answers at once. This is the responsiveness effect that made wator four times faster on the
//! Meiko's network processor, the largest difference in the seed's Table 2.
//!
//! Why the computation per read is long: with a few hundred flops per pair (tens of
//! microseconds per read) a rank's own reads come so often that under `proc` it serves the
//! others almost at once, and volley's progress thread, which takes over only from a rank
//! that has made no runtime call for a while (about 20 microseconds), mostly stays out of the
//! way; the strategies then run alike (measured: `np` slightly slower). The seed's program
//! computed at length on each data point it read, and so does this one.
//!
//! **Checks.** The forces of a pair are exactly antisymmetric (the same operations on negated
//! operands), so total momentum is conserved up to rounding: it must match its initial value to
//! a tolerance relative to the total momentum magnitude, and every value must be finite. At
//! small sizes rank 0 also reruns every step alone on a local array with the same functions;
//! each fish's forces are summed over the fish in index order on any rank count, so the final
//! state must agree to within 1e-12 (in practice it is bit-identical).

use bytemuck::{Pod, Zeroable};
use volley_apps::{hash, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, Op, SpreadArray};

/// Time step.
const DT: f64 = 0.01;
/// Sub-steps at which a pair's force is sampled along the step (the per-pair work).
const SUB: usize = 1024;
/// Long-range attraction (force ~ 1/r²) and short-range repulsion (~ 1/r⁴) strengths.
const ATTRACT: f64 = 1.0;
const REPEL: f64 = 0.5;
/// Softening: squared distance added so that close encounters stay finite.
const SOFT2: f64 = 0.05;
/// Side of the square the school starts in.
const POND: f64 = 40.0;
/// Steps of a run; `--size N` sets the number of fish.
const STEPS: usize = 4;
/// Rank 0 reruns the steps alone up to this many pair interactions (n² · steps).
const REFERENCE_PAIRS: u64 = 200_000;

/// One fish.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
struct Fish {
    pos: [f64; 2],
    vel: [f64; 2],
    mass: f64,
}

/// Fish `i` of the initial school (random access, so every rank makes its own block).
fn initial_fish(i: usize) -> Fish {
    let u = |k: u64| (hash(0xf15, 5 * i as u64 + k) >> 11) as f64 / (1u64 << 53) as f64;
    Fish {
        pos: [POND * u(0), POND * u(1)],
        vel: [u(2) - 0.5, u(3) - 0.5],
        mass: 0.5 + u(4),
    }
}

/// The force of `b` on `a`, averaged over the step at `SUB` points of their relative motion.
/// Swapping `a` and `b` negates every operand, hence the result exactly.
fn pair_force(a: &Fish, b: &Fish) -> [f64; 2] {
    let (dx, dy) = (b.pos[0] - a.pos[0], b.pos[1] - a.pos[1]);
    let (dvx, dvy) = (b.vel[0] - a.vel[0], b.vel[1] - a.vel[1]);
    let mm = a.mass * b.mass;
    let dt = DT / SUB as f64;
    let (mut fx, mut fy) = (0.0, 0.0);
    for k in 0..SUB {
        let t = dt * (k as f64 + 0.5);
        let (x, y) = (dx + dvx * t, dy + dvy * t);
        let s = x * x + y * y + SOFT2;
        let inv = 1.0 / s;
        let inv_r3 = inv * inv.sqrt();
        let c = mm * inv_r3 * (ATTRACT - REPEL * inv);
        fx += c * x;
        fy += c * y;
    }
    [fx / SUB as f64, fy / SUB as f64]
}

/// Adds the force of fish `j` (value `fj`) on each fish of `mine` (global indices from
/// `first`), skipping `j` itself.
fn accumulate(acc: &mut [[f64; 2]], mine: &[Fish], first: usize, j: usize, fj: &Fish) {
    for (l, (a, fi)) in acc.iter_mut().zip(mine).enumerate() {
        if first + l != j {
            let f = pair_force(fi, fj);
            a[0] += f[0];
            a[1] += f[1];
        }
    }
}

/// Fish `f` one step later under `force`.
fn advance(f: &Fish, force: [f64; 2]) -> Fish {
    let vel = [
        f.vel[0] + DT * force[0] / f.mass,
        f.vel[1] + DT * force[1] / f.mass,
    ];
    Fish {
        pos: [f.pos[0] + DT * vel[0], f.pos[1] + DT * vel[1]],
        vel,
        mass: f.mass,
    }
}

/// Phase 1 of a step: the forces on this rank's fish, reading every fish with one blocking
/// read and computing on it before the next (no polls in between).
fn forces(g: &Global<'_>, fish: &SpreadArray<Fish>, mine: &[Fish], first: usize) -> Vec<[f64; 2]> {
    let me = g.my_proc();
    let mut acc = vec![[0.0; 2]; mine.len()];
    for j in 0..fish.len() {
        let fj = must(me, "read", g.read(fish.ptr(j)));
        accumulate(&mut acc, mine, first, j, &fj);
    }
    acc
}

/// Runs `steps` steps on this rank's block of `fish`.
fn simulate(ctx: &Ctx<'_, '_>, fish: &SpreadArray<Fish>, steps: usize) {
    let (g, me) = (ctx.g, ctx.me());
    let first = fish.global_index(me, 0);
    for _ in 0..steps {
        let mine: Vec<Fish> = (0..fish.local_len()).map(|l| fish.local_get(l)).collect();
        let acc = forces(g, fish, &mine, first);
        must(me, "barrier", g.barrier());
        for (l, (f, a)) in mine.iter().zip(acc).enumerate() {
            fish.local_set(l, advance(f, a));
        }
        must(me, "barrier", g.barrier());
    }
}

/// The same steps on one rank, on a local array: the reference.
fn simulate_alone(n: usize, steps: usize) -> Vec<Fish> {
    let mut all: Vec<Fish> = (0..n).map(initial_fish).collect();
    for _ in 0..steps {
        let mut acc = vec![[0.0; 2]; n];
        for (j, fj) in all.iter().enumerate() {
            accumulate(&mut acc, &all, 0, j, fj);
        }
        all = all.iter().zip(acc).map(|(f, a)| advance(f, a)).collect();
    }
    all
}

/// Total momentum (x, y) and the sum of momentum magnitudes of every rank's fish.
fn momentum(g: &Global<'_>, mine: &[Fish]) -> [f64; 3] {
    let mut p = [0.0; 3];
    for f in mine {
        p[0] += f.mass * f.vel[0];
        p[1] += f.mass * f.vel[1];
        p[2] += f.mass * f.vel[0].hypot(f.vel[1]);
    }
    must(g.my_proc(), "all_reduce", g.all_reduce(&mut p, Op::Sum));
    p
}

/// Checks this rank's fish: finite values, and momentum conserved (collective).
fn check_invariants(g: &Global<'_>, mine: &[Fish], before: [f64; 3]) -> Result<(), String> {
    let after = momentum(g, mine);
    if let Some(l) = mine
        .iter()
        .position(|f| !(f.pos.iter().chain(&f.vel).all(|v| v.is_finite())))
    {
        return Err(format!(
            "fish {l} of rank {} is not finite: {:?}",
            g.my_proc(),
            mine[l]
        ));
    }
    let drift = (after[0] - before[0]).hypot(after[1] - before[1]);
    let tolerance = 1e-12 * before[2].max(after[2]);
    if drift.is_nan() || drift > tolerance {
        return Err(format!(
            "momentum not conserved: ({:.6e}, {:.6e}) became ({:.6e}, {:.6e}), drift {drift:.3e} > {tolerance:.3e}",
            before[0], before[1], after[0], after[1]
        ));
    }
    Ok(())
}

/// Gathers every fish on rank 0 (blocked layout: rank r's part, padded, starts at r · per).
fn gather_all(g: &Global<'_>, mine: &[Fish], n: usize) -> Vec<Fish> {
    let per = n.div_ceil(g.procs());
    let mut padded = mine.to_vec();
    padded.resize(per, Fish::zeroed());
    let mut all = vec![Fish::zeroed(); if g.my_proc() == 0 { per * g.procs() } else { 0 }];
    must(g.my_proc(), "gather", g.gather(0, &padded, &mut all));
    all.truncate(n);
    all
}

/// Compares the parallel result with the single-rank reference (on rank 0).
fn check_reference(got: &[Fish], want: &[Fish]) -> Result<(), String> {
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-12 * (1.0 + a.abs().max(b.abs()));
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        let fields = |f: &Fish| [f.pos[0], f.pos[1], f.vel[0], f.vel[1], f.mass];
        if !fields(a).iter().zip(fields(b)).all(|(x, y)| close(*x, y)) {
            return Err(format!(
                "fish {i} is {a:?}, the single-rank run gives {b:?}"
            ));
        }
    }
    Ok(())
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me) = (ctx.g, ctx.me());
    let n = ctx.size.pick(48, 400) as usize;
    let steps = STEPS;
    let fish = must(me, "alloc", g.all_spread_alloc::<Fish>(n, Layout::Blocked));
    for (l, i) in fish.local_indices().enumerate() {
        fish.local_set(l, initial_fish(i));
    }
    let start: Vec<Fish> = (0..fish.local_len()).map(|l| fish.local_get(l)).collect();
    let before = momentum(g, &start);
    let ((), seconds) = ctx.timed(|| simulate(ctx, &fish, steps));
    let mut mine: Vec<Fish> = (0..fish.local_len()).map(|l| fish.local_get(l)).collect();
    if ctx.corrupt && me == 0 {
        if let Some(f) = mine.first_mut() {
            f.vel[0] += 1.0;
        }
    }
    let mut verified = check_invariants(g, &mine, before);
    let small = (n * n * steps) as u64 <= REFERENCE_PAIRS;
    if small {
        let all = gather_all(g, &mine, n);
        if me == 0 && verified.is_ok() {
            verified = check_reference(&all, &simulate_alone(n, steps));
        }
    }
    g.free(fish);
    Outcome {
        problem: format!("{n} fish, {steps} steps"),
        seconds,
        verified,
    }
}

fn main() {
    run("wator", |_, _| (), body);
}
