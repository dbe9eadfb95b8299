//! Checks of the post / start / complete / wait epochs of [`Window`] as real jobs:
//! `gaspirun -n 4 --provider shm pscw_check epochs 1000`. Every rank prints one line per check,
//! `data <scenario> rank R: key=value; ...`, with what it received (counts, a digest of every
//! byte) and what each misuse returned (`Variant { fields }`), which `coll/tests/pscw.rs`
//! recomputes and judges.
//!
//! Scenarios (the first argument):
//! * `epochs E`: for each pattern of `pattern.rs` (a ring whose stride changes every epoch,
//!   all-to-one with a root that changes every epoch, origin sets drawn afresh every epoch,
//!   a 2-D stencil whose neighbours write or not, drawn afresh every epoch),
//!   `E` epochs on a window of its own (the four windows are open at once). Each target clears
//!   its receive area before it posts and checks it after its wait: a block from another
//!   epoch, or one that landed before the post or after the wait, shows as a mismatch. Origins
//!   alternate `start` + two `write`s per target (the halves of its block) + `complete`,
//!   `start_one` + `write` + `complete_one` per target, and `start` + `write_list` +
//!   `complete`; targets alternate `wait` with `test` first. Lines
//!   `data epochs-<pattern> rank R: epochs; received; mismatches; digest`.
//! * `nocheck E`: a ring of `E` NOCHECK epochs, each post ordered before the matching start
//!   by a barrier: `data nocheck rank R: epochs; mismatches; digest`.
//! * `double E` (3 ranks or more): NOCHECK double buffering between ring neighbours (each
//!   writes to both), on two windows over two segments: epoch `e` uses buffer `e % 2`, and
//!   each rank posts the other buffer for epoch `e + 1` before it completes epoch `e`, so a
//!   neighbour's wait for epoch `e` orders that post before its NOCHECK start of `e + 1`,
//!   with no other synchronisation. Only the first epoch has the handshake:
//!   `data double rank R: epochs; received; mismatches; digest`.
//! * `threads` (2 ranks): on rank 1, one thread waits in an exposure epoch of one window
//!   while another runs 100 epochs of a second window with rank 0, which serves the first
//!   window only after those: `data threads rank 1: first; received; mismatches; digest`.
//! * `overlap` (5 ranks or more): ranks 3 and 4 post to rank 0 before ranks 1 and 2 do; rank 0
//!   starts 1 and 2 first, which must not count the posts of 3 and 4 (`first_try`), then 3
//!   and 4.
//! * `xyzu` (3 ranks): the proposal's cases on target 0 with origins 1 and 2, whose starts are
//!   all made before the matching post: (X) the origin set changes from 1 to 2, (Y) origin 2
//!   starts before the target posts to it, (Z) origin 2 starts again right after its complete,
//!   while the target has not posted anew, (U) origin 1 starts again (it took over origin 2's
//!   task) while the target serves 2. Each start must match the post meant for it: the target
//!   clears its area before each post and checks it after each wait (`steps`, `received`,
//!   `mismatches`, `digest`).
//! * `errors` (2 ranks or more): windows made over different segments at once (`crossed`),
//!   every misuse on ranks 0 and 1, a start and a wait that time out naming the rank
//!   waited for and are then continued, and `test` (false, then true once, then an error);
//!   a rank listed twice in a post and in a start counts once.
//! * `remade` (2 ranks): the window's segment made anew, larger, between epochs, then deleted,
//!   then made again: how each write, complete and wait ended, and on rank 1 how many bytes
//!   of each block were wrong (`first`, `larger`, `gone`, `again`); then a `start_any` that
//!   finds a rank whose window segment is gone, and the next one (`found_gone`).
//! * `one` (3 ranks): rank 0 starts ranks 1 and 2 one by one; rank 2 has posted, rank 1 posts
//!   only once rank 0 served rank 2: `start_one(2)` and `complete_one(2)` must not wait for
//!   rank 1 (`pending`, `started`, `completed`), and the resumed `start_one(1)` then serves it
//!   (`resumed`). Then a post to a rank that dropped its window and to one that did not
//!   (`told_post`, `told_wait`, `told_start`; see `told`).
//! * `any`: ranks 1.. post to rank 0 one after the other, the highest first, each once the
//!   one above it was served (a passive message tells it); rank 0 serves them with
//!   `start_any` in the order their posts arrive (`order`).
//! * `full` (2 ranks, through the fabric, without progress threads): 3 epochs in which rank 1
//!   posts to rank 0, then makes no call for 1.5 s, so that nothing rank 0 writes to it
//!   completes; rank 0 writes blocks of [`FULL_BLOCK`] bytes to it until the window's batch
//!   is full, then completes, which must wait for room to tell rank 1 rather than fail:
//!   `data full rank R: rounds=<epoch>,...`, each epoch on rank 0 `<the error that stopped
//!   the writes>/<writes>/<complete>`, on rank 1 `<wait>/<the block: ok or wrong>`.
//! * `kill` (3 ranks, under `gaspirun --keep-going`): rank 0 posts to ranks 1 and 2; rank 2
//!   starts, writes and is killed (SIGKILL) before it completes; rank 1 completes, then starts
//!   rank 2 (after a first epoch with it), which never posts to it again. Rank 0's wait and
//!   rank 1's start must name rank 2 (`outcome`), and rank 1's data must be there. Then the
//!   survivors go on with the window: rank 1 completes the epoch with the dead rank
//!   (`ended`), and starts rank 0 and rank 2 together (`both`, naming rank 2 once rank 0
//!   posted), writes to rank 0 (a write to rank 2 names it: `to_dead`), completes
//!   (`closed`) and looks for a post with `start_any`, which times out (`any`); rank 0 posts
//!   to ranks 1 and 2 again (`again` names rank 2), polls with `test` until it names rank 2
//!   (`tested`), which closed the epoch (`after`), and finds rank 1's data (`block2`).

