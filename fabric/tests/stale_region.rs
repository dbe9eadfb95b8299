//! libfabric shm names an endpoint's region in `/dev/shm` after the process's pid and user: a
//! region left there by a dead process of the same pid (a job that was killed with its
//! launcher, pid numbers wrapping at a few tens of thousands) keeps a new endpoint from
//! opening. The error must name the file, not just "Device or resource busy". One test in a
//! process of its own, so that no other endpoint of this pid exists.

use std::os::unix::fs::MetadataExt;

use gaspi_fabric::Endpoint;

#[test]
fn a_stale_shm_region_of_this_pid_is_named_in_the_error() {
    let uid = std::fs::metadata("/proc/self")
        .expect("this process's /proc entry")
        .uid();
    let stale = format!("/dev/shm/{}:{uid}:0", std::process::id());
    std::fs::write(&stale, b"").expect("creating the stale region");
    let opened = Endpoint::<u32>::open("shm", false, false, 1024);
    let _ = std::fs::remove_file(&stale);
    let err = opened
        .err()
        .expect("the endpoint does not open over a region not its own");
    assert!(err.to_string().contains(&stale), "{err}");
}
