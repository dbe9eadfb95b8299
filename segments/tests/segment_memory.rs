//! Behaviour of `SegmentMemory` as the runtime sees it: allocation, shared-memory files, bound
//! memory and bounds-checked access.

use std::fs::OpenOptions;
use std::path::PathBuf;

use gaspi_segments::{Error, SegmentMemory};
use memmap2::MmapMut;

/// Deterministic bytes that differ between neighbouring offsets and between `seed`s.
fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 8) as u8)
        .collect()
}

/// A segment for tests of access alone: allocated in a shared-memory file, or under miri
/// (which cannot map files) heap memory bound for as long as the segment lives.
struct Memory {
    /// Declared first: dropped before the heap memory it may be bound to.
    segment: SegmentMemory,
    _heap: Vec<u64>,
}

impl std::ops::Deref for Memory {
    type Target = SegmentMemory;

    fn deref(&self) -> &SegmentMemory {
        &self.segment
    }
}

fn memory(len: usize, name: &str) -> Memory {
    if !cfg!(miri) {
        let segment = SegmentMemory::allocate(len, name).expect("allocate");
        return Memory {
            segment,
            _heap: Vec::new(),
        };
    }
    let mut heap = vec![0u64; len.div_ceil(8)];
    // SAFETY: the vector's buffer holds at least `len` bytes, is never resized, and is freed
    // only after the segment (field order); nothing but the segment touches it meanwhile.
    let segment =
        unsafe { SegmentMemory::bind(heap.as_mut_ptr().cast::<u8>(), len) }.expect("bind");
    Memory {
        segment,
        _heap: heap,
    }
}

