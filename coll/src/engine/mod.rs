//! The one engine that runs [schedules](crate::schedule) on the runtime: every collective of
//! a team is a [`Run`] in the team's engine, and any thread that initiates, tests or waits
//! on any collective of the team advances all of them.
//!
//! # Lanes
//! The team's library segment is cut into `lanes` stages of `lane_bytes` each, and its
//! notification table into blocks of [`signal_bound`] ids, two per lane. Collective number
//! `seq` (counted alike on every member, since collectives are initiated in the same order
//! everywhere) uses lane `seq % lanes` and, in it, the block of the parity of
//! `seq / lanes`. A run starts once the run before it on its lane has given the lane up —
//! when its handle synced, or, if a later run needs the lane first, once it completed and its
//! output was read out of the stage. Initiation never waits: a run that cannot start yet
//! waits in the engine, and starts in whichever call makes progress next.
//!
//! Two blocks per lane keep a fast member from raising a signal of the next run on a lane
//! over one of the previous run that its receiver has not taken yet. A put that waits for its
//! receiver's credit finds the receiver in its run; but a member may finish runs in which it
//! hears from nobody (its part of a piece of a v form can be empty, a gather's leaf only
//! sends) and run ahead, so every signal without data (a credit, a sync mode's barrier) of run
//! `seq` goes to a member only once that member gave up run `seq − 2·lanes`, the last run
//! that used the same block, by the counts of "Eager runs" (a gatherv cut into pieces with
//! members that had nothing to send in some made the next collective fail with `Mismatch`).
//!
//! # Skipped credits
//! A run of a schedule that needs at most half a lane on *every* member (the caller says so:
//! members' stagings differ, and each must decide alike, so nothing of a member's own
//! schedule, not even whether it lists credits, takes part) is *compact*: it stages in the
//! half of its lane given by the parity of `seq / lanes`, as its notifications. A compact
//! run of a gathering schedule skips its credits when the run before it on its lane was
//! compact and gathering (or there was none); a schedule that is not gathering keeps them,
//! since a credit also carries its receiver's arguments, and a receiver whose senders
//! disagree among themselves (two members each taking itself for the root) could not tell
//! otherwise. That is safe:
//! a member that runs `seq` has completed `seq − lanes`, which, gathering, every member had
//! started, so every member has given up `seq − 2·lanes`, the last run that used this half
//! of the lane, and no member uses it but for `seq`. Every member decides alike, since runs
//! are initiated in the same order everywhere. A small allreduce so costs one message per
//! step instead of a credit and a message. The argument holds where every member's part of
//! `seq − lanes` waited for the others; one whose part was empty (see "Lanes") did not, so
//! the puts of a run that skips its credits also wait for the counts of "Eager runs", as an
//! eager run's do (in lock step the counts its signals carry already tell them).
//!
//! # Eager runs
//! A run of a collective initiated with `IN_NOSYNC` is *eager*: it skips every credit its
//! schedule lists (see the [schedule](crate::schedule)), so its data may reach a member before
//! that member entered the collective, as an MPI eager send does, and consecutive collectives
//! overlap instead of costing a round trip each. What makes that safe is flow control between
//! runs instead of within them: every member counts `freed`, the first run that has not given
//! its stage up (runs given up are over, and removed or past their lane), and tells it to the
//! members it heard from lately (since it last told every member), each time the count crosses
//! a multiple of `lanes` (every member each fourth time); and before it waits or returns
//! without its run done, to each sender of a run it holds whose put what it told that sender
//! last would hold back: a sender held back waits only for a member that is itself waiting, and
//! that member tells it first. A put of eager run `seq` goes to a member only once that
//! member's published count passed the runs whose stage the put may land in: `seq − lanes`, or
//! `seq − 2·lanes` when both it and that run are compact (each in a half). A signal without
//! data (a sync mode's barrier, which eager runs keep) waits for the same count: it lands in
//! the notification block of run `seq − 2·lanes`, which a member that has not given that run
//! up may still wait in, and would take for its own (a member ran ahead through eager runs
//! that only signal: ten collectives of 0 bytes in mixed sync modes on 3 lanes ended in a
//! false `Mismatch`). In lock step a member so runs up to `lanes` collectives ahead of a slow
//! receiver without waiting.
//!
//! Every signal of a run also carries its sender's count, as MPI's eager protocols piggyback
//! credits on data: in the low bits of its value (see the values below), the run's sequence
//! number minus the count, when that is below 15. A member that sends to another anyway so
//! tells it for free, and is told in return by a member that sends to it: a periodic
//! publication skips a member whose last carried count is less than a lane behind, so an
//! allreduce or an exchange among members in lock step publishes nothing, where it sent
//! `s / lanes` publications per run and member for `s` senders before (an allreduce of 8 B at
//! 2 ranks over tcp took 13.0 µs with them and 9.4 without; the runtime's own takes 8.7–9.5).
//! Where senders are not receivers — a tree's parent, a ring's left neighbour — a member
//! still publishes to them, `1 / lanes` per run and sender, and to the others
//! `(n − 1) / (4 · lanes)` (telling every member each time made a 64 KiB allreduce at 8 ranks
//! over tcp a quarter slower). A receiver learns a carried count only when it takes
//! that signal, which it may not do before its own put goes (the signal is of a later run, or
//! its schedule waits for it after that put): a wait that trusted carried counts tells its
//! senders outright after [`TRUST`] without a change. A count carried in a run that its
//! receiver has given up since (its own count, as it told this member, passed the run) was
//! surely taken, and counts as told (see the `carried` module): in lock step every count a
//! wait needs is, and no wait trusts (an allreduce of 8 B at 2 ranks whose partner came 3 ms
//! late ran out of trust in one call of four, and then waited twice, looked at the partner's
//! health and published outright: 6,000-6,100 instructions per call where it now takes
//! 5,300-5,500).
//!
//! A member that called another collective is told so by its receivers (the values below),
//! not before its puts, and only where a receiver hears from a member that disagrees with it:
//! members that disagree among themselves about a root may all write one receiver's stage,
//! which then takes the data of whichever came last. Eager runs trust the caller's arguments,
//! as `IN_NOSYNC` asks.
//!
//! # The caller's buffers
//! Steps that read the caller's source or write its destination need the buffers, which
//! only the calls that hold the collective's handle lend. A put to a member reached
//! directly, and a fold, may read the source itself, instead of a copy of it in the stage
//! (see the `elide` module). Copies into the destination are deferred to the sync (see the
//! [schedule](crate::schedule)). Reads of the source mostly happen in the initiating call;
//! a run that still has some to do when that call returns (a piece waiting for its lane, a
//! block streamed in chunks, a put out of the source held back, a fold waiting for the
//! other operand) stages the bytes of its puts and folds out of the source if it holds its
//! lane, and gets a copy of the source for whatever else it still reads, so that any call
//! of the team moves it on: otherwise two members that sync two such collectives in
//! opposite orders would each wait for the other's sync. A blocking call, which syncs at
//! once and lends the source again, does so only when its sync returns before the runs
//! completed (see `Lend` in the `team` module): its folds mostly read the source itself.
//!
//! # Values
//! Every notification of a run carries the run's value: its sequence number mixed with the
//! call's operation and arguments, in all but its [`LAG_BITS`] low bits, which carry the
//! sender's count (see "Eager runs"). A receiver that sees another value than its own was sent
//! by a member that called another collective, or with other arguments, and says so
//! ([`Error::Mismatch`] naming it). A signal whose two ends may disagree on what only they
//! know (an exchangev block's size) mixes that into its value too (its `Check`).
//!
//! # Waiting
//! As in the alltoallv: one thread at a time (the watcher) sleeps on the notifications the
//! runs wait for, the others on a condition variable; whoever changes something wakes the
//! sleepers, and the watcher through a notification of its own. A sync of the only run not
//! over, with no other thread in the engine, watches the one signal its walk waits for and
//! takes the steps after it without passing over the runs (`Engine::wait_alone`).
//!
//! # Other teams
//! GASNet lets members sync the collectives of overlapping teams in any order (here: of one
//! family; teams made apart are families of their own, see [`Team`](crate::Team)), so a member
//! waiting in one team may be what another team's members wait for. Before it sleeps, a
//! call passes over the runs of every other team of its family (a team and the teams split
//! off it, and off those: [`Engines`]) that no thread holds, as a dropped handle's runs are
//! passed (their sends go on; deliveries wait for their own syncs), and while another team
//! has a run under way that no thread watches it sleeps at most [`OTHERS_POLL`] at a time,
//! doubled up to [`OTHERS_POLL_MAX`] while nothing changes, since that team's notifications
//! wake nobody.

mod carried;
mod elide;
mod piece;
mod run;

use std::collections::VecDeque;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock, PoisonError, TryLockError, Weak};
use std::time::Duration;

use gaspi::{
    Batch, Context, Deadline, Notification, NotificationId, Rank, Segment, SegmentId, Target,
    Timeout,
};
use rustc_hash::FxHashMap;
use smallvec::SmallVec;

use carried::Carried;
pub(crate) use piece::{Blocks, Cut};
use run::{Kept, Plan, Run, Stored, Transfer, Transport};
pub(crate) use run::{Owner, Views};

use crate::buffer::{Input, Output};
use crate::error::{Error, Result};
use crate::ops::signature;
use crate::schedule::{signal_bound, Check, Reducer, Schedule, NO_CHECK};

/// Keyed plans an engine keeps at most: a program calls its collectives with a few lengths
/// and counts. One whose v forms' counts change on every call empties the cache every 64
/// calls, and pays for each call's key beside the plan it built anyway.
const PLANS: usize = 64;

/// Removed runs an engine keeps for renewal at most: enough for the runs of a few lanes.
const SPARE: usize = 16;

/// Entries of `ended` beyond twice the runs there before it is pruned.
const ENDED_SLACK: usize = 64;

/// What a call initiates: a schedule and the signature its notifications carry (mixed with
/// its sequence number), or the key of one the engine may have planned before (a key always
/// builds the same schedule, the flags' barriers included) and how to build it, so that a
/// repeated call skips building and planning. Each schedule comes with whether every
/// member's staging of it fits half a lane (see "Skipped credits"), which only the caller
/// can tell, and which a repeated call so need not work out again.
pub(crate) enum Prepared<'a> {
    Built {
        schedule: Schedule,
        half: bool,
        signature: u64,
    },
    Keyed {
        key: Key<'a>,
        build: &'a dyn Fn() -> Result<(Schedule, bool)>,
    },
}

/// The key of a keyed schedule: the words members must agree on, the call's flags and the
/// algorithm's name, which its signature mixes, and what else the schedule depends on
/// (`exact`: the counts of a v form, which the words carry only as a digest). Kept in its
/// parts, so that a call repeating the last one is recognised by comparing them, without
/// flattening the key and mixing its signature again (an 8 B allreduce at 2 ranks spent
/// 128 instructions per call on them).
#[derive(Clone, Copy)]
pub(crate) struct Key<'a> {
    pub(crate) words: &'a [u64],
    pub(crate) flags: u32,
    pub(crate) algorithm: &'static str,
    pub(crate) exact: &'a [&'a [u64]],
}

impl Key<'_> {
    /// The words members agree on, flattened into `out`: the call's words, its flags, and
    /// the algorithm's name by its length and its bytes eight to a word (as exact as a
    /// word per byte, and a shorter key to hash).
    pub(crate) fn agreed(&self, out: &mut Vec<u64>) {
        out.extend_from_slice(self.words);
        out.push(u64::from(self.flags));
        out.push(self.algorithm.len() as u64);
        out.extend(self.algorithm.as_bytes().chunks(8).map(|chunk| {
            let mut word = [0; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            u64::from_le_bytes(word)
        }));
    }
}

