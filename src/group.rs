//! Groups: ordered subsets of the job's ranks that synchronise (and, later, reduce) together.
//!
//! A group is built locally ([`Context::group_create`], [`Context::group_add`]) and then
//! committed collectively by its members ([`Context::group_commit`]). The commit runs a
//! dissemination over the members that combines a fingerprint of each member's view (group id
//! and member list) into a global `(min, max)`; if any two members disagree, every member that
//! takes part sees `min != max` and reports [`Error::GroupMismatch`]. Members must create their
//! groups in the same order, so that ids agree (as in GPI-2): the id selects the system
//! notification slots the group's collectives use. A rank whose expected partners never commit
//! the same group waits until its timeout — pass a finite one when views may differ.
//!
//! [`GROUP_ALL`] (id 0) holds every rank and is committed from the start; [`Context::barrier`]
//! is its barrier. Rank ↔ member-index lookups are O(1).

use std::collections::{BTreeSet, HashMap};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, RwLock};

use gaspi_notifications::{Deadline, Timeout};

use crate::allreduce::{ReduceArea, ReduceState};
use crate::context::Context;
use crate::dissemination::{CollState, Purpose, Spread, Watch, SLOTS_PER_GROUP};
use crate::engine::lookup::{DescKey, Descriptor};
use crate::error::{Error, Rank, Result};
use crate::queue::{Label, Queue};
use crate::timed_lock::{TimedGuard, TimedMutex};

/// Identifier of a group.
pub type GroupId = u8;

/// The group of all ranks, committed at init.
pub const GROUP_ALL: GroupId = 0;

/// The members of a committed (or committing) group.
#[derive(Debug, Clone)]
pub(crate) enum Members {
    /// Ranks `0..n`: index and rank coincide.
    All(u32),
    /// The ranks in member order (ascending for a group), with the reverse map.
    Some {
        ranks: Vec<Rank>,
        index: HashMap<Rank, u32>,
    },
}

impl Members {
    pub(crate) fn from_set(set: &BTreeSet<Rank>) -> Self {
        Members::in_order(set.iter().copied().collect())
    }

    /// Members `ranks`, member `i` being `ranks[i]` (distinct ranks).
    pub(crate) fn in_order(ranks: Vec<Rank>) -> Self {
        let index = ranks
            .iter()
            .enumerate()
            .map(|(i, &r)| (r, i as u32))
            .collect();
        Members::Some { ranks, index }
    }

    pub(crate) fn len(&self) -> u32 {
        match self {
            Members::All(n) => *n,
            Members::Some { ranks, .. } => ranks.len() as u32,
        }
    }

    pub(crate) fn index_of(&self, rank: Rank) -> Option<u32> {
        match self {
            Members::All(n) => (rank < *n).then_some(rank),
            Members::Some { index, .. } => index.get(&rank).copied(),
        }
    }

    pub(crate) fn rank_at(&self, index: u32) -> Option<Rank> {
        match self {
            Members::All(n) => (index < *n).then_some(index),
            Members::Some { ranks, .. } => ranks.get(index as usize).copied(),
        }
    }

    pub(crate) fn ranks(&self) -> Vec<Rank> {
        match self {
            Members::All(n) => (0..*n).collect(),
            Members::Some { ranks, .. } => ranks.clone(),
        }
    }
}

/// A group whose membership is fixed.
pub(crate) struct Group {
    pub(crate) id: GroupId,
    pub(crate) members: Members,
    /// The dissemination runs (barriers, and the synchronisations of `segment_create`,
    /// commits and `finalize`). Held by one such call for its whole run, waits included:
    /// another thread's call waits for it only until its own deadline.
    state: TimedMutex<CollState>,
    /// The allreduce, on slots of its own, so that a barrier and an allreduce of the group
    /// can be in flight at once (GASPI 17.1, §11.1). Held likewise by an allreduce, and, so
    /// that no allreduce crosses them, by the synchronisations other than a barrier, which
    /// take it before `state`.
    reduce: TimedMutex<ReduceState>,
    /// Where partners write this member's allreduce data (none for a group of one).
    pub(crate) area: Option<ReduceArea>,
    /// The partners' areas, looked up on first use.
    pub(crate) peer_areas: Mutex<HashMap<Rank, Descriptor>>,
    /// The allreduce writes in flight: a run ends only once they completed, so a send slot is
    /// never rewritten while the provider may still read it.
    pub(crate) writes: Arc<Queue>,
}

