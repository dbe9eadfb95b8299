//! Bounds-checked access to segment memory.
//!
//! Owns every way of reading and writing the bytes of a [`SegmentMemory`] other than the raw
//! [`SegmentMemory::as_ptr`]. Safe methods check the range first and then touch memory only
//! through raw-pointer copies or atomics, as the aliasing model on [`SegmentMemory`] describes;
//! none of them panics, whatever the offset and size.

use std::mem::align_of;
use std::ptr;
use std::slice;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::copy;
use crate::error::Result;
use crate::memory::SegmentMemory;
use crate::range::{check_aligned, to_u64};

/// Size of the words accessed by [`SegmentMemory::read_u64`] and [`SegmentMemory::write_u64`].
const WORD: u64 = 8;

impl SegmentMemory {
    /// Checks that `offset..offset + size` lies within the segment.
    ///
    /// An empty range is in bounds at any offset up to and including [`len`](Self::len).
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range ends past the segment,
    /// including when `offset + size` overflows.
    pub fn check_range(&self, offset: u64, size: u64) -> Result<()> {
        self.range_ptr(offset, size).map(drop)
    }

    /// Copies `buf.len()` bytes starting at `offset` into `buf`.
    ///
    /// Bytes that remote ranks write concurrently may come out as any mix of old and new values.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range is not within the
    /// segment; `buf` is then left unchanged.
    pub fn read(&self, offset: u64, buf: &mut [u8]) -> Result<()> {
        let (src, _) = self.range_ptr(offset, to_u64(buf.len()))?;
        // SAFETY: `src` is valid for reads of `buf.len()` bytes (range checked by `range_ptr`),
        // `buf` is valid for writes of as many, and both are byte-aligned. They cannot overlap:
        // `buf` is an exclusive reference, and a reference into the segment can only come from
        // `slice`/`slice_mut`, whose contracts forbid any other access to that range while the
        // reference lives.
        unsafe { copy::copy_nonoverlapping(src, buf.as_mut_ptr(), buf.len()) };
        Ok(())
    }

    /// Copies `data` into the segment starting at `offset`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range is not within the
    /// segment; nothing is written then.
    pub fn write(&self, offset: u64, data: &[u8]) -> Result<()> {
        let (dst, _) = self.range_ptr(offset, to_u64(data.len()))?;
        // SAFETY: `dst` is valid for writes of `data.len()` bytes (range checked by
        // `range_ptr`), `data` is valid for reads of as many, and both are byte-aligned. They
        // cannot overlap: a reference into the segment can only come from `slice`/`slice_mut`,
        // whose contracts forbid writing that range while the reference lives.
        unsafe { copy::copy_nonoverlapping(data.as_ptr(), dst, data.len()) };
        Ok(())
    }

    /// Sets the `size` bytes starting at `offset` to `byte`.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range is not within the
    /// segment; nothing is written then.
    pub fn fill(&self, offset: u64, size: u64, byte: u8) -> Result<()> {
        let (dst, count) = self.range_ptr(offset, size)?;
        // SAFETY: `dst` is valid for writes of `count` bytes (range checked by `range_ptr`) and
        // byte-aligned; no reference into the range may be alive (see the contracts of `slice`
        // and `slice_mut`).
        unsafe { ptr::write_bytes(dst, byte, count) };
        Ok(())
    }

    /// Copies `size` bytes from `offset` of this segment to `dst_offset` of `dst`: between two
    /// segments without an intermediate buffer (a direct write or read between processes that
    /// map each other's segments). The ranges may overlap, also when the two segments are
    /// mappings of one file (a segment and its file [`open`](Self::open)ed again): the bytes
    /// come out as one `memmove` within one mapping makes them.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if either range is not within its
    /// segment; nothing is copied then.
    #[inline]
    pub fn copy_to(
        &self,
        offset: u64,
        dst: &SegmentMemory,
        dst_offset: u64,
        size: u64,
    ) -> Result<()> {
        if self.try_copy_to(offset, dst, dst_offset, size) {
            return Ok(());
        }
        // Refused: one of the ranges is out of bounds, and its check says which.
        self.check_range(offset, size)?;
        dst.check_range(dst_offset, size)
    }

    /// Copies as [`copy_to`](Self::copy_to) does, and says whether it did: `false` when either
    /// range is not within its segment, and nothing is copied then. For the callers that work
    /// out for themselves which range was wrong (as the runtime's direct write does, in its
    /// own terms): on their fast path no [`Error`](crate::Error) is built, nor dropped (an
    /// out-of-line drop of the `Result` cost an 8 B direct write 15 instructions, callgrind).
    // Inline: a direct write of a few bytes is mostly this call's checks, and called, it cost
    // them a third as much again (callgrind).
    #[inline]
    pub fn try_copy_to(
        &self,
        offset: u64,
        dst: &SegmentMemory,
        dst_offset: u64,
        size: u64,
    ) -> bool {
        let (Some((src, count)), Some((mut to, _))) = (
            self.in_range_ptr(offset, size),
            dst.in_range_ptr(dst_offset, size),
        ) else {
            return false;
        };
        // A small copy loads every byte before it stores any, so whether the two are one file
        // does not matter to it (and the look cost an 8 B copy 27 instructions).
        if count > copy::SMALL && self.maps_same_file(dst) {
            // The same pages at another address: `copy` would take overlapping ranges for
            // apart ones and copy forwards over bytes not read yet (seen: 48 of 8 KiB copied
            // 16 bytes ahead came out wrong). In this mapping an overlap is an overlap (the
            // two are as long, so `to` is in bounds here as it is in `dst`).
            let Some((same, _)) = self.in_range_ptr(dst_offset, size) else {
                return false;
            };
            to = same;
        }
        // SAFETY: both pointers are valid for `count` bytes (ranges checked by `in_range_ptr`)
        // and byte-aligned; `ptr::copy` allows the ranges to overlap. No reference into either
        // range may be alive (see the contracts of `slice` and `slice_mut`).
        unsafe { copy::copy(src, to, count) };
        true
    }

