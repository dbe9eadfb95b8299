//! Allreduce over a group: every member contributes a vector and receives the element-wise
//! reduction of all contributions, bitwise identical on every member (a NaN's sign and payload
//! excepted, see [`ReduceOp`]).
//!
//! A call runs the [schedule] of its length as a resumable state machine. Each step
//! copies the part to send into the group's registered [area] and writes it into the
//! partner's area as one `fi_writedata` whose remote completion data is a system notification
//! (so, as for `write_notify`, the notification is never seen before its data), then waits for
//! the partner's notification and folds the received part in. The notification carries a tag
//! derived from the run's epoch, the operator, the element type and the length, so a partner
//! that called with other arguments is detected and named ([`Error::CollectiveMismatch`])
//! instead of folding garbage.
//!
//! A run takes the caller's input in only where and when it needs it ([pending]), and folds
//! what arrives piece by piece through a scratch buffer that stays in the cache: each saves a
//! pass over the vector through memory.
//!
//! Runs have epochs and notification banks of their own, apart from the group's barriers:
//! GASPI lets one barrier and one allreduce of a group be in flight at once (17.1, §11.1),
//! from two threads, or one after the other's timeout. A call after [`Error::Timeout`]
//! continues where the last one stopped (GASPI's semantics). The synchronisations of other
//! calls (`segment_create`, a commit) and an allreduce still exclude each other
//! ([`Error::CollectiveInProgress`]): one completing between the other's timeout and its
//! continuation would leave the members' later calls paired wrongly. `finalize`, after which
//! nothing pairs, refuses only until every rank is in it, then gives the run up (see
//! `Context::finalize`).

mod area;
mod op;
mod pending;
mod schedule;

use gaspi_fabric::RemoteTarget;
use gaspi_notifications::{Deadline, Timeout};

pub(crate) use area::ReduceArea;
use op::{Builtin, Bytes, Folder, User};
pub use op::{Element, ReduceOp, UserOp};
use pending::Pending;
use schedule::Fold;

use crate::context::Context;
use crate::dissemination::{bank_start, REDUCE_BANKS, SLOTS_PER_GROUP};
use crate::engine::lookup::{DescKey, Descriptor, Known};
use crate::engine::Op;
use crate::error::{Error, Rank, Result};
use crate::group::{Group, GroupId};
use crate::wire::WireNotification;

/// The largest vector whose run a group keeps for the next allreduce, unless the allreduce
/// chunk is larger (then up to one chunk): next to the area of four chunks per step that the
/// group maps anyway, one more vector is small, and taking it afresh costs a pass over it
/// through memory per call (measured: 1 MiB at 2 ranks took about 20% longer that way).
const SPARE_BYTES: usize = 64 << 10;

/// Bytes of received data folded at a time (rounded down to whole blocks, at least one).
const FOLD_PIECE: usize = 8 << 10;

/// Where a group's allreduces stand.
#[derive(Debug, Default)]
pub(crate) struct ReduceState {
    /// Runs (one per chunk) completed so far; selects the bank of the next.
    epoch: u64,
    /// The allreduce in flight, if any.
    run: Option<Box<Run>>,
    /// The last allreduce that completed, renewed as the next one: its box, buffers and
    /// schedule serve again, so that a call in the steady state allocates nothing.
    spare: Option<Box<Run>>,
    /// Whether a run was given up after an error: partners' notifications of it may still
    /// come, or lie unread.
    given_up: bool,
    /// The call other than a barrier whose synchronisation of the group is in flight, which
    /// an allreduce may not cross. Kept here, not read from the dissemination state, because
    /// a barrier holds that for its whole run; such calls change it only while holding this
    /// state too.
    pub(crate) held_by: Option<&'static str>,
}

impl ReduceState {
    /// The allreduce in flight, as [`Error::CollectiveInProgress`] names it; not a run that
    /// waits for no caller (see [`Context::finish_orphan`]), which the next synchronisation
    /// finishes instead of being refused.
    pub(crate) fn pending(&self) -> Option<&'static str> {
        self.run
            .as_ref()
            .filter(|run| !run.orphan)
            .map(|_| "allreduce")
    }

    /// Whether every notification partners sent this member for the group's allreduces was
    /// taken: none is in flight, and none was given up.
    pub(crate) fn settled(&self) -> bool {
        self.run.is_none() && !self.given_up
    }

    /// Gives up the run in flight, if any, once every rank is in `finalize` (see
    /// `Context::exit_barrier`).
    pub(crate) fn give_up_at_exit(&mut self) {
        if self.run.is_some() {
            self.abandon();
        }
    }

    /// Gives up the run in flight after an error that is not a timeout (members must
    /// re-agree, as after a dissemination's, see `CollState::abandon`); the next run takes
    /// the other bank.
    fn abandon(&mut self) {
        self.epoch += 1;
        self.run = None;
        self.given_up = true;
    }
}

