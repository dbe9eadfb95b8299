//! Operations on the direct path: the caller copies between its segment and a same-host peer's
//! mapped segment, then publishes the notification into the peer's shared table. Each call
//! here is complete when it returns; none blocks.
//!
//! The pieces of a direct write are `#[inline(always)]` and their errors `#[cold]`: even with
//! fat LTO, LLVM kept them in five frames, which cost a direct `write_notify` of 8 B about
//! 136 of its 455 instructions.

use gaspi_notifications::NotificationTable;
use gaspi_segments::Loan;

use crate::context::Inner;
use crate::direct::{PeerSegment, Reached, Slot};
use crate::engine::lookup::DescKey;
use crate::error::{Error, NotificationId, Rank, Result, SegmentId};
use crate::queue::Queue;
use crate::rma::{ListEntry, Local, Remote};
use crate::segment::LocalSegment;
use crate::wire::{Table, WireNotification};

impl Inner {
    /// The segment behind `table` of `rank`, mapped, when an operation on `q` towards it goes
    /// directly; `None` sends it through the fabric.
    ///
    /// # Errors
    /// [`Error::RankFailed`] for a rank known dead; [`Error::UnknownSegment`] when the peer has
    /// no such segment.
    #[inline(always)]
    pub(crate) fn direct_to(
        &self,
        q: Option<&Queue>,
        rank: Rank,
        table: Table,
    ) -> Result<Option<Loan<'_, PeerSegment>>> {
        let Some(reached) = self.direct.peer(rank) else {
            return Ok(None);
        };
        self.reached_to(q, reached, rank, table)
    }

    /// [`direct_to`](Self::direct_to) for `rank` reached directly, as `reached`.
    #[inline(always)]
    fn reached_to<'a>(
        &'a self,
        q: Option<&Queue>,
        reached: Reached<'a>,
        rank: Rank,
        table: Table,
    ) -> Result<Option<Loan<'a, PeerSegment>>> {
        if q.is_some_and(|q| q.fabric_to(rank)) {
            return Ok(None);
        }
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        match reached.segment(Slot::of_table(table)) {
            None => Err(Error::UnknownSegment {
                rank,
                segment: table.id(),
            }),
            Some(segment) => Ok(Some(segment)),
        }
    }

    /// The mapped memory's segment behind `table` of `rank` when a transfer (or an atomic) on
    /// `q` towards it goes directly; `None` sends it through the fabric (not reached directly,
    /// or bound memory no other process can map).
    #[inline(always)]
    pub(crate) fn mapped(
        &self,
        q: Option<&Queue>,
        rank: Rank,
        table: Table,
    ) -> Result<Option<Loan<'_, PeerSegment>>> {
        Ok(self
            .direct_to(q, rank, table)?
            .filter(|peer| peer.memory.is_some()))
    }

    /// Copies `size` bytes between this rank's user segment at `local` and `remote_offset` of
    /// `rank`'s mapped segment `peer` (of user segment `segment`): a read when `read`, which
    /// then sets `then` locally. The local segment is lent under `peer`'s pin.
    #[allow(clippy::too_many_arguments)]
    fn transfer_directly(
        &self,
        local: Local,
        rank: Rank,
        peer: &Loan<'_, PeerSegment>,
        segment: SegmentId,
        remote_offset: u64,
        size: u64,
        read: bool,
        then: Option<(NotificationId, u32)>,
    ) -> Result<()> {
        let table = Table::User(segment);
        let mine = self
            .segments
            .under(Table::User(local.segment), peer)
            .ok_or_else(|| Error::UnknownSegment {
                rank: self.rank,
                segment: local.segment,
            })?;
        if read {
            let (o, s) = (local.offset, remote_offset);
            self.direct_read(mine, o, rank, peer, table, s, size, then)
        } else {
            self.direct_write(mine, local.offset, rank, peer, table, remote_offset, size)
        }
    }

    /// Writes `size` bytes from `local` to `remote` directly, then sets `n` (directly too, or
    /// through the fabric when the peer's table is not mapped: behind the data either way).
    /// `Ok(false)`: the data cannot go directly, use the fabric.
    // Inline, a write to a rank not reached directly (every rank in fabric mode) learns so
    // with a bounds check and a load; called, that cost a write_notify some 20 instructions.
    #[inline]
    pub(crate) fn write_directly(
        &self,
        q: &Queue,
        local: Local,
        remote: Remote,
        size: u64,
        n: Option<WireNotification>,
    ) -> Result<bool> {
        let Some(reached) = self.direct.peer(remote.rank) else {
            return Ok(false);
        };
        self.write_reached(q, reached, n, local, remote, size)
    }

    /// [`write_directly`](Self::write_directly) towards a rank reached directly, as `reached`
    /// (looked up once for the whole write).
    #[inline(never)]
    fn write_reached(
        &self,
        q: &Queue,
        reached: Reached<'_>,
        n: Option<WireNotification>,
        local: Local,
        remote: Remote,
        size: u64,
    ) -> Result<bool> {
        let table = Table::User(remote.segment);
        let peer = self.reached_to(Some(q), reached, remote.rank, table)?;
        let Some(peer) = peer.filter(|peer| peer.memory.is_some()) else {
            return Ok(false);
        };
        let (rank, segment, offset) = (remote.rank, remote.segment, remote.offset);
        self.transfer_directly(local, rank, &peer, segment, offset, size, false, None)?;
        self.notify_behind(q, rank, &peer, table, n)?;
        Ok(true)
    }

    /// Reads `size` bytes from `remote` into `local` directly, then sets `then` in `local`'s
    /// table. `Ok(false)`: use the fabric.
    pub(crate) fn read_directly(
        &self,
        q: &Queue,
        local: Local,
        remote: Remote,
        size: u64,
        then: Option<(NotificationId, u32)>,
    ) -> Result<bool> {
        let table = Table::User(remote.segment);
        let Some(peer) = self.mapped(Some(q), remote.rank, table)? else {
            return Ok(false);
        };
        let (rank, segment, offset) = (remote.rank, remote.segment, remote.offset);
        self.transfer_directly(local, rank, &peer, segment, offset, size, true, then)?;
        Ok(true)
    }

    /// Copies `data` (ordinary memory of this process) to `offset` of the segment behind
    /// `table` of `rank`, then sets `n`, all directly. `Ok(false)` when it cannot go directly
    /// (nothing was done then): the rank is not reached directly, `q` sends to it through the
    /// fabric, or the segment is bound memory no other process maps. With an `incarnation`
    /// (a library segment's target, see `Target::incarnation`), into that segment only:
    /// [`Error::UnknownSegment`] once another has its id, checked on the mapping written.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn store_directly(
        &self,
        q: &Queue,
        rank: Rank,
        table: Table,
        offset: u64,
        data: &[u8],
        n: Option<WireNotification>,
        incarnation: Option<u32>,
    ) -> Result<bool> {
        let Some(peer) = self.mapped(Some(q), rank, table)? else {
            return Ok(false);
        };
        if incarnation.is_some_and(|i| i != peer.descriptor.incarnation) {
            return Err(Error::UnknownSegment {
                rank,
                segment: table.id(),
            });
        }
        let size = data.len() as u64;
        let memory = peer_memory(rank, &peer, table, offset, size)?;
        if size > 0 {
            memory.write(offset, data).map_err(|_| Error::OutOfBounds {
                rank,
                segment: table.id(),
                offset,
                size,
                segment_size: peer.descriptor.size,
            })?;
        }
        self.notify_behind(q, rank, &peer, table, n)?;
        Ok(true)
    }

    /// Sets `n` (if any) after data written directly into `peer`, the segment behind `table`
    /// of `rank`: in `peer`'s own table when `n` goes there (found with the data, no second
    /// lookup), else as [`notify_after_direct`](Self::notify_after_direct) does.
    #[inline(always)]
    pub(crate) fn notify_behind(
        &self,
        q: &Queue,
        rank: Rank,
        peer: &PeerSegment,
        table: Table,
        n: Option<WireNotification>,
    ) -> Result<()> {
        match n {
            Some(n) if n.table == table && peer.table.is_some() => {
                self.direct_notify(rank, peer, n)
            }
            Some(n) => self.notify_after_direct(q, rank, n),
            None => Ok(()),
        }
    }

    /// The mapped table of another segment of `rank` than the one a direct write goes into,
    /// for the write's notification `n`: lent before the data moves, so that a refusal leaves
    /// the data unwritten, and set through after it with
    /// [`notify_other_table`](Self::notify_other_table). With an `incarnation` (a library
    /// segment's target, see `Target::incarnation`), that segment only:
    /// [`Error::UnknownSegment`] once another has `n`'s table id, checked on this mapping.
    /// `None`: the table is not mapped, and `n` goes through the fabric.
    pub(crate) fn other_table(
        &self,
        q: &Queue,
        rank: Rank,
        n: WireNotification,
        incarnation: Option<u32>,
    ) -> Result<Option<Loan<'_, PeerSegment>>> {
        let Some(peer) = self.direct_to(Some(q), rank, n.table)? else {
            return Ok(None);
        };
        if incarnation.is_some_and(|i| i != peer.descriptor.incarnation) {
            return Err(Error::UnknownSegment {
                rank,
                segment: n.table.id(),
            });
        }
        Ok(peer.table.is_some().then_some(peer))
    }

    /// Sets `n` after data that went directly, in `table` found by
    /// [`other_table`](Self::other_table), or through the fabric without it.
    pub(crate) fn notify_other_table(
        &self,
        q: &Queue,
        rank: Rank,
        table: Option<Loan<'_, PeerSegment>>,
        n: WireNotification,
        incarnation: Option<u32>,
    ) -> Result<()> {
        if let Some(peer) = table {
            return self.direct_notify(rank, &peer, n);
        }
        let check = self.dest_of(rank, n.table.segment_key()?, incarnation, 0, 0)?;
        self.notify_on(q, rank, check, n)
    }

    /// Sets `n` in `rank`'s table directly; `Ok(false)`: use the fabric.
    pub(crate) fn notify_directly(
        &self,
        q: Option<&Queue>,
        rank: Rank,
        n: WireNotification,
    ) -> Result<bool> {
        self.notify_directly_to(q, rank, n, None)
    }

    /// [`notify_directly`](Self::notify_directly), with an `incarnation` (a library segment's
    /// target, see `Target::incarnation`) into that segment only: [`Error::UnknownSegment`]
    /// once another segment has its id. Checked on the mapping the notification goes
    /// through, so it costs no look of its own.
    pub(crate) fn notify_directly_to(
        &self,
        q: Option<&Queue>,
        rank: Rank,
        n: WireNotification,
        incarnation: Option<u32>,
    ) -> Result<bool> {
        if n.table == Table::System && q.is_none() && self.direct.reaches(rank) {
            if let Some(dead) = self.health.known(rank) {
                return Err(dead);
            }
            if let Some(peer) = self.direct.system(rank).filter(|p| p.table.is_some()) {
                self.direct_notify(rank, peer, n)?;
                return Ok(true);
            }
        }
        let Some(peer) = self.direct_to(q, rank, n.table)? else {
            return Ok(false);
        };
        if incarnation.is_some_and(|i| i != peer.descriptor.incarnation) {
            return Err(Error::UnknownSegment {
                rank,
                segment: n.table.id(),
            });
        }
        if peer.table.is_none() {
            return Ok(false);
        }
        self.direct_notify(rank, &peer, n)?;
        Ok(true)
    }

    /// Sets `n` after data that went directly: directly when it can, else through the fabric
    /// (posted now, after the data is in place).
    pub(crate) fn notify_after_direct(
        &self,
        q: &Queue,
        rank: Rank,
        n: WireNotification,
    ) -> Result<()> {
        if self.notify_directly(Some(q), rank, n)? {
            return Ok(());
        }
        let check = self.dest(rank, n.table.segment_key()?, 0, 0)?;
        self.notify_on(q, rank, check, n)
    }

    /// Copies `data` to `offset` of the runtime memory `rank` published under `key` (an
    /// allreduce area), then sets `n` in its table, all directly. `Ok(false)` when any part
    /// cannot go directly (nothing was done then): the fabric path also reports what is wrong.
    pub(crate) fn put_directly(
        &self,
        rank: Rank,
        key: DescKey,
        offset: u64,
        data: &[u8],
        n: WireNotification,
    ) -> Result<bool> {
        let Some(Some(table)) = self.direct.segment(rank, Slot::of_table(n.table)) else {
            return Ok(false);
        };
        let Some(Some(area)) = self.direct.segment(rank, Slot::Desc(key)) else {
            return Ok(false);
        };
        let Some(memory) = area.memory.as_ref() else {
            return Ok(false);
        };
        if table.table.is_none() || memory.check_range(offset, data.len() as u64).is_err() {
            return Ok(false);
        }
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        memory.write(offset, data).map_err(|_| Error::OutOfBounds {
            rank,
            segment: 0,
            offset,
            size: data.len() as u64,
            segment_size: area.descriptor.size,
        })?;
        self.direct_notify(rank, &table, n)?;
        Ok(true)
    }

    /// Runs a list of transfers towards `rank` directly, then sets `notify`; `Ok(false)` when
    /// any of them cannot go directly (nothing was done then).
    pub(crate) fn list_directly(
        &self,
        q: &Queue,
        entries: &[ListEntry],
        rank: Rank,
        read: bool,
        notify: Option<WireNotification>,
    ) -> Result<bool> {
        let mut peers = Vec::with_capacity(entries.len());
        for e in entries {
            match self.mapped(Some(q), rank, Table::User(e.remote_segment))? {
                Some(peer) => peers.push(peer),
                None => return Ok(false),
            }
        }
        for (e, peer) in entries.iter().zip(&peers) {
            let (segment, offset) = (e.remote_segment, e.remote_offset);
            self.transfer_directly(e.local, rank, peer, segment, offset, e.size, read, None)?;
        }
        if let Some(n) = notify {
            self.notify_after_direct(q, rank, n)?;
        }
        Ok(true)
    }

    /// Records, on `q`, an operation towards `rank` that takes the fabric although the rank is
    /// reached directly, so that later ones on `q` follow it there.
    pub(crate) fn fabric_taken(&self, q: &Queue, rank: Rank) {
        if self.direct.reaches(rank) {
            q.took_fabric(rank);
        }
    }

    /// Copies `size` bytes from `src` at `src_offset` to `dst_offset` of `rank`'s mapped
    /// segment `peer` (of `table`).
    #[allow(clippy::too_many_arguments)]
    #[inline(always)]
    pub(crate) fn direct_write(
        &self,
        src: &LocalSegment,
        src_offset: u64,
        rank: Rank,
        peer: &PeerSegment,
        table: Table,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        // The copy checks both ranges itself: checked before it as well, an 8 B direct
        // write_notify took 531 instructions instead of 440 (callgrind). Which range is wrong
        // is worked out only when the copy refuses, or for an empty write, which copies
        // nothing but is checked all the same.
        // This rank's own segment mapped again as a peer's is the same file: `try_copy_to` copies
        // overlapping ranges within one mapping then.
        if let (Some(source), Some(memory)) = (&src.region, &peer.memory) {
            if size > 0
                && source
                    .memory()
                    .try_copy_to(src_offset, memory, dst_offset, size)
            {
                return Ok(());
            }
        }
        self.write_refused((src, src_offset), (rank, peer, table, dst_offset), size)
    }

    /// The outcome of a [`direct_write`](Self::direct_write) that copied nothing: the error
    /// for the range that is out of bounds, the source's first, else `Ok` (an empty write).
    // Out of line: inline, its checks cost the write's fast path 46 instructions of spills.
    #[cold]
    #[inline(never)]
    fn write_refused(
        &self,
        (src, src_offset): (&LocalSegment, u64),
        (rank, peer, table, dst_offset): (Rank, &PeerSegment, Table, u64),
        size: u64,
    ) -> Result<()> {
        src.check(self.rank, src_offset, size)?;
        peer_memory(rank, peer, table, dst_offset, size)?;
        if size > 0 {
            // Not reached (a region is as long as its memory), and reported as the copy's
            // refusal always was.
            return Err(src_out_of_bounds(self.rank, src, src_offset, size));
        }
        Ok(())
    }

    /// Copies `size` bytes from `src_offset` of `rank`'s mapped segment `peer` into `dst` at
    /// `dst_offset`, then sets `then` in `dst`'s table.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn direct_read(
        &self,
        dst: &LocalSegment,
        dst_offset: u64,
        rank: Rank,
        peer: &PeerSegment,
        table: Table,
        src_offset: u64,
        size: u64,
        then: Option<(NotificationId, u32)>,
    ) -> Result<()> {
        dst.check(self.rank, dst_offset, size)?;
        let memory = peer_memory(rank, peer, table, src_offset, size)?;
        if size > 0 {
            let target = dst
                .region
                .as_ref()
                .ok_or_else(|| src_out_of_bounds(self.rank, dst, dst_offset, size))?;
            memory
                .copy_to(src_offset, target.memory(), dst_offset, size)
                .map_err(|_| src_out_of_bounds(self.rank, dst, dst_offset, size))?;
        }
        if let Some((id, value)) = then {
            dst.notifications
                .set(id, value)
                .map_err(|_| Error::InvalidNotification {
                    rank: self.rank,
                    segment: dst.id(),
                    id: id.into(),
                    count: dst.notifications.len(),
                })?;
        }
        Ok(())
    }

    /// Sets `n` in the table of `rank`'s mapped segment `peer` (whose table the caller checked).
    #[inline(always)]
    pub(crate) fn direct_notify(
        &self,
        rank: Rank,
        peer: &PeerSegment,
        n: WireNotification,
    ) -> Result<()> {
        let Some(table) = peer.table.as_ref() else {
            return Err(table_not_mapped(rank, n));
        };
        table
            .set(n.id, n.value)
            .map_err(|_| invalid_notification(rank, table, n))
    }
}

