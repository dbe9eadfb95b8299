//! Starting one rank process and observing its end: command line, environment, the PMI
//! socketpair, process-group and parent-death settings, and the wait for its exit status.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::{AsFd, AsRawFd};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

use nix::errno::Errno;
use nix::fcntl::{fcntl, FcntlArg, FdFlag};
use nix::sys::prctl;
use nix::sys::signal::{SigSet, Signal};
use nix::sys::wait::{waitid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{getpid, getppid, Pid};

use super::options::{Options, Output};

/// A started rank: the process and the launcher's end of its PMI connection.
#[derive(Debug)]
pub(crate) struct Started {
    /// The rank's process; its pid is also its process-group id.
    pub(crate) child: Child,
    /// The launcher's end of the PMI socketpair.
    pub(crate) pmi: UnixStream,
}

/// Starts rank `rank` of `options.ranks` in a process group of its own.
pub(crate) fn spawn(options: &Options, rank: u32, jobid: &str) -> io::Result<Started> {
    let (pmi, child_end) = UnixStream::pair()?;
    let child_fd = child_end.as_raw_fd();
    let size = options.ranks.to_string();
    let mut command = Command::new(&options.program);
    command
        .args(&options.args)
        // A gaspirun started under another launcher must not leak that launcher's PMI
        // coordinates: clients look at PMI_FD first, but other PMI libraries may not.
        .env_remove("PMI_PORT")
        .env_remove("PMI_ID")
        .env("PMI_FD", child_fd.to_string())
        .env("PMI_RANK", rank.to_string())
        .env("PMI_SIZE", &size)
        .env("PMI_JOBID", jobid)
        .env("MPI_LOCALNRANKS", &size)
        .env("MPI_LOCALRANKID", rank.to_string())
        // Own group per rank: killing the group also reaches what the rank started (a shell's
        // children), which would otherwise outlive the job and keep its output pipes open.
        .process_group(0);
    if let Some(provider) = &options.provider {
        command.env("GASPI_PROVIDER", provider);
    }
    // libfabric loads the PSM providers' libraries, whose crash handlers write a backtrace file
    // into the working directory for every rank that aborts; our own error reporting already
    // says which rank failed and why. A user who wants those files sets the variables to 0.
    for quiet in ["IPATH_NO_BACKTRACE", "HFI_NO_BACKTRACE"] {
        if std::env::var_os(quiet).is_none() {
            command.env(quiet, "1");
        }
    }
    // A rank outside the terminal's foreground group that reads the terminal would be stopped
    // by SIGTTIN, so only non-terminal stdin is handed on, and only to rank 0 (as mpiexec does).
    if rank != 0 || io::stdin().is_terminal() {
        command.stdin(Stdio::null());
    }
    match &options.output {
        Output::Tagged | Output::Raw => {
            command.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        Output::Separate(dir) => {
            let out = File::create(dir.join(format!("rank.{rank}.out")))?;
            let err = File::create(dir.join(format!("rank.{rank}.err")))?;
            command.stdout(out).stderr(err);
        }
    }
    let parent = getpid();
    // SAFETY: the hook only makes async-signal-safe calls (fcntl, prctl, getppid,
    // sigemptyset, pthread_sigmask, through nix's thin wrappers) and allocates nothing.
    unsafe {
        command.pre_exec(move || prepare_child(&child_end, parent));
    }
    let child = command.spawn()?;
    // The child has its copy; keeping ours (in the hook) would hide the rank's exit from the
    // PMI reader.
    drop(command);
    Ok(Started { child, pmi })
}

/// Runs in the forked child just before exec.
fn prepare_child(pmi: &impl AsFd, parent: Pid) -> io::Result<()> {
    // The socketpair is close-on-exec so that other ranks never inherit it; this rank's end
    // must survive exec.
    fcntl(pmi, FcntlArg::F_SETFD(FdFlag::empty()))?;
    // If gaspirun dies, its ranks die too. The signal fires when the forking *thread* exits,
    // which is why the launcher spawns only from its main thread.
    prctl::set_pdeathsig(Signal::SIGKILL)?;
    if getppid() != parent {
        // gaspirun died before the death signal was armed.
        return Err(Errno::ESRCH.into());
    }
    // gaspirun blocks termination signals to receive them with sigwait; the program must start
    // with none blocked.
    SigSet::empty().thread_set_mask()?;
    Ok(())
}

/// How a rank ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Exit {
    /// The exit status gaspirun reports for it: the exit code, or 128 + signal number.
    pub(crate) status: u8,
    /// Human-readable cause, e.g. "exited with status 3".
    pub(crate) description: String,
}

/// Blocks until process `pid` has ended, without reaping it: the zombie keeps the pid, and so
/// the rank's process-group id, from being reused until the launcher is done signalling it.
pub(crate) fn wait_for_exit(pid: u32) -> Exit {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOWAIT;
    loop {
        let err = match waitid(Id::Pid(Pid::from_raw(pid as i32)), flags) {
            Ok(WaitStatus::Exited(_, code)) => return exited(code),
            Ok(WaitStatus::Signaled(_, signal, _)) => return killed(signal as i32),
            // nix names the signal that ended the process and fails with EINVAL for one it has
            // no name for (a real-time signal); the zombie's status is in /proc too.
            Err(Errno::EINVAL) => match killed_by_from_proc(pid) {
                Some(signal) => return killed(signal),
                None => io::Error::from(Errno::EINVAL),
            },
            Err(Errno::EINTR) => continue,
            Err(errno) => io::Error::from(errno),
            // WEXITED reports nothing but exits and deaths by signal.
            Ok(other) => io::Error::other(format!("unexpected status {other:?}")),
        };
        return Exit {
            status: 1,
            description: format!("could not be waited for: {err}"),
        };
    }
}

/// The signal that killed the zombie `pid`, from the wait status that `/proc/<pid>/stat` shows
/// as its 52nd field (Linux 3.5 and later).
fn killed_by_from_proc(pid: u32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2, the command name in parentheses, may contain anything; fields 3.. follow it.
    let after_name = &stat[stat.rfind(')')? + 1..];
    let status: i32 = after_name
        .split_ascii_whitespace()
        .nth(52 - 3)?
        .parse()
        .ok()?;
    libc::WIFSIGNALED(status).then(|| libc::WTERMSIG(status))
}

/// The scheduling state of process `pid` in words (`/proc/<pid>/stat`, field 3): "running",
/// "sleeping", "stopped" (SIGSTOP, a terminal stop), ...; `None` when it cannot be read.
pub(crate) fn process_state(pid: u32) -> Option<String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Field 2, the command name in parentheses, may contain anything; the state follows it.
    let state = stat[stat.rfind(')')? + 1..].trim_start().chars().next()?;
    Some(
        match state {
            'R' => "running",
            'S' => "sleeping",
            'D' => "in uninterruptible sleep",
            'T' => "stopped",
            't' => "stopped by a tracer",
            'Z' => "exited, not yet reaped",
            'X' => "dead",
            'I' => "idle",
            other => return Some(format!("in state {other}")),
        }
        .to_owned(),
    )
}

