//! [`Slots`]: a fixed table of shared values that readers use without taking a lock or
//! touching a reference count, and whose replaced values are released only once no reader can
//! still be using them.
//!
//! The runtime looks up its own segments, its peers' mapped segments and its groups on every
//! operation, and changes them rarely (a segment created or deleted, a group committed). Behind
//! a read-write lock and an `Arc` clone each lookup costs four locked instructions, which on a
//! same-host write of a few bytes were most of the software's share of the latency. Here a
//! lookup is a [`Loan`]: the first live loan of a thread pins it in an epoch
//! ([`crossbeam_epoch`]), one locked instruction, and further loans while one is alive cost
//! none; the value is then a plain load away.
//!
//! # Lifetime of a replaced value
//! A slot owns one strong count of its `Arc`. Replacing or removing the value moves that count
//! to the table's retired list and defers its release to the epoch: it is dropped once every
//! thread that was pinned when it was unlinked has unpinned, so a loan never outlives its value.
//! The release runs on the replacing thread before `replace` returns when no other thread is
//! pinned, else on whichever thread collects the epoch's garbage next (inside some later pin), so a value's destructor must not take a lock that a thread holds while it takes a
//! loan. What is still retired when the table itself is dropped is released then (no loan can
//! be alive: loans borrow the table), so a value's destructor never runs later than its
//! table's, even when the epoch's deferred work never runs again (at process exit).

use std::sync::atomic::{AtomicPtr, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crossbeam_epoch::Guard;

use crate::error::{Error, Result};

/// How many pins of its own [`Slots::replace`] takes at most to move the epoch on and release
/// the value it unlinked (see there).
const RELEASE_TRIES: usize = 4;

/// Values unlinked from their slot, each kept until no reader can hold it.
struct Retired<T> {
    /// Numbered in retirement order, so a deferred release finds its own.
    values: Vec<(u64, Arc<T>)>,
    /// Values a deferred release took off `values` and is dropping (without the lock): still
    /// counted by [`Slots::release_retired`], whose 0 promises that their drops have ended.
    dropping: usize,
    next: u64,
}

/// A deferred release's value being dropped, counted in [`Retired::dropping`] until the drop
/// has ended (also when the value's destructor panics).
struct Dropping<'a, T>(&'a Mutex<Retired<T>>);

impl<T> Drop for Dropping<'_, T> {
    fn drop(&mut self) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).dropping -= 1;
    }
}

/// A fixed number of slots, each empty or holding an `Arc<T>`, read without locks.
///
/// Reads ([`get`](Self::get), [`get_arc`](Self::get_arc)) never block and never wait for a
/// writer; changes ([`replace`](Self::replace), [`try_insert`](Self::try_insert)) are
/// serialised among themselves. A reader sees a slot either before or after a change, never a
/// torn value.
///
/// ```
/// use std::sync::Arc;
/// use gaspi_segments::Slots;
///
/// let slots = Slots::new(4);
/// slots.try_insert(1, Arc::new(String::from("one"))).unwrap();
/// let loan = slots.get(1).expect("present");
/// // Replaced while lent: the loan still sees the value it took.
/// slots.replace(1, Some(Arc::new(String::from("uno")))).unwrap();
/// assert_eq!(*loan, "one");
/// drop(loan);
/// assert_eq!(*slots.get(1).unwrap(), "uno");
/// assert!(slots.get(7).is_none());
/// ```
pub struct Slots<T: Send + Sync + 'static> {
    /// Each non-null pointer came from `Arc::into_raw` and stands for one strong count that the
    /// slot owns.
    slots: Box<[AtomicPtr<T>]>,
    /// Serialises changes, and holds what they unlinked until it may be released.
    retired: Arc<Mutex<Retired<T>>>,
}

/// A value of a [`Slots`] lent to the current thread: it derefs to the value, which stays
/// alive while the loan does, whatever happens to its slot meanwhile.
///
/// A loan pins its thread in the epoch, which holds back the release of every value that any
/// table retires meanwhile: keep loans for the length of an operation, not across waits of
/// unbounded length. It cannot be sent to another thread.
pub struct Loan<'a, T> {
    value: &'a T,
    _pin: Guard,
}

