//! [`SharedWords`]: an array of `u32` atomics in a shared-memory file, for state that several
//! processes on one host read and change at once (notification tables, wake-up words,
//! directories of segments).

use std::fmt;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::atomic::AtomicU32;
use std::sync::Arc;

use memmap2::MmapRaw;

use crate::error::{Error, Result};
use crate::memory::{map_existing, map_new};
use crate::shm::{ShmFile, Space};

/// Bytes per word.
const WORD: usize = std::mem::size_of::<AtomicU32>();

/// Zero-initialised `u32` atomics in a shared-memory file that other processes of this host
/// can map too ([`SharedWords::open`] on [`SharedWords::path`]).
///
/// Unlike segment memory, these words are only ever accessed as atomics, by every process that
/// maps them, so handing out `&[AtomicU32]` is sound: atomics may be changed through shared
/// references, by other threads and (being plain lock-free memory operations) by other
/// processes.
pub struct SharedWords {
    map: MmapRaw,
    len: usize,
    /// The file's name, owned by the creator; `None` when mapped from another process.
    file: Option<ShmFile>,
}

impl SharedWords {
    /// Creates a file of `count` zeroed words, named after `name` (see the `shm` module for
    /// where and how), its storage reserved as [`SegmentMemory::allocate`](crate::SegmentMemory::allocate)
    /// reserves a segment's, and maps it.
    ///
    /// # Errors
    ///
    /// [`Error::ZeroSize`] if `count` is 0; [`Error::Io`] if the file cannot be created or
    /// mapped.
    pub fn allocate(count: usize, name: &str) -> Result<SharedWords> {
        let bytes = count.checked_mul(WORD).ok_or(Error::ZeroSize)?;
        if bytes == 0 {
            return Err(Error::ZeroSize);
        }
        let (file, map, _) = map_new(name, bytes, Space::Reserved)?;
        Ok(SharedWords {
            map,
            len: count,
            file: Some(file),
        })
    }

    /// Maps the words another process of this host created, found at its
    /// [`path`](Self::path). The mapping stays valid after that process unlinks the file or
    /// dies.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] if the file cannot be opened or mapped; [`Error::ZeroSize`] if it holds
    /// no whole word.
    pub fn open(path: &Path) -> Result<SharedWords> {
        let (map, bytes, _) = map_existing(path)?;
        let len = bytes / WORD;
        if len == 0 {
            return Err(Error::ZeroSize);
        }
        Ok(SharedWords {
            map,
            len,
            file: None,
        })
    }

    /// The words.
    #[inline]
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: the mapping is page-aligned (so aligned for `AtomicU32`), at least
        // `len * 4` bytes long, and lives as long as `self`, which bounds the borrow. Its bytes
        // are initialised (a file's contents, zero until written). Every process mapping it
        // accesses the words only as atomics, so shared mutation through `&AtomicU32` is the
        // intended use and there are no non-atomic accesses to race with.
        unsafe { std::slice::from_raw_parts(self.map.as_ptr().cast::<AtomicU32>(), self.len) }
    }

    /// The file's path, for other processes to [`open`](Self::open); `None` for words this
    /// process mapped from another.
    pub fn path(&self) -> Option<&Path> {
        self.file.as_ref().and_then(ShmFile::path)
    }
}

/// Words `start..start + len` of a [`SharedWords`], kept with the mapping: lent as a slice
/// with two loads of its own, where [`SharedWords::words`] then a range costs a look through
/// the `Arc` and three checks. For structures that find their words on every call (a
/// notification table's sets, resets and looks, a wake-up word's).
pub struct SharedRun {
    /// The first word of the run, inside `words`' mapping.
    first: NonNull<AtomicU32>,
    len: usize,
    /// Keeps the mapping `first` points into.
    words: Arc<SharedWords>,
}

// SAFETY: a run only hands out `&[AtomicU32]` of a mapping it keeps alive; atomics may be
// used from any thread (`AtomicU32` is `Send` and `Sync`), and so may `Arc<SharedWords>`.
unsafe impl Send for SharedRun {}
// SAFETY: as for `Send`: shared access gives only `&[AtomicU32]`, which is `Sync`.
unsafe impl Sync for SharedRun {}

