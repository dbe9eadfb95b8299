//! The allreduce of a small vector repeated, for instruction counts under callgrind
//! (`scripts/callgrind-allreduce.sh` runs it), and checked: `cg_allreduce
//! engine|runtime|floor|all late|there|step ITERS`.
//!
//! Each rank reduces one f64 (sum) `ITERS` times, after 20 calls of warm-up, through the
//! engine of a team of all ranks (`engine`, eager, as the bench's `"lib":"gaspi-coll"`) or
//! through the runtime's own (`runtime`), or (`floor`, a power-of-two number of ranks, all
//! reached directly) by recursive doubling written directly on the runtime's public calls that
//! the engine uses (`Batch::write_notify_from`, `notify_waitsome`, `notify_reset`,
//! `segment_read`, `ReduceOp::apply`): what any library on that API pays at least, with no
//! engine around it. `all` runs the three one after the other (the test's way). The counted
//! calls go through [`engine_call`], [`runtime_call`] and [`floor_call`], which the script's
//! callgrind collects alone (the warm-up goes around them).
//!
//! Every result is checked to the bit against the fixed fold tree the engine and the runtime
//! promise (and the floor follows): rank `r`'s input in call `i` is `1 / (r + i + 3)`, which
//! rounds, so a sum in another order, a stale result or none shows; a mismatch fails the rank
//! with a message naming it, the call and both values. Each rank reports
//! `data cg_allreduce rank R: engine=ok; runtime=ok; floor=ok` for what it ran, the floor
//! `skipped` (with why on stderr) where it cannot run.
//! * `late`: every rank but 0 sleeps 3 ms before each call, so that rank 0 initiates first
//!   and waits for its partners' data;
//! * `there`: rank 0 sleeps 3 ms before each call, so that its partners' data is there when
//!   it initiates;
//! * `step`: nobody sleeps, and the ranks call in lock step, as in the bench's loop of calls
//!   (`bench.sh coll`), whose 8 B lines the engine is judged on.

#![forbid(unsafe_code)]

#[allow(dead_code)] // The example uses part of the support.
#[path = "../support/mod.rs"]
mod support;

use std::process::ExitCode;
use std::time::Duration;

use gaspi::{Context, ReduceOp, Timeout, GROUP_ALL};
use gaspi_coll::{Capacity, Collectives, Flags, Team};

use support::Outcome;

const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// Calls before those counted: plans made, segments resolved.
const WARMUP: usize = 20;

/// How long the rank that comes late sleeps before each call.
const LATE: Duration = Duration::from_millis(3);

/// One allreduce on the team's engine; not inlined, so that callgrind can collect it alone.
#[inline(never)]
fn engine_call(team: &Team<'_>, src: &[f64], dst: &mut [f64]) -> gaspi_coll::Result<()> {
    team.allreduce(src, dst, ReduceOp::Sum, Flags::EAGER, TIMEOUT)
}

/// One allreduce of the runtime; not inlined, as [`engine_call`].
#[inline(never)]
fn runtime_call(ctx: &Context, src: &[f64], dst: &mut [f64]) -> gaspi::Result<()> {
    ctx.allreduce(GROUP_ALL, src, dst, ReduceOp::Sum, TIMEOUT)
}

/// The user segment of the `floor` allreduce: per step two slots of 8 bytes, by the parity
/// of the call (a partner is at most one call ahead), and as notifications.
const FLOOR_SEGMENT: gaspi::SegmentId = 0;

/// One `floor` allreduce; not inlined, as [`engine_call`].
#[inline(never)]
fn floor_call(floor: &Floor<'_>, call: u32, src: &[f64], dst: &mut [f64]) -> gaspi::Result<()> {
    floor.allreduce(call, src, dst)
}

/// The `floor` allreduce's partners: per step of recursive doubling, the partner's segment.
struct Floor<'c> {
    ctx: &'c Context,
    batch: gaspi::Batch<'c>,
    targets: Vec<gaspi::Target>,
}

