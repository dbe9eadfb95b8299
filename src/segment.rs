//! Segments: this rank's registered memory with its notification tables, the user's segment
//! calls, and the [`Segment`] handle through which libraries (and users) reach one.
//!
//! A segment is memory (from `gaspi-segments`) registered with the fabric (a
//! [`Region`]) plus a notification table. User segments are named by
//! their id (0..=255); library segments (see the `library` module) have local ids of their
//! own in another space, so neither ever takes an id from the other. Other ranks find a
//! segment through the descriptor this rank publishes in its system region (see
//! `engine::lookup`).

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use gaspi_fabric::{Region, Slice};
use gaspi_notifications::{NotificationTable, Timeout};

use crate::direct::SharedTable;
use gaspi_segments::{Loan, SegmentMemory, SharedWords, Slots};

use crate::context::{Context, Inner};
use crate::dissemination::Purpose;
use crate::engine::lookup::{DescKey, Descriptor, Known};
use crate::error::{Error, NotificationId, Rank, Result, SegmentId};
use crate::group::GROUP_ALL;
use crate::library::Shared;
use crate::wire::{Table, WireNotification};

/// A segment of this rank.
pub(crate) struct LocalSegment {
    /// Its notification table's name on the wire (and so its id).
    pub(crate) table: Table,
    /// The registered memory; `None` for a library's notification table without memory.
    pub(crate) region: Option<Arc<Region>>,
    /// In shared memory (its file in `table_words`), so that same-host peers set notifications
    /// directly (see `direct`).
    pub(crate) notifications: NotificationTable,
    pub(crate) table_words: Arc<SharedWords>,
    /// The collective creation finished (user segments: every rank has it).
    pub(crate) synced: AtomicBool,
    /// Which of this rank's segments it is (see [`Descriptor::incarnation`]).
    pub(crate) incarnation: u32,
    /// Taken out of the registry (deleted): what [`Segment::is_current`] reads.
    removed: AtomicBool,
}

impl LocalSegment {
    /// Length of the memory in bytes (0 without memory).
    pub(crate) fn len(&self) -> u64 {
        self.region.as_ref().map_or(0, |r| r.len() as u64)
    }

    /// Whether the memory is the user's, given to `segment_bind`.
    pub(crate) fn is_bound(&self) -> bool {
        self.region.as_ref().is_some_and(|r| r.memory().is_bound())
    }

    /// The segment's id as errors name it (a library segment's local id).
    pub(crate) fn id(&self) -> SegmentId {
        self.table.id()
    }

    /// Operations from or into this segment still in flight, or parked in their queue: each
    /// holds the region.
    pub(crate) fn in_flight(&self) -> u32 {
        self.region
            .as_ref()
            .map_or(0, |r| Arc::strong_count(r).saturating_sub(1) as u32)
    }

