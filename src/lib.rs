//! gaspi: one-sided, notification-driven communication between the ranks of an HPC job, in
//! the style of the GASPI standard, over libfabric.
//!
//! # The model
//! Every rank creates **segments** (registered memory that every rank can write into and read
//! from) and communicates with one-sided operations posted on **queues**. The central operation
//! is [`Context::write_notify`]: the data lands in the target's segment, then a **notification**
//! (a non-zero `u32` in the segment's notification table) becomes visible there — never before
//! the data. Targets wait with [`Context::notify_waitsome`] and consume with
//! [`Context::notify_reset`].
//!
//! ```no_run
//! use gaspi::{local, remote, Context, Notification, Timeout};
//!
//! let ctx = Context::init()?;
//! let (me, n) = (ctx.rank(), ctx.size());
//! ctx.segment_create(0, 1 << 20, Timeout::Block)?;
//! ctx.segment_write(0, 0, b"hello")?;
//! let right = (me + 1) % n;
//! ctx.write_notify(local(0, 0), remote(right, 0, 4096), 5, Notification { id: 0, value: me + 1 }, 0)?;
//! let id = ctx.notify_waitsome(0, 0, 1, Timeout::Millis(10_000))?;
//! let from = ctx.notify_reset(0, id)? - 1;
//! let mut got = [0u8; 5];
//! ctx.segment_read(0, 4096, &mut got)?;
//! assert_eq!(&got, b"hello");
//! ctx.wait(0, Timeout::Block)?;
//! ctx.finalize(Timeout::Block)?;
//! # let _ = from;
//! # Ok::<(), gaspi::Error>(())
//! ```
//!
//! # Guarantees
//! * **Notification after data.** `write_notify` is one `fi_writedata` whose remote completion
//!   data is the notification; the target's provider reports it only after the payload is
//!   placed, and the runtime publishes it with release ordering. See [`Context::write_notify`]
//!   and the `rma` module for `notify` and list operations.
//! * **Timeouts everywhere.** Every call that may wait takes a [`Timeout`] (`Block`, `Test`,
//!   `Millis(n)`), returns [`Error::Timeout`] when it expires, and can simply be called again.
//! * **No panics on bad input.** Out-of-range ranks, segments, offsets, sizes and notification
//!   ids, zero notification values, full queues: each is an [`Error`] variant.
//! * **No busy waiting while idle.** Waiters spin briefly while driving progress, then sleep.
//! * **Dead peers are named, timeouts stay timeouts.** A rank is marked dead only on positive
//!   evidence (its process gone on the same host, a broken connection, a failed ping); every
//!   operation and wait involving it then returns [`Error::RankFailed`] naming it (within about
//!   a second on the same host, also under `Timeout::Block`), while the survivors keep working
//!   among themselves. See [`Context::state_vec`] and [`Context::proc_ping`].
//!
//! # Starting a job
//! Ranks bootstrap through PMI-1: run programs with `gaspirun -n 4 prog`, `mpiexec.hydra -n 4
//! prog` or `srun --mpi=pmi2 prog`; without a PMI environment a program is a job of one rank.
//! The provider is chosen with `GASPI_PROVIDER` (`tcp` default, `shm`, `verbs`, or a raw
//! libfabric provider name); see [`Config`] for every setting.

#![warn(missing_docs)]
#![forbid(unsafe_code)]

mod allreduce;
mod atomic;
mod batch;
mod config;
mod context;
mod direct;
mod dissemination;
mod engine;
mod error;
mod fnv;
mod group;
mod health;
pub mod library;
mod notify;
mod outbox;
mod passive;
mod queue;
mod rma;
mod segment;
mod sync;
mod system;
mod target;
mod timed_lock;
mod watch;
mod wire;

pub use allreduce::{Element, ReduceOp, UserOp};
pub use atomic::AtomicRequest;
pub use batch::Batch;
pub use config::{
    Config, Intranode, MAX_GROUPS, MAX_LIST_ENTRIES, MAX_NOTIFICATIONS, MAX_PASSIVE_BYTES,
    MAX_QUEUES, MAX_REDUCE_CHUNK, TCP_SPLIT_NOTIFY,
};
pub use context::Context;
pub use error::{Error, NotificationId, QueueId, Rank, Result, SegmentId};
pub use gaspi_notifications::{Deadline, Timeout};
pub use gaspi_segments::{copy_bytes, Error as SegmentError, SegmentMemory};
pub use group::{GroupId, GROUP_ALL};
pub use health::State;
pub use library::{Library, Scope, Team};
pub use notify::{Arrival, NotificationRange};
pub use rma::{local, remote, ListEntry, Local, Notification, Remote};
pub use segment::Segment;
pub use target::Target;

/// Queue operations that do not move data.
impl Context {
    /// Creates a queue and returns its id.
    ///
    /// # Errors
    /// [`Error::Limit`] when all [`MAX_QUEUES`] queues exist.
    pub fn queue_create(&self) -> Result<QueueId> {
        self.inner.queues.create()
    }

    /// Deletes an idle queue.
    ///
    /// # Errors
    /// [`Error::InvalidQueue`]; [`Error::QueueBusy`] while operations on it are outstanding.
    pub fn queue_delete(&self, queue: QueueId) -> Result<()> {
        self.inner.queues.delete(queue)
    }

    /// Number of queues that currently exist.
    pub fn queue_num(&self) -> u32 {
        self.inner.queues.count()
    }

    /// Operations posted on `queue` (or waiting to be) and not yet completed.
    ///
    /// # Errors
    /// [`Error::InvalidQueue`].
    pub fn queue_size(&self, queue: QueueId) -> Result<u32> {
        Ok(self.inner.queues.get(queue)?.outstanding())
    }

    /// Operations a queue holds before posting returns [`Error::QueueFull`] (GASPI's
    /// `gaspi_queue_size_max`). Only operations through the fabric take room: one towards a
    /// rank reached directly ([`reaches_directly`](Self::reaches_directly)) is complete when
    /// its call returns, so a loop that posts until `QueueFull` and then waits may never see
    /// it there.
    pub fn queue_size_max(&self) -> u32 {
        self.inner.queues.depth()
    }

    /// Largest number of queues that may exist at once, [`MAX_QUEUES`] (GASPI's
    /// `gaspi_queue_max`): [`queue_create`](Self::queue_create) refuses one more.
    pub fn queue_max(&self) -> u32 {
        u32::from(MAX_QUEUES)
    }
}

/// Providers usable for RDM endpoints with RMA on this host, as libfabric names them.
pub fn available_providers() -> Vec<String> {
    gaspi_fabric::available_providers()
}
