//! The [`SegmentMemory`] type: where a segment's bytes come from, who releases them, and the
//! invariant every access relies on (`ptr` is valid for reads and writes of `len` bytes for as
//! long as the value exists).

use std::fmt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::ptr::NonNull;

use memmap2::{MmapOptions, MmapRaw};

use crate::error::{Error, Result};
use crate::range::{in_range, out_of_bounds};
use crate::shm::{ShmFile, Space};

/// The memory of one segment: either allocated by this crate in a shared-memory file, or bound
/// to memory the user provides.
///
/// # Aliasing model
///
/// Segment memory is written by parties Rust cannot see — the NIC on behalf of remote ranks
/// (RDMA writes and atomics) and possibly other processes mapping the same shared-memory file —
/// at the same time as local threads use it. This type therefore never hands out a Rust
/// reference to segment memory from a safe method. Every safe access is a raw-pointer copy
/// ([`read`](Self::read), [`write`](Self::write), [`fill`](Self::fill)) or an atomic operation
/// ([`read_u64`](Self::read_u64), [`write_u64`](Self::write_u64)) that lasts only for the call.
/// Consequently:
///
/// * No `&[u8]`/`&mut [u8]` is alive while a remote write lands, so the compiler's assumptions
///   about references (immutability behind `&`, uniqueness of `&mut`) are never contradicted
///   by a remote write.
/// * A copy that overlaps a concurrent *remote* write sees an unspecified mix of old and new
///   bytes, torn at any granularity. Because the copied type is `u8`, every mix is a valid
///   value. Memory changed by a device or another process is outside Rust's memory model; this
///   is the same footing every shared-memory and RDMA library in Rust or C stands on, not a
///   guarantee the language spells out.
/// * Overlapping *local* accesses from different threads, at least one of them a write
///   (`write`/`fill`/`write_u64` racing with any other access to the same bytes), are a data
///   race in Rust's memory model, and a data race is undefined behaviour even through raw
///   pointers. The same holds for mixing [`read_u64`](Self::read_u64)/
///   [`write_u64`](Self::write_u64) with unsynchronised byte copies of the same word. These
///   methods are safe to call because in practice such a race only tears bytes on the targets
///   gaspi runs on, but nothing in the language promises that, and this type does not prevent
///   it: ordering local accesses to the same bytes is the caller's job, just as GASPI requires
///   anyway (a rank reads a range after the notification for it arrived and before it allows
///   anyone to write it again).
/// * [`slice`](Self::slice) and [`slice_mut`](Self::slice_mut) do create references, and are
///   `unsafe` because their callers must promise that nothing — local or remote — writes (or,
///   for `slice_mut`, accesses) the range while the reference lives.
pub struct SegmentMemory {
    /// Start of the segment; valid for reads and writes of `len` bytes while `self` exists.
    ptr: NonNull<u8>,
    /// Length in bytes, never zero.
    len: usize,
    /// What keeps `ptr` valid.
    backing: Backing,
}

/// Which file a mapping shows: two mappings of one file are the same pages at two addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FileId {
    dev: u64,
    ino: u64,
}

impl FileId {
    fn of(metadata: &std::fs::Metadata) -> FileId {
        FileId {
            dev: metadata.dev(),
            ino: metadata.ino(),
        }
    }
}

/// Who owns the memory behind a [`SegmentMemory`].
enum Backing {
    /// Allocated by [`SegmentMemory::allocate`]. The mapping is declared first so that it is
    /// unmapped before the file's name is removed.
    Shm {
        _map: MmapRaw,
        file: ShmFile,
        id: FileId,
    },
    /// Another process's segment file, mapped by [`SegmentMemory::open`]; the file belongs to
    /// that process.
    Mapped { _map: MmapRaw, id: FileId },
    /// Provided by the user through [`SegmentMemory::bind`]; nothing to release.
    Bound,
}

