//! Dissemination: the engine behind barriers and group commits.
//!
//! Round `k` notifies member `(me + 2^k) mod n` and waits for member `(me - 2^k) mod n`, so a
//! run finishes in `ceil(log2 n)` rounds for any `n`, with notification-only writes. Each round
//! uses its own system notification slots, and consecutive runs alternate between two banks of
//! slots: a peer can be at most one run ahead (it cannot leave run `e + 1` before we entered
//! it), so the bank it writes for `e + 1` is never the one we are still reading for `e`.
//!
//! A group's allreduce runs on epochs and two banks of its own ([`REDUCE_BANKS`]), by the
//! same argument among its runs: GASPI lets one barrier and one allreduce of a group be in
//! flight at once (17.1, §11.1), so either may wait, time out or be continued while the other
//! completes, and neither may read the other's notifications or shift its alternation.
//!
//! A run either synchronises (each notification carries the run's epoch tag, checked on
//! arrival) or also combines a `(min, max)` pair of 32-bit values across all members: every
//! round forwards what the sender has folded so far, and because min and max are idempotent
//! every member holds the global pair after the last round. Group commits use the latter to
//! compare membership fingerprints.
//!
//! A group id may be deleted and created again at once, each member in its own time, so a
//! member may commit the successor while a slower one is still in the predecessor's last run.
//! The successor's epochs start again at 0, so the alternation alone cannot keep them apart:
//! combining runs (commits) therefore use a third bank of their own, and a commit closes with
//! a synchronising run. A member finishes a combining run only once every member entered it,
//! hence left the predecessor; so the successor's first write into the alternating banks
//! finds every member past the predecessor (and so does its first allreduce, which comes
//! after the commit), and its commit, meanwhile, writes where no predecessor's barrier or
//! allreduce reads. (Two commits in a row, with no run of the predecessor in between, are
//! kept apart by the closing run: a member that left the predecessor's commit saw every
//! member finish its combining run.)
//!
//! The state (epoch, round, what was sent, the pair) lives with the group, so a run that timed
//! out is continued, not restarted, by the next call — GASPI's semantics for collectives with
//! timeouts.

use gaspi_notifications::Deadline;

use crate::context::Context;
use crate::error::{Error, Rank, Result, SegmentId};
use crate::wire::WireNotification;

/// Rounds a run may have: enough for 2^32 members.
const ROUNDS: u32 = 32;
/// Slots per round: two values (the `(min, max)` pair; synchronising runs use the first).
const SLOTS_PER_ROUND: u32 = 2;
/// Slots per bank (an allreduce schedule uses at most this many).
pub(crate) const BANK: u32 = ROUNDS * SLOTS_PER_ROUND;
/// Where, among a group's slots, the two banks its allreduce alternates between begin.
pub(crate) const REDUCE_BANKS: u32 = 3 * BANK;
/// System notification slots each group owns: the two banks runs alternate between, the
/// bank of combining runs, and the allreduce's two.
pub(crate) const SLOTS_PER_GROUP: u32 = 5 * BANK;

/// Progress of the dissemination run in flight of one group (its allreduce keeps its own, see
/// [`ReduceState`](crate::allreduce::ReduceState)).
#[derive(Debug, Default)]
pub(crate) struct CollState {
    /// Runs completed so far; selects the bank of the next.
    epoch: u64,
    round: u32,
    /// How many of this round's notifications were already sent (a timeout may come after
    /// sending some).
    sent: u8,
    /// The `(min, max)` pair a combining run has folded so far.
    pair: Option<(u32, u32)>,
    /// Whether a run was given up ([`abandon`](Self::abandon)): partners' notifications of
    /// it may still come, or lie unread.
    given_up: bool,
    /// What the run in flight (or the last one) synchronises.
    purpose: Purpose,
    /// A commit's combining run agreed and its closing synchronising run is (to be) in flight.
    pub(crate) closing: bool,
}

/// What a run synchronises. The other members pair a run with their calls of its kind, so a
/// call of another kind must not finish a run of this one that timed out: a `barrier` would
/// complete a `segment_create`'s synchronisation, and the members' later calls would pair up
/// wrongly, with no error.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Purpose {
    /// `barrier` or `group_barrier`.
    #[default]
    Barrier,
    /// The synchronisation of `segment_create` or `segment_bind` of a segment id.
    SegmentCreate(SegmentId),
    /// A group's commit.
    Commit,
    /// `finalize`'s.
    Exit,
}

