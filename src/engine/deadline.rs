//! Everything that runs under a caller's deadline: posting while the provider is busy, and the
//! watched wait behind every call that waits on other ranks.
//!
//! Both follow the fault model (see the `health` module): nothing is posted to a rank known
//! dead; a post the provider keeps refusing looks at its target's health every [`POST_LOOK`];
//! a wait looks at the health of the ranks it depends on at least every [`CHECK_EVERY`], also
//! under `Timeout::Block`, and at once when a death is recorded meanwhile. A deadline that
//! passes is [`Error::Timeout`], whatever the peers are doing: only positive evidence of a
//! death is [`Error::RankFailed`].

use std::time::{Duration, Instant};

use crossbeam_utils::Backoff;
use gaspi_fabric::{Posted, Refused};
use gaspi_notifications::{Deadline, EventCount, Slice, Timeout};

use super::{Op, Waiter};
use crate::context::Inner;
use crate::error::{Error, Rank, Result};
use crate::sync::Ordering;

/// How long a watched wait sleeps at most before it looks at the health of its ranks again,
/// unless a death recorded meanwhile makes it look at once: the bound for deaths only a look
/// finds (a peer on another host over tcp, or on this host where pidfds are unavailable).
pub(crate) const CHECK_EVERY: Duration = Duration::from_secs(1);
/// How often a post that the provider keeps refusing looks at its target's health.
pub(crate) const POST_LOOK: Duration = Duration::from_millis(100);

impl Inner {
    /// Tries `attempt` (which returns whether the provider accepted the operation) until it
    /// succeeds or `deadline` passes, driving progress while the provider is busy.
    ///
    /// A `Timeout::Test` deadline makes two attempts with one progress call between them.
    ///
    /// # Errors
    /// [`Error::RankFailed`] when `rank` is known dead or found dead while the provider
    /// refuses; [`Error::Timeout`] when the deadline passed first; whatever `attempt` returns.
    pub(crate) fn retry_until(
        &self,
        rank: Rank,
        deadline: Deadline,
        mut attempt: impl FnMut() -> Result<bool>,
    ) -> Result<()> {
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        let backoff = Backoff::new();
        let mut next_look: Option<Instant> = None;
        let mut tries = 0u32;
        loop {
            if attempt()? {
                return Ok(());
            }
            tries += 1;
            if deadline.is_test() && tries >= 2 {
                return Err(Error::Timeout);
            }
            if !self.progress() {
                backoff.snooze();
            }
            let now = Instant::now();
            let look = next_look.get_or_insert(now + POST_LOOK);
            if now >= *look {
                if let Some(dead) = self.look(rank) {
                    return Err(dead);
                }
                *look = now + POST_LOOK;
            }
            if !deadline.is_test() && deadline.expired() {
                return Err(Error::Timeout);
            }
        }
    }

    /// Posts the operation `op` towards `rank` with `post` (see [`retry_until`](Self::retry_until)).
    pub(crate) fn post_until(
        &self,
        rank: Rank,
        deadline: Deadline,
        op: Op,
        mut post: impl FnMut(Op) -> std::result::Result<(), Refused<Op>>,
    ) -> Result<()> {
        let mut op = Some(op);
        self.retry_until(rank, deadline, || {
            // `op` is only empty after a successful post, after which no attempt follows.
            let Some(record) = op.take() else {
                return Ok(true);
            };
            match self.submit(record, &mut post) {
                Ok(()) => Ok(true),
                Err(Refused::Busy(record)) => {
                    op = Some(record);
                    Ok(false)
                }
                Err(Refused::Failed(e, _)) => Err(e.into()),
            }
        })
    }

    /// Injects with `inject` (see [`retry_until`](Self::retry_until)).
    pub(crate) fn inject_until(
        &self,
        rank: Rank,
        deadline: Deadline,
        mut inject: impl FnMut() -> gaspi_fabric::Result<Posted>,
    ) -> Result<()> {
        self.retry_until(rank, deadline, || Ok(inject()? == Posted::Yes))
    }

