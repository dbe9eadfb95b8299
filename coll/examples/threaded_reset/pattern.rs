//! What the `threaded_reset` example sends and reports: the size of the block each rank sends
//! each rank (some empty), its bytes in each round, and the digest a rank reports over what it
//! received. `coll/tests/alltoallv_examples.rs` includes this file and computes from it,
//! independently of any run, the digest every rank must report.

use gaspi::Rank;

use crate::data;
pub use crate::data::Digest;

/// Rounds of a run, unless `--rounds` says otherwise.
pub const ROUNDS: u64 = 1000;

/// Threads per rank, unless `--threads` says otherwise.
pub const THREADS: usize = 4;

/// The size of the block `source` sends `target` every round: 0 to 3 KiB by pair, so that
/// blocks differ in size and, in jobs of 2 ranks or more, some are empty (those still arrive).
pub fn bytes(source: Rank, target: Rank) -> u64 {
    1024 * ((7 * u64::from(source) + 3 * u64::from(target) + 1) % 4)
}

/// The block `source` sends `target` in round `round`: a stream seeded by all three, so that
/// a block of another round or pair shows.
pub fn block(round: u64, source: Rank, target: Rank) -> Vec<u8> {
    let len = usize::try_from(bytes(source, target)).expect("blocks are at most 3 KiB");
    let mut block = vec![0u8; len];
    data::fill(
        round << 32 | u64::from(source) << 16 | u64::from(target),
        &mut block,
    );
    block
}

/// Adds to `digest` what a rank got from `source` in `round`: how many threads were handed
/// the block (exactly one, if all is well) and the block (the first handed out, if any).
pub fn record(digest: &mut Digest, round: u64, source: Rank, handed_out: usize, block: &[u8]) {
    digest.add(&round.to_le_bytes());
    digest.add(&u64::from(source).to_le_bytes());
    digest.add(&(handed_out as u64).to_le_bytes());
    digest.add(block);
}

/// The digest rank `me` of a job of `ranks` must report after `rounds` rounds: every source
/// handed out once per round, with the block it sent.
pub fn expected(rounds: u64, ranks: Rank, me: Rank) -> Digest {
    let mut digest = Digest::default();
    for round in 1..=rounds {
        for source in 0..ranks {
            record(&mut digest, round, source, 1, &block(round, source, me));
        }
    }
    digest
}
