//! One collective in flight on one member: its [`Schedule`], which steps are done, which
//! are ready, and what the member's caller must still do.
//!
//! A run advances as far as it can whenever a thread of the team makes progress, except for
//! the steps that touch the caller's buffers: a copy from the source runs only in a call that
//! holds the handle (the [`Owner`]), and a copy into the destination taken in any other call
//! is *deferred* — counted as done for the steps after it, and carried out when the handle
//! syncs. Deferring is safe because of a rule every algorithm keeps (the simulator checks
//! it): a stage range copied into the destination is never written again in the same
//! schedule.
//!
//! Folds take the run's own [`Reducer`], owned by the run, so that any thread may take them,
//! and an orphaned run still folds for the other members.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use gaspi::{copy_bytes, Batch, Context, Notification, NotificationId, Rank};
use smallvec::SmallVec;

use super::elide::Elision;
use super::piece::Blocks;
use super::{checked, read_value, Failure};
use crate::buffer::{Input, Output, SegmentRange};
use crate::schedule::{Aligned, Buf, Check, Reducer, Schedule, Signal, Span, StepId, Task};

/// Bytes a fold combines at a time (rounded down to whole blocks, at least one).
const FOLD_PIECE: u64 = 8 << 10;

/// The caller's buffers of one collective (its runs `seqs`, one per piece), lent by its
/// handle for one call.
pub(crate) struct Owner<'o> {
    pub(crate) seqs: std::ops::Range<u64>,
    pub(crate) src: Input<'o>,
    pub(crate) dst: Output<'o>,
    /// The panic of the operator that failed a run of the collective, taken out of the run
    /// as its failure was collected: the call syncing the handle goes on with it.
    pub(crate) panic: Option<Box<dyn Any + Send>>,
}

/// Where a piece's views of the caller's buffers lie in them (see the `piece` module).
#[derive(Debug, Clone)]
pub(crate) struct Views {
    pub(crate) src: Blocks,
    pub(crate) dst: Blocks,
}

/// A put: `len` bytes of this member's stage from `from` to member `to`'s at `into`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Transfer {
    pub(crate) to: u32,
    pub(crate) from: u64,
    pub(crate) into: u64,
    pub(crate) len: u64,
}

impl Transfer {
    fn new(to: u32, from: u64, into: u64, len: u64) -> Transfer {
        Transfer {
            to,
            from,
            into,
            len,
        }
    }
}

/// What a run needs from the engine to take a step.
pub(crate) trait Transport {
    /// Posts `put` of run `seq`, raising `signal` at its receiver after its data; false
    /// when it cannot be posted yet (the receiver's segment is not resolved).
    fn put(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        put: Transfer,
        signal: Notification,
    ) -> Result<bool, Failure>;
    /// Raises `signal` of run `seq` at member `to`; false when it cannot yet (as for a put).
    fn signal(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        to: u32,
        signal: Notification,
    ) -> Result<bool, Failure>;
    /// Takes the value of notification `id` here (0 when unset).
    fn take(&self, id: NotificationId) -> Result<u32, Failure>;
    /// Reads `buf.len()` bytes of the run's stage at `at`.
    fn read(&self, seq: u64, at: u64, buf: &mut [u8]) -> Result<(), Failure>;
    /// Writes `data` into the run's stage at `at`.
    fn write(&self, seq: u64, at: u64, data: &[u8]) -> Result<(), Failure>;
    /// Writes `data`, of the caller's memory, into member `to`'s stage of run `seq` at `at`
    /// on the direct path (see the `elide` module), then raises `signal` there if given:
    /// never before the data, and not at all when nothing was written.
    fn store(
        &self,
        batch: &Batch<'_>,
        seq: u64,
        to: u32,
        at: u64,
        data: &[u8],
        signal: Option<Notification>,
    ) -> Result<Stored, Failure>;
    /// The notification id of `signal` for run `seq`.
    fn id(&self, seq: u64, signal: u32) -> NotificationId;
    /// Whether member `to` has given up its stage of every run before `needs` (see the
    /// engine's "Eager runs"); with `learn`, taking its latest publication first.
    fn freed(&self, to: u32, needs: u64, learn: bool) -> Result<bool, Failure>;
    /// The notification where member `from`'s publications of its freed stage land.
    fn publication(&self, from: u32) -> NotificationId;
    /// Notes that a signal of member `from` was taken, which carried `freed`, its count of
    /// runs that gave their stage up, if it could (see the engine's "Eager runs").
    fn heard(&self, from: u32, freed: Option<u64>);
    /// The rank of member `index`.
    fn rank(&self, index: u32) -> Rank;
    /// The context, for the caller's segments.
    fn context(&self) -> &Context;
}

/// How a [`Transport::store`] went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stored {
    /// Written, complete.
    Done,
    /// The receiver's segment is not resolved yet: nothing was written.
    NotYet,
    /// It cannot go directly: nothing was written.
    Refused,
}

/// A schedule ready to run, shared by the runs of the same call (see the engine's cache):
/// its steps' dependencies counted and inverted once, and its puts out of the source found.
pub(crate) struct Plan {
    pub(crate) schedule: Schedule,
    /// Whether the run is compact (see the engine's "Skipped credits").
    pub(crate) compact: bool,
    /// Dependencies per step.
    waiting: Vec<u32>,
    /// The steps that depend on each step: step `i`'s are
    /// `dependents[first_dependent[i]..first_dependent[i + 1]]` (one allocation for all).
    dependents: Vec<StepId>,
    first_dependent: Vec<u32>,
    sources: Vec<StepId>,
    /// The copies skipped and the puts out of the source instead (see the `elide` module).
    elision: Elision,
    /// How each step reads the caller's source, worked out once: [`Run::finish`] counts
    /// them on every step of every run.
    reading: Vec<Reading>,
    /// The steps that read the caller's source.
    reads: u32,
    /// Per step, whether [`Run::skip`] counts it done at the start: the credits that are
    /// ready once those listed before them are done (a credit listed before one it waits
    /// for is taken as any step is).
    skipped: Vec<bool>,
    /// How many steps `skipped` holds.
    skips: usize,
    /// Per fold, the copy of its result into the destination that it may carry out itself
    /// (see [`delivering`]), and that copy's destination span.
    delivers: Vec<Option<(StepId, Span)>>,
    /// The steps a [walk](Run::walk) takes, in schedule order, for a run that keeps its
    /// credits and for one that [skips](Run::skip) them: every step but the copies the
    /// elision skips, which do nothing, and the skipped credits. Worked out once, a walk
    /// passes them without taking them (each cost a step's dispatch on every call).
    walks: [Vec<StepId>; 2],
    /// Per step, how many copies the elision skips before it (and one entry more: all of
    /// them), which a walk counts done as it passes them.
    elided: Vec<u32>,
    /// Per walk (as `walks`) and step, whether a walk that has to wait at the step may stay
    /// a walk: every later step of the walk but a wait depends on it, so that nothing a
    /// member may wait for could go before it (see [`Run::advance`]).
    resumable: [Vec<bool>; 2],
    /// Per step, the step as a [plain](Run::plain) walk takes it (see [`Compiled`]).
    compiled: Vec<Compiled>,
    /// The waits, each with the member it waits for, in schedule order: every wait of the
    /// engine looks for the senders of the runs it holds (see [`Run::senders`]).
    waits: Vec<(StepId, u32)>,
}

/// A step resolved once per plan for a [plain](Run::plain) run: what [`Run::take`] works out
/// on every call from the schedule, the elision and the deliveries (which step kind, where
/// its operands lie, whether it reads the source or writes the destination), so that a walk
/// of a small collective takes a step with a few loads and the runtime's call. What stays
/// per run is added at use: the run's notification block to a signal, its lane's offset to
/// a stage offset (by the transport), its value to a check.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Compiled {
    /// Taken by [`Run::take`]: a step kind or case without a compiled form (a signal, a copy
    /// the elision keeps, a put of several pieces of the source, a fold of more than one
    /// piece or of none).
    General,
    /// A put out of the stage, `put`, raising `signal` at its receiver with `check`.
    Put {
        put: Transfer,
        signal: Signal,
        check: Check,
    },
    /// A put of `src`, one part of the caller's source, straight into member `to`'s stage
    /// at `into`, raising `signal` there with `check` (see the `elide` module).
    Store {
        to: u32,
        src: Span,
        into: u64,
        signal: Signal,
        check: Check,
    },
    /// A wait for `signal` of member `from`, with `check`.
    Wait {
        from: u32,
        signal: Signal,
        check: Check,
    },
    /// A fold of one piece: stage operand `stage` with source operand `src` (the left one
    /// when `src_left`) into stage range `into`, or, with `deliver`, straight into the
    /// destination as that copy step would (see [`delivering`]).
    Fold {
        stage: Span,
        src: Span,
        src_left: bool,
        into: Span,
        deliver: Option<(StepId, Span)>,
    },
    /// A fold of one piece of two staged operands, `left` and `right`, into `into` or,
    /// with `deliver`, into the destination (as [`Compiled::Fold`]).
    FoldStaged {
        left: Span,
        right: Span,
        into: Span,
        deliver: Option<(StepId, Span)>,
    },
}

