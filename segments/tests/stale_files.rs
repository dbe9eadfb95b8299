//! Files named after this process that a dead process of the same pid left (a job killed
//! together with its launcher, once pids wrap) go when this process allocates its first
//! segment: before, they took the names the new segment wanted (16 of them sent it to the
//! temporary directory) and kept their memory. Files of another pid namespace or another pid
//! stay. One test in a process of its own, so that it allocates nothing before.

use std::path::{Path, PathBuf};

use gaspi_segments::{pid_namespace, remove_stale_files, SegmentMemory};

#[test]
fn the_first_allocation_removes_this_pids_stale_files_and_nothing_else() {
    let pid = std::process::id();
    let namespace = pid_namespace();
    assert_ne!(namespace, 0, "this test needs /proc/self/ns/pid");
    let shm = Path::new("/dev/shm");
    // Every name the first segment called "stale" could take in `/dev/shm`, and more.
    let mut stale: Vec<PathBuf> = (0..20)
        .map(|n| shm.join(format!("gaspi-stale-{namespace}-{pid}-{n}")))
        .collect();
    stale.push(shm.join(format!("gaspi-ep-{namespace}-{pid}-0")));
    stale.push(std::env::temp_dir().join(format!("gaspi-stale-{namespace}-{pid}-20")));
    let parent = std::os::unix::process::parent_id();
    let others = [
        shm.join(format!("gaspi-stale-1-{pid}-0")),
        shm.join(format!("gaspi-stale-{namespace}-{parent}-0")),
    ];
    for path in stale.iter().chain(&others) {
        std::fs::write(path, b"x").expect("planting a file");
    }
    let segment = SegmentMemory::allocate(4096, "stale");
    let own = segment
        .as_ref()
        .ok()
        .and_then(|s| s.shm_path())
        .map(Path::to_path_buf);
    // The new segment's file may have the name of a removed one: it is its own.
    let left: Vec<&PathBuf> = stale
        .iter()
        .filter(|p| p.exists() && Some(*p) != own.as_ref())
        .collect();
    let kept: Vec<bool> = others.iter().map(|p| p.exists()).collect();
    for path in stale.iter().chain(&others) {
        if Some(path) != own.as_ref() {
            let _ = std::fs::remove_file(path);
        }
    }
    let segment = segment.expect("allocate");
    assert!(left.is_empty(), "stale files left: {left:?}");
    assert_eq!(kept, [true, true], "{others:?}");
    let path = segment.shm_path().expect("an allocated segment's file");
    assert_eq!(path.parent(), Some(shm), "{}", path.display());
    // Done once: a file of this process's name from now on is its own.
    assert_eq!(remove_stale_files(), 0);
    assert!(path.exists(), "{}", path.display());
}
