//! Shared-memory files a dead rank leaves behind.
//!
//! A rank that is killed cannot unlink what it created in `/dev/shm`: its segment files
//! (`gaspi-<name>-<pidns>-<pid>-<n>`) and libfabric shm's endpoint regions, which gaspi names
//! alike (`gaspi-ep-<pidns>-<pid>-<n>`, see `gaspi_fabric`'s `stale` module). Besides filling
//! the tmpfs, a stale region becomes a hazard once the pid is reused (pid numbers wrap at a
//! few tens of thousands): the shm provider of a new process with that pid finds a region
//! that is not its own. The launcher removes them as soon as it has seen the rank exit,
//! before the pid can be handed out again.
//!
//! A segment file goes to the temporary directory instead when `/dev/shm` lacks the room (see
//! `gaspi_segments`' `shm` module), so the rank's segment files are looked for there too.
//!
//! A pid names a process only within its pid namespace, and containers sharing the host's
//! `/dev/shm` run jobs whose ranks have the same pids: a file is the rank's only if its name
//! also carries gaspirun's pid namespace (the ranks are its children, so they share it).
//! libfabric's own region name, `<pid>:<uid>:<n>`, carries none, so such a file is never
//! removed: no endpoint gaspi opens is named so (the benchmark's raw-libfabric side included,
//! as its endpoints are opened by `gaspi_fabric` too), and a process of another pid namespace
//! with the pid of a dead rank may be using one.
//!
//! A rank started through a wrapper (a shell, a script that does not `exec`) is another
//! process than the one that made the files; that one published its pid
//! ([`gaspi_pmi::pid_key`]), and its files go once it is gone too.

use std::path::Path;
use std::thread;
use std::time::{Duration, Instant};

use gaspi_segments::{pid_namespace, ShmOwner};
use nix::errno::Errno;
use nix::sys::signal::kill;
use nix::unistd::Pid;

/// Where both kinds of files live.
const SHM_DIR: &str = "/dev/shm";

/// Removes the files of dead process `pid` (of gaspirun's pid namespace) from `dir`; best
/// effort, as leftovers are a nuisance and a hazard but not an error of the job.
fn remove_from(dir: &Path, pid: u32) {
    ShmOwner {
        pid_namespace: pid_namespace(),
        pid,
    }
    .remove_files_in(dir);
}

/// Removes the shared-memory files of rank process `pid`, which has exited: in `/dev/shm`,
/// and its segment files in the temporary directory (the rank's, whose environment is the
/// launcher's).
pub(crate) fn remove(pid: u32) {
    remove_from(Path::new(SHM_DIR), pid);
    remove_from(&std::env::temp_dir(), pid);
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

    /// Whether `name` is a shared-memory file of process `pid` of pid namespace `namespace`.
    fn belongs_to(name: &str, pid: u32, namespace: u64) -> bool {
        ShmOwner::of(name)
            == Some(ShmOwner {
                pid_namespace: namespace,
                pid,
            })
    }

    #[test]
    fn recognises_only_the_processes_own_files() {
        let own = |name| belongs_to(name, 1234, 99);
        assert!(own("gaspi-seg3-99-1234-7"));
        assert!(own("gaspi-ep-99-1234-0"));
        assert!(!own("gaspi-seg3-99-12345-7"));
        assert!(!own("gaspi-1234-seg-7"));
        assert!(!own("other-99-1234-1"));
        // The same pid in another pid namespace is another process.
        assert!(!own("gaspi-seg3-98-1234-7"));
        assert!(!own("gaspi-seg3-1234-7"));
        // libfabric's default region name carries no pid namespace: it may be another
        // namespace's process's (the launcher used to take it for the rank's).
        assert!(!own("1234:0:0"));
    }

    /// What is left in a scratch directory of `names` after `remove_from` of process 4242.
    fn left_of(names: &[&str]) -> Vec<String> {
        let dir = std::env::temp_dir().join(format!("gaspirun-leftovers-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("creating a scratch directory");
        for name in names {
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
        left
    }

    #[test]
    fn removes_leftovers_and_nothing_else() {
        let own = format!("gaspi-seg0-{}-4242-1", pid_namespace());
        let region = format!("gaspi-ep-{}-4242-0", pid_namespace());
        // Pid 4242 of another pid namespace (which no inode number 1 can be).
        let foreign = "gaspi-seg0-1-4242-1";
        // libfabric's default name for a region of a process with pid 4242, in whichever
        // namespace: not the rank's, which names its regions as `region`.
        let unnamespaced = "4242:0:0";
        let names = [
            unnamespaced,
            &own,
            &region,
            foreign,
            "4243:0:0",
            "unrelated",
        ];
        assert_eq!(
            left_of(&names),
            [unnamespaced, "4243:0:0", foreign, "unrelated"]
        );
    }

    #[test]
    fn a_dead_ranks_segment_files_go_from_the_temporary_directory_too() {
        // A process id no process has (beyond pid_max), so no live process's files go.
        let pid = u32::MAX - 7;
        let name = format!("gaspi-seg0-{}-{pid}-3", pid_namespace());
        let path = std::env::temp_dir().join(&name);
        std::fs::write(&path, b"x").expect("creating a file in the temporary directory");
        remove(pid);
        let kept = path.exists();
        let _ = std::fs::remove_file(&path);
        assert!(!kept, "{name} is still in the temporary directory");
    }
}
