//! The engine: how every operation of the runtime is posted, tracked, completed and waited for.
//!
//! * **Records and handlers.** Every operation posted to the fabric carries an [`Op`]: the
//!   rank it goes to and its completion [`Handler`], an object of the service that posted it
//!   (a queue, a lookup, a passive-message buffer, ...). The fabric layer keeps the record, and
//!   the memory the operation uses, until the operation completes, and hands the record back;
//!   the engine then calls the handler. There is no context word to decode.
//! * **Progress** ([`Inner::progress`], this module): read the completion queue, dispatch
//!   local completions to their handlers and remote notifications to their tables, then retry
//!   the work the provider refused for now ([`Retry`]).
//! * **Counting** ([`tracker`]): every completion tracking (queues, batches, collectives) is a
//!   [`Tracker`](tracker::Tracker).
//! * **Deadlines** ([`deadline`]): posting while the provider is busy, and every wait on
//!   other ranks, run under the caller's deadline and watch the health of the ranks they
//!   depend on.
//! * **Descriptors** ([`lookup`]): where peers' segments are, read lazily and asynchronously.
//! * **Who drives progress** ([`handoff`], [`thread`]): waiting threads poll; the progress
//!   thread stands aside while they do and drives progress while nobody waits.

pub(crate) mod deadline;
pub(crate) mod handoff;
pub(crate) mod lookup;
pub(crate) mod thread;
pub(crate) mod tracker;

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

use gaspi_fabric::{Event, Failure};

use crate::context::Inner;
use crate::error::{Error, Rank};
use crate::health::is_connection_loss;
use crate::sync::{lock, AtomicBool, AtomicU32, AtomicUsize, Mutex, Ordering};
use crate::wire::WireNotification;
use handoff::Polling;

/// The endpoint, with the engine's operation record.
pub(crate) type Endpoint = gaspi_fabric::Endpoint<Op>;

/// What the engine needs to know about an operation when it completes.
pub(crate) struct Op {
    handler: Arc<dyn Handler>,
    /// The peer the operation talks to (`None` for posted receives, which any rank may fill).
    rank: Option<Rank>,
    /// Counted in [`Engine::in_flight`] (every operation but posted receive buffers).
    counted: bool,
}

impl Op {
    /// An operation towards `rank`, completed by `handler`.
    pub(crate) fn to(rank: Rank, handler: Arc<dyn Handler>) -> Op {
        Op {
            handler,
            rank: Some(rank),
            counted: true,
        }
    }

    /// A receive buffer, filled by any rank, completed by `handler`.
    pub(crate) fn receive(handler: Arc<dyn Handler>) -> Op {
        Op {
            handler,
            rank: None,
            counted: false,
        }
    }
}

/// How an operation ended.
pub(crate) type Outcome<'a> = Result<(), &'a Failure>;

/// The completion handler of a kind of operation; implemented by the service that posts it.
pub(crate) trait Handler: Send + Sync {
    /// The operation towards `rank` completed (`Ok`) or failed.
    fn complete(&self, inner: &Inner, rank: Option<Rank>, outcome: Outcome<'_>);

    /// A posted receive got a message of `len` bytes (receive buffers only).
    fn received(&self, inner: &Inner, len: usize) {
        let _ = (inner, len);
    }
}

/// Work the provider refused for now (a busy provider, a lookup still in flight): retried by
/// the progress engine after every completion-queue read until done.
pub(crate) trait Retry: Send + Sync {
    /// The flag that says this is on the engine's retry list.
    fn scheduled(&self) -> &AtomicBool;

    /// Tries again; returns whether work is left.
    fn retry(&self, inner: &Inner) -> bool;
}

/// The engine's own state, inside the context.
#[derive(Default)]
pub(crate) struct Engine {
    /// Operations posted and not yet completed (receive buffers excepted): the progress thread
    /// polls while there are any.
    pub(crate) in_flight: AtomicUsize,
    /// Who drives progress.
    pub(crate) handoff: handoff::Handoff,
    /// Completion-queue reads in a row by direct waiters that found nothing (see
    /// [`FABRIC_EVERY`]); a hint, so updated without ordering and racing freely.
    idle_reads: AtomicU32,
    retries: Mutex<Vec<Arc<dyn Retry>>>,
    any_retry: AtomicBool,
}

impl Engine {
    /// Puts `work` on the retry list, unless it is there already.
    pub(crate) fn schedule(&self, work: Arc<dyn Retry>) {
        if !work.scheduled().swap(true, Ordering::AcqRel) {
            lock(&self.retries).push(work);
            self.any_retry.store(true, Ordering::Release);
        }
    }

