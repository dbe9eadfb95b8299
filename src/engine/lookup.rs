//! Where peers' segments are: descriptors read lazily and asynchronously, then cached.
//!
//! Every rank publishes a descriptor (address, key, size) for each of its segments, library
//! segments and allreduce areas in its system region, whose address every rank learnt at
//! bootstrap. The first access towards `(rank, key)` reads that descriptor with one RDMA read
//! into a landing slot of this rank's system region; the answer, present or absent, is
//! cached. So discovery costs are proportional to the peers a rank talks to, never
//! O(ranks × segments) up front.
//!
//! A lookup never blocks its starter: [`Descriptors::start`] posts it (or, when the provider
//! is busy or no landing slot is free, schedules it for the progress engine) and returns a
//! [`Lookup`] to look at later. Operations without a timeout park behind it in their queue;
//! calls with a timeout wait for it under their own deadline ([`Inner::resolve`]). A lookup
//! that a deadline abandoned stays in flight, and the next caller for the same descriptor
//! joins it, so a peer that was stopped is found again once it resumes.
//!
//! An absent descriptor is cached too, so a repeated access to a segment a peer does not have
//! fails at once. The news of a deletion that a peer sends makes this rank forget the
//! descriptor (see [`Descriptors::forget_deleted`]), and a segment id this rank creates
//! forgets every cached answer for that id: creation is collective, so the peers create it
//! too. A library segment has a local id of its own on each member, which the creation
//! hands every member: each forgets what it cached for those.

use std::cell::Cell;
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, RwLock};

use rustc_hash::FxHashMap;

use gaspi_fabric::Refused;
use gaspi_notifications::Deadline;

use super::{Handler, Op, Outcome, Retry};
use crate::context::Inner;
use crate::direct::{Published, Slot};
use crate::error::{Error, Rank, Result, SegmentId};
use crate::group::GroupId;
use crate::segment::LocalSegment;
use crate::sync::{lock, AtomicBool, AtomicU32, Mutex, Ordering};
use crate::system::{layout, DESCRIPTOR_LEN};

/// Which descriptor of a rank's system region.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum DescKey {
    /// A user segment.
    Segment(SegmentId),
    /// A library segment, by its local id on that rank.
    Library(u8),
    /// A group's allreduce area.
    Area(GroupId),
}

impl DescKey {
    /// Where the descriptor is in the system region.
    pub(crate) fn offset(self) -> u64 {
        match self {
            DescKey::Segment(id) => layout::SEGMENTS + DESCRIPTOR_LEN * u64::from(id),
            DescKey::Library(id) => layout::LIBRARY + DESCRIPTOR_LEN * u64::from(id),
            DescKey::Area(group) => layout::AREAS + DESCRIPTOR_LEN * u64::from(group),
        }
    }
}

/// What a rank needs to access a remote registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Descriptor {
    /// Added to the offset to form the RMA address (0 when the provider uses offsets).
    pub(crate) base: u64,
    pub(crate) key: u64,
    pub(crate) size: u64,
    /// Notifications in the segment's table (0 for an allreduce area, which has none).
    pub(crate) notifications: u32,
    /// Which of the rank's segments it is: another for every segment the rank makes (0 for
    /// the runtime's own registrations). A library segment's local id passes to the rank's
    /// next library segment once it is deleted, of any library: the incarnation tells them
    /// apart.
    pub(crate) incarnation: u32,
}

impl Descriptor {
    /// Encodes as the descriptor published in the system region: the last word is non-zero
    /// for a present descriptor and carries the table size and the incarnation.
    pub(crate) fn to_words(self) -> [u64; 4] {
        [
            self.base,
            self.key,
            self.size,
            (u64::from(self.incarnation) << 32) | (u64::from(self.notifications) << 1) | 1,
        ]
    }

    /// Decodes a published descriptor; `None` when absent.
    pub(crate) fn from_words(words: [u64; 4]) -> Option<Self> {
        (words[3] != 0).then_some(Descriptor {
            base: words[0],
            key: words[1],
            size: words[2],
            notifications: (words[3] as u32) >> 1,
            incarnation: (words[3] >> 32) as u32,
        })
    }
}

/// A cached answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Known {
    Present(Descriptor),
    Absent,
}

