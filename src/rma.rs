//! One-sided operations on queues: write, read, their notified and list forms, and notify.
//!
//! Each call validates everything it can before posting (queue, ranks, segment ids, ranges,
//! notification ids and values), reserves room on its queue (a full queue is
//! [`Error::QueueFull`], never a silent block), and posts to libfabric, or parks the operation
//! in its queue when it cannot go yet (see the `queue` module): no call here ever blocks.
//! Local completion is awaited with [`Context::wait`].
//!
//! Writes of at most the provider's inject size (tcp: 64 bytes, shm: 4 KiB) on a queue with
//! nothing parked are *injected*: the provider copies the bytes before the call returns, so
//! the write is complete locally at once and takes no room on the queue.
//!
//! # How a notification follows its data
//! * `write_notify` is a single `fi_writedata`: the notification travels as its remote
//!   completion data, which the target's provider reports only after the payload is placed. No
//!   provider ordering is needed. A large one over tcp is a write and a notify instead (see
//!   [`Config::split_notify`](crate::Config::split_notify)), as below, and only where the
//!   provider places writes in order at its size.
//! * `notify` and `write_list_notify` must order a notification after *earlier* writes. Where the
//!   provider grants write-after-write ordering (`FI_ORDER_RMA_WAW`, requested at startup; tcp
//!   and shm grant it) the notification is posted right behind them. Where it does not, the
//!   notification is deferred: it is sent by the progress engine once every write it follows
//!   has completed at the origin with delivery-complete semantics.
//! * `read_notify` sets the local notification when the read has completed locally.

use std::ops::RangeInclusive;
use std::sync::Arc;

use gaspi_fabric::{Capabilities, Posted};
use gaspi_notifications::{Deadline, Timeout};

use crate::config::{Config, MAX_LIST_ENTRIES, TCP_SPLIT_NOTIFY};
use crate::context::{Context, Inner};
use crate::engine::lookup::DescKey;
use crate::error::{Error, NotificationId, QueueId, Rank, Result, SegmentId};
use crate::queue::{check_target, Dest, Kind, Queue, Request};
use crate::segment::LocalSegment;
use crate::system::{layout, SCRATCH_LEN};
use crate::wire::{Table, WireNotification};

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

impl Context {
    /// Writes `size` bytes from `local` to `remote`.
    ///
    /// An operation towards a `(rank, segment)` whose descriptor this rank has not learnt yet
    /// is accepted at once and checked when the descriptor arrives: what that check finds
    /// ([`Error::UnknownSegment`], [`Error::OutOfBounds`] of the remote range) is then
    /// reported by the queue's next [`wait`](Self::wait), and a write so refused takes with it
    /// the notifications that waited behind it on the queue towards the same rank (a
    /// [`notify`](Self::notify), a list's, a large `write_notify`'s sent apart, see
    /// [`Config::split_notify`](crate::Config::split_notify)): they are dropped, since they
    /// would announce data that never arrives. Resolve the segment first
    /// ([`segment_size_of`](Self::segment_size_of), or a [`Target`](crate::Target)) to get
    /// every error at the call.
    ///
    /// A write from one of this rank's segments into an overlapping range of the same segment
    /// (GASPI leaves it undefined) moves the bytes as `memmove` does on the direct path, which
    /// takes it when [`reaches_directly`](Self::reaches_directly) says so of this rank and the
    /// segment is one the runtime allocated: a segment of bound memory
    /// ([`segment_bind`](Self::segment_bind)) takes the fabric even towards this rank. Through
    /// the fabric the provider copies it front to back in pieces of its own, which a range
    /// shifted forwards by less than a piece overwrites before they are read: with libfabric
    /// 1.17, writes shifted forwards by 1, 16 or 4,104 bytes came out wrong from 8 KiB on over
    /// shm (4 KiB came out right) and at 8 MiB over tcp, reads so shifted from 3 MiB on over
    /// shm and at 8 MiB over tcp; shifted backwards, both came out right. Copy within a
    /// segment with [`segment_read`](Self::segment_read) and
    /// [`segment_write`](Self::segment_write).
    ///
    /// # Errors
    /// [`Error::InvalidRank`], [`Error::UnknownSegment`], [`Error::OutOfBounds`] (local range,
    /// or a remote range known to be outside), [`Error::InvalidQueue`], [`Error::QueueFull`],
    /// [`Error::RankFailed`] for a rank known dead.
    pub fn write(&self, local: Local, remote: Remote, size: u64, queue: QueueId) -> Result<()> {
        let q = self.prepare(remote.rank, queue)?;
        if self.inner.write_directly(q, local, remote, size, None)? {
            return Ok(());
        }
        if self.inner.try_inject(q, local, remote, size, None)? {
            return Ok(());
        }
        let request = self.write_request(local, remote, size, None)?;
        self.inner.post_on(q, request)
    }

