//! Owns [`EventCount`], the "sleep until something happened" primitive under every wait.
//!
//! An event count is a generation counter, a count of sleepers, and a sleeping place. A
//! waiter polls its own condition; to sleep, it counts itself as a sleeper, looks at the
//! condition once more, and sleeps until the generation moves. Whoever changes the condition
//! calls [`EventCount::notify_all`], which bumps the generation and wakes the sleepers only
//! when there are any. A SeqCst fence on both sides, between "change the condition / count
//! the sleeper" and "look at the sleepers / the condition", makes at least one side see the
//! other, so no wake-up is lost; a notifier that finds nobody asleep writes nothing shared,
//! which keeps the event's cache line out of the path of a polling waiter (on the direct
//! intra-node path every notification from another process would otherwise move it).

use std::sync::Arc;

use crate::sync::{fence, AtomicU32, Ordering};
use gaspi_segments::SharedWords;

use crate::words::Storage;
use crate::Deadline;

/// Index of the generation in an event count's words; the futex word.
const GENERATION: usize = 0;
/// Index of the number of threads (of any process) asleep or about to be.
const SLEEPERS: usize = 1;
/// Words an event count occupies (see [`EventCount::in_words`]).
pub(crate) const EVENT_WORDS: usize = 2;

/// A generation counter that threads, of this process or of others on the host, can sleep on.
///
/// The protocol, for a condition `ready()` that is only made true by code that afterwards
/// calls [`notify_all`](Self::notify_all):
///
/// ```
/// # use gaspi_notifications::{EventCount, Timeout, Wake};
/// # use std::sync::atomic::{AtomicBool, Ordering};
/// # let event = EventCount::new();
/// # let flag = AtomicBool::new(true);
/// # let ready = || flag.load(Ordering::Acquire).then_some(());
/// let deadline = Timeout::Block.deadline();
/// let outcome = loop {
///     let key = event.prepare();
///     if let Some(value) = ready() {
///         break Some(value);
///     }
///     match event.wait(key, deadline, ready) {
///         Wake::Ready(value) => break Some(value),
///         Wake::Notified => {}
///         Wake::TimedOut => break None,
///     }
/// };
/// # assert_eq!(outcome, Some(()));
/// ```
///
/// Sleepers sleep on a futex on the generation word. The futex is not process-private, so an
/// event count placed in shared memory ([`in_words`](Self::in_words)) is woken by a
/// `notify_all` from any process mapping it. `notify_all` costs a fence and a load of a word
/// nobody writes when nobody sleeps; only when some thread is asleep (or about to be) does it
/// bump the generation and make the wake-up system call.
#[derive(Debug)]
pub struct EventCount {
    /// `[generation, sleepers]`.
    words: Storage,
    #[cfg(loom)]
    lock: crate::sync::Mutex<()>,
    #[cfg(loom)]
    wakeup: crate::sync::Condvar,
}

/// How an [`EventCount::wait`] ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wake<T> {
    /// The condition held, with what it returned.
    Ready(T),
    /// The generation moved: look at the condition again.
    Notified,
    /// The deadline passed.
    TimedOut,
}

/// A snapshot of an [`EventCount`]'s generation, taken by [`EventCount::prepare`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[must_use = "a key is only useful when passed to `EventCount::wait`"]
pub struct Key(u32);

impl EventCount {
    /// Creates an event count of this process that nobody waits on yet.
    #[must_use]
    pub fn new() -> Self {
        Self::over(Storage::owned(EVENT_WORDS))
    }

    /// Places the event count in words `at..at + 2` of `words`, memory other processes may map
    /// and call [`notify_all`](Self::notify_all) through. Every process builds its own
    /// `EventCount` over the same words; they are one event count. Returns `None` when `words`
    /// is too short.
    #[must_use]
    pub fn in_words(words: Arc<SharedWords>, at: usize) -> Option<Self> {
        Storage::shared(words, at, EVENT_WORDS).map(Self::over)
    }

