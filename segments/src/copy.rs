//! Copying bytes at the machine's speed whatever the addresses: every copy of segment memory
//! goes through here, and [`copy_bytes`] offers the same to copies between ordinary buffers.
//!
//! glibc copies blocks from about 2 KiB up to the size of a core's L2 cache with `rep movsb`,
//! which AMD Zen runs 15–20× slower when the destination lies 1 to 31 bytes past the source
//! modulo a 4 KiB page (measured on this project's EPYC machines: 64 KiB in 22 µs instead of
//! 1.4 µs, 256 KiB in 89 µs instead of 12). Such distances are everyday here: a segment starts
//! on a page, and a vector the allocator maps on its own starts 16 bytes into one, so every
//! read of a segment into such a vector met it. At those distances (taken as 1 to 63 bytes, to
//! cover CPUs whose window is wider) a copy in that size range goes in pieces of [`PIECE`]
//! bytes, which glibc copies with vector loads and stores, as fast as at any distance; above
//! the L2 cache glibc leaves `rep movsb` for vector loops that do not mind the distance, and
//! one copy is faster again.

use std::ptr;
use std::sync::OnceLock;

/// Bytes of one piece of a copy at a slow distance: below the smallest size glibc hands to
/// `rep movsb` on any x86 CPU (2 KiB and more).
const PIECE: usize = 2048;

/// Distances (destination minus source, modulo [`PAGE`]) at which `rep movsb` is slow.
const SLOW_DISTANCES: std::ops::Range<usize> = 1..64;

/// The page whose aliasing slows `rep movsb` down.
const PAGE: usize = 4096;

/// The L2 cache size assumed when the system does not say (the smallest of AMD's Zen cores).
const DEFAULT_L2: usize = 512 << 10;

/// Copies `min(dst.len(), src.len())` bytes from the start of `src` to the start of `dst` and
/// returns how many, as fast as the machine copies at any alignment (see the module doc):
/// [`slice::copy_from_slice`] without its slow cases, and without its panic on unequal
/// lengths.
///
/// ```
/// let src = [1u8, 2, 3, 4];
/// let mut dst = [0u8; 3];
/// assert_eq!(gaspi_segments::copy_bytes(&mut dst, &src), 3);
/// assert_eq!(dst, [1, 2, 3]);
/// ```
pub fn copy_bytes(dst: &mut [u8], src: &[u8]) -> usize {
    let count = dst.len().min(src.len());
    // SAFETY: both slices hold at least `count` bytes; `dst` is an exclusive borrow, so the
    // ranges cannot overlap; `u8` needs no alignment.
    unsafe { copy_nonoverlapping(src.as_ptr(), dst.as_mut_ptr(), count) };
    count
}

/// Copies of at most this many bytes load every byte before they store any (see
/// [`copy_small`]).
pub(crate) const SMALL: usize = 16;

/// Copies `count` (at most [`SMALL`]) bytes with at most two loads and two stores, all loads
/// first: the ranges may overlap, also as two mappings of one file. A call to `memmove` for
/// an 8 B direct write cost about 25 instructions, most of them the call and its dispatch on
/// the size (callgrind); the compiler does not inline a copy whose size it does not know.
///
/// # Safety
///
/// `src` valid for reads and `dst` for writes of `count` bytes, `count <= SMALL`.
#[inline(always)]
unsafe fn copy_small(src: *const u8, dst: *mut u8, count: usize) {
    // SAFETY: each access lies within the first `count` bytes of its range (the second of a
    // pair ends at `count`, and starts at or after 0 since `count` is at least the width);
    // unaligned accesses are allowed by `read_unaligned`/`write_unaligned`.
    unsafe {
        if count >= 8 {
            let head = ptr::read_unaligned(src.cast::<u64>());
            let tail = ptr::read_unaligned(src.add(count - 8).cast::<u64>());
            ptr::write_unaligned(dst.cast::<u64>(), head);
            ptr::write_unaligned(dst.add(count - 8).cast::<u64>(), tail);
        } else if count >= 4 {
            let head = ptr::read_unaligned(src.cast::<u32>());
            let tail = ptr::read_unaligned(src.add(count - 4).cast::<u32>());
            ptr::write_unaligned(dst.cast::<u32>(), head);
            ptr::write_unaligned(dst.add(count - 4).cast::<u32>(), tail);
        } else if count > 0 {
            // 1 to 3 bytes: the first, the middle and the last (some of them the same).
            let (first, middle, last) = (*src, *src.add(count / 2), *src.add(count - 1));
            *dst = first;
            *dst.add(count / 2) = middle;
            *dst.add(count - 1) = last;
        }
    }
}

