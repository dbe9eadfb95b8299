//! [`Handoff`]: who drives progress, the user threads that wait or the progress thread.
//!
//! While any user thread polls the completion queue itself, the progress thread stands aside:
//! waking it for every arrival would only add a context switch per message (measured on two
//! cores: an 8 µs ping-pong became 70 µs). A waiting thread counts itself while it polls and
//! uncounts itself when it goes to sleep; the last one to go to sleep wakes the progress thread
//! at once, so nothing waits for progress. A waiter that simply returns does not wake it (that
//! would cost a wake-up per call); the progress thread looks again within its stand-aside
//! period. Nor does it poll while a user thread posts (see [`Handoff::nap`]): the two would
//! contend for the provider's locks, a futex wait and wake per message.

use std::time::Duration;

use gaspi_notifications::{EventCount, Timeout};

use crate::sync::{AtomicUsize, Ordering};

/// The hand-off of progress between polling user threads and the progress thread.
#[derive(Debug, Default)]
pub(crate) struct Handoff {
    /// User threads currently polling inside a waiting call.
    spinners: AtomicUsize,
    /// Wakes the progress thread when the last polling thread goes to sleep.
    standby: EventCount,
}

impl Handoff {
    /// A user thread starts polling; it is counted until the returned guard sleeps or drops.
    pub(crate) fn polling(&self) -> Polling<'_> {
        self.spinners.fetch_add(1, Ordering::AcqRel);
        Polling {
            handoff: self,
            spinning: true,
        }
    }

    /// Progress thread: if some user thread polls, waits until none does (or `max` passed)
    /// and returns true; returns false at once if nobody polls.
    pub(crate) fn stand_aside(&self, max: Option<Duration>) -> bool {
        let key = self.standby.prepare();
        let idle = || (self.spinners.load(Ordering::Acquire) == 0).then_some(());
        if idle().is_some() {
            return false;
        }
        let deadline = max.map_or(Timeout::Block, Timeout::from).deadline();
        // However the wait ends, the progress thread looks at the polling threads again.
        self.standby.wait(key, deadline, idle);
        true
    }

    /// Progress thread: stands aside for up to `max` while a user thread drives the provider
    /// without polling (it posts); a polling thread going to sleep ends it at once.
    pub(crate) fn nap(&self, max: Duration) {
        let key = self.standby.prepare();
        self.standby
            .wait(key, Timeout::from(max).deadline(), || None::<()>);
    }
}

/// A user thread that waits and drives progress; counted while it polls.
#[derive(Debug)]
pub(crate) struct Polling<'a> {
    handoff: &'a Handoff,
    spinning: bool,
}

impl Polling<'_> {
    /// The thread goes to sleep (`true`) or wakes up to poll again (`false`).
    pub(crate) fn sleeping(&mut self, asleep: bool) {
        let spinning = !asleep;
        if spinning == self.spinning {
            return;
        }
        self.spinning = spinning;
        if spinning {
            self.handoff.spinners.fetch_add(1, Ordering::AcqRel);
        } else if self.handoff.spinners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.handoff.standby.notify_all();
        }
    }
}

impl Drop for Polling<'_> {
    fn drop(&mut self) {
        if self.spinning {
            self.handoff.spinners.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// Loom model: the progress thread, standing aside for a polling user thread with no time
/// limit, is always woken once that thread goes to sleep (no lost wake-up), however the two
/// interleave.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    #[test]
    fn the_last_poller_to_sleep_wakes_the_progress_thread() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::default());
            let mut waiter = handoff.polling();
            let thread = {
                let handoff = Arc::clone(&handoff);
                loom::thread::spawn(move || while handoff.stand_aside(None) {})
            };
            waiter.sleeping(true);
            thread.join().expect("the progress thread does not panic");
            drop(waiter);
        });
    }

    #[test]
    fn a_poller_that_wakes_again_is_counted_again() {
        loom::model(|| {
            let handoff = Arc::new(Handoff::default());
            let mut first = handoff.polling();
            let second = {
                let handoff = Arc::clone(&handoff);
                loom::thread::spawn(move || {
                    let mut polling = handoff.polling();
                    polling.sleeping(true);
                    polling.sleeping(false);
                    drop(polling);
                })
            };
            first.sleeping(true);
            second.join().expect("the second waiter does not panic");
            assert_eq!(handoff.spinners.load(Ordering::Acquire), 0);
            drop(first);
        });
    }
}
