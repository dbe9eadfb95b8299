//! GASNet's teams, collective handles and sync modes: [`Team`], [`Handle`], [`Flags`] and
//! the syncs over sets of handles.
//!
//! A team is an immutable set of ranks with a member index each (a committed group, or a
//! [`split`](Team::split) of another team), and one [engine](crate::engine) that runs every
//! collective of the team. Each operation exists blocking and non-blocking (`_nb`, which
//! returns a [`Handle`]); the handle borrows the buffers it moves until it is synced, so the
//! borrow checker enforces the spec's rule that they are left untouched while in flight.

use std::ops::Range;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use gaspi::{Context, GroupId, Rank, Timeout};
use rustc_hash::FxHashMap;

use crate::buffer::{Input, Output};
use crate::engine::{Engine, Engines, Launch, Layout, Owner, Runner};
use crate::error::{Error, Result};
use crate::ops::{signature, Choices};
use crate::schedule::{sync::synchronise, Schedule};
use crate::Collectives;

bitflags::bitflags! {
    /// The flags of a team collective: exactly one `IN_` mode, one `OUT_` mode, and one of
    /// [`SINGLE`](Self::SINGLE) / [`LOCAL`](Self::LOCAL) (GASNet's `GASNET_COLL_*`).
    ///
    /// | mode | meaning (GASNet) | here |
    /// |---|---|---|
    /// | `IN_NOSYNC` | data may move as soon as any member entered | eager: a put waits only for its receiver's stage to be free of earlier collectives (flow control, not the receiver's entry), where the algorithm lists its credits; the arguments are trusted (a disagreement is named only where a receiver hears from a member that disagrees with it) |
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
        /// The source is a [`SegmentRange`](crate::SegmentRange) of one of the user's
        /// segments (checked; an empty source in memory is accepted where the member reads
        /// none, e.g. a non-root's in a broadcast).
        const SRC_IN_SEGMENT = 1 << 8;
        /// The destination is a [`SegmentRange`](crate::SegmentRange) of one of the user's
        /// segments (checked like [`SRC_IN_SEGMENT`](Self::SRC_IN_SEGMENT)).
        const DST_IN_SEGMENT = 1 << 9;
    }
}

impl Flags {
    /// The most common choice: `IN_MYSYNC | OUT_MYSYNC | LOCAL`.
    pub const MY: Flags = Flags::IN_MYSYNC
        .union(Flags::OUT_MYSYNC)
        .union(Flags::LOCAL);
    /// What an MPI collective does: `IN_NOSYNC | OUT_MYSYNC | LOCAL`. Data moves eagerly
    /// (into the team's staging, never into a member's buffers before it entered), and a
    /// call returns once this member's buffers are done with.
    pub const EAGER: Flags = Flags::IN_NOSYNC
        .union(Flags::OUT_MYSYNC)
        .union(Flags::LOCAL);
    /// Full synchronisation on both sides: `IN_ALLSYNC | OUT_ALLSYNC | LOCAL`.
    pub const ALL: Flags = Flags::IN_ALLSYNC
        .union(Flags::OUT_ALLSYNC)
        .union(Flags::LOCAL);

    /// Checks that exactly one mode of each kind and one addressing style are given;
    /// returns whether barriers are needed before and after.
    fn barriers(self) -> Result<(bool, bool)> {
        if !Flags::all().contains(self) {
            return Err(Error::Flags {
                flags: self.bits(),
                why: "bits that name no flag are set",
            });
        }
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

    /// Checks that the `IN_SEGMENT` flags say where `src` and `dst` are, and that segment
    /// ranges lie in their segments.
    pub(crate) fn check_buffers(
        self,
        ctx: &Context,
        src: &Input<'_>,
        dst: &Output<'_>,
    ) -> Result<()> {
        // Memory on both sides, as the flags say: nothing to check (the common case, on
        // every call).
        if !self.intersects(Flags::SRC_IN_SEGMENT | Flags::DST_IN_SEGMENT)
            && matches!((src, dst), (Input::Memory(_), Output::Memory(_)))
        {
            return Ok(());
        }
        let agree = |flag: Flags, in_segment: bool, empty: bool, what: &'static str| {
            if self.contains(flag) == in_segment || (self.contains(flag) && empty) {
                Ok(())
            } else {
                Err(Error::Flags {
                    flags: self.bits(),
                    why: what,
                })
            }
        };
        agree(
            Flags::SRC_IN_SEGMENT,
            matches!(src, Input::Segment(_)),
            src.is_empty(),
            "SRC_IN_SEGMENT is set if and only if the source is a segment range",
        )?;
        agree(
            Flags::DST_IN_SEGMENT,
            matches!(dst, Output::Segment(_)),
            dst.is_empty(),
            "DST_IN_SEGMENT is set if and only if the destination is a segment range",
        )?;
        src.check(ctx)?;
        dst.check(ctx)
    }
}

