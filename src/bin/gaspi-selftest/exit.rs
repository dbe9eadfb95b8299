//! `exit`: ranks leave the job as soon as their finalize is over, while others may still wait
//! in finalize's synchronisation for a partner that lost its core. None of them may take a rank
//! that finalized and left for a dead one (before the fix, finalize of an oversubscribed job
//! failed now and then with `RankFailed` naming a rank that had simply finished first).
//!
//! Every rank runs a few barriers to line the job up and returns; finalize, in `main`, is the
//! check: it must succeed on every rank, which the test suite runs many times under load.

use gaspi::Context;

use crate::check::{Failure, Report};
use crate::FINALIZE_TIMEOUT;

/// Barriers before finalize.
const BARRIERS: u32 = 3;

/// Runs the scenario up to finalize, which the caller makes.
pub fn run(ctx: &Context) -> Result<Report, Failure> {
    for i in 0..BARRIERS {
        ctx.barrier(FINALIZE_TIMEOUT)
            .map_err(|e| Failure(format!("barrier {i} failed: {e}")))?;
    }
    Ok(Report::from(format!(
        "{BARRIERS} barriers, then finalize while others may still be in it"
    )))
}
