//! `crossed`: one barrier and one allreduce of a group in flight at once, as GASPI allows
//! (17.1, §11.1: "an allreduce and a barrier operation can run at the same time").
//!
//! First the calls cross in one thread: rank 0's `barrier(Millis(200))` times out (no other
//! rank is in a barrier yet) and it calls `allreduce`, while the other ranks call `allreduce`
//! first and `barrier` after it; then rank 0 calls its barrier again. Then from two threads:
//! rank 0's thread A waits in a barrier, which the others enter only once their allreduce
//! completed, and that allreduce needs rank 0's thread B's, made while A waits. Last, every
//! rank runs barriers in one thread and allreduces in another at the same time.
//!
//! Every call is made again after `Timeout` until it returns `Ok` (GASPI's rule), within
//! [`GIVE_UP`]; a `CollectiveInProgress` is retried the same way, so that a crossing that can
//! never complete shows as such, and fails the scenario even if a retry completes. Each rank
//! checks every allreduce element and reports rank 0's first barrier's outcome, the sums of
//! the results and the barriers completed, for the test to judge. Before a group's barrier and allreduce had states of their own, rank 0's allreduce of
//! the crossing got `CollectiveInProgress` naming the barrier, the other ranks' barrier
//! `CollectiveInProgress` naming the allreduce, every time, and neither ever completed.

use std::time::{Duration, Instant};

use gaspi::{Context, Error, ReduceOp, Timeout, GROUP_ALL};

use crate::check::{ensure, outcome, Crew, Data, Failure, Outcome, Report};

/// How long one call is given before it is made again, in ms.
const EACH_MS: u64 = 200;
const EACH: Timeout = Timeout::Millis(EACH_MS);
/// How long a call is made again before the scenario gives up on it.
const GIVE_UP: Duration = Duration::from_secs(10);
/// Elements of each allreduce: long enough for the reduce-scatter schedule.
const LEN: usize = 3_000;
/// Barriers and allreduces of the concurrent part, each.
const ROUNDS: u64 = 20;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let me = ctx.rank();
    let mut data = Data::default();
    if ctx.size() == 1 {
        return Ok("crossing collectives needs 2 ranks, skipped"
            .to_owned()
            .into());
    }
    until_ok("the starting barrier", |t| ctx.barrier(t))?;

    // Crossed in one thread.
    if me == 0 {
        let first = ctx.barrier(EACH);
        data.outcome("first_barrier", &first);
        ensure!(
            matches!(first, Err(Error::Timeout)),
            "rank 0's barrier while the others call allreduce first: {first:?}, expected \
             Timeout"
        );
    }
    data.put("crossing_sum", reduce(ctx, "the crossing", 0)?);
    until_ok("the crossing's barrier", |t| ctx.barrier(t))?;

    // Crossed from two threads of rank 0: its thread A's barrier completes only once the
    // others' allreduce did, which needs its thread B's allreduce.
    until_ok("the barrier before the threads", |t| ctx.barrier(t))?;
    let threads_sum = if me == 0 {
        let crew = Crew::new(GIVE_UP * 2);
        std::thread::scope(|s| {
            // One call that waits throughout, so that B's allreduce runs while A is in it.
            let a = s.spawn(|| {
                crew.guarded(|| {
                    let waited = ctx.barrier(Timeout::Millis(GIVE_UP.as_millis() as u64));
                    ensure!(
                        waited.is_ok(),
                        "thread A's barrier, made once for {GIVE_UP:?}: {}",
                        outcome(&waited)
                    );
                    Ok(())
                })
            });
            // Thread A is (very likely) waiting in its barrier by then; if not, the calls
            // still cross between the ranks.
            std::thread::sleep(Duration::from_millis(100));
            let b = crew.guarded(|| reduce(ctx, "thread B", 1));
            Crew::join(a, "thread A").and(b)
        })?
    } else {
        let sum = reduce(ctx, "the allreduce before the barrier", 1)?;
        until_ok("the barrier after the allreduce", |t| ctx.barrier(t))?;
        sum
    };
    data.put("threads_sum", threads_sum);

    // Every rank: barriers in one thread, allreduces in another, at the same time.
    until_ok("the barrier before both threads", |t| ctx.barrier(t))?;
    let crew = Crew::new(GIVE_UP * 2 * ROUNDS as u32);
    let (barriers, sums) = std::thread::scope(|s| {
        let a = s.spawn(|| {
            crew.guarded(|| {
                let mut done = 0;
                while done < ROUNDS && !crew.should_stop(|| "the barrier thread's barriers")? {
                    until_ok("the barrier thread's barrier", |t| ctx.barrier(t))?;
                    done += 1;
                }
                Ok(done)
            })
        });
        let b = crew.guarded(|| {
            (0..ROUNDS)
                .map(|round| reduce(ctx, "the allreduce thread", 2 + round))
                .sum::<Outcome<u64>>()
        });
        (Crew::join(a, "the barrier thread"), b)
    });
    data.put("both_barriers", barriers?);
    data.put("both_sum", sums?);
    until_ok("the closing barrier", |t| ctx.barrier(t))?;
    Ok(Report {
        summary: "a barrier and an allreduce in flight at once, crossed in one thread and in \
                  two, all completed with the right sums"
            .into(),
        data,
    })
}

/// Rank `r`'s element `i` of allreduce number `k`.
fn input(r: u32, k: u64, i: usize) -> u64 {
    u64::from(r) * 1_000_003 + k * 7 + i as u64
}

/// Sums every rank's input of allreduce number `k` until it completes (see [`until_ok`]),
/// checks each element and returns the sum of the result's elements.
fn reduce(ctx: &Context, what: &str, k: u64) -> Outcome<u64> {
    let (me, n) = (ctx.rank(), ctx.size());
    let mine: Vec<u64> = (0..LEN).map(|i| input(me, k, i)).collect();
    let mut got = vec![0u64; LEN];
    until_ok(what, |t| {
        ctx.allreduce(GROUP_ALL, &mine, &mut got, ReduceOp::Sum, t)
    })?;
    for (i, &g) in got.iter().enumerate() {
        let want: u64 = (0..n).map(|r| input(r, k, i)).sum();
        ensure!(
            g == want,
            "{what}: allreduce {k}, element {i} is {g}, expected {want}"
        );
    }
    Ok(got.iter().sum())
}

/// Makes `call` with [`EACH`] again until it returns `Ok`, for at most [`GIVE_UP`]: fails
/// unless it ended `Ok` with no call refused (`CollectiveInProgress`, retried meanwhile).
fn until_ok(what: &str, mut call: impl FnMut(Timeout) -> gaspi::Result<()>) -> Outcome {
    let start = Instant::now();
    let mut refused = 0u32;
    let last = loop {
        let got = call(EACH);
        match &got {
            Ok(()) => break got,
            Err(Error::Timeout) => {}
            Err(Error::CollectiveInProgress { .. }) => {
                refused += 1;
                // A refusal comes at once: no need to ask a thousand times a second.
                std::thread::sleep(Duration::from_millis(EACH_MS / 4));
            }
            Err(_) => break got,
        }
        if start.elapsed() >= GIVE_UP {
            break got;
        }
    };
    if last.is_ok() && refused == 0 {
        return Ok(());
    }
    Err(Failure(format!(
        "{what}: {} after {:?}, {refused} calls refused meanwhile",
        outcome(&last),
        start.elapsed()
    )))
}
