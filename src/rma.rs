//! One-sided operations on queues: write, read, their notified and list forms, and notify.
//!
//! Each call validates everything it can before posting (queue, ranks, segment ids, ranges,
//! notification ids and values), reserves room on its queue (a full queue is
//! [`Error::QueueFull`], never a silent block), and posts to libfabric. Local completion is
//! awaited with [`Context::wait`].
//!
//! # How a notification follows its data
//! * `write_notify` is a single `fi_writedata`: the notification travels as its remote
//!   completion data, which the target's provider reports only after the payload is placed. No
//!   provider ordering is needed.
//! * `notify` and `write_list_notify` must order a notification after *earlier* writes. Where the
//!   provider grants write-after-write ordering (`FI_ORDER_RMA_WAW`, requested at startup; tcp
//!   and shm grant it) the notification is posted right behind them. Where it does not, the
//!   notification is deferred: it is sent by the progress engine once every write it follows
//!   has completed at the origin with delivery-complete semantics.
//! * `read_notify` sets the local notification when the read has completed locally.

use std::ffi::c_void;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use crossbeam_utils::Backoff;
use gaspi_notifications::{Deadline, Timeout};

use crate::config::MAX_LIST_ENTRIES;
use crate::context::Context;
use crate::error::{Error, NotificationId, QueueId, Rank, Result, SegmentId};
use crate::fabric::{Posted, RemoteTarget};
use crate::health::POST_LOOK;
use crate::progress::{Deferred, OpContext, OpKind};
use crate::segment::{layout, LocalSegment, RemoteSegment};
use crate::wire::WireNotification;

/// A place in one of this rank's segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Local {
    /// Segment id.
    pub segment: SegmentId,
    /// Byte offset in the segment.
    pub offset: u64,
}

/// A place in a segment of some rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Remote {
    /// The rank owning the segment.
    pub rank: Rank,
    /// Segment id on that rank.
    pub segment: SegmentId,
    /// Byte offset in the segment.
    pub offset: u64,
}

/// A notification to set: slot `id` of a segment gets `value` (non-zero).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Notification {
    /// Notification id in the segment's table.
    pub id: NotificationId,
    /// Value to store; 0 is reserved for "unset".
    pub value: u32,
}

/// Shorthand for [`Local`].
pub fn local(segment: SegmentId, offset: u64) -> Local {
    Local { segment, offset }
}

/// Shorthand for [`Remote`].
pub fn remote(rank: Rank, segment: SegmentId, offset: u64) -> Remote {
    Remote {
        rank,
        segment,
        offset,
    }
}

/// One entry of a list operation: `size` bytes between `local` and (`rank` given by the call)
/// `remote_segment` at `remote_offset`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ListEntry {
    /// The local side.
    pub local: Local,
    /// Segment on the remote rank.
    pub remote_segment: SegmentId,
    /// Offset in that segment.
    pub remote_offset: u64,
    /// Bytes to transfer.
    pub size: u64,
}

/// A validated transfer, ready to post.
struct Transfer {
    local: Arc<LocalSegment>,
    local_offset: u64,
    target: RemoteTarget,
    size: usize,
}

impl Context {
    /// Writes `size` bytes from `local` to `remote`.
    pub fn write(&self, local: Local, remote: Remote, size: u64, queue: QueueId) -> Result<()> {
        let t = self.transfer(local, remote, size)?;
        self.post_transfers(queue, std::slice::from_ref(&t), None)
    }

    /// Writes `size` bytes from `local` to `remote`, then sets `notification` in the remote
    /// segment's table. The notification never becomes visible before the data.
    pub fn write_notify(
        &self,
        local: Local,
        remote: Remote,
        size: u64,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let wire = self.wire_notification(remote.rank, remote.segment, notification)?;
        if size == 0 {
            return self.post_notify(queue, remote.rank, wire);
        }
        let t = self.transfer(local, remote, size)?;
        self.post_transfers(queue, std::slice::from_ref(&t), Some(wire))
    }

