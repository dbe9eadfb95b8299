//! Signals aimed at gaspirun itself: those that end a job (Ctrl-C, `kill`, a closed terminal,
//! Ctrl-\, an alarm) and those it passes on to the ranks (SIGUSR1, SIGUSR2, as `mpiexec.hydra`
//! does). They are received synchronously by a dedicated thread, so the job is torn down in
//! order instead of gaspirun dying of their default action, which left the ranks to their
//! parent-death SIGKILL without a SIGTERM first.

use std::io;
use std::thread;

use nix::sys::signal::{SigSet, Signal};

/// The signals that end a job. SIGQUIT ends it in order too rather than dumping gaspirun's
/// core: the ranks are what the user wants to stop.
const TERMINATING: [Signal; 5] = [
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGALRM,
];

/// The signals passed on to every rank's process group.
const FORWARDED: [Signal; 2] = [Signal::SIGUSR1, Signal::SIGUSR2];

/// Whether `signal` is passed on to the ranks rather than ending the job.
pub(crate) fn is_forwarded(signal: Signal) -> bool {
    FORWARDED.contains(&signal)
}

/// Proof that the handled signals are blocked, with the set to wait on.
pub(crate) struct Blocked(SigSet);

/// Blocks the terminating and forwarded signals in the calling thread and every thread created
/// after it. Must run before any other thread exists: a thread with them unblocked would take
/// them with the default action, which kills gaspirun at once.
pub(crate) fn block() -> io::Result<Blocked> {
    let set: SigSet = TERMINATING.into_iter().chain(FORWARDED).collect();
    set.thread_block()?;
    Ok(Blocked(set))
}

impl Blocked {
    /// Calls `on_signal` with every handled signal gaspirun receives, on a thread of its
    /// own, until it returns false.
    pub(crate) fn deliver(self, mut on_signal: impl FnMut(Signal) -> bool + Send + 'static) {
        let set = self.0;
        thread::spawn(move || {
            // sigwait fails only for an invalid set; stop rather than spin.
            while let Ok(signal) = set.wait() {
                if !on_signal(signal) {
                    break;
                }
            }
        });
    }
}
