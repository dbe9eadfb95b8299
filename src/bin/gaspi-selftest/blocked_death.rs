//! `blocked-death`: the last rank is killed (SIGKILL) while every other rank is asleep in long
//! waits that depend on it, and each wait must end at once naming it.
//!
//! Every survivor tells the victim that it is about to block, then one of its threads waits
//! in `notify_wait_any` for a notification that only the victim would set (naming the victim
//! as its sender), another likewise in `notify_wait_range` for a range of them, and a third in
//! a barrier that the victim never enters, all with a 20 s timeout. Once every survivor has
//! told it, the victim lets them fall asleep in those waits, reads the host's monotonic
//! clock, reports the reading and its pid on its data line and kills itself. Each wait must fail with `RankFailed` naming the victim; each survivor
//! reports when each failed, on the same clock, so that the tests can bound how long after
//! the death a sleeping waiter was told. Then the survivors' group goes on without the victim,
//! and `finalize` is recorded as [`crate::dead_read::finalize_names_the_dead_rank`] does. Run
//! it under `gaspirun --keep-going` with at least 3 ranks; the victim prints no `ok` line.

use std::time::Duration;

use gaspi::{Context, Notification, NotificationId, Rank, SegmentId, Timeout};

use crate::check::{ensure, monotonic_us, Data, Doing, Failure, Outcome, Report};
use crate::victim::{expect_failed, report_and_kill_myself, survivors_group};

const SEG: SegmentId = 0;
const QUEUE: gaspi::QueueId = 0;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The timeout of the waits the victim dies under: far beyond any bound on being told.
const BLOCKED: Timeout = Timeout::Millis(20_000);
/// How long the victim lets the survivors sleep in their waits before it dies: past their
/// spinning, and short of the one second after which a wait used to look at its ranks anyway.
const ASLEEP: Duration = Duration::from_millis(300);
/// The notification a survivor waits for, which only the victim would set (survivor `r` tells
/// the victim on notification `r`).
const NEVER: NotificationId = 1000;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ensure!(n >= 3, "blocked-death needs at least 3 ranks, got {n}");
    let victim = n - 1;
    ctx.segment_create(SEG, 4096, TIMEOUT)
        .doing(|| "segment_create")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the waits")?;
    if me == victim {
        die_under_waiters(ctx, victim)?;
    }
    ctx.notify(victim, SEG, Notification { id: me, value: 1 }, QUEUE)
        .doing(|| "telling the victim")?;
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "waiting for the notification to the victim")?;
    let segment = ctx.segment(SEG).doing(|| "the segment's handle")?;
    let (waiting, ranging, (barrier, barrier_at)) = std::thread::scope(|s| {
        let waiter = s.spawn(|| {
            let got = ctx.notify_wait_any(&[segment.range(NEVER, 1)], &[victim], BLOCKED);
            (got, monotonic_us())
        });
        let ranger = s.spawn(|| {
            let got = ctx.notify_wait_range(segment.range(NEVER + 1, 2), &[victim], BLOCKED);
            (got, monotonic_us())
        });
        let barrier = ctx.barrier(BLOCKED);
        let barrier_at = monotonic_us();
        (waiter.join(), ranger.join(), (barrier, barrier_at))
    });
    let (waited, waited_at) =
        waiting.map_err(|_| Failure("the thread in notify_wait_any panicked".into()))?;
    let (ranged, ranged_at) =
        ranging.map_err(|_| Failure("the thread in notify_wait_range panicked".into()))?;
    let mut data = Data::default();
    data.outcome("wait_any", &waited);
    data.put("wait_any_at_us", waited_at);
    data.outcome("wait_range", &ranged);
    data.put("wait_range_at_us", ranged_at);
    data.outcome("barrier", &barrier);
    data.put("barrier_at_us", barrier_at);
    expect_failed("notify_wait_any naming the victim", waited, victim)?;
    expect_failed("notify_wait_range naming the victim", ranged, victim)?;
    expect_failed("the barrier the victim never entered", barrier, victim)?;
    survivors_group(ctx, victim, &mut data)?;
    Ok(Report {
        summary: format!(
            "rank {victim} was killed while this rank waited for it in notify_wait_any, \
             notify_wait_range and a barrier: all failed naming it, and the survivors' group \
             went on without it"
        ),
        data,
    })
}

/// The victim: once every survivor is about to block, time for them to fall asleep, then
/// SIGKILL.
fn die_under_waiters(ctx: &Context, victim: Rank) -> Outcome {
    for survivor in 0..victim {
        ctx.notify_waitsome(SEG, survivor, 1, TIMEOUT)
            .doing(|| format!("waiting for rank {survivor} to block"))?;
    }
    std::thread::sleep(ASLEEP);
    report_and_kill_myself("blocked-death", victim)
}
