//! `stopped`: a peer that is alive but stopped (SIGSTOP) makes waiting calls time out in time,
//! marks nothing, and everything works again once it resumes.
//!
//! Rank 0 checks; the last rank `v` is the victim; the ranks in between join the collectives.
//! The victim sends rank 0 its pid first. Then come three stops. Each opens with a barrier;
//! every other rank then tells the victim to go ahead. The victim stops itself only when all of
//! them have passed that barrier, so none of them can still need one of its messages. Rank 0
//! waits until `/proc` shows every thread of the victim stopped, and runs calls towards it with
//! [`SHORT`]. It records how each ended and how long it took, then `state_vec`, and continues
//! the victim (a guard continues it on every path, a failed check included). Then every call
//! is made again with [`LONG`] while the victim, continued, makes its side of them. What is
//! recorded is judged by `tests/stopped.rs`:
//!
//! 1. collectives: `barrier`; `group_commit` of a new group; `group_barrier` of a committed
//!    group with the victim; `allreduce` on a group committed just before (its allreduce areas
//!    never looked up), then a `group_barrier` on that group (not stuck);
//! 2. one-sided calls and creations: blocking `atomic_fetch_add` and
//!    `atomic_fetch_add_nb(..).wait` on segments never accessed before; `proc_ping`;
//!    `wait(queue)` with a read from the victim posted; `segment_size_of` and `target` of
//!    segments not looked up before; `passive_send` after that read went unanswered;
//!    `notify_wait_any` naming the victim as sender; `Batch::wait` with a read from it;
//!    `Library::segment_create` over `GROUP_ALL`; `Library::team`; `segment_create`;
//! 3. `finalize` ([`finalize_while_stopped`], run in place of the final `finalize`).
//!
//! Only one collective of `GROUP_ALL` can time out per stop: `segment_create` and `finalize`
//! continue a timed-out `GROUP_ALL` barrier instead of starting their own. Hence the phases.

use gaspi::{
    local, remote, Context, Error, GroupId, Notification, NotificationId, QueueId, Rank, ReduceOp,
    Segment, SegmentId, Timeout, GROUP_ALL,
};

use crate::check::{
    describe, fill_pattern, outcome, seed, states, Data, Doing, Failure, Outcome, Report,
};
use crate::victim::{Handshake, Stopped};

/// The timeout of every call made while the victim is stopped.
const SHORT: Timeout = Timeout::Millis(500);
/// The timeout of calls that must complete: generous for a loaded 2-core machine. It is
/// finite so that a stuck call fails the job with a message.
const LONG: Timeout = Timeout::Millis(20_000);

/// Segment 0: the pid, the data that rank 0 reads from the victim, the notifications.
const MAIN: SegmentId = 0;
const MAIN_SIZE: u64 = 64 << 10;
/// The pid at offset 0 with notification 0; "go ahead and stop" from rank `r` with
/// notification `16 + r`, its value the phase number.
const HANDSHAKE: Handshake = Handshake {
    segment: MAIN,
    pid_at: 0,
    pid_id: 0,
    go: 16,
    queue: GO_QUEUE,
};
/// The victim's pattern, which rank 0 reads (the queue read the first half, the batch the
/// second).
const SOURCE: u64 = 4096;
const READ_LEN: u64 = 64;
/// Where rank 0's reads land.
const QUEUE_READ_AT: u64 = 8192;
const BATCH_READ_AT: u64 = 12288;
/// Set by the victim once continued, for `notify_wait_any`.
const ANY_ID: NotificationId = 1;
const ANY_VALUE: u32 = 77;

/// Segments never accessed by rank 0 before the stop that uses them.
const ATOMIC_BLOCKING: SegmentId = 1;
const ATOMIC_NB: SegmentId = 2;
const SIZE_OF: SegmentId = 3;
const TARGET: SegmentId = 4;
/// Created while the victim is stopped.
const CREATED: SegmentId = 5;
/// The size of segments on every rank but the victim.
const PLAIN_SIZE: u64 = 4096;
/// The victim's sizes of `SIZE_OF`, `TARGET`, `CREATED` and the library segment: unlike
/// everyone else's, so that a size rank 0 reports must have come from the victim.
const VICTIM_SIZE_OF: u64 = 24_576;
const VICTIM_TARGET: u64 = 40_960;
const VICTIM_CREATED: u64 = 20_480;
const VICTIM_LIBRARY: u64 = 28_672;
const LIBRARY_NOTIFICATIONS: u32 = 8;