/// The staging a team reserves: `lanes` collectives may hold staging at once, each up to
/// `lane_bytes` bytes of it on every member. Every member of a team passes the same
/// capacity ([`Error::CapacityMismatch`] otherwise); a team of `n` members needs at least
/// 1 lane of `2 · n` bytes ([`Error::CapacityTooSmall`]), the least an `exchangev` streams
/// through (a byte from and to every partner). With lanes that small, a collective whose
/// smallest cut (a byte per block, an element per block for an allreduce) still stages more
/// than a lane fails with [`Error::TooLarge`].
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
/// [`Capacity::lanes`] stages of [`Capacity::lane_bytes`]; the (n+1)-th collective in
/// flight waits in the engine for the lane of the first (initiation never waits). A
/// collective whose staging exceeds a lane on any member runs as *pieces* on every member:
/// piece `k` moves bytes `[k·c, (k+1)·c)` of every block, with `c` the largest cut whose
/// staging fits a lane, and the pieces stream through the lanes like consecutive
/// collectives (each with the sync modes' barriers, so `ALLSYNC` holds for every byte).
/// Any size works as long as a cut of one byte per block fits a lane ([`Error::TooLarge`]
/// otherwise: `n` bytes for a gather_all, say). `exchangev` is never cut into
/// pieces (no member knows the others' counts, so members could not cut alike): it runs as
/// one collective that streams every block in chunks of `lane_bytes / (2 · size())` bytes,
/// which the block's sender and receiver (both knowing its size) cut alike, through a slot
/// per partner on either side, so its staging stays within a lane whatever the counts.
///
/// # Progress
/// Steps that touch the caller's buffers are taken in the calls that hold the collective's
/// handle (initiation, [`Handle::try_sync`], [`Handle::wait_sync`] and the set syncs), all
/// other steps in any call of the team. A collective that still has to read its source
/// when its initiation returns (pieces waiting for a lane, exchangev blocks of several
/// chunks, an allreduce's folds) copies the source then, so its sends go on in any call:
/// handles may be synced in any order on each member. A blocking call waits at once with
/// the source at hand, and copies it only if it returns before the collective completed
/// (a timeout): its steps read the caller's buffer where it is. Writes into the
/// destination wait for the sync. A call about to sleep also moves on the collectives of
/// the other teams of its family (the team made of a group, and the teams split off it and
/// off those) that no thread waits in, so members may sync overlapping teams of one family
/// in any order. Teams made apart ([`Team::new`] twice, even of one group) are families of
/// their own: a member waiting in one does not move the other on, so members sync their
/// collectives in the order they initiated them (or split one team off the other). (One
/// family per [`Collectives`] would make the namespace invariant in its lifetime, which
/// borrowers such as [`Round`](crate::Round) rely on.)
///
/// # Faults
/// A dead member makes every pending collective of the team fail naming it
/// ([`gaspi::Error::RankFailed`]), and every collective a member initiates once it knows of the
/// death ([`Context::known_failure`](gaspi::Context::known_failure)) fails so at once, also where
/// its own part needs nothing of the dead member; a member that initiated another collective, or
/// the same one with another root, size, sync mode or algorithm, is named when one of its
/// notifications reaches a member that disagrees ([`Error::Mismatch`], which names the member
/// whose notification was expected there), and otherwise its partners time out: members that
/// disagree about a root, or about the `IN_` sync mode, send where the others never look. A
/// member whose own arguments are refused at the call (a root's `src` shorter than `dst`, say)
/// returns the error without taking part: the members that need it time out, and the team is
/// out of step (drop it, as after disagreeing arguments).
pub struct Team<'c> {
    coll: &'c Collectives<'c>,
    /// Shared with the family's list of engines (see "Other teams" in the engine).
    engine: Arc<Engine<'c>>,
    /// The engines of the team's family: this team's, and those of the teams split off it
    /// and off them (or of the team it was split off).
    engines: Arc<Engines<'c>>,
    /// See [`Team::id`].
    id: u64,
    /// Splits of this team completed so far, for the ids of the teams they make.
    splits: AtomicU64,
    /// Member index by rank, looked up on every rooted call: hashed as the integer it is
    /// (`FxHash`), not with `std`'s SipHash, which cost a rooted call ~120 instructions.
    index: FxHashMap<Rank, u32>,
    choices: Choices,
    capacity: Capacity,
    /// The runtime's team of the members: the scope of the team's segment and its splits,
    /// so that neither depends on a group id the user may delete and reuse.
    scope: gaspi::Team<'c>,
    /// A split of this team that timed out, to be continued.
    splitting: Mutex<Option<Splitting<'c>>>,
}

