//! An 8 B rooted collective of GASNet's set repeated, for instruction counts under callgrind
//! (`scripts/callgrind-gasnet.sh` runs it), and checked: `cg_gasnet
//! broadcast|scatter|gather|scatterv|gatherv root|leaf late|there|step ITERS`.
//!
//! Every rank calls the operation `ITERS` times on a team of all ranks, after 20 calls of
//! warm-up, with blocks of 8 bytes and `Flags::EAGER`, as `bench.sh gasnet` does (blocking
//! calls, no barrier between them; the v forms with every count 8). Rank 0, the one
//! callgrind counts, is the root (`root`) or a leaf of the tree (`leaf`: the root is rank 1,
//! so that rank 0 is the last member of the tree relative to it, which no tree gives
//! children). The counted calls go through
//! [`counted`], which the script's callgrind collects alone (the warm-up goes around it).
//!
//! Every block carries a stamp naming its call, sender and receiver, checked after the call:
//! a stale or missing block fails the rank with a message naming the call.
//! * `late`: every rank but 0 sleeps 3 ms before each call, so that rank 0 initiates first
//!   (and, where it receives, waits for its data);
//! * `there`: rank 0 sleeps 3 ms before each call, so that what it receives is there when it
//!   initiates (and, where it sends, the staging credits are back);
//! * `step`: nobody sleeps, as in the bench's loop.
//!
//! Each rank also times its counted calls (outside [`counted`]) and reports their median, 90th
//! percentile and how many took over [`WAITED`] (calls that slept or were descheduled), so that
//! a native run (`gaspirun -n 4 ... cg_gasnet broadcast root step 20000`) shows how often a
//! call waits. `CG_LANES` sets the team's lanes (default 4, as the bench's team), to see how
//! the depth an eager root may run ahead changes that.

#![forbid(unsafe_code)]

#[allow(dead_code)] // The example uses part of the support.
#[path = "../support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::time::{Duration, Instant};

use gaspi::{Context, Rank, GROUP_ALL};
use gaspi_coll::{Capacity, Collectives, Flags, Team};

// The support's timeout: a call takes microseconds, under callgrind a hundred times more.
use support::{Outcome, TIMEOUT};

/// Calls before those counted (plans made, segments resolved), and how long the rank that
/// comes late sleeps before each counted call: as in `cg_allreduce`.
const WARMUP: usize = 20;
const LATE: Duration = Duration::from_millis(3);

/// A counted call that took longer than this is reported as one that waited.
const WAITED: Duration = Duration::from_micros(5);

/// Bytes per block, as the bench's smallest size.
const BYTES: usize = 8;

/// The rooted operations counted.
#[derive(Clone, Copy)]
enum Op {
    Broadcast,
    Scatter,
    Gather,
    Scatterv,
    Gatherv,
}

/// A call's operation, root and the counts of the v forms (made once, outside the counted
/// calls).
struct Call<'a> {
    op: Op,
    root: Rank,
    counts: &'a [u64],
}

/// One call; not inlined, so that callgrind can collect it alone.
#[inline(never)]
fn counted(team: &Team<'_>, c: &Call<'_>, src: &[u8], dst: &mut [u8]) -> Outcome<()> {
    call(team, c, src, dst)
}

/// One blocking call with the bench's flags.
fn call(team: &Team<'_>, c: &Call<'_>, src: &[u8], dst: &mut [u8]) -> Outcome<()> {
    let (root, counts) = (c.root, c.counts);
    let flags = Flags::EAGER;
    match c.op {
        Op::Broadcast => team.broadcast(dst, root, src, flags, TIMEOUT)?,
        Op::Scatter => team.scatter(dst, root, src, flags, TIMEOUT)?,
        Op::Gather => team.gather(root, dst, src, flags, TIMEOUT)?,
        Op::Scatterv => team.scatterv(dst, root, src, counts, flags, TIMEOUT)?,
        Op::Gatherv => team.gatherv(root, dst, src, counts, flags, TIMEOUT)?,
    }
    Ok(())
}

/// The stamp of the block `from` sends `to` in call `call`.
fn stamp(call: usize, from: Rank, to: Rank) -> [u8; BYTES] {
    ((call as u64) << 32 | u64::from(from) << 16 | u64::from(to)).to_le_bytes()
}