/// The key last looked up, in its parts (see [`Key`]), with its signature and its plans.
#[derive(Default)]
struct LastKey {
    words: Vec<u64>,
    flags: u32,
    algorithm: &'static str,
    exact: Vec<u64>,
    signature: u64,
    plans: [Option<Arc<Plan>>; 2],
}

impl LastKey {
    /// Whether `key` is this one. Word by word: the keys are a few words long, shorter than
    /// a call to `memcmp` takes to start.
    fn matches(&self, key: &Key<'_>) -> bool {
        let exact = match key.exact {
            [] => self.exact.is_empty(),
            parts => parts.iter().copied().flatten().eq(&self.exact),
        };
        self.flags == key.flags
            && (std::ptr::eq(self.algorithm, key.algorithm) || self.algorithm == key.algorithm)
            && self.words.len() == key.words.len()
            && self.words.iter().zip(key.words).all(|(a, b)| a == b)
            && exact
    }
}

/// One run a call initiates: what it runs, the operator of its folds, and for a piece of a
/// longer collective its views of the caller's buffers.
pub(crate) struct Launch<'a> {
    pub(crate) prepared: Prepared<'a>,
    pub(crate) reducer: Option<Box<dyn Reducer>>,
    pub(crate) views: Option<Views>,
    /// Its plan and signature, between the planning of every launch of a call and the
    /// start of its run (see [`Engine::initiate`]): kept in the launch, a call needs no
    /// list of them beside its launches.
    planned: Option<(Arc<Plan>, u64)>,
}

impl<'a> Launch<'a> {
    pub(crate) fn new(
        prepared: Prepared<'a>,
        reducer: Option<Box<dyn Reducer>>,
        views: Option<Views>,
    ) -> Launch<'a> {
        Launch {
            prepared,
            reducer,
            views,
            planned: None,
        }
    }
}

/// Why a run failed, kept so that its handle reports it whenever it is synced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A member died, and what the runtime saw.
    Rank(Rank, String),
    /// A member's notification carried another value.
    OutOfStep { rank: Rank, got: u32, expected: u32 },
    /// A step's span lies outside the caller's buffer.
    Buffer { len: u64, need: u64 },
    /// A member's segment is gone (a member that dropped its team while this member's
    /// runs still sent to it), kept as the runtime said it.
    Segment(Rank, SegmentId),
    /// The runtime failed otherwise.
    Runtime(String),
}

impl From<gaspi::Error> for Failure {
    fn from(e: gaspi::Error) -> Failure {
        match e {
            gaspi::Error::RankFailed { rank, reason } => Failure::Rank(rank, reason),
            gaspi::Error::UnknownSegment { rank, segment } => Failure::Segment(rank, segment),
            e => Failure::Runtime(e.to_string()),
        }
    }
}

impl From<Failure> for Error {
    fn from(f: Failure) -> Error {
        match f {
            Failure::Rank(rank, reason) => gaspi::Error::RankFailed { rank, reason }.into(),
            Failure::OutOfStep { rank, got, .. } => Error::Mismatch { rank, value: got },
            Failure::Buffer { len, need } => Error::BufferTooShort { len, need },
            Failure::Segment(rank, segment) => {
                gaspi::Error::UnknownSegment { rank, segment }.into()
            }
            Failure::Runtime(what) => Error::Runtime(what),
        }
    }
}

/// How the team's segment and table are cut.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Layout {
    pub(crate) lanes: u32,
    pub(crate) lane_bytes: u64,
    /// Signals per block.
    bound: u32,
    members: u32,
    /// `log2 lanes` when `lanes` is a power of two (the default): every step of every run
    /// finds its lane, and a 64-bit division costs tens of cycles where a shift costs one.
    shift: Option<u32>,
}

impl Layout {
    /// The layout of `lanes` stages of `lane_bytes` for `n` members; `None` when its bytes
    /// or its notification ids cannot be counted in their types, so that every figure
    /// derived from it below fits.
    pub(crate) fn new(n: u32, lanes: u32, lane_bytes: u64) -> Option<Layout> {
        let bound = signal_bound(n);
        u64::from(lanes).checked_mul(lane_bytes)?;
        // `ids()`: 2·lanes blocks of `bound`, the wake-up, one publication per member.
        lanes
            .checked_mul(2)?
            .checked_mul(bound)?
            .checked_add(1)?
            .checked_add(n)?;
        Some(Layout {
            lanes,
            lane_bytes,
            bound,
            members: n,
            shift: lanes.is_power_of_two().then(|| lanes.trailing_zeros()),
        })
    }

    fn lane(&self, seq: u64) -> u32 {
        // Below `lanes`, a u32.
        match self.shift {
            Some(_) => (seq & u64::from(self.lanes - 1)) as u32,
            None => (seq % u64::from(self.lanes)) as u32,
        }
    }

    /// How many times the lanes were all taken before run `seq`: `seq / lanes`.
    fn round(&self, seq: u64) -> u64 {
        match self.shift {
            Some(shift) => seq >> shift,
            None => seq / u64::from(self.lanes),
        }
    }

    /// Which of its lane's two blocks of notifications (and halves of the stage, for a
    /// compact run) run `seq` uses.
    fn parity(&self, seq: u64) -> u32 {
        (self.round(seq) % 2) as u32
    }

    fn id(&self, seq: u64, signal: u32) -> NotificationId {
        (self.lane(seq) * 2 + self.parity(seq)) * self.bound + signal
    }

    fn offset(&self, seq: u64) -> u64 {
        u64::from(self.lane(seq)) * self.lane_bytes
    }

    fn wake(&self) -> NotificationId {
        self.lanes * 2 * self.bound
    }

    /// Where member `index` publishes how far it has freed its stage (see "Eager runs").
    fn freed(&self, index: u32) -> NotificationId {
        self.wake() + 1 + index
    }

    /// Notifications in the team's table.
    pub(crate) fn ids(&self) -> u32 {
        self.wake() + 1 + self.members
    }

    /// Bytes of the team's segment.
    pub(crate) fn bytes(&self) -> u64 {
        u64::from(self.lanes) * self.lane_bytes
    }
}

/// The engine's state, under its lock.
struct State<'c> {
    /// The sequence number of the next collective initiated.
    next: u64,
    runs: Runs<Run<'c>>,
    /// Removed runs, to be renewed as the next ones: boxed, as in the slots of [`Runs`], so
    /// that a run goes from a slot to here and back without being moved.
    #[allow(clippy::vec_box)]
    spare: Vec<Box<Run<'c>>>,
    /// The run holding each lane.
    lanes: Vec<Option<u64>>,
    /// The runs that ended (completed or failed), for the calls that sync several handles:
    /// may also name runs removed since, which a look skips (sequence numbers are never
    /// reused) and [`release`](Engine::release) prunes once they outnumber the runs there.
    /// A list rather than a set: a set that empties frees its node, and one run at a time
    /// would allocate and free on every collective.
    ended: Vec<u64>,
    /// Per lane, the runs initiated on it that have not started, in order (a run removed
    /// before it started, failed with a dead member, is skipped when its turn comes).
    queued: Vec<VecDeque<u64>>,
    /// Per lane, whether the last run initiated on it was compact and gathering (see
    /// "Skipped credits" in the [module documentation](self)).
    clears: Vec<bool>,
    /// Per lane, whether the last run initiated on it was compact.
    compacts: Vec<bool>,
    /// Every run before this one has given its stage up here (see "Eager runs").
    freed: u64,
    /// `freed` at the last periodic publication (see "Eager runs").
    published: u64,
    /// Per member, the last `freed` told to it, or carried to it in a signal it surely took
    /// (see [`Carried`]).
    told: Vec<u64>,
    /// Per member, whether it sends into a run this member holds and has not completed
    /// (gathered before waiting, kept for its allocation).
    senders: Vec<bool>,
    /// Plans of keyed schedules, per flattened key and parity.
    plans: FxHashMap<Vec<u64>, [Option<Arc<Plan>>; 2]>,
    /// The key last looked up and its entry of `plans`: a program repeating one collective
    /// finds its plan and signature by comparing the key's parts, without flattening the
    /// key, hashing it or mixing its signature.
    last: LastKey,
    /// A member known dead: every run not complete fails naming it.
    dead: Option<Failure>,
    watcher: bool,
    sleepers: u32,
    /// The notifications the runs wait for, gathered before sleeping (kept for its
    /// allocation).
    awaited: Vec<NotificationId>,
    /// Until when the calls that wait trust, while nothing changes, that the senders they
    /// wait for took the counts this member's signals carried (see "Eager runs").
    trusting: Option<Deadline>,
    /// Something changed under the lock that the other threads have not been told: a step
    /// taken (a notification consumed that a watcher may sleep on), a run removed, a lane
    /// given up.
    changed: bool,
}

impl<'c> State<'c> {
    /// The runs holding lanes.
    fn holders(&self) -> impl Iterator<Item = &Run<'c>> {
        self.lanes
            .iter()
            .flatten()
            .filter_map(|&seq| self.runs.get(seq))
    }
}

/// The runs of an engine by sequence number. Runs come in sequence order and mostly leave in
/// it, so a window of slots from the oldest run still there serves as the map. A slot is a
/// pointer, and a run kept while many collectives pass (its handle held unsynced) would keep
/// a slot for every later one: once the window grows past [`WINDOW`], the runs at its front
/// move to a map of their own, so that such a run costs an entry, not a slot per collective.
struct Runs<R> {
    /// The sequence number of `slots[0]`.
    base: u64,
    slots: VecDeque<Option<Box<R>>>,
    /// Runs before `base` still there.
    stragglers: FxHashMap<u64, Box<R>>,
}

/// The most slots the window of [`Runs`] keeps before moving the runs at its front out.
const WINDOW: usize = 1 << 12;

impl<R> Default for Runs<R> {
    fn default() -> Runs<R> {
        Runs {
            base: 0,
            slots: VecDeque::new(),
            stragglers: FxHashMap::default(),
        }
    }
}

impl<R> Runs<R> {
    fn get(&self, seq: u64) -> Option<&R> {
        match seq.checked_sub(self.base) {
            Some(slot) => self.slots.get(usize::try_from(slot).ok()?)?.as_deref(),
            None => self.stragglers.get(&seq).map(|run| &**run),
        }
    }

    fn get_mut(&mut self, seq: u64) -> Option<&mut R> {
        match seq.checked_sub(self.base) {
            Some(slot) => self
                .slots
                .get_mut(usize::try_from(slot).ok()?)?
                .as_deref_mut(),
            None => self.stragglers.get_mut(&seq).map(|run| &mut **run),
        }
    }

    /// Adds `run`, the next in sequence.
    fn insert(&mut self, seq: u64, run: Box<R>) {
        if self.slots.is_empty() {
            self.base = seq;
        }
        debug_assert_eq!(seq, self.base + self.slots.len() as u64);
        self.slots.push_back(Some(run));
        if self.slots.len() > WINDOW {
            // Half the window at a time: a shift costs a slot's move per collective.
            while self.slots.len() > WINDOW / 2 {
                if let Some(Some(run)) = self.slots.pop_front() {
                    self.stragglers.insert(self.base, run);
                }
                self.base += 1;
            }
            self.trim();
        }
    }

    fn remove(&mut self, seq: u64) -> Option<Box<R>> {
        let Some(slot) = seq.checked_sub(self.base) else {
            return self.stragglers.remove(&seq);
        };
        let run = self.slots.get_mut(usize::try_from(slot).ok()?)?.take();
        self.trim();
        run
    }

    /// Drops the empty slots at the window's front.
    fn trim(&mut self) {
        while let Some(None) = self.slots.front() {
            self.slots.pop_front();
            self.base += 1;
        }
    }

