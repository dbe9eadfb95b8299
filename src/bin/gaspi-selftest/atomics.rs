//! `atomics`: remote fetch-and-add and compare-and-swap under contention, run the way the
//! configuration selects (target-executed by default, provider atomics with `GASPI_ATOMICS=1`).
//!
//! Every rank adds 1 to a counter on rank 0 `ADDS` times: the fetched values each rank sees
//! must rise strictly, and the final value must be exactly `n * ADDS`. Then every rank takes a
//! compare-and-swap lock on rank 0 `ROUNDS` times and, while holding it, increments a second
//! counter with a plain read, local add and write: any second holder would lose an update, so
//! the final count must be exactly `n * ROUNDS`.
//!
//! Then the blocking atomics are called with `Timeout::Test` and `Timeout::Millis(0)` and,
//! after each `Timeout`, called again with the same arguments until they give a result (GASPI
//! 17.1 §10.2.1: the next call completes the operation). Every logical call must happen
//! exactly once:
//!
//! * every rank increments one word on rank 0 `ROUNDS_RETRIED` times with a fetch_add of 1
//!   and, after reading the word (a fetch_add of 0), with a compare-and-swap of the value read
//!   to the one above it. The old values of the fetch_adds and of the swaps that happened
//!   (old equal to the value read) are reported: over all ranks they must be exactly 0 up to
//!   the final word, each once;
//! * every rank takes and gives back a compare-and-swap lock `RETRIED_LOCKS` times (the
//!   standard's Listing 15): taking it must never find the rank's own mark, giving it back
//!   must find it;
//! * every rank starts a fetch_add of 1 on a third word `ABANDONS` times with one
//!   `Timeout::Test` and then makes another blocking atomic, which abandons the first if it
//!   timed out: the third word must still end at exactly `n * ABANDONS`, and no call may find
//!   every atomic slot taken.

use std::time::{Duration, Instant};

use gaspi::{local, remote, Context, Error, ReduceOp, Timeout, GROUP_ALL};

use crate::check::{Data, Doing, Failure, Outcome, Report};

const SEG: u8 = 0;
const COUNTER: u64 = 0;
const LOCK: u64 = 8;
const GUARDED: u64 = 16;
/// Where each rank stages the guarded counter it reads and writes.
const STAGE: u64 = 64;
const ADDS: u64 = 500;
const ROUNDS: u64 = 100;
const TIMEOUT: Timeout = Timeout::Millis(30_000);
/// Words of the retried atomics, on rank 0.
const RETRIED: u64 = 24;
const RETRIED_LOCK: u64 = 32;
const ABANDONED: u64 = 40;
const ROUNDS_RETRIED: u64 = 100;
const RETRIED_LOCKS: u64 = 20;
const ABANDONS: u64 = 100;
/// How long one logical call may keep timing out.
const RETRY_LIMIT: Duration = Duration::from_secs(30);

