//! Remote atomics on u64 words of segments: fetch-and-add and compare-and-swap.
//!
//! Two ways to run them, chosen once per job:
//!
//! * **Provider atomics** (`GASPI_ATOMICS=1`, when the provider has `FI_ATOMIC`):
//!   `fi_fetch_atomic` / `fi_compare_atomic`, executed by the target's provider, for every
//!   target, this rank included (mixing CPU and provider atomics on one word is not atomic on
//!   every fabric). Off by default because asking tcp;ofi_rxm 1.17 for `FI_ATOMIC` doubles
//!   small write_notify latency.
//! * **Target-executed atomics** (the default, and the fallback for providers without
//!   atomics): the request travels as a runtime-internal passive message; the target's progress
//!   engine performs it with a CPU atomic instruction on the word and writes the old value back
//!   into the requester's system region, the reply notification riding on that same write. An
//!   atomic on this rank's own segment is the same CPU instruction, directly. Every atomic on a
//!   word is thus a CPU atomic on the owner's memory, so they are atomic with respect to each
//!   other from every rank.
//!
//! Either way, plain reads and writes of the word (local or RMA) are not atomic with respect to
//! them. Atomics of one rank take turns on the operand and result words in the registered
//! system region (see `turns`), each waiting for its completion or reply; after a timeout the
//! next call first waits for the one in flight, and one whose target died is given up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gaspi_notifications::{Deadline, Timeout};

use crate::context::{Context, Inner};
use crate::error::{Error, Rank, Result, SegmentId};
use crate::fabric::{Posted, RemoteTarget};
use crate::progress::{OpContext, OpKind};
use crate::rma::Remote;
use crate::segment::{layout, RemoteSegment};
use crate::turns::{Turn, Turns};
use crate::wire::{WireNotification, ATOMIC_REPLY};

/// Atomics in flight on this rank (they take turns on the words in the system region, see
/// `turns`), and replies this rank owes to requesters.
#[derive(Default)]
pub(crate) struct Atomics {
    /// Serialises atomics.
    lock: Mutex<()>,
    pub(crate) turns: Turns,
    /// Replies the provider refused for now; retried by the progress engine.
    unsent: Mutex<Vec<Reply>>,
    has_unsent: AtomicBool,
}

/// What a target-executed atomic asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Request {
    seq: u32,
    segment: SegmentId,
    offset: u64,
    operand: u64,
    /// `Some` for compare-and-swap.
    compare: Option<u64>,
}

impl Request {
    const LEN: usize = 32;

    fn encode(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = u8::from(self.compare.is_some());
        b[1] = self.segment;
        b[4..8].copy_from_slice(&self.seq.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&self.operand.to_le_bytes());
        b[24..32].copy_from_slice(&self.compare.unwrap_or(0).to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        Some(Request {
            seq: u32::from_le_bytes([b[4], b[5], b[6], b[7]]),
            segment: b[1],
            offset: word(8),
            operand: word(16),
            compare: (b[0] == 1).then(|| word(24)),
        })
    }
}

/// The answer to a target-executed atomic: the old value, or why there is none.
#[derive(Debug, Clone, Copy)]
struct Reply {
    to: Rank,
    seq: u32,
    old: u64,
    status: u64,
}

/// Reply statuses.
const OK: u64 = 0;
const NO_SEGMENT: u64 = 1;
const BAD_RANGE: u64 = 2;

/// Offsets in the system region: the words a provider atomic reads, and where either kind
/// leaves its result (target-executed atomics: old value, then status).
const OPERAND: u64 = layout::ATOMIC;
const COMPARE: u64 = layout::ATOMIC + 8;
const RESULT: u64 = layout::ATOMIC + 16;
const STATUS: u64 = layout::ATOMIC + 24;

/// The reply notification's value for a turn: its tag, made non-zero.
fn reply_value(turn: Turn) -> u32 {
    u32::from(turn.tag()) + 1
}

impl Atomics {
    /// Progress engine: the target-executed atomic whose reply carries `value` was answered.
    pub(crate) fn replied(&self, value: u32) {
        // The rank only names a failure, and a reply is never one.
        self.turns.completed(value.wrapping_sub(1) as u8, 0, None);
    }

