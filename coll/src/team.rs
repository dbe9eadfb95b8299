//! GASNet's teams, collective handles and sync modes: [`Team`], [`Handle`], [`Flags`] and
//! the syncs over sets of handles.
//!
//! A team is an immutable set of ranks with a member index each (a committed group, or a
//! [`split`](Team::split) of another team), and one [engine](crate::engine) that runs every
//! collective of the team. Each operation exists blocking and non-blocking (`_nb`, which
//! returns a [`Handle`]); the handle borrows the buffers it moves until it is synced, so the
//! borrow checker enforces the spec's rule that they are left untouched while in flight.

use std::marker::PhantomData;

use gaspi::{Context, GroupId, Rank, Timeout};

use crate::engine::{Engine, Layout, Owner, Prepared, Runner};
use crate::error::{Error, Result};
use crate::ops::Choices;
use crate::schedule::{sync::synchronise, Reducer, Schedule};
use crate::Collectives;

bitflags::bitflags! {
    /// The flags of a team collective: exactly one `IN_` mode, one `OUT_` mode, and one of
    /// [`SINGLE`](Self::SINGLE) / [`LOCAL`](Self::LOCAL) (GASNet's `GASNET_COLL_*`).
    ///
    /// | mode | meaning (GASNet) | here |
    /// |---|---|---|
    /// | `IN_NOSYNC` | data may move as soon as any member entered | as `IN_MYSYNC`: every put waits for its receiver's credit, which the staging needs |
    /// | `IN_MYSYNC` | a block moves once its source and destination members entered | met naturally (credits) |
    /// | `IN_ALLSYNC` | data moves only once every member entered | a dissemination barrier first |
    /// | `OUT_NOSYNC` | syncs may succeed early, the last only once all data moved | as `OUT_MYSYNC` |
    /// | `OUT_MYSYNC` | a sync succeeds once this member's buffers are done | met naturally |
    /// | `OUT_ALLSYNC` | a sync succeeds once every member's buffers are done | a dissemination barrier last |
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
    pub struct Flags: u32 {
        /// Data may move as soon as any member entered.
        const IN_NOSYNC = 1;
        /// A block moves once its source and destination members entered.
        const IN_MYSYNC = 1 << 1;
        /// Data moves only once every member entered.
        const IN_ALLSYNC = 1 << 2;
        /// A sync may succeed before this member's part is done, as long as the last sync
        /// comes after all data moved.
        const OUT_NOSYNC = 1 << 3;
        /// A sync succeeds once this member's buffers are done with.
        const OUT_MYSYNC = 1 << 4;
        /// A sync succeeds once every member's buffers are done with.
        const OUT_ALLSYNC = 1 << 5;
        /// Every member passes the same arguments for everyone (GASNet's single-valued
        /// arguments): in this API, where each member passes its own buffers, it asserts
        /// that the sizes, counts and root agree, which is checked.
        const SINGLE = 1 << 6;
        /// Each member passes its own buffers only (GASNet's `LOCAL`).
        const LOCAL = 1 << 7;
    }
}

impl Flags {
    /// The most common choice: `IN_MYSYNC | OUT_MYSYNC | LOCAL`.
    pub const MY: Flags = Flags::IN_MYSYNC
        .union(Flags::OUT_MYSYNC)
        .union(Flags::LOCAL);
    /// Full synchronisation on both sides: `IN_ALLSYNC | OUT_ALLSYNC | LOCAL`.
    pub const ALL: Flags = Flags::IN_ALLSYNC
        .union(Flags::OUT_ALLSYNC)
        .union(Flags::LOCAL);

    /// Checks that exactly one mode of each kind and one addressing style are given;
    /// returns whether barriers are needed before and after.
    fn barriers(self) -> Result<(bool, bool)> {
        let one = |set: Flags, why| {
            if (self & set).bits().count_ones() == 1 {
                Ok(())
            } else {
                Err(Error::Flags {
                    flags: self.bits(),
                    why,
                })
            }
        };
        one(
            Flags::IN_NOSYNC | Flags::IN_MYSYNC | Flags::IN_ALLSYNC,
            "exactly one IN_ sync mode is needed",
        )?;
        one(
            Flags::OUT_NOSYNC | Flags::OUT_MYSYNC | Flags::OUT_ALLSYNC,
            "exactly one OUT_ sync mode is needed",
        )?;
        one(
            Flags::SINGLE | Flags::LOCAL,
            "exactly one of SINGLE and LOCAL is needed",
        )?;
        Ok((
            self.contains(Flags::IN_ALLSYNC),
            self.contains(Flags::OUT_ALLSYNC),
        ))
    }
}

