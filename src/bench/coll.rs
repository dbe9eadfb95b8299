//! The collective side of the benchmark: group barrier and allreduce over all ranks, each call
//! timed on its own, for the comparison with MPI (`bench/mpi/coll.c`).
//!
//! The iteration counts and warm-up mirror `bench/mpi/coll.c`: change both together.

use std::time::{Duration, Instant};

use super::api::figure;
use super::Figure;
use crate::context::Context;
use crate::error::Result;
use crate::Timeout;

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

fn clocked(call: impl FnOnce() -> Result<()>) -> Result<Duration> {
    let start = Instant::now();
    call()?;
    Ok(start.elapsed())
}

/// Barrier of all ranks.
pub(crate) fn barrier(ctx: &Context) -> Result<Vec<Figure>> {
    let samples = samples(ctx, 0, || clocked(|| ctx.barrier(TIMEOUT)))?;
    Ok(figure(ctx, "barrier", 0, samples))
}