impl std::fmt::Debug for Group {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Group")
            .field("id", &self.id)
            .field("members", &self.members)
            .finish()
    }
}

impl Group {
    pub(crate) fn new(id: GroupId, members: Members, area: Option<ReduceArea>) -> Self {
        Group {
            id,
            members,
            state: TimedMutex::new(CollState::default()),
            reduce: TimedMutex::new(ReduceState::default()),
            area,
            peer_areas: Mutex::new(HashMap::new()),
            writes: Queue::new(Label::Batch, u32::MAX, None),
        }
    }

    /// The members' ranks, in member order.
    pub(crate) fn member_ranks(&self) -> impl Iterator<Item = Rank> + '_ {
        (0..self.members.len()).filter_map(|i| self.members.rank_at(i))
    }

    /// The dissemination state, for one call at a time: a call that finds another one's run
    /// under way waits for it until `deadline`.
    ///
    /// # Errors
    /// [`Error::Timeout`] when `deadline` passed first; the state is then untouched, so the
    /// call can simply be made again.
    pub(crate) fn state(&self, deadline: Deadline) -> Result<TimedGuard<'_, CollState>> {
        self.state.lock_until(deadline).ok_or(Error::Timeout)
    }

    /// The allreduce state, as [`state`](Self::state) the dissemination's.
    ///
    /// # Errors
    /// As for [`state`](Self::state).
    pub(crate) fn reduce_state(&self, deadline: Deadline) -> Result<TimedGuard<'_, ReduceState>> {
        self.reduce.lock_until(deadline).ok_or(Error::Timeout)
    }

    /// Whether this member took every notification partners sent it for the group (see
    /// [`CollState::settled`]); not while a collective call of the group is under way.
    fn settled(&self) -> bool {
        self.state.try_lock().is_some_and(|state| state.settled())
            && self
                .reduce
                .try_lock()
                .is_some_and(|reduce| reduce.settled())
    }
}

/// Where a group id stands.
#[derive(Debug)]
enum Slot {
    Free,
    /// Created, members being added.
    Building {
        members: BTreeSet<Rank>,
        /// A commit of it failed here with [`Error::GroupMismatch`]: partners' notifications
        /// of that commit may lie in its slots.
        stale: bool,
    },
    /// Membership fixed, commit started but not finished (it timed out, or is running).
    Committing(Arc<Group>),
    Committed(Arc<Group>),
}

/// All groups of a context.
#[derive(Debug)]
pub(crate) struct Groups {
    slots: RwLock<Vec<Slot>>,
    /// [`GROUP_ALL`], which is never deleted nor recommitted: its collectives (the barrier,
    /// the finalize) reach it without the lock and reference count of a lookup.
    all: Arc<Group>,
}

/// A committed group, as a lookup found it.
pub(crate) enum GroupRef<'a> {
    /// [`GROUP_ALL`], which lives as long as the context.
    All(&'a Group),
    Other(Arc<Group>),
}

impl std::ops::Deref for GroupRef<'_> {
    type Target = Group;

    fn deref(&self) -> &Group {
        match self {
            GroupRef::All(g) => g,
            GroupRef::Other(g) => g,
        }
    }
}

impl Groups {
    /// The groups of a job of `size` ranks; `GROUP_ALL` gets `area`.
    pub(crate) fn new(max: u8, size: u32, area: Option<ReduceArea>) -> Self {
        let all = Arc::new(Group::new(GROUP_ALL, Members::All(size), area));
        let mut slots: Vec<Slot> = (0..max).map(|_| Slot::Free).collect();
        slots[usize::from(GROUP_ALL)] = Slot::Committed(Arc::clone(&all));
        Groups {
            slots: RwLock::new(slots),
            all,
        }
    }

