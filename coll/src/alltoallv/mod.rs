//! The sparse, partially evaluable alltoallv of the GASPI proposal
//! (`gaspi-alltoallv-proposal.md`): [`Alltoallv`], one per group; its [`Plan`]s, from
//! [`Alltoallv::get_remote_offsets`]; and its rounds, in the proposal's form
//! ([`Alltoallv::alltoallv`], [`Alltoallv::alltoallv_reset`]) or as a [`Round`] that many
//! threads share.
//!
//! The protocol and the choices the proposal leaves open are documented on [`Alltoallv`].

mod layout;
mod pending;
mod plan;
mod round;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, OnceLock, PoisonError};

pub use plan::{Destination, Plan, Source};
use round::Budget;
pub use round::{Round, Status};

use gaspi::{Batch, Context, Deadline, GroupId, Rank, Segment, SegmentId, Target, Timeout};

use crate::error::Result;
use crate::Collectives;
use layout::Layout;
use plan::Discovery;
use round::Exchange;

/// Identities of alltoallv objects in this process, so that a plan is never used with another.
static OBJECTS: AtomicU64 = AtomicU64::new(1);

/// A sparse alltoallv over the members of one committed group: build it once (collective),
/// make [`Plan`]s with [`get_remote_offsets`](Self::get_remote_offsets), and run rounds of
/// them — in the proposal's form ([`alltoallv`](Self::alltoallv) until
/// [`Status::Complete`], with [`alltoallv_reset`](Self::alltoallv_reset)), or as a [`Round`]
/// shared by many threads.
///
/// # Protocol
/// **Discovery** (`plan` module): every rank knows only its own destinations. It registers
/// with each by a remote fetch-and-add on the destination's counter, which hands out a slot,
/// and writes its record (rank, size) into that slot with a notification. Once its
/// registrations have completed it enters a dissemination barrier; when the barrier is over,
/// every registration of the discovery has been counted, so each rank reads its own: exactly
/// its sources. It sorts them by rank, packs their blocks from the first offset on, and replies
/// to each with its offset. Memory and messages grow with the neighbours, the barrier with
/// `log2 n` (see the `layout` module for what is reserved per member).
///
/// **Rounds** (`round` module): a block is one write with a notification in the receiver's
/// control table, at the id of the sending member and the round's parity, whose value is the
/// round's tag; it is visible before its notification, on every path. The receiver hands each
/// arrival to one caller, which atomically takes the notification;
/// [`alltoallv_reset`](Alltoallv::alltoallv_reset) later sends the source a *credit*. The
/// next round needs no barrier, and a fast sender never overwrites a block the receiver has
/// not reset:
/// * a block of more than 1 KiB lands in the receive area, and its source writes it only
///   once it holds the credits for its earlier blocks there;
/// * a block of at most 1 KiB is written into one of two slots for its source in the
///   receiver's control segment, by round parity, and copied into the receive area when it
///   is handed out, which waits until the source's previous block there was reset. Its source
///   needs only the credit of its block of two rounds before (the slot's last): a round trip
///   for the credit no longer separates one round's small blocks from the next round's, so a
///   round of small blocks costs one trip, not two.
///
/// # Choices the proposal leaves open
/// * The proposal's arrays `remote_ranks`, `remote_segment_ids`, `remote_offset`, `size` and
///   `num_receives` are exactly what `get_remote_offsets` returns, so here they travel as one
///   [`Plan`]; [`alltoallv`](Alltoallv::alltoallv) takes the plan and the source offsets.
/// * Receive offsets are packed in ascending source rank from `first_offset`, without
///   alignment padding (as `MPI_Alltoallv`'s displacements would be); a block of 0 bytes still
///   arrives and is reported.
/// * A round is collective: every member begins its rounds in the same order, each with the
///   same plan (members that disagree get [`Error::OutOfStep`](crate::Error::OutOfStep)),
///   also a member that sends and receives nothing. Members may be a round apart; the credits
///   keep them safe.
/// * "Acknowledged" sends are complete locally: the source's bytes may be reused, and the
///   block is, or will be, visible at the receiver before its notification.
/// * In the proposal's form, the call that returns [`Status::Complete`] ends the round, and the
///   next call begins a new one. Many threads that each loop until `Complete` (Listing 1 under
///   `omp parallel`) would each end or begin rounds of their own: share a [`Round`] instead,
///   whose [`next_arrival`](Round::next_arrival) answers `None` to every thread once the round
///   is over.
/// * The proposal's blocking use ([`Timeout::Block`]), whose `received_rank` is the number of
///   sources, completes the round in one call: it returns [`Status::Complete`] once every
///   source arrived, and [`Plan::sources`] names them, each still to be reset. Otherwise a
///   round takes one call per source ([`Status::Arrived`]) and one more ([`Status::Complete`]):
///   `num_receives + 1` calls where the proposal counts `num_receives` plus the one that
///   returns `GASPI_SUCCESS`.
/// * Resets belong to the source, not to the round: a source that arrived may be reset after
///   its round ended, and must be before it can send here again.
/// * Every block travels as one notified write (`Batch::write_notify_to`); the runtime sends a
///   large one over tcp as a write followed by its notification, which streams there at full
///   speed (see [`gaspi::Config::split_notify`]). A small one (at most 1 KiB, on every path)
///   goes through the receiver's control segment and is copied once more there, which costs
///   nothing beside a trip.
/// * A block to this rank itself is such a write too, so a block of more than 1 KiB whose
///   source overlaps its own receive range (the receive segment used as the source, an
///   in-place transpose's diagonal shifted) lands as [`gaspi::Context::write`] says of
///   overlapping ranges: as `memmove` would on the direct path, not through the fabric (over
///   shm, 64 KiB shifted forwards by 1 byte left 65,274 bytes wrong); identical ranges came
///   out right. A small block goes through its slot, so it always lands right.
/// * Plans used in alternation should have disjoint receive areas: a source's next block is
///   held back only until the receiver has reset that source's previous block, whatever plan
///   it belonged to.
/// * A source may be a round ahead of its receiver's resets with small blocks, not two: its
///   block of round `r + 2` waits for the reset of its block of round `r`. With larger
///   blocks it cannot be ahead at all.
/// * Memory: each member's control segment reserves 2,120 bytes (72, and two 1 KiB slots for
///   small blocks) and 7 notifications per group member, but its arrays fill from index 0 in
///   the order of registration, and the slots of a source that never sends here are never
///   written, so only as many pages are touched as the member has neighbours.
/// * Waiting: one thread at a time sleeps on the control table's notifications; the others
///   sleep on a condition variable and are woken by whoever changes the exchange. No thread
///   spins while it waits. A call's timeout counts from when the call first has to wait, as
///   the runtime's waits count a [`Timeout`].
/// * Dropping an `Alltoallv` deletes its control segment. A credit for a source that has
///   dropped its alltoallv is skipped (it has no use for it); drop an alltoallv only after
///   the rounds it takes part in are over on every member, as for any collective object.
///
/// # Example
/// ```no_run
/// use gaspi::{Context, Timeout, GROUP_ALL};
/// use gaspi_coll::{Alltoallv, Collectives, Status};
///
/// let ctx = Context::init()?;
/// let t = Timeout::Millis(10_000);
/// ctx.segment_create(0, 1 << 20, t)?; // blocks to send
/// ctx.segment_create(1, 1 << 20, t)?; // blocks received
/// let coll = Collectives::new(&ctx)?;
/// let mut a2a = Alltoallv::new(&coll, GROUP_ALL, t)?;
/// let right = (ctx.rank() + 1) % ctx.size();
/// let plan = a2a.get_remote_offsets(1, 0, &[(right, 4096)], t)?;
/// loop {
///     match a2a.alltoallv(&plan, 0, &[0], Timeout::Test) {
///         Ok(Status::Arrived(source)) => {
///             let block = plan.source(source).expect("arrivals come from the plan's sources");
///             // ... work on segment 1 at block.offset, block.bytes long ...
///             a2a.alltoallv_reset(&[source])?;
///         }
///         Ok(Status::Complete) => break,
///         Err(e) if e.is_timeout() => {} // other work here
///         Err(e) => return Err(e.into()),
///     }
/// }
/// // The round is over here, not yet on every member: the left neighbour may still reset
/// // this rank's block, which tells this rank. Only then may the alltoallv go, and the
/// // process end (a reset towards a process that ended is `RankFailed`).
/// ctx.barrier(t)?;
/// drop(a2a);
/// drop(coll);
/// ctx.finalize(t)?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct Alltoallv<'c> {
    ctx: &'c Context,
    coll: &'c Collectives<'c>,
    group: GroupId,
    /// The group as its members know it ([`group_key`](crate::group_key)): one round at a
    /// time per group, not per id the group may have left.
    group_key: u64,
    /// The members' ranks, by member index.
    ranks: Vec<Rank>,
    /// This rank's member index.
    me: u32,
    layout: Layout,
    control: Segment<'c>,
    /// The members' control segments, by member index, each resolved on first use: a credit
    /// or a wake-up finds its target without taking a lock.
    targets: Vec<OnceLock<Target>>,
    /// Registrations, replies, barrier notifications and blocks.
    batch: Batch<'c>,
    /// Credits, posted by resets from any thread.
    credits: Batch<'c>,
    id: u64,
    /// Discoveries begun so far.
    discoveries: u64,
    discovery: Option<Discovery<'c>>,
    exchange: Mutex<Exchange>,
    /// Signalled whenever the exchange changed.
    changes: Condvar,
}

