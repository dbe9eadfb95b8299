//! [`TimedMutex`]: a lock that a thread waits for only until a [`Deadline`].
//!
//! A group's barrier state (and its allreduce state) is held by one call for the whole of
//! its run, waits for the partners included, so a plain mutex would make a second thread's
//! call wait for the first one's partners, however short its own timeout. Every waiting call
//! of the runtime keeps to its timeout, so such state sits behind this lock instead: a thread
//! that finds it held sleeps until it is released or the thread's deadline passes, and then
//! gives up without having touched the value.
//!
//! The lock is a word (free, held, or held with possible sleepers) in front of a mutex that
//! holds the value: an uncontended acquisition and release cost one atomic operation each on
//! top of that mutex's, and a release wakes anyone only when a thread marked itself a sleeper
//! (measured uncontended: 8 ns a lock and unlock, against 4 for the mutex alone). The mutex
//! is locked only by the holder of the word, so it never waits; it makes the value reachable
//! without unsafe code.

use std::ops::{Deref, DerefMut};

use gaspi_notifications::Deadline;

use crate::sync::{lock, AtomicU32, Condvar, Mutex, MutexGuard, Ordering};

const FREE: u32 = 0;
const HELD: u32 = 1;
/// Held, and some thread may sleep waiting for it: the release wakes one.
const CONTENDED: u32 = 2;

/// A mutex whose acquisition gives up at a deadline (see the module documentation).
pub(crate) struct TimedMutex<T> {
    gate: Gate,
    /// Locked only by the holder of `gate`, after it acquired it.
    value: Mutex<T>,
}

/// Who holds a [`TimedMutex`], and where the others sleep.
struct Gate {
    word: AtomicU32,
    /// Taken by sleepers around their mark and sleep, and by a release that must wake one.
    sleepers: Mutex<()>,
    freed: Condvar,
}

impl<T> TimedMutex<T> {
    pub(crate) fn new(value: T) -> Self {
        TimedMutex {
            gate: Gate {
                word: AtomicU32::new(FREE),
                sleepers: Mutex::new(()),
                freed: Condvar::new(),
            },
            value: Mutex::new(value),
        }
    }

    /// The value, once no other thread holds it, or `None` when `deadline` passed first (at
    /// once for a test deadline, if it is held).
    pub(crate) fn lock_until(&self, deadline: Deadline) -> Option<TimedGuard<'_, T>> {
        if self.gate.try_enter() || self.gate.enter_until(deadline) {
            Some(self.guard())
        } else {
            None
        }
    }

    /// The value if no other thread holds it.
    pub(crate) fn try_lock(&self) -> Option<TimedGuard<'_, T>> {
        self.gate.try_enter().then(|| self.guard())
    }

    /// The guard of a thread that entered the gate.
    fn guard(&self) -> TimedGuard<'_, T> {
        TimedGuard {
            value: lock(&self.value),
            _held: Held(&self.gate),
        }
    }
}

impl Gate {
    fn try_enter(&self) -> bool {
        self.word
            .compare_exchange(FREE, HELD, Ordering::Acquire, Ordering::Relaxed)
            .is_ok()
    }

    /// Sleeps until this thread enters or `deadline` passes; whether it entered.
    #[cold]
    fn enter_until(&self, deadline: Deadline) -> bool {
        if deadline.is_test() {
            return false;
        }
        let mut sleepers = lock(&self.sleepers);
        loop {
            // Marked under `sleepers`, which the sleep lets go only once asleep: a release
            // after the mark wakes a sleeper, and one before it left the word free. A thread
            // that enters marks too (it cannot know whether others still sleep), at the cost
            // of one wake-up that may find nobody.
            if self.word.swap(CONTENDED, Ordering::Acquire) == FREE {
                return true;
            }
            // Entering comes first: a thread woken as the deadline passes does not leave the
            // wake-up unused while the lock is free and others sleep.
            sleepers = match deadline.remaining() {
                None => self.freed.wait(sleepers).unwrap_or_else(|e| e.into_inner()),
                Some(left) if left.is_zero() => return false,
                Some(left) => {
                    self.freed
                        .wait_timeout(sleepers, left)
                        .unwrap_or_else(|e| e.into_inner())
                        .0
                }
            };
        }
    }

    fn leave(&self) {
        if self.word.swap(FREE, Ordering::Release) == CONTENDED {
            let _sleepers = lock(&self.sleepers);
            self.freed.notify_one();
        }
    }
}

