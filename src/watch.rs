//! Seeing same-host deaths within milliseconds: one thread per context sleeps in `poll` on a
//! pidfd of every peer process on this host and marks a peer dead the moment its pidfd becomes
//! readable (the process has exited, reaped or not). It uses no CPU while every peer lives.
//!
//! A pidfd is taken once at init, then the peer's identity is checked (`/proc` still shows the
//! start time it published), so a pid reused after an early death is never watched in its
//! place. Where pidfds are unavailable (kernels before 5.3, seccomp), the thread is not
//! started and the one-second looks of the `health` module remain.

use std::os::fd::OwnedFd;
use std::sync::{Arc, Weak};
use std::thread::JoinHandle;

use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::process::{pidfd_open, Pid, PidfdFlags};

use crate::context::Inner;
use crate::error::Rank;
use crate::health::Process;

/// The watching thread; dropping it stops the thread.
pub(crate) struct Watcher {
    stop: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

impl Watcher {
    /// Starts watching `peers` (rank and process of every other rank on this host) on behalf
    /// of `inner`; `None` when there is nothing to watch or pidfds are unavailable.
    pub(crate) fn start(inner: &Arc<Inner>, peers: Vec<(Rank, Process)>) -> Option<Watcher> {
        let mut watched = Vec::with_capacity(peers.len());
        for (rank, process) in peers {
            let pid = Pid::from_raw(i32::try_from(process.pid()).ok()?)?;
            match pidfd_open(pid, PidfdFlags::empty()) {
                Ok(fd) => watched.push((rank, process, fd)),
                // Already gone: the health look reports it at the first operation.
                Err(rustix::io::Errno::SRCH) => {}
                Err(_) => return None,
            }
        }
        if watched.is_empty() {
            return None;
        }
        let stop = Arc::new(eventfd(0, EventfdFlags::CLOEXEC).ok()?);
        let thread = {
            let (inner, stop) = (Arc::downgrade(inner), Arc::clone(&stop));
            std::thread::Builder::new()
                .name("gaspi-watch".into())
                .spawn(move || watch(&inner, &stop, watched))
                .ok()?
        };
        Some(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

/// Sleeps until a watched process exits or `stop` is signalled.
fn watch(inner: &Weak<Inner>, stop: &OwnedFd, mut watched: Vec<(Rank, Process, OwnedFd)>) {
    // The pid may have been reused between bootstrap and `pidfd_open`: keep only the peers
    // whose process is still the one they published.
    watched.retain(|(rank, process, _)| match process.gone() {
        None => true,
        Some(reason) => {
            if let Some(inner) = inner.upgrade() {
                inner.mark_failed(*rank, reason);
            }
            false
        }
    });
    while !watched.is_empty() {
        let mut fds: Vec<PollFd<'_>> = std::iter::once(PollFd::new(stop, PollFlags::IN))
            .chain(
                watched
                    .iter()
                    .map(|(_, _, fd)| PollFd::new(fd, PollFlags::IN)),
            )
            .collect();
        if poll(&mut fds, None).is_err() {
            // EINTR, or an error that would repeat: look again (EINTR) or give up watching,
            // leaving the health module's looks in place.
            continue;
        }
        if !fds[0].revents().is_empty() {
            return;
        }
        let ended: Vec<usize> = fds[1..]
            .iter()
            .enumerate()
            .filter(|(_, fd)| !fd.revents().is_empty())
            .map(|(i, _)| i)
            .collect();
        drop(fds);
        let Some(inner) = inner.upgrade() else {
            return;
        };
        for &i in ended.iter().rev() {
            let (rank, process, _) = watched.remove(i);
            inner.mark_failed(rank, format!("its process {} has ended", process.pid()));
        }
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        // The eventfd counter only grows; one write wakes the poll for good.
        let _ = rustix::io::write(&*self.stop, &1u64.to_ne_bytes());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}