/// The "go" notifications (and the victim's `notify_wait_any` notification).
const GO_QUEUE: QueueId = 0;
/// The read whose `wait` is checked.
const READ_QUEUE: QueueId = 1;

/// Payloads of rank 0's passive messages to the victim.
const WHILE_STOPPED: &str = "sent-while-stopped";
const AFTER_RESUME: &str = "sent-after-resume";

/// What a rank does in the scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    Checker,
    Victim,
    Bystander,
}

fn role(me: Rank, victim: Rank) -> Role {
    if me == 0 {
        Role::Checker
    } else if me == victim {
        Role::Victim
    } else {
        Role::Bystander
    }
}

/// The groups every rank creates, in the same order (so their ids agree).
struct Groups {
    /// Rank 0 and the victim, committed before the first stop.
    pair: GroupId,
    /// Every rank, committed before the first stop; its first allreduce is while stopped.
    fresh: GroupId,
    /// Every rank, created before the first stop and committed during it.
    new: GroupId,
}

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Err(Failure(format!("stopped needs at least 2 ranks, got {n}")));
    }
    let victim = n - 1;
    let role = role(me, victim);
    let mut data = Data::default();
    setup(ctx, role, victim)?;
    let groups = groups(ctx, role, victim)?;
    let lib = ctx.library("stopped").doing(|| "registering the library")?;

    open_phase(ctx, role, victim, 1)?;
    if role == Role::Checker {
        let stop = Stopped::wait_for(HANDSHAKE.read_pid(ctx)?)?;
        collectives_while_stopped(ctx, &groups, &mut data);
        data.put("state_vec_collectives", states(ctx));
        stop.resume()?;
    }
    collectives(ctx, role, &groups, &mut data)?;
    close_phase(ctx, role, &mut data)?;

    open_phase(ctx, role, victim, 2)?;
    // Dropping its last handle deletes a library segment: each rank keeps its own until all
    // are done with the others'.
    let _lib_segment = match role {
        Role::Checker => one_sided(ctx, victim, &lib, &mut data)?,
        Role::Victim => one_sided_victim(ctx, &lib, &mut data)?,
        Role::Bystander => {
            let seg = lib.segment_create(GROUP_ALL, PLAIN_SIZE, LIBRARY_NOTIFICATIONS, LONG);
            let seg = after(&mut data, "lib_segment_create", seg)?;
            let created = ctx.segment_create(CREATED, PLAIN_SIZE, LONG);
            after(&mut data, "segment_create", created)?;
            seg
        }
    };
    close_phase(ctx, role, &mut data)?;
    let closed = ctx.barrier(LONG);
    after(&mut data, "closing_barrier", closed)?;

    data.put("state_vec_end", states(ctx));
    let summary = match role {
        Role::Checker => format!(
            "calls towards the stopped rank {victim} made with a 500 ms timeout, then again \
             once it was continued (see the data line)"
        ),
        Role::Victim => "stopped twice, and took part in every call once continued".into(),
        Role::Bystander => "took part in the collectives around the stops".into(),
    };
    Ok(Report { summary, data })
}