/// Domains of the words [`Team::id`] mixes, so that a team of a group and a split cannot
/// share an id by their numbers alone.
const TEAM_OF_GROUP: u64 = 0x7ea3_0f67;
const SPLIT: u64 = 0x5b11_7ea3;
/// Domain of the agreement word of a team's segment: its capacity.
const CAPACITY: u64 = 0xca9a_c174;

/// A split that timed out: what it got so far.
struct Splitting<'c> {
    color: Option<u32>,
    key: u32,
    /// The runtime's split, once over (`None` inside: no colour, no team).
    team: Option<Option<gaspi::Team<'c>>>,
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
    /// the group, which must all pass the same capacity); member indices are the group's.
    /// The team keeps these members whatever becomes of the group later (deleted, or its id
    /// reused). After [`gaspi::Error::Timeout`], call again with the same arguments to
    /// continue.
    ///
    /// # Errors
    /// The runtime's errors for the group and the segment creation (among them
    /// [`gaspi::Error::LibrarySegment`] for staging the runtime cannot make — more bytes than
    /// memory, more notifications than a table holds — and, on the other members,
    /// [`gaspi::Error::LibraryRefused`] naming the member that could not);
    /// [`Error::CapacityTooSmall`]; [`Error::Unaddressable`] for a capacity whose bytes or
    /// notifications cannot be counted; [`Error::CapacityMismatch`] naming a member that
    /// passed another capacity. Each fails every member alike: none gets a team.
    pub fn with_capacity(
        coll: &'c Collectives<'c>,
        group: GroupId,
        capacity: Capacity,
        timeout: Timeout,
    ) -> Result<Team<'c>> {
        let scope = coll.library().team_of_group(group)?;
        // Teams of a group are made in the same order on its members: the count is theirs.
        let key = crate::group_key(group, &scope.ranks());
        let id = signature(&[TEAM_OF_GROUP, key, coll.teams_of(key)]);
        let engines = Arc::new(Engines::default());
        let team = Team::build(coll, scope, capacity, id, engines, timeout);
        let team = team.map_err(|(e, _)| e)?;
        coll.made_team_of(key);
        Ok(team)
    }

    /// Splits the team by `color` (collective over the team, like `MPI_Comm_split`): the
    /// members that pass the same `Some(color)` form a new team, with member indices in the
    /// order of `key` and, for equal keys, of their index here; a member passing `None`
    /// takes part but joins no team and gets `Ok(None)`. The new team has this team's
    /// [`Capacity`] (see [`split_with_capacity`](Self::split_with_capacity)) and its own
    /// engine: collectives on disjoint teams may be initiated and synced in any interleaving.
    /// After [`gaspi::Error::Timeout`], call again with the same arguments to continue.
    ///
    /// # Errors
    /// [`Error::SplitInProgress`] when a split with other arguments timed out and was not
    /// continued; the runtime's errors of [`gaspi::Library::split`] and of the segment
    /// creation (a dead member as [`gaspi::Error::RankFailed`]); the capacity's errors of
    /// [`with_capacity`](Self::with_capacity), among the new team's members.
    pub fn split(
        &self,
        color: Option<u32>,
        key: u32,
        timeout: Timeout,
    ) -> Result<Option<Team<'c>>> {
        self.split_with_capacity(color, key, self.capacity, timeout)
    }

    /// [`split`](Self::split), staging `capacity` in the new team (the same on its members).
    ///
    /// # Errors
    /// As for [`split`](Self::split).
    pub fn split_with_capacity(
        &self,
        color: Option<u32>,
        key: u32,
        capacity: Capacity,
        timeout: Timeout,
    ) -> Result<Option<Team<'c>>> {
        let deadline = timeout.deadline();
        // Only the pending split is under the lock: a consistent value whatever panicked.
        let mut splitting = self
            .splitting
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let mut split = match splitting.take() {
            Some(s) if s.color == color && s.key == key => s,
            Some(s) => {
                let pending = Error::SplitInProgress {
                    color: s.color,
                    key: s.key,
                };
                *splitting = Some(s);
                return Err(pending);
            }
            None => Splitting {
                color,
                key,
                team: None,
            },
        };
        let team = match split.team.take() {
            Some(team) => team,
            None => {
                let library = self.coll.library();
                match library.split(&self.scope, color, key, deadline.left()) {
                    Ok(team) => team,
                    Err(e) => {
                        if e.is_timeout() {
                            *splitting = Some(split);
                        }
                        return Err(e.into());
                    }
                }
            }
        };
        let Some(team) = team else {
            self.splits.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        };
        let splits = self.splits.load(Ordering::Relaxed);
        let id = signature(&[
            SPLIT,
            self.id,
            splits,
            color.map_or(0, |c| u64::from(c) + 1),
        ]);
        let engines = Arc::clone(&self.engines);
        match Team::build(self.coll, team, capacity, id, engines, deadline.left()) {
            Ok(team) => {
                self.splits.fetch_add(1, Ordering::Relaxed);
                Ok(Some(team))
            }
            Err((e, team)) => {
                if e.is_timeout() {
                    split.team = Some(Some(team));
                    *splitting = Some(split);
                } else {
                    // Every member of the new team failed alike (a capacity they disagree
                    // on, say): the split is over, and the next one is another.
                    self.splits.fetch_add(1, Ordering::Relaxed);
                }
                Err(e)
            }
        }
    }

    /// The team of `scope`'s members (on failure, `scope` comes back with the error).
    fn build(
        coll: &'c Collectives<'c>,
        scope: gaspi::Team<'c>,
        capacity: Capacity,
        id: u64,
        engines: Arc<Engines<'c>>,
        timeout: Timeout,
    ) -> std::result::Result<Team<'c>, (Error, gaspi::Team<'c>)> {
        let ctx = coll.context();
        let (ranks, me) = (scope.ranks(), scope.index());
        let n = scope.size();
        let Capacity { lanes, lane_bytes } = capacity;
        let least = 2 * u64::from(n);
        let layout = if lanes == 0 || lane_bytes < least {
            Err(Error::CapacityTooSmall {
                lanes,
                lane_bytes,
                size: n,
            })
        } else {
            Layout::new(n, lanes, lane_bytes).ok_or_else(|| {
                let max = u128::from(lanes) * u128::from(lane_bytes);
                let max = u64::try_from(max).unwrap_or(u64::MAX);
                Error::Unaddressable { max }
            })
        };
        // A member refusing its capacity still takes part in the creation, with the least
        // layout and its own capacity's agreement word, so that partners that passed another
        // learn it at once (as a mismatch naming it) instead of timing out.
        let made = match &layout {
            Ok(layout) => Some(*layout),
            Err(_) => Layout::new(n, 1, least),
        };
        let Some(made) = made else {
            return Err((
                layout.err().unwrap_or(Error::Unaddressable { max: least }),
                scope,
            ));
        };
        let deadline = timeout.deadline();
        let created = coll.library().segment_create_agreed(
            &scope,
            made.bytes(),
            made.ids(),
            signature(&[CAPACITY, u64::from(lanes), lane_bytes]),
            deadline.left(),
        );
        let (seg, layout) = match (created, layout) {
            (Err(e), _) if e.is_timeout() => return Err((e.into(), scope)),
            (_, Err(refused)) => return Err((refused, scope)),
            (Ok(seg), Ok(layout)) => (seg, layout),
            (Err(gaspi::Error::LibraryDisagreement { rank, .. }), Ok(_)) => {
                return Err((Error::CapacityMismatch { rank }, scope))
            }
            (Err(e), Ok(_)) => return Err((e.into(), scope)),
        };
        let index = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| (r, i as u32))
            .collect();
        let family = Arc::clone(&engines);
        let engine = Arc::new(Engine::new(ctx, family, seg, ranks, me, layout));
        engines.register(&engine);
        Ok(Team {
            coll,
            engine,
            engines,
            id,
            splits: AtomicU64::new(0),
            index,
            choices: Choices::from_env(),
            capacity,
            scope,
            splitting: Mutex::new(None),
        })
    }

    /// The team's identifier: the same on every member, and another for every team of
    /// the same [`Collectives`] — made from the group's id and members and the number of
    /// teams of that group made before it, or, for a split, from the parent's identifier,
    /// the number of its splits before and the colour. GASNet's team handle, as a value that
    /// members can compare (or send each other).
    pub fn id(&self) -> u64 {
        self.id
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

    /// The member index of `rank`, if it is a member.
    pub fn index_of(&self, rank: Rank) -> Option<u32> {
        self.index.get(&rank).copied()
    }

    /// The context of the team.
    pub fn context(&self) -> &'c Context {
        self.coll.context()
    }

    pub(crate) fn choices(&self) -> &Choices {
        &self.choices
    }

    /// Initiates a collective of `launches` (one per piece, their schedules synchronised
    /// for `flags`) for the caller's buffers. `lend` says when its runs get what they still
    /// need of the source to move on in any call of the team: as the handle is returned
    /// ([`Lend::Now`]), or only if the handle's first sync does not complete it
    /// ([`Lend::Late`]).
    pub(crate) fn launch<'t, 'b>(
        &'t self,
        launches: &mut [Launch<'_>],
        flags: Flags,
        algorithm: &'static str,
        lend: Lend,
        src: Input<'b>,
        mut dst: Output<'b>,
    ) -> Result<Handle<'t, 'b>> {
        let (seqs, outcome) = self.engine.initiate(
            launches,
            flags.contains(Flags::IN_NOSYNC),
            lend == Lend::Now,
            src,
            dst.reborrow(),
        )?;
        Ok(Handle {
            engine: &*self.engine,
            seqs,
            src,
            dst,
            algorithm,
            synced: false,
            lent: lend == Lend::Now,
            outcome,
        })
    }

    /// The bytes of staging one collective may use on this member.
    pub(crate) fn lane_bytes(&self) -> u64 {
        self.capacity.lane_bytes
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
/// without this member's output (the part of the source it still has to send was copied
/// when the collective was initiated). Its remaining steps are this member's to take, as
/// every step is (see "Progress" on [`Team`]): the drop takes what it can at once, and the
/// rest is taken by this member's later calls on the team (or on a team of its family). A
/// member that drops a handle and then makes no such call (it waits in the runtime's
/// barrier, say) can leave the others waiting for its part until their timeout: sync the
/// handle, or call on the team, first.
pub struct Handle<'t, 'b> {
    engine: &'t dyn Runner,
    /// Its runs, one per piece.
    seqs: Range<u64>,
    src: Input<'b>,
    dst: Output<'b>,
    algorithm: &'static str,
    synced: bool,
    /// Its runs have what they need of the source to move on without the handle.
    lent: bool,
    /// The outcome of a collective that the initiating call collected already (see
    /// [`Engine::initiate`]), for its first sync: one lock, one pass and one wake-up check
    /// fewer per call.
    outcome: Option<Result<()>>,
}

/// When a collective's runs get what they still need of the caller's source, so that any
/// call of the team moves them on (see "The caller's buffers" in the engine).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Lend {
    /// As the initiating call returns its handle: the caller may sync other collectives
    /// first, whose progress on other members may wait for this one's.
    Now,
    /// Only when the handle's first sync returns without the collective complete, or the
    /// handle is dropped: for a blocking call, which syncs the handle at once, with the
    /// source lent again. A large allreduce's folds then read the source where it is
    /// instead of a copy staged as the initiating call returns (a pass over half the
    /// vector), and a large collective's pieces waiting for a lane read it without a copy
    /// of the whole source.
    Late,
}

impl std::fmt::Debug for Handle<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Handle")
            .field("seqs", &self.seqs)
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
    /// [`gaspi::Error::Timeout`] call again to continue. As in the runtime's waits, the
    /// timeout starts counting when the call first has to wait: a sync that finds the
    /// collective over never reads the clock.
    ///
    /// # Errors
    /// As for [`try_sync`](Self::try_sync), and [`gaspi::Error::Timeout`].
    ///
    /// # Panics
    /// With the panic of the collective's user operator (see
    /// [`Team::allreduce_with_nb`]), here as in [`try_sync`](Self::try_sync) and the syncs
    /// of sets, which keep the outcomes of the other handles that completed in the same
    /// call for their next sync.
    pub fn wait_sync(&mut self, timeout: Timeout) -> Result<()> {
        if self.synced {
            return Err(Error::Synced);
        }
        if let Some(outcome) = self.outcome.take() {
            return self.synced_with(outcome);
        }
        let engine = self.engine;
        let mut outcome = [None];
        let mut owner = self.owner();
        let synced = engine.sync(std::slice::from_mut(&mut owner), &mut outcome, 1, timeout);
        let panic = owner.panic.take();
        drop(owner);
        match (synced, outcome) {
            (Ok(()), [Some(outcome)]) => {
                let outcome = self.synced_with(outcome);
                if let Some(panic) = panic {
                    std::panic::resume_unwind(panic);
                }
                outcome
            }
            (synced, _) => {
                self.lend();
                synced?;
                Err(gaspi::Error::Timeout.into())
            }
        }
    }

    /// Marks the handle synced with its collective's `outcome`.
    fn synced_with(&mut self, outcome: Result<()>) -> Result<()> {
        if outcome.is_err() {
            // The failure of one piece leaves the others to go on without the handle.
            self.lend();
        }
        self.synced = true;
        outcome
    }

    /// Gives the runs what they still need of the source, if they were initiated without.
    fn lend(&mut self) {
        if !std::mem::replace(&mut self.lent, true) {
            self.engine.lend(self.seqs.clone(), self.src);
        }
    }

    fn owner(&mut self) -> Owner<'_> {
        Owner {
            seqs: self.seqs.clone(),
            src: self.src,
            dst: self.dst.reborrow(),
            panic: None,
        }
    }
}