    /// The bytes `offset..offset + len`, for an operation of this rank `me`.
    // Inline, as the region's slice is: on the path of every operation through the fabric.
    #[inline]
    pub(crate) fn slice(&self, me: Rank, offset: u64, len: u64) -> Result<Slice<'_>> {
        match &self.region {
            Some(region) => region
                .slice(offset, len)
                .map_err(|_| self.out_of_bounds(me, offset, len)),
            None => Err(self.out_of_bounds(me, offset, len)),
        }
    }

    /// Checks that `offset..offset + len` lies in the segment.
    #[inline(always)]
    pub(crate) fn check(&self, me: Rank, offset: u64, len: u64) -> Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len()) {
            Ok(())
        } else {
            Err(self.out_of_bounds(me, offset, len))
        }
    }

    #[cold]
    fn out_of_bounds(&self, me: Rank, offset: u64, len: u64) -> Error {
        Error::OutOfBounds {
            rank: me,
            segment: self.id(),
            offset,
            size: len,
            segment_size: self.len(),
        }
    }

    fn memory_error(&self, me: Rank, offset: u64, size: u64, e: gaspi_segments::Error) -> Error {
        match e {
            gaspi_segments::Error::OutOfBounds { .. } => Error::OutOfBounds {
                rank: me,
                segment: self.id(),
                offset,
                size,
                segment_size: self.len(),
            },
            source => Error::Segment {
                rank: me,
                segment: self.id(),
                source,
            },
        }
    }

    /// Copies `buf.len()` bytes out of the segment at `offset`.
    pub(crate) fn read(&self, me: Rank, offset: u64, buf: &mut [u8]) -> Result<()> {
        let size = buf.len() as u64;
        match &self.region {
            Some(r) => r
                .memory()
                .read(offset, buf)
                .map_err(|e| self.memory_error(me, offset, size, e)),
            None => self.check(me, offset, size),
        }
    }

    /// Copies `data` into the segment at `offset`.
    pub(crate) fn write(&self, me: Rank, offset: u64, data: &[u8]) -> Result<()> {
        let size = data.len() as u64;
        match &self.region {
            Some(r) => r
                .memory()
                .write(offset, data)
                .map_err(|e| self.memory_error(me, offset, size, e)),
            None => self.check(me, offset, size),
        }
    }

    /// Copies `size` bytes at `offset` into `dst` at `dst_offset` (the same segment or
    /// another of this rank), as `memmove` would when the ranges overlap.
    pub(crate) fn copy_into(
        &self,
        me: Rank,
        offset: u64,
        dst: &LocalSegment,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        self.check(me, offset, size)?;
        dst.check(me, dst_offset, size)?;
        match (&self.region, &dst.region) {
            (Some(from), Some(to)) => from
                .memory()
                .copy_to(offset, to.memory(), dst_offset, size)
                .map_err(|e| self.memory_error(me, offset, size, e)),
            // A segment without memory has length 0: the checks passed for 0 bytes only.
            _ => Ok(()),
        }
    }

    /// What peers need to reach it.
    pub(crate) fn descriptor(&self) -> Descriptor {
        let notifications = self.notifications.len();
        match &self.region {
            Some(r) => Descriptor {
                base: r.base(),
                key: r.key(),
                size: r.len() as u64,
                notifications,
                incarnation: self.incarnation,
            },
            None => Descriptor {
                base: 0,
                key: 0,
                size: 0,
                notifications,
                incarnation: self.incarnation,
            },
        }
    }
}

/// The slot of a table in the registry.
fn index(table: Table) -> Option<usize> {
    match table {
        Table::User(id) => Some(usize::from(id)),
        Table::Library(id) => Some(256 + usize::from(id)),
        Table::System => None,
    }
}

/// A segment in the registry.
struct Entry {
    local: Arc<LocalSegment>,
    /// The state every [`Segment`] handle of a user segment shares, made by the first
    /// [`Context::segment`] call, so that later ones only clone it.
    handle: OnceLock<Arc<Shared>>,
}

impl Entry {
    fn new(local: Arc<LocalSegment>) -> Arc<Entry> {
        Arc::new(Entry {
            local,
            handle: OnceLock::new(),
        })
    }
}

/// This rank's segments, user and library: looked up by every operation without a lock (see
/// [`Slots`]), changed under one.
pub(crate) struct Segments {
    slots: Slots<Entry>,
    /// Serialises changes that look before they change (insert, remove), so that none
    /// interleaves with another.
    changes: Mutex<()>,
    /// Registration keys, unique per domain for as long as the process runs.
    next_key: AtomicU64,
    /// The incarnation of the next segment made (see [`Descriptor::incarnation`]).
    next_incarnation: AtomicU32,
}

impl Segments {
    pub(crate) fn new() -> Self {
        Segments {
            slots: Slots::new(512),
            changes: Mutex::new(()),
            next_key: AtomicU64::new(0x1000),
            next_incarnation: AtomicU32::new(1),
        }
    }

    /// A registration key no other registration of this process uses.
    pub(crate) fn next_key(&self) -> u64 {
        self.next_key.fetch_add(1, Ordering::Relaxed)
    }

    /// A new incarnation: 0 (the runtime's own registrations) only after 2^32 segments.
    fn next_incarnation(&self) -> u32 {
        self.next_incarnation.fetch_add(1, Ordering::Relaxed)
    }

