//! The progress engine: reading the completion queue and acting on what it reports.
//!
//! Both providers we target (tcp via `ofi_rxm`, and shm) need the application to drive data
//! progress: a write into a rank only lands while that rank is inside libfabric. Progress
//! therefore happens in two places, and both run the same [`Inner::progress`]:
//!
//! * every thread that waits (for a notification, a queue, a barrier) polls the completion queue
//!   itself while it spins, so a hand-off costs no thread switch;
//! * one progress thread per context sleeps inside `fi_cq_sread` (the provider's wait object) and
//!   wakes when traffic arrives, so writes land while all user threads compute. Where the
//!   provider has no wait object it polls with an exponential sleep (50 µs to 1 ms).
//!
//! Waiters spin only briefly, then sleep on an event count that the engine bumps after every
//! batch, so idle ranks cost no CPU (8 ranks on 2 cores run).
//!
//! Each posted operation carries a context word. Odd words encode the operation inline
//! (`kind`, queue, local segment, target rank); even words are pointers to a boxed
//! [`Deferred`] action that must run on completion (read_notify's local notification).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use gaspi_notifications::Timeout;

use crate::context::Inner;
use crate::error::{NotificationId, QueueId, Rank, SegmentId};
use crate::fabric::{CqEvent, CqFailure, Posted};
use crate::health::is_connection_loss;
use crate::segment::layout;
use crate::wire::WireNotification;

/// What completes when an operation's local completion arrives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OpKind {
    /// A user operation on a queue, holding one in-flight count on a local segment.
    User,
    /// A runtime-internal read (remote segment descriptor lookup).
    System,
    /// A posted passive-message receive buffer; `segment` is the buffer's index.
    PassiveRecv,
    /// A passive-message send.
    PassiveSend,
    /// A remote atomic.
    Atomic,
    /// A write of an allreduce step; `segment` is the group id.
    Collective,
    /// A health check of the target ([`Context::proc_ping`](crate::Context::proc_ping)).
    Ping,
}

/// Inline context of an operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct OpContext {
    pub kind: OpKind,
    pub queue: QueueId,
    pub segment: SegmentId,
    pub rank: Rank,
}

impl OpContext {
    pub(crate) fn encode(self) -> usize {
        let kind = match self.kind {
            OpKind::User => 0u64,
            OpKind::System => 1,
            OpKind::PassiveRecv => 2,
            OpKind::PassiveSend => 3,
            OpKind::Atomic => 4,
            OpKind::Collective => 5,
            OpKind::Ping => 6,
        };
        (1 | (kind << 1)
            | (u64::from(self.queue) << 8)
            | (u64::from(self.segment) << 16)
            | (u64::from(self.rank) << 24)) as usize
    }

    fn decode(word: usize) -> Option<Self> {
        let word = word as u64;
        if word & 1 == 0 {
            return None;
        }
        Some(OpContext {
            kind: match (word >> 1) & 7 {
                0 => OpKind::User,
                1 => OpKind::System,
                2 => OpKind::PassiveRecv,
                3 => OpKind::PassiveSend,
                4 => OpKind::Atomic,
                5 => OpKind::Collective,
                _ => OpKind::Ping,
            },
            queue: (word >> 8) as u8,
            segment: (word >> 16) as u8,
            rank: (word >> 24) as u32,
        })
    }
}

/// The receive-buffer index of a passive receive's context, if it is one.
pub(crate) fn decode_passive_recv(word: usize) -> Option<u8> {
    OpContext::decode(word)
        .filter(|op| op.kind == OpKind::PassiveRecv)
        .map(|op| op.segment)
}

/// An operation whose completion must also set a local notification.
pub(crate) struct Deferred {
    pub op: OpContext,
    pub notify_segment: SegmentId,
    pub notify_id: NotificationId,
    pub notify_value: u32,
}

impl Deferred {
    /// The context word for a boxed action; ownership passes to the completion queue and comes
    /// back in [`Inner::complete`] (or [`Deferred::reclaim`] if posting fails).
    pub(crate) fn into_context(self: Box<Self>) -> usize {
        Box::into_raw(self) as usize
    }