    /// Progress engine: performs the atomic `request` from `from` on this rank's segment and
    /// answers it.
    pub(crate) fn serve(&self, inner: &Inner, from: Rank, request: &[u8]) {
        // A malformed request can only come from a peer of another version; its sender times
        // out.
        let Some(r) = Request::decode(request) else {
            return;
        };
        let outcome = inner.segments.with_local(r.segment, |seg| match r.compare {
            None => seg.memory.fetch_add_u64(r.offset, r.operand),
            Some(compare) => seg.memory.compare_swap_u64(r.offset, compare, r.operand),
        });
        let (old, status) = match outcome {
            Some(Ok(old)) => (old, OK),
            Some(Err(_)) => (0, BAD_RANGE),
            None => (0, NO_SEGMENT),
        };
        let reply = Reply {
            to: from,
            seq: r.seq,
            old,
            status,
        };
        if !send_reply(inner, reply) {
            self.unsent
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(reply);
            self.has_unsent.store(true, Ordering::Release);
        }
    }

    /// Progress engine: retries replies the provider refused.
    pub(crate) fn flush_replies(&self, inner: &Inner) {
        if !self.has_unsent.load(Ordering::Acquire) {
            return;
        }
        let mut unsent = self.unsent.lock().unwrap_or_else(|e| e.into_inner());
        unsent.retain(|&reply| !send_reply(inner, reply));
        self.has_unsent.store(!unsent.is_empty(), Ordering::Release);
    }
}

/// Writes `reply` into the requester's result words, with the reply notification as the
/// write's completion data. Returns false if the provider has no room now.
fn send_reply(inner: &Inner, reply: Reply) -> bool {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&reply.old.to_ne_bytes());
    bytes[8..].copy_from_slice(&reply.status.to_ne_bytes());
    let target = inner.system_target(reply.to, RESULT);
    let wire = WireNotification::system(ATOMIC_REPLY, reply.seq);
    // An error means the requester is unreachable: it gets its timeout or failure.
    !matches!(
        inner.ep.inject_write(&bytes, target, Some(wire.encode())),
        Ok(Posted::Again)
    )
}

impl Context {
    /// Atomically adds `value` to the u64 at `remote` (8-byte aligned) and returns the value it
    /// had before.
    pub fn atomic_fetch_add(&self, remote: Remote, value: u64, timeout: Timeout) -> Result<u64> {
        self.atomic(remote, value, None, timeout)
    }

    /// Atomically replaces the u64 at `remote` (8-byte aligned) with `new` if it equals
    /// `compare`, and returns the value it had before (equal to `compare` exactly when the swap
    /// happened).
    pub fn atomic_compare_swap(
        &self,
        remote: Remote,
        compare: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        self.atomic(remote, new, Some(compare), timeout)
    }

    fn atomic(
        &self,
        remote: Remote,
        operand: u64,
        compare: Option<u64>,
        timeout: Timeout,
    ) -> Result<u64> {
        let inner: &Inner = &self.inner;
        let seg = self.remote_segment(remote.rank, remote.segment)?;
        if remote.offset % 8 != 0 {
            return Err(Error::Misaligned {
                rank: remote.rank,
                segment: remote.segment,
                offset: remote.offset,
            });
        }
        if remote
            .offset
            .checked_add(8)
            .is_none_or(|end| end > seg.size)
        {
            return Err(Error::OutOfBounds {
                rank: remote.rank,
                segment: remote.segment,
                offset: remote.offset,
                size: 8,
                segment_size: seg.size,
            });
        }
        let provider = self.provider_atomics();
        if !provider && remote.rank == self.rank() {
            let seg = inner.segments.local(remote.rank, remote.segment)?;
            let old = match compare {
                None => seg.memory.fetch_add_u64(remote.offset, operand),
                Some(compare) => seg.memory.compare_swap_u64(remote.offset, compare, operand),
            };
            return old.map_err(Error::segment(remote.rank, remote.segment));
        }
        let deadline = timeout.deadline();
        let _one_at_a_time = inner.atomics.lock.lock().unwrap_or_else(|e| e.into_inner());
        // The words are free once the previous atomic (which may have timed out) completed, or
        // its target died.
        let turn = inner.begin_turn(&inner.atomics.turns, remote.rank, deadline)?;
        if provider {
            self.provider_atomic(turn, remote, seg, operand, compare, deadline)
        } else {
            self.target_atomic(turn, remote, operand, compare, deadline)
        }
    }

