//! `killed-target`: a rank is killed (SIGKILL) while every other rank writes into its segment;
//! the writers must not crash, and must be told.
//!
//! Every rank but the last, the victim, streams into a region of its own of the victim's
//! segment: a large `write`, then a small `write_notify`, then a wait for its queue, over and
//! over. The victim waits until every writer's notification has arrived (and checks that the
//! writer's round landed whole), lets the traffic run a little longer, reads the host's
//! monotonic clock, reports the reading and its pid on its data line and kills itself. Each
//! writer goes on until a call fails; that call must be `RankFailed` naming the victim, and the
//! writer records which call it was and when (on the same clock, so the tests can tell how long
//! after the victim's last reading the death was seen: on the direct path a pidfd per peer
//! makes that milliseconds). Then each survivor checks that a write, a `write_notify` and a
//! ping towards the victim fail at once naming it, that only the victim is `Corrupt`, that its
//! queue is usable again (after one more wait when the failing call was a post, which left the
//! round's earlier operations towards the victim for the queue to report), and that a group
//! of the survivors commits and runs its barrier and an allreduce; `finalize` is recorded as
//! [`crate::dead_read::finalize_names_the_dead_rank`] does (it must name the victim, not a
//! survivor that finalized and exited after the victim died).
//!
//! On the direct path the writers copy into their mapping of the victim's segment, which
//! outlives it; over the fabric the writes are 256 KiB over tcp (some are in flight at the
//! kill) but 4 KiB over shm, which completes those at once towards a dead peer, while a larger
//! one would never complete and would keep that writer from completing any later read, the
//! survivors' group set-up included (see the README's known limits). Over shm through the
//! fabric, the ranks also run without a progress thread (see [`configure`]). Run it under
//! `gaspirun --keep-going` with at least 3 ranks; the victim prints no `ok` line.

use std::time::{Duration, Instant};

use gaspi::{local, remote, Config, Context, Intranode, Notification, Rank, SegmentId, Timeout};

use crate::check::{
    compare, ensure, fill_pattern, monotonic_us, seed, states, Data, Doing, Outcome, Report,
};
use crate::victim::{expect_failed, report_and_kill_myself, survivors_group};

const SEG: SegmentId = 0;
/// The large write of every round (where it cannot stall the writer, see the module's doc).
const LARGE: u64 = 256 << 10;
/// shm's inject size: the largest write shm completes towards a dead peer.
const SHM_LARGE: u64 = 4 << 10;
/// The payload of the small `write_notify` of every round.
const SMALL: u64 = 64;
/// Writer `w` writes into `w * REGION..` of the victim and reads its source from the same
/// range of its own segment (which nobody writes into).
const REGION: u64 = LARGE + (4 << 10);
const QUEUE: gaspi::QueueId = 0;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// How long the victim lets the traffic run once every writer has started.
const TRAFFIC: Duration = Duration::from_millis(200);
/// Bound of a writer's queue wait: a dead peer is reported within about a second; this only
/// keeps a broken runtime from hanging the stream.
const WAIT: Timeout = Timeout::Millis(5_000);
/// Bound of the whole stream of a writer, from its start.
const STREAM_LIMIT: Duration = Duration::from_secs(20);
const _: () = assert!(LARGE + SMALL <= REGION && SHM_LARGE <= LARGE);

/// Over shm through the fabric, the ranks run without a progress thread unless
/// `GASPI_PROGRESS_THREAD` says otherwise. libfabric 1.17's shm guards each rank's region with
/// a spinlock in shared memory, which the owner's progress takes while it handles incoming
/// writes; a victim killed there dies holding it, and every writer's next post into it spins
/// for ever inside libfabric, its timeout notwithstanding (about one run in ten with a progress
/// thread, under this scenario's traffic). Without the thread the victim is inside libfabric
/// only during its own calls, and it dies outside them. `GASPI_PROGRESS_THREAD=1` shows the
/// hang.
pub fn configure(config: &mut Config) {
    let shm_fabric = config.intranode == Intranode::Fabric && config.provider.starts_with("shm");
    if shm_fabric && std::env::var_os("GASPI_PROGRESS_THREAD").is_none() {
        config.progress_thread = false;
    }
}

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    ensure!(n >= 3, "killed-target needs at least 3 ranks, got {n}");
    let victim = n - 1;
    ctx.segment_create(SEG, u64::from(n) * REGION, TIMEOUT)
        .doing(|| "segment_create")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the stream")?;
    if me == victim {
        die_under_traffic(ctx, victim)?;
    }
    let mut data = Data::default();
    data.put("progress_thread", ctx.config().progress_thread);
    stream_until_failure(ctx, victim, &mut data)?;
    told_at_once(ctx, victim, &mut data)?;
    survivors_group(ctx, victim, &mut data)?;
    Ok(Report {
        summary: format!(
            "wrote into rank {victim} until it was killed; the next call failed naming it, so \
             did every later one towards it, and the survivors' group went on without it"
        ),
        data,
    })
}