// SAFETY: `SegmentMemory` holds no thread-affine state. The pointer refers either to a mapping
// the value owns (unmapped only when the value is dropped, wherever that happens) or to user
// memory that the contract of `bind` requires to stay valid, for use from any thread, until the
// value is dropped. Moving the value to another thread therefore moves nothing but the right to
// use and release that memory.
unsafe impl Send for SegmentMemory {}

// SAFETY: Every `&self` method either reads immutable fields or accesses segment memory through
// short-lived raw-pointer copies and atomics, never through a reference that another thread
// could invalidate; the only methods creating references (`slice`, `slice_mut`) are `unsafe`
// and make freedom from concurrent access part of their contract. The one gap is that
// overlapping unsynchronised local copies from several threads are formally a data race; the
// aliasing model above states this and leaves ordering them to the caller, as GASPI's
// notification discipline already requires.
unsafe impl Sync for SegmentMemory {}

impl SegmentMemory {
    /// Allocates a zero-filled, page-aligned segment of `len` bytes in a new shared-memory file.
    ///
    /// The file is created in `/dev/shm` (or, if that is unusable or too full, in
    /// [`std::env::temp_dir`]) under the name `gaspi-<name>-<pidns>-<pid>-<n>`, where `name` is
    /// reduced to characters that are safe in a file name and `pidns` is the inode number of the
    /// process's pid namespace (pids repeat across namespaces that share `/dev/shm`). Its path
    /// is available through [`shm_path`](Self::shm_path) so that other processes on the host
    /// can map the same memory.
    /// The file's name is removed when the segment is dropped or when
    /// [`unlink_shm`](Self::unlink_shm) is called; a process killed before that leaves the file
    /// behind, and the first file of a new process that gets its pid removes it (see
    /// [`remove_stale_files`](crate::remove_stale_files)).
    ///
    /// The file's storage is reserved at creation, so that a write into the segment (by this
    /// process or, through the file, another) never meets a full file system: a directory
    /// without the room is passed over at creation instead. Reserving allocates the pages
    /// (on tmpfs about 0.35 s per GiB); they are zeroed as they are first touched.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroSize`] if `len` is 0; [`Error::Io`] if no file of `len` bytes can be
    /// created (including when neither directory has room for `len` bytes) or it cannot be
    /// mapped.
    pub fn allocate(len: usize, name: &str) -> Result<SegmentMemory> {
        Self::allocate_with(len, name, Space::Reserved)
    }

    /// Like [`allocate`](Self::allocate), but the file's storage is allocated page by page as
    /// the memory is first touched: for a large area of which little is ever touched. Only the
    /// free space at creation is checked, so once the file system has filled up, the first
    /// touch of a page (by any process that maps the file) can kill that process with
    /// `SIGBUS`.
    ///
    /// # Errors
    ///
    /// As [`allocate`](Self::allocate).
    pub fn allocate_sparse(len: usize, name: &str) -> Result<SegmentMemory> {
        Self::allocate_with(len, name, Space::Sparse)
    }

    fn allocate_with(len: usize, name: &str, space: Space) -> Result<SegmentMemory> {
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        let (file, map, id) = map_new(name, len, space)?;
        // A successful mmap never yields null on Linux (the kernel keeps page 0 unmappable for
        // unprivileged processes); checked rather than assumed because it is free.
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or(Error::NullPointer)?;
        Ok(SegmentMemory {
            ptr,
            len,
            backing: Backing::Shm {
                _map: map,
                file,
                id,
            },
        })
    }

    /// Maps the segment file at `path`, which another process on this host allocated (its
    /// [`shm_path`](Self::shm_path)), so that this process reads and writes the same bytes.
    ///
    /// The mapping stays valid for as long as the value exists, even after the owner unlinks
    /// the file, drops its segment or dies: the pages live until the last mapping goes. Writes
    /// into a segment its owner has dropped are therefore harmless and simply lost. Dropping
    /// the value unmaps, and never removes the file.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be opened or mapped; [`Error::ZeroSize`] if it is empty.
    pub fn open(path: &Path) -> Result<SegmentMemory> {
        let (map, len, id) = map_existing(path)?;
        let ptr = NonNull::new(map.as_mut_ptr()).ok_or(Error::NullPointer)?;
        Ok(SegmentMemory {
            ptr,
            len,
            backing: Backing::Mapped { _map: map, id },
        })
    }

