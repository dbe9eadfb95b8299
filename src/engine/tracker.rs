//! [`Tracker`]: the one way the runtime counts operations in flight.
//!
//! Every kind of completion tracking (a user queue, a library's batch, a group's allreduce
//! writes) is a tracker: it counts the operations posted and not yet completed, per target
//! rank, and keeps the first failure among them for the next wait to report. Counting per rank
//! is what lets a wait name the ranks it depends on (to watch their health), and drop the
//! operations towards a rank that died, which may never complete (shm).
//!
//! Every operation is counted down exactly once, whichever comes first: its completion, its
//! refusal by the provider, or the drop of its rank. A late completion of a dropped operation
//! finds its rank's count already down and changes nothing, its failure included.

use crate::error::{Error, Rank};
use crate::sync::{lock, AtomicBool, AtomicU32, Mutex, Ordering};

/// Counts of operations in flight, with the first failure among them.
#[derive(Debug)]
pub(crate) struct Tracker {
    outstanding: AtomicU32,
    counts: Counts,
    failed: AtomicBool,
    failure: Mutex<Option<Error>>,
}

/// Per-rank counts: an array for trackers that talk to many ranks (user queues), a short list
/// for those that talk to a few (a library's batch), so that creating one costs nothing per
/// rank of the job.
#[derive(Debug)]
enum Counts {
    Dense(Box<[AtomicU32]>),
    Sparse(Mutex<Vec<(Rank, u32)>>),
}

impl Tracker {
    /// A tracker with one counter per rank of a job of `ranks`.
    pub(crate) fn dense(ranks: u32) -> Self {
        Self::with(Counts::Dense(
            (0..ranks).map(|_| AtomicU32::new(0)).collect(),
        ))
    }

    /// A tracker that lists the ranks it has operations towards.
    pub(crate) fn sparse() -> Self {
        Self::with(Counts::Sparse(Mutex::new(Vec::new())))
    }

    fn with(counts: Counts) -> Self {
        Tracker {
            outstanding: AtomicU32::new(0),
            counts,
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        }
    }

