//! Stamps in the blocks of the benchmarks with MPI: a block names its round, sender and
//! receiver in its first and last 8 bytes, so that a block of another round or rank, or one
//! that landed only in part, shows. `bench/mpi/bench.h` stamps the same way.

use gaspi::{Context, Rank, SegmentId};

use crate::{Error, Result};

/// What a block carries.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stamp {
    pub round: u64,
    pub sender: Rank,
    pub receiver: Rank,
}

impl Stamp {
    /// Ranks below 2^16 keep the fields apart, far beyond the jobs of one host these
    /// benchmarks run.
    fn value(self) -> [u8; 8] {
        let (sender, receiver) = (self.sender & 0xffff, self.receiver & 0xffff);
        ((self.round << 32) | (u64::from(sender) << 16) | u64::from(receiver)).to_le_bytes()
    }

    /// Offsets of the first and last 8 bytes of a block of `bytes` at `offset` (the same for
    /// a block of 8).
    fn offsets(offset: u64, bytes: usize) -> [u64; 2] {
        [offset, offset + bytes as u64 - 8]
    }

    /// Writes the stamp into the block of `bytes` (8 or more) at `offset` of `segment`.
    pub(crate) fn put(
        self,
        ctx: &Context,
        segment: SegmentId,
        offset: u64,
        bytes: usize,
    ) -> Result<()> {
        for at in Stamp::offsets(offset, bytes) {
            ctx.segment_write(segment, at, &self.value())?;
        }
        Ok(())
    }

    /// [`Error::Check`], naming `bench`, when the block of `bytes` at `offset` of `segment`
    /// does not carry the stamp.
    pub(crate) fn check(
        self,
        ctx: &Context,
        segment: SegmentId,
        offset: u64,
        bytes: usize,
        bench: &str,
    ) -> Result<()> {
        let want = self.value();
        let mut got = [0u8; 8];
        for at in Stamp::offsets(offset, bytes) {
            ctx.segment_read(segment, at, &mut got)?;
            if got != want {
                return Err(Error::Check(format!(
                    "{bench} round {}: rank {} found stamp {:#x} at offset {at} of the block from rank {}, not {:#x}",
                    self.round,
                    self.receiver,
                    u64::from_le_bytes(got),
                    self.sender,
                    u64::from_le_bytes(want)
                )));
            }
        }
        Ok(())
    }
}
