//! Remote atomics on u64 words of segments: fetch-and-add and compare-and-swap, blocking or
//! not, and with a notification at the target.
//!
//! Two ways to run them, chosen once per job:
//!
//! * **Target-executed atomics** (the default, and the fallback for providers without
//!   atomics): the request travels as a runtime-internal message; the target's progress
//!   engine performs it with a CPU atomic instruction on the word, sets the notification that
//!   came with it (after the word changed, with release ordering, so whoever sees the
//!   notification sees the new word), and writes the old value back into the requester's
//!   atomic slot, the reply notification riding on that same write. An atomic on this rank's
//!   own segment is the same CPU instruction, directly. Every atomic on a word is thus a CPU
//!   atomic on the owner's memory, so they are atomic with respect to each other from every
//!   rank. No descriptor lookup is needed: the target checks the range itself.
//! * **Provider atomics** (`GASPI_ATOMICS=1`, when the provider has `FI_ATOMIC`):
//!   `fi_fetch_atomic` / `fi_compare_atomic`, executed by the target's provider, for every
//!   target, this rank included (mixing CPU and provider atomics on one word is not atomic on
//!   every fabric). A notification is sent once the atomic completed (the old value came back,
//!   so the new one is in place). Off by default because asking tcp;ofi_rxm 1.17 for
//!   `FI_ATOMIC` doubles small write_notify latency.
//!
//! Either way, plain reads and writes of the word (local or RMA) are not atomic with respect
//! to them. Each atomic in flight owns one of the system region's atomic slots (operand,
//! compare, result and status words) until it completes, so up to
//! [`ATOMIC_SLOTS`] atomics are in flight at once, and one that
//! timed out never holds up the next.
//!
//! A blocking atomic that times out stays in flight, as GASPI has it: the thread's next
//! blocking atomic with the same arguments continues it rather than performing it again
//! (see [`Context::atomic_fetch_add`]). Each thread keeps at most one such atomic per context;
//! any other blocking atomic of that thread abandons it, and an abandoned atomic still
//! completes and gives back its slot when its reply arrives.

use std::cell::RefCell;
use std::sync::{Arc, Weak};

use gaspi_fabric::Refused;
use gaspi_notifications::{Deadline, NotificationTable, Timeout};
use gaspi_segments::SegmentMemory;

use crate::context::{Context, Inner};
use crate::engine::lookup::{DescKey, Known, Lookup};
use crate::engine::{Handler, Op, Outcome, Retry};
use crate::error::{Error, NotificationId, Rank, Result, SegmentId};
use crate::outbox::Write;
use crate::queue::check_target;
use crate::rma::{Notification, Remote};
use crate::sync::{lock, AtomicBool, Mutex};
use crate::system::{System, ATOMIC_SLOTS};
use crate::wire::{Table, WireNotification, ATOMIC_REPLY};

/// The operation on the word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    FetchAdd(u64),
    CompareSwap { compare: u64, new: u64 },
}

/// Offsets within an atomic slot.
const OPERAND: u64 = 0;
const COMPARE: u64 = 8;
const RESULT: u64 = 16;
const STATUS: u64 = 24;

/// Reply statuses of target-executed atomics.
const OK: u64 = 0;
const NO_SEGMENT: u64 = 1;
const BAD_RANGE: u64 = 2;
const BAD_NOTIFICATION: u64 = 3;

/// Internal message kind of an atomic request.
pub(crate) const MESSAGE: u8 = 1;

/// Why an atomic has no result.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Failure {
    NoSegment,
    /// The word is outside the target's segment of `size` bytes.
    OutOfBounds {
        size: u64,
    },
    BadNotification,
    Failed(String),
    Dead(String),
}

/// What an atomic request asks the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Request {
    slot: u16,
    table: Table,
    offset: u64,
    op: AtomicOp,
    notify: Option<(NotificationId, u32)>,
    /// For a library segment's target, the segment it names (see the incarnation of
    /// [`Descriptor`](crate::engine::lookup::Descriptor)): the owner refuses a word of
    /// another one behind the same local id.
    incarnation: Option<u32>,
}