    /// Sets `notification` in segment `segment` of `rank`, after every write posted earlier on
    /// `queue` to that rank has landed.
    pub fn notify(
        &self,
        rank: Rank,
        segment: SegmentId,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let wire = self.wire_notification(rank, segment, notification)?;
        self.remote_segment(rank, segment)?;
        self.post_notify(queue, rank, wire)
    }

    /// Reads `size` bytes from `remote` into `local`.
    pub fn read(&self, local: Local, remote: Remote, size: u64, queue: QueueId) -> Result<()> {
        let t = self.transfer(local, remote, size)?;
        self.post_reads(queue, std::slice::from_ref(&t), None)
    }

    /// Reads `size` bytes from `remote` into `local`; once they have arrived, sets
    /// `notification` in the *local* segment `local.segment` (GASPI `read_notify`).
    pub fn read_notify(
        &self,
        local: Local,
        remote: Remote,
        size: u64,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let me = self.rank();
        self.wire_notification(me, local.segment, notification)?;
        let t = self.transfer(local, remote, size)?;
        self.post_reads(
            queue,
            std::slice::from_ref(&t),
            Some((local.segment, notification)),
        )
    }

    /// Writes every entry of `entries` to `rank` (at most 255 entries).
    pub fn write_list(&self, entries: &[ListEntry], rank: Rank, queue: QueueId) -> Result<()> {
        let transfers = self.list_transfers(entries, rank)?;
        self.post_transfers(queue, &transfers, None)
    }

    /// Writes every entry of `entries` to `rank`, then sets `notification` in segment
    /// `notify_segment` of `rank`, visible only after all entries' data.
    pub fn write_list_notify(
        &self,
        entries: &[ListEntry],
        rank: Rank,
        notify_segment: SegmentId,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let wire = self.wire_notification(rank, notify_segment, notification)?;
        self.remote_segment(rank, notify_segment)?;
        let transfers = self.list_transfers(entries, rank)?;
        self.post_transfers(queue, &transfers, None)?;
        self.post_notify(queue, rank, wire)
    }

    /// Reads every entry of `entries` from `rank` (at most 255 entries).
    pub fn read_list(&self, entries: &[ListEntry], rank: Rank, queue: QueueId) -> Result<()> {
        let transfers = self.list_transfers(entries, rank)?;
        self.post_reads(queue, &transfers, None)
    }

    /// Waits until every operation posted on `queue` has completed locally (its buffers may be
    /// reused). Reports the first failed operation of the queue, naming the rank.
    ///
    /// When a rank that the queue has operations towards dies, the wait returns
    /// [`Error::RankFailed`] naming it (within about a second for a peer on this host, see the
    /// `health` module), also under `Timeout::Block`. Its operations are then dropped from the
    /// queue, whose other operations can be waited for with the next call: the queue stays
    /// usable (this takes the place of GASPI's `queue_purge`). Whether dropped writes reached
    /// the dead rank is unknown, and the local segments they used stay busy for
    /// [`segment_delete`](Self::segment_delete) while the provider may still hold them.
    pub fn wait(&self, queue: QueueId, timeout: Timeout) -> Result<()> {
        let q = self.queues_get(queue)?;
        let inner = &self.inner;
        let result = inner.watched_until(
            || q.targets(),
            timeout.deadline(),
            || q.is_drained().then_some(()),
        );
        let dead: Vec<Rank> = q
            .targets()
            .filter(|&r| inner.health.known(r).is_some())
            .collect();
        for rank in dead {
            q.drop_rank(rank);
        }
        if let Some((rank, reason)) = q.take_failure() {
            return Err(Error::RankFailed { rank, reason });
        }
        result
    }

    fn queues_get(&self, queue: QueueId) -> Result<&crate::queue::Queue> {
        self.inner.queues.get(queue)
    }