impl<T> std::ops::Deref for Loan<'_, T> {
    type Target = T;

    fn deref(&self) -> &T {
        self.value
    }
}

impl<T> Loan<'_, T> {
    /// The value in slot `index` of `slots` (any table), lent under this loan's pin for as
    /// long as both: no pin of its own, where a second [`Slots::get`] while this loan lives
    /// would look its thread up again. `None` when the slot is empty or out of range.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use gaspi_segments::Slots;
    ///
    /// let (peers, mine) = (Slots::new(2), Slots::new(2));
    /// peers.try_insert(0, Arc::new(7u32)).unwrap();
    /// mine.try_insert(1, Arc::new(String::from("mine"))).unwrap();
    /// let peer = peers.get(0).expect("present");
    /// assert_eq!(peer.with(&mine, 1).map(String::as_str), Some("mine"));
    /// assert!(peer.with(&mine, 0).is_none());
    /// ```
    pub fn with<'b, U: Send + Sync + 'static>(
        &'b self,
        slots: &'b Slots<U>,
        index: usize,
    ) -> Option<&'b U> {
        let ptr = slots.slots.get(index)?.load(Ordering::Acquire);
        // SAFETY: as in `Slots::get`: this loan's pin was taken before this load (when the
        // loan was made), so a value the load saw is released no earlier than the pin is
        // dropped; the reference borrows this loan (its pin) and the table.
        unsafe { ptr.as_ref() }
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Loan<'_, T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.value.fmt(f)
    }
}