impl Request {
    const LEN: usize = 44;

    fn encode(self) -> [u8; Self::LEN] {
        let mut b = [0u8; Self::LEN];
        b[0] = MESSAGE;
        let (library, segment) = match self.table {
            Table::User(id) => (0, id),
            Table::Library(id) => (1, id),
            Table::System => (2, 0),
        };
        b[1] = library;
        b[2] = segment;
        let (kind, operand, compare) = match self.op {
            AtomicOp::FetchAdd(v) => (0, v, 0),
            AtomicOp::CompareSwap { compare, new } => (1, new, compare),
        };
        b[3] = kind | if self.notify.is_some() { 2 } else { 0 };
        b[4..6].copy_from_slice(&self.slot.to_le_bytes());
        b[8..16].copy_from_slice(&self.offset.to_le_bytes());
        b[16..24].copy_from_slice(&operand.to_le_bytes());
        b[24..32].copy_from_slice(&compare.to_le_bytes());
        let (id, value) = self.notify.unwrap_or((0, 0));
        b[32..36].copy_from_slice(&id.to_le_bytes());
        b[36..40].copy_from_slice(&value.to_le_bytes());
        b[40..44].copy_from_slice(&self.incarnation.unwrap_or(0).to_le_bytes());
        b
    }

    fn decode(b: &[u8]) -> Option<Self> {
        let b: &[u8; Self::LEN] = b.try_into().ok()?;
        let word = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().unwrap_or_default());
        let half = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap_or_default());
        let table = match b[1] {
            0 => Table::User(b[2]),
            1 => Table::Library(b[2]),
            _ => return None,
        };
        let op = match b[3] & 1 {
            0 => AtomicOp::FetchAdd(word(16)),
            _ => AtomicOp::CompareSwap {
                compare: word(24),
                new: word(16),
            },
        };
        Some(Request {
            slot: u16::from_le_bytes([b[4], b[5]]),
            table,
            offset: word(8),
            op,
            notify: (b[3] & 2 != 0).then(|| (half(32), half(36))),
            incarnation: Some(half(40)).filter(|&i| i != 0),
        })
    }
}

/// An atomic in flight.
pub(crate) struct Pending {
    rank: Rank,
    table: Table,
    offset: u64,
    op: AtomicOp,
    notify: Option<(NotificationId, u32)>,
    incarnation: Option<u32>,
    slot: u16,
    phase: Mutex<Phase>,
    scheduled: AtomicBool,
    me: Weak<Pending>,
}

enum Phase {
    /// Provider atomics: waiting for the target's descriptor.
    Resolving(Arc<Lookup>),
    /// Provider atomics: resolved, refused by a busy provider for now.
    Unposted(Known),
    InFlight,
    Done(std::result::Result<u64, Failure>),
}

impl Pending {
    fn result(&self) -> Option<std::result::Result<u64, Failure>> {
        match &*lock(&self.phase) {
            Phase::Done(r) => Some(r.clone()),
            _ => None,
        }
    }

    fn segment(&self) -> SegmentId {
        self.table.id()
    }

    fn error(&self, failure: Failure) -> Error {
        let (rank, segment, offset) = (self.rank, self.segment(), self.offset);
        match failure {
            Failure::NoSegment => Error::UnknownSegment { rank, segment },
            Failure::OutOfBounds { size } => Error::OutOfBounds {
                rank,
                segment,
                offset,
                size: 8,
                segment_size: size,
            },
            Failure::BadNotification => Error::InvalidNotification {
                rank,
                segment,
                id: self.notify.map_or(0, |(id, _)| u64::from(id)),
                count: 0,
            },
            Failure::Failed(reason) => Error::OperationFailed { rank, reason },
            Failure::Dead(reason) => Error::RankFailed { rank, reason },
        }
    }

    fn finish(&self, inner: &Inner, result: std::result::Result<u64, Failure>) {
        *lock(&self.phase) = Phase::Done(result);
        inner.system.atomics.give(self.slot);
        inner.events.notify_all();
    }

