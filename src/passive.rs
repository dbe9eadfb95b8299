//! Passive messages: small two-sided messages for control traffic, beside the one-sided world,
//! and the runtime's own messages (atomic requests, rendezvous) on the same path.
//!
//! A rank posts [`RECV_BUFFERS`] receive buffers in a registered region at init; each message
//! carries an 8-byte header (sender rank, length) before its payload. The progress engine copies
//! an arrived message out, reposts the buffer and wakes receivers, so a receive never holds a
//! provider buffer. Messages of one sender arrive in the order sent where the provider grants
//! send-after-send ordering (`FI_ORDER_SAS`; tcp and shm do): messages match buffers in the
//! order the buffers were posted, but may *complete* out of that order (shm finishes a small
//! message before a large one matched earlier), so completed messages pass through a reorder
//! stage keyed by posting order before they reach the inbox.
//!
//! Sending never blocks: a message is copied into one of [`SEND_SLOTS`] registered send slots
//! and posted, or, while no slot is free or the provider is busy, kept in order and posted by
//! the progress engine. [`Context::passive_send`] then waits, under its timeout, until the
//! message has left.

use std::collections::{BTreeMap, VecDeque};
use std::sync::{Arc, Weak};

use gaspi_fabric::{Refused, Region};
use gaspi_notifications::{wait_until, EventCount, Timeout};
use gaspi_segments::SegmentMemory;

use crate::context::{Context, Inner};
use crate::engine::{Endpoint, Handler, Op, Outcome, Retry};
use crate::error::{Error, Rank, Result};
use crate::sync::{lock, AtomicBool, Mutex, Ordering};
use crate::system::Slots;

/// Receive buffers posted at any time.
pub(crate) const RECV_BUFFERS: usize = 16;
/// Messages in flight at once; more wait in order.
pub(crate) const SEND_SLOTS: u16 = 16;
/// Messages waiting for a send slot at most; beyond, sending is [`Error::Limit`].
const MAX_WAITING: usize = 4096;
/// Sender rank and payload length, little-endian u32 each.
const HEADER: usize = 8;
/// Marks a runtime-internal message in the length word of the header: it goes to the runtime
/// (see [`Inner::route_internal`]), not to `passive_receive`.
const INTERNAL: u32 = 1 << 31;
/// Largest runtime-internal payload for any configuration; receive buffers hold at least this.
pub(crate) const INTERNAL_MIN_ROOM: usize = 64;

/// Whether a message has left: `None` while in flight, then its outcome.
#[derive(Default)]
struct Sent {
    outcome: Mutex<Option<std::result::Result<(), String>>>,
}

/// A message waiting for a send slot.
struct Outgoing {
    rank: Rank,
    /// Header and payload.
    bytes: Vec<u8>,
    sent: Option<Arc<Sent>>,
}

/// The passive-message state of a context.
pub(crate) struct Passive {
    region: Arc<Region>,
    /// Largest user payload.
    max: usize,
    inbox: Mutex<VecDeque<(Rank, Vec<u8>)>>,
    arrived: EventCount,
    /// Posting order of the buffers and messages waiting for earlier ones.
    order: Mutex<Reorder>,
    buffers: Vec<Arc<Buffer>>,
    /// Buffers whose repost the provider refused for now.
    unposted: Mutex<Vec<u8>>,
    send_slots: Slots,
    waiting: Mutex<VecDeque<Outgoing>>,
    closing: AtomicBool,
    scheduled: AtomicBool,
    me: Weak<Passive>,
}

/// A receive buffer, as the completion handler of its posted receive.
struct Buffer {
    index: u8,
}

/// A send slot in flight.
struct SendSlot {
    slot: u16,
    sent: Option<Arc<Sent>>,
}

impl Passive {
    /// Allocates and registers the buffers for user payloads of up to `max` bytes and runtime
    /// payloads of up to `internal` bytes.
    pub(crate) fn new(
        ep: &Endpoint,
        max: usize,
        internal: usize,
        key: u64,
    ) -> Result<Arc<Passive>> {
        let slot = HEADER + max.max(internal).max(INTERNAL_MIN_ROOM);
        let slots = RECV_BUFFERS + usize::from(SEND_SLOTS);
        let memory =
            SegmentMemory::allocate(slot * slots, "passive").map_err(|source| Error::Segment {
                rank: 0,
                segment: 0,
                source,
            })?;
        let region = Region::register(ep, memory, key)?;
        Ok(Arc::new_cyclic(|me| Passive {
            region,
            max,
            inbox: Mutex::new(VecDeque::new()),
            arrived: EventCount::new(),
            order: Mutex::new(Reorder::default()),
            buffers: (0..RECV_BUFFERS as u8)
                .map(|index| Arc::new(Buffer { index }))
                .collect(),
            unposted: Mutex::new(Vec::new()),
            send_slots: Slots::new(SEND_SLOTS),
            waiting: Mutex::new(VecDeque::new()),
            closing: AtomicBool::new(false),
            scheduled: AtomicBool::new(false),
            me: me.clone(),
        }))
    }

