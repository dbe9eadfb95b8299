//! The 8 B epoch ping-pong of `gaspi-bench pscw` at 2 ranks beside the write_notify ping-pong
//! it is held against (`bench.sh pscw`'s `epoch_over_write_notify`), for instruction counts
//! under callgrind (`scripts/callgrind-pscw.sh` runs it), and checked: `cg_pscw
//! epoch|pingpong ITERS [there|step]`.
//!
//! * `epoch`: rank 0 starts rank 1, writes 8 bytes, completes, then posts to rank 1 and waits;
//!   rank 1 mirrors it, posting first (the bench's `pscw` lines).
//! * `pingpong`: rank 0 sends 8 bytes with `write_notify`, rank 1 takes them and answers in
//!   kind (the bench's `pingpong` lines, the yardstick).
//!
//! After 20 rounds of warm-up (tables looked up, segments resolved), each of the `ITERS`
//! counted rounds calls the window (or the runtime) through one function per call
//! (`start_call`, `write_call`, ... `take_call`), which the script's callgrind collects alone.
//! * `there` (the default): before its wait (or take) in a counted round rank 0 waits, outside
//!   the counted functions, until what that call waits for is there, and then sleeps 1 ms:
//!   every call it makes takes the same path in every round, and the counts repeat whatever
//!   the load. For the take, it waits for the block's notification without resetting it
//!   (`notify_waitsome`). The window's `done` is in the window's own table, which the
//!   example cannot see, so rank 1 tells rank 0 that its `complete` returned with a
//!   notification of its own ([`THERE`], in the window segment's table), which rank 0 waits
//!   for and takes first. Towards a rank reached directly, `done` is set before `complete`
//!   returns, so that notification never comes before it. Through the fabric (with
//!   `GASPI_INTRANODE=fabric`) the two go on different queues and `done` may still be on its
//!   way; the wait then sleeps, and that round's wait counts its way to the sleep.
//!   The sleep is what the `there` way did alone before (too short for the native rank at a
//!   load of 10 and more): rank 1, waiting meanwhile, goes to sleep, so that rank 0's next
//!   notifications count waking it, as they did then. Without the sleep they mostly find
//!   it still spinning and count no wake (about 15 instructions less per notification).
//! * `step`: nobody sleeps, as in the bench's loop; a wait that finds nothing set goes to
//!   sleep, and its way there is counted (the waiting loop itself is left out by the script),
//!   so the counts move with how often that happens.
//!
//! Every round's 8 bytes name their round and sender, and the rank they reach checks them once
//! its wait (or take) returned; a mismatch fails the rank naming the round and both values.

#![forbid(unsafe_code)]

#[allow(dead_code)] // The example uses part of the support.
#[path = "../support/mod.rs"]
mod support;

use std::process::ExitCode;

use gaspi::{Context, Notification, Rank, Timeout, GROUP_ALL};
use gaspi_coll::{Assert, Collectives, Window};

use support::Outcome;

const TIMEOUT: Timeout = Timeout::Millis(60_000);
/// Rounds before those counted.
const WARMUP: u64 = 20;
/// How long rank 0 sleeps before its wait in a counted round of the `there` way, once what it
/// waits for is there.
const LATE: std::time::Duration = std::time::Duration::from_millis(1);
/// The notification of the window segment's table by which rank 1 tells rank 0, in the
/// counted rounds of the `there` way, that its access epoch completed.
const THERE: gaspi::NotificationId = 1;
/// The window's segment (the ping-pong's destination), and the segment blocks are written
/// from.
const WINDOW: gaspi::SegmentId = 0;
const SOURCE: gaspi::SegmentId = 1;

#[inline(never)]
fn start_call(win: &mut Window<'_>, peer: Rank) -> gaspi_coll::Result<()> {
    win.start(&[peer], Assert::NONE, TIMEOUT)
}

#[inline(never)]
fn write_call(win: &mut Window<'_>, peer: Rank) -> gaspi_coll::Result<()> {
    win.write(SOURCE, 0, peer, 0, 8)
}

#[inline(never)]
fn complete_call(win: &mut Window<'_>) -> gaspi_coll::Result<()> {
    win.complete(TIMEOUT)
}

#[inline(never)]
fn post_call(win: &mut Window<'_>, peer: Rank) -> gaspi_coll::Result<()> {
    win.post(&[peer], Assert::NONE, TIMEOUT)
}

#[inline(never)]
fn wait_call(win: &mut Window<'_>) -> gaspi_coll::Result<()> {
    win.wait(TIMEOUT)
}

#[inline(never)]
fn send_call(ctx: &Context, peer: Rank, round: u32) -> gaspi::Result<()> {
    let n = Notification {
        id: 0,
        value: round,
    };
    let (from, to) = (gaspi::local(SOURCE, 0), gaspi::remote(peer, WINDOW, 0));
    ctx.write_notify(from, to, 8, n, 0)
}

#[inline(never)]
fn take_call(ctx: &Context) -> gaspi::Result<u32> {
    let id = ctx.notify_waitsome(WINDOW, 0, 1, TIMEOUT)?;
    ctx.notify_reset(WINDOW, id)
}

/// One access epoch: 8 bytes to `peer`; through the counted functions when `counted`.
fn access(win: &mut Window<'_>, peer: Rank, counted: bool) -> gaspi_coll::Result<()> {
    if counted {
        start_call(win, peer)?;
        write_call(win, peer)?;
        complete_call(win)
    } else {
        win.start(&[peer], Assert::NONE, TIMEOUT)?;
        win.write(SOURCE, 0, peer, 0, 8)?;
        win.complete(TIMEOUT)
    }
}