    /// Provider atomics: posts once resolved; returns whether it still waits.
    fn advance(&self, inner: &Inner) -> bool {
        let mut phase = lock(&self.phase);
        let known = match &*phase {
            Phase::Resolving(lookup) => match lookup.outcome() {
                None => return true,
                Some(Ok(known)) => known,
                Some(Err(e)) => {
                    drop(phase);
                    let failure = match e {
                        Error::RankFailed { reason, .. } => Failure::Dead(reason),
                        other => Failure::Failed(other.to_string()),
                    };
                    self.finish(inner, Err(failure));
                    return false;
                }
            },
            Phase::Unposted(known) => *known,
            Phase::InFlight | Phase::Done(_) => return false,
        };
        if let Some(Error::RankFailed { reason, .. }) = inner.health.known(self.rank) {
            drop(phase);
            self.finish(inner, Err(Failure::Dead(reason)));
            return false;
        }
        let key = self.table.descriptor().unwrap_or(DescKey::Segment(0));
        let incarnation = self.incarnation;
        let target = match check_target(inner, self.rank, key, self.offset, 8, incarnation, known) {
            Ok(target) => target,
            Err(Error::UnknownSegment { .. }) => {
                drop(phase);
                self.finish(inner, Err(Failure::NoSegment));
                return false;
            }
            Err(_) => {
                let size = match known {
                    Known::Present(d) => d.size,
                    Known::Absent => 0,
                };
                drop(phase);
                self.finish(inner, Err(Failure::OutOfBounds { size }));
                return false;
            }
        };
        let Some(me) = self.me.upgrade() else {
            return false;
        };
        let base = System::atomic_offset(self.slot);
        let region = &inner.system.region;
        let posted = (|| -> Result<std::result::Result<(), Refused<Op>>> {
            let operand = region.slice(base + OPERAND, 8)?;
            let compare = region.slice(base + COMPARE, 8)?;
            let result = region.slice(base + RESULT, 8)?;
            let compare = matches!(self.op, AtomicOp::CompareSwap { .. }).then_some(compare);
            Ok(inner.submit(Op::to(self.rank, me), |op| {
                inner.ep.atomic_u64(operand, compare, result, target, op)
            }))
        })();
        match posted {
            Ok(Ok(())) => {
                *phase = Phase::InFlight;
                false
            }
            Ok(Err(Refused::Busy(_))) => {
                *phase = Phase::Unposted(known);
                true
            }
            Ok(Err(Refused::Failed(e, _))) => {
                drop(phase);
                self.finish(inner, Err(Failure::Failed(e.to_string())));
                false
            }
            Err(e) => {
                drop(phase);
                self.finish(inner, Err(Failure::Failed(e.to_string())));
                false
            }
        }
    }
}

impl Handler for Pending {
    fn complete(&self, inner: &Inner, _rank: Option<Rank>, outcome: Outcome<'_>) {
        let result = match outcome {
            Ok(()) => inner
                .system
                .read_word(System::atomic_offset(self.slot) + RESULT)
                .map_err(|e| Failure::Failed(e.to_string())),
            Err(f) => Err(match inner.health.known(self.rank) {
                Some(Error::RankFailed { reason, .. }) => Failure::Dead(reason),
                _ => Failure::Failed(f.message.clone()),
            }),
        };
        if let (Ok(_), Some((id, value))) = (&result, self.notify) {
            let wire = WireNotification::new(self.table, id, value);
            inner.outbox.notify(inner, self.rank, wire);
        }
        self.finish(inner, result);
    }
}

impl Retry for Pending {
    fn scheduled(&self) -> &AtomicBool {
        &self.scheduled
    }

    fn retry(&self, inner: &Inner) -> bool {
        self.advance(inner)
    }
}

/// What an executed atomic's `status` (and the word `old` beside it) means.
fn status_result(status: u64, old: u64) -> std::result::Result<u64, Failure> {
    match status {
        OK => Ok(old),
        NO_SEGMENT => Err(Failure::NoSegment),
        BAD_RANGE => Err(Failure::OutOfBounds { size: old }),
        BAD_NOTIFICATION => Err(Failure::BadNotification),
        other => Err(Failure::Failed(format!("unknown atomic status {other}"))),
    }
}

