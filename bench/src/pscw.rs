//! Epochs of `gaspi-coll`'s [`Window`] (post / start / complete / wait), for the comparison with
//! `MPI_Win_post / start / complete / wait` (`bench/mpi/pscw.c`).
//!
//! What both sides measure (change them together):
//! * `pscw`: an epoch ping-pong within each pair of ranks (0, 1), (2, 3), ..., all pairs at
//!   once, so that at 4 and 8 ranks every rank of the host is busy, as in a code that runs
//!   epochs everywhere (the last rank of an odd job sits out). The lower rank of a pair starts
//!   its partner, writes `bytes`, completes, then posts to its partner and waits; the higher
//!   one mirrors it, posting first. A sample is half a round trip.
//! * `pscw_halo`: a periodic 2-D grid of px × py ranks, px the largest divisor of the job size
//!   not above its square root; each rank posts to its distinct neighbours, starts them,
//!   writes one block of `bytes` to each, completes and waits. A sample is one epoch. The
//!   lines carry `"peers"`, the distinct neighbours (1 at 2 ranks, 2 at 4, 3 at 8: a grid two
//!   wide has the same neighbour west and east).
//! * The figure is the largest of the ranks' medians (`iters`: the samples behind each).
//! * Every block carries a stamp naming its round, sender and receiver, checked once the wait
//!   that made it visible returned: inside the timed round trip in the ping-pong (before the
//!   answer), after the timed epoch in the halo.
//!
//! gaspi only, `pingpong`: the yardstick of the epoch ping-pong, a plain write_notify
//! ping-pong (`gaspi-bench pingpong`'s) in the same pairs, with the same counts, in the same
//! job, between the same segments (from the source, a buffer only its owner touches, into the
//! window: a ping-pong that sent back the buffer it had just received would move the data
//! between the caches of two cores on every trip, which the epochs do not).

use std::time::{Duration, Instant};

use gaspi::{Context, Rank, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{Assert, Collectives, Window};

use crate::api::{figure, round_trips};
use crate::stamp::Stamp;
use crate::{slowest_median, Figure, Result};

const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// The window's segment, where blocks land, and the segment they are written from: past the
/// ids of the other benchmarks of one run.
const WINDOW: SegmentId = 3;
const SOURCE: SegmentId = 4;

/// Bytes per block.
pub(crate) const SIZES: [usize; 2] = [8, 65536];
/// The most distinct neighbours on the grid.
const NEIGHBOURS: usize = 4;

/// Timed round trips or epochs for blocks of `bytes`, at most `cap`, and the untimed warm-up
/// before them.
fn iterations(bytes: usize, cap: usize) -> (usize, usize) {
    let iters = if bytes <= 1024 { 1000 } else { 300 }.min(cap).max(1);
    (iters / 10 + 1, iters)
}

/// `me`'s partner in the ping-pongs of a job of `size`: none for the last rank of an odd job.
fn partner(me: Rank, size: u32) -> Option<Rank> {
    Some(me ^ 1).filter(|&p| p < size)
}

/// `me`'s distinct neighbours on the periodic grid of a job of `size`, ascending, without `me`.
fn neighbours(me: Rank, size: u32) -> Vec<Rank> {
    // 1 divides every size: a job of one rank or more has a width.
    let px = (1..=size)
        .take_while(|w| w * w <= size)
        .filter(|&w| size.is_multiple_of(w))
        .last()
        .unwrap_or(1);
    let py = size / px;
    let (x, y) = (me % px, me / px);
    let at = |x: u32, y: u32| y * px + x;
    let mut around = vec![
        at((x + px - 1) % px, y),
        at((x + 1) % px, y),
        at(x, (y + py - 1) % py),
        at(x, (y + 1) % py),
    ];
    around.retain(|&r| r != me);
    around.sort_unstable();
    around.dedup();
    around
}

/// The window over all ranks and its segments, for every pattern and size.
pub(crate) struct Bench<'c> {
    ctx: &'c Context,
    win: Window<'c>,
    /// Rounds run so far, over every figure: stamps never repeat, so a block left over from an
    /// earlier figure is caught too.
    rounds: u64,
}