/// Creates the segments, and brings the victim's pid to rank 0.
fn setup(ctx: &Context, role: Role, victim: Rank) -> Outcome {
    for (id, victim_size) in [
        (MAIN, MAIN_SIZE),
        (ATOMIC_BLOCKING, PLAIN_SIZE),
        (ATOMIC_NB, PLAIN_SIZE),
        (SIZE_OF, VICTIM_SIZE_OF),
        (TARGET, VICTIM_TARGET),
    ] {
        let size = if role == Role::Victim || id == MAIN {
            victim_size
        } else {
            PLAIN_SIZE
        };
        ctx.segment_create(id, size, LONG)
            .doing(|| format!("segment_create({id})"))?;
    }
    match role {
        Role::Victim => {
            let mut pattern = vec![0u8; 2 * READ_LEN as usize];
            fill_pattern(seed(&[u64::from(victim)]), &mut pattern);
            ctx.segment_write(MAIN, SOURCE, &pattern)
                .doing(|| "writing the pattern")?;
            HANDSHAKE.send_pid(ctx, LONG)
        }
        Role::Checker => {
            HANDSHAKE.receive_pid(ctx, LONG)?;
            // Resolved now, so that the reads checked while it is stopped need no lookup.
            ctx.segment(MAIN)
                .doing(|| "segment(0)")?
                .target(victim, LONG)
                .doing(|| format!("resolving segment 0 of rank {victim}"))?;
            Ok(())
        }
        Role::Bystander => Ok(()),
    }
}

fn groups(ctx: &Context, role: Role, victim: Rank) -> Outcome<Groups> {
    let pair = ctx.group_create().doing(|| "group_create")?;
    for r in [0, victim] {
        ctx.group_add(pair, r)
            .doing(|| format!("group_add({pair}, {r})"))?;
    }
    if role != Role::Bystander {
        ctx.group_commit(pair, LONG)
            .doing(|| "committing the group of rank 0 and the victim")?;
    }
    let fresh = ctx.group_create().doing(|| "group_create")?;
    for r in 0..ctx.size() {
        ctx.group_add(fresh, r)
            .doing(|| format!("group_add({fresh}, {r})"))?;
    }
    ctx.group_commit(fresh, LONG)
        .doing(|| "committing the group of every rank")?;
    let new = ctx.group_create().doing(|| "group_create")?;
    for r in 0..ctx.size() {
        ctx.group_add(new, r)
            .doing(|| format!("group_add({new}, {r})"))?;
    }
    Ok(Groups { pair, fresh, new })
}

/// Opens a phase: a barrier, after which every other rank tells the victim to stop; the
/// victim stops once all have (it returns when continued).
fn open_phase(ctx: &Context, role: Role, victim: Rank, phase: u32) -> Outcome {
    ctx.barrier(LONG)
        .doing(|| format!("the barrier opening phase {phase}"))?;
    if role == Role::Victim {
        HANDSHAKE.stop_when_told(ctx, phase, LONG)
    } else {
        HANDSHAKE.tell_to_stop(ctx, victim, phase)
    }
}

/// Waits for the go notifications to complete; the victim is running again by now.
fn close_phase(ctx: &Context, role: Role, data: &mut Data) -> Outcome {
    if role == Role::Victim {
        return Ok(());
    }
    ctx.wait(GO_QUEUE, LONG)
        .map_err(|e| fail(data, "waiting for the go notification", &e))
}

/// Records how a call after the victim resumed ended, under `<key>_after`; an error ends the
/// scenario (the ranks would be out of step), with everything recorded so far.
fn after<T>(data: &mut Data, key: &str, result: gaspi::Result<T>) -> Outcome<T> {
    data.outcome(&format!("{key}_after"), &result);
    result.map_err(|e| fail(data, &format!("{key} after the victim was continued"), &e))
}

/// [`after`] for a call that must not be repeated once it completed: made again only if the
/// call while stopped did not complete.
fn again<T>(
    data: &mut Data,
    key: &str,
    first: gaspi::Result<T>,
    call: impl FnOnce() -> gaspi::Result<T>,
) -> Outcome<T> {
    let result = match first {
        Ok(value) => Ok(value),
        Err(_) => call(),
    };
    after(data, key, result)
}

fn fail(data: &Data, what: &str, e: &Error) -> Failure {
    Failure(format!(
        "{what}: {} ({e}); recorded so far: {}",
        describe(e),
        data.line()
    ))
}

/// The allreduce input of `rank`; the sums are n(n+1)/2 and 2^n - 1.
fn reduce_input(rank: Rank) -> [u64; 2] {
    [u64::from(rank) + 1, 1 << rank]
}