/// An allreduce in flight on a group.
pub(crate) struct Run {
    /// Operator, element type and length: a later call must match it to continue this run.
    signature: u64,
    /// Bytes of one block of the operator: the schedule's unit, kept so that a run finished
    /// by a call with other arguments (see `poisoned`) splits its chunks as it began them.
    block: usize,
    /// The member whose user operator panicked during this run, once this member learnt of
    /// it (its own panic, or a partner's step marked so): the run goes on to its end with
    /// notifications alone and folds nothing, so that every member takes all of its steps and
    /// the group's next allreduce starts on clean slots, on the same epoch everywhere; its
    /// end gives no result ([`Error::OperatorPanicked`]).
    poisoned: Option<Rank>,
    /// This member's own operator panicked in the run: no caller waits for its end, and the
    /// group's next synchronisation finishes it.
    orphan: bool,
    /// The vector being reduced, in native byte order, but for the bytes still `pending`
    /// (which are the input's); the result once every chunk ran.
    acc: Bytes,
    pending: Pending,
    /// Next chunk, step of that chunk, and whether that step's data was already sent.
    chunk: usize,
    step: usize,
    sent: bool,
    /// Where received data waits to be folded in.
    scratch: Bytes,
    /// The schedule of the chunk running, and what it was made for (members, own index,
    /// blocks, long algorithm): chunks of one length, and the runs after this one, reuse it.
    steps: Vec<schedule::Step>,
    made_for: Option<(u32, u32, usize, bool)>,
}

impl Run {
    /// A run of `input` with `signature`, renewing `spare` (a completed run) when there is
    /// one.
    fn renew<T: Element>(
        spare: Option<Box<Run>>,
        signature: u64,
        block: usize,
        input: &[T],
    ) -> Box<Run> {
        let mut run = spare.unwrap_or_else(|| {
            Box::new(Run {
                signature,
                block,
                poisoned: None,
                orphan: false,
                acc: Bytes::default(),
                pending: Pending::default(),
                chunk: 0,
                step: 0,
                sent: false,
                scratch: Bytes::default(),
                steps: Vec::new(),
                made_for: None,
            })
        });
        (run.signature, run.block) = (signature, block);
        (run.poisoned, run.orphan) = (None, false);
        let len = std::mem::size_of_val(input);
        run.acc.resize(len);
        if len <= FOLD_PIECE {
            // A short vector is copied in at once: the copy costs less than keeping track.
            run.acc
                .as_mut()
                .copy_from_slice(bytemuck::cast_slice(input));
            run.pending.reset(0);
        } else {
            run.pending.reset(len);
        }
        (run.chunk, run.step, run.sent) = (0, 0, false);
        run
    }
}

impl std::fmt::Debug for Run {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Run")
            .field("bytes", &self.acc.len())
            .field("chunk", &self.chunk)
            .field("step", &self.step)
            .field("sent", &self.sent)
            .field("poisoned", &self.poisoned)
            .finish()
    }
}

/// Mixes `words` into 64 bits (splitmix64 finaliser per word).
fn mix(words: &[u64]) -> u64 {
    words.iter().fold(0x9e37_79b9_7f4a_7c15, |h, &w| {
        let mut z = (h ^ w).wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    })
}

/// The value of a step's notification that carries no data because `rank`'s user operator
/// panicked during the run: even, where every run's tag is odd, and never 0 (ranks are below
/// `MAX_RANKS`).
fn poison(rank: Rank) -> u32 {
    (rank + 1) << 1
}

/// The rank a step's notification value `value` names as poisoned (see [`poison`]), if it is
/// such a value.
fn poisoned_by(value: u32) -> Option<Rank> {
    (value != 0 && value % 2 == 0).then(|| (value >> 1) - 1)
}