/// How a lookup ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum LookupFailure {
    /// The read failed at the provider.
    Failed(String),
    /// The rank is dead: nothing is posted to it.
    Dead(String),
}

/// One descriptor read in flight (or waiting to be posted).
pub(crate) struct Lookup {
    pub(crate) rank: Rank,
    pub(crate) key: DescKey,
    state: Mutex<State>,
    scheduled: AtomicBool,
}

#[derive(Debug, Clone)]
enum State {
    /// Not posted yet: no landing slot was free, or the provider was busy.
    Waiting,
    /// Posted into landing slot `slot`.
    Posted(u16),
    Done(std::result::Result<Known, LookupFailure>),
}

impl Lookup {
    /// The answer, once there is one.
    pub(crate) fn result(&self) -> Option<std::result::Result<Known, LookupFailure>> {
        match &*lock(&self.state) {
            State::Done(result) => Some(result.clone()),
            State::Waiting | State::Posted(_) => None,
        }
    }

    /// The answer as the error (or descriptor) an operation on `segment` of the rank gets.
    pub(crate) fn outcome(&self) -> Option<Result<Known>> {
        self.result().map(|r| {
            r.map_err(|failure| match failure {
                LookupFailure::Failed(reason) => Error::OperationFailed {
                    rank: self.rank,
                    reason: format!("reading a segment descriptor failed: {reason}"),
                },
                LookupFailure::Dead(reason) => Error::RankFailed {
                    rank: self.rank,
                    reason,
                },
            })
        })
    }

    /// Posts the read if it is waiting; returns whether it still waits.
    fn post(self: &Arc<Self>, inner: &Inner) -> bool {
        let mut state = lock(&self.state);
        if !matches!(*state, State::Waiting) {
            return false;
        }
        if let Some(Error::RankFailed { reason, .. }) = inner.health.known(self.rank) {
            *state = State::Done(Err(LookupFailure::Dead(reason)));
            drop(state);
            inner.descriptors.finished(inner, self.rank, self.key);
            return false;
        }
        let Some(slot) = inner.system.landing.take() else {
            return true;
        };
        let target = inner.system.target(self.rank, self.key.offset());
        let op = Op::to(self.rank, Arc::clone(self) as Arc<dyn Handler>);
        let posted = match inner.system.landing(slot, DESCRIPTOR_LEN) {
            Ok(landing) => inner.submit(op, |op| inner.ep.read(landing, target, op)),
            Err(_) => Err(Refused::Busy(op)),
        };
        match posted {
            Ok(()) => {
                *state = State::Posted(slot);
                false
            }
            Err(Refused::Busy(_)) => {
                inner.system.landing.give(slot);
                true
            }
            Err(Refused::Failed(e, _)) => {
                inner.system.landing.give(slot);
                *state = State::Done(Err(LookupFailure::Failed(e.to_string())));
                drop(state);
                inner.descriptors.finished(inner, self.rank, self.key);
                false
            }
        }
    }
}

impl Handler for Lookup {
    fn complete(&self, inner: &Inner, _rank: Option<Rank>, outcome: Outcome<'_>) {
        let mut state = lock(&self.state);
        let State::Posted(slot) = *state else {
            return;
        };
        // A broken connection marked the rank dead before this handler ran: the read
        // failed because the rank is gone, as every operation towards it now does.
        let read = outcome
            .map_err(|f| match inner.health.known(self.rank) {
                Some(Error::RankFailed { reason, .. }) => LookupFailure::Dead(reason),
                _ => LookupFailure::Failed(f.message.clone()),
            })
            .and_then(|()| {
                inner
                    .system
                    .read_words(layout::LANDING + DESCRIPTOR_LEN * u64::from(slot))
                    .map_err(|e| LookupFailure::Failed(e.to_string()))
            });
        inner.system.landing.give(slot);
        let answer = read.map(|words| match Descriptor::from_words(words) {
            Some(d) => Known::Present(d),
            None => Known::Absent,
        });
        // A group's area is cached with the group (a group id is reused by later groups).
        if let (Ok(known), false) = (&answer, matches!(self.key, DescKey::Area(_))) {
            let known = *known;
            inner.descriptors.cache(self.rank, self.key, known);
        }
        *state = State::Done(answer);
        drop(state);
        inner.descriptors.finished(inner, self.rank, self.key);
    }
}

