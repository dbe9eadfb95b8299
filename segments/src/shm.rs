//! Shared-memory files that back allocated segments.
//!
//! Owns where such a file is created, what it is called, and when its name disappears.
//!
//! # Where
//!
//! `/dev/shm` (tmpfs, so the pages never go to disk), falling back to [`std::env::temp_dir`]
//! when `/dev/shm` does not exist, cannot be written, or cannot hold the file. A file meant for
//! memory every rank writes is *reserved* at creation ([`Space::Reserved`], `fallocate`): tmpfs
//! files are otherwise sparse, so a file that fit when it was created could kill the process
//! that first touches one of its pages with `SIGBUS` once the file system has filled up (the
//! ranks of a host create their segments at the same moment, each seeing all the space free:
//! measured, 4 ranks with 2 MiB of segments each in an 8 MiB `/dev/shm` died of `SIGBUS` at
//! their first write). Reserving allocates the pages (tmpfs zeroes them at first touch), about
//! 0.35 s per GiB on tmpfs; disk file systems reserve blocks without writing them. A file system
//! that cannot reserve (`EOPNOTSUPP`) gets a sparse file, as does a file created
//! [`Space::Sparse`]: for those, the free space reported before creation is the only check, so a
//! concurrent consumer of the same file system can still cause `SIGBUS` later. Note that a
//! disk-backed temporary directory works but lets the kernel write dirty segment pages back to
//! disk.
//!
//! # Name
//!
//! `gaspi-<name>-<pidns>-<pid>-<n>`, with `<name>` reduced to ASCII letters, digits, `_` and `.`
//! (so the pid is always the second-to-last `-`-separated field, and the pid namespace the one
//! before it), `<pidns>` the inode number of the creator's pid namespace (`/proc/self/ns/pid`; 0
//! where that cannot be read) and `<n>` a process-wide counter. The pid alone names a process
//! only within its pid namespace: jobs in containers that share the host's `/dev/shm` (`docker
//! --ipc=host`) have ranks of equal pids, and a launcher removing the files of its dead rank 7
//! by pid alone removed those of another job's live rank 7 (measured: two 2-rank jobs under
//! `unshare -p -f`, the second one's end took every file of the first, still running). Files
//! are created exclusively with mode `0600`: an existing file is never reused, and only
//! processes of the same user (the other ranks on the host) can open it.
//!
//! # Lifetime and crashes
//!
//! The file must keep its name for as long as other processes may still need to open it, so it
//! is *not* unlinked at creation. It is unlinked when the owning [`ShmFile`] is dropped, or
//! earlier through [`ShmFile::unlink`] once every interested process has mapped it (an existing
//! mapping stays valid after the unlink). A process that dies without running destructors
//! leaves its files behind until the next reboot; the pid in the name is there so that a
//! launcher or cleanup script can recognise files of dead processes and remove them. Calling
//! `unlink` as early as possible keeps that window short. A normal exit that skips destructors
//! (`process::exit`, or a guard kept in a static) still removes the names: an `atexit` handler
//! removes those this process created and still has. Files left by a dead process whose pid a
//! new process of the same pid namespace gets go when that one creates its first file (see
//! [`remove_stale_files`]).

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io;
use std::mem::MaybeUninit;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Once, PoisonError};

use crate::error::{Error, Result};
use crate::range::to_u64;
use crate::stale::remove_stale_files;

/// Directory tried first for segment files.
pub(crate) const SHM_DIR: &str = "/dev/shm";

/// Longest fragment of the caller's name kept in a file name; keeps names far below `NAME_MAX`.
const MAX_NAME_FRAGMENT: usize = 64;

/// How many names one creation tries before giving up on a directory.
///
/// A name can already be taken only by a file left behind by a dead process that had the same
/// pid and that [`remove_stale_files`] could not remove (another user's), so a handful of tries
/// suffices.
const NAME_ATTEMPTS: usize = 16;

