//! Segment memory for gaspi.
//!
//! A *segment* is a block of memory that the runtime registers with libfabric so that remote
//! ranks can read and write it with RDMA while local threads access it too. This crate owns only
//! the memory itself: getting it ([`SegmentMemory::allocate`] or [`SegmentMemory::bind`]),
//! releasing it, and giving bounds-checked access to it. Registration with libfabric, segment
//! ids and notifications belong to the runtime.
//!
//! Allocated segments live in a shared-memory file so that another process on the same host can
//! map the same bytes (see [`SegmentMemory::shm_path`] and [`SegmentMemory::open`]) for a direct
//! intra-node path; [`SharedWords`] holds the atomics such processes share (notification tables,
//! wake-up words), and [`Slots`] the runtime's tables of segments and mappings, which its
//! operations read without locks.
//!
//! Read the aliasing model in the documentation of [`SegmentMemory`] before touching segment
//! memory from more than one place at a time.

#![warn(missing_docs)]

mod access;
mod copy;
mod error;
mod memory;
mod range;
mod shm;
mod slots;
mod stale;
mod words;

pub use copy::copy_bytes;
pub use error::{Error, Result};
pub use memory::SegmentMemory;
pub use shm::{pid_namespace, ShmOwner};
pub use slots::{Loan, Slots};
pub use stale::remove_stale_files;
pub use words::{SharedRun, SharedWords};