impl Floor<'_> {
    /// Call number `call` (from 1): at step `k` this rank puts its partial sum straight out
    /// of memory to partner `me ^ 2^k`, waits for the partner's, and folds the two in rank
    /// order.
    #[inline(never)]
    fn allreduce(&self, call: u32, src: &[f64], dst: &mut [f64]) -> gaspi::Result<()> {
        let ctx = self.ctx;
        let me = ctx.rank();
        dst.copy_from_slice(src);
        let mut other = [0u8; 8];
        for (k, target) in self.targets.iter().enumerate() {
            let slot = (2 * k as u32 + call % 2) as gaspi::NotificationId;
            let n = gaspi::Notification {
                id: slot,
                value: call,
            };
            let at = u64::from(slot) * 8;
            self.batch
                .write_notify_from(bytemuck::cast_slice(dst), target, at, n)?;
            let id = ctx.notify_waitsome(FLOOR_SEGMENT, slot, 1, TIMEOUT)?;
            ctx.notify_reset(FLOOR_SEGMENT, id)?;
            ctx.segment_read(FLOOR_SEGMENT, at, &mut other)?;
            let other: [f64; 1] = bytemuck::cast(other);
            match me & (1 << k) {
                0 => ReduceOp::Sum.apply(dst, &other)?,
                _ => ReduceOp::Sum.apply_right(&other, dst)?,
            }
        }
        self.batch.test()?;
        Ok(())
    }
}

fn main() -> ExitCode {
    support::main_of("cg_allreduce", |args| {
        let usage = "usage: cg_allreduce engine|runtime|floor|all late|there|step ITERS";
        let [which, mode, iters] = args else {
            return Err(usage.into());
        };
        let libs: &[Lib] = match which.as_str() {
            "engine" => &[Lib::Engine],
            "runtime" => &[Lib::Runtime],
            "floor" => &[Lib::Floor],
            "all" => &[Lib::Engine, Lib::Runtime, Lib::Floor],
            _ => return Err(usage.into()),
        };
        let Some(late) = support::late_case(mode) else {
            return Err(usage.into());
        };
        let iters: usize = iters.parse().map_err(|_| usage.to_string())?;
        run(libs, late, iters)
    })
}

/// Whose allreduce a run counts.
#[derive(Clone, Copy)]
enum Lib {
    Engine,
    Runtime,
    Floor,
}

impl Lib {
    fn name(self) -> &'static str {
        match self {
            Lib::Engine => "engine",
            Lib::Runtime => "runtime",
            Lib::Floor => "floor",
        }
    }
}

/// Rank `rank`'s input in call `call`: a fraction that rounds, new in every call.
fn input(rank: u32, call: usize) -> f64 {
    1.0 / (f64::from(rank) + call as f64 + 3.0)
}

/// The sum of every rank's input in call `call` on the fold tree the allreduces promise
/// (`gaspi`'s allreduce module): the first `2·(n - p)` ranks fold pairwise down to a power of
/// two `p`, then adjacent ranges fold at distance 1, 2, 4, ..., the lower on the left.
fn expected(size: u32, call: usize) -> f64 {
    let p = 1 << (31 - size.leading_zeros());
    let paired = 2 * (size - p);
    let mut ranges: Vec<f64> = (0..paired)
        .step_by(2)
        .map(|r| input(r, call) + input(r + 1, call))
        .chain((paired..size).map(|r| input(r, call)))
        .collect();
    while ranges.len() > 1 {
        ranges = ranges.chunks(2).map(|pair| pair[0] + pair[1]).collect();
    }
    ranges[0]
}