impl Purpose {
    /// The call, as [`Error::CollectiveInProgress`] names it.
    fn name(self) -> &'static str {
        match self {
            Purpose::Barrier => "barrier",
            Purpose::SegmentCreate(_) => "segment_create",
            Purpose::Commit => "group_commit",
            Purpose::Exit => "finalize",
        }
    }

    /// A number per purpose, and per segment id for `SegmentCreate`: below 2^9.
    fn code(self) -> u32 {
        match self {
            Purpose::Barrier => 0,
            Purpose::Commit => 1,
            Purpose::Exit => 2,
            Purpose::SegmentCreate(id) => 3 + u32::from(id),
        }
    }
}

/// Bits of a synchronising run's tag that count its epoch; the purpose's code fills the rest.
const EPOCH_BITS: u32 = 23;

/// The value every notification of synchronising run `epoch` of `purpose` carries: never 0,
/// different for consecutive epochs, and different for members that called different
/// collectives (a `barrier` where a partner called `segment_create` or `finalize`), which
/// would otherwise pair up with no error.
fn sync_tag(epoch: u64, purpose: Purpose) -> u32 {
    let epoch = (epoch % ((1 << EPOCH_BITS) - 1)) as u32 + 1;
    purpose.code() << EPOCH_BITS | epoch
}

/// First system notification slot of the bank that run `epoch` of a group uses, given the
/// group's first slot.
pub(crate) fn bank_start(first: u32, epoch: u64) -> u32 {
    first + (epoch % 2) as u32 * BANK
}

impl CollState {
    /// Whether no run is in flight.
    pub(crate) fn idle(&self) -> bool {
        !self.running_run()
    }

    /// Whether a dissemination run is in flight (begun, or a commit between its two runs).
    fn running_run(&self) -> bool {
        self.round != 0 || self.sent != 0 || self.pair.is_some() || self.closing
    }

    /// The call whose run timed out and is still in flight, when a run of `purpose` may not
    /// continue it.
    pub(crate) fn conflict(&self, purpose: Purpose) -> Option<&'static str> {
        self.running().filter(|_| self.purpose != purpose)
    }

    /// The call whose dissemination run is in flight, if one is.
    fn running(&self) -> Option<&'static str> {
        self.running_run().then(|| self.purpose.name())
    }

    /// The call other than a barrier whose run is in flight, if one is: an allreduce may run
    /// beside a barrier, not beside the others.
    pub(crate) fn holding(&self) -> Option<&'static str> {
        self.running().filter(|_| self.purpose != Purpose::Barrier)
    }

    /// Claims the group's runs for a run of `purpose`: the one in flight if it is of that
    /// purpose, else a new one.
    ///
    /// # Errors
    /// [`Error::CollectiveInProgress`] naming the call of another purpose whose run is in
    /// flight.
    pub(crate) fn claim(&mut self, group: crate::GroupId, purpose: Purpose) -> Result<()> {
        if let Some(pending) = self.conflict(purpose) {
            return Err(Error::CollectiveInProgress { group, pending });
        }
        self.purpose = purpose;
        Ok(())
    }

    /// Gives up the run in flight after an error that is not a timeout. Members no longer
    /// agree on where the group's collectives stand, so they must re-agree (delete and
    /// re-create the group) before its next collective.
    pub(crate) fn abandon(&mut self) {
        *self = CollState {
            epoch: self.epoch + 1,
            given_up: true,
            ..CollState::default()
        };
    }

    /// Whether every notification partners sent this member for the group's runs was taken:
    /// no run is in flight, and none was given up. A run completes only once it took every
    /// notification addressed to this member.
    pub(crate) fn settled(&self) -> bool {
        self.idle() && !self.given_up
    }

    /// Starts a combining run with this member's value, unless one is already in flight (a
    /// call after a timeout continues it).
    pub(crate) fn start_pair(&mut self, value: u32) {
        if self.idle() {
            self.pair = Some((value, value));
        }
    }

    /// Takes the combined pair after a combining run completed.
    pub(crate) fn take_pair(&mut self) -> Option<(u32, u32)> {
        self.pair.take()
    }
}

