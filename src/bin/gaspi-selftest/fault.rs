//! `fault`: a rank is killed with SIGKILL mid-run; the survivors must be told and go on.
//!
//! Run under `gaspirun --keep-going` (the default launcher behaviour ends the whole job). Every
//! rank first sends a block to its right neighbour with `write_notify` and checks the one from
//! its left. Then the last rank stops itself (SIGSTOP) for 2.5 s: meanwhile a barrier times out
//! on the others, a ping of it does not fail, and nothing is marked (a stopped process is not
//! a dead one); once it is resumed the barrier completes and a ping of it succeeds (which also
//! settles the ping that timed out: see `run`). Then it kills itself (`kill(getpid(),
//! SIGKILL)`, a real `kill -9`) inside a barrier, once every survivor has told it that it is
//! past the barrier before (`LastWords`). The survivors check, each on its own:
//!
//! * the rank left of the dead one streams writes to it until one fails: the write or the wait
//!   for its queue reports `RankFailed` naming it. Over tcp the writes are 64 KiB, so some are
//!   in flight at the kill; over shm they are 8 bytes, which shm completes at once until the
//!   dead rank's command queue is full and the provider refuses more (larger ones would never
//!   complete, and shm completes operations in order, so that rank could complete no read or
//!   large write afterwards: see the README);
//! * a barrier on `GROUP_ALL`, which the dead rank entered before it died (its notifications
//!   sent), fails with `RankFailed` naming it: within two of its timeouts on the others (2 s),
//!   and at once on rank 0, which calls it with `Timeout::Block` only once it knows of the
//!   death;
//! * `state_vec` marks the dead rank, and only it, `Corrupt`; `known_failure` names it among
//!   every rank, and nobody among the survivors;
//! * `proc_ping` of the dead rank fails naming it, and of a survivor succeeds;
//! * a write to the dead rank fails at once naming it;
//! * the block received before the kill is still intact;
//! * a group of the survivors commits, its barrier completes, and a `write_notify` ring and
//!   passive messages among the survivors deliver every byte (a passive send to the dead rank
//!   fails naming it);
//! * at rest for 2 s (waiting for a notification nobody sends), a survivor's process uses at
//!   most a tenth of that in CPU time: the dead rank's connection does not keep its progress
//!   from sleeping;
//! * `finalize` returns `RankFailed` naming the dead rank instead of hanging, and the process
//!   exits normally.
//!
//! Besides failing on the first broken check, every rank reports what it observed on its data
//! line (the dead rank its pid, just before the kill) for `tests/multiprocess.rs` to judge.

use std::time::{Duration, Instant};

use gaspi::{
    local, remote, Context, Error, Notification, Rank, ReduceOp, State, Timeout, GROUP_ALL,
};

use crate::check::{
    compare, ensure, fill_pattern, seed, states, Data, Doing, Failure, Outcome, Report,
};
use crate::victim::{expect_failed, kill_myself, stop_myself, survivors_group, LastWords};

const SEGMENT: u8 = 0;
const BLOCK: u64 = 64 << 10;
/// Where the block from the left neighbour lands before the kill, and where the survivors'
/// ring lands after it.
const BEFORE: u64 = 0;
const AFTER: u64 = BLOCK;
/// The source of every write.
const SOURCE: u64 = 2 * BLOCK;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The timeout of the barrier that must fail, and the bound on how late it may fail.
const BARRIER_TIMEOUT_MS: u64 = 2_000;
/// A notification of [`SEGMENT`] that nobody sends, waited for by the survivors at rest.
const IDLE_SILENT: u32 = 1_000;
/// The survivors' words to the dead rank before it dies.
const LAST_WORDS: LastWords = LastWords {
    segment: SEGMENT,
    first: 100,
    queue: 0,
};
const FAIL_WITHIN: Duration = Duration::from_millis(2 * BARRIER_TIMEOUT_MS + 500);

