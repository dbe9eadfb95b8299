//! Queues: bounded, ordered streams of one-sided operations with completion tracking.
//!
//! A queue is bookkeeping, not a provider object. The user's numbered queues
//! ([`Context::wait`](crate::Context::wait)) and a library's [`Batch`](crate::Batch)es are
//! both a [`Queue`]: a [`Tracker`] of the operations posted on it (each operation's record
//! names the queue as its completion handler), a depth beyond which posting is
//! [`Error::QueueFull`], and an ordered list of *parked* operations.
//!
//! # Posting never blocks
//! An operation is posted to the provider at once when it can be. When it cannot yet, it is
//! parked, in order, and the progress engine posts it later:
//! * its target segment's descriptor is not known yet: the lookup is started, and the
//!   operation (with every later one of the queue, to keep their order) waits for the answer.
//!   Argument errors that need the answer (`UnknownSegment`, `OutOfBounds`) are then reported
//!   by the queue's next wait, and the notifications parked behind a write so refused towards
//!   the same rank (a `notify`, a list's, a split `write_notify`'s) are dropped, not sent;
//! * the provider is out of resources (`-FI_EAGAIN`);
//! * on a provider without write-after-write ordering, a notification waits until every
//!   operation before it on the queue has completed, delivered (see `rma`).
//!
//! Parked operations count towards the depth, so memory stays bounded, and a wait covers
//! them like any other.

use std::collections::VecDeque;
use std::sync::{Arc, Weak};

use gaspi_fabric::{Posted, Refused, Region, RemoteTarget};

use crate::config::MAX_QUEUES;
use crate::context::Inner;
use crate::engine::lookup::{DescKey, Descriptor, Known, Lookup};
use crate::engine::tracker::Tracker;
use crate::engine::{Handler, Op, Outcome, Retry};
use crate::error::{Error, NotificationId, QueueId, Rank, Result, SegmentId};
use crate::segment::LocalSegment;
use crate::sync::{lock, AtomicBool, AtomicU32, Mutex, Ordering};
use crate::wire::WireNotification;

/// Which queue, for errors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Label {
    /// A user queue.
    User(QueueId),
    /// A library's batch.
    Batch,
}

/// Where an operation goes on its target rank.
pub(crate) enum Dest {
    /// Resolved and checked.
    Ready(RemoteTarget),
    /// `offset..offset + size` of the registration behind `key`, once `lookup` has answered
    /// (and, for a target of a library segment, found the same `incarnation`).
    Pending {
        key: DescKey,
        offset: u64,
        size: u64,
        incarnation: Option<u32>,
        lookup: Arc<Lookup>,
    },
}

/// What an operation does.
pub(crate) enum Kind {
    /// Writes `size` bytes from `src` at `src_offset`; with `data`, the target's notification
    /// rides on the write.
    Write {
        src: Arc<LocalSegment>,
        src_offset: u64,
        dst: Dest,
        size: u64,
        data: Option<WireNotification>,
    },
    /// Reads `size` bytes into `dst` at `dst_offset`; `then` sets a local notification of
    /// `dst` once they arrived.
    Read {
        dst: Arc<LocalSegment>,
        dst_offset: u64,
        src: Dest,
        size: u64,
        then: Option<(NotificationId, u32)>,
    },
    /// Sets a notification at the target (its table's segment checked through `check`); on an
    /// unordered provider only once everything before it on the queue completed.
    Notify { check: Dest, wire: WireNotification },
}

/// One operation accepted by a queue.
pub(crate) struct Request {
    pub(crate) rank: Rank,
    pub(crate) kind: Kind,
}

/// A request parked in its queue, holding its local segment's memory as a posted operation
/// does: a segment with operations parked on it is in use, and its deletion is refused
/// ([`Error::SegmentBusy`]) until they are posted and complete.
struct Parked {
    request: Request,
    _hold: Option<Arc<Region>>,
    /// A notification behind a write of this queue towards the same rank that was refused
    /// when its target's descriptor arrived: it is dropped instead of sent, as it would tell
    /// the target that data had landed which never will.
    doomed: bool,
}

impl Parked {
    fn new(request: Request) -> Parked {
        let segment = match &request.kind {
            Kind::Write { src, .. } => Some(src),
            Kind::Read { dst, .. } => Some(dst),
            Kind::Notify { .. } => None,
        };
        let hold = segment.and_then(|s| s.region.clone());
        Parked {
            request,
            _hold: hold,
            doomed: false,
        }
    }
}

/// What became of an attempt to post.
enum Attempt {
    Posted,
    /// Not now: the provider is busy, or an answer or earlier operations are awaited.
    Later,
}