    /// Counts `n` operations towards `rank` that are about to be posted, unless the tracker
    /// would then hold more than `limit`. Returns whether they were counted.
    pub(crate) fn reserve(&self, rank: Rank, n: u32, limit: u32) -> bool {
        let reserved = self
            .outstanding
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |cur| {
                cur.checked_add(n).filter(|&next| next <= limit)
            })
            .is_ok();
        if reserved {
            match &self.counts {
                Counts::Dense(counts) => {
                    if let Some(count) = counts.get(rank as usize) {
                        count.fetch_add(n, Ordering::AcqRel);
                    }
                }
                Counts::Sparse(list) => {
                    let mut list = lock(list);
                    match list.iter_mut().find(|(r, _)| *r == rank) {
                        Some((_, count)) => *count += n,
                        None => list.push((rank, n)),
                    }
                }
            }
        }
        reserved
    }

    /// Counts down up to `n` operations towards `rank` (completed, refused, or dropped);
    /// returns how many were still counted.
    pub(crate) fn take(&self, rank: Rank, n: u32) -> u32 {
        let taken = self.uncount(rank, n);
        self.outstanding.fetch_sub(taken, Ordering::AcqRel);
        taken
    }

    /// Counts down one operation towards `rank` that ended, and records `failure` (when it
    /// failed) for the next wait only if the operation was still counted: one dropped with its
    /// dead rank was reported by the wait that dropped it, and its late failure must not fail
    /// the next wait of a queue that has moved on. The failure is recorded before the total
    /// falls, so a wait that sees nothing outstanding sees the failure too.
    ///
    /// A failed operation is counted down and its failure recorded under the failure's lock,
    /// so a wait that drops `rank` and then takes the failure with
    /// [`settle_failure`](Self::settle_failure) finds it, or finds the operation dropped: a
    /// failure that lands between the two would fail the next wait with a death already
    /// reported.
    pub(crate) fn finish(&self, rank: Rank, failure: Option<impl FnOnce() -> Error>) -> u32 {
        let taken = match failure {
            None => self.uncount(rank, 1),
            Some(failure) => {
                // Made before the lock: it may look at the rank's health.
                let error = failure();
                let mut slot = lock(&self.failure);
                let taken = self.uncount(rank, 1);
                if taken > 0 {
                    self.record(&mut slot, error);
                }
                taken
            }
        };
        self.outstanding.fetch_sub(taken, Ordering::AcqRel);
        taken
    }

    /// The per-rank part of [`take`](Self::take): the total is the caller's to lower.
    fn uncount(&self, rank: Rank, n: u32) -> u32 {
        match &self.counts {
            Counts::Dense(counts) => {
                let Some(count) = counts.get(rank as usize) else {
                    return 0;
                };
                let before = count
                    .fetch_update(Ordering::AcqRel, Ordering::Acquire, |c| {
                        Some(c.saturating_sub(n))
                    })
                    .unwrap_or_else(|c| c);
                before.min(n)
            }
            Counts::Sparse(list) => {
                let mut list = lock(list);
                let Some(at) = list.iter().position(|(r, _)| *r == rank) else {
                    return 0;
                };
                let count = &mut list[at].1;
                let taken = (*count).min(n);
                *count -= taken;
                if *count == 0 {
                    list.swap_remove(at);
                }
                taken
            }
        }
    }

    /// Drops every operation towards `rank`; returns how many there were.
    pub(crate) fn drop_rank(&self, rank: Rank) -> u32 {
        self.take(rank, u32::MAX)
    }

    /// Operations counted and not yet counted down.
    pub(crate) fn outstanding(&self) -> u32 {
        self.outstanding.load(Ordering::Acquire)
    }

    /// The ranks this tracker has operations towards.
    pub(crate) fn targets(&self) -> Vec<Rank> {
        match &self.counts {
            Counts::Dense(counts) => counts
                .iter()
                .enumerate()
                .filter(|(_, c)| c.load(Ordering::Acquire) > 0)
                .map(|(r, _)| r as Rank)
                .collect(),
            Counts::Sparse(list) => lock(list).iter().map(|&(r, _)| r).collect(),
        }
    }

    /// Records that an operation failed; the first failure is kept until taken.
    pub(crate) fn fail(&self, error: Error) {
        self.record(&mut lock(&self.failure), error);
    }

    /// Keeps `error` in `slot` (the failure, locked) unless an earlier one is kept.
    fn record(&self, slot: &mut Option<Error>, error: Error) {
        if slot.is_none() {
            *slot = Some(error);
            self.failed.store(true, Ordering::Release);
        }
    }

    /// Takes the failure recorded since the last call, if any.
    pub(crate) fn take_failure(&self) -> Option<Error> {
        if !self.failed.load(Ordering::Acquire) {
            return None;
        }
        self.settle_failure()
    }

    /// Takes the failure recorded since the last call, if any, under its lock: after
    /// [`drop_rank`](Self::drop_rank), this also waits out a failed operation towards that
    /// rank that was counted down before the drop and is still recording its failure (see
    /// [`finish`](Self::finish)).
    pub(crate) fn settle_failure(&self) -> Option<Error> {
        let mut failure = lock(&self.failure);
        self.failed.store(false, Ordering::Release);
        failure.take()
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::*;

    #[test]
    fn limits_hold_and_every_operation_counts_down_once() {
        for tracker in [Tracker::dense(4), Tracker::sparse()] {
            assert!(tracker.reserve(1, 2, 3));
            assert!(!tracker.reserve(2, 2, 3), "would exceed the limit");
            assert!(tracker.reserve(2, 1, 3));
            assert_eq!(tracker.outstanding(), 3);
            let mut targets = tracker.targets();
            targets.sort_unstable();
            assert_eq!(targets, [1, 2]);
            assert_eq!(tracker.take(1, 1), 1);
            assert_eq!(tracker.drop_rank(1), 1);
            // A late completion of the dropped operation changes nothing.
            assert_eq!(tracker.take(1, 1), 0);
            assert_eq!(tracker.outstanding(), 1);
            assert_eq!(tracker.targets(), [2]);
            assert_eq!(tracker.take(2, 1), 1);
            assert_eq!(tracker.outstanding(), 0);
            assert!(tracker.targets().is_empty());
        }
    }

    #[test]
    fn the_first_failure_is_kept_until_taken() {
        let tracker = Tracker::sparse();
        assert!(tracker.take_failure().is_none());
        tracker.fail(Error::Timeout);
        tracker.fail(Error::Finalized);
        assert!(matches!(tracker.take_failure(), Some(Error::Timeout)));
        assert!(tracker.take_failure().is_none());
    }

    #[test]
    fn a_failure_counts_only_for_an_operation_still_counted() {
        for tracker in [Tracker::dense(4), Tracker::sparse()] {
            assert!(tracker.reserve(1, 2, 8));
            assert_eq!(tracker.drop_rank(1), 2);
            // The dropped operations fail late: the wait that dropped them reported the rank.
            assert_eq!(tracker.finish(1, Some(|| Error::Timeout)), 0);
            assert!(tracker.take_failure().is_none());
            assert!(tracker.reserve(2, 1, 8));
            assert_eq!(tracker.finish(2, Some(|| Error::Finalized)), 1);
            assert_eq!(tracker.outstanding(), 0);
            assert!(matches!(tracker.take_failure(), Some(Error::Finalized)));
        }
    }

    #[test]
    fn ranks_outside_a_dense_tracker_count_nothing() {
        let tracker = Tracker::dense(2);
        assert_eq!(tracker.take(7, 1), 0);
        assert_eq!(tracker.outstanding(), 0);
    }
}

