//! Termination signals aimed at gaspirun itself (Ctrl-C, `kill`, a closed terminal). They are
//! received synchronously by a dedicated thread, so the job is torn down in order instead of
//! gaspirun dying and leaving the ranks' process groups behind.

use std::io;
use std::thread;

use nix::sys::signal::{SigSet, Signal};

/// The signals that end a job.
const TERMINATING: [Signal; 3] = [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP];

/// Proof that [`TERMINATING`] is blocked, with the set to wait on.
pub(crate) struct Blocked(SigSet);

/// Blocks the terminating signals in the calling thread and every thread created after it.
/// Must run before any other thread exists: a thread with them unblocked would take them with
/// the default action, which kills gaspirun at once.
pub(crate) fn block() -> io::Result<Blocked> {
    let set: SigSet = TERMINATING.into_iter().collect();
    set.thread_block()?;
    Ok(Blocked(set))
}

impl Blocked {
    /// Calls `on_signal` with every terminating signal gaspirun receives, on a thread of its
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
