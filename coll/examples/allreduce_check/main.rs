//! Checks of the team allreduce as real jobs:
//! `gaspirun -n 4 --provider shm allreduce_check values`. Every rank prints one line per
//! scenario, `data <scenario> rank R: key=value; ...`, which `coll/tests/allreduce.rs`
//! recomputes from `cases.rs` (a serial reference) and judges.
//!
//! Scenarios (the first argument):
//! * `values`: every reduction of `cases::KINDS` × every length of `cases::LENGTHS`, syncing
//!   in turn blocking, by `try_sync` polls, and by `wait_sync` with a zero timeout repeated
//!   after each `Timeout` (resumption), every fourth case by the blocking form instead of a
//!   handle; every other case with `Flags::ALL` (barriers around it). Line `data values rank R: <kind>=<digest>` per kind, the digest over the
//!   destinations of its lengths in order; then `large=<outcome>` for a sum of
//!   `cases::LARGE` elements and `large_affine=<digest>` for the non-commutative operator
//!   over `cases::LARGE / 2` blocks (both larger than a lane: run as pieces).
//! * `many`: `cases::MANY` non-blocking collectives initiated at once on one team (more than
//!   its lanes), allreduces of every length class interleaved with gather_alls (so runs
//!   that may skip their credits follow runs that may not, and the other way round), then
//!   synced with `wait_sync_some` in an order drawn per rank: `data many rank R: synced;
//!   digest` (the digest in initiation order).
//! * `late`: rank 0's blocking allreduce of `cases::LATE` elements gives up after 1 ms, long
//!   before the others start it; its part goes on without it (its folds read the source it
//!   lent, see `Lend::Late` in the crate), which the others' results show; then a second
//!   allreduce on the same team: `data late rank R: first=<Timeout|digest>;
//!   second=<digest>`, digests of the destinations (rank 0's first untouched: `Timeout`
//!   only if its destination still holds its sentinel).
//! * `mismatch`: rank 0 reduces 8 elements where the others reduce 9 (`len`), then rank 0
//!   sums where the others take the maximum (`op`), each on a team of its own and within
//!   3 s: `data mismatch rank R: len=<kind>; op=<kind>`, the kind `Mismatch`, `Timeout`,
//!   `Other` or `Ok`.
//! * `panic`: rank 0's user operator panics (the others' does not), each part on a team of
//!   its own: in the blocking call's sync (`sync`, the others late), in its initiating call
//!   (`initiate`, rank 0 late, eager), in a non-blocking one synced by one thread while
//!   another thread's allreduce on the team moves it on (`thread_a` the syncing thread,
//!   `thread_b` the other); and rank 0's own code panics between `allreduce_with_nb` and the
//!   sync, dropping the handle as it unwinds (`dropped`); rank 0's operator panics in a
//!   vector of `cases::LARGE` elements, which runs as pieces (`pieces`, where the others
//!   need its later steps and time out). After `sync` and `dropped`, a sum
//!   on the same team (`sync_after`, `dropped_after`): `data panic rank R: <part>=<kind>`,
//!   the kind `Panicked` (rank 0's call panicked with the operator's message), `Ok` (the
//!   sum of every member's vector), `Wrong`, `Timeout` or the error. A panic that escaped
//!   elsewhere, or a second one while unwinding, ends the rank without its line.

#![forbid(unsafe_code)]

#[allow(dead_code)] // The reference serves the test that judges the output.
mod cases;
#[allow(dead_code)] // The example uses part of the shared data.
#[path = "../support/data.rs"]
mod data;
#[path = "../support/handles.rs"]
mod handles;
#[allow(dead_code)] // Each example uses its part of the support.
#[path = "../support/mod.rs"]
mod support;

use std::process::ExitCode;

use gaspi::{Context, Element, ReduceOp, Timeout, UserOp, GROUP_ALL};
use gaspi_coll::{Collectives, Flags, Handle, Team};

use data::Digest;
use handles::sync_shuffled;
use support::{Outcome, TIMEOUT};

fn main() -> ExitCode {
    support::main_of("allreduce_check", |args| {
        match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
            ["values"] => values(),
            ["many"] => many(),
            ["late"] => late(),
            ["mismatch"] => mismatch(),
            ["panic"] => panics(),
            _ => Err("usage: allreduce_check values|many|late|mismatch|panic".into()),
        }
    })
}

/// Syncs `handle` the way case `case` says.
fn sync(mut handle: Handle<'_, '_>, case: usize) -> gaspi_coll::Result<()> {
    match case % 3 {
        0 => handle.wait_sync(TIMEOUT),
        1 => {
            while !handle.try_sync()? {
                std::thread::yield_now();
            }
            Ok(())
        }
        _ => loop {
            match handle.wait_sync(Timeout::Millis(0)) {
                Err(e) if e.is_timeout() => continue,
                other => break other,
            }
        },
    }
}

