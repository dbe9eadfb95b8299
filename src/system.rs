//! The system region: the small registered block every rank publishes at bootstrap, through
//! which peers find everything else.
//!
//! It holds a scratch area that notification-only writes land in, the tables of descriptors
//! (where this rank's user segments, library segments and allreduce areas are), and pools of
//! slots for this rank's own operations that need registered memory of their own: the landing
//! slots of descriptor lookups and pings, and the words of atomics in flight. A slot is taken
//! for one operation and given back when it completes; one whose peer died is never given back
//! (a peer on shm may never complete it), which costs a slot, never a use of memory that is
//! still in flight.

use std::sync::Arc;

use gaspi_fabric::{Region, RemoteTarget, Slice};

use crate::error::{Error, Rank, Result};
use crate::sync::{lock, Mutex};

/// Bytes of one descriptor: base, key, size, and a presence word.
pub(crate) const DESCRIPTOR_LEN: u64 = 32;
/// Ids of each descriptor table.
pub(crate) const TABLE_IDS: u64 = 256;
/// Bytes each notification-only write puts into the target's scratch area.
pub(crate) const SCRATCH_LEN: u64 = 8;
/// Landing slots: descriptor lookups and pings in flight at once.
pub(crate) const LANDING_SLOTS: u16 = 64;
/// Atomic slots: atomics in flight at once.
pub(crate) const ATOMIC_SLOTS: u16 = 64;
/// Bytes of an atomic slot: operand, compare, result (old value), status.
pub(crate) const ATOMIC_LEN: u64 = 32;

/// Offsets in the system region.
pub(crate) mod layout {
    use super::*;

    pub(crate) const SCRATCH: u64 = 0;
    pub(crate) const SEGMENTS: u64 = 64;
    pub(crate) const LIBRARY: u64 = SEGMENTS + DESCRIPTOR_LEN * TABLE_IDS;
    pub(crate) const AREAS: u64 = LIBRARY + DESCRIPTOR_LEN * TABLE_IDS;
    pub(crate) const LANDING: u64 = AREAS + DESCRIPTOR_LEN * TABLE_IDS;
    pub(crate) const ATOMICS: u64 = LANDING + DESCRIPTOR_LEN * LANDING_SLOTS as u64;
    pub(crate) const SIZE: u64 = ATOMICS + ATOMIC_LEN * ATOMIC_SLOTS as u64;

    // The scratch area must not overlap the descriptors.
    const _: () = assert!(SCRATCH + SCRATCH_LEN <= SEGMENTS);
}

/// Where a peer's system region is, as published at bootstrap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SystemAddress {
    pub(crate) base: u64,
    pub(crate) key: u64,
}

/// A pool of numbered slots.
#[derive(Debug)]
pub(crate) struct Slots {
    free: Mutex<Vec<u16>>,
}

impl Slots {
    pub(crate) fn new(count: u16) -> Self {
        Slots {
            free: Mutex::new((0..count).rev().collect()),
        }
    }

    /// A free slot, if any.
    pub(crate) fn take(&self) -> Option<u16> {
        lock(&self.free).pop()
    }

    /// Gives `slot` back.
    pub(crate) fn give(&self, slot: u16) {
        lock(&self.free).push(slot);
    }
}

/// This rank's system region and its slot pools.
#[derive(Debug)]
pub(crate) struct System {
    pub(crate) region: Arc<Region>,
    pub(crate) landing: Slots,
    pub(crate) atomics: Slots,
    /// Every rank's system region, indexed by rank.
    peers: Vec<SystemAddress>,
}

impl System {
    /// This rank's `region` and the addresses of every rank's.
    pub(crate) fn new(region: Arc<Region>, peers: Vec<SystemAddress>) -> Self {
        System {
            region,
            landing: Slots::new(LANDING_SLOTS),
            atomics: Slots::new(ATOMIC_SLOTS),
            peers,
        }
    }

    /// Where `offset` of `rank`'s system region is; `rank` must be valid.
    pub(crate) fn target(&self, rank: Rank, offset: u64) -> RemoteTarget {
        let peer = self.peers[rank as usize];
        RemoteTarget {
            rank,
            addr: peer.base + offset,
            key: peer.key,
        }
    }

    /// Landing slot `slot`, for a read of `len` bytes.
    pub(crate) fn landing(&self, slot: u16, len: u64) -> Result<Slice<'_>> {
        Ok(self
            .region
            .slice(layout::LANDING + DESCRIPTOR_LEN * u64::from(slot), len)?)
    }

    /// Offset of atomic slot `slot`.
    pub(crate) fn atomic_offset(slot: u16) -> u64 {
        layout::ATOMICS + ATOMIC_LEN * u64::from(slot)
    }

    /// Reads the 64-bit word at `offset`.
    pub(crate) fn read_word(&self, offset: u64) -> Result<u64> {
        self.region.memory().read_u64(offset).map_err(system_error)
    }

    /// Writes the 64-bit word at `offset`.
    pub(crate) fn write_word(&self, offset: u64, value: u64) -> Result<()> {
        self.region
            .memory()
            .write_u64(offset, value)
            .map_err(system_error)
    }

    /// The four words at `offset`.
    pub(crate) fn read_words(&self, offset: u64) -> Result<[u64; 4]> {
        let mut words = [0u64; 4];
        for (i, w) in words.iter_mut().enumerate() {
            *w = self.read_word(offset + 8 * i as u64)?;
        }
        Ok(words)
    }

    /// Writes four words at `offset`.
    pub(crate) fn write_words(&self, offset: u64, words: [u64; 4]) -> Result<()> {
        for (i, w) in words.iter().enumerate() {
            self.write_word(offset + 8 * i as u64, *w)?;
        }
        Ok(())
    }
}

/// The system region's layout constants keep every access in bounds and aligned; a failure
/// here is a bug of the runtime, reported rather than panicked on.
fn system_error(e: gaspi_segments::Error) -> Error {
    Error::Protocol(format!("system region access failed: {e}"))
}
