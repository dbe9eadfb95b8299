//! Termination signals aimed at gaspirun itself (Ctrl-C, `kill`, a closed terminal). They are
//! received synchronously by a dedicated thread, so the job is torn down in order instead of
//! gaspirun dying and leaving the ranks' process groups behind.

use std::io;
use std::thread;

/// The signals that end a job.
const TERMINATING: [libc::c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// Proof that [`TERMINATING`] is blocked, with the set to wait on.
pub(crate) struct Blocked(libc::sigset_t);

/// Blocks the terminating signals in the calling thread and every thread created after it.
/// Must run before any other thread exists: a thread with them unblocked would take them with
/// the default action, which kills gaspirun at once.
pub(crate) fn block() -> io::Result<Blocked> {
    // SAFETY: sigset_t is plain data; sigemptyset initialises it before use.
    let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
    // SAFETY: `set` is a valid sigset_t for all calls.
    unsafe {
        libc::sigemptyset(&mut set);
        for signal in TERMINATING {
            libc::sigaddset(&mut set, signal);
        }
        let ret = libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        if ret != 0 {
            return Err(io::Error::from_raw_os_error(ret));
        }
    }
    Ok(Blocked(set))
}

impl Blocked {
    /// Calls `on_signal` with every terminating signal gaspirun receives, on a thread of its
    /// own, until it returns false.
    pub(crate) fn deliver(self, mut on_signal: impl FnMut(libc::c_int) -> bool + Send + 'static) {
        let set = self.0;
        thread::spawn(move || loop {
            let mut signal = 0;
            // SAFETY: `set` and `signal` are valid for the duration of the call.
            let ret = unsafe { libc::sigwait(&set, &mut signal) };
            // sigwait fails only for an invalid set; stop rather than spin.
            if ret != 0 || !on_signal(signal) {
                break;
            }
        });
    }
}
