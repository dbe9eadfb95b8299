//! What travels in the 64-bit remote completion data of a write: the notification.
//!
//! This is the heart of the ordering guarantee. A write-with-notification is one `fi_writedata`:
//! the target's provider reports the remote completion, with this word attached, only after the
//! payload of that very write has been placed. The progress engine then stores the value into the
//! notification table with release ordering. So a notification can never be visible before its
//! data, on any provider, whatever write-after-write ordering it grants.
//!
//! Layout, most significant bit first: `runtime:1 | table:8 | id:23 | value:32`. With the
//! runtime bit clear, `table` is a user segment id; with it set, table 0 is the runtime's own
//! system table (barriers, group commits, allreduce steps, and a few ids the progress engine
//! acts on itself), and tables 1..=255 are library segments by their local id on the target.
//! So neither the runtime nor libraries take anything from the user's segment ids.

use crate::engine::lookup::DescKey;
use crate::error::{Error, NotificationId, Rank, Result, SegmentId};

/// The notification table a notification goes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Table {
    /// The runtime's system table.
    System,
    /// A user segment's table.
    User(SegmentId),
    /// A library segment's table, by its local id (1..=255) on the target.
    Library(u8),
}

impl Table {
    /// The segment id errors name for this table (a library segment's local id; the system
    /// table, which is no segment, 0).
    pub(crate) fn id(self) -> SegmentId {
        match self {
            Table::User(id) | Table::Library(id) => id,
            Table::System => 0,
        }
    }

    /// The descriptor of the segment that owns this table, if it is a segment's.
    pub(crate) fn descriptor(self) -> Option<DescKey> {
        match self {
            Table::System => None,
            Table::User(id) => Some(DescKey::Segment(id)),
            Table::Library(id) => Some(DescKey::Library(id)),
        }
    }

    /// [`descriptor`](Self::descriptor), for a table that must be a segment's.
    ///
    /// # Errors
    /// [`Error::Protocol`] for the system table.
    pub(crate) fn segment_key(self) -> Result<DescKey> {
        self.descriptor()
            .ok_or_else(|| Error::Protocol("the system table is not a segment".into()))
    }
}

/// A notification as decoded from remote completion data.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct WireNotification {
    pub(crate) table: Table,
    pub(crate) id: NotificationId,
    pub(crate) value: u32,
}

/// System notification id announcing that the sender deleted one of its segments; it is acted
/// on by the progress engine, never stored in the system table.
pub(crate) const SEGMENT_GONE: NotificationId = (1 << ID_BITS) - 1;

/// System notification id of the reply to an atomic executed by the target's progress engine
/// (see the `atomic` module): the value names the requester's atomic slot, and the same write
/// placed the result in that slot.
pub(crate) const ATOMIC_REPLY: NotificationId = SEGMENT_GONE - 1;

const ID_BITS: u32 = 23;
const ID_MASK: u64 = (1 << ID_BITS) - 1;

/// Ranks that fit the value of a [`SEGMENT_GONE`] notification: the job size limit.
pub(crate) const MAX_RANKS: u32 = 1 << 22;

impl WireNotification {
    pub(crate) fn new(table: Table, id: NotificationId, value: u32) -> Self {
        WireNotification { table, id, value }
    }

    pub(crate) fn system(id: NotificationId, value: u32) -> Self {
        Self::new(Table::System, id, value)
    }

    /// Whether this goes to the system table.
    pub(crate) fn is_system(self) -> bool {
        self.table == Table::System
    }

    /// "Rank `rank` deleted its segment `key`": peers drop their cached descriptor, so a
    /// later access fails cleanly with `UnknownSegment` instead of hitting a closed
    /// registration.
    pub(crate) fn segment_gone(rank: Rank, table: Table) -> Self {
        let library = u32::from(matches!(table, Table::Library(_)));
        let id = table.id();
        // Ranks are below MAX_RANKS (checked at init), so the value is non-zero and fits.
        Self::system(
            SEGMENT_GONE,
            ((rank << 9) | (library << 8) | u32::from(id)) + 1,
        )
    }

    /// The slot of an [`ATOMIC_REPLY`] notification.
    pub(crate) fn atomic_reply(self) -> Option<u16> {
        (self.is_system() && self.id == ATOMIC_REPLY).then_some(self.value.wrapping_sub(1) as u16)
    }

    /// The (rank, segment) of a [`segment_gone`](Self::segment_gone) notification.
    pub(crate) fn gone(self) -> Option<(Rank, DescKey)> {
        (self.is_system() && self.id == SEGMENT_GONE && self.value != 0).then(|| {
            let v = self.value - 1;
            let id = v as u8;
            let key = if v & (1 << 8) != 0 {
                DescKey::Library(id)
            } else {
                DescKey::Segment(id)
            };
            (v >> 9, key)
        })
    }

    /// Packs into CQ data. `id` must be below 2^23 (checked by the callers against the config,
    /// whose maximum is [`MAX_NOTIFICATIONS`](crate::config::MAX_NOTIFICATIONS)).
    pub(crate) fn encode(self) -> u64 {
        debug_assert!(u64::from(self.id) <= ID_MASK);
        let (runtime, table) = match self.table {
            Table::System => (1u64, 0u8),
            Table::User(id) => (0, id),
            Table::Library(id) => (1, id),
        };
        (runtime << 63)
            | (u64::from(table) << 55)
            | ((u64::from(self.id) & ID_MASK) << 32)
            | u64::from(self.value)
    }

    pub(crate) fn decode(data: u64) -> Self {
        let table = (data >> 55) as u8;
        let table = match (data >> 63 == 1, table) {
            (false, id) => Table::User(id),
            (true, 0) => Table::System,
            (true, id) => Table::Library(id),
        };
        WireNotification {
            table,
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
            WireNotification::new(Table::User(0), 0, 1),
            WireNotification::new(Table::User(255), (1 << 23) - 1, u32::MAX),
            WireNotification::new(Table::Library(1), 5, 2),
            WireNotification::new(Table::Library(255), (1 << 23) - 1, u32::MAX),
            WireNotification::system(7, 42),
            WireNotification::system((1 << 23) - 1, u32::MAX),
        ] {
            assert_eq!(WireNotification::decode(n.encode()), n);
        }
    }

    #[test]
    fn segment_gone_names_rank_and_segment() {
        let gone = |rank, key| {
            WireNotification::decode(WireNotification::segment_gone(rank, key).encode())
        };
        assert_eq!(
            gone(70_000, Table::User(200)).gone(),
            Some((70_000, DescKey::Segment(200)))
        );
        assert_eq!(
            gone(MAX_RANKS - 1, Table::Library(255)).gone(),
            Some((MAX_RANKS - 1, DescKey::Library(255)))
        );
        assert_eq!(WireNotification::system(3, 9).gone(), None);
    }

    #[test]
    fn atomic_replies_name_their_slot() {
        assert_eq!(
            WireNotification::system(ATOMIC_REPLY, 8).atomic_reply(),
            Some(7)
        );
        assert_eq!(
            WireNotification::new(Table::User(0), ATOMIC_REPLY, 8).atomic_reply(),
            None
        );
    }
}