/// Runs the scenario up to (not including) finalize; the dead rank never returns.
pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ensure!(n >= 2, "fault needs at least 2 ranks, got {n}");
    let dead = n - 1;
    let mut data = Data::default();
    ctx.segment_create(SEGMENT, 3 * BLOCK, TIMEOUT)
        .doing(|| "segment_create")?;
    let before = exchange(ctx, me, (me + 1) % n, (me + n - 1) % n, BEFORE, 0)?;
    stop_phase(ctx, dead, &mut data)?;
    let resumed = ctx.barrier(TIMEOUT);
    data.outcome("resumed_barrier", &resumed);
    resumed.doing(|| "the barrier after the stop")?;
    // The resumed rank answers pings again. Through the fabric that also settles the pings
    // that timed out while it was stopped: the provider completes reads in order, and shm
    // never completes one towards a rank that died, stalling every later read of the survivor
    // behind it, so a ping left unanswered at the kill below would make the survivors' pings
    // of live ranks time out (`dead-read` checks that the direct path has no such read).
    if me != dead {
        let answered = ctx.proc_ping(dead, TIMEOUT);
        data.outcome("resumed_ping", &answered);
        answered.doing(|| "proc_ping of the resumed rank")?;
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the kill")?;
    if me == dead {
        LAST_WORDS.wait_for_all(ctx, TIMEOUT)?;
        data.put("pid", std::process::id());
        data.print_now("fault", me);
        die_in_barrier(ctx);
    }
    LAST_WORDS.tell(ctx, dead, TIMEOUT)?;
    if me == 0 {
        learn_of_death(ctx, dead)?;
    }
    if me + 1 == dead && me != 0 {
        // Streams while this rank is in the barrier: its part of it is sent early, as the
        // other survivors' is, so that rank 0, late, finds every notification it needs.
        let mut streamed = Data::default();
        std::thread::scope(|s| {
            let stream = s.spawn(|| stream_until_failure(ctx, dead, &mut streamed));
            let barrier = barrier_fails(ctx, me, dead, &mut data);
            let stream = stream
                .join()
                .unwrap_or_else(|_| Err(Failure("the streaming thread panicked".into())));
            barrier.and(stream)
        })?;
        data.append(streamed);
    } else {
        barrier_fails(ctx, me, dead, &mut data)?;
    }
    let states = states(ctx);
    data.put("state_vec", &states);
    ensure!(
        states.len() == n as usize
            && states
                .chars()
                .enumerate()
                .all(|(r, s)| (r as Rank == dead) == (s == 'C')),
        "state_vec is {states}: expected only rank {dead} Corrupt"
    );
    let known = ctx.known_failure(0..n).map_or(Ok(()), Err);
    data.outcome("known_failure", &known);
    expect_failed("known_failure of every rank", known, dead)?;
    ensure!(
        ctx.known_failure((0..n).filter(|&r| r != dead)).is_none(),
        "known_failure names a survivor"
    );
    pings(ctx, me, dead, &mut data)?;
    let (write, took) = data.timed("write_dead", || {
        ctx.write(local(SEGMENT, SOURCE), remote(dead, SEGMENT, AFTER), 64, 0)
    });
    expect_failed("a write to the dead rank", write, dead)?;
    ensure!(
        took < Duration::from_millis(100),
        "a write to a rank known dead took {took:?}"
    );
    // Its segment's descriptor is known (cached, or in its directory, which stays mapped):
    // a lookup names the death all the same, as the rustdoc says.
    let size = ctx.segment_size_of(dead, SEGMENT, TIMEOUT);
    data.outcome("size_dead", &size);
    expect_failed("segment_size_of on the dead rank", size, dead)?;
    let mut got = vec![0u8; BLOCK as usize];
    ctx.segment_read(SEGMENT, BEFORE, &mut got)
        .doing(|| "segment_read")?;
    let differing = got.iter().zip(&before).filter(|(g, w)| g != w).count();
    data.put("before_bytes", got.len());
    data.put("before_differing", differing);
    compare("the block received before the kill", &got, &before)?;
    survivors_go_on(ctx, me, dead, &mut data)?;
    Ok(Report {
        summary: format!(
            "the survivors saw the stop of rank {dead} as timeouts and its death as \
             RankFailed naming it, then went on without it"
        ),
        data,
    })
}

/// How long the last rank stays stopped (SIGSTOP) before a helper resumes it.
const STOPPED: &str = "2.5";

/// After a barrier, rank `dead` stops for a while ([`stop_for_a_while`]) and the others check
/// that its silence is only timeouts ([`stopped_is_not_dead`]).
pub fn stop_phase(ctx: &Context, dead: Rank, data: &mut Data) -> Outcome {
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the stop")?;
    if ctx.rank() == dead {
        stop_for_a_while()
    } else {
        stopped_is_not_dead(ctx, dead, data)
    }
}

/// Stops this process (as a debugger or a job-control stop would) until a helper process
/// resumes it.
fn stop_for_a_while() -> Outcome {
    let pid = std::process::id();
    let mut waker = std::process::Command::new("sh")
        .args(["-c", &format!("sleep {STOPPED}; kill -CONT {pid}")])
        .spawn()
        .map_err(|e| Failure(format!("starting the helper that resumes us: {e}")))?;
    stop_myself()?;
    waker
        .wait()
        .map_err(|e| Failure(format!("waiting for the helper: {e}")))?;
    Ok(())
}