/// The target-executed atomics this rank waits for, by slot.
pub(crate) struct Atomics {
    waiting: Mutex<Vec<Option<Arc<Pending>>>>,
}

impl Default for Atomics {
    fn default() -> Self {
        Atomics {
            waiting: Mutex::new(vec![None; usize::from(ATOMIC_SLOTS)]),
        }
    }
}

impl Atomics {
    /// Progress engine: the target-executed atomic of `slot` was answered.
    pub(crate) fn replied(&self, inner: &Inner, slot: u16) {
        let Some(pending) = lock(&self.waiting)
            .get_mut(usize::from(slot))
            .and_then(Option::take)
        else {
            return;
        };
        let base = System::atomic_offset(slot);
        let result = inner
            .system
            .read_word(base + STATUS)
            .and_then(|status| Ok((status, inner.system.read_word(base + RESULT)?)))
            .map_err(|e| Failure::Failed(e.to_string()))
            .and_then(|(status, old)| status_result(status, old));
        pending.finish(inner, result);
    }

    /// Progress engine: performs the atomic `request` from `from` on this rank's segment and
    /// answers it.
    pub(crate) fn serve(&self, inner: &Inner, from: Rank, request: &[u8]) {
        // A malformed request can only come from a peer of another version; its sender times
        // out.
        let Some(r) = Request::decode(request) else {
            return;
        };
        let (old, status) = execute(inner, r.table, r.incarnation, r.offset, r.op, r.notify);
        let mut bytes = [0u8; crate::outbox::MAX_BYTES];
        bytes[..8].copy_from_slice(&old.to_ne_bytes());
        bytes[8..].copy_from_slice(&status.to_ne_bytes());
        let wire = WireNotification::system(ATOMIC_REPLY, u32::from(r.slot) + 1);
        inner.outbox.send(
            inner,
            Write {
                target: inner
                    .system
                    .target(from, System::atomic_offset(r.slot) + RESULT),
                bytes,
                len: 16,
                data: wire.encode(),
            },
        );
    }
}

/// Performs `op` on the word at `offset` of this rank's segment behind `table`, then sets
/// `notify` there; returns the old value (or the segment size for a bad range) and a status.
fn execute(
    inner: &Inner,
    table: Table,
    incarnation: Option<u32>,
    offset: u64,
    op: AtomicOp,
    notify: Option<(NotificationId, u32)>,
) -> (u64, u64) {
    let seg = inner.segments.get(table);
    let Some(seg) = seg.filter(|s| incarnation.is_none_or(|i| i == s.incarnation)) else {
        return (0, NO_SEGMENT);
    };
    let memory = seg.region.as_ref().map(|r| r.memory());
    execute_on(
        memory,
        seg.len(),
        Some(&seg.notifications),
        offset,
        op,
        notify,
    )
}

/// Performs `op` on the word at `offset` of `memory` (a segment of `len` bytes, of this rank
/// or a same-host peer's mapped one), then sets `notify` in `table`.
fn execute_on(
    memory: Option<&SegmentMemory>,
    len: u64,
    table: Option<&NotificationTable>,
    offset: u64,
    op: AtomicOp,
    notify: Option<(NotificationId, u32)>,
) -> (u64, u64) {
    if let Some((id, _)) = notify {
        if table.is_none_or(|t| id >= t.len()) {
            return (0, BAD_NOTIFICATION);
        }
    }
    let Some(memory) = memory else {
        return (0, BAD_RANGE);
    };
    let old = match op {
        AtomicOp::FetchAdd(v) => memory.fetch_add_u64(offset, v),
        AtomicOp::CompareSwap { compare, new } => memory.compare_swap_u64(offset, compare, new),
    };
    match old {
        Ok(old) => {
            if let (Some((id, value)), Some(table)) = (notify, table) {
                // In range (checked above) and non-zero (checked by the requester).
                let _ = table.set(id, value);
            }
            (old, OK)
        }
        Err(_) => (len, BAD_RANGE),
    }
}