    /// The entry behind `table`, lent.
    fn entry(&self, table: Table) -> Option<Loan<'_, Entry>> {
        self.slots.get(index(table)?)
    }

    /// The segment behind `table`, if it exists.
    pub(crate) fn get(&self, table: Table) -> Option<Arc<LocalSegment>> {
        self.entry(table).map(|e| Arc::clone(&e.local))
    }

    /// The state of handles of user segment `id` of this rank `me`.
    fn user_handle(&self, me: Rank, id: SegmentId) -> Result<Arc<Shared>> {
        let missing = || Error::UnknownSegment {
            rank: me,
            segment: id,
        };
        let handle = |entry: &Entry| {
            let shared = entry
                .handle
                .get_or_init(|| Arc::new(Shared::user(Arc::clone(&entry.local))));
            Arc::clone(shared)
        };
        {
            let entry = self.entry(Table::User(id)).ok_or_else(missing)?;
            if !entry.local.is_bound() {
                // Allocated memory: a handle keeps its own mapping, deleted or not.
                return Ok(handle(&entry));
            }
        }
        // Bound memory: serialised with `remove`, which counts the handles; one made from an
        // entry that a deletion is unlinking meanwhile would reach memory the user may free.
        let _changes = self.changes();
        let entry = self.entry(Table::User(id)).ok_or_else(missing)?;
        Ok(handle(&entry))
    }

    /// User segment `id` of this rank `me`.
    pub(crate) fn user(&self, me: Rank, id: SegmentId) -> Result<Arc<LocalSegment>> {
        self.get(Table::User(id))
            .ok_or_else(|| Error::UnknownSegment {
                rank: me,
                segment: id,
            })
    }

    /// Runs `f` on the segment behind `table` without touching its reference count (the
    /// operations' fast path). `f` must not block: the segment is lent meanwhile. It gets the
    /// segment as the registry holds it, so that a caller that turns out to need a reference
    /// of its own (a wait that found nothing yet) takes it under the same lookup and pin.
    pub(crate) fn with_segment<R>(
        &self,
        table: Table,
        f: impl FnOnce(&Arc<LocalSegment>) -> R,
    ) -> Option<R> {
        self.entry(table).map(|e| f(&e.local))
    }

    /// The segment behind `table`, lent under `loan`'s pin (an operation that holds a peer's
    /// segment lent already): no pin of its own.
    pub(crate) fn under<'b, U>(
        &'b self,
        table: Table,
        loan: &'b Loan<'_, U>,
    ) -> Option<&'b LocalSegment> {
        loan.with(&self.slots, index(table)?).map(|e| &*e.local)
    }

    /// Runs `f` on the notification table behind `table` without touching the segment's
    /// reference count: delivering a notification uses it. `f` must not block.
    pub(crate) fn with_table<R>(
        &self,
        table: Table,
        f: impl FnOnce(&NotificationTable) -> R,
    ) -> Option<R> {
        self.entry(table).map(|e| f(&e.local.notifications))
    }

    fn changes(&self) -> MutexGuard<'_, ()> {
        self.changes.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn insert(&self, me: Rank, seg: LocalSegment) -> Result<Arc<LocalSegment>> {
        let table = seg.table;
        let id = seg.id();
        let at = index(table).ok_or_else(|| {
            Error::Protocol("a segment of the system table cannot be installed".into())
        })?;
        let seg = Arc::new(seg);
        let _changes = self.changes();
        match self.slots.try_insert(at, Entry::new(Arc::clone(&seg))) {
            Ok(()) => Ok(seg),
            Err(Some(_)) => Err(Error::SegmentExists {
                rank: me,
                segment: id,
            }),
            Err(None) => Err(Error::Protocol(format!("no registry slot {at}"))),
        }
    }

    /// Installs a library segment under the lowest free local id (1..=255) that `make`
    /// builds it for.
    pub(crate) fn insert_library(
        &self,
        make: impl FnOnce(u8) -> Result<LocalSegment>,
    ) -> Result<Arc<LocalSegment>> {
        let _changes = self.changes();
        let id = (1..=255u8)
            .find(|&id| !self.slots.is_occupied(256 + usize::from(id)))
            .ok_or_else(|| Error::Limit("all 255 library segments of this rank exist".into()))?;
        let seg = Arc::new(make(id)?);
        self.slots
            .try_insert(256 + usize::from(id), Entry::new(Arc::clone(&seg)))
            .map_err(|_| Error::Protocol(format!("library segment {id} was taken meanwhile")))?;
        Ok(seg)
    }

    /// Removes the segment behind `table` when nothing is in flight on it, and runs
    /// `withdraw` before its id is free for a creation again (see
    /// [`remove_even_busy`](Self::remove_even_busy)).
    pub(crate) fn remove(
        &self,
        me: Rank,
        table: Table,
        withdraw: impl FnOnce() -> Result<()>,
    ) -> Result<Arc<LocalSegment>> {
        let missing = || match table {
            Table::User(id) | Table::Library(id) => Error::UnknownSegment {
                rank: me,
                segment: id,
            },
            Table::System => Error::Protocol("the system table is not a segment".into()),
        };
        let at = index(table).ok_or_else(missing)?;
        let _changes = self.changes();
        {
            let entry = self.slots.get(at).ok_or_else(missing)?;
            let in_flight = entry.local.in_flight();
            if in_flight > 0 {
                return Err(Error::SegmentBusy {
                    segment: entry.local.id(),
                    in_flight,
                });
            }
            // A handle keeps the memory reachable from safe code (`Segment::write`,
            // `Segment::memory`) after the deletion; for bound memory the user's promise ends
            // with the deletion, so those accesses would reach memory it may have freed.
            let bound = entry.local.is_bound();
            let handles = entry
                .handle
                .get()
                .map_or(0, |h| Arc::strong_count(h).saturating_sub(1));
            if bound && handles > 0 {
                return Err(Error::SegmentHandled {
                    segment: entry.local.id(),
                    handles: u32::try_from(handles).unwrap_or(u32::MAX),
                });
            }
        }
        let removed = self.slots.replace(at, None).map_err(|_| missing())?;
        let removed = removed.map(|e| Arc::clone(&e.local)).ok_or_else(missing)?;
        removed.removed.store(true, Ordering::Release);
        withdraw()?;
        Ok(removed)
    }

    /// Removes the segment behind `table`, even with operations in flight (they keep its
    /// memory and registration until they complete), and runs `withdraw` before its id is
    /// free for a creation again.
    ///
    /// `withdraw` unpublishes the segment: a creation that takes the id meanwhile (a library
    /// segment takes the lowest free one, from any thread) would otherwise publish its
    /// segment first and have it withdrawn, unreachable for its whole life.
    pub(crate) fn remove_even_busy(
        &self,
        table: Table,
        withdraw: impl FnOnce(),
    ) -> Option<Arc<LocalSegment>> {
        let _changes = self.changes();
        let removed = self.slots.replace(index(table)?, None).ok()??;
        removed.local.removed.store(true, Ordering::Release);
        withdraw();
        Some(Arc::clone(&removed.local))
    }

    /// Ids of this rank's user segments, ascending.
    pub(crate) fn user_ids(&self) -> Vec<SegmentId> {
        (0..=SegmentId::MAX)
            .filter(|&id| self.slots.is_occupied(usize::from(id)))
            .collect()
    }
}