/// Whether a new file's storage is allocated when it is created (see "Where").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// Allocated at creation: a file system without room refuses the file then, instead of
    /// a write into it crashing the writer later.
    Reserved,
    /// Allocated page by page as the memory is first touched; only the free space at creation
    /// is checked. For large areas of which little is ever touched.
    Sparse,
}

/// Source of the `<n>` part of file names, unique within this process.
static NEXT_FILE_NUMBER: AtomicU64 = AtomicU64::new(0);

/// The names this process created and has not removed, with the creating pid, removed when
/// the process exits normally (`exit`, or a return from `main`). Neither runs the destructors
/// of what statics or other threads hold, nor of what a `process::exit` skipped, so a context
/// kept to the end left its files in `/dev/shm` (memory) until reboot, with no launcher to
/// remove them (a job of one rank, started by hand). Abnormal ends still leave them (see
/// "Lifetime and crashes").
static LIVE: Mutex<Vec<(PathBuf, u32)>> = Mutex::new(Vec::new());

/// The pid namespace of this process as segment file names carry it (the `<pidns>` part,
/// see [`ShmOwner`]): the inode number of `/proc/self/ns/pid`, or 0 where that cannot be read.
pub fn pid_namespace() -> u64 {
    std::fs::metadata("/proc/self/ns/pid").map_or(0, |m| m.ino())
}

/// The process that created a segment's shared-memory file, as the file's name says.
///
/// Such a file is named `gaspi-<name>-<pidns>-<pid>-<n>` (see [`SegmentMemory::allocate`]). A
/// process killed before it could remove its files leaves them behind; a launcher that saw it
/// die finds them with [`ShmOwner::of`]. A pid names a process only within its pid namespace,
/// so both must match: jobs in containers that share the host's `/dev/shm` have equal pids.
///
/// [`SegmentMemory::allocate`]: crate::SegmentMemory::allocate
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShmOwner {
    /// The creator's pid namespace, as [`pid_namespace`] gives it.
    pub pid_namespace: u64,
    /// The creator's pid within that namespace.
    pub pid: u32,
}

impl ShmOwner {
    /// This process.
    pub fn this_process() -> ShmOwner {
        ShmOwner {
            pid_namespace: pid_namespace(),
            pid: std::process::id(),
        }
    }

    /// The start of the names of this owner's files of `kind` (`gaspi-<kind>-<pidns>-<pid>-`):
    /// a file is named so followed by its number. `kind` is a segment's name reduced to a
    /// file name's safe characters, or a name of the same shape (libfabric shm endpoint
    /// regions are `ep`, see `gaspi_fabric`), so that [`of`](Self::of) tells the owner of
    /// every such file and a launcher removes them together.
    pub fn file_prefix(&self, kind: &str) -> String {
        format!("gaspi-{kind}-{}-{}-", self.pid_namespace, self.pid)
    }

    /// The creator of the segment file called `file_name` (no directory), or `None` when the
    /// name is not one of a segment file.
    pub fn of(file_name: &str) -> Option<ShmOwner> {
        let rest = file_name.strip_prefix("gaspi-")?;
        // `<name>` holds no '-', so the fields are found from the end.
        let mut fields = rest.rsplit('-');
        fields.next()?.parse::<u64>().ok()?;
        let pid = fields.next()?.parse().ok()?;
        let pid_namespace = fields.next()?.parse().ok()?;
        fields.next()?;
        Some(ShmOwner { pid_namespace, pid })
    }

    /// Removes this owner's files (those whose name [`of`](Self::of) says are its) from `dir`,
    /// and says how many went. Best effort: a file that cannot be removed stays, and one that
    /// another process removed meanwhile counts as gone. Only for an owner known to be dead,
    /// or this process before it made any file (see [`remove_stale_files`]).
    pub fn remove_files_in(&self, dir: &Path) -> usize {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return 0;
        };
        entries
            .flatten()
            .filter(|entry| {
                entry
                    .file_name()
                    .to_str()
                    .is_some_and(|name| ShmOwner::of(name) == Some(*self))
            })
            .filter(|entry| match std::fs::remove_file(entry.path()) {
                Ok(()) => true,
                Err(err) => err.kind() == io::ErrorKind::NotFound,
            })
            .count()
    }
}