/// The staging a team reserves: `lanes` collectives may hold staging at once, each up to
/// `lane_bytes` bytes of it on every member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capacity {
    /// Collectives staged at once; later ones wait in the engine (initiation never waits).
    pub lanes: u32,
    /// Staging bytes per collective and member.
    pub lane_bytes: u64,
}

impl Default for Capacity {
    /// 4 lanes of 1 MiB.
    fn default() -> Capacity {
        Capacity {
            lanes: 4,
            lane_bytes: 1 << 20,
        }
    }
}

/// A team: an immutable set of ranks (a committed group's members) with a member index
/// each, and one engine that runs every collective of the team — GASNet's data-movement
/// collectives as schedules, many in flight at once, each advanced by whichever thread
/// initiates, tests or waits on any collective of the team.
///
/// Every operation exists blocking and non-blocking (`_nb`, returning a [`Handle`] that
/// borrows the buffers it moves until it is synced). Collectives must be initiated in the
/// same order on every member; syncs are local and may come in any order.
///
/// ```no_run
/// use gaspi::{Context, Timeout, GROUP_ALL};
/// use gaspi_coll::{Collectives, Flags, Team};
///
/// let ctx = Context::init()?;
/// let coll = Collectives::new(&ctx)?;
/// let team = Team::new(&coll, GROUP_ALL, Timeout::Millis(10_000))?;
/// let mine = [ctx.rank() as u8; 4];
/// let mut all = vec![0u8; 4 * team.size() as usize];
/// let mut handle = team.gather_all_nb(&mut all, &mine, Flags::MY)?;
/// handle.wait_sync(Timeout::Millis(10_000))?;
/// drop(handle);
/// assert_eq!(all[4], 1);
/// # Ok::<(), gaspi_coll::Error>(())
/// ```
///
/// # Staging and capacity
/// Data moves from stage to stage in a library segment of the team: a member copies what it
/// sends from its source into its stage, and what it received from its stage into its
/// destination, so sources and destinations may be ordinary memory. The segment holds
/// [`Capacity::lanes`] stages of [`Capacity::lane_bytes`]: a collective whose staging
/// exceeds a lane is refused ([`Error::TooLarge`], before anything moves); the (n+1)-th
/// collective in flight waits in the engine for the lane of the first (initiation never
/// waits).
///
/// # Progress
/// Steps that touch the caller's buffers are taken in the calls that hold the collective's
/// handle (initiation, [`Handle::try_sync`], [`Handle::wait_sync`] and the set syncs), all
/// other steps in any call of the team: GASNet's worst case, progress in the sync call.
///
/// # Faults
/// A dead member makes every pending collective of the team fail naming it
/// ([`gaspi::Error::RankFailed`]); a member that initiated another collective, or the same
/// one with another root, size, sync mode or algorithm, is named when one of its
/// notifications reaches a member that disagrees ([`Error::Mismatch`]), and otherwise its
/// partners time out.
pub struct Team<'c> {
    ctx: &'c Context,
    engine: Engine<'c>,
    choices: Choices,
    /// The runtime's library team of a split team, which its segment is scoped to.
    _scope: Option<gaspi::Team<'c>>,
    namespace: PhantomData<&'c Collectives<'c>>,
}

impl std::fmt::Debug for Team<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Team")
            .field("engine", &self.engine)
            .finish()
    }
}