    /// Whether any work waits for a retry.
    #[inline]
    pub(crate) fn has_retries(&self) -> bool {
        self.any_retry.load(Ordering::Acquire)
    }
}

/// How [`Inner::read_completions`] reads the completion queue.
enum Read {
    /// Without blocking; nothing while another thread reads.
    Poll,
    /// Sleeping up to this many ms in the provider's wait object when nothing is there.
    Wait(i32),
    /// Waiting up to this long for another thread's read to end.
    Settled(Duration),
}

impl Inner {
    /// Drives the provider once and handles what it completed, then retries refused work.
    /// Returns whether the completion queue reported anything (what a retry posts shows up
    /// there later). Never blocks.
    pub(crate) fn progress(&self) -> bool {
        let progressed = self.read_completions(Read::Poll);
        self.retry_refused();
        progressed
    }

    /// Like [`progress`](Self::progress), but sleeps in the provider up to `ms` when nothing
    /// is there (where the provider has a wait object).
    pub(crate) fn progress_blocking(&self, ms: i32) -> bool {
        let progressed = self.read_completions(Read::Wait(ms));
        self.retry_refused();
        progressed
    }

    /// Like [`progress`](Self::progress), but when another thread of this rank is reading the
    /// completion queue, waits up to `limit` for that read to end before reading (see
    /// [`Endpoint::poll_settled`](gaspi_fabric::Endpoint::poll_settled)): when it returns,
    /// everything this rank took from the queue before the call has been handled. Not for
    /// handlers of completions, whose own read it would wait for.
    pub(crate) fn progress_settled(&self, limit: Duration) -> bool {
        let progressed = self.read_completions(Read::Settled(limit));
        self.retry_refused();
        progressed
    }

    fn read_completions(&self, how: Read) -> bool {
        self.direct.sweep();
        let mut completed = false;
        let dispatch = |event| self.dispatch(event, &mut completed);
        let read = match how {
            Read::Poll => self.ep.poll(dispatch),
            Read::Wait(ms) => self.ep.wait(ms, dispatch),
            Read::Settled(limit) => self.ep.poll_settled(limit, dispatch),
        };
        match read {
            Ok(0) => false,
            Ok(_) => {
                if self.engine.idle_reads.load(Ordering::Relaxed) > 0 {
                    self.engine.idle_reads.store(0, Ordering::Relaxed);
                }
                if completed {
                    self.events.notify_all();
                }
                true
            }
            Err(e) => {
                // A failing completion queue means the endpoint itself is broken: every wait
                // runs into its own deadline, so the failure is recorded for all queues.
                self.queues.fail_all(&Error::from(e).to_string());
                self.events.notify_all();
                true
            }
        }
    }

    fn dispatch(&self, event: Event<Op>, completed: &mut bool) {
        match event {
            Event::Remote { data } => self.deliver(WireNotification::decode(data)),
            Event::Done(op) => {
                *completed = true;
                self.finish(op, Ok(()));
            }
            Event::Received { op, len } => {
                *completed = true;
                op.handler.received(self, len);
            }
            Event::Failed { op, failure } => {
                *completed = true;
                match op {
                    Some(op) => {
                        if let Some(rank) = op.rank {
                            self.connection_failed(rank, &failure);
                        }
                        self.finish(op, Err(&failure));
                    }
                    // Not attributable to any operation of ours: every queue learns of it.
                    None => self.queues.fail_all(&failure.message),
                }
            }
            // An injected write, where the provider reports those (rxm), tagged with its
            // target rank: its failure is evidence like any other operation's; its success
            // needs nothing.
            Event::Untracked { tag, failure } => {
                if let (Some(failure), Ok(rank)) = (failure, Rank::try_from(tag)) {
                    self.connection_failed(rank, &failure);
                }
            }
        }
    }

    /// Marks `rank` dead when `failure` of an operation towards it says the connection broke.
    fn connection_failed(&self, rank: Rank, failure: &gaspi_fabric::Failure) {
        if is_connection_loss(failure.code) {
            self.mark_failed(
                rank,
                format!("the connection to it broke: {}", failure.message),
            );
        }
    }