/// The [`Exit`] of a process that exited with `code`.
fn exited(code: i32) -> Exit {
    Exit {
        status: (code & 0xff) as u8,
        description: format!("exited with status {code}"),
    }
}

/// The [`Exit`] of a process killed by signal number `signal`.
fn killed(signal: i32) -> Exit {
    let name = signal_name(signal)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    Exit {
        status: (128 + signal).clamp(0, 255) as u8,
        description: format!("was killed by signal {signal}{name}"),
    }
}

/// Names of the signals that commonly end ranks.
fn signal_name(signal: i32) -> Option<&'static str> {
    let signal = Signal::try_from(signal).ok()?;
    match signal {
        Signal::SIGHUP
        | Signal::SIGINT
        | Signal::SIGQUIT
        | Signal::SIGILL
        | Signal::SIGABRT
        | Signal::SIGBUS
        | Signal::SIGFPE
        | Signal::SIGKILL
        | Signal::SIGSEGV
        | Signal::SIGPIPE
        | Signal::SIGTERM => Some(signal.as_str()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions() {
        let exit = exited(3);
        assert_eq!(exit.status, 3);
        assert_eq!(exit.description, "exited with status 3");
        let exit = killed(Signal::SIGKILL as i32);
        assert_eq!(exit.status, 137);
        assert_eq!(exit.description, "was killed by signal 9 (SIGKILL)");
        assert_eq!(killed(Signal::SIGSEGV as i32).status, 139);
        assert_eq!(killed(10).description, "was killed by signal 10");
    }

    #[test]
    fn process_state_of_a_stopped_process_and_of_a_missing_one() {
        let mut child = Command::new("sh")
            .args(["-c", "kill -s STOP $$"])
            .spawn()
            .unwrap();
        let pid = child.id();
        let stopped = (0..500).any(|_| {
            std::thread::sleep(std::time::Duration::from_millis(10));
            process_state(pid).as_deref() == Some("stopped")
        });
        let _ = child.kill();
        child.wait().unwrap();
        assert!(stopped, "state {:?}", process_state(pid));
        assert_eq!(process_state(u32::MAX), None);
    }

    #[test]
    fn waits_without_reaping() {
        let mut child = Command::new("sh").args(["-c", "exit 5"]).spawn().unwrap();
        let exit = wait_for_exit(child.id());
        assert_eq!(exit.status, 5);
        // Still a zombie: the real wait reports the same status.
        assert_eq!(child.wait().unwrap().code(), Some(5));
    }

    #[test]
    fn waits_for_deaths_by_signal() {
        let mut child = Command::new("sh")
            .args(["-c", "kill -s TERM $$"])
            .spawn()
            .unwrap();
        let exit = wait_for_exit(child.id());
        assert_eq!(exit.status, 143);
        assert_eq!(exit.description, "was killed by signal 15 (SIGTERM)");
        child.wait().unwrap();
    }

    #[test]
    fn waits_for_deaths_by_real_time_signals() {
        let signal = libc::SIGRTMIN() + 4;
        let mut child = Command::new("sh")
            .args(["-c", &format!("kill -{signal} $$")])
            .spawn()
            .unwrap();
        let exit = wait_for_exit(child.id());
        assert_eq!(exit.status, (128 + signal) as u8);
        assert_eq!(exit.description, format!("was killed by signal {signal}"));
        // Still a zombie: the real wait reports the same signal.
        use std::os::unix::process::ExitStatusExt;
        assert_eq!(child.wait().unwrap().signal(), Some(signal));
    }
}