    fn wire_notification(
        &self,
        rank: Rank,
        segment: SegmentId,
        n: Notification,
    ) -> Result<WireNotification> {
        self.check_rank(rank)?;
        let count = self.inner.config.notifications;
        if n.id >= count {
            return Err(Error::InvalidNotification {
                rank,
                segment,
                id: n.id.into(),
                count,
            });
        }
        if n.value == 0 {
            return Err(Error::ZeroNotificationValue { rank, id: n.id });
        }
        Ok(WireNotification::user(segment, n.id, n.value))
    }

    fn list_transfers(&self, entries: &[ListEntry], rank: Rank) -> Result<Vec<Transfer>> {
        if entries.is_empty() || entries.len() > MAX_LIST_ENTRIES {
            return Err(Error::InvalidList(format!(
                "{} entries; a list holds 1..={MAX_LIST_ENTRIES}",
                entries.len()
            )));
        }
        entries
            .iter()
            .filter(|e| e.size > 0)
            .map(|e| {
                self.transfer(
                    e.local,
                    remote(rank, e.remote_segment, e.remote_offset),
                    e.size,
                )
            })
            .collect()
    }

    fn transfer(&self, local: Local, remote: Remote, size: u64) -> Result<Transfer> {
        self.check_rank(remote.rank)?;
        let me = self.rank();
        let seg = self.inner.segments.local(me, local.segment)?;
        check_range(&seg, me, local.segment, local.offset, size)?;
        let rseg = self.remote_segment(remote.rank, remote.segment)?;
        if remote
            .offset
            .checked_add(size)
            .is_none_or(|end| end > rseg.size)
        {
            return Err(Error::OutOfBounds {
                rank: remote.rank,
                segment: remote.segment,
                offset: remote.offset,
                size,
                segment_size: rseg.size,
            });
        }
        let max = self.inner.ep.caps().max_msg_size;
        if size > max {
            return Err(Error::OutOfBounds {
                rank: remote.rank,
                segment: remote.segment,
                offset: remote.offset,
                size,
                segment_size: max,
            });
        }
        Ok(Transfer {
            local: seg,
            local_offset: local.offset,
            target: RemoteTarget {
                rank: remote.rank,
                addr: rseg.base + remote.offset,
                key: rseg.key,
            },
            size: size as usize,
        })
    }

    fn post_transfers(
        &self,
        queue: QueueId,
        transfers: &[Transfer],
        notification: Option<WireNotification>,
    ) -> Result<()> {
        if transfers.is_empty() {
            return Ok(());
        }
        let rank = transfers[0].target.rank;
        let q = self
            .inner
            .queues
            .reserve(queue, transfers.len() as u32, rank)?;
        // Without provider ordering every write reports completion only once delivered, so a
        // drained queue proves its writes landed (see `post_notify`).
        let ordered = self.inner.ep.caps().ordered_writes;
        let last = transfers.len() - 1;
        for (i, t) in transfers.iter().enumerate() {
            let data = if i == last {
                notification.map(WireNotification::encode)
            } else {
                None
            };
            let ctx = OpContext {
                kind: OpKind::User,
                queue,
                segment: t.local.id,
                rank: t.target.rank,
            }
            .encode();
            t.local.in_flight.fetch_add(1, Ordering::AcqRel);
            let local = t
                .local
                .memory
                .as_ptr()
                .wrapping_add(t.local_offset as usize);
            let desc = t.local.mr.desc();
            let posted = self.post(t.target.rank, || {
                // SAFETY: the range was bounds-checked against the segment, whose memory stays
                // mapped while in_flight > 0 (delete refuses busy segments) and whose
                // registration supplies `desc`.
                unsafe {
                    self.inner
                        .ep
                        .write(local, t.size, desc, t.target, data, ctx, !ordered)
                }
            });
            if let Err(e) = posted {
                t.local.in_flight.fetch_sub(1, Ordering::AcqRel);
                q.release(rank, (transfers.len() - i) as u32);
                return Err(e);
            }
        }
        Ok(())
    }