impl<'c> Team<'c> {
    /// The team of committed group `group`'s members, with the [default
    /// capacity](Capacity::default) (collective over the group).
    ///
    /// # Errors
    /// As for [`with_capacity`](Self::with_capacity).
    pub fn new(coll: &'c Collectives<'c>, group: GroupId, timeout: Timeout) -> Result<Team<'c>> {
        Team::with_capacity(coll, group, Capacity::default(), timeout)
    }

    /// The team of committed group `group`'s members, staging `capacity` (collective over
    /// the group, which must all pass the same capacity). After [`gaspi::Error::Timeout`],
    /// call again with the same arguments to continue.
    ///
    /// # Errors
    /// The runtime's errors for the group and the segment creation; [`Error::TooLarge`]
    /// for a capacity that cannot be addressed.
    pub fn with_capacity(
        coll: &'c Collectives<'c>,
        group: GroupId,
        capacity: Capacity,
        timeout: Timeout,
    ) -> Result<Team<'c>> {
        let ctx = coll.context();
        let (ranks, n) = crate::group_members(ctx, group)?;
        let me = crate::own_index(ctx, group)?;
        Team::build(coll, group.into(), None, ranks, n, me, capacity, timeout)
    }

    #[allow(clippy::too_many_arguments)]
    fn build(
        coll: &'c Collectives<'c>,
        scope: gaspi::Scope<'_>,
        library_team: Option<gaspi::Team<'c>>,
        ranks: Vec<Rank>,
        n: u32,
        me: u32,
        capacity: Capacity,
        timeout: Timeout,
    ) -> Result<Team<'c>> {
        let ctx = coll.context();
        let layout = Layout::new(n, capacity.lanes.max(1), capacity.lane_bytes);
        let deadline = timeout.deadline();
        let seg =
            coll.library()
                .segment_create(scope, layout.bytes(), layout.ids(), deadline.left())?;
        let engine = Engine::new(ctx, seg, ranks, me, layout, deadline.left())?;
        Ok(Team {
            ctx,
            engine,
            choices: Choices::from_env(),
            _scope: library_team,
            namespace: PhantomData,
        })
    }

    /// Number of members.
    pub fn size(&self) -> u32 {
        self.engine.size()
    }

    /// This rank's member index.
    pub fn index(&self) -> u32 {
        self.engine.me()
    }

    /// The members' ranks, by member index.
    pub fn ranks(&self) -> &[Rank] {
        self.engine.ranks()
    }

    /// The context of the team.
    pub fn context(&self) -> &'c Context {
        self.ctx
    }

    pub(crate) fn choices(&self) -> &Choices {
        &self.choices
    }

    /// Initiates `schedule` (already synchronised for `flags`, its folds by `reducer`) for
    /// the caller's buffers.
    pub(crate) fn launch<'t, 'b>(
        &'t self,
        schedule: Prepared<'_>,
        reducer: Option<Box<dyn Reducer>>,
        signature: u64,
        algorithm: &'static str,
        src: &'b [u8],
        dst: &'b mut [u8],
    ) -> Result<Handle<'t, 'b>> {
        let seq = self
            .engine
            .initiate(schedule, reducer, signature, src, dst)?;
        Ok(Handle {
            engine: &self.engine,
            seq,
            src,
            dst,
            algorithm,
            synced: false,
        })
    }

    /// `schedule` of this member with the barriers `flags` ask for.
    pub(crate) fn synchronised(&self, schedule: Schedule, flags: Flags) -> Result<Schedule> {
        let (before, after) = flags.barriers()?;
        Ok(synchronise(
            schedule,
            self.size(),
            self.index(),
            before,
            after,
        ))
    }
}

/// A collective in flight, from a `_nb` operation of a [`Team`]: it borrows the buffers it
/// moves until it is synced. Syncing is local (GASNet's rule): members may sync in any
/// order, each when its [`Flags`] allow.
///
/// Dropping a handle that was not synced lets the collective finish for the other members
/// without this member's output: its source is captured at the drop.
pub struct Handle<'t, 'b> {
    engine: &'t dyn Runner,
    seq: u64,
    src: &'b [u8],
    dst: &'b mut [u8],
    algorithm: &'static str,
    synced: bool,
}

impl std::fmt::Debug for Handle<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("seq", &self.seq)
            .field("algorithm", &self.algorithm)
            .field("synced", &self.synced)
            .finish()
    }
}

impl Handle<'_, '_> {
    /// The algorithm that runs the collective (as in bench lines).
    pub fn algorithm(&self) -> &'static str {
        self.algorithm
    }

    /// Whether the collective is over here (its output delivered): never blocks.
    ///
    /// # Errors
    /// [`Error::Synced`] for a handle synced already; the collective's failure (a dead
    /// member as [`gaspi::Error::RankFailed`], [`Error::Mismatch`]), reported once.
    pub fn try_sync(&mut self) -> Result<bool> {
        match self.wait_sync(Timeout::Test) {
            Ok(()) => Ok(true),
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Waits until the collective is over here, at most `timeout`; after
    /// [`gaspi::Error::Timeout`] call again to continue.
    ///
    /// # Errors
    /// As for [`try_sync`](Self::try_sync), and [`gaspi::Error::Timeout`].
    pub fn wait_sync(&mut self, timeout: Timeout) -> Result<()> {
        let done = sync_set(std::slice::from_mut(self), 1, timeout)?;
        match done.into_iter().next() {
            Some((_, outcome)) => outcome,
            None => Err(gaspi::Error::Timeout.into()),
        }
    }

    fn owner(&mut self) -> Owner<'_> {
        Owner {
            seq: self.seq,
            src: self.src,
            dst: self.dst,
        }
    }
}

