//! The problem of the `spmv_halo` example, which every rank and the test compute alike: a
//! 9-point stencil on a periodic `width` x `height` grid (one unknown a point, numbered row by
//! row), split into blocks of a `px` x `py` grid of ranks, and Jacobi iterations for
//! `A x = b` with `A = DIAGONAL * I - (the 8 neighbours)`, from `x = 0`.
//!
//! [`Grid::jacobi_row`] is the only place a new value is computed, so the distributed
//! iterations and [`Grid::serial`] add the same numbers in the same order: their results are
//! equal to the bit. `coll/tests/alltoallv_examples.rs` includes this file and computes from
//! it, independently of any run, what every rank must report.

use std::collections::BTreeSet;

use gaspi::Rank;

use crate::data;
pub use crate::data::Digest;

/// Grid points across, unless `--width` says otherwise.
pub const WIDTH: usize = 192;
/// Grid points down, unless `--height` says otherwise.
pub const HEIGHT: usize = 192;
/// Jacobi iterations, unless `--iterations` says otherwise.
pub const ITERATIONS: u64 = 100;
/// `A`'s diagonal: larger than the 8 off-diagonal ones of a row together, so that the
/// iterations converge and the numbers stay of order 1.
pub const DIAGONAL: f64 = 8.5;

/// The grid of points and how the ranks share it.
#[derive(Debug, Clone, Copy)]
pub struct Grid {
    pub width: usize,
    pub height: usize,
    /// Ranks across: rank `r` holds block `(r % px, r / px)`.
    pub px: usize,
    /// Ranks down.
    pub py: usize,
}

impl Grid {
    /// A `width` x `height` grid over `ranks` ranks, `px` of them across (`None`: as square
    /// a split as `ranks` allows), or `None` when that split does not fit.
    pub fn new(width: usize, height: usize, ranks: Rank, px: Option<usize>) -> Option<Grid> {
        let ranks = ranks as usize;
        let px = px.unwrap_or_else(|| {
            let py = (1..=ranks)
                .filter(|py| ranks.is_multiple_of(*py) && py * py <= ranks)
                .max()
                .unwrap_or(1);
            ranks / py
        });
        let fits = px > 0 && ranks.is_multiple_of(px) && px <= width && ranks / px <= height;
        fits.then_some(Grid {
            width,
            height,
            px,
            py: ranks / px,
        })
    }

    /// Unknowns in the grid.
    pub fn len(&self) -> usize {
        self.width * self.height
    }

    /// The rank that holds point `i`.
    pub fn owner(&self, i: usize) -> Rank {
        let (x, y) = (i % self.width, i / self.width);
        let bx = (0..self.px)
            .rfind(|&b| split(self.width, self.px, b) <= x)
            .unwrap_or(0);
        let by = (0..self.py)
            .rfind(|&b| split(self.height, self.py, b) <= y)
            .unwrap_or(0);
        Rank::try_from(by * self.px + bx).expect("ranks fit a Rank")
    }

    /// The points `rank` holds, ascending.
    pub fn rows(&self, rank: Rank) -> Vec<usize> {
        let rank = rank as usize;
        let (bx, by) = (rank % self.px, rank / self.px);
        let xs = split(self.width, self.px, bx)..split(self.width, self.px, bx + 1);
        let ys = split(self.height, self.py, by)..split(self.height, self.py, by + 1);
        ys.flat_map(|y| xs.clone().map(move |x| y * self.width + x))
            .collect()
    }

    /// The 8 neighbours of point `i` (its row's off-diagonal entries), in a fixed order.
    pub fn neighbours(&self, i: usize) -> [usize; 8] {
        let (w, h) = (self.width, self.height);
        let (x, y) = (i % w, i / w);
        let at = |dx: usize, dy: usize| ((y + dy) % h) * w + (x + dx) % w;
        // Steps of -1 are steps of size - 1 on the torus.
        let (l, r, u, d) = (w - 1, 1, h - 1, 1);
        [
            at(l, u),
            at(0, u),
            at(r, u),
            at(l, 0),
            at(r, 0),
            at(l, d),
            at(0, d),
            at(r, d),
        ]
    }

    /// The right-hand side `b` at point `i`: deterministic, between -1 and 1.
    pub fn rhs(&self, i: usize) -> f64 {
        let z = data::mix64(i as u64 ^ 0x6a09_e667_f3bc_c908);
        (z >> 11) as f64 / (1u64 << 52) as f64 - 1.0
    }

    /// The new value at point `i` after one Jacobi step, from the current values `x` of its
    /// neighbours.
    pub fn jacobi_row(&self, i: usize, x: impl Fn(usize) -> f64) -> f64 {
        let sum = self
            .neighbours(i)
            .iter()
            .fold(self.rhs(i), |sum, &j| sum + x(j));
        sum / DIAGONAL
    }

    /// Every value after `iterations` Jacobi steps from `x = 0`, in one process.
    pub fn serial(&self, iterations: u64) -> Vec<f64> {
        let mut x = vec![0.0; self.len()];
        for _ in 0..iterations {
            x = (0..self.len())
                .map(|i| self.jacobi_row(i, |j| x[j]))
                .collect();
        }
        x
    }

    /// The points of `owner` whose values the rows of `reader` use, ascending: what `owner`
    /// sends `reader` each iteration (nothing when `reader` is `owner`).
    pub fn halo(&self, reader: Rank, owner: Rank) -> Vec<usize> {
        if reader == owner {
            return Vec::new();
        }
        let needed: BTreeSet<usize> = self
            .rows(reader)
            .into_iter()
            .flat_map(|i| self.neighbours(i))
            .filter(|&j| self.owner(j) == owner)
            .collect();
        needed.into_iter().collect()
    }

    /// The digest of `values`, in order, to the bit.
    pub fn digest(values: impl IntoIterator<Item = f64>) -> Digest {
        let mut digest = Digest::default();
        for value in values {
            digest.add(&value.to_bits().to_le_bytes());
        }
        digest
    }
}

/// Where block `b` of `parts` begins along a side of `len` points.
fn split(len: usize, parts: usize, b: usize) -> usize {
    b * len / parts
}