    /// Takes back a boxed action whose operation was never posted.
    ///
    /// # Safety
    /// `word` must come from [`into_context`](Self::into_context) and not have been reclaimed.
    pub(crate) unsafe fn reclaim(word: usize) -> Box<Self> {
        // SAFETY: guaranteed by the caller: word is a leaked Box<Deferred>.
        unsafe { Box::from_raw(word as *mut Deferred) }
    }
}

const BATCH: usize = 16;

impl Inner {
    /// A handle for one waiting call: drives progress and keeps the progress thread aside
    /// while the call is polling (see [`Waiter`]).
    pub(crate) fn waiter(&self) -> Waiter<'_> {
        self.spinners.fetch_add(1, Ordering::AcqRel);
        Waiter {
            inner: self,
            spinning: true,
        }
    }

    /// Drives the provider once and handles what it completed. Returns whether anything
    /// happened. Never blocks.
    pub(crate) fn progress(&self) -> bool {
        self.progress_with(None)
    }

    /// Like [`progress`](Self::progress) but sleeps in the provider up to `timeout_ms`.
    fn progress_blocking(&self, timeout_ms: i32) -> bool {
        self.progress_with(Some(timeout_ms))
    }

    fn progress_with(&self, sleep_ms: Option<i32>) -> bool {
        let mut events = [CqEvent::default(); BATCH];
        let read = match sleep_ms {
            None => self.ep.poll(&mut events),
            Some(ms) => self.ep.wait(&mut events, ms),
        };
        let progressed = self.handle(read, &events);
        if !self.ep.caps().ordered_writes {
            self.flush_outboxes();
        }
        self.passive.repost_pending(self);
        self.atomics.flush_replies(self);
        progressed
    }

    fn handle(
        &self,
        read: crate::Result<Result<usize, CqFailure>>,
        events: &[CqEvent; BATCH],
    ) -> bool {
        match read {
            Ok(Ok(0)) => false,
            Ok(Ok(n)) => {
                let mut completed = false;
                for ev in &events[..n] {
                    if ev.remote {
                        // Notification tables wake their own waiters.
                        self.deliver(WireNotification::decode(ev.data));
                    } else if ev.received > 0 {
                        self.passive.received(self, ev.context, ev.received);
                    } else {
                        self.complete(ev.context, None);
                        completed = true;
                    }
                }
                if completed {
                    self.events.notify_all();
                }
                true
            }
            Ok(Err(failure)) => {
                self.complete(failure.context, Some(failure));
                self.events.notify_all();
                true
            }
            Err(err) => {
                // A failing fi_cq_read means the endpoint itself is broken; every waiter will
                // run into its own deadline, so the error is recorded for all queues.
                self.fail_all(err.to_string());
                self.events.notify_all();
                true
            }
        }
    }

    /// Posts a notification-only write: 8 bytes into the target's system scratch area, with the
    /// notification as remote completion data.
    pub(crate) fn try_notify(&self, rank: Rank, wire: WireNotification) -> crate::Result<Posted> {
        let target = self.system_target(rank, layout::SCRATCH);
        let scratch = [0u8; layout::SCRATCH_LEN as usize];
        self.ep.inject_write(&scratch, target, Some(wire.encode()))
    }

    /// Sends notifications parked by queues that have drained (unordered providers only).
    fn flush_outboxes(&self) {
        for id in 0..crate::config::MAX_QUEUES {
            if let Some(q) = self.queues.by_index(id) {
                q.flush_outbox(|rank, wire| {
                    // A dead rank would refuse it for ever (see `health`).
                    let posted = match self.health.known(rank) {
                        Some(dead) => Err(dead),
                        None => self.try_notify(rank, wire),
                    };
                    match posted {
                        Ok(Posted::Yes) => true,
                        Ok(Posted::Again) => false,
                        Err(e) => {
                            q.fail(rank, e.to_string());
                            true
                        }
                    }
                });
            }
        }
    }

    fn deliver(&self, n: WireNotification) {
        if let Some((rank, segment)) = n.gone() {
            self.segments.forget_remote_of(rank, segment);
        } else if let Some(seq) = n.atomic_reply() {
            self.atomics.replied(seq);
            self.events.notify_all();
        } else if n.system {
            // Ids and values come from our own runtime on the peer, so they are in range.
            let _ = self.system_notifications.set(n.id, n.value);
        } else {
            // A notification for an id beyond this rank's table can only come from a peer with
            // a different configuration; the origin validated against its own, equal, table.
            self.segments.with_local(n.segment, |seg| {
                let _ = seg.notifications.set(n.id, n.value);
            });
        }
        // A notification-only write to a segment this rank has deleted has nowhere to go: the
        // sender violated the segment's lifetime, and the data part (if any) was refused by the
        // closed registration.
    }

    fn complete(&self, context: usize, failure: Option<CqFailure>) {
        let (op, deferred) = match OpContext::decode(context) {
            Some(op) => (op, None),
            None if context == 0 => return,
            None => {
                // SAFETY: even, non-zero contexts are only ever produced by
                // Deferred::into_context for an operation that was posted, and each operation
                // completes exactly once.
                let d = unsafe { Deferred::reclaim(context) };
                (d.op, Some(d))
            }
        };
        // A receive buffer has no peer yet; every other operation names its target.
        let lost = failure
            .as_ref()
            .filter(|f| op.kind != OpKind::PassiveRecv && is_connection_loss(f.code, f.prov_errno));
        if let Some(f) = lost {
            self.mark_failed(
                op.rank,
                format!("the connection to it broke: {}", f.message),
            );
        }
        let failure = failure.map(|f| f.message);
        match op.kind {
            OpKind::Ping => self.pinged(op.rank, failure),
            OpKind::PassiveRecv => self.passive.receive_failed(self, op, failure),
            OpKind::PassiveSend => self.passive.sends.completed(op.segment, op.rank, failure),
            OpKind::Atomic => self.atomics.turns.completed(op.segment, op.rank, failure),
            OpKind::System => self.lookups.completed(op.segment, op.rank, failure),
            OpKind::Collective => self.reduce_writes.done(op.segment, op.rank, failure),
            OpKind::User => {
                self.segments.with_local(op.segment, |seg| {
                    seg.in_flight.fetch_sub(1, Ordering::AcqRel);
                });
                if let Some(d) = deferred {
                    if failure.is_none() {
                        self.segments.with_local(d.notify_segment, |seg| {
                            let _ = seg.notifications.set(d.notify_id, d.notify_value);
                        });
                    }
                }
                if let Some(q) = self.queues.by_index(op.queue) {
                    if let Some(reason) = failure {
                        q.fail(op.rank, reason);
                    }
                    q.completed(op.rank);
                }
            }
        }
    }

    fn fail_all(&self, reason: String) {
        for id in 0..crate::config::MAX_QUEUES {
            if let Some(q) = self.queues.by_index(id) {
                q.fail(self.rank, reason.clone());
            }
        }
    }
}

