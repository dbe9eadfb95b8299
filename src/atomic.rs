//! Remote atomics on u64 words of segments: fetch-and-add and compare-and-swap.
//!
//! They run as libfabric atomics (`fi_fetch_atomic`, `fi_compare_atomic`), executed by the
//! target's provider, so they are atomic with respect to each other from every rank, this one
//! included (an atomic on this rank's own segment also goes through the provider: mixing CPU
//! and provider atomics on one word is not atomic on every fabric). Plain reads and writes of
//! the word are not atomic with respect to them.
//!
//! The operand and result words live in the registered system region; atomics of one rank
//! take turns on them (see `turns`), each waiting for its completion. Atomics are asked of the provider only
//! when [`Config::atomics`](crate::Config) is on (`GASPI_ATOMICS=1`), because `FI_ATOMIC` costs
//! small-message latency on tcp; when off, or on a provider without `FI_ATOMIC`, both calls
//! return [`Error::Unsupported`].

use std::sync::Mutex;

use gaspi_notifications::Timeout;

use crate::context::{Context, Inner};
use crate::error::{Error, Result};
use crate::fabric::RemoteTarget;
use crate::progress::{OpContext, OpKind};
use crate::rma::Remote;
use crate::segment::layout;
use crate::turns::Turns;

/// Atomics in flight on this rank: they take turns on the words in the system region.
#[derive(Default)]
pub(crate) struct Atomics {
    /// Serialises atomics.
    lock: Mutex<()>,
    pub(crate) turns: Turns,
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
        if !inner.config.atomics {
            return Err(Error::Unsupported(
                "remote atomics are off; enable them with GASPI_ATOMICS=1 (Config::atomics)".into(),
            ));
        }
        if !inner.ep.caps().atomics {
            return Err(Error::Unsupported(format!(
                "provider {} has no remote atomics",
                inner.ep.caps().provider
            )));
        }
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
        let deadline = timeout.deadline();
        let atomics = &inner.atomics;
        let _one_at_a_time = atomics.lock.lock().unwrap_or_else(|e| e.into_inner());
        // The words are free once the previous atomic (which may have timed out) completed, or
        // its target died.
        let turn = inner.begin_turn(&atomics.turns, remote.rank, deadline)?;
        let memory = &inner.system_memory;
        let (op, cmp, res) = (layout::ATOMIC, layout::ATOMIC + 8, layout::ATOMIC + 16);
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
            .write_u64(op, operand)
            .and_then(|()| memory.write_u64(cmp, compare.unwrap_or(0)))
            .and_then(|()| memory.write_u64(res, 0))
            .map_err(Error::segment(self.rank(), 0))
            .and_then(|()| {
                self.post(remote.rank, || {
                    // SAFETY: the three words lie in the registered system region (layout
                    // constants), which lives as long as the context; the next atomic touches
                    // them only once this one completed or its target died (see `turns`).
                    unsafe {
                        inner.ep.atomic_u64(
                            word(op),
                            compare.map(|_| word(cmp) as *const u64),
                            word(res),
                            inner.system_mr.desc(),
                            target,
                            context,
                        )
                    }
                })
            });
        inner.end_turn(&atomics.turns, turn, posted, deadline)?;
        memory.read_u64(res).map_err(Error::segment(self.rank(), 0))
    }
}