impl Inner {
    /// Starts an atomic on the word at `offset` of the segment behind `table` on `rank` (with
    /// an `incarnation`, a library segment's target: of that segment only), taking an atomic
    /// slot (waiting for one until `deadline`).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn start_atomic(
        &self,
        rank: Rank,
        table: Table,
        incarnation: Option<u32>,
        offset: u64,
        op: AtomicOp,
        notify: Option<(NotificationId, u32)>,
        deadline: Deadline,
    ) -> Result<Arc<Pending>> {
        let segment = table.id();
        if offset % 8 != 0 {
            return Err(Error::Misaligned {
                rank,
                segment,
                offset,
            });
        }
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        let provider = self.config.atomics && self.ep.caps().atomics;
        // Looked up before a slot is taken: an unknown segment fails without holding one.
        // Memory the peer's process alone can map (bound, or its file unlinked) leaves the
        // atomic to the owner, through the fabric.
        let direct = match provider || rank == self.rank {
            true => false,
            false => match self.mapped(None, rank, table)? {
                Some(peer) if incarnation.is_some_and(|i| i != peer.descriptor.incarnation) => {
                    return Err(Error::UnknownSegment { rank, segment });
                }
                peer => peer.is_some(),
            },
        };
        let slot = self.watched_until(
            || std::iter::once(rank),
            deadline,
            || self.system.atomics.take(),
        );
        let slot = match slot {
            Ok(slot) => slot,
            Err(Error::Timeout) if deadline.is_test() => {
                return Err(Error::Limit(format!(
                    "all {ATOMIC_SLOTS} atomic slots are in flight"
                )))
            }
            Err(e) => return Err(e),
        };
        // The mapping is lent again now that the slot is taken, rather than across the wait
        // for it: a loan held that long would hold back the release of replaced mappings.
        let direct = match direct {
            true => match self.mapped(None, rank, table).and_then(|peer| match peer {
                Some(p) if incarnation.is_some_and(|i| i != p.descriptor.incarnation) => {
                    Err(Error::UnknownSegment { rank, segment })
                }
                peer => Ok(peer),
            }) {
                Ok(peer) => peer,
                Err(e) => {
                    self.system.atomics.give(slot);
                    self.events.notify_all();
                    return Err(e);
                }
            },
            false => None,
        };
        let pending = Arc::new_cyclic(|me| Pending {
            rank,
            table,
            offset,
            op,
            notify,
            incarnation,
            slot,
            phase: Mutex::new(Phase::InFlight),
            scheduled: AtomicBool::new(false),
            me: me.clone(),
        });
        if provider {
            self.start_provider_atomic(&pending)?;
        } else if rank == self.rank {
            let (old, status) = execute(self, table, incarnation, offset, op, notify);
            pending.finish(self, status_result(status, old));
        } else if let Some(peer) = direct {
            // A CPU atomic on the owner's memory, like every target-executed atomic: atomic
            // with respect to those of other ranks, whichever way they came.
            let memory = peer.memory.as_ref();
            let table = peer.table.as_ref();
            let (old, status) = execute_on(memory, peer.descriptor.size, table, offset, op, notify);
            pending.finish(self, status_result(status, old));
        } else {
            lock(&self.atomics.waiting)[usize::from(slot)] = Some(Arc::clone(&pending));
            let request = Request {
                slot,
                table,
                offset,
                op,
                notify,
                incarnation,
            };
            if let Err(e) = self.send_internal(rank, &request.encode()) {
                lock(&self.atomics.waiting)[usize::from(slot)] = None;
                self.system.atomics.give(slot);
                return Err(e);
            }
        }
        Ok(pending)
    }

    fn start_provider_atomic(&self, pending: &Arc<Pending>) -> Result<()> {
        let base = System::atomic_offset(pending.slot);
        let (operand, compare) = match pending.op {
            AtomicOp::FetchAdd(v) => (v, 0),
            AtomicOp::CompareSwap { compare, new } => (new, compare),
        };
        let written = self
            .system
            .write_word(base + OPERAND, operand)
            .and_then(|()| self.system.write_word(base + COMPARE, compare))
            .and_then(|()| self.system.write_word(base + RESULT, 0));
        if let Err(e) = written {
            self.system.atomics.give(pending.slot);
            return Err(e);
        }
        let key = pending.table.descriptor().unwrap_or(DescKey::Segment(0));
        let phase = match self.resolve_later(pending.rank, key) {
            Ok(Ok(known)) => Phase::Unposted(known),
            Ok(Err(lookup)) => Phase::Resolving(lookup),
            Err(e) => {
                self.system.atomics.give(pending.slot);
                return Err(e);
            }
        };
        *lock(&pending.phase) = phase;
        if pending.advance(self) {
            self.engine.schedule(Arc::clone(pending) as Arc<dyn Retry>);
        }
        Ok(())
    }
}