    /// Writes `size` bytes from `local` to `remote`, then sets `notification` in the remote
    /// segment's table. The notification never becomes visible before the data. With `size`
    /// 0 it is [`notify`](Self::notify), with the same checks.
    ///
    /// # Errors
    /// As for [`write`](Self::write), and [`Error::InvalidNotification`] /
    /// [`Error::ZeroNotificationValue`] for the notification.
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
            return self.notify(remote.rank, remote.segment, notification, queue);
        }
        // Not `prepare`: the rank was checked with the notification.
        let q = self.inner.queues.get(queue)?;
        if self
            .inner
            .write_directly(q, local, remote, size, Some(wire))?
        {
            return Ok(());
        }
        if self.inner.try_inject(q, local, remote, size, Some(wire))? {
            return Ok(());
        }
        let request = self.write_request(local, remote, size, Some(wire))?;
        self.inner.post_on(q, request)
    }

    /// Sets `notification` in segment `segment` of `rank`, after every write posted earlier on
    /// `queue` to that rank has landed.
    ///
    /// # Errors
    /// [`Error::InvalidRank`], [`Error::InvalidNotification`],
    /// [`Error::ZeroNotificationValue`], [`Error::UnknownSegment`] when `rank` is known not to
    /// have the segment (else reported by the next wait, see [`write`](Self::write)),
    /// [`Error::InvalidQueue`], [`Error::QueueFull`], [`Error::RankFailed`].
    pub fn notify(
        &self,
        rank: Rank,
        segment: SegmentId,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let wire = self.wire_notification(rank, segment, notification)?;
        // Not `prepare`: the rank was checked with the notification.
        let q = self.inner.queues.get(queue)?;
        if self.inner.notify_directly(Some(q), rank, wire)? {
            return Ok(());
        }
        let check = self.inner.dest(rank, DescKey::Segment(segment), 0, 0)?;
        self.inner.notify_on(q, rank, check, wire)
    }

    /// Reads `size` bytes from `remote` into `local`.
    ///
    /// Between overlapping ranges of one of this rank's segments, as [`write`](Self::write)
    /// says: `memmove`'s outcome on the direct path (not for bound memory, which takes the
    /// fabric), not always through the fabric.
    ///
    /// # Errors
    /// As for [`write`](Self::write).
    pub fn read(&self, local: Local, remote: Remote, size: u64, queue: QueueId) -> Result<()> {
        let q = self.prepare(remote.rank, queue)?;
        if self.inner.read_directly(q, local, remote, size, None)? {
            return Ok(());
        }
        let request = self.read_request(local, remote, size, None)?;
        self.inner.post_on(q, request)
    }

    /// Reads `size` bytes from `remote` into `local`; once they have arrived, sets
    /// `notification` in the *local* segment `local.segment` (GASPI `read_notify`).
    ///
    /// # Errors
    /// As for [`write_notify`](Self::write_notify), the notification checked against this
    /// rank's segment.
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
        let q = self.prepare(remote.rank, queue)?;
        let then = Some((notification.id, notification.value));
        if self.inner.read_directly(q, local, remote, size, then)? {
            return Ok(());
        }
        let request = self.read_request(local, remote, size, then)?;
        self.inner.post_on(q, request)
    }

    /// Writes every entry of `entries` to `rank` (at most 255 entries).
    ///
    /// # Errors
    /// [`Error::InvalidList`] for no or too many entries (more than 255, or more operations
    /// than the queue's depth: the entries, and for
    /// [`write_list_notify`](Self::write_list_notify) the notification); per entry as for
    /// [`write`](Self::write); [`Error::QueueFull`] when the whole list does not fit the
    /// queue's free room now.
    pub fn write_list(&self, entries: &[ListEntry], rank: Rank, queue: QueueId) -> Result<()> {
        let requests = self.list_requests(entries, rank, false)?;
        let q = self.list_queue(rank, queue, entries.len(), false)?;
        if self.inner.list_directly(q, entries, rank, false, None)? {
            return Ok(());
        }
        self.inner.submit_all(q, rank, requests)
    }

    /// Writes every entry of `entries` to `rank`, then sets `notification` in segment
    /// `notify_segment` of `rank`, visible only after all entries' data.
    ///
    /// # Errors
    /// As for [`write_list`](Self::write_list) and [`notify`](Self::notify).
    pub fn write_list_notify(
        &self,
        entries: &[ListEntry],
        rank: Rank,
        notify_segment: SegmentId,
        notification: Notification,
        queue: QueueId,
    ) -> Result<()> {
        let wire = self.wire_notification(rank, notify_segment, notification)?;
        let mut requests = self.list_requests(entries, rank, false)?;
        let check = self
            .inner
            .dest(rank, DescKey::Segment(notify_segment), 0, 0)?;
        requests.push(Request {
            rank,
            kind: Kind::Notify { check, wire },
        });
        let q = self.list_queue(rank, queue, entries.len(), true)?;
        if self
            .inner
            .list_directly(q, entries, rank, false, Some(wire))?
        {
            return Ok(());
        }
        self.inner.submit_all(q, rank, requests)
    }

    /// Reads every entry of `entries` from `rank` (at most 255 entries).
    ///
    /// # Errors
    /// As for [`write_list`](Self::write_list).
    pub fn read_list(&self, entries: &[ListEntry], rank: Rank, queue: QueueId) -> Result<()> {
        let requests = self.list_requests(entries, rank, true)?;
        let q = self.list_queue(rank, queue, entries.len(), false)?;
        if self.inner.list_directly(q, entries, rank, true, None)? {
            return Ok(());
        }
        self.inner.submit_all(q, rank, requests)
    }

    /// Waits until every operation posted on `queue` has completed locally (its buffers may be
    /// reused). Reports the first failed operation of the queue, naming the rank, and the
    /// argument errors found for operations that were accepted before their target's
    /// descriptor was known (see [`write`](Self::write)).
    ///
    /// When a rank that the queue has operations towards dies, the wait returns
    /// [`Error::RankFailed`] naming it (within milliseconds for a peer on this host, see the
    /// `health` module), also under `Timeout::Block`. Its operations are then dropped from the
    /// queue, whose other operations can be waited for with the next call: the queue stays
    /// usable (this takes the place of GASPI's `queue_purge`). Whether dropped writes reached
    /// the dead rank is unknown, and the local segments they used stay busy for
    /// [`segment_delete`](Self::segment_delete) while the provider may still hold them.
    ///
    /// # Errors
    /// [`Error::InvalidQueue`]; [`Error::Timeout`]; [`Error::RankFailed`];
    /// [`Error::OperationFailed`]; [`Error::UnknownSegment`] and [`Error::OutOfBounds`] found
    /// late, as above.
    pub fn wait(&self, queue: QueueId, timeout: Timeout) -> Result<()> {
        let q = self.inner.queues.get(queue)?;
        self.inner.wait_queue_within(q, timeout)
    }

    /// Checks the target rank and gets the queue.
    fn prepare(&self, rank: Rank, queue: QueueId) -> Result<&Arc<Queue>> {
        self.check_rank(rank)?;
        self.inner.queues.get(queue)
    }

    /// [`prepare`](Self::prepare) for a list of `entries`, and a notification after them when
    /// `notified`, which must fit the queue as a whole: a longer one would be
    /// [`Error::QueueFull`] for ever. Checked on every path, also where the list would be done
    /// directly and take no room.
    fn list_queue(
        &self,
        rank: Rank,
        queue: QueueId,
        entries: usize,
        notified: bool,
    ) -> Result<&Arc<Queue>> {
        let q = self.prepare(rank, queue)?;
        let operations = entries + usize::from(notified);
        if operations > q.depth() as usize {
            // The notification is named only where there is one: a list without one that
            // was said to have one sent users looking for a notification they never passed.
            let what = if notified {
                format!("{operations} operations ({entries} entries and the notification)")
            } else {
                format!("{entries} entries")
            };
            return Err(Error::InvalidList(format!(
                "{what} do not fit queue {queue} of depth {} (GASPI_QUEUE_DEPTH)",
                q.depth()
            )));
        }
        Ok(q)
    }

    /// Checks `rank` and `n` for segment `segment` of it (this config's table size applies to
    /// every rank).
    pub(crate) fn wire_notification(
        &self,
        rank: Rank,
        segment: SegmentId,
        n: Notification,
    ) -> Result<WireNotification> {
        self.check_rank(rank)?;
        check_notification(rank, segment, self.inner.config.notifications, n)?;
        Ok(WireNotification::new(Table::User(segment), n.id, n.value))
    }

    /// The local segment of a transfer of `size` bytes between `local` and `remote`, and
    /// where it goes on the remote side, both checked as far as known.
    fn transfer(
        &self,
        local: Local,
        remote: Remote,
        size: u64,
    ) -> Result<(Arc<LocalSegment>, Dest)> {
        let me = self.rank();
        let seg = self.inner.segments.user(me, local.segment)?;
        seg.check(me, local.offset, size)?;
        let key = DescKey::Segment(remote.segment);
        let dest = self.inner.dest(remote.rank, key, remote.offset, size)?;
        Ok((seg, dest))
    }

    fn write_request(
        &self,
        local: Local,
        remote: Remote,
        size: u64,
        data: Option<WireNotification>,
    ) -> Result<Request> {
        let (src, dst) = self.transfer(local, remote, size)?;
        Ok(Request {
            rank: remote.rank,
            kind: Kind::Write {
                src,
                src_offset: local.offset,
                dst,
                size,
                data,
            },
        })
    }

    fn read_request(
        &self,
        local: Local,
        remote: Remote,
        size: u64,
        then: Option<(NotificationId, u32)>,
    ) -> Result<Request> {
        let (dst, src) = self.transfer(local, remote, size)?;
        Ok(Request {
            rank: remote.rank,
            kind: Kind::Read {
                dst,
                dst_offset: local.offset,
                src,
                size,
                then,
            },
        })
    }

    fn list_requests(&self, entries: &[ListEntry], rank: Rank, read: bool) -> Result<Vec<Request>> {
        if entries.is_empty() || entries.len() > MAX_LIST_ENTRIES {
            return Err(Error::InvalidList(format!(
                "{} entries; a list holds 1..={MAX_LIST_ENTRIES}",
                entries.len()
            )));
        }
        self.check_rank(rank)?;
        entries
            .iter()
            .filter(|e| e.size > 0)
            .map(|e| {
                let remote = remote(rank, e.remote_segment, e.remote_offset);
                if read {
                    self.read_request(e.local, remote, e.size, None)
                } else {
                    self.write_request(e.local, remote, e.size, None)
                }
            })
            .collect()
    }
}