    fn is_empty(&self) -> bool {
        self.slots.is_empty() && self.stragglers.is_empty()
    }

    /// How many runs the map may hold at most: its slots and stragglers.
    fn capacity(&self) -> usize {
        self.slots.len() + self.stragglers.len()
    }
}

/// The engines of a family of teams (a team made of a group, and the teams split off it and
/// off those), each of which moves the others on before it sleeps (see "Other teams").
#[derive(Debug, Default)]
pub(crate) struct Engines<'c> {
    list: Mutex<Vec<Weak<Engine<'c>>>>,
    /// The list's length, read without the lock: a team alone in its family (most) has no
    /// other to move on before every sleep.
    len: AtomicUsize,
}

impl<'c> Engines<'c> {
    /// Adds `engine`, forgetting those of teams dropped since.
    pub(crate) fn register(&self, engine: &Arc<Engine<'c>>) {
        let mut list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
        list.retain(|e| e.strong_count() > 0);
        list.push(Arc::downgrade(engine));
        self.len.store(list.len(), Ordering::Relaxed);
    }

    /// Whether the family is this engine's alone: none other to move on before a sleep.
    fn alone(&self) -> bool {
        self.len.load(Ordering::Relaxed) <= 1
    }

    /// Passes over the runs of every engine but `me` that no thread holds: whether one of
    /// them has a run under way.
    fn move_others(&self, me: &Engine<'c>) -> bool {
        if self.alone() {
            return false;
        }
        let others: Vec<Arc<Engine<'c>>> = {
            let list = self.list.lock().unwrap_or_else(PoisonError::into_inner);
            list.iter()
                .filter_map(Weak::upgrade)
                .filter(|e| !std::ptr::eq(Arc::as_ptr(e), me))
                .collect()
        };
        let mut busy = false;
        for other in others {
            busy |= other.move_on();
        }
        busy
    }
}

/// Longest sleep of a call while another team of its family has a run under way that no
/// thread watches (see "Other teams"): the first, doubled up to [`OTHERS_POLL_MAX`] while
/// such sleeps end with nothing changed. Every sleep begins with the runtime's spin (200 µs,
/// 2 ms where ranks outnumber cores), which at 1 ms a sleep kept a member waiting for a late
/// one busy 17–20% of a core at 2 ranks, 20–70% at 4 ranks on 2 cores; at 32 ms, 1.6% and
/// 4–7% (measured).
const OTHERS_POLL: Duration = Duration::from_millis(1);
const OTHERS_POLL_MAX: Duration = Duration::from_millis(32);

/// The engine of one team: see the [module documentation](self).
pub(crate) struct Engine<'c> {
    ctx: &'c Context,
    /// The engines of the team's family, this one's too.
    engines: Arc<Engines<'c>>,
    seg: Segment<'c>,
    ranks: Vec<Rank>,
    /// The other members' ranks, whose deaths a wait watches.
    others: Vec<Rank>,
    /// Per member, whether it is reached directly: puts to it may go out of the caller's
    /// source (see the `elide` module).
    direct: Vec<bool>,
    /// Some other member is reached through the fabric.
    fabric: bool,
    me: u32,
    /// Every member's segment, by member index (this member's too, for the wake-up), once
    /// resolved: by the first call that may wait, so that building a team never has to
    /// (see [`connect`](Self::connect)); for a member that dropped its team before, the id
    /// its segment had.
    targets: OnceLock<Vec<std::result::Result<Target, SegmentId>>>,
    layout: Layout,
    state: Mutex<State<'c>>,
    changes: Condvar,
    /// The watcher's wake-ups.
    wakes: Batch<'c>,
    /// How far each member has freed its stage, as it last told this one (see "Eager
    /// runs"); only ever raised, under the state's lock.
    known: Vec<AtomicU64>,
    /// Per member, whether a signal of it was taken since this member last told every
    /// member its `freed` (see "Eager runs"); under the state's lock.
    heard: Vec<AtomicBool>,
    /// The state's `freed`, for the signals that carry it (see "Eager runs"); written under
    /// the state's lock.
    freed: AtomicU64,
    /// Per member, the `freed` counts signals to it carried, and those it surely took (see
    /// "Eager runs"); under the state's lock.
    carried: Vec<Carried>,
    /// This member's publications of its `freed`.
    publications: Batch<'c>,
}

impl std::fmt::Debug for Engine<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("members", &self.ranks.len())
            .field("me", &self.me)
            .field("layout", &self.layout)
            .finish()
    }
}