/// This member's destination of reduction `kind` of `len` (case `case`).
fn reduce(team: &Team<'_>, kind: &str, len: usize, case: usize) -> gaspi_coll::Result<Vec<u8>> {
    let me = team.index();
    let flags = if case.is_multiple_of(2) {
        Flags::MY
    } else {
        Flags::ALL
    };
    let builtin = |op| match kind {
        "sum_i64" | "sum_f64" => ReduceOp::Sum,
        "min_i64" | "min_f64" => ReduceOp::Min,
        _ => op,
    };
    let blocking = case % 4 == 3;
    if kind.ends_with("f64") {
        let src = cases::floats(kind, len, me);
        let mut dst = vec![f64::NAN; src.len()];
        let op = builtin(ReduceOp::Max);
        match blocking {
            true => team.allreduce(&src, &mut dst, op, flags, TIMEOUT)?,
            false => sync(team.allreduce_nb(&src, &mut dst, op, flags)?, case)?,
        }
        return Ok(cases::bytes_f(&dst));
    }
    let src = cases::ints(kind, len, me);
    let mut dst = vec![i64::MIN; src.len()];
    if kind == "affine_i64" {
        let op = UserOp::new(cases::affine).block(2);
        match blocking {
            true => team.allreduce_with(&src, &mut dst, &op, flags, TIMEOUT)?,
            false => sync(team.allreduce_with_nb(&src, &mut dst, &op, flags)?, case)?,
        }
    } else {
        let op = builtin(ReduceOp::Max);
        match blocking {
            true => team.allreduce(&src, &mut dst, op, flags, TIMEOUT)?,
            false => sync(team.allreduce_nb(&src, &mut dst, op, flags)?, case)?,
        }
    }
    Ok(cases::bytes_i(&dst))
}

fn values() -> Outcome<()> {
    let ctx = Context::init()?;
    {
        let coll = Collectives::new(&ctx)?;
        let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
        let mut line = Vec::new();
        let mut case = 0;
        for kind in cases::KINDS {
            let mut digest = Digest::default();
            for len in cases::LENGTHS {
                case += 1;
                let dst = reduce(&team, kind, len, case)
                    .map_err(|e| format!("{kind} of {len} (case {case}): {e}"))?;
                digest.add(&dst);
            }
            line.push(format!("{kind}={}", digest.hex()));
        }
        let src = vec![1i64; cases::LARGE];
        let mut dst = vec![0i64; cases::LARGE];
        let large = match team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::MY, TIMEOUT) {
            Ok(()) if dst.iter().all(|&x| x == i64::from(team.size())) => "Ok".to_string(),
            Ok(()) => "Wrong".to_string(),
            Err(gaspi_coll::Error::TooLarge { .. }) => "TooLarge".to_string(),
            Err(e) => format!("{e:?}"),
        };
        line.push(format!("large={large}"));
        // A non-commutative operator through pieces: each piece keeps member order.
        let affine = reduce(&team, "affine_i64", cases::LARGE / 2, case + 1)
            .map_err(|e| format!("affine_i64 of {} (large): {e}", cases::LARGE / 2))?;
        let mut digest = Digest::default();
        digest.add(&affine);
        line.push(format!("large_affine={}", digest.hex()));
        println!("data values rank {}: {}", ctx.rank(), line.join("; "));
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

fn many() -> Outcome<()> {
    let ctx = Context::init()?;
    {
        let coll = Collectives::new(&ctx)?;
        let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
        let me = team.index();
        let srcs: Vec<Vec<i64>> = (0..cases::MANY).map(|i| cases::many_src(i, me)).collect();
        let mut dsts: Vec<Vec<i64>> = (0..cases::MANY)
            .map(|i| vec![0; cases::many_want(i, team.size()).len() / 8])
            .collect();
        let mut handles: Vec<Handle<'_, '_>> = Vec::new();
        for (i, (dst, src)) in dsts.iter_mut().zip(&srcs).enumerate() {
            handles.push(match cases::many_len(i) {
                None => team.gather_all_nb(
                    bytemuck::cast_slice_mut(dst),
                    bytemuck::cast_slice(src),
                    Flags::MY,
                )?,
                Some(_) => team.allreduce_nb(src, dst, ReduceOp::Sum, Flags::MY)?,
            });
        }
        // Sync in an order of this rank's own.
        let synced = sync_shuffled(handles, u64::from(ctx.rank()) + 11, TIMEOUT)?;
        let mut digest = Digest::default();
        for dst in &dsts {
            digest.add(&cases::bytes_i(dst));
        }
        println!(
            "data many rank {}: synced={synced}; digest={}",
            ctx.rank(),
            digest.hex()
        );
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

fn late() -> Outcome<()> {
    let ctx = Context::init()?;
    {
        let coll = Collectives::new(&ctx)?;
        let team = Team::new(&coll, GROUP_ALL, TIMEOUT)?;
        let me = team.index();
        let digest = |dst: &[i64]| {
            let mut digest = Digest::default();
            digest.add(&cases::bytes_i(dst));
            digest.hex()
        };
        let src = cases::ints("sum_i64", cases::LATE, me);
        let mut dst = vec![i64::MIN; src.len()];
        let first = if me == 0 {
            match team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::MY, Timeout::Millis(1)) {
                Err(e) if e.is_timeout() && dst.iter().all(|&x| x == i64::MIN) => {
                    "Timeout".to_string()
                }
                Err(e) => format!("{e:?}"),
                Ok(()) => digest(&dst),
            }
        } else {
            std::thread::sleep(std::time::Duration::from_millis(300));
            team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::MY, TIMEOUT)?;
            digest(&dst)
        };
        let src = cases::ints("sum_i64", cases::LATE + 1, me);
        let mut dst = vec![i64::MIN; src.len()];
        team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::MY, TIMEOUT)?;
        println!(
            "data late rank {}: first={first}; second={}",
            ctx.rank(),
            digest(&dst)
        );
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// What a reduction that members disagree on gave this member.
fn kind(outcome: gaspi_coll::Result<()>) -> &'static str {
    match outcome {
        Ok(()) => "Ok",
        Err(gaspi_coll::Error::Mismatch { .. }) => "Mismatch",
        Err(e) if e.is_timeout() => "Timeout",
        Err(_) => "Other",
    }
}

/// How an allreduce of `src` with `op` ended here, where members may pass other arguments,
/// on a team of its own, dropped only once every member is done with it: a member that
/// failed early must not take its segment away from one still building the team.
fn disagreeing<T: Element>(
    coll: &Collectives<'_>,
    src: &[T],
    op: ReduceOp,
) -> Outcome<&'static str> {
    let team = Team::new(coll, GROUP_ALL, TIMEOUT)?;
    let mut dst = src.to_vec();
    let outcome = kind(team.allreduce(src, &mut dst, op, Flags::MY, Timeout::Millis(3_000)));
    coll.context().barrier(TIMEOUT)?;
    Ok(outcome)
}

