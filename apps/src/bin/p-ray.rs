//! Parallel ray tracer of a procedural teapot scene (seed 004's `p-ray`).
//!
//! The scene is a few hundred spheres and triangles made deterministically from a seed: a
//! checkered floor of triangles, and on it a teapot-like cluster of spheres (a body of
//! spheres on an ellipsoid, a lid knob, a spout and a handle) among scattered pebbles. It is
//! stored **once**, in a cyclic spread array: every rank makes only the objects it owns. To
//! find the objects a ray may hit, every rank holds a copy of a uniform grid of object
//! indices (small: built from every rank's list of (cell, object) pairs, gathered), but the
//! geometry stays where it was made.
//!
//! The image is cut into 16x16 pixel blocks handed out dynamically: a rank takes the next
//! block by bumping a global work counter on rank 0 with `fetch_add`, renders it (several
//! samples per pixel, shadows from two lights, reflections), and sends the block's pixels to
//! their place in a block-cyclic spread array image with one `bulk_put`; `sync` completes the
//! puts when the counter runs out.
//!
//! **The pattern: read-mostly remote data.** A ray walks the grid cell by cell and needs the
//! objects of each cell it visits. Its own objects a rank reads locally; the others it reads
//! through global pointers, and like a real Split-C program it keeps a small software cache
//! of the objects it has fetched, since the scene never changes while it is rendered: 256
//! objects (4-way set-associative, least recently used), less than half the scene, so that
//! remote reads go on all through the run rather than only while a cache warms up. The
//! objects of a cell that miss the cache are fetched together (one `get_nb` each, then waited
//! for), so a cell costs one round trip at most. Adjacent pixels visit the same cells, so
//! nearly every object comes from the cache (at 512x512 on 4 ranks, some 6 thousand misses
//! per rank against 30 million hits) and the ranks mostly compute. Under `proc` a rank serves
//! the others' reads, puts and counter bumps only when it communicates itself, so the
//! renderer polls after every pixel (a few tens of microseconds of work); without that, a
//! rank whose cache holds what it needs would leave the others' misses and the work counter
//! waiting for a whole block. With so little communication the strategies should run alike
//! (the seed: Meiko 37.5 s under Proc, 38.0 s under NP).
//!
//! **Check.** Rank 0 gathers the image and renders a reference itself with the same code on a
//! scene it generates locally (the whole image at small sizes, a sample of blocks at large
//! ones); the pixels must be identical (an FNV hash of the quantized pixels is compared, and
//! the first differing pixel named).

use bytemuck::{Pod, Zeroable};
use std::ops::{Add, Mul, Neg, Sub};
use volley_apps::{hash, must, run, Ctx, Outcome};
use volley_global::{Global, Layout, SpreadArray};

/// Pixels per side of a block, the unit of work.
const BLOCK: usize = 16;
/// Samples per pixel side (SS² samples per pixel).
const SS: usize = 3;
/// Reflection bounces.
const MAX_DEPTH: u32 = 2;
/// Ray offsets that keep a secondary ray off the surface it starts from.
const EPS: f64 = 1e-6;
/// Software cache: sets and ways (256 objects, under half the scene).
const SETS: usize = 64;
const WAYS: usize = 4;
/// Images up to this many pixels are checked whole; larger ones on a sample of blocks.
const FULL_CHECK_PIXELS: usize = 128 * 128;
/// Blocks rendered again by rank 0 to check a large image.
const SAMPLE_BLOCKS: usize = 24;
/// Scene seed.
const SEED: u64 = 0x7ea_9075;

// ----- vectors -----

#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
struct V3 {
    x: f64,
    y: f64,
    z: f64,
}

const fn v3(x: f64, y: f64, z: f64) -> V3 {
    V3 { x, y, z }
}

