//! The all-ranks barrier: a dissemination barrier over notification-only writes.
//!
//! Round `k` of a barrier notifies rank `(me + 2^k) mod n` and waits for rank
//! `(me - 2^k) mod n`, so it finishes in `ceil(log2 n)` rounds for any `n`. Each round uses its
//! own system notification slot, and consecutive barriers alternate between two banks of slots:
//! a peer can be at most one barrier ahead (it cannot leave barrier `e + 1` before we entered
//! it), so the bank it writes for `e + 1` is never the one we are still reading for `e`.
//!
//! The state (epoch and round) lives in the context, so a barrier that timed out is continued,
//! not restarted, by the next call — GASPI's semantics for collectives with timeouts.

use gaspi_notifications::{Deadline, Timeout};

use crate::context::Context;
use crate::error::{Error, Result};
use crate::wire::WireNotification;

/// Slots per bank; enough rounds for 2^32 ranks.
const ROUNDS_PER_BANK: u32 = 32;

/// Progress of the barrier in flight.
#[derive(Debug, Default)]
pub(crate) struct BarrierState {
    epoch: u64,
    round: u32,
    /// Whether this round's notification was already sent (a timeout may come after sending).
    sent: bool,
}

impl Context {
    /// Blocks until every rank has entered the barrier, or until `timeout`.
    ///
    /// After [`Error::Timeout`] call it again to continue the same barrier. Calls from several
    /// threads of one rank are serialised; each completed call is one barrier of the job.
    pub fn barrier(&self, timeout: Timeout) -> Result<()> {
        let n = self.inner.size;
        if n == 1 {
            return Ok(());
        }
        let deadline = timeout.deadline();
        let mut state = self.inner.barrier.lock().unwrap_or_else(|e| e.into_inner());
        let me = self.inner.rank;
        let value = (state.epoch as u32).wrapping_add(1).max(1);
        let bank = (state.epoch % 2) as u32 * ROUNDS_PER_BANK;
        while (1u64 << state.round) < u64::from(n) {
            let dist = 1u32 << state.round;
            let slot = bank + state.round;
            if !state.sent {
                let to = ((u64::from(me) + u64::from(dist)) % u64::from(n)) as u32;
                self.system_notify(to, WireNotification::system(slot, value))?;
                state.sent = true;
            }
            let table = &self.inner.system_notifications;
            table
                .wait_some(slot, 1, remaining(deadline), self.inner.waiter())
                .map_err(|_| Error::Timeout)?;
            // The slot belongs to this round only; consuming it cannot race with a peer's next
            // write to it (see the module doc on banks).
            let got = table.reset(slot).unwrap_or(0);
            if got != value {
                return Err(Error::Protocol(format!(
                    "barrier round {} expected epoch tag {value}, got {got}",
                    state.round
                )));
            }
            state.round += 1;
            state.sent = false;
        }
        state.epoch += 1;
        state.round = 0;
        Ok(())
    }
}

/// What is left of `deadline`, as a timeout for the next wait of a multi-step operation.
pub(crate) fn remaining(deadline: Deadline) -> Timeout {
    if deadline.is_test() {
        return Timeout::Test;
    }
    match deadline.remaining() {
        None => Timeout::Block,
        Some(left) if left.is_zero() => Timeout::Test,
        Some(left) => Timeout::from(left),
    }
}
