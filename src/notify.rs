//! Waiting for and consuming notifications in this rank's segments.
//!
//! The tables themselves live in `gaspi-notifications`; this module maps segment ids to tables
//! and the table's errors to [`Error`] with the rank and segment filled in. Every table of a
//! context notifies one shared event count, so that one wait can watch ranges of several
//! segments at once ([`Context::notify_wait_any`]).

use std::sync::Arc;

use gaspi_notifications::{Deadline, NotificationTable, Timeout};

use crate::context::Context;
use crate::error::{Error, NotificationId, Rank, Result, SegmentId};
use crate::wire::Table;

/// Notifications `begin..begin + num` of one of this rank's segments, from
/// [`Segment::range`](crate::Segment::range), for [`Context::notify_wait_any`].
#[derive(Clone, Copy)]
pub struct NotificationRange<'a> {
    pub(crate) table: &'a NotificationTable,
    pub(crate) segment: SegmentId,
    pub(crate) begin: NotificationId,
    pub(crate) num: u32,
}

impl std::fmt::Debug for NotificationRange<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NotificationRange")
            .field("segment", &self.segment)
            .field("begin", &self.begin)
            .field("num", &self.num)
            .finish()
    }
}

/// A notification found set by [`Context::notify_wait_any`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Arrival {
    /// Index of its range in the slice that was passed.
    pub range: usize,
    /// Its id in its segment's table.
    pub id: NotificationId,
}

impl Context {
    /// Waits until one of the notifications `begin..begin + num` of segment `segment` is set and
    /// returns its id (the lowest one set). The notification stays set; consume it with
    /// [`notify_reset`](Self::notify_reset).
    ///
    /// Any number of threads may wait at once, on disjoint or overlapping ranges. The data of
    /// the write that carried the notification is visible once this returns its id.
    ///
    /// The wait is not tied to a sender, so the death of the rank that would have set the
    /// notification does not end it: where a sender may die, name it in
    /// [`notify_wait_any`](Self::notify_wait_any), or pass a finite timeout and ask
    /// [`state_vec`](Self::state_vec) or [`proc_ping`](Self::proc_ping) after an
    /// [`Error::Timeout`].
    ///
    /// GASPI's `gaspi_notify_waitsome` succeeds at once for `num == 0`; this call returns the
    /// id that was set, and an empty range has none to return, so it refuses it instead.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`]; [`Error::EmptyNotificationRange`];
    /// [`Error::InvalidNotification`] for a range beyond the table; [`Error::Timeout`].
    pub fn notify_waitsome(
        &self,
        segment: SegmentId,
        begin: NotificationId,
        num: u32,
        timeout: Timeout,
    ) -> Result<NotificationId> {
        // What is already set is answered under a loan of the segment: a reference of its own
        // (needed only to wait) would move the segment's count between the cores of every
        // thread that waits on it. A wait takes that reference under the same loan: a second
        // lookup and pin cost ~45 instructions and a locked one between the first look and the
        // first poll, where an arriving notification goes unseen. `first` is the id set, or
        // the segment to wait on.
        let first = self
            .inner
            .segments
            .with_segment(Table::User(segment), |seg| {
                (seg.notifications.first_set(begin, num))
                    .map(|set| set.ok_or_else(|| Arc::clone(seg)))
            })
            .ok_or_else(|| Error::UnknownSegment {
                rank: self.rank(),
                segment,
            })?
            .map_err(|e| self.notification_error(segment, e))?;
        let seg = match first {
            Ok(id) => return Ok(id),
            Err(seg) => seg,
        };
        seg.notifications
            .wait_some(begin, num, timeout, self.inner.waiter())
            .map_err(|e| self.notification_error(segment, e))
    }

    /// Atomically takes notification `id` of segment `segment`: returns its value and leaves 0.
    ///
    /// Two threads resetting the same id never both see the value: one gets it, the other 0.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`]; [`Error::InvalidNotification`] when `id` is outside the
    /// table.
    pub fn notify_reset(&self, segment: SegmentId, id: NotificationId) -> Result<u32> {
        self.inner
            .segments
            .with_table(Table::User(segment), |table| table.reset(id))
            .ok_or_else(|| Error::UnknownSegment {
                rank: self.rank(),
                segment,
            })?
            .map_err(|e| self.notification_error(segment, e))
    }