impl V3 {
    fn dot(self, o: V3) -> f64 {
        self.x * o.x + self.y * o.y + self.z * o.z
    }
    fn cross(self, o: V3) -> V3 {
        v3(
            self.y * o.z - self.z * o.y,
            self.z * o.x - self.x * o.z,
            self.x * o.y - self.y * o.x,
        )
    }
    fn norm(self) -> V3 {
        self * (1.0 / self.dot(self).sqrt())
    }
    fn axis(self, a: usize) -> f64 {
        [self.x, self.y, self.z][a]
    }
    fn min(self, o: V3) -> V3 {
        v3(self.x.min(o.x), self.y.min(o.y), self.z.min(o.z))
    }
    fn max(self, o: V3) -> V3 {
        v3(self.x.max(o.x), self.y.max(o.y), self.z.max(o.z))
    }
}

impl Add for V3 {
    type Output = V3;
    fn add(self, o: V3) -> V3 {
        v3(self.x + o.x, self.y + o.y, self.z + o.z)
    }
}
impl Sub for V3 {
    type Output = V3;
    fn sub(self, o: V3) -> V3 {
        v3(self.x - o.x, self.y - o.y, self.z - o.z)
    }
}
impl Mul<f64> for V3 {
    type Output = V3;
    fn mul(self, s: f64) -> V3 {
        v3(self.x * s, self.y * s, self.z * s)
    }
}
impl Neg for V3 {
    type Output = V3;
    fn neg(self) -> V3 {
        v3(-self.x, -self.y, -self.z)
    }
}

// ----- the scene -----

const SPHERE: u64 = 0;
const TRIANGLE: u64 = 1;

/// One scene object, as stored in the spread array: a sphere (centre `a`, radius `b.x`) or a
/// triangle (`a`, `b`, `c`), with its colour and reflectivity.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Pod, Zeroable)]
struct Obj {
    kind: u64,
    shine: f64,
    a: V3,
    b: V3,
    c: V3,
    color: V3,
}

/// Floor squares per side (two triangles each) and the floor's half width.
const FLOOR: usize = 10;
const FLOOR_HALF: f64 = 6.0;
/// Spheres of the teapot: body rings x spheres per ring, knob, spout, handle; pebbles.
const RINGS: usize = 12;
const PER_RING: usize = 20;
const KNOB: usize = 5;
const SPOUT: usize = 16;
const HANDLE: usize = 16;
const PEBBLES: usize = 60;
const OBJECTS: usize = 2 * FLOOR * FLOOR + RINGS * PER_RING + KNOB + SPOUT + HANDLE + PEBBLES;

/// A float in [0, 1) from the scene seed, for object `i`'s parameter `k`.
fn rnd(i: usize, k: u64) -> f64 {
    (hash(SEED ^ k, i as u64) >> 11) as f64 / (1u64 << 53) as f64
}

fn sphere(centre: V3, radius: f64, color: V3, shine: f64) -> Obj {
    Obj {
        kind: SPHERE,
        shine,
        a: centre,
        b: v3(radius, 0.0, 0.0),
        c: v3(0.0, 0.0, 0.0),
        color,
    }
}

