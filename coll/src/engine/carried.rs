//! What this member's signals told one other member of its `freed` (see "Eager runs" in the
//! engine): the highest count they carried, and of those, the highest the member surely
//! took.
//!
//! A receiver learns a carried count only when it takes the signal, which it may not do
//! before its own put goes; a wait that relies on a count the receiver has not taken may
//! wait for that receiver's put while the receiver waits for the count. A count carried in
//! run `r` is surely taken once the receiver's own count passed `r`: the receiver gave `r`
//! up, so it waited for every signal sent to it in `r`, this one included (a member whose
//! run `r` failed instead is out of step with the team anyway: the signal left in its
//! notification block fails the run that uses the block next). A member in lock step so
//! relies on trust for no count: the one its signal of run `r` carried is confirmed by the
//! count the receiver's signal of run `r + 1` carries back.
//!
//! All of it is written under the engine's state lock, like the counts it sits beside.

use std::sync::atomic::{AtomicU64, Ordering};

/// The counts this member's signals carried to one other member.
#[derive(Debug, Default)]
pub(super) struct Carried {
    /// The highest count a signal to the member carried.
    highest: AtomicU64,
    /// The highest count carried in a run the member has given up since: surely taken.
    taken: AtomicU64,
    /// Per parity of its run, the last carry not confirmed yet: its run and its count (0:
    /// none, since a count of 0 tells nothing). In lock step the carry of run `r` is
    /// confirmed as that of run `r + 2` goes, into the same slot; a carry overwritten
    /// before (runs out of step) is merely never confirmed.
    pending: [(AtomicU64, AtomicU64); 2],
}

impl Carried {
    /// The highest count a signal to the member carried, taken or not.
    pub(super) fn highest(&self) -> u64 {
        self.highest.load(Ordering::Relaxed)
    }

    /// Notes that a signal of run `run` carried `count` to the member, whose own count (as
    /// this member knows it) is `known`.
    pub(super) fn note(&self, run: u64, count: u64, known: u64) {
        // Loads and stores: every writer holds the engine's lock.
        if count > self.highest.load(Ordering::Relaxed) {
            self.highest.store(count, Ordering::Relaxed);
        }
        let (r, c) = &self.pending[(run & 1) as usize];
        let (held_run, held) = (r.load(Ordering::Relaxed), c.load(Ordering::Relaxed));
        let mut taken = self.taken.load(Ordering::Relaxed);
        if held != 0 && held_run < known && held > taken {
            taken = held;
            self.taken.store(taken, Ordering::Relaxed);
        }
        if count > taken && (count >= held || held_run < known) {
            r.store(run, Ordering::Relaxed);
            c.store(count, Ordering::Relaxed);
        }
    }

    /// The highest count the member surely took, now that its own count is `known`:
    /// confirming the carries of the runs before it.
    pub(super) fn taken(&self, known: u64) -> u64 {
        let mut taken = self.taken.load(Ordering::Relaxed);
        for (r, c) in &self.pending {
            let count = c.load(Ordering::Relaxed);
            if count != 0 && r.load(Ordering::Relaxed) < known {
                taken = taken.max(count);
                c.store(0, Ordering::Relaxed);
            }
        }
        self.taken.store(taken, Ordering::Relaxed);
        taken
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// In lock step, the count carried in run `r` is `r`, and the receiver's signal of run
    /// `r + 1`, taken in this member's run `r + 2`, tells that it gave up `r`.
    #[test]
    fn a_carry_is_taken_once_its_receiver_gave_its_run_up() {
        let carried = Carried::default();
        assert_eq!(carried.taken(0), 0);
        for run in 1..100 {
            // The receiver's signal of the run before said it gave up the runs before that.
            carried.note(run, run, run - 1);
            assert_eq!(carried.highest(), run);
            assert_eq!(carried.taken(run - 1), run.saturating_sub(2), "run {run}");
            // Its signal of this run: the run before is given up, this one not yet.
            assert_eq!(carried.taken(run), run - 1, "run {run}");
        }
    }

    #[test]
    fn a_carry_is_never_taken_before_its_run_was_given_up() {
        let carried = Carried::default();
        carried.note(10, 8, 0);
        carried.note(13, 11, 0);
        assert_eq!(carried.highest(), 11);
        // Run 10 not given up: nothing taken, however often asked.
        assert_eq!(carried.taken(10), 0);
        assert_eq!(carried.taken(10), 0);
        assert_eq!(carried.taken(11), 8);
        assert_eq!(carried.taken(13), 8);
        assert_eq!(carried.taken(14), 11);
        // A count lower than one taken adds nothing.
        carried.note(20, 9, 14);
        assert_eq!(carried.taken(100), 11);
    }

    /// Runs out of step overwrite carries before they are confirmed: whatever is kept is
    /// still confirmed only once its own run was given up.
    #[test]
    fn carries_out_of_step_are_confirmed_no_earlier_than_their_runs() {
        let carried = Carried::default();
        for run in 5..=8 {
            carried.note(run, run, 0);
        }
        // Out of order, and a lower count than one held.
        carried.note(3, 2, 0);
        assert_eq!(carried.highest(), 8);
        for known in 0..=8 {
            let taken = carried.taken(known);
            assert!(taken < known || taken == 0, "known {known}: taken {taken}");
        }
        assert_eq!(carried.taken(9), 8);
    }
}
