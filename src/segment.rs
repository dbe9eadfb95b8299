//! The segment registry: this rank's segments and what it knows of other ranks' segments.
//!
//! A local segment is memory (from `gaspi-segments`), its libfabric registration, and its
//! notification table. Other ranks learn about it lazily: every rank publishes a descriptor
//! (address, key, size) per segment id in its *system region*, a small registered block whose
//! address and key were exchanged at bootstrap. The first operation towards `(rank, segment)`
//! reads that descriptor with one RDMA read and caches it, so discovery costs are proportional to
//! the peers a rank actually talks to, never O(ranks × segments) up front.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, RwLock};

use crate::fabric::MemoryRegion;
use gaspi_notifications::NotificationTable;
use gaspi_segments::SegmentMemory;

use crate::error::{Error, Rank, Result, SegmentId};
use crate::wire::WireNotification;

/// Number of segment ids.
pub(crate) const SEGMENT_IDS: usize = 256;

/// Layout of the system region: a scratch area that notification-only writes land in, the
/// descriptor table, and a landing buffer for descriptor reads.
pub(crate) mod layout {
    /// Bytes each notification-only write puts into the target's scratch area.
    pub(crate) const SCRATCH_LEN: u64 = 8;
    pub(crate) const SCRATCH: u64 = 0;
    pub(crate) const DESCRIPTORS: u64 = 64;
    pub(crate) const DESCRIPTOR_LEN: u64 = 32;
    pub(crate) const LANDING: u64 = DESCRIPTORS + DESCRIPTOR_LEN * super::SEGMENT_IDS as u64;
    /// Operand, compare and result words of the remote atomic in flight.
    pub(crate) const ATOMIC: u64 = LANDING + DESCRIPTOR_LEN;
    /// Descriptors of the groups' allreduce areas, one per group id.
    pub(crate) const GROUP_AREAS: u64 = ATOMIC + DESCRIPTOR_LEN;
    pub(crate) const SIZE: usize = (GROUP_AREAS + DESCRIPTOR_LEN * 256) as usize;

    /// Where segment `id`'s descriptor is.
    pub(crate) fn segment_descriptor(id: crate::SegmentId) -> u64 {
        DESCRIPTORS + DESCRIPTOR_LEN * u64::from(id)
    }

    /// Where group `group`'s allreduce area descriptor is.
    pub(crate) fn area_descriptor(group: crate::GroupId) -> u64 {
        GROUP_AREAS + DESCRIPTOR_LEN * u64::from(group)
    }

    // The scratch area must not overlap the descriptors.
    const _: () = assert!(SCRATCH + SCRATCH_LEN <= DESCRIPTORS);
}

/// A segment of this rank.
///
/// Field order is drop order: the registration is closed before the memory is unmapped, so a
/// remote write can never land in freed memory.
pub(crate) struct LocalSegment {
    pub(crate) id: SegmentId,
    pub(crate) mr: MemoryRegion,
    pub(crate) memory: SegmentMemory,
    pub(crate) notifications: NotificationTable,
    /// Local operations posted from or into this segment and not yet completed.
    pub(crate) in_flight: AtomicU32,
    /// The collective creation finished (every rank has the segment).
    pub(crate) synced: AtomicBool,
}

/// What a rank needs to access a remote segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct RemoteSegment {
    /// Added to the offset to form the RMA address (0 when the provider uses offsets).
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) size: u64,
}

impl RemoteSegment {
    /// Encodes as the descriptor published in the system region (`present` last, non-zero).
    pub(crate) fn to_words(self) -> [u64; 4] {
        [self.base, self.key, self.size, 1]
    }

    pub(crate) fn from_words(words: [u64; 4]) -> Option<Self> {
        (words[3] != 0).then_some(RemoteSegment {
            base: words[0],
            key: words[1],
            size: words[2],
        })
    }
}

/// This rank's segments and the cache of remote ones.
pub(crate) struct Segments {
    local: RwLock<Vec<Option<Arc<LocalSegment>>>>,
    remote: RwLock<HashMap<(Rank, SegmentId), RemoteSegment>>,
}