impl Drop for Handle<'_, '_> {
    fn drop(&mut self) {
        if !self.synced {
            self.engine.orphan(self.seq, self.src);
        }
    }
}

/// Syncs the unsynced `handles` until `enough` of them are over or `timeout` passed;
/// returns the index and outcome of each that completed in this call.
fn sync_set(
    handles: &mut [Handle<'_, '_>],
    enough: usize,
    timeout: Timeout,
) -> Result<Vec<(usize, Result<()>)>> {
    let Some(first) = handles.first() else {
        return Ok(Vec::new());
    };
    let engine = first.engine;
    if handles.iter().any(|h| !std::ptr::addr_eq(h.engine, engine)) {
        return Err(Error::ForeignHandle);
    }
    if handles.len() == 1 && handles[0].synced {
        return Err(Error::Synced);
    }
    let open: Vec<usize> = (0..handles.len()).filter(|&i| !handles[i].synced).collect();
    let mut owners: Vec<Owner<'_>> = handles
        .iter_mut()
        .filter(|h| !h.synced)
        .map(Handle::owner)
        .collect();
    let outcomes = engine.sync(&mut owners, enough, timeout.deadline())?;
    drop(owners);
    let mut done = Vec::new();
    for (k, outcome) in outcomes.into_iter().enumerate() {
        if let Some(outcome) = outcome {
            handles[open[k]].synced = true;
            done.push((open[k], outcome));
        }
    }
    Ok(done)
}

/// Syncs every handle of `handles` that can be synced now, without blocking; returns the
/// indices of those that completed in this call (each with its outcome). GASNet's
/// `try_sync_some`.
///
/// # Errors
/// [`Error::ForeignHandle`] for handles of several teams.
pub fn try_sync_some(handles: &mut [Handle<'_, '_>]) -> Result<Vec<(usize, Result<()>)>> {
    match sync_set(handles, usize::MAX, Timeout::Test) {
        Err(e) if e.is_timeout() => Ok(Vec::new()),
        other => other,
    }
}

/// Waits until at least one of the unsynced `handles` completes, at most `timeout`;
/// returns the indices of those that completed (each with its outcome). GASNet's
/// `wait_sync_some`.
///
/// # Errors
/// [`Error::ForeignHandle`]; [`gaspi::Error::Timeout`] when none completed in time.
pub fn wait_sync_some(
    handles: &mut [Handle<'_, '_>],
    timeout: Timeout,
) -> Result<Vec<(usize, Result<()>)>> {
    sync_set(handles, 1, timeout)
}

/// Whether every handle of `handles` is synced, syncing what can be now (never blocks).
/// GASNet's `try_sync_all`.
///
/// # Errors
/// [`Error::ForeignHandle`]; the first failure among the handles that completed.
pub fn try_sync_all(handles: &mut [Handle<'_, '_>]) -> Result<bool> {
    for (_, outcome) in try_sync_some(handles)? {
        outcome?;
    }
    Ok(handles.iter().all(|h| h.synced))
}

/// Waits until every handle of `handles` is synced, at most `timeout`; after
/// [`gaspi::Error::Timeout`] call again to continue. GASNet's `wait_sync_all`.
///
/// # Errors
/// [`Error::ForeignHandle`]; [`gaspi::Error::Timeout`]; the first failure among the
/// handles.
pub fn wait_sync_all(handles: &mut [Handle<'_, '_>], timeout: Timeout) -> Result<()> {
    let left = handles.iter().filter(|h| !h.synced).count();
    for (_, outcome) in sync_set(handles, left, timeout)? {
        outcome?;
    }
    if handles.iter().all(|h| h.synced) {
        Ok(())
    } else {
        Err(gaspi::Error::Timeout.into())
    }
}
