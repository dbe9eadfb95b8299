//! What travels in the 64-bit remote completion data of a write: the notification.
//!
//! This is the heart of the ordering guarantee. A write-with-notification is one `fi_writedata`:
//! the target's provider reports the remote completion, with this word attached, only after the
//! payload of that very write has been placed. The progress engine then stores the value into the
//! notification table with release ordering. So a notification can never be visible before its
//! data, on any provider, whatever write-after-write ordering it grants.
//!
//! Layout, most significant bit first: `system:1 | segment:8 | id:23 | value:32`. The system
//! bit routes runtime-internal notifications (barrier, bootstrap) to their own table, so no user
//! segment id is reserved.

use crate::error::{NotificationId, Rank, SegmentId};

/// A notification as decoded from remote completion data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireNotification {
    pub system: bool,
    pub segment: SegmentId,
    pub id: NotificationId,
    pub value: u32,
}

/// System notification id announcing that the sender deleted one of its segments; it is acted
/// on by the progress engine, never stored in the system table.
pub(crate) const SEGMENT_GONE: NotificationId = (1 << ID_BITS) - 1;

/// System notification id of the reply to an atomic executed by the target's progress engine
/// (see the `atomic` module): the value is the request's sequence number, and the same write
/// placed the result in the requester's system region. Acted on by the progress engine.
pub(crate) const ATOMIC_REPLY: NotificationId = SEGMENT_GONE - 1;

const ID_BITS: u32 = 23;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

impl WireNotification {
    pub(crate) fn user(segment: SegmentId, id: NotificationId, value: u32) -> Self {
        WireNotification {
            system: false,
            segment,
            id,
            value,
        }
    }

    pub(crate) fn system(id: NotificationId, value: u32) -> Self {
        WireNotification {
            system: true,
            segment: 0,
            id,
            value,
        }
    }

    /// "Rank `rank` deleted its segment `segment`": peers drop their cached descriptor, so a
    /// later access fails cleanly with `UnknownSegment` instead of hitting a closed registration.
    pub(crate) fn segment_gone(rank: Rank, segment: SegmentId) -> Self {
        // Ranks are below 2^24 (the job size travels in the same 32-bit value), so the sum is
        // non-zero and does not overflow.
        Self::system(SEGMENT_GONE, ((rank << 8) | u32::from(segment)) + 1)
    }

    /// The sequence number of an [`ATOMIC_REPLY`] notification.
    pub(crate) fn atomic_reply(self) -> Option<u32> {
        (self.system && self.id == ATOMIC_REPLY).then_some(self.value)
    }

    /// The (rank, segment) of a [`segment_gone`](Self::segment_gone) notification.
    pub(crate) fn gone(self) -> Option<(Rank, SegmentId)> {
        (self.system && self.id == SEGMENT_GONE && self.value != 0).then(|| {
            let v = self.value - 1;
            (v >> 8, v as u8)
        })
    }

    /// Packs into CQ data. `id` must be below 2^23 (checked by the callers against the config,
    /// whose maximum is [`MAX_NOTIFICATIONS`](crate::config::MAX_NOTIFICATIONS)).
    pub(crate) fn encode(self) -> u64 {
        debug_assert!(u64::from(self.id) <= ID_MASK);
        (u64::from(self.system) << 63)
            | (u64::from(self.segment) << 55)
            | ((u64::from(self.id) & ID_MASK) << 32)
            | u64::from(self.value)
    }

    pub(crate) fn decode(data: u64) -> Self {
        WireNotification {
            system: data >> 63 == 1,
            segment: (data >> 55) as u8,
            id: ((data >> 32) & ID_MASK) as u32,
            value: data as u32,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_extremes() {
        for n in [
            WireNotification::user(0, 0, 1),
            WireNotification::user(255, (1 << 23) - 1, u32::MAX),
            WireNotification::system(7, 42),
            WireNotification::system((1 << 23) - 1, u32::MAX),
        ] {
            assert_eq!(WireNotification::decode(n.encode()), n);
        }
    }

    #[test]
    fn segment_gone_names_rank_and_segment() {
        let n = WireNotification::decode(WireNotification::segment_gone(70_000, 200).encode());
        assert_eq!(n.gone(), Some((70_000, 200)));
        assert_eq!(WireNotification::system(3, 9).gone(), None);
    }
}
