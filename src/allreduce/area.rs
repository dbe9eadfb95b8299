//! The registered area a group's allreduce moves data through.
//!
//! Per bank (runs alternate between two, like the dissemination's notification banks) and per
//! schedule slot, the area holds a receive slot the partner of that step writes into and a send
//! slot this member writes from. Send data is copied into its own slot, so a write still in
//! flight never sees the vector change under it; the slots of a bank are reused two runs
//! later, after this member has drained its writes and (see the dissemination module) every
//! partner is done reading.
//!
//! Each slot holds one chunk (`Config::reduce_chunk` bytes); longer vectors run as several
//! runs. The area is allocated and registered when the group is committed (at init for
//! `GROUP_ALL`) and published (in the system region, and with its file in the direct path's
//! directory) before the commit's first message, so peers can write into it before this
//! member reaches the allreduce; same-host peers copy into it directly.

use std::sync::Arc;

use gaspi_fabric::{Region, Slice};
use gaspi_segments::SegmentMemory;

use super::schedule;
use crate::direct::Published;
use crate::engine::lookup::Descriptor;
use crate::engine::Endpoint;
use crate::error::{Error, Rank, Result};
use crate::group::GroupId;

/// A group's allreduce area.
pub(crate) struct ReduceArea {
    region: Arc<Region>,
    /// Bytes per slot.
    chunk: usize,
    /// Slots per bank.
    slots: u32,
}

impl std::fmt::Debug for ReduceArea {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReduceArea")
            .field("chunk", &self.chunk)
            .field("slots", &self.slots)
            .finish()
    }
}

impl ReduceArea {
    /// The area for a group of `members`, registered under `key`, or `None` if the group
    /// needs none (one member).
    pub(crate) fn new(
        ep: &Endpoint,
        rank: Rank,
        group: GroupId,
        members: u32,
        chunk: usize,
        key: u64,
    ) -> Result<Option<Self>> {
        let slots = schedule::slots(members);
        if slots == 0 {
            return Ok(None);
        }
        let len = 2 * 2 * slots as usize * chunk;
        // Sparse: the area is sized for the longest runs of the largest schedule (32 MiB for 8
        // members at the default chunk), of which a group's allreduces mostly touch little;
        // reserving it would make every committed group cost all of it in memory.
        let memory = SegmentMemory::allocate_sparse(len, &format!("reduce{group}"))
            .map_err(Error::segment(rank, 0))?;
        Ok(Some(ReduceArea {
            region: Region::register(ep, memory, key)?,
            chunk,
            slots,
        }))
    }

    /// What peers need to write into this area: through the fabric, or (its file) directly.
    pub(crate) fn published(&self) -> Published<'_> {
        Published {
            descriptor: Descriptor {
                base: self.region.base(),
                key: self.region.key(),
                size: self.region.len() as u64,
                notifications: 0,
                incarnation: 0,
            },
            data: self.region.memory().shm_path(),
            table: None,
        }
    }

    /// Bytes per slot: the longest a run's message can be.
    pub(crate) fn chunk(&self) -> usize {
        self.chunk
    }

    /// Offset of the receive slot `slot` of `bank`; its send slot follows it.
    pub(crate) fn recv_offset(&self, bank: u32, slot: u32) -> u64 {
        ((bank * self.slots + slot) as u64 * 2) * self.chunk as u64
    }

    fn send_offset(&self, bank: u32, slot: u32) -> u64 {
        self.recv_offset(bank, slot) + self.chunk as u64
    }

    /// Copies `data` into the send slot and returns it, for the write.
    pub(crate) fn stage(&self, rank: Rank, bank: u32, slot: u32, data: &[u8]) -> Result<Slice<'_>> {
        let offset = self.send_offset(bank, slot);
        self.region
            .memory()
            .write(offset, data)
            .map_err(Error::segment(rank, 0))?;
        Ok(self.region.slice(offset, data.len() as u64)?)
    }

    /// Copies what the partner wrote into the receive slot, from byte `at` on, out into `out`.
    pub(crate) fn received(
        &self,
        rank: Rank,
        (bank, slot): (u32, u32),
        at: usize,
        out: &mut [u8],
    ) -> Result<()> {
        self.region
            .memory()
            .read(self.recv_offset(bank, slot) + at as u64, out)
            .map_err(Error::segment(rank, 0))
    }
}