/// Registers [`remove_live_names`] with `atexit`, once per process.
static AT_EXIT: Once = Once::new();

/// Notes a name this process created, to be removed at exit if still there.
fn note_live(path: &Path, pid: u32) {
    AT_EXIT.call_once(|| {
        // SAFETY: `remove_live_names` never unwinds into `exit`: it locks without waiting,
        // removes files and ignores failures, none of which panics. A failed registration
        // leaves names behind at such an exit, as without one.
        unsafe {
            libc::atexit(remove_live_names);
        }
    });
    LIVE.lock()
        .unwrap_or_else(PoisonError::into_inner)
        .push((path.to_path_buf(), pid));
}

/// Forgets a name this process removed.
fn note_removed(path: &Path) {
    let mut live = LIVE.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(at) = live.iter().position(|(p, _)| p == path) {
        live.swap_remove(at);
    }
}

/// Removes the names this process created and still has, at its exit. Names a forked child
/// inherited stay (they are its parent's, whose peers may still open them); names another
/// thread is registering at the moment of the exit are left, as after a crash, rather than
/// the exit waiting for its lock.
extern "C" fn remove_live_names() {
    let mut live = match LIVE.try_lock() {
        Ok(live) => live,
        Err(std::sync::TryLockError::Poisoned(e)) => e.into_inner(),
        Err(std::sync::TryLockError::WouldBlock) => return,
    };
    let me = std::process::id();
    for (path, _) in live.iter().filter(|(_, pid)| *pid == me) {
        let _ = std::fs::remove_file(path);
    }
    live.clear();
}

/// A shared-memory file created by this process, unlinked when dropped.
#[derive(Debug)]
pub(crate) struct ShmFile {
    /// `None` once the name has been unlinked.
    path: Option<PathBuf>,
    /// Process that created the file.
    owner_pid: u32,
}

impl ShmFile {
    /// Creates a new, zero-filled file of `len` bytes for the segment called `name`, its
    /// storage allocated as `space` says.
    ///
    /// Returns the guard that owns the name and the open file, which the caller maps and may
    /// then close.
    pub(crate) fn create(name: &str, len: usize, space: Space) -> Result<(ShmFile, File)> {
        Self::create_in(
            &[PathBuf::from(SHM_DIR), std::env::temp_dir()],
            name,
            len,
            space,
        )
    }

    /// Like [`ShmFile::create`], trying the directories `dirs` in order.
    fn create_in(
        dirs: &[PathBuf],
        name: &str,
        len: usize,
        space: Space,
    ) -> Result<(ShmFile, File)> {
        remove_stale_files();
        let fragment = file_name_fragment(name);
        let mut failures = Vec::new();
        let mut last_error = io::Error::from_raw_os_error(libc::ENOENT);
        for dir in dirs {
            match Self::create_in_dir(dir, &fragment, len, space) {
                Ok(created) => return Ok(created),
                Err(err) => {
                    failures.push(format!("{}: {err}", dir.display()));
                    last_error = err;
                }
            }
        }
        Err(Error::Io {
            context: format!(
                "cannot create a shared-memory file of {len} bytes for segment {name:?} ({})",
                failures.join("; ")
            ),
            source: last_error,
        })
    }

