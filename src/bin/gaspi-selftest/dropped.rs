//! `dropped`: the last rank drops its context without `finalize` and its process runs on.
//! The others' barrier, begun before the drop, and their `finalize` must fail naming it within
//! a few seconds, long before the process exits (before the drop announced the departure they
//! waited until it did, and with `Timeout::Block` for as long as it ran).

use std::time::Duration;

use gaspi::{Context, Error, Timeout};

use crate::check::{ensure, Data, Doing, Failure, Outcome, Report};

/// How long the dropping rank's process runs on after the drop: far beyond [`FAIL_WITHIN`].
const RUNS_ON: Duration = Duration::from_secs(12);
/// How soon a wait that needs the rank that left must fail: the drop comes 500 ms into the
/// others' barrier, and a wait begun before the news looks at the health of its ranks once a
/// second.
const FAIL_WITHIN: Duration = Duration::from_secs(4);

pub fn run(ctx: &Context) -> Outcome<Report> {
    ensure!(ctx.size() >= 2, "needs 2+ ranks");
    ctx.barrier(Timeout::Millis(30_000))
        .doing(|| "the barrier before the drop")?;
    Ok(Report::from(String::from("every rank joined")))
}

/// On the last rank: waits until the others are in their barrier, drops the context and runs
/// on. On the others: the barrier (under `Timeout::Block`) and `finalize` must fail naming
/// the last rank within [`FAIL_WITHIN`].
pub fn finalize_after_a_drop(ctx: Context, data: &mut Data) -> Outcome<String> {
    let gone = ctx.size() - 1;
    if ctx.rank() == gone {
        std::thread::sleep(Duration::from_millis(500));
        drop(ctx);
        std::thread::sleep(RUNS_ON);
        return Ok("dropped its context and ran on".into());
    }
    let named = |what: &str, result: gaspi::Result<()>| match result {
        Err(Error::RankFailed { rank, .. }) if rank == gone => Ok(()),
        other => Err(Failure(format!(
            "{what} after rank {gone} dropped its context: {other:?}"
        ))),
    };
    let (barrier, took) = data.timed("barrier", || ctx.barrier(Timeout::Block));
    named("the barrier", barrier)?;
    ensure!(took < FAIL_WITHIN, "the barrier took {took:?} to fail");
    let (finalized, took) = data.timed("finalize", || ctx.finalize(Timeout::Block));
    named("finalize", finalized)?;
    ensure!(took < FAIL_WITHIN, "finalize took {took:?} to fail");
    Ok(format!(
        "the barrier and finalize failed naming rank {gone}"
    ))
}