/// Object `i` of the scene (random access: a rank makes only the objects it owns).
fn make_object(i: usize) -> Obj {
    const PORCELAIN: V3 = v3(0.82, 0.86, 0.95);
    let mut k = i;
    if k < 2 * FLOOR * FLOOR {
        return floor_triangle(k);
    }
    k -= 2 * FLOOR * FLOOR;
    let jitter = 0.03 * (rnd(i, 1) - 0.5);
    if k < RINGS * PER_RING {
        // The body: rings of spheres on an ellipsoid, alternate rings staggered.
        let (ring, m) = (k / PER_RING, k % PER_RING);
        let theta = std::f64::consts::PI * (0.12 + 0.8 * ring as f64 / (RINGS - 1) as f64);
        let phi = std::f64::consts::TAU * (m as f64 + 0.5 * (ring % 2) as f64) / PER_RING as f64;
        let centre = v3(
            1.5 * theta.sin() * phi.cos(),
            1.45 + 1.1 * theta.cos(),
            1.5 * theta.sin() * phi.sin(),
        );
        return sphere(centre, 0.36 + jitter, PORCELAIN, 0.25);
    }
    k -= RINGS * PER_RING;
    if k < KNOB {
        let centre = if k == 0 {
            v3(0.0, 2.75, 0.0)
        } else {
            let a = std::f64::consts::FRAC_PI_2 * k as f64;
            v3(0.25 * a.cos(), 2.62, 0.25 * a.sin())
        };
        return sphere(centre, 0.2, PORCELAIN, 0.25);
    }
    k -= KNOB;
    if k < SPOUT {
        // A rising curve out of the body's +x side, thinning towards its tip.
        let s = k as f64 / (SPOUT - 1) as f64;
        let centre = v3(1.4 + 1.3 * s, 1.2 + 1.2 * s * s, 0.0);
        return sphere(centre, 0.32 - 0.17 * s + jitter, PORCELAIN, 0.25);
    }
    k -= SPOUT;
    if k < HANDLE {
        // A half ring on the -x side.
        let a = std::f64::consts::PI * (k as f64 / (HANDLE - 1) as f64 - 0.5);
        let centre = v3(-1.5 - 0.75 * a.cos(), 1.5 + 0.75 * a.sin(), 0.0);
        return sphere(centre, 0.16, PORCELAIN, 0.25);
    }
    // Pebbles scattered on the floor, away from the teapot.
    let (r, a) = (2.6 + 3.0 * rnd(i, 2), std::f64::consts::TAU * rnd(i, 3));
    let radius = 0.12 + 0.25 * rnd(i, 4);
    let color = v3(
        0.2 + 0.8 * rnd(i, 5),
        0.2 + 0.8 * rnd(i, 6),
        0.2 + 0.8 * rnd(i, 7),
    );
    sphere(
        v3(r * a.cos(), radius, r * a.sin()),
        radius,
        color,
        0.5 * rnd(i, 8),
    )
}

/// Triangle `k` of the checkered floor.
fn floor_triangle(k: usize) -> Obj {
    let (square, upper) = (k / 2, k % 2 == 1);
    let (sx, sz) = (square % FLOOR, square / FLOOR);
    let side = 2.0 * FLOOR_HALF / FLOOR as f64;
    let corner = |dx: usize, dz: usize| {
        v3(
            -FLOOR_HALF + (sx + dx) as f64 * side,
            0.0,
            -FLOOR_HALF + (sz + dz) as f64 * side,
        )
    };
    let (a, b, c) = if upper {
        (corner(1, 0), corner(1, 1), corner(0, 1))
    } else {
        (corner(0, 0), corner(1, 0), corner(0, 1))
    };
    let color = if (sx + sz) % 2 == 0 {
        v3(0.9, 0.9, 0.85)
    } else {
        v3(0.25, 0.3, 0.45)
    };
    Obj {
        kind: TRIANGLE,
        shine: 0.2,
        a,
        b,
        c,
        color,
    }
}

/// The object's bounding box.
fn bounds(o: &Obj) -> (V3, V3) {
    if o.kind == SPHERE {
        let r = v3(o.b.x, o.b.x, o.b.x);
        (o.a - r, o.a + r)
    } else {
        let pad = v3(EPS, EPS, EPS);
        (o.a.min(o.b).min(o.c) - pad, o.a.max(o.b).max(o.c) + pad)
    }
}

// ----- the grid -----

/// The box the grid covers (the whole scene) and its cells per axis.
const GRID_MIN: V3 = v3(-6.5, -0.5, -6.5);
const GRID_MAX: V3 = v3(6.5, 4.5, 6.5);
const CELLS: [usize; 3] = [26, 10, 26];

/// A uniform grid of object indices: cell `c`'s objects are `ids[start[c]..start[c + 1]]`,
/// ascending (so every rank visits a cell's objects in the same order).
struct Grid {
    start: Vec<u32>,
    ids: Vec<u32>,
}

fn cell_size(a: usize) -> f64 {
    (GRID_MAX.axis(a) - GRID_MIN.axis(a)) / CELLS[a] as f64
}

fn cell_of(p: f64, a: usize) -> usize {
    (((p - GRID_MIN.axis(a)) / cell_size(a)).floor().max(0.0) as usize).min(CELLS[a] - 1)
}

