//! Passive messages: small two-sided messages for control traffic, beside the one-sided world.
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
//! Sends are serialised through one registered send buffer: [`Context::passive_send`] copies
//! the message in, posts it and waits for its local completion.

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use gaspi_notifications::{wait_until, Deadline, EventCount, Timeout};
use gaspi_segments::SegmentMemory;

use crate::context::{Context, Inner};
use crate::error::{Error, Rank, Result};
use crate::fabric::{Endpoint, MemoryRegion, Posted};
use crate::progress::{OpContext, OpKind};
use crate::turns::Turns;

/// Receive buffers posted at any time.
pub(crate) const RECV_BUFFERS: usize = 16;
/// Sender rank and payload length, little-endian u32 each.
const HEADER: usize = 8;
/// Marks a runtime-internal message in the length word of the header: it goes to the runtime
/// (an atomic request, see the `atomic` module), not to `passive_receive`.
const INTERNAL: u32 = 1 << 31;
/// Largest runtime-internal payload; receive buffers hold at least this much.
pub(crate) const INTERNAL_MAX: usize = 64;

/// The passive-message state of a context.
pub(crate) struct Passive {
    // Field order is drop order: registration before memory.
    mr: MemoryRegion,
    memory: SegmentMemory,
    /// Largest payload.
    max: usize,
    inbox: Mutex<VecDeque<(Rank, Vec<u8>)>>,
    arrived: EventCount,
    /// Serialises senders, which take turns on the send buffer.
    send: Mutex<()>,
    pub(crate) sends: Turns,
    /// Posting order of the buffers and messages waiting for earlier ones.
    order: Mutex<Reorder>,
    /// Buffers whose repost the provider refused for now.
    pending: Mutex<Vec<u8>>,
    has_pending: AtomicBool,
}

impl Passive {
    /// Allocates and registers the buffers for payloads of up to `max` bytes and posts every
    /// receive buffer on `ep`.
    pub(crate) fn new(ep: &Endpoint, rank: Rank, max: usize, key: u64) -> Result<Passive> {
        let slot = HEADER + max.max(INTERNAL_MAX);
        let memory = SegmentMemory::allocate(slot * (RECV_BUFFERS + 1), "passive")
            .map_err(Error::segment(rank, 0))?;
        // SAFETY: the memory is stored next to the registration and dropped after it.
        let mr = unsafe { MemoryRegion::register(ep, memory.as_ptr(), memory.len(), key)? };
        Ok(Passive {
            mr,
            memory,
            max,
            inbox: Mutex::new(VecDeque::new()),
            arrived: EventCount::new(),
            send: Mutex::new(()),
            sends: Turns::default(),
            order: Mutex::new(Reorder::default()),
            pending: Mutex::new(Vec::new()),
            has_pending: AtomicBool::new(false),
        })
    }

    /// Posts every receive buffer. Called once the context owns the endpoint and this state,
    /// so that [`withdraw`](Self::withdraw) runs before the buffers are freed whatever happens.
    pub(crate) fn post_all(&self, ep: &Endpoint) -> Result<()> {
        for index in 0..RECV_BUFFERS as u8 {
            if self.post(ep, index)? == Posted::Again {
                self.defer(index);
            }
        }
        Ok(())
    }

    /// Withdraws the posted receive buffers before the memory behind them goes away, and lets
    /// the provider finish any receive already under way.
    pub(crate) fn withdraw(&self, inner: &Inner) {
        for index in 0..RECV_BUFFERS as u8 {
            inner.ep.cancel(recv_context(index));
        }
        // A message already being placed cannot be cancelled; give it time to complete.
        for _ in 0..100 {
            if !inner.progress() {
                break;
            }
        }
    }

    fn slot(&self) -> usize {
        HEADER + self.max.max(INTERNAL_MAX)
    }