/// Access to the value of a [`TimedMutex`]; dropping it releases the lock.
pub(crate) struct TimedGuard<'a, T> {
    // Fields drop in declaration order: the value's mutex is unlocked before the gate opens,
    // so the next holder never waits on it.
    value: MutexGuard<'a, T>,
    _held: Held<'a>,
}

/// The gate of a [`TimedGuard`], left when the guard drops.
struct Held<'a>(&'a Gate);

impl Drop for Held<'_> {
    fn drop(&mut self) {
        self.0.leave();
    }
}

impl<T> Deref for TimedGuard<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T> DerefMut for TimedGuard<'_, T> {
    fn deref_mut(&mut self) -> &mut T {
        &mut self.value
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use std::sync::Barrier;
    use std::time::{Duration, Instant};

    use gaspi_notifications::Timeout;

    use super::*;

    #[test]
    fn a_waiter_gives_up_at_its_deadline_and_later_gets_the_lock() {
        let lock = TimedMutex::new(0u32);
        let held = Barrier::new(2);
        let tried = Barrier::new(2);
        std::thread::scope(|s| {
            s.spawn(|| {
                let mut guard = lock.lock_until(Timeout::Block.deadline()).expect("free");
                held.wait();
                tried.wait();
                *guard += 1;
            });
            held.wait();
            let start = Instant::now();
            assert!(lock.lock_until(Timeout::Test.deadline()).is_none());
            assert!(lock.try_lock().is_none());
            assert!(lock.lock_until(Timeout::Millis(50).deadline()).is_none());
            let took = start.elapsed();
            assert!(took >= Duration::from_millis(50), "{took:?}");
            assert!(took < Duration::from_secs(5), "{took:?}");
            tried.wait();
            let guard = lock
                .lock_until(Timeout::Block.deadline())
                .expect("released");
            assert_eq!(*guard, 1);
        });
        assert!(lock.try_lock().is_some());
    }

    #[test]
    fn every_waiter_gets_its_turn() {
        let lock = TimedMutex::new(0u32);
        std::thread::scope(|s| {
            for _ in 0..4 {
                s.spawn(|| {
                    for _ in 0..1_000 {
                        *lock
                            .lock_until(Timeout::Block.deadline())
                            .expect("no deadline") += 1;
                    }
                });
            }
        });
        assert_eq!(*lock.try_lock().expect("free"), 4_000);
    }
}

/// Loom models: whatever the interleaving, a sleeper is woken by the release it waits for (no
/// lost wake-up: loom reports the deadlock), holders exclude each other, and a thread that
/// gave up left the value and the lock as they were.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use gaspi_notifications::Timeout;
    use loom::sync::Arc;

    /// Adds 1 to the value, waiting for the lock as long as it takes.
    fn add_one(lock: &TimedMutex<u32>) {
        *lock
            .lock_until(Timeout::Block.deadline())
            .expect("no deadline") += 1;
    }

    /// A thread that runs [`add_one`] on `lock`.
    fn adder(lock: &Arc<TimedMutex<u32>>) -> loom::thread::JoinHandle<()> {
        let lock = Arc::clone(lock);
        loom::thread::spawn(move || add_one(&lock))
    }

    #[test]
    fn a_sleeper_is_woken_by_the_release() {
        loom::model(|| {
            let lock = Arc::new(TimedMutex::new(0u32));
            let other = adder(&lock);
            add_one(&lock);
            other.join().expect("the other thread does not panic");
            assert_eq!(*lock.try_lock().expect("released"), 2);
        });
    }

    #[test]
    fn two_sleepers_are_both_woken() {
        let mut model = loom::model::Builder::new();
        model.preemption_bound = Some(3);
        model.check(|| {
            let lock = Arc::new(TimedMutex::new(0u32));
            let others: Vec<_> = (0..2).map(|_| adder(&lock)).collect();
            add_one(&lock);
            for other in others {
                other.join().expect("the other threads do not panic");
            }
            assert_eq!(*lock.try_lock().expect("released"), 3);
        });
    }

    #[test]
    fn a_test_that_gives_up_leaves_everything_as_it_was() {
        loom::model(|| {
            let lock = Arc::new(TimedMutex::new(0u32));
            let other = {
                let lock = Arc::clone(&lock);
                loom::thread::spawn(move || {
                    if let Some(mut value) = lock.lock_until(Timeout::Test.deadline()) {
                        *value += 10;
                    }
                })
            };
            add_one(&lock);
            other.join().expect("the other thread does not panic");
            let value = *lock.try_lock().expect("released");
            assert!(value == 1 || value == 11, "{value}");
        });
    }
}