fn cell_index(c: [usize; 3]) -> usize {
    (c[2] * CELLS[1] + c[1]) * CELLS[0] + c[0]
}

/// The (cell, object) pairs of object `i`, packed as `cell << 32 | i`.
fn cell_pairs(i: usize, o: &Obj, out: &mut Vec<u64>) {
    let (lo, hi) = bounds(o);
    let range = |a: usize| cell_of(lo.axis(a), a)..=cell_of(hi.axis(a), a);
    for z in range(2) {
        for y in range(1) {
            for x in range(0) {
                out.push((cell_index([x, y, z]) as u64) << 32 | i as u64);
            }
        }
    }
}

impl Grid {
    /// The grid of the pairs (any order).
    fn from_pairs(mut pairs: Vec<u64>) -> Grid {
        pairs.sort_unstable();
        let cells = CELLS.iter().product::<usize>();
        let mut start = vec![0u32; cells + 1];
        for p in &pairs {
            start[(p >> 32) as usize + 1] += 1;
        }
        for c in 0..cells {
            start[c + 1] += start[c];
        }
        let ids = pairs.iter().map(|p| *p as u32).collect();
        Grid { start, ids }
    }

    fn cell(&self, c: [usize; 3]) -> &[u32] {
        let i = cell_index(c);
        &self.ids[self.start[i] as usize..self.start[i + 1] as usize]
    }
}

// ----- where the objects come from -----

/// A source of scene objects: the objects of one grid cell at a time.
trait Objects {
    /// The objects `ids`, in that order.
    fn fetch(&mut self, ids: &[u32]) -> &[Obj];
}

/// The whole scene in local memory (the reference render).
struct LocalScene {
    all: Vec<Obj>,
    out: Vec<Obj>,
}

impl Objects for LocalScene {
    fn fetch(&mut self, ids: &[u32]) -> &[Obj] {
        self.out.clear();
        self.out.extend(ids.iter().map(|&i| self.all[i as usize]));
        &self.out
    }
}

/// The scene in the spread array, read through global pointers with a software cache of the
/// remote objects already fetched.
struct CachedScene<'a, 'rt> {
    g: &'a Global<'rt>,
    objs: &'a SpreadArray<Obj>,
    /// Object index + 1 held by each way of each set (0: empty), its data and last use.
    tags: Vec<u32>,
    data: Vec<Obj>,
    used: Vec<u64>,
    clock: u64,
    out: Vec<Obj>,
}

impl<'a, 'rt> CachedScene<'a, 'rt> {
    fn new(g: &'a Global<'rt>, objs: &'a SpreadArray<Obj>) -> Self {
        Self {
            g,
            objs,
            tags: vec![0; SETS * WAYS],
            data: vec![Obj::zeroed(); SETS * WAYS],
            used: vec![0; SETS * WAYS],
            clock: 0,
            out: Vec::new(),
        }
    }

    /// The set of object `id`: hashed, since the remote objects of a cyclic array are the
    /// indices of all residues but one modulo `PROCS`.
    fn set(id: u32) -> usize {
        (u64::from(id).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) as usize % SETS
    }

    fn lookup(&mut self, id: u32) -> Option<Obj> {
        let set = Self::set(id);
        let way = (set * WAYS..(set + 1) * WAYS).find(|&w| self.tags[w] == id + 1)?;
        self.clock += 1;
        self.used[way] = self.clock;
        Some(self.data[way])
    }

    fn insert(&mut self, id: u32, o: Obj) {
        let set = Self::set(id);
        let way = (set * WAYS..(set + 1) * WAYS)
            .min_by_key(|&w| self.used[w])
            .unwrap_or(set * WAYS);
        self.clock += 1;
        (self.tags[way], self.data[way], self.used[way]) = (id + 1, o, self.clock);
    }
}