thread_local! {
    /// The blocking atomics of this thread that timed out, at most one per context: the
    /// thread's next blocking atomic on that context continues it when its arguments are the
    /// same.
    static RESUMABLE: RefCell<Vec<Resumable>> = const { RefCell::new(Vec::new()) };
}

/// A blocking atomic that timed out, of the context behind `owner`.
struct Resumable {
    owner: Weak<Inner>,
    pending: Arc<Pending>,
}

/// Takes this thread's timed-out blocking atomic of `inner`, if any, forgetting those of
/// contexts that are gone.
fn take_resumable(inner: &Arc<Inner>) -> Option<Arc<Pending>> {
    let owner = Arc::downgrade(inner);
    // Unavailable only while the thread exits; its atomics are abandoned then anyway.
    let taken = RESUMABLE.try_with(|list| {
        let mut list = list.try_borrow_mut().ok()?;
        list.retain(|r| r.owner.strong_count() > 0);
        let at = list.iter().position(|r| r.owner.ptr_eq(&owner))?;
        Some(list.swap_remove(at))
    });
    taken.ok().flatten().map(|r| r.pending)
}

/// Keeps `pending`, a blocking atomic of `inner` that timed out, for this thread's next
/// blocking atomic there.
fn keep_resumable(inner: &Arc<Inner>, pending: Arc<Pending>) {
    let owner = Arc::downgrade(inner);
    let _ = RESUMABLE.try_with(|list| {
        if let Ok(mut list) = list.try_borrow_mut() {
            list.retain(|r| !r.owner.ptr_eq(&owner));
            list.push(Resumable { owner, pending });
        }
    });
}

/// An atomic in flight, from the `_nb` and `_notify` atomic calls: its old value once it
/// completed.
#[derive(Clone)]
pub struct AtomicRequest<'a> {
    ctx: &'a Context,
    pending: Arc<Pending>,
}

impl std::fmt::Debug for AtomicRequest<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AtomicRequest")
            .field("rank", &self.pending.rank)
            .field("offset", &self.pending.offset)
            .finish()
    }
}