    fn slot_len(&self) -> usize {
        self.region.len() / (RECV_BUFFERS + usize::from(SEND_SLOTS))
    }

    /// Largest payload of a runtime-internal message.
    pub(crate) fn internal_max(&self) -> usize {
        self.slot_len() - HEADER
    }

    /// Posts every receive buffer.
    pub(crate) fn post_all(&self, inner: &Inner) {
        for index in 0..RECV_BUFFERS as u8 {
            self.post(inner, index);
        }
    }

    /// Withdraws the posted receive buffers, and lets the provider finish any receive already
    /// under way: the context is closing.
    pub(crate) fn withdraw(&self, inner: &Inner) {
        self.closing.store(true, Ordering::Release);
        inner.ep.cancel_receives();
        // A message already being placed cannot be cancelled; give it time to complete.
        for _ in 0..100 {
            if !inner.progress() {
                break;
            }
        }
    }

    fn schedule(&self, inner: &Inner) {
        if let Some(me) = self.me.upgrade() {
            inner.engine.schedule(me as Arc<dyn Retry>);
        }
    }

    /// Posts buffer `index`, or keeps it for a retry when the provider refuses.
    fn post(&self, inner: &Inner, index: u8) {
        if self.closing.load(Ordering::Acquire) {
            return;
        }
        let len = self.slot_len() as u64;
        let posted = self
            .region
            .slice(u64::from(index) * len, len)
            .map_err(Error::from)
            .and_then(|buf| {
                // Numbered under the lock, so numbers follow the order the provider sees.
                let mut order = lock(&self.order);
                let handler = Arc::clone(&self.buffers[usize::from(index)]);
                match inner.submit(Op::receive(handler), |op| inner.ep.post_recv(buf, op)) {
                    Ok(()) => {
                        order.seq_of[usize::from(index)] = order.next_post;
                        order.next_post += 1;
                        Ok(true)
                    }
                    Err(Refused::Busy(_)) => Ok(false),
                    Err(Refused::Failed(e, _)) => Err(e.into()),
                }
            });
        if !matches!(posted, Ok(true)) {
            // Refused for now (or failing): retried by the progress engine.
            lock(&self.unposted).push(index);
            self.schedule(inner);
        }
    }

    /// Hands the outcome of buffer `index`'s receive to the reorder stage and moves every
    /// message whose predecessors have all completed into the inbox.
    fn complete(&self, index: u8, message: Option<(Rank, Vec<u8>)>) {
        let mut order = lock(&self.order);
        let seq = order.seq_of[usize::from(index)];
        order.ready.insert(seq, message);
        let mut inbox = lock(&self.inbox);
        loop {
            let due = order.next_deliver;
            let Some(message) = order.ready.remove(&due) else {
                break;
            };
            order.next_deliver += 1;
            inbox.extend(message);
        }
    }

