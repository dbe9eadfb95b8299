//! A resumable dissemination barrier among the members of a collective object, on the
//! notification table of one of its library segments: a library cannot take part in the
//! user's barriers (they would collide with the user's own), so it brings its own.
//!
//! In round `q` of `ceil(log2 n)`, member `m` notifies member `m + 2^q` and waits for member
//! `m - 2^q` (mod `n`). Each barrier of an object has an epoch; its notifications carry the
//! epoch's tag and use one of two banks by the epoch's parity, because a member may enter the
//! next barrier while a slower one still consumes the last — never further, since leaving a
//! barrier needs everyone to have entered it.

use gaspi::{Batch, Context, Deadline, Notification, NotificationId, Rank, Segment, Target};

use crate::error::{Error, Result};

/// Dissemination rounds per bank of notifications.
pub(crate) const ROUNDS: u32 = 32;

/// Notifications a barrier needs from its base id.
pub(crate) const NOTIFICATIONS: u32 = 2 * ROUNDS;

/// One barrier in progress on this member.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Barrier {
    epoch: u64,
    round: u32,
    /// Whether this member has notified its partner of `round`.
    sent: bool,
}

/// What a barrier runs over.
pub(crate) struct Members<'a, 'c> {
    pub(crate) ctx: &'c Context,
    /// The members' ranks, by member index.
    pub(crate) ranks: &'a [Rank],
    /// This member's index.
    pub(crate) me: u32,
    /// The segment whose table carries the barrier, from id `base` on.
    pub(crate) segment: &'a Segment<'c>,
    pub(crate) base: NotificationId,
    pub(crate) batch: &'a Batch<'c>,
}

impl Barrier {
    /// Barrier `epoch` (numbered from 1 on each object, in the same order on every member).
    pub(crate) fn new(epoch: u64) -> Barrier {
        Barrier {
            epoch,
            round: 0,
            sent: false,
        }
    }

    /// Runs the barrier as far as `deadline` lets it: `Ok` once every member entered it;
    /// after a timeout, call again to continue. `target` resolves a member's copy of the
    /// segment.
    ///
    /// # Errors
    /// [`gaspi::Error::Timeout`]; [`gaspi::Error::RankFailed`] naming a dead member (any
    /// member, as a live partner may be stuck on a dead one);
    /// [`Error::OutOfStep`] when a partner is in another barrier.
    pub(crate) fn run(
        &mut self,
        on: &Members<'_, '_>,
        mut target: impl FnMut(Rank, Deadline) -> Result<Target>,
        deadline: Deadline,
    ) -> Result<()> {
        let n = on.ranks.len() as u64;
        let tag = crate::tag(self.epoch);
        let bank = (self.epoch % 2) as u32 * ROUNDS;
        while (1u64 << self.round) < n {
            let step = 1u64 << self.round;
            let id = on.base + bank + self.round;
            if !self.sent {
                let to = on.ranks[((u64::from(on.me) + step) % n) as usize];
                let to = target(to, deadline)?;
                on.batch.notify(&to, Notification { id, value: tag })?;
                self.sent = true;
            }
            let from = on.ranks[((u64::from(on.me) + n - step) % n) as usize];
            // Every member is watched, not only this round's partner: a live partner may
            // itself wait for a dead member, and never send.
            on.ctx
                .notify_wait_any(&[on.segment.range(id, 1)], on.ranks, deadline)?;
            let got = on.segment.notify_reset(id)?;
            if got != tag {
                return Err(Error::OutOfStep {
                    rank: from,
                    expected: tag,
                    got,
                });
            }
            self.round += 1;
            self.sent = false;
        }
        // Notifications complete at once; reaping them keeps the batch from filling up.
        on.batch.test()?;
        Ok(())
    }
}