/// A queue (user queue or batch).
pub(crate) struct Queue {
    pub(crate) label: Label,
    pub(crate) tracker: Tracker,
    depth: u32,
    parked: Mutex<VecDeque<Parked>>,
    parked_len: AtomicU32,
    scheduled: AtomicBool,
    /// Same-host ranks this queue has carried fabric operations towards: later operations
    /// towards them take the fabric too, so they stay ordered behind those (see `direct`).
    fabric_peers: Mutex<Vec<Rank>>,
    /// Whether `fabric_peers` is not empty: the check on every direct operation is one load.
    any_fabric_peer: AtomicBool,
    /// For the records and the retry list, which need an `Arc` of this queue.
    me: Weak<Queue>,
}

impl Queue {
    /// A queue of `depth` operations; `dense` counts per rank of a job of `ranks` in an array.
    pub(crate) fn new(label: Label, depth: u32, dense: Option<u32>) -> Arc<Queue> {
        Arc::new_cyclic(|me| Queue {
            label,
            tracker: dense.map_or_else(Tracker::sparse, Tracker::dense),
            depth,
            parked: Mutex::new(VecDeque::new()),
            parked_len: AtomicU32::new(0),
            scheduled: AtomicBool::new(false),
            fabric_peers: Mutex::new(Vec::new()),
            any_fabric_peer: AtomicBool::new(false),
            me: me.clone(),
        })
    }

    /// Records that an operation towards the same-host rank `rank` took the fabric.
    pub(crate) fn took_fabric(&self, rank: Rank) {
        let mut peers = lock(&self.fabric_peers);
        if !peers.contains(&rank) {
            peers.push(rank);
            self.any_fabric_peer.store(true, Ordering::Release);
        }
    }

    /// Whether operations towards `rank` must take the fabric on this queue.
    // Inline, with the lock out of line: every direct operation asks, and while no operation
    // of the queue took the fabric the answer is one load; called, it cost a direct 8 B
    // write_notify 23 instructions (callgrind, ci profile).
    #[inline]
    pub(crate) fn fabric_to(&self, rank: Rank) -> bool {
        self.any_fabric_peer.load(Ordering::Acquire) && self.fabric_peer(rank)
    }

    /// Whether an operation of this queue towards `rank` took the fabric.
    #[cold]
    #[inline(never)]
    fn fabric_peer(&self, rank: Rank) -> bool {
        lock(&self.fabric_peers).contains(&rank)
    }

    /// Operations posted or parked and not yet completed.
    pub(crate) fn outstanding(&self) -> u32 {
        self.tracker.outstanding()
    }

    /// Operations parked, waiting to be posted.
    pub(crate) fn parked(&self) -> u32 {
        self.parked_len.load(Ordering::Acquire)
    }

    /// Operations a queue holds before posting returns [`Error::QueueFull`].
    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    fn full(&self) -> Error {
        match self.label {
            Label::User(queue) => Error::QueueFull {
                queue,
                depth: self.depth,
            },
            Label::Batch => Error::BatchFull { depth: self.depth },
        }
    }

    /// Takes room for `n` operations towards `rank`.
    pub(crate) fn reserve(&self, rank: Rank, n: u32) -> Result<()> {
        if self.tracker.reserve(rank, n, self.depth) {
            Ok(())
        } else {
            Err(self.full())
        }
    }

    /// Posts `requests` (all towards one rank, room reserved for each) in order: at once
    /// while nothing is parked and each can go, the rest parked. An immediate refusal by the
    /// provider is returned (with the reservations of that request and the following ones
    /// given back); everything else is reported by the next wait.
    pub(crate) fn submit(
        &self,
        inner: &Inner,
        requests: impl IntoIterator<Item = Request, IntoIter: ExactSizeIterator>,
    ) -> Result<()> {
        let mut requests = requests.into_iter();
        while self.parked_len.load(Ordering::Acquire) == 0 {
            let Some(mut request) = requests.next() else {
                return Ok(());
            };
            match self.attempt(inner, &mut request, false) {
                Ok(Attempt::Posted) => {}
                Ok(Attempt::Later) => {
                    self.park(inner, std::iter::once(request).chain(requests));
                    return Ok(());
                }
                Err(e) => {
                    let left = 1 + requests.len() as u32;
                    self.tracker.take(request.rank, left);
                    return Err(e);
                }
            }
        }
        self.park(inner, requests);
        Ok(())
    }