    fn post_reads(
        &self,
        queue: QueueId,
        transfers: &[Transfer],
        notification: Option<(SegmentId, Notification)>,
    ) -> Result<()> {
        if transfers.is_empty() {
            return Ok(());
        }
        let rank = transfers[0].target.rank;
        let q = self
            .inner
            .queues
            .reserve(queue, transfers.len() as u32, rank)?;
        let last = transfers.len() - 1;
        for (i, t) in transfers.iter().enumerate() {
            let op = OpContext {
                kind: OpKind::User,
                queue,
                segment: t.local.id,
                rank: t.target.rank,
            };
            let ctx = match notification {
                Some((segment, n)) if i == last => Box::new(Deferred {
                    op,
                    notify_segment: segment,
                    notify_id: n.id,
                    notify_value: n.value,
                })
                .into_context(),
                _ => op.encode(),
            };
            t.local.in_flight.fetch_add(1, Ordering::AcqRel);
            let local = t
                .local
                .memory
                .as_ptr()
                .wrapping_add(t.local_offset as usize);
            let desc = t.local.mr.desc();
            let posted = self.post(t.target.rank, || {
                // SAFETY: as in post_transfers; the segment memory outlives the read because
                // delete refuses segments with reads in flight.
                unsafe { self.inner.ep.read(local, t.size, desc, t.target, ctx) }
            });
            if let Err(e) = posted {
                if ctx & 1 == 0 {
                    // SAFETY: ctx came from into_context just above and was never posted.
                    drop(unsafe { Deferred::reclaim(ctx) });
                }
                t.local.in_flight.fetch_sub(1, Ordering::AcqRel);
                q.release(rank, (transfers.len() - i) as u32);
                return Err(e);
            }
        }
        Ok(())
    }

    /// Sends a notification that must not overtake the writes posted before it on `queue`.
    ///
    /// With provider ordering it is posted at once behind them. Without, it waits in the queue's
    /// outbox until the queue drains (all earlier writes delivered); the progress engine sends it.
    fn post_notify(&self, queue: QueueId, rank: Rank, wire: WireNotification) -> Result<()> {
        let q = self.queues_get(queue)?;
        if self.inner.ep.caps().ordered_writes || q.defer_notification(rank, wire) {
            self.system_notify(rank, wire)
        } else {
            Ok(())
        }
    }

    /// Sends a notification-only write: 8 bytes into the target's system scratch area, carrying
    /// the notification as remote completion data.
    pub(crate) fn system_notify(&self, rank: Rank, wire: WireNotification) -> Result<()> {
        self.post(rank, || self.inner.try_notify(rank, wire))
    }

    /// Posts with `attempt`, driving progress while the provider says "again", for at most the
    /// configured operation timeout.
    pub(crate) fn post(&self, rank: Rank, attempt: impl FnMut() -> Result<Posted>) -> Result<()> {
        let limit = self.inner.config.op_timeout;
        if self.post_until(rank, Timeout::from(limit).deadline(), attempt)? {
            return Ok(());
        }
        Err(Error::RankFailed {
            rank,
            reason: format!("the provider accepted no operation towards it for {limit:?}"),
        })
    }

    /// Posts with `attempt`, driving progress while the provider says "again", until
    /// `deadline`; `Ok(false)` when the deadline passed first. Nothing is posted to a rank
    /// known dead, and while the provider refuses, the target's health is looked at every
    /// [`POST_LOOK`]: a dead peer makes both providers refuse for ever (see `health`).
    pub(crate) fn post_until(
        &self,
        rank: Rank,
        deadline: Deadline,
        mut attempt: impl FnMut() -> Result<Posted>,
    ) -> Result<bool> {
        if let Some(dead) = self.inner.health.known(rank) {
            return Err(dead);
        }
        let backoff = Backoff::new();
        let mut next_look: Option<Instant> = None;
        loop {
            match attempt()? {
                Posted::Yes => return Ok(true),
                Posted::Again => {
                    if !self.inner.progress() {
                        backoff.snooze();
                    }
                    let now = Instant::now();
                    let look = next_look.get_or_insert(now + POST_LOOK);
                    if now >= *look {
                        if let Some(dead) = self.inner.look(rank) {
                            return Err(dead);
                        }
                        *look = now + POST_LOOK;
                    }
                    if deadline.expired() {
                        return Ok(false);
                    }
                }
            }
        }
    }