impl Objects for CachedScene<'_, '_> {
    fn fetch(&mut self, ids: &[u32]) -> &[Obj] {
        let (g, me) = (self.g, self.g.my_proc());
        self.out.clear();
        let mut missing = Vec::new();
        for (k, &id) in ids.iter().enumerate() {
            let (rank, local) = self.objs.locate(id as usize);
            let o = if rank == me {
                self.objs.local_get(local)
            } else if let Some(o) = self.lookup(id) {
                o
            } else {
                missing.push((k, id, must(me, "get", g.get_nb(self.objs.ptr(id as usize)))));
                Obj::zeroed()
            };
            self.out.push(o);
        }
        for (k, id, pending) in missing {
            let o = must(me, "get", pending.wait());
            self.out[k] = o;
            self.insert(id, o);
        }
        &self.out
    }
}

// ----- tracing -----

#[derive(Debug, Clone, Copy)]
struct Ray {
    o: V3,
    d: V3,
}

/// Distance along `r` to `o`, if it hits it beyond `EPS`.
fn intersect(o: &Obj, r: &Ray) -> Option<f64> {
    if o.kind == SPHERE {
        let oc = r.o - o.a;
        let b = oc.dot(r.d);
        let disc = b * b - (oc.dot(oc) - o.b.x * o.b.x);
        if disc < 0.0 {
            return None;
        }
        let s = disc.sqrt();
        [-b - s, -b + s].into_iter().find(|&t| t > EPS)
    } else {
        // Möller–Trumbore.
        let (e1, e2) = (o.b - o.a, o.c - o.a);
        let p = r.d.cross(e2);
        let det = e1.dot(p);
        if det.abs() < 1e-12 {
            return None;
        }
        let inv = 1.0 / det;
        let s = r.o - o.a;
        let u = s.dot(p) * inv;
        if !(0.0..=1.0).contains(&u) {
            return None;
        }
        let q = s.cross(e1);
        let v = r.d.dot(q) * inv;
        if v < 0.0 || u + v > 1.0 {
            return None;
        }
        Some(e2.dot(q) * inv).filter(|&t| t > EPS)
    }
}

/// Where `r` enters and leaves the grid's box, if it does.
fn box_span(r: &Ray) -> Option<(f64, f64)> {
    let (mut t0, mut t1) = (0.0f64, f64::INFINITY);
    for a in 0..3 {
        let (o, d) = (r.o.axis(a), r.d.axis(a));
        let (lo, hi) = (GRID_MIN.axis(a), GRID_MAX.axis(a));
        if d == 0.0 {
            if o < lo || o > hi {
                return None;
            }
            continue;
        }
        let (ta, tb) = ((lo - o) / d, (hi - o) / d);
        t0 = t0.max(ta.min(tb));
        t1 = t1.min(ta.max(tb));
    }
    (t0 <= t1).then_some((t0, t1))
}

/// The nearest object `r` hits before `tmax` (with `any`, the first found), walking the grid
/// cell by cell (Amanatides–Woo) and fetching each cell's objects from `src`.
fn trace(grid: &Grid, src: &mut impl Objects, r: &Ray, tmax: f64, any: bool) -> Option<(f64, Obj)> {
    let (t0, t1) = box_span(r)?;
    let tmax = tmax.min(t1);
    if t0 > tmax {
        return None;
    }
    let p = r.o + r.d * t0;
    let mut cell = [0usize; 3];
    let mut next = [f64::INFINITY; 3];
    let mut delta = [f64::INFINITY; 3];
    let mut step = [0isize; 3];
    for a in 0..3 {
        cell[a] = cell_of(p.axis(a), a);
        let d = r.d.axis(a);
        if d != 0.0 {
            step[a] = if d > 0.0 { 1 } else { -1 };
            let edge = GRID_MIN.axis(a) + (cell[a] + usize::from(d > 0.0)) as f64 * cell_size(a);
            next[a] = (edge - r.o.axis(a)) / d;
            delta[a] = cell_size(a) / d.abs();
        }
    }
    let mut best: Option<(f64, Obj)> = None;
    loop {
        for o in src.fetch(grid.cell(cell)) {
            if let Some(t) = intersect(o, r) {
                if t < tmax && best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, *o));
                    if any {
                        return best;
                    }
                }
            }
        }
        let a = (0..3).fold(0, |m, a| if next[a] < next[m] { a } else { m });
        if best.is_some_and(|(bt, _)| bt <= next[a]) || next[a] > tmax {
            return best;
        }
        let c = cell[a] as isize + step[a];
        if c < 0 || c >= CELLS[a] as isize {
            return best;
        }
        cell[a] = c as usize;
        next[a] += delta[a];
    }
}

