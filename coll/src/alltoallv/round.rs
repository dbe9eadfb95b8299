//! Rounds: the exchange state of an [`Alltoallv`] (the round running, the credits owed, the
//! sources' latest blocks), [`Round`], and the calls of both forms on it.
//!
//! Threads share the state under one lock, held only to decide; transfers are posted and
//! waits made outside it. An arrival is handed out by whoever atomically takes its
//! notification. A thread that takes a notification whose value is not the round's finds a
//! source's block of a later round (the source got its credit and wrote again while the
//! thread waited): it keeps it aside for that round, since the table no longer holds it.
//!
//! Small blocks (see the `layout` module) come in two slots per source, by round parity: a
//! block of round `r` waits only for the credit of the source's block of round `r - 2` there
//! (and a larger block, which lands in the user's area, for both credits owed). The slot's
//! bytes are copied into the receive area when the block is handed out, and a source's block
//! is handed out only once its previous block there was reset: the user's area never
//! changes before its reset, however far ahead the source runs.

use rustc_hash::FxHashSet as HashSet;
use smallvec::SmallVec;

use gaspi::{Context, Deadline, Notification, NotificationId, Rank, SegmentId, Target, Timeout};

use super::layout::{is_small, parity, round_tag, tag_parity};
use super::pending::Pending;
use super::plan::{area_outside, receive_area, Plan, PlanData};
use super::Alltoallv;
use crate::error::{Error, Result};

use std::cell::Cell;
use std::sync::Arc;
use std::time::Duration;

/// How long a watcher sleeps at a time while a block waits for its target's lookup (a
/// receive segment made after the discovery): a lookup is a round trip, and its answer is no
/// notification of the control table.
const LOOKUP_POLL: Duration = Duration::from_millis(1);

/// What a wait watches: the notifications of the sources and credits awaited, with their
/// senders. Up to 16 (8 sources and 8 credits) are collected on the stack: a round at small
/// sizes may wait for each arrival, and each wait allocated five vectors.
type Awaited = SmallVec<[(NotificationId, Rank); 16]>;

/// A call's timeout, fixed as a deadline only when the call first has to wait, as the
/// runtime's waits count a [`Timeout`]: a call whose arrival, credits and sends are already
/// there reads no clock. Fixed at the start of every call, it cost a reading per call and one
/// more in the call that ends the round, about 4% of the instructions of a round of 8 B
/// blocks at 4 ranks.
pub(super) struct Budget {
    timeout: Timeout,
    deadline: Cell<Option<Deadline>>,
}

impl Budget {
    pub(super) fn new(timeout: Timeout) -> Budget {
        Budget {
            timeout,
            deadline: Cell::new(None),
        }
    }

    /// Whether the call may not wait at all ([`Timeout::Test`]).
    fn is_test(&self) -> bool {
        matches!(self.timeout, Timeout::Test | Timeout::Millis(0))
    }

    /// The deadline, fixed now if this is the call's first wait.
    fn deadline(&self) -> Deadline {
        if let Some(deadline) = self.deadline.get() {
            return deadline;
        }
        let deadline = self.timeout.deadline();
        self.deadline.set(Some(deadline));
        deadline
    }

    /// What is left for the next wait: the whole timeout while none has waited yet.
    fn left(&self) -> Timeout {
        self.deadline.get().map_or(self.timeout, Deadline::left)
    }
}

/// What a call of the proposal's form reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    /// The block of this source arrived and is visible; reset the source when done with it.
    Arrived(Rank),
    /// Every own block completed and every source was reported (or, for a call with
    /// [`Timeout::Block`], arrived): the round is over.
    Complete,
}

/// The exchange state of an alltoallv.
#[derive(Default)]
pub(super) struct Exchange {
    /// Rounds begun so far.
    rounds: u64,
    pub(super) running: Option<Running>,
    /// The last round's source segment and the receive segment of the last plan run, whose
    /// sizes every round checks: most rounds name the same segments.
    source: KeptSize,
    receive: KeptSize,
    /// Per destination, by member index, and round parity, the tag of this rank's last block
    /// there whose credit has not been taken (0: none owed). An array, not a map by rank:
    /// every decision that clears blocks asks it for each waiting one.
    owed: Vec<[u32; 2]>,
    /// Each source's latest block, by member index: its tag, and whether it was reset. An
    /// array, not a map by rank: every look for an arrival asks it for each pending source.
    arrivals: Vec<Option<(u32, bool)>>,
    /// Blocks taken from the table and not handed out (before their round began here, of
    /// another plan's round, or whose copy failed).
    early: Kept,
    /// The sources of every plan made so far.
    pub(super) sources: HashSet<Rank>,
    /// Whether a thread sleeps on the round's notifications (see `Alltoallv::drive`).
    watcher: bool,
    /// Threads sleeping on the condition variable.
    sleepers: u32,
    /// Sets of blocks marked posted whose writes a thread is still putting into the batch,
    /// outside the lock: until they are in it, waiting for the batch does not wait for them.
    posting: u32,
    /// A `finish` waits for `posting` to drop to 0, and must be told when it does.
    finishing: bool,
}

impl Exchange {
    /// The state of an alltoallv over `members` members, before its first round.
    pub(super) fn new(members: usize) -> Exchange {
        Exchange {
            arrivals: vec![None; members],
            owed: vec![[0; 2]; members],
            early: Kept::new(members),
            ..Exchange::default()
        }
    }

    /// Who must be told of a change made now.
    fn listeners(&self) -> Listeners {
        Listeners {
            watcher: self.watcher,
            sleepers: self.sleepers > 0,
        }
    }
}