impl Inner {
    /// Registers `memory` (if any) and builds the segment for `table`.
    pub(crate) fn new_segment(
        &self,
        table: Table,
        memory: Option<SegmentMemory>,
        notifications: u32,
    ) -> Result<LocalSegment> {
        let region = memory
            .map(|m| Region::register(&self.ep, m, self.segments.next_key()))
            .transpose()?;
        let name = match table {
            Table::User(id) => format!("table{id}"),
            Table::Library(id) => format!("libtable{id}"),
            Table::System => "system-table".into(),
        };
        let shared = SharedTable::new(self.rank, notifications, &name, &self.arrivals)?;
        Ok(LocalSegment {
            table,
            region,
            notifications: shared.table,
            table_words: shared.words,
            synced: AtomicBool::new(false),
            incarnation: self.segments.next_incarnation(),
            removed: AtomicBool::new(false),
        })
    }

    /// Removes this rank's segment behind `table`, unpublishes it and tells every other rank,
    /// so that its next operation on the segment returns [`Error::UnknownSegment`] instead of
    /// reaching a closed registration. Telling never blocks: news the provider has no room
    /// for now waits in the outbox.
    pub(crate) fn delete_segment(&self, table: Table) -> Result<()> {
        let key = table.segment_key()?;
        let seg = self
            .segments
            .remove(self.rank, table, || self.withdraw(key))?;
        // A thread waiting on the segment's notifications learns that it is gone.
        seg.notifications.close();
        drop(seg);
        self.announce_gone(table);
        Ok(())
    }

