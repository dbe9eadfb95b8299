//! Checks of the GASNet collectives of [`Team`] as real jobs:
//! `gaspirun -n 4 --provider shm gasnet_check ops`. Every rank prints one line per check,
//! `data <scenario> rank R: key=value; ...`, with a digest of what it received and what each
//! misuse returned (`Variant { fields }`), which `coll/tests/gasnet.rs` recomputes from
//! `cases.rs` (a serial reference) and judges.
//!
//! Scenarios (the first argument):
//! * `ops`: every operation of `cases::OPS` × every size of `cases::SIZES` × the 18
//!   combinations of sync modes and addressing of `cases::flags()`, with a root drawn per
//!   case; blocking and non-blocking forms alternate (a handle synced at once or polled,
//!   every fourth case the blocking form), and so do sources and destinations in
//!   memory and in user segments (`cases::placement`, with the `IN_SEGMENT` flags). Line
//!   `data ops rank R: <op>=<count>/<digest>; <op>_algorithms=<names>; ...` per operation,
//!   the digest over the destinations of its cases in order, the names those of the
//!   algorithms its handles reported (`Handle::algorithm`), sorted, joined by `+`. Run it
//!   with `GASPI_COLL_<OP>` set to force algorithms.
//! * `large`: every operation at `cases::LARGE_SIZES` (up to 4 MiB per block) on a split of
//!   the team with lanes of `cases::LARGE_LANE`, so each runs as many pieces (exchangev as one
//!   run streaming its blocks in chunks); flags in turn from `cases::large_flags()`; then one
//!   more exchangev left in flight while a gather_all is synced (`streamed`), and a gather_all
//!   and an exchangev synced in opposite orders by even and odd members (`crossed`), and a
//!   gather_all whose handle the last member drops unsynced (`dropped`: the others' digest,
//!   `dropped` on the last). Lines as for `ops`: `data large rank R: <op>=<count>/<digest>`.
//! * `many`: 64 non-blocking gather_alls (of 64 B and 1 KiB alternating, two with
//!   `Flags::MY` and two with the eager `Flags::EAGER` in turn) initiated at once on one team
//!   (more than its lanes), then synced with `wait_sync_some` in an order drawn per rank, the last member
//!   first sleeping 50 ms so that the others run ahead into flow control:
//!   `data many rank R: synced; digest` (the digest in initiation order).
//! * `outstanding`: 65 535 non-blocking eager broadcasts of 8 bytes (2^16 − 1, what a team
//!   must hold in flight), the root rotating, all initiated before any is synced, then
//!   synced with `wait_sync_all`: `data outstanding rank R: synced; digest`.
//! * `some`: two non-blocking gather_alls, the last member initiating the second only once
//!   the others saw the first complete (a barrier of the runtime between): `try_sync_some`
//!   must report the first while the second cannot complete (`fast`, the indices it
//!   reported), and `wait_sync_some` the second after the barrier (`slow`); then, both
//!   synced, `try_sync_some` (`again_some`) and `try_sync_all` (`again_all`):
//!   `data some rank R: fast; slow; again_some; again_all; digest`.
//! * `crossed_teams`: the team and its split by parity (overlapping teams), 4 rounds of a
//!   broadcast on the team and a gather_all on the split, all with `Flags::ALL`, initiated
//!   alike; members `0, 1` (mod 4) sync the team's first, members `2, 3` the split's, so each
//!   waits in one team for a member that waits in the other: `data crossed_teams rank R:
//!   outcome; digest`.
//! * `crossed_eager`: three teams of one family (the team, its split by parity and its split
//!   in reverse order), 9 eager 1-byte gather_alls on each (more than the team's lanes),
//!   initiated alike, one team after the other in turn; each member syncs the teams in an
//!   order of its own (permutation `index mod 6` of the three), each team's handles in
//!   initiation order, so members wait in one team for members that wait in another while
//!   eager puts wait for counts of freed stages: `data crossed_eager rank R: outcome;
//!   digest` (the destinations in initiation order).
//! * `allsync_source` (2 ranks or more): rank 0 broadcasts a range of its segment with
//!   `IN_ALLSYNC` and `SRC_IN_SEGMENT`, non-blocking; after it initiated, rank 1 writes new
//!   bytes into that range (notified) and only then enters: every member must receive the
//!   new bytes, which `IN_ALLSYNC` reads only once everyone entered: `data allsync_source
//!   rank R: got`.
//! * `allsync_dest` (2 ranks or more): a gather_all with `OUT_ALLSYNC` into a range of each
//!   member's segment (`DST_IN_SEGMENT`), then a broadcast from rank 0, both non-blocking on
//!   the last member, which waits for the broadcast first; rank 0 syncs the gather_all and,
//!   before it starts the broadcast, reads the last member's range: `OUT_ALLSYNC` says it is
//!   written, though the last member has not synced that handle yet (`remote`, on rank 0;
//!   `got` everywhere).
//! * `threads`: 32 non-blocking gather_alls initiated by one thread, then synced by two
//!   threads at once, each with half the handles (every other one), so one sleeps while the
//!   other takes what it waits for: `data threads rank R: synced; digest`.
//! * `split`: the team split by member index parity, key descending (`sub`), and split again
//!   with the last member passing no colour (`rest`); then 8 rounds of a gather_all on `sub`
//!   (disjoint teams, one per parity) and a broadcast on the whole team, initiated
//!   non-blocking in an order that differs between even and odd members, and synced (each
//!   team's in reverse): `data split rank R: sub=<size>:<index>:<ranks>; rest=...; ids;
//!   digest`, `ids` the `Team::id` of the whole team, `sub` and `rest` (`none` without).
//! * `mixed`: on a split of the team with 3 lanes, 20 rounds of ten non-blocking collectives
//!   initiated alike and synced together with `wait_sync_all`: each operation once at 0
//!   bytes with sync modes that mix eager (`IN_NOSYNC`) and synchronising runs on the same
//!   lanes, then a 1-byte broadcast from a root that rotates. Eager runs run ahead of slow
//!   members; none may raise a signal into a block a member still waits in:
//!   `data mixed rank R: rounds; got`, `got` the broadcast bytes in order.
//! * `uneven`: on a split with 4 lanes of 4 KiB, rounds of a gatherv with `Flags::MY` whose
//!   counts differ so much (members with nothing, others with 8000 bytes) that it runs as
//!   pieces in some of which a member has nothing to send, then a gather_all of 8 bytes with
//!   `Flags::MY`. A member whose piece was empty finished it without hearing from anyone;
//!   its next signals must not land in a block a slower member still waits in (before the
//!   fix: `Mismatch`, timeouts and a wrong root buffer, 5 of 5 runs at 6 ranks):
//!   `data uneven rank R: rounds; gatherv; gather_all` (counts of rounds that delivered).
//! * `kill` (4 ranks, under `gaspirun --keep-going`): a gather_all everywhere, then the last
//!   member prints its pid and is killed (SIGKILL) once the others have a gather_all and a
//!   broadcast in flight and told it so (see `casualty`, segment 0); they initiate one more
//!   after the first failure, and a broadcast from rank 0 (which needs nothing of the dead
//!   member at the root); then the survivors build a team of their own and gather_all on it:
//!   `data kill rank R: first; second; third; later; rooted; survivors`, each an outcome, the
//!   last with the digest of what the survivors' gather_all delivered.
//! * `kill_alone` (4 ranks, under `gaspirun --keep-going`): a blocking allreduce everywhere,
//!   then the survivors tell the last member so and enter another, in which each waits alone
//!   in its engine when the last member is killed (SIGKILL):
//!   `data kill_alone rank R: first; alone; millis`, two outcomes and how long the second took.
//! * `stalled` (2 ranks): rank 0 broadcasts 16 MiB (eager) while rank 1, without a progress
//!   thread, makes no call for 2 s: through the fabric the root's puts cannot complete
//!   locally meanwhile, and its `wait_sync(200 ms)` must time out (as a timeout: call again)
//!   until they do: `data stalled rank R: timeouts; outcome; digest`.
//! * `errors`: bad flags, a root outside the team, a buffer of the wrong length, a second
//!   sync, segment ranges without or beyond their flags and segments, an exchangev whose
//!   counts for the member itself differ, counts adding up beyond any buffer, a destination
//!   range far beyond its segment, and members that
//!   disagree on the root (rank 0 names root 0, the others root 1) or the size (rank 0
//!   gathers 8 bytes, the others 16):
//!   `data errors rank R: <check>=<outcome>`.
//! * `teams` (2 ranks or more): teams made with capacities that differ on rank 0 (lane
//!   bytes: `bytes`; lanes: `lanes`; too small there: `small`), with no lanes anywhere
//!   (`no_lanes`), and a split whose capacity differs on rank 0 (`split_bytes`), each an
//!   outcome (`Variant { fields }`); a team and a split made alike afterwards gather the
//!   members' bytes (`agreed`, `split_again`: the gathered first bytes). Then a team and an
//!   alltoallv of a group of every rank, the group deleted and its id reused by a group of
//!   rank 0 alone: the team's split by one colour (`regroup`: its size and the gathered
//!   first bytes) and the alltoallv (`regroup_a2a`: the byte from the left neighbour) still
//!   run over every rank; a team of that id's third group (ranks 0 and 1), after rank 0
//!   alone made one of its second (`pair_ids`: `same` where both members' `Team::id` agree);
//!   a capacity the runtime refuses on rank 0 (1 lane of 2^50 bytes: `cap_refused`) and a
//!   team made after it (`after_refused`, the gathered first bytes); a broadcast for which
//!   rank 0 passes `SINGLE` addressing and the others `LOCAL` (`addressing`: `Mismatch`,
//!   `Timeout` or the error): `data teams rank R: <check>=<outcome>`.
//! * `drop_early my|eager` (3 ranks or more): a gather of 8 B blocks to rank 0 (`Flags::MY`
//!   or `Flags::EAGER`), which the last member enters a second late; the members in between
//!   drop their team as soon as their call returns, before the last one entered: `data
//!   drop_early rank R: outcome; got`, `got` the first byte of each block the root gathered
//!   (member `i`'s is `i + 1`).
//! * `counts my|eager`: an exchangev (`Flags::MY` or `Flags::EAGER`) whose member 1
//!   expects 16 bytes from member 0, which sends it 8, every other block 8 bytes at both
//!   ends: `data counts rank R: outcome=<outcome>; bytes=<the block from member 0>`, the
//!   outcome `Mismatch(rank)` naming whom the member disagreed with.

