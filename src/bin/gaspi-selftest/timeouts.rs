//! `timeouts`: waiting calls honour `Timeout::Test` and `Timeout::Millis`, report
//! `Error::Timeout`, and complete when called again once the awaited event happens (a loop of
//! `Test` waits also sees what comes through the fabric, with or without a progress thread);
//! and a rank that waits for nothing uses next to no CPU (its progress thread included).

use std::thread::sleep;
use std::time::{Duration, Instant};

use gaspi::{Context, Error, Notification, ReduceOp, SegmentId, Timeout, GROUP_ALL};

use crate::check::{ensure, stat_fields, Data, Doing, Failure, Outcome, Report};

const SEG: SegmentId = 0;
/// Never sent by anyone: waits on it must time out.
const SILENT: u32 = 0;
/// Sent by the left neighbour, late.
const LATE: u32 = 1;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// How late the late notification and the late rank are.
const DELAY: Duration = Duration::from_millis(300);
/// How late the late rank joins the allreduce, and then finalize: long enough that the
/// punctual ranks, held back on a loaded machine, still time out before it comes (at 300 ms a
/// run of 4 ranks on 2 busy cores once saw the late rank finalize first).
const LATE_RANK: Duration = Duration::from_secs(1);
/// `Test` must not wait; a scheduler hiccup on a loaded machine can still cost a few ms.
const TEST_MEDIAN_LIMIT: Duration = Duration::from_millis(5);
const TEST_MAX_LIMIT: Duration = Duration::from_millis(100);
/// `Millis(200)` must wait at least 200 ms and not much longer.
const MILLIS: u64 = 200;
const MILLIS_LIMIT: Duration = Duration::from_millis(700);