    /// The descriptor of `segment` on `rank`, from the cache or read from the peer.
    pub(crate) fn remote_segment(&self, rank: Rank, segment: SegmentId) -> Result<RemoteSegment> {
        self.check_rank(rank)?;
        if let Some(r) = self.inner.segments.cached_remote(rank, segment) {
            return Ok(r);
        }
        let r = self
            .descriptor(rank, layout::segment_descriptor(segment))?
            .ok_or(Error::UnknownSegment { rank, segment })?;
        self.inner.segments.cache_remote(rank, segment, r);
        Ok(r)
    }

    /// The descriptor `rank` publishes at `offset` of its system region (`None` if absent),
    /// read with one RDMA read (or locally for this rank).
    pub(crate) fn descriptor(&self, rank: Rank, offset: u64) -> Result<Option<RemoteSegment>> {
        let words = if rank == self.rank() {
            self.read_own_descriptor(offset)?
        } else {
            self.fetch_descriptor(rank, offset)?
        };
        Ok(RemoteSegment::from_words(words))
    }

    fn read_own_descriptor(&self, base: u64) -> Result<[u64; 4]> {
        let mem = &self.inner.system_memory;
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            *w = mem
                .read_u64(base + 8 * i as u64)
                .map_err(Error::segment(self.rank(), 0))?;
        }
        Ok(words)
    }

    fn fetch_descriptor(&self, rank: Rank, offset: u64) -> Result<[u64; 4]> {
        let _one_at_a_time = self
            .inner
            .system_lookup
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let target = self.inner.system_target(rank, offset);
        let inner = &self.inner;
        let deadline = Timeout::from(inner.config.op_timeout).deadline();
        let no_answer = || Error::RankFailed {
            rank,
            reason: format!(
                "no answer to a descriptor lookup within {:?}",
                inner.config.op_timeout
            ),
        };
        // The landing area is free once the previous lookup (which may have timed out)
        // completed, or its target died.
        let turn = match inner.begin_turn(&inner.lookups, rank, deadline) {
            Err(Error::Timeout) => return Err(no_answer()),
            other => other?,
        };
        let ctx = OpContext {
            kind: OpKind::System,
            queue: 0,
            segment: turn.tag(),
            rank,
        }
        .encode();
        let landing = inner
            .system_memory
            .as_ptr()
            .wrapping_add(layout::LANDING as usize);
        let desc: *mut c_void = inner.system_mr.desc();
        let posted = self.post(rank, || {
            // SAFETY: the landing area lies inside the registered system region (layout
            // constants), which lives as long as the context; the lookup lock and the turns
            // make this the only read using it.
            unsafe {
                inner
                    .ep
                    .read(landing, layout::DESCRIPTOR_LEN as usize, desc, target, ctx)
            }
        });
        match inner.end_turn(&inner.lookups, turn, posted, deadline) {
            Err(Error::Timeout) => return Err(no_answer()),
            other => other?,
        }
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self
                .inner
                .system_memory
                .read_u64(layout::LANDING + 8 * i as u64)
                .map_err(Error::segment(self.rank(), 0))?;
        }
        Ok(words)
    }
}

fn check_range(
    seg: &LocalSegment,
    rank: Rank,
    segment: SegmentId,
    offset: u64,
    size: u64,
) -> Result<()> {
    seg.memory
        .check_range(offset, size)
        .map_err(|_| Error::OutOfBounds {
            rank,
            segment,
            offset,
            size,
            segment_size: seg.memory.len() as u64,
        })
}