impl Drop for Handle<'_, '_> {
    fn drop(&mut self) {
        if !self.synced {
            let src = (!self.lent).then_some(self.src);
            self.engine.orphan(self.seqs.clone(), src);
        }
    }
}

/// What a set sync found: the index and outcome of each handle that completed in it, and
/// how its wait ended.
type Synced = (Vec<(usize, Result<()>)>, Result<()>);

/// Syncs the unsynced `handles` until `enough` of them are over or `timeout` passed. Each
/// handle whose outcome was taken is synced and reported, whatever the wait ended in: its
/// outcome is known only here.
fn sync_set(handles: &mut [Handle<'_, '_>], enough: usize, timeout: Timeout) -> Result<Synced> {
    // An empty set is all synced: nothing in it can complete (the set syncs say `Synced`
    // for it, or, for `_all`, that it is done).
    let Some(first) = handles.first() else {
        return Err(Error::Synced);
    };
    let engine = first.engine;
    if handles.iter().any(|h| !std::ptr::addr_eq(h.engine, engine)) {
        return Err(Error::ForeignHandle);
    }
    // Whatever the set's size: nothing in it can complete any more.
    if handles.iter().all(|h| h.synced) {
        return Err(Error::Synced);
    }
    let open: Vec<usize> = (0..handles.len()).filter(|&i| !handles[i].synced).collect();
    // Those collected as they were initiated count as complete.
    let mut outcomes: Vec<Option<Result<()>>> =
        open.iter().map(|&i| handles[i].outcome.take()).collect();
    let mut owners: Vec<Owner<'_>> = handles
        .iter_mut()
        .filter(|h| !h.synced)
        .map(Handle::owner)
        .collect();
    let synced = engine.sync(&mut owners, &mut outcomes, enough, timeout);
    let panicked = owners
        .iter_mut()
        .enumerate()
        .find_map(|(k, o)| Some((k, o.panic.take()?)));
    drop(owners);
    let mut done = Vec::new();
    for (k, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Some(outcome) => {
                if outcome.is_err() {
                    handles[open[k]].lend();
                }
                handles[open[k]].synced = true;
                done.push((open[k], outcome));
            }
            None => handles[open[k]].lend(),
        }
    }
    if let Some((k, panic)) = panicked {
        // The panic goes on instead of this call's report: the other handles that completed
        // keep their outcomes for their next sync, as if collected as they were initiated.
        for (i, outcome) in done {
            if i != open[k] {
                handles[i].synced = false;
                handles[i].outcome = Some(outcome);
            }
        }
        std::panic::resume_unwind(panic);
    }
    Ok((done, synced))
}