    /// A message of `len` bytes (header included) arrived in buffer `index`.
    fn received(&self, inner: &Inner, index: u8, len: usize) {
        let base = u64::from(index) * self.slot_len() as u64;
        let memory = self.region.memory();
        let mut header = [0u8; HEADER];
        let parsed = memory.read(base, &mut header).ok().and_then(|()| {
            let word = |i: usize| {
                u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]])
            };
            let (from, internal) = (word(0), word(4) & INTERNAL != 0);
            let size = (word(4) & !INTERNAL) as usize;
            let max = if internal {
                self.internal_max()
            } else {
                self.max
            };
            (size + HEADER == len && size <= max).then_some((from, size, internal))
        });
        let message = parsed.and_then(|(from, size, internal)| {
            let mut payload = vec![0u8; size];
            memory
                .read(base + HEADER as u64, &mut payload)
                .ok()
                .map(|()| (from, payload, internal))
        });
        // The buffer goes back to the provider before the message is acted on: an internal
        // message may make this rank send (an atomic's reply).
        match message {
            Some((from, payload, true)) => {
                // Not a user message, but it used a place in the posting order.
                self.complete(index, None);
                self.post(inner, index);
                inner.route_internal(from, &payload);
            }
            Some((from, payload, false)) => {
                self.complete(index, Some((from, payload)));
                self.post(inner, index);
            }
            // A malformed message (a peer with a different configuration) is dropped.
            None => {
                self.complete(index, None);
                self.post(inner, index);
            }
        }
        self.arrived.notify_all();
    }

    /// Sends `payload` to `rank`: posted now if a slot is free and nothing to `rank` waits
    /// before it, else kept in order for the progress engine.
    fn send(
        &self,
        inner: &Inner,
        rank: Rank,
        payload: &[u8],
        internal: bool,
        sent: Option<Arc<Sent>>,
    ) -> Result<()> {
        let mut bytes = Vec::with_capacity(HEADER + payload.len());
        bytes.extend_from_slice(&inner.rank.to_le_bytes());
        let flag = if internal { INTERNAL } else { 0 };
        bytes.extend_from_slice(&(payload.len() as u32 | flag).to_le_bytes());
        bytes.extend_from_slice(payload);
        let message = Outgoing { rank, bytes, sent };
        let mut waiting = lock(&self.waiting);
        let behind = waiting.iter().any(|m| m.rank == rank);
        if !behind {
            match self.try_post(inner, &message) {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(e) => return Err(e),
            }
        }
        if waiting.len() >= MAX_WAITING {
            return Err(Error::Limit(format!(
                "{MAX_WAITING} passive messages already wait to be sent"
            )));
        }
        waiting.push_back(message);
        drop(waiting);
        self.schedule(inner);
        Ok(())
    }

    /// Takes the message `sent` reports on out of the messages waiting to be posted: false
    /// when it is not there (the provider took it already).
    fn unsend(&self, sent: &Arc<Sent>) -> bool {
        let mut waiting = lock(&self.waiting);
        let before = waiting.len();
        waiting.retain(|m| !m.sent.as_ref().is_some_and(|s| Arc::ptr_eq(s, sent)));
        waiting.len() < before
    }

    /// Posts `message` from a free send slot; `Ok(false)` when no slot is free or the
    /// provider is busy.
    fn try_post(&self, inner: &Inner, message: &Outgoing) -> Result<bool> {
        let Some(slot) = self.send_slots.take() else {
            return Ok(false);
        };
        let at = (RECV_BUFFERS as u64 + u64::from(slot)) * self.slot_len() as u64;
        let posted = self
            .region
            .memory()
            .write(at, &message.bytes)
            .map_err(|source| Error::Segment {
                rank: inner.rank,
                segment: 0,
                source,
            })
            .and_then(|()| Ok(self.region.slice(at, message.bytes.len() as u64)?))
            .and_then(|src| {
                let handler = Arc::new(SendSlot {
                    slot,
                    sent: message.sent.clone(),
                });
                match inner.submit(Op::to(message.rank, handler), |op| {
                    inner.ep.send(src, message.rank, op)
                }) {
                    Ok(()) => Ok(true),
                    Err(Refused::Busy(_)) => Ok(false),
                    Err(Refused::Failed(e, _)) => Err(e.into()),
                }
            });
        if !matches!(posted, Ok(true)) {
            self.send_slots.give(slot);
        }
        posted
    }
}

impl Handler for Buffer {
    fn complete(&self, inner: &Inner, _rank: Option<Rank>, _outcome: Outcome<'_>) {
        // Only a failed receive gets here (the endpoint is closing or broken): post it again
        // so receiving continues if the endpoint recovers.
        inner.passive.complete(self.index, None);
        inner.passive.post(inner, self.index);
    }

    fn received(&self, inner: &Inner, len: usize) {
        inner.passive.received(inner, self.index, len);
    }
}

impl Handler for SendSlot {
    fn complete(&self, inner: &Inner, _rank: Option<Rank>, outcome: Outcome<'_>) {
        inner.passive.send_slots.give(self.slot);
        if let Some(sent) = &self.sent {
            *lock(&sent.outcome) = Some(outcome.map_err(|f| f.message.clone()));
        }
        if !lock(&inner.passive.waiting).is_empty() {
            inner.passive.schedule(inner);
        }
    }
}

impl Retry for Passive {
    fn scheduled(&self) -> &AtomicBool {
        &self.scheduled
    }