/// A waiting user thread, counted in `Inner::spinners` while it polls.
///
/// While any user thread polls the completion queue itself, the progress thread stands aside:
/// waking it for every arrival would only add a context switch per message (measured on two
/// cores: 8 µs ping-pong became 70 µs). When the last polling waiter goes to sleep it wakes the
/// progress thread at once, so nothing waits for progress. A waiter that simply returns does
/// not wake it (that would cost a wake-up per call); the progress thread notices within one
/// stand-aside period.
pub(crate) struct Waiter<'a> {
    inner: &'a Inner,
    spinning: bool,
}

impl Waiter<'_> {
    fn set_spinning(&mut self, spinning: bool) {
        if spinning == self.spinning {
            return;
        }
        self.spinning = spinning;
        if spinning {
            self.inner.spinners.fetch_add(1, Ordering::AcqRel);
        } else if self.inner.spinners.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.inner.standby.notify_all();
        }
    }
}

impl gaspi_notifications::Progress for Waiter<'_> {
    fn progress(&mut self) -> bool {
        self.inner.progress()
    }

    fn sleeping(&mut self, asleep: bool) {
        self.set_spinning(!asleep);
    }
}

impl Drop for Waiter<'_> {
    fn drop(&mut self) {
        if self.spinning {
            self.inner.spinners.fetch_sub(1, Ordering::AcqRel);
        }
    }
}

/// The background progress thread of a context.
pub(crate) struct ProgressThread {
    stop: Arc<AtomicBool>,
    handle: Option<JoinHandle<()>>,
    inner: Arc<Inner>,
}

