//! `groups`: group membership, commit, barriers and their misuse errors.
//!
//! Every rank checks [`GROUP_ALL`]; the even ranks commit a group of the even ranks and run
//! barriers on it (one of them late, so the others time out and then continue), while the odd
//! ranks build the same group and are refused its commit. With three or more ranks, ranks 0, 1
//! and 2 then commit a group whose views differ (rank 0 leaves out rank 2): each must fail, with
//! `GroupMismatch` where the disagreement reached it and at worst a timeout, never a hang or a
//! success; once all three gave it up and deleted it, the same id made again with agreeing
//! views commits and works. Between the two, every rank runs rounds of a group of all ranks
//! created, committed, used and deleted, the last rank late to delete it each time.

use std::time::Duration;

use gaspi::{Context, Error, GroupId, ReduceOp, Timeout, GROUP_ALL};

use crate::check::{Doing, Failure, Outcome};

const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// How long a member of the disagreeing group waits for partners that may never come.
const MISMATCH_TIMEOUT: Timeout = Timeout::Millis(3_000);

pub fn run(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let mut checked = vec![all_ranks(ctx)?];
    checked.push(evens(ctx)?);
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the even group")?;
    checked.push(regroup(ctx)?);
    if n >= 3 {
        if me <= 2 {
            checked.push(mismatch(ctx)?);
        }
        ctx.barrier(TIMEOUT)
            .doing(|| "barrier after the disagreeing commit")?;
    }
    Ok(checked.join("; "))
}

fn fail(what: impl std::fmt::Display) -> Failure {
    Failure(what.to_string())
}

fn all_ranks(ctx: &Context) -> Outcome<String> {
    let n = ctx.size();
    let size = ctx
        .group_size(GROUP_ALL)
        .doing(|| "group_size(GROUP_ALL)")?;
    let ranks = ctx
        .group_ranks(GROUP_ALL)
        .doing(|| "group_ranks(GROUP_ALL)")?;
    if size != n || ranks != (0..n).collect::<Vec<_>>() {
        return Err(fail(format!("GROUP_ALL has {size} members {ranks:?}")));
    }
    for r in 0..n {
        if ctx.group_index(GROUP_ALL, r).doing(|| "group_index")? != Some(r) {
            return Err(fail(format!("GROUP_ALL index of rank {r} is wrong")));
        }
    }
    match ctx.group_delete(GROUP_ALL) {
        Err(Error::GroupCommitted { group: GROUP_ALL }) => {}
        other => return Err(fail(format!("deleting GROUP_ALL: {other:?}"))),
    }
    // GASPI has GROUP_ALL committed like any group; it is from the start, so at once.
    ctx.group_commit(GROUP_ALL, Timeout::Test)
        .doing(|| "committing GROUP_ALL")?;
    Ok(format!(
        "GROUP_ALL holds ranks 0..{n} and cannot be deleted"
    ))
}

/// The group of the even ranks, built the same way everywhere.
fn build_evens(ctx: &Context) -> Outcome<GroupId> {
    let g = ctx.group_create().doing(|| "group_create")?;
    for r in (0..ctx.size()).step_by(2) {
        ctx.group_add(g, r)
            .doing(|| format!("group_add({g}, {r})"))?;
    }
    match ctx.group_add(g, 0) {
        Err(Error::DuplicateMember { group, rank: 0 }) if group == g => {}
        other => return Err(fail(format!("adding rank 0 twice: {other:?}"))),
    }
    // The members added so far, ascending, before the commit.
    let evens: Vec<u32> = (0..ctx.size()).step_by(2).collect();
    let (size, ranks) = (
        ctx.group_size(g).doing(|| "group_size before commit")?,
        ctx.group_ranks(g).doing(|| "group_ranks before commit")?,
    );
    if size as usize != evens.len() || ranks != evens {
        return Err(fail(format!(
            "the group being built has {size} members {ranks:?}, want {evens:?}"
        )));
    }
    match ctx.group_barrier(g, Timeout::Test) {
        Err(Error::GroupNotCommitted { group }) if group == g => {}
        other => return Err(fail(format!("barrier before commit: {other:?}"))),
    }
    Ok(g)
}

