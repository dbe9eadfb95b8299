//! `kill` (3 ranks or more, under `gaspirun --keep-going`): the last rank, V, is killed with
//! SIGKILL in the middle of a round. Plan: `Dense`. Round 1 runs everywhere. In round 2 V
//! begins the round, takes the block of every other rank (so nothing is in flight towards it),
//! prints its pid (`data kill rank V: pid=...`) and has `kill -9` end it, without having sent
//! its own blocks. The survivors send theirs and take arrivals until a call fails: each reports
//! what that call returned (`outcome`, which must name V), what `finish` then returned
//! (`finish`), the sources it took before (`taken`, every block checked) and how long the round
//! took (`round_ms`). Then the survivors go on: they commit a group of their own and meet in its
//! barrier (`survivors`), and run a round of a new alltoallv over it, with the same segments
//! and the data of round 3 (`survivors_sources`, its plan's sources). `digest`: the blocks of
//! round 1, those taken in round 2, and those of the survivors' round (ascending source).
//!
//! `kill_discovery` (3 ranks or more, likewise): every rank sends to its right neighbour; V
//! prints its pid and is killed once every survivor has made the alltoallv and told V so (see
//! `casualty`, segment 10), and the survivors run `get_remote_offsets` with a timeout of
//! [`DISCOVERY_TIMEOUT`]: `outcome` (which must name V on every survivor, also on those that V
//! neither sends to nor receives from, who wait only for live members stuck on V) and `ms`,
//! how long the call took.

use std::collections::BTreeMap;
use std::process::Command;
use std::time::Instant;

use gaspi::{Config, Context, Intranode, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Alltoallv, Collectives, Error, Plan};

use crate::casualty::Casualty;
use crate::check::{check_number, list, outcome, sources_layout, whole_round, Report, Setup};
use crate::plan::{self, Pattern};
use crate::{Outcome, TIMEOUT};

pub fn run(ctx: &Context) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 3 {
        return Err("kill needs at least 3 ranks".into());
    }
    let victim = n - 1;
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let setup = Setup::create(ctx, [1, 2], 3, Pattern::Dense, 0)?;
    let plan = setup.discover(&mut a2a, TIMEOUT)?;
    let mut digest = plan::Digest::default();

    // Round 1, everywhere.
    setup.load(ctx, 1)?;
    whole_round(ctx, &a2a, &setup, &plan, 1, 1)?.finish(1, &plan, &mut digest)?;

    // Round 2: the victim dies in it.
    setup.load(ctx, 2)?;
    let start = Instant::now();
    let ended = die_in_round(ctx, &a2a, &setup, &plan, victim)?;
    let round_ms = start.elapsed().as_millis();
    for block in ended.taken.values() {
        digest.add(block);
    }
    let mut report = Report::default();
    report.put("outcome", ended.outcome);
    report.put("finish", ended.finish);
    report.put("taken", list(ended.taken.keys().map(u32::to_string)));
    report.put("round_ms", round_ms);

    // The survivors go on: a group of their own, and a round of a new alltoallv over it.
    let group = ctx.group_create()?;
    for rank in (0..n).filter(|&r| r != victim) {
        ctx.group_add(group, rank)?;
    }
    ctx.group_commit(group, TIMEOUT)?;
    report.put(
        "survivors",
        outcome(&ctx.group_barrier(group, TIMEOUT).map_err(Error::Gaspi)),
    );
    let mut survivors = Alltoallv::new(&coll, group, TIMEOUT)?;
    // The same segments, without the victim; its data is that of round 3 of the job.
    let setup = setup.without(victim);
    let plan = setup.discover(&mut survivors, TIMEOUT)?;
    setup.load(ctx, 3)?;
    whole_round(ctx, &survivors, &setup, &plan, 1, 3)?.finish(3, &plan, &mut digest)?;
    report.put("survivors_sources", sources_layout(&plan));
    report.put("digest", digest.hex());
    report.print("kill", me);
    // An alltoallv is dropped only once its rounds are over on every member.
    ctx.group_barrier(group, TIMEOUT)?;
    Ok(())
}

/// The timeout of the survivors' discovery in `kill_discovery`: far beyond the second in
/// which a death on the host is seen.
pub const DISCOVERY_TIMEOUT: Timeout = Timeout::Millis(20_000);