#![forbid(unsafe_code)]

#[path = "../support/data.rs"]
mod data;
mod pattern;

use std::process::ExitCode;
use std::time::Duration;

use gaspi::{Config, Context, Intranode, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Assert, Collectives, Window};

use data::Digest;
use pattern::{Pattern, BLOCK, XYZU};

/// The timeout of every call that is not meant to time out.
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// The window segment: origin `o` writes at `o * BLOCK`.
const WIN: gaspi::SegmentId = 0;
/// The source segment: the block for target `t` is packed at `t * BLOCK`.
const SRC: gaspi::SegmentId = 1;
/// The second buffer of the `double` scenario, laid out as [`WIN`].
const WIN2: gaspi::SegmentId = 2;

type Outcome<T = ()> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["epochs", e] => e
            .parse()
            .map_err(|_| "epochs E: a number of epochs".into())
            .and_then(|e| in_job(|ctx, coll| epochs(ctx, coll, e))),
        ["nocheck", e] => e
            .parse()
            .map_err(|_| "nocheck E: a number of epochs".into())
            .and_then(|e| in_job(|ctx, coll| nocheck(ctx, coll, e))),
        ["double", e] => e
            .parse()
            .map_err(|_| "double E: a number of epochs".into())
            .and_then(|e| in_job(|ctx, coll| double(ctx, coll, e))),
        ["overlap"] => in_job(overlap),
        ["threads"] => in_job(threads),
        ["errors"] => in_job(errors),
        ["remade"] => in_job(remade),
        ["xyzu"] => in_job(xyzu),
        ["any"] => in_job(any),
        ["one"] => in_job(one),
        ["full"] => in_job(full),
        ["kill"] => kill(),
        _ => Err(
            "usage: pscw_check epochs E | nocheck E | double E | threads | overlap | xyzu | errors | remade | any | one | full | kill".into(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // One write: a rank killed mid-line (another rank failed first, so gaspirun ends
            // the job) leaves no half message.
            let line = format!("pscw_check: {e}\n");
            let _ = std::io::Write::write_all(&mut std::io::stderr(), line.as_bytes());
            ExitCode::FAILURE
        }
    }
}