impl Compiled {
    /// Step `id` of `schedule` under `elision` and `delivers`, compiled.
    fn of(
        schedule: &Schedule,
        elision: &Elision,
        delivers: &[Option<(StepId, Span)>],
        id: StepId,
    ) -> Compiled {
        match schedule.steps[id as usize].task {
            Task::Put {
                to,
                from,
                into,
                len,
                signal,
                check,
            } => match elision.pieces(id) {
                [] => Compiled::Put {
                    put: Transfer::new(to, from, into, len),
                    signal,
                    check,
                },
                [piece] => Compiled::Store {
                    to,
                    src: piece.span,
                    into: into + piece.offset,
                    signal,
                    check,
                },
                _ => Compiled::General,
            },
            Task::Wait {
                from,
                signal,
                check,
            } => Compiled::Wait {
                from,
                signal,
                check,
            },
            // One piece whatever the operator's block: a piece is more than half of
            // `FOLD_PIECE` (see `Run::take`).
            Task::Fold { left, right, into } if into.len <= FOLD_PIECE / 2 => {
                match elision.operands(id) {
                    [Some(src), None] if src.len == into.len => Compiled::Fold {
                        stage: right,
                        src,
                        src_left: true,
                        into,
                        deliver: delivers[id as usize],
                    },
                    [None, Some(src)] if src.len == into.len => Compiled::Fold {
                        stage: left,
                        src,
                        src_left: false,
                        into,
                        deliver: delivers[id as usize],
                    },
                    // Not of nothing: `take` calls no operator for an empty fold (a user's,
                    // written for whole blocks, may panic on none).
                    [None, None] if into.len > 0 => Compiled::FoldStaged {
                        left,
                        right,
                        into,
                        deliver: delivers[id as usize],
                    },
                    _ => Compiled::General,
                }
            }
            _ => Compiled::General,
        }
    }
}

/// Steps of the longest schedule whose walks may wait without booking: working out which
/// steps depend on which costs a pass over the dependents per step.
const RESUMABLE_STEPS: usize = 256;

/// How a step reads the caller's source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reading {
    /// Not at all.
    Never,
    /// Always: a copy out of it that the elision keeps.
    Always,
    /// Unless the run staged its source reads (see [`Run::stage_source_reads`]): a put or
    /// fold out of it in place of skipped copies.
    Unstaged,
}

impl Plan {
    /// The plan of `schedule`, whose puts to members for which `direct` holds may go out of
    /// the caller's source.
    pub(crate) fn new(schedule: Schedule, compact: bool, direct: impl Fn(u32) -> bool) -> Plan {
        let waiting = schedule
            .steps
            .iter()
            .map(|s| s.after.len() as u32)
            .collect();
        let mut first_dependent = vec![0u32; schedule.steps.len() + 1];
        for step in &schedule.steps {
            for &before in &step.after {
                first_dependent[before as usize + 1] += 1;
            }
        }
        for i in 0..schedule.steps.len() {
            first_dependent[i + 1] += first_dependent[i];
        }
        let mut dependents = vec![0; first_dependent[schedule.steps.len()] as usize];
        let mut filled = first_dependent.clone();
        for (id, step) in schedule.steps.iter().enumerate() {
            for &before in &step.after {
                dependents[filled[before as usize] as usize] = id as StepId;
                filled[before as usize] += 1;
            }
        }
        let sources = schedule.sources();
        let elision = Elision::of(&schedule, direct);
        let reading: Vec<Reading> = (0..schedule.steps.len() as StepId)
            .map(|id| reading(&schedule, &elision, id))
            .collect();
        let reads = reading.iter().filter(|&&r| r != Reading::Never).count() as u32;
        let mut plan = Plan {
            schedule,
            compact,
            waiting,
            dependents,
            first_dependent,
            sources,
            elision,
            reading,
            reads,
            skipped: Vec::new(),
            skips: 0,
            delivers: Vec::new(),
            walks: [Vec::new(), Vec::new()],
            elided: Vec::new(),
            resumable: [Vec::new(), Vec::new()],
            compiled: Vec::new(),
            waits: Vec::new(),
        };
        plan.delivers = delivering(&plan.schedule);
        plan.compiled = (0..plan.schedule.steps.len() as StepId)
            .map(|id| Compiled::of(&plan.schedule, &plan.elision, &plan.delivers, id))
            .collect();
        plan.waits = (0..plan.schedule.steps.len() as StepId)
            .filter_map(|id| match plan.schedule.steps[id as usize].task {
                Task::Wait { from, .. } => Some((id, from)),
                _ => None,
            })
            .collect();
        plan.skipped = plan.skipped_credits();
        plan.skips = plan.skipped.iter().filter(|&&s| s).count();
        let steps = plan.schedule.steps.len() as StepId;
        let elided = |id: StepId| {
            matches!(plan.schedule.steps[id as usize].task, Task::Copy { .. })
                && plan.elision.skipped(id)
        };
        plan.elided = std::iter::once(0)
            .chain((0..steps).scan(0, |before, id| {
                *before += u32::from(elided(id));
                Some(*before)
            }))
            .collect();
        plan.walks = [false, true].map(|skipping| {
            (0..steps)
                .filter(|&id| !(elided(id) || skipping && plan.skipped[id as usize]))
                .collect()
        });
        plan.resumable = [0, 1].map(|order| plan.resumable(&plan.walks[order]));
        plan
    }

    /// Which steps [`Run::skip`] counts done: the credits, in schedule order, that are ready
    /// once those before them are done.
    fn skipped_credits(&self) -> Vec<bool> {
        let mut skipped = vec![false; self.schedule.steps.len()];
        let mut waiting = self.waiting.clone();
        let mut ready = self.sources.clone();
        for &id in &self.schedule.credits {
            if let Some(at) = ready.iter().position(|&r| r == id) {
                ready.swap_remove(at);
                skipped[id as usize] = true;
                for &later in self.dependents(id) {
                    waiting[later as usize] -= 1;
                    if waiting[later as usize] == 0 {
                        ready.push(later);
                    }
                }
            }
        }
        skipped
    }

    /// Per step, whether a walk in `order` that waits at it may stay a walk: every step after
    /// it in `order` but a wait depends on it, directly or not. A walk then takes nothing
    /// later than a run booked would, but for waits, whose notifications stay set for it.
    fn resumable(&self, order: &[StepId]) -> Vec<bool> {
        let steps = self.schedule.steps.len();
        let mut resumable = vec![false; steps];
        if steps > RESUMABLE_STEPS {
            return resumable;
        }
        let mut reached = vec![false; steps];
        let mut stack = Vec::new();
        for (at, &id) in order.iter().enumerate() {
            reached.fill(false);
            stack.push(id);
            while let Some(step) = stack.pop() {
                for &later in self.dependents(step) {
                    if !std::mem::replace(&mut reached[later as usize], true) {
                        stack.push(later);
                    }
                }
            }
            resumable[id as usize] = order[at + 1..].iter().all(|&later| {
                reached[later as usize]
                    || matches!(self.schedule.steps[later as usize].task, Task::Wait { .. })
            });
        }
        resumable
    }

    fn dependents(&self, id: StepId) -> &[StepId] {
        let (from, to) = (
            self.first_dependent[id as usize] as usize,
            self.first_dependent[id as usize + 1] as usize,
        );
        &self.dependents[from..to]
    }
}