impl Inner {
    /// Where `offset..offset + size` of `key` on `rank` is: checked now if the descriptor is
    /// known, else once its lookup (started here) answers.
    pub(crate) fn dest(&self, rank: Rank, key: DescKey, offset: u64, size: u64) -> Result<Dest> {
        self.dest_of(rank, key, None, offset, size)
    }

    /// [`dest`](Self::dest), and with an `incarnation` (a library segment's target) only
    /// while `key` is still that segment: [`Error::UnknownSegment`] once it is another.
    pub(crate) fn dest_of(
        &self,
        rank: Rank,
        key: DescKey,
        incarnation: Option<u32>,
        offset: u64,
        size: u64,
    ) -> Result<Dest> {
        Ok(match self.resolve_later(rank, key)? {
            Ok(known) => Dest::Ready(check_target(
                self,
                rank,
                key,
                offset,
                size,
                incarnation,
                known,
            )?),
            Err(lookup) => Dest::Pending {
                key,
                offset,
                size,
                incarnation,
                lookup,
            },
        })
    }

    /// Posts one write or read on `q`: injected when it is a small write that can go at once,
    /// else counted on the queue and posted (or parked); a large notified write that splits
    /// (see [`Config::split_notify`](crate::Config::split_notify)) as the write, then its
    /// notification.
    pub(crate) fn post_on(&self, q: &Queue, mut request: Request) -> Result<()> {
        if let Some(dead) = self.health.known(request.rank) {
            return Err(dead);
        }
        self.fabric_taken(q, request.rank);
        if let Kind::Write {
            src,
            src_offset,
            dst: Dest::Ready(target),
            size,
            data,
        } = &request.kind
        {
            if self.may_inject(q, *size) {
                let source = src.slice(self.rank, *src_offset, *size)?;
                let data = data.map(WireNotification::encode);
                if self.ep.inject_write_from(source, *target, data)? == Posted::Yes {
                    return Ok(());
                }
            }
        }
        if let Some(notify) = self.split_notify(&request)? {
            // Two places on the queue, when it has them; else it goes as one write.
            if q.reserve(request.rank, 2).is_ok() {
                if let Kind::Write { data, .. } = &mut request.kind {
                    *data = None;
                }
                return q.submit(self, [request, notify]);
            }
        }
        q.reserve(request.rank, 1)?;
        q.submit(self, [request])
    }