/// Rank 0, victim stopped: each collective with it times out. Each runs on its own group (or
/// `GROUP_ALL`), so no timed-out one holds up the next.
fn collectives_while_stopped(ctx: &Context, groups: &Groups, data: &mut Data) {
    let _ = data.timed("barrier", || ctx.barrier(SHORT));
    let _ = data.timed("group_commit", || ctx.group_commit(groups.new, SHORT));
    let _ = data.timed("group_barrier", || ctx.group_barrier(groups.pair, SHORT));
    let mut sum = [0u64; 2];
    let input = reduce_input(ctx.rank());
    let _ = data.timed("allreduce", || {
        ctx.allreduce(groups.fresh, &input, &mut sum, ReduceOp::Sum, SHORT)
    });
}

/// Every rank, after the victim is continued: the collectives of the first stop, each
/// completed (on rank 0 they continue the ones that timed out), then barriers on the groups
/// involved: none is left stuck.
fn collectives(ctx: &Context, role: Role, groups: &Groups, data: &mut Data) -> Outcome {
    after(data, "barrier", ctx.barrier(LONG))?;
    after(data, "group_commit", ctx.group_commit(groups.new, LONG))?;
    if role != Role::Bystander {
        after(data, "group_barrier", ctx.group_barrier(groups.pair, LONG))?;
    }
    let input = reduce_input(ctx.rank());
    let mut sum = [0u64; 2];
    // On rank 0 this continues the allreduce that timed out while the victim was stopped.
    let reduced = ctx.allreduce(groups.fresh, &input, &mut sum, ReduceOp::Sum, LONG);
    after(data, "allreduce", reduced)?;
    data.put("allreduce_sum", format!("{},{}", sum[0], sum[1]));
    let settled = ctx.group_barrier(groups.fresh, LONG);
    after(data, "allreduce_group_barrier", settled)?;
    let new_barrier = ctx.group_barrier(groups.new, LONG);
    after(data, "group_commit_barrier", new_barrier)?;
    Ok(())
}

