//! The sparse alltoallv of `gaspi-coll` in rounds, for the comparison with `MPI_Alltoallv` and
//! `MPI_Neighbor_alltoallv` (`bench/mpi/alltoallv.c`).
//!
//! What both sides measure (change them together):
//! * Variants, by the ranks each rank sends to: `dense`, every other rank; `sparse2`, ranks
//!   r±1; `sparse4`, r±1 and r±2; modulo the job size, with duplicates and the rank itself
//!   removed, so that at 2 ranks all three are the one other rank and at 4 `sparse4` is
//!   `dense` (the lines carry `"peers"`, the count that remains). No variant sends to itself:
//!   a block to oneself is a local copy and says nothing of communication. The sets are
//!   symmetric, so each rank receives from exactly the ranks it sends to.
//! * Every rank sends `bytes` to each peer. A round is the proposal's form: `alltoallv` until
//!   `Complete`, each arrival checked and reset as soon as it is reported. Rounds follow each
//!   other with no barrier between them, as the protocol allows (a block is written only after
//!   its target reset the previous one, a block of at most 1 KiB the one of two rounds
//!   before), and as consecutive blocking MPI calls do.
//! * The figure: every rank times each of its rounds, and the line carries the largest of the
//!   ranks' medians, the pace of the slowest member (`iters`: the rounds behind each median).
//! * Every block carries a stamp naming its round, sender and receiver in its first and last
//!   8 bytes. Here the stamps are checked inside the timed round, before the reset that lets
//!   the next round's block land; MPI checks after its call.

use std::time::Instant;

use gaspi::{Context, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Plan, Status};

use crate::api::figure;
use crate::stamp::Stamp;
use crate::{slowest_median, Error, Figure, Result};

/// A wait this long without a new arrival is a failure of the run, not a pause to sit out.
const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// The user segments of the exchange: where blocks land, and where they are sent from.
const RECEIVE: SegmentId = 1;
const SOURCE: SegmentId = 2;

/// Bytes per block.
pub(crate) const SIZES: [usize; 4] = [8, 1024, 65536, 1 << 20];
/// The variants and their reach: a rank sends to the ranks at most this far from it, both
/// ways round the ring (`u32::MAX`: every rank).
pub(crate) const VARIANTS: [(&str, u32); 3] = [("dense", u32::MAX), ("sparse2", 1), ("sparse4", 2)];

/// Timed rounds for blocks of `bytes`, at most `cap`, and the untimed warm-up rounds before.
fn iterations(bytes: usize, cap: usize) -> (usize, usize) {
    let iters = match bytes {
        0..=1024 => 1000,
        1025..=65536 => 300,
        _ => 100,
    }
    .min(cap)
    .max(1);
    (iters / 10 + 1, iters)
}

/// The ranks `me` sends to (and receives from) in a job of `size`: those at most `reach` away
/// around the ring, ascending, without `me`.
pub(crate) fn peers(me: Rank, size: u32, reach: u32) -> Vec<Rank> {
    let mut peers: Vec<Rank> = (1..=reach.min(size - 1))
        .flat_map(|d| [(me + d) % size, (me + size - d) % size])
        .filter(|&r| r != me)
        .collect();
    peers.sort_unstable();
    peers.dedup();
    peers
}

/// The exchange's segments and its alltoallv over all ranks, for every variant and size.
pub(crate) struct Bench<'c> {
    ctx: &'c Context,
    a2a: Alltoallv<'c>,
    /// Rounds run so far, over every figure: stamps never repeat, so a block left over from an
    /// earlier figure is caught too.
    rounds: u64,
}

