//! Checks of the GASNet collectives of [`Team`] as real jobs:
//! `gaspirun -n 4 --provider shm gasnet_check ops`. Every rank prints one line per check,
//! `data <scenario> rank R: key=value; ...`, with a digest of what it received and what each
//! misuse returned (`Variant { fields }`), which `coll/tests/gasnet.rs` recomputes from
//! `cases.rs` (a serial reference) and judges.
//!
//! Scenarios (the first argument):
//! * `ops`: every operation of `cases::OPS` × every size of `cases::SIZES` × the 18
//!   combinations of sync modes and addressing of `cases::flags()`, with a root drawn per
//!   case; blocking and non-blocking forms alternate. Line `data ops rank R: <op>=<count>/<digest>`
//!   per operation, the digest over the destinations of its cases in order.
//! * `many`: 64 non-blocking gather_alls (of 64 B, then 1 KiB, alternating) initiated at once
//!   on one team (more than its lanes), then synced with `wait_sync_some` in an order drawn
//!   per rank: `data many rank R: synced; digest` (the digest in initiation order).
//! * `threads`: 32 non-blocking gather_alls initiated by one thread, then synced by two
//!   threads at once, each with half the handles (every other one), so one sleeps while the
//!   other takes what it waits for: `data threads rank R: synced; digest`.
//! * `errors`: bad flags, a root outside the team, a buffer of the wrong length, a second
//!   sync, and members that disagree on the root (rank 0 names root 0, the others root 1):
//!   `data errors rank R: <check>=<outcome>`.

#![forbid(unsafe_code)]

mod cases;
#[path = "../support/data.rs"]
mod data;
#[path = "../support/handles.rs"]
mod handles;

use std::process::ExitCode;

use gaspi::{Context, Timeout, GROUP_ALL};
use gaspi_coll::{Capacity, Collectives, Flags, Handle, Team};

use data::Digest;
use handles::sync_shuffled;

/// The timeout of every call that is not meant to time out.
const TIMEOUT: Timeout = Timeout::Millis(60_000);

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ops"] => in_job(ops),
        ["many"] => in_job(many),
        ["threads"] => in_job(threads),
        ["errors"] => in_job(errors),
        _ => Err("usage: gasnet_check ops|many|threads|errors".into()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("gasnet_check: {e}");
            ExitCode::FAILURE
        }
    }
}

fn in_job(scenario: impl FnOnce(&Context, &Team<'_>) -> Outcome) -> Outcome {
    let ctx = Context::init()?;
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

/// Runs `op` of case `case` and returns this member's destination.
fn run(team: &Team<'_>, op: &str, case: u64, size: u64, flags: Flags) -> Outcome<Vec<u8>> {
    let (n, me) = (team.size(), team.index());
    let root = team.ranks()[cases::root(case, n) as usize];
    let src = cases::src(op, case, size, n, me);
    let mut dst = vec![0xa5; cases::want(op, case, size, n, me).len()];
    let counts: Vec<u64> = (0..n).map(|i| cases::count(size, i)).collect();
    let sends: Vec<u64> = (0..n).map(|j| cases::xcount(size, me, j)).collect();
    let recvs: Vec<u64> = (0..n).map(|i| cases::xcount(size, i, me)).collect();
    let mut handle = match op {
        "broadcast" => team.broadcast_nb(&mut dst, root, &src, flags)?,
        "scatter" => team.scatter_nb(&mut dst, root, &src, flags)?,
        "gather" => team.gather_nb(root, &mut dst, &src, flags)?,
        "gather_all" => team.gather_all_nb(&mut dst, &src, flags)?,
        "exchange" => team.exchange_nb(&mut dst, &src, flags)?,
        "scatterv" => team.scatterv_nb(&mut dst, root, &src, &counts, flags)?,
        "gatherv" => team.gatherv_nb(root, &mut dst, &src, &counts, flags)?,
        "gather_allv" => team.gather_allv_nb(&mut dst, &src, &counts, flags)?,
        "exchangev" => team.exchangev_nb(&mut dst, &recvs, &src, &sends, flags)?,
        _ => return Err(format!("no operation {op}").into()),
    };
    if case.is_multiple_of(2) {
        handle.wait_sync(TIMEOUT)?;
    } else {
        while !handle.try_sync()? {
            std::thread::yield_now();
        }
    }
    drop(handle);
    Ok(dst)
}

fn ops(ctx: &Context, team: &Team<'_>) -> Outcome {
    let mut case = 0;
    let mut line = Vec::new();
    for op in cases::OPS {
        let mut digest = Digest::default();
        let mut count = 0;
        for size in cases::SIZES {
            for flags in cases::flags() {
                case += 1;
                let dst = run(team, op, case, size, flags)
                    .map_err(|e| format!("{op} case {case} ({size} B, {flags:?}): {e}"))?;
                digest.add(&dst);
                count += 1;
            }
        }
        line.push(format!("{op}={count}/{}", digest.hex()));
    }
    println!("data ops rank {}: {}", ctx.rank(), line.join("; "));
    Ok(())
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
    for (dst, src) in dsts.iter_mut().zip(&srcs) {
        handles.push(team.gather_all_nb(dst, src, Flags::MY)?);
    }
    // Sync in an order of this rank's own.
    let synced = sync_shuffled(handles, u64::from(ctx.rank()) + 7, TIMEOUT)?;
    let mut digest = Digest::default();
    for dst in &dsts {
        digest.add(dst);
    }
    println!(
        "data many rank {}: synced={synced}; digest={}",
        ctx.rank(),
        digest.hex()
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
    let mut digest = Digest::default();
    for dst in &dsts {
        digest.add(dst);
    }
    println!(
        "data threads rank {}: synced={synced}; digest={}",
        ctx.rank(),
        digest.hex()
    );
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
    }
    println!("data errors rank {}: {}", ctx.rank(), line.join("; "));
    Ok(())
}