/// Why this job cannot run the floor, if it cannot.
fn floor_refused(ctx: &Context) -> Option<String> {
    let size = ctx.size();
    if !size.is_power_of_two() {
        return Some(format!("{size} ranks, not a power of two"));
    }
    (0..size)
        .find(|&r| r != ctx.rank() && !ctx.reaches_directly(r))
        .map(|r| {
            format!("rank {r} is not reached directly (GASPI_INTRANODE=fabric or another host)")
        })
}

fn run(libs: &[Lib], late: Option<bool>, iters: usize) -> Outcome<()> {
    let ctx = Context::init()?;
    let me = ctx.rank();
    let coll = Collectives::new(&ctx)?;
    // As the bench's team.
    let capacity = Capacity {
        lanes: 2,
        lane_bytes: 4 << 20,
    };
    let team = Team::with_capacity(&coll, GROUP_ALL, capacity, TIMEOUT)?;
    let size = ctx.size();
    let sleeps = late.is_some_and(|late| (me != 0) == late);
    let steps = size.trailing_zeros();
    let refused = floor_refused(&ctx);
    if let (Some(why), [Lib::Floor]) = (&refused, libs) {
        return Err(format!("floor: {why}").into());
    }
    ctx.segment_create(FLOOR_SEGMENT, 16 * u64::from(steps.max(1)), TIMEOUT)?;
    let floor = match refused {
        None => Some(Floor {
            ctx: &ctx,
            batch: ctx.batch(),
            targets: (0..steps)
                .map(|k| ctx.target(me ^ (1 << k), FLOOR_SEGMENT, TIMEOUT))
                .collect::<gaspi::Result<_>>()?,
        }),
        Some(ref why) => {
            if me == 0 {
                eprintln!("cg_allreduce: floor skipped: {why}");
            }
            None
        }
    };
    let mut report = Vec::new();
    for &lib in libs {
        ctx.barrier(TIMEOUT)?;
        let floor = match (lib, &floor) {
            (Lib::Floor, None) => {
                report.push("floor=skipped".to_string());
                continue;
            }
            (_, floor) => floor.as_ref(),
        };
        for i in 0..WARMUP + iters {
            if sleeps && i >= WARMUP {
                std::thread::sleep(LATE);
            }
            let src = [input(me, i)];
            // NaN: a call that leaves the destination alone fails the check.
            let mut dst = [f64::NAN];
            // The warm-up goes around the collected functions.
            match (lib, floor, i < WARMUP) {
                (Lib::Engine, _, false) => engine_call(&team, &src, &mut dst)?,
                (Lib::Engine, _, true) => {
                    team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::EAGER, TIMEOUT)?
                }
                (Lib::Runtime, _, false) => runtime_call(&ctx, &src, &mut dst)?,
                (Lib::Runtime, _, true) => {
                    ctx.allreduce(GROUP_ALL, &src, &mut dst, ReduceOp::Sum, TIMEOUT)?
                }
                (Lib::Floor, Some(floor), false) => {
                    floor_call(floor, i as u32 + 1, &src, &mut dst)?
                }
                (Lib::Floor, Some(floor), true) => floor.allreduce(i as u32 + 1, &src, &mut dst)?,
                // Skipped above.
                (Lib::Floor, None, _) => {}
            }
            let want = expected(size, i);
            if dst[0].to_bits() != want.to_bits() {
                return Err(format!(
                    "rank {me}: {} call {i}: {:e} ({:#018x}), want {want:e} ({:#018x})",
                    lib.name(),
                    dst[0],
                    dst[0].to_bits(),
                    want.to_bits()
                )
                .into());
            }
        }
        report.push(format!("{}=ok", lib.name()));
    }
    // Leave through finalize: a rank that only dropped its context after a last barrier
    // could end while a partner still waited in that barrier for a third rank, and be taken
    // for dead by it (the fault model's rule for a rank that leaves without finalize).
    drop(team);
    drop(coll);
    ctx.finalize(TIMEOUT)?;
    println!("data cg_allreduce rank {me}: {}", report.join("; "));
    Ok(())
}