pub fn run(ctx: &Context) -> Outcome<Report> {
    ctx.segment_create(SEG, 64, TIMEOUT)
        .doing(|| "creating the segment")?;
    let mut checked = vec![test_never_waits(ctx)?];
    checked.push(millis_waits_that_long(ctx)?);
    checked.push(empty_queue_waits_are_immediate(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(repeat_after_timeout_completes(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(barrier_resumes_after_timeout(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(create_resumes_after_timeout(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(waits_end_when_their_segment_goes(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(test_loops_see_the_fabric(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    checked.push(test_pings_complete(ctx)?);
    ctx.barrier(TIMEOUT).doing(|| "barrier")?;
    let mut data = Data::default();
    idle(ctx, SEG, SILENT, &mut data)?;
    Ok(Report {
        summary: checked.join("; "),
        data,
    })
}

/// How long every rank waits for a notification nobody sends while its CPU time is counted.
const IDLE: u64 = 2_000;

/// Waits [`IDLE`] ms for notification `silent` of `segment`, which nobody sends; reports the
/// wait's wall time and the CPU time the whole process (the progress thread included) used
/// meanwhile (`idle_wall_ms`, `idle_cpu_ms`).
pub(crate) fn idle(ctx: &Context, segment: SegmentId, silent: u32, data: &mut Data) -> Outcome {
    let before = cpu_ms()?;
    let start = Instant::now();
    match ctx.notify_waitsome(segment, silent, 1, Timeout::Millis(IDLE)) {
        Err(Error::Timeout) => {}
        other => {
            return Err(Failure(format!(
                "an idle wait for a notification nobody sends: expected Timeout, got {other:?}"
            )))
        }
    }
    data.put("idle_wall_ms", start.elapsed().as_millis());
    data.put("idle_cpu_ms", cpu_ms()? - before);
    Ok(())
}

/// CPU time this process has used so far (user and system, all threads), in ms.
fn cpu_ms() -> Outcome<u64> {
    let stat = std::fs::read_to_string("/proc/self/stat")
        .map_err(|e| Failure(format!("reading /proc/self/stat: {e}")))?;
    // Fields 14 and 15 (utime, stime) count ticks of USER_HZ, which Linux fixes at 100 for
    // /proc.
    let fields =
        stat_fields(&stat).ok_or_else(|| Failure(format!("malformed /proc/self/stat: {stat}")))?;
    let field = |n: usize| -> Outcome<u64> {
        fields
            .clone()
            .nth(n - 3)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| Failure(format!("no field {n} in /proc/self/stat: {stat}")))
    };
    Ok((field(14)? + field(15)?) * 10)
}

/// Rank 0 of 2 finalizes while rank 1 enters a barrier: both calls fail naming the other,
/// and rank 0 gets its context back.
fn finalize_against_a_barrier(ctx: Context) -> Outcome<Context> {
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier before a finalize against a barrier")?;
    if ctx.rank() == 1 {
        match ctx.barrier(TIMEOUT) {
            Err(Error::CollectiveMismatch { group: 0, rank: 0 }) => return Ok(ctx),
            other => {
                return Err(Failure(format!(
                    "a barrier against rank 0's finalize: expected CollectiveMismatch naming \
                     rank 0, got {other:?}"
                )))
            }
        }
    }
    match ctx.finalize(TIMEOUT) {
        Err(Error::FinalizeRefused { reason, ctx })
            if matches!(*reason, Error::CollectiveMismatch { group: 0, rank: 1 }) =>
        {
            Ok(*ctx)
        }
        other => Err(Failure(format!(
            "finalize against rank 1's barrier: expected FinalizeRefused with a \
             CollectiveMismatch naming rank 1, got {other:?}"
        ))),
    }
}

/// The last rank joins an allreduce [`LATE_RANK`] late: the others' `allreduce(Millis(50))`
/// times out, and their `finalize` then must refuse to begin and hand the context back, with
/// which they finish the allreduce (its sum checked). The last rank then finalizes as late: the
/// others' `finalize(Millis(50))` must time out and hand the context back, and finalizing that
/// context again must complete.
///
/// At 2 ranks, first: rank 0 calls `finalize` while rank 1 enters a barrier. Rank 0's
/// finalize must refuse, naming rank 1, and hand the context back (it consumed it before);
/// rank 1's barrier names rank 0; then both finalize as below.
pub fn finalize_resumes_after_timeout(ctx: Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let ctx = if n == 2 {
        finalize_against_a_barrier(ctx)?
    } else {
        ctx
    };
    if me + 1 == n {
        std::thread::sleep(LATE_RANK);
        sum_of_ranks(&ctx, TIMEOUT).doing(|| "the late rank's allreduce")??;
        std::thread::sleep(LATE_RANK);
        ctx.finalize(TIMEOUT)
            .doing(|| "finalize of the late rank")?;
        return Ok("finalized late on purpose".into());
    }
    let reduced = sum_of_ranks(&ctx, Timeout::Millis(50));
    expect_timeout("allreduce(Millis(50)) with a rank late", reduced)?;
    let ctx = match ctx.finalize(Timeout::Millis(50)) {
        Err(Error::FinalizeRefused { reason, ctx })
            if matches!(*reason, Error::CollectiveInProgress { .. }) =>
        {
            ctx
        }
        other => {
            return Err(Failure(format!(
                "finalize with a timed-out allreduce in flight: expected FinalizeRefused, got \
                 {other:?}"
            )))
        }
    };
    sum_of_ranks(&ctx, TIMEOUT)
        .doing(|| "the allreduce again, with the context finalize handed back")??;
    let ctx = match ctx.finalize(Timeout::Millis(50)) {
        Err(Error::FinalizeTimeout(ctx)) => ctx,
        other => {
            return Err(Failure(format!(
                "finalize(Millis(50)) with a rank late: expected FinalizeTimeout, got {other:?}"
            )))
        }
    };
    ctx.finalize(TIMEOUT)
        .doing(|| "finalize again after its timeout")?;
    Ok(
        "finalize refused to begin during a timed-out allreduce and handed the context back; \
        it timed out, handed the context back, and completed when called again"
            .into(),
    )
}

/// The allreduce over every rank of `rank + 1`, checked against `n (n + 1) / 2`: the outer
/// result is the runtime's, the inner one the check's.
fn sum_of_ranks(ctx: &Context, timeout: Timeout) -> gaspi::Result<Outcome> {
    let n = u64::from(ctx.size());
    let mut sum = [0u64];
    let input = [u64::from(ctx.rank()) + 1];
    ctx.allreduce(GROUP_ALL, &input, &mut sum, ReduceOp::Sum, timeout)?;
    let want = n * (n + 1) / 2;
    Ok(if sum[0] == want {
        Ok(())
    } else {
        Err(Failure(format!(
            "the sum of the ranks is {}, not {want}",
            sum[0]
        )))
    })
}

fn expect_timeout<T: std::fmt::Debug>(what: &str, got: gaspi::Result<T>) -> Outcome {
    match got {
        Err(Error::Timeout) => Ok(()),
        other => Err(Failure(format!(
            "{what}: expected Err(Timeout), got {other:?}"
        ))),
    }
}

fn test_never_waits(ctx: &Context) -> Outcome<String> {
    let mut took: Vec<Duration> = (0..21)
        .map(|_| {
            let start = Instant::now();
            let got = ctx.notify_waitsome(SEG, SILENT, 1, Timeout::Test);
            expect_timeout("notify_waitsome(Test)", got).map(|()| start.elapsed())
        })
        .collect::<Outcome<_>>()?;
    took.sort_unstable();
    let (median, max) = (took[took.len() / 2], took[took.len() - 1]);
    ensure!(
        median < TEST_MEDIAN_LIMIT && max < TEST_MAX_LIMIT,
        "notify_waitsome(Test) took {median:?} (median), {max:?} (max)"
    );
    Ok(format!(
        "notify_waitsome(Test) -> Timeout in {median:?} (median of {})",
        took.len()
    ))
}

/// Notification rank 0 sends each rank once its loop of `proc_ping(Test)` got an answer.
const PINGED: u32 = 2;

/// Rank 0 pings every other rank with a loop of `proc_ping(Test)` while they wait (asleep,
/// soon) for its notification: through the fabric, the loop must complete on the read its
/// first call posted, however long the round trip takes against one `Test` call.
fn test_pings_complete(ctx: &Context) -> Outcome<String> {
    if ctx.rank() != 0 {
        let id = ctx
            .notify_waitsome(SEG, PINGED, 1, TIMEOUT)
            .doing(|| "waiting for rank 0's ping loop")?;
        ctx.notify_reset(SEG, id).doing(|| "notify_reset")?;
        return Ok("pinged".into());
    }
    sleep(DELAY);
    let start = Instant::now();
    let mut polls = 0u64;
    for rank in 1..ctx.size() {
        loop {
            ensure!(
                start.elapsed() < POLL_LIMIT,
                "proc_ping({rank}, Test) got no answer in {polls} polls within {POLL_LIMIT:?}"
            );
            polls += 1;
            match ctx.proc_ping(rank, Timeout::Test) {
                Ok(()) => break,
                Err(Error::Timeout) => {}
                Err(e) => return Err(Failure(format!("proc_ping({rank}, Test): {e}"))),
            }
        }
        ctx.notify(
            rank,
            SEG,
            Notification {
                id: PINGED,
                value: 1,
            },
            0,
        )
        .doing(|| "notify")?;
    }
    ctx.wait(0, TIMEOUT).doing(|| "wait")?;
    Ok(format!("proc_ping(Test) loops answered in {polls} polls"))
}

/// How long a loop of `Test` waits may take to see what arrived.
const POLL_LIMIT: Duration = Duration::from_secs(10);

/// Every other rank sends rank 0 a passive message, late; rank 0 takes them with a loop of
/// `passive_receive(Test)`. Passive messages always travel through the fabric, which moves
/// only while somebody reads its completion queue: the waits must, also with the progress
/// thread off (`GASPI_PROGRESS_THREAD=0`) and on the direct path, where a waiter reads it only
/// every few rounds.
fn test_loops_see_the_fabric(ctx: &Context) -> Outcome<String> {
    if ctx.rank() != 0 {
        sleep(DELAY);
        ctx.passive_send(0, b"late", TIMEOUT)
            .doing(|| "passive_send to rank 0")?;
        return Ok("passive_send -> Ok".into());
    }
    let start = Instant::now();
    let (mut got, mut polls) = (0, 0u64);
    while got + 1 < ctx.size() {
        ensure!(
            start.elapsed() < POLL_LIMIT,
            "passive_receive(Test) saw {got} of {} messages in {polls} polls within {POLL_LIMIT:?}",
            ctx.size() - 1
        );
        polls += 1;
        match ctx.passive_receive(Timeout::Test) {
            Ok((_, bytes)) if bytes == b"late" => got += 1,
            Ok((from, bytes)) => {
                return Err(Failure(format!("rank {from} sent {bytes:?}, not \"late\"")))
            }
            Err(Error::Timeout) => {}
            Err(e) => return Err(Failure(format!("passive_receive(Test): {e}"))),
        }
    }
    Ok(format!(
        "passive_receive(Test) saw {got} late messages in {polls} polls"
    ))
}

fn millis_waits_that_long(ctx: &Context) -> Outcome<String> {
    let start = Instant::now();
    let got = ctx.notify_waitsome(SEG, SILENT, 1, Timeout::Millis(MILLIS));
    let took = start.elapsed();
    expect_timeout("notify_waitsome(Millis(200))", got)?;
    ensure!(
        took >= Duration::from_millis(MILLIS) && took < MILLIS_LIMIT,
        "notify_waitsome(Millis({MILLIS})) returned after {took:?}"
    );
    Ok(format!("Millis({MILLIS}) -> Timeout after {took:?}"))
}

fn empty_queue_waits_are_immediate(ctx: &Context) -> Outcome<String> {
    ensure!(
        ctx.queue_size(0).doing(|| "queue_size")? == 0,
        "queue 0 is not empty at the start"
    );
    let start = Instant::now();
    ctx.wait(0, Timeout::Test)
        .doing(|| "wait(Test) on an empty queue")?;
    let took = start.elapsed();
    ensure!(
        took < TEST_MAX_LIMIT,
        "wait(Test) on an empty queue took {took:?}"
    );
    Ok("wait(empty queue, Test) -> Ok".into())
}

/// Every rank waits for a notification its left neighbour sends only after [`DELAY`]: the
/// first wait times out, and waiting again (in short slices) then receives it.
fn repeat_after_timeout_completes(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let (right, left) = ((me + 1) % n, (me + n - 1) % n);
    let start = Instant::now();
    expect_timeout(
        "notify_waitsome(Millis(100)) before the late notification",
        ctx.notify_waitsome(SEG, LATE, 1, Timeout::Millis(100)),
    )?;
    sleep(DELAY.saturating_sub(start.elapsed()));
    ctx.notify(
        right,
        SEG,
        Notification {
            id: LATE,
            value: me + 1,
        },
        0,
    )
    .doing(|| "sending the late notification")?;
    let mut timeouts = 1;
    let id = loop {
        match ctx.notify_waitsome(SEG, LATE, 1, Timeout::Millis(20)) {
            Ok(id) => break id,
            Err(Error::Timeout) if start.elapsed() < Duration::from_secs(30) => timeouts += 1,
            Err(e) => return Err(Failure(format!("waiting again for the late one: {e}"))),
        }
    };
    let value = ctx.notify_reset(SEG, id).doing(|| "resetting")?;
    ensure!(
        id == LATE && value == left + 1,
        "after {timeouts} timeouts got notification {id} = {value}, expected {LATE} = {}",
        left + 1
    );
    ctx.wait(0, TIMEOUT).doing(|| "wait after notify")?;
    Ok(format!(
        "notification from rank {left} arrived on the call after {timeouts} timeouts"
    ))
}

/// Deleted while threads wait on its notifications without a timeout.
const DELETED_UNDER_WAITERS: SegmentId = 2;

/// Two threads wait without a timeout on notifications of a segment that this rank then
/// deletes: `notify_waitsome` and `notify_wait_any` both end with `UnknownSegment` instead of
/// waiting for what can no longer come.
fn waits_end_when_their_segment_goes(ctx: &Context) -> Outcome<String> {
    let me = ctx.rank();
    let id = DELETED_UNDER_WAITERS;
    ctx.segment_create(id, 64, TIMEOUT)
        .doing(|| "creating the segment to delete under waiters")?;
    let seg = ctx.segment(id).doing(|| "a handle of the segment")?;
    let (waitsome, wait_any) = std::thread::scope(|s| {
        let waitsome = s.spawn(|| ctx.notify_waitsome(id, 0, 1, Timeout::Block));
        let wait_any = s.spawn(|| {
            ctx.notify_wait_any(&[seg.range(1, 1)], &[], Timeout::Block)
                .map(|arrival| arrival.id)
        });
        sleep(DELAY);
        let deleted = ctx.segment_delete(id);
        let join = |h: std::thread::ScopedJoinHandle<'_, gaspi::Result<u32>>| {
            h.join()
                .map_err(|_| Failure("a waiting thread panicked".into()))
        };
        deleted.doing(|| "deleting the segment under its waiters")?;
        Ok::<_, Failure>((join(waitsome)?, join(wait_any)?))
    })?;
    for (what, got) in [("notify_waitsome", waitsome), ("notify_wait_any", wait_any)] {
        match got {
            Err(Error::UnknownSegment { rank, segment }) if rank == me && segment == id => {}
            other => {
                return Err(Failure(format!(
                    "{what} with Block on a segment deleted meanwhile: {other:?}"
                )))
            }
        }
    }
    Ok("waits on a segment deleted meanwhile end with UnknownSegment".into())
}

/// Made late by the last rank, to show that a creation's synchronisation is its own.
const CREATED_LATE: SegmentId = 1;

/// The last rank creates a segment [`DELAY`] late; the others' creation times out, and a
/// barrier meanwhile is refused, naming the creation still in flight (it must not finish the
/// creation's synchronisation, which the last rank pairs with its creation); calling the
/// creation again completes it.
fn create_resumes_after_timeout(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    if n == 1 {
        return Ok("creation timeouts need 2 ranks, skipped".into());
    }
    if me == n - 1 {
        sleep(DELAY);
    } else {
        expect_timeout(
            "segment_create(Millis(50)) before the last rank created it",
            ctx.segment_create(CREATED_LATE, 64, Timeout::Millis(50)),
        )?;
        match ctx.barrier(Timeout::Millis(50)) {
            Err(Error::CollectiveInProgress {
                group: 0,
                pending: "segment_create",
            }) => {}
            other => {
                return Err(Failure(format!(
                    "barrier while a segment_create's synchronisation is in flight: {other:?}"
                )))
            }
        }
    }
    ctx.segment_create(CREATED_LATE, 64, TIMEOUT)
        .doing(|| "creating the segment (again, after its timeout)")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the resumed creation")?;
    ctx.segment_delete(CREATED_LATE)
        .doing(|| "deleting the segment made late")?;
    Ok("a creation that timed out is resumed by calling it again, not by a barrier".into())
}

/// The last rank enters the barrier [`DELAY`] late; the others see `Test` and `Millis` time out,
/// then complete the same barrier by calling again.
fn barrier_resumes_after_timeout(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    if n == 1 {
        return Ok("barrier timeouts need 2 ranks, skipped".into());
    }
    if me == n - 1 {
        sleep(DELAY);
        ctx.barrier(TIMEOUT).doing(|| "late barrier")?;
    } else {
        expect_timeout(
            "barrier(Test) before the last rank arrived",
            ctx.barrier(Timeout::Test),
        )?;
        let start = Instant::now();
        let got = ctx.barrier(Timeout::Millis(100));
        let took = start.elapsed();
        expect_timeout("barrier(Millis(100)) before the last rank arrived", got)?;
        ensure!(
            took >= Duration::from_millis(100),
            "barrier(Millis(100)) timed out after only {took:?}"
        );
        ctx.barrier(TIMEOUT)
            .doing(|| "calling the barrier again after its timeouts")?;
    }
    // The resumed barrier must leave every rank in step: one more full barrier and a
    // notification round prove it.
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the resumed one")?;
    let right = (me + 1) % n;
    ctx.notify(
        right,
        SEG,
        Notification {
            id: LATE,
            value: 1000 + me,
        },
        0,
    )
    .doing(|| "notifying after the barriers")?;
    let id = ctx
        .notify_waitsome(SEG, LATE, 1, TIMEOUT)
        .doing(|| "waiting after the barriers")?;
    let value = ctx.notify_reset(SEG, id).doing(|| "resetting")?;
    let left = (me + n - 1) % n;
    ensure!(
        value == 1000 + left,
        "after the barriers got value {value}, expected {}",
        1000 + left
    );
    Ok(if me == n - 1 {
        "entered the barrier late; it completed for everyone".into()
    } else {
        "barrier(Test) and barrier(Millis(100)) -> Timeout while the last rank was late, the \
         repeated call completed it"
            .into()
    })
}