/// The size of one of this rank's user segments, kept between rounds as a [`Target`] of it,
/// so that a round finds it with the loads of [`Context::target_is_current`] instead of a
/// lookup by id (about 75 instructions, and a round made two). The segment is still named
/// by id: one deleted, or deleted and made again, since is looked up again, as the target
/// stops being current with any deletion of this rank's segments. A target holds neither
/// memory nor a handle: the user's deletion of the segment goes on as without it.
#[derive(Default)]
struct KeptSize(Option<(SegmentId, Target)>);

impl KeptSize {
    /// The size of this rank's segment `id`, looked up unless the kept target is of `id`
    /// and current.
    fn size(&mut self, ctx: &Context, id: SegmentId) -> Result<u64> {
        match &self.0 {
            Some((kept, target)) if *kept == id && ctx.target_is_current(target) => {
                Ok(target.len())
            }
            _ => {
                // What was kept is not segment `id` as it is now: forget it even when the
                // lookup fails. This rank's own segments resolve here, without waiting.
                self.0 = None;
                let target = ctx.target(ctx.rank(), id, Timeout::Test)?;
                self.0 = Some((id, target));
                Ok(target.len())
            }
        }
    }
}

/// Blocks taken from the table and not handed out: the tag, by source's member index and
/// round parity (0: none). An array, not a map by source, as each look at them asks it for
/// every pending source.
#[derive(Default)]
struct Kept {
    tags: Vec<[u32; 2]>,
    /// How many tags are kept: while none is, a look finds nothing without walking them.
    count: usize,
}

impl Kept {
    fn new(members: usize) -> Kept {
        Kept {
            tags: vec![[0; 2]; members],
            count: 0,
        }
    }

    fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Keeps the block of member `member` of round parity `parity`, tagged `value` (a
    /// block's notification value, never 0), in place of the one kept there, if any.
    fn keep(&mut self, member: u32, parity: u32, value: u32) {
        let slot = self.tags.get_mut(member as usize);
        if let Some(tag) = slot.and_then(|tags| tags.get_mut(parity as usize)) {
            self.count = self.count + usize::from(value != 0) - usize::from(*tag != 0);
            *tag = value;
        }
    }

    /// The block of member `member` of round parity `parity`, if one is kept, no more kept.
    fn take(&mut self, member: u32, parity: u32) -> Option<u32> {
        let tag = self
            .tags
            .get_mut(member as usize)?
            .get_mut(parity as usize)?;
        let value = std::mem::take(tag);
        (value != 0).then(|| {
            self.count -= 1;
            value
        })
    }
}

/// Who must be told of a change: waking nobody costs no system call.
#[derive(Debug, Clone, Copy)]
struct Listeners {
    watcher: bool,
    sleepers: bool,
}

/// The round running.
pub(super) struct Running {
    number: u64,
    tag: u32,
    /// The round's [`parity`].
    parity: u32,
    plan: Arc<PlanData>,
    source: SegmentId,
    sends: SmallVec<[Send; 8]>,
    /// Blocks in `sends` waiting for their credit or target: while none does, a decision
    /// clears nothing without looking at them.
    waiting: usize,
    /// The sources not handed out yet, by index in the plan: what a look for an arrival
    /// walks.
    pending: Pending,
}

/// A block of this rank in a round.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Send {
    NotSent,
    /// Waiting for the destination's credit; from this source offset.
    Waiting(u64),
    Posted,
}

/// A block cleared for posting: destination `index` of the plan, from `offset`. Its target
/// is the plan's (`PlanData::targets`), resolved before the block was cleared.
struct Post {
    index: usize,
    offset: u64,
}

/// One round of a plan, shared by any number of threads (the handle is `Sync`): see
/// [`Alltoallv::round`].
///
/// ```
/// # use gaspi::{Context, Timeout, GROUP_ALL};
/// # use gaspi_coll::{Alltoallv, Collectives};
/// # let ctx = Context::init()?;
/// # ctx.segment_create(0, 1 << 20, Timeout::Block)?; // blocks to send
/// # ctx.segment_create(1, 1 << 20, Timeout::Block)?; // blocks received
/// # let coll = Collectives::new(&ctx)?;
/// # let mut a2a = Alltoallv::new(&coll, GROUP_ALL, Timeout::Block)?;
/// # let plan = a2a.get_remote_offsets(1, 0, &[], Timeout::Block)?;
/// let t = Timeout::Millis(10_000);
/// let round = a2a.round(&plan, 0)?;
/// std::thread::scope(|s| {
///     for _ in 0..4 {
///         s.spawn(|| -> gaspi_coll::Result<()> {
///             while let Some(source) = round.next_arrival(t)? {
///                 // ... work on the block of `source` ...
///                 round.reset(source)?;
///             }
///             Ok(())
///         });
///     }
///     for (i, d) in plan.destinations().iter().enumerate() {
///         // ... pack the block for `d.rank` at offset 4096 * i of segment 0 ...
///         round.send(d.rank, 4096 * i as u64).expect("a destination of the plan");
///     }
/// });
/// round.finish(t)?;
/// # Ok::<(), gaspi_coll::Error>(())
/// ```
pub struct Round<'a> {
    a2a: &'a Alltoallv<'a>,
    number: u64,
}

impl std::fmt::Debug for Round<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Round")
            .field("number", &self.number)
            .finish()
    }
}