    /// Withdraws this rank's descriptor of the removed segment behind `key`.
    pub(crate) fn withdraw(&self, key: DescKey) -> Result<()> {
        self.publish(key, None)?;
        self.descriptors.forget_deleted(self.rank, key);
        Ok(())
    }

    /// Tells every live peer that this rank's segment behind `table` is gone, which forgets
    /// it (the news goes through the outbox: it never blocks and is not lost when the
    /// provider is busy). It may arrive after the id was taken by a new segment, which the
    /// peers look up anew.
    pub(crate) fn announce_gone(&self, table: Table) {
        let gone = WireNotification::segment_gone(self.rank, table);
        for rank in (0..self.size).filter(|&r| r != self.rank) {
            self.outbox.notify(self, rank, gone);
        }
    }
}

impl Context {
    /// Creates segment `id` of `size` bytes on every rank (collective: all ranks call it with
    /// the same id), zero-filled, registered and published; returns once every rank has done so,
    /// or [`Error::Timeout`].
    ///
    /// The memory is a shared-memory file, so other ranks on this host could map it directly.
    /// Each rank may pass its own `size`. After a timeout the segment exists locally and calling
    /// again (with the same id) finishes the synchronisation; a call that timed out waiting for
    /// another thread's collective of [`GROUP_ALL`] made nothing, and calling
    /// again creates the segment.
    ///
    /// # Errors
    /// [`Error::SegmentExists`] when the segment exists (and its creation finished);
    /// [`Error::Segment`] when the memory cannot be allocated, a `size` of 0 included (this
    /// rank made nothing and did not enter the synchronisation: the other ranks wait in theirs
    /// until this rank calls again, with a size it can allocate, or until their timeout, and
    /// another collective of [`GROUP_ALL`] here meets theirs as
    /// [`Error::CollectiveMismatch`]);
    /// [`Error::Timeout`] as above;
    /// [`Error::RankFailed`] when a rank died; [`Error::CollectiveInProgress`] when a
    /// collective of [`GROUP_ALL`] that timed out is still in flight;
    /// [`Error::CollectiveMismatch`] naming a rank that called another collective of
    /// `GROUP_ALL` meanwhile (a `barrier`, `finalize`, or `segment_create` of another id).
    pub fn segment_create(&self, id: SegmentId, size: u64, timeout: Timeout) -> Result<()> {
        let me = self.rank();
        self.create_with(id, timeout, || {
            let len = usize::try_from(size).map_err(|_| Error::OutOfBounds {
                rank: me,
                segment: id,
                offset: 0,
                size,
                segment_size: usize::MAX as u64,
            })?;
            SegmentMemory::allocate(len, &format!("seg{id}")).map_err(Error::segment(me, id))
        })
    }

    /// Makes `memory` segment `id` on every rank (collective, like
    /// [`segment_create`](Self::segment_create), with the same timeout semantics). A call that
    /// timed out before it made the segment (waiting for another thread's collective) dropped
    /// `memory`: call again with the memory bound again; a call that finds the segment made
    /// drops the `memory` it is given.
    ///
    /// Memory the user provides is bound with the `unsafe`
    /// [`SegmentMemory::bind`](crate::SegmentMemory::bind), whose contract (the memory stays
    /// valid and is never borrowed while remote ranks may write it) holds until the segment is
    /// deleted or the context dropped, and until every operation that uses it completed.
    ///
    /// # Errors
    /// As for [`segment_create`](Self::segment_create).
    pub fn segment_bind(
        &self,
        id: SegmentId,
        memory: SegmentMemory,
        timeout: Timeout,
    ) -> Result<()> {
        let mut memory = Some(memory);
        self.create_with(id, timeout, || {
            memory
                .take()
                .ok_or_else(|| Error::Protocol("segment memory was taken twice".into()))
        })
    }