impl Retry for Lookup {
    fn scheduled(&self) -> &AtomicBool {
        &self.scheduled
    }

    fn retry(&self, inner: &Inner) -> bool {
        // The retry list holds the Arc; find it again to post with it.
        match inner.descriptors.in_flight(self.rank, self.key) {
            Some(me) => me.post(inner),
            None => false,
        }
    }
}

/// The descriptor cache and the lookups in flight.
pub(crate) struct Descriptors {
    /// Looked up on every operation that is not injected through a prepared target: Fx
    /// hashing costs a few instructions where the standard SipHash cost ~150 per lookup.
    cache: RwLock<FxHashMap<(Rank, DescKey), Known>>,
    /// Tells this cache apart from another one in the same process (a job's next
    /// [`Context`](crate::Context)) in a thread's [`LAST`] answer.
    id: u64,
    /// Moves with every change of `cache`, under its write lock: a thread's [`LAST`] answer
    /// stands while it has not moved.
    generation: AtomicU64,
    lookups: Mutex<HashMap<(Rank, DescKey), Arc<Lookup>>>,
    /// Per rank, how many deletions of its segments this rank has heard of (its own
    /// included): a prepared target, which keeps its descriptor instead of asking the cache,
    /// looks again only once its rank's count moved (see [`Target`](crate::Target)).
    deletions: Box<[AtomicU32]>,
}

/// The last answer a thread read from a [`Descriptors`] cache, with the cache's id and
/// generation then.
#[derive(Clone, Copy)]
struct Last {
    cache: u64,
    generation: u64,
    rank: Rank,
    key: DescKey,
    known: Known,
}

thread_local! {
    /// A thread that keeps writing to one target (a ping-pong, a halo exchange, a stream)
    /// finds its descriptor here without the cache's lock: its read lock and unlock are two
    /// atomic read-modify-writes on the critical path of every such operation through the
    /// fabric (an 8 B write_notify over shm: 74 instructions for the cached answer, 20 here).
    static LAST: Cell<Option<Last>> = const { Cell::new(None) };
}

/// Ids of the caches of this process.
static CACHES: AtomicU64 = AtomicU64::new(0);