#[cold]
fn table_not_mapped(rank: Rank, n: WireNotification) -> Error {
    Error::Protocol(format!("rank {rank}'s table {:?} is not mapped", n.table))
}

#[cold]
fn invalid_notification(rank: Rank, table: &NotificationTable, n: WireNotification) -> Error {
    Error::InvalidNotification {
        rank,
        segment: n.table.id(),
        id: n.id.into(),
        count: table.len(),
    }
}

/// `peer`'s memory, with `offset..offset + size` checked against it.
#[inline(always)]
fn peer_memory(
    rank: Rank,
    peer: &PeerSegment,
    table: Table,
    offset: u64,
    size: u64,
) -> Result<&gaspi_segments::SegmentMemory> {
    match &peer.memory {
        Some(memory) if memory.check_range(offset, size).is_ok() => Ok(memory),
        _ => Err(peer_out_of_bounds(rank, peer, table, offset, size)),
    }
}

#[cold]
fn peer_out_of_bounds(
    rank: Rank,
    peer: &PeerSegment,
    table: Table,
    offset: u64,
    size: u64,
) -> Error {
    Error::OutOfBounds {
        rank,
        segment: table.id(),
        offset,
        size,
        segment_size: peer.descriptor.size,
    }
}

#[cold]
fn src_out_of_bounds(me: Rank, seg: &LocalSegment, offset: u64, size: u64) -> Error {
    Error::OutOfBounds {
        rank: me,
        segment: seg.id(),
        offset,
        size,
        segment_size: seg.len(),
    }
}