fn main() -> ExitCode {
    support::main_of("cg_gasnet", |args| {
        let usage = "usage: cg_gasnet broadcast|scatter|gather|scatterv|gatherv root|leaf \
                     late|there|step ITERS";
        let [op, role, mode, iters] = args else {
            return Err(usage.into());
        };
        let op = match op.as_str() {
            "broadcast" => Op::Broadcast,
            "scatter" => Op::Scatter,
            "gather" => Op::Gather,
            "scatterv" => Op::Scatterv,
            "gatherv" => Op::Gatherv,
            _ => return Err(usage.into()),
        };
        let root = match role.as_str() {
            "root" => 0,
            "leaf" => 1,
            _ => return Err(usage.into()),
        };
        let Some(late) = support::late_case(mode) else {
            return Err(usage.into());
        };
        let iters: usize = iters.parse().map_err(|_| usage.to_string())?;
        run(op, root, late, iters)
    })
}

fn run(op: Op, root: Rank, late: Option<bool>, iters: usize) -> Outcome<()> {
    let ctx = Context::init()?;
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Err("cg_gasnet needs at least 2 ranks".into());
    }
    let coll = Collectives::new(&ctx)?;
    // As the bench's team: 4 lanes, every call one piece.
    let lanes = match std::env::var("CG_LANES") {
        Ok(lanes) => lanes
            .parse()
            .map_err(|_| format!("CG_LANES={lanes}: not a number"))?,
        Err(_) => 4,
    };
    let capacity = Capacity {
        lanes,
        lane_bytes: 1 << 20,
    };
    let team = Team::with_capacity(&coll, GROUP_ALL, capacity, TIMEOUT)?;
    let sleeps = late.is_some_and(|late| (me != 0) == late);
    let nb = n as usize * BYTES;
    let mut src = vec![0u8; nb];
    let mut dst = vec![0u8; nb];
    let mut times = Vec::with_capacity(iters);
    let counts = vec![BYTES as u64; n as usize];
    let c = Call {
        op,
        root,
        counts: &counts,
    };
    ctx.barrier(TIMEOUT)?;
    for i in 0..WARMUP + iters {
        if sleeps && i >= WARMUP {
            std::thread::sleep(LATE);
        }
        // What this rank sends, and the blocks it receives: (range, sender, receiver).
        let (src_len, dst_len, got): (usize, usize, Vec<(usize, Rank, Rank)>) = match op {
            Op::Broadcast => (BYTES, BYTES, vec![(0, root, root)]),
            Op::Scatter | Op::Scatterv => (nb, BYTES, vec![(0, root, me)]),
            Op::Gather | Op::Gatherv if me == root => (
                BYTES,
                nb,
                (0..n).map(|j| (j as usize * BYTES, j, root)).collect(),
            ),
            Op::Gather | Op::Gatherv => (BYTES, 0, Vec::new()),
        };
        match op {
            Op::Broadcast => src[..BYTES].copy_from_slice(&stamp(i, root, root)),
            Op::Scatter | Op::Scatterv => {
                for j in 0..n {
                    let at = j as usize * BYTES;
                    src[at..at + BYTES].copy_from_slice(&stamp(i, root, j));
                }
            }
            Op::Gather | Op::Gatherv => src[..BYTES].copy_from_slice(&stamp(i, me, root)),
        }
        // Only the root reads its source in the rooted ones but gather.
        let src_len = if matches!(op, Op::Gather | Op::Gatherv) || me == root {
            src_len
        } else {
            0
        };
        dst[..dst_len].fill(0);
        let (s, d) = (&src[..src_len], &mut dst[..dst_len]);
        if i < WARMUP {
            call(&team, &c, s, d)?;
        } else {
            let start = Instant::now();
            counted(&team, &c, s, d)?;
            times.push(start.elapsed());
        }
        for (at, from, to) in got {
            if dst[at..at + BYTES] != stamp(i, from, to) {
                return Err(format!(
                    "rank {me}: call {i}: block from rank {from} at {at} is {:02x?}",
                    &dst[at..at + BYTES]
                )
                .into());
            }
        }
    }
    // Leave through finalize (see cg_allreduce).
    drop(team);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    times.sort_unstable();
    let at = |q: f64| {
        times
            .get((q * times.len() as f64) as usize)
            .copied()
            .unwrap_or_default()
    };
    let waited = times.iter().filter(|&&t| t > WAITED).count();
    println!(
        "data cg_gasnet rank {me}: check=ok; median={:?}; p90={:?}; waited={waited}/{}",
        at(0.5),
        at(0.9),
        times.len()
    );
    Ok(())
}