/// [`ptr::copy_nonoverlapping`] without the slow cases of the module doc.
///
/// # Safety
///
/// As for [`ptr::copy_nonoverlapping`]: `src` valid for reads and `dst` for writes of `count`
/// bytes, and the two ranges do not overlap.
// Inline, with the rest out of line: a small copy is then a few instructions in its caller.
#[inline]
pub(crate) unsafe fn copy_nonoverlapping(src: *const u8, dst: *mut u8, count: usize) {
    if count <= SMALL {
        // SAFETY: the caller's contract, and `count <= SMALL`.
        unsafe { copy_small(src, dst, count) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { copy_nonoverlapping_large(src, dst, count) };
}

/// [`copy_nonoverlapping`] of more than [`SMALL`] bytes.
///
/// # Safety
///
/// As for [`copy_nonoverlapping`].
#[inline(never)]
unsafe fn copy_nonoverlapping_large(src: *const u8, dst: *mut u8, count: usize) {
    if !slow(src, dst, count) {
        // SAFETY: the caller's contract is this function's.
        unsafe { ptr::copy_nonoverlapping(src, dst, count) };
        return;
    }
    let mut at = 0;
    while at < count {
        let len = PIECE.min(count - at);
        // SAFETY: `at + len <= count`, so both pieces lie within the caller's ranges, which
        // do not overlap.
        unsafe { ptr::copy_nonoverlapping(src.add(at), dst.add(at), len) };
        at += len;
    }
}

/// [`ptr::copy`] (ranges may overlap) without the slow cases of the module doc.
///
/// # Safety
///
/// As for [`ptr::copy`]: `src` valid for reads and `dst` for writes of `count` bytes.
#[inline]
pub(crate) unsafe fn copy(src: *const u8, dst: *mut u8, count: usize) {
    if count <= SMALL {
        // SAFETY: the caller's contract, and `count <= SMALL`; `copy_small` allows overlap.
        unsafe { copy_small(src, dst, count) };
        return;
    }
    let (s, d) = (src as usize, dst as usize);
    let apart = s.abs_diff(d) >= count;
    if apart {
        // SAFETY: the ranges lie `count` bytes or more apart, so they do not overlap; the
        // rest is the caller's contract.
        unsafe { copy_nonoverlapping_large(src, dst, count) };
    } else {
        // SAFETY: the caller's contract is this function's. Overlapping ranges are left to
        // `memmove`, whose direction matters here, and pieces would not keep it.
        unsafe { ptr::copy(src, dst, count) };
    }
}

/// Whether copying `count` bytes from `src` to `dst` at once would meet slow `rep movsb`.
fn slow(src: *const u8, dst: *const u8, count: usize) -> bool {
    let distance = (dst as usize).wrapping_sub(src as usize) % PAGE;
    count > PIECE && SLOW_DISTANCES.contains(&distance) && count < l2_bytes()
}

/// The size of one core's L2 cache, as Linux tells it (read once), or [`DEFAULT_L2`].
fn l2_bytes() -> usize {
    static L2: OnceLock<usize> = OnceLock::new();
    *L2.get_or_init(|| read_l2().unwrap_or(DEFAULT_L2))
}

fn read_l2() -> Option<usize> {
    let caches = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    caches.flatten().find_map(|cache| {
        let read = |name: &str| std::fs::read_to_string(cache.path().join(name)).ok();
        let level = read("level")?;
        let kind = read("type")?;
        (level.trim() == "2" && kind.trim() != "Instruction")
            .then(|| parse_size(read("size")?.trim()))
            .flatten()
    })
}

/// A cache size as sysfs writes it: `512K`, `1M`, or bytes.
fn parse_size(text: &str) -> Option<usize> {
    let (digits, unit) = match text.as_bytes().last()? {
        b'K' => (&text[..text.len() - 1], 1 << 10),
        b'M' => (&text[..text.len() - 1], 1 << 20),
        _ => (text, 1),
    };
    digits.parse::<usize>().ok()?.checked_mul(unit)
}

#[cfg(test)]
mod tests {
    use super::{copy_bytes, parse_size, slow, PAGE, PIECE};

    #[test]
    fn copies_every_byte_at_every_distance_and_length() {
        let src: Vec<u8> = (0..3 * PAGE + 100).map(|i| (i * 7 + 3) as u8).collect();
        let mut dst = vec![0u8; 4 * PAGE + 200];
        let (distances, lengths): (&[usize], &[usize]) = if cfg!(miri) {
            // A distance and a length for each way through the copy: miri checks every byte a
            // thousand times slower, and the whole grid did not end in 7 minutes.
            (&[0, 16, 4095], &[0, PIECE + 1, 3 * PIECE + 5])
        } else {
            (
                &[0, 1, 16, 63, 64, 100, 4095],
                &[
                    0,
                    1,
                    2,
                    3,
                    4,
                    7,
                    8,
                    9,
                    15,
                    16,
                    17,
                    PIECE - 1,
                    PIECE,
                    PIECE + 1,
                    3 * PIECE + 5,
                    3 * PAGE + 100,
                ],
            )
        };
        for &distance in distances {
            for &len in lengths {
                dst.fill(0);
                let out = &mut dst[distance..distance + len];
                assert_eq!(copy_bytes(out, &src[..len]), len);
                assert_eq!(
                    &dst[distance..distance + len],
                    &src[..len],
                    "{distance} {len}"
                );
                assert!(dst[..distance].iter().all(|&b| b == 0));
                assert!(dst[distance + len..].iter().all(|&b| b == 0));
            }
        }
    }

    #[test]
    fn copies_as_much_as_the_shorter_side_holds() {
        let mut short = [0u8; 2];
        assert_eq!(copy_bytes(&mut short, &[5, 6, 7]), 2);
        assert_eq!(short, [5, 6]);
        let mut long = [9u8; 4];
        assert_eq!(copy_bytes(&mut long, &[1]), 1);
        assert_eq!(long, [1, 9, 9, 9]);
    }

    #[test]
    fn only_mid_sized_copies_a_few_bytes_ahead_go_in_pieces() {
        let base = 1 << 20;
        let at = |offset: usize| (base + offset) as *const u8;
        assert!(slow(at(0), at(16), 64 << 10));
        assert!(slow(at(0), at(PAGE + 1), 64 << 10));
        assert!(!slow(at(16), at(0), 64 << 10));
        assert!(!slow(at(0), at(64), 64 << 10));
        assert!(!slow(at(0), at(16), PIECE));
        assert!(!slow(at(0), at(16), 64 << 20));
    }

    #[test]
    fn reads_cache_sizes_as_sysfs_writes_them() {
        assert_eq!(parse_size("512K"), Some(512 << 10));
        assert_eq!(parse_size("1M"), Some(1 << 20));
        assert_eq!(parse_size("4096"), Some(4096));
        assert_eq!(parse_size("K"), None);
        assert_eq!(parse_size(""), None);
    }
}