    /// Creates the file in `dir` and sizes it to `len` bytes.
    fn create_in_dir(
        dir: &Path,
        fragment: &str,
        len: usize,
        space: Space,
    ) -> io::Result<(ShmFile, File)> {
        if let Some(free) = free_bytes(dir) {
            if free < to_u64(len) {
                return Err(io::Error::from_raw_os_error(libc::ENOSPC));
            }
        }
        let owner = ShmOwner::this_process();
        let owner_pid = owner.pid;
        let prefix = owner.file_prefix(fragment);
        let mut last_error = io::Error::from(io::ErrorKind::AlreadyExists);
        for _ in 0..NAME_ATTEMPTS {
            let number = NEXT_FILE_NUMBER.fetch_add(1, Ordering::Relaxed);
            let path = dir.join(format!("{prefix}{number}"));
            let opened = OpenOptions::new()
                .read(true)
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&path);
            match opened {
                Ok(file) => {
                    note_live(&path, owner_pid);
                    // The guard exists before the sizing so that a failure unlinks the file.
                    let guard = ShmFile {
                        path: Some(path),
                        owner_pid,
                    };
                    match space {
                        Space::Reserved => reserve(&file, len)?,
                        Space::Sparse => file.set_len(to_u64(len))?,
                    }
                    return Ok((guard, file));
                }
                Err(err) if err.kind() == io::ErrorKind::AlreadyExists => last_error = err,
                Err(err) => return Err(err),
            }
        }
        Err(last_error)
    }

    /// The file's path, or `None` once it has been unlinked.
    pub(crate) fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Removes the file's name now instead of at drop. Mappings of the file stay valid.
    ///
    /// Succeeds if the name is already gone. On failure the name is kept, so that dropping the
    /// guard tries again.
    pub(crate) fn unlink(&mut self) -> Result<()> {
        let Some(path) = &self.path else {
            return Ok(());
        };
        match std::fs::remove_file(path) {
            Ok(()) => {}
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(Error::Io {
                    context: format!("cannot unlink shared-memory file {}", path.display()),
                    source,
                })
            }
        }
        note_removed(path);
        self.path = None;
        Ok(())
    }
}

impl Drop for ShmFile {
    fn drop(&mut self) {
        // A forked child inherits the guard but not the ownership: only the creator may remove
        // a name that its other processes may still be about to open.
        if std::process::id() != self.owner_pid {
            return;
        }
        if let Some(path) = &self.path {
            // Nothing useful can be done about a failure here; the file is at worst left behind
            // like after a crash (see the module documentation).
            let _ = std::fs::remove_file(path);
            note_removed(path);
        }
    }
}

/// Sizes the new, empty `file` to `len` bytes with its storage allocated, or sparse where the
/// file system cannot allocate ahead.
fn reserve(file: &File, len: usize) -> io::Result<()> {
    let size = libc::off_t::try_from(len).map_err(|_| io::Error::from_raw_os_error(libc::EFBIG))?;
    loop {
        // SAFETY: `fallocate` reads and writes no memory of this process; the descriptor is
        // open for as long as `file` is borrowed.
        let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, size) };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // tmpfs gives up an allocation a signal interrupted, and releases what it took.
            Some(libc::EINTR) => {}
            Some(libc::EOPNOTSUPP) => return file.set_len(to_u64(len)),
            _ => return Err(err),
        }
    }
}

