//! Who writes to whom in each epoch of the `epochs` scenario, and what: shared by the example
//! and by `coll/tests/pscw.rs`, which recomputes from it what every rank must have received.

use gaspi::Rank;

use crate::data::{fill, mix64};

/// Bytes reserved per origin in a target's window segment: origin `o` writes at `o * BLOCK`.
pub const BLOCK: u64 = 256;

/// The origin of each step of the `xyzu` scenario on target 0: (X) the set changes from 1
/// to 2, (Y) and (Z) origin 2 twice, (U) origin 1 again.
pub const XYZU: [Rank; 4] = [1, 2, 2, 1];

/// How the origin sets change from epoch to epoch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pattern {
    /// Every rank is written by the rank `1 + e % (n - 1)` to its left: a ring whose stride
    /// changes every epoch.
    Ring,
    /// Every other rank writes to the root `e % n`, which changes every epoch.
    AllToOne,
    /// Each target draws its origins (itself possibly among them) afresh every epoch.
    Changing,
    /// A periodic 2-D grid of `px` × `py` ranks (`px` the largest divisor of `n` up to its
    /// square root): each target draws afresh every epoch which of its 4 neighbours (fewer
    /// where the grid is too small for them to differ) write to it.
    Stencil,
}

impl Pattern {
    pub const ALL: [Pattern; 4] = [
        Pattern::Ring,
        Pattern::AllToOne,
        Pattern::Changing,
        Pattern::Stencil,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Ring => "ring",
            Pattern::AllToOne => "all_to_one",
            Pattern::Changing => "changing",
            Pattern::Stencil => "stencil",
        }
    }
}

/// The origins of `target` in epoch `epoch` (from 1) of a job of `n` ranks, ascending.
pub fn origins(pattern: Pattern, n: u32, target: Rank, epoch: u64) -> Vec<Rank> {
    match pattern {
        Pattern::Ring if n > 1 => {
            let stride = 1 + (epoch % u64::from(n - 1)) as u32;
            vec![(target + n - stride) % n]
        }
        Pattern::Ring => Vec::new(),
        Pattern::AllToOne => {
            if u64::from(target) == epoch % u64::from(n) {
                (0..n).filter(|&o| o != target).collect()
            } else {
                Vec::new()
            }
        }
        Pattern::Changing => (0..n)
            .filter(|&o| draw(epoch, target, o).is_multiple_of(3))
            .collect(),
        Pattern::Stencil => neighbours(n, target)
            .into_iter()
            .filter(|&o| !draw(epoch, target, o).is_multiple_of(4))
            .collect(),
    }
}

/// A number drawn for (`epoch`, `target`, `origin`).
fn draw(epoch: u64, target: Rank, origin: Rank) -> u64 {
    let key = epoch
        .wrapping_mul(1_000_003)
        .wrapping_add(u64::from(target) * 1009)
        .wrapping_add(u64::from(origin));
    mix64(key)
}

/// The distinct neighbours of `rank` (left, right, up, down) on the periodic grid of `n`
/// ranks, ascending; itself excluded.
pub fn neighbours(n: u32, rank: Rank) -> Vec<Rank> {
    let px = (1..=n)
        .filter(|&p| p * p <= n && n.is_multiple_of(p))
        .max()
        .unwrap_or(1);
    let py = n / px;
    let (x, y) = (rank % px, rank / px);
    let mut all = vec![
        y * px + (x + px - 1) % px,
        y * px + (x + 1) % px,
        ((y + py - 1) % py) * px + x,
        ((y + 1) % py) * px + x,
    ];
    all.sort_unstable();
    all.dedup();
    all.retain(|&r| r != rank);
    all
}

/// The targets of `origin` in epoch `epoch`, ascending.
pub fn targets(pattern: Pattern, n: u32, origin: Rank, epoch: u64) -> Vec<Rank> {
    (0..n)
        .filter(|&t| origins(pattern, n, t, epoch).contains(&origin))
        .collect()
}

/// The bytes `origin` writes to `target` in epoch `epoch`: 8 to `BLOCK` of them.
pub fn block(epoch: u64, origin: Rank, target: Rank) -> Vec<u8> {
    let seed = mix64(epoch ^ (u64::from(origin) << 40) ^ (u64::from(target) << 20));
    let mut bytes = vec![0; (8 + seed % (BLOCK - 7)) as usize];
    fill(seed, &mut bytes);
    bytes
}