    /// Installs the memory `make` returns as segment `id` and synchronises with all ranks,
    /// or continues the synchronisation of an earlier call that timed out.
    fn create_with(
        &self,
        id: SegmentId,
        timeout: Timeout,
        make: impl FnOnce() -> Result<SegmentMemory>,
    ) -> Result<()> {
        let me = self.rank();
        let inner = &self.inner;
        let purpose = Purpose::SegmentCreate(id);
        let deadline = timeout.deadline();
        // Refused before anything is made: another call's synchronisation is in flight.
        if let Some(pending) = self.barrier_conflict(GROUP_ALL, purpose, deadline)? {
            return Err(Error::CollectiveInProgress {
                group: GROUP_ALL,
                pending,
            });
        }
        match inner.segments.get(Table::User(id)) {
            None => {
                let seg = inner.new_segment(
                    Table::User(id),
                    Some(make()?),
                    inner.config.notifications,
                )?;
                let seg = inner.segments.insert(me, seg)?;
                // Peers may have cached an earlier segment with this id, or its absence.
                inner.descriptors.forget_everywhere(DescKey::Segment(id));
                inner.publish_segment(DescKey::Segment(id), &seg)?;
            }
            Some(seg) if seg.synced.load(Ordering::Acquire) => {
                return Err(Error::SegmentExists {
                    rank: me,
                    segment: id,
                })
            }
            // An earlier call timed out in the synchronisation: continue it.
            Some(_) => {}
        }
        self.barrier_for(GROUP_ALL, purpose, deadline)?;
        // An answer cached while peers were still creating it may say "absent".
        inner.descriptors.forget_everywhere(DescKey::Segment(id));
        if let Some(seg) = inner.segments.get(Table::User(id)) {
            seg.synced.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Deletes this rank's segment `id` (local).
    ///
    /// Every other rank is told, so that its next operation on the segment, by id or through
    /// a [`Target`](crate::Target), fails with [`Error::UnknownSegment`] (on the direct path
    /// at the call, through the fabric at its queue's `wait`: the news makes the peer look the
    /// segment up again) instead of reaching
    /// a closed registration (which some providers handle badly: libfabric 1.17's tcp crashes
    /// the writer). An operation a peer posts before the news arrives is still the
    /// application's error: synchronise deletes with the peers that write into the segment.
    /// The same holds between threads of this rank: an operation that another thread starts
    /// while the segment is being deleted either fails with [`Error::UnknownSegment`] or runs
    /// to its end on the old memory, which stays valid until then; which of the two is a race
    /// between the calls. A wait on the segment's notifications that has found nothing set
    /// ends with [`Error::UnknownSegment`] when the segment is deleted, also under
    /// [`Timeout::Block`]: nothing can be set in it any more.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`] when it does not exist; [`Error::SegmentBusy`] while
    /// operations from or into it are in flight on this rank; [`Error::SegmentHandled`] for
    /// memory given to [`segment_bind`](Self::segment_bind) while [`Segment`] handles of it
    /// are alive.
    pub fn segment_delete(&self, id: SegmentId) -> Result<()> {
        self.inner.delete_segment(Table::User(id))
    }

    /// Size in bytes of this rank's segment `id`.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`] when it does not exist.
    pub fn segment_size(&self, id: SegmentId) -> Result<u64> {
        Ok(self.inner.segments.user(self.rank(), id)?.len())
    }

    /// Size in bytes of segment `id` on `rank`, looked up once (within `timeout`) and cached.
    ///
    /// Looking a segment up before operations on it also makes their argument checks
    /// immediate (see [`write`](Self::write)).
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::UnknownSegment`] when `rank` has no such segment;
    /// [`Error::Timeout`] when the answer did not come in time (a later call finds the lookup
    /// still going); [`Error::RankFailed`] when `rank` is dead.
    pub fn segment_size_of(&self, rank: Rank, id: SegmentId, timeout: Timeout) -> Result<u64> {
        self.check_rank(rank)?;
        match self
            .inner
            .resolve(rank, DescKey::Segment(id), timeout.deadline())?
        {
            Known::Present(d) => Ok(d.size),
            Known::Absent => Err(Error::UnknownSegment { rank, segment: id }),
        }
    }

    /// Ids of this rank's segments, ascending.
    pub fn segment_list(&self) -> Vec<SegmentId> {
        self.inner.segments.user_ids()
    }

    /// Copies `buf.len()` bytes out of segment `id` at `offset`.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`]; [`Error::OutOfBounds`] when the range leaves the segment.
    pub fn segment_read(&self, id: SegmentId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let me = self.rank();
        self.inner.segments.user(me, id)?.read(me, offset, buf)
    }

    /// Copies `data` into segment `id` at `offset`.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`]; [`Error::OutOfBounds`] when the range leaves the segment.
    pub fn segment_write(&self, id: SegmentId, offset: u64, data: &[u8]) -> Result<()> {
        let me = self.rank();
        self.inner.segments.user(me, id)?.write(me, offset, data)
    }

    /// A handle on this rank's segment `id`: its memory (for zero-copy access), its
    /// notifications, and [`Target`](crate::Target)s of the same segment on other ranks.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`] when it does not exist.
    pub fn segment(&self, id: SegmentId) -> Result<Segment<'_>> {
        Ok(Segment {
            ctx: self,
            shared: self.inner.segments.user_handle(self.rank(), id)?,
        })
    }
}