    fn post(&self, ep: &Endpoint, index: u8) -> Result<Posted> {
        let context = recv_context(index);
        let buf = self
            .memory
            .as_ptr()
            .wrapping_add(usize::from(index) * self.slot());
        // Numbered under the lock, so numbers follow the order the provider sees the posts.
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: buffer `index` lies inside the registered region (RECV_BUFFERS slots precede
        // the send slot) and is only touched again when its receive completes.
        let posted = unsafe { ep.post_recv(buf, self.slot(), self.mr.desc(), context) }?;
        if posted == Posted::Yes {
            order.seq_of[usize::from(index)] = order.next_post;
            order.next_post += 1;
        }
        Ok(posted)
    }

    /// Hands the outcome of buffer `index`'s receive to the reorder stage and moves every
    /// message whose predecessors have all completed into the inbox.
    fn complete(&self, index: u8, message: Option<(Rank, Vec<u8>)>) {
        let mut order = self.order.lock().unwrap_or_else(|e| e.into_inner());
        let seq = order.seq_of[usize::from(index)];
        order.ready.insert(seq, message);
        let mut inbox = self.inbox.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let due = order.next_deliver;
            let Some(message) = order.ready.remove(&due) else {
                break;
            };
            order.next_deliver += 1;
            inbox.extend(message);
        }
    }