/// Where a run stands.
pub(crate) struct Run<'c> {
    pub(crate) seq: u64,
    plan: Arc<Plan>,
    /// The value of every notification of this run: its tag mixed with the call's arguments,
    /// so that members that called with other arguments are told.
    pub(crate) value: u32,
    /// Unfinished dependencies per step, once [`booked`](Self::booked).
    waiting: Vec<u32>,
    /// The steps ready to go, once [`booked`](Self::booked).
    ready: Vec<StepId>,
    /// `waiting` and `ready` say where the run stands. A run [walked](Self::walk) in the
    /// call that initiates it goes without them until a step has to wait where a later
    /// step could go first.
    booked: bool,
    /// The steps before this one are done, for a run not booked.
    walked: StepId,
    /// The signal of the wait step `walked` where the last walk stopped, if it stopped at
    /// one (see [`walk_signal`](Self::walk_signal)): worked out as the walk stops, so that
    /// every look of a waiting sync costs a load, not a search of the walk's steps.
    stalled: Option<u32>,
    /// Its plan's skipped credits count as done (see [`skip`](Self::skip)).
    skipping: bool,
    /// Steps not done.
    left: usize,
    /// Whether the run holds its lane.
    pub(crate) started: bool,
    /// For a run that skips its credits (an eager one, mostly), how far every receiver must
    /// have freed its stage (see the engine's "Eager runs") before a put of this run goes
    /// to it; 0 otherwise.
    pub(crate) needs: u64,
    /// How far every receiver must have freed its stage before a signal without data (a
    /// credit, a sync mode's barrier) goes to it: at least past the run that used its
    /// notification block before this one (see the engine's "Lanes"), and `needs`.
    pub(crate) signal_needs: u64,
    /// The run is over and gave its lane (and so its stage) up.
    pub(crate) off_stage: bool,
    batch: Batch<'c>,
    /// Copies into the destination, in schedule order.
    deferred: Vec<(Span, Span)>,
    /// Copies into the destination of a capturing schedule ([`Schedule::capture`]), with
    /// their bytes read out of the stage when they were taken.
    ///
    /// [`Schedule::capture`]: crate::schedule::Schedule::capture
    captured: Vec<(Span, Vec<u8>)>,
    /// The operands of a fold, kept from fold to fold.
    acc: Aligned,
    other: Aligned,
    /// The deferred copies' data, read out of the stage when the lane was given up before
    /// the handle synced.
    kept: Option<Vec<Vec<u8>>>,
    /// The handle was dropped: the output is dropped too.
    pub(crate) orphan: bool,
    /// The source as the run keeps it once the call that initiated it returned, or its
    /// handle was dropped, before it had read all it needs of it (see
    /// [`Run::reads_later`]).
    pub(crate) source: Option<Kept>,
    /// Steps reading the source not done yet.
    reads_left: u32,
    /// Its puts out of the source (see the `elide` module) had their bytes staged when the
    /// call that lent the source returned, and go from the stage.
    staged: bool,
    /// For a piece of a longer collective, where its spans of the caller's buffers lie.
    views: Option<Views>,
    /// The caller's destination when it is a range of a user segment: written at the step,
    /// whichever call takes it, so that `OUT_ALLSYNC` covers it (memory waits for the sync).
    pub(crate) dst_range: Option<SegmentRange>,
    /// The caller's source, a range of a user segment that the destination range overlaps:
    /// copied whole before the run's first step that moves data (see
    /// [`snapshot`](Self::snapshot)), and read from the copy from then on.
    pub(crate) overlapped: Option<SegmentRange>,
    /// The deferred copies were carried out.
    delivered: bool,
    /// The copy into the destination its fold carried out (see [`delivering`]).
    delivered_by_fold: Option<StepId>,
    /// The operator of the schedule's folds.
    pub(crate) reducer: Option<Box<dyn Reducer>>,
    pub(crate) failed: Option<Failure>,
    /// The panic of the operator in a fold, which failed the run: whichever thread took the
    /// fold, only the call that syncs the handle goes on with it (see [`Owner::panic`]).
    pub(crate) panic: Option<Box<dyn Any + Send>>,
    /// Every step is done and every put completed locally.
    pub(crate) complete: bool,
}

