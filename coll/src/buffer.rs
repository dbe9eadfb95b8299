//! The caller's buffers of a team collective: ordinary memory, or a range of one of the
//! user's segments (GASNet's `SRC_IN_SEGMENT` / `DST_IN_SEGMENT`).
//!
//! A collective reads an [`Input`] and writes an [`Output`]. Slices, vectors and arrays of
//! bytes convert into them, so ordinary memory is passed as before; a [`SegmentRange`]
//! names bytes of a segment of this rank, which must then be asserted with
//! [`Flags::SRC_IN_SEGMENT`](crate::Flags::SRC_IN_SEGMENT) /
//! [`Flags::DST_IN_SEGMENT`](crate::Flags::DST_IN_SEGMENT), and is checked (the segment
//! exists, the range lies in it) before anything moves.
//!
//! Either way the team stages what it moves in its own segment: a segment range is read
//! and written through the runtime's segment calls, never borrowed, so it is the caller's
//! part to leave it alone while the collective is in flight (GASNet's rule for every
//! buffer; for memory, the handle's borrow enforces it).
//!
//! A source range and a destination range of one segment may overlap, where the spec
//! leaves the outcome undefined but for identical blocks (in-place forms): the run then
//! copies the whole source range before its first step that moves data (after the `IN_`
//! sync, which under `IN_ALLSYNC` may still see other members write the source) and reads
//! the copy from then on, so the outcome is that of separate buffers, whatever order the
//! schedule writes the destination in.

use gaspi::{Context, SegmentId};

use crate::error::Result;

/// `len` bytes of this rank's segment `segment` from `offset`: a collective's [`Input`] or
/// [`Output`] in one of the user's segments, asserted with
/// [`Flags::SRC_IN_SEGMENT`](crate::Flags::SRC_IN_SEGMENT) /
/// [`Flags::DST_IN_SEGMENT`](crate::Flags::DST_IN_SEGMENT) and checked (the segment exists,
/// the range lies in it) before anything moves. The team stages what it moves either way;
/// a range is read and written through the runtime's segment calls, never borrowed, so the
/// caller leaves it alone while the collective is in flight (GASNet's rule for every
/// buffer; for memory, the handle's borrow enforces it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct SegmentRange {
    /// The user's segment.
    pub segment: SegmentId,
    /// The first byte.
    pub offset: u64,
    /// The number of bytes.
    pub len: u64,
}

impl SegmentRange {
    /// `len` bytes of `segment` from `offset`.
    pub fn new(segment: SegmentId, offset: u64, len: u64) -> SegmentRange {
        SegmentRange {
            segment,
            offset,
            len,
        }
    }

    /// Whether the two ranges share a byte.
    pub(crate) fn overlaps(&self, other: &SegmentRange) -> bool {
        let end = |r: &SegmentRange| r.offset.saturating_add(r.len);
        self.segment == other.segment
            && self.len > 0
            && other.len > 0
            && self.offset < end(other)
            && other.offset < end(self)
    }

    /// Checks that the segment exists here and holds the range.
    fn check(&self, ctx: &Context) -> Result<()> {
        let size = ctx.segment_size(self.segment)?;
        crate::check_range(ctx.rank(), self.segment, size, self.offset, self.len)
    }
}

/// What a collective reads: ordinary memory (slices, vectors and arrays of bytes convert
/// into it) or a [`SegmentRange`].
#[derive(Debug, Clone, Copy)]
pub enum Input<'b> {
    /// Ordinary memory.
    Memory(&'b [u8]),
    /// A range of a segment.
    Segment(SegmentRange),
}

/// What a collective writes: ordinary memory (slices, vectors and arrays of bytes convert
/// into it) or a [`SegmentRange`].
#[derive(Debug)]
pub enum Output<'b> {
    /// Ordinary memory.
    Memory(&'b mut [u8]),
    /// A range of a segment.
    Segment(SegmentRange),
}

