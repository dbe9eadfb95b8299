//! The synchronisation the `ALLSYNC` modes add around an algorithm's schedule: a
//! dissemination barrier before its first data movement (`IN_ALLSYNC`) or after its last
//! (`OUT_ALLSYNC`). The other modes need nothing added: every put of every algorithm waits
//! for its receiver's credit, so data moves only between members that have both entered
//! (`IN_MYSYNC`, which also serves for `IN_NOSYNC`), and a member's schedule ends only once
//! its own buffers are done with (`OUT_MYSYNC`, which also serves for `OUT_NOSYNC`).

use super::{algorithm_signals, Schedule, Signal, StepId};

/// Signal numbers the barriers use, after the algorithm's: one per round, for a barrier
/// before and one after.
pub(crate) const SIGNALS: Signal = 2 * ROUNDS;

/// Rounds of a dissemination barrier over up to `u32::MAX` members.
const ROUNDS: Signal = 32;

/// `schedule` of member `me` of `n`, with a barrier before it when `before` and after it when
/// `after`.
pub(crate) fn synchronise(
    schedule: Schedule,
    n: u32,
    me: u32,
    before: bool,
    after: bool,
) -> Schedule {
    if n <= 1 || (!before && !after) {
        return schedule;
    }
    let base = algorithm_signals(n);
    let mut out = Schedule::new();
    let entered = if before {
        barrier(&mut out, n, me, base, &[])
    } else {
        Vec::new()
    };
    let shift = out.steps.len() as StepId;
    for step in schedule.steps {
        let mut deps: Vec<StepId> = step.after.iter().map(|&s| s + shift).collect();
        if deps.is_empty() {
            deps.extend_from_slice(&entered);
        }
        out.push(step.task, &deps);
    }
    out.stage = out.stage.max(schedule.stage);
    out.credits = schedule.credits.iter().map(|&s| s + shift).collect();
    out.gathering = schedule.gathering;
    out.capture = schedule.capture;
    if after {
        let ends = if out.steps.len() as StepId > shift {
            out.sinks()
        } else {
            entered
        };
        barrier(&mut out, n, me, base + ROUNDS, &ends);
    }
    out
}

/// Appends a dissemination barrier of member `me` of `n` on signals `base..`, after `after`;
/// returns its last step. In round `k` a member signals `me + 2^k` and waits for `me - 2^k`
/// (mod `n`): after `ceil(log2 n)` rounds every member has heard, through some chain, from
/// every other.
fn barrier(
    schedule: &mut Schedule,
    n: u32,
    me: u32,
    base: Signal,
    after: &[StepId],
) -> Vec<StepId> {
    let mut last = after.to_vec();
    let mut k = 0;
    while (1u64 << k) < u64::from(n) {
        let (n64, me64, distance) = (u64::from(n), u64::from(me), 1u64 << k);
        // Both below n, which is a u32.
        let to = ((me64 + distance) % n64) as u32;
        let from = ((me64 + n64 - distance) % n64) as u32;
        let signalled = schedule.signal(to, base + k, &last);
        let heard = schedule.wait(from, base + k, &last);
        last = vec![signalled, heard];
        k += 1;
    }
    last
}