fn mismatch() -> Outcome<()> {
    let ctx = Context::init()?;
    let first = ctx.rank() == 0;
    {
        let coll = Collectives::new(&ctx)?;
        let len = disagreeing(&coll, &vec![1i64; if first { 8 } else { 9 }], ReduceOp::Sum)?;
        let op = if first { ReduceOp::Sum } else { ReduceOp::Max };
        let op = disagreeing(&coll, &[1.5f64; 8], op)?;
        // An empty vector against 8 elements: it has steps to take too, so its partners
        // learn of it, and it of them.
        let empty = disagreeing(&coll, &vec![1i64; if first { 0 } else { 8 }], ReduceOp::Sum)?;
        println!(
            "data mismatch rank {}: len={len}; op={op}; empty={empty}",
            ctx.rank()
        );
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// The message of rank 0's panicking operator.
const OPERATOR_PANICS: &str = "the operator panics on rank 0";

/// The message of rank 0's code panicking between initiating and syncing.
const CALLER_PANICS: &str = "the caller panics before its sync";

/// A sum that panics on member 0 when `panics`.
fn summing(me: u32, panics: bool) -> UserOp<impl Fn(&mut [i64], &[i64]) + Clone + Send> {
    UserOp::new(move |acc: &mut [i64], other: &[i64]| {
        assert!(!(panics && me == 0), "{OPERATOR_PANICS}");
        for (a, b) in acc.iter_mut().zip(other) {
            *a += b;
        }
    })
}

/// How a call that may panic ended here: `Panicked` for the panic with `message`, `Ok` when
/// `dst` holds the sum of `1..=n` everywhere.
fn ended(
    called: std::thread::Result<gaspi_coll::Result<()>>,
    message: &str,
    dst: &[i64],
    n: u32,
) -> String {
    let sum = i64::from(n * (n + 1) / 2);
    match called {
        Err(panic) => {
            let said = panic
                .downcast_ref::<String>()
                .map(String::as_str)
                .or_else(|| panic.downcast_ref::<&str>().copied());
            match said {
                Some(said) if said == message => "Panicked".to_string(),
                said => format!("PanickedWith({said:?})"),
            }
        }
        Ok(Ok(())) if dst.iter().all(|&x| x == sum) => "Ok".to_string(),
        Ok(Ok(())) => "Wrong".to_string(),
        Ok(Err(e)) if e.is_timeout() => "Timeout".to_string(),
        Ok(Err(e)) => format!("{e:?}"),
    }
}

/// Runs `part` on a team of its own, dropped once every member is done with it.
fn on_team(coll: &Collectives<'_>, part: impl FnOnce(&Team<'_>) -> Outcome<()>) -> Outcome<()> {
    let team = Team::new(coll, GROUP_ALL, TIMEOUT)?;
    part(&team)?;
    coll.context().barrier(TIMEOUT)?;
    Ok(())
}

fn panics() -> Outcome<()> {
    let ctx = Context::init()?;
    let me = ctx.rank();
    let late = || std::thread::sleep(std::time::Duration::from_millis(300));
    // The others wait for rank 0's later steps at most this long (at more than 2 members).
    let short = Timeout::Millis(3_000);
    let mut line = Vec::new();
    {
        let coll = Collectives::new(&ctx)?;
        let n = ctx.size();
        let src = vec![i64::from(me) + 1; 4];
        let catching = |call: &mut dyn FnMut() -> gaspi_coll::Result<()>| {
            std::panic::catch_unwind(std::panic::AssertUnwindSafe(call))
        };
        let after = |team: &Team<'_>| {
            let mut dst = vec![0; src.len()];
            let summed = team.allreduce(&src, &mut dst, ReduceOp::Sum, Flags::MY, short);
            ended(Ok(summed), "", &dst, n)
        };
        on_team(&coll, |team| {
            let op = summing(me, true);
            let mut dst = vec![0; src.len()];
            if me != 0 {
                late();
            }
            let called =
                catching(&mut || team.allreduce_with(&src, &mut dst, &op, Flags::MY, short));
            line.push(format!("sync={}", ended(called, OPERATOR_PANICS, &dst, n)));
            line.push(format!("sync_after={}", after(team)));
            Ok(())
        })?;
        on_team(&coll, |team| {
            let op = summing(me, true);
            let mut dst = vec![0; src.len()];
            if me == 0 {
                late();
            }
            let called =
                catching(&mut || team.allreduce_with(&src, &mut dst, &op, Flags::EAGER, short));
            line.push(format!(
                "initiate={}",
                ended(called, OPERATOR_PANICS, &dst, n)
            ));
            Ok(())
        })?;
        on_team(&coll, |team| {
            let op = summing(me, false);
            let mut dst = vec![0; src.len()];
            let called = catching(&mut || {
                let mut handle = team.allreduce_with_nb(&src, &mut dst, &op, Flags::MY)?;
                assert!(me != 0, "{CALLER_PANICS}");
                handle.wait_sync(short)
            });
            line.push(format!("dropped={}", ended(called, CALLER_PANICS, &dst, n)));
            line.push(format!("dropped_after={}", after(team)));
            Ok(())
        })?;
        on_team(&coll, |team| {
            let op = summing(me, true);
            let mut dst = vec![0; src.len()];
            if me != 0 {
                late();
                let a = team.allreduce_with(&src, &mut dst, &op, Flags::MY, short);
                line.push(format!("thread_a={}", ended(Ok(a), "", &dst, n)));
                line.push(format!("thread_b={}", after(team)));
                return Ok(());
            }
            let (initiated, go_on) = std::sync::mpsc::channel();
            let (done, b_done) = std::sync::mpsc::channel();
            let a = std::thread::scope(|s| {
                let (src, dst, op) = (&src, &mut dst, &op);
                let a = s.spawn(move || {
                    let mut handle = team.allreduce_with_nb(src, dst, op, Flags::MY)?;
                    initiated.send(()).map_err(|e| e.to_string())?;
                    b_done.recv().map_err(|e| e.to_string())?;
                    let synced = catching(&mut || handle.wait_sync(short));
                    drop(handle);
                    Outcome::Ok(synced)
                });
                go_on.recv().map_err(|e| e.to_string())?;
                let mut sum = vec![0; src.len()];
                let b = catching(&mut || {
                    team.allreduce(src, &mut sum, ReduceOp::Sum, Flags::MY, short)
                });
                line.push(format!("thread_b={}", ended(b, "", &sum, n)));
                done.send(()).map_err(|e| e.to_string())?;
                a.join().map_err(|_| "thread a panicked")?
            })?;
            line.push(format!("thread_a={}", ended(a, OPERATOR_PANICS, &dst, n)));
            Ok(())
        })?;
        on_team(&coll, |team| {
            let op = summing(me, true);
            let src = vec![i64::from(me) + 1; cases::LARGE];
            let mut dst = vec![0; src.len()];
            let called =
                catching(&mut || team.allreduce_with(&src, &mut dst, &op, Flags::MY, short));
            line.push(format!(
                "pieces={}",
                ended(called, OPERATOR_PANICS, &dst, n)
            ));
            Ok(())
        })?;
        println!("data panic rank {me}: {}", line.join("; "));
    }
    ctx.barrier(TIMEOUT)?;
    ctx.finalize(TIMEOUT)?;
    Ok(())
}