impl std::fmt::Debug for Alltoallv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Alltoallv")
            .field("group", &self.group)
            .field("members", &self.ranks.len())
            .field("discoveries", &self.discoveries)
            .finish()
    }
}

impl<'c> Alltoallv<'c> {
    /// Builds the alltoallv of committed group `group` (collective over its members; for
    /// [`gaspi::GROUP_ALL`], every rank): creates each member's control segment in `coll`'s
    /// namespace. After [`gaspi::Error::Timeout`], call again with the same arguments to
    /// continue. The alltoallv keeps the group's members as they are now, whatever becomes of
    /// the group's id later.
    ///
    /// # Errors
    /// From the runtime: [`gaspi::Error::UnknownGroup`], [`gaspi::Error::GroupNotCommitted`],
    /// [`gaspi::Error::NotInGroup`] when this rank is not a member,
    /// [`gaspi::Error::LibrarySegment`] for a group too large for a notification table or
    /// when the memory cannot be allocated,
    /// [`gaspi::Error::LibraryBusy`] when another creation of `coll` over this group timed
    /// out and was not continued, [`gaspi::Error::Timeout`], [`gaspi::Error::RankFailed`].
    pub fn new(
        coll: &'c Collectives<'c>,
        group: GroupId,
        timeout: Timeout,
    ) -> Result<Alltoallv<'c>> {
        let ctx = coll.context();
        let scope = coll.library().team_of_group(group)?;
        let (ranks, n, me) = (scope.ranks(), scope.size(), scope.index());
        let layout = Layout::new(n);
        let control = coll.library().segment_create(
            &scope,
            layout.bytes(),
            layout.notifications(),
            timeout,
        )?;
        // Room for every registration, reply and block of a round in flight at once.
        let depth = n.saturating_mul(2).saturating_add(64);
        Ok(Alltoallv {
            ctx,
            coll,
            group,
            group_key: crate::group_key(group, &ranks),
            ranks,
            me,
            layout,
            control,
            targets: (0..n).map(|_| OnceLock::new()).collect(),
            batch: ctx.batch_with_depth(depth),
            credits: ctx.batch_with_depth(depth),
            id: OBJECTS.fetch_add(1, Ordering::Relaxed),
            discoveries: 0,
            discovery: None,
            exchange: Mutex::new(Exchange::new(n as usize)),
            changes: Condvar::new(),
        })
    }

    /// The group this alltoallv runs over.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// Begins a round of `plan` whose blocks this rank reads from its segment `source`, or
    /// joins the round of `plan` running (one that timed out, or that another thread began).
    /// Collective: every member begins its rounds in the same order with the same plan. The
    /// handle is `Sync`: share it between threads, which may all call every method.
    ///
    /// # Errors
    /// [`Error::AlltoallvInProgress`](crate::Error::AlltoallvInProgress) when another round
    /// runs on this group (of another plan or source segment here, or of another alltoallv
    /// object over the group); [`Error::ForeignPlan`](crate::Error::ForeignPlan);
    /// [`gaspi::Error::UnknownSegment`] when `source` or the plan's receive segment does not
    /// exist; [`Error::ReceiveAreaTooSmall`](crate::Error::ReceiveAreaTooSmall) when the
    /// receive segment (made after the discovery) cannot hold the plan's receive area, or
    /// [`gaspi::Error::OutOfBounds`] when the area's first offset lies past its end. A
    /// block towards a receive segment made after the discovery is resolved when it is sent:
    /// a destination that never made it is named by the call that sends it
    /// ([`gaspi::Error::UnknownSegment`]).
    pub fn round<'a>(&'a self, plan: &Plan, source: SegmentId) -> Result<Round<'a>> {
        let number = self.begin(plan, source)?;
        Ok(Round::new(self, number))
    }

    /// `gaspi_alltoallv`. When no round runs, begins one of `plan` and sends every block
    /// (`source_offsets[i]` in this rank's segment `source` to `plan.destinations()[i]`, each
    /// as soon as its receiver's credit allows). Then reports one newly arrived source per
    /// call ([`Status::Arrived`]: its block is visible, at `plan.source(rank).offset` of the
    /// receive segment), and [`Status::Complete`] once every own block completed and every
    /// source was reported; that call ends the round.
    ///
    /// With [`Timeout::Test`] it never blocks. After [`gaspi::Error::Timeout`] (nothing new
    /// within the timeout) call again with the same arguments. With [`Timeout::Block`], the
    /// proposal's blocking use, the call returns only once the round is over: every source
    /// of the plan has arrived (each still to be reset, as after [`Status::Arrived`]) and
    /// [`Status::Complete`] ends the round.
    ///
    /// # Errors
    /// [`gaspi::Error::Timeout`]; [`Error::SourceOffsets`](crate::Error::SourceOffsets); as
    /// for [`round`](Self::round), [`Round::send`] and [`Round::next_arrival`].
    pub fn alltoallv(
        &self,
        plan: &Plan,
        source: SegmentId,
        source_offsets: &[u64],
        timeout: Timeout,
    ) -> Result<Status> {
        let budget = Budget::new(timeout);
        let number = self.begin_all(plan, source, source_offsets)?;
        // The proposal's blocking call completes the alltoallv: handing out one source and
        // blocking again would leave the others unreported until the next call.
        if timeout == Timeout::Block {
            self.finish(number, &budget)?;
            return Ok(Status::Complete);
        }
        if let Some(rank) = self.next_arrival(number, &budget)? {
            return Ok(Status::Arrived(rank));
        }
        self.finish(number, &budget)?;
        Ok(Status::Complete)
    }

    /// `gaspi_alltoallv_reset`: hands each of `sources` its credit back, so that it may write
    /// its next block here. Each must have arrived (in any round) and not been reset since;
    /// the list is checked as a whole before any credit is sent. Never blocks.
    ///
    /// # Errors
    /// [`Error::UnknownSource`](crate::Error::UnknownSource) for a rank that is no source of
    /// any plan here; [`Error::NotArrived`](crate::Error::NotArrived);
    /// [`Error::AlreadyReset`](crate::Error::AlreadyReset) (also for a rank listed twice);
    /// from the runtime: [`gaspi::Error::RankFailed`], [`gaspi::Error::BatchFull`].
    pub fn alltoallv_reset(&self, sources: &[Rank]) -> Result<()> {
        self.reset(sources)
    }

    fn exchange(&self) -> MutexGuard<'_, Exchange> {
        // Every update of the exchange is complete before the next statement that could
        // panic, so a poisoned lock still guards consistent state.
        self.exchange.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// `rank`'s control segment, resolved within `deadline` the first time.
    fn control_target(&self, rank: Rank, deadline: Deadline) -> Result<Target> {
        match crate::index_in(&self.ranks, rank) {
            Some(member) => self.member_target(member, deadline).copied(),
            None => Ok(self.control.target(rank, deadline.left())?),
        }
    }

    /// The control segment of member `member` (an index into `ranks`), resolved within
    /// `deadline` the first time: the per-round callers know the member already, and skip
    /// the search for it. Lent, not copied: a credit's notify needs only a reference.
    fn member_target(&self, member: u32, deadline: Deadline) -> Result<&Target> {
        let slot = &self.targets[member as usize];
        if let Some(target) = slot.get() {
            return Ok(target);
        }
        let target = self
            .control
            .target(self.ranks[member as usize], deadline.left())?;
        Ok(slot.get_or_init(|| target))
    }
}

impl Drop for Alltoallv<'_> {
    fn drop(&mut self) {
        if self.exchange().running.is_some() {
            self.coll.end_exchange(self.group_key);
        }
    }
}
