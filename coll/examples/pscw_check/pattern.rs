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
}

impl Pattern {
    pub const ALL: [Pattern; 3] = [Pattern::Ring, Pattern::AllToOne, Pattern::Changing];

    pub fn name(self) -> &'static str {
        match self {
            Pattern::Ring => "ring",
            Pattern::AllToOne => "all_to_one",
            Pattern::Changing => "changing",
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
            .filter(|&o| {
                let key = epoch
                    .wrapping_mul(1_000_003)
                    .wrapping_add(u64::from(target) * 1009)
                    .wrapping_add(u64::from(o));
                mix64(key).is_multiple_of(3)
            })
            .collect(),
    }
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