impl ProgressThread {
    pub(crate) fn start(inner: Arc<Inner>) -> crate::Result<Self> {
        let stop = Arc::new(AtomicBool::new(false));
        let handle = {
            let inner = Arc::clone(&inner);
            let stop = Arc::clone(&stop);
            std::thread::Builder::new()
                .name(format!("gaspi-progress-{}", inner.rank))
                .spawn(move || run(&inner, &stop))
                .map_err(|e| crate::Error::io("spawning the progress thread", e))?
        };
        Ok(ProgressThread {
            stop,
            handle: Some(handle),
            inner,
        })
    }
}

/// How long the progress thread stands aside, at most, before looking again whether a user
/// thread still polls.
const STAND_ASIDE: Duration = Duration::from_millis(1);

/// How long the progress thread polls for outstanding transfers without seeing any progress
/// before it sleeps in the provider instead: a transfer towards a dead peer may never complete
/// (shm), and polling for it would take a core for good.
const STALL: Duration = Duration::from_millis(10);

fn run(inner: &Inner, stop: &AtomicBool) {
    const MAX_SLEEP: Duration = Duration::from_millis(1);
    let mut sleep = Duration::from_micros(50);
    let mut stalled_since: Option<Instant> = None;
    while !stop.load(Ordering::Acquire) {
        // See `Waiter`: stand aside while user threads poll themselves.
        let key = inner.standby.prepare();
        if inner.spinners.load(Ordering::Acquire) > 0 {
            inner.standby.wait(
                key,
                Timeout::Millis(STAND_ASIDE.as_millis() as u64).deadline(),
            );
            continue;
        }
        let outstanding = inner.queues.any_outstanding();
        if !outstanding {
            stalled_since = None;
        }
        let stalled = stalled_since.is_some_and(|since| since.elapsed() > STALL);
        if outstanding && !stalled {
            // Our own transfers are in flight, and with manual progress they move only while
            // somebody drives the provider: sleeping in the wait object between socket events
            // cost 30% of streaming bandwidth (measured, tcp and shm). Poll, yielding the core,
            // until they complete.
            if inner.progress() {
                stalled_since = None;
            } else {
                stalled_since.get_or_insert_with(Instant::now);
                std::thread::yield_now();
            }
        } else if inner.ep.cq_waitable() {
            // A bounded sleep rather than an infinite one: a stop request is also signalled,
            // but the bound keeps shutdown prompt even if a provider misses the signal.
            if inner.progress_blocking(100) {
                stalled_since = None;
            }
        } else if inner.progress() {
            stalled_since = None;
            sleep = Duration::from_micros(50);
        } else {
            std::thread::sleep(sleep);
            sleep = (sleep * 2).min(MAX_SLEEP);
        }
    }
}

impl Drop for ProgressThread {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        self.inner.ep.signal();
        if let Some(handle) = self.handle.take() {
            // A panic in the progress thread has already been reported by the runtime's panic
            // hook; there is nothing more to do with it while shutting down.
            let _ = handle.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_context_round_trips() {
        for op in [
            OpContext {
                kind: OpKind::User,
                queue: 15,
                segment: 255,
                rank: u32::MAX >> 8,
            },
            OpContext {
                kind: OpKind::System,
                queue: 0,
                segment: 0,
                rank: 0,
            },
            OpContext {
                kind: OpKind::PassiveRecv,
                queue: 0,
                segment: 15,
                rank: 3,
            },
            OpContext {
                kind: OpKind::PassiveSend,
                queue: 0,
                segment: 0,
                rank: 9,
            },
            OpContext {
                kind: OpKind::Atomic,
                queue: 0,
                segment: 0,
                rank: u32::MAX,
            },
            OpContext {
                kind: OpKind::Collective,
                queue: 0,
                segment: 63,
                rank: 5,
            },
            OpContext {
                kind: OpKind::Ping,
                queue: 0,
                segment: 0,
                rank: 5,
            },
        ] {
            let word = op.encode();
            assert_eq!(word & 1, 1);
            assert_eq!(OpContext::decode(word), Some(op));
        }
        assert_eq!(OpContext::decode(0x1000), None);
    }
}