impl<'c> Run<'c> {
    /// Run `seq` of `plan`, posting its puts on `batch`; to be [walked](Self::walk) with
    /// `walk`.
    pub(crate) fn new(
        seq: u64,
        plan: Arc<Plan>,
        value: u32,
        views: Option<Views>,
        batch: Batch<'c>,
        walk: bool,
    ) -> Box<Run<'c>> {
        let mut run = Box::new(Run {
            seq,
            waiting: Vec::new(),
            ready: Vec::new(),
            booked: false,
            walked: 0,
            stalled: None,
            skipping: false,
            left: 0,
            plan: Arc::clone(&plan),
            value,
            started: false,
            needs: 0,
            signal_needs: 0,
            off_stage: false,
            batch,
            deferred: Vec::new(),
            captured: Vec::new(),
            acc: Aligned::zeroed(0),
            other: Aligned::zeroed(0),
            kept: None,
            orphan: false,
            source: None,
            reads_left: 0,
            staged: false,
            views: None,
            dst_range: None,
            overlapped: None,
            delivered: false,
            delivered_by_fold: None,
            reducer: None,
            failed: None,
            panic: None,
            complete: false,
        });
        run.renew(seq, plan, value, views, walk);
        run
    }

    /// Makes this run, removed, [`reusable`](Self::reusable) and [retired](Self::retire),
    /// run `seq` of `plan` instead, in place: its vectors, batch and fold buffers serve
    /// again, so that a small collective runs without touching the allocator, and a run,
    /// some hundred bytes, is never moved. A run to be [walked](Self::walk) (`walk`) is
    /// renewed without its books.
    pub(crate) fn renew(
        &mut self,
        seq: u64,
        plan: Arc<Plan>,
        value: u32,
        views: Option<Views>,
        walk: bool,
    ) {
        // Every field is named, so that one added later cannot be left from the last run;
        // those `retire` cleared are `_`.
        let Run {
            seq: run_seq,
            plan: run_plan,
            value: run_value,
            waiting,
            ready,
            booked,
            walked,
            stalled,
            skipping,
            left,
            started,
            needs,
            signal_needs,
            off_stage,
            batch: _,
            deferred,
            captured: _,
            acc: _,
            other: _,
            kept: _,
            orphan: _,
            source: _,
            reads_left,
            staged,
            views: run_views,
            dst_range,
            overlapped,
            delivered,
            delivered_by_fold,
            reducer: _,
            failed: _,
            panic: _,
            complete,
        } = self;
        *run_seq = seq;
        *run_value = value;
        if !walk {
            waiting.clear();
            waiting.extend_from_slice(&plan.waiting);
            ready.clear();
            ready.extend_from_slice(&plan.sources);
        }
        *booked = !walk;
        *walked = 0;
        *stalled = None;
        *skipping = false;
        *left = plan.schedule.steps.len();
        *reads_left = plan.reads;
        *dst_range = None;
        *overlapped = None;
        *staged = false;
        *run_plan = plan;
        *started = false;
        *needs = 0;
        *signal_needs = 0;
        *off_stage = false;
        deferred.clear();
        *run_views = views;
        *delivered = false;
        *delivered_by_fold = None;
        *complete = false;
    }

    /// Whether the run may be [renewed](Self::renew) once removed: not while puts of it may
    /// still be in flight (a failed or orphaned run), which its batch must see through.
    pub(crate) fn reusable(&self) -> bool {
        self.batch.outstanding() == 0
    }

    /// Drops what the run holds of its collective's data and of the caller's (copies of the
    /// source, kept output, the operator, which may capture anything) and its outcome, as it
    /// waits to be [renewed](Self::renew): a large collective's data must not outlive it in
    /// a spare run. Its allocations stay, and its plan, which the engine's cache mostly
    /// holds anyway.
    pub(crate) fn retire(&mut self) {
        self.captured.clear();
        self.kept = None;
        self.orphan = false;
        self.source = None;
        self.views = None;
        self.reducer = None;
        self.failed = None;
        self.panic = None;
    }

    /// Counts the credits its plan skips (see `Plan::skipped`) done at the start, as their
    /// receivers' do alike: a booked run works its books out again with them done, so that
    /// runs walked and booked skip by the one rule.
    pub(crate) fn skip(&mut self) {
        self.skipping = true;
        self.left -= self.plan.skips;
        if std::mem::replace(&mut self.booked, false) {
            self.book();
        }
    }

    /// Takes the steps of a run not booked in schedule order, which is a topological order,
    /// for as long as each can go, from where it stands: in the call that initiates the
    /// run, whose owner lends the caller's buffers, and in the passes after it, so that the
    /// steps of a small collective go without working out which are ready. A step that has
    /// to wait leaves the run a walk when every later step but a wait depends on it (the
    /// plan's `resumable`): nothing that a member may wait for could go before it. Otherwise
    /// the run is [booked](Self::book) there.
    pub(crate) fn walk(
        &mut self,
        net: &impl Transport,
        mut owner: Option<&mut Owner<'_>>,
    ) -> Result<(), Failure> {
        let order = usize::from(self.skipping);
        let walk = &self.plan.walks[order];
        let mut at = walk.partition_point(|&id| id < self.walked);
        self.stalled = None;
        let plain = self.plain(owner.as_deref());
        // The run's notification block: a signal's id is the block's plus its number.
        let block = net.id(self.seq, 0);
        while let Some(&id) = self.plan.walks[order].get(at) {
            self.pass_to(id);
            // Its fold wrote the destination: nothing left to do.
            let taken = self.delivered_by_fold == Some(id)
                || match plain {
                    Some(src) => self.take_compiled(net, id, block, src, owner.as_deref_mut())?,
                    None => self.take(net, id, owner.as_deref_mut())?,
                };
            if !taken {
                // A step after it that a member may wait for could go first: booked, the
                // run takes it.
                if !self.plan.resumable[order][id as usize] {
                    self.book();
                }
                if let Task::Wait { signal, .. } = self.plan.schedule.steps[id as usize].task {
                    self.stalled = Some(signal);
                }
                return Ok(());
            }
            self.count(id);
            self.walked = id + 1;
            at += 1;
        }
        self.pass_to(self.plan.schedule.steps.len() as StepId);
        if self.left == 0 && self.batch.test().map_err(Failure::from)? {
            self.complete = true;
        }
        Ok(())
    }

    /// The caller's source, ordinary memory that `owner` lends, when the run is *plain*: one
    /// piece (no views), its source neither staged nor kept nor overlapped by the
    /// destination, its output wanted. Its steps then go by their [`Compiled`] form.
    fn plain<'o>(&self, owner: Option<&Owner<'o>>) -> Option<&'o [u8]> {
        let owner = owner.filter(|o| o.seqs.contains(&self.seq))?;
        let unusual = self.views.is_some()
            || self.staged
            || self.overlapped.is_some()
            || self.source.is_some()
            || self.orphan;
        match owner.src {
            Input::Memory(memory) if !unusual => Some(memory),
            _ => None,
        }
    }

    /// Whether a put of this run to member `to` waits for flow control (see the engine's
    /// "Eager runs"), learning `to`'s latest publication first.
    fn held_back(&self, net: &impl Transport, to: u32) -> Result<bool, Failure> {
        Ok(self.needs > 0 && !net.freed(to, self.needs, true)?)
    }

    /// Takes step `id` of a [plain](Self::plain) run by its [`Compiled`] form, `block` the
    /// run's notification block and `src` the caller's source, as [`take`](Self::take)
    /// would (which takes the steps and cases without one); false when it must wait.
    fn take_compiled(
        &mut self,
        net: &impl Transport,
        id: StepId,
        block: NotificationId,
        src: &[u8],
        owner: Option<&mut Owner<'_>>,
    ) -> Result<bool, Failure> {
        let seq = self.seq;
        match self.plan.compiled[id as usize] {
            Compiled::General => self.take(net, id, owner),
            Compiled::Store {
                to,
                src: span,
                into,
                signal,
                check,
            } => {
                let n = Notification {
                    id: block + signal,
                    value: checked(self.value, check),
                };
                if self.held_back(net, to)? {
                    return Ok(false);
                }
                let bytes = &src[range(src.len(), span)?];
                match net.store(&self.batch, seq, to, into, bytes, Some(n))? {
                    Stored::Done => Ok(true),
                    Stored::NotYet => Ok(false),
                    // Nothing was written: staged and put from the stage, as `take` does.
                    Stored::Refused => self.take(net, id, owner),
                }
            }
            Compiled::Put { put, signal, check } => {
                if self.held_back(net, put.to)? {
                    return Ok(false);
                }
                let n = Notification {
                    id: block + signal,
                    value: checked(self.value, check),
                };
                net.put(&self.batch, seq, put, n)
            }
            Compiled::Wait {
                from,
                signal,
                check,
            } => take_signal(net, block + signal, (seq, self.value), from, check),
            Compiled::Fold {
                stage,
                src: span,
                src_left,
                into,
                deliver,
            } => {
                let operand = &src[range(src.len(), span)?];
                let (reducer, acc) = match self.reducer.as_deref() {
                    // Folded where it lies, as `take` does: aligned, and on the right unless
                    // the operator folds into its right operand too.
                    Some(reducer)
                        if (operand.as_ptr() as usize).is_multiple_of(8)
                            && (!src_left || reducer.folds_right()) =>
                    {
                        (reducer, &mut self.acc)
                    }
                    _ => return self.take(net, id, owner),
                };
                acc.resize(into.len as usize);
                net.read(seq, stage.at, acc.bytes_mut())?;
                // A user operator may panic: see `take`.
                let folded = match src_left {
                    true => guarded(|| reducer.fold_right(operand, acc.bytes_mut())),
                    false => guarded(|| reducer.fold(acc.bytes_mut(), operand)),
                };
                settled(folded, &mut self.panic)?;
                self.fold_out(net, into, deliver, owner)
            }
            Compiled::FoldStaged {
                left,
                right,
                into,
                deliver,
            } => {
                let Some(reducer) = self.reducer.as_deref() else {
                    return self.take(net, id, owner);
                };
                let (acc, other) = (&mut self.acc, &mut self.other);
                acc.resize(into.len as usize);
                other.resize(into.len as usize);
                net.read(seq, left.at, acc.bytes_mut())?;
                net.read(seq, right.at, other.bytes_mut())?;
                // A user operator may panic: see `take`.
                let folded = guarded(|| reducer.fold(acc.bytes_mut(), other.bytes()));
                settled(folded, &mut self.panic)?;
                self.fold_out(net, into, deliver, owner)
            }
        }
    }

    /// Puts the result of a compiled fold, in the run's accumulator, where it goes: into
    /// the destination that `owner` lends with `deliver` (see [`delivering`]), else into
    /// the stage at `into`.
    fn fold_out(
        &mut self,
        net: &impl Transport,
        into: Span,
        deliver: Option<(StepId, Span)>,
        owner: Option<&mut Owner<'_>>,
    ) -> Result<bool, Failure> {
        match (deliver, owner.map(|o| &mut o.dst)) {
            (Some((copy, span)), Some(Output::Memory(out))) => {
                let at = range(out.len(), span)?;
                copy_bytes(&mut out[at], self.acc.bytes());
                self.delivered_by_fold = Some(copy);
            }
            _ => net.write(self.seq, into.at, self.acc.bytes())?,
        }
        Ok(true)
    }

    /// Whether the run is a walk that waits (not booked, not over): see [`walk`](Self::walk).
    pub(crate) fn walking(&self) -> bool {
        !self.booked && self.started && !self.complete && self.failed.is_none()
    }

    /// The signal a [walking](Self::walking) run waits for, if the step it waits at is a
    /// wait: until that signal comes nothing else of the run can go (see [`walk`](Self::walk)).
    pub(crate) fn walk_signal(&self) -> Option<u32> {
        self.stalled.filter(|_| self.walking())
    }

    /// The step a run not booked waits at, if any (see [`walk`](Self::walk)).
    fn walking_at(&self) -> &[StepId] {
        let walk = &self.plan.walks[usize::from(self.skipping)];
        let at = walk.partition_point(|&id| id < self.walked);
        walk.get(at..(at + 1).min(walk.len())).unwrap_or(&[])
    }

    /// Whether step `id` is still to be taken.
    fn pending(&self, id: StepId) -> bool {
        match self.booked {
            true => self.waiting[id as usize] > 0 || self.ready.contains(&id),
            false => id >= self.walked && !(self.skipping && self.plan.skipped[id as usize]),
        }
    }

    /// Counts done the copies the elision skips from where the walk stands up to step `id`,
    /// and moves the walk there.
    fn pass_to(&mut self, id: StepId) {
        let elided = &self.plan.elided;
        self.left -= (elided[id as usize] - elided[self.walked as usize]) as usize;
        self.walked = id;
    }

    /// Works out, for a run [walked](Self::walk) so far, which steps wait for which and
    /// which are ready, as if it had advanced as usual.
    pub(crate) fn book(&mut self) {
        if std::mem::replace(&mut self.booked, true) {
            return;
        }
        let plan = Arc::clone(&self.plan);
        let (walked, skipping) = (self.walked as usize, self.skipping);
        let done = |id: usize| id < walked || (skipping && plan.skipped[id]);
        self.waiting.clear();
        self.waiting.extend_from_slice(&plan.waiting);
        for id in (0..plan.schedule.steps.len()).filter(|&id| done(id)) {
            for &later in plan.dependents(id as StepId) {
                self.waiting[later as usize] -= 1;
            }
        }
        self.ready.clear();
        self.ready.extend(
            (0..plan.schedule.steps.len())
                .filter(|&id| !done(id) && self.waiting[id] == 0)
                .map(|id| id as StepId),
        );
    }

    /// Takes every step it can; `owner` lends the caller's buffers when the call holds this
    /// run's handle. Returns whether anything changed.
    pub(crate) fn advance(
        &mut self,
        net: &impl Transport,
        mut owner: Option<&mut Owner<'_>>,
    ) -> Result<bool, Failure> {
        if !self.started || self.complete || self.failed.is_some() {
            return Ok(false);
        }
        if !self.booked {
            // A walk that waited where nothing else could go goes on as a walk: booking
            // and sweeping cost more than the steps of a small collective.
            let (walked, left) = (self.walked, self.left);
            self.walk(net, owner.as_deref_mut())?;
            let changed = (self.walked, self.left) != (walked, left) || self.complete;
            if !self.booked {
                return Ok(changed);
            }
            if changed {
                return Ok(true);
            }
        }
        // One sweep: a step made ready by one taken lands at the end of `ready`, which the
        // sweep reaches; a step that could not go waits for something from outside (a
        // notification, a publication, the source), which a sweep more would rarely find.
        let mut changed = false;
        let mut i = 0;
        while i < self.ready.len() {
            let id = self.ready[i];
            if self.take(net, id, owner.as_deref_mut())? {
                self.ready.swap_remove(i);
                self.finish(id);
                changed = true;
            } else {
                i += 1;
            }
        }
        if self.left == 0 && !self.complete && self.batch.test().map_err(Failure::from)? {
            self.complete = true;
            changed = true;
        }
        Ok(changed)
    }

    /// Takes step `id` if it can; false when it must wait.
    fn take(
        &mut self,
        net: &impl Transport,
        id: StepId,
        owner: Option<&mut Owner<'_>>,
    ) -> Result<bool, Failure> {
        let seq = self.seq;
        let value = self.value;
        let task = &self.plan.schedule.steps[id as usize].task;
        if self.overlapped.is_some() && !matches!(task, Task::Wait { .. } | Task::Signal { .. }) {
            self.snapshot(net)?;
        }
        match self.plan.schedule.steps[id as usize].task {
            Task::Put {
                to,
                from,
                into,
                len,
                signal,
                check,
            } => {
                if self.held_back(net, to)? {
                    return Ok(false);
                }
                let n = Notification {
                    id: net.id(seq, signal),
                    value: checked(value, check),
                };
                if !self.staged && !self.plan.elision.pieces(id).is_empty() {
                    let owner = owner.filter(|o| o.seqs.contains(&seq));
                    let Some(src) = self.source_of(owner.as_deref()) else {
                        return Ok(false);
                    };
                    match self.store_pieces(net, id, &src, (to, into, n), from)? {
                        Stored::NotYet => return Ok(false),
                        Stored::Done => return Ok(true),
                        // Staged now as the skipped copies would have, and put from there.
                        Stored::Refused => {}
                    }
                }
                if !net.put(&self.batch, seq, Transfer::new(to, from, into, len), n)? {
                    return Ok(false);
                }
            }
            Task::Signal { to, signal, check } => {
                // Held back as a put is: the signal lands in the notification block that the
                // run `2 · lanes` before this one used, which its receiver may not have taken.
                if self.signal_needs > 0 && !net.freed(to, self.signal_needs, true)? {
                    return Ok(false);
                }
                let n = Notification {
                    id: net.id(seq, signal),
                    value: checked(value, check),
                };
                if !net.signal(&self.batch, seq, to, n)? {
                    return Ok(false);
                }
            }
            Task::Wait {
                from,
                signal,
                check,
            } => {
                if !take_signal(net, net.id(seq, signal), (seq, value), from, check)? {
                    return Ok(false);
                }
            }
            // Its puts take the bytes from the source themselves.
            Task::Copy { .. } if self.plan.elision.skipped(id) => {}
            // Its fold wrote the destination.
            Task::Copy { .. } if self.delivered_by_fold == Some(id) => {}
            Task::Copy { from, into } => {
                let owner = owner.filter(|o| o.seqs.contains(&seq));
                let (src_view, dst_view) = match &self.views {
                    Some(v) => (Some(&v.src), Some(&v.dst)),
                    None => (None, None),
                };
                match (from.buf, into.buf, owner) {
                    (Buf::Src, Buf::Dst, Some(owner)) => {
                        let src = match &self.source {
                            Some(kept) => kept.input(),
                            None => owner.src,
                        };
                        // Source memory in one part goes straight into the destination:
                        // through a copy, each byte went through the cache twice (and a block
                        // past the allocator's mmap threshold cost a mapping and its page
                        // faults per call).
                        let memory = match (&src, whole(src_view, from)) {
                            (Input::Memory(memory), Some(real)) => {
                                Some(&memory[range(memory.len(), real)?])
                            }
                            _ => None,
                        };
                        let mut data: SmallVec<[u8; 64]> = SmallVec::new();
                        let bytes = match memory {
                            Some(bytes) => bytes,
                            None => {
                                read_parts(net, &src, src_view, from, |_, bytes| {
                                    data.extend_from_slice(bytes);
                                    Ok(())
                                })?;
                                &data[..]
                            }
                        };
                        write_parts(net, &mut owner.dst, dst_view, into, |at, out| {
                            let at = at as usize;
                            copy_bytes(out, &bytes[at..at + out.len()]);
                            Ok(())
                        })?;
                    }
                    // An orphan's output is dropped.
                    (_, Buf::Dst, _) if self.orphan && self.dst_range.is_some() => {}
                    (_, Buf::Dst, None) if self.dst_range.is_some() => {
                        if !self.copy_to_range(net, from, into)? {
                            return Ok(false);
                        }
                    }
                    (Buf::Src, Buf::Dst, _) if self.orphan => {}
                    (Buf::Src, Buf::Dst, _) => {
                        let Some(data) = self.kept_source(net, from)? else {
                            return Ok(false);
                        };
                        self.captured.push((into, data));
                    }
                    (_, Buf::Dst, Some(owner)) => {
                        write_parts(net, &mut owner.dst, dst_view, into, |at, out| {
                            net.read(seq, from.at + at, out)
                        })?;
                    }
                    // An orphan's output is dropped.
                    (_, Buf::Dst, _) if self.plan.schedule.capture && self.orphan => {}
                    (_, Buf::Dst, _) if self.plan.schedule.capture => {
                        let mut data = vec![0; from.len as usize];
                        net.read(seq, from.at, &mut data)?;
                        self.captured.push((into, data));
                    }
                    (_, Buf::Dst, _) => self.deferred.push((from, into)),
                    (Buf::Src, _, owner) => {
                        let Some(src) = self.source_of(owner.as_deref()) else {
                            return Ok(false);
                        };
                        read_parts(net, &src, src_view, from, |at, bytes| {
                            net.write(seq, into.at + at, bytes)
                        })?;
                    }
                    (_, _, _) => {
                        let mut data = vec![0; from.len as usize];
                        net.read(seq, from.at, &mut data)?;
                        net.write(seq, into.at, &data)?;
                    }
                }
            }
            Task::Fold { left, right, into } => {
                let reducer = self.reducer.as_deref().ok_or_else(|| {
                    Failure::Runtime("a fold in a run without an operator".into())
                })?;
                // Operands of skipped copies come from the source (see the `elide` module),
                // unless they were staged meanwhile.
                let sourced = match self.staged {
                    true => [None; 2],
                    false => self.plan.elision.operands(id),
                };
                let owner = owner.filter(|o| o.seqs.contains(&seq));
                let src = match (&self.source, owner.as_deref()) {
                    _ if sourced == [None; 2] => None,
                    (Some(kept), _) => Some(kept.input()),
                    (None, Some(owner)) => Some(owner.src),
                    (None, None) => return Ok(false),
                };
                let view = self.views.as_ref().map(|v| &v.src);
                let (acc, other) = (&mut self.acc, &mut self.other);
                let operand = |op: Span, sourced: Option<Span>, at: u64, out: &mut [u8]| {
                    let (Some(span), Some(src)) = (sourced, &src) else {
                        return net.read(seq, op.at + at, out);
                    };
                    let piece = Span::src(span.at + at, out.len() as u64);
                    read_parts(net, src, view, piece, |off, bytes| {
                        copy_bytes(&mut out[off as usize..], bytes);
                        Ok(())
                    })
                };
                // An operand in the caller's memory is folded where it lies when it is in one
                // part and aligned as a fold needs: copied, it went through the cache once more.
                let in_memory = |sourced: Option<Span>, at: u64, len: u64| -> Option<&[u8]> {
                    let (Some(span), Some(Input::Memory(memory))) = (sourced, &src) else {
                        return None;
                    };
                    let real = whole(view, Span::src(span.at + at, len))?;
                    let bytes = memory.get(range(memory.len(), real).ok()?)?;
                    (bytes.as_ptr() as usize).is_multiple_of(8).then_some(bytes)
                };
                // Piece by piece, so that both operands stay in the cache (whole, each went
                // through memory twice more); `into` is an operand or apart from both (see
                // `Task::Fold`), so no piece's result lands on a piece still to be read.
                let piece = (FOLD_PIECE / reducer.block()).max(1) * reducer.block();
                // A result of one piece goes straight into the caller's destination when its
                // copy there is the only step that reads it: through the stage, it was written
                // and read again. Of one piece only, so that a panic of the operator leaves
                // the destination untouched, as through the stage.
                let deliver = match (self.plan.delivers[id as usize], owner) {
                    (Some((copy, span)), Some(owner))
                        if into.len <= piece && self.views.is_none() && !self.orphan =>
                    {
                        match &mut owner.dst {
                            Output::Memory(out) => Some((copy, span, out)),
                            Output::Segment(_) => None,
                        }
                    }
                    _ => None,
                };
                let mut at = 0;
                while at < into.len {
                    let len = piece.min(into.len - at);
                    acc.resize(len as usize);
                    let sides = (
                        in_memory(sourced[0], at, len).filter(|_| reducer.folds_right()),
                        in_memory(sourced[1], at, len),
                    );
                    // A user operator may panic. Taken again, the fold would call it again
                    // in whichever call passes next (a handle's drop while the panic unwinds
                    // included, which aborted the process), and fold twice the pieces before
                    // the one that panicked: the run fails instead, keeping the panic for
                    // its handle's sync.
                    let folded = match sides {
                        (_, Some(right)) => {
                            operand(left, sourced[0], at, acc.bytes_mut())?;
                            guarded(|| reducer.fold(acc.bytes_mut(), right))
                        }
                        (Some(left), None) => {
                            operand(right, sourced[1], at, acc.bytes_mut())?;
                            guarded(|| reducer.fold_right(left, acc.bytes_mut()))
                        }
                        (None, None) => {
                            other.resize(len as usize);
                            operand(left, sourced[0], at, acc.bytes_mut())?;
                            operand(right, sourced[1], at, other.bytes_mut())?;
                            guarded(|| reducer.fold(acc.bytes_mut(), other.bytes()))
                        }
                    };
                    settled(folded, &mut self.panic)?;
                    if deliver.is_none() {
                        net.write(seq, into.at + at, acc.bytes())?;
                    }
                    at += len;
                }
                if let Some((copy, span, out)) = deliver {
                    let at = range(out.len(), span)?;
                    let out = &mut out[at];
                    copy_bytes(out, acc.bytes());
                    self.delivered_by_fold = Some(copy);
                }
            }
        }
        Ok(true)
    }

    /// The caller's source as this run can read it now: its own copy, else the one `owner`
    /// lends; `None` when neither is there.
    fn source_of<'a>(&'a self, owner: Option<&Owner<'a>>) -> Option<Input<'a>> {
        match (&self.source, owner) {
            (Some(kept), _) => Some(kept.input()),
            (None, Some(owner)) => Some(owner.src),
            (None, None) => None,
        }
    }

    /// Writes the pieces of put `id` (from `from` of the stage to member `to` at `into`, `n`
    /// its signal) out of `src` straight into the receiver's stage and raises `n` there;
    /// where that cannot go directly, stages them in this member's stage at `from`, as the
    /// skipped copies would have, and raises nothing.
    fn store_pieces(
        &self,
        net: &impl Transport,
        id: StepId,
        src: &Input<'_>,
        (to, into, n): (u32, u64, Notification),
        from: u64,
    ) -> Result<Stored, Failure> {
        let seq = self.seq;
        let view = self.views.as_ref().map(|v| &v.src);
        let pieces = self.plan.elision.pieces(id);
        // A put out of one part of the caller's memory goes with its signal in one call,
        // which looks the receiver up once instead of once for the data and once for the
        // signal (an 8 B allreduce at 2 ranks put so, see `elide`).
        if let ([piece], Input::Memory(memory)) = (pieces, src) {
            if let Some(real) = whole(view, piece.span) {
                let bytes = &memory[range(memory.len(), real)?];
                let stored =
                    net.store(&self.batch, seq, to, into + piece.offset, bytes, Some(n))?;
                if stored == Stored::Refused {
                    net.write(seq, from + piece.offset, bytes)?;
                }
                return Ok(stored);
            }
        }
        let mut stored = match src {
            // A segment's bytes are read into memory anyway: staged, they are put as usual.
            Input::Segment(_) => Stored::Refused,
            Input::Memory(_) => Stored::Done,
        };
        for piece in pieces {
            if stored != Stored::Done {
                break;
            }
            read_parts(net, src, view, piece.span, |at, bytes| {
                if stored == Stored::Done {
                    let at = into + piece.offset + at;
                    stored = net.store(&self.batch, seq, to, at, bytes, None)?;
                }
                Ok(())
            })?;
        }
        if stored == Stored::Refused {
            for piece in pieces {
                read_parts(net, src, view, piece.span, |at, bytes| {
                    net.write(seq, from + piece.offset + at, bytes)
                })?;
            }
        }
        if stored == Stored::Done && !net.signal(&self.batch, seq, to, n)? {
            // Taken again, the step writes the same bytes again.
            return Ok(Stored::NotYet);
        }
        Ok(stored)
    }

    fn finish(&mut self, id: StepId) {
        self.count(id);
        for &later in self.plan.dependents(id) {
            let w = &mut self.waiting[later as usize];
            *w -= 1;
            if *w == 0 {
                self.ready.push(later);
            }
        }
    }

    /// Counts step `id` done.
    fn count(&mut self, id: StepId) {
        self.left -= 1;
        match self.plan.reading[id as usize] {
            Reading::Always => self.reads_left -= 1,
            Reading::Unstaged if !self.staged => self.reads_left -= 1,
            _ => {}
        }
    }

    /// The notifications the run waits for now.
    pub(crate) fn awaited(&self, net: &impl Transport, out: &mut Vec<NotificationId>) {
        if !self.started || self.complete || self.failed.is_some() {
            return;
        }
        let pending = match self.booked {
            true => &self.ready[..],
            false => self.walking_at(),
        };
        for &id in pending {
            match self.plan.schedule.steps[id as usize].task {
                Task::Wait { signal, .. } => out.push(net.id(self.seq, signal)),
                // A put or signal held back by flow control waits for its receiver's
                // publication (`freed` without learning cannot fail).
                Task::Put { to, .. }
                    if self.needs > 0 && !net.freed(to, self.needs, false).unwrap_or(false) =>
                {
                    out.push(net.publication(to));
                }
                Task::Signal { to, .. }
                    if self.signal_needs > 0
                        && !net.freed(to, self.signal_needs, false).unwrap_or(false) =>
                {
                    out.push(net.publication(to));
                }
                _ => {}
            }
        }
    }

    /// Marks in `senders` the members this run still waits for a signal of.
    pub(crate) fn senders(&self, senders: &mut [bool]) {
        for from in self.pending_senders() {
            if let Some(sender) = senders.get_mut(from as usize) {
                *sender = true;
            }
        }
    }

    /// The members this run still waits for a signal of, once per wait (a member may come
    /// more than once).
    pub(crate) fn pending_senders(&self) -> impl Iterator<Item = u32> + '_ {
        (self.plan.waits.iter())
            .filter(|&&(id, _)| self.pending(id))
            .map(|&(_, from)| from)
    }

    /// Stages the bytes of the puts and folds out of the source that are still to go, as
    /// the copies they replace would have, so that they read the stage and need the source
    /// no more: done when the call that lent `src` returns, if the run holds its lane (its
    /// stage is its own). Cheaper than keeping a copy of the whole source when a put is held
    /// back (by flow control, mostly) or a fold waits for its other operand.
    pub(crate) fn stage_source_reads(
        &mut self,
        net: &impl Transport,
        src: &Input<'_>,
    ) -> Result<(), Failure> {
        if !self.started || self.staged || self.complete || self.failed.is_some() {
            return Ok(());
        }
        let view = self.views.as_ref().map(|v| &v.src);
        let mut staged = 0;
        for (id, step) in self.plan.schedule.steps.iter().enumerate() {
            let elision = &self.plan.elision;
            if !elision.reads_source(id as StepId) || !self.pending(id as StepId) {
                continue;
            }
            match step.task {
                Task::Put { from, .. } => {
                    for piece in elision.pieces(id as StepId) {
                        read_parts(net, src, view, piece.span, |at, bytes| {
                            net.write(self.seq, from + piece.offset + at, bytes)
                        })?;
                    }
                }
                Task::Fold { left, right, .. } => {
                    let [l, r] = elision.operands(id as StepId);
                    for (op, span) in [(left, l), (right, r)] {
                        if let Some(span) = span {
                            read_parts(net, src, view, span, |at, bytes| {
                                net.write(self.seq, op.at + at, bytes)
                            })?;
                        }
                    }
                }
                _ => continue,
            }
            staged += 1;
        }
        self.reads_left -= staged;
        self.staged = true;
        Ok(())
    }

    /// Whether the run still has to read the caller's source and nothing else gives it: it
    /// would then move on only in calls that hold its handle, so a partner that waits for it
    /// in another order of syncs would wait for ever.
    pub(crate) fn reads_later(&self) -> bool {
        self.reads_left > 0 && self.source.is_none() && self.failed.is_none()
    }

    /// Whether only the local completion of puts is missing.
    pub(crate) fn flushing(&self) -> bool {
        self.started && self.left == 0 && !self.complete && self.failed.is_none()
    }

    /// Waits for the run's puts to complete locally.
    pub(crate) fn flush(&self, timeout: gaspi::Timeout) -> gaspi::Result<()> {
        self.batch.wait(timeout)
    }

    /// Copy `from` (the source or the stage) into `into` of the destination range, when no
    /// call holding the handle takes the step (see [`dst_range`](Self::dst_range)): false
    /// while the source is not at hand.
    fn copy_to_range(&self, net: &impl Transport, from: Span, into: Span) -> Result<bool, Failure> {
        let Some(range) = self.dst_range else {
            return Ok(false);
        };
        let seq = self.seq;
        let mut dst = Output::Segment(range);
        let dst_view = self.views.as_ref().map(|v| &v.dst);
        if from.buf != Buf::Src {
            write_parts(net, &mut dst, dst_view, into, |at, out| {
                net.read(seq, from.at + at, out)
            })?;
            return Ok(true);
        }
        let Some(data) = self.kept_source(net, from)? else {
            return Ok(false);
        };
        write_parts(net, &mut dst, dst_view, into, |at, out| {
            let at = at as usize;
            copy_bytes(out, &data[at..at + out.len()]);
            Ok(())
        })?;
        Ok(true)
    }

    /// Copies the whole source range that the destination overlaps, once, before the run's
    /// first step that moves data: every later read of the source reads the copy, so no write
    /// of the destination (by this member's steps, in whatever order the schedule takes them)
    /// reaches a source byte still to be read. Not earlier: under `IN_ALLSYNC` other members
    /// may write the source until they enter, which the run's first data step waits for.
    fn snapshot(&mut self, net: &impl Transport) -> Result<(), Failure> {
        let Some(range) = self.overlapped.take() else {
            return Ok(());
        };
        let copy = Input::Segment(range).copied(net.context())?;
        self.source = Some(Kept::Copy(copy.into()));
        Ok(())
    }

    /// The bytes of `from` in the source the run keeps; `None` when it keeps none.
    fn kept_source(&self, net: &impl Transport, from: Span) -> Result<Option<Vec<u8>>, Failure> {
        let Some(source) = &self.source else {
            return Ok(None);
        };
        let view = self.views.as_ref().map(|v| &v.src);
        let mut data = vec![0; from.len as usize];
        read_parts(net, &source.input(), view, from, |at, bytes| {
            copy_bytes(&mut data[at as usize..], bytes);
            Ok(())
        })?;
        Ok(Some(data))
    }

    /// Reads the deferred copies' data out of the stage, so the lane can go to the next run.
    pub(crate) fn keep(&mut self, net: &impl Transport) -> Result<(), Failure> {
        let mut kept = Vec::with_capacity(self.deferred.len());
        for &(from, _) in &self.deferred {
            let mut data = vec![0; from.len as usize];
            net.read(self.seq, from.at, &mut data)?;
            kept.push(data);
        }
        self.kept = Some(kept);
        Ok(())
    }

    /// Carries out the deferred copies into the caller's destination (once).
    pub(crate) fn deliver(
        &mut self,
        net: &impl Transport,
        dst: &mut Output<'_>,
    ) -> Result<(), Failure> {
        if std::mem::replace(&mut self.delivered, true) {
            return Ok(());
        }
        let view = self.views.as_ref().map(|v| &v.dst);
        for (i, &(from, into)) in self.deferred.iter().enumerate() {
            write_parts(net, dst, view, into, |at, out| match &self.kept {
                Some(kept) => {
                    let at = at as usize;
                    copy_bytes(out, &kept[i][at..at + out.len()]);
                    Ok(())
                }
                None => net.read(self.seq, from.at + at, out),
            })?;
        }
        for (into, data) in &self.captured {
            write_parts(net, dst, view, *into, |at, out| {
                let at = at as usize;
                copy_bytes(out, &data[at..at + out.len()]);
                Ok(())
            })?;
        }
        Ok(())
    }
}