/// Reduces a caller-chosen segment name to characters that are safe in a file name.
fn file_name_fragment(name: &str) -> String {
    name.chars()
        .take(MAX_NAME_FRAGMENT)
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Bytes an unprivileged process can still allocate in the file system holding `dir`, or
/// `None` if that cannot be determined (creating the file will then tell).
fn free_bytes(dir: &Path) -> Option<u64> {
    let c_dir = CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut stats = MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: `c_dir` is a NUL-terminated string that outlives the call, and `stats` is valid
    // for writes of one `statvfs`, which is all the call writes.
    let rc = unsafe { libc::statvfs(c_dir.as_ptr(), stats.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: `statvfs` returned 0, so it filled in `stats`.
    let stats = unsafe { stats.assume_init() };
    #[allow(clippy::unnecessary_cast)] // The field types differ between targets.
    let (blocks, block_size) = (stats.f_bavail as u64, stats.f_frsize as u64);
    Some(blocks.saturating_mul(block_size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_reduced_to_safe_fragments() {
        assert_eq!(file_name_fragment("halo/x y"), "halo_x_y");
        assert_eq!(file_name_fragment("a.b_c-d"), "a.b_c_d");
        assert_eq!(
            file_name_fragment(&"n".repeat(300)).len(),
            MAX_NAME_FRAGMENT
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates a shared-memory file: miri runs no statvfs or fallocate"
    )]
    fn unusable_directories_are_skipped() {
        let missing = PathBuf::from("/nonexistent-gaspi-segments-test-dir");
        let fallback = std::env::temp_dir();
        let (guard, file) = ShmFile::create_in(
            &[missing, fallback.clone()],
            "fallback",
            4096,
            Space::Reserved,
        )
        .expect("fallback");
        let path = guard.path().expect("not unlinked").to_path_buf();
        assert_eq!(path.parent(), Some(fallback.as_path()));
        assert_eq!(file.metadata().expect("metadata").len(), 4096);
        drop(guard);
        assert!(!path.exists());
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates a shared-memory file: miri runs no statvfs or fallocate"
    )]
    fn reserved_files_are_allocated_in_either_directory_and_sparse_ones_are_not() {
        use std::os::unix::fs::MetadataExt;
        let len = 1 << 20;
        for dir in [PathBuf::from(SHM_DIR), std::env::temp_dir()] {
            let dirs = [dir.clone()];
            let (_reserved, file) =
                ShmFile::create_in(&dirs, "reserved", len, Space::Reserved).expect("reserved");
            let meta = file.metadata().expect("metadata");
            assert_eq!(meta.len(), to_u64(len));
            // `st_blocks` counts 512-byte units, whatever the file system's block size.
            assert!(
                meta.blocks() * 512 >= to_u64(len),
                "{}: {} blocks",
                dir.display(),
                meta.blocks()
            );
            let (_sparse, file) =
                ShmFile::create_in(&dirs, "sparse", len, Space::Sparse).expect("sparse");
            let meta = file.metadata().expect("metadata");
            assert_eq!((meta.len(), meta.blocks()), (to_u64(len), 0));
        }
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates a shared-memory file: miri runs no statvfs or fallocate"
    )]
    fn too_little_free_space_is_an_error_not_a_sigbus() {
        let dirs = [std::env::temp_dir()];
        let err =
            ShmFile::create_in(&dirs, "huge", usize::MAX, Space::Sparse).expect_err("cannot fit");
        assert!(
            matches!(&err, Error::Io { source, .. } if source.raw_os_error() == Some(libc::ENOSPC)),
            "{err:?}"
        );
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates a shared-memory file: miri runs no statvfs or fallocate"
    )]
    fn unlink_removes_the_name_once() {
        let (mut guard, _file) = ShmFile::create("unlink", 1, Space::Reserved).expect("create");
        let path = guard.path().expect("not unlinked").to_path_buf();
        assert!(path.exists());
        guard.unlink().expect("unlink");
        assert!(!path.exists());
        assert_eq!(guard.path(), None);
        guard.unlink().expect("second unlink is a no-op");
    }

    #[test]
    #[cfg_attr(
        miri,
        ignore = "creates a shared-memory file: miri runs no statvfs or fallocate"
    )]
    fn a_files_name_tells_its_creator() {
        let (guard, _file) = ShmFile::create("owner.x_1", 1, Space::Sparse).expect("create");
        let path = guard.path().expect("not unlinked");
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .expect("a UTF-8 name");
        let own = ShmOwner {
            pid_namespace: pid_namespace(),
            pid: std::process::id(),
        };
        assert_eq!(ShmOwner::of(name), Some(own));
        assert_eq!(ShmOwner::this_process(), own);
        let ep = format!("{}0", own.file_prefix("ep"));
        assert_eq!(ShmOwner::of(&ep), Some(own), "{ep}");
    }

    #[test]
    fn names_not_of_segment_files_have_no_creator() {
        assert_eq!(
            ShmOwner::of("gaspi-seg3-99-1234-7"),
            Some(ShmOwner {
                pid_namespace: 99,
                pid: 1234
            })
        );
        for name in [
            "1234:0:0",
            "gaspi-99-1234-7",
            "gaspi-seg3-1234-7x",
            "gaspi-seg3-ns-1234-7",
            "other-seg3-99-1234-7",
        ] {
            assert_eq!(ShmOwner::of(name), None, "{name}");
        }
    }
}