/// A handle on a segment of this rank: a user segment ([`Context::segment`]) or a library's
/// ([`Library::segment_create`](crate::Library::segment_create)).
///
/// Cloning is cheap. The handle keeps the segment's memory mapped, so borrows of
/// [`memory`](Self::memory) stay valid for as long as the handle lives; a library segment is
/// deleted when its last handle is dropped.
#[derive(Clone)]
pub struct Segment<'a> {
    pub(crate) ctx: &'a Context,
    pub(crate) shared: Arc<Shared>,
}

impl std::fmt::Debug for Segment<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Segment")
            .field("table", &self.shared.local.table)
            .field("len", &self.shared.local.len())
            .finish()
    }
}

impl<'a> Segment<'a> {
    pub(crate) fn local(&self) -> &Arc<LocalSegment> {
        &self.shared.local
    }

    /// Length in bytes (0 for a library's notification table without memory).
    pub fn len(&self) -> u64 {
        self.shared.local.len()
    }

    /// Whether this handle's segment is still this rank's segment under its id: `false` once
    /// it was deleted ([`Context::segment_delete`]), also after a segment was made with the
    /// same id since (that is another segment, which [`Context::segment`] returns).
    ///
    /// One atomic load: a caller that keeps a handle across calls checks it instead of
    /// looking the segment up by id each time. Another thread may delete the segment right
    /// after the check; the handle keeps allocated memory mapped meanwhile, and a handle of
    /// bound memory makes that deletion fail with [`Error::SegmentHandled`], so keeping one
    /// of bound memory holds back the user's deletion.
    #[inline]
    pub fn is_current(&self) -> bool {
        !self.shared.local.removed.load(Ordering::Acquire)
    }

    /// Whether the segment has no memory (a library's notification table).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The user segment id, or `None` for a library segment.
    pub fn id(&self) -> Option<SegmentId> {
        match self.shared.local.table {
            Table::User(id) => Some(id),
            Table::Library(_) | Table::System => None,
        }
    }

    /// The memory, for zero-copy access through its `unsafe` slices (see
    /// [`SegmentMemory`]'s aliasing model); `None` for a notification table without memory.
    pub fn memory(&self) -> Option<&SegmentMemory> {
        self.shared.local.region.as_ref().map(|r| r.memory())
    }