impl Input<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Input::Memory(m) => m.len(),
            // A range of a segment that exists is addressable (checked before use).
            Input::Segment(r) => usize::try_from(r.len).unwrap_or(usize::MAX),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub(crate) fn check(&self, ctx: &Context) -> Result<()> {
        match self {
            Input::Memory(_) => Ok(()),
            Input::Segment(r) => r.check(ctx),
        }
    }

    /// `len` bytes from `at`, read into `into` (`into.len()` bytes).
    pub(crate) fn read(&self, ctx: &Context, at: u64, into: &mut [u8]) -> gaspi::Result<()> {
        match self {
            Input::Memory(m) => {
                // The engine checked the range against `len()`.
                let at = at as usize;
                gaspi::copy_bytes(into, &m[at..at + into.len()]);
                Ok(())
            }
            Input::Segment(r) => ctx.segment_read(r.segment, r.offset + at, into),
        }
    }

    /// The whole input, copied.
    pub(crate) fn copied(self, ctx: &Context) -> gaspi::Result<Vec<u8>> {
        let mut all = vec![0; self.len()];
        self.read(ctx, 0, &mut all)?;
        Ok(all)
    }
}

impl Output<'_> {
    /// Its length in bytes.
    pub fn len(&self) -> usize {
        match self {
            Output::Memory(m) => m.len(),
            Output::Segment(r) => usize::try_from(r.len).unwrap_or(usize::MAX),
        }
    }

    /// Whether it holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The same output, borrowed for a shorter while.
    pub(crate) fn reborrow(&mut self) -> Output<'_> {
        match self {
            Output::Memory(m) => Output::Memory(m),
            Output::Segment(r) => Output::Segment(*r),
        }
    }

    pub(crate) fn check(&self, ctx: &Context) -> Result<()> {
        match self {
            Output::Memory(_) => Ok(()),
            Output::Segment(r) => r.check(ctx),
        }
    }

    /// Writes `data` at `at` (a range the engine checked against `len()`).
    pub(crate) fn write(&mut self, ctx: &Context, at: u64, data: &[u8]) -> gaspi::Result<()> {
        match self {
            Output::Memory(m) => {
                let at = at as usize;
                gaspi::copy_bytes(&mut m[at..at + data.len()], data);
                Ok(())
            }
            Output::Segment(r) => ctx.segment_write(r.segment, r.offset + at, data),
        }
    }

    /// Memory to fill at `at` with `len` bytes directly, when the output is memory.
    pub(crate) fn memory(&mut self, at: u64, len: u64) -> Option<&mut [u8]> {
        match self {
            Output::Memory(m) => Some(&mut m[at as usize..(at + len) as usize]),
            Output::Segment(_) => None,
        }
    }
}

impl<'b> From<&'b [u8]> for Input<'b> {
    fn from(m: &'b [u8]) -> Self {
        Input::Memory(m)
    }
}

impl<'b> From<&'b Vec<u8>> for Input<'b> {
    fn from(m: &'b Vec<u8>) -> Self {
        Input::Memory(m)
    }
}

impl<'b, const N: usize> From<&'b [u8; N]> for Input<'b> {
    fn from(m: &'b [u8; N]) -> Self {
        Input::Memory(m)
    }
}

impl From<SegmentRange> for Input<'_> {
    fn from(r: SegmentRange) -> Self {
        Input::Segment(r)
    }
}

impl<'b> From<&'b mut [u8]> for Output<'b> {
    fn from(m: &'b mut [u8]) -> Self {
        Output::Memory(m)
    }
}

impl<'b> From<&'b mut Vec<u8>> for Output<'b> {
    fn from(m: &'b mut Vec<u8>) -> Self {
        Output::Memory(m)
    }
}

impl<'b, const N: usize> From<&'b mut [u8; N]> for Output<'b> {
    fn from(m: &'b mut [u8; N]) -> Self {
        Output::Memory(m)
    }
}

impl From<SegmentRange> for Output<'_> {
    fn from(r: SegmentRange) -> Self {
        Output::Segment(r)
    }
}