/// Point lights: position and intensity.
const LIGHTS: [(V3, f64); 2] = [(v3(-5.0, 9.0, 6.0), 0.75), (v3(6.0, 6.0, 3.0), 0.45)];
const AMBIENT: f64 = 0.12;

fn sky(d: V3) -> V3 {
    let t = 0.5 * (d.y + 1.0);
    v3(0.55, 0.65, 0.8) * (1.0 - t) + v3(0.2, 0.35, 0.75) * t
}

/// The colour seen along `r`.
fn shade(grid: &Grid, src: &mut impl Objects, r: &Ray, depth: u32) -> V3 {
    let Some((t, o)) = trace(grid, src, r, f64::INFINITY, false) else {
        return sky(r.d);
    };
    let p = r.o + r.d * t;
    let mut n = if o.kind == SPHERE {
        (p - o.a).norm()
    } else {
        (o.b - o.a).cross(o.c - o.a).norm()
    };
    if n.dot(r.d) > 0.0 {
        n = -n;
    }
    let lift = p + n * 1e-4;
    let mut color = o.color * AMBIENT;
    for (pos, power) in LIGHTS {
        let to = pos - p;
        let dist = to.dot(to).sqrt();
        let l = to * (1.0 / dist);
        let lambert = n.dot(l);
        if lambert <= 0.0 || trace(grid, src, &Ray { o: lift, d: l }, dist, true).is_some() {
            continue;
        }
        let h = (l - r.d).norm();
        let spec = n.dot(h).max(0.0).powi(48) * o.shine;
        color = color + o.color * (lambert * power) + v3(1.0, 1.0, 1.0) * (spec * power);
    }
    if o.shine > 0.0 && depth < MAX_DEPTH {
        let d = r.d - n * (2.0 * r.d.dot(n));
        let reflected = shade(grid, src, &Ray { o: lift, d }, depth + 1);
        color = color * (1.0 - o.shine) + reflected * o.shine;
    }
    color
}

/// The camera: a pinhole above the floor looking at the teapot.
struct Camera {
    eye: V3,
    fwd: V3,
    right: V3,
    up: V3,
    w: usize,
    h: usize,
}

impl Camera {
    fn new(w: usize, h: usize) -> Self {
        let eye = v3(1.5, 3.6, 8.0);
        let fwd = (v3(0.2, 1.3, 0.0) - eye).norm();
        let right = fwd.cross(v3(0.0, 1.0, 0.0)).norm();
        let up = right.cross(fwd);
        Camera {
            eye,
            fwd,
            right,
            up,
            w,
            h,
        }
    }

    /// The ray through (`x`, `y`) in pixel units (fractions within a pixel).
    fn ray(&self, x: f64, y: f64) -> Ray {
        let half = (22.5f64).to_radians().tan();
        let aspect = self.w as f64 / self.h as f64;
        let u = (2.0 * x / self.w as f64 - 1.0) * half * aspect;
        let v = (1.0 - 2.0 * y / self.h as f64) * half;
        Ray {
            o: self.eye,
            d: (self.fwd + self.right * u + self.up * v).norm(),
        }
    }
}

/// A colour quantized to 8 bits per channel, as 0xRRGGBB.
fn quantize(c: V3) -> u32 {
    let q = |v: f64| (v.clamp(0.0, 1.0) * 255.0).round() as u32;
    q(c.x) << 16 | q(c.y) << 8 | q(c.z)
}