    /// Uses `len` bytes at `ptr`, owned by the caller, as segment memory.
    ///
    /// No ownership is taken: dropping the segment leaves the memory alone. There is no
    /// shared-memory file, so [`shm_path`](Self::shm_path) is `None`.
    ///
    /// # Safety
    ///
    /// Until the returned value is dropped:
    ///
    /// * `ptr` must be valid for reads and writes of `len` bytes, all within one allocation;
    /// * the memory must not be freed, moved or reallocated (for example by growing the `Vec`
    ///   it belongs to), and must stay valid no matter which thread uses the segment (so no
    ///   thread-local buffer that dies with its thread);
    /// * the caller must not hold Rust references (`&`/`&mut`) into the memory across moments
    ///   when remote ranks or other threads may write it, because once it is registered with
    ///   libfabric, remote ranks can write it at any time; see the aliasing model above.
    ///
    /// # Errors
    ///
    /// [`Error::NullPointer`] if `ptr` is null; [`Error::ZeroSize`] if `len` is 0.
    pub unsafe fn bind(ptr: *mut u8, len: usize) -> Result<SegmentMemory> {
        let ptr = NonNull::new(ptr).ok_or(Error::NullPointer)?;
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        Ok(SegmentMemory {
            ptr,
            len,
            backing: Backing::Bound,
        })
    }

    /// Uses memory that lives for the rest of the process (a static buffer, or one leaked with
    /// [`Box::leak`]) as segment memory, like [`bind`](Self::bind) but safe: such memory is
    /// never freed or moved, and the exclusive borrow is given up for good, so no reference
    /// into it remains.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroSize`] if `memory` is empty.
    pub fn bind_static(memory: &'static mut [u8]) -> Result<SegmentMemory> {
        // SAFETY: the slice is valid for reads and writes of its length within one
        // allocation, for ever (`'static`); it is never freed or moved; and the only
        // reference to it was moved in here and ends with this call.
        unsafe { SegmentMemory::bind(memory.as_mut_ptr(), memory.len()) }
    }

    /// Length of the segment in bytes; never zero.
    // A segment is never empty, so an `is_empty` would always return false.
    #[allow(clippy::len_without_is_empty)]
    pub fn len(&self) -> usize {
        self.len
    }

    /// Start of the segment, for registering `as_ptr()..as_ptr() + len()` with libfabric.
    ///
    /// The pointer is valid for reads and writes of [`len`](Self::len) bytes until `self` is
    /// dropped. Accesses through it are subject to the aliasing model described on
    /// [`SegmentMemory`].
    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    /// Whether another process on this host can map the memory: it is allocated here and its
    /// file still has a name (see [`shm_path`](Self::shm_path)).
    pub fn is_shareable(&self) -> bool {
        self.shm_path().is_some()
    }

    /// Whether the memory was provided by the user through [`bind`](Self::bind).
    pub fn is_bound(&self) -> bool {
        matches!(self.backing, Backing::Bound)
    }

    /// Path of the shared-memory file backing an allocated segment, for other processes on the
    /// host to map; `None` for bound segments and after [`unlink_shm`](Self::unlink_shm).
    pub fn shm_path(&self) -> Option<&Path> {
        match &self.backing {
            Backing::Shm { file, .. } => file.path(),
            Backing::Mapped { .. } | Backing::Bound => None,
        }
    }

