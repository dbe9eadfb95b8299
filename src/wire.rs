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

use crate::error::{NotificationId, SegmentId};

/// A notification as decoded from remote completion data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireNotification {
    pub system: bool,
    pub segment: SegmentId,
    pub id: NotificationId,
    pub value: u32,
}

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
}
