//! `dead-read`: a rank dies while a read from it is in flight; the survivors' waits stay within
//! their timeouts and never name a live rank.
//!
//! Over shm a read towards a stopped or dead peer never completes, and shm hands out
//! completions strictly in order, so the rank that posted it completes no later read (a
//! descriptor lookup included) towards anyone. The last rank, the victim, stops itself; rank 0
//! posts a read from it, which goes unanswered, then kills it (SIGKILL). The survivors commit
//! a group of their own and run an allreduce on it with a 3 s timeout: it may complete, or time
//! out (rank 0 cannot look up its partners' areas over shm), but it must end by its deadline,
//! and a failure may only name the dead rank. Rank 0 also pings the stopped victim before the
//! kill, and every survivor pings the dead victim and the other survivors after it: a ping
//! of a live survivor must succeed (on the direct path no ping reads anything; over tcp the
//! read failed with the connection). Over shm through the fabric rank 0 can read nothing
//! afterwards, and shm then refuses whatever else it sends to a survivor it pinged (a read),
//! so there the survivors skip those pings. Finally `finalize` with a 2 s
//! timeout must end promptly naming a dead rank ([`finalize_names_the_dead_rank`]): the
//! victim, or a survivor that already finalized and exited. Run it under `gaspirun
//! --keep-going`; the victim prints no `ok` line. Observations go to the data line for
//! `tests/multiprocess.rs` to judge.

use gaspi::{local, remote, Context, Notification, ReduceOp, Timeout};

use crate::check::{describe, Data, Doing, Failure, Outcome, Report};
use crate::victim::{Handshake, Stopped};

const SEG: u8 = 0;
const SEG_LEN: u64 = 64 << 10;
/// The victim's pid at offset 0 with notification 0; survivor `r` tells it to stop with
/// notification `1 + r`.
const HANDSHAKE: Handshake = Handshake {
    segment: SEG,
    pid_at: 0,
    pid_id: 0,
    go: 1,
    queue: 0,
};
/// Survivor `r` tells the others it is done pinging them with notification `PINGED + r`.
const PINGED: u32 = 16;
/// The read from the victim: larger than shm's inject size, so it needs the victim.
const READ_AT: u64 = 32 << 10;
const READ_LEN: u64 = 16 << 10;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The allreduce's timeout among the survivors.
pub const ALLREDUCE_MS: u64 = 3_000;
/// `finalize`'s timeout.
pub const FINALIZE_MS: u64 = 2_000;
/// The timeout of a survivor's ping of another survivor after the kill.
const PING_LIVE_MS: u64 = 1_000;

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 3 {
        return Err(Failure(format!(
            "dead-read needs at least 3 ranks, got {n}"
        )));
    }
    let victim = n - 1;
    ctx.segment_create(SEG, SEG_LEN, TIMEOUT)
        .doing(|| "segment_create")?;
    if me == victim {
        HANDSHAKE.send_pid(ctx, TIMEOUT)?;
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the stop")?;
    if me == victim {
        HANDSHAKE.stop_when_told(ctx, 1, TIMEOUT)?;
        return Err(Failure("the victim was continued instead of killed".into()));
    }
    HANDSHAKE.tell_to_stop(ctx, victim, 1)?;
    ctx.wait(HANDSHAKE.queue, TIMEOUT)
        .doing(|| "waiting for the notify")?;
    let mut data = Data::default();
    if me == 0 {
        kill_with_a_read_in_flight(ctx, victim, &mut data)?;
    }
    survivors(ctx, victim, &mut data)?;
    Ok(Report {
        summary: "the survivors' waits stayed within their timeouts after a death with a read \
                  in flight"
            .into(),
        data,
    })
}

/// Rank 0: posts a read from the stopped victim, checks it goes unanswered, and kills it.
fn kill_with_a_read_in_flight(ctx: &Context, victim: u32, data: &mut Data) -> Outcome {
    let stop = Stopped::wait_for(HANDSHAKE.receive_pid(ctx, TIMEOUT)?)?;
    ctx.read(local(SEG, READ_AT), remote(victim, SEG, 0), READ_LEN, 1)
        .doing(|| "posting the read from the stopped victim")?;
    data.outcome("read_wait_stopped", &ctx.wait(1, Timeout::Millis(300)));
    data.outcome("ping_stopped", &ctx.proc_ping(victim, Timeout::Millis(300)));
    stop.kill()
}

/// Every survivor: a group of the survivors, an allreduce on it within its timeout, then
/// pings of the dead victim and of the other survivors.
fn survivors(ctx: &Context, victim: u32, data: &mut Data) -> Outcome {
    let group = ctx.group_create().doing(|| "group_create")?;
    for r in 0..victim {
        ctx.group_add(group, r)
            .doing(|| format!("group_add({r})"))?;
    }
    data.outcome("commit", &ctx.group_commit(group, TIMEOUT));
    let mut sum = [0u64];
    let input = [u64::from(ctx.rank()) + 1];
    let (reduced, _) = data.timed("allreduce", || {
        ctx.allreduce(
            group,
            &input,
            &mut sum,
            ReduceOp::Sum,
            Timeout::Millis(ALLREDUCE_MS),
        )
    });
    if reduced.is_ok() {
        data.put("sum", sum[0]);
    }
    data.outcome("ping_dead", &ctx.proc_ping(victim, TIMEOUT));
    let me = ctx.rank();
    // Over shm through the fabric rank 0 can complete no read after the one that went
    // unanswered (see the README's provider limits): its ping of a survivor (a read) then
    // stays pending, and shm refuses every later write towards that survivor, a notification
    // too (traced: the inject of the notify returns -FI_EAGAIN for good; without the ping the
    // notify waits on the lookup of the survivor's segment, a read as well). So there the
    // survivors could not hold each other until the pings are done.
    if (0..victim).any(|r| r != me && !ctx.reaches_directly(r)) && ctx.provider() == "shm" {
        return Ok(());
    }
    for r in (0..victim).filter(|&r| r != me) {
        let _ = data.timed(&format!("ping_live_{r}"), || {
            ctx.proc_ping(r, Timeout::Millis(PING_LIVE_MS))
        });
    }
    // No survivor finalizes and exits while another may still ping it.
    for r in (0..victim).filter(|&r| r != me) {
        let done = Notification {
            id: PINGED + me,
            value: 1,
        };
        ctx.notify(r, SEG, done, HANDSHAKE.queue)
            .doing(|| format!("telling rank {r} the pings are done"))?;
    }
    for r in (0..victim).filter(|&r| r != me) {
        ctx.notify_waitsome(SEG, PINGED + r, 1, TIMEOUT)
            .doing(|| format!("waiting for rank {r} to be done pinging"))?;
        ctx.notify_reset(SEG, PINGED + r).doing(|| "notify_reset")?;
    }
    ctx.wait(HANDSHAKE.queue, TIMEOUT)
        .doing(|| "waiting for the notifications")
}

/// `finalize` with the victim dead: it must end within its timeout and a look, naming it.
pub fn finalize_names_the_dead_rank(ctx: Context, data: &mut Data) -> Outcome<String> {
    let (result, _) = data.timed("finalize", || ctx.finalize(Timeout::Millis(FINALIZE_MS)));
    Ok(match result {
        Err(e) => format!("finalize ended with {}", describe(&e)),
        Ok(()) => "finalize completed".into(),
    })
}