    /// Removes the name of the shared-memory file now instead of when the segment is dropped.
    ///
    /// Call this once every process that needs the memory has mapped it: existing mappings,
    /// including this segment's, stay valid, and a crash afterwards can no longer leave the file
    /// behind. Does nothing for bound segments or when already unlinked.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the name cannot be removed; it is then tried again on drop.
    pub fn unlink_shm(&mut self) -> Result<()> {
        match &mut self.backing {
            Backing::Shm { file, .. } => file.unlink(),
            Backing::Mapped { .. } | Backing::Bound => Ok(()),
        }
    }

    /// Whether `self` and `other` map all of one file, at two addresses or at one.
    pub(crate) fn maps_same_file(&self, other: &SegmentMemory) -> bool {
        let id = |memory: &SegmentMemory| match memory.backing {
            Backing::Shm { id, .. } | Backing::Mapped { id, .. } => Some(id),
            Backing::Bound => None,
        };
        self.len == other.len && id(self).is_some() && id(self) == id(other)
    }

    /// Pointer to byte `offset` and `size` as a `usize`, if `offset..offset + size` lies within
    /// the segment; the pointer is then valid for reads and writes of `size` bytes.
    // Inline: every access checks its range here, and called (the crate's modules are compiled
    // apart without LTO) the check cost as much again.
    #[inline]
    pub(crate) fn range_ptr(&self, offset: u64, size: u64) -> Result<(*mut u8, usize)> {
        self.in_range_ptr(offset, size)
            .ok_or_else(|| out_of_bounds(offset, size, self.len))
    }

    /// [`range_ptr`](Self::range_ptr) without the error: `None` when the range is not within
    /// the segment. For the accesses whose callers work out the error themselves, so that the
    /// fast path neither builds nor drops one.
    #[inline]
    pub(crate) fn in_range_ptr(&self, offset: u64, size: u64) -> Option<(*mut u8, usize)> {
        let (start, count) = in_range(offset, size, self.len)?;
        // SAFETY: `start + count <= len` (checked above), and `ptr` is valid for `len` bytes of
        // one allocation, so the result is in bounds or one past the end of that allocation.
        Some((unsafe { self.ptr.as_ptr().add(start) }, count))
    }
}

/// Creates a shared-memory file of `len` bytes named after `name`, its storage allocated as
/// `space` says, and maps it: the file's guard (which removes its name), the mapping and the
/// file's identity.
pub(crate) fn map_new(name: &str, len: usize, space: Space) -> Result<(ShmFile, MmapRaw, FileId)> {
    let (file, open_file) = ShmFile::create(name, len, space)?;
    let metadata = open_file.metadata().map_err(|source| Error::Io {
        context: format!(
            "cannot stat shared-memory file {}",
            file.path().unwrap_or(Path::new("?")).display()
        ),
        source,
    })?;
    let map = MmapOptions::new()
        .len(len)
        .map_raw(&open_file)
        .map_err(|source| Error::Io {
            context: format!(
                "cannot map shared-memory file {} ({len} bytes)",
                file.path().unwrap_or(Path::new("?")).display()
            ),
            source,
        })?;
    Ok((file, map, FileId::of(&metadata)))
}

/// Opens the existing file at `path` for reading and writing and maps all of it: the mapping,
/// its length and the file's identity.
pub(crate) fn map_existing(path: &Path) -> Result<(MmapRaw, usize, FileId)> {
    let io = |what: &str, source| Error::Io {
        context: format!("cannot {what} shared-memory file {}", path.display()),
        source,
    };
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| io("open", e))?;
    let metadata = file.metadata().map_err(|e| io("stat", e))?;
    let len = usize::try_from(metadata.len()).map_err(|_| Error::ZeroSize)?;
    if len == 0 {
        return Err(Error::ZeroSize);
    }
    let map = MmapOptions::new()
        .len(len)
        .map_raw(&file)
        .map_err(|e| io("map", e))?;
    Ok((map, len, FileId::of(&metadata)))
}

impl fmt::Debug for SegmentMemory {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SegmentMemory")
            .field("ptr", &self.ptr)
            .field("len", &self.len)
            .field("bound", &self.is_bound())
            .field("shm_path", &self.shm_path())
            .finish()
    }
}