impl SharedRun {
    /// Words `start..start + len` of `words`; `None` when `words` is shorter.
    pub fn new(words: Arc<SharedWords>, start: usize, len: usize) -> Option<SharedRun> {
        let run = words.words().get(start..start.checked_add(len)?)?;
        let first = NonNull::from(run).cast::<AtomicU32>();
        Some(SharedRun { first, len, words })
    }

    /// The words of the run.
    // Always inline: it is two loads, on the path of every notification.
    #[inline(always)]
    pub fn words(&self) -> &[AtomicU32] {
        // SAFETY: `first..first + len` was a subslice of `self.words.words()` when the run was
        // made (see `new`), and that mapping stays as it is while `self.words`, which this run
        // keeps, lives: the borrow of `self` bounds it. See `SharedWords::words` for why
        // shared `&AtomicU32`s into the mapping are sound.
        unsafe { std::slice::from_raw_parts(self.first.as_ptr(), self.len) }
    }

    /// The mapping the run is part of.
    pub fn shared(&self) -> &Arc<SharedWords> {
        &self.words
    }
}

impl fmt::Debug for SharedRun {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedRun")
            .field("len", &self.len)
            .field("words", &self.words)
            .finish()
    }
}

impl fmt::Debug for SharedWords {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedWords")
            .field("len", &self.len)
            .field("path", &self.path())
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering;

    #[test]
    #[cfg_attr(
        miri,
        ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
    )]
    fn a_second_mapping_sees_the_same_words() -> Result<()> {
        let words = SharedWords::allocate(100, "words-test")?;
        assert_eq!(words.words().len(), 100);
        assert!(words.words().iter().all(|w| w.load(Ordering::Relaxed) == 0));
        let path = words.path().expect("owned words have a path").to_path_buf();
        let other = SharedWords::open(&path)?;
        assert_eq!(other.path(), None);
        words.words()[42].store(7, Ordering::Release);
        assert_eq!(other.words()[42].load(Ordering::Acquire), 7);
        other.words()[99].fetch_add(3, Ordering::AcqRel);
        assert_eq!(words.words()[99].load(Ordering::Acquire), 3);
        drop(words);
        assert!(!path.exists(), "the creator removes the file");
        other.words()[0].store(1, Ordering::Relaxed);
        Ok(())
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "maps a shared-memory file: miri runs no mmap of files, statvfs or fallocate"
    )]
    fn a_run_is_its_range_of_the_words() -> Result<()> {
        let words = Arc::new(SharedWords::allocate(10, "run-test")?);
        let run = SharedRun::new(Arc::clone(&words), 3, 4).expect("inside the words");
        assert_eq!(run.words().len(), 4);
        run.words()[0].store(5, Ordering::Release);
        run.words()[3].store(6, Ordering::Release);
        assert_eq!(words.words()[3].load(Ordering::Acquire), 5);
        assert_eq!(words.words()[6].load(Ordering::Acquire), 6);
        assert!(Arc::ptr_eq(run.shared(), &words));
        assert!(SharedRun::new(Arc::clone(&words), 0, 10).is_some());
        assert!(SharedRun::new(Arc::clone(&words), 7, 4).is_none());
        assert!(SharedRun::new(Arc::clone(&words), usize::MAX, 2).is_none());
        // The run keeps the mapping: its words stay usable once the other handle is gone.
        drop(words);
        assert_eq!(run.words()[3].load(Ordering::Acquire), 6);
        Ok(())
    }

    #[test]
    fn bad_sizes_and_paths_are_errors() {
        assert!(matches!(
            SharedWords::allocate(0, "zero"),
            Err(Error::ZeroSize)
        ));
        assert!(matches!(
            SharedWords::open(Path::new("/nonexistent/gaspi-words")),
            Err(Error::Io { .. })
        ));
    }
}