    fn retry(&self, inner: &Inner) -> bool {
        let unposted: Vec<u8> = std::mem::take(&mut *lock(&self.unposted));
        for index in unposted {
            self.post(inner, index);
        }
        let mut waiting = lock(&self.waiting);
        let mut blocked: Vec<Rank> = Vec::new();
        waiting.retain(|message| {
            if blocked.contains(&message.rank) {
                return true;
            }
            if let Some(dead) = inner.health.known(message.rank) {
                if let Some(sent) = &message.sent {
                    *lock(&sent.outcome) = Some(Err(dead.to_string()));
                }
                return false;
            }
            match self.try_post(inner, message) {
                Ok(true) => false,
                Ok(false) => {
                    blocked.push(message.rank);
                    true
                }
                Err(e) => {
                    if let Some(sent) = &message.sent {
                        *lock(&sent.outcome) = Some(Err(e.to_string()));
                    }
                    false
                }
            }
        });
        !waiting.is_empty() || !lock(&self.unposted).is_empty()
    }
}

/// Posting numbers of the receive buffers, and completed messages waiting for earlier ones.
#[derive(Default)]
struct Reorder {
    next_post: u64,
    seq_of: [u64; RECV_BUFFERS],
    next_deliver: u64,
    ready: BTreeMap<u64, Option<(Rank, Vec<u8>)>>,
}

impl Inner {
    /// Sends a runtime-internal message (at most [`Passive::internal_max`] bytes) to `rank`
    /// without waiting: it leaves now or as soon as the provider has room.
    ///
    /// # Errors
    /// [`Error::RankFailed`] when `rank` is known dead; [`Error::Limit`] when too many
    /// messages wait to be sent.
    pub(crate) fn send_internal(&self, rank: Rank, payload: &[u8]) -> Result<()> {
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        if payload.len() > self.passive.internal_max() {
            return Err(Error::Limit(format!(
                "a runtime message of {} bytes exceeds the {} a passive buffer holds \
                 (GASPI_PASSIVE_MAX_BYTES)",
                payload.len(),
                self.passive.internal_max()
            )));
        }
        self.passive.send(self, rank, payload, true, None)
    }
}

impl Context {
    /// Sends `bytes` (at most [`Config::passive_max_bytes`](crate::Config)) to `rank` as one
    /// passive message and waits until it has left this rank.
    ///
    /// Any number of threads may send at once; messages to one rank leave in the order their
    /// calls were made. As GASPI has it, [`Error::Timeout`] means the message could not be
    /// posted to the provider in time: it is withdrawn, and the call can be made again. A
    /// message the provider took but had not completed when the timeout passed (its
    /// completions come in order, and one before it is held up) is on its way: the call
    /// returns `Ok`, as for a write posted on a queue, and a failure of the peer shows in
    /// the health service ([`state_vec`](Self::state_vec), later calls).
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::PassiveTooLarge`]; [`Error::Timeout`];
    /// [`Error::RankFailed`] when `rank` is or becomes known dead before the message left;
    /// [`Error::OperationFailed`] when the provider failed the send; [`Error::Limit`] when
    /// thousands of messages already wait to be sent.
    pub fn passive_send(&self, rank: Rank, bytes: &[u8], timeout: Timeout) -> Result<()> {
        self.check_rank(rank)?;
        let inner = &self.inner;
        let passive = &inner.passive;
        if bytes.len() > passive.max {
            return Err(Error::PassiveTooLarge {
                size: bytes.len(),
                max: passive.max,
            });
        }
        if let Some(dead) = inner.health.known(rank) {
            return Err(dead);
        }
        let sent = Arc::new(Sent::default());
        passive.send(inner, rank, bytes, false, Some(Arc::clone(&sent)))?;
        let outcome = match inner.watched_until(
            || std::iter::once(rank),
            timeout.deadline(),
            || lock(&sent.outcome).clone(),
        ) {
            Err(Error::Timeout) if passive.unsend(&sent) => return Err(Error::Timeout),
            // The provider took it meanwhile: it completed, or is on its way.
            Err(Error::Timeout) => lock(&sent.outcome).clone().unwrap_or(Ok(())),
            other => other?,
        };
        outcome.map_err(|reason| inner.failure_of(rank, &reason))
    }

    /// Whether passive messages of one sender arrive in the order sent (the provider granted
    /// send-after-send ordering).
    pub fn passive_ordered(&self) -> bool {
        self.inner.ep.caps().ordered_sends
    }

    /// Waits for the next passive message from any rank and returns its sender and payload.
    ///
    /// # Errors
    /// [`Error::Timeout`] when no message arrived in time.
    pub fn passive_receive(&self, timeout: Timeout) -> Result<(Rank, Vec<u8>)> {
        let passive = &self.inner.passive;
        wait_until(
            &passive.arrived,
            timeout.deadline(),
            || lock(&passive.inbox).pop_front(),
            self.inner.waiter(),
        )
        .map_err(|_| Error::Timeout)
    }
}