/// The caller's source as a run keeps it past the calls that lend it.
#[derive(Debug, Clone)]
pub(crate) enum Kept {
    /// A copy of memory the caller may reuse once its call returned.
    Copy(Arc<[u8]>),
    /// A range of a user segment, read where the run reads the source: other members may
    /// write into it until they enter the collective, which `IN_ALLSYNC` waits for.
    Range(SegmentRange),
}

impl Kept {
    pub(crate) fn input(&self) -> Input<'_> {
        match self {
            Kept::Copy(copy) => Input::Memory(copy),
            Kept::Range(range) => Input::Segment(*range),
        }
    }
}

/// `fold`, or the panic it ended with.
fn guarded(
    fold: impl FnOnce() -> Result<(), String>,
) -> Result<Result<(), String>, Box<dyn Any + Send>> {
    // What the fold was writing is never read again: its run fails.
    std::panic::catch_unwind(AssertUnwindSafe(fold))
}

/// The outcome of a [`guarded`] fold: a panic is kept in `panic` for the handle's sync,
/// and fails the run as an error of the operator does.
fn settled(
    folded: Result<Result<(), String>, Box<dyn Any + Send>>,
    panic: &mut Option<Box<dyn Any + Send>>,
) -> Result<(), Failure> {
    match folded {
        Ok(folded) => folded.map_err(Failure::Runtime),
        Err(payload) => {
            let failure = Failure::Runtime(format!(
                "the reduction operator panicked: {}",
                panic_message(&*payload)
            ));
            *panic = Some(payload);
            Err(failure)
        }
    }
}

