//! `atomics`: remote fetch-and-add and compare-and-swap under contention, run the way the
//! configuration selects (target-executed by default, provider atomics with `GASPI_ATOMICS=1`).
//!
//! Every rank adds 1 to a counter on rank 0 `ADDS` times: the fetched values each rank sees
//! must rise strictly, and the final value must be exactly `n * ADDS`. Then every rank takes a
//! compare-and-swap lock on rank 0 `ROUNDS` times and, while holding it, increments a second
//! counter with a plain read, local add and write: any second holder would lose an update, so
//! the final count must be exactly `n * ROUNDS`.

use gaspi::{local, remote, Context, Error, Timeout};

use crate::check::{Doing, Failure, Outcome};

const SEG: u8 = 0;
const COUNTER: u64 = 0;
const LOCK: u64 = 8;
const GUARDED: u64 = 16;
/// Where each rank stages the guarded counter it reads and writes.
const STAGE: u64 = 64;
const ADDS: u64 = 500;
const ROUNDS: u64 = 100;
const TIMEOUT: Timeout = Timeout::Millis(30_000);

pub fn run(ctx: &Context) -> Outcome<String> {
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
    let kind = if ctx.provider_atomics() {
        "provider"
    } else {
        "target-executed"
    };
    Ok(format!(
        "{kind} atomics: {n} ranks x {ADDS} fetch_adds = {total} exactly, fetched values rising; \
         {n} x {ROUNDS} lock-guarded increments = {guarded} ({contended} contended attempts)"
    ))
}
