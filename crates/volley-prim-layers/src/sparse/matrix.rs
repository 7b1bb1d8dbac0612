//! The seed's problem (§5): a sparse unit lower-triangular system whose pattern is drawn at
//! random from a seed, rows dealt cyclically over the ranks. Each rank generates only its
//! own rows: the pattern is known only at run time, and only row by row.

/// Which rank owns which unknown: unknown `i` lives on rank `i % size` (cyclic), at local
/// slot `i / size`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Layout {
    /// Unknowns in the system.
    pub n: usize,
    /// Ranks sharing them.
    pub size: usize,
}

impl Layout {
    /// The owner of unknown `i`.
    pub fn owner(&self, i: usize) -> usize {
        i % self.size
    }

    /// Unknown `i`'s slot on its owner.
    pub fn slot(&self, i: usize) -> usize {
        i / self.size
    }

    /// How many unknowns `rank` owns.
    pub fn owned(&self, rank: usize) -> usize {
        (self.n + self.size - 1 - rank) / self.size
    }
}

/// The random system's shape: `n` unknowns, up to `per_row` off-diagonal entries per row,
/// each in the `window` columns before the diagonal, drawn from `seed`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pattern {
    /// Unknowns.
    pub n: usize,
    /// Most off-diagonal entries in a row.
    pub per_row: usize,
    /// Columns before the diagonal the entries are drawn from.
    pub window: usize,
    /// The random seed.
    pub seed: u64,
}

/// One row: `y_i = rhs - sum(a * y_col)` over `entries` (columns ascending, all below `i`).
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// The unknown this row solves.
    pub index: usize,
    /// The right-hand side.
    pub rhs: f64,
    /// `(column, coefficient)`, columns ascending and distinct.
    pub entries: Vec<(usize, f64)>,
}

/// splitmix64: a small reproducible generator, one stream per (seed, row).
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl Pattern {
    /// Row `i` of the system (the same on every rank that asks).
    pub fn row(&self, i: usize) -> Row {
        let mut state = mix(self.seed ^ mix(i as u64));
        let mut next = || {
            state = mix(state);
            state
        };
        let unit = |x: u64| (x >> 11) as f64 / (1u64 << 53) as f64;
        let rhs = 1.0 + unit(next());
        let lo = i.saturating_sub(self.window.max(1));
        let span = i - lo;
        let want = if span == 0 || self.per_row == 0 {
            0
        } else {
            1 + (next() % self.per_row as u64) as usize
        }
        .min(span);
        let mut cols: Vec<usize> = Vec::with_capacity(want);
        while cols.len() < want {
            let c = lo + (next() % span as u64) as usize;
            if !cols.contains(&c) {
                cols.push(c);
            }
        }
        cols.sort_unstable();
        // Coefficients of magnitude below 1 / per_row keep the solution bounded.
        let scale = 1.0 / self.per_row.max(1) as f64;
        let entries = cols
            .into_iter()
            .map(|c| (c, (unit(next()) - 0.5) * scale))
            .collect();
        Row {
            index: i,
            rhs,
            entries,
        }
    }

    /// The rows `rank` owns under `layout`, ascending.
    pub fn local_rows(&self, layout: Layout, rank: usize) -> Vec<Row> {
        (rank..self.n)
            .step_by(layout.size)
            .map(|i| self.row(i))
            .collect()
    }

    /// The serial solve of the whole system on one rank: the reference and the floor.
    pub fn serial(&self) -> Vec<f64> {
        let rows: Vec<Row> = (0..self.n).map(|i| self.row(i)).collect();
        serial_solve(&rows)
    }
}

/// Solves `rows` (all `n` rows, in order) serially.
pub fn serial_solve(rows: &[Row]) -> Vec<f64> {
    let mut y = vec![0.0; rows.len()];
    for r in rows {
        y[r.index] = eval(r, |c| y[c]);
    }
    y
}

/// One row's value given its operands: the same order of operations in every solver, so
/// every solver gives the serial solution bit for bit.
#[inline]
pub fn eval(r: &Row, mut y: impl FnMut(usize) -> f64) -> f64 {
    let mut acc = r.rhs;
    for &(c, a) in &r.entries {
        acc -= a * y(c);
    }
    acc
}