/// Takes notification `id`, signal `check` of member `from` in run `seq` of `value`: false
/// while unset, an error naming `from` when it carries another value.
#[inline]
fn take_signal(
    net: &impl Transport,
    id: NotificationId,
    (seq, value): (u64, u32),
    from: u32,
    check: Check,
) -> Result<bool, Failure> {
    let got = net.take(id)?;
    if got == 0 {
        return Ok(false);
    }
    let value = checked(value, check);
    match read_value(got, value, seq) {
        Some(freed) => {
            net.heard(from, freed);
            Ok(true)
        }
        None => Err(Failure::OutOfStep {
            rank: net.rank(from),
            got,
            expected: value,
        }),
    }
}

/// What a panic said, as the standard hook prints it.
fn panic_message(panic: &(dyn Any + Send)) -> &str {
    match (panic.downcast_ref::<String>(), panic.downcast_ref::<&str>()) {
        (Some(said), _) => said,
        (None, Some(said)) => said,
        (None, None) => "a panic without a message",
    }
}

/// Per step, for a fold whose result only a copy into the destination reads, that copy
/// and its destination span: the copy depends on the fold alone and copies exactly its
/// result, and no other step reads or writes that stage range. A fold taken in a call that
/// holds the handle then writes the destination itself (see [`Run::take`]).
fn delivering(schedule: &Schedule) -> Vec<Option<(StepId, Span)>> {
    let steps = &schedule.steps;
    let touches = |task: &Task, span: Span| {
        let overlaps =
            |s: Span| s.buf == Buf::Stage && s.len > 0 && s.at < span.end() && span.at < s.end();
        match *task {
            Task::Put { from, len, .. } => overlaps(Span::stage(from, len)),
            Task::Copy { from, into } => overlaps(from) || overlaps(into),
            Task::Fold { left, right, into } => overlaps(left) || overlaps(right) || overlaps(into),
            Task::Signal { .. } | Task::Wait { .. } => false,
        }
    };
    let mut delivers = vec![None; steps.len()];
    for (copy, step) in steps.iter().enumerate() {
        let (Task::Copy { from, into }, [fold]) = (step.task, step.after.as_slice()) else {
            continue;
        };
        let Task::Fold { into: result, .. } = steps[*fold as usize].task else {
            continue;
        };
        let alone = steps
            .iter()
            .enumerate()
            .all(|(other, s)| other == copy || other == *fold as usize || !touches(&s.task, from));
        if from.buf == Buf::Stage && into.buf == Buf::Dst && from == result && alone {
            delivers[*fold as usize] = Some((copy as StepId, into));
        }
    }
    delivers
}

