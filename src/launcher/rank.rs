//! Starting one rank process and observing its end: command line, environment, the PMI
//! socketpair, process-group and parent-death settings, and the wait for its exit status.

use std::fs::File;
use std::io::{self, IsTerminal};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};

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
    let parent = std::process::id() as libc::pid_t;
    // SAFETY: the hook only makes async-signal-safe calls (fcntl, prctl, getppid,
    // sigemptyset, pthread_sigmask) and allocates nothing.
    unsafe {
        command.pre_exec(move || prepare_child(child_fd, parent));
    }
    let child = command.spawn()?;
    // The child has its copy; keeping ours would hide the rank's exit from the PMI reader.
    drop(child_end);
    Ok(Started { child, pmi })
}

/// Runs in the forked child just before exec.
fn prepare_child(pmi_fd: i32, parent: libc::pid_t) -> io::Result<()> {
    let check = |ret: libc::c_int| {
        if ret == -1 {
            Err(io::Error::last_os_error())
        } else {
            Ok(())
        }
    };
    // SAFETY (all calls): plain system calls on this process's own state.
    unsafe {
        // The socketpair is close-on-exec so that other ranks never inherit it; this rank's
        // end must survive exec.
        check(libc::fcntl(pmi_fd, libc::F_SETFD, 0))?;
        // If gaspirun dies, its ranks die too. The signal fires when the forking *thread*
        // exits, which is why the launcher spawns only from its main thread.
        check(libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL))?;
        if libc::getppid() != parent {
            // gaspirun died before the death signal was armed.
            return Err(io::Error::from_raw_os_error(libc::ESRCH));
        }
        // gaspirun blocks termination signals to receive them with sigwait; the program must
        // start with none blocked.
        let mut set: libc::sigset_t = std::mem::zeroed();
        check(libc::sigemptyset(&mut set))?;
        let ret = libc::pthread_sigmask(libc::SIG_SETMASK, &set, std::ptr::null_mut());
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
    }
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
    loop {
        // SAFETY: siginfo_t is plain data; all-zero is a valid value.
        let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
        // SAFETY: `info` is valid for writes for the duration of the call.
        let ret = unsafe {
            libc::waitid(
                libc::P_PID,
                pid as libc::id_t,
                &mut info,
                libc::WEXITED | libc::WNOWAIT,
            )
        };
        if ret == 0 {
            // SAFETY: waitid succeeded for a child, so the SIGCHLD fields are initialised.
            let value = unsafe { info.si_status() };
            return describe(info.si_code, value);
        }
        let err = io::Error::last_os_error();
        if err.kind() != io::ErrorKind::Interrupted {
            return Exit {
                status: 1,
                description: format!("could not be waited for: {err}"),
            };
        }
    }
}

/// Turns a `waitid` result (`si_code`, `si_status`) into an [`Exit`].
fn describe(code: i32, value: i32) -> Exit {
    if code == libc::CLD_EXITED {
        return Exit {
            status: (value & 0xff) as u8,
            description: format!("exited with status {value}"),
        };
    }
    let name = signal_name(value)
        .map(|n| format!(" ({n})"))
        .unwrap_or_default();
    Exit {
        status: (128 + value).clamp(0, 255) as u8,
        description: format!("was killed by signal {value}{name}"),
    }
}

/// Names of the signals that commonly end ranks.
pub(crate) fn signal_name(signal: i32) -> Option<&'static str> {
    Some(match signal {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_descriptions() {
        let exited = describe(libc::CLD_EXITED, 3);
        assert_eq!(exited.status, 3);
        assert_eq!(exited.description, "exited with status 3");
        let killed = describe(libc::CLD_KILLED, libc::SIGKILL);
        assert_eq!(killed.status, 137);
        assert_eq!(killed.description, "was killed by signal 9 (SIGKILL)");
        assert_eq!(describe(libc::CLD_DUMPED, libc::SIGSEGV).status, 139);
    }

    #[test]
    fn waits_without_reaping() {
        let mut child = Command::new("sh").args(["-c", "exit 5"]).spawn().unwrap();
        let exit = wait_for_exit(child.id());
        assert_eq!(exit.status, 5);
        // Still a zombie: the real wait reports the same status.
        assert_eq!(child.wait().unwrap().code(), Some(5));
    }
}
