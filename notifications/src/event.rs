//! Owns [`EventCount`], the "sleep until something happened" primitive under every wait.
//!
//! An event count is a generation counter plus a sleeping place. A waiter takes a [`Key`]
//! (the current generation), checks its own condition, and if the condition does not hold
//! sleeps until the generation moves past the key. Whoever changes the condition bumps the
//! generation with [`EventCount::notify_all`]. Because the key is taken *before* the condition
//! is checked, a change that the check missed always moves the generation past the key, so no
//! wake-up is lost.

use std::sync::PoisonError;

use crate::sync::{fence, AtomicU64, AtomicUsize, Condvar, Mutex, Ordering};
use crate::Deadline;

/// A generation counter that threads can sleep on.
///
/// The protocol, for a condition `ready()` that is only made true by code that afterwards
/// calls [`notify_all`](Self::notify_all):
///
/// ```
/// # use gaspi_notifications::{EventCount, Timeout};
/// # use std::sync::atomic::{AtomicBool, Ordering};
/// # let event = EventCount::new();
/// # let flag = AtomicBool::new(true);
/// # let ready = || flag.load(Ordering::Acquire);
/// let deadline = Timeout::Block.deadline();
/// loop {
///     let key = event.prepare();
///     if ready() {
///         break;
///     }
///     event.wait(key, deadline);
/// }
/// ```
///
/// `notify_all` costs an atomic increment and a fence when nobody sleeps; it only takes the
/// internal lock when some thread is asleep (or about to be).
#[derive(Debug)]
pub struct EventCount {
    generation: AtomicU64,
    sleepers: AtomicUsize,
    lock: Mutex<()>,
    wakeup: Condvar,
}

/// A snapshot of an [`EventCount`]'s generation, taken by [`EventCount::prepare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a key is only useful when passed to `EventCount::wait`"]
pub struct Key(u64);

impl EventCount {
    /// Creates an event count that nobody waits on yet.
    #[must_use]
    pub fn new() -> Self {
        Self {
            generation: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            lock: Mutex::new(()),
            wakeup: Condvar::new(),
        }
    }

    /// Takes a snapshot of the generation. Call it *before* checking the condition to wait for.
    pub fn prepare(&self) -> Key {
        // Acquire pairs with the Release increment in `notify_all`: a key that already includes
        // a notification guarantees that the condition check sees what was done before it.
        Key(self.generation.load(Ordering::Acquire))
    }

    /// Sleeps until some [`notify_all`](Self::notify_all) has happened since `key` was taken,
    /// or until `deadline`.
    ///
    /// Returns `true` if the generation moved past `key` (possibly before the call, in which
    /// case it returns at once) and `false` if the deadline passed first. Spurious wake-ups are
    /// absorbed here and never reported as `true`.
    pub fn wait(&self, key: Key, deadline: Deadline) -> bool {
        if self.generation.load(Ordering::Acquire) != key.0 {
            return true;
        }
        // The mutex guards no data; a poisoned one carries no broken invariant.
        let mut guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
        self.sleepers.fetch_add(1, Ordering::Relaxed);
        // Pairs with the fence in `notify_all` (a store-buffering pattern): either our re-check
        // below sees the new generation, or the notifier sees our sleeper count and wakes us.
        fence(Ordering::SeqCst);
        let woken = loop {
            if self.generation.load(Ordering::Acquire) != key.0 {
                break true;
            }
            guard = match deadline.remaining() {
                None => self
                    .wakeup
                    .wait(guard)
                    .unwrap_or_else(PoisonError::into_inner),
                Some(left) if left.is_zero() => break false,
                Some(left) => {
                    self.wakeup
                        .wait_timeout(guard, left)
                        .unwrap_or_else(PoisonError::into_inner)
                        .0
                }
            };
        };
        self.sleepers.fetch_sub(1, Ordering::Relaxed);
        drop(guard);
        woken
    }

    /// Wakes every thread sleeping in [`wait`](Self::wait) and invalidates every outstanding
    /// [`Key`]. Call it *after* making the change that waiters are waiting for.
    pub fn notify_all(&self) {
        // Release publishes the caller's change to any waiter whose `prepare` sees this bump.
        self.generation.fetch_add(1, Ordering::Release);
        fence(Ordering::SeqCst);
        if self.sleepers.load(Ordering::Relaxed) != 0 {
            // A counted sleeper holds the lock from its re-check until `Condvar::wait` releases
            // it, so taking the lock here guarantees the sleeper is really asleep (or gone)
            // when we notify; without it the notification could fall between check and sleep.
            let _guard = self.lock.lock().unwrap_or_else(PoisonError::into_inner);
            self.wakeup.notify_all();
        }
    }
}

impl Default for EventCount {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;
    use crate::Timeout;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn stale_key_returns_at_once() {
        let event = EventCount::new();
        let key = event.prepare();
        event.notify_all();
        assert!(event.wait(key, Timeout::Block.deadline()));
        assert_ne!(event.prepare(), key);
    }

    #[test]
    fn wait_times_out_without_notification() {
        let event = EventCount::new();
        let start = Instant::now();
        assert!(!event.wait(event.prepare(), Timeout::Millis(20).deadline()));
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert!(!event.wait(event.prepare(), Timeout::Test.deadline()));
    }

    #[test]
    fn notify_wakes_a_blocked_sleeper() {
        let event = Arc::new(EventCount::new());
        let key = event.prepare();
        let sleeper = {
            let event = Arc::clone(&event);
            std::thread::spawn(move || event.wait(key, Timeout::Block.deadline()))
        };
        // Only notify once the sleeper has counted itself, so the test exercises the sleeping path.
        while event.sleepers.load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        event.notify_all();
        assert!(sleeper.join().expect("the sleeper does not panic"));
        assert_eq!(event.sleepers.load(Ordering::Relaxed), 0);
    }
}