/// The collectives of a set sync that completed, or, when none did, how its wait ended.
fn some(synced: Synced) -> Result<Vec<(usize, Result<()>)>> {
    match synced {
        (done, Err(e)) if done.is_empty() => Err(e),
        (done, _) => Ok(done),
    }
}

/// Syncs every handle of `handles` that can be synced now, without blocking; returns the
/// indices of those that completed in this call (each with its outcome), also while others
/// have not. GASNet's `try_sync_some`.
///
/// # Errors
/// [`Error::ForeignHandle`] for handles of several teams; [`Error::Synced`] when every
/// handle is synced already (an empty set included).
pub fn try_sync_some(handles: &mut [Handle<'_, '_>]) -> Result<Vec<(usize, Result<()>)>> {
    match some(sync_set(handles, usize::MAX, Timeout::Test)?) {
        Err(e) if e.is_timeout() => Ok(Vec::new()),
        other => other,
    }
}

/// Waits until at least one of the unsynced `handles` completes, at most `timeout`;
/// returns the indices of those that completed (each with its outcome). GASNet's
/// `wait_sync_some`.
///
/// A call looks at every handle of the set, as `MPI_Waitsome` does, and runs start only as
/// lanes come free (see [`Capacity`]), so a few complete per call: syncing a set of `n`
/// handles this way costs about `n² / lanes` looks (16 384 eager 8-byte collectives at 2
/// ranks: 3.7 s, against 0.2 s for 4 096). For tens of thousands in flight, sync in
/// [`wait_sync_all`], or `wait_sync_some` over a window of the oldest few hundred.
///
/// # Errors
/// [`Error::ForeignHandle`]; [`gaspi::Error::Timeout`] when none completed in time;
/// [`Error::Synced`] when every handle is synced already (an empty set included: nothing
/// could complete).
pub fn wait_sync_some(
    handles: &mut [Handle<'_, '_>],
    timeout: Timeout,
) -> Result<Vec<(usize, Result<()>)>> {
    some(sync_set(handles, 1, timeout)?)
}