    fn over(words: Storage) -> Self {
        Self {
            words,
            #[cfg(loom)]
            lock: crate::sync::Mutex::new(()),
            #[cfg(loom)]
            wakeup: crate::sync::Condvar::new(),
        }
    }

    #[inline]
    fn generation(&self) -> &AtomicU32 {
        &self.words.get()[GENERATION]
    }

    // Inline: `notify_all`, on the path of every set, asks; called (also with fat LTO), the
    // look cost 19 instructions instead of about 8.
    #[inline]
    fn sleepers(&self) -> &AtomicU32 {
        &self.words.get()[SLEEPERS]
    }

    /// Takes a snapshot of the generation. Call it *before* checking the condition to wait for.
    pub fn prepare(&self) -> Key {
        // Acquire pairs with the increment in `notify_all`: a key that already includes a
        // notification guarantees that the condition check sees what was done before it.
        Key(self.generation().load(Ordering::Acquire))
    }

    /// Sleeps until `ready` returns a value, some [`notify_all`](Self::notify_all) has bumped
    /// the generation since `key` was taken, or `deadline` passes.
    ///
    /// `ready` is the caller's condition: it is looked at once this thread counts as a
    /// sleeper (a notifier that found no sleeper bumps nothing, so this look is what sees its
    /// change), and again after each wake-up. It may consume what it finds: its value is
    /// returned in [`Wake::Ready`]. Spurious wake-ups are absorbed here.
    pub fn wait<T>(
        &self,
        key: Key,
        deadline: Deadline,
        mut ready: impl FnMut() -> Option<T>,
    ) -> Wake<T> {
        if self.generation().load(Ordering::Acquire) != key.0 {
            return Wake::Notified;
        }
        // Announce the sleeper before the last look at the condition; `notify_all` changes the
        // condition before it looks at the sleepers. With a SeqCst fence between the two steps
        // on both sides, at least one side sees the other: either this look sees the change,
        // or the notifier sees a sleeper, bumps the generation and wakes the futex (whose
        // kernel-side check of the value closes the rest of the gap).
        self.sleepers().fetch_add(1, Ordering::Relaxed);
        fence(Ordering::SeqCst);
        let woken = loop {
            if let Some(value) = ready() {
                break Wake::Ready(value);
            }
            if self.generation().load(Ordering::SeqCst) != key.0 {
                break Wake::Notified;
            }
            match deadline.remaining() {
                Some(left) if left.is_zero() => break Wake::TimedOut,
                left => self.park(key, left),
            }
        };
        self.sleepers().fetch_sub(1, Ordering::Relaxed);
        woken
    }

    /// Wakes every thread sleeping in [`wait`](Self::wait), in whatever process. Call it after
    /// changing what the sleepers' conditions look at.
    #[inline(always)]
    pub fn notify_all(&self) {
        fence(Ordering::SeqCst);
        self.notify_all_fenced();
    }

    /// [`notify_all`](Self::notify_all) for a caller that has issued a SeqCst fence since it
    /// changed what the sleepers look at (see `NotificationTable::set`).
    #[inline(always)]
    pub(crate) fn notify_all_fenced(&self) {
        if self.sleepers().load(Ordering::Relaxed) != 0 {
            // Release: a sleeper (or a waiter whose key is older) that sees the new generation
            // also sees the change.
            self.generation().fetch_add(1, Ordering::Release);
            self.unpark_all();
        }
    }

    /// Sleeps while the generation is still `key`, for at most `left` (`None`: no limit).
    /// Returns early on a wake-up, a signal or a changed generation; the caller looks again.
    #[cfg(not(loom))]
    fn park(&self, key: Key, left: Option<std::time::Duration>) {
        use rustix::thread::futex;
        let timeout = left.map(|d| futex::Timespec {
            tv_sec: i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            tv_nsec: i64::from(d.subsec_nanos()),
        });
        // Every outcome (woken, EAGAIN because the generation moved, EINTR, ETIMEDOUT) sends the
        // caller back to look at the generation and the deadline, so none needs handling here.
        let _ = futex::wait(
            self.generation(),
            futex::Flags::empty(),
            key.0,
            timeout.as_ref(),
        );
    }

