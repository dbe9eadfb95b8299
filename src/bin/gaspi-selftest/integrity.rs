//! `integrity`: every one-sided operation moves exactly the bytes it should, to exactly the
//! place it should, and its notification carries the right id and value.
//!
//! Each case is one operation at one size. Writes go to the right neighbour, reads fetch from
//! it, so every rank both sends and receives. Patterns depend on the source rank and the case,
//! and the target range is poisoned beforehand with the bitwise inverse of what must arrive
//! (so every byte that is not written is caught) between guard bytes that must survive (so every
//! overrun is caught). Data lands at a different offset than it is sent from, so a confusion of
//! local and remote offsets shows too.

use gaspi::{
    local, remote, Context, Error, ListEntry, Notification, QueueId, Rank, SegmentId, Timeout,
};

use crate::check::{
    compare, ensure, fill_pattern, human, invert, seed, Data, Doing, Outcome, Report,
};
use crate::options::Options;

/// Where every rank's outgoing data lives, from offset 0.
const SRC: SegmentId = 1;
/// Where incoming data lands, at offset [`GUARD`].
const DST: SegmentId = 2;
/// Guard bytes before and after the target range.
const GUARD: u64 = 64;
const GUARD_BYTE: u8 = 0xa5;
const QUEUE: QueueId = 0;
/// Per step; the 64 MiB cases over tcp on a loaded machine take well under a second.
const TIMEOUT: Timeout = Timeout::Millis(60_000);

const SIZES: [u64; 4] = [1, 4 << 10, 1 << 20, 64 << 20];
/// Entries of each list operation (fewer when the size is smaller).
const LIST_PIECES: u64 = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Op {
    Write,
    WriteNotify,
    Read,
    ReadNotify,
    WriteList,
    WriteListNotify,
    ReadList,
    Notify,
}

impl Op {
    const ALL: [Op; 8] = [
        Op::Write,
        Op::WriteNotify,
        Op::Read,
        Op::ReadNotify,
        Op::WriteList,
        Op::WriteListNotify,
        Op::ReadList,
        Op::Notify,
    ];

    fn name(self) -> &'static str {
        match self {
            Op::Write => "write",
            Op::WriteNotify => "write_notify",
            Op::Read => "read",
            Op::ReadNotify => "read_notify",
            Op::WriteList => "write_list",
            Op::WriteListNotify => "write_list_notify",
            Op::ReadList => "read_list",
            Op::Notify => "notify",
        }
    }

    /// Reads fetch the right neighbour's data; writes push ours to it.
    fn pulls(self) -> bool {
        matches!(self, Op::Read | Op::ReadNotify | Op::ReadList)
    }

    /// Whether completion is observed through a notification (all but plain reads, which
    /// complete with `wait`).
    fn notifies(self) -> bool {
        !matches!(self, Op::Read | Op::ReadList)
    }
}

/// One operation at one size; `index` doubles as its notification id.
#[derive(Debug, Clone, Copy)]
struct Case {
    index: u32,
    op: Op,
    size: u64,
}

impl std::fmt::Display for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} of {}", self.op.name(), human(self.size))
    }
}

fn cases(max_size: u64) -> Vec<Case> {
    let mut cases = Vec::new();
    for op in Op::ALL {
        for size in SIZES {
            if size <= max_size {
                let index = cases.len() as u32;
                cases.push(Case { index, op, size });
            }
        }
    }
    cases
}

/// The pattern `from` sends in `case`.
fn case_seed(from: Rank, case: Case) -> u64 {
    seed(&[
        u64::from(from),
        u64::from(case.index),
        case.size,
        case.op as u64,
    ])
}

/// The notification value `from` sends in `case`: unique per (sender, case), never 0.
fn case_value(from: Rank, case: Case) -> u32 {
    ((from + 1) << 8) | (case.index + 1)
}

/// `size` split into up to [`LIST_PIECES`] uneven pieces `(offset, len)`, listed last first so
/// that a list operation's result cannot depend on processing entries in order.
fn pieces(size: u64) -> Vec<(u64, u64)> {
    let k = size.min(LIST_PIECES);
    // Quadratic cuts make the pieces differ in size; the `i` term keeps every piece non-empty.
    let cut = |i: u64| i + (size - k) * i * i / (k * k);
    (0..k)
        .rev()
        .map(|i| (cut(i), cut(i + 1) - cut(i)))
        .collect()
}