/// Whether every handle of `handles` is synced, syncing what can be now (never blocks);
/// `true` for handles all synced before. GASNet's `try_sync_all`.
///
/// # Errors
/// [`Error::ForeignHandle`]; the first failure among the handles that completed.
pub fn try_sync_all(handles: &mut [Handle<'_, '_>]) -> Result<bool> {
    match try_sync_some(handles) {
        Err(Error::Synced) => return Ok(true),
        done => {
            for (_, outcome) in done? {
                outcome?;
            }
        }
    }
    Ok(handles.iter().all(|h| h.synced))
}

/// Waits until every handle of `handles` is synced, at most `timeout` (at once for handles
/// all synced before); after [`gaspi::Error::Timeout`] call again to continue. GASNet's
/// `wait_sync_all`.
///
/// # Errors
/// [`Error::ForeignHandle`]; [`gaspi::Error::Timeout`]; the first failure among the
/// handles.
pub fn wait_sync_all(handles: &mut [Handle<'_, '_>], timeout: Timeout) -> Result<()> {
    let left = handles.iter().filter(|h| !h.synced).count();
    let (done, waited) = match sync_set(handles, left, timeout) {
        Err(Error::Synced) => return Ok(()),
        other => other?,
    };
    // A failure is reported before a timeout: its handle is synced, and a later call would
    // not see it again.
    for (_, outcome) in done {
        outcome?;
    }
    waited?;
    if handles.iter().all(|h| h.synced) {
        Ok(())
    } else {
        Err(gaspi::Error::Timeout.into())
    }
}