/// Runs `scenario` with the window and source segments created and the collectives
/// registered, then finalizes.
fn in_job(scenario: impl FnOnce(&Context, &Collectives<'_>) -> Outcome) -> Outcome {
    let ctx = setup(Context::init()?)?;
    {
        let coll = Collectives::new(&ctx)?;
        scenario(&ctx, &coll)?;
        ctx.barrier(TIMEOUT)?;
    }
    ctx.finalize(TIMEOUT)?;
    Ok(())
}

/// `ctx` with the window and source segments.
fn setup(ctx: Context) -> Outcome<Context> {
    let bytes = u64::from(ctx.size()) * BLOCK;
    ctx.segment_create(WIN, bytes, TIMEOUT)?;
    ctx.segment_create(SRC, bytes, TIMEOUT)?;
    ctx.segment_create(WIN2, bytes, TIMEOUT)?;
    Ok(ctx)
}

/// What a target saw over its epochs.
#[derive(Default)]
struct Received {
    blocks: u64,
    mismatches: u64,
    digest: Digest,
}

impl Received {
    /// Checks the receive area after the exposure epoch `epoch` of `origins`: each origin's
    /// block in its slot, zeros everywhere else.
    fn check(&mut self, ctx: &Context, epoch: u64, origins: &[Rank]) -> Outcome {
        self.check_in(ctx, WIN, epoch, origins)
    }

    /// [`check`](Self::check) of the receive area in segment `segment`.
    fn check_in(
        &mut self,
        ctx: &Context,
        segment: gaspi::SegmentId,
        epoch: u64,
        origins: &[Rank],
    ) -> Outcome {
        let n = ctx.size();
        let mut area = vec![0u8; (u64::from(n) * BLOCK) as usize];
        ctx.segment_read(segment, 0, &mut area)?;
        for (o, slot) in (0..n).zip(area.chunks(BLOCK as usize)) {
            let expected = if origins.contains(&o) {
                pattern::block(epoch, o, ctx.rank())
            } else {
                Vec::new()
            };
            let (head, rest) = slot.split_at(expected.len());
            if origins.contains(&o) {
                self.blocks += 1;
                self.digest.add(head);
            }
            if head != expected.as_slice() || rest.iter().any(|&b| b != 0) {
                self.mismatches += 1;
            }
        }
        Ok(())
    }

    fn report(&self, scenario: &str, ctx: &Context, epochs: u64) -> Outcome {
        println!(
            "data {scenario} rank {}: epochs={epochs}; received={}; mismatches={}; digest={}",
            ctx.rank(),
            self.blocks,
            self.mismatches,
            self.digest.hex()
        );
        if self.mismatches > 0 {
            return Err(format!("{scenario}: {} mismatched slots", self.mismatches).into());
        }
        Ok(())
    }
}

/// Clears the receive area: a local store before the post, as MPI allows.
fn clear(ctx: &Context) -> Outcome {
    clear_in(ctx, WIN)
}

/// Clears the receive area in segment `segment`.
fn clear_in(ctx: &Context, segment: gaspi::SegmentId) -> Outcome {
    let zeros = vec![0; (u64::from(ctx.size()) * BLOCK) as usize];
    ctx.segment_write(segment, 0, &zeros)?;
    Ok(())
}

fn epochs(ctx: &Context, coll: &Collectives<'_>, epochs: u64) -> Outcome {
    let mut windows = Vec::new();
    for _ in Pattern::ALL {
        windows.push(Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?);
    }
    let (n, me) = (ctx.size(), ctx.rank());
    for (pattern, win) in Pattern::ALL.into_iter().zip(&mut windows) {
        let mut received = Received::default();
        for e in 1..=epochs {
            let origins = pattern::origins(pattern, n, me, e);
            let targets = pattern::targets(pattern, n, me, e);
            clear(ctx)?;
            win.post(&origins, Assert::NONE, TIMEOUT)?;
            for &t in &targets {
                ctx.segment_write(SRC, u64::from(t) * BLOCK, &pattern::block(e, me, t))?;
            }
            let at = |t: Rank| u64::from(t) * BLOCK;
            let len = |t: Rank| pattern::block(e, me, t).len() as u64;
            match e % 3 {
                0 => {
                    // Each block in two writes, every target's first half before any second
                    // half: a window holds the last small write to each target back (see
                    // `Window::write`), so this has one held per target at a time, and
                    // each one's first half goes out when its second half comes.
                    win.start(&targets, Assert::NONE, TIMEOUT)?;
                    for part in 0..2 {
                        for &t in &targets {
                            let half = len(t) / 2;
                            let (skip, bytes) = match part {
                                0 => (0, half),
                                _ => (half, len(t) - half),
                            };
                            win.write(SRC, at(t) + skip, t, at(me) + skip, bytes)?;
                        }
                    }
                    win.complete(TIMEOUT)?;
                }
                1 => {
                    for &t in &targets {
                        win.start_one(t, Assert::NONE, TIMEOUT)?;
                        win.write(SRC, at(t), t, at(me), len(t))?;
                        win.complete_one(t, TIMEOUT)?;
                    }
                }
                _ => {
                    win.start(&targets, Assert::NONE, TIMEOUT)?;
                    for &t in &targets {
                        let half = len(t) / 2;
                        let blocks = [
                            (at(t), at(me), half),
                            (at(t) + half, at(me) + half, len(t) - half),
                        ];
                        win.write_list(SRC, t, &blocks)?;
                    }
                    win.complete(TIMEOUT)?;
                }
            }
            if e % 4 != 3 || !win.test()? {
                win.wait(TIMEOUT)?;
            }
            received.check(ctx, e, &origins)?;
        }
        received.report(&format!("epochs-{}", pattern.name()), ctx, epochs)?;
    }
    Ok(())
}

fn nocheck(ctx: &Context, coll: &Collectives<'_>, epochs: u64) -> Outcome {
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let (n, me) = (ctx.size(), ctx.rank());
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let mut received = Received::default();
    for e in 1..=epochs {
        clear(ctx)?;
        win.post(&[left], Assert::NOCHECK | Assert::NOSTORE, TIMEOUT)?;
        // What NOCHECK promises: every post happened before the matching start.
        ctx.barrier(TIMEOUT)?;
        let block = pattern::block(e, me, right);
        let at = u64::from(right) * BLOCK;
        ctx.segment_write(SRC, at, &block)?;
        win.start(&[right], Assert::NOCHECK, TIMEOUT)?;
        win.write(SRC, at, right, u64::from(me) * BLOCK, block.len() as u64)?;
        win.complete(TIMEOUT)?;
        win.wait(TIMEOUT)?;
        received.check(ctx, e, &[left])?;
    }
    received.report("nocheck", ctx, epochs)
}

fn double(ctx: &Context, coll: &Collectives<'_>, epochs: u64) -> Outcome {
    let (n, me) = (ctx.size(), ctx.rank());
    if n < 3 {
        return Err("double needs 3 ranks".into());
    }
    let segments = [WIN, WIN2];
    let mut windows = [
        Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?,
        Window::new(coll, GROUP_ALL, WIN2, TIMEOUT)?,
    ];
    let mut neighbours = vec![(me + n - 1) % n, (me + 1) % n];
    neighbours.sort_unstable();
    let mut received = Received::default();
    // Epoch 0's buffer is posted with the handshake: nothing ordered it yet.
    clear_in(ctx, segments[0])?;
    windows[0].post(&neighbours, Assert::NONE, TIMEOUT)?;
    for e in 0..epochs {
        let (x, y) = ((e % 2) as usize, ((e + 1) % 2) as usize);
        // The other buffer for epoch e + 1, before this epoch's complete: every neighbour's
        // wait for epoch e sees that complete, so its start of e + 1 follows this post.
        if e + 1 < epochs {
            clear_in(ctx, segments[y])?;
            windows[y].post(&neighbours, Assert::NOCHECK, TIMEOUT)?;
        }
        let assert = if e == 0 {
            Assert::NONE
        } else {
            Assert::NOCHECK
        };
        windows[x].start(&neighbours, assert, TIMEOUT)?;
        for &t in &neighbours {
            let block = pattern::block(e + 1, me, t);
            let at = u64::from(t) * BLOCK;
            ctx.segment_write(SRC, at, &block)?;
            let dst = u64::from(me) * BLOCK;
            windows[x].write(SRC, at, t, dst, block.len() as u64)?;
        }
        windows[x].complete(TIMEOUT)?;
        windows[x].wait(TIMEOUT)?;
        received.check_in(ctx, segments[x], e + 1, &neighbours)?;
    }
    received.report("double", ctx, epochs)
}

/// Writes this rank's epoch-1 block for `target` through `win` (started to it).
fn put(ctx: &Context, win: &mut Window<'_>, target: Rank) -> Outcome {
    put_in(ctx, win, target, 1)
}

/// Writes this rank's block of epoch `epoch` for `target` through `win` (started to it).
fn put_in(ctx: &Context, win: &mut Window<'_>, target: Rank, epoch: u64) -> Outcome {
    let block = pattern::block(epoch, ctx.rank(), target);
    let at = u64::from(target) * BLOCK;
    ctx.segment_write(SRC, at, &block)?;
    let dst = u64::from(ctx.rank()) * BLOCK;
    win.write(SRC, at, target, dst, block.len() as u64)?;
    Ok(())
}

/// An access epoch to `target` alone, with this rank's epoch-1 block for it.
fn access(ctx: &Context, win: &mut Window<'_>, target: Rank) -> Outcome {
    access_in(ctx, win, target, 1)
}

/// An access epoch to `target` alone, with this rank's block of epoch `epoch` for it.
fn access_in(ctx: &Context, win: &mut Window<'_>, target: Rank, epoch: u64) -> Outcome {
    win.start(&[target], Assert::NONE, TIMEOUT)?;
    put_in(ctx, win, target, epoch)?;
    win.complete(TIMEOUT)?;
    Ok(())
}

fn xyzu(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    if ctx.size() != 3 {
        return Err("xyzu needs 3 ranks".into());
    }
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let me = ctx.rank();
    let mut received = Received::default();
    if me == 0 {
        for (step, origin) in (1..).zip(XYZU) {
            // Give the origins time to start early: each start must still wait for its post.
            std::thread::sleep(Duration::from_millis(50));
            clear(ctx)?;
            win.post(&[origin], Assert::NONE, TIMEOUT)?;
            win.wait(TIMEOUT)?;
            received.check(ctx, step, &[origin])?;
        }
    } else {
        for (step, _) in (1..).zip(XYZU).filter(|&(_, origin)| origin == me) {
            access_in(ctx, &mut win, 0, step)?;
        }
    }
    received.report("xyzu", ctx, XYZU.len() as u64)
}

/// `Variant { fields }` of an outcome, for the report.
fn shown<T: std::fmt::Debug>(result: gaspi_coll::Result<T>) -> String {
    match result {
        Ok(value) => format!("Ok({value:?})"),
        // Only the dead rank: the rest of the message depends on how it was found dead.
        Err(gaspi_coll::Error::Gaspi(gaspi::Error::RankFailed { rank, .. })) => {
            format!("RankFailed({rank})")
        }
        Err(gaspi_coll::Error::Gaspi(e)) => format!("{e:?}"),
        Err(e) => format!("{e:?}"),
    }
}

/// A segment of its own for `remade`, made anew between epochs.
const REMADE: gaspi::SegmentId = 3;

/// One epoch of `remade`, rank 0 to rank 1: `writes` (offset, length) of bytes that name
/// the epoch, each checked on rank 1 once its wait returned. Returns how each call ended.
fn remade_epoch(
    ctx: &Context,
    win: &mut Window<'_>,
    epoch: u64,
    writes: &[(u64, u64)],
) -> Outcome<String> {
    let byte = |at: u64| (epoch as u8).wrapping_mul(31) ^ (at as u8);
    let mut seen = Vec::new();
    if ctx.rank() == 0 {
        win.start(&[1], Assert::NONE, TIMEOUT)?;
        for &(at, len) in writes {
            let bytes: Vec<u8> = (at..at + len).map(byte).collect();
            ctx.segment_write(SRC, at, &bytes)?;
            seen.push(shown(win.write(SRC, at, 1, at, len)));
        }
        seen.push(shown(win.complete(TIMEOUT)));
    } else {
        win.post(&[0], Assert::NONE, TIMEOUT)?;
        seen.push(shown(win.wait(TIMEOUT)));
        // Nothing to read where the segment is gone.
        let present = ctx.segment_size(REMADE).is_ok();
        for &(at, len) in writes.iter().filter(|_| present) {
            let mut got = vec![0; len as usize];
            ctx.segment_read(REMADE, at, &mut got)?;
            let wrong = (at..at + len)
                .zip(&got)
                .filter(|&(i, &b)| b != byte(i))
                .count();
            seen.push(format!("{wrong} wrong"));
        }
    }
    ctx.barrier(TIMEOUT)?;
    Ok(seen.join(","))
}

/// `remade` on 2 ranks: the window's segment is made anew between epochs, larger, then
/// deleted, then made again (every rank's: creation is collective). Writes beyond the first size land; writes into the
/// segment while it is gone fail at the call, the same on both paths, and the epoch still
/// ends on both sides.
fn remade(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    let me = ctx.rank();
    // Its epochs pair rank 0 with rank 1 alone: a third rank would wait for a post forever.
    if ctx.size() != 2 {
        return Err("remade needs 2 ranks".into());
    }
    ctx.segment_create(REMADE, 4096, TIMEOUT)?;
    ctx.segment_delete(SRC)?;
    ctx.segment_create(SRC, 16384, TIMEOUT)?;
    let mut win = Window::new(coll, GROUP_ALL, REMADE, TIMEOUT)?;
    let first = remade_epoch(ctx, &mut win, 1, &[(0, 64)])?;
    ctx.segment_delete(REMADE)?;
    ctx.segment_create(REMADE, 16384, TIMEOUT)?;
    let larger = remade_epoch(ctx, &mut win, 2, &[(10000, 64), (2000, 6000)])?;
    ctx.segment_delete(REMADE)?;
    ctx.barrier(TIMEOUT)?;
    let gone = remade_epoch(ctx, &mut win, 3, &[(0, 64)])?;
    ctx.segment_create(REMADE, 4096, TIMEOUT)?;
    let again = remade_epoch(ctx, &mut win, 4, &[(100, 64)])?;
    let found_gone = found_gone(ctx, coll)?;
    println!(
        "data remade rank {me}: first={first}; larger={larger}; gone={gone}; again={again}; \
         found_gone={found_gone}"
    );
    Ok(())
}

/// A segment of `found_gone`, deleted on rank 1 before rank 0 ever reached it.
const FOUND_GONE: gaspi::SegmentId = 4;

/// On a window rank 0 never started before: rank 1 deletes the window's segment, then posts;
/// rank 0's `start_any` finds rank 1 and fails to reach its window, and `complete` ends
/// rank 1's exposure epoch. In the next epoch nobody posts: rank 0's `start_any` must time
/// out (before the fix it returned rank 1, left over from the failed call). Rank 0:
/// `<start_any>,<complete>,<start_any>`; rank 1: `<wait>`.
fn found_gone(ctx: &Context, coll: &Collectives<'_>) -> Outcome<String> {
    ctx.segment_create(FOUND_GONE, 64, TIMEOUT)?;
    let mut win = Window::new(coll, GROUP_ALL, FOUND_GONE, TIMEOUT)?;
    if ctx.rank() == 1 {
        ctx.segment_delete(FOUND_GONE)?;
    }
    ctx.barrier(TIMEOUT)?;
    let seen = if ctx.rank() == 0 {
        let found = shown(win.start_any(TIMEOUT));
        let completed = shown(win.complete(TIMEOUT));
        let next = shown(win.start_any(Timeout::Millis(300)));
        format!("{found},{completed},{next}")
    } else {
        win.post(&[0], Assert::NONE, TIMEOUT)?;
        shown(win.wait(TIMEOUT))
    };
    ctx.barrier(TIMEOUT)?;
    Ok(seen)
}

/// The window segment of `full`, and its source.
const FULL_WIN: gaspi::SegmentId = 5;
const FULL_SRC: gaspi::SegmentId = 6;
/// Bytes of each write in `full`: above the 4 KiB a window holds back, and above what shm
/// injects, so every write stays in the batch until the target's progress completes it.
const FULL_BLOCK: u64 = 4100;
/// Writes `full` makes at most per epoch: more than a window's batch holds.
const FULL_WRITES: u32 = 70_000;
/// Epochs of `full`: whether a write completes anyway before `complete` looks (which gave
/// the old code room) varies from run to run, so one epoch found the fault in 3 of 4 runs.
const FULL_ROUNDS: u8 = 3;

fn full(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    if ctx.size() != 2 {
        return Err("full needs 2 ranks".into());
    }
    ctx.segment_create(FULL_WIN, FULL_BLOCK, TIMEOUT)?;
    ctx.segment_create(FULL_SRC, FULL_BLOCK, TIMEOUT)?;
    let byte = |round: u8, at: u64| (at as u8).wrapping_mul(7) ^ round;
    let mut win = Window::new(coll, GROUP_ALL, FULL_WIN, TIMEOUT)?;
    let mut seen = Vec::new();
    for round in 0..FULL_ROUNDS {
        if ctx.rank() == 0 {
            let bytes: Vec<u8> = (0..FULL_BLOCK).map(|at| byte(round, at)).collect();
            ctx.segment_write(FULL_SRC, 0, &bytes)?;
            win.start(&[1], Assert::NONE, TIMEOUT)?;
            let mut writes = 0;
            let mut filled = "none".to_owned();
            while writes < FULL_WRITES {
                match win.write(FULL_SRC, 0, 1, 0, FULL_BLOCK) {
                    Ok(()) => writes += 1,
                    Err(e) => {
                        filled = shown::<()>(Err(e));
                        break;
                    }
                }
            }
            let completed = shown(win.complete(TIMEOUT));
            seen.push(format!("{filled}/{writes}/{completed}"));
        } else {
            win.post(&[0], Assert::NONE, TIMEOUT)?;
            std::thread::sleep(Duration::from_millis(1500));
            let waited = shown(win.wait(TIMEOUT));
            let mut got = vec![0; FULL_BLOCK as usize];
            ctx.segment_read(FULL_WIN, 0, &mut got)?;
            let right = got.iter().zip(0..).all(|(&b, at)| b == byte(round, at));
            seen.push(format!("{waited}/{}", if right { "ok" } else { "wrong" }));
        }
        ctx.barrier(TIMEOUT)?;
    }
    println!("data full rank {}: rounds={}", ctx.rank(), seen.join(","));
    Ok(())
}

/// Epochs of the second window in `threads`.
const THREAD_EPOCHS: u64 = 100;

fn threads(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    if ctx.size() != 2 {
        return Err("threads needs 2 ranks".into());
    }
    let mut first = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let mut second = Window::new(coll, GROUP_ALL, WIN2, TIMEOUT)?;
    if ctx.rank() == 0 {
        for e in 1..=THREAD_EPOCHS {
            access_in(ctx, &mut second, 1, e)?;
        }
        // The first window's epoch comes last: rank 1's waiting thread waited all along.
        return access_in(ctx, &mut first, 1, THREAD_EPOCHS + 1);
    }
    let (waited, served) = std::thread::scope(|s| {
        let waiter = s.spawn(|| -> Outcome<Received> {
            let mut received = Received::default();
            clear(ctx)?;
            first.post(&[0], Assert::NONE, TIMEOUT)?;
            first.wait(TIMEOUT)?;
            received.check(ctx, THREAD_EPOCHS + 1, &[0])?;
            Ok(received)
        });
        let server = s.spawn(|| -> Outcome<Received> {
            let mut received = Received::default();
            for e in 1..=THREAD_EPOCHS {
                clear_in(ctx, WIN2)?;
                second.post(&[0], Assert::NONE, TIMEOUT)?;
                second.wait(TIMEOUT)?;
                received.check_in(ctx, WIN2, e, &[0])?;
            }
            Ok(received)
        });
        (joined(waiter), joined(server))
    });
    let (waited, served) = (waited?, served?);
    println!(
        "data threads rank 1: first={}; received={}; mismatches={}; digest={}",
        waited.blocks,
        served.blocks,
        waited.mismatches + served.mismatches,
        served.digest.hex()
    );
    Ok(())
}

/// The outcome of a scoped thread; a panic is a failure.
fn joined<T>(handle: std::thread::ScopedJoinHandle<'_, Outcome<T>>) -> Outcome<T> {
    handle.join().map_err(|_| "a thread panicked")?
}

fn overlap(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    if ctx.size() < 5 {
        return Err("overlap needs 5 ranks".into());
    }
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let me = ctx.rank();
    clear(ctx)?;
    if me >= 3 {
        win.post(&[0], Assert::NONE, TIMEOUT)?;
    }
    ctx.barrier(TIMEOUT)?;
    let mut first_try = String::from("none");
    if me == 0 {
        // Ranks 1 and 2 post only after the next barrier: the posts of 3 and 4 are here,
        // and must not open an epoch started with 1 and 2.
        first_try = loop {
            match win.start(&[1, 2], Assert::NONE, Timeout::Test) {
                // The first lookup of a target's tables takes a round trip through the
                // fabric; it goes on meanwhile, and a later call finds it done.
                Err(gaspi_coll::Error::Gaspi(gaspi::Error::Timeout)) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => break shown(other),
            }
        };
    }
    ctx.barrier(TIMEOUT)?;
    if me == 1 || me == 2 {
        win.post(&[0], Assert::NONE, TIMEOUT)?;
    }
    if me == 0 {
        win.start(&[1, 2], Assert::NONE, TIMEOUT)?;
        put(ctx, &mut win, 1)?;
        put(ctx, &mut win, 2)?;
        win.complete(TIMEOUT)?;
        win.start(&[3, 4], Assert::NONE, TIMEOUT)?;
        put(ctx, &mut win, 3)?;
        put(ctx, &mut win, 4)?;
        win.complete(TIMEOUT)?;
    }
    let mut received = Received::default();
    if (1..=4).contains(&me) {
        win.wait(TIMEOUT)?;
        received.check(ctx, 1, &[0])?;
    }
    println!(
        "data overlap rank {me}: first_try={first_try}; received={}; mismatches={}",
        received.blocks, received.mismatches
    );
    Ok(())
}

fn errors(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    let (n, me) = (ctx.size(), ctx.rank());
    if n < 2 {
        return Err("errors needs 2 ranks or more".into());
    }
    let mut seen: Vec<(&str, String)> = Vec::new();
    // Windows made in different orders on the members (over different segments here): each
    // member is told, and the next creation starts afresh.
    let crossed = Window::new(coll, GROUP_ALL, if me == 0 { WIN } else { SRC }, TIMEOUT);
    seen.push(("crossed", shown(crossed.map(|_| ()))));
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let short = Timeout::Millis(200);
    clear(ctx)?;
    if me == 0 {
        seen.push(("complete", shown(win.complete(TIMEOUT))));
        seen.push(("complete_one", shown(win.complete_one(1, TIMEOUT))));
        seen.push(("wait", shown(win.wait(TIMEOUT))));
        seen.push(("test", shown(win.test())));
        seen.push(("stranger", shown(win.start(&[n], Assert::NONE, TIMEOUT))));
        let unknown = Assert::from_bits_retain(0x80);
        seen.push(("unknown_assert", shown(win.start(&[1], unknown, TIMEOUT))));
        seen.push(("unknown_post", shown(win.post(&[1], unknown, TIMEOUT))));
        seen.push(("unstarted", shown(win.write(SRC, 0, 1, 0, 8))));
        // Rank 1 posts only after the barrier below: the start times out naming it.
        seen.push(("unposted", shown(win.start(&[1], Assert::NONE, short))));
        seen.push(("early_write", shown(win.write(SRC, 0, 1, 0, 8))));
        seen.push(("other_start", shown(win.start(&[0], Assert::NONE, TIMEOUT))));
    }
    ctx.barrier(TIMEOUT)?;
    if me == 1 {
        // A rank given twice counts once: origin 0's one complete ends the wait below.
        win.post(&[0, 0], Assert::NONE, TIMEOUT)?;
        seen.push(("second_post", shown(win.post(&[0], Assert::NONE, TIMEOUT))));
    }
    if me == 0 {
        // The start that timed out, resumed with its one target given twice.
        seen.push(("resumed", shown(win.start(&[1, 1], Assert::NONE, TIMEOUT))));
        put(ctx, &mut win, 1)?;
        seen.push(("outside", shown(win.complete_one(0, TIMEOUT))));
        seen.push((
            "second_start",
            shown(win.start_one(1, Assert::NONE, TIMEOUT)),
        ));
        seen.push(("done", shown(win.complete(TIMEOUT))));
    }
    let mut received = Received::default();
    if me == 1 {
        win.wait(TIMEOUT)?;
        received.check(ctx, 1, &[0])?;
        // A wait that times out names the origin, and is continued.
        clear(ctx)?;
        win.post(&[0], Assert::NONE, TIMEOUT)?;
        seen.push(("short_wait", shown(win.wait(short))));
    }
    ctx.barrier(TIMEOUT)?;
    if me == 0 {
        access(ctx, &mut win, 1)?;
    }
    if me == 1 {
        seen.push(("resumed_wait", shown(win.wait(TIMEOUT))));
        received.check(ctx, 1, &[0])?;
        // test: false while the origin has not started (it starts after the barrier).
        clear(ctx)?;
        win.post(&[0], Assert::NONE, TIMEOUT)?;
        seen.push(("test_before", shown(win.test())));
    }
    ctx.barrier(TIMEOUT)?;
    if me == 0 {
        access(ctx, &mut win, 1)?;
    }
    if me == 1 {
        // The example polls as an application may; the window itself never spins.
        let mut polls = 0;
        while !win.test()? {
            polls += 1;
            if polls > 30_000 {
                return Err("test never turned true".into());
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        seen.push(("test_after", "Ok(true)".into()));
        seen.push(("test_again", shown(win.test())));
        received.check(ctx, 1, &[0])?;
    }
    let pairs: Vec<String> = seen.iter().map(|(k, v)| format!("{k}={v}")).collect();
    println!(
        "data errors rank {me}: {}; received={}; mismatches={}",
        pairs.join("; "),
        received.blocks,
        received.mismatches
    );
    Ok(())
}

fn any(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let (n, me) = (ctx.size(), ctx.rank());
    clear(ctx)?;
    ctx.barrier(TIMEOUT)?;
    let mut received = Received::default();
    let mut order = Vec::new();
    if me == 0 {
        for _ in 1..n {
            let t = win.start_any(TIMEOUT)?;
            put(ctx, &mut win, t)?;
            win.complete_one(t, TIMEOUT)?;
            order.push(t.to_string());
        }
    } else {
        // The highest rank posts first, each lower one once the one above it was served
        // (a passive message from it says so): posts arrive in this order whatever the load.
        if me + 1 < n {
            let (from, _) = ctx.passive_receive(TIMEOUT)?;
            if from != me + 1 {
                return Err(format!("a go-ahead from rank {from}, not {}", me + 1).into());
            }
        }
        win.post(&[0], Assert::NONE, TIMEOUT)?;
        win.wait(TIMEOUT)?;
        received.check(ctx, 1, &[0])?;
        if me > 1 {
            ctx.passive_send(me - 1, b"served", TIMEOUT)?;
        }
    }
    let order = if order.is_empty() {
        "none".to_owned()
    } else {
        order.join("/")
    };
    println!(
        "data any rank {me}: order={order}; received={}; mismatches={}",
        received.blocks, received.mismatches
    );
    Ok(())
}

fn one(ctx: &Context, coll: &Collectives<'_>) -> Outcome {
    if ctx.size() != 3 {
        return Err("one needs 3 ranks".into());
    }
    let mut win = Window::new(coll, GROUP_ALL, WIN, TIMEOUT)?;
    let me = ctx.rank();
    // Long enough for any post that is coming, short against the job's timeout.
    let short = Timeout::Millis(5_000);
    let mut seen: Vec<(&str, String)> = Vec::new();
    let mut received = Received::default();
    clear(ctx)?;
    if me == 2 {
        win.post(&[0], Assert::NONE, TIMEOUT)?;
    }
    ctx.barrier(TIMEOUT)?;
    match me {
        0 => {
            // Long enough to look rank 1's tables up through the fabric; it posts later.
            let pending = win.start_one(1, Assert::NONE, Timeout::Millis(200));
            seen.push(("pending", shown(pending)));
            seen.push(("started", shown(win.start_one(2, Assert::NONE, short))));
            put(ctx, &mut win, 2)?;
            seen.push(("completed", shown(win.complete_one(2, short))));
        }
        2 => {
            win.wait(TIMEOUT)?;
            received.check(ctx, 1, &[0])?;
        }
        _ => {}
    }
    // Rank 1 posts only now.
    ctx.barrier(TIMEOUT)?;
    match me {
        0 => {
            seen.push(("resumed", shown(win.start_one(1, Assert::NONE, TIMEOUT))));
            put(ctx, &mut win, 1)?;
            win.complete_one(1, TIMEOUT)?;
        }
        1 => {
            win.post(&[0], Assert::NONE, TIMEOUT)?;
            win.wait(TIMEOUT)?;
            received.check(ctx, 1, &[0])?;
        }
        _ => {}
    }
    seen.extend(told(ctx, coll, short)?);
    let pairs: Vec<String> = seen.iter().map(|(k, v)| format!("{k}={v}; ")).collect();
    println!(
        "data one rank {me}: {}received={}; mismatches={}",
        pairs.concat(),
        received.blocks,
        received.mismatches
    );
    Ok(())
}

/// The end of `one`, on a second window: rank 0 posts to ranks 2 and 1, in that order, after
/// rank 2 dropped its window (and so its control table); rank 1 must still be told, and start
/// (`told_start`, before the fix `PostsMissing` after `short`: the post failed at rank 2
/// and told nobody after it). Rank 0's post reports rank 2's table gone where the direct path
/// sees it at once (`told_post`), and its wait misses only rank 2 (`told_wait`).
fn told(
    ctx: &Context,
    coll: &Collectives<'_>,
    short: Timeout,
) -> Outcome<Vec<(&'static str, String)>> {
    let me = ctx.rank();
    let mut second = Window::new(coll, GROUP_ALL, WIN2, TIMEOUT)?;
    // A first epoch, in which rank 0 finds every origin's control table.
    match me {
        0 => {
            second.post(&[1, 2], Assert::NONE, TIMEOUT)?;
            second.wait(TIMEOUT)?;
        }
        _ => access(ctx, &mut second, 0)?,
    }
    if me == 2 {
        drop(second);
        ctx.barrier(TIMEOUT)?;
        return Ok(Vec::new());
    }
    ctx.barrier(TIMEOUT)?;
    let seen = match me {
        0 => {
            let posted = shown(second.post(&[2, 1], Assert::NONE, TIMEOUT));
            vec![
                ("told_post", posted),
                ("told_wait", shown(second.wait(short))),
            ]
        }
        _ => {
            let started = shown(second.start(&[0], Assert::NONE, short));
            if started == "Ok(())" {
                put(ctx, &mut second, 0)?;
                second.complete(TIMEOUT)?;
            }
            vec![("told_start", started)]
        }
    };
    Ok(seen)
}

fn kill() -> Outcome {
    let mut config = Config::from_env()?;
    // Over shm through the fabric, a rank killed while it holds the provider's progress lock
    // would leave its writers spinning inside libfabric (as in alltoallv_check's `kill`).
    if config.intranode == Intranode::Fabric && config.provider.starts_with("shm") {
        config.progress_thread = false;
    }
    let ctx = setup(Context::init_with(config)?)?;
    if ctx.size() != 3 {
        return Err("kill needs 3 ranks".into());
    }
    let me = ctx.rank();
    let coll = Collectives::new(&ctx)?;
    let mut win = Window::new(&coll, GROUP_ALL, WIN, TIMEOUT)?;
    clear(&ctx)?;
    // A first epoch from rank 1 to rank 2, so that rank 1 knows rank 2's tables before it
    // dies: its later start then waits for a post, rather than for a first lookup (which
    // the runtime may report as a failed operation rather than a dead rank).
    match me {
        1 => access(&ctx, &mut win, 2)?,
        2 => {
            win.post(&[1], Assert::NONE, TIMEOUT)?;
            win.wait(TIMEOUT)?;
            clear(&ctx)?;
        }
        _ => {}
    }
    // Rank 1's block of `epoch` is in rank 0's window.
    let arrived = |epoch| -> Result<&str, gaspi::Error> {
        let want = pattern::block(epoch, 1, 0);
        let mut got = vec![0; want.len()];
        ctx.segment_read(WIN, BLOCK, &mut got)?;
        Ok(if got == want { "ok" } else { "bad" })
    };
    let report = match me {
        0 => {
            win.post(&[1, 2], Assert::NONE, TIMEOUT)?;
            let outcome = shown(win.wait(TIMEOUT));
            // Rank 1 completed: its block is there. (Rank 2's may be or not.)
            let block = arrived(1)?;
            // The wait closed the epoch: the survivors go on with the window. Posting to the
            // dead rank again names it, and opens the epoch all the same; `test` names it
            // once rank 1 completed, closing the epoch.
            let again = shown(win.post(&[1, 2], Assert::NONE, TIMEOUT));
            let polled = std::time::Instant::now();
            let tested = loop {
                match win.test() {
                    Ok(false) if polled.elapsed() < Duration::from_secs(20) => {
                        std::thread::sleep(Duration::from_millis(1))
                    }
                    other => break shown(other),
                }
            };
            let after = shown(win.test());
            let block2 = arrived(2)?;
            // Alive until rank 1 looked for posts: a rank that ended is dead to the others.
            ctx.notify_waitsome(WIN, 0, 1, TIMEOUT)?;
            ctx.notify_reset(WIN, 0)?;
            format!(
                "outcome={outcome}; block={block}; again={again}; tested={tested}; \
                 after={after}; block2={block2}"
            )
        }
        1 => {
            access(&ctx, &mut win, 0)?;
            // Rank 2 dies without posting to this rank: the start names it, and the epoch
            // ends without it.
            let outcome = shown(win.start(&[2], Assert::NONE, TIMEOUT));
            let ended = shown(win.complete(TIMEOUT));
            // An epoch with rank 0 and the dead rank: the start names rank 2 once rank 0
            // posted, and the epoch goes on with rank 0.
            let both = shown(win.start(&[0, 2], Assert::NONE, TIMEOUT));
            put_in(&ctx, &mut win, 0, 2)?;
            let to_dead = shown(win.write(SRC, 0, 2, 0, 8));
            let closed = shown(win.complete(TIMEOUT));
            // Nobody posts to this rank any more, and the dead rank is not waited for.
            let any = shown(win.start_any(Timeout::Millis(100)));
            ctx.notify(0, WIN, gaspi::Notification { id: 0, value: 1 }, 0)?;
            ctx.wait(0, TIMEOUT)?;
            format!(
                "outcome={outcome}; ended={ended}; both={both}; to_dead={to_dead}; \
                 closed={closed}; any={any}"
            )
        }
        _ => {
            win.start(&[0], Assert::NONE, TIMEOUT)?;
            put(&ctx, &mut win, 0)?;
            println!("data kill rank {me}: pid={}", std::process::id());
            std::process::Command::new("sh")
                .args(["-c", "kill -9 $PPID"])
                .status()?;
            return Err("still alive after kill -9".into());
        }
    };
    println!("data kill rank {me}: {report}");
    drop(win);
    drop(coll);
    match ctx.finalize(TIMEOUT) {
        Err(gaspi::Error::RankFailed { .. }) | Ok(()) => Ok(()),
        Err(e) => Err(e.into()),
    }
}