pub fn run(ctx: &Context) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), u64::from(ctx.size()));
    ctx.segment_create(SEG, 4096, TIMEOUT)
        .doing(|| "creating the segment")?;
    match ctx.atomic_fetch_add(remote(0, SEG, 4), 1, TIMEOUT) {
        Err(Error::Misaligned {
            rank: 0,
            segment: SEG,
            offset: 4,
        }) => {}
        other => return Err(Failure(format!("fetch_add at offset 4: {other:?}"))),
    }
    match ctx.atomic_compare_swap(remote(0, SEG, 4096), 0, 1, TIMEOUT) {
        Err(Error::OutOfBounds {
            rank: 0,
            segment: SEG,
            offset: 4096,
            ..
        }) => {}
        other => return Err(Failure(format!("compare_swap past the end: {other:?}"))),
    }
    let mut last = None;
    for _ in 0..ADDS {
        let old = ctx
            .atomic_fetch_add(remote(0, SEG, COUNTER), 1, TIMEOUT)
            .doing(|| "fetch_add")?;
        if last.is_some_and(|l| old <= l) {
            return Err(Failure(format!("fetch_add returned {old} after {last:?}")));
        }
        last = Some(old);
    }
    let mut contended = 0u64;
    for _ in 0..ROUNDS {
        let holder = u64::from(me) + 1;
        loop {
            let old = ctx
                .atomic_compare_swap(remote(0, SEG, LOCK), 0, holder, TIMEOUT)
                .doing(|| "taking the lock")?;
            if old == 0 {
                break;
            }
            contended += 1;
        }
        ctx.read(local(SEG, STAGE), remote(0, SEG, GUARDED), 8, 0)
            .doing(|| "reading the guarded counter")?;
        ctx.wait(0, TIMEOUT).doing(|| "waiting for the read")?;
        let mut word = [0u8; 8];
        ctx.segment_read(SEG, STAGE, &mut word)
            .doing(|| "staging")?;
        let value = u64::from_le_bytes(word) + 1;
        ctx.segment_write(SEG, STAGE, &value.to_le_bytes())
            .doing(|| "staging")?;
        ctx.write(local(SEG, STAGE), remote(0, SEG, GUARDED), 8, 0)
            .doing(|| "writing the guarded counter")?;
        ctx.wait(0, TIMEOUT).doing(|| "waiting for the write")?;
        let released = ctx
            .atomic_compare_swap(remote(0, SEG, LOCK), holder, 0, TIMEOUT)
            .doing(|| "releasing the lock")?;
        if released != holder {
            return Err(Failure(format!(
                "the lock held {released} when rank {me} released it"
            )));
        }
    }
    ctx.barrier(TIMEOUT).doing(|| "barrier after the atomics")?;
    let total = ctx
        .atomic_fetch_add(remote(0, SEG, COUNTER), 0, TIMEOUT)
        .doing(|| "reading the counter")?;
    let guarded = ctx
        .atomic_fetch_add(remote(0, SEG, GUARDED), 0, TIMEOUT)
        .doing(|| "reading the guarded counter")?;
    if total != n * ADDS || guarded != n * ROUNDS {
        return Err(Failure(format!(
            "counter {total} (want {}), guarded counter {guarded} (want {})",
            n * ADDS,
            n * ROUNDS
        )));
    }
    ctx.barrier(TIMEOUT).doing(|| "barrier after the check")?;
    let mut data = Data::default();
    let retried = retried_atomics(ctx, &mut data)?;
    let kind = if ctx.provider_atomics() {
        "provider"
    } else {
        "target-executed"
    };
    Ok(Report {
        summary: format!(
            "{kind} atomics: {n} ranks x {ADDS} fetch_adds = {total} exactly, fetched values \
             rising; {n} x {ROUNDS} lock-guarded increments = {guarded} ({contended} contended \
             attempts); {retried}"
        ),
        data,
    })
}

/// Makes the call `call` makes with `Timeout::Test` and `Timeout::Millis(0)` in turn, again
/// after each timeout, until it gives a result; counts the timeouts in `timeouts`.
fn until_done(
    timeouts: &mut u64,
    mut call: impl FnMut(Timeout) -> gaspi::Result<u64>,
) -> gaspi::Result<u64> {
    let started = Instant::now();
    let mut attempt = 0u64;
    loop {
        let timeout = match attempt % 2 {
            0 => Timeout::Test,
            _ => Timeout::Millis(0),
        };
        attempt += 1;
        match call(timeout) {
            Err(Error::Timeout) if started.elapsed() < RETRY_LIMIT => {
                *timeouts += 1;
                // The target's progress thread may need this core to answer.
                std::thread::yield_now();
            }
            other => return other,
        }
    }
}

