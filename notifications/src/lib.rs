//! Notification tables for gaspi segments, and the waiting machinery around them.
//!
//! Every segment carries a [`NotificationTable`]: one `u32` slot per notification id, where `0`
//! means "unset". The runtime's progress engine calls [`NotificationTable::set`] once the payload
//! of a remote write-with-notification has landed; user threads wait for a slot in a range with
//! [`NotificationTable::wait_some`] and consume it with [`NotificationTable::reset`].
//!
//! Waiting is built from two reusable pieces that the runtime also uses for its other waits
//! (queue completion, barriers):
//!
//! * [`EventCount`] lets a thread sleep until "something happened" without losing wake-ups, while
//!   keeping [`EventCount::notify_all`] cheap when nobody sleeps.
//! * [`wait_until`] drives the caller's progress closure while spinning briefly, then blocks on an
//!   [`EventCount`] in short slices, until a condition holds or a [`Deadline`] passes.
//!
//! [`Timeout`] is the user-facing description of how long a call may wait.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod error;
mod event;
#[cfg(all(test, loom))]
mod loom_tests;
mod summary;
mod sync;
mod table;
mod timeout;
mod wait;
mod words;

pub use error::{Error, Result};
pub use event::{EventCount, Key, Wake};
pub use table::{NotificationTable, TableRange};
pub use timeout::{Deadline, Slice, Timeout};
pub use wait::{set_oversubscribed, wait_until, Progress};