    fn park(&self, inner: &Inner, requests: impl Iterator<Item = Request>) {
        let mut parked = lock(&self.parked);
        let before = parked.len();
        parked.extend(requests.map(Parked::new));
        let added = (parked.len() - before) as u32;
        if added == 0 {
            return;
        }
        self.parked_len.fetch_add(added, Ordering::AcqRel);
        drop(parked);
        if let Some(me) = self.me.upgrade() {
            inner.engine.schedule(me as Arc<dyn Retry>);
        }
    }

    /// Tries to post `request` now (`parked`: it is the first parked one, else nothing is
    /// parked). `Err` only for a refusal that ends the operation (its reservation is the
    /// caller's to give back).
    fn attempt(&self, inner: &Inner, request: &mut Request, parked: bool) -> Result<Attempt> {
        let rank = request.rank;
        if let Some(dead) = inner.health.known(rank) {
            return Err(dead);
        }
        let ordered = inner.ep.caps().ordered_writes;
        match &mut request.kind {
            Kind::Write {
                src,
                src_offset,
                dst,
                size,
                data,
            } => {
                let Some(target) = resolve(inner, rank, dst)? else {
                    return Ok(Attempt::Later);
                };
                let source = src.slice(inner.rank, *src_offset, *size)?;
                let op = Op::to(rank, self.handler()?);
                let data = data.map(WireNotification::encode);
                // Without provider ordering every write reports completion only once
                // delivered, so a drained queue proves its writes landed (see `Notify`).
                let posted =
                    inner.submit(op, |op| inner.ep.write(source, target, data, !ordered, op));
                refused(posted)
            }
            Kind::Read {
                dst,
                dst_offset,
                src,
                size,
                then,
            } => {
                let Some(target) = resolve(inner, rank, src)? else {
                    return Ok(Attempt::Later);
                };
                let landing = dst.slice(inner.rank, *dst_offset, *size)?;
                let handler: Arc<dyn Handler> = match then {
                    Some((id, value)) => Arc::new(ReadNotify {
                        queue: self.strong()?,
                        segment: Arc::clone(dst),
                        id: *id,
                        value: *value,
                    }),
                    None => self.handler()?,
                };
                let posted = inner.submit(Op::to(rank, handler), |op| {
                    inner.ep.read(landing, target, op)
                });
                refused(posted)
            }
            Kind::Notify { check, wire } => {
                if resolve(inner, rank, check)?.is_none() {
                    return Ok(Attempt::Later);
                }
                // Unordered provider: only once everything before it has been delivered. What
                // the queue counts besides the parked operations (this one among them when
                // `parked`, and all after it) and this one is in flight.
                let counted = self.parked_len.load(Ordering::Acquire) + u32::from(!parked);
                if !ordered && self.outstanding() > counted {
                    return Ok(Attempt::Later);
                }
                match inner.try_notify(rank, *wire)? {
                    Posted::Yes => {
                        // Injected: complete at once.
                        self.tracker.take(rank, 1);
                        Ok(Attempt::Posted)
                    }
                    Posted::Again => Ok(Attempt::Later),
                }
            }
        }
    }

    fn strong(&self) -> Result<Arc<Queue>> {
        // A queue is only ever used through the Arc made in `new`, which is alive while any of
        // its methods runs; failing to upgrade would be a bug, reported rather than panicked on.
        self.me
            .upgrade()
            .ok_or_else(|| Error::Protocol("a queue was used after it was dropped".into()))
    }

    fn handler(&self) -> Result<Arc<dyn Handler>> {
        Ok(self.strong()?)
    }

    /// Gives up the operations towards `rank` that died, waiting or posted: the posted ones
    /// may never complete (shm).
    pub(crate) fn drop_rank(&self, rank: Rank) {
        self.tracker.drop_rank(rank);
    }

    /// Records `error` for the next wait.
    pub(crate) fn fail(&self, error: Error) {
        self.tracker.fail(error);
    }
}

/// The target of `dest`, once known and checked; `None` while its lookup is in flight.
fn resolve(inner: &Inner, rank: Rank, dest: &mut Dest) -> Result<Option<RemoteTarget>> {
    let (key, offset, size, incarnation, known) = match dest {
        Dest::Ready(target) => return Ok(Some(*target)),
        Dest::Pending {
            key,
            offset,
            size,
            incarnation,
            lookup,
        } => match lookup.outcome() {
            None => return Ok(None),
            Some(known) => (*key, *offset, *size, *incarnation, known?),
        },
    };
    let target = check_target(inner, rank, key, offset, size, incarnation, known)?;
    *dest = Dest::Ready(target);
    Ok(Some(target))
}

