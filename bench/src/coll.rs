//! The collective side of the benchmark: group barrier and allreduce over all ranks, each call
//! timed on its own, for the comparison with MPI (`bench/mpi/coll.c`). The allreduce is
//! measured twice: the runtime's (`"lib":"gaspi"`) and `gaspi-coll`'s on a team's engine
//! (`"lib":"gaspi-coll"`, with [`Flags::EAGER`], MPI's semantics), the same sizes, inputs and
//! checks.
//!
//! The iteration counts and warm-up mirror `bench/mpi/coll.c`: change both together.

use std::time::{Duration, Instant};

use gaspi::{Context, ReduceOp, Timeout, GROUP_ALL};
use gaspi_coll::{Capacity, Collectives, Flags, Team};

use crate::api::figure;
use crate::{Error, Figure, Result};

const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// Timed calls for a payload of `bytes` (0: barrier), and the untimed warm-up calls before.
fn iterations(bytes: usize) -> (usize, usize) {
    let iters = match bytes {
        0..=8 => 1000,
        9..=65536 => 300,
        _ => 100,
    };
    (iters / 10 + 1, iters)
}

/// Runs `one` (a call that returns its own duration) after its warm-up, all ranks entering
/// together, and returns the timed durations.
fn samples(
    ctx: &Context,
    bytes: usize,
    mut one: impl FnMut() -> Result<Duration>,
) -> Result<Vec<Duration>> {
    let (warmup, iters) = iterations(bytes);
    let mut samples = Vec::with_capacity(iters);
    ctx.barrier(TIMEOUT)?;
    for i in 0..warmup + iters {
        let took = one()?;
        if i >= warmup {
            samples.push(took);
        }
    }
    Ok(samples)
}

fn clocked(call: impl FnOnce() -> gaspi::Result<()>) -> Result<Duration> {
    let start = Instant::now();
    call()?;
    Ok(start.elapsed())
}

/// Barrier of all ranks.
pub(crate) fn barrier(ctx: &Context) -> Result<Option<Figure>> {
    let samples = samples(ctx, 0, || clocked(|| ctx.barrier(TIMEOUT)))?;
    Ok(figure(ctx, "barrier", 0, samples))
}

/// Allreduce payloads (bytes of f64 per rank).
pub(crate) const ALLREDUCE_SIZES: [usize; 3] = [8, 65536, 1 << 20];

/// The runtime's allreduce (f64 sum) of `bytes` per rank over all ranks; every result is
/// checked.
pub(crate) fn allreduce(ctx: &Context, bytes: usize) -> Result<Option<Figure>> {
    checked_allreduce(ctx, bytes, |input, output| {
        Ok(ctx.allreduce(GROUP_ALL, input, output, ReduceOp::Sum, TIMEOUT)?)
    })
}

/// `gaspi-coll`'s allreduce on a team of all ranks (f64 sum) of every size of
/// [`ALLREDUCE_SIZES`], as [`allreduce`].
pub(crate) fn team_allreduces(ctx: &Context) -> Result<Vec<Figure>> {
    let coll = Collectives::new(ctx)?;
    // Rabenseifner's staging of the largest size, about four times the vector, in a lane.
    let capacity = Capacity {
        lanes: 2,
        lane_bytes: 4 << 20,
    };
    let team = Team::with_capacity(&coll, GROUP_ALL, capacity, TIMEOUT)?;
    let mut figures = Vec::new();
    for &bytes in &ALLREDUCE_SIZES {
        let figure = checked_allreduce(ctx, bytes, |input, output| {
            Ok(team.allreduce(input, output, ReduceOp::Sum, Flags::EAGER, TIMEOUT)?)
        })?;
        figures.extend(figure.map(|f| Figure {
            lib: "gaspi-coll",
            ..f
        }));
    }
    Ok(figures)
}

/// The figure of `call`, an allreduce (f64 sum over all ranks) of `bytes` per rank; every
/// result is checked.
fn checked_allreduce(
    ctx: &Context,
    bytes: usize,
    mut call: impl FnMut(&[f64], &mut [f64]) -> Result<()>,
) -> Result<Option<Figure>> {
    let count = bytes / std::mem::size_of::<f64>();
    let own = f64::from(ctx.rank() + 1);
    let input: Vec<f64> = (0..count).map(|i| own * weight(i)).collect();
    let mut output = vec![0.0; count];
    let ranks = f64::from(ctx.size());
    let rank_sum = ranks * (ranks + 1.0) / 2.0;
    let samples = samples(ctx, bytes, || {
        output.fill(0.0);
        let start = Instant::now();
        call(&input, &mut output)?;
        let took = start.elapsed();
        match (0..count).find(|&i| output[i] != rank_sum * weight(i)) {
            None => Ok(took),
            Some(i) => Err(Error::Check(format!(
                "allreduce of {bytes} B: element {i} is {}, not {}",
                output[i],
                rank_sum * weight(i)
            ))),
        }
    })?;
    Ok(figure(ctx, "allreduce", bytes, samples))
}

/// Every element's sum over the ranks differs by its position, so a misplaced block shows.
fn weight(i: usize) -> f64 {
    (1 + i % 4) as f64
}
