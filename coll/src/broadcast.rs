//! The broadcast: [`Broadcast`], its staging segment and the resumable state machine of one
//! broadcast, and [`BroadcastHandle`] for the non-blocking form.
//!
//! # Protocol
//! Every member has one staging area in a library segment: a header (the root's length as a
//! little-endian `u64`, then the root's rank as a `u32`) followed by up to `max_bytes` of
//! payload, and a notification table:
//!
//! | id | set by | value |
//! |---|---|---|
//! | `DATA` (0) | the parent, with the header and payload it forwards | sequence tag |
//! | `ABORT` (1) | the parent, when it abandons the broadcast | rank that caused it, plus 1 |
//! | `CREDITS + i` | member `i`, a child of this member | sequence tag |
//!
//! One broadcast on a member: resolve its parent and children in the [`tree`] (once, then
//! cached); a non-root posts a credit to its parent ("my staging area is free for broadcast
//! `seq`"); the root copies its buffer into its staging area; a non-root waits for `DATA` (or
//! `ABORT`) from its parent. It then forwards the header and payload from its own staging area
//! to each child whose credit has arrived, with one `write_notify_each` per set of ready
//! children, until all are served; waits for the batch; and copies the payload out.
//!
//! The credit is the flow control: a parent writes into a child's staging area only after the
//! child has entered the same broadcast, so it has finished (copied out and forwarded) the
//! previous one. It is sent when the broadcast starts, to the parent of *this* broadcast —
//! which, with another root, is another member than last time, so an acknowledgement at the
//! end of the previous broadcast would not know where to go. Credits travel up while the data
//! travels down, so they cost no latency when members enter together.
//!
//! The sequence tag (the broadcast's number on this object, 1..=`u32::MAX`, wrapping) on every
//! notification catches members that made different numbers of broadcasts; the root in the
//! header catches members that passed different roots, where such a member's parent is the
//! same in both roots' trees (elsewhere the member waits for a parent that serves another
//! tree, until its timeout); the length in the header catches lengths that differ from the
//! root's, at no extra cost.

use std::marker::PhantomData;

use gaspi::{Batch, Context, Deadline, GroupId, Notification, Rank, Segment, Target, Timeout};

use crate::error::{Error, Result};
use crate::tag;
use crate::tree::{self, Member, Place};
use crate::Collectives;

/// Notification set by the parent with the data.
const DATA: u32 = 0;
/// Notification set by the parent instead of the data when it abandons the broadcast.
const ABORT: u32 = 1;
/// First of the credit notifications, one per member index.
const CREDITS: u32 = 2;
/// Where the root's rank is in the header (its length is at 0).
const ROOT_AT: u64 = 8;
/// Bytes of the header before the payload.
const HEADER: u64 = 12;
/// Domain of the agreement word of a broadcast's staging segment: its `max_bytes`.
const AGREEMENT: u64 = 0xb0ad_ca57;

/// A broadcast over the members of a committed group, built once per group (collectively)
/// and used for any number of broadcasts from any root.
///
/// ```no_run
/// use gaspi::{Context, Timeout, GROUP_ALL};
/// use gaspi_coll::{Broadcast, Collectives};
///
/// let ctx = Context::init()?;
/// let coll = Collectives::new(&ctx)?;
/// let mut bcast = Broadcast::new(&coll, GROUP_ALL, 1 << 20, Timeout::Millis(10_000))?;
/// let mut buf = vec![0u8; 4096];
/// if ctx.rank() == 0 {
///     buf.fill(7);
/// }
/// bcast.broadcast(0, &mut buf, Timeout::Millis(10_000))?;
/// assert!(buf.iter().all(|&b| b == 7));
/// # Ok::<(), gaspi_coll::Error>(())
/// ```
///
/// Broadcasts take `&mut self`: the members of a collective must call it in the same order,
/// and one object carries one broadcast at a time, which the borrow checker then enforces
/// (also against a [`BroadcastHandle`] still in flight). Dropping the object deletes its
/// staging segment: drop it only when no partner still broadcasts with it.
pub struct Broadcast<'c> {
    ctx: &'c Context,
    group: GroupId,
    /// The group's members, ascending: member index to rank.
    members: Vec<Rank>,
    /// The members but this rank: every wait watches their health.
    others: Vec<Rank>,
    /// This rank's member index.
    me: u32,
    max: u64,
    staging: Segment<'c>,
    batch: Batch<'c>,
    /// The staging areas of the other members, by member index, resolved on first use.
    targets: Vec<Option<Target>>,
    /// The sequence number of the latest broadcast begun (0: none yet).
    seq: u64,
    state: State,
    /// The segment belongs to the library's namespace, which must stay registered while it
    /// lives: a namespace registered anew would count its creations from the start again.
    namespace: PhantomData<&'c Collectives<'c>>,
}