    fn defer(&self, index: u8) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(index);
        self.has_pending.store(true, Ordering::Release);
    }

    /// Progress engine: a message of `len` bytes (header included) arrived in the buffer
    /// named by `context`.
    pub(crate) fn received(&self, inner: &Inner, context: usize, len: usize) {
        let Some(index) = crate::progress::decode_passive_recv(context) else {
            return;
        };
        let base = u64::from(index) * self.slot() as u64;
        let mut header = [0u8; HEADER];
        let parsed = self.memory.read(base, &mut header).ok().and_then(|()| {
            let word = |i: usize| {
                u32::from_le_bytes([header[i], header[i + 1], header[i + 2], header[i + 3]])
            };
            let (from, internal) = (word(0), word(4) & INTERNAL != 0);
            let size = (word(4) & !INTERNAL) as usize;
            let max = if internal { INTERNAL_MAX } else { self.max };
            (size + HEADER == len && size <= max).then_some((from, size, internal))
        });
        let message = parsed.and_then(|(from, size, internal)| {
            let mut payload = vec![0u8; size];
            self.memory
                .read(base + HEADER as u64, &mut payload)
                .ok()
                .map(|()| (from, payload, internal))
        });
        match message {
            Some((from, payload, true)) => {
                // Not a user message, but it used a place in the posting order.
                self.complete(index, None);
                inner.atomics.serve(inner, from, &payload);
            }
            Some((from, payload, false)) => self.complete(index, Some((from, payload))),
            None => self.complete(index, None),
        }
        // A malformed message (a peer with a different configuration) is dropped; either way
        // the buffer goes back to the provider.
        self.repost(inner, index);
        self.arrived.notify_all();
    }

    /// Progress engine: a receive buffer completed with an error (the endpoint is closing or
    /// broken); post it again so receiving continues if the endpoint recovers.
    pub(crate) fn receive_failed(&self, inner: &Inner, op: OpContext, _failure: Option<String>) {
        self.complete(op.segment, None);
        self.repost(inner, op.segment);
    }

    fn repost(&self, inner: &Inner, index: u8) {
        match self.post(&inner.ep, index) {
            Ok(Posted::Yes) => {}
            // Refused for now (or failing): retried on the next progress call.
            Ok(Posted::Again) | Err(_) => self.defer(index),
        }
    }

    /// Progress engine: retries reposts the provider refused.
    pub(crate) fn repost_pending(&self, inner: &Inner) {
        if !self.has_pending.load(Ordering::Acquire) {
            return;
        }
        let mut pending = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        pending.retain(|&index| !matches!(self.post(&inner.ep, index), Ok(Posted::Yes)));
        self.has_pending
            .store(!pending.is_empty(), Ordering::Release);
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

/// The context word of receive buffer `index`.
fn recv_context(index: u8) -> usize {
    OpContext {
        kind: OpKind::PassiveRecv,
        queue: 0,
        segment: index,
        rank: 0,
    }
    .encode()
}

impl Context {
    /// Sends `bytes` (at most [`Config::passive_max_bytes`](crate::Config)) to `rank` as one
    /// passive message and waits until it has left this rank.
    ///
    /// Concurrent senders of one rank take turns. On [`Error::Timeout`] the message has still
    /// been handed to the provider and will arrive: do not send it again. The next call first
    /// waits for it to leave.
    pub fn passive_send(&self, rank: Rank, bytes: &[u8], timeout: Timeout) -> Result<()> {
        self.check_rank(rank)?;
        let passive = &self.inner.passive;
        if bytes.len() > passive.max {
            return Err(Error::PassiveTooLarge {
                size: bytes.len(),
                max: passive.max,
            });
        }
        self.send_message(rank, bytes, false, timeout.deadline())
    }

    /// Sends one message to `rank`: a user message, waiting until it has left this rank, or a
    /// runtime-internal one (at most [`INTERNAL_MAX`] bytes), returning once it is posted. On
    /// an error from an internal send, nothing was posted.
    pub(crate) fn send_message(
        &self,
        rank: Rank,
        bytes: &[u8],
        internal: bool,
        deadline: Deadline,
    ) -> Result<()> {
        let passive = &self.inner.passive;
        let _one_at_a_time = passive.send.lock().unwrap_or_else(|e| e.into_inner());
        // The buffer is free once the previous send (which may have timed out) left, or its
        // receiver died.
        let turn = self.inner.begin_turn(&passive.sends, rank, deadline)?;
        let base = (RECV_BUFFERS * passive.slot()) as u64;
        let mut header = [0u8; HEADER];
        header[..4].copy_from_slice(&self.rank().to_le_bytes());
        let flag = if internal { INTERNAL } else { 0 };
        header[4..].copy_from_slice(&(bytes.len() as u32 | flag).to_le_bytes());
        let context = OpContext {
            kind: OpKind::PassiveSend,
            queue: 0,
            segment: turn.tag(),
            rank,
        }
        .encode();
        let buf = passive.memory.as_ptr().wrapping_add(base as usize);
        let posted = passive
            .memory
            .write(base, &header)
            .and_then(|()| passive.memory.write(base + HEADER as u64, bytes))
            .map_err(Error::segment(self.rank(), 0))
            .and_then(|()| {
                self.post(rank, || {
                    // SAFETY: the send slot follows the receive buffers inside the registered
                    // region; the next send writes it only once this one completed or its
                    // receiver died (see `turns`).
                    unsafe {
                        self.inner.ep.send(
                            buf,
                            HEADER + bytes.len(),
                            passive.mr.desc(),
                            rank,
                            context,
                        )
                    }
                })
            });
        if internal && posted.is_ok() {
            // The runtime waits for the answer instead; the next send waits for this one to
            // leave.
            return Ok(());
        }
        self.inner.end_turn(&passive.sends, turn, posted, deadline)
    }

    /// Whether passive messages of one sender arrive in the order sent (the provider granted
    /// send-after-send ordering).
    pub fn passive_ordered(&self) -> bool {
        self.inner.ep.caps().ordered_sends
    }

    /// Waits for the next passive message from any rank and returns its sender and payload.
    pub fn passive_receive(&self, timeout: Timeout) -> Result<(Rank, Vec<u8>)> {
        let passive = &self.inner.passive;
        wait_until(
            &passive.arrived,
            timeout.deadline(),
            || {
                passive
                    .inbox
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .pop_front()
            },
            self.inner.waiter(),
        )
        .map_err(|_| Error::Timeout)
    }
}
