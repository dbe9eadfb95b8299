//! Waiting for and consuming notifications in this rank's segments.
//!
//! The tables themselves live in `gaspi-notifications`; this module maps segment ids to tables
//! and the table's errors to [`Error`] with the rank and segment filled in.

use gaspi_notifications::Timeout;

use crate::context::Context;
use crate::error::{Error, NotificationId, Result, SegmentId};

impl Context {
    /// Waits until one of the notifications `begin..begin + num` of segment `segment` is set and
    /// returns its id (the lowest one set). The notification stays set; consume it with
    /// [`notify_reset`](Self::notify_reset).
    ///
    /// Any number of threads may wait at once, on disjoint or overlapping ranges. The data of
    /// the write that carried the notification is visible once this returns its id.
    ///
    /// The wait is not tied to a sender, so the death of the rank that would have set the
    /// notification does not end it (unlike [`wait`](Self::wait) and the barriers): pass a
    /// finite timeout where a sender may die, and ask [`state_vec`](Self::state_vec) or
    /// [`proc_ping`](Self::proc_ping) about it after a [`Error::Timeout`].
    pub fn notify_waitsome(
        &self,
        segment: SegmentId,
        begin: NotificationId,
        num: u32,
        timeout: Timeout,
    ) -> Result<NotificationId> {
        let seg = self.inner.segments.local(self.rank(), segment)?;
        seg.notifications
            .wait_some(begin, num, timeout, self.inner.waiter())
            .map_err(|e| self.notification_error(segment, e))
    }

    /// Atomically takes notification `id` of segment `segment`: returns its value and leaves 0.
    ///
    /// Two threads resetting the same id never both see the value: one gets it, the other 0.
    pub fn notify_reset(&self, segment: SegmentId, id: NotificationId) -> Result<u32> {
        self.inner
            .segments
            .with_local(segment, |seg| seg.notifications.reset(id))
            .ok_or(Error::UnknownSegment {
                rank: self.rank(),
                segment,
            })?
            .map_err(|e| self.notification_error(segment, e))
    }

    /// The current value of notification `id` of segment `segment` (0 = unset), without waiting
    /// or consuming it.
    pub fn notify_peek(&self, segment: SegmentId, id: NotificationId) -> Result<u32> {
        self.inner
            .segments
            .with_local(segment, |seg| seg.notifications.get(id))
            .ok_or(Error::UnknownSegment {
                rank: self.rank(),
                segment,
            })?
            .map_err(|e| self.notification_error(segment, e))
    }

    fn notification_error(&self, segment: SegmentId, e: gaspi_notifications::Error) -> Error {
        let count = self.inner.config.notifications;
        let rank = self.rank();
        match e {
            gaspi_notifications::Error::Timeout => Error::Timeout,
            gaspi_notifications::Error::OutOfRange { id, .. } => Error::InvalidNotification {
                rank,
                segment,
                id,
                count,
            },
            gaspi_notifications::Error::EmptyRange { begin } => Error::InvalidNotification {
                rank,
                segment,
                id: begin.into(),
                count,
            },
            gaspi_notifications::Error::ZeroValue { id } => {
                Error::ZeroNotificationValue { rank, id }
            }
            other => Error::Protocol(other.to_string()),
        }
    }
}