/// Who takes part in a run: `n` members, this one at index `me`, and their slot range.
pub(crate) struct Spread<'a> {
    pub group: crate::GroupId,
    pub n: u32,
    pub me: u32,
    pub rank_of: &'a dyn Fn(u32) -> Rank,
    /// First system notification slot of the group.
    pub slots: u32,
    pub watch: Watch,
}

/// Whose death ends a run's waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Watch {
    /// Every member's: a live partner may itself be stuck on a dead member.
    Members,
    /// Only the partner's that a round waits for. For a run that every member enters only
    /// after a full run has shown them all alive (finalize's exit run): a member gone since
    /// then either died in this run, which its partners see and, failing, pass on, or
    /// completed it and left the job, which is no failure, and which watching every member
    /// would take for one.
    Partners,
}

impl Context {
    /// `e`, a send's failure, unless it names a member gone after another member's death was
    /// seen: a survivor that finalized and exited after a rank was killed is not the cause.
    fn earliest_death(&self, spread: &Spread<'_>, e: Error) -> Error {
        if !matches!(e, Error::RankFailed { .. }) {
            return e;
        }
        let members = (0..spread.n).map(spread.rank_of);
        self.inner.health.first_known(members).unwrap_or(e)
    }

    /// Runs (or continues) one dissemination over `spread`, bounded by `deadline`.
    pub(crate) fn disseminate(
        &self,
        spread: &Spread<'_>,
        state: &mut CollState,
        deadline: Deadline,
    ) -> Result<()> {
        let n = u64::from(spread.n);
        let tag = sync_tag(state.epoch, state.purpose);
        let bank = match state.pair {
            None => bank_start(spread.slots, state.epoch),
            Some(_) => spread.slots + 2 * BANK,
        };
        while (1u64 << state.round) < n {
            let slot = bank + state.round * SLOTS_PER_ROUND;
            let dist = 1u64 << state.round;
            let to = (spread.rank_of)(((u64::from(spread.me) + dist) % n) as u32);
            let (notes, count) = match state.pair {
                None => ([WireNotification::system(slot, tag); 2], 1),
                Some((lo, hi)) => (
                    [
                        WireNotification::system(slot, lo),
                        WireNotification::system(slot + 1, hi),
                    ],
                    2,
                ),
            };
            // Sent one by one under the deadline; what went out is not sent again.
            while let Some(&note) = notes[..count].get(usize::from(state.sent)) {
                self.inner
                    .system_notify(to, note, deadline)
                    .map_err(|e| self.earliest_death(spread, e))?;
                state.sent += 1;
            }
            let table = &self.inner.system_notifications;
            let wanted = if state.pair.is_some() { 2 } else { 1 };
            let from = ((u64::from(spread.me) + n - dist % n) % n) as u32;
            let watched = || {
                let watching = match spread.watch {
                    Watch::Members => 0..spread.n,
                    Watch::Partners => from..from + 1,
                };
                watching.map(spread.rank_of)
            };
            for s in slot..slot + wanted {
                // Leaves a slot that already arrived in place: a call after a timeout finds it.
                self.inner
                    .watched(watched, deadline, |slice, waiter| {
                        table.wait_some(s, 1, slice, waiter).ok()
                    })
                    .map_err(|e| self.earliest_death(spread, e))?;
            }
            // The slots belong to this round only, and only the thread that holds the
            // group's dissemination state consumes them; a peer writes them again only in the
            // run after next, which it enters after this member sent its part of the next one
            // (see the module doc on banks): so a load and a store take them, no swap.
            let first = table.take_exclusive(slot).unwrap_or(0);
            match &mut state.pair {
                // The partner called another collective, or this one with other arguments
                // (an allreduce's notifications carry their arguments' fingerprint). The run
                // can never complete as either call: it is given up, as an allreduce whose
                // arguments differ is.
                None if first != tag => {
                    state.abandon();
                    return Err(Error::CollectiveMismatch {
                        group: spread.group,
                        rank: (spread.rank_of)(from),
                    });
                }
                None => {}
                Some((lo, hi)) => {
                    let second = table.take_exclusive(slot + 1).unwrap_or(0);
                    *lo = (*lo).min(first);
                    *hi = (*hi).max(second);
                }
            }
            state.round += 1;
            state.sent = 0;
        }
        state.epoch += 1;
        state.round = 0;
        Ok(())
    }
}
