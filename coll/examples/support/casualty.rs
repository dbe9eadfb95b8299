//! The word survivors give a rank that a fault scenario kills on purpose.
//!
//! A member that died as soon as its own part of a collective was over could fail a survivor
//! still inside that collective, since a dead member ends it for everyone: the survivor would
//! fail before the call the scenario is about. So the victim dies only once every survivor has
//! told it, with a notification on a segment of the scenario's, that it is past that point.

use gaspi::{Context, Notification, QueueId, Rank, SegmentId, Timeout};

/// The user queue the survivors' words go out on.
const QUEUE: QueueId = 0;

/// The victim of a scenario and the segment whose notifications (one per survivor, by rank)
/// carry the survivors' words.
pub struct Casualty {
    victim: Rank,
    segment: SegmentId,
}

impl Casualty {
    /// Creates `segment` on every rank (a collective), for the words to `victim`.
    pub fn new(
        ctx: &Context,
        victim: Rank,
        segment: SegmentId,
        timeout: Timeout,
    ) -> gaspi::Result<Self> {
        ctx.segment_create(segment, 8, timeout)?;
        Ok(Self { victim, segment })
    }

    /// On a survivor: tells the victim that this rank is past the point. The victim may die
    /// as soon as it has every word, so the completion may report that death.
    pub fn past(&self, ctx: &Context, timeout: Timeout) -> gaspi::Result<()> {
        let word = Notification {
            id: ctx.rank(),
            value: 1,
        };
        ctx.notify(self.victim, self.segment, word, QUEUE)?;
        match ctx.wait(QUEUE, timeout) {
            Err(gaspi::Error::RankFailed { rank, .. }) if rank == self.victim => Ok(()),
            done => done,
        }
    }

    /// On the victim: waits until every other rank is past the point.
    pub fn survivors_past(&self, ctx: &Context, timeout: Timeout) -> gaspi::Result<()> {
        for survivor in (0..ctx.size()).filter(|&r| r != self.victim) {
            ctx.notify_waitsome(self.segment, survivor, 1, timeout)?;
        }
        Ok(())
    }
}