/// The pixels of block `b` (row-major in the block; 0 outside the image), calling `poll`
/// after each pixel.
fn render_block(
    grid: &Grid,
    src: &mut impl Objects,
    cam: &Camera,
    b: usize,
    poll: &mut dyn FnMut(),
) -> Vec<u32> {
    let per_row = cam.w.div_ceil(BLOCK);
    let (bx, by) = (b % per_row * BLOCK, b / per_row * BLOCK);
    let mut px = vec![0u32; BLOCK * BLOCK];
    for dy in 0..BLOCK {
        for dx in 0..BLOCK {
            let (x, y) = (bx + dx, by + dy);
            if x >= cam.w || y >= cam.h {
                continue;
            }
            let mut sum = v3(0.0, 0.0, 0.0);
            for s in 0..SS * SS {
                let fx = x as f64 + (s % SS) as f64 / SS as f64 + 0.5 / SS as f64;
                let fy = y as f64 + (s / SS) as f64 / SS as f64 + 0.5 / SS as f64;
                sum = sum + shade(grid, src, &cam.ray(fx, fy), 0);
            }
            px[dy * BLOCK + dx] = quantize(sum * (1.0 / (SS * SS) as f64));
            poll();
        }
    }
    px
}

// ----- the program -----

/// Makes this rank's objects in the spread array and returns the grid of the whole scene
/// (every rank's (cell, object) pairs, gathered).
fn distribute_scene(g: &Global<'_>, objs: &SpreadArray<Obj>) -> Grid {
    let me = g.my_proc();
    let mut pairs = Vec::new();
    for (l, i) in objs.local_indices().enumerate() {
        let o = make_object(i);
        objs.local_set(l, o);
        cell_pairs(i, &o, &mut pairs);
    }
    let most = must(
        me,
        "all_reduce",
        g.all_reduce_one(pairs.len() as u64, volley_global::Op::Max),
    );
    pairs.resize(most as usize, u64::MAX);
    let mut all = vec![0u64; most as usize * g.procs()];
    must(me, "all_gather", g.all_gather(&pairs, &mut all));
    all.retain(|&p| p != u64::MAX);
    Grid::from_pairs(all)
}

/// The whole scene made locally, and its grid (for the reference render).
fn local_scene() -> (LocalScene, Grid) {
    let all: Vec<Obj> = (0..OBJECTS).map(make_object).collect();
    let mut pairs = Vec::new();
    for (i, o) in all.iter().enumerate() {
        cell_pairs(i, o, &mut pairs);
    }
    let scene = LocalScene {
        all,
        out: Vec::new(),
    };
    (scene, Grid::from_pairs(pairs))
}

/// Renders blocks handed out by the work counter until none is left; puts each into `image`.
fn render(
    g: &Global<'_>,
    grid: &Grid,
    scene: &SpreadArray<Obj>,
    image: &SpreadArray<u32>,
    counter: &SpreadArray<u64>,
    cam: &Camera,
) {
    let me = g.my_proc();
    let blocks = image.len() / (BLOCK * BLOCK);
    let mut cache = CachedScene::new(g, scene);
    let mut poll = || {
        g.poll();
    };
    loop {
        let b = must(me, "fetch_add", g.fetch_add(counter.ptr(0), 1)) as usize;
        if b >= blocks {
            break;
        }
        let px = render_block(grid, &mut cache, cam, b, &mut poll);
        must(me, "put", g.bulk_put(image.ptr(b * BLOCK * BLOCK), &px));
    }
    must(me, "sync", g.sync());
}

/// The image on rank 0, block by block (empty elsewhere).
fn gather_image(g: &Global<'_>, image: &SpreadArray<u32>) -> Vec<u32> {
    let (me, p) = (g.my_proc(), g.procs());
    let per = (image.len() / (BLOCK * BLOCK)).div_ceil(p) * BLOCK * BLOCK;
    let mut mine: Vec<u32> = (0..image.local_len()).map(|l| image.local_get(l)).collect();
    mine.resize(per, 0);
    let mut all = vec![0u32; if me == 0 { per * p } else { 0 }];
    must(me, "gather", g.gather(0, &mine, &mut all));
    let mut blocks = vec![0u32; if me == 0 { image.len() } else { 0 }];
    for (i, px) in blocks.iter_mut().enumerate() {
        let (r, l) = image.locate(i);
        *px = all[r * per + l];
    }
    blocks
}