impl std::fmt::Debug for Broadcast<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Broadcast")
            .field("group", &self.group)
            .field("members", &self.members.len())
            .field("max_bytes", &self.max)
            .field("seq", &self.seq)
            .finish()
    }
}

/// Where the object is between calls.
enum State {
    Idle,
    /// Broadcast `seq` began and timed out: the next call with its arguments continues it.
    Running(Run),
    /// Broadcast `seq` failed: the members are no longer in step.
    Abandoned,
}

/// One broadcast in progress on this member.
struct Run {
    root: Rank,
    len: usize,
    place: Place,
    /// Children not served yet, in serving order.
    pending: Vec<Member>,
    step: Step,
    /// The root's length, from the header (the root's own on the root).
    root_len: u64,
    /// A child found dead while waiting for credits: reported once its siblings are served.
    dead_child: Option<gaspi::Error>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Step {
    /// Resolve the neighbours; post the credit (non-root) or stage the buffer (root).
    Start,
    /// Wait for the parent's data.
    Receive,
    /// Serve the children as their credits arrive.
    Forward,
    /// Wait for the batch, then copy the payload out.
    Complete,
}

impl<'c> Broadcast<'c> {
    /// Builds a broadcast for messages of up to `max_bytes` over the members of committed
    /// group `group` (collective over them; [`gaspi::GROUP_ALL`] for every rank): creates
    /// each member's staging segment in `coll`'s namespace. Every member passes the same
    /// `max_bytes` (checked), so that each refuses a longer message alike. The broadcast
    /// keeps the group's members as they are now, whatever becomes of the group's id later.
    ///
    /// After [`gaspi::Error::Timeout`], call again with the same arguments to continue.
    ///
    /// # Errors
    /// [`Error::Unaddressable`] when `max_bytes` plus the header does not fit in memory
    /// addresses; from the runtime: [`gaspi::Error::UnknownGroup`],
    /// [`gaspi::Error::GroupNotCommitted`], [`gaspi::Error::NotInGroup`] when this rank is not a
    /// member, [`gaspi::Error::LibrarySegment`] for a group too large for a notification
    /// table or when the memory cannot be allocated,
    /// [`gaspi::Error::LibraryBusy`] when another creation of `coll` over this group timed out
    /// and was not continued, [`gaspi::Error::LibraryDisagreement`] naming a member that
    /// passed another `max_bytes`, [`gaspi::Error::Timeout`], [`gaspi::Error::RankFailed`].
    pub fn new(
        coll: &'c Collectives<'c>,
        group: GroupId,
        max_bytes: u64,
        timeout: Timeout,
    ) -> Result<Broadcast<'c>> {
        let ctx = coll.context();
        let size = max_bytes
            .checked_add(HEADER)
            .filter(|&size| usize::try_from(size).is_ok())
            .ok_or(Error::Unaddressable { max: max_bytes })?;
        let scope = coll.library().team_of_group(group)?;
        let (members, n, me) = (scope.ranks(), scope.size(), scope.index());
        let agreement = crate::ops::signature(&[AGREEMENT, max_bytes]);
        let staging = coll.library().segment_create_agreed(
            &scope,
            size,
            n.saturating_add(CREDITS),
            agreement,
            timeout,
        )?;
        let others = members
            .iter()
            .copied()
            .filter(|&rank| rank != ctx.rank())
            .collect();
        Ok(Broadcast {
            ctx,
            group,
            targets: vec![None; members.len()],
            members,
            others,
            me,
            max: max_bytes,
            staging,
            batch: crate::batch(ctx),
            seq: 0,
            state: State::Idle,
            namespace: PhantomData,
        })
    }

    /// The group this broadcast runs over.
    pub fn group(&self) -> GroupId {
        self.group
    }

    /// The largest message, in bytes, as given at construction.
    pub fn max_bytes(&self) -> u64 {
        self.max
    }

