//! `quiet-death`: the last rank is killed (SIGKILL) while no operation towards it is in
//! flight, so no broken connection tells the survivors. Meant for a job whose ranks look like
//! separate hosts (`GASPI_HOST_ID`), where no same-host look applies either.
//!
//! First the last rank stops itself (SIGSTOP) for 2.5 s: a ping of it and a barrier time out
//! and nothing is marked. Once it is resumed and a barrier and a ping of it have completed, it
//! waits a while (so that nothing of the survivors is in flight towards it) and kills itself.
//! The survivors then write to it and wait for that queue, ping it and run a barrier, each
//! with a 10 s timeout: each must fail with `RankFailed` naming it, well before its timeout,
//! and `state_vec` must mark it alone.

use std::time::Duration;

use gaspi::{local, remote, Context, Timeout};

use crate::check::{ensure, states, Data, Doing, Outcome, Report};
use crate::fault::stop_phase;
use crate::victim::{expect_failed, kill_myself};

const SEGMENT: u8 = 0;
const BLOCK: u64 = 64 << 10;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The timeout of each call that must fail; a failure by its deadline would be a timeout in
/// disguise.
const DEAD_TIMEOUT: Timeout = Timeout::Millis(10_000);
const FAIL_WITHIN: Duration = Duration::from_millis(5_000);

/// Runs the scenario up to (not including) finalize; the dead rank never returns.
pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ensure!(n >= 2, "quiet-death needs at least 2 ranks, got {n}");
    let dead = n - 1;
    let mut data = Data::default();
    ctx.segment_create(SEGMENT, BLOCK, TIMEOUT)
        .doing(|| "segment_create")?;
    stop_phase(ctx, dead, &mut data)?;
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier after the stop")?;
    if me != dead {
        ctx.proc_ping(dead, TIMEOUT)
            .doing(|| "proc_ping of the resumed rank")?;
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the kill")?;
    if me == dead {
        // The survivors' parts of that barrier complete meanwhile: nothing is in flight at
        // the kill.
        std::thread::sleep(Duration::from_millis(500));
        kill_myself();
    }
    std::thread::sleep(Duration::from_millis(1_500));
    let (waited, took) = data.timed("wait_dead", || {
        ctx.write(local(SEGMENT, 0), remote(dead, SEGMENT, 0), BLOCK, 0)?;
        ctx.wait(0, DEAD_TIMEOUT)
    });
    expect_failed(
        "a write to the dead rank and its queue's wait",
        waited,
        dead,
    )?;
    ensure!(
        took < FAIL_WITHIN,
        "the wait named the dead rank after {took:?}"
    );
    let (ping, _) = data.timed("ping_dead", || ctx.proc_ping(dead, DEAD_TIMEOUT));
    expect_failed("proc_ping of the dead rank", ping, dead)?;
    let (barrier, _) = data.timed("barrier_dead", || ctx.barrier(DEAD_TIMEOUT));
    expect_failed("a barrier with the dead rank", barrier, dead)?;
    let states = states(ctx);
    data.put("state_vec", &states);
    ensure!(
        states
            .chars()
            .enumerate()
            .all(|(r, s)| (r as gaspi::Rank == dead) == (s == 'C')),
        "state_vec is {states}: expected only rank {dead} Corrupt"
    );
    Ok(Report {
        summary: format!(
            "a stop of rank {dead} was timeouts; its death with nothing in flight towards it \
             was RankFailed naming it in a queue's wait, a ping and a barrier"
        ),
        data,
    })
}