impl<'a> Round<'a> {
    pub(super) fn new(a2a: &'a Alltoallv<'a>, number: u64) -> Round<'a> {
        Round { a2a, number }
    }

    /// The round's number on its alltoallv (1 for the first).
    pub fn number(&self) -> u64 {
        self.number
    }

    /// Sends the block for destination `target` from `source_offset` of the round's source
    /// segment (its size is the plan's): at once when `target` has reset this rank's earlier
    /// blocks there (for a block of at most 1 KiB, only the one of two rounds before), else as
    /// soon as it does — any later call on the round posts it. Never blocks, so a sender can
    /// post each block the moment it is packed.
    ///
    /// A block whose destination cannot be reached yet (its receive segment, made after the
    /// discovery, is not there, or is gone) is accepted and stays waiting: the call reports
    /// the lookup's error, once every other block it could post went out, and so does each
    /// later call on the round that looks again, until the segment is there and the block
    /// goes.
    ///
    /// # Errors
    /// [`Error::UnknownDestination`]; [`Error::AlreadySent`]; [`Error::RoundEnded`];
    /// [`Error::OutOfStep`] when the destination's credit is for another block; from the
    /// runtime: [`gaspi::Error::OutOfBounds`] when the block leaves the source segment,
    /// [`gaspi::Error::UnknownSegment`] (see above), [`gaspi::Error::RankFailed`],
    /// [`gaspi::Error::BatchFull`].
    pub fn send(&self, target: Rank, source_offset: u64) -> Result<()> {
        self.a2a.send(self.number, target, source_offset)
    }

    /// Sends every block: `source_offsets[i]` for `plan.destinations()[i]`, as
    /// [`send`](Self::send) does each.
    ///
    /// # Errors
    /// [`Error::SourceOffsets`] when there are not as many offsets as destinations; as for
    /// [`send`](Self::send).
    pub fn send_all(&self, source_offsets: &[u64]) -> Result<()> {
        self.a2a.send_all(self.number, source_offsets)
    }

    /// The next source whose block arrived, handed to exactly one caller; `None` once every
    /// source of the round was handed out (or the round ended). The block is visible in the
    /// receive segment at the source's offset in the plan. Meanwhile, posts the blocks whose
    /// credits came back.
    ///
    /// # Errors
    /// [`gaspi::Error::Timeout`] (call again); [`gaspi::Error::RankFailed`] naming a dead
    /// source or a dead destination this rank waits to send to; [`Error::OutOfStep`] when a
    /// source is in a round of another plan (its block stays kept, and every later call of
    /// the round names it again); [`gaspi::Error::UnknownSegment`] (or
    /// [`gaspi::Error::OutOfBounds`]) naming the plan's receive segment when a block of at
    /// most 1 KiB cannot be copied into it (deleted during the round, or made again too
    /// small): the block stays kept, and a call made again hands it out once the segment can
    /// hold it.
    pub fn next_arrival(&self, timeout: Timeout) -> Result<Option<Rank>> {
        self.a2a.next_arrival(self.number, &Budget::new(timeout))
    }

    /// Resets `source`, as [`Alltoallv::alltoallv_reset`] does.
    ///
    /// # Errors
    /// As for [`Alltoallv::alltoallv_reset`].
    pub fn reset(&self, source: Rank) -> Result<()> {
        self.a2a.reset(&[source])
    }

    /// Waits until every own block was posted and completed locally, and every source
    /// arrived (those [`next_arrival`](Self::next_arrival) did not hand out are taken here,
    /// and still need a reset), then ends the round. Ending it twice is harmless.
    ///
    /// # Errors
    /// [`Error::Unsent`] when a destination's block was never sent (checked first; the
    /// round goes on); [`gaspi::Error::Timeout`] (call again); [`gaspi::Error::RankFailed`];
    /// as for [`next_arrival`](Self::next_arrival).
    pub fn finish(&self, timeout: Timeout) -> Result<()> {
        self.a2a.finish(self.number, &Budget::new(timeout))
    }
}

