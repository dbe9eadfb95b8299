//! Bounds and alignment arithmetic for segment accesses.
//!
//! Offsets and sizes arrive as `u64` because that is how GASPI and remote ranks express them,
//! and they may be arbitrary (hostile or buggy) values. This module turns them into in-bounds
//! `usize` offsets or errors; it never touches memory, so every function is safe to call on any
//! input.

use crate::error::{Error, Result};

/// Widens a `usize` to `u64`.
pub(crate) fn to_u64(n: usize) -> u64 {
    // Lossless: `usize` is at most 64 bits wide on every target Rust supports.
    n as u64
}

/// Returns `offset` and `size` as `usize`s if `offset..offset + size` lies within `0..len`,
/// else `None` ([`out_of_bounds`] is the error for it).
///
/// An empty range is in bounds anywhere up to and including `len`.
#[inline]
pub(crate) fn in_range(offset: u64, size: u64, len: usize) -> Option<(usize, usize)> {
    let end = offset.checked_add(size)?;
    if end > to_u64(len) {
        return None;
    }
    // Neither conversion can fail, as offset and size are at most end <= len, a usize; checked
    // rather than unwrapped so that this function stays panic-free by construction.
    Some((usize::try_from(offset).ok()?, usize::try_from(size).ok()?))
}

/// The error for `offset..offset + size`, which [`in_range`] found outside `0..len`.
pub(crate) fn out_of_bounds(offset: u64, size: u64, len: usize) -> Error {
    Error::OutOfBounds {
        offset,
        size,
        len: to_u64(len),
    }
}

/// Checks that both `offset` and the address `addr` it designates are multiples of `align`.
///
/// `align` must be a power of two (it always is a type's alignment).
pub(crate) fn check_aligned(offset: u64, addr: usize, align: usize) -> Result<()> {
    let mask = align - 1;
    // The offset is checked as well as the address so that the rule a remote rank sees
    // ("8-aligned offsets") does not depend on where this rank's copy of the segment happens to
    // start.
    if offset & to_u64(mask) != 0 || addr & mask != 0 {
        return Err(Error::Misaligned {
            offset,
            align: to_u64(align),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_inside_are_accepted() {
        assert_eq!(in_range(0, 16, 16), Some((0, 16)));
        assert_eq!(in_range(15, 1, 16), Some((15, 1)));
        assert_eq!(in_range(16, 0, 16), Some((16, 0)));
    }

    #[test]
    fn ranges_outside_are_rejected_with_their_coordinates() {
        for (offset, size) in [(16, 1), (17, 0), (0, 17), (u64::MAX, 2), (1, u64::MAX)] {
            assert_eq!(in_range(offset, size, 16), None, "({offset}, {size})");
            let err = Err::<(), _>(out_of_bounds(offset, size, 16));
            assert!(
                matches!(err, Err(Error::OutOfBounds { offset: o, size: s, len: 16 })
                    if o == offset && s == size),
                "({offset}, {size}) gave {err:?}"
            );
        }
    }

    #[test]
    fn alignment_requires_both_offset_and_address() {
        assert!(check_aligned(8, 0x1008, 8).is_ok());
        assert!(matches!(
            check_aligned(4, 0x1008, 8),
            Err(Error::Misaligned {
                offset: 4,
                align: 8
            })
        ));
        assert!(matches!(
            check_aligned(8, 0x1004, 8),
            Err(Error::Misaligned {
                offset: 8,
                align: 8
            })
        ));
    }
}
