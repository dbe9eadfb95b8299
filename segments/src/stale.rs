//! Files named after this process that a dead process left: removed before this process
//! creates its first.
//!
//! A shared-memory file's name carries its creator's pid namespace and pid (see
//! [`ShmOwner`]). A process killed before it could remove its files leaves them behind, and
//! the launcher that saw it die removes them; but a job killed together with its launcher, a
//! job started without gaspirun, or a killed launcher leaves them to whichever process gets
//! the pid next (pid numbers wrap at `pid_max`, a few tens of thousands). Measured before this
//! module: such a file of libfabric shm's endpoint region made the new process's first
//! endpoint fail (`fi_enable`, `EBUSY`), and segment files whose names were taken went to the
//! temporary directory (disk-backed) or failed to be created, while the dead process's files
//! kept their memory until the new one's end.
//!
//! While this process lives, no other live process has its pid in its pid namespace, so every
//! file named after this process that exists before it created any was made by a dead
//! process: [`remove_stale_files`] removes them, once per process, and everything that
//! creates a file named so (segment and word files here, shm endpoint regions in
//! `gaspi_fabric`) calls it first. Files of other pids or pid namespaces are never touched,
//! nor is anything where the pid namespace cannot be read (all of those are named `0`, the
//! same for processes of different namespaces). A file that cannot be removed (another
//! user's, in the sticky `/dev/shm`) stays: a segment file then takes another name, and a
//! first shm endpoint is refused with an error naming it.

use std::path::Path;
use std::sync::{Mutex, PoisonError};

use crate::shm::{ShmOwner, SHM_DIR};

/// The process whose stale files were removed: this one once done, held while they are
/// removed so that no other thread creates a file meanwhile. A forked child is another pid,
/// whose stale files are still to remove.
static REMOVED_FOR: Mutex<Option<ShmOwner>> = Mutex::new(None);

/// Removes the shared-memory files named after this process ([`ShmOwner::this_process`]), in
/// `/dev/shm` and in the temporary directory, the first time it is called in this process,
/// and returns how many it removed (0 on every later call).
///
/// Every file found then was left by a dead process of the same pid and pid namespace, as
/// long as everything in this process that creates files named after it (with
/// [`ShmOwner::file_prefix`]) calls this before its first: [`SegmentMemory::allocate`] and
/// [`SharedWords::allocate`] do, and so does `gaspi_fabric` before its first shm endpoint.
/// Waits while another thread of this process removes them. Nothing is removed where the pid
/// namespace cannot be read ([`pid_namespace`] 0); a file that cannot be removed stays
/// (failures are not errors: a remaining file is at worst in the way of a name, as before).
///
/// [`SegmentMemory::allocate`]: crate::SegmentMemory::allocate
/// [`SharedWords::allocate`]: crate::SharedWords::allocate
/// [`pid_namespace`]: crate::pid_namespace
pub fn remove_stale_files() -> usize {
    let me = ShmOwner::this_process();
    let mut removed_for = REMOVED_FOR.lock().unwrap_or_else(PoisonError::into_inner);
    if *removed_for == Some(me) {
        return 0;
    }
    let removed = if me.pid_namespace == 0 {
        0
    } else {
        me.remove_files_in(Path::new(SHM_DIR)) + me.remove_files_in(&std::env::temp_dir())
    };
    *removed_for = Some(me);
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg_attr(miri, ignore = "lists and removes files")]
    fn removes_only_the_owners_files() {
        let dir = std::env::temp_dir().join(format!("gaspi-stale-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        let owner = ShmOwner {
            pid_namespace: 99,
            pid: 4242,
        };
        let own = ["gaspi-seg3-99-4242-7", "gaspi-ep-99-4242-0"].map(|n| dir.join(n));
        let others = [
            "gaspi-seg3-98-4242-7",
            "gaspi-seg3-99-42421-7",
            "gaspi-seg3-99-4242-x",
            "4242:0:0",
        ]
        .map(|n| dir.join(n));
        for path in own.iter().chain(&others) {
            std::fs::write(path, b"x").expect("creating a file");
        }
        // A directory of the owner's name cannot be removed as a file, and stays.
        let unremovable = dir.join("gaspi-seg4-99-4242-1");
        std::fs::create_dir(&unremovable).expect("creating a directory");
        let removed = owner.remove_files_in(&dir);
        let own_left = own.iter().filter(|p| p.exists()).count();
        let others_kept = others.iter().filter(|p| p.exists()).count();
        let unremovable_kept = unremovable.exists();
        std::fs::remove_dir_all(&dir).expect("cleaning up");
        assert_eq!((removed, own_left), (own.len(), 0));
        assert_eq!(others_kept, others.len());
        assert!(unremovable_kept);
    }
}