/// Checks `offset..offset + size` against what is known of `key` on `rank`; with an
/// `incarnation` (a library segment's target), the segment must still be that one.
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_target(
    inner: &Inner,
    rank: Rank,
    key: DescKey,
    offset: u64,
    size: u64,
    incarnation: Option<u32>,
    known: Known,
) -> Result<RemoteTarget> {
    let segment = match key {
        DescKey::Segment(id) | DescKey::Library(id) | DescKey::Area(id) => id,
    };
    match known {
        Known::Present(d) if incarnation.is_none_or(|i| i == d.incarnation) => {
            place(inner, rank, segment, &d, offset, size)
        }
        Known::Present(_) | Known::Absent => Err(Error::UnknownSegment { rank, segment }),
    }
}

/// Where `offset..offset + size` of segment `segment` (described by `d`) on `rank` is: within
/// the segment, and no larger than the provider's largest message.
pub(crate) fn place(
    inner: &Inner,
    rank: Rank,
    segment: SegmentId,
    d: &Descriptor,
    offset: u64,
    size: u64,
) -> Result<RemoteTarget> {
    let fits = offset.checked_add(size).is_some_and(|end| end <= d.size);
    let max = inner.ep.caps().max_msg_size;
    if !fits || size > max {
        return Err(Error::OutOfBounds {
            rank,
            segment,
            offset,
            size,
            segment_size: if fits { max } else { d.size },
        });
    }
    Ok(RemoteTarget {
        rank,
        addr: d.base + offset,
        key: d.key,
    })
}

/// Maps a post that was not accepted.
fn refused(posted: std::result::Result<(), Refused<Op>>) -> Result<Attempt> {
    match posted {
        Ok(()) => Ok(Attempt::Posted),
        Err(Refused::Busy(_)) => Ok(Attempt::Later),
        Err(Refused::Failed(e, _)) => Err(e.into()),
    }
}

impl Retry for Queue {
    fn scheduled(&self) -> &AtomicBool {
        &self.scheduled
    }

    fn retry(&self, inner: &Inner) -> bool {
        let mut parked = lock(&self.parked);
        while let Some(head) = parked.front_mut() {
            let rank = head.request.rank;
            let mut refused_write = false;
            if head.doomed {
                // The refused write's error is already recorded for the next wait.
                self.tracker.finish(rank, None::<fn() -> Error>);
                inner.events.notify_all();
            } else {
                match self.attempt(inner, &mut head.request, true) {
                    Ok(Attempt::Later) => break,
                    Ok(Attempt::Posted) => {}
                    Err(e) => {
                        refused_write = matches!(head.request.kind, Kind::Write { .. });
                        self.tracker.finish(rank, Some(|| e));
                        inner.events.notify_all();
                    }
                }
            }
            parked.pop_front();
            // Decremented only once posted, so a later operation that sees nothing parked
            // can never overtake this one.
            self.parked_len.fetch_sub(1, Ordering::AcqRel);
            if refused_write {
                // Everything after a parked operation is parked too, so every notification
                // that follows the refused write towards its rank is still here (a split
                // write_notify's, a write_list_notify's, a notify's).
                for later in parked.iter_mut() {
                    if later.request.rank == rank
                        && matches!(later.request.kind, Kind::Notify { .. })
                    {
                        later.doomed = true;
                    }
                }
            }
        }
        !parked.is_empty()
    }
}

impl Handler for Queue {
    fn complete(&self, inner: &Inner, rank: Option<Rank>, outcome: Outcome<'_>) {
        let rank = rank.unwrap_or(inner.rank);
        let failure = outcome
            .err()
            .map(|failure| || inner.failure_of(rank, &failure.message));
        self.tracker.finish(rank, failure);
    }
}

/// A read whose arrival also sets a local notification (`read_notify`).
struct ReadNotify {
    queue: Arc<Queue>,
    segment: Arc<LocalSegment>,
    id: NotificationId,
    value: u32,
}

impl Handler for ReadNotify {
    fn complete(&self, inner: &Inner, rank: Option<Rank>, outcome: Outcome<'_>) {
        if outcome.is_ok() {
            // Validated when the read was posted.
            let _ = self.segment.notifications.set(self.id, self.value);
        }
        self.queue.complete(inner, rank, outcome);
    }
}

impl Inner {
    /// The error an operation towards `rank` gets from a failure the provider reported:
    /// [`Error::RankFailed`] when the rank is known dead (a broken connection marks it before
    /// this is asked), else [`Error::OperationFailed`].
    pub(crate) fn failure_of(&self, rank: Rank, message: &str) -> Error {
        self.health
            .known(rank)
            .unwrap_or_else(|| Error::OperationFailed {
                rank,
                reason: message.to_owned(),
            })
    }
}