/// What a handle needs of its team's engine, whatever the engine's lifetime.
pub(crate) trait Runner: Sync {
    /// See [`Engine::sync`].
    fn sync(
        &self,
        owners: &mut [Owner<'_>],
        outcomes: &mut [Option<Result<()>>],
        enough: usize,
        timeout: Timeout,
    ) -> Result<()>;
    /// See [`Engine::orphan`].
    fn orphan(&self, seqs: Range<u64>, src: Option<Input<'_>>);
    /// See [`Engine::lend`].
    fn lend(&self, seqs: Range<u64>, src: Input<'_>);
}

impl Runner for Engine<'_> {
    fn sync(
        &self,
        owners: &mut [Owner<'_>],
        outcomes: &mut [Option<Result<()>>],
        enough: usize,
        timeout: Timeout,
    ) -> Result<()> {
        Engine::sync(self, owners, outcomes, enough, timeout)
    }

    fn orphan(&self, seqs: Range<u64>, src: Option<Input<'_>>) {
        Engine::orphan(self, seqs, src);
    }

    fn lend(&self, seqs: Range<u64>, src: Input<'_>) {
        Engine::lend(self, seqs, src);
    }
}

/// Which owner holds a run: the owners' ranges of runs, sorted, for a binary search (and
/// without an allocation for the one owner of most calls).
enum OwnerIndex {
    One(Range<u64>),
    /// First run, end of the range, owner.
    Many(Vec<(u64, u64, usize)>),
}

impl OwnerIndex {
    fn new(owners: &[Owner<'_>]) -> OwnerIndex {
        if let [one] = owners {
            return OwnerIndex::One(one.seqs.clone());
        }
        let mut ranges: Vec<(u64, u64, usize)> = owners
            .iter()
            .enumerate()
            .map(|(i, o)| (o.seqs.start, o.seqs.end, i))
            .collect();
        ranges.sort_unstable();
        OwnerIndex::Many(ranges)
    }

    fn none() -> OwnerIndex {
        OwnerIndex::Many(Vec::new())
    }

    /// The owner of run `seq`, if a call's owners hold it.
    fn find(&self, seq: u64) -> Option<usize> {
        match self {
            OwnerIndex::One(seqs) => seqs.contains(&seq).then_some(0),
            OwnerIndex::Many(ranges) => {
                let at = ranges.partition_point(|&(start, _, _)| start <= seq);
                let &(_, end, owner) = ranges.get(at.checked_sub(1)?)?;
                (seq < end).then_some(owner)
            }
        }
    }
}

/// What a call does after a pass over the runs.
enum Next<T> {
    Done(T),
    Wait,
}

impl<'c> Engine<'c> {
    /// An engine over `seg` (the team's segment, cut by `layout`) of the team `ranks`, in
    /// which this member is `me`.
    pub(crate) fn new(
        ctx: &'c Context,
        engines: Arc<Engines<'c>>,
        seg: Segment<'c>,
        ranks: Vec<Rank>,
        me: u32,
        layout: Layout,
    ) -> Engine<'c> {
        let others = ranks
            .iter()
            .enumerate()
            .filter(|&(i, _)| i != me as usize)
            .map(|(_, &rank)| rank)
            .collect();
        let direct: Vec<bool> = ranks.iter().map(|&r| ctx.reaches_directly(r)).collect();
        let fabric = direct
            .iter()
            .enumerate()
            .any(|(i, &direct)| i != me as usize && !direct);
        Engine {
            ctx,
            engines,
            seg,
            ranks,
            others,
            direct,
            fabric,
            me,
            targets: OnceLock::new(),
            layout,
            state: Mutex::new(State {
                next: 0,
                runs: Runs::default(),
                spare: Vec::new(),
                lanes: vec![None; layout.lanes as usize],
                ended: Vec::new(),
                queued: vec![VecDeque::new(); layout.lanes as usize],
                clears: vec![true; layout.lanes as usize],
                compacts: vec![false; layout.lanes as usize],
                freed: 0,
                published: 0,
                told: vec![0; layout.members as usize],
                senders: vec![false; layout.members as usize],
                plans: FxHashMap::default(),
                last: LastKey::default(),
                dead: None,
                watcher: false,
                sleepers: 0,
                awaited: Vec::new(),
                trusting: None,
                changed: false,
            }),
            changes: Condvar::new(),
            wakes: crate::batch(ctx),
            known: (0..layout.members).map(|_| AtomicU64::new(0)).collect(),
            heard: (0..layout.members)
                .map(|_| AtomicBool::new(false))
                .collect(),
            freed: AtomicU64::new(0),
            carried: (0..layout.members).map(|_| Carried::default()).collect(),
            // A publication goes to every other member at once.
            publications: ctx.batch_with_depth(ctx.queue_size_max().max(layout.members)),
        }
    }

    pub(crate) fn size(&self) -> u32 {
        self.ranks.len() as u32
    }

    pub(crate) fn me(&self) -> u32 {
        self.me
    }

    pub(crate) fn ranks(&self) -> &[Rank] {
        &self.ranks
    }

    /// Resolves every member's segment if not done yet, within `deadline`. The team's
    /// creation only makes sure every member created its segment; resolving them may wait,
    /// so it is left to the calls that may: a call that times out here leaves the team
    /// whole (the runtime continues the lookups), and the next call goes on.
    ///
    /// A member may drop its team once its own collectives are over while others still
    /// have theirs to run (a rank late to a gather that its root waits for): its segment is
    /// then gone, which fails only a put to it (a signal to it is moot, see
    /// [`signal`](Transport::signal)), not the runs that never send to it.
    fn connect(&self, deadline: Deadline) -> Result<()> {
        if self.targets.get().is_some() {
            return Ok(());
        }
        let me = self.ranks[self.me as usize];
        let targets = self
            .ranks
            .iter()
            .map(|&rank| match self.seg.target(rank, deadline.left()) {
                Ok(target) => Ok(Ok(target)),
                Err(gaspi::Error::UnknownSegment { segment, .. }) if rank != me => Ok(Err(segment)),
                Err(e) => Err(e),
            })
            .collect::<gaspi::Result<Vec<_>>>()?;
        // Another thread may have resolved them meanwhile: the same targets either way.
        let _ = self.targets.set(targets);
        Ok(())
    }

    /// Member `index`'s segment, once resolved; [`Failure::Segment`] for a member that
    /// dropped its team.
    fn target(&self, index: u32) -> std::result::Result<Option<&Target>, Failure> {
        let Some(target) = self.targets.get().and_then(|t| t.get(index as usize)) else {
            return Ok(None);
        };
        target
            .as_ref()
            .map(Some)
            .map_err(|&segment| Failure::Segment(self.ranks[index as usize], segment))
    }

    /// `signal` of run `seq` carrying this member's `freed` (see "Eager runs"), and the
    /// count it carries.
    fn carrying(&self, seq: u64, signal: Notification) -> (Notification, Option<u64>) {
        let (value, carried) = carry(signal.value, seq, self.freed.load(Ordering::Relaxed));
        (Notification { value, ..signal }, carried)
    }

    /// Notes that a signal of run `seq` to member `to` went out carrying `freed`.
    fn carried_to(&self, to: u32, seq: u64, freed: Option<u64>) {
        if let (Some(carried), Some(freed)) = (self.carried.get(to as usize), freed) {
            carried.note(seq, freed, self.known[to as usize].load(Ordering::Relaxed));
        }
    }

    fn state(&self) -> MutexGuard<'_, State<'c>> {
        // Every run is consistent between steps: a panic elsewhere cannot break it.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Initiates a collective of one run per launch of `launches` (a piece each, for a
    /// collective cut into pieces) with the caller's buffers, and takes their first steps;
    /// returns their sequence numbers. The launches are used up (lent rather than moved:
    /// a launch is a few hundred bytes, which every move copied).
    ///
    /// With `keep`, the runs get what they still need of the source as the call returns
    /// (see [`lend`](Self::lend)); without, the caller syncs them at once, lending the
    /// source again, and lends it to them before it returns without their completion or
    /// drops them. Runs that complete in this call (a team of one, or a member whose part is
    /// puts that may go at once and signals already there: an eager run's, a gathering
    /// run's that skips its credits) are also collected here, under the same lock, their
    /// output delivered into `dst`, which the caller's handle holds until its sync, and
    /// their outcome returned: that sync then has nothing left to do.
    pub(crate) fn initiate(
        &self,
        launches: &mut [Launch<'_>],
        eager: bool,
        keep: bool,
        src: Input<'_>,
        dst: Output<'_>,
    ) -> Result<(Range<u64>, Option<Result<()>>)> {
        match self.connect(Timeout::Test.deadline()) {
            Err(e) if e.is_timeout() => {}
            other => other?,
        }
        let mut state = self.state();
        if let Some(dead) = self.death(&mut state) {
            // The runs under way fail with it too (see `State::dead`): a member that needs
            // nothing of the dead one must not report a collective of its team complete.
            state.changed = true;
            drop(state);
            self.changes.notify_all();
            return Err(dead.into());
        }
        let first = state.next;
        // Every piece is planned before any runs, so that one too large leaves nothing.
        for (seq, launch) in (first..).zip(launches.iter_mut()) {
            let parity = self.layout.parity(seq);
            launch.planned = Some(self.plan(&mut state, &mut launch.prepared, parity)?);
        }
        let lanes = u64::from(self.layout.lanes);
        // A collective of one run in an engine that holds no other (a blocking call's, in
        // a program that syncs each collective before the next) needs nothing of the
        // machinery that keeps runs apart: its steps are taken here, and it only enters the
        // engine's books if it has to wait.
        let alone = launches.len() == 1 && state.runs.is_empty();
        let mut owner = Owner {
            seqs: first..first + launches.len() as u64,
            src,
            dst,
            panic: None,
        };
        for (seq, launch) in (first..).zip(launches.iter_mut()) {
            // Planned above, every one.
            let Some((plan, signature)) = launch.planned.take() else {
                return Err(Error::Runtime(format!("run {seq} initiated unplanned")));
            };
            let (reducer, views) = (launch.reducer.take(), launch.views.take());
            let lane = self.layout.lane(seq) as usize;
            // Outside eager runs only a gathering schedule skips: a credit also carries its
            // receiver's arguments to the sender, and a receiver whose senders disagree among
            // themselves (two members each taking itself for the root) could not tell.
            let skip = eager || (plan.compact && plan.schedule.gathering && state.clears[lane]);
            // The runs whose stage this one's puts may land in: the one before it on the
            // lane, or the one before that if both this one and it use halves.
            let back = if plan.compact && state.compacts[lane] {
                2 * lanes
            } else {
                lanes
            };
            state.clears[lane] = plan.compact && plan.schedule.gathering;
            state.compacts[lane] = plan.compact;
            let value = value(seq, signature);
            let straight = alone && state.lanes[lane].is_none();
            let mut run = match state.spare.pop() {
                Some(mut run) => {
                    run.renew(seq, Arc::clone(&plan), value, views, straight);
                    run
                }
                None => {
                    let batch = crate::batch(self.ctx);
                    Run::new(seq, Arc::clone(&plan), value, views, batch, straight)
                }
            };
            run.reducer = reducer;
            if let Output::Segment(range) = &owner.dst {
                run.dst_range = Some(*range);
                if let Input::Segment(source) = &src {
                    run.overlapped = source.overlaps(range).then_some(*source);
                }
            }
            // A run that skips its credits holds its puts back by flow control instead. A
            // compact gathering run's skip is safe only if every member started the run before
            // it on the lane: one whose part of that run was empty (a piece of a v form with
            // nothing in its subtree) finished it without hearing from anyone, and ran ahead.
            if skip {
                run.needs = (seq + 1).saturating_sub(back);
            }
            run.signal_needs = run.needs.max((seq + 1).saturating_sub(2 * lanes));
            if skip {
                run.skip();
            }
            state.next = seq + 1;
            if straight {
                if let Some(outcome) = self.straight(&mut state, run, &mut owner) {
                    // As a sync that returns does (see `drive`).
                    state.trusting = None;
                    self.tell(state)?;
                    return Ok((owner.seqs, Some(outcome)));
                }
                continue;
            }
            state.runs.insert(seq, run);
            state.queued[lane].push_back(seq);
        }
        let seqs = owner.seqs.clone();
        // A run walked here that waits where nothing else of it can go (still a walk, see
        // `Run::walk`) is the engine's only one, and took all it could: a pass would only
        // look again.
        let walking = alone && state.runs.get(seqs.start).is_some_and(Run::walking);
        let outcome = match walking {
            true => None,
            false => {
                let owners = std::slice::from_mut(&mut owner);
                let index = OwnerIndex::new(owners);
                self.pass(&mut state, owners, &index);
                // Complete already, the runs deliver into the destination the handle holds:
                // its sync then only reports the outcome, and nothing of the source need
                // be kept.
                self.collect(&mut state, &mut owner)
            }
        };
        match outcome {
            // As a sync that returns does (see `drive`).
            Some(_) => state.trusting = None,
            None if keep => self.keep_source(&mut state, seqs.clone(), src),
            None => {}
        }
        if owner.panic.is_some() {
            // The panic goes on from here (see below), and no handle is left to lend the
            // source to the collective's other pieces, now orphans.
            self.keep_source(&mut state, seqs.clone(), src);
        }
        let told = self.tell(state);
        if let Some(panic) = owner.panic {
            // The operator panicked in this call's pass over a collective it collected: no
            // handle is there to sync it, so the panic goes on here (its failed runs are
            // removed, the others orphaned).
            std::panic::resume_unwind(panic);
        }
        told?;
        Ok((seqs, outcome))
    }

    /// Walks `run` (see [`Run::walk`]), the engine's only one, whose lane is free, in the
    /// call that initiates it with `owner`'s buffers, and collects it: the outcome if it
    /// completed, its output delivered and the run kept for renewal without ever entering
    /// the engine's books; else `None`, with the run in the books (still a walk where it
    /// waits at a step that every later one but a wait depends on, see [`Run::walk`]) and
    /// holding its lane, for the pass that follows to take what else can go.
    fn straight(
        &self,
        state: &mut State<'c>,
        mut run: Box<Run<'c>>,
        owner: &mut Owner<'_>,
    ) -> Option<Result<()>> {
        let seq = run.seq;
        run.started = true;
        if let Err(f) = run.walk(self, Some(owner)) {
            if let Failure::Rank(..) = f {
                state.dead = Some(f.clone());
            }
            run.failed = Some(f);
        }
        state.changed = true;
        if !run.complete {
            if run.failed.is_some() {
                run.book();
                state.ended.push(seq);
            }
            state.runs.insert(seq, run);
            state.lanes[self.layout.lane(seq) as usize] = Some(seq);
            return None;
        }
        let outcome = run.deliver(self, &mut owner.dst).map_err(Error::from);
        if run.reusable() && state.spare.len() < SPARE {
            run.retire();
            state.spare.push(run);
        }
        self.advance_freed(state);
        if let Err(f @ Failure::Rank(..)) = self.publish(state, None, false) {
            state.dead = Some(f);
        }
        Some(outcome)
    }

    /// Gives the runs of `seqs`, initiated without `keep`, what they still need of the
    /// caller's source `src` (see [`keep_source`](Self::keep_source)).
    pub(crate) fn lend(&self, seqs: Range<u64>, src: Input<'_>) {
        let mut state = self.state();
        self.keep_source(&mut state, seqs, src);
        // A failure staging the source is the run's, reported when its handle syncs.
        let _ = self.tell(state);
    }

    /// Gives the runs of `seqs` that still have to read the caller's source `src` what they
    /// need of it, as the call that lent it returns: the bytes of their puts and folds out of the
    /// source staged (in a run that holds its lane), else a copy of the source. They then
    /// move on in any call of the team, not only in those that hold their handle (see "The
    /// caller's buffers" in the [module documentation](self)), and need nothing of the
    /// handle if it is dropped.
    fn keep_source(&self, state: &mut State<'c>, seqs: Range<u64>, src: Input<'_>) {
        let later = |state: &State<'c>, seq| state.runs.get(seq).is_some_and(Run::reads_later);
        if !seqs.clone().any(|seq| later(state, seq)) {
            return;
        }
        // A segment's range is kept as it is, and read when the steps run: read now, it
        // would miss what other members write into it before they enter (`IN_ALLSYNC`).
        if let Input::Segment(range) = src {
            for seq in seqs {
                if let Some(run) = state.runs.get_mut(seq).filter(|run| run.reads_later()) {
                    run.source = Some(Kept::Range(range));
                }
            }
            return;
        }
        for seq in seqs.clone() {
            if let Some(run) = state.runs.get_mut(seq).filter(|run| run.reads_later()) {
                // A failure here is the run's, reported when its handle syncs.
                if let Err(f) = run.stage_source_reads(self, &src) {
                    run.failed = Some(f);
                    state.changed = true;
                }
            }
        }
        if !seqs.clone().any(|seq| later(state, seq)) {
            return;
        }
        // A source that cannot be read any more (its segment deleted) leaves nothing to
        // send: the runs that still need it fail there, and their partners are told.
        let copy: Arc<[u8]> = src.copied(self.ctx).unwrap_or_default().into();
        for seq in seqs {
            if let Some(run) = state.runs.get_mut(seq).filter(|run| run.reads_later()) {
                run.source = Some(Kept::Copy(Arc::clone(&copy)));
            }
        }
    }

    /// The plan of `prepared` for a run of `parity`, from the cache if it holds it, and the
    /// signature of its run. A built schedule is taken out of `prepared`.
    fn plan(
        &self,
        state: &mut State<'c>,
        prepared: &mut Prepared<'_>,
        parity: u32,
    ) -> Result<(Arc<Plan>, u64)> {
        let (key, build) = match prepared {
            Prepared::Built {
                schedule,
                half,
                signature,
            } => {
                let plan = self.prepare(std::mem::take(schedule), parity, *half)?;
                return Ok((plan, *signature));
            }
            Prepared::Keyed { key, build } => (*key, *build),
        };
        let parity = parity as usize;
        let mut flat = Vec::new();
        if !state.last.matches(&key) {
            key.agreed(&mut flat);
            let last = &mut state.last;
            last.signature = signature(&flat);
            last.exact.clear();
            last.exact.extend(key.exact.iter().copied().flatten());
            flat.extend_from_slice(&last.exact);
            last.plans = state.plans.get(&flat).cloned().unwrap_or_default();
            last.words.clear();
            last.words.extend_from_slice(key.words);
            last.flags = key.flags;
            last.algorithm = key.algorithm;
        }
        let signature = state.last.signature;
        if let Some(hit) = &state.last.plans[parity] {
            return Ok((hit.clone(), signature));
        }
        let (schedule, half) = build()?;
        let entry = self.prepare(schedule, parity as u32, half)?;
        if state.plans.len() >= PLANS {
            state.plans.clear();
        }
        if flat.is_empty() {
            key.agreed(&mut flat);
            flat.extend_from_slice(&state.last.exact);
        }
        state.plans.entry(flat).or_default()[parity] = Some(entry.clone());
        state.last.plans[parity] = Some(entry.clone());
        Ok((entry, signature))
    }

    /// `schedule` checked against a lane, placed in its half of the lane if it is compact,
    /// and planned.
    /// The run is compact exactly when `half` says every member's staging fits half a lane:
    /// members must agree, and nothing of this member's own schedule may decide it, since
    /// their schedules differ (a member of a v form whose edges all carry nothing lists no
    /// credits, and staged whole while the others staged in halves when its credits counted:
    /// an eager scatterv of 100 B at 4 ranks whose member 0 had none timed out).
    fn prepare(&self, mut schedule: Schedule, parity: u32, half: bool) -> Result<Arc<Plan>> {
        if schedule.stage > self.layout.lane_bytes {
            return Err(Error::TooLarge {
                rank: self.ctx.rank(),
                len: schedule.stage,
                max: self.layout.lane_bytes,
            });
        }
        let lane_half = self.layout.lane_bytes / 2;
        // The caller's word for every member: staging more, this member would write the half
        // of the lane's other run.
        if half && schedule.stage > lane_half {
            return Err(Error::Runtime(format!(
                "a run staging {} bytes said to fit half a lane of {}",
                schedule.stage, self.layout.lane_bytes
            )));
        }
        let compact = half;
        if compact && parity == 1 {
            schedule.shift_stage(lane_half);
        }
        let direct = |to: u32| self.direct.get(to as usize).copied().unwrap_or(false);
        Ok(Arc::new(Plan::new(schedule, compact, direct)))
    }

    /// Syncs the runs of `owners` (each with its caller's buffers): sets, per owner,
    /// `Some(outcome)` in `outcomes` for a run that completed here (its output delivered),
    /// and leaves `None` for one still in flight; waits until `enough` of them completed or
    /// `timeout` passed, counted from when the call first has to wait.
    pub(crate) fn sync(
        &self,
        owners: &mut [Owner<'_>],
        outcomes: &mut [Option<Result<()>>],
        enough: usize,
        timeout: Timeout,
    ) -> Result<()> {
        let mut deadline = None;
        if let ([owner], [None]) = (&mut *owners, &mut *outcomes) {
            if enough > 0 {
                if let Some(outcome) = self.wait_alone(owner, timeout, &mut deadline)? {
                    outcomes[0] = Some(outcome);
                    return Ok(());
                }
            }
        }
        let mut got = outcomes.iter().filter(|o| o.is_some()).count();
        let index = OwnerIndex::new(owners);
        // Every owner is looked at once (its runs may be over already), and again when a
        // member died, which ends them all; otherwise only those with runs that ended.
        let mut all = true;
        let mut saw_dead = false;
        let mut first = true;
        self.drive(timeout, deadline, |engine, state| {
            // In a lock-step loop the call that initiated the collective walked it as far as
            // it goes, and its sync mostly comes before the partner's data: the wait looks
            // at that signal first thing, and a pass would only look at it once more.
            if std::mem::take(&mut first)
                && owners.len() == 1
                && engine.idle_walk(state, &owners[0].seqs)
            {
                if let Err(f @ Failure::Rank(..)) = engine.publish(state, None, false) {
                    state.dead = Some(f);
                }
                return Next::Wait;
            }
            engine.pass(state, owners, &index);
            let died = state.dead.is_some() && !saw_dead;
            saw_dead = state.dead.is_some();
            // One owner is cheaper to look at than to find.
            let (every, look): (usize, Vec<usize>) =
                if std::mem::take(&mut all) || died || owners.len() == 1 {
                    (owners.len(), Vec::new())
                } else {
                    let mut look: Vec<usize> = state
                        .ended
                        .iter()
                        .filter(|&&seq| state.runs.get(seq).is_some())
                        .filter_map(|&seq| index.find(seq))
                        .collect();
                    look.sort_unstable();
                    look.dedup();
                    (0, look)
                };
            for i in (0..every).chain(look) {
                if outcomes[i].is_some() {
                    continue;
                }
                if let Some(outcome) = engine.collect(state, &mut owners[i]) {
                    outcomes[i] = Some(outcome);
                    got += 1;
                }
            }
            if got >= enough.min(owners.len()) {
                Next::Done(())
            } else {
                Next::Wait
            }
        })
    }

    /// Syncs `owner`'s collective while it is one run, the only one of its team (and
    /// family) not over, walking, and no other thread is in the engine: a blocking call's,
    /// in a program that syncs each collective before the next. Nothing else can progress
    /// meanwhile, so instead of passing over the runs and gathering what they wait for
    /// (see [`drive`](Self::drive)), the call waits for the signal the walk waits at (and
    /// the watcher's wake-up), takes the steps that follow, and collects the run once
    /// complete, telling its senders what they need of its stage before each wait as
    /// `drive` does (a wait that trusted carried counts and ran out of trust tells them
    /// outright and waits again). Whatever else happens — another thread or run, a wake-up,
    /// a death, the deadline, a fabric to drive —
    /// leaves the rest to `drive`, with `deadline` set once the call waited, so that the
    /// timeout still counts from the first wait: `None` then.
    fn wait_alone(
        &self,
        owner: &mut Owner<'_>,
        timeout: Timeout,
        deadline: &mut Option<Deadline>,
    ) -> Result<Option<Result<()>>> {
        // A test never sleeps; notifications through the fabric need the completion queue
        // read; another team's runs need moving on before a sleep (see "Other teams").
        let polled = matches!(timeout, Timeout::Test | Timeout::Millis(0));
        if polled || self.fabric || self.targets.get().is_none() || !self.engines.alone() {
            return Ok(None);
        }
        let seq = owner.seqs.start;
        let mut state = self.state();
        // A look at the signal before telling the senders and waiting: it may have come
        // since the initiating call's walk looked (in lock step, mostly), and after a step
        // the next may be there.
        loop {
            let Some(signal) = self.lone_walk(&state, &owner.seqs) else {
                self.tell(state)?;
                return Ok(None);
            };
            let id = self.layout.id(seq, signal);
            if self.seg.notify_peek(id)? == 0 {
                let deadline = *deadline.get_or_insert_with(|| timeout.deadline());
                let explicit = state.trusting.is_some_and(Deadline::expired);
                // The lone run is the only live one holding a lane (see `only_walk`): what
                // `publish` would gather of the runs, its senders and what they need, is its
                // own, and where each of them was told that, it finds nothing to tell.
                let relied = match self.told_senders(&state, seq) {
                    true => false,
                    false => self.publish(&mut state, Some(deadline), explicit)?,
                };
                match relied {
                    true => _ = state.trusting.get_or_insert_with(|| TRUST.deadline()),
                    false => state.trusting = None,
                }
                // Compared without reading the clock again.
                let until = state
                    .trusting
                    .map_or(deadline, |trust| trust.earlier(deadline));
                state.watcher = true;
                drop(state);
                let ranges = [self.seg.range(id, 1), self.seg.range(self.layout.wake(), 1)];
                let waited = self.ctx.notify_wait_any(&ranges, &self.others, until);
                state = self.state();
                state.watcher = false;
                if state.sleepers > 0 {
                    self.changes.notify_all();
                }
                match waited {
                    Ok(arrival) if arrival.range == 0 => {}
                    // The trust ran out: the senders are told outright before the next wait.
                    Err(gaspi::Error::Timeout) if until != deadline => continue,
                    // A wake-up (another thread changed something) or the deadline: `drive`
                    // sorts it out.
                    Ok(_) | Err(gaspi::Error::Timeout) => {
                        self.tell(state)?;
                        return Ok(None);
                    }
                    Err(gaspi::Error::RankFailed { rank, reason }) => {
                        state.dead = Some(Failure::Rank(rank, reason));
                        self.tell(state)?;
                        return Ok(None);
                    }
                    Err(e) => return Err(e.into()),
                }
                // Another thread may have come in while this one slept.
                if self.lone_walk(&state, &owner.seqs) != Some(signal) {
                    self.tell(state)?;
                    return Ok(None);
                }
            }
            // Found lone above: there, and holding its lane.
            let Some(run) = state.runs.get_mut(seq) else {
                self.tell(state)?;
                return Ok(None);
            };
            let changed = match run.advance(self, Some(owner)) {
                Ok(changed) => changed,
                Err(f) => {
                    let dead = matches!(f, Failure::Rank(..)).then(|| f.clone());
                    run.failed = Some(f);
                    if dead.is_some() {
                        state.dead = dead;
                    }
                    true
                }
            };
            if let Some(outcome) = self.collect(&mut state, owner) {
                // As a pass and a sync that returns do (see `drive`).
                if let Err(f @ Failure::Rank(..)) = self.publish(&mut state, None, false) {
                    state.dead = Some(f);
                }
                state.trusting = None;
                self.tell(state)?;
                return Ok(Some(outcome));
            }
            if changed {
                // Nobody else is in the engine to tell (see `lone_walk`).
                state.trusting = None;
                state.changed = false;
            }
        }
    }

    /// The signal the run of the collective of `seqs` waits for when it is one run, the only
    /// one not over, walking and waiting for a signal, and no other thread is in the
    /// engine or changed it without telling (see [`wait_alone`](Self::wait_alone)).
    fn lone_walk(&self, state: &State<'c>, seqs: &Range<u64>) -> Option<u32> {
        if state.watcher || state.sleepers > 0 {
            return None;
        }
        Self::only_walk(state, seqs)
    }

    /// Whether the collective of `seqs` is one run, the only one not over, walking and
    /// waiting for a signal that is not there: a pass would change nothing.
    fn idle_walk(&self, state: &State<'c>, seqs: &Range<u64>) -> bool {
        let Some(signal) = Self::only_walk(state, seqs) else {
            return false;
        };
        self.seg
            .notify_peek(self.layout.id(seqs.start, signal))
            .is_ok_and(|value| value == 0)
    }

    /// The signal the run of the collective of `seqs` waits for when it is one run, the only
    /// one not over, walking and waiting for a signal, in an engine nobody changed without
    /// telling and no death touched.
    fn only_walk(state: &State<'c>, seqs: &Range<u64>) -> Option<u32> {
        let seq = seqs.start;
        // Every run before it gave its stage up (over), and none came after it.
        if seqs.end != seq + 1 || state.next != seqs.end || state.freed != seq {
            return None;
        }
        if state.changed || state.dead.is_some() {
            return None;
        }
        state.runs.get(seq).and_then(Run::walk_signal)
    }

    /// Lets the runs `seqs` go on without their handle, their output dropped when they
    /// complete: those that still read the source got a copy when they were initiated, or
    /// get one of `src` now.
    pub(crate) fn orphan(&self, seqs: Range<u64>, src: Option<Input<'_>>) {
        let mut state = self.state();
        if let Some(src) = src {
            self.keep_source(&mut state, seqs.clone(), src);
        }
        self.abandon(&mut state, seqs);
        self.pass(&mut state, &mut [], &OwnerIndex::none());
        // A drop cannot report a failure; the runs' own failures are kept in them.
        let _ = self.tell(state);
    }

    /// Marks the runs of `seqs` that are still there orphans. A run over already (its lane
    /// given up to a later one) is removed at once.
    fn abandon(&self, state: &mut State<'c>, seqs: Range<u64>) {
        for seq in seqs {
            if let Some(run) = state.runs.get_mut(seq) {
                run.orphan = true;
                if run.complete || run.failed.is_some() {
                    self.release(state, seq);
                }
            }
        }
    }

    /// The outcome of `owner`'s collective if it is over: every piece's output delivered
    /// and its lane given up, or the first failure (the other pieces then go on without
    /// the owner, as orphans).
    fn collect(&self, state: &mut State<'c>, owner: &mut Owner<'_>) -> Option<Result<()>> {
        let mut over = true;
        for seq in owner.seqs.clone() {
            // A piece no longer there was collected by an earlier call.
            let Some(run) = state.runs.get_mut(seq) else {
                continue;
            };
            let outcome = match (&run.failed, &state.dead) {
                (Some(f @ Failure::Rank(..)), _) => Err(f.clone().into()),
                // A member's death explains what followed it (a partner that dropped the
                // team after its own runs failed, notifications of runs it abandoned): name
                // the death, as for every other collective of the team.
                (Some(f), _) => {
                    let f = f.clone();
                    Err(self.death(state).unwrap_or(f).into())
                }
                (None, Some(f)) if !run.complete => Err(f.clone().into()),
                (None, _) if !run.complete => {
                    over = false;
                    continue;
                }
                (None, _) => run.deliver(self, &mut owner.dst).map_err(Error::from),
            };
            if let Some(panic) = state.runs.get_mut(seq).and_then(|run| run.panic.take()) {
                owner.panic.get_or_insert(panic);
            }
            self.release(state, seq);
            if let Err(e) = outcome {
                self.abandon(state, owner.seqs.clone());
                return Some(Err(e));
            }
        }
        over.then_some(Ok(()))
    }

    /// The death of a member this engine saw, or the runtime knows of (then recorded).
    fn death(&self, state: &mut State<'c>) -> Option<Failure> {
        if state.dead.is_none() {
            state.dead = self
                .ctx
                .known_failure(self.others.iter().copied())
                .map(Failure::from);
        }
        state.dead.clone()
    }

    /// Removes run `seq`, giving its lane up.
    fn release(&self, state: &mut State<'c>, seq: u64) {
        state.changed = true;
        let run = state.runs.remove(seq);
        if let Some(mut run) = run.filter(|run| run.reusable() && state.spare.len() < SPARE) {
            run.retire();
            state.spare.push(run);
        }
        if state.ended.len() > 2 * state.runs.capacity() + ENDED_SLACK {
            let runs = &state.runs;
            state.ended.retain(|&seq| runs.get(seq).is_some());
        }
        let lane = self.layout.lane(seq) as usize;
        if state.lanes[lane] == Some(seq) {
            state.lanes[lane] = None;
        }
        self.advance_freed(state);
    }

    /// Moves `freed` past the runs that have given their stage up: removed, or over with
    /// their lane given to the next run. A run not started yet still counts as holding its
    /// stage, which it will use.
    fn advance_freed(&self, state: &mut State<'c>) {
        while state.freed < state.next {
            match state.runs.get(state.freed) {
                Some(run) if !run.off_stage => break,
                _ => state.freed += 1,
            }
        }
        self.freed.store(state.freed, Ordering::Relaxed);
    }

    /// Tells other members this member's `freed` (see "Eager runs"): periodically, when it
    /// crossed a multiple of the lanes since the last time, those it heard from lately
    /// (every member each [`FULL_ROUNDS`] times) unless a signal to them carried a count at
    /// most a lane behind; with `now`, the senders of the runs it holds whose put what they
    /// know would hold back: they then have what they need before this member waits for
    /// them, and in lock step nothing more is sent. What they know counts the counts its
    /// signals carried unless `explicit`, since a member may not take a signal before its
    /// put goes (see [`drive`](Self::drive)); returns whether it counted any.
    /// A publication goes out only once the one before it completed, so that a later value
    /// is never overtaken by an earlier one; with `now`, it waits for that within
    /// `deadline` (a timeout leaves it for the next call).
    ///
    /// Inlined for the looks that find nothing to tell at a few comparisons, which every
    /// pass and every wait makes: periodically, when `freed` stayed in the round of the last
    /// publication; with `now`, when every member was told `freed` already.
    #[inline]
    fn publish(
        &self,
        state: &mut State<'c>,
        now: Option<Deadline>,
        explicit: bool,
    ) -> std::result::Result<bool, Failure> {
        let nothing = match now {
            None => self.layout.round(state.freed) <= self.layout.round(state.published),
            Some(_) => (state.told.iter().enumerate())
                .all(|(index, &told)| index == self.me as usize || state.freed <= told),
        };
        if nothing {
            return Ok(false);
        }
        self.publish_due(state, now, explicit)
    }

    /// Whether every member that run `seq` still waits for a signal of was told this
    /// member's `freed`, or what the run needs of it: when `seq` is the only live run holding
    /// a lane, a [`publish`](Self::publish) with `now` then finds nothing to tell, since only
    /// a sender of a live run is ever due there, and only for what those runs need.
    /// Where it is not so, the look is `publish`'s to make (it also counts the counts that
    /// signals carried, which this look leaves alone).
    fn told_senders(&self, state: &State<'c>, seq: u64) -> bool {
        let Some(run) = state.runs.get(seq) else {
            return false;
        };
        let wanted = run.signal_needs;
        run.pending_senders().all(|from| {
            let told = state.told.get(from as usize).copied().unwrap_or(u64::MAX);
            from == self.me || state.freed <= told || told >= wanted
        })
    }

    /// [`publish`](Self::publish) past its quick looks.
    #[inline(never)]
    fn publish_due(
        &self,
        state: &mut State<'c>,
        now: Option<Deadline>,
        explicit: bool,
    ) -> std::result::Result<bool, Failure> {
        let Some(targets) = self.targets.get().filter(|_| self.ranks.len() > 1) else {
            return Ok(false);
        };
        let carried = |index: usize| self.carried[index].highest();
        // What member `index` knows of this member's `freed`, counting the counts carried.
        let known = |state: &State<'c>, index: usize| match explicit {
            true => state.told[index],
            false => state.told[index].max(carried(index)),
        };
        let periodic = now.is_none();
        let mut relied = false;
        let (full, wanted) = match now {
            // Every pass ends here: most find nothing due at one comparison.
            None => {
                let round = |freed| self.layout.round(freed);
                let (freed, published) = (round(state.freed), round(state.published));
                if freed <= published {
                    return Ok(false);
                }
                (freed / FULL_ROUNDS > published / FULL_ROUNDS, 0)
            }
            Some(_) => {
                let live = |run: &&Run<'c>| !run.complete && run.failed.is_none();
                let wanted = state
                    .holders()
                    .filter(live)
                    .map(|run| run.signal_needs)
                    .max();
                let wanted = wanted.unwrap_or(0);
                // A count a signal carried to a member that surely took it is as good as
                // told: in lock step, every count the wait needs (see `Carried`).
                let mut any = false;
                for index in 0..targets.len() {
                    let told = state.told[index];
                    if index == self.me as usize || state.freed <= told || told >= wanted {
                        continue;
                    }
                    let known = self.known[index].load(Ordering::Relaxed);
                    let told = told.max(self.carried[index].taken(known));
                    state.told[index] = told;
                    any |= state.freed > told && told < wanted;
                }
                if !any {
                    return Ok(false);
                }
                // Only a sender can be due (see `due` below), and only a sender's count is
                // relied on: the others are not looked at further (a member of a doubling
                // allreduce at 4 ranks that this one never hears from cost every wait the
                // full look, the senders worked out from every step of the schedule).
                let mut senders = std::mem::take(&mut state.senders);
                senders.fill(false);
                for run in state.holders().filter(live) {
                    run.senders(&mut senders);
                }
                state.senders = senders;
                // A sender behind by what it was told, before counting the counts carried.
                let behind = |index: usize| {
                    index != self.me as usize
                        && state.senders[index]
                        && state.freed > state.told[index]
                        && state.told[index] < wanted
                };
                if !(0..targets.len()).any(behind) {
                    return Ok(false);
                }
                // Where carried counts cover every sender behind, nothing is due (in lock
                // step, on every wait).
                if (0..targets.len()).all(|index| !behind(index) || known(state, index) >= wanted) {
                    return Ok(true);
                }
                // A sender behind by what it was told, whom carried counts spare telling
                // (they cover what it needs, or all there is), knows them only once it took
                // the signals that carried them: relied on.
                relied = (0..targets.len()).any(|index| {
                    let known = known(state, index);
                    behind(index) && (known >= wanted || known >= state.freed)
                });
                (false, wanted)
            }
        };
        let lanes = u64::from(self.layout.lanes);
        let due = |state: &State<'c>, index: usize| {
            index != self.me as usize
                && state.freed > known(state, index)
                && match now {
                    Some(_) => known(state, index) < wanted && state.senders[index],
                    None => {
                        (full || self.heard[index].load(Ordering::Relaxed))
                            && state.freed >= carried(index) + lanes
                    }
                }
        };
        if (0..targets.len()).any(|index| due(state, index)) {
            if self.publications.outstanding() > 0 && !self.publications.test()? {
                match now {
                    None => return Ok(relied),
                    Some(deadline) => match self.publications.wait(deadline.left()) {
                        Err(gaspi::Error::Timeout) => return Ok(relied),
                        other => other?,
                    },
                }
            }
            let signal = Notification {
                id: self.layout.freed(self.me),
                value: encode_freed(state.freed),
            };
            for (index, target) in targets.iter().enumerate() {
                if due(state, index) {
                    // A member that dropped its team (its segment gone, here or by now) is
                    // over with its collectives: it needs no count any more, ever.
                    state.told[index] = match target {
                        Ok(target) => match self.publications.notify(target, signal) {
                            Err(gaspi::Error::UnknownSegment { .. }) => u64::MAX,
                            other => other.map(|()| state.freed)?,
                        },
                        Err(_) => u64::MAX,
                    };
                }
            }
        }
        if periodic {
            state.published = state.freed;
        }
        if full {
            // Who sends keeps being told until it has not sent for a while: a sender whose
            // signal of this round came after this publication still counts.
            for heard in &self.heard {
                heard.store(false, Ordering::Relaxed);
            }
        }
        Ok(relied)
    }

    /// Advances every run that can move as far as it goes — on each lane the run holding
    /// it, and the next ones as the lane is given up — marking the state changed if
    /// anything did, and noting the runs that ended. Runs waiting for a lane are not looked
    /// at, so a pass costs the same with any number of collectives in flight.
    fn pass(&self, state: &mut State<'c>, owners: &mut [Owner<'_>], index: &OwnerIndex) {
        let mut changed = false;
        for lane in 0..self.layout.lanes as usize {
            loop {
                let seq = match state.lanes[lane] {
                    Some(seq) => seq,
                    None => {
                        // Runs on a lane start in sequence order.
                        let Some(seq) = Self::next_queued(state, lane) else {
                            break;
                        };
                        state.queued[lane].pop_front();
                        if let Some(run) = state.runs.get_mut(seq) {
                            run.started = true;
                        }
                        state.lanes[lane] = Some(seq);
                        changed = true;
                        seq
                    }
                };
                let Some(run) = state.runs.get_mut(seq) else {
                    state.lanes[lane] = None;
                    continue;
                };
                let was_over = run.complete || run.failed.is_some();
                let mut owner = index.find(seq).map(|i| &mut owners[i]);
                match run.advance(self, owner.as_deref_mut()) {
                    Ok(c) => changed |= c,
                    Err(f) => {
                        if let Failure::Rank(..) = f {
                            state.dead = Some(f.clone());
                        }
                        run.failed = Some(f);
                        changed = true;
                    }
                }
                let over = run.complete || run.failed.is_some();
                if over && !was_over {
                    state.ended.push(seq);
                }
                if over && run.orphan {
                    self.release(state, seq);
                    changed = true;
                    continue;
                }
                if over && Self::next_queued(state, lane).is_some() {
                    // A later run waits for the lane: deliver the output if this call holds
                    // the buffers, else read it out of the stage.
                    if let Some(run) = state.runs.get_mut(seq) {
                        if run.complete {
                            let kept = match owner {
                                Some(owner) => run.deliver(self, &mut owner.dst),
                                None => run.keep(self),
                            };
                            if let Err(f) = kept {
                                run.failed = Some(f);
                            }
                        }
                        run.off_stage = true;
                    }
                    state.lanes[lane] = None;
                    self.advance_freed(state);
                    changed = true;
                    continue;
                }
                break;
            }
        }
        state.changed |= changed;
        if let Err(f @ Failure::Rank(..)) = self.publish(state, None, false) {
            state.dead = Some(f);
        }
    }

    /// Passes over the runs, unless a thread holds the state (it moves them on itself), as
    /// for an orphan: whether a run is under way (not over, or not started).
    fn move_on(&self) -> bool {
        let mut state = match self.state.try_lock() {
            Ok(state) => state,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return false,
        };
        // Runs initiated but never waited for may wait for the members' segments, which
        // only a call that may wait resolves: looked up here without waiting, and again at
        // the next look while the lookups are under way.
        if self.connect(Timeout::Test.deadline()).is_err() {
            return state.next > 0;
        }
        self.pass(&mut state, &mut [], &OwnerIndex::none());
        // No thread waits in this team to tell the senders of its runs what they need of this
        // member's stage before it sleeps (see `drive`): the call about to sleep in another
        // team tells them, or an eager put of this team waits for a count while its sender
        // waits for this member in that other team. A publication still on its way is not
        // waited for: the next look sends this one.
        if !state.watcher {
            let explicit = state.trusting.is_some_and(Deadline::expired);
            match self.publish(&mut state, Some(Timeout::Test.deadline()), explicit) {
                Ok(true) => _ = state.trusting.get_or_insert_with(|| TRUST.deadline()),
                Ok(false) => state.trusting = None,
                // Nobody to report it to: the next call on this team meets it again.
                Err(_) => {}
            }
        }
        // A thread asleep in this team wakes on its notifications and moves it on itself.
        let under_way = !state.watcher
            && (state.holders().any(|r| !r.complete && r.failed.is_none())
                || state.queued.iter().any(|q| !q.is_empty()));
        // Nobody to report a failure to: the runs keep theirs.
        let _ = self.tell(state);
        under_way
    }

    /// The next run waiting for `lane`, dropping from its queue the runs removed meanwhile.
    /// Inlined for its common case, an empty queue, which every pass meets on every idle
    /// lane.
    #[inline]
    fn next_queued(state: &mut State<'c>, lane: usize) -> Option<u64> {
        if state.queued[lane].is_empty() {
            return None;
        }
        Self::next_queued_slow(state, lane)
    }

    /// [`next_queued`](Self::next_queued) past its common case.
    #[inline(never)]
    fn next_queued_slow(state: &mut State<'c>, lane: usize) -> Option<u64> {
        while let Some(&seq) = state.queued[lane].front() {
            if state.runs.get(seq).is_some() {
                return Some(seq);
            }
            state.queued[lane].pop_front();
        }
        None
    }

    /// Runs `decide` under the lock until it is done, sleeping between tries on what the
    /// runs wait for (see the [module documentation](self)). `timeout` counts from the
    /// first time the call has to wait (`deadline`, if the call waited before, as
    /// [`wait_alone`](Self::wait_alone) may have): a call done at once never reads the clock.
    fn drive<T>(
        &self,
        timeout: Timeout,
        mut deadline: Option<Deadline>,
        mut decide: impl FnMut(&Self, &mut State<'c>) -> Next<T>,
    ) -> Result<T> {
        if self.targets.get().is_none() {
            self.connect(*deadline.get_or_insert_with(|| timeout.deadline()))?;
        }
        let mut progressed = false;
        let mut others_poll = OTHERS_POLL;
        loop {
            let mut state = self.state();
            if let Next::Done(value) = decide(self, &mut state) {
                state.trusting = None;
                self.tell(state)?;
                return Ok(value);
            }
            if state.changed {
                state.trusting = None;
                others_poll = OTHERS_POLL;
                // What this pass did may be what another thread sleeps on: tell it, and look
                // again before sleeping.
                self.tell(state)?;
                continue;
            }
            // A notification through the fabric is delivered when somebody reads the completion
            // queue, which the waiting below does only after its machinery: read it once first.
            // A call that may not wait (a test) never gets to that waiting, so it reads it on
            // a team whose members all go direct too: a member's put may still come through
            // the fabric (behind its earlier fabric operations towards this rank, say), and a
            // loop of tests with no progress thread would otherwise never see it.
            let polled = matches!(timeout, Timeout::Test | Timeout::Millis(0));
            if (self.fabric || polled)
                && !std::mem::replace(&mut progressed, true)
                && self.ctx.progress()
            {
                continue;
            }
            let deadline = *deadline.get_or_insert_with(|| timeout.deadline());
            // Whoever waits for this member's stage in a run it holds must hear of it before
            // this member waits (or returns to a caller who may not call again for a while).
            // A count a signal carried serves only once its receiver took the signal, which
            // it may not do before its own put goes (a signal of a later run, or one its
            // schedule orders after that put): a wait that trusted carried counts for
            // `TRUST` without anything changing, in this call or those before it, tells them
            // outright.
            let explicit = state.trusting.is_some_and(Deadline::expired);
            match self.publish(&mut state, Some(deadline), explicit)? {
                true => _ = state.trusting.get_or_insert_with(|| TRUST.deadline()),
                false => state.trusting = None,
            }
            let left = deadline.remaining();
            if left.is_some_and(|left| left.is_zero()) {
                return Err(gaspi::Error::Timeout.into());
            }
            // Back in time to tell them outright if it comes to that, unless the call's own
            // deadline comes first.
            let until = state
                .trusting
                .map_or(deadline, |trust| trust.earlier(deadline));
            // Back soon, too, while another team's runs are under way that nobody else moves
            // on (see "Other teams").
            let until = match self.engines.move_others(self) {
                true if until.remaining().is_none_or(|left| left > others_poll) => {
                    let slice = Timeout::from(others_poll).deadline();
                    others_poll = (others_poll * 2).min(OTHERS_POLL_MAX);
                    slice
                }
                _ => until,
            };
            // Local completions come first: no notification tells of them, and a run that
            // only waits for its puts to complete may hold the lane that the run a partner
            // waits for needs, so sleeping on notifications could wait for ever.
            if let Some(run) = state.holders().find(|r| r.flushing()) {
                // As the runtime said it: a timeout stays one (call again), not a failure.
                run.flush(deadline.left())?;
                continue;
            }
            let mut awaited = std::mem::take(&mut state.awaited);
            awaited.clear();
            for run in state.holders() {
                run.awaited(self, &mut awaited);
            }
            if awaited.is_empty() || state.watcher {
                state.awaited = awaited;
                // Nothing to hear from anyone: only another thread's progress (a lane given
                // up, a source copied) can move the runs on; or another thread watches.
                let s = self.sleep(state, until);
                drop(s);
                continue;
            }
            state.watcher = true;
            self.seg.notify_reset(self.layout.wake())?;
            drop(state);
            let outcome = self.watch(&mut awaited, until);
            let mut state = self.state();
            state.awaited = awaited;
            state.watcher = false;
            if let Err(Error::Gaspi(gaspi::Error::RankFailed { rank, reason })) = &outcome {
                state.dead = Some(Failure::Rank(*rank, reason.clone()));
            }
            let sleepers = state.sleepers > 0;
            drop(state);
            if sleepers {
                self.changes.notify_all();
            }
            match outcome {
                Err(Error::Gaspi(gaspi::Error::RankFailed { .. })) | Ok(()) => {}
                Err(Error::Gaspi(gaspi::Error::Timeout)) => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Sleeps on the condition variable until another thread's change or the deadline.
    fn sleep<'g>(
        &self,
        mut state: MutexGuard<'g, State<'c>>,
        deadline: Deadline,
    ) -> MutexGuard<'g, State<'c>> {
        if deadline.is_test() {
            return state;
        }
        state.sleepers += 1;
        let mut state = crate::wait_changes(&self.changes, state, deadline);
        state.sleepers -= 1;
        state
    }

    /// Waits, as the watcher, for one of `ids` (which it sorts, adding the wake-up) or the
    /// wake-up, or until a member dies:
    /// watching only the senders awaited would miss a death that stopped a live member
    /// short of the data this one waits for (its run failed), which nobody would report.
    fn watch(&self, ids: &mut Vec<NotificationId>, deadline: Deadline) -> Result<()> {
        ids.push(self.layout.wake());
        ids.sort_unstable();
        ids.dedup();
        let mut ranges: SmallVec<[_; 4]> = SmallVec::new();
        let mut i = 0;
        while i < ids.len() {
            let mut num = 1;
            while i + num < ids.len() && ids[i + num] == ids[i] + num as u32 {
                num += 1;
            }
            ranges.push(self.seg.range(ids[i], num as u32));
            i += num;
        }
        self.ctx.notify_wait_any(&ranges, &self.others, deadline)?;
        Ok(())
    }

    /// Releases the lock, telling the other threads if the runs changed under it.
    fn tell(&self, mut state: MutexGuard<'_, State<'c>>) -> Result<()> {
        if !std::mem::take(&mut state.changed) {
            return Ok(());
        }
        let (watcher, sleepers) = (state.watcher, state.sleepers > 0);
        drop(state);
        if sleepers {
            self.changes.notify_all();
        }
        if watcher {
            if self.wakes.outstanding() > 0 {
                self.wakes.test()?;
            }
            // A watcher only watches once the segments are resolved.
            let Some(me) = self.target(self.me)? else {
                return Ok(());
            };
            self.wakes.notify(
                me,
                Notification {
                    id: self.layout.wake(),
                    value: 1,
                },
            )?;
        }
        Ok(())
    }
}

impl Transport for Engine<'_> {
    fn put(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        put: Transfer,
        signal: Notification,
    ) -> std::result::Result<bool, Failure> {
        let Some(target) = self.target(put.to)? else {
            return Ok(false);
        };
        let base = self.layout.offset(seq);
        let (signal, carried) = self.carrying(seq, signal);
        batch
            .write_notify(
                &self.seg,
                base + put.from,
                target,
                base + put.into,
                put.len,
                signal,
            )
            .map_err(Failure::from)?;
        self.carried_to(put.to, seq, carried);
        Ok(true)
    }

    fn signal(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        to: u32,
        signal: Notification,
    ) -> std::result::Result<bool, Failure> {
        let target = match self.target(to) {
            Ok(Some(target)) => target,
            Ok(None) => return Ok(false),
            // A member that dropped its team is over with its collectives and waits for no
            // signal (a credit its sender skipped, in an eager run): as good as taken.
            Err(Failure::Segment(..)) => return Ok(true),
            Err(f) => return Err(f),
        };
        let (signal, carried) = self.carrying(seq, signal);
        match batch.notify(target, signal) {
            Err(gaspi::Error::UnknownSegment { .. }) => return Ok(true),
            other => other.map_err(Failure::from)?,
        }
        self.carried_to(to, seq, carried);
        Ok(true)
    }

    fn take(&self, id: NotificationId) -> std::result::Result<u32, Failure> {
        self.seg.notify_reset(id).map_err(Failure::from)
    }

    fn read(&self, seq: u64, at: u64, buf: &mut [u8]) -> std::result::Result<(), Failure> {
        self.seg
            .read(self.layout.offset(seq) + at, buf)
            .map_err(Failure::from)
    }

    fn write(&self, seq: u64, at: u64, data: &[u8]) -> std::result::Result<(), Failure> {
        self.seg
            .write(self.layout.offset(seq) + at, data)
            .map_err(Failure::from)
    }

    fn store(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        to: u32,
        at: u64,
        data: &[u8],
        signal: Option<Notification>,
    ) -> std::result::Result<Stored, Failure> {
        let Some(target) = self.target(to)? else {
            return Ok(Stored::NotYet);
        };
        let at = self.layout.offset(seq) + at;
        let (stored, carried) = match signal {
            None => (batch.write_from(data, target, at), None),
            Some(signal) => {
                let (signal, carried) = self.carrying(seq, signal);
                (batch.write_notify_from(data, target, at, signal), carried)
            }
        };
        match stored {
            Ok(()) => {
                self.carried_to(to, seq, carried);
                Ok(Stored::Done)
            }
            Err(gaspi::Error::Unsupported(_)) => Ok(Stored::Refused),
            Err(e) => Err(e.into()),
        }
    }

    fn id(&self, seq: u64, signal: u32) -> NotificationId {
        self.layout.id(seq, signal)
    }

    fn freed(&self, to: u32, needs: u64, learn: bool) -> std::result::Result<bool, Failure> {
        let known = &self.known[to as usize];
        if known.load(Ordering::Relaxed) >= needs {
            return Ok(true);
        }
        if !learn {
            return Ok(false);
        }
        let value = self.seg.notify_reset(self.layout.freed(to))?;
        if value != 0 {
            known.fetch_max(decode_freed(needs, value), Ordering::Relaxed);
        }
        Ok(known.load(Ordering::Relaxed) >= needs)
    }

    fn publication(&self, from: u32) -> NotificationId {
        self.layout.freed(from)
    }

    fn heard(&self, from: u32, freed: Option<u64>) {
        if let Some(heard) = self.heard.get(from as usize) {
            heard.store(true, Ordering::Relaxed);
        }
        if let (Some(known), Some(freed)) = (self.known.get(from as usize), freed) {
            known.fetch_max(freed, Ordering::Relaxed);
        }
    }

    fn rank(&self, index: u32) -> Rank {
        self.ranks[index as usize]
    }

    fn context(&self) -> &Context {
        self.ctx
    }
}

/// How long a wait trusts that its senders took the counts its signals carried before it
/// tells them its `freed` outright (see [`Engine::drive`]).
const TRUST: Timeout = Timeout::Millis(1);

/// Every this many periodic publications, a member tells every other member, not only
/// those it heard from (see [`Engine::publish`]): a member that sends to it only now and
/// then, or that disagrees with it about a root, learns of its stage before it waits.
const FULL_ROUNDS: u64 = 4;

/// Publications count modulo this, and add 1: a notification value is never 0.
const FREED_MODULUS: u64 = u32::MAX as u64;

/// The notification value that publishes `freed`.
fn encode_freed(freed: u64) -> u32 {
    // The remainder is below u32::MAX, so the cast keeps every bit.
    (freed % FREED_MODULUS) as u32 + 1
}

/// The count `value` publishes: of those it may stand for, the nearest to `near`, a run
/// of the member that reads it. Exact while the two members are fewer than 2^31 runs
/// apart, which flow control keeps them for every run that moves data: only billions of
/// empty collectives on one member while another stands still could break it.
fn decode_freed(near: u64, value: u32) -> u64 {
    let residue = u64::from(value - 1);
    let base = near - near % FREED_MODULUS + residue;
    [
        base.checked_sub(FREED_MODULUS),
        Some(base),
        base.checked_add(FREED_MODULUS),
    ]
    .into_iter()
    .flatten()
    .min_by_key(|&f| f.abs_diff(near))
    .unwrap_or(base)
}

/// The low bits of a run's notification values, which carry how far its sender had freed
/// its stage when it sent (see "Eager runs"): the run's sequence number minus the sender's
/// `freed`, or [`LAG_UNKNOWN`] when that is larger. The other bits tell the run and the
/// call's arguments apart.
const LAG_BITS: u32 = 4;

/// A lag too large to carry: the notification says nothing of its sender's `freed`.
const LAG_UNKNOWN: u32 = (1 << LAG_BITS) - 1;

/// The value of run `seq`'s notifications, its lag bits clear: never 0, whatever lag is
/// added to it.
fn value(seq: u64, signature: u64) -> u32 {
    let mut z = seq
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(signature);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^= z >> 31;
    // The remainder is below u32::MAX >> LAG_BITS, so the cast and the shift keep every bit.
    ((z % u64::from(u32::MAX >> LAG_BITS)) as u32 + 1) << LAG_BITS
}

/// `value`, a run's, for a signal that also carries `check` (see [`Check`]): another value
/// for every check but [`NO_CHECK`], its lag bits clear and never 0, as the run's.
fn checked(value: u32, check: Check) -> u32 {
    if check == NO_CHECK {
        return value;
    }
    self::value(u64::from(value >> LAG_BITS), check)
}

/// `value`, of run `seq`, carrying `freed`, the sender's, and the count it carries: the
/// largest the receiver can be sure of (`freed` itself, unless it lags too far behind).
fn carry(value: u32, seq: u64, freed: u64) -> (u32, Option<u64>) {
    match seq.saturating_sub(freed) {
        // Below LAG_UNKNOWN: the cast keeps every bit.
        lag if lag < u64::from(LAG_UNKNOWN) => (value | lag as u32, Some(seq - lag)),
        _ => (value | LAG_UNKNOWN, None),
    }
}

/// What notification value `got` of run `seq`, whose value is `value`, says: `None` when it
/// is another run's or another call's, else the `freed` its sender carried, if any.
fn read_value(got: u32, value: u32, seq: u64) -> Option<Option<u64>> {
    if got >> LAG_BITS != value >> LAG_BITS {
        return None;
    }
    Some(match got & LAG_UNKNOWN {
        LAG_UNKNOWN => None,
        lag => seq.checked_sub(u64::from(lag)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run kept while many later ones come and go keeps an entry, not a slot per later
    /// run, and stays found; the others are found until removed, in any order.
    #[test]
    fn a_kept_run_does_not_hold_a_slot_for_every_later_one() {
        let kept = |seq: u64| seq == 7 || seq.is_multiple_of(3);
        let last = 7 + 10 * WINDOW as u64;
        let mut runs: Runs<u64> = Runs::default();
        runs.insert(7, Box::new(7));
        for seq in 8..=last {
            runs.insert(seq, Box::new(seq));
            assert_eq!(runs.get(seq - 1).copied(), Some(seq - 1));
            if !kept(seq - 1) {
                assert_eq!(runs.remove(seq - 1).map(|run| *run), Some(seq - 1));
            }
            assert!(
                runs.slots.len() <= WINDOW,
                "seq {seq}: {} slots",
                runs.slots.len()
            );
            assert_eq!(runs.get(7).copied(), Some(7));
        }
        assert!(runs.capacity() < (last as usize - 7) / 3 + WINDOW);
        for seq in (7..last).filter(|&seq| kept(seq)) {
            assert_eq!(runs.get_mut(seq).map(|run| *run), Some(seq), "run {seq}");
        }
        for seq in (7..last).filter(|&seq| !kept(seq)) {
            assert_eq!(runs.get(seq), None, "run {seq} was removed");
        }
        for seq in (7..last).rev().filter(|&seq| kept(seq)) {
            assert_eq!(runs.remove(seq).map(|run| *run), Some(seq), "run {seq}");
            assert_eq!(runs.remove(seq), None);
        }
        assert_eq!(runs.remove(last).map(|run| *run), Some(last));
        assert_eq!(runs.capacity(), 0);
    }

    #[test]
    fn a_published_count_is_read_back_near_the_reader() {
        let m = FREED_MODULUS;
        for freed in [
            0,
            1,
            7,
            m - 2,
            m - 1,
            m,
            m + 1,
            3 * m + 5,
            u64::from(u32::MAX) << 8,
        ] {
            let value = encode_freed(freed);
            assert_ne!(value, 0);
            for near in [
                freed,
                freed + 64,
                freed.saturating_sub(64),
                freed + (1 << 30),
            ] {
                assert_eq!(
                    decode_freed(near, value),
                    freed,
                    "freed {freed}, near {near}"
                );
            }
        }
    }

    #[test]
    fn a_signal_carries_its_senders_count_and_tells_its_run_apart() {
        for seq in [0, 1, 14, 15, 16, 1000, u64::from(u32::MAX) + 7] {
            let own = value(seq, 0xfeed);
            assert_ne!(own, 0);
            assert_eq!(own & LAG_UNKNOWN, 0, "seq {seq}");
            for lag in [0, 1, 14, 15, 16, 1 << 40] {
                let freed = seq.saturating_sub(lag);
                let (got, carried) = carry(own, seq, freed);
                assert_ne!(got, 0);
                let expected = (seq - freed < u64::from(LAG_UNKNOWN)).then_some(freed);
                assert_eq!(carried, expected, "seq {seq}, freed {freed}");
                assert_eq!(read_value(got, own, seq), Some(expected));
                // Another run's value, or another call's, is refused whatever it carries.
                let next = value(seq + 1, 0xfeed);
                assert_eq!(read_value(got, next, seq + 1), None);
                assert_eq!(read_value(got, value(seq, 0xbeef), seq), None);
            }
        }
        // A count ahead of the run (never sent) is carried as the run itself: a lower bound.
        assert_eq!(carry(value(5, 1), 5, 9).1, Some(5));
    }

    #[test]
    fn a_checked_signal_tells_its_check_apart_and_still_carries_a_count() {
        for seq in [0, 1, 16, 1000] {
            let own = value(seq, 0xfeed);
            assert_eq!(checked(own, NO_CHECK), own);
            let sizes = [1, 2, 8, 16, 4096, 1 << 44];
            for size in sizes {
                let mine = checked(own, size);
                assert_ne!(mine, 0);
                assert_eq!(mine & LAG_UNKNOWN, 0, "seq {seq}, size {size}");
                let (got, carried) = carry(mine, seq, seq);
                assert_eq!(read_value(got, mine, seq), Some(carried));
                // Neither the run's own value nor another size's takes it.
                assert_eq!(read_value(got, own, seq), None);
                for other in sizes.into_iter().filter(|&o| o != size) {
                    assert_eq!(read_value(got, checked(own, other), seq), None);
                }
            }
        }
    }

    #[test]
    fn a_gone_segment_is_reported_as_the_runtime_said() {
        let gone = gaspi::Error::UnknownSegment {
            rank: 3,
            segment: 7,
        };
        let failure = Failure::from(gone);
        let kept = failure.clone();
        for f in [failure, kept] {
            assert!(matches!(
                Error::from(f),
                Error::Gaspi(gaspi::Error::UnknownSegment {
                    rank: 3,
                    segment: 7
                })
            ));
        }
    }

    #[test]
    fn a_layout_too_large_to_count_is_refused() {
        // Bytes beyond u64, notification ids beyond u32: refused, never wrapped.
        assert!(Layout::new(4, u32::MAX, u64::MAX / 2).is_none());
        assert!(Layout::new(4, 1 << 30, 1).is_none());
        assert!(Layout::new(1 << 30, 1, 1).is_none());
        let fits = Layout::new(4, 1 << 10, 1 << 20).expect("fits");
        assert_eq!(fits.bytes(), 1 << 30);
    }

    #[test]
    fn publications_have_their_own_notifications() {
        for (n, lanes) in [(1, 1), (2, 4), (8, 4), (33, 2)] {
            let layout = Layout::new(n, lanes, 1 << 10).expect("a small layout");
            let last_signal = layout.id(2 * u64::from(lanes) - 1, layout.bound - 1);
            assert!(last_signal < layout.wake());
            assert_eq!(layout.freed(0), layout.wake() + 1);
            assert_eq!(layout.freed(n - 1), layout.ids() - 1);
        }
    }
}