/// How step `id` of `schedule` reads the caller's source: a copy from it that `elision`
/// keeps always, a put or fold out of it unless staged.
fn reading(schedule: &Schedule, elision: &Elision, id: StepId) -> Reading {
    match schedule.steps[id as usize].task {
        Task::Copy { from, .. } if from.buf == Buf::Src && !elision.skipped(id) => Reading::Always,
        Task::Put { .. } | Task::Fold { .. } if elision.reads_source(id) => Reading::Unstaged,
        _ => Reading::Never,
    }
}

/// Calls `f` with the offset within `span` and the bytes of each part of `input` that
/// holds `span` of a piece's `view` (the span itself without a view).
fn read_parts(
    net: &impl Transport,
    input: &Input<'_>,
    view: Option<&Blocks>,
    span: Span,
    mut f: impl FnMut(u64, &[u8]) -> Result<(), Failure>,
) -> Result<(), Failure> {
    each(view, span, |at, real| {
        let r = range(input.len(), real)?;
        match input {
            Input::Memory(m) => f(at, &m[r]),
            Input::Segment(_) => {
                let mut bytes = vec![0; r.len()];
                input.read(net.context(), real.at, &mut bytes)?;
                f(at, &bytes)
            }
        }
    })
}

/// Fills each part of `output` that holds `span` of a piece's `view` (the span itself
/// without a view) with `fill`, given the part's offset within `span`.
fn write_parts(
    net: &impl Transport,
    output: &mut Output<'_>,
    view: Option<&Blocks>,
    span: Span,
    mut fill: impl FnMut(u64, &mut [u8]) -> Result<(), Failure>,
) -> Result<(), Failure> {
    each(view, span, |at, real| {
        let r = range(output.len(), real)?;
        match output.memory(real.at, real.len) {
            Some(out) => fill(at, out),
            None => {
                let mut bytes = vec![0; r.len()];
                fill(at, &mut bytes)?;
                Ok(output.write(net.context(), real.at, &bytes)?)
            }
        }
    })
}