    /// The slots, for a change of some group's state.
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Vec<Slot>> {
        self.slots.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The committed group `id`.
    pub(crate) fn committed(&self, id: GroupId) -> Result<GroupRef<'_>> {
        if id == GROUP_ALL {
            return Ok(GroupRef::All(&self.all));
        }
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        match slots.get(usize::from(id)) {
            Some(Slot::Committed(g)) => Ok(GroupRef::Other(Arc::clone(g))),
            Some(Slot::Building { .. } | Slot::Committing(_)) => {
                Err(Error::GroupNotCommitted { group: id })
            }
            _ => Err(Error::UnknownGroup { group: id }),
        }
    }

    /// `f` of group `id`'s members: those added so far while it is being built.
    fn with_members<T>(&self, id: GroupId, f: impl FnOnce(&Members) -> T) -> Result<T> {
        if id == GROUP_ALL {
            return Ok(f(&self.all.members));
        }
        let slots = self.slots.read().unwrap_or_else(|e| e.into_inner());
        match slots.get(usize::from(id)) {
            Some(Slot::Committed(g) | Slot::Committing(g)) => Ok(f(&g.members)),
            Some(Slot::Building { members, .. }) => Ok(f(&Members::from_set(members))),
            Some(Slot::Free) | None => Err(Error::UnknownGroup { group: id }),
        }
    }
}

/// A 32-bit fingerprint of a group's id and members (FNV-1a), never 0.
pub(crate) fn fingerprint(id: GroupId, members: &Members) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    let mut eat = |bytes: &[u8]| {
        for &b in bytes {
            h ^= u32::from(b);
            h = h.wrapping_mul(0x0100_0193);
        }
    };
    eat(&[id]);
    eat(&members.len().to_le_bytes());
    for r in members.ranks() {
        eat(&r.to_le_bytes());
    }
    h | 1
}

impl Context {
    /// Creates an empty group and returns its id. Members create their groups in the same
    /// order, so that the ids agree.
    ///
    /// # Errors
    /// [`Error::Limit`] when all `GASPI_MAX_GROUPS` groups exist.
    pub fn group_create(&self) -> Result<GroupId> {
        let mut slots = self.inner.groups.write();
        let (id, slot) = slots
            .iter_mut()
            .enumerate()
            .find(|(_, s)| matches!(s, Slot::Free))
            .ok_or_else(|| {
                Error::Limit(format!(
                    "all {} groups exist (GASPI_MAX_GROUPS)",
                    self.inner.config.max_groups
                ))
            })?;
        *slot = Slot::Building {
            members: BTreeSet::new(),
            stale: false,
        };
        Ok(id as GroupId)
    }

    /// Adds `rank` to group `group`, which must not be committed yet.
    ///
    /// # Errors
    /// [`Error::InvalidRank`]; [`Error::UnknownGroup`]; [`Error::GroupCommitted`];
    /// [`Error::DuplicateMember`].
    pub fn group_add(&self, group: GroupId, rank: Rank) -> Result<()> {
        self.check_rank(rank)?;
        let mut slots = self.inner.groups.write();
        match slots.get_mut(usize::from(group)) {
            Some(Slot::Building { members, .. }) => {
                if members.insert(rank) {
                    Ok(())
                } else {
                    Err(Error::DuplicateMember { group, rank })
                }
            }
            Some(Slot::Committing(_) | Slot::Committed(_)) => Err(Error::GroupCommitted { group }),
            _ => Err(Error::UnknownGroup { group }),
        }
    }