impl AtomicRequest<'_> {
    /// The rank whose word it changes.
    pub fn rank(&self) -> Rank {
        self.pending.rank
    }

    /// The word's old value if the atomic completed; drives progress once when not, never
    /// blocks.
    ///
    /// # Errors
    /// As for [`wait`](Self::wait), except [`Error::Timeout`].
    pub fn test(&self) -> Result<Option<u64>> {
        match self.wait(Timeout::Test) {
            Ok(old) => Ok(Some(old)),
            Err(Error::Timeout) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Waits until the atomic completed and returns the word's old value. After
    /// [`Error::Timeout`] the atomic is still in flight: call again.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::RankFailed`] when the target died; [`Error::UnknownSegment`]
    /// / [`Error::OutOfBounds`] / [`Error::InvalidNotification`] when the target refused the
    /// word or the notification; [`Error::OperationFailed`].
    pub fn wait(&self, timeout: Timeout) -> Result<u64> {
        self.wait_until(timeout.deadline())
    }

    fn wait_until(&self, deadline: Deadline) -> Result<u64> {
        let p = &self.pending;
        let inner = &self.ctx.inner;
        let result = inner.watched_until(|| std::iter::once(p.rank), deadline, || p.result());
        match result {
            Ok(Ok(old)) => Ok(old),
            Ok(Err(failure)) => Err(p.error(failure)),
            Err(e) => Err(e),
        }
    }
}

impl Context {
    /// Atomically adds `value` to the u64 at `remote` (8-byte aligned) and returns the value it
    /// had before.
    ///
    /// After [`Error::Timeout`] the atomic is still in flight (or done, its old value kept),
    /// and, as GASPI has it, the call is made again to complete it: this thread's next
    /// blocking atomic on this context with the same arguments (same `remote`, same `value`)
    /// continues it and returns its old value rather than adding again. A blocking atomic
    /// with other arguments, or from another thread, is a new one; it abandons this thread's
    /// timed-out one, which still happens (exactly once) and gives back its atomic slot when
    /// it completes. Towards a rank reached directly (this rank included) the atomic happens
    /// within the call, so it never times out once it has its slot. The non-blocking forms
    /// keep their request instead.
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::Misaligned`]; [`Error::UnknownSegment`] and
    /// [`Error::OutOfBounds`] when the target has no such word; [`Error::Timeout`] (the atomic
    /// may still happen: call again to complete it); [`Error::Limit`] for
    /// [`Timeout::Test`] when all atomic slots are in flight; [`Error::RankFailed`].
    pub fn atomic_fetch_add(&self, remote: Remote, value: u64, timeout: Timeout) -> Result<u64> {
        self.atomic_blocking(remote, AtomicOp::FetchAdd(value), timeout)
    }

    /// Atomically replaces the u64 at `remote` (8-byte aligned) with `new` if it equals
    /// `compare`, and returns the value it had before (equal to `compare` exactly when the swap
    /// happened).
    ///
    /// After [`Error::Timeout`], call again with the same arguments to complete it, as for
    /// [`atomic_fetch_add`](Self::atomic_fetch_add): the call that completes it returns the
    /// old value the one swap attempt saw, so a swap that happened while the caller waited is
    /// seen as done (old equal to `compare`), never as refused by its own new value.
    ///
    /// # Errors
    /// As for [`atomic_fetch_add`](Self::atomic_fetch_add).
    pub fn atomic_compare_swap(
        &self,
        remote: Remote,
        compare: u64,
        new: u64,
        timeout: Timeout,
    ) -> Result<u64> {
        let op = AtomicOp::CompareSwap { compare, new };
        self.atomic_blocking(remote, op, timeout)
    }

    /// A blocking atomic: continues this thread's timed-out one when it is the same, else
    /// starts it; keeps it for the next call when it times out.
    fn atomic_blocking(&self, remote: Remote, op: AtomicOp, timeout: Timeout) -> Result<u64> {
        let deadline = timeout.deadline();
        let table = Table::User(remote.segment);
        // Any other one is abandoned here: the engine or the reply table holds it until it
        // completes, and completing gives its slot back.
        let resumed = take_resumable(&self.inner).filter(|p| {
            (p.rank, p.table, p.offset, p.op, p.notify)
                == (remote.rank, table, remote.offset, op, None)
        });
        let request = match resumed {
            Some(pending) => self.atomic_request(pending),
            None => self.atomic(remote, op, None, deadline)?,
        };
        match request.wait_until(deadline) {
            Err(Error::Timeout) => {
                keep_resumable(&self.inner, request.pending);
                Err(Error::Timeout)
            }
            other => other,
        }
    }

    /// Starts [`atomic_fetch_add`](Self::atomic_fetch_add) without waiting: the request gives
    /// the old value once the atomic completed.
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::Misaligned`]; [`Error::UnknownSegment`] when `remote`'s
    /// rank, this one or one reached directly, has no such segment (through the fabric the
    /// target refuses it, and the request's [`wait`](AtomicRequest::wait) reports it);
    /// [`Error::RankFailed`] for a rank known dead; [`Error::Limit`] when all atomic slots are
    /// in flight (wait for one of them).
    pub fn atomic_fetch_add_nb(&self, remote: Remote, value: u64) -> Result<AtomicRequest<'_>> {
        self.atomic(
            remote,
            AtomicOp::FetchAdd(value),
            None,
            Timeout::Test.deadline(),
        )
    }

    /// Starts [`atomic_compare_swap`](Self::atomic_compare_swap) without waiting.
    ///
    /// # Errors
    /// As for [`atomic_fetch_add_nb`](Self::atomic_fetch_add_nb).
    pub fn atomic_compare_swap_nb(
        &self,
        remote: Remote,
        compare: u64,
        new: u64,
    ) -> Result<AtomicRequest<'_>> {
        let op = AtomicOp::CompareSwap { compare, new };
        self.atomic(remote, op, None, Timeout::Test.deadline())
    }

    /// Starts a fetch-and-add that also sets `notification` in the target segment's table
    /// once the word has changed: whoever sees the notification at the target sees the new
    /// word.
    ///
    /// # Errors
    /// As for [`atomic_fetch_add_nb`](Self::atomic_fetch_add_nb), and
    /// [`Error::InvalidNotification`] / [`Error::ZeroNotificationValue`].
    pub fn atomic_fetch_add_notify(
        &self,
        remote: Remote,
        value: u64,
        notification: Notification,
    ) -> Result<AtomicRequest<'_>> {
        self.wire_notification(remote.rank, remote.segment, notification)?;
        let notify = Some((notification.id, notification.value));
        self.atomic(
            remote,
            AtomicOp::FetchAdd(value),
            notify,
            Timeout::Test.deadline(),
        )
    }

    /// Starts a compare-and-swap that also sets `notification` in the target segment's
    /// table once it happened (swapped or not).
    ///
    /// # Errors
    /// As for [`atomic_fetch_add_notify`](Self::atomic_fetch_add_notify).
    pub fn atomic_compare_swap_notify(
        &self,
        remote: Remote,
        compare: u64,
        new: u64,
        notification: Notification,
    ) -> Result<AtomicRequest<'_>> {
        self.wire_notification(remote.rank, remote.segment, notification)?;
        let notify = Some((notification.id, notification.value));
        let op = AtomicOp::CompareSwap { compare, new };
        self.atomic(remote, op, notify, Timeout::Test.deadline())
    }

    fn atomic(
        &self,
        remote: Remote,
        op: AtomicOp,
        notify: Option<(NotificationId, u32)>,
        deadline: Deadline,
    ) -> Result<AtomicRequest<'_>> {
        self.check_rank(remote.rank)?;
        let pending = self.inner.start_atomic(
            remote.rank,
            Table::User(remote.segment),
            None,
            remote.offset,
            op,
            notify,
            deadline,
        )?;
        Ok(AtomicRequest { ctx: self, pending })
    }

    pub(crate) fn atomic_request(&self, pending: Arc<Pending>) -> AtomicRequest<'_> {
        AtomicRequest { ctx: self, pending }
    }

    /// Whether atomics run as provider atomics (`GASPI_ATOMICS=1` and a provider with
    /// `FI_ATOMIC`) rather than executed by the target's progress engine (the default).
    pub fn provider_atomics(&self) -> bool {
        self.inner.config.atomics && self.inner.ep.caps().atomics
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_round_trip() {
        for r in [
            Request {
                slot: 63,
                table: Table::User(255),
                offset: u64::MAX - 7,
                op: AtomicOp::FetchAdd(5),
                notify: None,
                incarnation: None,
            },
            Request {
                slot: 0,
                table: Table::Library(9),
                offset: 8,
                op: AtomicOp::CompareSwap {
                    compare: 0,
                    new: u64::MAX,
                },
                notify: Some((7, 1)),
                incarnation: Some(u32::MAX),
            },
        ] {
            assert_eq!(Request::decode(&r.encode()), Some(r));
        }
        assert_eq!(Request::decode(&[0u8; 31]), None);
    }
}
