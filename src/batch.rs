//! Batches: completion tracking for a set of operations, independent of the user's queues.
//!
//! A library posts its operations on a [`Batch`] of its own and waits for exactly those,
//! without touching (or being held up by) anything the user posted on the numbered queues.
//! A batch is the same kind of queue as a user queue (see the `queue` module): bounded,
//! ordered, never blocking when posting, watched for dead peers when waiting.

use std::sync::Arc;

use gaspi_notifications::Timeout;

use crate::context::Context;
use crate::error::{Error, Result};
use crate::queue::{Kind, Label, Queue, Request};
use crate::rma::Notification;
use crate::segment::Segment;
use crate::target::Target;
use crate::wire::WireNotification;

/// A set of operations posted together and waited for together.
///
/// ```
/// # use gaspi::{Context, Notification, Timeout};
/// # let ctx = Context::init()?;
/// # ctx.segment_create(0, 8192, Timeout::Millis(10_000))?;
/// let seg = ctx.segment(0)?;
/// let right = seg.target((ctx.rank() + 1) % ctx.size(), Timeout::Millis(1_000))?;
/// let batch = ctx.batch();
/// batch.write_notify(&seg, 0, &right, 4096, 64, Notification { id: 0, value: 1 })?;
/// batch.wait(Timeout::Millis(1_000))?;
/// # assert_eq!(seg.notify_waitsome(0, 1, Timeout::Millis(10_000))?, 0);
/// # Ok::<(), gaspi::Error>(())
/// ```
pub struct Batch<'a> {
    ctx: &'a Context,
    queue: Arc<Queue>,
}

impl std::fmt::Debug for Batch<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batch")
            .field("outstanding", &self.queue.outstanding())
            .field("depth", &self.queue.depth())
            .finish()
    }
}

impl Context {
    /// A new, empty batch as deep as a queue ([`queue_size_max`](Self::queue_size_max)).
    pub fn batch(&self) -> Batch<'_> {
        self.batch_with_depth(self.inner.config.queue_depth)
    }

    /// A new, empty batch holding at most `depth` operations before posting returns
    /// [`Error::BatchFull`]; a `depth` of 0 holds one, as a batch that could hold nothing
    /// would refuse every operation.
    pub fn batch_with_depth(&self, depth: u32) -> Batch<'_> {
        Batch {
            ctx: self,
            queue: Queue::new(Label::Batch, depth.max(1), None),
        }
    }
}

