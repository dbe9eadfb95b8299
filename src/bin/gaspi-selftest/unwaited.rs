//! `unwaited`: every rank writes megabytes into each of the next [`PARTNERS`] ranks (every
//! other rank in a job of up to `PARTNERS + 1`) on several queues and calls finalize without
//! waiting for them. Finalize, in `main`, is the check: it must succeed on every rank, and no
//! rank may be named dead for leaving after its writes (before the fix, through the fabric over
//! tcp, a rank closed its endpoint while its writes were still in flight, and a peer still in
//! finalize saw the connection reset: `RankFailed` naming a rank that had finalized).

use gaspi::{local, remote, Context, Notification};

use crate::check::{Doing, Failure, Report};
use crate::FINALIZE_TIMEOUT;

const SEGMENT: u8 = 0;
/// Queues each rank writes on.
const QUEUES: u8 = 2;
/// Bytes of each write: several of them fill the socket buffers between two ranks.
const SIZE: u64 = 4 << 20;
/// Ranks each rank writes to at most. Writing to every other rank grew the job's traffic
/// with n²: 7.75 GiB at 32 ranks, which over tcp through the fabric finalize's fixed 60 s
/// did not drain. Bounded, a rank's traffic stays that of a 4-rank job at any size.
const PARTNERS: u32 = 3;

/// Posts the writes and returns; finalize, which the caller makes, is the check.
pub fn run(ctx: &Context) -> Result<Report, Failure> {
    let (me, n) = (ctx.rank(), ctx.size());
    let partners = PARTNERS.min(n - 1);
    // One block per writer and queue, the writer's by its distance: writers never overlap. The
    // first `QUEUES` blocks are also the source (a job of one rank has no writers).
    let blocks = u64::from(partners) * u64::from(QUEUES);
    ctx.segment_create(
        SEGMENT,
        blocks.max(u64::from(QUEUES)) * SIZE,
        FINALIZE_TIMEOUT,
    )
    .doing(|| "segment_create")?;
    ctx.segment_write(SEGMENT, 0, &vec![0xa5; (u64::from(QUEUES) * SIZE) as usize])
        .doing(|| "filling the source blocks")?;
    ctx.barrier(FINALIZE_TIMEOUT).doing(|| "barrier")?;
    for distance in 1..=partners {
        let to = (me + distance) % n;
        for q in 0..QUEUES {
            let block = u64::from(distance - 1) * u64::from(QUEUES) + u64::from(q);
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
        "{QUEUES} writes of {} MiB to each of {partners} other ranks, not waited for, then finalize",
        SIZE >> 20
    )))
}
