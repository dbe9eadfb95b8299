//! `serialised`: a collective call that finds another thread's collective of the same group
//! under way waits for it only until its own timeout.
//!
//! On rank 0 thread A enters a barrier without a timeout, which the other ranks join only
//! [`LATE`] later; meanwhile thread B makes the calls that share the barrier's state with a
//! timeout (`barrier`, `segment_create`, each with `Millis` and `Test`): each must return
//! `Timeout` by its deadline having changed nothing, while A still waits. B's `allreduce`
//! (last: it stays in flight) runs beside A's barrier, as GASPI allows, and times out because
//! the late ranks are not in it yet; it too must be back by its deadline. Then A's barrier
//! completes, and B's barrier, allreduce and segment creation, made again, complete with the
//! right values. The calls' outcomes and durations are reported for the test to judge.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::sleep;
use std::time::Duration;

use gaspi::{Context, Error, ReduceOp, SegmentId, Timeout, GROUP_ALL};

use crate::check::{ensure, Crew, Data, Doing, Outcome, Report};

/// How long after rank 0's thread A the other ranks enter the barrier.
const LATE: Duration = Duration::from_millis(2_500);
/// How long thread B lets A wait before its own calls.
const HEAD_START: Duration = Duration::from_millis(300);
const MILLIS: u64 = 200;
/// A `Millis(200)` call must be back well before the late ranks come (before the fix it
/// waited for them, about 2.2 s).
const MILLIS_LIMIT: Duration = Duration::from_millis(1_500);
/// `Test` must not wait; a scheduler hiccup on a loaded machine can still cost some.
const TEST_LIMIT: Duration = Duration::from_millis(250);
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// Created by thread B, first while A waits.
const SEG: SegmentId = 0;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    let mut data = Data::default();
    if n == 1 {
        return Ok("a late rank needs 2 ranks, skipped".to_owned().into());
    }
    // Everyone starts together, so that "late" is measured from the same moment.
    ctx.barrier(TIMEOUT).doing(|| "the starting barrier")?;
    if me != 0 {
        sleep(LATE);
        ctx.barrier(TIMEOUT)
            .doing(|| "the late barrier (rank 0's thread A)")?;
    } else {
        let crew = Crew::new(Duration::from_secs(60));
        let a_done = AtomicBool::new(false);
        std::thread::scope(|s| {
            let a = s.spawn(|| {
                crew.guarded(|| {
                    let got = ctx.barrier(Timeout::Block);
                    a_done.store(true, Ordering::Release);
                    got.doing(|| "thread A's barrier without a timeout")
                })
            });
            sleep(HEAD_START);
            let b = crew.guarded(|| thread_b_gives_up(ctx, &mut data));
            let a_waited = !a_done.load(Ordering::Acquire);
            let a = Crew::join(a, "thread A");
            data.put("a_barrier", if a.is_ok() { "Ok" } else { "failed" });
            b.and(a)?;
            ensure!(
                a_waited,
                "thread A's barrier completed before thread B's calls ended: the checks did \
                 not run while it waited"
            );
            Ok(())
        })?;
    }
    // Made again by B on rank 0 (the main thread), paired with the late ranks' first calls.
    ctx.barrier(TIMEOUT).doing(|| "the barrier after A's")?;
    let input = [u64::from(me) + 1, u64::from(me) * u64::from(me)];
    let mut output = [0u64; 2];
    ctx.allreduce(GROUP_ALL, &input, &mut output, ReduceOp::Sum, TIMEOUT)
        .doing(|| "the allreduce after A's barrier")?;
    let n = u64::from(n);
    let want = [n * (n + 1) / 2, (n - 1) * n * (2 * n - 1) / 6];
    ensure!(
        output == want,
        "allreduce(Sum) of [rank + 1, rank^2] gave {output:?}, expected {want:?}"
    );
    ctx.segment_create(SEG, 64, TIMEOUT)
        .doing(|| "creating the segment after A's barrier")?;
    ctx.barrier(TIMEOUT).doing(|| "the closing barrier")?;
    let summary = if me == 0 {
        "while thread A waited in a barrier, thread B's barrier, allreduce and segment_create \
         with Millis and Test timed out in time; afterwards all completed with the right sums"
    } else {
        "joined rank 0's barriers late; later barrier, allreduce and segment_create completed"
    };
    Ok(Report {
        summary: summary.into(),
        data,
    })
}

/// One of thread B's calls, made with the timeout it is given.
type Call<'a> = &'a dyn Fn(Timeout) -> gaspi::Result<()>;

/// Thread B's calls while thread A holds the group's barrier state: each must time out in time
/// (reported as `<key>` and `<key>_ms`).
fn thread_b_gives_up(ctx: &Context, data: &mut Data) -> Outcome {
    let input = [1u64, 0];
    let millis = Timeout::Millis(MILLIS);
    let calls: [(&str, Timeout, Call<'_>); 6] = [
        ("b_barrier_millis", millis, &|t| ctx.barrier(t)),
        ("b_barrier_test", Timeout::Test, &|t| ctx.barrier(t)),
        ("b_create_millis", millis, &|t| {
            ctx.segment_create(SEG, 64, t)
        }),
        ("b_create_test", Timeout::Test, &|t| {
            ctx.segment_create(SEG, 64, t)
        }),
        // After the creations, which an allreduce in flight would refuse.
        ("b_allreduce_millis", millis, &|t| {
            ctx.allreduce(GROUP_ALL, &input, &mut [0u64; 2], ReduceOp::Sum, t)
        }),
        ("b_allreduce_test", Timeout::Test, &|t| {
            ctx.allreduce(GROUP_ALL, &input, &mut [0u64; 2], ReduceOp::Sum, t)
        }),
    ];
    for (key, timeout, call) in calls {
        let (got, took) = data.timed(key, || call(timeout));
        let limit = if timeout == Timeout::Test {
            TEST_LIMIT
        } else {
            MILLIS_LIMIT
        };
        ensure!(
            matches!(got, Err(Error::Timeout)) && took < limit,
            "{key} while another thread's barrier waited: {got:?} after {took:?} (expected \
             Timeout within {limit:?})"
        );
        if timeout != Timeout::Test {
            ensure!(
                took >= Duration::from_millis(MILLIS),
                "{key} timed out after only {took:?}"
            );
        }
    }
    Ok(())
}