/// FNV-1a over the pixels of `blocks` (each `BLOCK²` pixels).
fn fnv(blocks: &[u32]) -> u64 {
    blocks
        .iter()
        .flat_map(|p| p.to_le_bytes())
        .fold(0xcbf2_9ce4_8422_2325, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
        })
}

/// Compares the blocks `which` of `got` (all blocks, block-major) with a local render.
fn check(got: &[u32], which: &[usize], cam: &Camera) -> Result<(), String> {
    let (mut scene, grid) = local_scene();
    let bb = BLOCK * BLOCK;
    let mut want = Vec::with_capacity(which.len() * bb);
    let mut mine = Vec::with_capacity(which.len() * bb);
    for &b in which {
        want.extend(render_block(&grid, &mut scene, cam, b, &mut || {}));
        mine.extend_from_slice(&got[b * bb..(b + 1) * bb]);
    }
    let (hash, reference) = (fnv(&mine), fnv(&want));
    if hash == reference && mine == want {
        return Ok(());
    }
    let differ = mine.iter().zip(&want).filter(|(a, b)| a != b).count();
    let k = mine
        .iter()
        .zip(&want)
        .position(|(a, b)| a != b)
        .unwrap_or(0);
    let (b, off) = (which[k / bb], k % bb);
    let per_row = cam.w.div_ceil(BLOCK);
    let (x, y) = (
        b % per_row * BLOCK + off % BLOCK,
        b / per_row * BLOCK + off / BLOCK,
    );
    Err(format!(
        "{differ} of {} checked pixels differ (hash {hash:016x}, reference {reference:016x}); first at ({x}, {y}): #{:06x}, the single-rank render gives #{:06x}",
        mine.len(),
        mine[k],
        want[k]
    ))
}

/// The blocks rank 0 checks: all of a small image, else a sample (always the first).
fn blocks_to_check(blocks: usize, pixels: usize) -> Vec<usize> {
    if pixels <= FULL_CHECK_PIXELS {
        return (0..blocks).collect();
    }
    let mut which: Vec<usize> = (0..SAMPLE_BLOCKS as u64)
        .map(|k| (hash(SEED, k) % blocks as u64) as usize)
        .chain([0, blocks - 1])
        .collect();
    which.sort_unstable();
    which.dedup();
    which
}

fn body(ctx: &Ctx<'_, '_>, (): ()) -> Outcome {
    let (g, me) = (ctx.g, ctx.me());
    let side = ctx.size.pick(64, 512).max(1) as usize;
    let cam = Camera::new(side, side);
    let blocks = side.div_ceil(BLOCK) * side.div_ceil(BLOCK);
    let scene = must(
        me,
        "alloc",
        g.all_spread_alloc::<Obj>(OBJECTS, Layout::Cyclic),
    );
    let image = must(
        me,
        "alloc",
        g.all_spread_alloc::<u32>(blocks * BLOCK * BLOCK, Layout::BlockCyclic(BLOCK * BLOCK)),
    );
    let counter = must(me, "alloc", g.all_spread_alloc::<u64>(1, Layout::Blocked));
    let grid = distribute_scene(g, &scene);
    let ((), seconds) = ctx.timed(|| render(g, &grid, &scene, &image, &counter, &cam));
    let mut got = gather_image(g, &image);
    let verified = if me == 0 {
        if ctx.corrupt {
            got[0] ^= 0x0001_0101;
        }
        check(&got, &blocks_to_check(blocks, side * side), &cam)
    } else {
        Ok(())
    };
    g.free(counter);
    g.free(image);
    g.free(scene);
    Outcome {
        problem: format!("{side}x{side} image, {OBJECTS} objects"),
        seconds,
        verified,
    }
}

fn main() {
    run("p-ray", |_, _| (), body);
}
