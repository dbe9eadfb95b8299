//! The guard: a process of its own that removes the ranks' shared-memory files when gaspirun
//! itself is killed.
//!
//! gaspirun removes a rank's files once it has seen the rank exit (see the `leftovers`
//! module), and tears the job down in order on every signal it can catch. SIGKILL it cannot
//! catch: the ranks then die of their parent-death signal, and nobody would remove their
//! files, which fill the tmpfs and, once a pid is reused, meet a process that is not their
//! owner. So gaspirun first starts a guard (itself again, told by [`is_guard`]) in a process
//! group of its own, which a signal to gaspirun's group (Ctrl-C) does not reach, with nothing
//! of the job's output (a test harness reading gaspirun's output to its end must not wait for
//! the guard). Over a pipe it tells the guard the pid of every process whose files are the
//! job's; at its own orderly end it says `done`, and the guard leaves without doing anything.
//! When the pipe closes without `done`, gaspirun died: the guard waits for each of those
//! processes to be gone (the ranks die at once of their parent-death signal; a wrapped gaspi
//! process may take longer), for at most [`GONE_WAIT`], removes the files of those that are,
//! and leaves. A guard that ends first (killed) is reaped at once, and the job runs on
//! unguarded.

use std::io::{self, BufRead, Write};
use std::os::unix::process::CommandExt;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::prctl;

use super::leftovers;

/// The environment variable that, with [`GUARD_NAME`], makes `gaspirun` run as the guard of
/// the gaspirun that started it (internal: the guard reads that gaspirun's pipe on its
/// standard input).
const GUARD_ENV: &str = "GASPIRUN_GUARD";

/// The `argv[0]` the guard is started with. The variable alone was honoured from a user's
/// environment: `GASPIRUN_GUARD=1 gaspirun -n 2 prog` ran nothing and exited 0.
const GUARD_NAME: &str = "gaspirun-guard";

/// Whether this process is a guard that a gaspirun started.
pub(crate) fn is_guard() -> bool {
    std::env::var_os(GUARD_ENV).is_some()
        && std::env::args_os()
            .next()
            .is_some_and(|name| name == GUARD_NAME)
}

/// What gaspirun writes once it has torn its job down itself.
const DONE: &str = "done";

/// How long the guard of a killed gaspirun waits for the job's processes to be gone.
const GONE_WAIT: Duration = Duration::from_secs(10);

/// How often it looks meanwhile.
const GONE_POLL: Duration = Duration::from_millis(20);

/// How long gaspirun waits at its end for its dismissed guard to leave, and how often it
/// looks meanwhile (a guard leaves within a millisecond of reading `done`).
const DISMISS_WAIT: Duration = Duration::from_millis(500);
const DISMISS_POLL: Duration = Duration::from_millis(1);

/// gaspirun's end of its guard.
#[derive(Debug)]
pub(crate) struct Guard {
    child: Child,
    /// `None` once the guard cannot be written to (it died): the job runs on unguarded.
    pipe: Option<ChildStdin>,
}

impl Guard {
    /// Starts the guard of this gaspirun.
    pub(crate) fn start() -> io::Result<Guard> {
        let mut child = Command::new(std::env::current_exe()?)
            .arg0(GUARD_NAME)
            .env(GUARD_ENV, "1")
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .process_group(0)
            .spawn()?;
        let pipe = child.stdin.take();
        Ok(Guard { child, pipe })
    }

    /// The guard's pid, for waiting on its end.
    pub(crate) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Reaps a guard that has ended before its dismissal (killed, say), whose zombie stayed
    /// for the rest of the job, and returns `None`: the job runs on unguarded. A guard still
    /// running is handed back.
    pub(crate) fn reap(mut self) -> Option<Guard> {
        match self.child.try_wait() {
            Ok(None) => Some(self),
            Ok(Some(_)) | Err(_) => None,
        }
    }

    /// Tells the guard that process `pid` may leave files of the job behind.
    pub(crate) fn watch(&mut self, pid: u32) {
        if let Some(pipe) = &mut self.pipe {
            // A guard that is gone only costs the cleanup after a SIGKILL of gaspirun.
            if writeln!(pipe, "{pid}").is_err() {
                self.pipe = None;
            }
        }
    }

    /// Tells the guard that gaspirun tore the job down itself, and reaps it if it leaves
    /// within [`DISMISS_WAIT`]: gaspirun never waits on a guard that cannot run (stopped, say),
    /// which leaves as soon as it runs again, since `done` waits in its pipe.
    pub(crate) fn dismiss(mut self) {
        if let Some(mut pipe) = self.pipe.take() {
            let _ = writeln!(pipe, "{DONE}");
        }
        let until = Instant::now() + DISMISS_WAIT;
        while matches!(self.child.try_wait(), Ok(None)) && Instant::now() < until {
            thread::sleep(DISMISS_POLL);
        }
    }
}

/// The guard's side: reads pids from `input` (gaspirun's pipe) until it ends; unless gaspirun
/// said it was done, removes the files of every one of those processes that is gone within
/// [`GONE_WAIT`].
pub(crate) fn serve(input: impl BufRead) {
    // Its own name, so that `killall gaspirun` or `pkill -x gaspirun` aimed at the launcher
    // leaves its guard to clean up; a guard that keeps the name only loses that.
    let _ = prctl::set_name(c"gaspirun-guard");
    if let Some(pids) = orphaned(input) {
        leftovers::remove_when_gone(pids, GONE_WAIT, GONE_POLL);
    }
}

/// The pids read from `input`, or `None` when gaspirun said it was done.
fn orphaned(input: impl BufRead) -> Option<Vec<u32>> {
    let mut pids = Vec::new();
    for line in input.lines() {
        // A read error is the pipe breaking: gaspirun is gone as surely as at end of file.
        let Ok(line) = line else { break };
        if line == DONE {
            return None;
        }
        if let Ok(pid) = line.parse() {
            pids.push(pid);
        }
    }
    Some(pids)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_dismissed_guard_removes_nothing_and_an_orphaned_one_has_the_pids() {
        assert_eq!(orphaned("12\n34\ndone\n".as_bytes()), None);
        assert_eq!(orphaned("12\n34\n".as_bytes()), Some(vec![12, 34]));
        assert_eq!(orphaned("12\n34".as_bytes()), Some(vec![12, 34]));
        assert_eq!(orphaned("".as_bytes()), Some(vec![]));
    }
}