    /// Atomically loads the native-endian `u64` at `offset`, with
    /// [`Acquire`](Ordering::Acquire) ordering.
    ///
    /// The access is atomic so that words targeted by remote atomic operations (counters,
    /// flags) are never observed torn.
    ///
    /// # Errors
    ///
    /// [`Error::Misaligned`](crate::Error::Misaligned) unless `offset` and the address it
    /// designates are multiples of 8 (for allocated segments, which are page-aligned, the
    /// second follows from the first); [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the
    /// word is not within the segment.
    pub fn read_u64(&self, offset: u64) -> Result<u64> {
        Ok(self.atomic_word(offset)?.load(Ordering::Acquire))
    }

    /// Atomically stores `value` as a native-endian `u64` at `offset`, with
    /// [`Release`](Ordering::Release) ordering.
    ///
    /// # Errors
    ///
    /// As for [`read_u64`](Self::read_u64); nothing is written then.
    pub fn write_u64(&self, offset: u64, value: u64) -> Result<()> {
        self.atomic_word(offset)?.store(value, Ordering::Release);
        Ok(())
    }

    /// Atomically adds `value` (wrapping) to the native-endian `u64` at `offset` and returns
    /// the previous value ([`AcqRel`](Ordering::AcqRel)).
    ///
    /// # Errors
    ///
    /// As for [`read_u64`](Self::read_u64); nothing is changed then.
    pub fn fetch_add_u64(&self, offset: u64, value: u64) -> Result<u64> {
        Ok(self.atomic_word(offset)?.fetch_add(value, Ordering::AcqRel))
    }

    /// Atomically replaces the native-endian `u64` at `offset` with `new` if it equals
    /// `compare`, and returns the previous value either way ([`AcqRel`](Ordering::AcqRel)).
    ///
    /// # Errors
    ///
    /// As for [`read_u64`](Self::read_u64); nothing is changed then.
    pub fn compare_swap_u64(&self, offset: u64, compare: u64, new: u64) -> Result<u64> {
        let word = self.atomic_word(offset)?;
        Ok(word
            .compare_exchange(compare, new, Ordering::AcqRel, Ordering::Acquire)
            .unwrap_or_else(|old| old))
    }

    /// Borrows the `len` bytes starting at `offset` as a shared slice, without copying.
    ///
    /// # Safety
    ///
    /// While the returned slice lives, nothing may write any of its bytes: no remote rank
    /// (RDMA write or atomic), no other process mapping the segment, and no local thread
    /// (through [`write`](Self::write), [`fill`](Self::fill), [`write_u64`](Self::write_u64),
    /// [`slice_mut`](Self::slice_mut) or [`as_ptr`](Self::as_ptr)). Typically this holds after
    /// the notification for the range arrived and until the caller lets anyone write it again.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range is not within the segment.
    pub unsafe fn slice(&self, offset: u64, len: u64) -> Result<&[u8]> {
        let (start, len) = self.range_ptr(offset, len)?;
        // SAFETY: `start` is non-null, valid for reads of `len` bytes within one allocation
        // (range checked by `range_ptr`), and `u8` needs no alignment and has no invalid values.
        // The memory stays valid for the borrow of `self`, and the caller guarantees that nobody
        // writes it while the slice lives.
        Ok(unsafe { slice::from_raw_parts(start, len) })
    }

    /// Borrows the `len` bytes starting at `offset` as an exclusive slice, without copying.
    ///
    /// # Safety
    ///
    /// While the returned slice lives, nothing else may read or write any of its bytes: no
    /// remote rank, no other process mapping the segment, and no local thread (including
    /// through other calls of this method or [`slice`](Self::slice) that overlap the range).
    /// Typically this holds after the notification for the range arrived and until the caller
    /// lets anyone access it again.
    ///
    /// # Errors
    ///
    /// [`Error::OutOfBounds`](crate::Error::OutOfBounds) if the range is not within the segment.
    #[allow(clippy::mut_from_ref)] // Exclusivity is the caller's promise, as for `as_ptr`.
    pub unsafe fn slice_mut(&self, offset: u64, len: u64) -> Result<&mut [u8]> {
        let (start, len) = self.range_ptr(offset, len)?;
        // SAFETY: `start` is non-null, valid for reads and writes of `len` bytes within one
        // allocation (range checked by `range_ptr`), and `u8` needs no alignment and has no
        // invalid values. The memory stays valid for the borrow of `self`, and the caller
        // guarantees that nothing else accesses it while the slice lives.
        Ok(unsafe { slice::from_raw_parts_mut(start, len) })
    }

    /// The word at `offset` as an atomic, after checking bounds and alignment.
    fn atomic_word(&self, offset: u64) -> Result<&AtomicU64> {
        let (word, _) = self.range_ptr(offset, WORD)?;
        check_aligned(offset, word as usize, align_of::<AtomicU64>())?;
        // SAFETY: `word` is aligned for `AtomicU64` (checked above), valid for reads and writes
        // of 8 bytes (range checked by `range_ptr`) for the borrow of `self`, which bounds the
        // returned reference. Atomic and non-atomic accesses of this word must not race; that is
        // the caller's part, as stated in the aliasing model on `SegmentMemory`. Remote atomics
        // are performed by the NIC, outside Rust's memory model.
        Ok(unsafe { AtomicU64::from_ptr(word.cast::<u64>()) })
    }
}