pub fn discovery(ctx: &Context) -> Outcome {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 3 {
        return Err("kill_discovery needs at least 3 ranks".into());
    }
    let victim = n - 1;
    const RECV: gaspi::SegmentId = 9;
    ctx.segment_create(RECV, 4096, TIMEOUT)?;
    let casualty = Casualty::new(ctx, victim, 10, TIMEOUT)?;
    let coll = Collectives::new(ctx)?;
    let mut a2a = Alltoallv::new(&coll, GROUP_ALL, TIMEOUT)?;
    let mut report = Report::default();
    if me == victim {
        casualty.survivors_past(ctx, TIMEOUT)?;
        report.put("pid", std::process::id());
        report.print("kill_discovery", victim);
        // `sh` is a child of this process: $PPID is this rank.
        Command::new("sh").args(["-c", "kill -9 $PPID"]).status()?;
        return Err("still alive after kill -9".into());
    }
    casualty.past(ctx, TIMEOUT)?;
    let start = Instant::now();
    let got = a2a.get_remote_offsets(RECV, 0, &[((me + 1) % n, 64)], DISCOVERY_TIMEOUT);
    report.put("outcome", outcome(&got));
    report.put("ms", start.elapsed().as_millis());
    report.print("kill_discovery", me);
    // No survivor leaves before the others are told: one that left could be named instead.
    let group = ctx.group_create()?;
    for rank in 0..victim {
        ctx.group_add(group, rank)?;
    }
    ctx.group_commit(group, TIMEOUT)?;
    ctx.group_barrier(group, TIMEOUT)?;
    Ok(())
}

/// How round 2 ended on a survivor.
struct Ended {
    /// What the call that failed returned.
    outcome: String,
    /// What `finish` then returned.
    finish: String,
    /// The blocks taken before, by source.
    taken: BTreeMap<Rank, Vec<u8>>,
}

/// Round 2: the victim takes every other rank's block and is killed; a survivor sends its
/// blocks, takes arrivals until a call fails, and then calls `finish`.
fn die_in_round(
    ctx: &Context,
    a2a: &Alltoallv<'_>,
    setup: &Setup,
    plan: &Plan,
    victim: Rank,
) -> Outcome<Ended> {
    let round = a2a.round(plan, setup.source)?;
    check_number(&round, 2)?;
    if ctx.rank() == victim {
        for _ in 0..victim {
            let source = round
                .next_arrival(TIMEOUT)?
                .ok_or("the round ended before every other rank's block arrived")?;
            setup.take(ctx, plan, 2, source)?;
        }
        let mut report = Report::default();
        report.put("pid", std::process::id());
        report.print("kill", victim);
        // `sh` is a child of this process: $PPID is this rank.
        Command::new("sh").args(["-c", "kill -9 $PPID"]).status()?;
        return Err("still alive after kill -9".into());
    }
    round.send_all(&setup.offsets)?;
    let mut taken = BTreeMap::new();
    loop {
        match round.next_arrival(TIMEOUT) {
            Ok(Some(source)) => {
                taken.insert(source, setup.take(ctx, plan, 2, source)?);
                round.reset(source)?;
            }
            ended => {
                return Ok(Ended {
                    outcome: outcome(&ended),
                    finish: outcome(&round.finish(TIMEOUT)),
                    taken,
                })
            }
        }
    }
}

/// The runtime's configuration from the environment, except that over shm through the fabric
/// the ranks run without a progress thread unless `GASPI_PROGRESS_THREAD` says otherwise:
/// libfabric's shm guards each rank's region with a spinlock in shared memory that the owner's
/// progress thread takes while it handles incoming writes, and a rank killed holding it would
/// leave every writer into it spinning inside libfabric (see the `killed-target` scenario of
/// `gaspi-selftest`).
pub fn config() -> Outcome<Config> {
    let mut config = Config::from_env()?;
    let shm_fabric = config.intranode == Intranode::Fabric && config.provider.starts_with("shm");
    if shm_fabric && std::env::var_os("GASPI_PROGRESS_THREAD").is_none() {
        config.progress_thread = false;
    }
    Ok(config)
}
