//! Shared-memory files a dead rank leaves behind.
//!
//! A rank that is killed cannot unlink what it created in `/dev/shm`: its segment files
//! (`gaspi-<name>-<pid>-<n>`) and libfabric shm's endpoint regions (`<pid>:<ep>:<domain>` in
//! libfabric 1.17). Besides filling the tmpfs, a stale region becomes a hazard once the pid is
//! reused (pid numbers wrap at a few tens of thousands): the shm provider of a new process with
//! that pid finds a region that is not its own. The launcher removes them as soon as it has
//! seen the rank exit, before the pid can be handed out again.
//!
//! A rank started through a wrapper (a shell, a script that does not `exec`) is another
//! process than the one that made the files; that one published its pid
//! ([`gaspi_pmi::pid_key`]), and its files go once it is gone too.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

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

/// Removes the shared-memory files of process `pid` if it is gone, and says whether it was:
/// a rank's gaspi process inside a wrapper, whose files are its own while it runs (a wrapper
/// may leave it behind). A zombie is gone: it will never touch its files again, and once its
/// wrapper died it waits for whoever adopted it to reap it.
pub(crate) fn remove_if_gone(pid: u32) -> bool {
    let Ok(raw) = i32::try_from(pid) else {
        return false;
    };
    let gone = kill(Pid::from_raw(raw), None) == Err(Errno::ESRCH) || zombie(pid);
    if gone {
        remove(pid);
    }
    gone
}

/// Removes the files of each process of `pids` once it is gone, looking every `poll` for at
/// most `within`; the files of those still running then stay (they are theirs).
pub(crate) fn remove_when_gone(mut pids: Vec<u32>, within: Duration, poll: Duration) {
    let until = Instant::now() + within;
    loop {
        pids.retain(|&pid| !remove_if_gone(pid));
        if pids.is_empty() || Instant::now() >= until {
            return;
        }
        thread::sleep(poll);
    }
}

/// Whether process `pid` has ended and waits to be reaped.
fn zombie(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
        // The state follows the command name in parentheses, which may contain anything.
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z'))
    })
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
