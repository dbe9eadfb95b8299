//! `unwaited`: every rank writes megabytes into every other rank on several queues and calls
//! finalize without waiting for them. Finalize, in `main`, is the check: it must succeed on
//! every rank, and no rank may be named dead for leaving after its writes (before the fix,
//! through the fabric over tcp, a rank closed its endpoint while its writes were still in
//! flight, and a peer still in finalize saw the connection reset: `RankFailed` naming a rank
//! that had finalized).

use gaspi::{local, remote, Context, Notification};

use crate::check::{Doing, Failure, Report};
use crate::FINALIZE_TIMEOUT;

const SEGMENT: u8 = 0;
/// Queues each rank writes on.
const QUEUES: u8 = 2;
/// Bytes of each write: several of them fill the socket buffers between two ranks.
const SIZE: u64 = 4 << 20;

/// Posts the writes and returns; finalize, which the caller makes, is the check.
pub fn run(ctx: &Context) -> Result<Report, Failure> {
    let (me, n) = (ctx.rank(), ctx.size());
    // One block per writer and queue: writers never overlap.
    let blocks = u64::from(n) * u64::from(QUEUES);
    ctx.segment_create(SEGMENT, blocks * SIZE, FINALIZE_TIMEOUT)
        .doing(|| "segment_create")?;
    ctx.segment_write(SEGMENT, 0, &vec![0xa5; (u64::from(QUEUES) * SIZE) as usize])
        .doing(|| "filling the source blocks")?;
    ctx.barrier(FINALIZE_TIMEOUT).doing(|| "barrier")?;
    for to in (0..n).filter(|&r| r != me) {
        for q in 0..QUEUES {
            let block = u64::from(me) * u64::from(QUEUES) + u64::from(q);
            let notification = Notification {
                id: u32::try_from(block).expect("few blocks"),
                value: 1,
            };
            ctx.write_notify(
                local(SEGMENT, u64::from(q) * SIZE),
                remote(to, SEGMENT, block * SIZE),
                SIZE,
                notification,
                q,
            )
            .doing(|| format!("write_notify to rank {to} on queue {q}"))?;
        }
    }
    Ok(Report::from(format!(
        "{QUEUES} writes of {} MiB to every other rank, not waited for, then finalize",
        SIZE >> 20
    )))
}