fn evens(ctx: &Context) -> Outcome<String> {
    let (me, n) = (ctx.rank(), ctx.size());
    let g = build_evens(ctx)?;
    let members = n.div_ceil(2);
    if me % 2 == 1 {
        match ctx.group_commit(g, TIMEOUT) {
            Err(Error::NotInGroup { group, rank }) if group == g && rank == me => {}
            other => return Err(fail(format!("an odd rank committing the evens: {other:?}"))),
        }
        ctx.group_delete(g).doing(|| "deleting the evens")?;
        return Ok("refused the even ranks' group commit".into());
    }
    ctx.group_commit(g, TIMEOUT)
        .doing(|| "committing the evens")?;
    ctx.group_commit(g, Timeout::Test)
        .doing(|| "committing the committed evens again")?;
    match ctx.group_add(g, 1) {
        Err(Error::GroupCommitted { group }) if group == g => {}
        other => return Err(fail(format!("adding after commit: {other:?}"))),
    }
    let size = ctx.group_size(g).doing(|| "group_size")?;
    let index = ctx.group_index(g, me).doing(|| "group_index")?;
    let back = ctx.group_rank(g, me / 2).doing(|| "group_rank")?;
    match ctx.group_rank(g, members) {
        Err(Error::InvalidMemberIndex {
            group,
            index,
            members: m,
        }) if group == g && index == members && m == members => {}
        other => return Err(fail(format!("group_rank past the members: {other:?}"))),
    }
    if size != members || index != Some(me / 2) || back != me {
        return Err(fail(format!(
            "evens: size {size}, index {index:?}, rank at {} = {back}",
            me / 2
        )));
    }
    if ctx
        .group_index(g, 1)
        .doing(|| "group_index of an odd rank")?
        .is_some()
    {
        return Err(fail("rank 1 is indexed in the even group"));
    }
    // The last even rank is late; the others' short barrier times out and is then continued.
    let last = (n - 1) / 2 * 2;
    let mut timed_out = false;
    if me == last && members > 1 {
        std::thread::sleep(Duration::from_millis(300));
    } else if members > 1 {
        match ctx.group_barrier(g, Timeout::Millis(50)) {
            Err(Error::Timeout) => timed_out = true,
            other => return Err(fail(format!("barrier with a late member: {other:?}"))),
        }
    }
    ctx.group_barrier(g, TIMEOUT)
        .doing(|| "continuing the even barrier")?;
    for _ in 0..20 {
        ctx.group_barrier(g, TIMEOUT).doing(|| "even barrier")?;
    }
    ctx.group_delete(g).doing(|| "deleting the evens")?;
    Ok(format!(
        "committed the {members}-member even group, index {} (timed out and continued: \
         {timed_out}), 22 barriers",
        me / 2
    ))
}