/// Loom models: a failed completion racing the drop of its rank, on both kinds of counts, never
/// counts an operation down twice, keeps its failure only when it counted the operation down,
/// is reported by the wait that dropped the rank or never, and the tracker always ends empty.
#[cfg(all(test, loom))]
mod loom_tests {
    use super::*;
    use loom::sync::Arc;

    fn completion_races_drop(make: fn() -> Tracker) {
        loom::model(move || {
            let tracker = Arc::new(make());
            assert!(tracker.reserve(1, 2, 8));
            assert!(tracker.reserve(0, 1, 8));
            let completer = {
                let tracker = Arc::clone(&tracker);
                loom::thread::spawn(move || tracker.finish(1, Some(|| Error::Timeout)))
            };
            let dropped = tracker.drop_rank(1);
            let completed = completer.join().expect("the completer does not panic");
            assert_eq!(dropped + completed, 2, "each operation counted down once");
            assert_eq!(
                tracker.take_failure().is_some(),
                completed == 1,
                "a failure is kept only for an operation still counted"
            );
            assert_eq!(tracker.outstanding(), 1);
            assert_eq!(tracker.targets(), vec![0]);
        });
    }

    #[test]
    fn dense_completion_races_drop() {
        completion_races_drop(|| Tracker::dense(2));
    }

    #[test]
    fn sparse_completion_races_drop() {
        completion_races_drop(Tracker::sparse);
    }

    /// A wait that drops the dead rank while one of its operations fails: the failure is
    /// reported by that wait or not at all, never by the next one.
    fn failure_races_a_waits_drop(make: fn() -> Tracker) {
        loom::model(move || {
            let tracker = Arc::new(make());
            assert!(tracker.reserve(1, 1, 8));
            let completer = {
                let tracker = Arc::clone(&tracker);
                loom::thread::spawn(move || tracker.finish(1, Some(|| Error::Timeout)))
            };
            tracker.drop_rank(1);
            let reported = tracker.settle_failure();
            let completed = completer.join().expect("the completer does not panic");
            assert_eq!(reported.is_some(), completed == 1);
            assert!(
                tracker.take_failure().is_none(),
                "the next wait finds no failure of a dropped rank"
            );
            assert_eq!(tracker.outstanding(), 0);
        });
    }

    #[test]
    fn dense_failure_races_a_waits_drop() {
        failure_races_a_waits_drop(|| Tracker::dense(2));
    }

    #[test]
    fn sparse_failure_races_a_waits_drop() {
        failure_races_a_waits_drop(Tracker::sparse);
    }

    #[test]
    fn concurrent_reservations_respect_the_limit() {
        loom::model(|| {
            let tracker = Arc::new(Tracker::dense(2));
            let other = {
                let tracker = Arc::clone(&tracker);
                loom::thread::spawn(move || tracker.reserve(0, 2, 3))
            };
            let mine = tracker.reserve(1, 2, 3);
            let theirs = other.join().expect("the other poster does not panic");
            assert!(
                mine ^ theirs,
                "exactly one of two reservations of 2 fits under 3"
            );
            assert_eq!(tracker.outstanding(), 2);
        });
    }
}
