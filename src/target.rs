//! Prepared targets: a range of a segment on some rank, resolved and checked once, for cheap
//! repeated posting ([`Batch`](crate::Batch)) and atomics.

use gaspi_notifications::Timeout;

use crate::atomic::{AtomicOp, AtomicRequest};
use crate::context::{Context, Inner};
use crate::engine::lookup::{Descriptor, Known};
use crate::error::{Error, Rank, Result, SegmentId};
use crate::queue::{place, Dest};
use crate::rma::{check_notification, Notification};
use crate::wire::{Table, WireNotification};

/// A range of a segment on some rank, resolved (its descriptor read) and checked once.
///
/// Offsets passed with a target are relative to the start of its range. Operations through a
/// target of a rank reached through the fabric skip the lookup of the segment that operations
/// by id make (towards a rank reached directly they read its directory, as those do), until
/// the segment's rank announces that it deleted one of its segments (see
/// [`Context::segment_delete`]):
/// from then on they look the segment up as operations by id do, so a target goes on naming
/// segment `id` of its rank. Towards a segment made anew they reach the new segment (an
/// [`Error::OutOfBounds`] when the range no longer fits it); towards a segment that is gone
/// they fail with [`Error::UnknownSegment`], at the call or, through the fabric when the
/// answer takes a lookup, at the wait of the operation's batch. A target of a library
/// segment names that segment, not its local id (which the rank's next library segment, of
/// any library, takes once it is deleted): once it is gone, operations through the target
/// fail as towards a segment that is gone, also when its id is taken. An operation posted
/// before the news of a deletion arrived may still reach the deleted segment: as for every
/// operation, deletions must be synchronised with the ranks that write into the segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub(crate) rank: Rank,
    pub(crate) table: Table,
    pub(crate) descriptor: Descriptor,
    /// The range, within the segment.
    pub(crate) start: u64,
    pub(crate) len: u64,
    /// The deletions of `rank`'s segments this rank had heard of before resolving: while
    /// the count is the same, the descriptor is current without a look at the cache.
    pub(crate) deletions: u32,
    /// The entries `rank` had withdrawn from its directory before resolving, when it is
    /// reached directly: while the count is the same, the descriptor is the one published.
    pub(crate) withdrawals: u32,
}

impl Target {
    /// The rank the segment belongs to.
    pub fn rank(&self) -> Rank {
        self.rank
    }

    /// Length of the range in bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the range is empty (a notification table without memory).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Notifications in the segment's table.
    pub fn notifications(&self) -> u32 {
        self.descriptor.notifications
    }

    /// The part `offset..offset + len` of this target's range.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when it does not lie within the range.
    pub fn range(&self, offset: u64, len: u64) -> Result<Target> {
        self.check(offset, len)?;
        Ok(Target {
            start: self.start + offset,
            len,
            ..*self
        })
    }

    pub(crate) fn segment(&self) -> SegmentId {
        self.table.id()
    }

    pub(crate) fn check(&self, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(Error::OutOfBounds {
                rank: self.rank,
                segment: self.segment(),
                offset: self.start.saturating_add(offset),
                size: len,
                segment_size: self.descriptor.size,
            })
        }
    }

    /// Where `offset..offset + len` of the range is, checked against the range and, as for
    /// every transfer, the provider's largest message: with the descriptor resolved, or,
    /// once the rank announced a deletion since, as an operation by id finds it (see
    /// [`Target`]).
    pub(crate) fn dest(&self, inner: &Inner, offset: u64, len: u64) -> Result<Dest> {
        self.check(offset, len)?;
        let at = self.start + offset;
        // A same-host peer's news of a deletion comes through the fabric, and a
        // synchronisation that went direct (the barrier of the segment's re-creation) can
        // overtake it: a fabric write with the old descriptor then reached the deleted memory
        // while its notification was set in the new table. The peer's directory, read by
        // `Inner::dest`, says what holds now.
        if inner.descriptors.deletions(self.rank) == self.deletions
            && !inner.direct.reaches(self.rank)
        {
            return place(inner, self.rank, self.segment(), &self.descriptor, at, len)
                .map(Dest::Ready);
        }
        inner.dest_of(
            self.rank,
            self.table.segment_key()?,
            self.incarnation(),
            at,
            len,
        )
    }

    /// For a library segment, the segment itself: its local id passes to the rank's next
    /// library segment (of any library) once it is deleted, and an operation through this
    /// target must not reach that one. A user segment's target follows its id instead.
    pub(crate) fn incarnation(&self) -> Option<u32> {
        matches!(self.table, Table::Library(_)).then_some(self.descriptor.incarnation)
    }

    /// Whether `found`, the segment behind this target's id now, is the one it names.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`] when it is another library segment.
    pub(crate) fn names(&self, found: &Descriptor) -> Result<()> {
        match self.incarnation() {
            Some(i) if i != found.incarnation => Err(Error::UnknownSegment {
                rank: self.rank,
                segment: self.segment(),
            }),
            _ => Ok(()),
        }
    }

    /// `n` for this target's table, checked.
    pub(crate) fn wire(&self, n: Notification) -> Result<WireNotification> {
        check_notification(self.rank, self.segment(), self.descriptor.notifications, n)?;
        Ok(WireNotification::new(self.table, n.id, n.value))
    }
}