impl<T: Send + Sync + 'static> Slots<T> {
    /// A table of `len` empty slots.
    pub fn new(len: usize) -> Self {
        Slots {
            slots: (0..len)
                .map(|_| AtomicPtr::new(std::ptr::null_mut()))
                .collect(),
            retired: Arc::new(Mutex::new(Retired {
                values: Vec::new(),
                dropping: 0,
                next: 0,
            })),
        }
    }

    /// The number of slots.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the table has no slots at all.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// Whether slot `index` holds a value now (false when out of range). Costs one load: no
    /// loan.
    pub fn is_occupied(&self, index: usize) -> bool {
        self.slots
            .get(index)
            .is_some_and(|slot| !slot.load(Ordering::Relaxed).is_null())
    }

    /// The value in slot `index`, lent: `None` when the slot is empty or out of range.
    pub fn get(&self, index: usize) -> Option<Loan<'_, T>> {
        let slot = self.slots.get(index)?;
        let pin = crossbeam_epoch::pin();
        let ptr = slot.load(Ordering::Acquire);
        // SAFETY: a non-null pointer in a slot came from `Arc::into_raw` (`replace`,
        // `try_insert`) and its strong count is owned by the slot until it is unlinked, then by
        // the retired list until a release deferred through the epoch after the unlink runs,
        // or until the table is dropped. `pin` was taken before this load, so if the load saw
        // the pointer, the release cannot run before `pin` is dropped; the loan keeps `pin`
        // and borrows the table, so the value outlives the reference.
        let value = unsafe { ptr.as_ref() }?;
        Some(Loan { value, _pin: pin })
    }

    /// The value in slot `index` as an `Arc` of its own: `None` when the slot is empty or out
    /// of range. Costs a reference count; [`get`](Self::get) does not.
    pub fn get_arc(&self, index: usize) -> Option<Arc<T>> {
        let slot = self.slots.get(index)?;
        let _pin = crossbeam_epoch::pin();
        let ptr = slot.load(Ordering::Acquire);
        if ptr.is_null() {
            return None;
        }
        // SAFETY: `ptr` came from `Arc::into_raw` and its strong count is held (by the slot or
        // the retired list) at least until `_pin` is dropped, as in `get`; so the count is at
        // least one while it is incremented, and the new count belongs to the returned Arc.
        unsafe {
            Arc::increment_strong_count(ptr);
            Some(Arc::from_raw(ptr))
        }
    }

    /// Puts `value` (or nothing) in slot `index` and returns what was there. Readers that took
    /// the old value keep it until they drop their loan.
    ///
    /// # Errors
    /// [`Error::SlotOutOfRange`] when `index` is not below [`len`](Self::len).
    pub fn replace(&self, index: usize, value: Option<Arc<T>>) -> Result<Option<Arc<T>>> {
        let slot = self.slot(index)?;
        let new = value.map_or(std::ptr::null_mut(), |v| Arc::into_raw(v).cast_mut());
        let (old, id) = {
            let mut retired = self.lock();
            let old = slot.swap(new, Ordering::AcqRel);
            if old.is_null() {
                return Ok(None);
            }
            // SAFETY: `old` was unlinked by this swap, under the change lock: it came from
            // `Arc::into_raw` and the slot's strong count is now ours alone.
            let old = unsafe { Arc::from_raw(old) };
            let id = retired.next;
            retired.next += 1;
            retired.values.push((id, Arc::clone(&old)));
            (old, id)
        };
        // Deferred only now, with the change lock released: pinning and flushing may run
        // deferred releases on this thread, and ours take that lock.
        let list: Weak<Mutex<Retired<T>>> = Arc::downgrade(&self.retired);
        let pin = crossbeam_epoch::pin();
        pin.defer(move || {
            if let Some(list) = list.upgrade() {
                let mut retired = list.lock().unwrap_or_else(|e| e.into_inner());
                let at = retired.values.iter().position(|(other, _)| *other == id);
                let Some((_, value)) = at.map(|at| retired.values.swap_remove(at)) else {
                    return;
                };
                retired.dropping += 1;
                drop(retired);
                // The value's destructor (if this was its last count) runs without the lock,
                // counted until it ends.
                let dropping = Dropping(&list);
                drop(value);
                drop(dropping);
            }
        });
        // Hand the release to the epoch's collection now rather than when this thread's bag
        // of deferred work fills up, which may be never.
        pin.flush();
        drop(pin);
        // The release may run once the epoch has moved on twice from the unlink, and the pin
        // above held it back by one: a pin of this thread's own moves it on again and runs the
        // release here when no other thread is pinned. Without it, the release waited for the
        // epoch's next collection, about every hundred pins of some thread: a deleted segment
        // kept its memory and its /dev/shm file after `segment_delete` returned, on a rank
        // that went on waiting (seen 200 ms later, until 300 more lookups).
        self.collect_until(|retired| !retired.values.iter().any(|(other, _)| *other == id));
        Ok(Some(old))
    }

    /// Tries to release the values this table unlinked so far ([`replace`](Self::replace) runs
    /// their release when no other thread is pinned; one that was is released later, inside
    /// some pin), and returns how many still wait: each is held back by a loan that some
    /// thread took before it was unlinked (or by a pin of that thread's own), or is being
    /// dropped by the thread that released it. 0 means every replaced or removed value has
    /// been released by the table and that drop has ended, its destructor run unless other
    /// `Arc`s of it are alive.
    ///
    /// Costs a few pins of this thread's own when something waits, one lock otherwise; call it
    /// outside any loan of this thread, whose pin would hold the values back itself.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use gaspi_segments::Slots;
    ///
    /// let slots = Slots::new(1);
    /// slots.try_insert(0, Arc::new(1u32)).unwrap();
    /// let loan = slots.get(0).expect("present");
    /// slots.replace(0, None).unwrap();
    /// // The loan's pin holds the old value back.
    /// assert_eq!(slots.release_retired(), 1);
    /// drop(loan);
    /// assert_eq!(slots.release_retired(), 0);
    /// ```
    pub fn release_retired(&self) -> usize {
        self.collect_until(|retired| retired.values.is_empty());
        let retired = self.lock();
        retired.values.len() + retired.dropping
    }

    /// Moves the epoch on with a few pins of this thread's own, running the releases that
    /// became possible, until `done` holds of the retired list or the tries run out.
    fn collect_until(&self, done: impl Fn(&Retired<T>) -> bool) {
        // A few tries: the epoch's walk over its threads may stall on one that is leaving.
        for _ in 0..RELEASE_TRIES {
            if done(&self.lock()) {
                break;
            }
            crossbeam_epoch::pin().flush();
        }
    }

    /// Puts `value` in slot `index` if it is empty; else hands `value` back.
    ///
    /// # Errors
    /// `Err(Some(value))` when the slot holds a value, `Err(None)` when `index` is not below
    /// [`len`](Self::len) (and `value` was dropped).
    pub fn try_insert(
        &self,
        index: usize,
        value: Arc<T>,
    ) -> std::result::Result<(), Option<Arc<T>>> {
        let _changes = self.lock();
        let slot = self.slot(index).map_err(|_| None)?;
        if !slot.load(Ordering::Relaxed).is_null() {
            return Err(Some(value));
        }
        // Changes are serialised by `_changes`: the slot is still empty.
        slot.store(Arc::into_raw(value).cast_mut(), Ordering::Release);
        Ok(())
    }

    fn slot(&self, index: usize) -> Result<&AtomicPtr<T>> {
        self.slots.get(index).ok_or(Error::SlotOutOfRange {
            index,
            len: self.slots.len(),
        })
    }

    fn lock(&self) -> MutexGuard<'_, Retired<T>> {
        // A panic while a change held the lock left the list consistent (each step is whole).
        self.retired.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<T: Send + Sync + 'static> Drop for Slots<T> {
    fn drop(&mut self) {
        for slot in self.slots.iter_mut() {
            let ptr = *slot.get_mut();
            if !ptr.is_null() {
                // SAFETY: the slot owns the strong count `ptr` stands for; no loan can be alive
                // (loans borrow the table), and the slot is dropped with the table.
                drop(unsafe { Arc::from_raw(ptr) });
            }
        }
    }
}