/// Rank 0's second stop: one-sided calls towards the victim, then the library's and the
/// user's segment creations, each with [`SHORT`]; then again once it is continued.
fn one_sided<'a>(
    ctx: &'a Context,
    victim: Rank,
    lib: &gaspi::Library<'a>,
    data: &mut Data,
) -> Outcome<Segment<'a>> {
    let main = ctx.segment(MAIN).doing(|| "segment(0)")?;
    let victim_main = main
        .target(victim, LONG)
        .doing(|| "segment 0 of the victim (cached)")?;
    let batch = ctx.batch();
    let team_members = [0, victim];

    let stop = Stopped::wait_for(HANDSHAKE.read_pid(ctx)?)?;
    let blocking = remote(victim, ATOMIC_BLOCKING, 0);
    let _ = data.timed("atomic_fetch_add", || {
        ctx.atomic_fetch_add(blocking, 1, SHORT)
    });
    let request = ctx.atomic_fetch_add_nb(remote(victim, ATOMIC_NB, 0), 2);
    data.outcome("atomic_fetch_add_nb_start", &request);
    let request = request.map_err(|e| fail(data, "starting atomic_fetch_add_nb", &e))?;
    let _ = data.timed("atomic_fetch_add_nb", || request.wait(SHORT));
    let _ = data.timed("proc_ping", || ctx.proc_ping(victim, SHORT));
    ctx.read(
        local(MAIN, QUEUE_READ_AT),
        remote(victim, MAIN, SOURCE),
        READ_LEN,
        READ_QUEUE,
    )
    .map_err(|e| fail(data, "posting the read from the victim", &e))?;
    let _ = data.timed("wait_queue", || ctx.wait(READ_QUEUE, SHORT));
    let _ = data.timed("segment_size_of", || {
        ctx.segment_size_of(victim, SIZE_OF, SHORT)
    });
    let _ = data.timed("target", || ctx.target(victim, TARGET, SHORT));
    // The read above is still unanswered: over shm this send queues behind it.
    let (while_stopped, _) = data.timed("passive_send", || {
        ctx.passive_send(victim, WHILE_STOPPED.as_bytes(), SHORT)
    });
    let _ = data.timed("notify_wait_any", || {
        ctx.notify_wait_any(&[main.range(ANY_ID, 1)], &[victim], SHORT)
    });
    batch
        .read(
            &main,
            BATCH_READ_AT,
            &victim_main,
            SOURCE + READ_LEN,
            READ_LEN,
        )
        .map_err(|e| fail(data, "posting the batch read from the victim", &e))?;
    let _ = data.timed("batch_wait", || batch.wait(SHORT));
    let (lib_segment, _) = data.timed("lib_segment_create", || {
        lib.segment_create(GROUP_ALL, PLAIN_SIZE, LIBRARY_NOTIFICATIONS, SHORT)
    });
    let (team, _) = data.timed("lib_team", || lib.team(&team_members, SHORT));
    let (created, _) = data.timed("segment_create", || {
        ctx.segment_create(CREATED, PLAIN_SIZE, SHORT)
    });
    data.put("state_vec_one_sided", states(ctx));
    stop.resume()?;

    // A timed-out atomic stays in flight: with this second add the word must reach 11.
    let old = after(
        data,
        "atomic_fetch_add",
        ctx.atomic_fetch_add(blocking, 10, LONG),
    )?;
    data.put("atomic_fetch_add_old", old);
    let word = ctx.atomic_fetch_add(blocking, 0, LONG);
    let word = after(data, "atomic_read", word)?;
    data.put("atomic_fetch_add_word", word);
    let old = after(data, "atomic_fetch_add_nb", request.wait(LONG))?;
    data.put("atomic_fetch_add_nb_old", old);
    let word = ctx.atomic_fetch_add(remote(victim, ATOMIC_NB, 0), 0, LONG);
    let word = after(data, "atomic_nb_read", word)?;
    data.put("atomic_fetch_add_nb_word", word);
    after(data, "proc_ping", ctx.proc_ping(victim, LONG))?;
    after(data, "wait_queue", ctx.wait(READ_QUEUE, LONG))?;
    data.put(
        "wait_queue_wrong_bytes",
        wrong_bytes(ctx, QUEUE_READ_AT, 0, victim)?,
    );
    let size = after(
        data,
        "segment_size_of",
        ctx.segment_size_of(victim, SIZE_OF, LONG),
    )?;
    data.put("segment_size_of_value", size);
    let target = after(data, "target", ctx.target(victim, TARGET, LONG))?;
    data.put("target_len", target.len());
    // A send that timed out was not posted (GASPI's meaning): it is sent again.
    if matches!(while_stopped, Err(Error::Timeout)) {
        let again = ctx.passive_send(victim, WHILE_STOPPED.as_bytes(), LONG);
        after(data, "passive_send_again", again)?;
    }
    let sent = ctx.passive_send(victim, AFTER_RESUME.as_bytes(), LONG);
    after(data, "passive_send", sent)?;
    let arrival = after(
        data,
        "notify_wait_any",
        ctx.notify_wait_any(&[main.range(ANY_ID, 1)], &[victim], LONG),
    )?;
    data.put("notify_wait_any_id", arrival.id);
    let value = main
        .notify_reset(arrival.id)
        .map_err(|e| fail(data, "resetting the notification", &e))?;
    data.put("notify_wait_any_value", value);
    after(data, "batch_wait", batch.wait(LONG))?;
    data.put(
        "batch_wait_wrong_bytes",
        wrong_bytes(ctx, BATCH_READ_AT, READ_LEN, victim)?,
    );
    let lib_segment = again(data, "lib_segment_create", lib_segment, || {
        lib.segment_create(GROUP_ALL, PLAIN_SIZE, LIBRARY_NOTIFICATIONS, LONG)
    })?;
    let on_victim = lib_segment.target(victim, LONG);
    let on_victim = after(data, "lib_segment_target", on_victim)?;
    data.put("lib_segment_victim_len", on_victim.len());
    let team = again(data, "lib_team", team, || lib.team(&team_members, LONG))?;
    data.put(
        "lib_team_ranks",
        team.ranks()
            .iter()
            .map(u32::to_string)
            .collect::<Vec<_>>()
            .join(","),
    );
    again(data, "segment_create", created, || {
        ctx.segment_create(CREATED, PLAIN_SIZE, LONG)
    })?;
    let size = ctx.segment_size_of(victim, CREATED, LONG);
    let size = after(data, "segment_create_size_of", size)?;
    data.put("segment_create_victim_size", size);
    Ok(lib_segment)
}