impl Descriptors {
    /// An empty cache for a job of `ranks` ranks.
    pub(crate) fn new(ranks: u32) -> Descriptors {
        Descriptors {
            cache: RwLock::default(),
            id: CACHES.fetch_add(1, Ordering::Relaxed),
            generation: AtomicU64::new(0),
            lookups: Mutex::default(),
            deletions: (0..ranks).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// How many deletions of `rank`'s segments this rank has heard of.
    pub(crate) fn deletions(&self, rank: Rank) -> u32 {
        // Acquire pairs with the count's increment, which follows the cache's forgetting:
        // a target that saw the count resolved after the cache forgot.
        self.deletions
            .get(rank as usize)
            .map_or(0, |d| d.load(Ordering::Acquire))
    }

    /// The cached answer for `key` of `rank`.
    pub(crate) fn cached(&self, rank: Rank, key: DescKey) -> Option<Known> {
        // Read before the cache: an answer read after a change may be kept under the
        // generation before it, which only makes the next lookup miss; an answer kept under
        // the generation after a change was read after it, since the change moves the
        // generation under the write lock that this thread's read lock then waits for.
        let generation = self.generation.load(Ordering::Acquire);
        if let Some(last) = LAST.get() {
            if last.cache == self.id
                && last.generation == generation
                && last.rank == rank
                && last.key == key
            {
                return Some(last.known);
            }
        }
        let known = self
            .cache
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(rank, key))
            .copied()?;
        LAST.set(Some(Last {
            cache: self.id,
            generation,
            rank,
            key,
            known,
        }));
        Some(known)
    }

    /// Changes the cache with `change`, and moves its generation (see [`LAST`]).
    fn change(&self, change: impl FnOnce(&mut FxHashMap<(Rank, DescKey), Known>)) {
        let mut cache = self.cache.write().unwrap_or_else(|e| e.into_inner());
        change(&mut cache);
        self.generation.fetch_add(1, Ordering::Release);
    }

    fn cache(&self, rank: Rank, key: DescKey, known: Known) {
        self.change(|cache| {
            cache.insert((rank, key), known);
        });
    }

    /// Forgets every answer about `key`, on every rank (this rank creates it anew).
    pub(crate) fn forget_everywhere(&self, key: DescKey) {
        self.change(|cache| cache.retain(|&(_, k), _| k != key));
    }

    /// `rank` says it deleted `key`: the next access looks again. Not cached as absent: the
    /// news travels apart from everything else, so it may arrive after the rank created
    /// `key` anew (a library segment's local id is reused) and this rank forgot it for that
    /// creation; the rank's own directory says what holds now.
    pub(crate) fn forget_deleted(&self, rank: Rank, key: DescKey) {
        self.forget(rank, key);
        if let Some(count) = self.deletions.get(rank as usize) {
            count.fetch_add(1, Ordering::Release);
        }
    }

    /// Forgets the answer about `key` of `rank`.
    pub(crate) fn forget(&self, rank: Rank, key: DescKey) {
        self.change(|cache| {
            cache.remove(&(rank, key));
        });
    }

    fn in_flight(&self, rank: Rank, key: DescKey) -> Option<Arc<Lookup>> {
        lock(&self.lookups).get(&(rank, key)).cloned()
    }

    /// The lookup of `key` of `rank` ended: later accesses use the cache (or look again
    /// after a failure), and its waiters wake.
    fn finished(&self, inner: &Inner, rank: Rank, key: DescKey) {
        lock(&self.lookups).remove(&(rank, key));
        inner.events.notify_all();
    }

    /// The lookup of `key` of `rank` in flight, or a new one, posted (or scheduled). `rank`
    /// is another rank (this rank reads its own region directly).
    pub(crate) fn start(&self, inner: &Inner, rank: Rank, key: DescKey) -> Arc<Lookup> {
        let lookup = {
            let mut lookups = lock(&self.lookups);
            if let Some(l) = lookups.get(&(rank, key)) {
                return Arc::clone(l);
            }
            let l = Arc::new(Lookup {
                rank,
                key,
                state: Mutex::new(State::Waiting),
                scheduled: AtomicBool::new(false),
            });
            lookups.insert((rank, key), Arc::clone(&l));
            l
        };
        if lookup.post(inner) {
            inner.engine.schedule(Arc::clone(&lookup) as Arc<dyn Retry>);
        }
        lookup
    }
}

impl Inner {
    /// The descriptor of `key` on `rank`: cached, read from this rank's own region, or looked
    /// up under `deadline`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when the answer did not come in time (the lookup goes on);
    /// [`Error::RankFailed`] when `rank` is dead; [`Error::OperationFailed`] when the read
    /// failed.
    pub(crate) fn resolve(&self, rank: Rank, key: DescKey, deadline: Deadline) -> Result<Known> {
        // A dead rank's directory stays mapped and its descriptors cached: they would still
        // answer, as if it were alive.
        if let Some(dead) = self.health.known(rank) {
            return Err(dead);
        }
        if let Some(known) = self.directly_known(rank, key) {
            return Ok(known);
        }
        if let Some(known) = self.descriptors.cached(rank, key) {
            return Ok(known);
        }
        if rank == self.rank {
            return self.own_descriptor(key);
        }
        let lookup = self.descriptors.start(self, rank, key);
        self.watched_until(|| std::iter::once(rank), deadline, || lookup.outcome())?
    }

    /// The answer for `key` of `rank` if it is known now, else the lookup that will tell.
    pub(crate) fn resolve_later(
        &self,
        rank: Rank,
        key: DescKey,
    ) -> Result<std::result::Result<Known, Arc<Lookup>>> {
        if let Some(known) = self.directly_known(rank, key) {
            return Ok(Ok(known));
        }
        if let Some(known) = self.descriptors.cached(rank, key) {
            return Ok(Ok(known));
        }
        if rank == self.rank {
            return self.own_descriptor(key).map(Ok);
        }
        Ok(Err(self.descriptors.start(self, rank, key)))
    }

    /// The answer for `key` of `rank` if it is known without asking anyone (cached, or this
    /// rank's own), for fast paths that fall back to [`resolve_later`](Self::resolve_later).
    pub(crate) fn known_now(&self, rank: Rank, key: DescKey) -> Option<Known> {
        // Without any rank reached directly (fabric mode) there is no directory to read: a
        // load instead of a call on every small write's inject path.
        if self.direct.enabled() {
            if let Some(known) = self.directly_known(rank, key) {
                return Some(known);
            }
        }
        self.descriptors.cached(rank, key).or_else(|| {
            (rank == self.rank)
                .then(|| self.own_descriptor(key).ok())
                .flatten()
        })
    }