    /// Commits group `group` together with its other members (collective among them). Fails
    /// with [`Error::GroupMismatch`] when members disagree on the membership, and with
    /// [`Error::NotInGroup`] when this rank is not a member. After [`Error::Timeout`] call it
    /// again to continue. A group already committed here ([`GROUP_ALL`] is from the start,
    /// and GASPI has it committed like any other) is left as it is: `Ok` at once.
    ///
    /// # Errors
    /// As above, and [`Error::UnknownGroup`], [`Error::RankFailed`] naming a dead member,
    /// [`Error::Segment`] / [`Error::Fabric`] when the group's allreduce area cannot be set
    /// up.
    pub fn group_commit(&self, group: GroupId, timeout: Timeout) -> Result<()> {
        if group == GROUP_ALL {
            return Ok(());
        }
        let me = self.rank();
        let g = {
            let mut slots = self.inner.groups.write();
            let slot = slots
                .get_mut(usize::from(group))
                .ok_or_else(|| Error::UnknownGroup { group })?;
            match slot {
                Slot::Building { members, .. } => {
                    if !members.contains(&me) {
                        return Err(Error::NotInGroup { group, rank: me });
                    }
                    let members = Members::from_set(members);
                    let area = ReduceArea::new(
                        &self.inner.ep,
                        me,
                        group,
                        members.len(),
                        self.inner.config.reduce_chunk,
                        self.inner.segments.next_key(),
                    )?;
                    let g = Arc::new(Group::new(group, members, area));
                    // Published before the commit's first message: partners that finish the
                    // commit may write into the area at once.
                    self.publish_area(&g)?;
                    *slot = Slot::Committing(Arc::clone(&g));
                    g
                }
                Slot::Committing(g) => Arc::clone(g),
                Slot::Committed(_) => return Ok(()),
                Slot::Free => return Err(Error::UnknownGroup { group }),
            }
        };
        let agreed = self.synchronise(
            &g,
            Purpose::Commit,
            timeout.deadline(),
            |state, _, deadline| {
                if !state.closing {
                    state.start_pair(fingerprint(g.id, &g.members));
                    self.run(&g, state, deadline, Watch::Members)?;
                    let (lo, hi) = state.take_pair().ok_or_else(|| {
                        Error::Protocol("group commit finished without a result".into())
                    })?;
                    state.closing = lo == hi;
                }
                if state.closing {
                    // See the dissemination module: why a commit ends with a synchronising run.
                    self.run(&g, state, deadline, Watch::Members)?;
                    state.closing = false;
                    Ok(true)
                } else {
                    Ok(false)
                }
            },
        )?;
        let mut slots = self.inner.groups.write();
        if !agreed {
            // Back to building, so the application can fix the membership or delete it.
            // Members whose views differ sent notifications that no run of this member
            // takes: those already here are discarded now, later ones when the group is
            // deleted.
            self.reset_slots(group);
            slots[usize::from(group)] = Slot::Building {
                members: g.members.ranks().into_iter().collect(),
                stale: true,
            };
            self.inner.publish(DescKey::Area(group), None)?;
            return Err(Error::GroupMismatch { group });
        }
        slots[usize::from(group)] = Slot::Committed(g);
        Ok(())
    }

    /// Discards every notification partners sent this member for group `group`'s runs.
    fn reset_slots(&self, group: GroupId) {
        let first = u32::from(group) * SLOTS_PER_GROUP;
        for id in first..first + SLOTS_PER_GROUP {
            // In range: the table holds SLOTS_PER_GROUP slots for every group id.
            let _ = self.inner.system_notifications.reset(id);
        }
    }

    /// Deletes group `group` (local). [`GROUP_ALL`] cannot be deleted.
    ///
    /// The id may be created again at once, by every member in its own time: partners that
    /// deleted it earlier may already be committing its successor. Where this member left a
    /// commit, barrier or allreduce of the group unfinished (it timed out, or failed), the
    /// notifications partners already sent for it are discarded, so the id starts clean; one
    /// still in flight can reach the successor, and so can a successor's that came before
    /// the delete, so delete a group whose collectives did not finish only once its
    /// partners are done with it (or have given up).
    ///
    /// # Errors
    /// [`Error::UnknownGroup`]; [`Error::GroupCommitted`] for [`GROUP_ALL`].
    pub fn group_delete(&self, group: GroupId) -> Result<()> {
        if group == GROUP_ALL {
            return Err(Error::GroupCommitted { group });
        }
        let mut slots = self.inner.groups.write();
        let settled = match slots.get_mut(usize::from(group)) {
            Some(slot) if !matches!(slot, Slot::Free) => {
                match std::mem::replace(slot, Slot::Free) {
                    Slot::Committed(g) => g.settled(),
                    // Partners may have sent their part of the commit that did not finish.
                    Slot::Committing(_) => false,
                    // A commit that found the views differ may have left partners'
                    // notifications behind.
                    Slot::Building { stale, .. } => !stale,
                    // No collective of the group ran here: whatever is in its slots is a
                    // successor's, from partners that deleted it earlier.
                    Slot::Free => true,
                }
            }
            _ => return Err(Error::UnknownGroup { group }),
        };
        self.inner.publish(DescKey::Area(group), None)?;
        if !settled {
            self.reset_slots(group);
        }
        Ok(())
    }

