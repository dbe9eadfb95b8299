//! Operations that take turns on one registered buffer: segment lookups (the landing area),
//! passive sends (the send buffer) and atomics (the operand and result words).
//!
//! Only one such operation of a kind is in flight; the next one may touch the buffer once the
//! previous one completed. A turn whose wait timed out stays open, and the next caller waits for
//! it first. A turn whose target rank died is *given up*: it may never complete (shm), so the
//! buffer is taken back. That is safe because the buffer stays allocated and registered, and
//! only a dead peer could still be reading it. Each turn's context word carries a tag (its
//! number, truncated to 8 bits), so that the late completion of a turn that was given up is
//! not taken for the completion of the next one.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;

use gaspi_notifications::Deadline;

use crate::context::Inner;
use crate::error::{Error, Rank, Result};

/// The turns of one kind of operation.
#[derive(Default)]
pub(crate) struct Turns {
    /// Number of the latest turn begun (0: none yet).
    begun: AtomicU64,
    /// Number of the latest turn that completed or was given up.
    done: AtomicU64,
    /// Target rank of the latest turn.
    target: AtomicU32,
    failure: Mutex<Option<(Rank, String)>>,
}

/// One begun turn.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Turn {
    number: u64,
    rank: Rank,
}

impl Turn {
    /// What the operation's context word carries, to be handed back to [`Turns::completed`].
    pub(crate) fn tag(self) -> u8 {
        self.number as u8
    }
}

impl Turns {
    /// Progress engine: the operation with `tag` towards `rank` completed. Ignored unless it
    /// belongs to the latest turn (an earlier one was given up).
    pub(crate) fn completed(&self, tag: u8, rank: Rank, failure: Option<String>) {
        let latest = self.begun.load(Ordering::Acquire);
        if latest as u8 != tag {
            return;
        }
        if let Some(reason) = failure {
            *self.failure.lock().unwrap_or_else(|e| e.into_inner()) = Some((rank, reason));
        }
        self.done.fetch_max(latest, Ordering::AcqRel);
    }

    fn finished(&self, number: u64) -> bool {
        self.done.load(Ordering::Acquire) >= number
    }

    /// Gives `turn` up: its buffer is free for the next turn whether or not it completes.
    fn give_up(&self, turn: Turn) {
        self.done.fetch_max(turn.number, Ordering::AcqRel);
    }
}

impl Inner {
    /// Begins a turn towards `rank` once the previous turn has ended (bounded by `deadline`):
    /// it completed, or its target died and it is given up. The caller serialises turns of one
    /// kind (a lock) and must end or give up the turn it gets.
    pub(crate) fn begin_turn(&self, turns: &Turns, rank: Rank, deadline: Deadline) -> Result<Turn> {
        let previous = Turn {
            number: turns.begun.load(Ordering::Acquire),
            rank: turns.target.load(Ordering::Acquire),
        };
        if !turns.finished(previous.number) {
            let waited = self.watched_until(
                || std::iter::once(previous.rank),
                deadline,
                || turns.finished(previous.number).then_some(()),
            );
            match waited {
                Ok(()) => {}
                // Its caller has been told (a timeout, then this death is for it to find out).
                Err(Error::RankFailed { .. }) => turns.give_up(previous),
                Err(e) => return Err(e),
            }
        }
        turns
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        turns.target.store(rank, Ordering::Release);
        let number = turns.begun.fetch_add(1, Ordering::AcqRel) + 1;
        Ok(Turn { number, rank })
    }

    /// Ends `turn`, whose operation was `posted` (or failed to be, which gives the turn up):
    /// waits until it completed (bounded by `deadline`, watching its target). Its failure, or
    /// its target's death (which gives it up), is [`Error::RankFailed`]; a timeout leaves it
    /// open for the next turn to wait for.
    pub(crate) fn end_turn(
        &self,
        turns: &Turns,
        turn: Turn,
        posted: Result<()>,
        deadline: Deadline,
    ) -> Result<()> {
        if let Err(e) = posted {
            turns.give_up(turn);
            return Err(e);
        }
        let waited = self.watched_until(
            || std::iter::once(turn.rank),
            deadline,
            || turns.finished(turn.number).then_some(()),
        );
        if let Some((rank, reason)) = turns
            .failure
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take()
        {
            return Err(Error::RankFailed { rank, reason });
        }
        if matches!(waited, Err(Error::RankFailed { .. })) {
            turns.give_up(turn);
        }
        waited
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn begin(turns: &Turns, rank: Rank) -> Turn {
        turns.target.store(rank, Ordering::Release);
        let number = turns.begun.fetch_add(1, Ordering::AcqRel) + 1;
        Turn { number, rank }
    }

    #[test]
    fn a_late_completion_of_a_given_up_turn_is_ignored() {
        let turns = Turns::default();
        let first = begin(&turns, 3);
        turns.give_up(first);
        assert!(turns.finished(first.number));
        let second = begin(&turns, 1);
        turns.completed(first.tag(), 3, Some("reset".into()));
        assert!(!turns.finished(second.number));
        assert!(turns.failure.lock().expect("lock").is_none());
        turns.completed(second.tag(), 1, None);
        assert!(turns.finished(second.number));
    }

    #[test]
    fn the_failure_of_the_latest_turn_is_kept() {
        let turns = Turns::default();
        let turn = begin(&turns, 2);
        turns.completed(turn.tag(), 2, Some("broken".into()));
        assert!(turns.finished(turn.number));
        let failure = turns.failure.lock().expect("lock").take();
        assert_eq!(failure, Some((2, "broken".to_owned())));
    }
}
