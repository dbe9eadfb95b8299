//! `dead-read`: a rank dies while a read from it is in flight; the survivors' waits stay within
//! their timeouts and never name a live rank.
//!
//! Over shm a read towards a stopped or dead peer never completes, and shm hands out
//! completions strictly in order, so the rank that posted it completes no later read (a
//! descriptor lookup included) towards anyone. The last rank, the victim, stops itself; rank 0
//! posts a read from it, which goes unanswered, then kills it (SIGKILL). The survivors commit
//! a group of their own and run an allreduce on it with a 3 s timeout: it may complete, or time
//! out (rank 0 cannot look up its partners' areas over shm), but it must end by its deadline,
//! and a failure may only name the dead rank. Finally `finalize` with a 2 s timeout must end
//! promptly naming a dead rank ([`finalize_names_the_dead_rank`]): the victim, or a survivor
//! that already finalized and exited. Run it under
//! `gaspirun --keep-going`; the victim prints no `ok` line. Observations go to the data line
//! for `tests/multiprocess.rs` to judge.

use std::thread::sleep;
use std::time::{Duration, Instant};

use gaspi::{local, remote, Context, Error, Notification, ReduceOp, Timeout};

use crate::check::{describe, outcome, Data, Doing, Failure, Outcome, Report};
use crate::stopped::{stop_myself, thread_states};

const SEG: u8 = 0;
const SEG_LEN: u64 = 64 << 10;
/// Where the victim's pid lands on rank 0.
const PID_AT: u64 = 0;
/// The read from the victim: larger than shm's inject size, so it needs the victim.
const READ_AT: u64 = 32 << 10;
const READ_LEN: u64 = 16 << 10;
const PID_ID: u32 = 0;
/// Survivor `r` tells the victim to stop with notification `GO_BASE + r`.
const GO_BASE: u32 = 1;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The allreduce's timeout among the survivors.
pub const ALLREDUCE_MS: u64 = 3_000;
/// `finalize`'s timeout.
pub const FINALIZE_MS: u64 = 2_000;

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
        let pid = u64::from(std::process::id());
        ctx.segment_write(SEG, PID_AT, &pid.to_le_bytes())
            .doing(|| "writing the pid")?;
        let note = Notification {
            id: PID_ID,
            value: 1,
        };
        ctx.write_notify(local(SEG, PID_AT), remote(0, SEG, PID_AT), 8, note, 0)
            .doing(|| "sending the pid")?;
        ctx.wait(0, TIMEOUT)
            .doing(|| "waiting for the pid's write")?;
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "the barrier before the stop")?;
    if me == victim {
        // Every survivor has left the barrier (it says so), so none needs us any more.
        for r in 0..victim {
            let id = ctx
                .notify_waitsome(SEG, GO_BASE + r, 1, TIMEOUT)
                .doing(|| format!("waiting for rank {r} to say stop"))?;
            ctx.notify_reset(SEG, id).doing(|| "notify_reset")?;
        }
        stop_myself()?;
        return Err(Failure("the victim was continued instead of killed".into()));
    }
    ctx.notify(
        victim,
        SEG,
        Notification {
            id: GO_BASE + me,
            value: 1,
        },
        0,
    )
    .doing(|| "telling the victim to stop")?;
    ctx.wait(0, TIMEOUT).doing(|| "waiting for the notify")?;
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
    ctx.notify_waitsome(SEG, PID_ID, 1, TIMEOUT)
        .doing(|| "waiting for the victim's pid")?;
    let mut pid = [0u8; 8];
    ctx.segment_read(SEG, PID_AT, &mut pid)
        .doing(|| "reading the pid")?;
    let pid = libc::pid_t::try_from(u64::from_le_bytes(pid))
        .map_err(|_| Failure("the victim's pid does not fit pid_t".into()))?;
    let start = Instant::now();
    loop {
        match thread_states(pid) {
            Some(states) if states.chars().all(|s| s == 'T') => break,
            Some(_) if start.elapsed() < Duration::from_secs(10) => sleep(Duration::from_millis(1)),
            other => {
                return Err(Failure(format!(
                    "the victim's process {pid} did not stop: {other:?}"
                )))
            }
        }
    }
    ctx.read(local(SEG, READ_AT), remote(victim, SEG, 0), READ_LEN, 1)
        .doing(|| "posting the read from the stopped victim")?;
    data.outcome("read_wait_stopped", &ctx.wait(1, Timeout::Millis(300)));
    // SAFETY: kill(2) takes plain integers and touches no memory of ours; `pid` is the
    // victim of this job, which sent it (positive, so never a process group).
    if unsafe { libc::kill(pid, libc::SIGKILL) } != 0 {
        return Err(Failure(format!(
            "SIGKILL to the victim: {}",
            std::io::Error::last_os_error()
        )));
    }
    Ok(())
}

/// Every survivor: a group of the survivors, and an allreduce on it within its timeout.
fn survivors(ctx: &Context, victim: u32, data: &mut Data) -> Outcome {
    let group = ctx.group_create().doing(|| "group_create")?;
    for r in 0..victim {
        ctx.group_add(group, r)
            .doing(|| format!("group_add({r})"))?;
    }
    data.outcome("commit", &ctx.group_commit(group, TIMEOUT));
    let mut sum = [0u64];
    let start = Instant::now();
    let reduced = ctx.allreduce(
        group,
        &[u64::from(ctx.rank()) + 1],
        &mut sum,
        ReduceOp::Sum,
        Timeout::Millis(ALLREDUCE_MS),
    );
    data.put("allreduce_ms", start.elapsed().as_millis());
    data.outcome("allreduce", &reduced);
    if reduced.is_ok() {
        data.put("sum", sum[0]);
    }
    Ok(())
}

/// `finalize` with the victim dead: it must end within its timeout and a look, naming it.
pub fn finalize_names_the_dead_rank(ctx: Context, data: &mut Data) -> Outcome<String> {
    let start = Instant::now();
    let result = ctx.finalize(Timeout::Millis(FINALIZE_MS));
    data.put("finalize_ms", start.elapsed().as_millis());
    let described = match &result {
        Err(Error::FinalizeTimeout(_)) => "FinalizeTimeout".to_owned(),
        other => outcome(other),
    };
    data.put("finalize", &described);
    Ok(match result {
        Err(e) => format!("finalize ended with {}", describe(&e)),
        Ok(()) => "finalize completed".into(),
    })
}