/// The user's numbered queues; ids are indices, created and deleted at run time.
pub(crate) struct Queues {
    queues: Vec<(AtomicBool, Arc<Queue>)>,
    depth: u32,
    // Serialises create/delete so two creators cannot pick the same id.
    admin: Mutex<()>,
}

impl Queues {
    /// `initial` queues of `depth` operations each, for a job of `ranks` ranks.
    pub(crate) fn new(initial: u8, depth: u32, ranks: u32) -> Self {
        let queues = (0..MAX_QUEUES)
            .map(|i| {
                (
                    AtomicBool::new(i < initial),
                    Queue::new(Label::User(i), depth, Some(ranks)),
                )
            })
            .collect();
        Queues {
            queues,
            depth,
            admin: Mutex::new(()),
        }
    }

    pub(crate) fn depth(&self) -> u32 {
        self.depth
    }

    fn active_count(&self) -> u32 {
        self.queues
            .iter()
            .filter(|(active, _)| active.load(Ordering::Acquire))
            .count() as u32
    }

    pub(crate) fn get(&self, id: QueueId) -> Result<&Arc<Queue>> {
        match self.queues.get(usize::from(id)) {
            Some((active, q)) if active.load(Ordering::Acquire) => Ok(q),
            _ => Err(Error::InvalidQueue {
                queue: id,
                count: self.active_count(),
            }),
        }
    }

    pub(crate) fn create(&self) -> Result<QueueId> {
        let _guard = lock(&self.admin);
        let (id, (active, q)) = self
            .queues
            .iter()
            .enumerate()
            .find(|(_, (active, _))| !active.load(Ordering::Acquire))
            .ok_or_else(|| Error::Limit(format!("all {MAX_QUEUES} queues exist")))?;
        q.tracker.take_failure();
        active.store(true, Ordering::Release);
        Ok(id as QueueId)
    }

    pub(crate) fn delete(&self, id: QueueId) -> Result<()> {
        let _guard = lock(&self.admin);
        let q = self.get(id)?;
        let outstanding = q.outstanding();
        if outstanding > 0 {
            return Err(Error::QueueBusy {
                queue: id,
                outstanding,
            });
        }
        self.queues[usize::from(id)]
            .0
            .store(false, Ordering::Release);
        Ok(())
    }

    pub(crate) fn count(&self) -> u32 {
        self.active_count()
    }

    /// Records on every queue that the endpoint itself failed, for `reason`.
    pub(crate) fn fail_all(&self, reason: &str) {
        for (_, q) in &self.queues {
            q.fail(Error::OperationFailed {
                rank: u32::MAX,
                reason: reason.to_owned(),
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_queue_is_an_error_and_taking_frees_it() {
        let q = Queue::new(Label::User(0), 3, Some(4));
        q.reserve(1, 2).expect("room for two");
        assert!(matches!(
            q.reserve(1, 2),
            Err(Error::QueueFull { queue: 0, depth: 3 })
        ));
        q.reserve(1, 1).expect("room for the third");
        q.tracker.take(1, 3);
        assert_eq!(q.outstanding(), 0);
        let batch = Queue::new(Label::Batch, 1, None);
        batch.reserve(0, 1).expect("room for one");
        assert!(matches!(
            batch.reserve(0, 1),
            Err(Error::BatchFull { depth: 1 })
        ));
    }

    #[test]
    fn create_and_delete_manage_ids() {
        let qs = Queues::new(1, 4, 2);
        assert!(matches!(
            qs.get(1),
            Err(Error::InvalidQueue { queue: 1, count: 1 })
        ));
        assert_eq!(qs.create().expect("create"), 1);
        qs.get(1).expect("queue 1").reserve(0, 1).expect("reserve");
        assert!(matches!(
            qs.delete(1),
            Err(Error::QueueBusy { queue: 1, .. })
        ));
        qs.get(1).expect("queue 1").tracker.take(0, 1);
        qs.delete(1).expect("delete idle queue");
        assert!(qs.get(1).is_err());
    }

    #[test]
    fn a_missing_queue_names_how_many_exist_not_an_id_bound() {
        let qs = Queues::new(4, 4, 2);
        qs.delete(1).expect("delete idle queue 1");
        let Err(missing) = qs.get(1) else {
            panic!("queue 1 was deleted");
        };
        assert!(matches!(
            missing,
            Error::InvalidQueue { queue: 1, count: 3 }
        ));
        assert_eq!(
            missing.to_string(),
            "queue 1 does not exist (3 queues exist, not always ids 0..3)"
        );
        qs.get(3).expect("queue 3 is still there, above the count");
        assert_eq!(qs.create().expect("create"), 1, "the lowest free id again");
    }
}
