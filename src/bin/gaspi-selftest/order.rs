//! `order`: notifications from one rank to one id, on one queue, take effect in the order they
//! were posted (GASPI: "the order of communication requests is preserved on the remote side"),
//! also while several threads of the target drive progress at once.
//!
//! In each of [`ROUNDS`] rounds rank 0 sends rank 1 [`PER_ROUND`] notifications of one id with
//! the values 1, 2, … (every third a small `write_notify`, the others `notify`), then one
//! notification of another id. Rank 1 waits for that last one with one thread while two more
//! threads keep driving progress through waits of their own, then reads the id: its value must
//! be the last one sent. Before completions were handed on by one reading thread at a time, two
//! threads could each take a batch of the completion queue and apply the later batch first,
//! and an older value overwrote the newer (through the fabric, about one round in twenty). Rank
//! 1 reports every round's value for the test to judge.

use std::sync::atomic::{AtomicBool, Ordering};

use gaspi::{local, remote, Context, Error, Notification, SegmentId, Timeout};

use crate::check::{Data, Doing, Outcome, Report};

const ROUNDS: u32 = 20;
const PER_ROUND: u32 = 2_000;
const SEG: SegmentId = 0;
/// The id every round's notifications go to, and the id of its last one.
const ID: u32 = 0;
const LAST: u32 = 1;
/// An id nobody sends to, which the extra threads wait on.
const IDLE: u32 = 2;
const QUEUE: u8 = 0;
const TIMEOUT: Timeout = Timeout::Millis(30_000);

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    if n < 2 {
        return Ok("a sender and a receiver need 2 ranks, skipped"
            .to_owned()
            .into());
    }
    ctx.segment_create(SEG, 4096, TIMEOUT)
        .doing(|| "creating the segment")?;
    let mut values = Vec::new();
    for round in 0..ROUNDS {
        ctx.barrier(TIMEOUT)
            .doing(|| format!("the barrier before round {round}"))?;
        match me {
            0 => send_round(ctx).doing(|| format!("sending round {round}"))?,
            1 => values.push(receive_round(ctx).doing(|| format!("receiving round {round}"))?),
            _ => {}
        }
    }
    ctx.barrier(TIMEOUT).doing(|| "the last barrier")?;
    let mut data = Data::default();
    if me == 1 {
        let listed: Vec<String> = values.iter().map(u32::to_string).collect();
        data.put("last_values", listed.join(","));
    }
    Ok(Report {
        summary: format!("{ROUNDS} rounds of {PER_ROUND} notifications of one id"),
        data,
    })
}

fn send_round(ctx: &Context) -> gaspi::Result<()> {
    for value in 1..=PER_ROUND {
        let notification = Notification { id: ID, value };
        loop {
            let posted = match value % 3 {
                0 => ctx.write_notify(local(SEG, 64), remote(1, SEG, 64), 32, notification, QUEUE),
                _ => ctx.notify(1, SEG, notification, QUEUE),
            };
            match posted {
                Err(Error::QueueFull { .. }) => ctx.wait(QUEUE, TIMEOUT)?,
                other => break other?,
            }
        }
    }
    ctx.notify(1, SEG, Notification { id: LAST, value: 1 }, QUEUE)?;
    ctx.wait(QUEUE, TIMEOUT)
}

/// Waits for the round's last notification while two more threads drive progress; returns
/// the value the round's id was left with.
fn receive_round(ctx: &Context) -> gaspi::Result<u32> {
    let stop = AtomicBool::new(false);
    std::thread::scope(|s| {
        for _ in 0..2 {
            s.spawn(|| {
                while !stop.load(Ordering::Relaxed) {
                    let _ = ctx.notify_waitsome(SEG, IDLE, 1, Timeout::Millis(1));
                }
            });
        }
        let last = ctx.notify_waitsome(SEG, LAST, 1, TIMEOUT);
        stop.store(true, Ordering::Relaxed);
        last
    })?;
    ctx.notify_reset(SEG, LAST)?;
    // Notifications posted before the last one on the queue are delivered before it.
    ctx.notify_reset(SEG, ID)
}