pub fn run(ctx: &Context, opts: &Options) -> Outcome<Report> {
    let (me, n) = (ctx.rank(), ctx.size());
    let right = (me + 1) % n;
    let left = (me + n - 1) % n;
    let cases = cases(opts.max_size);
    let largest = cases.iter().map(|c| c.size).max().unwrap_or(1);
    ctx.segment_create(SRC, largest, TIMEOUT)
        .doing(|| "creating the source segment")?;
    ctx.segment_create(DST, largest + 2 * GUARD, TIMEOUT)
        .doing(|| "creating the target segment")?;
    // Reused across cases: the expected target range (with guards), and scratch space.
    let mut want = vec![0u8; (largest + 2 * GUARD) as usize];
    let mut scratch = vec![0u8; want.len()];
    let mut verified = 0u64;
    for &case in &cases {
        let from = if case.op.pulls() { right } else { left };
        let len = (case.size + 2 * GUARD) as usize;
        let (want, scratch) = (&mut want[..len], &mut scratch[..len]);
        prepare(ctx, case, me, from, want, scratch)?;
        ctx.barrier(TIMEOUT)
            .doing(|| format!("{case}: barrier before"))?;
        execute(ctx, case, me, right)?;
        if case.op.notifies() {
            // read_notify's notification is our own, set locally when the read completes.
            let sender = if case.op.pulls() { me } else { left };
            expect_notification(ctx, case, case_value(sender, case))?;
        }
        ctx.wait(QUEUE, TIMEOUT)
            .doing(|| format!("{case}: waiting for the queue"))?;
        ctx.segment_read(DST, 0, scratch)
            .doing(|| format!("{case}: reading the target range"))?;
        compare(
            format_args!(
                "{case} from rank {from} (target range at offset {GUARD}, guards around it)"
            ),
            scratch,
            want,
        )?;
        verified += case.size;
        // Nobody may refill its source or poison its target before everyone has checked.
        ctx.barrier(TIMEOUT)
            .doing(|| format!("{case}: barrier after"))?;
    }
    // Transfers of no bytes complete like any other (delivery-complete ones too: shm never
    // completed such a write, and the queue's wait timed out for good).
    ctx.write(local(SRC, 0), remote(right, DST, 0), 0, QUEUE)
        .doing(|| "writing 0 bytes")?;
    ctx.read(local(DST, 0), remote(right, SRC, 0), 0, QUEUE)
        .doing(|| "reading 0 bytes")?;
    ctx.wait(QUEUE, TIMEOUT)
        .doing(|| "waiting for the queue after transfers of 0 bytes")?;
    let mut data = Data::default();
    data.put("cases", cases.len());
    data.put("verified_bytes", verified);
    data.put("ordered_writes", ctx.ordered_writes());
    Ok(Report {
        summary: format!(
            "{} cases ({} operations, sizes 1 B..{}; writes from rank {left}, reads from rank \
             {right}): {} verified byte by byte, guard bytes intact, every notification id \
             and value as sent",
            cases.len(),
            Op::ALL.len(),
            human(largest),
            human(verified),
        ),
        data,
    })
}

/// Writes our source pattern and poisons our target range; leaves in `want` what must arrive.
fn prepare(
    ctx: &Context,
    case: Case,
    me: Rank,
    from: Rank,
    want: &mut [u8],
    scratch: &mut [u8],
) -> Outcome {
    let size = case.size as usize;
    let data = GUARD as usize..GUARD as usize + size;
    fill_pattern(case_seed(me, case), &mut scratch[..size]);
    ctx.segment_write(SRC, 0, &scratch[..size])
        .doing(|| format!("{case}: writing the source pattern"))?;
    want.fill(GUARD_BYTE);
    fill_pattern(case_seed(from, case), &mut want[data.clone()]);
    invert(&mut want[data.clone()]);
    ctx.segment_write(DST, 0, want)
        .doing(|| format!("{case}: poisoning the target range"))?;
    invert(&mut want[data]);
    Ok(())
}