impl Context {
    /// Reduces `input` of every member of committed group `group` element-wise with `op` and
    /// stores the result in `output` on every member (collective over the group).
    ///
    /// All members pass the same length, element type and operator; a difference is reported
    /// as [`Error::CollectiveMismatch`] by the members that notice it (those that receive
    /// from a member that differs), while the others wait until their timeout. An empty
    /// vector takes every step too (notifications without data), so a member passing one
    /// while others pass more is found as any other difference is. The reduction order is
    /// fixed by member index (see the `schedule` module), so the result is bitwise identical on
    /// every member and in every run with the same inputs and group size, floating point
    /// included (but for the sign and payload of a NaN result, see [`ReduceOp`]). Any length
    /// works: vectors longer than [`Config::reduce_chunk`](crate::Config)
    /// bytes are reduced chunk by chunk.
    ///
    /// After [`Error::Timeout`], call again with the same arguments to continue: the input is
    /// captured by the first call, and `output` is written only when the reduction completes.
    /// Calls of the group's collectives from several threads of one rank are serialised, each
    /// within its own timeout (see [`group_barrier`](Self::group_barrier)): a call that timed
    /// out waiting for another thread's call captured nothing, and the next one starts afresh.
    /// Bitwise and logical operators on floats are [`Error::Unsupported`]. A run of
    /// [`GROUP_ALL`](crate::GROUP_ALL) left in flight after a timeout is given up by
    /// [`finalize`](Self::finalize) once every rank is in it (a run some member failed with
    /// another error can never complete); before, `finalize` refuses while the run can still
    /// be finished.
    ///
    /// # Errors
    /// [`Error::UnknownGroup`] / [`Error::GroupNotCommitted`]; [`Error::NotInGroup`];
    /// [`Error::Buffers`] for input and output of different lengths; [`Error::Unsupported`];
    /// [`Error::Timeout`] (call again to continue); [`Error::CollectiveInProgress`] while
    /// another call's synchronisation of the group (a `segment_create`'s, say) or an
    /// allreduce of the group with other arguments is in flight (a barrier may be: GASPI
    /// lets one barrier and one allreduce of a group run at once);
    /// [`Error::CollectiveMismatch`] naming a member that called with other arguments;
    /// [`Error::OperatorPanicked`] (from [`allreduce_with`](Self::allreduce_with) alone)
    /// naming a member whose user operator panicked; [`Error::RankFailed`] naming a dead
    /// member.
    pub fn allreduce<T: Element>(
        &self,
        group: GroupId,
        input: &[T],
        output: &mut [T],
        op: ReduceOp,
        timeout: Timeout,
    ) -> Result<()> {
        self.reduce(group, input, output, &Builtin::<T>::new(op)?, timeout)
    }

    /// [`allreduce`](Self::allreduce) with a user-defined operator (see [`UserOp`] for what it
    /// must satisfy). The vector length must be a multiple of the operator's block.
    ///
    /// # Errors
    /// As for [`allreduce`](Self::allreduce); [`Error::Buffers`] for a length that is not a
    /// whole number of blocks; [`Error::Limit`] for a block larger than the allreduce chunk.
    ///
    /// # Panics
    /// When the operator panics, the panic goes on to the caller once this member took the
    /// rest of the run's steps with notifications alone (under this call's timeout, without
    /// calling the operator again): each member whose result needed this member's fold gets
    /// [`Error::OperatorPanicked`] naming it when its call completes, the others their
    /// result, and the group's later allreduces, barriers and `finalize` work on every
    /// member. When the timeout passes first, the rest is taken by the group's next
    /// allreduce on this member (whatever its arguments), and for [`GROUP_ALL`](crate::GROUP_ALL)
    /// also by its next `segment_create` or `finalize`, before their own synchronisation
    /// (deleting the group discards it).
    pub fn allreduce_with<T: Element, F: Fn(&mut [T], &[T])>(
        &self,
        group: GroupId,
        input: &[T],
        output: &mut [T],
        op: &UserOp<F>,
        timeout: Timeout,
    ) -> Result<()> {
        let user = User::<T, F>::new(op)?;
        if input.len() % user.block() != 0 {
            return Err(Error::Buffers(format!(
                "{} elements are not a whole number of the operator's {}-element blocks",
                input.len(),
                user.block()
            )));
        }
        self.reduce(group, input, output, &user, timeout)
    }

