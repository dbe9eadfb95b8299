//! The gaspi side of the benchmark, written against the public API only.

use std::time::{Duration, Instant};

use super::{median, transport, Figure};
use crate::context::Context;
use crate::error::{Error, Result};
use crate::rma::{local, remote, Notification};
use crate::Timeout;

/// Segment both sides of the gaspi benchmark use.
pub(crate) const SEGMENT: u8 = 0;
const QUEUE: u8 = 0;
const DATA: u32 = 0;
const ACK: u32 = 1;
const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// Posts with `post`, emptying the queue first whenever it is full.
fn posting(ctx: &Context, mut post: impl FnMut() -> Result<()>) -> Result<()> {
    loop {
        match post() {
            Err(Error::QueueFull { .. }) => ctx.wait(QUEUE, TIMEOUT)?,
            other => return other,
        }
    }
}

fn take(ctx: &Context, id: u32) -> Result<u32> {
    let got = ctx.notify_waitsome(SEGMENT, id, 1, TIMEOUT)?;
    ctx.notify_reset(SEGMENT, got)
}

/// Half round trip of write_notify between ranks 0 and 1.
pub(crate) fn pingpong(ctx: &Context, bytes: usize) -> Result<Vec<Figure>> {
    let me = ctx.rank();
    let (warmup, iters) = if bytes <= 4096 {
        (200, 3000)
    } else {
        (50, 500)
    };
    let mut samples = Vec::with_capacity(iters);
    if me < 2 {
        let peer = 1 - me;
        for i in 0..(warmup + iters) as u32 {
            let n = Notification {
                id: DATA,
                value: i + 1,
            };
            let send = || {
                posting(ctx, || {
                    ctx.write_notify(
                        local(SEGMENT, 0),
                        remote(peer, SEGMENT, 0),
                        bytes as u64,
                        n,
                        QUEUE,
                    )
                })
            };
            let start = Instant::now();
            if me == 0 {
                send()?;
                take(ctx, DATA)?;
            } else {
                take(ctx, DATA)?;
                send()?;
            }
            if i as usize >= warmup {
                samples.push(start.elapsed() / 2);
            }
        }
        ctx.wait(QUEUE, TIMEOUT)?;
    }
    ctx.barrier(TIMEOUT)?;
    Ok(figure(ctx, "pingpong", bytes, samples))
}

/// Streaming write bandwidth from rank 0 to rank 1: a burst of writes, the last one notified,
/// acknowledged by the target.
pub(crate) fn bandwidth(ctx: &Context, bytes: usize) -> Result<Vec<Figure>> {
    let me = ctx.rank();
    let count = ((128usize << 20) / bytes).clamp(8, 2048);
    let reps = 7;
    let mut samples = Vec::with_capacity(reps);
    for rep in 0..reps as u32 {
        let n = Notification {
            id: DATA,
            value: rep + 1,
        };
        if me == 0 {
            let start = Instant::now();
            for i in 0..count {
                posting(ctx, || {
                    let (l, r) = (local(SEGMENT, 0), remote(1, SEGMENT, 0));
                    if i + 1 == count {
                        ctx.write_notify(l, r, bytes as u64, n, QUEUE)
                    } else {
                        ctx.write(l, r, bytes as u64, QUEUE)
                    }
                })?;
            }
            take(ctx, ACK)?;
            samples.push(start.elapsed() / count as u32);
            ctx.wait(QUEUE, TIMEOUT)?;
        } else if me == 1 {
            take(ctx, DATA)?;
            let ack = Notification {
                id: ACK,
                value: rep + 1,
            };
            posting(ctx, || ctx.notify(0, SEGMENT, ack, QUEUE))?;
        }
    }
    ctx.wait(QUEUE, TIMEOUT)?;
    ctx.barrier(TIMEOUT)?;
    Ok(figure(ctx, "bandwidth", bytes, samples))
}

fn figure(ctx: &Context, bench: &'static str, bytes: usize, samples: Vec<Duration>) -> Vec<Figure> {
    if ctx.rank() != 0 {
        return Vec::new();
    }
    vec![Figure {
        bench,
        lib: "gaspi",
        transport: transport(ctx),
        ranks: ctx.size(),
        bytes,
        median: median(samples),
        variant: None,
    }]
}