impl Alltoallv<'_> {
    /// Begins a round of `plan` from segment `source`, or joins the one running; returns its
    /// number.
    pub(super) fn begin(&self, plan: &Plan, source: SegmentId) -> Result<u64> {
        Ok(self.begin_with(plan, source, None)?.0)
    }

    /// Begins a round and sends every block, or joins the one running (sending nothing).
    pub(super) fn begin_all(
        &self,
        plan: &Plan,
        source: SegmentId,
        source_offsets: &[u64],
    ) -> Result<u64> {
        let (number, begun) = self.begin_with(plan, source, Some(source_offsets))?;
        if let Some((cleared, listeners)) = begun {
            let posted = cleared.map_or(Ok(()), |cleared| self.post(cleared));
            self.changed(listeners)?;
            posted?;
        }
        Ok(number)
    }

    /// Begins a round, its blocks waiting from `offsets` when given (checked here, so the
    /// round's first decision clears them under the same lock), or joins the one running:
    /// its number, and for a round begun with its blocks, what they cleared, to post.
    fn begin_with(
        &self,
        plan: &Plan,
        source: SegmentId,
        offsets: Option<&[u64]>,
    ) -> Result<(u64, Option<Begun>)> {
        let data = &plan.data;
        if data.owner != self.id {
            return Err(Error::ForeignPlan);
        }
        let mut ex = self.exchange();
        if let Some(run) = &ex.running {
            if Arc::ptr_eq(&run.plan, data) && run.source == source {
                return Ok((run.number, None));
            }
            return Err(Error::AlltoallvInProgress { group: self.group });
        }
        self.check_receive_area(&mut ex.receive, data)?;
        let size = ex.source.size(self.ctx, source)?;
        if let Some(offsets) = offsets {
            check_offsets(data, offsets)?;
            for (d, &offset) in data.destinations.iter().zip(offsets) {
                crate::check_range(self.ctx.rank(), source, size, offset, d.bytes)?;
            }
        }
        if !self.coll.begin_exchange(self.group_key) {
            return Err(Error::AlltoallvInProgress { group: self.group });
        }
        let ex = &mut *ex;
        ex.rounds += 1;
        let number = ex.rounds;
        let sends = match offsets {
            Some(offsets) => offsets
                .iter()
                .map(|&offset| Send::Waiting(offset))
                .collect(),
            None => SmallVec::from_elem(Send::NotSent, data.destinations.len()),
        };
        let run = ex.running.insert(Running {
            number,
            tag: round_tag(number, data.seq),
            parity: parity(number),
            plan: Arc::clone(data),
            source,
            sends,
            waiting: offsets.map_or(0, <[u64]>::len),
            pending: Pending::all(data.sources.len()),
        });
        if offsets.is_none() {
            return Ok((number, None));
        }
        let cleared = self.cleared(&mut ex.owed, &mut ex.posting, run);
        Ok((number, Some((cleared, ex.listeners()))))
    }

    /// This rank's receive segment exists and holds the plan's area: checked by the
    /// discovery where the segment existed then, and at every round (it may have been made
    /// after the discovery, or made again).
    fn check_receive_area(&self, receive: &mut KeptSize, plan: &PlanData) -> Result<()> {
        let size = receive.size(self.ctx, plan.segment)?;
        if plan.first_offset > size {
            let me = self.ctx.rank();
            return Err(area_outside(
                me,
                plan.segment,
                plan.first_offset,
                plan.required,
                size,
            ));
        }
        let (fits, available) = receive_area(size, plan.first_offset, plan.required);
        if !fits {
            return Err(Error::ReceiveAreaTooSmall {
                rank: self.ctx.rank(),
                segment: plan.segment,
                required: plan.required,
                available,
            });
        }
        Ok(())
    }

    /// Destination `index`'s block as a target, resolved now if the discovery could not
    /// (its receive segment was made after it): `None` while the lookup is under way.
    fn destination_target(&self, plan: &PlanData, index: usize) -> Result<Option<Target>> {
        if let Some(&target) = plan.targets[index].get() {
            return Ok(Some(target));
        }
        let d = &plan.destinations[index];
        let whole = match self.ctx.target(d.rank, d.segment, Timeout::Test) {
            Ok(whole) => whole,
            Err(e) if e.is_timeout() => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        let target = whole.range(d.offset, d.bytes)?;
        Ok(Some(*plan.targets[index].get_or_init(|| target)))
    }

    pub(super) fn send_all(&self, number: u64, source_offsets: &[u64]) -> Result<()> {
        self.send_blocks(number, |plan| {
            check_offsets(plan, source_offsets)?;
            Ok(source_offsets.iter().copied().enumerate().collect())
        })
    }

    /// Sends the block for `target` from `offset` in round `number`.
    pub(super) fn send(&self, number: u64, target: Rank, offset: u64) -> Result<()> {
        self.send_blocks(number, |plan| {
            let index = plan
                .destinations
                .iter()
                .position(|d| d.rank == target)
                .ok_or(Error::UnknownDestination { rank: target })?;
            Ok(vec![(index, offset)])
        })
    }

    /// Sends the blocks `blocks` picks (destination index, source offset) in round `number`:
    /// all of them, or none when one is refused.
    fn send_blocks(
        &self,
        number: u64,
        blocks: impl FnOnce(&PlanData) -> Result<Vec<(usize, u64)>>,
    ) -> Result<()> {
        let (cleared, listeners) = {
            let mut guard = self.exchange();
            let ex = &mut *guard;
            let run = running_mut(&mut ex.running, number)?;
            let blocks = blocks(&run.plan)?;
            let size = ex.source.size(self.ctx, run.source)?;
            for (n, &(index, offset)) in blocks.iter().enumerate() {
                let d = &run.plan.destinations[index];
                if run.sends[index] != Send::NotSent || blocks[..n].iter().any(|b| b.0 == index) {
                    return Err(Error::AlreadySent { rank: d.rank });
                }
                crate::check_range(self.ctx.rank(), run.source, size, offset, d.bytes)?;
            }
            for &(index, offset) in &blocks {
                run.sends[index] = Send::Waiting(offset);
            }
            run.waiting += blocks.len();
            (
                self.cleared(&mut ex.owed, &mut ex.posting, run),
                ex.listeners(),
            )
        };
        let posted = cleared.map_or(Ok(()), |cleared| self.post(cleared));
        // A block left waiting for its credit (or its target) adds to what the round waits
        // for: the thread asleep on the round's notifications must watch that credit too.
        self.changed(listeners)?;
        posted
    }

    /// The waiting blocks of `run` whose credits are here, marked posted (their credits are
    /// then owed anew), to be posted outside the lock by [`post`](Self::post), which every
    /// `Cleared` goes to: until then they count in `posting`.
    ///
    /// A block that fails here (its destination's segment is gone or was never made, the
    /// rank died) stays waiting, and the first such failure goes with the `Cleared` for
    /// `post` to report once the others are posted: failing at once would drop blocks
    /// already marked posted, whose credits were taken, and their destinations would wait
    /// for them for ever.
    ///
    /// `None` when no block waits: most decisions, which then move and post nothing.
    #[inline]
    fn cleared(
        &self,
        owed: &mut [[u32; 2]],
        posting: &mut u32,
        run: &mut Running,
    ) -> Option<Cleared> {
        (run.waiting > 0).then(|| self.clear_waiting(owed, posting, run))
    }

    /// [`cleared`](Self::cleared) for a round with waiting blocks.
    fn clear_waiting(
        &self,
        owed: &mut [[u32; 2]],
        posting: &mut u32,
        run: &mut Running,
    ) -> Cleared {
        let mut posts = Vec::with_capacity(run.waiting);
        let mut looking = false;
        let mut failed = None;
        for index in 0..run.sends.len() {
            let Send::Waiting(offset) = run.sends[index] else {
                continue;
            };
            // Before the credit is taken: a block whose target is not known yet keeps it.
            match self.destination_target(&run.plan, index) {
                Ok(Some(_)) => {}
                Ok(None) => {
                    looking = true;
                    continue;
                }
                Err(e) => {
                    failed.get_or_insert(e);
                    continue;
                }
            }
            let d = &run.plan.destinations[index];
            let member = run.plan.destination_members[index];
            // Every destination is a member (the plan's destination_members).
            let Some(owed) = owed.get_mut(member as usize) else {
                continue;
            };
            if let Err(e) = self.take_credits(owed, d.rank, member, needs(d.bytes, run.parity)) {
                if let Some(e) = e {
                    failed.get_or_insert(e);
                }
                continue;
            }
            owed[run.parity as usize] = run.tag;
            run.sends[index] = Send::Posted;
            run.waiting -= 1;
            posts.push(Post { index, offset });
        }
        let posts = (!posts.is_empty()).then(|| {
            *posting += 1;
            Posts {
                blocks: posts,
                tag: run.tag,
                parity: run.parity,
                plan: Arc::clone(&run.plan),
                source: run.source,
            }
        });
        Cleared {
            posts,
            looking,
            failed,
        }
    }

    /// Takes the credits owed by `rank` (member `member`) for the parities `parities`, each
    /// as it is there (clearing it in `owed`): `Ok` once none of them is owed any more,
    /// `Err(None)` while one has not come, `Err(Some(_))` when taking it failed.
    fn take_credits(
        &self,
        owed: &mut [u32; 2],
        rank: Rank,
        member: u32,
        parities: &[u32],
    ) -> std::result::Result<(), Option<Error>> {
        let mut missing = false;
        for &p in parities {
            let expected = owed[p as usize];
            if expected == 0 {
                continue;
            }
            let got = self
                .control
                .notify_reset(self.layout.credit(member, p))
                .map_err(|e| Some(e.into()))?;
            if got == 0 {
                missing = true;
                continue;
            }
            if got != expected {
                return Err(Some(Error::OutOfStep {
                    rank,
                    expected,
                    got,
                }));
            }
            owed[p as usize] = 0;
        }
        if missing {
            Err(None)
        } else {
            Ok(())
        }
    }

    /// Posts the blocks `cleared`, then counts them out of `posting`, also when posting
    /// failed, telling a `finish` that waits for them; then reports the failure of a block
    /// that could not be cleared, if any.
    fn post(&self, cleared: Cleared) -> Result<()> {
        let failed = cleared.failed.map_or(Ok(()), Err);
        let Some(posts) = cleared.posts else {
            return failed;
        };
        let posted = self.write_blocks(&posts);
        let listeners = {
            let mut ex = self.exchange();
            ex.posting -= 1;
            (ex.posting == 0 && std::mem::take(&mut ex.finishing)).then(|| ex.listeners())
        };
        if let Some(listeners) = listeners {
            self.changed(listeners)?;
        }
        posted.and(failed)
    }

    /// Writes the blocks `cleared` into their destinations, each with its notification: a
    /// small one into this rank's slot of the round's parity in the destination's control
    /// segment, a larger one into the destination's receive area.
    fn write_blocks(&self, posts: &Posts) -> Result<()> {
        let src = self.ctx.segment(posts.source)?;
        let notification = Notification {
            id: self.layout.data(self.me, posts.parity),
            value: posts.tag,
        };
        let slot = self.layout.slot(self.me, posts.parity);
        for post in &posts.blocks {
            let d = &posts.plan.destinations[post.index];
            let table = &posts.plan.tables[post.index];
            if is_small(d.bytes) {
                self.batch
                    .write_notify(&src, post.offset, table, slot, d.bytes, notification)?;
            } else {
                // Set before the block was cleared, and a `OnceLock` stays set.
                let data = posts.plan.targets[post.index].get().ok_or_else(|| {
                    gaspi::Error::Protocol(format!("no target for rank {}", d.rank))
                })?;
                self.batch.write_notify_to(
                    &src,
                    post.offset,
                    data,
                    0,
                    d.bytes,
                    table,
                    notification,
                )?;
            }
        }
        Ok(())
    }

    pub(super) fn next_arrival(&self, number: u64, budget: &Budget) -> Result<Option<Rank>> {
        self.drive(number, budget, |a2a, ex| {
            let Some(run) = ex.running.as_mut().filter(|run| run.number == number) else {
                return Ok((None, Next::Done(None)));
            };
            // Nothing fallible after the blocks are cleared: a `Cleared` must reach `post`.
            let early = match a2a.take_early(&mut ex.early, &mut ex.arrivals, run)? {
                Some(rank) => Some(rank),
                None => a2a.take_arrived(&mut ex.early, &mut ex.arrivals, run)?,
            };
            let mut cleared = a2a.cleared(&mut ex.owed, &mut ex.posting, run);
            if let Some(rank) = early {
                // The arrival taken is handed out: a block that failed to clear stays
                // waiting, and the next call that clears it reports it.
                if let Some(cleared) = &mut cleared {
                    cleared.failed = None;
                }
                return Ok((cleared, Next::Done(Some(rank))));
            }
            if run.pending.is_empty() {
                return Ok((cleared, Next::Done(None)));
            }
            Ok((cleared, Next::Wait))
        })
    }

    /// A source of `run` not handed out whose block is in the table now, taken from it and
    /// handed out: an arrival that is already there costs a look per pending source, not a
    /// wait.
    /// The watcher may wait for the same notification outside the lock; whoever takes it
    /// first has it, and the other finds it unset. A source whose previous block is not
    /// reset yet is left in the table (see [`ready`]).
    fn take_arrived(
        &self,
        early: &mut Kept,
        arrivals: &mut [Option<(u32, bool)>],
        run: &mut Running,
    ) -> Result<Option<Rank>> {
        let mut next = run.pending.next_from(0);
        while let Some(i) = next {
            next = run.pending.next_from(i + 1);
            if !ready(arrivals, run.plan.source_members[i]) {
                continue;
            }
            let id = self.layout.data(run.plan.source_members[i], run.parity);
            if self.control.notify_peek(id)? == 0 {
                continue;
            }
            let value = self.control.notify_reset(id)?;
            if value == 0 {
                continue;
            }
            return self.take(run, early, arrivals, i, value).map(Some);
        }
        Ok(None)
    }

    /// A source of `run` whose block was kept aside, handed out.
    fn take_early(
        &self,
        early: &mut Kept,
        arrivals: &mut [Option<(u32, bool)>],
        run: &mut Running,
    ) -> Result<Option<Rank>> {
        if early.is_empty() {
            return Ok(None);
        }
        let mut next = run.pending.next_from(0);
        while let Some(i) = next {
            next = run.pending.next_from(i + 1);
            if !ready(arrivals, run.plan.source_members[i]) {
                continue;
            }
            if let Some(value) = early.take(run.plan.source_members[i], run.parity) {
                return self.take(run, early, arrivals, i, value).map(Some);
            }
        }
        Ok(None)
    }

    /// Hands source `i` of `run` out, whose block carried `value`, once a small block is
    /// copied from its slot into the receive area: [`Error::OutOfStep`] when `value` is not
    /// the run's tag. A source writes into a slot again only with the credit for its last
    /// block of that parity, given after that block was handed out: the table holds this
    /// round's block, or one of another plan's round.
    ///
    /// A block that is not handed out is kept aside in `early`, its slot untouched, and the
    /// error returned: its notification was taken, so a call made again finds it there
    /// instead of waiting for a notification that will not come. A block of another round
    /// (the source disagrees on the plan) is reported again by every call of this round; a
    /// block whose copy fails (the receive segment was deleted, or made again too small)
    /// fails alike until the segment can hold it.
    fn take(
        &self,
        run: &mut Running,
        early: &mut Kept,
        arrivals: &mut [Option<(u32, bool)>],
        i: usize,
        value: u32,
    ) -> Result<Rank> {
        let source = &run.plan.sources[i];
        if value != run.tag {
            early.keep(run.plan.source_members[i], run.parity, value);
            return Err(Error::OutOfStep {
                rank: source.rank,
                expected: run.tag,
                got: value,
            });
        }
        if is_small(source.bytes) && source.bytes > 0 {
            // Memory to memory, the receive segment lent for the copy only: a handle held
            // would keep a deleted segment's memory, and the block would vanish into it.
            let slot = self.layout.slot(run.plan.source_members[i], run.parity);
            let copied =
                self.control
                    .copy_into(slot, run.plan.segment, source.offset, source.bytes);
            if let Err(e) = copied {
                early.keep(run.plan.source_members[i], run.parity, value);
                return Err(e.into());
            }
        }
        run.pending.remove(i);
        if let Some(arrival) = arrivals.get_mut(run.plan.source_members[i] as usize) {
            *arrival = Some((value, false));
        }
        Ok(source.rank)
    }

    /// What `run` waits for: the blocks of its sources not handed out whose previous blocks
    /// were reset, and the credits of its waiting blocks, with the ranks expected to send
    /// them. A source's reset, which a block may wait for, wakes the waiters itself.
    fn awaited(
        &self,
        run: &Running,
        owed: &[[u32; 2]],
        arrivals: &[Option<(u32, bool)>],
    ) -> Awaited {
        let plan = &run.plan;
        let mut ids = Awaited::new();
        for i in run.pending.iter() {
            let member = plan.source_members[i];
            if ready(arrivals, member) {
                let id = self.layout.data(member, run.parity);
                ids.push((id, plan.sources[i].rank));
            }
        }
        for (index, send) in run.sends.iter().enumerate() {
            if let Send::Waiting(_) = send {
                let d = &plan.destinations[index];
                let member = plan.destination_members[index];
                let owed = owed.get(member as usize).copied().unwrap_or_default();
                for &p in needs(d.bytes, run.parity) {
                    if owed[p as usize] != 0 {
                        ids.push((self.layout.credit(member, p), d.rank));
                    }
                }
            }
        }
        ids
    }

    /// Runs `decide` under the lock until it is done, posting what it clears, and between
    /// tries waits for something to change: the notifications it names (one thread at a
    /// time, the watcher, sleeps on those), or the other threads' progress (the others sleep
    /// on the condition variable). A single watcher is what makes this safe: a thread that
    /// takes what another waits for (an arrival, a credit) cannot leave it asleep, because
    /// either the sleeper is woken through the condition variable, or it is the watcher and
    /// is woken through the `wake` notification. What it waits for are the notifications
    /// [`awaited`](Self::awaited) by round `number`, gathered only when it has to wait.
    fn drive<T>(
        &self,
        number: u64,
        budget: &Budget,
        mut decide: impl FnMut(&Self, &mut Exchange) -> Result<(Option<Cleared>, Next<T>)>,
    ) -> Result<T> {
        loop {
            let mut guard = self.exchange();
            let (cleared, next) = decide(self, &mut guard)?;
            // A block that failed to clear is reported as posting goes.
            let posted = cleared
                .as_ref()
                .is_some_and(|c| c.posts.is_some() || c.failed.is_some());
            let looking = cleared.as_ref().is_some_and(|c| c.looking);
            if let Next::Done(value) = next {
                let listeners = guard.listeners();
                drop(guard);
                let told = self.changed(listeners);
                if let Some(cleared) = cleared {
                    self.post(cleared)?;
                }
                told?;
                return Ok(value);
            }
            if posted {
                let listeners = guard.listeners();
                drop(guard);
                if let Some(cleared) = cleared {
                    self.post(cleared)?;
                }
                self.changed(listeners)?;
                continue;
            }
            if guard.watcher && !budget.is_test() {
                let deadline = budget.deadline();
                let left = deadline.remaining();
                if left.is_some_and(|left| left.is_zero()) {
                    return Err(gaspi::Error::Timeout.into());
                }
                guard.sleepers += 1;
                let mut guard = crate::wait_changes(&self.changes, guard, deadline);
                guard.sleepers -= 1;
                continue;
            }
            // A test never sleeps, so it may scan beside the watcher; with nothing to scan (a
            // `finish` waiting for other threads' posts) it is over.
            let watching = !budget.is_test();
            let deadline = budget.deadline();
            let ids = match guard.running.as_ref().filter(|run| run.number == number) {
                Some(run) => self.awaited(run, &guard.owed, &guard.arrivals),
                None => Awaited::new(),
            };
            if !watching && ids.is_empty() {
                return Err(gaspi::Error::Timeout.into());
            }
            if watching {
                guard.watcher = true;
                self.control.notify_reset(self.layout.wake())?;
            }
            drop(guard);
            // Cut short while a lookup is under way, to look again: its end wakes nobody.
            let slice = match deadline.remaining() {
                Some(left) if left <= LOOKUP_POLL => None,
                _ if looking => Some(Timeout::from(LOOKUP_POLL).deadline()),
                _ => None,
            };
            let outcome = match self.watch(&ids, watching, slice.unwrap_or(deadline)) {
                Err(e) if slice.is_some() && e.is_timeout() => Ok(()),
                other => other,
            };
            if watching {
                let mut guard = self.exchange();
                guard.watcher = false;
                let sleepers = guard.sleepers > 0;
                drop(guard);
                if sleepers {
                    self.changes.notify_all();
                }
            }
            outcome?;
        }
    }

    /// Waits for one of `ids` (and, as the watcher, the wake-up, which only the watcher
    /// resets) and, for a block, takes it from the table into the blocks kept aside, where
    /// the next decision finds it.
    fn watch(
        &self,
        ids: &[(NotificationId, Rank)],
        watcher: bool,
        deadline: Deadline,
    ) -> Result<()> {
        let mut numbers: SmallVec<[NotificationId; 17]> = ids.iter().map(|&(id, _)| id).collect();
        if watcher {
            numbers.push(self.layout.wake());
        }
        let senders: SmallVec<[Rank; 16]> = ids.iter().map(|&(_, rank)| rank).collect();
        let ranges = self.ranges(&numbers);
        let got = self.ctx.notify_wait_any(&ranges, &senders, deadline)?;
        let Some((member, parity)) = self.layout.data_source(got.id) else {
            return Ok(()); // a credit or a wake-up: the next decision sees what changed
        };
        let value = self.control.notify_reset(got.id)?;
        if value != 0 {
            self.exchange().early.keep(member, parity, value);
        }
        Ok(())
    }

    /// Tells the others that the exchange changed: the threads on the condition variable,
    /// and the watcher (when there is one) through its wake-up notification.
    /// Inline: most changes have nobody to tell, and a call to find that out cost more than
    /// the look.
    #[inline]
    fn changed(&self, listeners: Listeners) -> Result<()> {
        if listeners.sleepers {
            self.changes.notify_all();
        }
        if listeners.watcher {
            self.wake_watcher()?;
        }
        Ok(())
    }

    /// Sets the watcher's wake-up notification.
    fn wake_watcher(&self) -> Result<()> {
        let me = self.member_target(self.me, Timeout::Test.deadline())?;
        let wake = Notification {
            id: self.layout.wake(),
            value: 1,
        };
        if self.credits.outstanding() > self.layout.members() {
            self.credits.test()?;
        }
        self.credits.notify(me, wake)?;
        Ok(())
    }

    /// Contiguous runs of `ids` as ranges of the control table.
    fn ranges(&self, ids: &[NotificationId]) -> SmallVec<[gaspi::NotificationRange<'_>; 8]> {
        let mut sorted: SmallVec<[NotificationId; 17]> = SmallVec::from_slice(ids);
        sorted.sort_unstable();
        sorted.dedup();
        let mut ranges = SmallVec::new();
        let mut i = 0;
        while i < sorted.len() {
            let begin = sorted[i];
            let mut num = 1;
            while i + (num as usize) < sorted.len() && sorted[i + num as usize] == begin + num {
                num += 1;
            }
            ranges.push(self.control.range(begin, num));
            i += num as usize;
        }
        ranges
    }

    pub(super) fn reset(&self, sources: &[Rank]) -> Result<()> {
        // Each source's member index and the tag of the block its credit is for, read under
        // the lock: once a source is marked reset, another thread may hand out its next block,
        // whose tag replaces this one.
        let mut credits: SmallVec<[(u32, u32); 4]> = SmallVec::new();
        let listeners = {
            let mut ex = self.exchange();
            for (n, &rank) in sources.iter().enumerate() {
                let arrival = crate::index_in(&self.ranks, rank).and_then(|member| {
                    let arrival = ex.arrivals.get(member as usize).copied().flatten()?;
                    Some((member, arrival))
                });
                let again = sources[..n].contains(&rank);
                match arrival {
                    Some((member, (value, false))) if !again => credits.push((member, value)),
                    // Reset after its last arrival, and a source of the round running that
                    // has not arrived in it yet: its next block is what is missing.
                    Some((_, (_, true))) if !again && ex.awaits(rank) => {
                        return Err(Error::NotArrived { rank })
                    }
                    Some(_) => return Err(Error::AlreadyReset { rank }),
                    None if ex.sources.contains(&rank) => return Err(Error::NotArrived { rank }),
                    None => return Err(Error::UnknownSource { rank }),
                }
            }
            for &(member, _) in &credits {
                // Every member in `credits` has an arrival (checked above).
                if let Some(Some(arrival)) = ex.arrivals.get_mut(member as usize) {
                    arrival.1 = true;
                }
            }
            // The running round's next block of a source may be here already, held until
            // now: whoever waits for it must look again.
            let held = sources.iter().any(|&rank| ex.awaits(rank));
            held.then(|| ex.listeners())
        };
        if let Some(listeners) = listeners {
            self.changed(listeners)?;
        }
        for (member, value) in credits {
            match self.credit(member, value) {
                // The source dropped its alltoallv (its control segment went with it) once it
                // had what it needed: a credit would be of no use to it.
                Err(Error::Gaspi(gaspi::Error::UnknownSegment { rank, .. }))
                    if self.ranks.get(member as usize) == Some(&rank) => {}
                other => other?,
            }
        }
        Ok(())
    }

    /// Hands member `source` its credit for its block tagged `value`.
    fn credit(&self, source: u32, value: u32) -> Result<()> {
        let target = self.member_target(source, Timeout::Test.deadline())?;
        // Credits complete at once; reaping them keeps the batch from filling up.
        if self.credits.outstanding() > self.layout.members() {
            self.credits.test()?;
        }
        let id = self.layout.credit(self.me, tag_parity(value));
        self.credits.notify(target, Notification { id, value })?;
        Ok(())
    }

    pub(super) fn finish(&self, number: u64, budget: &Budget) -> Result<()> {
        {
            let ex = self.exchange();
            let Some(run) = ex.running.as_ref().filter(|run| run.number == number) else {
                return Ok(());
            };
            if let Some(index) = run.sends.iter().position(|&s| s == Send::NotSent) {
                return Err(Error::Unsent {
                    rank: run.plan.destinations[index].rank,
                });
            }
        }
        let running = self.drive(number, budget, |a2a, ex| {
            let Some(run) = ex.running.as_mut().filter(|run| run.number == number) else {
                return Ok((None, Next::Done(false)));
            };
            while a2a
                .take_early(&mut ex.early, &mut ex.arrivals, run)?
                .is_some()
            {}
            while a2a
                .take_arrived(&mut ex.early, &mut ex.arrivals, run)?
                .is_some()
            {}
            let cleared = a2a.cleared(&mut ex.owed, &mut ex.posting, run);
            let awaits = !run.pending.is_empty() || run.waiting > 0;
            // Blocks other threads cleared may not be in the batch yet (this call's own are
            // posted before `drive` returns): the wait for the batch must come after theirs.
            let own = u32::from(cleared.as_ref().is_some_and(|c| c.posts.is_some()));
            let others = ex.posting > own;
            ex.finishing |= others;
            let next = match awaits || others {
                true => Next::Wait,
                false => Next::Done(true),
            };
            Ok((cleared, next))
        })?;
        if !running {
            return Ok(());
        }
        self.batch.wait(budget.left())?;
        let mut ex = self.exchange();
        if ex.running.as_ref().is_some_and(|run| run.number == number) {
            ex.running = None;
            self.coll.end_exchange(self.group_key);
            let listeners = ex.listeners();
            drop(ex);
            self.changed(listeners)?;
        }
        Ok(())
    }
}