    /// Number of members of group `group`: those added so far while it is being built.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`].
    pub fn group_size(&self, group: GroupId) -> Result<u32> {
        self.inner.groups.with_members(group, Members::len)
    }

    /// The members of group `group`, ascending (as GASPI keeps them while they are added).
    ///
    /// # Errors
    /// [`Error::UnknownGroup`].
    pub fn group_ranks(&self, group: GroupId) -> Result<Vec<Rank>> {
        self.inner.groups.with_members(group, Members::ranks)
    }

    /// The member index of `rank` in group `group` (`None` if it is not a member), in the
    /// members added so far while it is being built.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`].
    pub fn group_index(&self, group: GroupId, rank: Rank) -> Result<Option<u32>> {
        self.inner
            .groups
            .with_members(group, |members| members.index_of(rank))
    }

    /// The rank at member index `index` of group `group`, in the members added so far while
    /// it is being built.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`]; [`Error::InvalidMemberIndex`] for an index beyond the
    /// members.
    pub fn group_rank(&self, group: GroupId, index: u32) -> Result<Rank> {
        self.inner.groups.with_members(group, |members| {
            members
                .rank_at(index)
                .ok_or_else(|| Error::InvalidMemberIndex {
                    group,
                    index,
                    members: members.len(),
                })
        })?
    }

    /// Largest number of groups, [`GROUP_ALL`] included (`GASPI_MAX_GROUPS`).
    pub fn group_max(&self) -> u8 {
        self.inner.config.max_groups
    }

    /// Blocks until every member of committed group `group` has entered the barrier, or until
    /// `timeout`. After [`Error::Timeout`] call it again to continue the same barrier. Calls
    /// from several threads of one rank are serialised, each within its own timeout: a call
    /// that finds another thread's collective of the group under way waits for it to finish
    /// only until its timeout, and then returns [`Error::Timeout`] having changed nothing.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`] / [`Error::GroupNotCommitted`]; [`Error::NotInGroup`];
    /// [`Error::Timeout`]; [`Error::CollectiveInProgress`] while the synchronisation of
    /// another call ([`segment_create`](Self::segment_create)'s,
    /// [`finalize`](Self::finalize)'s) that timed out is in flight: finish that call first.
    /// An allreduce of the group may be in flight meanwhile (GASPI lets one barrier and one
    /// allreduce of a group run at once), timed out or in another thread;
    /// [`Error::CollectiveMismatch`] naming a partner that called another synchronisation of
    /// the group meanwhile (`segment_create`, `finalize`); [`Error::RankFailed`] naming a dead
    /// member.
    pub fn group_barrier(&self, group: GroupId, timeout: Timeout) -> Result<()> {
        self.barrier_for(group, Purpose::Barrier, timeout.deadline())
    }

    /// A barrier of committed group `group` that synchronises `purpose`, bounded by
    /// `deadline`: it continues only a run of the same purpose that timed out.
    pub(crate) fn barrier_for(
        &self,
        group: GroupId,
        purpose: Purpose,
        deadline: Deadline,
    ) -> Result<()> {
        let g = self.inner.groups.committed(group)?;
        if purpose != Purpose::Barrier {
            return self.synchronise(&g, purpose, deadline, |state, _, deadline| {
                self.run(&g, state, deadline, Watch::Members)
            });
        }
        let mut state = g.state(deadline)?;
        self.claim(&g, &mut state, purpose)?;
        self.run(&g, &mut state, deadline, Watch::Members)
    }