/// The retried blocking atomics (see the module's documentation); puts the old values of the
/// increments that happened as `increments`, the final word as `word`, and the timeouts as
/// `timeouts`.
fn retried_atomics(ctx: &Context, data: &mut Data) -> Outcome<String> {
    let (me, n) = (ctx.rank(), u64::from(ctx.size()));
    let word = remote(0, SEG, RETRIED);
    let mut timeouts = 0u64;
    let mut increments = Vec::new();
    let mut refused = 0u64;
    for _ in 0..ROUNDS_RETRIED {
        let old = until_done(&mut timeouts, |t| ctx.atomic_fetch_add(word, 1, t))
            .doing(|| "retried fetch_add of 1")?;
        increments.push(old);
        let seen = until_done(&mut timeouts, |t| ctx.atomic_fetch_add(word, 0, t))
            .doing(|| "retried fetch_add of 0")?;
        let old = until_done(&mut timeouts, |t| {
            ctx.atomic_compare_swap(word, seen, seen + 1, t)
        })
        .doing(|| "retried compare_swap")?;
        match old == seen {
            true => increments.push(old),
            false => refused += 1,
        }
    }
    if let Some(w) = increments.windows(2).find(|w| w[1] <= w[0]) {
        return Err(Failure(format!(
            "retried increments saw {} after {}",
            w[1], w[0]
        )));
    }
    let lock = remote(0, SEG, RETRIED_LOCK);
    let mark = u64::from(me) + 1;
    for _ in 0..RETRIED_LOCKS {
        loop {
            let old = until_done(&mut timeouts, |t| ctx.atomic_compare_swap(lock, 0, mark, t))
                .doing(|| "taking the lock with retries")?;
            if old == 0 {
                break;
            }
            if old == mark {
                return Err(Failure(format!(
                    "rank {me} found its own mark in the lock it was taking: an earlier \
                     attempt took it, and the retried call said it had not"
                )));
            }
        }
        let old = until_done(&mut timeouts, |t| ctx.atomic_compare_swap(lock, mark, 0, t))
            .doing(|| "giving the lock back with retries")?;
        if old != mark {
            return Err(Failure(format!(
                "rank {me} gave back the lock holding {old}, not its mark {mark}"
            )));
        }
    }
    let abandoned = remote(0, SEG, ABANDONED);
    let mut abandons = 0u64;
    for _ in 0..ABANDONS {
        match ctx.atomic_fetch_add(abandoned, 1, Timeout::Test) {
            Ok(_) => {}
            Err(Error::Timeout) => abandons += 1,
            Err(e) => return Err(e).doing(|| "fetch_add to be abandoned"),
        }
        until_done(&mut timeouts, |t| ctx.atomic_fetch_add(word, 0, t))
            .doing(|| "the fetch_add of 0 after one to be abandoned")?;
    }
    let mine = [increments.len() as u64];
    let mut sum = [0u64];
    ctx.allreduce(GROUP_ALL, &mine, &mut sum, ReduceOp::Sum, TIMEOUT)
        .doing(|| "summing the increments")?;
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after the retried atomics")?;
    let total = ctx
        .atomic_fetch_add(word, 0, TIMEOUT)
        .doing(|| "reading the retried word")?;
    // The abandoned atomics are not ordered with the barrier: their replies may still be on
    // their way.
    let started = Instant::now();
    let abandoned_total = loop {
        let value = ctx
            .atomic_fetch_add(abandoned, 0, TIMEOUT)
            .doing(|| "reading the word of abandoned atomics")?;
        if value >= n * ABANDONS || started.elapsed() > RETRY_LIMIT {
            break value;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    data.put("increments", join(&increments));
    data.put("word", total);
    data.put("timeouts", timeouts);
    data.put("abandoned_word", abandoned_total);
    if total != sum[0] || abandoned_total != n * ABANDONS {
        return Err(Failure(format!(
            "retried atomics: the word is {total} after {} increments that happened; the \
             word of abandoned atomics is {abandoned_total} (want {})",
            sum[0],
            n * ABANDONS
        )));
    }
    ctx.barrier(TIMEOUT)
        .doing(|| "barrier after checking the retried atomics")?;
    Ok(format!(
        "retried until done ({timeouts} timeouts): {total} increments exactly once each \
         ({refused} swaps refused), {n} x {RETRIED_LOCKS} lock rounds, {abandons} of \
         {ABANDONS} abandoned after a timeout and done once each"
    ))
}

fn join(values: &[u64]) -> String {
    let listed: Vec<String> = values.iter().map(u64::to_string).collect();
    listed.join(",")
}
