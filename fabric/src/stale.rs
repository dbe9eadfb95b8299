//! The names of libfabric shm's endpoint regions in `/dev/shm`, and the files there that a new
//! endpoint would take for its own region.
//!
//! libfabric 1.17's shm provider names an endpoint's region after its source address, by
//! default `<pid>:<uid>:<n>`: two jobs in different pid namespaces sharing `/dev/shm`
//! (containers with `--ipc=host`) have ranks of equal pids, and the second job's could not open
//! their endpoints. Each shm endpoint here gets an address of its own instead,
//! `gaspi-ep-<pidns>-<pid>-<n>`: the shape of a segment file's name (see
//! [`gaspi_segments::ShmOwner`]), so that gaspirun removes a dead rank's regions with its
//! segment files.
//!
//! The provider opens a file of its region's name that exists already instead of refusing it.
//! Such a file is left by a dead process of the same pid in the same pid namespace (a job
//! killed together with its launcher, or started without gaspirun, once pid numbers wrap at
//! `pid_max`). Measured: over a full stale region `fi_enable` failed with a bare `EBUSY`, and
//! over an empty one the process died of `SIGBUS` inside libfabric. Before its first shm
//! endpoint a process owns no such file, so every one found then is a dead process's: the
//! first endpoint removes them, with every other file named after this process that was there
//! before its first ([`gaspi_segments::remove_stale_files`]). One that could not be removed
//! (another user's, in the sticky `/dev/shm`) refuses the endpoint with an error naming it.
//! Files of other pids or pid namespaces are never touched: they may be a live process's.

use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};

use crate::{strerror, Error, Result};

/// Whether this process opened an shm endpoint: from then on, files of its pid may be its own.
/// Held while `/dev/shm` is looked at, so that no other thread's first endpoint creates its
/// region meanwhile.
static OPENED: Mutex<bool> = Mutex::new(false);

/// The `<n>` of the next shm endpoint's region name, unique within this process.
static NEXT_ENDPOINT: AtomicU64 = AtomicU64::new(0);

/// The start of the region names of this process's shm endpoints: segment files' names of
/// kind `ep`, whose owner [`gaspi_segments::ShmOwner::of`] tells.
fn region_prefix() -> String {
    gaspi_segments::ShmOwner::this_process().file_prefix("ep")
}

/// The source address of a new shm endpoint, in libfabric's `FI_ADDR_STR` form: its region is
/// named after the address, without the prefix (see fi_shm(7), "Address Format"), and a
/// prefix other than `fi_shm://` adds nothing to the name.
pub(crate) fn next_shm_address() -> CString {
    let n = NEXT_ENDPOINT.fetch_add(1, Ordering::Relaxed);
    let address = format!("fi_ns://{}{n}", region_prefix());
    CString::new(address).expect("a name of ASCII letters, digits and separators has no NUL")
}

/// Removes, before the first shm endpoint of this process, the files named after this process
/// that dead processes left, and refuses the endpoint while `/dev/shm` still holds files of
/// its region names; notes the endpoint's opening otherwise.
pub(crate) fn check_first_shm_endpoint() -> Result<()> {
    let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    if *opened {
        return Ok(());
    }
    gaspi_segments::remove_stale_files();
    let prefix = region_prefix();
    let mut found: Vec<String> = std::fs::read_dir("/dev/shm")
        .map(|dir| {
            dir.flatten()
                .filter_map(|e| e.file_name().into_string().ok())
                .filter(|name| name.starts_with(&prefix))
                .map(|name| format!("/dev/shm/{name}"))
                .collect()
        })
        .unwrap_or_default();
    if found.is_empty() {
        *opened = true;
        return Ok(());
    }
    found.sort();
    Err(Error::Fabric {
        call: "fi_enable",
        code: libc::EBUSY,
        message: format!(
            "{} ({}): libfabric shm would take this for the region of this process; it is \
             left by a dead process of the same pid in this pid namespace, and this process \
             could not remove it",
            strerror(libc::EBUSY),
            found.join(", "),
        ),
    })
}
