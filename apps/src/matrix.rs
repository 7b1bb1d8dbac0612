//! What the matrix programs (`cannon`, `mm`) share: the random matrices and their blocks, the
//! block product, and the check C·x = A·(B·x).

use crate::hash;

/// A uniform value in [-1, 1) from 64 random bits.
pub fn unit(h: u64) -> f64 {
    (h >> 11) as f64 / (1u64 << 52) as f64 - 1.0
}

/// Element (r, c) of the random n×n matrix `seed`.
pub fn element(seed: u64, n: usize, r: usize, c: usize) -> f64 {
    unit(hash(seed, (r * n + c) as u64))
}

/// The random vector `seed` of `len` elements, zero from n on (the padding of n×n matrices
/// cut into blocks).
pub fn vector(seed: u64, n: usize, len: usize) -> Vec<f64> {
    (0..len)
        .map(|r| {
            if r < n {
                unit(hash(seed, r as u64))
            } else {
                0.0
            }
        })
        .collect()
}

/// Block (bi, bj), m×m row-major, of the n×n matrix whose elements `elem` gives, zero
/// outside n×n.
pub fn block(
    n: usize,
    m: usize,
    (bi, bj): (usize, usize),
    elem: impl Fn(usize, usize) -> f64,
) -> Vec<f64> {
    let mut out = vec![0.0; m * m];
    for (ii, row) in out.chunks_exact_mut(m).enumerate() {
        let r = bi * m + ii;
        for (jj, v) in row.iter_mut().enumerate() {
            let c = bj * m + jj;
            if r < n && c < n {
                *v = elem(r, c);
            }
        }
    }
    out
}

/// Rows of B (a panel) each pass of [`multiply_add`] keeps in cache.
pub const PANEL: usize = 32;

/// `c += a·b` for m×m row-major blocks: i-k-j loops (the inner loop streams a row of b into
/// a row of c), over panels of [`PANEL`] rows of b so that the panel stays in cache for every
/// row of c (a block of at most `PANEL` rows is one panel). Each element of c adds its
/// products in the order of k whatever the panels.
pub fn multiply_add(a: &[f64], b: &[f64], c: &mut [f64], m: usize) {
    for k0 in (0..m).step_by(PANEL) {
        let k1 = (k0 + PANEL).min(m);
        for (ci, ai) in c.chunks_exact_mut(m).zip(a.chunks_exact(m)) {
            for (k, &aik) in ai.iter().enumerate().take(k1).skip(k0) {
                let bk = &b[k * m..(k + 1) * m];
                for (cij, &bkj) in ci.iter_mut().zip(bk) {
                    *cij += aik * bkj;
                }
            }
        }
    }
}

/// `y[i·m..] += a·x[j·m..]` for an m×m block at block position (i, j).
pub fn block_times_vector(a: &[f64], m: usize, (i, j): (usize, usize), x: &[f64], y: &mut [f64]) {
    let xs = &x[j * m..(j + 1) * m];
    for (row, yi) in a.chunks_exact(m).zip(&mut y[i * m..(i + 1) * m]) {
        *yi += row.iter().zip(xs).map(|(a, x)| a * x).sum::<f64>();
    }
}

/// Compares C·x (`cx`) with A·(B·x) (`abx`), to a relative 1e-9 in the 2-norm. Only rank 0
/// (`me`) reports a difference: every rank has the same vectors.
pub fn compare(me: usize, cx: &[f64], abx: &[f64]) -> Result<(), String> {
    let norm = |v: &mut dyn Iterator<Item = f64>| v.map(|e| e * e).sum::<f64>().sqrt();
    let err = norm(&mut cx.iter().zip(abx).map(|(u, v)| u - v)) / norm(&mut abx.iter().copied());
    if me == 0 && (err >= 1e-9 || err.is_nan()) {
        let worst = (0..cx.len())
            .max_by(|&u, &v| (cx[u] - abx[u]).abs().total_cmp(&(cx[v] - abx[v]).abs()))
            .unwrap_or(0);
        return Err(format!(
            "C·x differs from A·(B·x) by a relative {err:.2e} (row {worst}: {} vs {})",
            cx[worst], abx[worst]
        ));
    }
    Ok(())
}