/// The victim: once every writer is streaming into it (and its first round landed whole), a
/// little more traffic, then SIGKILL.
fn die_under_traffic(ctx: &Context, victim: Rank) -> Outcome {
    let large = large(ctx, victim) as usize;
    let small = LARGE as usize..;
    let mut want = vec![0u8; (LARGE + SMALL) as usize];
    let mut got = want.clone();
    for writer in 0..victim {
        ctx.notify_waitsome(SEG, writer, 1, TIMEOUT)
            .doing(|| format!("waiting for the stream of rank {writer}"))?;
        ctx.notify_reset(SEG, writer)
            .doing(|| "resetting a writer's notification")?;
        // Every round writes the same bytes, so what is there is whole whichever round wrote
        // it last: the large write, and the small one that the notification follows.
        fill_pattern(seed(&[u64::from(writer)]), &mut want);
        ctx.segment_read(SEG, u64::from(writer) * REGION, &mut got)
            .doing(|| "reading a writer's region")?;
        let whose = |what| format!("the {what} write of rank {writer}");
        compare(whose("large"), &got[..large], &want[..large])?;
        compare(whose("small"), &got[small.clone()], &want[small.clone()])?;
    }
    std::thread::sleep(TRAFFIC);
    report_and_kill_myself("killed-target", victim)
}

/// The size of the large writes into `victim` (see the module's doc).
fn large(ctx: &Context, victim: Rank) -> u64 {
    if ctx.reaches_directly(victim) || !ctx.provider().starts_with("shm") {
        LARGE
    } else {
        SHM_LARGE
    }
}

/// A writer: streams into the victim until a call fails; that failure must name it.
fn stream_until_failure(ctx: &Context, victim: Rank, data: &mut Data) -> Outcome {
    let me = ctx.rank();
    let large = large(ctx, victim);
    let at = u64::from(me) * REGION;
    let mut source = vec![0u8; (LARGE + SMALL) as usize];
    fill_pattern(seed(&[u64::from(me)]), &mut source);
    ctx.segment_write(SEG, at, &source)
        .doing(|| "filling the source")?;
    let note = Notification { id: me, value: 1 };
    let start = Instant::now();
    let mut rounds = 0u64;
    let (call, failure) = loop {
        let to = |offset| remote(victim, SEG, at + offset);
        if let Err(e) = ctx.write(local(SEG, at), to(0), large, QUEUE) {
            break ("write", e);
        }
        let small = local(SEG, at + LARGE);
        if let Err(e) = ctx.write_notify(small, to(LARGE), SMALL, note, QUEUE) {
            break ("write_notify", e);
        }
        if let Err(e) = ctx.wait(QUEUE, WAIT) {
            break ("wait", e);
        }
        rounds += 1;
        ensure!(
            start.elapsed() < STREAM_LIMIT,
            "{rounds} rounds of writes into rank {victim} succeeded in {STREAM_LIMIT:?}"
        );
    };
    data.put("detected_at_us", monotonic_us());
    let failure: gaspi::Result<()> = Err(failure);
    data.put("large_bytes", large);
    data.put("small_bytes", SMALL);
    data.put("rounds", rounds);
    data.put("detected_by", call);
    data.outcome("detected", &failure);
    expect_failed(
        &format!("{call} into the dying rank {victim}"),
        failure,
        victim,
    )?;
    // A post that failed because the victim was already known dead left the round's earlier
    // operations towards it in the queue (the large write, when `write_notify` failed): the
    // queue's next wait reports the death once more and drops them, as the README's fault
    // table says. Only after that wait must the queue be empty and usable.
    if call != "wait" {
        let settled = ctx.wait(QUEUE, WAIT);
        data.outcome("settled", &settled);
        if settled.is_err() {
            expect_failed("the queue's wait after a failed post", settled, victim)?;
        }
    }
    Ok(())
}

/// After the death was seen: every call towards the victim fails at once naming it, only it is
/// `Corrupt`, and the writer's queue is usable again.
fn told_at_once(ctx: &Context, victim: Rank, data: &mut Data) -> Outcome {
    let at = u64::from(ctx.rank()) * REGION;
    let (write, write_took) = data.timed("write_after", || {
        ctx.write(local(SEG, at), remote(victim, SEG, at), LARGE, QUEUE)
    });
    let note = Notification {
        id: ctx.rank(),
        value: 2,
    };
    let (notify, notify_took) = data.timed("write_notify_after", || {
        ctx.write_notify(local(SEG, at), remote(victim, SEG, at), SMALL, note, QUEUE)
    });
    let ping = ctx.proc_ping(victim, Timeout::Millis(1_000));
    data.outcome("ping_after", &ping);
    let queue = ctx.wait(QUEUE, Timeout::Test);
    data.outcome("queue_after", &queue);
    let states = states(ctx);
    data.put("state_vec", &states);
    expect_failed("a write to the dead rank", write, victim)?;
    expect_failed("a write_notify to the dead rank", notify, victim)?;
    expect_failed("proc_ping of the dead rank", ping, victim)?;
    let bound = Duration::from_millis(100);
    ensure!(
        write_took < bound && notify_took < bound,
        "calls towards a rank known dead took {write_took:?} (write) and {notify_took:?} \
         (write_notify)"
    );
    queue.doing(|| format!("waiting for queue {QUEUE} after the death"))?;
    ensure!(
        states
            .chars()
            .enumerate()
            .all(|(r, s)| (r as Rank == victim) == (s == 'C')),
        "state_vec is {states}: expected only rank {victim} Corrupt"
    );
    Ok(())
}