    /// The current value of notification `id` of segment `segment` (0 = unset), without waiting
    /// or consuming it.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`]; [`Error::InvalidNotification`] when `id` is outside the
    /// table.
    pub fn notify_peek(&self, segment: SegmentId, id: NotificationId) -> Result<u32> {
        self.inner
            .segments
            .with_table(Table::User(segment), |table| table.get(id))
            .ok_or_else(|| Error::UnknownSegment {
                rank: self.rank(),
                segment,
            })?
            .map_err(|e| self.notification_error(segment, e))
    }

    /// Waits until a notification in any of `ranges` (of any of this rank's segments, user or
    /// library) is set and returns which: the first range with one set, and its lowest set id.
    /// The notification stays set.
    ///
    /// `senders` are the ranks the notifications are expected from: while waiting, their
    /// health is watched as in every wait of the runtime, so the death of one of them ends the
    /// wait with [`Error::RankFailed`] naming it (within milliseconds for a peer on this host,
    /// about a second for one on another host over tcp), also under `Timeout::Block`; a slow
    /// or stopped sender is not dead, and the wait then ends at its timeout.
    ///
    /// `timeout` is a [`Timeout`], counted from when the call first has to wait, or a
    /// [`Deadline`] (a library's call that waits several times under one
    /// timeout passes its deadline as it is: nothing is converted, and the clock is read only
    /// when the call has to wait).
    ///
    /// ```
    /// # use gaspi::{Context, Notification, Timeout};
    /// # let ctx = Context::init()?;
    /// # let t = Timeout::Millis(10_000);
    /// # ctx.segment_create(0, 4096, t)?;
    /// # ctx.segment_create(1, 4096, t)?;
    /// # ctx.notify((ctx.rank() + 1) % ctx.size(), 1, Notification { id: 101, value: 7 }, 0)?;
    /// let left = (ctx.rank() + ctx.size() - 1) % ctx.size();
    /// let (a, b) = (ctx.segment(0)?, ctx.segment(1)?);
    /// let got = ctx.notify_wait_any(&[a.range(0, 8), b.range(100, 4)], &[left], Timeout::Millis(500))?;
    /// let value = [&a, &b][got.range].notify_reset(got.id)?;
    /// # assert_eq!((got.range, got.id, value), (1, 101, 7));
    /// # Ok::<(), gaspi::Error>(())
    /// ```
    ///
    /// # Errors
    /// [`Error::EmptyNotificationRange`] and [`Error::InvalidNotification`] for a range beyond
    /// its table (checked before waiting), [`Error::Buffers`] for no ranges at all,
    /// [`Error::InvalidRank`] for a sender outside the job; [`Error::UnknownSegment`] for a
    /// range of a user segment deleted before or during the wait, as for
    /// [`notify_waitsome`](Self::notify_waitsome); [`Error::RankFailed`]; [`Error::Timeout`].
    pub fn notify_wait_any(
        &self,
        ranges: &[NotificationRange<'_>],
        senders: &[Rank],
        timeout: impl Into<Deadline>,
    ) -> Result<Arrival> {
        if ranges.is_empty() {
            return Err(Error::Buffers(
                "notify_wait_any needs at least one range".into(),
            ));
        }
        for &rank in senders {
            self.check_rank(rank)?;
        }
        // Validates every range at the first look; what is already set is returned without
        // watching anyone. A look at one id is one load (see `NotificationTable::first_set`):
        // views of the ranges, kept for the later looks, cost more to gather (~90 of the
        // call's ~410 instructions in a `SmallVec`, ~60 in an array) than the polls save.
        let mut first = None;
        for (range, r) in ranges.iter().enumerate() {
            let set = (r.table.first_set(r.begin, r.num))
                .map_err(|e| self.notification_error(r.segment, e))?;
            first = first.or(set.map(|id| Arrival { range, id }));
        }
        if let Some(arrival) = first {
            return Ok(arrival);
        }
        let me = self.rank();
        let scan = || {
            for (range, r) in ranges.iter().enumerate() {
                // Validated above: a range stays valid, as its table's length never changes.
                if let Ok(Some(id)) = r.table.first_set(r.begin, r.num) {
                    return Some(Ok(Arrival { range, id }));
                }
            }
            // A segment deleted meanwhile ends the wait: nothing will be set in it.
            let closed = ranges.iter().find(|r| r.table.is_closed())?;
            Some(Err(Error::UnknownSegment {
                rank: me,
                segment: closed.segment,
            }))
        };
        self.inner.watched_until_on(
            &self.inner.arrivals,
            || senders.iter().copied(),
            timeout.into(),
            scan,
        )?
    }

    /// Waits until a notification of `range` (of one of this rank's segments, user or
    /// library) is set and returns its id, the lowest one set; the notification stays set.
    /// [`notify_wait_any`](Self::notify_wait_any) for one range, at the cost of a look at the
    /// range when something is set there (for one id, a load), with no loop over ranges and
    /// no [`Arrival`] to build.
    ///
    /// `senders` are watched as in `notify_wait_any`: the death of one of them ends the wait
    /// with [`Error::RankFailed`] naming it, also under `Timeout::Block`. `timeout` is a
    /// [`Timeout`] (`Timeout::Test` is the try form: one look, never blocking), counted from
    /// when the call first has to wait, or a [`Deadline`]. While nothing is set the call
    /// waits as every wait of the runtime does: it polls for a moment (a notification due
    /// within a round trip costs no sleep and wake-up), then sleeps until the notification
    /// or a death wakes it, never spinning while idle.
    ///
    /// ```
    /// # use gaspi::{Context, Notification, Timeout};
    /// # let ctx = Context::init()?;
    /// # let t = Timeout::Millis(10_000);
    /// # ctx.segment_create(0, 4096, t)?;
    /// # ctx.notify((ctx.rank() + 1) % ctx.size(), 0, Notification { id: 5, value: 3 }, 0)?;
    /// let left = (ctx.rank() + ctx.size() - 1) % ctx.size();
    /// let seg = ctx.segment(0)?;
    /// let id = ctx.notify_wait_range(seg.range(4, 2), &[left], Timeout::Millis(500))?;
    /// # assert_eq!((id, seg.notify_reset(id)?), (5, 3));
    /// # Ok::<(), gaspi::Error>(())
    /// ```
    ///
    /// # Errors
    /// As [`notify_wait_any`](Self::notify_wait_any) for one range:
    /// [`Error::EmptyNotificationRange`] and [`Error::InvalidNotification`] for a range beyond
    /// its table, [`Error::InvalidRank`] for a sender outside the job (all checked before
    /// waiting); [`Error::UnknownSegment`] for a user segment deleted before or during the
    /// wait; [`Error::RankFailed`]; [`Error::Timeout`].
    pub fn notify_wait_range(
        &self,
        range: NotificationRange<'_>,
        senders: &[Rank],
        timeout: impl Into<Deadline>,
    ) -> Result<NotificationId> {
        for &rank in senders {
            self.check_rank(rank)?;
        }
        let (table, begin, num) = (range.table, range.begin, range.num);
        let first = table.first_set(begin, num);
        if let Some(id) = first.map_err(|e| self.notification_error(range.segment, e))? {
            return Ok(id);
        }
        let me = self.rank();
        // Validated above (a table's length never changes): a look at one id is one load.
        let scan = || match table.first_set(begin, num).ok().flatten() {
            Some(id) => Some(Ok(id)),
            // A segment deleted meanwhile ends the wait: nothing will be set in it.
            None => range
                .table
                .is_closed()
                .then_some(Err(Error::UnknownSegment {
                    rank: me,
                    segment: range.segment,
                })),
        };
        self.inner.watched_until_on(
            &self.inner.arrivals,
            || senders.iter().copied(),
            timeout.into(),
            scan,
        )?
    }

    pub(crate) fn notification_error(
        &self,
        segment: SegmentId,
        e: gaspi_notifications::Error,
    ) -> Error {
        let rank = self.rank();
        match e {
            gaspi_notifications::Error::Timeout => Error::Timeout,
            gaspi_notifications::Error::OutOfRange { id, len } => Error::InvalidNotification {
                rank,
                segment,
                id,
                count: len,
            },
            gaspi_notifications::Error::EmptyRange { begin, .. } => Error::EmptyNotificationRange {
                rank,
                segment,
                begin,
            },
            gaspi_notifications::Error::ZeroValue { id } => {
                Error::ZeroNotificationValue { rank, id }
            }
            // The segment was deleted while this call waited on it.
            gaspi_notifications::Error::Closed => Error::UnknownSegment { rank, segment },
            other => Error::Protocol(other.to_string()),
        }
    }
}
