//! Shared-memory files a dead rank leaves behind.
//!
//! A rank that is killed cannot unlink what it created in `/dev/shm`: its segment files
//! (`gaspi-<name>-<pid>-<n>`) and libfabric shm's endpoint regions (`<pid>:<ep>:<domain>` in
//! libfabric 1.17). Besides filling the tmpfs, a stale region becomes a hazard once the pid is
//! reused (pid numbers wrap at a few tens of thousands): the shm provider of a new process with
//! that pid finds a region that is not its own. The launcher removes them as soon as it has
//! seen the rank exit, before the pid can be handed out again.

use std::path::Path;

/// Where both kinds of files live.
const SHM_DIR: &str = "/dev/shm";

/// Whether `name` is a shared-memory file of process `pid`.
fn belongs_to(name: &str, pid: u32) -> bool {
    let pid = pid.to_string();
    if let Some(rest) = name.strip_prefix(&pid) {
        return rest.starts_with(':');
    }
    // gaspi-<name>-<pid>-<counter>: the pid is the second-to-last field.
    name.starts_with("gaspi-") && name.rsplit('-').nth(1) == Some(pid.as_str())
}

/// Removes the files of dead process `pid` from `dir`; best effort, as leftovers are a nuisance
/// and a hazard but not an error of the job.
fn remove_from(dir: &Path, pid: u32) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        if entry
            .file_name()
            .to_str()
            .is_some_and(|n| belongs_to(n, pid))
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// Removes the shared-memory files of rank process `pid`, which has exited.
pub(crate) fn remove(pid: u32) {
    remove_from(Path::new(SHM_DIR), pid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_the_processes_own_files() {
        assert!(belongs_to("1234:0:0", 1234));
        assert!(belongs_to("gaspi-seg3-1234-7", 1234));
        assert!(belongs_to("gaspi-raw-bench-1234-1", 1234));
        assert!(!belongs_to("12345:0:0", 1234));
        assert!(!belongs_to("gaspi-seg3-12345-7", 1234));
        assert!(!belongs_to("gaspi-1234-seg-7", 1234));
        assert!(!belongs_to("other-1234-1", 1234));
    }

    #[test]
    fn removes_leftovers_and_nothing_else() {
        let dir = std::env::temp_dir().join(format!("gaspirun-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        for name in ["4242:0:0", "gaspi-seg0-4242-1", "4243:0:0", "unrelated"] {
            std::fs::write(dir.join(name), b"x").expect("creating a file");
        }
        remove_from(&dir, 4242);
        let mut left: Vec<String> = std::fs::read_dir(&dir)
            .expect("listing")
            .flatten()
            .filter_map(|e| e.file_name().into_string().ok())
            .collect();
        left.sort();
        std::fs::remove_dir_all(&dir).expect("cleaning up");
        assert_eq!(left, ["4243:0:0", "unrelated"]);
    }
}