/// Rounds of a group of every rank created, committed, used and deleted with no other
/// synchronisation, each round running between none and two barriers and, every other round,
/// an allreduce (so the runs of consecutive groups fall on either parity), the last rank late
/// to delete it every fifth round: the others meanwhile create and commit the next, whose
/// messages must survive the late rank's delete, and elsewhere a member still finishing the
/// last run of a group meets the others' commit of the next.
fn regroup(ctx: &Context) -> Outcome<String> {
    const ROUNDS: u32 = 30;
    let (me, n) = (ctx.rank(), ctx.size());
    for round in 0..ROUNDS {
        let g = ctx.group_create().doing(|| "group_create")?;
        for r in 0..n {
            ctx.group_add(g, r).doing(|| "group_add")?;
        }
        ctx.group_commit(g, TIMEOUT)
            .doing(|| format!("commit of the group of round {round}"))?;
        for _ in 0..round % 3 {
            ctx.group_barrier(g, TIMEOUT)
                .doing(|| format!("barrier of the group of round {round}"))?;
        }
        if round % 2 == 1 {
            let mut sum = [0u64];
            ctx.allreduce(
                g,
                &[u64::from(me) + u64::from(round)],
                &mut sum,
                ReduceOp::Sum,
                TIMEOUT,
            )
            .doing(|| format!("allreduce of the group of round {round}"))?;
            let want = u64::from(n) * u64::from(round) + u64::from(n) * u64::from(n - 1) / 2;
            if sum[0] != want {
                return Err(fail(format!(
                    "allreduce of the group of round {round}: {} instead of {want}",
                    sum[0]
                )));
            }
        }
        if me == n - 1 && n > 1 && round % 5 == 4 {
            std::thread::sleep(Duration::from_millis(200));
        }
        ctx.group_delete(g).doing(|| "group_delete")?;
    }
    Ok(format!(
        "{ROUNDS} groups of every rank created, committed, used and deleted, one rank late"
    ))
}

/// Ranks 0, 1 and 2 commit a group whose views differ; then, once every one of them gave it
/// up and deleted it, they make the same id again with the same views, which must commit and
/// work: nothing of the failed commit may linger in the id's slots.
fn mismatch(ctx: &Context) -> Outcome<String> {
    let me = ctx.rank();
    let g = ctx.group_create().doing(|| "group_create")?;
    let view: &[u32] = if me == 0 { &[0, 1] } else { &[0, 1, 2] };
    for &r in view {
        ctx.group_add(g, r).doing(|| "group_add")?;
    }
    let outcome = ctx.group_commit(g, MISMATCH_TIMEOUT);
    let failed = match outcome {
        Err(Error::GroupMismatch { group }) if group == g => {
            "a commit with disagreeing views failed with GroupMismatch"
        }
        // Rank 2 may wait for rank 0, which counts only two members, in vain.
        Err(Error::Timeout) if me == 2 => {
            "a commit with disagreeing views timed out waiting for a partner"
        }
        other => return Err(fail(format!("commit with disagreeing views: {other:?}"))),
    };
    let trio = ctx.group_create().doing(|| "group_create of the trio")?;
    for r in 0..3 {
        ctx.group_add(trio, r).doing(|| "group_add")?;
    }
    // Every member has given the failed commit up (the trio's commit waits for all three),
    // and what its partners sent for it has landed.
    ctx.group_commit(trio, TIMEOUT)
        .doing(|| "commit of the trio after the disagreeing commit")?;
    ctx.group_delete(g)
        .doing(|| "deleting the disagreeing group")?;
    ctx.group_barrier(trio, TIMEOUT)
        .doing(|| "barrier of the trio after the deletes")?;
    let again = ctx.group_create().doing(|| "group_create again")?;
    if again != g {
        return Err(fail(format!("the id {g} was not free again, got {again}")));
    }
    for r in 0..3 {
        ctx.group_add(again, r).doing(|| "group_add")?;
    }
    ctx.group_commit(again, TIMEOUT)
        .doing(|| "commit of the same id, views agreeing, after the failed one")?;
    ctx.group_barrier(again, TIMEOUT)
        .doing(|| "barrier of the group made again")?;
    let mut sum = [0u32];
    ctx.allreduce(again, &[me + 1], &mut sum, ReduceOp::Sum, TIMEOUT)
        .doing(|| "allreduce of the group made again")?;
    if sum[0] != 6 {
        return Err(fail(format!(
            "allreduce of the group made again: {}",
            sum[0]
        )));
    }
    for group in [again, trio] {
        ctx.group_delete(group).doing(|| "group_delete")?;
    }
    Ok(format!(
        "{failed}; the same id made again committed and worked"
    ))
}