    /// The notify that carries the notification of `request` when it is a notified write
    /// that splits: posted right behind the write on the same queue, it is processed at the
    /// target only once the write's data is placed.
    fn split_notify(&self, request: &Request) -> Result<Option<Request>> {
        let Kind::Write {
            size,
            data: Some(wire),
            ..
        } = request.kind
        else {
            return Ok(None);
        };
        let Some(key) = wire.table.descriptor().filter(|_| self.splits(size)) else {
            return Ok(None);
        };
        Ok(Some(Request {
            rank: request.rank,
            kind: Kind::Notify {
                check: self.dest(request.rank, key, 0, 0)?,
                wire,
            },
        }))
    }

    /// Whether a notified write of `size` bytes splits (see
    /// [`Config::split_notify`](crate::Config::split_notify)).
    fn splits(&self, size: u64) -> bool {
        self.split_sizes
            .as_ref()
            .is_some_and(|sizes| sizes.contains(&size))
    }

    /// Injects a small write from `local` to `remote` at once, when it may be and everything
    /// about it is known and valid; `Ok(false)` sends it down the general path (which also
    /// reports whatever is wrong with it, in the usual order). Nothing is counted or
    /// allocated on this path: a write_notify ping-pong runs on it.
    pub(crate) fn try_inject(
        &self,
        q: &Queue,
        local: Local,
        remote: Remote,
        size: u64,
        data: Option<WireNotification>,
    ) -> Result<bool> {
        if !self.may_inject(q, size) || self.health.known(remote.rank).is_some() {
            return Ok(false);
        }
        let key = DescKey::Segment(remote.segment);
        let Some(known) = self.known_now(remote.rank, key) else {
            return Ok(false);
        };
        let Ok(target) = check_target(self, remote.rank, key, remote.offset, size, None, known)
        else {
            return Ok(false);
        };
        self.fabric_taken(q, remote.rank);
        let data = data.map(WireNotification::encode);
        let injected = self
            .segments
            .with_segment(Table::User(local.segment), |seg| {
                let source = seg.slice(self.rank, local.offset, size).ok()?;
                Some(self.ep.inject_write_from(source, target, data))
            })
            .flatten();
        match injected {
            Some(posted) => Ok(posted? == Posted::Yes),
            None => Ok(false),
        }
    }