/// Calls `f` with each part of the caller's buffer that holds `span` of a piece's `view`
/// (the span itself without a view): its offset within the span, and where it is.
fn each(
    view: Option<&Blocks>,
    span: Span,
    mut f: impl FnMut(u64, Span) -> Result<(), Failure>,
) -> Result<(), Failure> {
    let Some(view) = view else {
        return f(0, span);
    };
    let mut at = 0;
    for (start, len) in view.ranges(span.at, span.len) {
        f(
            at,
            Span {
                buf: span.buf,
                at: start,
                len,
            },
        )?;
        at += len;
    }
    Ok(())
}

/// Where `span` of a piece's `view` (the span itself without a view) lies in the caller's
/// buffer, if in one part.
fn whole(view: Option<&Blocks>, span: Span) -> Option<Span> {
    let Some(view) = view else {
        return Some(span);
    };
    match view.ranges(span.at, span.len)[..] {
        [(at, len)] => Some(Span { at, len, ..span }),
        _ => None,
    }
}

/// The bytes of `span` in a caller's buffer of `len` bytes.
fn range(len: usize, span: Span) -> Result<std::ops::Range<usize>, Failure> {
    usize::try_from(span.at)
        .ok()
        .zip(usize::try_from(span.end()).ok())
        .filter(|&(_, end)| end <= len)
        .map(|(at, end)| at..end)
        .ok_or(Failure::Buffer {
            len: len as u64,
            need: span.end(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schedule::reduce::{allreduce, AllreduceAlgo};

    /// The folds that deliver their result themselves, with the copies they stand for.
    fn delivering_folds(schedule: &Schedule) -> Vec<(StepId, StepId)> {
        delivering(schedule)
            .iter()
            .enumerate()
            .filter_map(|(fold, d)| d.map(|(copy, _)| (fold as StepId, copy)))
            .collect()
    }

    #[test]
    fn a_doubling_allreduce_folds_its_result_into_the_destination() {
        for n in [2, 4, 8] {
            for me in 0..n {
                let s = allreduce(n, me, 1, 8, AllreduceAlgo::Doubling);
                let found = delivering_folds(&s);
                assert_eq!(found.len(), 1, "n = {n}, member {me}");
                let (fold, copy) = found[0];
                let Task::Fold { into: result, .. } = s.steps[fold as usize].task else {
                    panic!("step {fold} is no fold");
                };
                let Task::Copy { from, into } = s.steps[copy as usize].task else {
                    panic!("step {copy} is no copy");
                };
                assert_eq!(
                    (from, into),
                    (result, Span::dst(0, 8)),
                    "n = {n}, member {me}"
                );
            }
        }
    }

    /// Every member's plan of an 8 B recursive doubling at 2, 4 and 8 members, compact and
    /// with every member reached directly.
    fn doubling_plans() -> impl Iterator<Item = (u32, u32, Plan)> {
        [2, 4, 8].into_iter().flat_map(|n| {
            (0..n).map(move |me| {
                let s = allreduce(n, me, 1, 8, AllreduceAlgo::Doubling);
                (n, me, Plan::new(s, true, |_| true))
            })
        })
    }

    #[test]
    fn a_doubling_plan_compiles_its_waits_and_what_reads_the_source() {
        for (n, me, plan) in doubling_plans() {
            let at = format!("n = {n}, member {me}");
            let (mut stores, mut folds, mut staged_puts, mut staged_folds) = (0, 0, 0, 0);
            for (id, step) in plan.schedule.steps.iter().enumerate() {
                let compiled = plan.compiled[id];
                match step.task {
                    Task::Wait {
                        from,
                        signal,
                        check,
                    } => assert_eq!(
                        compiled,
                        Compiled::Wait {
                            from,
                            signal,
                            check
                        },
                        "{at}"
                    ),
                    Task::Put {
                        to,
                        into,
                        signal,
                        check,
                        len,
                        ..
                    } if plan.elision.reads_source(id as StepId) => {
                        let src = Span::src(0, len);
                        let store = Compiled::Store {
                            to,
                            src,
                            into,
                            signal,
                            check,
                        };
                        assert_eq!(compiled, store, "{at}");
                        stores += 1;
                    }
                    Task::Fold { into, .. } if plan.elision.reads_source(id as StepId) => {
                        let Compiled::Fold {
                            src,
                            into: folded,
                            deliver,
                            ..
                        } = compiled
                        else {
                            panic!("{at}: fold {id} compiled as {compiled:?}");
                        };
                        assert_eq!((src, folded), (Span::src(0, 8), into), "{at}");
                        // At 2 members the one fold is the last, and writes the destination.
                        assert_eq!(deliver, plan.delivers[id], "{at}");
                        assert_eq!(deliver.is_some(), n == 2, "{at}");
                        folds += 1;
                    }
                    Task::Put {
                        to, from, signal, ..
                    } => {
                        let Compiled::Put {
                            put, signal: sent, ..
                        } = compiled
                        else {
                            panic!("{at}: put {id} compiled as {compiled:?}");
                        };
                        assert_eq!((put.to, put.from, sent), (to, from, signal), "{at}");
                        staged_puts += 1;
                    }
                    Task::Fold { left, right, into } => {
                        let deliver = plan.delivers[id];
                        let staged = Compiled::FoldStaged {
                            left,
                            right,
                            into,
                            deliver,
                        };
                        assert_eq!(compiled, staged, "{at}");
                        staged_folds += 1;
                    }
                    _ => assert_eq!(compiled, Compiled::General, "{at}, step {id}"),
                }
            }
            // The first level's put and fold read the source; the later ones the stage,
            // compiled too.
            assert_eq!((stores, folds), (1, 1), "{at}");
            if n.is_power_of_two() {
                let later = n.trailing_zeros() - 1;
                assert_eq!((staged_puts, staged_folds), (later, later), "{at}");
            }
            // Every wait is listed with its sender, once and in schedule order: at a power
            // of two, the partners of the levels (a credit's and the data's, each).
            let waits: Vec<(StepId, u32)> = (plan.schedule.steps.iter().enumerate())
                .filter_map(|(id, step)| match step.task {
                    Task::Wait { from, .. } => Some((id as StepId, from)),
                    _ => None,
                })
                .collect();
            assert_eq!(plan.waits, waits, "{at}");
            if n.is_power_of_two() {
                let partners: Vec<u32> = (0..n.trailing_zeros()).map(|k| me ^ (1 << k)).collect();
                let mut froms: Vec<u32> = plan.waits.iter().map(|&(_, from)| from).collect();
                froms.dedup();
                assert_eq!(froms, partners, "{at}");
            }
        }
    }

    #[test]
    fn a_walk_passes_skipped_copies_and_credits_and_counts_them() {
        for (n, me, plan) in doubling_plans() {
            let steps = plan.schedule.steps.len();
            let elided: Vec<StepId> = (0..steps as StepId)
                .filter(|&id| plan.elision.skipped(id))
                .collect();
            // The doubling's staging copy of the source goes with the puts.
            assert_eq!(elided.len(), 1, "n = {n}, member {me}");
            assert_eq!(plan.elided[steps], 1, "n = {n}, member {me}");
            for (order, walk) in plan.walks.iter().enumerate() {
                let passed =
                    |id: StepId| elided.contains(&id) || (order == 1 && plan.skipped[id as usize]);
                let expected: Vec<StepId> =
                    (0..steps as StepId).filter(|&id| !passed(id)).collect();
                assert_eq!(walk, &expected, "n = {n}, member {me}, order {order}");
            }
            assert!(plan.skips > 0, "n = {n}, member {me}");
        }
    }

    #[test]
    fn a_walk_waits_as_a_walk_only_where_nothing_else_can_go() {
        // Each of the doubling's waits for data comes before the steps that need its fold.
        for (n, me, plan) in doubling_plans() {
            for &id in &plan.walks[1] {
                if let Task::Wait { .. } = plan.schedule.steps[id as usize].task {
                    assert!(
                        plan.resumable[1][id as usize],
                        "n = {n}, member {me}, step {id}"
                    );
                }
            }
        }
        // A put that needs nothing of the wait before it must not wait behind it: its
        // receiver may be what the wait waits for.
        let mut s = Schedule::new();
        s.stage = 16;
        let wait = s.wait(1, 0, &[]);
        let put = s.put(1, 0, 0, 8, 1, &[]);
        let folded = s.fold(8, 0, 8, 8, &[wait, put]);
        let plan = Plan::new(s, false, |_| true);
        assert!(!plan.resumable[0][wait as usize]);
        assert!(plan.resumable[0][put as usize]);
        assert!(plan.resumable[0][folded as usize]);
    }

    #[test]
    fn a_result_put_on_stays_in_the_stage() {
        // At 3 members, member 1 puts the result to its pair after copying it out: the
        // fold must leave it in the stage. Member 0 folds nothing; member 2 is alone.
        let s = |me| allreduce(3, me, 1, 8, AllreduceAlgo::Doubling);
        assert!(delivering_folds(&s(0)).is_empty());
        assert!(delivering_folds(&s(1)).is_empty());
        assert_eq!(delivering_folds(&s(2)).len(), 1);
    }
}