    fn finish(&self, op: Op, outcome: Outcome<'_>) {
        if op.counted {
            self.engine.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        op.handler.complete(self, op.rank, outcome);
    }

    /// Retries the work on the retry list, if any.
    // Inline, the check costs every progress round a load; called, it cost about as many
    // instructions again as the rest of a round that reads an empty completion queue.
    #[inline]
    fn retry_refused(&self) {
        if self.engine.has_retries() {
            self.retry_listed();
        }
    }

    /// [`retry_refused`](Self::retry_refused) once the list has work.
    #[inline(never)]
    fn retry_listed(&self) {
        let work = {
            let mut list = lock(&self.engine.retries);
            self.engine.any_retry.store(false, Ordering::Release);
            std::mem::take(&mut *list)
        };
        for item in work {
            // Cleared before the retry, so work added meanwhile schedules it again.
            item.scheduled().store(false, Ordering::Release);
            if item.retry(self) {
                self.engine.schedule(item);
            }
        }
    }

    /// Routes a notification that arrived as a remote write's completion data to its table.
    fn deliver(&self, n: WireNotification) {
        if let Some((rank, segment)) = n.gone() {
            self.descriptors.forget_deleted(rank, segment);
        } else if let Some(slot) = n.atomic_reply() {
            self.atomics.replied(self, slot);
        } else if n.is_system() {
            // Ids and values come from our own runtime on the peer, so they are in range.
            let _ = self.system_notifications.set(n.id, n.value);
        } else {
            // A notification for an id beyond this rank's table can only come from a peer with
            // a different configuration; the origin validated against its own, equal, table.
            // One for a segment this rank has deleted has nowhere to go: the sender violated
            // the segment's lifetime (its data part was refused by the closed registration).
            self.segments.with_table(n.table, |table| {
                let _ = table.set(n.id, n.value);
            });
        }
    }

    /// A handle for one waiting call: drives progress and keeps the progress thread aside
    /// while the call is polling.
    pub(crate) fn waiter(&self) -> Waiter<'_> {
        // A wait that never reads the completion queue (one served by the direct path) still
        // releases what peers withdrew.
        self.direct.sweep();
        Waiter {
            inner: self,
            polling: None,
            rounds: 0,
            deaths_seen: None,
        }
    }

    /// A [`waiter`](Self::waiter) for a wait that depends on other ranks: its wait ends with
    /// [`Interrupted`](gaspi_notifications::Error::Interrupted) as soon as a death is recorded
    /// beyond the `deaths` (of [`Health::deaths`](crate::health::Health::deaths)) its caller
    /// had looked at, so that the caller looks at once whether its ranks include the dead one
    /// (the marking wakes every sleeping waiter) instead of at the end of its slice. Nothing
    /// is asked of a waiter while no rank dies but one load at each look at the clock.
    pub(crate) fn watching(&self, deaths: u32) -> Waiter<'_> {
        Waiter {
            deaths_seen: Some(deaths),
            ..self.waiter()
        }
    }

    /// Posts an operation with `post`, counting it in flight; a refused one is uncounted and
    /// its record handed back.
    pub(crate) fn submit(
        &self,
        op: Op,
        post: impl FnOnce(Op) -> Result<(), gaspi_fabric::Refused<Op>>,
    ) -> Result<(), gaspi_fabric::Refused<Op>> {
        let counted = op.counted;
        if counted {
            self.engine.in_flight.fetch_add(1, Ordering::AcqRel);
        }
        let posted = post(op);
        if posted.is_err() && counted {
            self.engine.in_flight.fetch_sub(1, Ordering::AcqRel);
        }
        posted
    }
}

/// A waiting user thread: drives progress while it polls (see [`handoff`]).
pub(crate) struct Waiter<'a> {
    inner: &'a Inner,
    /// Counted from its first completion-queue read (see [`Waiter::drive`]).
    polling: Option<Polling<'a>>,
    /// Progress calls so far (see [`FABRIC_EVERY`]).
    rounds: u32,
    /// For a watching waiter, the deaths its caller had looked at (see [`Inner::watching`]).
    deaths_seen: Option<u32>,
}