    /// The descriptor of `key` from the directory of `rank`, when it is reached directly: no
    /// fabric read, so no lookup waits on a stopped or dead peer's provider.
    fn directly_known(&self, rank: Rank, key: DescKey) -> Option<Known> {
        Some(match self.direct.segment(rank, Slot::Desc(key))? {
            Some(segment) => Known::Present(segment.descriptor),
            None => Known::Absent,
        })
    }

    /// This rank's own descriptor of `key`, from its system region.
    pub(crate) fn own_descriptor(&self, key: DescKey) -> Result<Known> {
        let words = self.system.read_words(key.offset())?;
        Ok(match Descriptor::from_words(words) {
            Some(d) => Known::Present(d),
            None => Known::Absent,
        })
    }

    /// Publishes `entry` (or its absence) for `key` in this rank's system region and
    /// directory; same-host peers map the files it names, and reach what it does not name
    /// through the fabric.
    pub(crate) fn publish(&self, key: DescKey, entry: Option<Published<'_>>) -> Result<()> {
        let words = entry.as_ref().map_or([0; 4], |e| e.descriptor.to_words());
        self.system.write_words(key.offset(), words)?;
        self.direct.publish(Slot::Desc(key), entry);
        Ok(())
    }

    /// Publishes this rank's segment `seg` for `key`, with the files same-host peers map.
    pub(crate) fn publish_segment(&self, key: DescKey, seg: &LocalSegment) -> Result<()> {
        let entry = Published {
            descriptor: seg.descriptor(),
            data: seg.region.as_ref().and_then(|r| r.memory().shm_path()),
            table: seg.table_words.path(),
        };
        self.publish(key, Some(entry))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_words_round_trip_and_absent_is_none() {
        let d = Descriptor {
            base: 0x7f00_0000_1000,
            key: 42,
            size: 1 << 20,
            notifications: 1 << 23,
            incarnation: u32::MAX,
        };
        assert_eq!(Descriptor::from_words(d.to_words()), Some(d));
        assert_eq!(Descriptor::from_words([1, 2, 3, 0]), None);
    }

    #[test]
    fn descriptor_tables_do_not_overlap() {
        let last_segment = DescKey::Segment(255).offset() + DESCRIPTOR_LEN;
        assert!(last_segment <= DescKey::Library(0).offset());
        let last_library = DescKey::Library(255).offset() + DESCRIPTOR_LEN;
        assert!(last_library <= DescKey::Area(0).offset());
        assert!(DescKey::Area(255).offset() + DESCRIPTOR_LEN <= layout::LANDING);
    }

    #[test]
    fn a_thread_never_reads_an_answer_the_cache_changed_since() {
        let at = |base| {
            Known::Present(Descriptor {
                base,
                key: 7,
                size: 64,
                notifications: 8,
                incarnation: 1,
            })
        };
        let (first, second) = (Descriptors::new(4), Descriptors::new(4));
        let key = DescKey::Segment(3);
        first.cache(1, key, at(0x1000));
        assert_eq!(first.cached(1, key), Some(at(0x1000)));
        // Another cache of the process, with the same generation, has its own answers.
        second.cache(1, key, at(0x2000));
        first.cache(1, key, at(0x1000));
        assert_eq!(second.cached(1, key), Some(at(0x2000)));
        assert_eq!(first.cached(1, key), Some(at(0x1000)));
        first.cache(1, key, at(0x3000));
        assert_eq!(first.cached(1, key), Some(at(0x3000)));
        first.forget_deleted(1, key);
        assert_eq!(first.cached(1, key), None);
        first.cache(1, key, Known::Absent);
        assert_eq!(first.cached(1, key), Some(Known::Absent));
        first.forget_everywhere(key);
        assert_eq!(first.cached(1, key), None);
        first.cache(2, key, at(0x4000));
        assert_eq!(first.cached(2, key), Some(at(0x4000)));
        assert_eq!(first.cached(1, key), None);
        // A change made by another thread reaches this one.
        std::thread::scope(|s| {
            s.spawn(|| first.forget(2, key));
        });
        assert_eq!(first.cached(2, key), None);
    }
}