    /// Runs `sync` on `g`'s dissemination state, claimed for `purpose`, which is not a
    /// barrier, bounded by `deadline`. An allreduce of the group must not run beside it
    /// (the partners' later collectives would pair up wrongly if one of them completed
    /// between such a call's timeout and its continuation), so the allreduce state is held
    /// too, and told whether the call is left in flight.
    ///
    /// # Errors
    /// [`Error::CollectiveInProgress`] while an allreduce of the group (but for an exit, which
    /// judges it itself), or a run of another purpose, is in flight (see
    /// [`claim`](Self::claim)); what `sync` returns.
    fn synchronise<T>(
        &self,
        g: &Group,
        purpose: Purpose,
        deadline: Deadline,
        sync: impl FnOnce(&mut CollState, &mut ReduceState, Deadline) -> Result<T>,
    ) -> Result<T> {
        let mut reduce = g.reduce_state(deadline)?;
        self.finish_orphan(g, &mut reduce, deadline)?;
        // The exit judges a timed-out allreduce itself (see `exit_barrier`).
        if let Some(pending) = reduce.pending().filter(|_| purpose != Purpose::Exit) {
            let busy = Error::CollectiveInProgress {
                group: g.id,
                pending,
            };
            return Err(self.first_dead(g).unwrap_or(busy));
        }
        let mut state = g.state(deadline)?;
        self.claim(g, &mut state, purpose)?;
        let done = sync(&mut state, &mut reduce, deadline);
        reduce.held_by = state.holding();
        done
    }