impl Segments {
    pub(crate) fn new() -> Self {
        Segments {
            local: RwLock::new(vec![None; SEGMENT_IDS]),
            remote: RwLock::new(HashMap::new()),
        }
    }

    pub(crate) fn local(&self, rank: Rank, id: SegmentId) -> Result<Arc<LocalSegment>> {
        self.try_local(id)
            .ok_or(Error::UnknownSegment { rank, segment: id })
    }

    /// Runs `f` on segment `id` under the table's read lock, without touching the segment's
    /// reference count: the hot paths (delivering a notification, retiring a completion) use it.
    /// `f` must not block.
    pub(crate) fn with_local<R>(
        &self,
        id: SegmentId,
        f: impl FnOnce(&LocalSegment) -> R,
    ) -> Option<R> {
        let table = self.local.read().unwrap_or_else(|e| e.into_inner());
        table[usize::from(id)].as_deref().map(f)
    }

    pub(crate) fn try_local(&self, id: SegmentId) -> Option<Arc<LocalSegment>> {
        let table = self.local.read().unwrap_or_else(|e| e.into_inner());
        table[usize::from(id)].clone()
    }

    pub(crate) fn insert(&self, rank: Rank, id: SegmentId, seg: LocalSegment) -> Result<()> {
        let mut table = self.local.write().unwrap_or_else(|e| e.into_inner());
        let slot = &mut table[usize::from(id)];
        if slot.is_some() {
            return Err(Error::SegmentExists { rank, segment: id });
        }
        *slot = Some(Arc::new(seg));
        Ok(())
    }

    /// Removes a local segment when nothing is in flight on it.
    pub(crate) fn remove(&self, rank: Rank, id: SegmentId) -> Result<Arc<LocalSegment>> {
        let mut table = self.local.write().unwrap_or_else(|e| e.into_inner());
        let slot = &mut table[usize::from(id)];
        let seg = slot
            .as_ref()
            .ok_or(Error::UnknownSegment { rank, segment: id })?;
        let in_flight = seg.in_flight.load(Ordering::Acquire);
        if in_flight > 0 {
            return Err(Error::SegmentBusy {
                segment: id,
                in_flight,
            });
        }
        slot.take()
            .ok_or(Error::UnknownSegment { rank, segment: id })
    }

    pub(crate) fn ids(&self) -> Vec<SegmentId> {
        let table = self.local.read().unwrap_or_else(|e| e.into_inner());
        table
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .map(|(i, _)| i as SegmentId)
            .collect()
    }

    pub(crate) fn cached_remote(&self, rank: Rank, id: SegmentId) -> Option<RemoteSegment> {
        let cache = self.remote.read().unwrap_or_else(|e| e.into_inner());
        cache.get(&(rank, id)).copied()
    }

    pub(crate) fn cache_remote(&self, rank: Rank, id: SegmentId, seg: RemoteSegment) {
        let mut cache = self.remote.write().unwrap_or_else(|e| e.into_inner());
        cache.insert((rank, id), seg);
    }

    /// Forgets the cached descriptor of `rank`'s segment `id` (it was deleted).
    pub(crate) fn forget_remote_of(&self, rank: Rank, id: SegmentId) {
        let mut cache = self.remote.write().unwrap_or_else(|e| e.into_inner());
        cache.remove(&(rank, id));
    }

    /// Forgets every cached descriptor of segment `id` (it is being created anew).
    pub(crate) fn forget_remote(&self, id: SegmentId) {
        let mut cache = self.remote.write().unwrap_or_else(|e| e.into_inner());
        cache.retain(|&(_, seg), _| seg != id);
    }
}