    fn reduce<T: Element>(
        &self,
        group: GroupId,
        input: &[T],
        output: &mut [T],
        folder: &dyn Folder,
        timeout: Timeout,
    ) -> Result<()> {
        if input.len() != output.len() {
            return Err(Error::Buffers(format!(
                "input has {} elements, output {}",
                input.len(),
                output.len()
            )));
        }
        if folder.block_bytes() > self.inner.config.reduce_chunk {
            return Err(Error::Limit(format!(
                "a block of {} bytes exceeds the allreduce chunk of {} bytes (GASPI_REDUCE_CHUNK)",
                folder.block_bytes(),
                self.inner.config.reduce_chunk
            )));
        }
        let me = self.rank();
        let g = self.inner.groups.committed(group)?;
        let index = g
            .members
            .index_of(me)
            .ok_or_else(|| Error::NotInGroup { group, rank: me })?;
        // A dead member makes the reduction hopeless, whatever state the group is in.
        if let Some(e) = self.inner.health.first_known(g.member_ranks()) {
            return Err(e);
        }
        let signature = mix(&[folder.code(), input.len() as u64]);
        let deadline = timeout.deadline();
        // Waiting for another thread's collective of the group: a timeout here captured
        // nothing, so the next call starts afresh.
        let mut state = g.reduce_state(deadline)?;
        self.finish_orphan(&g, &mut state, deadline)?;
        match &state.run {
            Some(run) if run.signature != signature => {
                return Err(Error::CollectiveInProgress {
                    group,
                    pending: "allreduce with other arguments",
                })
            }
            Some(_) => {}
            None => {
                if let Some(pending) = state.held_by {
                    return Err(Error::CollectiveInProgress { group, pending });
                }
                let block = folder.block_bytes();
                state.run = Some(Run::renew(state.spare.take(), signature, block, input));
            }
        }
        let input: &[u8] = bytemuck::cast_slice(input);
        let advanced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.advance(&g, index, &mut state, Some(folder), input, deadline)
        }));
        let advanced = advanced.unwrap_or_else(|panic| {
            // A user operator that panicked left its step half folded. Giving the run up here
            // left the partners that needed this member's later steps waiting for good (their
            // runs, timed out, then refused the group's next allreduce and `finalize`): the
            // run goes on instead, poisoned, under this call's deadline, and tells each of
            // those partners in place of its data. The operator is not called again.
            if let Some(run) = state.run.as_mut() {
                // It runs only in a step's fold, after the step's notification was taken.
                (run.step, run.sent) = (run.step + 1, false);
                (run.poisoned, run.orphan) = (Some(self.rank()), true);
            }
            // A timeout leaves the rest to the group's next synchronisation.
            let _ = self.finish_orphan(&g, &mut state, deadline);
            std::panic::resume_unwind(panic)
        });
        match advanced {
            Ok(()) => {
                let Some(mut run) = state.run.take() else {
                    return Ok(());
                };
                let poisoned = run.poisoned;
                if poisoned.is_none() {
                    let len = run.acc.len();
                    run.pending.fill(0..len, input, run.acc.as_mut());
                    gaspi_segments::copy_bytes(
                        bytemuck::cast_slice_mut(output),
                        bytemuck::cast_slice(run.acc.as_ref()),
                    );
                }
                self.keep_spare(&mut state, run);
                poisoned.map_or(Ok(()), |rank| Err(Error::OperatorPanicked { group, rank }))
            }
            Err(Error::Timeout) => {
                // The next call continues from the run alone: its input may be another.
                if let Some(run) = state.run.as_mut() {
                    let len = run.acc.len();
                    run.pending.fill(0..len, input, run.acc.as_mut());
                }
                Err(Error::Timeout)
            }
            Err(e) => {
                self.give_up(&g, &mut state);
                Err(e)
            }
        }
    }

    /// Keeps a completed run for the group's next allreduce, unless it is longer than a chunk:
    /// such a run dwarfs an allocation.
    fn keep_spare(&self, state: &mut ReduceState, run: Box<Run>) {
        let keep = SPARE_BYTES.max(self.inner.config.reduce_chunk);
        state.spare = (run.acc.capacity() <= keep).then_some(run);
    }

    /// Finishes the run in `state` that this member's panicking operator left in flight, if
    /// there is one, before anything else of group `g` synchronises: it moves no data, but its
    /// partners wait for its steps and the group's later runs for its slots. Bounded by
    /// `deadline`; another thread's or a later call continues it.
    ///
    /// # Errors
    /// [`Error::Timeout`]; [`Error::RankFailed`] and the errors of a step, after which the
    /// run is given up.
    pub(crate) fn finish_orphan(
        &self,
        g: &Group,
        state: &mut ReduceState,
        deadline: Deadline,
    ) -> Result<()> {
        if !state.run.as_ref().is_some_and(|run| run.orphan) {
            return Ok(());
        }
        let me = self.rank();
        let index = g.members.index_of(me).ok_or_else(|| Error::NotInGroup {
            group: g.id,
            rank: me,
        })?;
        match self.advance(g, index, state, None, &[], deadline) {
            Ok(()) => {
                if let Some(run) = state.run.take() {
                    self.keep_spare(state, run);
                }
                Ok(())
            }
            Err(Error::Timeout) => Err(Error::Timeout),
            Err(e) => {
                self.give_up(g, state);
                Err(e)
            }
        }
    }

    /// Gives up the run in `state` after an error that is not a timeout.
    fn give_up(&self, g: &Group, state: &mut ReduceState) {
        // The area's send slots stay mapped while writes from them are in flight (the writes
        // hold the area), but the group's next runs must not wait for writes towards a dead
        // member, which may never complete (shm).
        if self
            .inner
            .wait_queue(&g.writes, Timeout::Millis(1_000).deadline())
            .is_err()
        {
            for rank in g.writes.tracker.targets() {
                g.writes.drop_rank(rank);
            }
        }
        state.abandon();
    }

    /// Runs the remaining chunks of the run in `state`, whose pending bytes are `input`'s,
    /// bounded by `deadline`, folding with `folder` (none for a poisoned run, which folds
    /// nothing and reads no input).
    fn advance(
        &self,
        g: &Group,
        index: u32,
        state: &mut ReduceState,
        folder: Option<&dyn Folder>,
        input: &[u8],
        deadline: Deadline,
    ) -> Result<()> {
        let ReduceState { epoch, run, .. } = state;
        let (Some(area), Some(run)) = (&g.area, run.as_mut()) else {
            // A group of one: the input is the result.
            return Ok(());
        };
        let me = self.rank();
        let block = run.block;
        let total = run.acc.len() / block;
        let per_chunk = area.chunk() / block;
        let table = &self.inner.system_notifications;
        // An empty vector runs one chunk of no blocks (see `schedule::schedule`).
        while run.chunk == 0 || run.chunk * per_chunk < total {
            let first = run.chunk * per_chunk;
            let blocks = per_chunk.min(total - first);
            let made_for = (
                g.members.len(),
                index,
                blocks,
                blocks * block > schedule::LONG_BYTES,
            );
            if run.made_for != Some(made_for) {
                let (n, index, blocks, long) = made_for;
                run.steps = schedule::schedule(n, index, blocks, long);
                run.made_for = Some(made_for);
            }
            let steps = &run.steps;
            let bank = (*epoch % 2) as u32;
            let slots = bank_start(u32::from(g.id) * SLOTS_PER_GROUP + REDUCE_BANKS, *epoch);
            let tag = (mix(&[run.signature, *epoch]) >> 32) as u32 | 1;
            let bytes =
                |r: &std::ops::Range<usize>| (first + r.start) * block..(first + r.end) * block;
            while let Some(step) = steps.get(run.step) {
                let partner = g.members.rank_at(step.partner).ok_or_else(|| {
                    Error::Protocol(format!(
                        "allreduce partner index {} out of range",
                        step.partner
                    ))
                })?;
                if let (Some(send), false) = (&step.send, run.sent) {
                    let r = bytes(send);
                    let (data, value) = match run.poisoned {
                        Some(rank) => (&[][..], poison(rank)),
                        // A part not changed yet goes out from the input itself.
                        None if run.pending.all_in(&r) => (&input[r], tag),
                        None => {
                            run.pending.fill(r.clone(), input, run.acc.as_mut());
                            (&run.acc.as_ref()[r], tag)
                        }
                    };
                    let wire = WireNotification::system(slots + step.slot, value);
                    let at = (bank, step.slot);
                    self.reduce_write(g, area, partner, at, data, wire, deadline)?;
                    run.sent = true;
                }
                if let Some((recv, how)) = &step.recv {
                    let id = slots + step.slot;
                    // A slot that already arrived stays set for the call after a timeout.
                    // Every member is watched: a live partner may be stuck on a dead one.
                    self.inner.watched(
                        || g.member_ranks(),
                        deadline,
                        |slice, waiter| table.wait_some(id, 1, slice, waiter).ok(),
                    )?;
                    // Consumed by the thread holding the group's allreduce state alone, and
                    // written again only two runs on (banks alternate, as for a
                    // dissemination): a load and a store take it.
                    let value = table.take_exclusive(id).unwrap_or(0);
                    if value != tag {
                        let Some(rank) = poisoned_by(value) else {
                            return Err(Error::CollectiveMismatch {
                                group: g.id,
                                rank: partner,
                            });
                        };
                        // The partner's part carries no data: nothing of it can be folded,
                        // and this member's later steps pass the news on.
                        run.poisoned.get_or_insert(rank);
                    }
                    // Nothing is folded into a result that will not be given.
                    if let Some(folder) = folder.filter(|_| run.poisoned.is_none()) {
                        let r = bytes(recv);
                        let at = (bank, step.slot);
                        if *how == Fold::Copy {
                            area.received(me, at, 0, &mut run.acc.as_mut()[r.clone()])?;
                            run.pending.take(r);
                        } else if !r.is_empty() {
                            // Piece by piece through a scratch buffer that stays in the cache (as
                            // does the piece of the input taken in): a copy of the whole part
                            // would go through memory once more.
                            let received_first = *how == Fold::ReceivedFirst;
                            let piece = if r.len() <= FOLD_PIECE {
                                r.len()
                            } else {
                                (FOLD_PIECE / block).max(1) * block
                            };
                            for start in r.clone().step_by(piece) {
                                let p = start..(start + piece).min(r.end);
                                run.pending.fill(p.clone(), input, run.acc.as_mut());
                                run.scratch.resize(p.len());
                                area.received(me, at, start - r.start, run.scratch.as_mut())?;
                                let own = &mut run.acc.as_mut()[p];
                                folder.fold(run.scratch.as_ref(), own, received_first);
                            }
                        }
                    }
                }
                run.step += 1;
                run.sent = false;
            }
            self.inner.wait_queue(&g.writes, deadline)?;
            *epoch += 1;
            run.step = 0;
            run.chunk += 1;
        }
        Ok(())
    }

    /// Stages `data` in send slot `(bank, slot)` of `area` and writes it into the same slot's
    /// receive side in `partner`'s area, with `wire` as the partner's notification, posting
    /// under `deadline` (a timeout leaves the step unsent, for the next call to send).
    #[allow(clippy::too_many_arguments)]
    fn reduce_write(
        &self,
        g: &Group,
        area: &ReduceArea,
        partner: Rank,
        (bank, slot): (u32, u32),
        data: &[u8],
        wire: WireNotification,
        deadline: Deadline,
    ) -> Result<()> {
        let offset = area.recv_offset(bank, slot);
        let inner = &self.inner;
        if inner.put_directly(partner, DescKey::Area(g.id), offset, data, wire)? {
            return Ok(());
        }
        let peer = self.peer_area(g, partner, deadline)?;
        if offset + data.len() as u64 > peer.size {
            return Err(Error::Protocol(format!(
                "rank {partner}'s allreduce area for group {} is smaller than this rank's \
                 (GASPI_REDUCE_CHUNK differs between ranks?)",
                g.id
            )));
        }
        let target = RemoteTarget {
            rank: partner,
            addr: peer.base + offset,
            key: peer.key,
        };
        if data.len() <= inner.ep.caps().inject_size {
            // The provider copies the bytes at once: no staging, no completion to drain.
            return inner.inject_until(partner, deadline, || {
                inner.ep.inject_write(data, target, Some(wire.encode()))
            });
        }
        let local = area.stage(self.rank(), bank, slot, data)?;
        // Counted before posting: the completion may arrive before the post returns.
        g.writes.reserve(partner, 1)?;
        let op = Op::to(partner, g.writes.clone());
        let posted = inner.post_until(partner, deadline, op, |op| {
            inner
                .ep
                .write(local, target, Some(wire.encode()), false, op)
        });
        if posted.is_err() {
            g.writes.tracker.take(partner, 1);
        }
        posted
    }

    /// Waits until every allreduce write of group `g` completed at this end.
    /// Where `rank` receives group `g`'s allreduce data, read from its system region once,
    /// within `deadline` (a lookup that timed out goes on, and the next call joins it).
    fn peer_area(&self, g: &Group, rank: Rank, deadline: Deadline) -> Result<Descriptor> {
        if let Some(area) = g
            .peer_areas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&rank)
        {
            return Ok(*area);
        }
        let area = match self.inner.resolve(rank, DescKey::Area(g.id), deadline)? {
            Known::Present(area) => area,
            // Areas are published before a commit's first message, so this member committed
            // without one (another configuration, or it deleted the group).
            Known::Absent => {
                return Err(Error::Protocol(format!(
                    "rank {rank} has no allreduce area for group {}",
                    g.id
                )))
            }
        };
        g.peer_areas
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(rank, area);
        Ok(area)
    }
}