impl Batch<'_> {
    /// Writes `size` bytes of `src` at `src_offset` to `dst` at `dst_offset` (relative to the
    /// target's range). Small writes are injected (complete at once), as on a queue.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] for either range; [`Error::UnknownSegment`] through a target
    /// whose segment its rank deleted since (at the call once the deletion is known here,
    /// as it always is on the direct path, else at [`wait`](Self::wait)); [`Error::BatchFull`];
    /// [`Error::RankFailed`] for a rank known dead; [`Error::OperationFailed`] when the
    /// provider refuses outright.
    pub fn write(
        &self,
        src: &Segment<'_>,
        src_offset: u64,
        dst: &Target,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.write_with(src, src_offset, dst, dst_offset, size, None, None)
    }

    /// Writes like [`write`](Self::write), then sets `notification` in the target segment's
    /// table; it never becomes visible before the data.
    ///
    /// # Errors
    /// As for [`write`](Self::write), and [`Error::InvalidNotification`] /
    /// [`Error::ZeroNotificationValue`] (checked against the target's table).
    pub fn write_notify(
        &self,
        src: &Segment<'_>,
        src_offset: u64,
        dst: &Target,
        dst_offset: u64,
        size: u64,
        notification: Notification,
    ) -> Result<()> {
        let wire = dst.wire(notification)?;
        if size == 0 {
            return self.notify(dst, notification);
        }
        self.write_with(src, src_offset, dst, dst_offset, size, Some(wire), None)
    }

    /// Writes like [`write`](Self::write), then sets `notification` in the table of another
    /// segment `table` on the same rank (a library's table, while the data goes to a user's
    /// segment): never visible before the data.
    ///
    /// # Errors
    /// As for [`write_notify`](Self::write_notify), and [`Error::Buffers`] when `table` is on
    /// another rank than `dst`.
    #[allow(clippy::too_many_arguments)]
    pub fn write_notify_to(
        &self,
        src: &Segment<'_>,
        src_offset: u64,
        dst: &Target,
        dst_offset: u64,
        size: u64,
        table: &Target,
        notification: Notification,
    ) -> Result<()> {
        if table.rank != dst.rank {
            return Err(Error::Buffers(format!(
                "the notification's table is on rank {}, the data goes to rank {}",
                table.rank, dst.rank
            )));
        }
        let wire = table.wire(notification)?;
        if size == 0 {
            return self.notify(table, notification);
        }
        // Two targets of one library segment id from different segments: one is stale, and
        // either way the operation is refused as towards a segment that is gone (the write
        // checks `dst` alone, and a notification in `dst`'s table goes along with it).
        if table.table == dst.table {
            if table.incarnation() != dst.incarnation() {
                return Err(Error::UnknownSegment {
                    rank: table.rank,
                    segment: table.segment(),
                });
            }
            return self.write_with(src, src_offset, dst, dst_offset, size, Some(wire), None);
        }
        let other = Some(table);
        self.write_with(src, src_offset, dst, dst_offset, size, Some(wire), other)
    }

    /// Writes, then sets `data` (if any) in `dst`'s table, or in that of `other`, another
    /// segment of `dst`'s rank.
    #[allow(clippy::too_many_arguments)]
    fn write_with(
        &self,
        src: &Segment<'_>,
        src_offset: u64,
        dst: &Target,
        dst_offset: u64,
        size: u64,
        data: Option<WireNotification>,
        other: Option<&Target>,
    ) -> Result<()> {
        let inner = &self.ctx.inner;
        let local = src.local();
        local.check(inner.rank, src_offset, size)?;
        dst.check(dst_offset, size)?;
        if let Some(peer) = inner.mapped(Some(&self.queue), dst.rank, dst.table)? {
            dst.names(&peer.descriptor)?;
            let offset = dst.start + dst_offset;
            if let (Some(table), Some(wire)) = (other, data) {
                let incarnation = table.incarnation();
                let mapped = inner.other_table(&self.queue, dst.rank, wire, incarnation)?;
                inner.direct_write(local, src_offset, dst.rank, &peer, dst.table, offset, size)?;
                return inner.notify_other_table(&self.queue, dst.rank, mapped, wire, incarnation);
            }
            inner.direct_write(local, src_offset, dst.rank, &peer, dst.table, offset, size)?;
            return inner.notify_behind(&self.queue, dst.rank, &peer, dst.table, data);
        }
        // The notification goes by its table's id, behind the data: another table than
        // `dst`'s is checked here, as `notify` checks it.
        if let Some(table) = other.filter(|table| table.incarnation().is_some()) {
            table.dest(inner, 0, 0)?;
        }
        // Only the fabric needs the target's address (towards a rank reached directly, its
        // lookup reads the peer's directory again).
        let dest = dst.dest(inner, dst_offset, size)?;
        inner.post_on(
            &self.queue,
            Request {
                rank: dst.rank,
                kind: Kind::Write {
                    src: Arc::clone(local),
                    src_offset,
                    dst: dest,
                    size,
                    data,
                },
            },
        )
    }

    /// Writes `data`, bytes of this process's ordinary memory, to `dst` at `dst_offset` on a
    /// rank reached directly ([`Context::reaches_directly`]): the calling thread copies them
    /// into the target's mapped segment, and the write is complete when the call returns
    /// (nothing of it is left for [`wait`](Self::wait)). It is the store access MPI-3 gives a
    /// process to the same-host ranks of a shared-memory window, and spares copying data into
    /// a segment first only to write it out from there.
    ///
    /// Only the direct path can take memory that is not registered: towards any other rank
    /// this is refused, with nothing written, and the data has to go from a segment
    /// ([`write`](Self::write)).
    ///
    /// # Errors
    /// [`Error::Unsupported`] when the write cannot go directly: `dst` is on another host,
    /// `GASPI_INTRANODE=fabric` is set, `dst` is bound user memory that no other process can
    /// map, or this batch has an operation towards that rank in flight through the fabric
    /// (which a direct write could overtake); [`Error::OutOfBounds`];
    /// [`Error::UnknownSegment`] through a target whose segment its rank deleted since;
    /// [`Error::RankFailed`] for a rank known dead.
    pub fn write_from(&self, data: &[u8], dst: &Target, dst_offset: u64) -> Result<()> {
        self.store(data, dst, dst_offset, None)
    }

    /// Writes like [`write_from`](Self::write_from), then sets `notification` in the target
    /// segment's table; it never becomes visible before the data.
    ///
    /// # Errors
    /// As for [`write_from`](Self::write_from), and [`Error::InvalidNotification`] /
    /// [`Error::ZeroNotificationValue`] (checked against the target's table).
    pub fn write_notify_from(
        &self,
        data: &[u8],
        dst: &Target,
        dst_offset: u64,
        notification: Notification,
    ) -> Result<()> {
        let wire = dst.wire(notification)?;
        self.store(data, dst, dst_offset, Some(wire))
    }

    fn store(
        &self,
        data: &[u8],
        dst: &Target,
        dst_offset: u64,
        n: Option<WireNotification>,
    ) -> Result<()> {
        let inner = &self.ctx.inner;
        let size = data.len() as u64;
        dst.check(dst_offset, size)?;
        let offset = dst.start + dst_offset;
        let incarnation = dst.incarnation();
        if inner.store_directly(
            &self.queue,
            dst.rank,
            dst.table,
            offset,
            data,
            n,
            incarnation,
        )? {
            return Ok(());
        }
        Err(Error::Unsupported(format!(
            "a write from ordinary memory to rank {} (segment {}): only the direct path \
             takes it; write from a segment instead",
            dst.rank,
            dst.segment()
        )))
    }

    /// Writes `size` bytes of `src` at `src_offset` to each of `dsts` (target, offset) with
    /// `notification`, in order: one source, many destinations (a broadcast's fan-out).
    /// Stops at the first refusal; what was posted before it stays posted.
    ///
    /// # Errors
    /// As for [`write_notify`](Self::write_notify), for the first destination that fails.
    pub fn write_notify_each(
        &self,
        src: &Segment<'_>,
        src_offset: u64,
        size: u64,
        dsts: &[(Target, u64)],
        notification: Notification,
    ) -> Result<()> {
        src.local().check(self.ctx.inner.rank, src_offset, size)?;
        for (dst, dst_offset) in dsts {
            self.write_notify(src, src_offset, dst, *dst_offset, size, notification)?;
        }
        Ok(())
    }

    /// Sets `notification` in `table`'s segment table, after every write this batch posted
    /// earlier to that rank has landed.
    ///
    /// # Errors
    /// [`Error::InvalidNotification`]; [`Error::ZeroNotificationValue`];
    /// [`Error::UnknownSegment`] as for [`write`](Self::write); [`Error::BatchFull`];
    /// [`Error::RankFailed`].
    pub fn notify(&self, table: &Target, notification: Notification) -> Result<()> {
        let wire = table.wire(notification)?;
        let inner = &self.ctx.inner;
        if inner.notify_directly_to(Some(&self.queue), table.rank, wire, table.incarnation())? {
            return Ok(());
        }
        // Only the fabric needs the target's address.
        let check = table.dest(inner, 0, 0)?;
        inner.notify_on(&self.queue, table.rank, check, wire)
    }

    /// Reads `size` bytes of `src` at `src_offset` into `dst` at `dst_offset`.
    ///
    /// # Errors
    /// As for [`write`](Self::write).
    pub fn read(
        &self,
        dst: &Segment<'_>,
        dst_offset: u64,
        src: &Target,
        src_offset: u64,
        size: u64,
    ) -> Result<()> {
        let inner = &self.ctx.inner;
        let local = dst.local();
        local.check(inner.rank, dst_offset, size)?;
        src.check(src_offset, size)?;
        if let Some(peer) = inner.mapped(Some(&self.queue), src.rank, src.table)? {
            src.names(&peer.descriptor)?;
            let offset = src.start + src_offset;
            return inner.direct_read(
                local, dst_offset, src.rank, &peer, src.table, offset, size, None,
            );
        }
        let source = src.dest(inner, src_offset, size)?;
        inner.post_on(
            &self.queue,
            Request {
                rank: src.rank,
                kind: Kind::Read {
                    dst: Arc::clone(local),
                    dst_offset,
                    src: source,
                    size,
                    then: None,
                },
            },
        )
    }

    /// Operations posted (or waiting to be) and not yet completed.
    pub fn outstanding(&self) -> u32 {
        self.queue.outstanding()
    }

    /// Waits until every operation of the batch completed locally; reports the first that
    /// failed. Like [`Context::wait`] for a queue: a dead target is named, its operations are
    /// dropped, and the batch stays usable.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::RankFailed`]; [`Error::OperationFailed`];
    /// [`Error::UnknownSegment`] for an operation accepted through a target whose segment,
    /// as its lookup then found, its rank had deleted (see [`write`](Self::write)).
    pub fn wait(&self, timeout: Timeout) -> Result<()> {
        self.ctx.inner.wait_queue_within(&self.queue, timeout)
    }

    /// Whether every operation completed; drives progress once when not, never blocks.
    ///
    /// # Errors
    /// As for [`wait`](Self::wait), except [`Error::Timeout`].
    pub fn test(&self) -> Result<bool> {
        match self.wait(Timeout::Test) {
            Ok(()) => Ok(true),
            Err(Error::Timeout) => Ok(false),
            Err(e) => Err(e),
        }
    }
}
