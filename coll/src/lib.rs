//! Collectives built only on the public API of the [`gaspi`] runtime.
//!
//! This crate is the proof that a library needs nothing private: it uses no item of `gaspi`
//! that an application could not use (`#![forbid(unsafe_code)]`, no feature flags, no
//! `pub(crate)` doors). It registers its own namespace ([`gaspi::Library`]) so that its
//! segments never take the user's segment ids, tracks its own operations in a
//! [`gaspi::Batch`] so that it never waits for (or is held up by) the user's queues, waits
//! with [`gaspi::Context::notify_wait_any`] so that a dead partner is named, and drives
//! progress with [`gaspi::Context::progress`] in its non-blocking form.
//!
//! # What it offers
//! * [`Collectives`]: the crate's namespace in a context, registered once; every collective
//!   object is built from it.
//! * [`Alltoallv`]: the GASPI proposal's sparse, partially evaluable alltoallv —
//!   [`get_remote_offsets`](Alltoallv::get_remote_offsets) for sparse neighbour discovery,
//!   rounds whose arrivals are handed out one by one to any number of threads, per-source
//!   resets with credits so that iterations need no barrier, and block-by-block sending.
//! * [`Broadcast`]: one root's bytes to every member of a committed group, blocking
//!   ([`Broadcast::broadcast`]) or not ([`Broadcast::broadcast_nb`]), along a binomial tree.
//! * [`Team`]: GASNet's data-movement collectives (broadcast, scatter, gather, gather_all,
//!   exchange and their v forms) and the allreduce ([`Team::allreduce`], the runtime's
//!   algorithms and guarantees with [`gaspi::ReduceOp`] or a [`gaspi::UserOp`]), blocking and
//!   non-blocking with [`Handle`]s and [`Flags`], each a schedule (plain data) run by one
//!   engine per team.
//! * [`Window`]: MPI-3's post / start / complete / wait epochs on a user segment, matched by
//!   rank and epoch (proposal G), with per-target `start_one` / `complete_one` / `start_any`.
//!
//! # What a broadcast guarantees
//! * When [`Broadcast::broadcast`] returns `Ok` on a member (or its handle reports completion),
//!   the member's buffer holds exactly the bytes the root passed.
//! * Consecutive broadcasts on one object never mix: each carries its sequence number, and a
//!   member's staging area is written only after the member has entered that broadcast (a
//!   credit), so a fast root cannot overwrite a message a slow member has not copied out.
//! * Every wait keeps to the caller's [`gaspi::Timeout`]; after [`gaspi::Error::Timeout`] the
//!   same call continues where it stopped.
//! * A dead parent or child is named ([`gaspi::Error::RankFailed`] inside [`Error::Gaspi`]);
//!   a member that fails tells the children it has not served ([`Error::Aborted`]), so
//!   nobody below a failure waits for its timeout; children that are alive are served before
//!   the death of a sibling is reported.
//! * Members that disagree are told rather than corrupted: a length other than the root's
//!   ([`Error::LengthMismatch`], detected from the header that travels with the data at no
//!   extra cost), another number of broadcasts ([`Error::OutOfStep`]), another root
//!   ([`Error::RootMismatch`]) where the member's parent in the tree of its root sends it
//!   the message of another root. Where the two roots' trees give the member different
//!   parents (members that each take themselves for the root, say), nothing of the other
//!   broadcast reaches the place it waits at: those members wait for each other until their
//!   timeouts, with their buffers left alone.
//!
//! # Choices
//! * Data is staged: the root copies its buffer into its library segment, every member
//!   forwards from its own segment, and copies out at the end. Zero-copy from user buffers
//!   would need registered user memory (`unsafe` in `gaspi`), which this crate forbids. (A
//!   [`Team`]'s puts that only send the source go straight out of the user's buffer to
//!   members reached directly, through [`gaspi::Batch::write_notify_from`].)
//! * Flow control by a credit per broadcast instead of acknowledgements: with a root that
//!   changes from call to call, the member that writes next into a staging area is only known
//!   when the next broadcast starts (see the `broadcast` module).
//! * One staging area per member and object, sized once (`max_bytes`): no allocation or
//!   registration per call. Several [`Broadcast`] objects over the same group are
//!   independent, each with its own segment in the one namespace of [`Collectives`].
//! * Broadcasts take `&mut self`: one object carries one broadcast at a time, and the
//!   borrow checker says so, also for a non-blocking handle still in flight.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

mod alltoallv;
mod barrier;
mod broadcast;
mod buffer;
mod engine;
mod error;
mod ops;
mod pscw;
mod reduce;
mod schedule;
mod team;
mod tree;

pub use alltoallv::{Alltoallv, Destination, Plan, Round, Source, Status};
pub use broadcast::{Broadcast, BroadcastHandle};
pub use buffer::{Input, Output, SegmentRange};
pub use error::{Error, Result};
pub use gaspi;
pub use pscw::{Assert, Epoch, Window};
pub use team::{
    try_sync_all, try_sync_some, wait_sync_all, wait_sync_some, Capacity, Flags, Handle, Team,
};

use rustc_hash::FxHashSet;
use std::collections::HashMap;
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};

use gaspi::{Context, Deadline, GroupId, Library, Rank, SegmentId};