/// The victim's second stop, once continued: its side of what rank 0 does then.
fn one_sided_victim<'a>(
    ctx: &Context,
    lib: &gaspi::Library<'a>,
    data: &mut Data,
) -> Outcome<Segment<'a>> {
    let any = Notification {
        id: ANY_ID,
        value: ANY_VALUE,
    };
    let sent = ctx.notify(0, MAIN, any, GO_QUEUE);
    after(data, "notify", sent)?;
    let seg = lib.segment_create(GROUP_ALL, VICTIM_LIBRARY, LIBRARY_NOTIFICATIONS, LONG);
    let seg = after(data, "lib_segment_create", seg)?;
    let team = lib.team(&[0, ctx.rank()], LONG);
    after(data, "lib_team", team)?;
    let created = ctx.segment_create(CREATED, VICTIM_CREATED, LONG);
    after(data, "segment_create", created)?;
    for i in 1..=2 {
        let (from, bytes) = after(data, "passive_receive", ctx.passive_receive(LONG))?;
        data.put(
            &format!("passive_{i}"),
            format!("{from}:{}", String::from_utf8_lossy(&bytes)),
        );
    }
    after(data, "notify_wait", ctx.wait(GO_QUEUE, LONG))?;
    Ok(seg)
}

/// How many of the `READ_LEN` bytes at `at` of segment 0 differ from the victim's pattern at
/// `SOURCE + offset`.
fn wrong_bytes(ctx: &Context, at: u64, offset: u64, victim: Rank) -> Outcome<usize> {
    let mut pattern = vec![0u8; 2 * READ_LEN as usize];
    fill_pattern(seed(&[u64::from(victim)]), &mut pattern);
    let start = offset as usize;
    let want = &pattern[start..start + READ_LEN as usize];
    let mut got = vec![0u8; READ_LEN as usize];
    ctx.segment_read(MAIN, at, &mut got)
        .doing(|| "reading what was read from the victim")?;
    Ok(got.iter().zip(want).filter(|(g, w)| g != w).count())
}

/// The third stop, in place of the final `finalize`: rank 0's `finalize` with [`SHORT`]
/// times out, handing the context back; once the victim is continued, finalizing it again
/// completes, as it does on every other rank.
pub fn finalize_while_stopped(ctx: Context, data: &mut Data) -> Outcome<String> {
    let victim = ctx.size() - 1;
    let role = role(ctx.rank(), victim);
    open_phase(&ctx, role, victim, 3)?;
    if role != Role::Checker {
        if role == Role::Bystander {
            // The go notification to the victim, delivered before it stopped.
            after(data, "go_wait", ctx.wait(GO_QUEUE, LONG))?;
        }
        after(data, "finalize", ctx.finalize(LONG))?;
        return Ok(if role == Role::Victim {
            "stopped once more, then finalized".into()
        } else {
            "finalized".into()
        });
    }
    let stop = Stopped::wait_for(HANDSHAKE.read_pid(&ctx)?)?;
    let (result, _) = data.timed("finalize", || ctx.finalize(SHORT));
    let ctx = match result {
        Err(Error::FinalizeTimeout(ctx)) => ctx,
        other => {
            stop.resume()?;
            return Err(Failure(format!(
                "finalize(Millis(500)) with the victim stopped: expected FinalizeTimeout, got \
                 {}; recorded so far: {}",
                outcome(&other),
                data.line()
            )));
        }
    };
    data.put("state_vec_finalize", states(&ctx));
    stop.resume()?;
    after(data, "go_wait", ctx.wait(GO_QUEUE, LONG))?;
    after(data, "finalize", ctx.finalize(LONG))?;
    Ok(
        "finalize timed out while the victim was stopped and completed once it was continued"
            .into(),
    )
}