    /// Copies `buf.len()` bytes out of the segment at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the segment.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        self.shared.local.read(self.ctx.rank(), offset, buf)
    }

    /// Copies `data` into the segment at `offset`.
    ///
    /// # Errors
    /// [`Error::OutOfBounds`] when the range leaves the segment.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        self.shared.local.write(self.ctx.rank(), offset, data)
    }

    /// Copies `size` bytes of this segment at `offset` into this rank's user segment `id` at
    /// `dst_offset`, memory to memory: no buffer between, as `memmove` would when the ranges
    /// overlap (`id` may be this segment).
    ///
    /// Segment `id` is looked up for this copy only and lent for its length, as the
    /// runtime's operations lend it, without a [`Segment`] handle or a reference of its own:
    /// a [`Context::segment_delete`] of it from another thread meanwhile is the race that
    /// call describes (the copy fails with [`Error::UnknownSegment`] or runs to its end), and
    /// is never refused with [`Error::SegmentHandled`] because of the copy. It is what
    /// [`Segment::read`] followed by [`Context::segment_write`] does, with one copy and no
    /// buffer between.
    ///
    /// # Errors
    /// [`Error::UnknownSegment`] when segment `id` does not exist; [`Error::OutOfBounds`]
    /// naming the segment whose range is left (this one's first).
    pub fn copy_into(&self, offset: u64, id: SegmentId, dst_offset: u64, size: u64) -> Result<()> {
        let me = self.ctx.rank();
        let from = &self.shared.local;
        self.ctx
            .inner
            .segments
            .with_segment(Table::User(id), |to| {
                from.copy_into(me, offset, to, dst_offset, size)
            })
            .unwrap_or(Err(Error::UnknownSegment {
                rank: me,
                segment: id,
            }))
    }

    /// Number of notifications in the segment's table.
    pub fn notifications(&self) -> u32 {
        self.shared.local.notifications.len()
    }

    /// Waits until one of the notifications `begin..begin + num` is set and returns its id,
    /// like [`Context::notify_waitsome`].
    ///
    /// # Errors
    /// As for [`Context::notify_waitsome`].
    pub fn notify_waitsome(
        &self,
        begin: NotificationId,
        num: u32,
        timeout: Timeout,
    ) -> Result<NotificationId> {
        let ctx = self.ctx;
        self.shared
            .local
            .notifications
            .wait_some(begin, num, timeout, ctx.inner.waiter())
            .map_err(|e| ctx.notification_error(self.shared.local.id(), e))
    }

    /// Atomically takes notification `id`, like [`Context::notify_reset`].
    ///
    /// # Errors
    /// [`Error::InvalidNotification`] when `id` is outside the table.
    pub fn notify_reset(&self, id: NotificationId) -> Result<u32> {
        self.shared
            .local
            .notifications
            .reset(id)
            .map_err(|e| self.ctx.notification_error(self.shared.local.id(), e))
    }

    /// The current value of notification `id`, like [`Context::notify_peek`].
    ///
    /// # Errors
    /// [`Error::InvalidNotification`] when `id` is outside the table.
    pub fn notify_peek(&self, id: NotificationId) -> Result<u32> {
        self.shared
            .local
            .notifications
            .get(id)
            .map_err(|e| self.ctx.notification_error(self.shared.local.id(), e))
    }

    /// The notifications `begin..begin + num` of this segment, for
    /// [`Context::notify_wait_any`].
    pub fn range(&self, begin: NotificationId, num: u32) -> crate::notify::NotificationRange<'_> {
        crate::notify::NotificationRange {
            table: &self.shared.local.notifications,
            segment: self.shared.local.id(),
            begin,
            num,
        }
    }

    /// The same segment on `rank` (for a library segment: a member of its group), resolved
    /// within `timeout`, as a target for [`Batch`](crate::Batch) operations and atomics.
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::NotInScope`] for a library segment when `rank` is not
    /// a member; [`Error::UnknownSegment`] when `rank` has no such segment; [`Error::Timeout`];
    /// [`Error::RankFailed`].
    pub fn target(&self, rank: Rank, timeout: Timeout) -> Result<crate::Target> {
        let (table, incarnation) = self.shared.table_on(rank)?;
        let target = self.ctx.resolve_target(rank, table, timeout)?;
        match incarnation {
            Some(i) if i != target.descriptor.incarnation => Err(Error::UnknownSegment {
                rank,
                segment: table.id(),
            }),
            _ => Ok(target),
        }
    }
}
