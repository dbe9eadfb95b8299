//! libfabric shm opens an existing file of its endpoint's region name instead of refusing it:
//! a region left in `/dev/shm` by a dead process of the same pid in the same pid namespace
//! (a job that was killed with its launcher, pid numbers wrapping at a few tens of thousands)
//! kept a new endpoint from opening. The first endpoint now removes such files, and every other
//! file named after this process that it finds then; one it cannot remove (another user's,
//! here a directory of that name) refuses it with an error naming the file, not just "Device
//! or resource busy". Files of this pid in another pid namespace (gaspi's name or libfabric's
//! default) are a live process's and stay. One test in a process of its own, so that no other
//! endpoint or file of this process exists before.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use gaspi_fabric::Endpoint;

#[test]
fn stale_files_of_this_pid_are_removed_and_an_unremovable_region_is_named() {
    let uid = std::fs::metadata("/proc/self")
        .expect("this process's /proc entry")
        .uid();
    let pid = std::process::id();
    let namespace = gaspi_segments::pid_namespace();
    // libfabric's own name for this pid's first region, and gaspi's in the pid namespace no
    // inode number 1 can be: another namespace's process's.
    let others = [
        format!("/dev/shm/{pid}:{uid}:0"),
        format!("/dev/shm/gaspi-ep-1-{pid}-0"),
    ];
    let stale = [
        format!("/dev/shm/gaspi-ep-{namespace}-{pid}-0"),
        format!("/dev/shm/gaspi-seg3-{namespace}-{pid}-5"),
        std::env::temp_dir()
            .join(format!("gaspi-seg3-{namespace}-{pid}-6"))
            .display()
            .to_string(),
    ];
    for path in others.iter().chain(&stale) {
        std::fs::write(path, b"").expect("planting a file");
    }
    let unremovable = format!("/dev/shm/gaspi-ep-{namespace}-{pid}-1");
    std::fs::create_dir(&unremovable).expect("planting a directory");
    let refused = Endpoint::<u32>::open("shm", false, false, 1024);
    std::fs::remove_dir(&unremovable).expect("the directory is still there");
    let left: Vec<&String> = stale.iter().filter(|p| Path::new(p).exists()).collect();
    for path in &left {
        let _ = std::fs::remove_file(path);
    }
    let err = refused
        .err()
        .expect("the endpoint does not open over a region it cannot remove");
    assert!(err.to_string().contains(&unremovable), "{err}");
    assert!(!err.to_string().contains(&stale[0]), "{err}");
    assert!(left.is_empty(), "stale files of this pid left: {left:?}");
    // The unremovable region gone, an endpoint opens beside the other namespaces' files.
    let opened = Endpoint::<u32>::open("shm", false, false, 1024);
    let kept: Vec<bool> = others.iter().map(|p| Path::new(p).exists()).collect();
    for path in &others {
        let _ = std::fs::remove_file(path);
    }
    if let Err(e) = opened {
        panic!("an shm endpoint beside another pid namespace's files of this pid: {e}");
    }
    assert_eq!(kept, [true, true], "files of other namespaces: {others:?}");
}