thread_local! {
    /// The waits of this thread so far that made a progress call (see [`FABRIC_EVERY`]): a
    /// wait that may not wait at all (`Timeout::Test`) makes a single call, and a loop of
    /// such waits must still read the completion queue every few waits, or what arrives
    /// through the fabric is never seen while no progress thread runs.
    static WAITS: Cell<u32> = const { Cell::new(0) };
}

/// While nothing of this rank's own is in flight on the fabric or waits for a retry, and it
/// reaches ranks directly, a waiter reads the completion queue only every few rounds (and a
/// thread's waits in their first round every few waits, see [`WAITS`]): a notification
/// arriving directly is seen by the next look at the table, and an idle completion-queue read
/// costs several such looks (over tcp it is a system call, which made a direct ping-pong
/// twice as slow), so reading it every round delayed direct arrivals. The spacing starts at
/// this many rounds and doubles with every [`IDLE_STREAK`] idle reads in a row, up to
/// [`FABRIC_EVERY_MAX`]; any completion read, by anyone, brings it back. So a job whose
/// traffic goes direct soon stops paying for the completion queue, while one that also
/// hears from the fabric keeps looking often: what arrives there is seen a few rounds later,
/// a few tens of nanoseconds against its microsecond of transport, or, after a long direct
/// phase, the first arrival about a microsecond later.
const FABRIC_EVERY: u32 = 4;

/// The most rounds between two completion-queue reads of a waiter (see [`FABRIC_EVERY`]).
const FABRIC_EVERY_MAX: u32 = 64;

// The spacing is a power of two, so a waiter's round finds its turn with a mask, not a
// division (a few nanoseconds of every round of a spin).
const _: () = assert!(FABRIC_EVERY.is_power_of_two() && FABRIC_EVERY_MAX.is_power_of_two());

/// Idle completion-queue reads in a row that double a waiter's spacing (see
/// [`FABRIC_EVERY`]).
const IDLE_STREAK: u32 = 64;

impl gaspi_notifications::Progress for Waiter<'_> {
    // Inline, the rounds that skip the completion queue cost a few loads in a waiter's loop;
    // called, about as many again.
    #[inline]
    fn progress(&mut self) -> bool {
        let engine = &self.inner.engine;
        if !self.inner.direct.enabled()
            || engine.in_flight.load(Ordering::Relaxed) > 0
            || engine.has_retries()
        {
            return self.drive();
        }
        self.rounds = self.rounds.wrapping_add(1);
        let idle = engine.idle_reads.load(Ordering::Relaxed);
        let every = (FABRIC_EVERY << (idle / IDLE_STREAK)).min(FABRIC_EVERY_MAX);
        let round = match self.rounds {
            1 => WAITS.with(|waits| {
                let wait = waits.get().wrapping_add(1);
                waits.set(wait);
                wait
            }),
            round => round,
        };
        if round & (every - 1) != 0 {
            return false;
        }
        self.drive_spaced(idle)
    }

    fn sleeping(&mut self, asleep: bool) {
        if let Some(polling) = &mut self.polling {
            polling.sleeping(asleep);
        }
    }

    fn interrupted(&mut self) -> bool {
        self.deaths_seen
            .is_some_and(|seen| self.inner.health.deaths() != seen)
    }
}

impl Waiter<'_> {
    /// Reads the completion queue, counted among the polling threads from the first read on:
    /// the progress thread stands aside for threads that drive the provider, and a wait that
    /// ends before it reads the queue (a direct arrival seen within a few rounds) costs the
    /// hand-off nothing.
    #[inline(never)]
    fn drive(&mut self) -> bool {
        if self.polling.is_none() {
            self.polling = Some(self.inner.engine.handoff.polling());
        }
        self.inner.progress()
    }

    /// [`drive`](Self::drive) on a spaced round (see [`FABRIC_EVERY`]), counting `idle`, the
    /// idle reads in a row before it, on when it found nothing.
    #[inline(never)]
    fn drive_spaced(&mut self, idle: u32) -> bool {
        let progressed = self.drive();
        if !progressed && idle < IDLE_STREAK * (FABRIC_EVERY_MAX / FABRIC_EVERY).ilog2() {
            self.inner
                .engine
                .idle_reads
                .store(idle + 1, Ordering::Relaxed);
        }
        progressed
    }
}
