//! Rendezvous: small keyed collectives that set up library resources.
//!
//! A rendezvous is an allgather of one 16-byte value per member over runtime-internal messages
//! (see the `passive` module), in `ceil(log2 n)` rounds: in round `k`, a member that knows the
//! values of `c` consecutive members (itself and those before it) sends the first
//! `min(c, n - c)` of them to member `me + c` and receives as many from member `me - c`. Every
//! message carries the rendezvous's key and round, and arrivals wait in a mailbox until the
//! rendezvous with that key asks for them. So any number of rendezvous — of different
//! libraries, over overlapping groups — may be in flight in any interleaving, beside the
//! user's own collectives, which they never touch. The state lives with the caller, so one
//! that timed out continues where it stopped.

use std::collections::HashMap;

use gaspi_notifications::Deadline;

use crate::context::Inner;
use crate::error::{Error, Rank, Result};
use crate::group::Members;
use crate::sync::{lock, Mutex};

/// Internal message kind of a rendezvous message.
pub(crate) const MESSAGE: u8 = 2;
/// Kind, round, padding, key.
const HEAD: usize = 16;
/// Bytes of each member's value.
pub(crate) const WIDTH: usize = 16;

/// Bytes a rendezvous message may carry in a job of `size` ranks.
pub(crate) fn room(size: u32) -> usize {
    HEAD + WIDTH * size as usize
}

/// Rendezvous messages that arrived and were not asked for yet.
#[derive(Default)]
pub(crate) struct Mailbox {
    arrived: Mutex<HashMap<(u64, u8, Rank), Vec<u8>>>,
}

impl Mailbox {
    /// Progress engine: a rendezvous message from `from` arrived.
    pub(crate) fn deliver(&self, inner: &Inner, from: Rank, message: &[u8]) {
        // A short one can only come from a peer of another version; its rendezvous times out.
        let Some(key) = message.get(8..HEAD).and_then(|k| k.try_into().ok()) else {
            return;
        };
        let round = message[1];
        lock(&self.arrived).insert(
            (u64::from_le_bytes(key), round, from),
            message[HEAD..].to_vec(),
        );
        inner.events.notify_all();
    }

    fn take(&self, key: u64, round: u8, from: Rank) -> Option<Vec<u8>> {
        lock(&self.arrived).remove(&(key, round, from))
    }
}

/// An allgather in progress.
pub(crate) struct Allgather {
    key: u64,
    round: u8,
    /// Values of this member and the ones before it, in that order.
    known: Vec<u8>,
    sent: bool,
}

impl Allgather {
    /// An allgather under `key` of this member's `value`.
    pub(crate) fn new(key: u64, value: [u8; WIDTH]) -> Self {
        Allgather {
            key,
            round: 0,
            known: value.to_vec(),
            sent: false,
        }
    }

    /// Its key.
    pub(crate) fn key(&self) -> u64 {
        self.key
    }

    /// Runs (or continues) the allgather over `members`, this member at index `me`, until
    /// `deadline`; returns every member's value by member index.
    ///
    /// # Errors
    /// [`Error::Timeout`] (call again to continue); [`Error::RankFailed`] naming a dead
    /// member; [`Error::Protocol`] for a malformed message.
    pub(crate) fn run(
        &mut self,
        inner: &Inner,
        members: &Members,
        me: u32,
        deadline: Deadline,
    ) -> Result<Vec<[u8; WIDTH]>> {
        let n = members.len() as usize;
        let rank_at = |i: usize| members.rank_at((i % n) as u32).unwrap_or(inner.rank);
        loop {
            let c = self.known.len() / WIDTH;
            if c >= n {
                break;
            }
            let m = round_len(c, n);
            if !self.sent {
                let mut message = Vec::with_capacity(HEAD + m * WIDTH);
                message.extend_from_slice(&[MESSAGE, self.round, 0, 0, 0, 0, 0, 0]);
                message.extend_from_slice(&self.key.to_le_bytes());
                message.extend_from_slice(&self.known[..m * WIDTH]);
                inner.send_internal(rank_at(me as usize + c), &message)?;
                self.sent = true;
            }
            let from = rank_at(me as usize + n - c);
            let (key, round) = (self.key, self.round);
            let got = inner.watched_until(
                || members.ranks().into_iter(),
                deadline,
                || inner.mailbox.take(key, round, from),
            )?;
            if got.len() != m * WIDTH {
                return Err(Error::Protocol(format!(
                    "rendezvous round {round}: rank {from} sent {} bytes, not {}",
                    got.len(),
                    m * WIDTH
                )));
            }
            self.known.extend_from_slice(&got);
            self.round += 1;
            self.sent = false;
        }
        let mut values = vec![[0u8; WIDTH]; n];
        for (i, value) in self.known.chunks_exact(WIDTH).enumerate() {
            values[origin(me as usize, i, n)].copy_from_slice(value);
        }
        Ok(values)
    }
}

/// Values a member sends in the round where it knows `c` of `n` (its first ones, to the
/// member `c` places ahead; it gets as many from the member `c` places behind).
fn round_len(c: usize, n: usize) -> usize {
    c.min(n - c)
}

/// The member whose value is the `i`-th that member `me` of `n` knows.
fn origin(me: usize, i: usize, n: usize) -> usize {
    (me + n - i % n) % n
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Plays the rounds of all `n` members together and checks that every member ends with
    /// every value in member order (the message routing of `Allgather::run`, without the
    /// transport).
    fn simulate(n: usize) {
        let mut known: Vec<Vec<u8>> = (0..n).map(|m| vec![m as u8]).collect();
        let mut rounds = 0;
        while known[0].len() < n {
            let c = known[0].len();
            let m = round_len(c, n);
            let sent: Vec<Vec<u8>> = (0..n).map(|me| known[me][..m].to_vec()).collect();
            for (me, values) in known.iter_mut().enumerate() {
                values.extend_from_slice(&sent[(me + n - c) % n]);
            }
            rounds += 1;
        }
        assert_eq!(rounds, (n as f64).log2().ceil() as u32);
        for (me, values) in known.iter().enumerate() {
            let mut by_index = vec![0u8; n];
            for (i, &v) in values.iter().enumerate() {
                by_index[origin(me, i, n)] = v;
            }
            assert_eq!(
                by_index,
                (0..n as u8).collect::<Vec<_>>(),
                "n={n} member {me}"
            );
        }
    }

    #[test]
    fn every_member_learns_every_value() {
        for n in 1..=33 {
            simulate(n);
        }
    }
}