    /// Waits for `step` to succeed, bounded by `deadline`, watching the health of the ranks
    /// `ranks()` yields: those whose death would make the wait hopeless.
    ///
    /// `step(slice, waiter)` waits at most `slice`, driving progress with `waiter`, and returns
    /// `None` when that ran out or `waiter` interrupted it. It is called with slices of at most
    /// [`CHECK_EVERY`] (with a test once), and after each unsuccessful one the ranks' health is
    /// looked at. `waiter` [watches](Inner::watching) from the last such look on, so a death
    /// recorded during a step (by the same-host watcher or a failed operation) ends it at
    /// once: a wait depending on that rank fails within milliseconds, the others go on. A
    /// slice is resolved (the clock read) only by a step that has to wait, so a wait whose
    /// condition already holds never reads the clock. A rank already known dead fails the
    /// wait before it starts (after one last look at what it sent).
    ///
    /// # Errors
    /// [`Error::RankFailed`] naming the first dead rank found, or [`Error::Timeout`] when the
    /// deadline passed with every rank apparently alive.
    pub(crate) fn watched<T, R: Iterator<Item = Rank>>(
        &self,
        ranks: impl Fn() -> R,
        deadline: Deadline,
        mut step: impl FnMut(Slice, Waiter<'_>) -> Option<T>,
    ) -> Result<T> {
        // Read before each look at the ranks: a death recorded after it interrupts the step.
        let mut deaths = self.health.deaths();
        if let Some(e) = self.health.first_known(ranks()) {
            return self.last_chance(&mut step).ok_or(e);
        }
        loop {
            if let Some(value) = step(deadline.slice(CHECK_EVERY), self.watching(deaths)) {
                return Ok(value);
            }
            deaths = self.health.deaths();
            if let Some(e) = self.health.first_failed(ranks()) {
                return self.last_chance(&mut step).ok_or(e);
            }
            if deadline.expired() {
                return Err(Error::Timeout);
            }
        }
    }

    /// One more look at a watched wait whose ranks include a dead one: what the rank sent
    /// before it died still counts (a barrier it completed has released its partners), and may
    /// still wait in the completion queue of a rank that was descheduled meanwhile. Reads what
    /// the queue holds (bounded: live peers may keep it busy), then tries `step` once.
    ///
    /// The first read waits (up to [`CHECK_EVERY`]) for a read of another thread of this rank
    /// to end: that thread (the progress thread, say) may have taken the rank's last
    /// notification from the queue and lost its core before handing it on, and a plain read
    /// then finds the queue taken and reads nothing. A partner that finished `finalize` and
    /// left the job ends right after its last notification to this rank, so a look soon after
    /// its end (a [watching](Inner::watching) wait looks within milliseconds) can meet that
    /// window: the exit barrier then took the partner for a dead one.
    fn last_chance<T>(&self, step: &mut impl FnMut(Slice, Waiter<'_>) -> Option<T>) -> Option<T> {
        if self.progress_settled(CHECK_EVERY) {
            for _ in 1..64 {
                if !self.progress() {
                    break;
                }
            }
        }
        step(Timeout::Test.deadline().slice(CHECK_EVERY), self.waiter())
    }

    /// [`watched`](Self::watched) for a condition that the progress engine makes true: `poll`
    /// is polled while driving progress, as in every wait of the runtime.
    pub(crate) fn watched_until<T, R: Iterator<Item = Rank>>(
        &self,
        ranks: impl Fn() -> R,
        deadline: Deadline,
        poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.watched_until_on(&self.events, ranks, deadline, poll)
    }

    /// Waits, bounded by `deadline`, until no operation of this rank is in flight or waiting to
    /// be posted (writes the user never waited for, a dropped batch's, sends), watching every
    /// rank. Finalize drains so before its synchronisation: its notifications travel behind
    /// those operations, and a rank that leaves the job closes its endpoint with them unsent
    /// (over tcp the peers' connections reset, and a peer still waiting in the exit barrier
    /// took the rank for a dead one).
    ///
    /// # Errors
    /// [`Error::RankFailed`] naming a dead rank; [`Error::Timeout`].
    pub(crate) fn drain(&self, deadline: Deadline) -> Result<()> {
        self.watched_until(
            || 0..self.size,
            deadline,
            || {
                let idle = self.engine.in_flight.load(Ordering::Acquire) == 0
                    && !self.engine.has_retries();
                idle.then_some(())
            },
        )
    }

    /// [`watched_until`](Self::watched_until) for a condition whose changes `event` announces.
    pub(crate) fn watched_until_on<T, R: Iterator<Item = Rank>>(
        &self,
        event: &EventCount,
        ranks: impl Fn() -> R,
        deadline: Deadline,
        mut poll: impl FnMut() -> Option<T>,
    ) -> Result<T> {
        self.watched(ranks, deadline, |slice, waiter| {
            gaspi_notifications::wait_until(event, slice, &mut poll, waiter).ok()
        })
    }
}