impl<T: Send + Sync + 'static + std::fmt::Debug> std::fmt::Debug for Slots<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let full = (0..self.len()).filter(|&i| self.get(i).is_some()).count();
        f.debug_struct("Slots")
            .field("len", &self.len())
            .field("full", &full)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicUsize;

    /// Counts its drops into a shared counter.
    #[derive(Debug)]
    struct Counted(Arc<AtomicUsize>, usize);

    impl Drop for Counted {
        fn drop(&mut self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn empty_and_out_of_range_slots_lend_nothing() {
        let slots: Slots<u32> = Slots::new(2);
        assert!(slots.get(0).is_none());
        assert!(slots.get(2).is_none());
        assert!(!slots.is_occupied(0) && !slots.is_occupied(2));
        assert!(slots.get_arc(5).is_none());
        assert!(matches!(
            slots.replace(2, Some(Arc::new(1))),
            Err(Error::SlotOutOfRange { index: 2, len: 2 })
        ));
        assert_eq!(slots.try_insert(9, Arc::new(1)), Err(None));
    }

    #[test]
    fn insert_refuses_a_full_slot_and_replace_returns_the_old_value() {
        let slots = Slots::new(3);
        slots.try_insert(0, Arc::new(10)).unwrap();
        assert!(slots.is_occupied(0) && !slots.is_occupied(1));
        assert_eq!(slots.try_insert(0, Arc::new(11)), Err(Some(Arc::new(11))));
        assert_eq!(*slots.get(0).unwrap(), 10);
        assert_eq!(
            slots.replace(0, Some(Arc::new(12))).unwrap(),
            Some(Arc::new(10))
        );
        assert_eq!(*slots.get_arc(0).unwrap(), 12);
        assert_eq!(slots.replace(0, None).unwrap(), Some(Arc::new(12)));
        assert!(slots.get(0).is_none());
        assert_eq!(slots.replace(0, None).unwrap(), None);
    }

    #[test]
    fn a_loan_outlives_the_replacement_and_every_value_is_dropped_once() {
        let drops = Arc::new(AtomicUsize::new(0));
        let slots = Slots::new(1);
        slots
            .try_insert(0, Arc::new(Counted(Arc::clone(&drops), 1)))
            .unwrap();
        let loan = slots.get(0).unwrap();
        drop(slots.replace(0, Some(Arc::new(Counted(Arc::clone(&drops), 2)))));
        assert_eq!(loan.1, 1, "the lent value is intact");
        assert_eq!(drops.load(Ordering::SeqCst), 0, "not released while lent");
        drop(loan);
        drop(slots);
        assert_eq!(drops.load(Ordering::SeqCst), 2);
    }

    #[test]
    fn a_value_held_back_by_another_threads_loan_is_released_once_it_ends() {
        let drops = Arc::new(AtomicUsize::new(0));
        let slots = Slots::new(1);
        slots
            .try_insert(0, Arc::new(Counted(Arc::clone(&drops), 1)))
            .unwrap();
        let (lent, release) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let loan = slots.get(0).expect("present");
                lent.wait();
                release.wait();
                drop(loan);
                lent.wait();
            });
            lent.wait();
            drop(slots.replace(0, None));
            assert_eq!(
                slots.release_retired(),
                1,
                "held back by the other thread's loan"
            );
            assert_eq!(drops.load(Ordering::SeqCst), 0);
            release.wait();
            lent.wait();
            released_within_10_s(&slots);
            assert_eq!(drops.load(Ordering::SeqCst), 1, "released by the calls");
        });
    }

    /// Calls `release_retired` until it counts nothing, failing after 10 s: other tests of this
    /// process pin the same (global) epoch meanwhile and may hold a release back for a moment
    /// of their own.
    fn released_within_10_s<T: Send + Sync + 'static>(slots: &Slots<T>) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while slots.release_retired() != 0 {
            assert!(std::time::Instant::now() < deadline, "never released");
            std::thread::yield_now();
        }
    }

    /// Tells `started` when its drop begins, then waits for `go` (10 s at most, so that a
    /// failed test ends) before it counts the drop.
    struct Gated {
        started: std::sync::mpsc::Sender<()>,
        go: Mutex<std::sync::mpsc::Receiver<()>>,
        drops: Arc<AtomicUsize>,
    }

    impl Drop for Gated {
        fn drop(&mut self) {
            let _ = self.started.send(());
            let go = self.go.lock().unwrap_or_else(|e| e.into_inner());
            let _ = go.recv_timeout(std::time::Duration::from_secs(10));
            self.drops.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn a_value_counts_as_waiting_until_its_drop_has_ended() {
        let (started_tx, started) = std::sync::mpsc::channel();
        let (go, go_rx) = std::sync::mpsc::channel();
        let drops = Arc::new(AtomicUsize::new(0));
        let slots = Slots::new(1);
        let gated = Gated {
            started: started_tx,
            go: Mutex::new(go_rx),
            drops: Arc::clone(&drops),
        };
        assert!(slots.try_insert(0, Arc::new(gated)).is_ok(), "inserted");
        let (lent, ended) = (std::sync::Barrier::new(2), std::sync::Barrier::new(2));
        std::thread::scope(|s| {
            s.spawn(|| {
                let loan = slots.get(0).expect("present");
                lent.wait();
                ended.wait();
                drop(loan);
                // Runs the release here (or a pin of another thread does): its drop waits.
                slots.release_retired();
            });
            lent.wait();
            drop(slots.replace(0, None));
            ended.wait();
            let began = started.recv_timeout(std::time::Duration::from_secs(10));
            began.expect("the release began");
            assert_eq!(slots.release_retired(), 1, "counted while its drop runs");
            go.send(()).expect("the drop waits");
            released_within_10_s(&slots);
            assert_eq!(
                drops.load(Ordering::SeqCst),
                1,
                "dropped once it no longer counts"
            );
        });
    }

    #[test]
    fn readers_racing_writers_see_whole_values_and_nothing_leaks() {
        let drops = Arc::new(AtomicUsize::new(0));
        let made = AtomicUsize::new(0);
        // Fewer under miri, where 20,000 did not end in 15 minutes.
        let rounds = if cfg!(miri) { 200 } else { 20_000 };
        let slots: Slots<Counted> = Slots::new(4);
        std::thread::scope(|s| {
            for _ in 0..3 {
                s.spawn(|| {
                    for i in 0..rounds {
                        if let Some(v) = slots.get(i % 4) {
                            // Each value holds its slot's index: a torn or freed one would not.
                            assert_eq!(v.1 % 4, i % 4);
                        }
                        if let Some(v) = slots.get_arc((i + 1) % 4) {
                            assert_eq!(v.1 % 4, (i + 1) % 4);
                        }
                    }
                });
            }
            s.spawn(|| {
                for i in 0..rounds {
                    let index = i % 4;
                    let value = (i % 3 != 0).then(|| {
                        made.fetch_add(1, Ordering::SeqCst);
                        Arc::new(Counted(Arc::clone(&drops), i))
                    });
                    slots.replace(index, value).unwrap();
                }
            });
        });
        drop(slots);
        assert_eq!(drops.load(Ordering::SeqCst), made.load(Ordering::SeqCst));
    }
}