impl<'c> Bench<'c> {
    /// Creates the segments, large enough for a block of the largest size from every
    /// neighbour, and the window (collective).
    pub(crate) fn new(ctx: &'c Context, coll: &'c Collectives<'c>) -> Result<Bench<'c>> {
        let largest = (SIZES[SIZES.len() - 1] * NEIGHBOURS) as u64;
        for segment in [WINDOW, SOURCE] {
            ctx.segment_create(segment, largest, TIMEOUT)?;
        }
        Ok(Bench {
            ctx,
            win: Window::new(coll, GROUP_ALL, WINDOW, TIMEOUT)?,
            rounds: 0,
        })
    }

    /// The write_notify ping-pong of `bytes` in the pairs (at most `cap` timed round trips).
    pub(crate) fn write_notify(&self, bytes: usize, cap: usize) -> Result<Option<Figure>> {
        let ctx = self.ctx;
        let counts = iterations(bytes, cap);
        ctx.barrier(TIMEOUT)?;
        let samples = match partner(ctx.rank(), ctx.size()) {
            Some(peer) => {
                let leads = ctx.rank() < peer;
                round_trips(ctx, [SOURCE, WINDOW], peer, leads, bytes, counts)?
            }
            None => Vec::new(),
        };
        self.figure("pingpong", bytes, &samples, None)
    }

    /// The epoch ping-pong of `bytes` in the pairs (at most `cap` timed round trips).
    pub(crate) fn pingpong(&mut self, bytes: usize, cap: usize) -> Result<Option<Figure>> {
        let ctx = self.ctx;
        let (warmup, iters) = iterations(bytes, cap);
        let mut samples = Vec::with_capacity(iters);
        ctx.barrier(TIMEOUT)?;
        if let Some(peer) = partner(ctx.rank(), ctx.size()) {
            let leads = ctx.rank() < peer;
            for i in 0..warmup + iters {
                self.rounds += 1;
                let start = Instant::now();
                if leads {
                    self.access(peer, bytes)?;
                    self.expose(peer, bytes)?;
                } else {
                    self.expose(peer, bytes)?;
                    self.access(peer, bytes)?;
                }
                if i >= warmup {
                    samples.push(start.elapsed() / 2);
                }
            }
        } else {
            // The rounds of the others, so that the stamps of later figures agree.
            self.rounds += (warmup + iters) as u64;
        }
        self.figure("pscw", bytes, &samples, None)
    }

    /// One access epoch of the ping-pong: `bytes` to `peer`.
    fn access(&mut self, peer: Rank, bytes: usize) -> Result<()> {
        self.stamp(self.ctx.rank(), peer)
            .put(self.ctx, SOURCE, 0, bytes)?;
        self.win.start(&[peer], Assert::NONE, TIMEOUT)?;
        self.win.write(SOURCE, 0, peer, 0, bytes as u64)?;
        Ok(self.win.complete(TIMEOUT)?)
    }

    /// One exposure epoch of the ping-pong: `bytes` from `peer`, checked.
    fn expose(&mut self, peer: Rank, bytes: usize) -> Result<()> {
        self.win.post(&[peer], Assert::NONE, TIMEOUT)?;
        self.win.wait(TIMEOUT)?;
        self.stamp(peer, self.ctx.rank())
            .check(self.ctx, WINDOW, 0, bytes, "pscw")
    }

    /// Halo epochs with blocks of `bytes` (at most `cap` timed).
    pub(crate) fn halo(&mut self, bytes: usize, cap: usize) -> Result<Option<Figure>> {
        let ctx = self.ctx;
        let (me, size) = (ctx.rank(), ctx.size());
        let around = neighbours(me, size);
        // Where this rank's block lands in each neighbour's window: its place among the
        // neighbour's neighbours (the relation is symmetric, so it is there).
        let places: Vec<u64> = around
            .iter()
            .map(|&n| neighbours(n, size).iter().position(|&r| r == me))
            .map(|place| place.unwrap_or_default() as u64 * bytes as u64)
            .collect();
        // Block k of either segment is the k-th neighbour's: the one for it in the source, the
        // one from it in the window.
        let blocks: Vec<u64> = (0..around.len() as u64).map(|i| i * bytes as u64).collect();
        let (warmup, iters) = iterations(bytes, cap);
        let mut samples = Vec::with_capacity(iters);
        ctx.barrier(TIMEOUT)?;
        for i in 0..warmup + iters {
            self.rounds += 1;
            for (&n, &at) in around.iter().zip(&blocks) {
                self.stamp(me, n).put(ctx, SOURCE, at, bytes)?;
            }
            let start = Instant::now();
            self.win.post(&around, Assert::NONE, TIMEOUT)?;
            self.win.start(&around, Assert::NONE, TIMEOUT)?;
            for ((&n, &from), &to) in around.iter().zip(&blocks).zip(&places) {
                self.win.write(SOURCE, from, n, to, bytes as u64)?;
            }
            self.win.complete(TIMEOUT)?;
            self.win.wait(TIMEOUT)?;
            if i >= warmup {
                samples.push(start.elapsed());
            }
            for (&n, &at) in around.iter().zip(&blocks) {
                self.stamp(n, me)
                    .check(ctx, WINDOW, at, bytes, "pscw_halo")?;
            }
        }
        let peers = Some(around.len() as u32);
        self.figure("pscw_halo", bytes, &samples, peers)
    }

    /// The stamp of this round's block from `sender` to `receiver`.
    fn stamp(&self, sender: Rank, receiver: Rank) -> Stamp {
        Stamp {
            round: self.rounds,
            sender,
            receiver,
        }
    }

    /// Rank 0's line for `samples`: the slowest rank's median (collective).
    fn figure(
        &self,
        bench: &'static str,
        bytes: usize,
        samples: &[Duration],
        peers: Option<u32>,
    ) -> Result<Option<Figure>> {
        let slowest = slowest_median(self.ctx, samples)?;
        Ok(
            figure(self.ctx, bench, bytes, samples.to_vec()).map(|f| Figure {
                median: slowest,
                peers,
                ..f
            }),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::{neighbours, partner};

    #[test]
    fn small_grids_fold_neighbours_together() {
        assert_eq!(neighbours(0, 2), [1]);
        assert_eq!(neighbours(1, 2), [0]);
        // 2 × 2: west and east are one rank, north and south another.
        assert_eq!(neighbours(0, 4), [1, 2]);
        assert_eq!(neighbours(3, 4), [1, 2]);
        // 2 × 4: west and east fold, north and south do not.
        assert_eq!(neighbours(0, 8), [1, 2, 6]);
        assert_eq!(neighbours(5, 8), [3, 4, 7]);
    }

    #[test]
    fn larger_grids_have_four_neighbours() {
        // 3 × 3.
        assert_eq!(neighbours(4, 9), [1, 3, 5, 7]);
        assert_eq!(neighbours(0, 9), [1, 2, 3, 6]);
        // 4 × 4.
        assert_eq!(neighbours(5, 16), [1, 4, 6, 9]);
    }

    #[test]
    fn every_rank_is_its_neighbours_neighbour() {
        for size in 2..=16 {
            for me in 0..size {
                for n in neighbours(me, size) {
                    assert!(neighbours(n, size).contains(&me), "{me} and {n} of {size}");
                }
            }
        }
    }

    #[test]
    fn pairs_leave_the_last_rank_of_an_odd_job_out() {
        assert_eq!(partner(0, 2), Some(1));
        assert_eq!(partner(1, 2), Some(0));
        assert_eq!(partner(6, 8), Some(7));
        assert_eq!(partner(4, 5), None);
    }
}