    /// Whether atomics run as provider atomics (`GASPI_ATOMICS=1` and a provider with
    /// `FI_ATOMIC`) rather than executed by the target's progress engine (the default).
    pub fn provider_atomics(&self) -> bool {
        self.inner.config.atomics && self.inner.ep.caps().atomics
    }

    fn provider_atomic(
        &self,
        turn: Turn,
        remote: Remote,
        seg: RemoteSegment,
        operand: u64,
        compare: Option<u64>,
        deadline: Deadline,
    ) -> Result<u64> {
        let inner: &Inner = &self.inner;
        let memory = &inner.system_memory;
        let base = memory.as_ptr();
        let word = |offset: u64| base.wrapping_add(offset as usize) as *mut u64;
        let target = RemoteTarget {
            rank: remote.rank,
            addr: seg.base + remote.offset,
            key: seg.key,
        };
        let context = OpContext {
            kind: OpKind::Atomic,
            queue: 0,
            segment: turn.tag(),
            rank: remote.rank,
        }
        .encode();
        let posted = memory
            .write_u64(OPERAND, operand)
            .and_then(|()| memory.write_u64(COMPARE, compare.unwrap_or(0)))
            .and_then(|()| memory.write_u64(RESULT, 0))
            .map_err(Error::segment(self.rank(), 0))
            .and_then(|()| {
                self.post(remote.rank, || {
                    // SAFETY: the three words lie in the registered system region (layout
                    // constants), which lives as long as the context; the next atomic touches
                    // them only once this one completed or its target died (see `turns`).
                    unsafe {
                        inner.ep.atomic_u64(
                            word(OPERAND),
                            compare.map(|_| word(COMPARE) as *const u64),
                            word(RESULT),
                            inner.system_mr.desc(),
                            target,
                            context,
                        )
                    }
                })
            });
        inner.end_turn(&inner.atomics.turns, turn, posted, deadline)?;
        memory
            .read_u64(RESULT)
            .map_err(Error::segment(self.rank(), 0))
    }

    fn target_atomic(
        &self,
        turn: Turn,
        remote: Remote,
        operand: u64,
        compare: Option<u64>,
        deadline: Deadline,
    ) -> Result<u64> {
        let inner: &Inner = &self.inner;
        let request = Request {
            seq: reply_value(turn),
            segment: remote.segment,
            offset: remote.offset,
            operand,
            compare,
        };
        // The turn completes when the reply arrives (`Atomics::replied`).
        let posted = self.send_message(remote.rank, &request.encode(), true, deadline);
        inner.end_turn(&inner.atomics.turns, turn, posted, deadline)?;
        let memory = &inner.system_memory;
        let read = |offset| {
            memory
                .read_u64(offset)
                .map_err(Error::segment(self.rank(), 0))
        };
        match read(STATUS)? {
            OK => read(RESULT),
            NO_SEGMENT => Err(Error::UnknownSegment {
                rank: remote.rank,
                segment: remote.segment,
            }),
            _ => Err(Error::Protocol(format!(
                "rank {} refused an atomic at offset {} of segment {} that its descriptor allows",
                remote.rank, remote.offset, remote.segment
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request {
                seq: 1,
                segment: 255,
                offset: u64::MAX - 7,
                operand: 5,
                compare: None,
            },
            Request {
                seq: u32::MAX,
                segment: 0,
                offset: 8,
                operand: u64::MAX,
                compare: Some(0),
            },
        ] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        assert_eq!(Request::decode(&[0u8; 31]), None);
    }
}