impl Context {
    /// Whether `target` is as its segment was when it was resolved, as far as this rank
    /// knows without asking anyone: `false` once the segment is gone or made anew (perhaps
    /// in another size). A holder of targets that keys them by segment id (a window over a
    /// segment, say) resolves such a target again ([`target`](Self::target)) to see the
    /// segment as it is now; operations through it already follow the id (see [`Target`]),
    /// within the range it was resolved with.
    ///
    /// For a rank reached directly (this one included) it tells whether the rank withdrew an
    /// entry of its directory since (a segment deleted or made anew, a group's reduction area
    /// deleted), as the directory counts them (one load): known here as soon as the deletion
    /// returned there. For a rank reached through the fabric it tells
    /// whether the rank announced the deletion of one of its segments since (one load): the
    /// news travels with that rank's other traffic, so a rank that made a segment anew and
    /// then synchronised with this one has usually, but not certainly, been heard of. For this
    /// rank's own segments without the direct path it compares with the segment as it is now.
    // Inline, with the look at this rank's own segments out of line: a caller that checks a
    // target before each use (a PSCW start) paid more for the call than for its two loads.
    #[inline]
    pub fn target_is_current(&self, target: &Target) -> bool {
        let inner = &self.inner;
        if inner.descriptors.deletions(target.rank) != target.deletions {
            return false;
        }
        if let Some(withdrawals) = inner.direct.withdrawals(target.rank) {
            return withdrawals == target.withdrawals;
        }
        target.rank != self.rank() || self.own_target_is_current(target)
    }

    /// [`target_is_current`](Self::target_is_current) for a target of this rank's own segment
    /// without the direct path: whether the segment is still the one it was resolved from.
    #[inline(never)]
    fn own_target_is_current(&self, target: &Target) -> bool {
        let inner = &self.inner;
        let Ok(key) = target.table.segment_key() else {
            return true;
        };
        matches!(
            inner.known_now(target.rank, key),
            Some(Known::Present(now)) if now == target.descriptor
        )
    }

    /// Segment `id` of `rank` as a [`Target`], its descriptor read within `timeout` (once:
    /// later calls find it cached).
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::UnknownSegment`]; [`Error::Timeout`] (the lookup goes
    /// on, and the next call finds it); [`Error::RankFailed`].
    pub fn target(&self, rank: Rank, id: SegmentId, timeout: Timeout) -> Result<Target> {
        self.resolve_target(rank, Table::User(id), timeout)
    }

    pub(crate) fn resolve_target(
        &self,
        rank: Rank,
        table: Table,
        timeout: Timeout,
    ) -> Result<Target> {
        self.check_rank(rank)?;
        let key = table.segment_key()?;
        let segment = table.id();
        // Counted before the descriptor is found: a deletion heard of in between makes the
        // target look again, rather than trust a descriptor the cache forgot.
        let deletions = self.inner.descriptors.deletions(rank);
        let withdrawals = self.inner.direct.withdrawals(rank).unwrap_or(0);
        match self.inner.resolve(rank, key, timeout.deadline())? {
            Known::Present(descriptor) => Ok(Target {
                rank,
                table,
                descriptor,
                start: 0,
                len: descriptor.size,
                deletions,
                withdrawals,
            }),
            Known::Absent => Err(Error::UnknownSegment { rank, segment }),
        }
    }

    /// Starts an atomic fetch-and-add on the u64 at `offset` of `target` (8-byte aligned),
    /// which also sets `notification` in the target's table once the word changed, if given.
    ///
    /// # Errors
    /// As for [`atomic_fetch_add_nb`](Self::atomic_fetch_add_nb); [`Error::OutOfBounds`]
    /// when the word is outside the target's range.
    pub fn atomic_fetch_add_at(
        &self,
        target: &Target,
        offset: u64,
        value: u64,
        notification: Option<Notification>,
    ) -> Result<AtomicRequest<'_>> {
        self.atomic_at(target, offset, AtomicOp::FetchAdd(value), notification)
    }

    /// Starts an atomic compare-and-swap on the u64 at `offset` of `target`, which also sets
    /// `notification` in the target's table once it happened, if given.
    ///
    /// # Errors
    /// As for [`atomic_fetch_add_at`](Self::atomic_fetch_add_at).
    pub fn atomic_compare_swap_at(
        &self,
        target: &Target,
        offset: u64,
        compare: u64,
        new: u64,
        notification: Option<Notification>,
    ) -> Result<AtomicRequest<'_>> {
        let op = AtomicOp::CompareSwap { compare, new };
        self.atomic_at(target, offset, op, notification)
    }

    fn atomic_at(
        &self,
        target: &Target,
        offset: u64,
        op: AtomicOp,
        notification: Option<Notification>,
    ) -> Result<AtomicRequest<'_>> {
        target.check(offset, 8)?;
        let notify = notification
            .map(|n| target.wire(n).map(|w| (w.id, w.value)))
            .transpose()?;
        let pending = self.inner.start_atomic(
            target.rank,
            target.table,
            target.incarnation(),
            target.start + offset,
            op,
            notify,
            Timeout::Test.deadline(),
        )?;
        Ok(self.atomic_request(pending))
    }
}