#![forbid(unsafe_code)]

mod cases;
#[path = "../support/casualty.rs"]
mod casualty;
#[path = "../support/data.rs"]
mod data;
#[path = "../support/handles.rs"]
mod handles;

use std::collections::BTreeSet;
use std::process::ExitCode;

use gaspi::{Config, Context, Intranode, SegmentId, Timeout, GROUP_ALL};
use gaspi_coll::{
    Alltoallv, Capacity, Collectives, Flags, Handle, Input, Output, SegmentRange, Team,
};

use casualty::Casualty;
use data::Digest;
use handles::sync_shuffled;

/// The timeout of every call that is not meant to time out.
const TIMEOUT: Timeout = Timeout::Millis(60_000);

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ops"] => in_job(ops),
        ["large"] => in_job(large),
        ["many"] => in_job(many),
        ["outstanding"] => in_job(outstanding),
        ["threads"] => in_job(threads),
        ["some"] => in_job(some),
        ["mixed"] => in_job(mixed),
        ["uneven"] => in_job(uneven),
        ["crossed_teams"] => in_job(crossed_teams),
        ["crossed_eager"] => in_job(crossed_eager),
        ["overlap"] => in_job(overlap),
        ["allsync_source"] => in_job(allsync_source),
        ["allsync_dest"] => in_job(allsync_dest),
        ["split"] => in_job(split),
        ["errors"] => in_job(errors),
        ["counts", mode @ ("my" | "eager")] => in_job(|_, team| counts(team, mode)),
        ["kill"] => kill(),
        ["kill_alone"] => kill_alone(),
        ["stalled"] => stalled(),
        ["teams"] => teams(),
        ["drop_early", mode @ ("my" | "eager")] => drop_early(mode),
        _ => Err(
            "usage: gasnet_check ops|large|many|outstanding|threads|some|mixed|uneven|crossed_teams|crossed_eager|overlap|allsync_source|allsync_dest|split|errors|counts my|eager|drop_early my|eager|kill|kill_alone|stalled|teams".into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
            // the job) leaves no half message.
            let line = format!("gasnet_check: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

fn in_job(scenario: impl FnOnce(&Context, &Team<'_>) -> Outcome) -> Outcome {
    let ctx = Context::init()?;
    let bytes = SEG_BYTES_PER_RANK * u64::from(ctx.size());
    ctx.segment_create(SRC_SEG, bytes, TIMEOUT)?;
    ctx.segment_create(DST_SEG, bytes, TIMEOUT)?;
    {
        let coll = Collectives::new(&ctx)?;
        let capacity = Capacity {
            lanes: 4,
            lane_bytes: 2 << 20,
        };
        let team = Team::with_capacity(&coll, GROUP_ALL, capacity, TIMEOUT)?;
        scenario(&ctx, &team)?;
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// The user segments that hold the buffers of the cases that keep theirs in segments.
const SRC_SEG: SegmentId = 0;
const DST_SEG: SegmentId = 1;

/// Bytes of [`SRC_SEG`] and [`DST_SEG`] per rank of the job: the largest buffer of a case
/// whose buffers may be in segments (`cases::placement`).
const SEG_BYTES_PER_RANK: u64 = 400_000;

/// Runs `op` of case `case` and returns this member's destination, and the algorithm its
/// handle named (none for a blocking call); its source and destination are in memory or in
/// segments as `cases::placement` says for the case (in memory only unless `in_segments`).
fn run(
    team: &Team<'_>,
    op: &str,
    case: u64,
    size: u64,
    flags: Flags,
    in_segments: bool,
) -> Outcome<(Vec<u8>, Option<&'static str>)> {
    let (n, me) = (team.size(), team.index());
    let ctx = team.context();
    let root = team.ranks()[cases::root(case, n) as usize];
    let src = cases::src(op, case, size, n, me);
    let mut dst = vec![0xa5; cases::want(op, case, size, n, me).len()];
    let (src_in, dst_in) = if in_segments {
        cases::placement(case)
    } else {
        (false, false)
    };
    let mut flags = flags;
    let input = if src_in {
        flags |= Flags::SRC_IN_SEGMENT;
        ctx.segment_write(SRC_SEG, 0, &src)?;
        Input::from(SegmentRange::new(SRC_SEG, 0, src.len() as u64))
    } else {
        Input::from(&src)
    };
    let len = dst.len() as u64;
    let output = if dst_in {
        flags |= Flags::DST_IN_SEGMENT;
        ctx.segment_write(DST_SEG, 0, &dst)?;
        Output::from(SegmentRange::new(DST_SEG, 0, len))
    } else {
        Output::from(&mut dst)
    };
    let counts: Vec<u64> = (0..n).map(|i| cases::count(size, i)).collect();
    let sends: Vec<u64> = (0..n).map(|j| cases::xcount(size, me, j)).collect();
    let recvs: Vec<u64> = (0..n).map(|i| cases::xcount(size, i, me)).collect();
    // Every fourth case by the blocking form, the others by a handle synced at once or
    // polled.
    let mut algorithm = None;
    if case % 4 == 1 {
        let t = TIMEOUT;
        match op {
            "broadcast" => team.broadcast(output, root, input, flags, t)?,
            "scatter" => team.scatter(output, root, input, flags, t)?,
            "gather" => team.gather(root, output, input, flags, t)?,
            "gather_all" => team.gather_all(output, input, flags, t)?,
            "exchange" => team.exchange(output, input, flags, t)?,
            "scatterv" => team.scatterv(output, root, input, &counts, flags, t)?,
            "gatherv" => team.gatherv(root, output, input, &counts, flags, t)?,
            "gather_allv" => team.gather_allv(output, input, &counts, flags, t)?,
            "exchangev" => team.exchangev(output, &recvs, input, &sends, flags, t)?,
            _ => return Err(format!("no operation {op}").into()),
        }
    } else {
        let mut handle = match op {
            "broadcast" => team.broadcast_nb(output, root, input, flags)?,
            "scatter" => team.scatter_nb(output, root, input, flags)?,
            "gather" => team.gather_nb(root, output, input, flags)?,
            "gather_all" => team.gather_all_nb(output, input, flags)?,
            "exchange" => team.exchange_nb(output, input, flags)?,
            "scatterv" => team.scatterv_nb(output, root, input, &counts, flags)?,
            "gatherv" => team.gatherv_nb(root, output, input, &counts, flags)?,
            "gather_allv" => team.gather_allv_nb(output, input, &counts, flags)?,
            "exchangev" => team.exchangev_nb(output, &recvs, input, &sends, flags)?,
            _ => return Err(format!("no operation {op}").into()),
        };
        algorithm = Some(handle.algorithm());
        if case.is_multiple_of(2) {
            handle.wait_sync(TIMEOUT)?;
        } else {
            while !handle.try_sync()? {
                std::thread::yield_now();
            }
        }
    }
    if dst_in {
        ctx.segment_read(DST_SEG, 0, &mut dst)?;
    }
    Ok((dst, algorithm))
}

fn ops(ctx: &Context, team: &Team<'_>) -> Outcome {
    let mut case = 0;
    let mut line = Vec::new();
    for op in cases::OPS {
        let mut digest = Digest::default();
        let mut count = 0;
        let mut algorithms = BTreeSet::new();
        for size in cases::SIZES {
            for flags in cases::flags() {
                case += 1;
                let (dst, algorithm) = run(team, op, case, size, flags, true)
                    .map_err(|e| format!("{op} case {case} ({size} B, {flags:?}): {e}"))?;
                digest.add(&dst);
                algorithms.extend(algorithm);
                count += 1;
            }
        }
        line.push(format!("{op}={count}/{}", digest.hex()));
        let algorithms: Vec<&str> = algorithms.into_iter().collect();
        line.push(format!("{op}_algorithms={}", algorithms.join("+")));
    }
    println!("data ops rank {}: {}", ctx.rank(), line.join("; "));
    Ok(())
}

fn large(ctx: &Context, team: &Team<'_>) -> Outcome {
    let capacity = Capacity {
        lanes: 2,
        lane_bytes: cases::LARGE_LANE,
    };
    let small = team
        .split_with_capacity(Some(0), team.index(), capacity, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let mut case = cases::LARGE_FIRST;
    let mut line = Vec::new();
    for op in cases::OPS {
        let mut digest = Digest::default();
        let mut count = 0;
        for size in cases::LARGE_SIZES {
            let flags = cases::large_flags()[(case % 3) as usize];
            let in_segments = size * u64::from(team.size()) <= SEG_BYTES_PER_RANK;
            let (dst, _) = run(&small, op, case, size, flags, in_segments)
                .map_err(|e| format!("{op} case {case} ({size} B, {flags:?}): {e}"))?;
            digest.add(&dst);
            count += 1;
            case += 1;
        }
        line.push(format!("{op}={count}/{}", digest.hex()));
    }
    line.push(format!("streamed={}", streamed(&small, case)?));
    line.push(format!("crossed={}", crossed(&small, case + 1)?));
    line.push(format!("dropped={}", dropped(&small, case + 3)?));
    println!("data large rank {}: {}", ctx.rank(), line.join("; "));
    Ok(())
}

/// Case `case`, a gather_all of `cases::LARGE_SIZES[0]` on `team` run as many pieces, whose
/// last member drops its handle at once and then syncs a small gather_all: the dropped
/// collective must still go on for the others, who sync theirs. Returns the digest of the
/// destination, or `dropped` on the last member.
fn dropped(team: &Team<'_>, case: u64) -> Outcome<String> {
    let (n, me) = (team.size(), team.index());
    let size = cases::LARGE_SIZES[0];
    let src = cases::src("gather_all", case, size, n, me);
    let mut gathered = vec![0xa5; cases::want("gather_all", case, size, n, me).len()];
    let mut handle = team.gather_all_nb(&mut gathered, &src, Flags::MY)?;
    let last = me + 1 == n;
    if last {
        drop(handle);
    } else {
        handle.wait_sync(TIMEOUT)?;
        drop(handle);
    }
    let mut all = vec![0; 8 * n as usize];
    team.gather_all(&mut all, &[1; 8], Flags::MY, TIMEOUT)?;
    if last {
        return Ok("dropped".into());
    }
    let mut digest = Digest::default();
    digest.add(&gathered);
    Ok(digest.hex())
}

/// Cases `case` (a gather_all) and `case + 1` (an exchangev) of `cases::LARGE_SIZES[0]` on
/// `team`, both run as many steps that read the source after their initiation returned (the
/// gather_all's pieces, the exchangev's chunks), synced in opposite orders by members of
/// either parity: each member's sync must move on without the other's. Returns the digest
/// of both destinations.
fn crossed(team: &Team<'_>, case: u64) -> Outcome<String> {
    let (n, me) = (team.size(), team.index());
    let size = cases::LARGE_SIZES[0];
    let gathered_src = cases::src("gather_all", case, size, n, me);
    let mut gathered = vec![0xa5; cases::want("gather_all", case, size, n, me).len()];
    let exchanged_src = cases::src("exchangev", case + 1, size, n, me);
    let mut exchanged = vec![0xa5; cases::want("exchangev", case + 1, size, n, me).len()];
    let sends: Vec<u64> = (0..n).map(|j| cases::xcount(size, me, j)).collect();
    let recvs: Vec<u64> = (0..n).map(|i| cases::xcount(size, i, me)).collect();
    let mut first = team.gather_all_nb(&mut gathered, &gathered_src, Flags::MY)?;
    let mut second =
        team.exchangev_nb(&mut exchanged, &recvs, &exchanged_src, &sends, Flags::MY)?;
    if me.is_multiple_of(2) {
        first.wait_sync(TIMEOUT)?;
        second.wait_sync(TIMEOUT)?;
    } else {
        second.wait_sync(TIMEOUT)?;
        first.wait_sync(TIMEOUT)?;
    }
    drop((first, second));
    let mut digest = Digest::default();
    digest.add(&gathered);
    digest.add(&exchanged);
    Ok(digest.hex())
}

/// Case `case` of an exchangev of `cases::LARGE_SIZES[0]` on `team`, left in flight while a
/// gather_all is synced: the chunks that land meanwhile must be kept (their slot is reused by
/// the next ones) until its own sync. Returns the digest of what it delivered.
fn streamed(team: &Team<'_>, case: u64) -> Outcome<String> {
    let (n, me) = (team.size(), team.index());
    let size = cases::LARGE_SIZES[0];
    let src = cases::src("exchangev", case, size, n, me);
    let mut dst = vec![0xa5; cases::want("exchangev", case, size, n, me).len()];
    let sends: Vec<u64> = (0..n).map(|j| cases::xcount(size, me, j)).collect();
    let recvs: Vec<u64> = (0..n).map(|i| cases::xcount(size, i, me)).collect();
    let mut handle = team.exchangev_nb(&mut dst, &recvs, &src, &sends, Flags::MY)?;
    let mut all = vec![0; 8 * n as usize];
    team.gather_all(&mut all, &[1; 8], Flags::MY, TIMEOUT)?;
    handle.wait_sync(TIMEOUT)?;
    drop(handle);
    let mut digest = Digest::default();
    digest.add(&dst);
    Ok(digest.hex())
}

fn many(ctx: &Context, team: &Team<'_>) -> Outcome {
    const COUNT: usize = 64;
    let n = team.size() as usize;
    let len = |i: usize| if i.is_multiple_of(2) { 64 } else { 1024 };
    let srcs: Vec<Vec<u8>> = (0..COUNT)
        .map(|i| cases::block(1000 + i as u64, team.index(), 0, len(i) as u64))
        .collect();
    let mut dsts: Vec<Vec<u8>> = (0..COUNT).map(|i| vec![0; len(i) * n]).collect();
    let mut handles: Vec<Handle<'_, '_>> = Vec::new();
    for (i, (dst, src)) in dsts.iter_mut().zip(&srcs).enumerate() {
        let flags = if i % 4 < 2 { Flags::MY } else { Flags::EAGER };
        handles.push(team.gather_all_nb(dst, src, flags)?);
    }
    if team.index() as usize == n - 1 {
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    // Sync in an order of this rank's own.
    let synced = sync_shuffled(handles, u64::from(ctx.rank()) + 7, TIMEOUT)?;
    let digest: Digest = dsts.iter().collect();
    println!(
        "data many rank {}: synced={synced}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

fn outstanding(ctx: &Context, team: &Team<'_>) -> Outcome {
    let n = team.size() as usize;
    let me = team.index();
    let srcs: Vec<Vec<u8>> = (0..cases::OUTSTANDING)
        .map(|i| cases::block(3_000_000 + i, me, 0, 8))
        .collect();
    let mut dsts = vec![[0u8; 8]; cases::OUTSTANDING as usize];
    let mut handles = Vec::with_capacity(dsts.len());
    for (i, dst) in dsts.iter_mut().enumerate() {
        let root = team.ranks()[i % n];
        handles.push(team.broadcast_nb(dst, root, &srcs[i], Flags::EAGER)?);
    }
    gaspi_coll::wait_sync_all(&mut handles, TIMEOUT)?;
    let synced = handles.len();
    drop(handles);
    let digest: Digest = dsts.iter().collect();
    println!(
        "data outstanding rank {}: synced={synced}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

fn some(ctx: &Context, team: &Team<'_>) -> Outcome {
    let n = team.size() as usize;
    let me = team.index();
    let last = me as usize + 1 == n;
    let srcs = [cases::block(4000, me, 0, 64), cases::block(4001, me, 0, 64)];
    let mut dsts = [vec![0u8; 64 * n], vec![0u8; 64 * n]];
    let [first_dst, second_dst] = &mut dsts;
    let (mut fast, mut slow) = (String::from("-"), String::from("-"));
    let (mut again_some, mut again_all) = (String::from("-"), String::from("-"));
    if last {
        team.gather_all(&mut first_dst[..], &srcs[0], Flags::MY, TIMEOUT)?;
        ctx.barrier(TIMEOUT)?;
        team.gather_all(&mut second_dst[..], &srcs[1], Flags::MY, TIMEOUT)?;
    } else {
        let mut handles = vec![
            team.gather_all_nb(&mut first_dst[..], &srcs[0], Flags::MY)?,
            team.gather_all_nb(&mut second_dst[..], &srcs[1], Flags::MY)?,
        ];
        // The second cannot complete before the barrier: polled for up to 20 s, the first
        // must be reported alone.
        let polls = std::time::Instant::now();
        let reported = loop {
            let done = gaspi_coll::try_sync_some(&mut handles)?;
            if !done.is_empty() || polls.elapsed() > std::time::Duration::from_secs(20) {
                break done;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        };
        fast = indices(reported)?;
        ctx.barrier(TIMEOUT)?;
        slow = indices(gaspi_coll::wait_sync_some(&mut handles, TIMEOUT)?)?;
        // Both synced: nothing can complete, and all are.
        again_some = match gaspi_coll::try_sync_some(&mut handles) {
            Ok(done) => format!("Ok({})", indices(done)?),
            Err(e) => format!("{e:?}"),
        };
        again_all = format!("{:?}", gaspi_coll::try_sync_all(&mut handles)?);
        gaspi_coll::wait_sync_all(&mut handles, Timeout::Test)?;
    }
    let digest: Digest = dsts.iter().collect();
    println!(
        "data some rank {}: fast={fast}; slow={slow}; again_some={again_some}; \
         again_all={again_all}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

/// Rounds of the `mixed` scenario.
const MIXED_ROUNDS: u8 = 20;

/// A split of `team` with all its members and `lanes` lanes of 4 KiB: small stages, so that
/// collectives run close behind each other on few lanes.
fn small_lanes<'c>(team: &Team<'c>, lanes: u32) -> Outcome<Team<'c>> {
    let capacity = Capacity {
        lanes,
        lane_bytes: 4096,
    };
    Ok(team
        .split_with_capacity(Some(0), team.index(), capacity, TIMEOUT)?
        .ok_or("every member passed a colour")?)
}

/// Rounds of the `uneven` scenario.
const UNEVEN_ROUNDS: u32 = 5;

/// The `uneven` scenario (see the module documentation).
fn uneven(_: &Context, team: &Team<'_>) -> Outcome {
    let team = small_lanes(team, 4)?;
    let (n, me) = (team.size() as usize, team.index() as usize);
    // Member 0, the root, sends nothing, nor do the members past the first three after it.
    let counts: Vec<u64> = (0..n).map(|m| [0, 7000, 2000, 8000, 0, 0][m % 6]).collect();
    let byte = |round: u32, m: usize, k: u64| (round as u64 * 7 + m as u64 * 31 + k) as u8;
    let (mut gathered, mut all) = (0, 0);
    for round in 0..UNEVEN_ROUNDS {
        let src: Vec<u8> = (0..counts[me]).map(|k| byte(round, me, k)).collect();
        let total: u64 = counts.iter().sum();
        let mut dst = vec![0u8; if me == 0 { total as usize } else { 0 }];
        team.gatherv(
            team.ranks()[0],
            &mut dst[..],
            &src[..],
            &counts,
            Flags::MY,
            TIMEOUT,
        )?;
        let want: Vec<u8> = (0..n)
            .filter(|_| me == 0)
            .flat_map(|m| (0..counts[m]).map(move |k| byte(round, m, k)))
            .collect();
        gathered += u32::from(dst == want);
        let mut every = vec![0u8; 8 * n];
        team.gather_all(
            &mut every[..],
            &[me as u8 ^ round as u8; 8][..],
            Flags::MY,
            TIMEOUT,
        )?;
        all += u32::from((0..n).all(|m| every[8 * m..8 * m + 8] == [m as u8 ^ round as u8; 8]));
    }
    println!(
        "data uneven rank {}: rounds={UNEVEN_ROUNDS}; gatherv={gathered}; gather_all={all}",
        team.context().rank()
    );
    Ok(())
}

/// The `mixed` scenario (see the module documentation).
fn mixed(ctx: &Context, team: &Team<'_>) -> Outcome {
    let team = small_lanes(team, 3)?;
    let n = team.size();
    let ranks = team.ranks().to_vec();
    let root = |i: u32| ranks[(i % n) as usize];
    let zeros = vec![0u64; n as usize];
    let none: [u8; 0] = [];
    let mut got = Vec::new();
    for round in 0..MIXED_ROUNDS {
        let r = u32::from(round);
        let mut empty: [[u8; 0]; 9] = [[]; 9];
        let [d0, d1, d2, d3, d4, d5, d6, d7, d8] = &mut empty;
        let byte = [round];
        let mut received = [0u8; 1];
        {
            use Flags as F;
            let mut handles = vec![
                team.broadcast_nb(
                    &mut d0[..],
                    root(r + 2),
                    &none[..],
                    F::IN_NOSYNC | F::OUT_NOSYNC | F::SINGLE,
                )?,
                team.scatter_nb(
                    &mut d1[..],
                    root(r),
                    &none[..],
                    F::IN_NOSYNC | F::OUT_ALLSYNC | F::LOCAL,
                )?,
                team.gather_nb(
                    root(r + 1),
                    &mut d2[..],
                    &none[..],
                    F::IN_MYSYNC | F::OUT_ALLSYNC | F::SINGLE,
                )?,
                team.gather_all_nb(
                    &mut d3[..],
                    &none[..],
                    F::IN_ALLSYNC | F::OUT_MYSYNC | F::LOCAL,
                )?,
                team.exchange_nb(
                    &mut d4[..],
                    &none[..],
                    F::IN_NOSYNC | F::OUT_MYSYNC | F::SINGLE,
                )?,
                team.scatterv_nb(
                    &mut d5[..],
                    root(r + 1),
                    &none[..],
                    &zeros,
                    F::IN_MYSYNC | F::OUT_NOSYNC | F::LOCAL,
                )?,
                team.gatherv_nb(
                    root(r),
                    &mut d6[..],
                    &none[..],
                    &zeros,
                    F::IN_ALLSYNC | F::OUT_NOSYNC | F::SINGLE,
                )?,
                team.gather_allv_nb(
                    &mut d7[..],
                    &none[..],
                    &zeros,
                    F::IN_ALLSYNC | F::OUT_ALLSYNC | F::LOCAL,
                )?,
                team.exchangev_nb(
                    &mut d8[..],
                    &zeros,
                    &none[..],
                    &zeros,
                    F::IN_NOSYNC | F::OUT_ALLSYNC | F::SINGLE,
                )?,
                team.broadcast_nb(&mut received[..], root(r), &byte[..], F::MY)?,
            ];
            gaspi_coll::wait_sync_all(&mut handles, TIMEOUT)
                .map_err(|e| format!("round {round}: {e}"))?;
        }
        got.push(received[0].to_string());
    }
    println!(
        "data mixed rank {}: rounds={MIXED_ROUNDS}; got={}",
        ctx.rank(),
        got.join("/")
    );
    Ok(())
}

/// The indices a set sync reported, `/`-separated, or the first failure among them.
fn indices(done: Vec<(usize, gaspi_coll::Result<()>)>) -> Outcome<String> {
    let mut shown = Vec::new();
    for (i, outcome) in done {
        outcome?;
        shown.push(i.to_string());
    }
    Ok(if shown.is_empty() {
        "none".into()
    } else {
        shown.join("/")
    })
}

fn crossed_teams(ctx: &Context, team: &Team<'_>) -> Outcome {
    const ROUNDS: u64 = 4;
    // Far more than the scenario needs: a member left waiting for another team's progress
    // shows as a timeout instead of a hang.
    let short = Timeout::Millis(10_000);
    let (n, me) = (team.size(), team.index());
    let half = team
        .split(Some(me % 2), me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let k = half.size() as usize;
    let all_src: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|i| cases::block(5000 + i, me, 0, 128))
        .collect();
    let half_src: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|i| cases::block(6000 + i, half.index(), 0, 64))
        .collect();
    let mut all_dst = vec![vec![0u8; 128]; ROUNDS as usize];
    let mut half_dst = vec![vec![0u8; 64 * k]; ROUNDS as usize];
    let mut all_handles = Vec::new();
    let mut half_handles = Vec::new();
    for (i, (a, h)) in all_dst.iter_mut().zip(half_dst.iter_mut()).enumerate() {
        let root = team.ranks()[i % n as usize];
        all_handles.push(team.broadcast_nb(a, root, &all_src[i], Flags::ALL)?);
        half_handles.push(half.gather_all_nb(h, &half_src[i], Flags::ALL)?);
    }
    let mut sets = [all_handles, half_handles];
    if (me / 2) % 2 == 1 {
        sets.reverse();
    }
    let mut outcome = "Ok".to_string();
    for set in &mut sets {
        if let Err(e) = gaspi_coll::wait_sync_all(set, short) {
            outcome = format!("{e}");
            break;
        }
    }
    drop(sets);
    let mut digest = Digest::default();
    for dst in all_dst.iter().chain(&half_dst) {
        digest.add(dst);
    }
    println!(
        "data crossed_teams rank {}: outcome={outcome}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

fn crossed_eager(ctx: &Context, team: &Team<'_>) -> Outcome {
    const PER_TEAM: u64 = 9;
    /// Every order of the three teams.
    const ORDERS: [[usize; 3]; 6] = [
        [0, 1, 2],
        [0, 2, 1],
        [1, 0, 2],
        [1, 2, 0],
        [2, 0, 1],
        [2, 1, 0],
    ];
    // Far more than the scenario needs: a member left waiting for another team's progress
    // shows as a timeout instead of a hang.
    let short = Timeout::Millis(10_000);
    let (n, me) = (team.size(), team.index());
    let half = team
        .split(Some(me % 2), me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let reversed = team
        .split(Some(0), n - me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let teams = [team, &half, &reversed];
    let cases: Vec<(usize, u64)> = (0..3 * PER_TEAM)
        .map(|i| ((i % 3) as usize, 7000 + i))
        .collect();
    let srcs: Vec<Vec<u8>> = cases
        .iter()
        .map(|&(t, case)| cases::block(case, teams[t].index(), 0, 1))
        .collect();
    let mut dsts: Vec<Vec<u8>> = cases
        .iter()
        .map(|&(t, _)| vec![0u8; teams[t].size() as usize])
        .collect();
    let mut handles: [Vec<Handle<'_, '_>>; 3] = Default::default();
    for ((&(t, _), src), dst) in cases.iter().zip(&srcs).zip(dsts.iter_mut()) {
        handles[t].push(teams[t].gather_all_nb(dst, src, Flags::EAGER)?);
    }
    let mut outcome = "Ok".to_string();
    'sync: for &t in &ORDERS[me as usize % ORDERS.len()] {
        for handle in &mut handles[t] {
            if let Err(e) = handle.wait_sync(short) {
                outcome = format!("{e}");
                break 'sync;
            }
        }
    }
    drop(handles);
    let digest: Digest = dsts.iter().collect();
    println!(
        "data crossed_eager rank {}: outcome={outcome}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

/// `overlap`: collectives whose source and destination are overlapping ranges of one
/// segment, in each sync mode, blocking and not (see [`cases::overlap_cases`]): an in-place
/// exchange, a gather_all whose source is its destination's first block, broadcasts shifted
/// forward and backward by a few bytes, and an in-place scatter and gather (the spec's
/// identical blocks). Prints a digest of every result as read back from the segment (see
/// [`cases::overlap_results`]).
fn overlap(ctx: &Context, team: &Team<'_>) -> Outcome {
    let (n, me) = (team.size(), team.index());
    let (block, shift) = (cases::OVERLAP_BLOCK, cases::OVERLAP_SHIFT);
    let all = block * u64::from(n);
    let range = |at, len| SegmentRange::new(SRC_SEG, at, len);
    let (whole, own) = (range(0, all), range(u64::from(me) * block, block));
    let to_each = |case| -> Vec<u8> {
        (0..n)
            .flat_map(|to| cases::block(case, me, to, block))
            .collect()
    };
    let read = |r: SegmentRange| -> Outcome<Vec<u8>> {
        let mut bytes = vec![0; r.len as usize];
        ctx.segment_read(r.segment, r.offset, &mut bytes)?;
        Ok(bytes)
    };
    let mut digest = Digest::default();
    for (case, flags, blocking) in cases::overlap_cases() {
        let flags = flags | Flags::SRC_IN_SEGMENT | Flags::DST_IN_SEGMENT;
        let root = cases::root(case, n);
        let synced = |handle: gaspi_coll::Result<Handle<'_, '_>>| -> Outcome {
            handle?.wait_sync(TIMEOUT)?;
            Ok(())
        };

        ctx.segment_write(SRC_SEG, 0, &to_each(case))?;
        match blocking {
            true => team.exchange(whole, whole, flags, TIMEOUT)?,
            false => synced(team.exchange_nb(whole, whole, flags))?,
        }
        digest.add(&read(whole)?);

        ctx.segment_write(SRC_SEG, 0, &cases::block(case + 1, me, 0, block))?;
        let first = range(0, block);
        match blocking {
            true => team.gather_all(whole, first, flags, TIMEOUT)?,
            false => synced(team.gather_all_nb(whole, first, flags))?,
        }
        digest.add(&read(whole)?);

        for (k, (src, dst)) in [(0, shift), (shift, 0)].into_iter().enumerate() {
            ctx.segment_write(SRC_SEG, 0, &cases::block(case + 2 + k as u64, me, 0, all))?;
            let (src, dst) = (range(src, all - shift), range(dst, all - shift));
            match blocking {
                true => team.broadcast(dst, root, src, flags, TIMEOUT)?,
                false => synced(team.broadcast_nb(dst, root, src, flags))?,
            }
            digest.add(&read(dst)?);
        }

        ctx.segment_write(SRC_SEG, 0, &to_each(case + 4))?;
        match blocking {
            true => team.scatter(own, root, whole, flags, TIMEOUT)?,
            false => synced(team.scatter_nb(own, root, whole, flags))?,
        }
        digest.add(&read(own)?);

        ctx.segment_write(
            SRC_SEG,
            own.offset,
            &cases::block(case + 5, me, root, block),
        )?;
        match blocking {
            true => team.gather(root, whole, own, flags, TIMEOUT)?,
            false => synced(team.gather_nb(root, whole, own, flags))?,
        }
        digest.add(&read(if me == root { whole } else { own })?);
    }
    println!(
        "data overlap rank {}: outcome=Ok; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

fn allsync_source(ctx: &Context, team: &Team<'_>) -> Outcome {
    const BYTES: u64 = 64;
    /// Where rank 1's write lands in rank 0's segment, and its notification there.
    const AT: u64 = 4096;
    const WRITTEN: gaspi::NotificationId = 5;
    let me = ctx.rank();
    // Rank 0 waits for rank 1's write: alone, it would wait until its timeout.
    if ctx.size() < 2 {
        return Err("allsync_source needs 2 ranks or more".into());
    }
    let (old, new) = ([0xa5u8; BYTES as usize], [0x5au8; BYTES as usize]);
    if me == 0 {
        ctx.segment_write(SRC_SEG, AT, &old)?;
    }
    let mut dst = [0u8; BYTES as usize];
    let flags = Flags::ALL | Flags::SRC_IN_SEGMENT;
    match me {
        0 => {
            let range = SegmentRange::new(SRC_SEG, AT, BYTES);
            let mut handle = team.broadcast_nb(&mut dst[..], 0, range, flags)?;
            ctx.barrier(TIMEOUT)?;
            // Rank 1's bytes are here (the notification comes after its data) before it
            // enters the broadcast.
            let id = ctx.notify_waitsome(SRC_SEG, WRITTEN, 1, TIMEOUT)?;
            ctx.notify_reset(SRC_SEG, id)?;
            handle.wait_sync(TIMEOUT)?;
        }
        1 => {
            ctx.barrier(TIMEOUT)?;
            ctx.segment_write(SRC_SEG, AT, &new)?;
            let n = gaspi::Notification {
                id: WRITTEN,
                value: 1,
            };
            let (local, remote) = (gaspi::local(SRC_SEG, AT), gaspi::remote(0, SRC_SEG, AT));
            ctx.write_notify(local, remote, BYTES, n, 0)?;
            ctx.wait(0, TIMEOUT)?;
            team.broadcast(&mut dst[..], 0, &[][..], flags, TIMEOUT)?;
        }
        _ => {
            ctx.barrier(TIMEOUT)?;
            team.broadcast(&mut dst[..], 0, &[][..], flags, TIMEOUT)?;
        }
    }
    let got = match dst {
        d if d == new => "new",
        d if d == old => "old",
        _ => "other",
    };
    println!("data allsync_source rank {me}: got={got}");
    Ok(())
}

fn allsync_dest(ctx: &Context, team: &Team<'_>) -> Outcome {
    const BYTES: u64 = 32;
    /// Where each member's gather_all lands in its destination segment; rank 0 reads the
    /// last member's into its own segment at `AT + HERE`.
    const AT: u64 = 8192;
    const HERE: u64 = 65536;
    let (n, me) = (team.size(), team.index());
    // Rank 0 reads the last member's range and then roots a broadcast the last member only
    // receives: they must be two.
    if n < 2 {
        return Err("allsync_dest needs 2 ranks or more".into());
    }
    let last = me + 1 == n;
    let src = cases::block(7000, me, 0, BYTES);
    let total = BYTES * u64::from(n);
    let want: Vec<u8> = (0..n)
        .flat_map(|m| cases::block(7000, m, 0, BYTES))
        .collect();
    let range = SegmentRange::new(DST_SEG, AT, total);
    let flags = Flags::ALL | Flags::DST_IN_SEGMENT;
    let note = cases::block(7001, 0, 0, 16);
    let mut heard = [0u8; 16];
    let mut remote = String::from("-");
    if last {
        let mut gather = team.gather_all_nb(range, &src, flags)?;
        let mut told = team.broadcast_nb(&mut heard[..], 0, &[][..], Flags::MY)?;
        // Moves the gather_all on too, without syncing it.
        told.wait_sync(TIMEOUT)?;
        drop(told);
        gather.wait_sync(TIMEOUT)?;
    } else {
        team.gather_all(range, &src, flags, TIMEOUT)?;
        if me == 0 {
            let (local, from) = (
                gaspi::local(DST_SEG, AT + HERE),
                gaspi::remote(n - 1, DST_SEG, AT),
            );
            ctx.read(local, from, total, 0)?;
            ctx.wait(0, TIMEOUT)?;
            let mut got = vec![0u8; total as usize];
            ctx.segment_read(DST_SEG, AT + HERE, &mut got)?;
            remote = if got == want { "written" } else { "stale" }.to_string();
            team.broadcast(&mut heard[..], 0, &note, Flags::MY, TIMEOUT)?;
        } else {
            team.broadcast(&mut heard[..], 0, &[][..], Flags::MY, TIMEOUT)?;
        }
    }
    let mut got = vec![0u8; total as usize];
    ctx.segment_read(DST_SEG, AT, &mut got)?;
    let got = if got == want && heard[..] == note[..] {
        "ok"
    } else {
        "wrong"
    };
    println!(
        "data allsync_dest rank {}: remote={remote}; got={got}",
        ctx.rank()
    );
    Ok(())
}

fn threads(ctx: &Context, team: &Team<'_>) -> Outcome {
    const COUNT: usize = 32;
    let n = team.size() as usize;
    let srcs: Vec<Vec<u8>> = (0..COUNT)
        .map(|i| cases::block(2000 + i as u64, team.index(), 0, 256))
        .collect();
    let mut dsts: Vec<Vec<u8>> = (0..COUNT).map(|_| vec![0; 256 * n]).collect();
    let mut even = Vec::new();
    let mut odd = Vec::new();
    for (i, (dst, src)) in dsts.iter_mut().zip(&srcs).enumerate() {
        let handle = team.gather_all_nb(dst, src, Flags::MY)?;
        if i.is_multiple_of(2) {
            even.push(handle);
        } else {
            odd.push(handle);
        }
    }
    let synced = std::thread::scope(|s| -> Outcome<usize> {
        let workers: Vec<_> = [even, odd]
            .into_iter()
            .map(|mut half| {
                s.spawn(move || -> Outcome<usize> {
                    gaspi_coll::wait_sync_all(&mut half, TIMEOUT)?;
                    Ok(half.len())
                })
            })
            .collect();
        let mut synced = 0;
        for worker in workers {
            synced += worker.join().map_err(|_| "a syncing thread panicked")??;
        }
        Ok(synced)
    })?;
    let digest: Digest = dsts.iter().collect();
    println!(
        "data threads rank {}: synced={synced}; digest={}",
        ctx.rank(),
        digest.hex()
    );
    Ok(())
}

fn split(ctx: &Context, team: &Team<'_>) -> Outcome {
    const ROUNDS: u64 = 8;
    let (n, me) = (team.size(), team.index());
    let sub = team
        .split(Some(me % 2), n - me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let rest = team.split((me + 1 != n).then_some(7), me, TIMEOUT)?;
    let ids = format!(
        "{:x}/{:x}/{}",
        team.id(),
        sub.id(),
        rest.as_ref()
            .map_or("none".to_string(), |t| format!("{:x}", t.id()))
    );
    let rest = rest.map_or("none".to_string(), |t| {
        format!("{}:{}", t.size(), t.index())
    });
    let (k, mine) = (sub.size() as usize, sub.index());
    let sub_src: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|i| cases::block(3000 + i, mine, 0, 96))
        .collect();
    let all_src: Vec<Vec<u8>> = (0..ROUNDS)
        .map(|i| cases::block(4000 + i, me, 0, 200))
        .collect();
    let mut sub_dst = vec![vec![0u8; 96 * k]; ROUNDS as usize];
    let mut all_dst = vec![vec![0u8; 200]; ROUNDS as usize];
    let mut sub_handles = Vec::new();
    let mut all_handles = Vec::new();
    let rounds = sub_dst.iter_mut().zip(all_dst.iter_mut()).enumerate();
    for (i, (sub_dst, all_dst)) in rounds {
        let root = team.ranks()[i % n as usize];
        if me % 2 == 0 {
            sub_handles.push(sub.gather_all_nb(sub_dst, &sub_src[i], Flags::MY)?);
            all_handles.push(team.broadcast_nb(all_dst, root, &all_src[i], Flags::MY)?);
        } else {
            all_handles.push(team.broadcast_nb(all_dst, root, &all_src[i], Flags::MY)?);
            sub_handles.push(sub.gather_all_nb(sub_dst, &sub_src[i], Flags::MY)?);
        }
    }
    for mut h in sub_handles.into_iter().rev() {
        h.wait_sync(TIMEOUT)?;
    }
    for mut h in all_handles.into_iter().rev() {
        h.wait_sync(TIMEOUT)?;
    }
    let mut digest = Digest::default();
    for dst in sub_dst.iter().chain(&all_dst) {
        digest.add(dst);
    }
    println!(
        "data split rank {}: sub={}:{}:{:?}; rest={rest}; ids={ids}; digest={}",
        ctx.rank(),
        k,
        mine,
        sub.ranks(),
        digest.hex()
    );
    Ok(())
}

/// `kill_alone`: as `kill`, but the survivors wait in a blocking allreduce, each the only
/// collective of its team and the only thread in it (the engine's lone wait), when the last
/// member is killed.
fn kill_alone() -> Outcome {
    let ctx = casualty_context("kill_alone")?;
    let (me, n) = (ctx.rank(), ctx.size());
    let victim = n - 1;
    let casualty = Casualty::new(&ctx, victim, 0, TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
    let sum = |flags| {
        let mut dst = [0u64; 1];
        team.allreduce(
            &[u64::from(me) + 1],
            &mut dst,
            gaspi::ReduceOp::Sum,
            flags,
            TIMEOUT,
        )
        .and_then(|()| match dst[0] {
            10 => Ok(()),
            got => Err(gaspi_coll::Error::Runtime(format!("sum {got}, not 10"))),
        })
    };
    let first = shown(sum(Flags::EAGER));
    if me == victim {
        casualty.survivors_past(&ctx, TIMEOUT)?;
        // The survivors are asleep in their allreduce by now.
        std::thread::sleep(std::time::Duration::from_millis(300));
        println!("data kill_alone rank {me}: pid={}", std::process::id());
        // `sh` is a child of this process: $PPID is this rank.
        std::process::Command::new("sh")
            .args(["-c", "kill -9 $PPID"])
            .status()?;
        return Err("still alive after kill -9".into());
    }
    casualty.past(&ctx, TIMEOUT)?;
    let started = std::time::Instant::now();
    let alone = shown(sum(Flags::EAGER));
    let millis = started.elapsed().as_millis();
    println!("data kill_alone rank {me}: first={first}; alone={alone}; millis={millis}");
    drop(team);
    drop(coll);
    match ctx.finalize(TIMEOUT) {
        Err(gaspi::Error::RankFailed { .. }) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// An outcome as the tests read it: `Ok`, `RankFailed(<rank>)` or the error.
fn shown(outcome: Result<(), gaspi_coll::Error>) -> String {
    match outcome {
        Ok(()) => "Ok".into(),
        Err(gaspi_coll::Error::Gaspi(gaspi::Error::RankFailed { rank, .. })) => {
            format!("RankFailed({rank})")
        }
        Err(e) => format!("{e:?}"),
    }
}

fn stalled() -> Outcome {
    let mut config = Config::from_env()?;
    // Nothing drains rank 1's socket while it makes no call.
    config.progress_thread = false;
    let ctx = Context::init_with(config)?;
    let me = ctx.rank();
    if ctx.size() != 2 {
        return Err("stalled needs 2 ranks".into());
    }
    let coll = Collectives::new(&ctx)?;
    let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
    const BYTES: usize = 16 << 20;
    let source = cases::block(7000, 0, 0, BYTES as u64);
    let mut copy = vec![0u8; BYTES];
    let mut handle = team.broadcast_nb(&mut copy, 0, &source, Flags::EAGER)?;
    let mut timeouts = 0u32;
    let outcome = if me == 1 {
        std::thread::sleep(std::time::Duration::from_secs(2));
        shown(handle.wait_sync(TIMEOUT))
    } else {
        loop {
            match handle.wait_sync(Timeout::Millis(200)) {
                Err(e) if e.is_timeout() && timeouts < 300 => timeouts += 1,
                other => break shown(other),
            }
        }
    };
    drop(handle);
    let mut digest = Digest::default();
    digest.add(&copy);
    println!(
        "data stalled rank {me}: timeouts={timeouts}; outcome={outcome}; digest={}",
        digest.hex()
    );
    drop(team);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// The context of a scenario of 4 ranks whose last member is killed (`kill`, `kill_alone`).
fn casualty_context(scenario: &str) -> Outcome<Context> {
    let mut config = Config::from_env()?;
    // Over shm through the fabric, a rank killed while it holds the provider's progress lock
    // would leave its writers spinning inside libfabric (as in alltoallv_check's `kill`).
    if config.intranode == Intranode::Fabric && config.provider.starts_with("shm") {
        config.progress_thread = false;
    }
    let ctx = Context::init_with(config)?;
    if ctx.size() != 4 {
        return Err(format!("{scenario} needs 4 ranks").into());
    }
    Ok(ctx)
}

fn kill() -> Outcome {
    let ctx = casualty_context("kill")?;
    let (me, n) = (ctx.rank(), ctx.size());
    let victim = n - 1;
    let casualty = Casualty::new(&ctx, victim, 0, TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
    let block = |seq: u64, member: u32| cases::block(seq, member, 0, 4096);
    let mut all = vec![0u8; 4096 * n as usize];
    let first = shown(team.gather_all(&mut all, &block(5000, me), Flags::MY, TIMEOUT));
    if me == victim {
        casualty.survivors_past(&ctx, TIMEOUT)?;
        println!("data kill rank {me}: pid={}", std::process::id());
        // `sh` is a child of this process: $PPID is this rank.
        std::process::Command::new("sh")
            .args(["-c", "kill -9 $PPID"])
            .status()?;
        return Err("still alive after kill -9".into());
    }
    let mut gathered = vec![0u8; 4096 * n as usize];
    let mut spread = vec![0u8; 1 << 20];
    let source = vec![me as u8; 1 << 20];
    let src = block(5001, me);
    let mut second = team.gather_all_nb(&mut gathered, &src, Flags::MY)?;
    let mut third = team.broadcast_nb(&mut spread, 0, &source, Flags::MY)?;
    casualty.past(&ctx, TIMEOUT)?;
    let second_outcome = shown(second.wait_sync(TIMEOUT));
    let third_outcome = shown(third.wait_sync(TIMEOUT));
    drop((second, third));
    let mut again = vec![0u8; 8 * n as usize];
    let later = shown(team.gather_all(&mut again, &[me as u8; 8], Flags::MY, TIMEOUT));
    // A broadcast whose root needs nothing of the dead member, with the death known.
    let mut copy = vec![0u8; 64];
    let rooted = shown(team.broadcast(&mut copy, 0, &[7u8; 64], Flags::MY, TIMEOUT));
    let group = ctx.group_create()?;
    for rank in 0..victim {
        ctx.group_add(group, rank)?;
    }
    ctx.group_commit(group, TIMEOUT)?;
    let survivors = Team::new(&coll, group, TIMEOUT)?;
    let mut theirs = vec![0u8; 4096 * victim as usize];
    let outcome = survivors.gather_all(&mut theirs, &block(5002, me), Flags::MY, TIMEOUT);
    let mut digest = Digest::default();
    digest.add(&theirs);
    println!(
        "data kill rank {me}: first={first}; second={second_outcome}; third={third_outcome}; \
         later={later}; rooted={rooted}; survivors={}; digest={}",
        shown(outcome),
        digest.hex()
    );
    drop(survivors);
    drop(team);
    drop(coll);
    match ctx.finalize(TIMEOUT) {
        Err(gaspi::Error::RankFailed { .. }) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}

/// An outcome of a collective its members disagree on, as the tests read it.
fn kind(outcome: gaspi_coll::Result<()>) -> String {
    match outcome {
        Err(gaspi_coll::Error::Mismatch { .. }) => "Mismatch".to_string(),
        Err(e) if e.is_timeout() => "Timeout".to_string(),
        Err(e) => format!("{e:?}"),
        Ok(()) => "Ok".to_string(),
    }
}

/// The first bytes of every member's block gathered into one 8-byte block each, as a list.
fn gathered(team: &Team<'_>) -> Outcome<String> {
    let n = team.size() as usize;
    let mut all = vec![0u8; 8 * n];
    let mine = [team.context().rank() as u8 + 1; 8];
    team.gather_all(&mut all, &mine, Flags::MY, TIMEOUT)?;
    let firsts: Vec<String> = all.chunks(8).map(|b| b[0].to_string()).collect();
    Ok(firsts.join(","))
}

fn teams() -> Outcome {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Err("teams needs 2 ranks or more".into());
    }
    let coll = Collectives::new(&ctx)?;
    let cap = |lanes, lane_bytes| Capacity { lanes, lane_bytes };
    let usual = Capacity::default();
    let shown = |made: gaspi_coll::Result<Option<Team<'_>>>| match made {
        Ok(Some(_)) => "Ok".to_string(),
        Ok(None) => "None".to_string(),
        Err(e) => format!("{e:?}"),
    };
    let made = |capacity| Team::with_capacity(&coll, GROUP_ALL, capacity, TIMEOUT).map(Some);
    let mut line = Vec::new();
    let on_zero = |other: Capacity| if me == 0 { other } else { usual };
    line.push(format!("bytes={}", shown(made(on_zero(cap(4, 64 << 10))))));
    line.push(format!("lanes={}", shown(made(on_zero(cap(2, 1 << 20))))));
    line.push(format!("small={}", shown(made(on_zero(cap(4, 1))))));
    line.push(format!("no_lanes={}", shown(made(cap(0, 1 << 20)))));
    let team = Team::with_capacity(&coll, GROUP_ALL, cap(2, 4096), TIMEOUT)?;
    line.push(format!("agreed={}", gathered(&team)?));
    let other = if me == 0 { cap(2, 8192) } else { cap(2, 4096) };
    let split = team.split_with_capacity(Some(0), me, other, TIMEOUT);
    line.push(format!("split_bytes={}", shown(split)));
    let again = team
        .split(Some(0), me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    line.push(format!("split_again={}", gathered(&again)?));
    // On a team of its own, since a collective its members disagree on leaves the team's
    // later ones to time out: rank 0 passes SINGLE addressing, the others LOCAL.
    let disagreeing = team
        .split(Some(0), me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    let addressing = if me == 0 {
        (Flags::MY - Flags::LOCAL) | Flags::SINGLE
    } else {
        Flags::MY
    };
    let (mut dst, src) = ([0u8; 8], [me as u8; 8]);
    let outcome = disagreeing.broadcast(&mut dst, 0, &src, addressing, Timeout::Millis(3_000));
    line.push(format!("addressing={}", kind(outcome)));
    // Nobody drops the team while a member that disagreed still waits.
    ctx.barrier(TIMEOUT)?;
    drop(disagreeing);

    // A group of every rank, then its id reused by a group of rank 0 alone.
    const RECEIVE: SegmentId = 0;
    const SOURCE: SegmentId = 1;
    ctx.segment_create(RECEIVE, 64, TIMEOUT)?;
    ctx.segment_create(SOURCE, 64, TIMEOUT)?;
    ctx.segment_write(SOURCE, 0, &[me as u8 + 1; 8])?;
    let group = ctx.group_create()?;
    for rank in 0..n {
        ctx.group_add(group, rank)?;
    }
    ctx.group_commit(group, TIMEOUT)?;
    let of_group = Team::new(&coll, group, TIMEOUT)?;
    let mut a2a = Alltoallv::new(&coll, group, TIMEOUT)?;
    ctx.group_delete(group)?;
    let reused = ctx.group_create()?;
    ctx.group_add(reused, 0)?;
    if me == 0 {
        ctx.group_commit(reused, TIMEOUT)?;
    }
    if reused != group {
        return Err(format!("group {group} deleted, the next one is {reused}").into());
    }
    let split = of_group
        .split(Some(0), me, TIMEOUT)?
        .ok_or("a member with a colour got no team")?;
    line.push(format!("regroup={}:{}", split.size(), gathered(&split)?));
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let plan = a2a.get_remote_offsets(RECEIVE, 0, &[(right, 8)], TIMEOUT)?;
    a2a.alltoallv(&plan, SOURCE, &[0], Timeout::Block)?;
    let at = plan
        .source(left)
        .ok_or("the left neighbour is no source")?
        .offset;
    let mut got = [0u8; 8];
    ctx.segment_read(RECEIVE, at, &mut got)?;
    a2a.alltoallv_reset(&[left])?;
    line.push(format!("regroup_a2a={}", got[0]));
    // Rank 0 alone makes a team of the id's second group; then the id's third group, ranks 0
    // and 1, makes a team, whose id must be the same on both.
    let solo = if me == 0 {
        Some(Team::new(&coll, reused, TIMEOUT)?)
    } else {
        None
    };
    ctx.barrier(TIMEOUT)?;
    ctx.group_delete(reused)?;
    let pair = ctx.group_create()?;
    ctx.group_add(pair, 0)?;
    ctx.group_add(pair, 1)?;
    if pair != group {
        return Err(format!("group {group} deleted again, the next one is {pair}").into());
    }
    let ids = if me < 2 {
        ctx.group_commit(pair, TIMEOUT)?;
        let two = Team::new(&coll, pair, TIMEOUT)?;
        let mut both = [0u8; 16];
        two.gather_all(&mut both, &two.id().to_le_bytes(), Flags::MY, TIMEOUT)?;
        if both[..8] == both[8..] {
            "same"
        } else {
            "differ"
        }
    } else {
        "none"
    };
    line.push(format!("pair_ids={ids}"));
    // The runtime's reason (the file system's error) is no business of the tests.
    let refused = match made(on_zero(cap(1, 1 << 50))) {
        Err(gaspi_coll::Error::Gaspi(gaspi::Error::LibrarySegment { size, .. })) => {
            format!("LibrarySegment({size})")
        }
        other => shown(other),
    };
    line.push(format!("cap_refused={refused}"));
    line.push(format!(
        "after_refused={}",
        gathered(&Team::new(&coll, GROUP_ALL, TIMEOUT)?)?
    ));
    println!("data teams rank {me}: {}", line.join("; "));
    // No member drops its segments while a partner may still write into them.
    ctx.barrier(TIMEOUT)?;
    drop((split, again, team, of_group, a2a, solo));
    ctx.group_delete(pair)?;
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

fn counts(team: &Team<'_>, mode: &str) -> Outcome {
    let (n, me) = (team.size() as usize, team.index() as usize);
    let send = vec![8u64; n];
    let mut recv = vec![8u64; n];
    if me == 1 {
        recv[0] = 16;
    }
    let total = |counts: &[u64]| counts.iter().sum::<u64>() as usize;
    let src = vec![me as u8 + 1; total(&send)];
    let mut dst = vec![0u8; total(&recv)];
    let flags = if mode == "eager" {
        Flags::EAGER
    } else {
        Flags::MY
    };
    let outcome = team.exchangev(&mut dst, &recv, &src, &send, flags, Timeout::Millis(3_000));
    let kind = match outcome {
        Err(gaspi_coll::Error::Mismatch { rank, .. }) => format!("Mismatch({rank})"),
        Err(e) if e.is_timeout() => "Timeout".to_string(),
        Err(e) => format!("Other({e})"),
        Ok(()) => "Ok".to_string(),
    };
    let from_first: Vec<String> = dst[..recv[0] as usize].iter().map(u8::to_string).collect();
    println!(
        "data counts rank {}: outcome={kind}; bytes={}",
        team.context().rank(),
        from_first.join(",")
    );
    // Nobody drops the team (its segment) while a member that disagreed still waits.
    team.context().barrier(TIMEOUT)?;
    Ok(())
}

fn drop_early(mode: &str) -> Outcome {
    let flags = if mode == "my" {
        Flags::MY
    } else {
        Flags::EAGER
    };
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    let mut gathered = vec![0u8; if me == 0 { 8 * n as usize } else { 0 }];
    let outcome = {
        let coll = Collectives::new(&ctx)?;
        let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
        if me + 1 == n {
            std::thread::sleep(std::time::Duration::from_secs(1));
        }
        let mine = [me as u8 + 1; 8];
        match team.gather(0, &mut gathered[..], &mine[..], flags, TIMEOUT) {
            Ok(()) => "Ok".to_string(),
            Err(e) => format!("{e:?}"),
        }
        // The team goes here, on the members in between before the last one entered.
    };
    let got: Vec<String> = gathered.chunks(8).map(|b| b[0].to_string()).collect();
    println!(
        "data drop_early rank {me}: outcome={outcome}; got={}",
        got.join(",")
    );
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

fn errors(ctx: &Context, team: &Team<'_>) -> Outcome {
    let n = team.size();
    let mut line = Vec::new();
    let mut dst = vec![0u8; 8];
    let src = vec![1u8; 8];
    let said = |r: Result<(), gaspi_coll::Error>| match r {
        Ok(()) => "Ok(())".to_string(),
        Err(e) => format!("{e:?}"),
    };
    let no_out = Flags::IN_MYSYNC | Flags::LOCAL;
    line.push(format!(
        "no_out={}",
        said(team.broadcast(&mut dst, 0, &src, no_out, TIMEOUT))
    ));
    let unknown = Flags::MY | Flags::from_bits_retain(1 << 20);
    line.push(format!(
        "unknown_bit={}",
        said(team.broadcast(&mut dst, 0, &src, unknown, TIMEOUT))
    ));
    let two_in = Flags::MY | Flags::IN_ALLSYNC;
    line.push(format!(
        "two_in={}",
        said(team.gather_all(&mut vec![0; 8 * n as usize], &src, two_in, TIMEOUT))
    ));
    line.push(format!(
        "stranger={}",
        said(team.broadcast(&mut dst, ctx.size() + 3, &src, Flags::MY, TIMEOUT))
    ));
    line.push(format!(
        "short={}",
        said(team.gather_all(&mut dst[..1], &src, Flags::MY, TIMEOUT))
    ));
    let in_seg = Flags::MY | Flags::SRC_IN_SEGMENT;
    line.push(format!(
        "src_flag_memory={}",
        said(team.broadcast(&mut dst, 0, &src, in_seg, TIMEOUT))
    ));
    let range = SegmentRange::new(SRC_SEG, 0, 8);
    line.push(format!(
        "src_range_no_flag={}",
        said(team.broadcast(&mut dst, 0, range, Flags::MY, TIMEOUT))
    ));
    let beyond = SegmentRange::new(SRC_SEG, ctx.segment_size(SRC_SEG)? - 4, 8);
    line.push(format!(
        "src_range_beyond={}",
        said(team.broadcast(&mut dst, 0, beyond, in_seg, TIMEOUT))
    ));
    let unknown = SegmentRange::new(9, 0, 8);
    line.push(format!(
        "dst_unknown_segment={}",
        said(team.broadcast(unknown, 0, &src, Flags::MY | Flags::DST_IN_SEGMENT, TIMEOUT))
    ));
    // This member sends itself 4 bytes but takes 8 from itself.
    let (mut sends, mut recvs) = (vec![0; n as usize], vec![0; n as usize]);
    let me = team.index() as usize;
    (sends[me], recvs[me]) = (4, 8);
    line.push(format!(
        "own_counts={}",
        said(team.exchangev(&mut dst, &recvs, &src[..4], &sends, Flags::MY, TIMEOUT))
    ));
    // Counts adding up beyond any buffer: 8 bytes here, 2^63 − 1 for every other member.
    let huge: Vec<u64> = (0..n as usize)
        .map(|i| if i == me { 8 } else { u64::MAX / 2 })
        .collect();
    let root = team.ranks()[0];
    line.push(format!(
        "huge_counts={}",
        said(team.scatterv(&mut dst, root, &src, &huge, Flags::MY, TIMEOUT))
    ));
    // Every count u64::MAX, this member's own too, which its 8-byte destination cannot hold:
    // still `TooLarge` (the sum is checked first), alike on every member.
    line.push(format!(
        "huge_own={}",
        said(team.scatterv(
            &mut dst,
            root,
            &src,
            &vec![u64::MAX; n as usize],
            Flags::MY,
            TIMEOUT
        ))
    ));
    // A destination range far beyond its segment, on members that do not check its length
    // against a source.
    let huge_range = SegmentRange::new(DST_SEG, 0, 1 << 62);
    line.push(format!(
        "huge_range={}",
        said(team.scatter(
            huge_range,
            root,
            &src,
            Flags::MY | Flags::DST_IN_SEGMENT,
            TIMEOUT
        ))
    ));
    let mut h = team.broadcast_nb(&mut dst, 0, &src, Flags::MY)?;
    h.wait_sync(TIMEOUT)?;
    line.push(format!("second_sync={}", said(h.wait_sync(TIMEOUT))));
    drop(h);
    if n >= 2 {
        let root = if team.index() == 0 {
            team.ranks()[0]
        } else {
            team.ranks()[1]
        };
        let outcome = team.broadcast(&mut dst, root, &src, Flags::MY, Timeout::Millis(3_000));
        let kind = match outcome {
            Err(gaspi_coll::Error::Mismatch { .. }) => "Mismatch",
            Err(e) if e.is_timeout() => "Timeout",
            Err(_) => "Other",
            Ok(()) => "Ok",
        };
        line.push(format!("disagree={kind}"));
        // Rank 0 gathers blocks of 8 bytes, the others of 16.
        let len = if team.index() == 0 { 8 } else { 16 };
        let mut all = vec![0u8; len * n as usize];
        let outcome = team.gather_all(&mut all, &vec![1; len], Flags::MY, Timeout::Millis(3_000));
        let kind = match outcome {
            Err(gaspi_coll::Error::Mismatch { .. }) => "Mismatch",
            Err(e) if e.is_timeout() => "Timeout",
            Err(_) => "Other",
            Ok(()) => "Ok",
        };
        line.push(format!("disagree_size={kind}"));
        // Nobody drops the team (its segment) while a member that disagreed still waits.
        ctx.barrier(TIMEOUT)?;
    }
    println!("data errors rank {}: {}", ctx.rank(), line.join("; "));
    Ok(())
}
