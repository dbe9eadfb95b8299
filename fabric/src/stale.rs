//! Files in `/dev/shm` that libfabric shm would take for a new process's own endpoint region.
//!
//! libfabric 1.17's shm provider names an endpoint's region `<pid>:<uid>:<n>` in `/dev/shm` and
//! opens a file of that name that exists already instead of refusing it. Such a file is left by
//! a dead process of the same pid and user (a job killed together with its launcher, or
//! started without gaspirun, once pid numbers wrap at `pid_max`), or belongs to a live process
//! of another pid namespace sharing `/dev/shm`. Measured: over a full stale region `fi_enable`
//! failed with a bare `EBUSY`, and over an empty one the process died of `SIGBUS` inside
//! libfabric. Before its first shm endpoint a process owns no such file, so every one found
//! then is foreign: the endpoint is refused with an error naming the files. They are not
//! removed: one may be another namespace's live job's.

use std::sync::{Mutex, PoisonError};

use crate::{strerror, Error, Result};

/// Whether this process opened an shm endpoint: from then on, files of its pid may be its own.
/// Held while `/dev/shm` is looked at, so that no other thread's first endpoint creates its
/// region meanwhile.
static OPENED: Mutex<bool> = Mutex::new(false);

/// Refuses the first shm endpoint of this process while `/dev/shm` holds files under its pid
/// and user; notes the endpoint's opening otherwise.
pub(crate) fn check_first_shm_endpoint() -> Result<()> {
    let mut opened = OPENED.lock().unwrap_or_else(PoisonError::into_inner);
    if *opened {
        return Ok(());
    }
    // SAFETY: getuid takes no arguments, touches no memory of ours and cannot fail.
    let uid = unsafe { libc::getuid() };
    let prefix = format!("{}:{uid}:", std::process::id());
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
             left by a dead process of the same pid, or used by a process of another pid \
             namespace sharing /dev/shm: remove what no job uses",
            strerror(libc::EBUSY),
            found.join(", "),
        ),
    })
}
