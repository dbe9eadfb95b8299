//! Owns the crate's error type: everything that can go wrong when touching a notification table
//! or waiting.

/// The result type of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why a notification operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A notification id, or the end of a range of ids, lies beyond the table.
    #[error("notification {id} is out of range (the table has {len} notifications)")]
    OutOfRange {
        /// The offending id; for a range, its exclusive end (`begin + num`).
        id: u64,
        /// Number of notifications in the table.
        len: u32,
    },
    /// A range of notification ids has no elements.
    #[error("the range of notifications starting at {begin} is empty")]
    EmptyRange {
        /// First id of the empty range.
        begin: u32,
        /// Number of notifications in the table.
        len: u32,
    },
    /// An attempt to set a notification to `0`, which is the "unset" marker.
    #[error("notification {id} cannot be set to 0, which means unset")]
    ZeroValue {
        /// The notification id.
        id: u32,
    },
    /// The condition waited for did not hold before the timeout expired; the call may be repeated.
    #[error("timed out")]
    Timeout,
    /// The wait was ended before its condition held or its deadline passed, by its caller's
    /// [`Progress::interrupted`](crate::Progress::interrupted); the call may be repeated.
    #[error("the wait was interrupted")]
    Interrupted,
    /// The table was closed ([`NotificationTable::close`](crate::NotificationTable::close))
    /// before anything waited for was set: nothing will be.
    #[error("the notification table was closed")]
    Closed,
}