impl<'c> Bench<'c> {
    /// Creates the segments, large enough for the densest variant at the largest size, and
    /// the alltoallv (collective).
    pub(crate) fn new(ctx: &'c Context, coll: &'c Collectives<'c>) -> Result<Bench<'c>> {
        let largest = SIZES[SIZES.len() - 1] as u64 * u64::from(ctx.size() - 1);
        for segment in [RECEIVE, SOURCE] {
            ctx.segment_create(segment, largest, TIMEOUT)?;
        }
        Ok(Bench {
            ctx,
            a2a: Alltoallv::new(coll, GROUP_ALL, TIMEOUT)?,
            rounds: 0,
        })
    }

    /// Rounds of `variant` with blocks of `bytes` (at most `cap` timed), after their warm-up,
    /// the plan made once before them.
    pub(crate) fn figure(
        &mut self,
        (variant, reach): (&'static str, u32),
        bytes: usize,
        cap: usize,
    ) -> Result<Option<Figure>> {
        let ctx = self.ctx;
        let (me, size) = (ctx.rank(), ctx.size());
        let peers = peers(me, size, reach);
        let sends: Vec<(Rank, u64)> = peers.iter().map(|&p| (p, bytes as u64)).collect();
        let plan = self.a2a.get_remote_offsets(RECEIVE, 0, &sends, TIMEOUT)?;
        let sources: Vec<Rank> = plan.sources().iter().map(|s| s.rank).collect();
        if sources != peers {
            return Err(Error::Check(format!(
                "alltoallv {variant}: rank {me} sends to {peers:?}, but its plan has sources {sources:?}"
            )));
        }
        let offsets: Vec<u64> = (0..peers.len() as u64).map(|i| i * bytes as u64).collect();
        let (warmup, iters) = iterations(bytes, cap);
        let mut samples = Vec::with_capacity(iters);
        ctx.barrier(TIMEOUT)?;
        for i in 0..warmup + iters {
            self.rounds += 1;
            self.stamp_blocks(&plan, &offsets, bytes)?;
            let start = Instant::now();
            self.round(&plan, &offsets, bytes)?;
            if i >= warmup {
                samples.push(start.elapsed());
            }
        }
        let slowest = slowest_median(ctx, &samples)?;
        Ok(figure(ctx, "alltoallv", bytes, samples).map(|f| Figure {
            median: slowest,
            variant: Some(variant),
            peers: Some(peers.len() as u32),
            ..f
        }))
    }

    /// Writes this round's stamps into the blocks about to be sent. The source segment is free
    /// to change: the last round's `Complete` said its sends had completed locally.
    fn stamp_blocks(&self, plan: &Plan, offsets: &[u64], bytes: usize) -> Result<()> {
        let me = self.ctx.rank();
        for (d, &offset) in plan.destinations().iter().zip(offsets) {
            let stamp = Stamp {
                round: self.rounds,
                sender: me,
                receiver: d.rank,
            };
            stamp.put(self.ctx, SOURCE, offset, bytes)?;
        }
        Ok(())
    }

    /// One round in the proposal's form, every arrival checked, then reset.
    fn round(&self, plan: &Plan, offsets: &[u64], bytes: usize) -> Result<()> {
        loop {
            match self.a2a.alltoallv(plan, SOURCE, offsets, TIMEOUT)? {
                Status::Arrived(source) => {
                    self.check(plan, source, bytes)?;
                    self.a2a.alltoallv_reset(&[source])?;
                }
                Status::Complete => return Ok(()),
            }
        }
    }

    /// The block of `source` must carry this round's stamp from `source` to this rank.
    fn check(&self, plan: &Plan, source: Rank, bytes: usize) -> Result<()> {
        let me = self.ctx.rank();
        let Some(from) = plan.source(source) else {
            return Err(Error::Check(format!(
                "alltoallv: rank {me} was told of an arrival from rank {source}, not a source"
            )));
        };
        let stamp = Stamp {
            round: self.rounds,
            sender: source,
            receiver: me,
        };
        stamp.check(self.ctx, RECEIVE, from.offset, bytes, "alltoallv")
    }
}

#[cfg(test)]
mod tests {
    use super::{peers, VARIANTS};

    fn reach(name: &str) -> u32 {
        VARIANTS
            .iter()
            .find(|(n, _)| *n == name)
            .map(|&(_, reach)| reach)
            .expect("a variant of VARIANTS")
    }

    #[test]
    fn small_jobs_fold_the_variants_together() {
        for (name, _) in VARIANTS {
            assert_eq!(peers(1, 2, reach(name)), [0], "{name} at 2 ranks");
        }
        assert_eq!(peers(1, 4, reach("sparse4")), peers(1, 4, reach("dense")));
        assert_eq!(peers(0, 4, reach("sparse2")), [1, 3]);
        assert_eq!(peers(0, 1, reach("dense")), [] as [u32; 0]);
    }

    #[test]
    fn sparse_peers_wrap_around_the_ring() {
        assert_eq!(peers(0, 8, reach("sparse2")), [1, 7]);
        assert_eq!(peers(0, 8, reach("sparse4")), [1, 2, 6, 7]);
        assert_eq!(peers(7, 8, reach("sparse4")), [0, 1, 5, 6]);
        assert_eq!(peers(3, 8, reach("dense")), [0, 1, 2, 4, 5, 6, 7]);
    }
}