/// While the last rank is stopped, waits involving it time out and nothing marks it: a
/// stopped (or slow) process is not a dead one.
fn stopped_is_not_dead(ctx: &Context, stopped: Rank, data: &mut Data) -> Outcome {
    let barrier = ctx.barrier(Timeout::Millis(1_000));
    data.outcome("stopped_barrier", &barrier);
    // The ping may still be answered if the rank had not stopped yet; it must not fail.
    let ping = ctx.proc_ping(stopped, Timeout::Millis(500));
    data.outcome("stopped_ping", &ping);
    data.put("stopped_state_vec", states(ctx));
    ensure!(
        matches!(barrier, Err(Error::Timeout)),
        "barrier(Millis(1000)) while rank {stopped} is stopped: expected Timeout, got \
         {barrier:?}"
    );
    ensure!(
        matches!(ping, Ok(()) | Err(Error::Timeout)),
        "proc_ping of the stopped rank {stopped}: expected Timeout (or Ok), got {ping:?}"
    );
    ensure!(
        ctx.state_vec().iter().all(|s| *s == State::Healthy),
        "state_vec while rank {stopped} is stopped: {:?}",
        ctx.state_vec()
    );
    Ok(())
}

/// Writes a block to `right` with `write_notify` (notification value `round + 1`), waits for
/// the one from `left`, checks it and returns it.
fn exchange(
    ctx: &Context,
    me: Rank,
    right: Rank,
    left: Rank,
    at: u64,
    round: u64,
) -> Outcome<Vec<u8>> {
    let mut block = vec![0u8; BLOCK as usize];
    fill_pattern(seed(&[u64::from(me), round]), &mut block);
    ctx.segment_write(SEGMENT, SOURCE, &block)
        .doing(|| "segment_write")?;
    let value = round as u32 + 1;
    ctx.write_notify(
        local(SEGMENT, SOURCE),
        remote(right, SEGMENT, at),
        BLOCK,
        Notification { id: 0, value },
        0,
    )
    .doing(|| format!("write_notify to rank {right}"))?;
    let id = ctx
        .notify_waitsome(SEGMENT, 0, 1, TIMEOUT)
        .doing(|| format!("waiting for the block from rank {left}"))?;
    let got_value = ctx.notify_reset(SEGMENT, id).doing(|| "notify_reset")?;
    ensure!(
        got_value == value,
        "notification from rank {left}: got {got_value}, expected {value}"
    );
    ctx.wait(0, TIMEOUT)
        .doing(|| "waiting for queue 0 after write_notify")?;
    let mut want = vec![0u8; BLOCK as usize];
    fill_pattern(seed(&[u64::from(left), round]), &mut want);
    let mut got = vec![0u8; BLOCK as usize];
    ctx.segment_read(SEGMENT, at, &mut got)
        .doing(|| "segment_read")?;
    compare(format!("the block from rank {left}"), &got, &want)?;
    Ok(got)
}

/// Keeps writing to `dead` as it dies: the write or the wait for its queue must fail naming it.
fn stream_until_failure(ctx: &Context, dead: Rank, data: &mut Data) -> Outcome {
    let size = if ctx.provider().starts_with("shm") {
        8
    } else {
        BLOCK
    };
    let start = Instant::now();
    let mut writes = 0u64;
    let failure = loop {
        let step = ctx
            .write(
                local(SEGMENT, SOURCE),
                remote(dead, SEGMENT, AFTER),
                size,
                1,
            )
            .and_then(|()| ctx.wait(1, Timeout::Millis(BARRIER_TIMEOUT_MS)));
        writes += 1;
        if let Err(e) = step {
            break e;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(20),
            "{writes} writes to the dead rank {dead} completed in 20 s"
        );
    };
    let failure: gaspi::Result<()> = Err(failure);
    data.put("streamed_writes", writes);
    data.outcome("stream", &failure);
    // The queue dropped the dead rank's operations: it is empty and usable again.
    let again = ctx.wait(1, Timeout::Test);
    data.outcome("stream_queue_after", &again);
    expect_failed("streaming writes to the dying rank", failure, dead)?;
    again.doing(|| "waiting for queue 1 after its failure")
}

/// Enters the barrier the survivors call next and dies inside it (SIGKILL from a thread), its
/// own notifications sent: a member that finds them must still not complete the barrier.
/// It dies soon after entering: a rank killed while its progress handles incoming writes can
/// leave the shm provider's lock held for good (see the README's known limits), and a
/// survivor streams writes into it meanwhile.
fn die_in_barrier(ctx: &Context) -> ! {
    std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(20));
        kill_myself()
    });
    let _ = ctx.barrier(Timeout::Block);
    kill_myself()
}