    /// Whether a write of `size` bytes on `q` may be injected: it fits, the provider orders
    /// writes (without ordering a later notify must wait for it to be delivered, so it is
    /// tracked), and nothing waits on the queue that it would overtake.
    fn may_inject(&self, q: &Queue, size: u64) -> bool {
        size as usize <= self.ep.caps().inject_size
            && self.ep.caps().ordered_writes
            && q.parked() == 0
    }

    /// Posts a notify on `q`: injected at once where it may go, else counted and parked.
    pub(crate) fn notify_on(
        &self,
        q: &Queue,
        rank: Rank,
        check: Dest,
        wire: WireNotification,
    ) -> Result<()> {
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        self.fabric_taken(q, rank);
        let ready = matches!(check, Dest::Ready(_));
        let ordered = self.ep.caps().ordered_writes;
        if ready
            && q.parked() == 0
            && (ordered || q.outstanding() == 0)
            && self.try_notify(rank, wire)? == Posted::Yes
        {
            return Ok(());
        }
        q.reserve(rank, 1)?;
        q.submit(
            self,
            [Request {
                rank,
                kind: Kind::Notify { check, wire },
            }],
        )
    }

    /// Counts `requests` (towards `rank`) on `q` together, then posts them in order.
    pub(crate) fn submit_all(&self, q: &Queue, rank: Rank, requests: Vec<Request>) -> Result<()> {
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        if requests.is_empty() {
            return Ok(());
        }
        self.fabric_taken(q, rank);
        q.reserve(rank, requests.len() as u32)?;
        q.submit(self, requests)
    }