/// One exposure epoch for `peer`'s 8 bytes; through the counted functions when `counted`,
/// waiting (uncounted) for the peer's [`THERE`], then sleeping [`LATE`], before the wait when
/// `late`.
fn expose(
    ctx: &Context,
    win: &mut Window<'_>,
    peer: Rank,
    counted: bool,
    late: bool,
) -> Outcome<()> {
    if counted {
        post_call(win, peer)?;
        if late {
            ctx.notify_waitsome(WINDOW, THERE, 1, TIMEOUT)?;
            ctx.notify_reset(WINDOW, THERE)?;
            std::thread::sleep(LATE);
        }
        Ok(wait_call(win)?)
    } else {
        win.post(&[peer], Assert::NONE, TIMEOUT)?;
        Ok(win.wait(TIMEOUT)?)
    }
}

/// The write_notify ping-pong's send and take; through the counted functions when `counted`.
fn send(ctx: &Context, peer: Rank, round: u32, counted: bool) -> gaspi::Result<()> {
    if counted {
        return send_call(ctx, peer, round);
    }
    let n = Notification {
        id: 0,
        value: round,
    };
    ctx.write_notify(
        gaspi::local(SOURCE, 0),
        gaspi::remote(peer, WINDOW, 0),
        8,
        n,
        0,
    )
}

/// Takes the peer's block; through the counted function when `counted`, after waiting
/// (uncounted, without taking it) until it is there, then sleeping [`LATE`], when `late`.
fn take(ctx: &Context, counted: bool, late: bool) -> gaspi::Result<u32> {
    if counted {
        if late {
            ctx.notify_waitsome(WINDOW, 0, 1, TIMEOUT)?;
            std::thread::sleep(LATE);
        }
        return take_call(ctx);
    }
    let id = ctx.notify_waitsome(WINDOW, 0, 1, TIMEOUT)?;
    ctx.notify_reset(WINDOW, id)
}

fn main() -> ExitCode {
    support::main_of("cg_pscw", |args| {
        let usage = "usage: cg_pscw epoch|pingpong ITERS [there|step] (at 2 ranks)";
        let (which, iters, late) = match args {
            [which, iters] => (which, iters, true),
            [which, iters, case] if case == "there" => (which, iters, true),
            [which, iters, case] if case == "step" => (which, iters, false),
            _ => return Err(usage.into()),
        };
        let epochs = match which.as_str() {
            "epoch" => true,
            "pingpong" => false,
            _ => return Err(usage.into()),
        };
        let iters: u64 = iters.parse().map_err(|_| usage.to_string())?;
        run(epochs, iters, late)
    })
}

/// The ping-pongs; rank 0 waits until what its counted waits wait for is there when `late`.
fn run(epochs: bool, iters: u64, late: bool) -> Outcome<()> {
    let ctx = Context::init()?;
    if ctx.size() != 2 {
        return Err(format!("cg_pscw runs at 2 ranks, not {}", ctx.size()).into());
    }
    ctx.segment_create(WINDOW, 64, TIMEOUT)?;
    ctx.segment_create(SOURCE, 64, TIMEOUT)?;
    let coll = Collectives::new(&ctx)?;
    let mut win = Window::new(&coll, GROUP_ALL, WINDOW, TIMEOUT)?;
    let (me, peer) = (ctx.rank(), ctx.rank() ^ 1);
    let leads = me == 0;
    ctx.barrier(TIMEOUT)?;
    for round in 1..=WARMUP + iters {
        let counted = round > WARMUP;
        let (mine, theirs) = (round * 2 + u64::from(me), round * 2 + u64::from(peer));
        // Filled just before it is sent: the peer's last block shows that this rank's last
        // write left the source.
        let fill = || ctx.segment(SOURCE)?.write(0, &mine.to_le_bytes());
        let check = || -> Outcome<()> {
            let mut got = [0u8; 8];
            ctx.segment(WINDOW)?.read(0, &mut got)?;
            match u64::from_le_bytes(got) {
                v if v == theirs => Ok(()),
                v => Err(format!("rank {me}: round {round}: {v}, want {theirs}").into()),
            }
        };
        match (epochs, leads) {
            (true, true) => {
                fill()?;
                access(&mut win, peer, counted)?;
                expose(&ctx, &mut win, peer, counted, late)?;
                check()?;
            }
            (true, false) => {
                expose(&ctx, &mut win, peer, counted, false)?;
                check()?;
                fill()?;
                access(&mut win, peer, counted)?;
                if counted && late {
                    let n = Notification {
                        id: THERE,
                        value: 1,
                    };
                    ctx.notify(peer, WINDOW, n, 0)?;
                }
            }
            (false, true) => {
                fill()?;
                send(&ctx, peer, round as u32, counted)?;
                take(&ctx, counted, late)?;
                check()?;
            }
            (false, false) => {
                take(&ctx, counted, false)?;
                check()?;
                fill()?;
                send(&ctx, peer, round as u32, counted)?;
            }
        }
    }
    ctx.wait(0, TIMEOUT)?;
    ctx.barrier(TIMEOUT)?;
    let which = if epochs { "epoch" } else { "pingpong" };
    println!("data cg_pscw rank {me}: {which}=ok");
    Ok(())
}