impl crate::Context {
    /// Creates segment `id` of `size` bytes on every rank (collective: all ranks call it with
    /// the same id), zero-filled, registered and published; returns once every rank has done so,
    /// or [`Error::Timeout`].
    ///
    /// The memory is a shared-memory file, so other ranks on this host could map it directly.
    /// Each rank may pass its own `size`. After a timeout the segment exists locally and calling
    /// again (with the same id) finishes the synchronisation; creating a segment that already
    /// exists is [`Error::SegmentExists`].
    pub fn segment_create(
        &self,
        id: SegmentId,
        size: u64,
        timeout: gaspi_notifications::Timeout,
    ) -> Result<()> {
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

    /// Makes `len` bytes of user memory at `ptr` segment `id` on every rank (collective, like
    /// [`segment_create`](Self::segment_create), with the same timeout semantics).
    ///
    /// # Safety
    /// `ptr..ptr + len` must be valid for reads and writes and stay allocated, unmoved, until
    /// [`segment_delete`](Self::segment_delete) returns for `id` (or the context is dropped).
    /// Remote ranks write into it at any time: never hold a Rust reference into it across a
    /// point where a remote write may land.
    pub unsafe fn segment_bind(
        &self,
        id: SegmentId,
        ptr: *mut u8,
        len: usize,
        timeout: gaspi_notifications::Timeout,
    ) -> Result<()> {
        let me = self.rank();
        self.create_with(id, timeout, || {
            // SAFETY: the caller's contract is exactly bind's.
            unsafe { SegmentMemory::bind(ptr, len) }.map_err(Error::segment(me, id))
        })
    }

    /// Installs the memory `make` returns as segment `id` and synchronises with all ranks,
    /// or continues the synchronisation of an earlier call that timed out.
    fn create_with(
        &self,
        id: SegmentId,
        timeout: gaspi_notifications::Timeout,
        make: impl FnOnce() -> Result<SegmentMemory>,
    ) -> Result<()> {
        let me = self.rank();
        match self.inner.segments.try_local(id) {
            None => self.install(id, make()?)?,
            Some(seg) if seg.synced.load(Ordering::Acquire) => {
                return Err(Error::SegmentExists {
                    rank: me,
                    segment: id,
                })
            }
            // An earlier call timed out in the synchronisation: continue it.
            Some(_) => {}
        }
        self.barrier(timeout)?;
        if let Some(seg) = self.inner.segments.try_local(id) {
            seg.synced.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn install(&self, id: SegmentId, memory: SegmentMemory) -> Result<()> {
        let me = self.rank();
        let inner = &self.inner;
        // SAFETY: the registration is stored next to the memory in LocalSegment, whose field
        // order drops the registration first.
        let mr = unsafe {
            MemoryRegion::register(
                &inner.ep,
                memory.as_ptr(),
                memory.len(),
                crate::context::USER_KEY_BASE + u64::from(id),
            )?
        };
        let descriptor = RemoteSegment {
            base: inner.ep.caps().rma_base(memory.as_ptr()),
            key: mr.key(),
            size: memory.len() as u64,
        };
        inner.segments.insert(
            me,
            id,
            LocalSegment {
                id,
                mr,
                memory,
                notifications: NotificationTable::new(inner.config.notifications),
                in_flight: AtomicU32::new(0),
                synced: AtomicBool::new(false),
            },
        )?;
        // Peers may have cached an earlier segment with this id.
        inner.segments.forget_remote(id);
        self.inner
            .publish(layout::segment_descriptor(id), Some(descriptor))
    }

    /// Deletes this rank's segment `id` (local). Fails with [`Error::SegmentBusy`] while
    /// operations from or into it are in flight on this rank.
    ///
    /// Every other rank is told, so that its next operation on the segment returns
    /// [`Error::UnknownSegment`] instead of reaching a closed registration (which some providers
    /// handle badly: libfabric 1.17's tcp crashes the writer). An operation a peer posts before
    /// the news arrives is still the application's error: synchronise deletes with the peers
    /// that write into the segment.
    pub fn segment_delete(&self, id: SegmentId) -> Result<()> {
        let me = self.rank();
        let seg = self.inner.segments.remove(me, id)?;
        self.inner.publish(layout::segment_descriptor(id), None)?;
        self.inner.segments.forget_remote_of(me, id);
        drop(seg);
        for rank in (0..self.size()).filter(|&r| r != me) {
            // The deletion is done; telling peers is a courtesy that makes their later misuse
            // a clean error. A peer that cannot be reached has no cached descriptor to fix.
            let _ = self.system_notify(rank, WireNotification::segment_gone(me, id));
        }
        Ok(())
    }

    /// Size in bytes of this rank's segment `id`.
    pub fn segment_size(&self, id: SegmentId) -> Result<u64> {
        Ok(self.inner.segments.local(self.rank(), id)?.memory.len() as u64)
    }

    /// Size in bytes of segment `id` on `rank` (looked up once, then cached).
    pub fn segment_size_of(&self, rank: Rank, id: SegmentId) -> Result<u64> {
        Ok(self.remote_segment(rank, id)?.size)
    }

    /// Ids of this rank's segments, ascending.
    pub fn segment_list(&self) -> Vec<SegmentId> {
        self.inner.segments.ids()
    }

    /// Copies `buf.len()` bytes out of segment `id` at `offset`.
    pub fn segment_read(&self, id: SegmentId, offset: u64, buf: &mut [u8]) -> Result<()> {
        let seg = self.inner.segments.local(self.rank(), id)?;
        seg.memory
            .read(offset, buf)
            .map_err(|e| self.access_error(&seg, offset, buf.len() as u64, e))
    }

    /// Copies `data` into segment `id` at `offset`.
    pub fn segment_write(&self, id: SegmentId, offset: u64, data: &[u8]) -> Result<()> {
        let seg = self.inner.segments.local(self.rank(), id)?;
        seg.memory
            .write(offset, data)
            .map_err(|e| self.access_error(&seg, offset, data.len() as u64, e))
    }

    /// Borrows `len` bytes of segment `id` at `offset`.
    ///
    /// # Safety
    /// Nothing may write the range while the slice lives: no remote write or read_notify
    /// targeting it, no local write, and the segment must not be deleted. The usual way to know
    /// this is the notification protocol of the application (the data's notification arrived
    /// and the writer waits for a reply before writing again).
    pub unsafe fn segment_slice(&self, id: SegmentId, offset: u64, len: u64) -> Result<&[u8]> {
        let seg = self.inner.segments.local(self.rank(), id)?;
        // SAFETY: the caller guarantees no writer and that the segment outlives the borrow; the
        // memory itself is owned by the context (or the user's binding), not by the Arc dropped
        // at the end of this function.
        unsafe { seg.memory.slice(offset, len) }
            .map(|s| {
                // SAFETY: see above: the memory outlives the Arc by the caller's contract.
                unsafe { std::slice::from_raw_parts(s.as_ptr(), s.len()) }
            })
            .map_err(|e| self.access_error(&seg, offset, len, e))
    }

    /// Mutably borrows `len` bytes of segment `id` at `offset`.
    ///
    /// # Safety
    /// As [`segment_slice`](Self::segment_slice), and additionally nothing may read the range
    /// (no RMA from it in flight, no remote read, no other borrow).
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn segment_slice_mut(
        &self,
        id: SegmentId,
        offset: u64,
        len: u64,
    ) -> Result<&mut [u8]> {
        let seg = self.inner.segments.local(self.rank(), id)?;
        // SAFETY: the caller guarantees exclusive access and that the segment outlives the
        // borrow (see segment_slice).
        unsafe { seg.memory.slice_mut(offset, len) }
            .map(|s| {
                // SAFETY: as above.
                unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr(), s.len()) }
            })
            .map_err(|e| self.access_error(&seg, offset, len, e))
    }

    fn access_error(
        &self,
        seg: &LocalSegment,
        offset: u64,
        size: u64,
        source: gaspi_segments::Error,
    ) -> Error {
        match source {
            gaspi_segments::Error::OutOfBounds { .. } => Error::OutOfBounds {
                rank: self.rank(),
                segment: seg.id,
                offset,
                size,
                segment_size: seg.memory.len() as u64,
            },
            source => Error::Segment {
                rank: self.rank(),
                segment: seg.id,
                source,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_words_round_trip_and_absent_is_none() {
        let d = RemoteSegment {
            base: 0x7f00_0000_1000,
            key: 42,
            size: 1 << 20,
        };
        assert_eq!(RemoteSegment::from_words(d.to_words()), Some(d));
        assert_eq!(RemoteSegment::from_words([1, 2, 3, 0]), None);
    }
}