    /// [`wait_queue`](Self::wait_queue) within `timeout`, whose deadline is taken only when
    /// something is outstanding: a queue or batch whose operations all went directly (or were
    /// injected) completed when they were posted, and reading the clock for its wait would
    /// cost more than the rest of it.
    pub(crate) fn wait_queue_within(&self, q: &Queue, timeout: Timeout) -> Result<()> {
        if q.outstanding() == 0 {
            return q.tracker.take_failure().map_or(Ok(()), Err);
        }
        self.wait_queue(q, timeout.deadline())
    }

    /// Waits until everything on `q` completed (see [`Context::wait`]).
    pub(crate) fn wait_queue(&self, q: &Queue, deadline: Deadline) -> Result<()> {
        // Nothing outstanding (short writes are injected): no ranks to list and watch, and no
        // progress call (a socket poll on tcp).
        if q.outstanding() == 0 {
            return q.tracker.take_failure().map_or(Ok(()), Err);
        }
        let result = self.watched_until(
            || q.tracker.targets().into_iter(),
            deadline,
            || (q.outstanding() == 0).then_some(()),
        );
        let failure = if result.is_err() {
            // A dead rank's operations never complete: drop them so the queue is usable.
            for rank in q.tracker.targets() {
                if self.health.known(rank).is_some() {
                    q.drop_rank(rank);
                }
            }
            q.tracker.settle_failure()
        } else {
            q.tracker.take_failure()
        };
        failure.map_or(result, Err)
    }

    /// Posts a notification-only write: 8 bytes into the target's system scratch area,
    /// carrying the notification as remote completion data.
    pub(crate) fn try_notify(&self, rank: Rank, wire: WireNotification) -> Result<Posted> {
        let target = self.system.target(rank, layout::SCRATCH);
        let scratch = [0u8; SCRATCH_LEN as usize];
        Ok(self
            .ep
            .inject_write(&scratch, target, Some(wire.encode()))?)
    }

    /// Sends a notification-only write under `deadline`.
    pub(crate) fn system_notify(
        &self,
        rank: Rank,
        wire: WireNotification,
        deadline: Deadline,
    ) -> Result<()> {
        if self.notify_directly(None, rank, wire)? {
            return Ok(());
        }
        let target = self.system.target(rank, layout::SCRATCH);
        let scratch = [0u8; SCRATCH_LEN as usize];
        self.inject_until(rank, deadline, || {
            self.ep.inject_write(&scratch, target, Some(wire.encode()))
        })
    }
}

/// The sizes of the notified writes that split (see
/// [`Config::split_notify`](crate::Config::split_notify)), worked out once at startup: from
/// the configured size (tcp's default when unset) up to the largest write the provider places
/// in order; `None` when nothing splits.
pub(crate) fn split_sizes(config: &Config, caps: &Capabilities) -> Option<RangeInclusive<u64>> {
    let from = match config.split_notify {
        Some(0) => return None,
        Some(from) => from,
        None if caps.provider.starts_with("tcp") => TCP_SPLIT_NOTIFY,
        None => return None,
    };
    caps.ordered_writes
        .then_some(from..=caps.ordered_write_size)
}

/// Checks notification `n` for table `segment` (of `count` ids) on `rank`.
pub(crate) fn check_notification(
    rank: Rank,
    segment: SegmentId,
    count: u32,
    n: Notification,
) -> Result<()> {
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
    Ok(())
}