    /// The call of `group` whose synchronisation timed out and is in flight, when a run of
    /// `purpose` may not continue it: checked before a call changes anything.
    ///
    /// # Errors
    /// [`Error::Timeout`] when another thread's collective of the group is still under way at
    /// `deadline`.
    pub(crate) fn barrier_conflict(
        &self,
        group: GroupId,
        purpose: Purpose,
        deadline: Deadline,
    ) -> Result<Option<&'static str>> {
        let Ok(g) = self.inner.groups.committed(group) else {
            return Ok(None);
        };
        // In the order `synchronise` takes them.
        let reduce = match purpose {
            Purpose::Barrier => None,
            _ => Some(g.reduce_state(deadline)?),
        };
        let pending = match reduce.as_ref().and_then(|reduce| reduce.pending()) {
            Some(pending) => Some(pending),
            None => g.state(deadline)?.conflict(purpose),
        };
        Ok(pending.filter(|_| self.first_dead(&g).is_none()))
    }

    /// Claims `g`'s runs for a run of `purpose` (see [`CollState::claim`]). A run of another
    /// purpose in flight whose group lost a member can never finish: the call then fails as
    /// continuing it would, naming the dead member, rather than with
    /// [`Error::CollectiveInProgress`].
    fn claim(&self, g: &Group, state: &mut CollState, purpose: Purpose) -> Result<()> {
        match state.claim(g.id, purpose) {
            Err(e @ Error::CollectiveInProgress { .. }) => Err(self.first_dead(g).unwrap_or(e)),
            claimed => claimed,
        }
    }

    /// The death of a member of `g` this rank knows of, the first it learnt.
    fn first_dead(&self, g: &Group) -> Option<Error> {
        let members = (0..g.members.len()).filter_map(|i| g.members.rank_at(i));
        self.inner.health.first_known(members)
    }

    /// The synchronisation of [`finalize`](Self::finalize), bounded by `deadline` and
    /// resumable like a barrier: this rank's operations drained (see `Inner::drain`), a
    /// barrier of every rank, then a second one after which each rank may leave the job. A
    /// rank that completes the second leaves while others may still wait in it; their waits
    /// watch only the partners they wait for (see [`Watch`]), so such a departure is not
    /// taken for a death, while the first barrier still names any rank dead before the exit
    /// began.
    pub(crate) fn exit_barrier(&self, deadline: Deadline) -> Result<()> {
        let g = self.inner.groups.committed(GROUP_ALL)?;
        self.synchronise(&g, Purpose::Exit, deadline, |state, reduce, deadline| {
            if !self.inner.leaving.load(Ordering::Acquire) {
                let first = self
                    .inner
                    .drain(deadline)
                    .and_then(|()| self.run(&g, state, deadline, Watch::Members));
                match first {
                    // Partners may still be in the timed-out allreduce, waiting for this
                    // rank's steps: finishing it comes first.
                    Err(Error::Timeout) => {
                        return Err(reduce.pending().map_or(Error::Timeout, |pending| {
                            Error::CollectiveInProgress {
                                group: GROUP_ALL,
                                pending,
                            }
                        }))
                    }
                    ran => ran?,
                }
                // Every rank is in finalize: none takes a step of an allreduce still in flight
                // here (its partners failed it, after a `CollectiveMismatch` say), which could
                // never complete, and refusing to end for it left this rank unable to end.
                reduce.give_up_at_exit();
                self.inner.leaving.store(true, Ordering::Release);
            }
            self.run(&g, state, deadline, Watch::Partners)
        })
    }

    /// Publishes where partners write `g`'s allreduce data (see `allreduce::area`).
    pub(crate) fn publish_area(&self, g: &Group) -> Result<()> {
        let entry = g.area.as_ref().map(ReduceArea::published);
        self.inner.publish(DescKey::Area(g.id), entry)
    }

    /// Blocks until every rank has entered the barrier, or until `timeout`: the barrier of
    /// [`GROUP_ALL`], with the same semantics as [`group_barrier`](Self::group_barrier).
    ///
    /// # Errors
    /// As for [`group_barrier`](Self::group_barrier).
    pub fn barrier(&self, timeout: Timeout) -> Result<()> {
        self.group_barrier(GROUP_ALL, timeout)
    }

    fn run(
        &self,
        g: &Group,
        state: &mut CollState,
        deadline: Deadline,
        watch: Watch,
    ) -> Result<()> {
        let me = self.rank();
        let index = g.members.index_of(me).ok_or_else(|| Error::NotInGroup {
            group: g.id,
            rank: me,
        })?;
        let rank_of = |i: u32| g.members.rank_at(i).unwrap_or(me);
        let spread = Spread {
            group: g.id,
            n: g.members.len(),
            me: index,
            rank_of: &rank_of,
            slots: u32::from(g.id) * SLOTS_PER_GROUP,
            watch,
        };
        // A run begun with a member known dead can never complete everywhere: it fails at
        // once, also where the notifications this member needs are there (the dead one's,
        // sent before it died). A run in flight goes on: what a dead member sent still counts
        // there (see `Inner::watched`), as the others may have completed it. The exit run's
        // partners leave the job as they finish (see `Watch::Partners`): only its waits judge.
        if watch == Watch::Members && state.idle() {
            if let Some(dead) = self.first_dead(g) {
                // Partners' notifications of this run may have come: the group's slots are
                // no longer clean (see `CollState::settled`).
                state.abandon();
                return Err(dead);
            }
        }
        self.disseminate(&spread, state, deadline)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn members_map_both_ways() {
        let set: BTreeSet<Rank> = [7, 2, 40].into_iter().collect();
        let m = Members::from_set(&set);
        assert_eq!(m.len(), 3);
        assert_eq!(m.ranks(), vec![2, 7, 40]);
        assert_eq!(m.index_of(40), Some(2));
        assert_eq!(m.index_of(3), None);
        assert_eq!(m.rank_at(1), Some(7));
        assert_eq!(m.rank_at(3), None);
        let all = Members::All(4);
        assert_eq!(
            (all.index_of(3), all.index_of(4), all.rank_at(2)),
            (Some(3), None, Some(2))
        );
    }

    #[test]
    fn fingerprints_tell_views_apart() {
        let view = |ranks: &[Rank]| Members::from_set(&ranks.iter().copied().collect());
        let a = fingerprint(1, &view(&[0, 1, 2]));
        assert_eq!(a, fingerprint(1, &view(&[2, 1, 0])));
        assert_ne!(a, fingerprint(1, &view(&[0, 1, 3])));
        assert_ne!(a, fingerprint(2, &view(&[0, 1, 2])));
        assert_ne!(a, 0);
    }
}