impl Exchange {
    /// Whether `rank` is a source of the round running whose block was not handed out yet.
    fn awaits(&self, rank: Rank) -> bool {
        self.running.as_ref().is_some_and(|run| {
            let sources = &run.plan.sources;
            sources
                .binary_search_by_key(&rank, |s| s.rank)
                .is_ok_and(|i| run.pending.contains(i))
        })
    }
}

/// What a decision cleared: blocks for posting, if any, and why others stay waiting.
struct Cleared {
    posts: Option<Posts>,
    /// A waiting block's target is being looked up, which no notification of the control
    /// table announces: a watcher polls for it (see [`LOOKUP_POLL`]).
    looking: bool,
    /// The first failure of a block that stays waiting, which [`post`](Alltoallv::post)
    /// reports.
    failed: Option<Error>,
}

/// Blocks cleared for posting (each counted in `posting` until posted), with what posting
/// them needs.
struct Posts {
    blocks: Vec<Post>,
    tag: u32,
    parity: u32,
    plan: Arc<PlanData>,
    source: SegmentId,
}

/// A round begun with its blocks: what they cleared, to post, and who must be told.
type Begun = (Option<Cleared>, Listeners);

/// A decision of [`Alltoallv::drive`]'s caller.
enum Next<T> {
    Done(T),
    /// Wait for something to change: one of the notifications the round awaits (gathered by
    /// `drive` only when it has to wait), or another thread's progress.
    Wait,
}

/// Whether a block of member `member` may be handed out: its previous block, if any, was reset, so
/// the receive area is free for the next.
fn ready(arrivals: &[Option<(u32, bool)>], member: u32) -> bool {
    arrivals
        .get(member as usize)
        .copied()
        .flatten()
        .is_none_or(|(_, reset)| reset)
}

/// The round parities whose credits a block of `bytes` in a round of parity `parity` needs:
/// a small block its slot's, a larger one both, since its bytes land where the receiver may
/// still read the source's block of the round before.
fn needs(bytes: u64, parity: u32) -> &'static [u32] {
    match (is_small(bytes), parity) {
        (true, 0) => &[0],
        (true, _) => &[1],
        (false, _) => &[0, 1],
    }
}

fn check_offsets(plan: &PlanData, offsets: &[u64]) -> Result<()> {
    if offsets.len() == plan.destinations.len() {
        Ok(())
    } else {
        Err(Error::SourceOffsets {
            expected: plan.destinations.len(),
            got: offsets.len(),
        })
    }
}

fn running_mut(running: &mut Option<Running>, number: u64) -> Result<&mut Running> {
    running
        .as_mut()
        .filter(|run| run.number == number)
        .ok_or(Error::RoundEnded { number })
}