/// Waits until this rank knows that `dead` died (its watch of the processes on this host
/// marks it), without an operation towards it that could stay in flight.
fn learn_of_death(ctx: &Context, dead: Rank) -> Outcome {
    let start = Instant::now();
    while ctx.state_vec().get(dead as usize) != Some(&State::Corrupt) {
        ensure!(
            start.elapsed() < Duration::from_secs(10),
            "rank {dead} not marked dead 10 s after its kill"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Ok(())
}

/// Rank 0 calls the barrier knowing the death (see [`learn_of_death`]), with every
/// notification it needs there at 4 ranks (the dead rank's sent before it died): it must fail
/// at once. The others call it while the victim dies inside it: it must fail in time.
fn barrier_fails(ctx: &Context, me: Rank, dead: Rank, data: &mut Data) -> Outcome {
    let timeout = if me == 0 {
        Timeout::Block
    } else {
        Timeout::Millis(BARRIER_TIMEOUT_MS)
    };
    let (result, took) = data.timed("barrier", || ctx.barrier(timeout));
    expect_failed(&format!("barrier({timeout:?}) on GROUP_ALL"), result, dead)?;
    let bound = if me == 0 {
        Duration::from_millis(100)
    } else {
        FAIL_WITHIN
    };
    ensure!(
        took < bound,
        "barrier({timeout:?}) on GROUP_ALL took {took:?} to fail (bound {bound:?})"
    );
    // Calling it again reports the same death at once instead of waiting.
    let (again, _) = data.timed("barrier_again", || ctx.barrier(timeout));
    expect_failed("a second GROUP_ALL barrier", again, dead)
}

fn pings(ctx: &Context, me: Rank, dead: Rank, data: &mut Data) -> Outcome {
    let ping = ctx.proc_ping(dead, Timeout::Millis(1_000));
    data.outcome("ping_dead", &ping);
    let other = (me + 1) % dead;
    let live = ctx.proc_ping(other, TIMEOUT);
    data.outcome("ping_live", &live);
    expect_failed("proc_ping of the dead rank", ping, dead)?;
    live.doing(|| format!("proc_ping of the live rank {other}"))
}

/// A group of the survivors, its barrier, and a write_notify ring among them.
fn survivors_go_on(ctx: &Context, me: Rank, dead: Rank, data: &mut Data) -> Outcome {
    let group = survivors_group(ctx, dead, data)?;
    let mut sum = [0u64];
    let on_all = ctx.allreduce(GROUP_ALL, &[1u64], &mut sum, ReduceOp::Sum, TIMEOUT);
    data.outcome("allreduce_all", &on_all);
    expect_failed("allreduce on GROUP_ALL", on_all, dead)?;
    let right = (me + 1) % dead;
    let left = (me + dead - 1) % dead;
    exchange(ctx, me, right, left, AFTER, 1)?;
    data.put("ring_from", left);
    let message = format!("from {me} after the death of {dead}");
    let to_dead = ctx.passive_send(dead, message.as_bytes(), TIMEOUT);
    data.outcome("passive_dead", &to_dead);
    expect_failed("passive_send to the dead rank", to_dead, dead)?;
    ctx.passive_send(right, message.as_bytes(), TIMEOUT)
        .doing(|| format!("passive_send to rank {right}"))?;
    let (from, got) = ctx.passive_receive(TIMEOUT).doing(|| "passive_receive")?;
    let want = format!("from {left} after the death of {dead}");
    data.put("passive_from", from);
    data.put("passive_intact", got == want.as_bytes());
    ensure!(
        from == left && got == want.as_bytes(),
        "passive message from rank {from}: {:?}, expected {want:?} from rank {left}",
        String::from_utf8_lossy(&got)
    );
    ctx.group_barrier(group, TIMEOUT)
        .doing(|| "the barrier of the survivors after the ring")?;
    // A dead peer's connection must not keep a survivor's progress from sleeping.
    crate::timeouts::idle(ctx, SEGMENT, IDLE_SILENT, data)
}

/// Finalize with a dead rank: `RankFailed` naming it, promptly, with resources released.
pub fn finalize_reports_the_dead_rank(ctx: Context, data: &mut Data) -> Outcome<String> {
    let dead = ctx.size() - 1;
    let (result, took) = data.timed("finalize", || {
        ctx.finalize(Timeout::Millis(BARRIER_TIMEOUT_MS))
    });
    expect_failed("finalize", result, dead)?;
    ensure!(took < FAIL_WITHIN, "finalize took {took:?} to fail");
    Ok(format!("finalize failed naming rank {dead}"))
}
