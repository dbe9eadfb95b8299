//! libfabric shm opens an existing file of its endpoint's region name instead of refusing it:
//! a region left in `/dev/shm` by a dead process of the same pid in the same pid namespace
//! (a job that was killed with its launcher, pid numbers wrapping at a few tens of thousands)
//! keeps a new endpoint from opening. The error must name the file, not just "Device or
//! resource busy". A region of libfabric's default name for this pid, as a process of another
//! pid namespace sharing `/dev/shm` has it, is no longer in the way. One test in a process of
//! its own, so that no other endpoint of this pid exists.

use std::os::unix::fs::MetadataExt;

use gaspi_fabric::Endpoint;

#[test]
fn a_stale_shm_region_of_this_pid_is_named_in_the_error() {
    let uid = std::fs::metadata("/proc/self")
        .expect("this process's /proc entry")
        .uid();
    let pid = std::process::id();
    // libfabric's own name for this pid's first region: another namespace's process's.
    let other = format!("/dev/shm/{pid}:{uid}:0");
    std::fs::write(&other, b"").expect("creating the other namespace's region");
    let namespace = gaspi_segments::pid_namespace();
    let stale = format!("/dev/shm/gaspi-ep-{namespace}-{pid}-0");
    std::fs::write(&stale, b"").expect("creating the stale region");
    let refused = Endpoint::<u32>::open("shm", false, false, 1024);
    std::fs::remove_file(&stale).expect("the stale region is still there");
    let err = refused
        .err()
        .expect("the endpoint does not open over a region not its own");
    assert!(err.to_string().contains(&stale), "{err}");
    // The stale region gone, an endpoint opens beside the other namespace's region.
    let opened = Endpoint::<u32>::open("shm", false, false, 1024);
    let _ = std::fs::remove_file(&other);
    if let Err(e) = opened {
        panic!("an shm endpoint beside another pid namespace's region of this pid: {e}");
    }
}