/// Posts the case's operation (towards or from `right`).
fn execute(ctx: &Context, case: Case, me: Rank, right: Rank) -> Outcome {
    let size = case.size;
    let push = remote(right, DST, GUARD);
    let pull = remote(right, SRC, 0);
    let note = Notification {
        id: case.index,
        value: case_value(me, case),
    };
    let write_entries = || entries(size, SRC, 0, DST, GUARD);
    let read_entries = || entries(size, DST, GUARD, SRC, 0);
    let posted = match case.op {
        Op::Write => ctx
            .write(local(SRC, 0), push, size, QUEUE)
            .and_then(|()| ctx.notify(right, DST, note, QUEUE)),
        Op::WriteNotify => ctx.write_notify(local(SRC, 0), push, size, note, QUEUE),
        Op::Read => ctx.read(local(DST, GUARD), pull, size, QUEUE),
        Op::ReadNotify => ctx.read_notify(local(DST, GUARD), pull, size, note, QUEUE),
        Op::WriteList => ctx
            .write_list(&write_entries(), right, QUEUE)
            .and_then(|()| ctx.notify(right, DST, note, QUEUE)),
        Op::WriteListNotify => ctx.write_list_notify(&write_entries(), right, DST, note, QUEUE),
        Op::ReadList => ctx.read_list(&read_entries(), right, QUEUE),
        // Several separate writes, then one notify that must follow all of them.
        Op::Notify => pieces(size)
            .into_iter()
            .try_for_each(|(off, len)| {
                ctx.write(local(SRC, off), remote(right, DST, GUARD + off), len, QUEUE)
            })
            .and_then(|()| ctx.notify(right, DST, note, QUEUE)),
    };
    posted.doing(|| format!("{case}: posting"))
}

fn entries(
    size: u64,
    local_segment: SegmentId,
    local_base: u64,
    remote_segment: SegmentId,
    remote_base: u64,
) -> Vec<ListEntry> {
    pieces(size)
        .into_iter()
        .map(|(off, len)| ListEntry {
            local: local(local_segment, local_base + off),
            remote_segment,
            remote_offset: remote_base + off,
            size: len,
        })
        .collect()
}

/// Waits for the case's notification in the target segment, checks its id and value, and
/// that no other notification of the scenario is set.
fn expect_notification(ctx: &Context, case: Case, value: u32) -> Outcome {
    let ids = SIZES.len() as u32 * Op::ALL.len() as u32;
    let id = ctx
        .notify_waitsome(DST, 0, ids, TIMEOUT)
        .doing(|| format!("{case}: waiting for notification {}", case.index))?;
    ensure!(
        id == case.index,
        "{case}: notification {id} arrived, expected {}",
        case.index
    );
    let got = ctx
        .notify_reset(DST, id)
        .doing(|| format!("{case}: resetting notification {id}"))?;
    ensure!(
        got == value,
        "{case}: notification {id} has value {got}, expected {value}"
    );
    match ctx.notify_waitsome(DST, 0, ids, Timeout::Test) {
        Err(Error::Timeout) => Ok(()),
        Ok(extra) => Err(crate::check::Failure(format!(
            "{case}: unexpected notification {extra} (value {:?}) is set",
            ctx.notify_peek(DST, extra)
        ))),
        Err(e) => Err(crate::check::Failure(format!(
            "{case}: checking for stray notifications: {e}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pieces_cover_the_range_exactly() {
        for size in [1, 2, 5, 7, 4096, 1 << 20] {
            let mut p = pieces(size);
            assert!(p.iter().all(|&(_, len)| len > 0), "{size}: {p:?}");
            p.sort_unstable();
            let mut next = 0;
            for (off, len) in p {
                assert_eq!(off, next, "{size}");
                next += len;
            }
            assert_eq!(next, size);
        }
    }

    #[test]
    fn cases_and_values_are_distinct() {
        let all = cases(u64::MAX);
        assert_eq!(all.len(), 8 * 4);
        let mut values: Vec<u32> = (0..4)
            .flat_map(|r| all.iter().map(move |&c| case_value(r, c)))
            .collect();
        values.sort_unstable();
        values.dedup();
        assert_eq!(values.len(), 4 * all.len());
        assert!(cases(4096).iter().all(|c| c.size <= 4096));
    }
}