    #[cfg(not(loom))]
    fn unpark_all(&self) {
        // Not process-private: sleepers of other processes mapping the same words are woken too.
        let _ = rustix::thread::futex::wake(
            self.generation(),
            rustix::thread::futex::Flags::empty(),
            u32::MAX,
        );
    }

    /// The model's futex: the lock makes "look at the generation, then sleep" atomic with
    /// respect to `unpark_all`, as the kernel does for a futex.
    #[cfg(loom)]
    fn park(&self, key: Key, left: Option<std::time::Duration>) {
        let guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if self.generation().load(Ordering::SeqCst) != key.0 {
            return;
        }
        let poisoned = match left {
            None => self.wakeup.wait(guard).is_err(),
            Some(left) => self.wakeup.wait_timeout(guard, left).is_err(),
        };
        // A poisoned lock guards nothing here: the caller looks at the generation again.
        let _ = poisoned;
    }

    #[cfg(loom)]
    fn unpark_all(&self) {
        let _guard = self
            .lock
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.wakeup.notify_all();
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
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    #[test]
    fn stale_key_returns_at_once() {
        let event = EventCount::new();
        let key = event.prepare();
        // Counted as a sleeper, so that the notification bumps the generation.
        event.sleepers().fetch_add(1, Ordering::Relaxed);
        event.notify_all();
        event.sleepers().fetch_sub(1, Ordering::Relaxed);
        let never = || None::<()>;
        assert_eq!(
            event.wait(key, Timeout::Block.deadline(), never),
            Wake::Notified
        );
        assert_ne!(event.prepare(), key);
    }

    #[test]
    fn a_notifier_without_sleepers_writes_nothing() {
        let event = EventCount::new();
        let key = event.prepare();
        event.notify_all();
        assert_eq!(event.prepare(), key);
    }

    #[test]
    fn wait_returns_what_the_condition_found() {
        let event = EventCount::new();
        let woken = event.wait(event.prepare(), Timeout::Block.deadline(), || Some(7));
        assert_eq!(woken, Wake::Ready(7));
        assert_eq!(event.sleepers().load(Ordering::Relaxed), 0);
    }

    #[test]
    fn wait_times_out_without_notification() {
        let event = EventCount::new();
        let start = Instant::now();
        let never = || None::<()>;
        let woken = event.wait(event.prepare(), Timeout::Millis(20).deadline(), never);
        assert_eq!(woken, Wake::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(20));
        let woken = event.wait(event.prepare(), Timeout::Test.deadline(), never);
        assert_eq!(woken, Wake::TimedOut);
    }

    #[test]
    fn notify_wakes_a_blocked_sleeper() {
        let event = Arc::new(EventCount::new());
        let flag = Arc::new(AtomicBool::new(false));
        let key = event.prepare();
        let sleeper = {
            let (event, flag) = (Arc::clone(&event), Arc::clone(&flag));
            std::thread::spawn(move || {
                let ready = || flag.load(Ordering::Acquire).then_some(());
                event.wait(key, Timeout::Block.deadline(), ready)
            })
        };
        // Only notify once the sleeper has counted itself, so the test exercises the sleeping path.
        while event.sleepers().load(Ordering::Relaxed) == 0 {
            std::thread::yield_now();
        }
        flag.store(true, Ordering::Release);
        event.notify_all();
        let woken = sleeper.join().expect("the sleeper does not panic");
        assert!(matches!(woken, Wake::Ready(()) | Wake::Notified));
        assert_eq!(event.sleepers().load(Ordering::Relaxed), 0);
    }
}