/// This crate's namespace in a context: register it once per context, and build every
/// collective object from it.
///
/// The namespace is a [`gaspi::Library`] named [`LIBRARY`](Self::LIBRARY); the collective
/// objects it builds borrow it, so it outlives them.
///
/// A context has one at a time, so the parts of a program that use collectives share it:
/// their constructors ([`Team`], [`Window`], [`Alltoallv`], [`Broadcast`], splits) are
/// collective creations in this one namespace, and the ones over a group (or team) come in
/// the same order on every member of it. Two threads that make collective objects over the
/// same group at once must agree on that order between themselves; objects over disjoint
/// groups may be made concurrently.
#[derive(Debug)]
pub struct Collectives<'a> {
    ctx: &'a Context,
    library: Library<'a>,
    /// Groups (by [`group_key`]) with an alltoallv round running: one per group at a time.
    exchanging: Mutex<FxHashSet<u64>>,
    /// Per group (by [`group_key`]), the teams made of it so far (see [`Team::id`]).
    teams: Mutex<HashMap<u64, u64>>,
}

impl<'a> Collectives<'a> {
    /// The name of the namespace, the same on every rank.
    pub const LIBRARY: &'static str = "gaspi-coll";

    /// Registers the namespace with `ctx` (local: every rank that uses collectives does it).
    ///
    /// # Errors
    /// [`gaspi::Error::LibraryExists`] while another [`Collectives`] of this context is alive.
    pub fn new(ctx: &'a Context) -> Result<Collectives<'a>> {
        Ok(Collectives {
            ctx,
            library: ctx.library(Self::LIBRARY)?,
            exchanging: Mutex::new(FxHashSet::default()),
            teams: Mutex::new(HashMap::new()),
        })
    }

    /// The context the namespace belongs to.
    pub fn context(&self) -> &'a Context {
        self.ctx
    }

    pub(crate) fn library(&self) -> &Library<'a> {
        &self.library
    }

    /// How many teams of group `key` ([`group_key`]) were made before (the next one's
    /// number).
    pub(crate) fn teams_of(&self, key: u64) -> u64 {
        let teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        teams.get(&key).copied().unwrap_or(0)
    }

    /// Counts a team made of group `key`.
    pub(crate) fn made_team_of(&self, key: u64) {
        let mut teams = self.teams.lock().unwrap_or_else(PoisonError::into_inner);
        *teams.entry(key).or_insert(0) += 1;
    }

    /// Marks an alltoallv round running on group `key` ([`group_key`]); false when one
    /// already is.
    pub(crate) fn begin_exchange(&self, key: u64) -> bool {
        // The set is consistent after every statement: a panic elsewhere cannot break it.
        let mut set = self
            .exchanging
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        set.insert(key)
    }

    /// Marks the alltoallv round on group `key` ended.
    pub(crate) fn end_exchange(&self, key: u64) {
        let mut set = self
            .exchanging
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        set.remove(&key);
    }
}

/// Operations each of this crate's batches holds in flight: as many as a runtime queue may.
/// What the collectives post is bounded by their schedules and flow control (and a window's
/// by its epoch), not by `GASPI_QUEUE_DEPTH`, which sizes the user's queues: a batch of that
/// depth made valid collectives fail with `BatchFull` when the user chose a small one (at
/// depth 8, a 5-rank exchange through the fabric).
pub(crate) fn batch(ctx: &Context) -> gaspi::Batch<'_> {
    ctx.batch_with_depth(65_536)
}

/// A group as its members know it: its id and its members (`ranks`, by member index), so
/// that a group deleted and its id reused for other members is another group, alike on
/// every member of either.
pub(crate) fn group_key(group: GroupId, ranks: &[Rank]) -> u64 {
    let words: Vec<u64> = std::iter::once(u64::from(group))
        .chain(ranks.iter().map(|&r| u64::from(r)))
        .collect();
    ops::signature(&words)
}

/// The member index of `rank` among a group's `ranks` (ascending, as a group orders its
/// members). Collective objects look members up in the ranks they were built with, never
/// through the group id, which the user may delete and reuse for other members.
pub(crate) fn index_in(ranks: &[Rank], rank: Rank) -> Option<u32> {
    // Below the member count, which is a u32.
    ranks.binary_search(&rank).ok().map(|i| i as u32)
}

/// Sleeps on `changes` with `guard` until another thread notifies it or `deadline` passes,
/// and returns the guard (the caller looks again: a wake-up says only that something may
/// have changed). The threads of a collective object that are not watching notifications
/// wait here for the one that is.
pub(crate) fn wait_changes<'g, T>(
    changes: &Condvar,
    guard: MutexGuard<'g, T>,
    deadline: Deadline,
) -> MutexGuard<'g, T> {
    // The state under the lock is consistent between steps: a panic elsewhere cannot break it.
    match deadline.remaining() {
        None => changes.wait(guard).unwrap_or_else(PoisonError::into_inner),
        Some(left) => {
            changes
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0
        }
    }
}

/// The tag of operation `seq` of a collective object in notification values: never 0, which
/// means "unset".
pub(crate) fn tag(seq: u64) -> u32 {
    // The remainder is below u32::MAX, so the cast keeps every bit.
    (seq % u64::from(u32::MAX)) as u32 + 1
}

/// `Ok` when `bytes` from `offset` lie within this rank's segment `segment` of `size` bytes.
pub(crate) fn check_range(
    rank: Rank,
    segment: SegmentId,
    size: u64,
    offset: u64,
    bytes: u64,
) -> Result<()> {
    if offset.checked_add(bytes).is_some_and(|end| end <= size) {
        return Ok(());
    }
    Err(gaspi::Error::OutOfBounds {
        rank,
        segment,
        offset,
        size: bytes,
        segment_size: size,
    }
    .into())
}