    /// Broadcasts root's `buf` to every member: once this returns `Ok` on a member, its `buf`
    /// holds the bytes the root passed. Collective over the group: every member calls it with
    /// the same `root` (a rank, which must be a member) and a buffer of the root's length
    /// (0..=`max_bytes`), in the same order as its other broadcasts on this object.
    ///
    /// Every wait keeps to `timeout`. After [`gaspi::Error::Timeout`] the broadcast is still
    /// in progress: call again with the same root and a buffer of the same length to continue
    /// it (the root's data is taken from the call that completes its first step). A member
    /// whose length differs from the root's still forwards the message, then reports
    /// [`Error::LengthMismatch`] and leaves `buf` alone; the object stays usable, as it does
    /// after arguments rejected before anything began ([`Error::RootNotMember`],
    /// [`Error::TooLarge`], [`Error::InProgress`]). After any other error the object is spent
    /// ([`Error::Abandoned`]), and this member has told the children it had not served yet
    /// ([`Error::Aborted`] there), so that they do not wait for their timeout.
    ///
    /// A member's death spends the object on every member: a broadcast begun while a member
    /// is known dead fails at once naming it, and every wait watches every member, so that a
    /// member whose neighbour gave the object up learns of the death too, instead of waiting
    /// for the neighbour. A new object over a group of the survivors goes on.
    ///
    /// # Errors
    /// [`Error::RootNotMember`]; [`Error::TooLarge`] when `buf` exceeds `max_bytes`;
    /// [`Error::InProgress`] when a broadcast with other arguments timed out and is still in
    /// progress; [`Error::LengthMismatch`]; [`Error::OutOfStep`] when members disagree on the
    /// number of broadcasts; [`Error::RootMismatch`] when they disagree on the root and this
    /// member's parent is the same in both roots' trees (else a timeout: see the crate's
    /// "What a broadcast guarantees");
    /// [`Error::Aborted`] when an ancestor abandoned the broadcast; [`Error::Abandoned`];
    /// from the runtime: [`gaspi::Error::Timeout`], [`gaspi::Error::RankFailed`] naming a
    /// dead member, [`gaspi::Error::BatchFull`] and the provider's errors.
    pub fn broadcast(&mut self, root: Rank, buf: &mut [u8], timeout: Timeout) -> Result<()> {
        self.advance(root, buf, timeout.deadline())
    }