fn page_size() -> usize {
    // SAFETY: `sysconf` only reads a system constant.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).expect("page size is positive")
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn allocated_segments_round_trip_at_all_sizes() {
    for len in [1, 4 << 10, 1 << 20, 64 << 20] {
        let seg = SegmentMemory::allocate(len, "round-trip").expect("allocate");
        assert_eq!(seg.len(), len);
        assert!(!seg.is_bound());
        assert_eq!(seg.as_ptr() as usize % page_size(), 0, "page-aligned");

        let mut out = vec![0xAA; len];
        seg.read(0, &mut out).expect("read");
        assert!(
            out.iter().all(|&b| b == 0),
            "fresh segment of {len} is zeroed"
        );

        let data = pattern(len, 7);
        seg.write(0, &data).expect("write");
        seg.read(0, &mut out).expect("read back");
        assert!(out == data, "round trip of {len} bytes");
    }
}

#[test]
fn partial_accesses_touch_only_their_range() {
    let seg = memory(4096, "partial");
    seg.write(100, &[1, 2, 3]).expect("write");
    seg.fill(200, 4, 0xEE).expect("fill");
    seg.fill(4096, 0, 0xFF).expect("empty fill at the end");

    let mut all = vec![0; 4096];
    seg.read(0, &mut all).expect("read");
    let mut expected = vec![0; 4096];
    expected[100..103].copy_from_slice(&[1, 2, 3]);
    expected[200..204].fill(0xEE);
    assert!(all == expected);
}

#[test]
fn out_of_bounds_accesses_are_errors_and_change_nothing() {
    let seg = memory(64, "bounds");
    seg.fill(0, 64, 0x11).expect("fill");

    assert!(seg.check_range(0, 64).is_ok());
    assert!(seg.check_range(64, 0).is_ok());
    assert!(matches!(
        seg.check_range(64, 1),
        Err(Error::OutOfBounds {
            offset: 64,
            size: 1,
            len: 64
        })
    ));
    assert!(matches!(
        seg.check_range(u64::MAX, 2),
        Err(Error::OutOfBounds {
            offset: u64::MAX,
            size: 2,
            len: 64
        })
    ));
    assert!(seg.check_range(1, u64::MAX).is_err());

    let mut buf = [0u8; 8];
    assert!(matches!(
        seg.read(60, &mut buf),
        Err(Error::OutOfBounds { .. })
    ));
    assert_eq!(buf, [0; 8], "failed read leaves the buffer alone");
    assert!(seg.read(u64::MAX, &mut buf).is_err());
    assert!(seg.write(57, &buf).is_err());
    assert!(seg.write(u64::MAX - 3, &buf).is_err());
    assert!(seg.fill(1, 64, 0).is_err());
    assert!(seg.fill(u64::MAX, 2, 0).is_err());
    assert!(seg.read_u64(64).is_err());
    assert!(seg.write_u64(u64::MAX - 7, 0).is_err());
    // SAFETY: no slice is created, as the ranges are out of bounds.
    unsafe {
        assert!(seg.slice(65, 0).is_err());
        assert!(seg.slice_mut(0, 65).is_err());
    }

    let mut all = [0u8; 64];
    seg.read(0, &mut all).expect("read");
    assert_eq!(all, [0x11; 64], "failed writes wrote nothing");
}

#[test]
fn zero_size_and_null_are_rejected() {
    assert!(matches!(
        SegmentMemory::allocate(0, "empty"),
        Err(Error::ZeroSize)
    ));
    let mut buf = [0u8; 4];
    // SAFETY: both calls fail their argument checks before using the pointer.
    unsafe {
        assert!(matches!(
            SegmentMemory::bind(std::ptr::null_mut(), 4),
            Err(Error::NullPointer)
        ));
        assert!(matches!(
            SegmentMemory::bind(buf.as_mut_ptr(), 0),
            Err(Error::ZeroSize)
        ));
    }
}

#[test]
fn u64_words_are_atomic_and_must_be_aligned() {
    let seg = memory(64, "words");
    seg.write_u64(8, 0x0102_0304_0506_0708).expect("write_u64");
    assert_eq!(seg.read_u64(8).expect("read_u64"), 0x0102_0304_0506_0708);
    let mut bytes = [0u8; 8];
    seg.read(8, &mut bytes).expect("read");
    assert_eq!(u64::from_ne_bytes(bytes), 0x0102_0304_0506_0708);
    assert_eq!(seg.read_u64(56).expect("last word"), 0);

    for offset in [1, 4, 7, 52] {
        let err = seg.read_u64(offset);
        assert!(
            matches!(err, Err(Error::Misaligned { offset: o, align: 8 }) if o == offset),
            "read at {offset} gave {err:?}"
        );
        assert!(matches!(
            seg.write_u64(offset, 1),
            Err(Error::Misaligned { .. })
        ));
    }
    assert_eq!(seg.read_u64(0).expect("untouched"), 0);
}

#[test]
fn fetch_add_and_compare_swap_are_exact_under_contention() {
    // Fewer under miri, which runs each round a thousand times slower.
    const ROUNDS: u64 = if cfg!(miri) { 100 } else { 10_000 };
    let seg = memory(64, "rmw");
    std::thread::scope(|s| {
        for _ in 0..4 {
            s.spawn(|| {
                for _ in 0..ROUNDS {
                    seg.fetch_add_u64(16, 1).expect("fetch_add");
                    // A CAS increment: retried until it wins.
                    let mut old = seg.read_u64(24).expect("read");
                    loop {
                        let seen = seg.compare_swap_u64(24, old, old + 1).expect("cas");
                        if seen == old {
                            break;
                        }
                        old = seen;
                    }
                }
            });
        }
    });
    assert_eq!(seg.read_u64(16).expect("read"), 4 * ROUNDS);
    assert_eq!(seg.read_u64(24).expect("read"), 4 * ROUNDS);
    assert_eq!(
        seg.compare_swap_u64(24, 7, 9).expect("failed cas"),
        4 * ROUNDS
    );
    assert!(matches!(
        seg.fetch_add_u64(52, 1),
        Err(Error::Misaligned { offset: 52, .. })
    ));
    assert!(seg.compare_swap_u64(64, 0, 1).is_err());
}

#[test]
fn bound_u64_words_need_an_aligned_address() {
    let mut words = vec![0u64; 4];
    // SAFETY: `words` outlives `seg`, is not resized while `seg` exists, and is not otherwise
    // accessed meanwhile; one byte is skipped so that the base address is misaligned.
    let seg =
        unsafe { SegmentMemory::bind(words.as_mut_ptr().cast::<u8>().add(1), 16) }.expect("bind");
    assert!(matches!(
        seg.read_u64(0),
        Err(Error::Misaligned {
            offset: 0,
            align: 8
        })
    ));
    drop(seg);
    assert_eq!(words, [0; 4]);
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn the_shm_file_lives_exactly_as_long_as_the_segment() {
    let seg = SegmentMemory::allocate(8192, "lifetime").expect("allocate");
    let path = seg
        .shm_path()
        .expect("allocated segments have a file")
        .to_path_buf();
    let file_name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("utf-8 name");
    let namespace = std::os::unix::fs::MetadataExt::ino(
        &std::fs::metadata("/proc/self/ns/pid").expect("the pid namespace of this process"),
    );
    let expected_prefix = format!("gaspi-lifetime-{namespace}-{}-", std::process::id());
    assert!(
        file_name.starts_with(&expected_prefix),
        "{file_name} starts with {expected_prefix}"
    );
    assert_eq!(std::fs::metadata(&path).expect("file exists").len(), 8192);

    drop(seg);
    assert!(!path.exists(), "{} is removed on drop", path.display());
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn a_segment_file_has_its_storage_allocated_before_any_write() {
    use std::os::unix::fs::MetadataExt;
    // A sparse file on a file system that fills up kills the first writer of a page with
    // SIGBUS; all of it must be allocated while creation can still fail.
    let len = 1 << 20;
    let seg = SegmentMemory::allocate(len, "reserved").expect("allocate");
    let path = seg.shm_path().expect("allocated segments have a file");
    let meta = std::fs::metadata(path).expect("file exists");
    // `st_blocks` counts 512-byte units, whatever the file system's block size.
    assert!(
        meta.blocks() * 512 >= len as u64,
        "{}: {} of {len} bytes allocated",
        path.display(),
        meta.blocks() * 512
    );
    let mut bytes = vec![1u8; len];
    seg.read(0, &mut bytes).expect("read");
    assert!(
        bytes.iter().all(|&b| b == 0),
        "a new segment reads as zeros"
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn segments_with_the_same_name_get_distinct_files() {
    let a = SegmentMemory::allocate(1, "twin/../x").expect("allocate a");
    let b = SegmentMemory::allocate(1, "twin/../x").expect("allocate b");
    let (pa, pb) = (a.shm_path().expect("a"), b.shm_path().expect("b"));
    assert_ne!(pa, pb);
    for path in [pa, pb] {
        assert!(path.exists());
        let dir = path.parent().expect("in a directory");
        assert!(
            dir == std::path::Path::new("/dev/shm") || dir == std::env::temp_dir(),
            "{} is in the shm or temp directory",
            path.display()
        );
    }
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn a_second_mapping_shares_the_bytes_both_ways() {
    let seg = SegmentMemory::allocate(1 << 16, "shared").expect("allocate");
    let path: PathBuf = seg.shm_path().expect("file").to_path_buf();
    seg.write(1000, b"from the owner").expect("write");

    // Stands in for another process on the host opening the segment by name.
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .expect("open by name");
    // SAFETY: the file is not truncated while mapped, and this test accesses the mapping only
    // while no write through `seg` is in flight.
    let mut peer = unsafe { MmapMut::map_mut(&file) }.expect("map");
    assert_eq!(peer.len(), 1 << 16);
    assert_eq!(&peer[1000..1014], b"from the owner");

    peer[5000..5008].copy_from_slice(b"the peer");
    let mut buf = [0u8; 8];
    seg.read(5000, &mut buf).expect("read");
    assert_eq!(&buf, b"the peer");
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn unlinking_early_keeps_the_memory() {
    let mut seg = SegmentMemory::allocate(4096, "early").expect("allocate");
    let path = seg.shm_path().expect("file").to_path_buf();
    seg.unlink_shm().expect("unlink");
    assert!(!path.exists());
    assert_eq!(seg.shm_path(), None);

    seg.write(4088, &[9; 8]).expect("write after unlink");
    assert_eq!(
        seg.read_u64(4088).expect("read"),
        u64::from_ne_bytes([9; 8])
    );
    seg.unlink_shm().expect("second unlink is a no-op");
}

#[test]
fn binding_a_vec_reads_and_writes_the_vec() {
    let mut backing: Vec<u8> = (0..=255).collect();
    let ptr = backing.as_mut_ptr();
    // SAFETY: `backing` outlives `seg`, is not resized while `seg` exists, and is only accessed
    // through `seg` meanwhile.
    let mut seg = unsafe { SegmentMemory::bind(ptr, backing.len()) }.expect("bind");
    assert!(seg.is_bound());
    assert_eq!(seg.as_ptr(), ptr);
    assert_eq!(seg.len(), 256);
    assert_eq!(seg.shm_path(), None);
    seg.unlink_shm().expect("no-op for bound memory");

    let mut buf = [0u8; 4];
    seg.read(10, &mut buf).expect("read");
    assert_eq!(buf, [10, 11, 12, 13]);
    seg.write(250, b"abcdef").expect("write");
    assert!(seg.write(251, b"abcdef").is_err());
    drop(seg);

    assert_eq!(&backing[250..], b"abcdef");
    assert_eq!(backing[249], 249, "bytes before the write are untouched");
}

#[test]
fn slices_see_the_segment_contents() {
    let seg = memory(256, "slices");
    // SAFETY: nothing else accesses the segment while each slice lives.
    unsafe {
        seg.slice_mut(16, 4)
            .expect("slice_mut")
            .copy_from_slice(b"ABCD");
        assert_eq!(seg.slice(14, 8).expect("slice"), b"\0\0ABCD\0\0");
        assert!(seg
            .slice(256, 0)
            .expect("empty slice at the end")
            .is_empty());
    }
}

#[test]
fn threads_can_share_a_segment() {
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<SegmentMemory>();

    const THREADS: usize = 4;
    const CHUNK: usize = if cfg!(miri) { 1 << 10 } else { 1 << 16 };
    let seg = memory(THREADS * CHUNK, "threads");
    std::thread::scope(|s| {
        for t in 0..THREADS {
            let seg = &seg;
            s.spawn(move || {
                let offset = (t * CHUNK) as u64;
                seg.write(offset, &pattern(CHUNK, t as u8)).expect("write");
            });
        }
    });
    for t in 0..THREADS {
        let mut out = vec![0; CHUNK];
        seg.read((t * CHUNK) as u64, &mut out).expect("read");
        assert!(out == pattern(CHUNK, t as u8), "chunk {t}");
    }

    let moved = std::thread::spawn(move || seg.read_u64(0).expect("read"))
        .join()
        .expect("thread");
    assert_eq!(
        moved,
        u64::from_ne_bytes(pattern(8, 0).try_into().expect("8 bytes"))
    );
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn another_mapping_of_a_segment_file_shares_its_bytes() {
    let owner = SegmentMemory::allocate(8192, "open-test").expect("allocate");
    assert!(owner.is_shareable());
    let path = owner
        .shm_path()
        .expect("allocated segments have a file")
        .to_path_buf();
    let peer = SegmentMemory::open(&path).expect("open");
    assert_eq!(peer.len(), 8192);
    assert!(!peer.is_shareable() && !peer.is_bound());
    peer.write(4000, b"direct").expect("write");
    let mut got = [0u8; 6];
    owner.read(4000, &mut got).expect("read");
    assert_eq!(&got, b"direct");
    assert_eq!(peer.fetch_add_u64(8, 5).expect("add"), 0);
    assert_eq!(owner.read_u64(8).expect("load"), 5);
    drop(owner);
    // The owner is gone and its file unlinked: the peer's mapping still works.
    assert!(!path.exists());
    peer.write(0, b"late").expect("write after the owner left");
    assert!(matches!(
        SegmentMemory::open(&path),
        Err(gaspi_segments::Error::Io { .. })
    ));
}

#[test]
#[cfg_attr(
    miri,
    ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
)]
fn a_copy_between_two_mappings_of_one_file_moves_overlapping_bytes_as_memmove() {
    const LEN: usize = 16384;
    let owner = SegmentMemory::allocate(LEN, "alias").expect("allocate");
    let path = owner.shm_path().expect("a file").to_path_buf();
    // This process's own segment reached as a peer's: its file mapped a second time.
    let again = SegmentMemory::open(&path).expect("open");
    let start = pattern(LEN, 5);
    // Destination ahead of the source by a few bytes, by a cache line, behind it, and apart;
    // then every size up to a few bytes past the small copies' (whose loads all come first).
    let large = [
        (0, 1, 8192),
        (0, 16, 8192),
        (0, 64, 4096),
        (1, 0, 8192),
        (100, 0, 12000),
        (0, 8192, 8192),
    ];
    let small = (0..=20).flat_map(|size| [(0, 1, size), (0, 5, size), (9, 0, size), (0, 64, size)]);
    for (src, dst, size) in large.into_iter().chain(small) {
        let mut expected = start.clone();
        expected.copy_within(src..src + size, dst);
        for (from, to) in [(&owner, &again), (&again, &owner)] {
            owner.write(0, &start).expect("write");
            from.copy_to(src as u64, to, dst as u64, size as u64)
                .expect("copy");
            let mut got = vec![0; LEN];
            owner.read(0, &mut got).expect("read");
            let wrong = got.iter().zip(&expected).filter(|(a, b)| a != b).count();
            assert_eq!(
                wrong, 0,
                "{size} bytes from {src} to {dst}: {wrong} bytes wrong"
            );
        }
    }
}

#[test]
fn a_copy_out_of_bounds_copies_nothing_and_names_the_range() {
    let from = memory(64, "copy-from");
    let to = memory(32, "copy-to");
    from.write(0, &pattern(64, 3)).expect("write");
    to.write(0, &pattern(32, 9)).expect("write");
    let before = pattern(32, 9);
    // (source offset, destination offset, size, the length of the segment refused, or none)
    let cases = [
        (60, 0, 8, Some(64)),
        (0, 28, 8, Some(32)),
        (u64::MAX, 0, 2, Some(64)),
        (0, u64::MAX, 2, Some(32)),
        (56, 24, 8, None),
        (64, 32, 0, None),
    ];
    for (src, dst, size, refused) in cases {
        to.write(0, &before).expect("write");
        let copied = from.try_copy_to(src, &to, dst, size);
        assert_eq!(
            copied,
            refused.is_none(),
            "try_copy_to({src}, {dst}, {size})"
        );
        let mut got = vec![0; 32];
        to.read(0, &mut got).expect("read");
        let mut expected = before.clone();
        if copied && size > 0 {
            let (s, d, n) = (src as usize, dst as usize, size as usize);
            expected[d..d + n].copy_from_slice(&pattern(64, 3)[s..s + n]);
        }
        assert_eq!(got, expected, "try_copy_to({src}, {dst}, {size})");
        to.write(0, &before).expect("write");
        match (from.copy_to(src, &to, dst, size), refused) {
            (Ok(()), None) => {}
            (Err(Error::OutOfBounds { len, .. }), Some(refused)) => assert_eq!(len, refused),
            (other, _) => panic!("copy_to({src}, {dst}, {size}): {other:?}"),
        }
        to.read(0, &mut got).expect("read");
        assert_eq!(got, expected, "copy_to({src}, {dst}, {size})");
    }
}

#[test]
fn static_memory_binds_safely() {
    let memory: &'static mut [u8] = Box::leak(vec![0u8; 64].into_boxed_slice());
    let at = memory.as_ptr();
    let seg = SegmentMemory::bind_static(memory).expect("bind");
    assert!(seg.is_bound());
    assert_eq!((seg.as_ptr().cast_const(), seg.len()), (at, 64));
    assert!(seg.shm_path().is_none());
    seg.write(3, b"abc").expect("write");
    let mut back = [0u8; 3];
    seg.read(3, &mut back).expect("read");
    assert_eq!(&back, b"abc");
    assert!(matches!(
        SegmentMemory::bind_static(Box::leak(Vec::new().into_boxed_slice())),
        Err(gaspi_segments::Error::ZeroSize)
    ));
}
