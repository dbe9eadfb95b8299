//! The gaspi side of the benchmark, written against the public API only.

use std::time::{Duration, Instant};

use gaspi::{local, remote, Context, Notification, Rank, SegmentId, Timeout};

use crate::{mode, Figure, Result};

/// Segment both sides of the gaspi benchmark use.
pub(crate) const SEGMENT: SegmentId = 0;
const QUEUE: u8 = 0;
const DATA: u32 = 0;
const ACK: u32 = 1;
const TIMEOUT: Timeout = Timeout::Millis(60_000);

/// Posts with `post`, emptying the queue first whenever it is full.
fn posting(ctx: &Context, mut post: impl FnMut() -> gaspi::Result<()>) -> Result<()> {
    loop {
        match post() {
            Err(gaspi::Error::QueueFull { .. }) => ctx.wait(QUEUE, TIMEOUT)?,
            other => return Ok(other?),
        }
    }
}

fn take(ctx: &Context, segment: SegmentId, id: u32) -> Result<u32> {
    let got = ctx.notify_waitsome(segment, id, 1, TIMEOUT)?;
    Ok(ctx.notify_reset(segment, got)?)
}

/// Untimed and timed round trips of a ping-pong of `bytes`, the same for every library.
pub(crate) fn pingpong_iterations(bytes: usize) -> (usize, usize) {
    if bytes <= 4096 {
        (200, 3000)
    } else {
        (50, 500)
    }
}

/// Half round trip of write_notify between ranks 0 and 1.
pub(crate) fn pingpong(ctx: &Context, bytes: usize) -> Result<Option<Figure>> {
    let me = ctx.rank();
    let counts = pingpong_iterations(bytes);
    let samples = match me {
        0 | 1 => round_trips(ctx, [SEGMENT; 2], 1 - me, me == 0, bytes, counts)?,
        _ => Vec::new(),
    };
    ctx.barrier(TIMEOUT)?;
    Ok(figure(ctx, "pingpong", bytes, samples))
}

/// Round trips of write_notify of `bytes` with `peer`, from offset 0 of segment `from` to
/// offset 0 of segment `to` (both of at least `bytes` on both sides; `to` takes the
/// notification), this rank writing first when it `leads`: the half round trip of each of the
/// `iters` after the untimed `warmup`.
pub(crate) fn round_trips(
    ctx: &Context,
    [from, to]: [SegmentId; 2],
    peer: Rank,
    leads: bool,
    bytes: usize,
    (warmup, iters): (usize, usize),
) -> Result<Vec<Duration>> {
    let mut samples = Vec::with_capacity(iters);
    for i in 0..(warmup + iters) as u32 {
        let n = Notification {
            id: DATA,
            value: i + 1,
        };
        let send = || {
            posting(ctx, || {
                ctx.write_notify(local(from, 0), remote(peer, to, 0), bytes as u64, n, QUEUE)
            })
        };
        let start = Instant::now();
        if leads {
            send()?;
            take(ctx, to, DATA)?;
        } else {
            take(ctx, to, DATA)?;
            send()?;
        }
        if i as usize >= warmup {
            samples.push(start.elapsed() / 2);
        }
    }
    ctx.wait(QUEUE, TIMEOUT)?;
    Ok(samples)
}

/// One burst of streaming writes from rank 0 to rank 1, the last one notified and
/// acknowledged by the target: rank 0 gets the time per message.
pub(crate) fn bandwidth_burst(ctx: &Context, bytes: usize, rep: u32) -> Result<Option<Duration>> {
    let me = ctx.rank();
    let count = burst_len(bytes);
    let n = Notification {
        id: DATA,
        value: rep + 1,
    };
    let mut sample = None;
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
        take(ctx, SEGMENT, ACK)?;
        sample = Some(start.elapsed() / count as u32);
        ctx.wait(QUEUE, TIMEOUT)?;
    } else if me == 1 {
        take(ctx, SEGMENT, DATA)?;
        let ack = Notification {
            id: ACK,
            value: rep + 1,
        };
        posting(ctx, || ctx.notify(0, SEGMENT, ack, QUEUE))?;
        ctx.wait(QUEUE, TIMEOUT)?;
    }
    ctx.barrier(TIMEOUT)?;
    Ok(sample)
}

/// Messages per streaming burst: about 128 MiB, at least 8.
pub(crate) fn burst_len(bytes: usize) -> usize {
    ((128usize << 20) / bytes).clamp(8, 2048)
}

/// The gaspi figure for `samples` (rank 0 only), with the path its operations took.
pub(crate) fn figure(
    ctx: &Context,
    bench: &'static str,
    bytes: usize,
    samples: Vec<Duration>,
) -> Option<Figure> {
    let figure = Figure::of(ctx, bench, "gaspi", bytes, samples)?;
    Some(Figure {
        mode: Some(mode(ctx)),
        ..figure
    })
}