    /// Starts a broadcast like [`broadcast`](Self::broadcast) and returns at once; the handle
    /// completes it ([`BroadcastHandle::test`], [`BroadcastHandle::wait`]) and holds `buf`
    /// until then. A handle dropped early leaves the broadcast in progress: a later call with
    /// the same root and length continues it.
    ///
    /// # Errors
    /// As for [`broadcast`](Self::broadcast), except [`gaspi::Error::Timeout`].
    pub fn broadcast_nb<'b>(
        &'b mut self,
        root: Rank,
        buf: &'b mut [u8],
    ) -> Result<BroadcastHandle<'b, 'c>> {
        let mut handle = BroadcastHandle {
            bcast: self,
            root,
            buf,
            outcome: Outcome::Running,
        };
        handle.step()?;
        Ok(handle)
    }

    /// Runs the state machine of the broadcast with these arguments as far as `deadline` lets
    /// it, beginning one when none is in progress.
    fn advance(&mut self, root: Rank, buf: &mut [u8], deadline: Deadline) -> Result<()> {
        let mut run = match std::mem::replace(&mut self.state, State::Idle) {
            State::Idle => {
                let run = self.begin(root, buf.len())?;
                // A member known dead fails the broadcast at once on every member that
                // knows, as a team's collectives do, rather than letting those that happen
                // not to need it complete while the others fail: the members stay in step
                // in that they all give the object up.
                if let Some(dead) = self.ctx.known_failure(self.members.iter().copied()) {
                    self.state = State::Abandoned;
                    return Err(dead.into());
                }
                run
            }
            State::Running(run) if run.root == root && run.len == buf.len() => run,
            State::Running(run) => {
                let error = Error::InProgress {
                    root: run.root,
                    len: run.len as u64,
                };
                self.state = State::Running(run);
                return Err(error);
            }
            State::Abandoned => {
                self.state = State::Abandoned;
                return Err(Error::Abandoned { seq: self.seq });
            }
        };
        match self.drive(&mut run, buf, deadline) {
            Ok(()) => self.finish(&run, buf),
            Err(e) if e.is_timeout() => {
                self.state = State::Running(run);
                Err(e)
            }
            Err(e) => {
                self.abort(&run, &e);
                self.state = State::Abandoned;
                Err(e)
            }
        }
    }

    /// Checks the arguments of a new broadcast and sets it up.
    fn begin(&mut self, root: Rank, len: usize) -> Result<Run> {
        let root_index = crate::index_in(&self.members, root).ok_or(Error::RootNotMember {
            group: self.group,
            root,
        })?;
        let is_root = root_index == self.me;
        // Every member has the same maximum: each refuses alike, and the object stays in step.
        if len as u64 > self.max {
            return Err(Error::TooLarge {
                rank: self.ctx.rank(),
                len: len as u64,
                max: self.max,
            });
        }
        let place = tree::place(&self.members, root_index, self.me);
        self.seq += 1;
        Ok(Run {
            root,
            len,
            pending: place.children.clone(),
            place,
            step: Step::Start,
            root_len: if is_root { len as u64 } else { 0 },
            dead_child: None,
        })
    }

    fn drive(&mut self, run: &mut Run, buf: &[u8], deadline: Deadline) -> Result<()> {
        loop {
            match run.step {
                Step::Start => {
                    self.start(run, buf, deadline)?;
                    run.step = if run.place.parent.is_some() {
                        Step::Receive
                    } else {
                        Step::Forward
                    };
                }
                Step::Receive => {
                    self.receive(run, deadline)?;
                    run.step = Step::Forward;
                }
                Step::Forward => {
                    self.forward(run, deadline)?;
                    run.step = Step::Complete;
                }
                Step::Complete => {
                    self.batch.wait(deadline.left())?;
                    return match run.dead_child.take() {
                        Some(e) => Err(e.into()),
                        None => Ok(()),
                    };
                }
            }
        }
    }

    /// The staging area of `member`, resolved within `deadline` the first time.
    fn target(&mut self, member: Member, deadline: Deadline) -> Result<Target> {
        let slot = member.index as usize;
        if let Some(Some(target)) = self.targets.get(slot) {
            return Ok(*target);
        }
        let target = self.staging.target(member.rank, deadline.left())?;
        if let Some(cached) = self.targets.get_mut(slot) {
            *cached = Some(target);
        }
        Ok(target)
    }

    fn start(&mut self, run: &Run, buf: &[u8], deadline: Deadline) -> Result<()> {
        // Resolved before anything is posted, so that this step can be repeated after a
        // timeout, and so that an abort can reach every child without waiting.
        for &child in &run.place.children {
            self.target(child, deadline)?;
        }
        match run.place.parent {
            Some(parent) => {
                let parent = self.target(parent, deadline)?;
                let credit = Notification {
                    id: CREDITS + self.me,
                    value: tag(self.seq),
                };
                self.batch.notify(&parent, credit)?;
            }
            // Without children the staging area has no reader.
            None if !run.place.children.is_empty() => {
                self.staging.write(0, &(buf.len() as u64).to_le_bytes())?;
                self.staging.write(ROOT_AT, &run.root.to_le_bytes())?;
                self.staging.write(HEADER, buf)?;
            }
            None => {}
        }
        Ok(())
    }

    fn receive(&mut self, run: &mut Run, deadline: Deadline) -> Result<()> {
        let Some(Member { rank: parent, .. }) = run.place.parent else {
            return Ok(());
        };
        // Every member watched, not only the parent: a member that gave the object up after
        // a death elsewhere sends nothing, and would otherwise look like a slow one.
        let arrival =
            self.ctx
                .notify_wait_any(&[self.staging.range(DATA, 2)], &self.others, deadline)?;
        let value = self.staging.notify_reset(arrival.id)?;
        if arrival.id == ABORT {
            return Err(Error::Aborted {
                cause: value.wrapping_sub(1),
                parent,
            });
        }
        let expected = tag(self.seq);
        if value != expected {
            return Err(Error::OutOfStep {
                rank: parent,
                expected,
                got: value,
            });
        }
        let (mut len, mut root) = ([0u8; 8], [0u8; 4]);
        self.staging.read(0, &mut len)?;
        self.staging.read(ROOT_AT, &mut root)?;
        let root = Rank::from_le_bytes(root);
        if root != run.root {
            return Err(Error::RootMismatch {
                rank: self.ctx.rank(),
                root: run.root,
                parent,
                got: root,
            });
        }
        run.root_len = u64::from_le_bytes(len);
        Ok(())
    }

    fn forward(&mut self, run: &mut Run, deadline: Deadline) -> Result<()> {
        let expected = tag(self.seq);
        let data = Notification {
            id: DATA,
            value: expected,
        };
        loop {
            // A credit taken is a child that must be served in this same call: nothing here
            // may time out, and nothing does, since `start` resolved every child's target.
            let mut ready = Vec::new();
            let mut waiting = Vec::new();
            for &child in &run.pending {
                match self.staging.notify_reset(CREDITS + child.index)? {
                    0 => waiting.push(child),
                    credit if credit == expected => {
                        ready.push((self.target(child, deadline)?, 0));
                    }
                    credit => {
                        return Err(Error::OutOfStep {
                            rank: child.rank,
                            expected,
                            got: credit,
                        })
                    }
                }
            }
            run.pending = waiting;
            if !ready.is_empty() {
                // A length beyond any staging area fails the range check of the write.
                let size = HEADER.saturating_add(run.root_len);
                self.batch
                    .write_notify_each(&self.staging, 0, size, &ready, data)?;
            }
            if run.pending.is_empty() {
                return Ok(());
            }
            let ranges: Vec<_> = run
                .pending
                .iter()
                .map(|child| self.staging.range(CREDITS + child.index, 1))
                .collect();
            let children: Vec<Rank> = run.pending.iter().map(|child| child.rank).collect();
            // Every member watched, as in `receive`, but a dead child already left.
            let dead_child = match &run.dead_child {
                Some(gaspi::Error::RankFailed { rank, .. }) => Some(*rank),
                _ => None,
            };
            let senders: Vec<Rank> = self
                .others
                .iter()
                .copied()
                .filter(|&rank| Some(rank) != dead_child)
                .collect();
            match self.ctx.notify_wait_any(&ranges, &senders, deadline) {
                Ok(_) => {}
                // Its live siblings are served before the death is reported.
                Err(e @ gaspi::Error::RankFailed { rank, .. }) if children.contains(&rank) => {
                    run.pending.retain(|child| child.rank != rank);
                    run.dead_child.get_or_insert(e);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// Copies the payload of a completed broadcast out, or reports the length mismatch.
    fn finish(&mut self, run: &Run, buf: &mut [u8]) -> Result<()> {
        if run.place.parent.is_none() {
            return Ok(());
        }
        if run.root_len != buf.len() as u64 {
            return Err(Error::LengthMismatch {
                rank: self.ctx.rank(),
                root: run.root,
                root_len: run.root_len,
                len: buf.len() as u64,
            });
        }
        self.staging.read(HEADER, buf)?;
        Ok(())
    }

    /// Tells the children not served yet that this broadcast is abandoned because of the
    /// rank `error` names (or this one). Best effort and never waiting: this member is
    /// already failing with `error`, which matters more than a failure to tell.
    fn abort(&mut self, run: &Run, error: &Error) {
        let cause = match error {
            Error::Gaspi(gaspi::Error::RankFailed { rank, .. }) => *rank,
            Error::Aborted { cause, .. } => *cause,
            _ => self.ctx.rank(),
        };
        let Some(value) = cause.checked_add(1) else {
            return;
        };
        for child in &run.pending {
            if let Some(Some(target)) = self.targets.get(child.index as usize) {
                let _ = self.batch.notify(target, Notification { id: ABORT, value });
            }
        }
    }
}

/// A broadcast started by [`Broadcast::broadcast_nb`], holding its buffer until it completes.
pub struct BroadcastHandle<'b, 'c> {
    bcast: &'b mut Broadcast<'c>,
    root: Rank,
    buf: &'b mut [u8],
    outcome: Outcome,
}

impl std::fmt::Debug for BroadcastHandle<'_, '_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BroadcastHandle")
            .field("root", &self.root)
            .field("len", &self.buf.len())
            .field("outcome", &self.outcome)
            .finish()
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Running,
    Done,
    Failed,
}

impl BroadcastHandle<'_, '_> {
    /// Drives the provider once ([`Context::progress`]) and advances the broadcast as far as
    /// it can without blocking; returns whether it has completed (then the buffer holds the
    /// root's bytes).
    ///
    /// # Errors
    /// As for [`Broadcast::broadcast`], except [`gaspi::Error::Timeout`]; [`Error::Ended`]
    /// when the broadcast already ended with an error reported earlier.
    pub fn test(&mut self) -> Result<bool> {
        if self.outcome == Outcome::Running {
            self.bcast.ctx.progress();
        }
        self.step()
    }

    /// Waits until the broadcast has completed, within `timeout`; after
    /// [`gaspi::Error::Timeout`] call again to continue.
    ///
    /// # Errors
    /// As for [`test`](Self::test), and [`gaspi::Error::Timeout`].
    pub fn wait(&mut self, timeout: Timeout) -> Result<()> {
        self.run(timeout.deadline())
    }

    fn step(&mut self) -> Result<bool> {
        match self.run(Timeout::Test.deadline()) {
            Ok(()) => Ok(true),
            Err(e) if e.is_timeout() => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn run(&mut self, deadline: Deadline) -> Result<()> {
        match self.outcome {
            Outcome::Done => return Ok(()),
            Outcome::Failed => return Err(Error::Ended),
            Outcome::Running => {}
        }
        let result = self.bcast.advance(self.root, self.buf, deadline);
        match &result {
            Ok(()) => self.outcome = Outcome::Done,
            Err(e) if e.is_timeout() => {}
            Err(_) => self.outcome = Outcome::Failed,
        }
        result
    }
}
