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
//! * [`Broadcast`]: one root's bytes to every member of a committed group, blocking
//!   ([`Broadcast::broadcast`]) or not ([`Broadcast::broadcast_nb`]), along a binomial tree.
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
//!   extra cost), another root ([`Error::RootMismatch`]), another number of broadcasts
//!   ([`Error::OutOfStep`]).
//!
//! # Choices
//! * Data is staged: the root copies its buffer into its library segment, every member
//!   forwards from its own segment, and copies out at the end. Zero-copy from user buffers
//!   would need registered user memory (`unsafe` in `gaspi`), which this crate forbids.
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

mod broadcast;
mod error;
mod tree;

pub use broadcast::{Broadcast, BroadcastHandle};
pub use error::{Error, Result};
pub use gaspi;

use gaspi::{Context, Library};

/// This crate's namespace in a context: register it once per context, and build every
/// collective object from it.
///
/// The namespace is a [`gaspi::Library`] named [`LIBRARY`](Self::LIBRARY); the collective
/// objects it builds borrow it, so it outlives them.
#[derive(Debug)]
pub struct Collectives<'a> {
    ctx: &'a Context,
    library: Library<'a>,
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
        })
    }

    /// The context the namespace belongs to.
    pub fn context(&self) -> &'a Context {
        self.ctx
    }

    pub(crate) fn library(&self) -> &Library<'a> {
        &self.library
    }
}
